/*
 * The layer-level primitive for firmware that needs nothing else: colibri_moe_init copies a set of
 * expert matrices, colibri_moe_infer mixes the top-k of them for an input and its gate logits.
 * The result is checked against a plain scalar computation of the documented formula:
 *
 *   output = sum over the top_k largest gates g_e (ties to the lowest index) of
 *            softmax-over-the-chosen(g)_e * (W_e . input),
 *   where W_e is a row-major [expert_sizes[e], hidden_size] matrix and an expert with fewer rows
 *   than max(expert_sizes) contributes zeros to the rest of the output.
 *
 *   moe_layer                 (no model file needed; a model path argument is accepted and ignored)
 *
 * The same layer stored in bf16 (colibri_moe_init_with(..., COLIBRI_MOE_BF16)) is checked
 * against the error bound the header states for it:
 *   |error_r| <= sum over chosen of p_e * sum_i (|W_e[r,i] * input_i| / 128 + |W_e[r,i]| * 2^-126),
 * i.e. the reference run on |W| and |input| (scaled), plus a negligible absolute term.
 *
 * Exits 0 when every case matches (f32: within 1e-5 relative to the output's scale; bf16: within
 * its bound), 1 otherwise.
 */
#include <colibri.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define N_EXPERTS 6
#define HIDDEN 37 /* not a multiple of any vector width: exercises the kernels' tails */
#define TOP_K 2

static const int32_t SIZES[N_EXPERTS] = {16, 9, 16, 1, 33, 20};

/* A small deterministic generator (xorshift32) for weights and inputs in [-1, 1). */
static uint32_t rng_state = 0x12345678u;
static float uniform(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 17;
    rng_state ^= rng_state << 5;
    return (float)((rng_state >> 8) * (1.0 / 16777216.0) * 2.0 - 1.0);
}

/* The scalar reference in double precision. */
static void reference(const float *weights, const float *input, const float *gates, int top_k, double *out,
                      int out_len) {
    int chosen[N_EXPERTS] = {0}, used[N_EXPERTS] = {0}, c, e, r, h, offset[N_EXPERTS];
    double max, sum = 0.0, w[N_EXPERTS];
    offset[0] = 0;
    for (e = 1; e < N_EXPERTS; e++) offset[e] = offset[e - 1] + SIZES[e - 1] * HIDDEN;
    for (c = 0; c < top_k; c++) { /* selection: largest first, ties to the lowest index */
        int best = -1;
        for (e = 0; e < N_EXPERTS; e++)
            if (!used[e] && (best < 0 || gates[e] > gates[best])) best = e;
        used[best] = 1;
        chosen[c] = best;
    }
    max = gates[chosen[0]];
    for (c = 0; c < top_k; c++) sum += w[c] = exp((double)gates[chosen[c]] - max);
    for (r = 0; r < out_len; r++) out[r] = 0.0;
    for (c = 0; c < top_k; c++) {
        e = chosen[c];
        for (r = 0; r < SIZES[e]; r++) {
            double dot = 0.0;
            for (h = 0; h < HIDDEN; h++) dot += (double)weights[offset[e] + r * HIDDEN + h] * (double)input[h];
            out[r] += w[c] / sum * dot;
        }
    }
}

static int expect_status(const char *what, colibri_status got, colibri_status want) {
    if (got != want) {
        fprintf(stderr, "moe_layer: %s returned %s (%s), expected %s\n", what, colibri_status_str(got),
                colibri_last_error_message(), colibri_status_str(want));
        return 0;
    }
    return 1;
}

int main(int argc, char **argv) {
    colibri_moe *moe = NULL, *rejected = NULL, *half = NULL;
    float *weights = NULL, *kept = NULL, *abs_kept = NULL, input[HIDDEN], abs_input[HIDDEN], ones[HIDDEN];
    float gates[N_EXPERTS], *output = NULL;
    double *want = NULL, *mag = NULL, *wsum = NULL;
    int out_len = 0, total = 0, e, i, t, failures = 0, cases = 0;
    colibri_status st;
    /* Gate vectors: random ones, plus ties that the lowest index must win. */
    static const float fixed_gates[][N_EXPERTS] = {
        {0.5f, 0.5f, 0.5f, 0.5f, 0.5f, 0.5f},      /* all tied: experts 0 and 1 */
        {-1.0f, 3.0f, 3.0f, 3.0f, -2.0f, 0.0f},    /* three-way tie at the top: 1 and 2 */
        {-30.0f, -40.0f, 20.0f, -50.0f, 19.0f, 0.0f}, /* large spread */
        {0.0f, 0.0f, 0.0f, 0.0f, 1e-7f, 0.0f},     /* one barely larger */
    };
    (void)argc;
    (void)argv;

    for (e = 0; e < N_EXPERTS; e++) {
        total += SIZES[e] * HIDDEN;
        if (SIZES[e] > out_len) out_len = SIZES[e];
    }
    weights = (float *)calloc((size_t)total, sizeof *weights);
    kept = (float *)malloc((size_t)total * sizeof *kept);
    output = (float *)malloc((size_t)out_len * sizeof *output);
    want = (double *)malloc((size_t)out_len * sizeof *want);
    abs_kept = (float *)malloc((size_t)total * sizeof *abs_kept);
    mag = (double *)malloc((size_t)out_len * sizeof *mag);
    wsum = (double *)malloc((size_t)out_len * sizeof *wsum);
    if (weights == NULL || kept == NULL || output == NULL || want == NULL || abs_kept == NULL || mag == NULL ||
        wsum == NULL) {
        fprintf(stderr, "moe_layer: out of memory\n");
        failures++;
        goto done;
    }
    for (i = 0; i < total; i++) weights[i] = uniform();

    if ((st = colibri_moe_init(&moe, weights, SIZES, N_EXPERTS, HIDDEN, TOP_K)) != COLIBRI_STATUS_OK) {
        fprintf(stderr, "moe_layer: colibri_moe_init: %s: %s\n", colibri_status_str(st), colibri_last_error_message());
        failures++;
        goto done;
    }
    /* The layer owns a copy of the weights: scribbling over the caller's array after init must
     * not change its results (the reference uses the kept copy). */
    memcpy(kept, weights, (size_t)total * sizeof *kept);
    for (i = 0; i < total; i++) abs_kept[i] = fabsf(kept[i]);
    for (i = 0; i < HIDDEN; i++) ones[i] = 1.0f;
    if ((st = colibri_moe_init_with(&half, kept, SIZES, N_EXPERTS, HIDDEN, TOP_K, COLIBRI_MOE_BF16)) !=
        COLIBRI_STATUS_OK) {
        fprintf(stderr, "moe_layer: colibri_moe_init_with(bf16): %s: %s\n", colibri_status_str(st),
                colibri_last_error_message());
        failures++;
        goto done;
    }
    for (i = 0; i < total; i++) weights[i] = 1e30f;
    for (t = 0; t < 24; t++) {
        const float *g = gates;
        for (i = 0; i < HIDDEN; i++) input[i] = uniform();
        if (t < (int)(sizeof fixed_gates / sizeof fixed_gates[0]))
            g = fixed_gates[t];
        else
            for (e = 0; e < N_EXPERTS; e++) gates[e] = 4.0f * uniform();
        for (i = 0; i < out_len; i++) output[i] = NAN; /* every element must be written */
        if ((st = colibri_moe_infer(moe, input, output, g)) != COLIBRI_STATUS_OK) {
            fprintf(stderr, "moe_layer: colibri_moe_infer: %s: %s\n", colibri_status_str(st),
                    colibri_last_error_message());
            failures++;
            goto done;
        }
        {
            double scale = 1e-30, worst = 0.0;
            reference(kept, input, g, TOP_K, want, out_len);
            for (i = 0; i < out_len; i++)
                if (fabs(want[i]) > scale) scale = fabs(want[i]);
            for (i = 0; i < out_len; i++) {
                double err = fabs((double)output[i] - want[i]);
                if (!(err <= worst)) worst = err; /* NaN propagates to a failure */
            }
            cases++;
            if (!(worst <= 1e-5 * scale + 1e-6)) {
                fprintf(stderr, "moe_layer: case %d: max error %g (output scale %g)\n", t, worst, scale);
                failures++;
            }
        }
        /* The bf16 layer, against its stated bound. */
        for (i = 0; i < HIDDEN; i++) abs_input[i] = fabsf(input[i]);
        reference(abs_kept, abs_input, g, TOP_K, mag, out_len);
        reference(abs_kept, ones, g, TOP_K, wsum, out_len);
        for (i = 0; i < out_len; i++) output[i] = NAN;
        if ((st = colibri_moe_infer(half, input, output, g)) != COLIBRI_STATUS_OK) {
            fprintf(stderr, "moe_layer: colibri_moe_infer(bf16): %s\n", colibri_status_str(st));
            failures++;
            goto done;
        }
        for (i = 0; i < out_len; i++) {
            double err = fabs((double)output[i] - want[i]), bound = mag[i] / 128.0 + wsum[i] * 0x1p-126;
            if (!(err <= bound)) {
                fprintf(stderr, "moe_layer: case %d (bf16): row %d error %g above its bound %g\n", t, i, err, bound);
                failures++;
                break;
            }
        }
    }

    /* Wrong arguments are reported, never crash. */
    if (!expect_status("colibri_moe_init(top_k > n_experts)",
                       colibri_moe_init(&rejected, weights, SIZES, N_EXPERTS, HIDDEN, N_EXPERTS + 1),
                       COLIBRI_STATUS_INVALID_ARGUMENT))
        failures++;
    if (!expect_status("colibri_moe_init(NULL weights)", colibri_moe_init(&rejected, NULL, SIZES, N_EXPERTS, HIDDEN, 1),
                       COLIBRI_STATUS_NULL_ARGUMENT))
        failures++;
    gates[0] = NAN;
    if (!expect_status("colibri_moe_infer(NaN gate)", colibri_moe_infer(moe, input, output, gates),
                       COLIBRI_STATUS_INVALID_ARGUMENT))
        failures++;
    if (!expect_status("colibri_moe_infer(NULL output)", colibri_moe_infer(moe, input, NULL, gates),
                       COLIBRI_STATUS_NULL_ARGUMENT))
        failures++;
    colibri_moe_free(rejected); /* still NULL: a no-op */

    printf("moe_layer: %d experts (rows %d..%d), hidden %d, top-%d: %d cases, %s\n", N_EXPERTS, 1, out_len, HIDDEN,
           TOP_K, cases, failures ? "MISMATCH" : "all match the scalar reference (bf16 storage: within its bound)");

done:
    colibri_moe_free(moe);
    colibri_moe_free(half);
    free(weights);
    free(kept);
    free(abs_kept);
    free(mag);
    free(wsum);
    free(output);
    free(want);
    return failures ? 1 : 0;
}
