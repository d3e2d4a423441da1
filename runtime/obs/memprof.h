/* memprof.h — the memory profile of a plan (v2185): every activation buffer's lifetime over the
 * step's schedule (forward ++ backward, the rule of generator/lua/plan.lua's P.lifetimes, which
 * the v2167 memory planner laid the arena out from), the live bytes after each op, the peak and
 * the buffers live at it; the arena timeline and the peak by buffer as an SVG; and what the
 * trainer measured: the activation arena's high-water mark (a sentinel fill before a step, the
 * highest byte the step wrote) and the process's peak RSS against the bytes the executors planned.
 *
 * Never: change what a step computes (the sentinel fill happens only under --memory-profile and
 * only over bytes the plan says every step writes before it reads them).
 */
#ifndef HYP_MEMPROF_H
#define HYP_MEMPROF_H

#include <stdint.h>

#include "hyp_err.h"
#include "plan.h"

typedef struct {
    int buf;               /* index into plan_t.bufs */
    int first, last;       /* schedule positions 1..n_sched (the losses live to n_sched + 1) */
} memprof_item;

typedef struct {
    memprof_item *it;
    int n, n_sched;        /* items; ops of forward ++ backward */
    int64_t *live;         /* [n_sched + 2]: f32 bytes live at position i (numel x 4, as the plan's
                              act_bytes_peak_live counts them) */
    int64_t peak;          /* the largest live[i] */
    int peak_at;           /* its first position */
    int64_t peak_fwd, peak_bwd; /* the peak over forward positions, over backward positions */
    int64_t top_end;       /* the end of the highest buffer in the arena (act_bytes adds its alignment) */
} memprof;

/* The lifetimes of p's activation buffers (those an op of forward or backward touches). */
int memprof_build(memprof *m, const plan_t *p, hyp_err *e);
void memprof_free(memprof *m);
/* Whether item k is live at schedule position i. */
static inline int memprof_live_at(const memprof *m, int k, int i) { return m->it[k].first <= i && i <= m->it[k].last; }

/* What the trainer measured, for the report and the SVG (negative = not measured). */
typedef struct {
    int64_t arena_high_water;   /* bytes: 1 + the highest byte of the activation arena a step wrote */
    int64_t arena_written;      /* bytes of the arena that step wrote */
    double rss_base_mib, rss_peak_mib; /* VmRSS before the executors existed, peak RSS at the end */
    double planned_mib;         /* bytes the executors allocate (host, and device on sim) */
    const char *where;          /* "cpu", "sim" ... */
} memprof_measured;

/* The SVG: the arena timeline (a bar per buffer: x its lifetime, y its arena offset) over the
 * live-bytes curve, and the buffers live at the peak, largest first; measured values in the
 * caption. Written atomically. */
int memprof_write_svg(const memprof *m, const plan_t *p, const memprof_measured *ms, const char *path, hyp_err *e);

/* The sentinel the arena is filled with before a measured step (a quiet NaN no op produces). */
void memprof_arm(float *acts, int64_t floats);
/* After the step: the high-water mark and the written bytes of the arena. */
void memprof_scan(const float *acts, int64_t floats, int64_t *high_water, int64_t *written);

#endif
