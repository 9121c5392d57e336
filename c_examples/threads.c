/*
 * One model shared by two threads, each with its own session, generating concurrently. A model
 * is immutable and safe to share (`const colibri_model *`); a session belongs to one thread at a
 * time. Both threads must reproduce the single-threaded results exactly, round after round.
 *
 *   threads MODEL.colibri [N [ROUNDS]]          (defaults: N = 24 tokens, ROUNDS = 3)
 *
 * Prints the reference ids of each prompt, then one line per thread; exits 0 only when every
 * concurrent result equals its reference.
 */
#define _POSIX_C_SOURCE 200809L
#include <colibri.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define N_THREADS 2
#define MAX_TOKENS 4096

static const char *const PROMPTS[N_THREADS] = {"Hello", "The quick brown fox jumps over the lazy dog"};

typedef struct {
    const colibri_model *model;
    const char *prompt;
    int n_predict;
    int rounds;
    int32_t reference[MAX_TOKENS];
    size_t n_reference;
    int mismatches;
    int failed;     /* a library call failed */
    char error[512];
} job;

static void fail(job *j, const char *what, colibri_status st) {
    /* The last error message is per thread: read it on the thread that made the call. */
    snprintf(j->error, sizeof j->error, "%s: %s: %s", what, colibri_status_str(st), colibri_last_error_message());
    j->failed = 1;
}

/* Greedy generation of j->n_predict tokens for j->prompt on a fresh session. */
static int generate(job *j, int32_t *out, size_t *n_out) {
    colibri_session *session = NULL;
    colibri_generate_params gp;
    colibri_generate_result res;
    int32_t prompt[512];
    size_t n_prompt = 0;
    colibri_status st;
    int ok = 0;

    if ((st = colibri_session_new(j->model, NULL, &session)) != COLIBRI_STATUS_OK) {
        fail(j, "colibri_session_new", st);
        return 0;
    }
    st = colibri_tokenize(j->model, j->prompt, strlen(j->prompt), 1, prompt, sizeof prompt / sizeof prompt[0],
                          &n_prompt);
    if (st != COLIBRI_STATUS_OK) {
        fail(j, "colibri_tokenize", st);
        goto done;
    }
    colibri_generate_params_init(&gp);
    gp.temperature = 0.0f;
    gp.ignore_eos = 1;
    gp.max_tokens = j->n_predict;
    colibri_generate_result_init(&res);
    st = colibri_generate(session, prompt, n_prompt, &gp, NULL, NULL, out, (size_t)j->n_predict, &res);
    if (st != COLIBRI_STATUS_OK) {
        fail(j, "colibri_generate", st);
        goto done;
    }
    *n_out = res.n_tokens;
    ok = 1;
done:
    colibri_session_free(session);
    return ok;
}

static void *worker(void *arg) {
    job *j = (job *)arg;
    int32_t out[MAX_TOKENS];
    size_t n = 0;
    int r;
    for (r = 0; r < j->rounds; r++) {
        if (!generate(j, out, &n)) return NULL;
        if (n != j->n_reference || memcmp(out, j->reference, n * sizeof out[0]) != 0) j->mismatches++;
    }
    return NULL;
}

static int parse_int(const char *s, int lo, int hi, int *out) {
    char *end;
    long v;
    errno = 0;
    v = strtol(s, &end, 10);
    if (errno != 0 || end == s || *end != '\0' || v < lo || v > hi) return 0;
    *out = (int)v;
    return 1;
}

int main(int argc, char **argv) {
    colibri_model *model = NULL;
    colibri_status st;
    static job jobs[N_THREADS];
    pthread_t tid[N_THREADS];
    int started[N_THREADS] = {0};
    int n_predict = 24, rounds = 3, i, rc = 1;
    size_t t;

    if (argc < 2 || argc > 4 || (argc >= 3 && !parse_int(argv[2], 1, MAX_TOKENS, &n_predict)) ||
        (argc == 4 && !parse_int(argv[3], 1, 1000, &rounds))) {
        fprintf(stderr, "usage: %s MODEL.colibri [N (1..%d) [ROUNDS (1..1000)]]\n", argv[0], MAX_TOKENS);
        return 2;
    }
    if ((st = colibri_model_open(argv[1], NULL, &model)) != COLIBRI_STATUS_OK) {
        fprintf(stderr, "threads: colibri_model_open: %s: %s\n", colibri_status_str(st), colibri_last_error_message());
        return 1;
    }

    /* The single-threaded references, computed before any thread starts. */
    for (i = 0; i < N_THREADS; i++) {
        job *j = &jobs[i];
        j->model = model;
        j->prompt = PROMPTS[i];
        j->n_predict = n_predict;
        j->rounds = rounds;
        if (!generate(j, j->reference, &j->n_reference)) {
            fprintf(stderr, "threads: reference %d: %s\n", i, j->error);
            goto done;
        }
        printf("reference[%d] ids:", i);
        for (t = 0; t < j->n_reference; t++) printf(" %ld", (long)j->reference[t]);
        printf("\n");
    }

    for (i = 0; i < N_THREADS; i++) {
        int e = pthread_create(&tid[i], NULL, worker, &jobs[i]);
        if (e != 0) {
            fprintf(stderr, "threads: pthread_create: %s\n", strerror(e));
            break;
        }
        started[i] = 1;
    }
    rc = 0;
    for (i = 0; i < N_THREADS; i++) {
        if (!started[i]) {
            rc = 1;
            continue;
        }
        pthread_join(tid[i], NULL);
        if (jobs[i].failed) {
            fprintf(stderr, "threads: thread %d: %s\n", i, jobs[i].error);
            rc = 1;
        } else if (jobs[i].mismatches) {
            printf("thread %d: MISMATCH in %d of %d rounds\n", i, jobs[i].mismatches, rounds);
            rc = 1;
        } else {
            printf("thread %d: %d rounds equal to the reference (%lu tokens each)\n", i, rounds,
                   (unsigned long)jobs[i].n_reference);
        }
    }

done:
    colibri_model_free(model);
    return rc;
}
