/* runtime/train/stop.c — stopping a run in order: on SIGINT, SIGTERM or
 * SIGHUP, or when stdout is closed (report.c), the loop stops after the
 * current step (with a checkpoint when --checkpoint is set), a final
 * evaluation stops at its next batch, set-up at its end, and the run says
 * where it stopped and how to resume; the exit status is 128 + the signal
 * (130, 143, 129; 141 for a closed stdout), never 0.
 *
 * The handlers are in place from rt_train's first check to its end, so no
 * signal of these kills a run half set up or half evaluated; SIGPIPE is
 * ignored meanwhile, so a write to a closed pipe fails with EPIPE instead
 * of killing the process. */
#include <signal.h>
#include <stdatomic.h>
#include <string.h>

#include "runtime/train/internal.h"
#include "runtime/log.h"

/* The first signal asks the run to stop; a second one while it finishes
 * ends the process at once (default action). The count is atomic: two
 * signals may reach two threads at once. */
static volatile sig_atomic_t stop_signal;
static atomic_int stop_signals_seen;

static const int caught[RT_STOP_SIGNALS] = {SIGINT, SIGTERM, SIGHUP, SIGPIPE};

static void on_stop_signal(int sig) {
    if (atomic_fetch_add(&stop_signals_seen, 1) > 0) {
        signal(sig, SIG_DFL);
        raise(sig);
        return;
    }
    stop_signal = sig;
}

void rt_run_catch_signals(struct sigaction old[RT_STOP_SIGNALS]) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_stop_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART; /* reads and waits elsewhere carry on */
    stop_signal = 0;
    atomic_store(&stop_signals_seen, 0);
    for (int i = 0; i < RT_STOP_SIGNALS; i++) {
        struct sigaction ign;
        memset(&ign, 0, sizeof ign);
        ign.sa_handler = SIG_IGN;
        sigemptyset(&ign.sa_mask);
        sigaction(caught[i], caught[i] == SIGPIPE ? &ign : &sa, &old[i]);
    }
}

void rt_run_release_signals(const struct sigaction old[RT_STOP_SIGNALS]) {
    for (int i = 0; i < RT_STOP_SIGNALS; i++) sigaction(caught[i], &old[i], NULL);
}

void rt_run_request_stop(int sig) {
    if (atomic_fetch_add(&stop_signals_seen, 1) == 0) stop_signal = sig;
}

int rt_run_stop_pending(void) { return stop_signal != 0; }

/* Every process stops at the same step. */
int rt_run_stop_requested(void) { return rt_mpi_any(stop_signal != 0); }

static const char *why(int sig) {
    return sig == SIGINT    ? "SIGINT"
           : sig == SIGTERM ? "SIGTERM"
           : sig == SIGHUP  ? "SIGHUP"
           : sig == SIGPIPE ? "stdout closed"
                            : "signal";
}

int rt_run_stopped(rt_run *r, const char *where, long done, int saved) {
    const rt_train_options *o = r->o;
    int sig = stop_signal;
    rt_progress_clear(&r->bar);
    if (o->rank != 0) return 128 + sig;
    if (saved > 0)
        rt_log(RT_LOG_INFO,
               "interrupted (%s) %s (%ld steps done); checkpoint written to %s; resume with: "
               "%s",
               why(sig), where, done, o->checkpoint,
               o->resume_command ? o->resume_command : "the same command with --resume");
    else if (saved < 0)
        rt_log(RT_LOG_INFO, "interrupted (%s) %s", why(sig), where);
    else if (o->benchmark)
        rt_log(RT_LOG_INFO, "interrupted (%s) %s (%ld steps done)", why(sig), where, done);
    else
        rt_log(RT_LOG_INFO,
               "interrupted (%s) %s (%ld steps done); no checkpoint was written "
               "(--checkpoint DIR keeps one)",
               why(sig), where, done);
    return 128 + sig;
}

int rt_run_setup_stopped(rt_run *r, int rc) {
    if (rc ? !rt_run_stop_pending() : !rt_run_stop_requested()) return rc;
    const rt_train_options *o = r->o;
    rt_progress_clear(&r->bar);
    r->error[0] = 0; /* a failure the signal caused is no error of the run */
    if (o->rank == 0)
        rt_log(RT_LOG_INFO, "interrupted (%s) before training started; no file was written",
               why(stop_signal));
    return 128 + stop_signal;
}
