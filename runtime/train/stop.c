/* runtime/train/stop.c — SIGINT/SIGTERM: the loop stops after the current
 * step (with a checkpoint when --checkpoint is set) and says how to
 * resume. */
#include <signal.h>
#include <stdatomic.h>
#include <string.h>

#include "runtime/train/internal.h"

/* The first SIGINT/SIGTERM asks the loop to stop after the current step; a
 * second one while it finishes ends the process at once (default action).
 * The count is atomic: two signals may reach two threads at once. */
static volatile sig_atomic_t stop_signal;
static atomic_int stop_signals_seen;

static void on_stop_signal(int sig) {
    if (atomic_fetch_add(&stop_signals_seen, 1) > 0) {
        signal(sig, SIG_DFL);
        raise(sig);
        return;
    }
    stop_signal = sig;
}

void rt_run_catch_signals(struct sigaction old[2]) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_stop_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART; /* reads and waits elsewhere carry on */
    stop_signal = 0;
    atomic_store(&stop_signals_seen, 0);
    sigaction(SIGINT, &sa, &old[0]);
    sigaction(SIGTERM, &sa, &old[1]);
}

void rt_run_release_signals(const struct sigaction old[2]) {
    sigaction(SIGINT, &old[0], NULL);
    sigaction(SIGTERM, &old[1], NULL);
}

/* Every process stops at the same step. */
int rt_run_stop_requested(void) { return rt_mpi_any(stop_signal != 0); }

/* The message for a run stopped by a signal; returns the exit status. */
int rt_run_stopped(rt_run *r, long done, int e, long s) {
    const rt_train_options *o = r->o;
    int sig = stop_signal;
    rt_progress_clear(&r->bar);
    if (o->rank != 0) return 128 + sig;
    if (o->checkpoint)
        fprintf(stderr,
                "%sinterrupted (%s) at epoch %d step %ld (%ld steps done); checkpoint written to "
                "%s; resume with: %s\n",
                o->log_prefix, sig == SIGINT ? "SIGINT" : "SIGTERM", e, s, done, o->checkpoint,
                o->resume_command ? o->resume_command : "the same command with --resume");
    else
        fprintf(
            stderr,
            "%sinterrupted (%s) at epoch %d step %ld (%ld steps done); no checkpoint was written "
            "(--checkpoint DIR keeps one)\n",
            o->log_prefix, sig == SIGINT ? "SIGINT" : "SIGTERM", e, s, done);
    return 128 + sig;
}
