/* preempt.h — stopping a run cleanly before it is killed: preemption notices and time budgets.
 *
 * Every trainer installs the handler (hyp_stop_install): SIGTERM, SIGINT and SIGUSR1 only record
 * the signal (async-signal-safe: one sig_atomic_t store and a counter); the step driver asks
 * hyp_stop_pending after each optimizer step, so the step in flight always finishes, and a
 * checkpoint is written at a step boundary. A second signal while the trainer is saving is
 * counted and otherwise ignored: the save goes on (and ckpt.c's saves are atomic, so even a
 * SIGKILL leaves `latest` naming a complete checkpoint).
 *
 * A time budget (--deadline SECONDS from the start of the process) stops the run the same way at
 * the last step after which another step plus a checkpoint would not finish in time, from the
 * measured step and checkpoint-write times (hyp_stop_note_*).
 *
 * Under mpirun the caller all-reduces (max) the answer once per step so that every rank stops
 * after the same step. Never: exits, output, or anything that is not async-signal-safe inside the
 * handler. */
#ifndef HYP_PREEMPT_H
#define HYP_PREEMPT_H

#include "hyp_err.h"

/* The trainer's exit statuses for a run that stopped before its last step. */
#define HYP_EXIT_STOPPED_SAVED 3   /* a signal or --deadline: checkpoint written, --resume continues */
#define HYP_EXIT_STOPPED_UNSAVED 4 /* a signal, and no --ckpt-dir: nothing could be saved */

typedef struct {
    double t_start;          /* monotonic seconds when the process started its clock */
    double deadline;         /* seconds after t_start the run must have exited by; 0: none */
    double step_max;         /* the longest optimizer step measured so far */
    double ckpt_last;        /* the last measured checkpoint write; 0: none measured yet */
    double ckpt_bytes;       /* bytes a checkpoint writes (for the estimate before one is measured) */
} hyp_stop;

/* SIGTERM, SIGINT and SIGUSR1 set the flag (sigaction, SA_RESTART). */
int hyp_stop_install(hyp_err *e);
/* The first signal received (0: none), and how many arrived in all. */
int hyp_stop_signal(void);
int hyp_stop_signal_count(void);
/* hyp_stop_now() at the first signal, to the millisecond; 0 before any */
double hyp_stop_notice_time(void);
const char *hyp_stop_signal_name(int sig);

double hyp_stop_now(void);
void hyp_stop_init(hyp_stop *s, double deadline, double ckpt_bytes);
void hyp_stop_note_step(hyp_stop *s, double seconds);
void hyp_stop_note_ckpt(hyp_stop *s, double seconds);
/* The time a checkpoint is expected to take: the last measured one, or before any, an estimate at
 * 100 MB/s plus 50 ms. */
double hyp_stop_ckpt_estimate(const hyp_stop *s);
/* 1 when the deadline is set and another step plus a checkpoint (each with a 25% margin) would not
 * end before it. */
int hyp_stop_deadline_near(const hyp_stop *s, double now);

#endif
