/*
 * Greedy generation through the C API: open a model, tokenize a prompt, generate N tokens with
 * temperature 0 (end-of-sequence ignored), print the ids and the text. colibri_generate_result
 * says how many tokens came and why generation ended (fewer than N: the context filled up).
 *
 *   generate MODEL.colibri PROMPT N
 *
 * Output (stdout):
 *   prompt: <prompt ids>
 *   ids: <generated ids>
 *   <generated text>
 * The text line(s) are byte for byte what `colibri run -m MODEL -p PROMPT -n N --temp 0
 * --ignore-eos` prints on stdout.
 */
#include <colibri.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The generated text, grown by the token callback. */
typedef struct {
    char *data;
    size_t len;
    size_t cap;
    int oom;
} text_buf;

static int32_t on_token(void *userdata, int32_t token, const char *text, size_t text_len) {
    text_buf *t = (text_buf *)userdata;
    (void)token;
    if (text_len == 0) return 0;
    if (t->len + text_len + 1 > t->cap) {
        size_t cap = t->cap ? t->cap : 256;
        char *grown;
        while (cap < t->len + text_len + 1) cap *= 2;
        grown = (char *)realloc(t->data, cap);
        if (grown == NULL) {
            t->oom = 1;
            return 1; /* stop generating */
        }
        t->data = grown;
        t->cap = cap;
    }
    memcpy(t->data + t->len, text, text_len);
    t->len += text_len;
    t->data[t->len] = '\0';
    return 0;
}

/* Status this program uses for its own allocation failures (never returned by the library). */
#define OUT_OF_MEMORY (-1)

static void report(const char *what, colibri_status st) {
    if (st == OUT_OF_MEMORY)
        fprintf(stderr, "generate: %s failed: out of memory\n", what);
    else
        fprintf(stderr, "generate: %s failed: %s: %s\n", what, colibri_status_str(st), colibri_last_error_message());
}

/* Tokenize `text` (with the tokenizer's special tokens) into a malloc'd array. */
static colibri_status tokenize(const colibri_model *model, const char *text, int32_t **ids_out, size_t *n_out) {
    size_t len = strlen(text), cap = len + 8, n = 0;
    int32_t *ids = (int32_t *)malloc(cap * sizeof *ids);
    colibri_status st;
    if (ids == NULL) return OUT_OF_MEMORY;
    st = colibri_tokenize(model, text, len, 1, ids, cap, &n);
    if (st == COLIBRI_STATUS_BUFFER_TOO_SMALL) { /* n says how many are needed */
        int32_t *bigger = (int32_t *)realloc(ids, (n ? n : 1) * sizeof *ids);
        if (bigger == NULL) {
            free(ids);
            return OUT_OF_MEMORY;
        }
        ids = bigger;
        cap = n;
        st = colibri_tokenize(model, text, len, 1, ids, cap, &n);
    }
    if (st != COLIBRI_STATUS_OK) {
        free(ids);
        return st;
    }
    *ids_out = ids;
    *n_out = n;
    return COLIBRI_STATUS_OK;
}

int main(int argc, char **argv) {
    colibri_model *model = NULL;
    colibri_session *session = NULL;
    colibri_generate_params gp;
    colibri_generate_result res;
    int32_t *prompt = NULL, *out = NULL;
    size_t n_prompt = 0, i;
    text_buf text = {NULL, 0, 0, 0};
    colibri_status st;
    long n_predict;
    char *end;
    int rc = 1;

    if (argc != 4) {
        fprintf(stderr, "usage: %s MODEL.colibri PROMPT N\n", argv[0]);
        return 2;
    }
    errno = 0;
    n_predict = strtol(argv[3], &end, 10);
    if (errno != 0 || *end != '\0' || end == argv[3] || n_predict < 0 || n_predict > 1000000) {
        fprintf(stderr, "generate: N must be an integer in 0..1000000, not '%s'\n", argv[3]);
        return 2;
    }

    if ((st = colibri_model_open(argv[1], NULL, &model)) != COLIBRI_STATUS_OK) {
        report("colibri_model_open", st);
        goto done;
    }
    if ((st = colibri_session_new(model, NULL, &session)) != COLIBRI_STATUS_OK) {
        report("colibri_session_new", st);
        goto done;
    }
    if ((st = tokenize(model, argv[2], &prompt, &n_prompt)) != COLIBRI_STATUS_OK) {
        report("colibri_tokenize", st);
        goto done;
    }

    colibri_generate_params_init(&gp);
    gp.temperature = 0.0f;
    gp.ignore_eos = 1;
    gp.max_tokens = (int32_t)n_predict;
    out = (int32_t *)malloc(((size_t)n_predict + 1) * sizeof *out);
    if (out == NULL) {
        fprintf(stderr, "generate: out of memory\n");
        goto done;
    }
    colibri_generate_result_init(&res);
    st = colibri_generate(session, prompt, n_prompt, &gp, on_token, &text, out, (size_t)n_predict, &res);
    if (st != COLIBRI_STATUS_OK) {
        report("colibri_generate", st);
        goto done;
    }
    if (text.oom) {
        fprintf(stderr, "generate: out of memory\n");
        goto done;
    }
    if (res.n_tokens > (size_t)n_predict) {
        fprintf(stderr, "generate: the library reported %lu tokens for a buffer of %ld\n", (unsigned long)res.n_tokens,
                n_predict);
        goto done;
    }
    if (res.finish_reason == COLIBRI_FINISH_CONTEXT_FULL)
        fprintf(stderr, "generate: the context filled up after %lu tokens\n", (unsigned long)res.n_tokens);

    printf("prompt:");
    for (i = 0; i < n_prompt; i++) printf(" %ld", (long)prompt[i]);
    printf("\nids:");
    for (i = 0; i < res.n_tokens; i++) printf(" %ld", (long)out[i]);
    printf("\n");
    if (text.len > 0) fwrite(text.data, 1, text.len, stdout);
    printf("\n");
    rc = fflush(stdout) == 0 ? 0 : 1;

done:
    free(text.data);
    free(out);
    free(prompt);
    colibri_session_free(session);
    colibri_model_free(model);
    return rc;
}
