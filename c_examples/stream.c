/*
 * Streaming with stop strings: print each piece of text as soon as the library produces it, and
 * let the library end generation at a stop string (never printed), after K tokens, or at an
 * end-of-sequence token; then print why it ended (colibri_generate_result.finish_reason). The
 * callback only prints; it stops generation (returns non-zero) when stdout fails.
 *
 *   stream MODEL.colibri PROMPT K [TEMPERATURE [SEED [STOP...]]]
 *
 * TEMPERATURE defaults to 0 (greedy), SEED to 0, the stop strings to one newline ("\n").
 * stdout: the streamed text followed by one newline (so it reads like `colibri run`).
 * stderr: "stream: finish_reason <length|stop|eos|context_full|callback> after N tokens".
 * `colibri run -m MODEL -p PROMPT -n K --temp TEMPERATURE --seed SEED --stop STOP...` prints the
 * same text.
 */
#include <colibri.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Print a piece of text; userdata: an int set to 1 when stdout fails. */
static int32_t on_token(void *userdata, int32_t token, const char *text, size_t text_len) {
    (void)token; /* -1 for a last flush of held-back text */
    if (text_len > 0 && (fwrite(text, 1, text_len, stdout) != text_len || fflush(stdout) != 0)) {
        *(int *)userdata = 1;
        return 1; /* stop generating: COLIBRI_FINISH_CALLBACK */
    }
    return 0;
}

/* The name of a finish reason (as `colibri run` prints it). */
static const char *finish_name(colibri_finish_reason r) {
    switch (r) {
    case COLIBRI_FINISH_LENGTH: return "length";
    case COLIBRI_FINISH_STOP: return "stop";
    case COLIBRI_FINISH_EOS: return "eos";
    case COLIBRI_FINISH_CONTEXT_FULL: return "context_full";
    case COLIBRI_FINISH_CALLBACK: return "callback";
    default: return "unknown";
    }
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
    colibri_generate_params gp;
    colibri_generate_result res;
    static const char *const newline[] = {"\n"};
    int32_t *prompt = NULL;
    size_t n_prompt = 0;
    colibri_status st;
    long k, seed = 0;
    double temperature = 0.0;
    int rc = 1, write_failed = 0;

    if (argc < 4 || !parse_long(argv[3], 1, 100000, &k)) {
        fprintf(stderr, "usage: %s MODEL.colibri PROMPT K [TEMPERATURE [SEED [STOP...]]]   (1 <= K <= 100000)\n",
                argv[0]);
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
    if (argc >= 6 && !parse_long(argv[5], 0, 2147483647L, &seed)) {
        fprintf(stderr, "stream: SEED must be an integer in [0, 2^31)\n");
        return 2;
    }

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

    colibri_generate_params_init(&gp); /* top_k 40, top_p 0.95, min_p 0.05: as `colibri run` */
    gp.temperature = (float)temperature;
    gp.seed = (uint64_t)seed;
    gp.max_tokens = (int32_t)k;
    /* The stop strings: the command line's (read during the call only), else a newline. */
    gp.stop = argc > 6 ? (const char *const *)(argv + 6) : newline;
    gp.n_stop = argc > 6 ? (size_t)(argc - 6) : 1;
    colibri_generate_result_init(&res);
    st = colibri_generate(session, prompt, n_prompt, &gp, on_token, &write_failed, NULL, 0, &res);
    if (st != COLIBRI_STATUS_OK) {
        fprintf(stderr, "\nstream: colibri_generate: %s: %s\n", colibri_status_str(st), colibri_last_error_message());
        goto done;
    }
    if (write_failed) {
        fprintf(stderr, "\nstream: cannot write to stdout\n");
        goto done;
    }
    printf("\n");
    if (fflush(stdout) != 0) goto done;
    fprintf(stderr, "stream: finish_reason %s after %lu tokens\n", finish_name(res.finish_reason),
            (unsigned long)res.n_tokens);
    rc = 0;

done:
    free(prompt);
    colibri_session_free(session);
    colibri_model_free(model);
    return rc;
}
