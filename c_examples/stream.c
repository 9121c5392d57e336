/*
 * Streaming: print each piece of text as soon as the library produces it, and stop from the
 * callback (by returning non-zero) after the first newline or after K tokens, whichever comes
 * first.
 *
 *   stream MODEL.colibri PROMPT K [TEMPERATURE [SEED]]      (TEMPERATURE defaults to 0: greedy)
 *
 * stdout: the streamed text followed by one newline (so it reads like `colibri run`).
 * stderr: "stream: stopped by <reason> after N tokens".
 * `colibri run -m MODEL -p PROMPT -n N --temp TEMPERATURE --seed SEED` prints the same text.
 */
#include <colibri.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    long limit;          /* stop after this many tokens */
    long tokens;         /* tokens seen so far */
    const char *reason;  /* why the callback stopped, NULL while it has not */
    int write_failed;
} stream_state;

static int32_t on_token(void *userdata, int32_t token, const char *text, size_t text_len) {
    stream_state *s = (stream_state *)userdata;
    if (text_len > 0) {
        if (fwrite(text, 1, text_len, stdout) != text_len || fflush(stdout) != 0) {
            s->write_failed = 1;
            return 1;
        }
    }
    if (token < 0) return 0; /* the final flush of held-back text: nothing to decide */
    s->tokens++;
    if (text_len > 0 && memchr(text, '\n', text_len) != NULL) {
        s->reason = "newline";
        return 1;
    }
    if (s->tokens >= s->limit) {
        s->reason = "token limit";
        return 1;
    }
    return 0;
}

static int parse_long(const char *s, long lo, long hi, long *out) {
    char *end;
    long v;
    errno = 0;
    v = strtol(s, &end, 10);
    if (errno != 0 || end == s || *end != '\0' || v < lo || v > hi) return 0;
    *out = v;
    return 1;
}

int main(int argc, char **argv) {
    colibri_model *model = NULL;
    colibri_session *session = NULL;
    colibri_sampler_params sp;
    stream_state state = {0, 0, NULL, 0};
    int32_t *prompt = NULL;
    size_t n_prompt = 0, n_generated = 0;
    colibri_status st;
    long k, seed = 0;
    double temperature = 0.0;
    int rc = 1;

    if (argc < 4 || argc > 6 || !parse_long(argv[3], 1, 100000, &k)) {
        fprintf(stderr, "usage: %s MODEL.colibri PROMPT K [TEMPERATURE [SEED]]   (1 <= K <= 100000)\n", argv[0]);
        return 2;
    }
    if (argc >= 5) {
        char *end;
        temperature = strtod(argv[4], &end);
        if (end == argv[4] || *end != '\0' || !(temperature >= 0.0 && temperature <= 100.0)) {
            fprintf(stderr, "stream: TEMPERATURE must be a number in [0, 100]\n");
            return 2;
        }
    }
    if (argc == 6 && !parse_long(argv[5], 0, 2147483647L, &seed)) {
        fprintf(stderr, "stream: SEED must be an integer in [0, 2^31)\n");
        return 2;
    }
    state.limit = k;

    if ((st = colibri_model_open(argv[1], NULL, &model)) != COLIBRI_STATUS_OK) {
        fprintf(stderr, "stream: colibri_model_open: %s: %s\n", colibri_status_str(st), colibri_last_error_message());
        goto done;
    }
    if ((st = colibri_session_new(model, NULL, &session)) != COLIBRI_STATUS_OK) {
        fprintf(stderr, "stream: colibri_session_new: %s: %s\n", colibri_status_str(st), colibri_last_error_message());
        goto done;
    }
    /* Ask for the size first (tokens_cap 0 → BUFFER_TOO_SMALL with the count), then tokenize. */
    st = colibri_tokenize(model, argv[2], strlen(argv[2]), 1, NULL, 0, &n_prompt);
    if (st != COLIBRI_STATUS_OK && st != COLIBRI_STATUS_BUFFER_TOO_SMALL) {
        fprintf(stderr, "stream: colibri_tokenize: %s: %s\n", colibri_status_str(st), colibri_last_error_message());
        goto done;
    }
    if (n_prompt == 0) {
        fprintf(stderr, "stream: the prompt encodes to no tokens\n");
        goto done;
    }
    prompt = (int32_t *)malloc(n_prompt * sizeof *prompt);
    if (prompt == NULL) {
        fprintf(stderr, "stream: out of memory\n");
        goto done;
    }
    if ((st = colibri_tokenize(model, argv[2], strlen(argv[2]), 1, prompt, n_prompt, &n_prompt)) != COLIBRI_STATUS_OK) {
        fprintf(stderr, "stream: colibri_tokenize: %s: %s\n", colibri_status_str(st), colibri_last_error_message());
        goto done;
    }

    colibri_sampler_params_init(&sp); /* top_k 40, top_p 0.95, min_p 0.05: as `colibri run` */
    sp.temperature = (float)temperature;
    sp.seed = (uint64_t)seed;
    sp.max_tokens = 100000; /* the callback decides when to stop */
    st = colibri_generate(session, prompt, n_prompt, &sp, on_token, &state, NULL, 0, &n_generated);
    if (st != COLIBRI_STATUS_OK) {
        fprintf(stderr, "\nstream: colibri_generate: %s: %s\n", colibri_status_str(st), colibri_last_error_message());
        goto done;
    }
    if (state.write_failed) {
        fprintf(stderr, "\nstream: cannot write to stdout\n");
        goto done;
    }
    printf("\n");
    if (fflush(stdout) != 0) goto done;
    fprintf(stderr, "stream: stopped by %s after %ld tokens\n", state.reason ? state.reason : "end of sequence or context",
            state.tokens);
    rc = 0;

done:
    free(prompt);
    colibri_session_free(session);
    colibri_model_free(model);
    return rc;
}
