/*
 * Routing trace: which experts every MoE layer chose for every token, through the session's
 * route callback, first with the model's own top-k routing and then with Gumbel routing
 * (colibri_session_set_routing: COLIBRI_ROUTING_GUMBEL, a routing seed, a different number of
 * experts per token).
 *
 *   routing_trace MODEL.colibri PROMPT N [SEED [MOE_TOP_K]]     (defaults: SEED 7, MOE_TOP_K 1)
 *
 * The route callback fires after every colibri_infer call (and once at the end of a
 * colibri_generate), so generation is driven here with colibri_infer and a greedy argmax (ties to
 * the lowest id, as the library's sampler) to get the records step by step. For each
 * routing mode it prints a header line, then one line per (token position, MoE layer):
 *
 *   == topk
 *   token[0] layer 1 -> experts[3,5] weights[0.82,0.18]
 *   ...
 *   ids: <generated ids>
 *   == gumbel seed 7 moe_top_k 1
 *   ...
 *
 * which is the format of `colibri run --debug-routing` without the token text. The Gumbel pass is
 * run twice and must repeat itself exactly (same seed, same routing). Finally colibri_generate,
 * with the callback registered, must report the same records as the colibri_infer loop.
 */
#include <colibri.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The records of one pass, kept to compare the two Gumbel runs. */
typedef struct {
    char *text; /* every printed trace line, concatenated */
    size_t len, cap;
    int32_t want_k;    /* > 0: every record must have this many experts */
    int32_t n_experts; /* expert ids must be below this */
    int bad;           /* a record broke the rules above, or out of memory */
    int print;
} trace;

static void append(trace *t, const char *s, size_t n) {
    if (t->bad) return;
    if (t->len + n + 1 > t->cap) {
        size_t cap = t->cap ? t->cap : 4096;
        char *grown;
        while (cap < t->len + n + 1) cap *= 2;
        grown = (char *)realloc(t->text, cap);
        if (grown == NULL) {
            t->bad = 1;
            return;
        }
        t->text = grown;
        t->cap = cap;
    }
    memcpy(t->text + t->len, s, n);
    t->len += n;
    t->text[t->len] = '\0';
}

static int32_t on_route(void *userdata, int32_t layer, int32_t position, const int32_t *experts,
                        const float *weights, size_t k) {
    trace *t = (trace *)userdata;
    char line[1024];
    int n = snprintf(line, sizeof line, "token[%ld] layer %ld -> experts[", (long)position, (long)layer);
    size_t i;
    for (i = 0; i < k && n > 0 && (size_t)n < sizeof line; i++)
        n += snprintf(line + n, sizeof line - (size_t)n, "%s%ld", i ? "," : "", (long)experts[i]);
    if (n > 0 && (size_t)n < sizeof line) n += snprintf(line + n, sizeof line - (size_t)n, "] weights[");
    for (i = 0; i < k && n > 0 && (size_t)n < sizeof line; i++)
        n += snprintf(line + n, sizeof line - (size_t)n, "%s%.2f", i ? "," : "", (double)weights[i]);
    if (n > 0 && (size_t)n < sizeof line) n += snprintf(line + n, sizeof line - (size_t)n, "]\n");
    if (n <= 0 || (size_t)n >= sizeof line) {
        t->bad = 1; /* more experts than a line holds: not expected from a real model */
        return 1;
    }
    for (i = 0; i < k; i++)
        if (experts[i] < 0 || experts[i] >= t->n_experts || !isfinite(weights[i])) t->bad = 1;
    if (t->want_k > 0 && k != (size_t)t->want_k) t->bad = 1;
    if (t->print) fputs(line, stdout);
    append(t, line, (size_t)n);
    return 0;
}

static size_t argmax(const float *x, size_t n) {
    size_t i, best = 0;
    for (i = 1; i < n; i++)
        if (x[i] > x[best] || (x[best] != x[best] && x[i] == x[i])) best = i; /* NaN never wins */
    return best;
}

static void report(const char *what, colibri_status st) {
    fprintf(stderr, "routing_trace: %s failed: %s: %s\n", what, colibri_status_str(st), colibri_last_error_message());
}

/* Feed the prompt, then N-1 greedy tokens one at a time (N tokens are chosen into ids[]; the
 * last one is not fed back, as in `colibri run`). Returns 1 on success. */
static int greedy(colibri_session *s, const int32_t *prompt, size_t n_prompt, long n, int32_t *ids, float *logits,
                  size_t vocab, trace *t) {
    colibri_status st;
    long i;
    if ((st = colibri_session_set_route_callback(s, on_route, t)) != COLIBRI_STATUS_OK) {
        report("colibri_session_set_route_callback", st);
        return 0;
    }
    if ((st = colibri_infer(s, prompt, n_prompt, logits, vocab)) != COLIBRI_STATUS_OK) {
        report("colibri_infer", st);
        return 0;
    }
    for (i = 0; i < n; i++) {
        ids[i] = (int32_t)argmax(logits, vocab);
        if (i + 1 < n && (st = colibri_infer(s, &ids[i], 1, logits, vocab)) != COLIBRI_STATUS_OK) {
            report("colibri_infer", st);
            return 0;
        }
    }
    /* The callback and its userdata must stay valid while registered: unregister before t dies. */
    if ((st = colibri_session_set_route_callback(s, NULL, NULL)) != COLIBRI_STATUS_OK) {
        report("colibri_session_set_route_callback", st);
        return 0;
    }
    if (t->bad) {
        fprintf(stderr, "routing_trace: a routing record is out of range or has the wrong expert count\n");
        return 0;
    }
    if (t->print) {
        printf("ids:");
        for (i = 0; i < n; i++) printf(" %ld", (long)ids[i]);
        printf("\n");
    }
    return 1;
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
    colibri_model_info info;
    colibri_status st;
    int32_t *prompt = NULL, *ids = NULL;
    size_t n_prompt = 0, pos = 0, n_ctx = 0;
    float *logits = NULL;
    trace topk = {NULL, 0, 0, 0, 0, 0, 1}, g1 = {NULL, 0, 0, 0, 0, 0, 1}, g2 = {NULL, 0, 0, 0, 0, 0, 0};
    trace gen = {NULL, 0, 0, 0, 0, 0, 0};
    colibri_generate_params gp;
    colibri_generate_result res;
    long n, seed = 7, moe_top_k = 1;
    int rc = 1;

    if (argc < 4 || argc > 6 || !parse_long(argv[3], 1, 100000, &n) ||
        (argc >= 5 && !parse_long(argv[4], 0, 2147483647L, &seed)) ||
        (argc == 6 && !parse_long(argv[5], 1, 65536, &moe_top_k))) {
        fprintf(stderr, "usage: %s MODEL.colibri PROMPT N [SEED [MOE_TOP_K]]\n", argv[0]);
        return 2;
    }
    if ((st = colibri_model_open(argv[1], NULL, &model)) != COLIBRI_STATUS_OK) {
        report("colibri_model_open", st);
        goto done;
    }
    colibri_model_info_init(&info);
    if ((st = colibri_model_get_info(model, &info)) != COLIBRI_STATUS_OK) {
        report("colibri_model_get_info", st);
        goto done;
    }
    if ((st = colibri_session_new(model, NULL, &session)) != COLIBRI_STATUS_OK) {
        report("colibri_session_new", st);
        goto done;
    }
    st = colibri_tokenize(model, argv[2], strlen(argv[2]), 1, NULL, 0, &n_prompt);
    if (st != COLIBRI_STATUS_OK && st != COLIBRI_STATUS_BUFFER_TOO_SMALL) {
        report("colibri_tokenize", st);
        goto done;
    }
    if (n_prompt == 0) {
        fprintf(stderr, "routing_trace: the prompt encodes to no tokens\n");
        goto done;
    }
    prompt = (int32_t *)malloc(n_prompt * sizeof *prompt);
    logits = (float *)malloc((size_t)info.vocab_size * sizeof *logits);
    ids = (int32_t *)malloc((size_t)n * sizeof *ids);
    if (prompt == NULL || logits == NULL || ids == NULL) {
        fprintf(stderr, "routing_trace: out of memory\n");
        goto done;
    }
    if ((st = colibri_tokenize(model, argv[2], strlen(argv[2]), 1, prompt, n_prompt, &n_prompt)) != COLIBRI_STATUS_OK) {
        report("colibri_tokenize", st);
        goto done;
    }
    if ((st = colibri_session_position(session, &pos, &n_ctx)) != COLIBRI_STATUS_OK) {
        report("colibri_session_position", st);
        goto done;
    }
    if (n_prompt + (size_t)n > n_ctx) {
        fprintf(stderr, "routing_trace: %lu prompt tokens + %ld do not fit the context of %lu\n",
                (unsigned long)n_prompt, n, (unsigned long)n_ctx);
        goto done;
    }

    /* 1. The model's own routing. */
    printf("== topk\n");
    topk.n_experts = (int32_t)info.n_experts;
    topk.want_k = (int32_t)info.top_k;
    if (!greedy(session, prompt, n_prompt, n, ids, logits, info.vocab_size, &topk)) goto done;

    /* 2. Gumbel routing with its own seed and expert count, from an empty cache, twice. */
    printf("== gumbel seed %ld moe_top_k %ld\n", seed, moe_top_k);
    g1.n_experts = g2.n_experts = (int32_t)info.n_experts;
    g1.want_k = g2.want_k = (int32_t)moe_top_k;
    if ((st = colibri_session_reset(session)) != COLIBRI_STATUS_OK) {
        report("colibri_session_reset", st);
        goto done;
    }
    if ((st = colibri_session_set_routing(session, COLIBRI_ROUTING_GUMBEL, (uint64_t)seed, (int32_t)moe_top_k)) !=
        COLIBRI_STATUS_OK) {
        report("colibri_session_set_routing", st);
        goto done;
    }
    if (!greedy(session, prompt, n_prompt, n, ids, logits, info.vocab_size, &g1)) goto done;
    if ((st = colibri_session_reset(session)) != COLIBRI_STATUS_OK ||
        (st = colibri_session_set_routing(session, COLIBRI_ROUTING_GUMBEL, (uint64_t)seed, (int32_t)moe_top_k)) !=
            COLIBRI_STATUS_OK) {
        report("colibri_session_reset / set_routing", st);
        goto done;
    }
    if (!greedy(session, prompt, n_prompt, n, ids, logits, info.vocab_size, &g2)) goto done;
    if (g1.len != g2.len || (g1.len > 0 && memcmp(g1.text, g2.text, g1.len) != 0)) {
        fprintf(stderr, "routing_trace: two Gumbel runs with seed %ld routed differently\n", seed);
        goto done;
    }
    if (g1.len == 0 || topk.len == 0) {
        fprintf(stderr, "routing_trace: the route callback was never called\n");
        goto done;
    }
    printf("== gumbel rerun with seed %ld: identical routing\n", seed);

    /* 3. colibri_generate reports the same records (all at once, after generating). */
    gen.n_experts = (int32_t)info.n_experts;
    gen.want_k = (int32_t)info.top_k;
    colibri_generate_params_init(&gp);
    gp.temperature = 0.0f;
    gp.ignore_eos = 1;
    gp.max_tokens = (int32_t)n;
    colibri_generate_result_init(&res);
    if ((st = colibri_session_reset(session)) != COLIBRI_STATUS_OK ||
        (st = colibri_session_set_routing(session, COLIBRI_ROUTING_TOPK, 0, 0)) != COLIBRI_STATUS_OK ||
        (st = colibri_session_set_route_callback(session, on_route, &gen)) != COLIBRI_STATUS_OK ||
        (st = colibri_generate(session, prompt, n_prompt, &gp, NULL, NULL, NULL, 0, &res)) != COLIBRI_STATUS_OK ||
        (st = colibri_session_set_route_callback(session, NULL, NULL)) != COLIBRI_STATUS_OK) {
        report("colibri_generate with a route callback", st);
        goto done;
    }
    if (gen.bad || gen.len != topk.len || memcmp(gen.text, topk.text, topk.len) != 0) {
        fprintf(stderr, "routing_trace: colibri_generate reported other routing records than colibri_infer\n");
        goto done;
    }
    printf("== colibri_generate: the same %lu tokens' routing as the colibri_infer loop\n", (unsigned long)res.n_tokens);
    rc = 0;

done:
    free(topk.text);
    free(g1.text);
    free(g2.text);
    free(gen.text);
    free(logits);
    free(ids);
    free(prompt);
    colibri_session_free(session);
    colibri_model_free(model);
    return rc;
}
