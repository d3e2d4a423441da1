/* prof_dev.h — device timing for the op profiler (v2184): a pair of events around each plan op on
 * the compute stream (cudaEvents on cuda; on sim the host clock when the simulator's lazy queue
 * reaches each record), resolved into spans on the device track after the step synchronized.
 *
 * sim: the duration between two events of the default stream is the host time the simulator spent
 * running the commands between them (its kernels run on the CPU, lazily, in stream order): an
 * honest measure of the simulation, not a prediction of a GPU's time.
 *
 * Never: a failure that reaches the step (a span that cannot be timed is dropped and counted). */
#ifndef HYP_PROF_DEV_H
#define HYP_PROF_DEV_H

#include <stdint.h>

#include "device.h"
#include "plan.h"

/* Records the start event of op o (on d's default stream) while profiling; returns a handle for
 * hyp_prof_dev_end, -1 when not profiling or when the event could not be recorded. */
int hyp_prof_dev_begin(hyp_device *d);
/* Records the end event of the op begun as h, op o of p at the bound batch B x T. */
void hyp_prof_dev_end(hyp_device *d, int h, const plan_t *p, const plan_op *o, int64_t B, int64_t T);

#endif
