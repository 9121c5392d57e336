/*
 * A pre-forking server's pattern: open the model and run a forward pass in the parent (its
 * worker threads now exist), fork(), then run forward passes in the child and in the parent.
 * The model's pages are shared by both processes; the child starts worker threads of its own at
 * its first call (the parent's do not exist in a child). Every result must equal the parent's
 * first one, and the child must finish.
 *
 *   fork MODEL.colibri [N_THREADS]            (default 0: one thread per physical core)
 *
 * Prints one line; exits 0 when the child (within 120 s) and the parent both reproduced the
 * logits, 1 otherwise (a child that hangs is killed).
 */
#define _POSIX_C_SOURCE 200809L
#include <colibri.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define N_PROMPT 5
#define CHILD_SECONDS 120

static const int32_t PROMPT[N_PROMPT] = {1, 7, 42, 3, 9};

static int report(const char *who, const char *what, colibri_status st) {
    fprintf(stderr, "fork: %s: %s: %s: %s\n", who, what, colibri_status_str(st), colibri_last_error_message());
    return 0;
}

/* The last position's logits of PROMPT on a new session of `model`; 1 on success. */
static int run(const char *who, colibri_model *model, float *logits, size_t vocab) {
    colibri_session *s = NULL;
    colibri_status st = colibri_session_new(model, NULL, &s);
    if (st != COLIBRI_STATUS_OK) return report(who, "colibri_session_new", st);
    st = colibri_infer(s, PROMPT, N_PROMPT, logits, vocab);
    colibri_session_free(s);
    if (st != COLIBRI_STATUS_OK) return report(who, "colibri_infer", st);
    return 1;
}

/* Wait for `pid` up to CHILD_SECONDS, killing it past that; its exit status, -1 on a timeout. */
static int wait_child(pid_t pid) {
    const struct timespec tick = {0, 10 * 1000 * 1000};
    int status = 0, i;
    for (i = 0; i < CHILD_SECONDS * 100; i++) {
        pid_t r = waitpid(pid, &status, WNOHANG);
        if (r == pid) return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        if (r < 0) return -1;
        nanosleep(&tick, NULL);
    }
    kill(pid, SIGKILL);
    waitpid(pid, &status, 0);
    return -1;
}

int main(int argc, char **argv) {
    colibri_model_params mp;
    colibri_model_info info;
    colibri_model *model = NULL;
    colibri_status st;
    float *want, *got;
    pid_t pid;
    int ok, child;
    if (argc < 2 || argc > 3) {
        fprintf(stderr, "usage: fork MODEL.colibri [N_THREADS]\n");
        return 2;
    }
    colibri_model_params_init(&mp);
    mp.n_threads = argc == 3 ? (uint32_t)atoi(argv[2]) : 0;
    colibri_model_info_init(&info);
    if ((st = colibri_model_open(argv[1], &mp, &model)) != COLIBRI_STATUS_OK)
        return report("parent", "colibri_model_open", st), 1;
    if ((st = colibri_model_get_info(model, &info)) != COLIBRI_STATUS_OK) {
        colibri_model_free(model);
        return report("parent", "colibri_model_get_info", st), 1;
    }
    want = calloc(info.vocab_size, sizeof *want);
    got = calloc(info.vocab_size, sizeof *got);
    ok = want && got && run("parent", model, want, info.vocab_size);
    if (!ok) {
        free(want);
        free(got);
        colibri_model_free(model);
        return 1;
    }
    fflush(NULL); /* nothing buffered is written twice */
    pid = fork();
    if (pid == 0) {
        ok = run("child", model, got, info.vocab_size) && memcmp(got, want, info.vocab_size * sizeof *got) == 0;
        free(want);
        free(got);
        colibri_model_free(model);
        exit(ok ? 0 : 1);
    }
    ok = pid > 0 && run("parent", model, got, info.vocab_size) &&
         memcmp(got, want, info.vocab_size * sizeof *got) == 0;
    child = pid > 0 ? wait_child(pid) : -1;
    free(want);
    free(got);
    colibri_model_free(model);
    if (pid < 0) return fprintf(stderr, "fork: fork() failed\n"), 1;
    if (child != 0) {
        printf("fork: the child %s\n", child < 0 ? "hung (killed after 120 s)" : "failed");
        return 1;
    }
    if (!ok) return printf("fork: the parent's logits changed after the fork\n"), 1;
    printf("fork: parent and child reproduced the logits after fork()\n");
    return 0;
}
