/*
 * Several sequences decoding together: one session per prompt; the prompts (of different
 * lengths) are prefilled by one colibri_infer_batch call, then every greedy step feeds each
 * session its last token in one colibri_infer_batch call, so the model's weights are read once
 * per step for all sequences. Each sequence's ids are then checked against colibri_generate on
 * a fresh session (greedy, end-of-sequence ignored): batching must not change the tokens.
 *
 *   batch MODEL.colibri N PROMPT...        (one or more prompts, N tokens each)
 *
 * Output (stdout), for each prompt i, then a summary line:
 *   [i] prompt: <prompt ids>
 *   [i] ids: <generated ids>
 *   [i] text: <generated text>
 *   batch: K sequences x N tokens equal to colibri_generate
 * Exit status 1 (with a message on stderr) when a call fails or the ids differ.
 */
#include <colibri.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Status this program uses for its own allocation failures (never returned by the library). */
#define OUT_OF_MEMORY (-1)

static void report(const char *what, colibri_status st) {
    if (st == OUT_OF_MEMORY)
        fprintf(stderr, "batch: %s failed: out of memory\n", what);
    else
        fprintf(stderr, "batch: %s failed: %s: %s\n", what, colibri_status_str(st), colibri_last_error_message());
}

/* Tokenize `text` (with the tokenizer's special tokens) into a malloc'd array. */
static colibri_status tokenize(const colibri_model *model, const char *text, int32_t **ids_out, size_t *n_out) {
    size_t len = strlen(text), n = 0;
    int32_t *ids = (int32_t *)malloc((len + 8) * sizeof *ids);
    colibri_status st;
    if (ids == NULL) return OUT_OF_MEMORY;
    st = colibri_tokenize(model, text, len, 1, ids, len + 8, &n);
    if (st == COLIBRI_STATUS_BUFFER_TOO_SMALL) { /* n says how many are needed */
        int32_t *bigger = (int32_t *)realloc(ids, (n ? n : 1) * sizeof *ids);
        if (bigger == NULL) {
            free(ids);
            return OUT_OF_MEMORY;
        }
        ids = bigger;
        st = colibri_tokenize(model, text, len, 1, ids, n, &n);
    }
    if (st != COLIBRI_STATUS_OK) {
        free(ids);
        return st;
    }
    *ids_out = ids;
    *n_out = n;
    return COLIBRI_STATUS_OK;
}

/* The largest logit's id (ties to the lowest id, like the library's greedy sampler). */
static int32_t argmax(const float *x, size_t n) {
    size_t i, best = 0;
    for (i = 1; i < n; i++)
        if (x[i] > x[best]) best = i;
    return (int32_t)best;
}

/* Print the text of `ids` after `label`. */
static colibri_status print_text(const colibri_model *model, size_t i, const int32_t *ids, size_t n) {
    size_t cap = 16 * n + 16, len = 0;
    char *buf = (char *)malloc(cap);
    colibri_status st;
    if (buf == NULL) return OUT_OF_MEMORY;
    st = colibri_detokenize(model, ids, n, 1, buf, cap, &len);
    if (st == COLIBRI_STATUS_BUFFER_TOO_SMALL) {
        char *bigger = (char *)realloc(buf, len + 1);
        if (bigger == NULL) {
            free(buf);
            return OUT_OF_MEMORY;
        }
        buf = bigger;
        st = colibri_detokenize(model, ids, n, 1, buf, len + 1, &len);
    }
    if (st == COLIBRI_STATUS_OK) printf("[%lu] text: %s\n", (unsigned long)i, buf);
    free(buf);
    return st;
}

int main(int argc, char **argv) {
    colibri_model *model = NULL;
    colibri_model_info info;
    colibri_session **sessions = NULL;
    colibri_generate_params gp;
    colibri_generate_result res;
    int32_t **prompts = NULL, *ids = NULL, *ref = NULL;
    const int32_t **feed = NULL;
    size_t *n_prompt = NULL, *n_feed = NULL, n_seq, vocab, i, t;
    float *logits = NULL;
    colibri_status st;
    long n_predict;
    char *end;
    int rc = 1;

    if (argc < 4) {
        fprintf(stderr, "usage: %s MODEL.colibri N PROMPT...\n", argv[0]);
        return 2;
    }
    errno = 0;
    n_predict = strtol(argv[2], &end, 10);
    if (errno != 0 || *end != '\0' || end == argv[2] || n_predict < 1 || n_predict > 100000) {
        fprintf(stderr, "batch: N must be an integer in 1..100000, not '%s'\n", argv[2]);
        return 2;
    }
    n_seq = (size_t)(argc - 3);

    if ((st = colibri_model_open(argv[1], NULL, &model)) != COLIBRI_STATUS_OK) {
        report("colibri_model_open", st);
        goto done;
    }
    colibri_model_info_init(&info);
    if ((st = colibri_model_get_info(model, &info)) != COLIBRI_STATUS_OK) {
        report("colibri_model_get_info", st);
        goto done;
    }
    vocab = info.vocab_size;
    sessions = (colibri_session **)calloc(n_seq, sizeof *sessions);
    prompts = (int32_t **)calloc(n_seq, sizeof *prompts);
    feed = (const int32_t **)calloc(n_seq, sizeof *feed);
    n_prompt = (size_t *)calloc(n_seq, sizeof *n_prompt);
    n_feed = (size_t *)calloc(n_seq, sizeof *n_feed);
    ids = (int32_t *)calloc(n_seq * (size_t)n_predict, sizeof *ids); /* ids[i * N + t] */
    ref = (int32_t *)calloc((size_t)n_predict, sizeof *ref);
    logits = (float *)calloc(n_seq * vocab, sizeof *logits); /* one row per session */
    if (!sessions || !prompts || !feed || !n_prompt || !n_feed || !ids || !ref || !logits) {
        report("allocation", OUT_OF_MEMORY);
        goto done;
    }
    for (i = 0; i < n_seq; i++) {
        if ((st = colibri_session_new(model, NULL, &sessions[i])) != COLIBRI_STATUS_OK) {
            report("colibri_session_new", st);
            goto done;
        }
        if ((st = tokenize(model, argv[3 + i], &prompts[i], &n_prompt[i])) != COLIBRI_STATUS_OK) {
            report("colibri_tokenize", st);
            goto done;
        }
        feed[i] = prompts[i];
        n_feed[i] = n_prompt[i];
    }

    /* Step 0 prefills every prompt; each later step decodes one token per session. The logits
     * come back session after session (one row each: the sessions keep all_logits off). */
    for (t = 0; t < (size_t)n_predict; t++) {
        st = colibri_infer_batch(model, sessions, feed, n_feed, n_seq, logits, n_seq * vocab);
        if (st != COLIBRI_STATUS_OK) {
            report("colibri_infer_batch", st);
            goto done;
        }
        for (i = 0; i < n_seq; i++) {
            ids[i * (size_t)n_predict + t] = argmax(logits + i * vocab, vocab);
            feed[i] = &ids[i * (size_t)n_predict + t];
            n_feed[i] = 1;
        }
    }

    colibri_generate_params_init(&gp);
    gp.temperature = 0.0f;
    gp.ignore_eos = 1;
    gp.max_tokens = (int32_t)n_predict;
    for (i = 0; i < n_seq; i++) {
        const int32_t *mine = ids + i * (size_t)n_predict;
        printf("[%lu] prompt:", (unsigned long)i);
        for (t = 0; t < n_prompt[i]; t++) printf(" %ld", (long)prompts[i][t]);
        printf("\n[%lu] ids:", (unsigned long)i);
        for (t = 0; t < (size_t)n_predict; t++) printf(" %ld", (long)mine[t]);
        printf("\n");
        if ((st = print_text(model, i, mine, (size_t)n_predict)) != COLIBRI_STATUS_OK) {
            report("colibri_detokenize", st);
            goto done;
        }
        /* The reference: the same prompt alone, through colibri_generate on a fresh session. */
        colibri_generate_result_init(&res);
        if ((st = colibri_session_reset(sessions[i])) != COLIBRI_STATUS_OK ||
            (st = colibri_generate(sessions[i], prompts[i], n_prompt[i], &gp, NULL, NULL, ref, (size_t)n_predict,
                                   &res)) != COLIBRI_STATUS_OK) {
            report("colibri_generate", st);
            goto done;
        }
        if (res.n_tokens != (size_t)n_predict || memcmp(ref, mine, (size_t)n_predict * sizeof *ref) != 0) {
            fprintf(stderr, "batch: sequence %lu differs from colibri_generate on its own\n", (unsigned long)i);
            goto done;
        }
    }
    printf("batch: %lu sequences x %ld tokens equal to colibri_generate\n", (unsigned long)n_seq, n_predict);
    rc = fflush(stdout) == 0 ? 0 : 1;

done:
    if (sessions)
        for (i = 0; i < n_seq; i++) colibri_session_free(sessions[i]);
    if (prompts)
        for (i = 0; i < n_seq; i++) free(prompts[i]);
    free(sessions);
    free(prompts);
    free((void *)feed);
    free(n_prompt);
    free(n_feed);
    free(ids);
    free(ref);
    free(logits);
    colibri_model_free(model);
    return rc;
}
