/*
 * Embeddings with colibri_embed: each input becomes one vector, the model's final-normed hidden
 * states pooled over its tokens (mean, last or cls) and L2-normalised. The vector's length comes
 * from a size query (NULL output, length 0), as with the ABI's other outputs. Then the cosine
 * similarity of every pair of inputs (a dot product: the vectors have unit norm).
 *
 *   embed MODEL.colibri POOLING INPUT...     (POOLING: mean | last | cls)
 *
 * An INPUT is text (tokenized with the tokenizer's special tokens), or "ids:" followed by
 * comma-separated token ids. Output (stdout):
 *   [i] tokens: <n> norm: <L2 norm>
 *   [i] vector: <the floats, %.9g>
 *   cos[i][j]: <similarity>              (each pair i < j)
 *   embed: K vectors of N floats
 * Exit status 1 (with a message on stderr) when a call fails.
 */
#include <colibri.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Status this program uses for its own failures (never returned by the library). */
#define OWN_FAILURE (-1)

static void report(const char *what, colibri_status st) {
    if (st == OWN_FAILURE)
        fprintf(stderr, "embed: %s failed (out of memory or a bad argument)\n", what);
    else
        fprintf(stderr, "embed: %s failed: %s: %s\n", what, colibri_status_str(st), colibri_last_error_message());
}

/* The token ids of one INPUT, in a malloc'd array. */
static colibri_status input_ids(const colibri_model *model, const char *input, int32_t **ids_out, size_t *n_out) {
    size_t len = strlen(input), n = 0;
    int32_t *ids = (int32_t *)malloc((len + 8) * sizeof *ids);
    colibri_status st = COLIBRI_STATUS_OK;
    if (ids == NULL) return OWN_FAILURE;
    if (strncmp(input, "ids:", 4) == 0) {
        const char *p = input + 4;
        char *end;
        while (*p != '\0') {
            long v = strtol(p, &end, 10);
            if (end == p || v < 0 || v > 2147483647L) {
                free(ids);
                return OWN_FAILURE;
            }
            ids[n++] = (int32_t)v;
            p = (*end == ',') ? end + 1 : end;
        }
    } else {
        st = colibri_tokenize(model, input, len, 1, ids, len + 8, &n);
    }
    if (st != COLIBRI_STATUS_OK) {
        free(ids);
        return st;
    }
    *ids_out = ids;
    *n_out = n;
    return COLIBRI_STATUS_OK;
}

static int pooling_of(const char *name, colibri_pooling *out) {
    if (strcmp(name, "mean") == 0) *out = COLIBRI_POOLING_MEAN;
    else if (strcmp(name, "last") == 0) *out = COLIBRI_POOLING_LAST;
    else if (strcmp(name, "cls") == 0) *out = COLIBRI_POOLING_CLS;
    else return 0;
    return 1;
}

int main(int argc, char **argv) {
    colibri_model *model = NULL;
    colibri_embed_params params;
    colibri_status st;
    size_t dim = 0, k = 0, i, j, d;
    float *vectors = NULL;
    int rc = 1;
    if (argc < 4) {
        fprintf(stderr, "usage: %s MODEL.colibri mean|last|cls INPUT...\n", argv[0]);
        return 2;
    }
    colibri_embed_params_init(&params);
    if (!pooling_of(argv[2], &params.pooling)) {
        fprintf(stderr, "embed: pooling '%s' is not mean, last or cls\n", argv[2]);
        return 2;
    }
    if ((st = colibri_model_open(argv[1], NULL, &model)) != COLIBRI_STATUS_OK) {
        report("colibri_model_open", st);
        return 1;
    }
    /* The size query: no output buffer; BUFFER_TOO_SMALL with the vector's length. */
    st = colibri_embed(model, NULL, 0, &params, NULL, 0, &dim);
    if (st != COLIBRI_STATUS_BUFFER_TOO_SMALL || dim == 0) {
        report("the size query", st);
        goto done;
    }
    k = (size_t)(argc - 3);
    vectors = (float *)malloc(k * dim * sizeof *vectors);
    if (vectors == NULL) {
        report("malloc", OWN_FAILURE);
        goto done;
    }
    for (i = 0; i < k; i++) {
        int32_t *ids = NULL;
        size_t n = 0, written = 0;
        double norm = 0.0;
        float *v = vectors + i * dim;
        if ((st = input_ids(model, argv[3 + i], &ids, &n)) != COLIBRI_STATUS_OK) {
            report("reading an input", st);
            goto done;
        }
        st = colibri_embed(model, ids, n, &params, v, dim, &written);
        free(ids);
        if (st != COLIBRI_STATUS_OK || written != dim) {
            report("colibri_embed", st);
            goto done;
        }
        for (d = 0; d < dim; d++) norm += (double)v[d] * v[d];
        printf("[%zu] tokens: %zu norm: %.6f\n[%zu] vector:", i, n, sqrt(norm), i);
        for (d = 0; d < dim; d++) printf(" %.9g", v[d]);
        printf("\n");
    }
    for (i = 0; i < k; i++)
        for (j = i + 1; j < k; j++) {
            double dot = 0.0;
            for (d = 0; d < dim; d++) dot += (double)vectors[i * dim + d] * vectors[j * dim + d];
            printf("cos[%zu][%zu]: %.6f\n", i, j, dot);
        }
    printf("embed: %zu vectors of %zu floats\n", k, dim);
    rc = 0;
done:
    free(vectors);
    colibri_model_free(model);
    return rc;
}
