/* preempt.c — the preemption flag and the time budget (see preempt.h). The handler does only
 * what is async-signal-safe: clock_gettime and stores to volatile sig_atomic_t.
 *
 * The three signals are blocked in the calling thread, so in every thread it creates later
 * (OpenMP workers, the data loader): they are delivered to one watcher thread that does nothing
 * but wait for them. A handler that interrupts a compute thread was seen to corrupt the heap
 * inside oneDNN's GEMMs (3 of 6 SIGTERMs mid-step; bench/repro_dnnl_signal.c shows it
 * with an empty handler); and no read, write or fsync of a
 * save is interrupted either. */
#include "preempt.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static volatile sig_atomic_t first_signal = 0;
static volatile sig_atomic_t signal_count = 0;
/* CLOCK_MONOTONIC at the first signal (clock_gettime is async-signal-safe); the seconds of a
 * monotonic clock (time since boot) fit a sig_atomic_t */
static volatile sig_atomic_t notice_sec = 0, notice_msec = 0;

static void on_signal(int sig) {
    if (!first_signal) {
        struct timespec ts;
        if (clock_gettime(CLOCK_MONOTONIC, &ts) == 0) {
            notice_sec = (sig_atomic_t)ts.tv_sec;
            notice_msec = (sig_atomic_t)(ts.tv_nsec / 1000000);
        }
        first_signal = sig;
    }
    if (signal_count < 1000000) signal_count = signal_count + 1;
}

static const int SIGS[] = {SIGTERM, SIGINT, SIGUSR1};
#define N_SIGS (sizeof SIGS / sizeof SIGS[0])

static void sig_set(sigset_t *set) {
    sigemptyset(set);
    for (size_t i = 0; i < N_SIGS; i++) sigaddset(set, SIGS[i]);
}

/* The one thread the signals reach: it unblocks them and sleeps; the handler runs here. */
static void *watcher(void *arg) {
    (void)arg;
    sigset_t set;
    sig_set(&set);
    pthread_sigmask(SIG_UNBLOCK, &set, NULL);
    for (;;) pause();
    return NULL;
}

int hyp_stop_install(hyp_err *e) {
    static int installed = 0;
    if (installed) return HYP_OK;
    const int *sigs = SIGS;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sa.sa_flags = SA_RESTART; /* reads, writes and fsyncs of a save carry on after the handler */
    sig_set(&sa.sa_mask);
    for (size_t i = 0; i < N_SIGS; i++)
        if (sigaction(sigs[i], &sa, NULL) != 0)
            return hyp_fail(e, HYP_EFAIL, "sigaction(%s): %s", hyp_stop_signal_name(sigs[i]), strerror(errno));
    sigset_t set;
    sig_set(&set);
    int rc = pthread_sigmask(SIG_BLOCK, &set, NULL);
    pthread_t t;
    if (!rc) rc = pthread_create(&t, NULL, watcher, NULL);
    if (!rc) rc = pthread_detach(t);
    if (rc) return hyp_fail(e, HYP_EFAIL, "the signal watcher thread: %s", strerror(rc));
    installed = 1;
    return HYP_OK;
}

int hyp_stop_signal(void) { return first_signal; }
int hyp_stop_signal_count(void) { return signal_count; }
double hyp_stop_notice_time(void) { return first_signal ? notice_sec + notice_msec * 1e-3 : 0; }

const char *hyp_stop_signal_name(int sig) {
    switch (sig) {
    case SIGTERM: return "SIGTERM";
    case SIGINT: return "SIGINT";
    case SIGUSR1: return "SIGUSR1";
    default: return "a signal";
    }
}

double hyp_stop_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

void hyp_stop_init(hyp_stop *s, double deadline, double ckpt_bytes) {
    memset(s, 0, sizeof *s);
    s->t_start = hyp_stop_now();
    s->deadline = deadline;
    s->ckpt_bytes = ckpt_bytes;
}

void hyp_stop_note_step(hyp_stop *s, double seconds) {
    if (seconds > s->step_max) s->step_max = seconds;
}

void hyp_stop_note_ckpt(hyp_stop *s, double seconds) { s->ckpt_last = seconds; }

double hyp_stop_ckpt_estimate(const hyp_stop *s) {
    return s->ckpt_last > 0 ? s->ckpt_last : 0.05 + s->ckpt_bytes / 100e6;
}

int hyp_stop_deadline_near(const hyp_stop *s, double now) {
    if (s->deadline <= 0) return 0;
    double need = 1.25 * (s->step_max + hyp_stop_ckpt_estimate(s));
    return now + need > s->t_start + s->deadline;
}
