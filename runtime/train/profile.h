/* profile.h — the trainer's profiling (v2184) and memory profile (v2185): which steps are
 * profiled, the Chrome/Perfetto trace and the per-op summary table written after them, and the
 * memory profile (memprof.h) with the measured arena high-water mark and peak RSS against the plan.
 *
 *   train --profile FILE|none       the trace (Trace Event Format JSON; rank r > 0 writes FILE.rankR)
 *         --profile-steps A:B       the profiled steps, inclusive (default: the plan's v2184 window,
 *                                   else the 3 steps after the warm-up step(s) the tokens/s skip)
 *         --memory-profile FILE|none the memory profile SVG (rank 0)
 * A trainer generated with v2184 / v2185 writes trace.json / memory.svg beside plan.json by
 * default (plan sections profile / memory_profile); `none` turns that off.
 *
 * The train loop calls train_prof_step_begin / _end around each step; inside the window the op
 * recorder (core/prof.h) is on from the first step's begin to the begin of the first step after
 * the window, so evaluations and checkpoints of the window's steps are in the trace too (outside
 * the steps' sums). Never: change what a step computes, or print outside rank 0's stdout.
 */
#ifndef HYP_PROFILE_H
#define HYP_PROFILE_H

#include <limits.h>

#include "backend.h"
#include "memprof.h"
#include "prof.h"

typedef struct {
    hyp_prof rec;
    char trace[PATH_MAX], svg[PATH_MAX];
    int want_trace, want_svg;
    int first, last;            /* the window (inclusive); resolved at the first step */
    int have_window, from_flag, resolved, written;
    int rank, world;
    const plan_t *p;
    double step_us;             /* measured time of the window's steps (train_step), summed */
    int steps;
    double base_rss_mib;        /* VmRSS when train_prof_open ran (before the executors) */
    memprof mem;
    int64_t hw, written_bytes;  /* arena high-water / written bytes (-1: not measured) */
    int armed;
    float *armed_acts;
} train_prof;

/* From the flags (NULL: not given) and the plan's sections; paths of the plan's sections are
 * relative to plan_dir. Bad flags: HYP_EINPUT with "train: ..." in e. Before the executors exist
 * (it reads the baseline RSS). */
int train_prof_open(train_prof *t, const char *profile, const char *steps, const char *memory_profile, const plan_t *p,
                    const char *plan_path, int rank, int world, hyp_err *e);
/* Before step `step` of a run that trains steps start+1 .. last (the first call checks the window
 * against them: a --profile-steps outside the run is HYP_EINPUT). */
int train_prof_step_begin(train_prof *t, train_backend *b, int step, int start, int last, hyp_err *e);
/* After the step (train_step's time dt_s); after the window's last step, writes the outputs. */
int train_prof_step_end(train_prof *t, train_backend *b, int step, double dt_s, hyp_err *e);
/* At the end of the run: writes what the window left unwritten (a run stopped early). */
int train_prof_finish(train_prof *t, train_backend *b, hyp_err *e);
void train_prof_close(train_prof *t);

#endif
