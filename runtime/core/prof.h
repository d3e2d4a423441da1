/* prof.h — the recorder of the op profiler (v2184): complete spans (name, category, track,
 * start, duration, FLOPs) of a window of training steps, kept in memory until train/profile.c
 * writes them as a Chrome trace and a per-op table.
 *
 * The executors and the step driver call the hooks below around each plan op and each phase of
 * a step. Outside the profiled window hyp_prof_cur is NULL: a hook then costs one load of that
 * global and a branch (measured in docs/infrastructure.md, "Profiling"). The device layer adds its
 * event-timed spans through hyp_prof_add after a synchronization (device/prof_dev.c).
 *
 * Never: I/O, printing, or any effect on what the step computes; a hook never fails (a span that
 * does not fit in memory is counted in `dropped` and the trace says so).
 */
#ifndef HYP_PROF_H
#define HYP_PROF_H

#include <stdint.h>

#include "plan.h"

/* Span categories: the trace's "cat" field and the summary's grouping. */
typedef enum {
    HYP_PROF_STEP,       /* envelopes: a step, a micro-batch, an evaluation */
    HYP_PROF_FORWARD,    /* forward ops */
    HYP_PROF_BACKWARD,   /* backward ops (the fused loss + dlogits op included), gradient zeroing */
    HYP_PROF_OPTIMIZER,  /* the gradient norm / clip factor, the optimizer, the end of the step */
    HYP_PROF_DATA,       /* waiting for the loader's next batch */
    HYP_PROF_COMM,       /* collectives the driver calls, the gradient reduction under several ranks */
    HYP_PROF_CHECKPOINT, /* writing a checkpoint */
    HYP_PROF__COUNT
} hyp_prof_cat;

/* Trace tracks (Chrome "tid"): the host thread, the device's compute stream. */
enum { HYP_PROF_TID_HOST = 1, HYP_PROF_TID_DEVICE = 2,
       HYP_PROF_TID_COMM = 3 /* v2168: communication helper k of the cpu trainer is track 3 + k */ };

typedef struct {
    char name[40];     /* an op's registry name, or the phase's name */
    char detail[40];   /* an op's first output buffer ("" for phases) */
    int8_t cat, tid;
    int8_t leaf;       /* 1: its time is part of the step's sum of op times; 0: an envelope */
    int8_t pass;       /* ops: 0 forward, 1 backward, 2 the plan's loss op; -1 phases */
    int16_t op;        /* the op's registry id, -1 for phases */
    int32_t index;     /* the op's index in its pass, -1 for phases */
    int32_t step;      /* the training step it belongs to, 0 outside a step */
    double ts_us, dur_us;
    double flops;      /* model FLOPs of the op at the bound batch (0: unknown) */
} hyp_prof_span;

typedef struct hyp_prof {
    hyp_prof_span *spans;
    int n, cap;
    long dropped;      /* spans that did not fit in memory */
    int step;          /* the step in flight, 0 between steps */
    /* the device layer's pending events (device/prof_dev.c); flushed by hyp_prof_flush */
    void *dev;
    int (*dev_flush)(struct hyp_prof *p);
    void (*dev_free)(void *dev);
} hyp_prof;

/* The recorder of the profiled window, NULL outside it (set by train/profile.c). */
extern hyp_prof *hyp_prof_cur;

/* CLOCK_MONOTONIC in microseconds (the trace's time base, shared with the device events). */
double hyp_prof_now_us(void);
/* hyp_prof_now_us() while profiling, else 0 (what a phase hook stores before the phase). */
static inline double hyp_prof_t(void) { return hyp_prof_cur ? hyp_prof_now_us() : 0.0; }

/* Appends a span (copied; the caller sets its step, usually p->step). */
void hyp_prof_add(hyp_prof *p, const hyp_prof_span *s);
/* A host phase from t0_us (hyp_prof_t() before it) to now: a no-op outside the window. */
void hyp_prof_phase(const char *name, hyp_prof_cat cat, int leaf, double t0_us);
/* Fills s for plan op o of p (its pass and index found from where o lies in p's op lists, its
 * name, first output and FLOPs at the bound batch B x T); the caller sets tid, ts and dur. */
void hyp_prof_op_span(const plan_t *p, const plan_op *o, int64_t B, int64_t T, hyp_prof_span *s);
/* The host executor's hook: op o of p ran from t0_us to now at the bound batch B x T. */
void hyp_prof_op(const plan_t *p, const plan_op *o, int64_t B, int64_t T, double t0_us);
/* Model FLOPs of op o at batch B x T, the plan's convention (formulas.lua, PaLM: causal masking not
 * discounted): matmul_fwd 2·N·IC·OC, matmul_bwd 2·N·IC·OC per gradient it writes (dx, dw);
 * attention forward (naive or flash) 4·B·NH·T²·hd, backward 8·B·NH·T²·hd; 0 for other ops. */
double hyp_prof_op_flops(const plan_op *o, int64_t B, int64_t T);
/* Resolves the device layer's pending spans (after its stream was synchronized). */
int hyp_prof_flush(hyp_prof *p);
void hyp_prof_free(hyp_prof *p);
const char *hyp_prof_cat_name(int cat);

#endif
