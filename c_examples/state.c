/*
 * Session state: feed a prompt, save the session (KV cache, routing RNG, last logits and the
 * prompt's ids) to a file, load it into a fresh session and check that both continue with the
 * same logits; then check that a damaged file is refused and leaves the session as it was. Then
 * copy the session in memory (colibri_session_copy) and check that the copy continues with the
 * same logits, and that a NULL session and a context too small are refused.
 *
 *   state MODEL.colibri STATE_FILE [PROMPT]
 *
 * Prints the lines "state: restored session continues identically (N tokens)" and "state: a
 * copied session continues identically (N tokens)" and exits 0 only when every check holds.
 */
#define _POSIX_C_SOURCE 200809L
#include <colibri.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_TOKENS 512

static int failed(const char *what, colibri_status st) {
    fprintf(stderr, "state: %s: %s: %s\n", what, colibri_status_str(st), colibri_last_error_message());
    return 1;
}

/* Feed `n` ids and copy the last position's logits to `out` (vocab floats). */
static colibri_status feed(colibri_session *s, const int32_t *ids, size_t n, float *out, size_t vocab) {
    return colibri_infer(s, ids, n, out, vocab);
}

/* Feed `next` to both x and y: 0 when their logits are equal, else 1 after saying why (`what`). */
static int continue_alike(colibri_session *x, colibri_session *y, int32_t next, float *lx, float *ly, size_t vocab,
                          const char *what) {
    colibri_status st;
    if ((st = feed(x, &next, 1, lx, vocab)) || (st = feed(y, &next, 1, ly, vocab))) return failed(what, st);
    if (memcmp(lx, ly, vocab * sizeof *lx) != 0) {
        fprintf(stderr, "state: %s: the logits differ\n", what);
        return 1;
    }
    return 0;
}

int main(int argc, char **argv) {
    const char *prompt = argc > 3 ? argv[3] : "And the LORD said unto Moses";
    colibri_model *model = NULL;
    colibri_session *a = NULL, *b = NULL, *c = NULL, *tiny = NULL;
    colibri_session_params small;
    colibri_model_info info;
    int32_t ids[MAX_TOKENS], back[MAX_TOKENS], next = 7;
    size_t n = 0, n_back = 0, vocab;
    float *la = NULL, *lb = NULL;
    colibri_status st;
    int rc = 1;
    FILE *f;

    if (argc < 3) {
        fprintf(stderr, "usage: state MODEL.colibri STATE_FILE [PROMPT]\n");
        return 2;
    }
    if ((st = colibri_model_open(argv[1], NULL, &model)) != COLIBRI_STATUS_OK) return failed("open", st);
    colibri_model_info_init(&info);
    if ((st = colibri_model_get_info(model, &info)) != COLIBRI_STATUS_OK) return failed("info", st);
    vocab = (size_t)info.vocab_size;
    la = malloc(vocab * sizeof *la);
    lb = malloc(vocab * sizeof *lb);
    if (!la || !lb) goto done;
    if ((st = colibri_tokenize(model, prompt, strlen(prompt), 1, ids, MAX_TOKENS, &n)) != COLIBRI_STATUS_OK) {
        failed("tokenize", st);
        goto done;
    }
    if ((st = colibri_session_new(model, NULL, &a)) || (st = colibri_session_new(model, NULL, &b))) {
        failed("session_new", st);
        goto done;
    }
    if ((st = feed(a, ids, n, la, vocab)) || (st = colibri_session_save_state(a, argv[2], ids, n))) {
        failed("feed and save", st);
        goto done;
    }
    /* A capacity too small: BUFFER_TOO_SMALL with the count, nothing loaded. */
    st = colibri_session_load_state(b, argv[2], back, 1, &n_back);
    if (n > 1 && (st != COLIBRI_STATUS_BUFFER_TOO_SMALL || n_back != n)) {
        fprintf(stderr, "state: small buffer gave %s, count %zu\n", colibri_status_str(st), n_back);
        goto done;
    }
    if ((st = colibri_session_load_state(b, argv[2], back, MAX_TOKENS, &n_back)) != COLIBRI_STATUS_OK) {
        failed("load", st);
        goto done;
    }
    if (n_back != n || memcmp(back, ids, n * sizeof ids[0]) != 0) {
        fprintf(stderr, "state: the stored ids differ\n");
        goto done;
    }
    if (continue_alike(a, b, next, la, lb, vocab, "the restored session")) goto done;
    /* Damage the file: a byte in the middle flipped. The load fails; b keeps its n + 1 tokens. */
    if (!(f = fopen(argv[2], "r+b")) || fseek(f, 200, SEEK_SET) != 0 || fputc(0x5a ^ 0xff, f) == EOF) {
        fprintf(stderr, "state: cannot damage %s\n", argv[2]);
        if (f) fclose(f);
        goto done;
    }
    fclose(f);
    if ((st = colibri_session_load_state(b, argv[2], back, MAX_TOKENS, &n_back)) == COLIBRI_STATUS_OK) {
        fprintf(stderr, "state: a damaged file was loaded\n");
        goto done;
    }
    if (continue_alike(a, b, next, la, lb, vocab, "after the refused load")) goto done;
    printf("state: restored session continues identically (%zu tokens)\n", n);
    /* An in-memory copy holds what `a` holds: both continue with the same logits. */
    if ((st = colibri_session_new(model, NULL, &c)) || (st = colibri_session_copy(c, a))) {
        failed("copy", st);
        goto done;
    }
    if (continue_alike(a, c, next, la, lb, vocab, "the copied session")) goto done;
    /* A context of one token cannot take `a`'s; a NULL session is refused. */
    colibri_session_params_init(&small);
    small.n_ctx = 1;
    if ((st = colibri_session_new(model, &small, &tiny)) != COLIBRI_STATUS_OK) {
        failed("small session", st);
        goto done;
    }
    if ((st = colibri_session_copy(tiny, a)) != COLIBRI_STATUS_CONTEXT_FULL ||
        (st = colibri_session_copy(NULL, a)) != COLIBRI_STATUS_NULL_ARGUMENT) {
        fprintf(stderr, "state: a refused copy gave %s\n", colibri_status_str(st));
        goto done;
    }
    printf("state: a copied session continues identically (%zu tokens)\n", n);
    rc = 0;
done:
    free(la);
    free(lb);
    colibri_session_free(a);
    colibri_session_free(b);
    colibri_session_free(c);
    colibri_session_free(tiny);
    colibri_model_free(model);
    return rc;
}
