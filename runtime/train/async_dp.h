/* async_dp.h — v2174 bounded-staleness asynchronous data parallelism on the cpu backend: each
 * step's gradient all-reduce is started non-blocking (hyp_coll_iallreduce_f32) on a copy of the
 * rank's gradients, and the sum is applied `staleness` (s) steps later: the update of step t uses
 * the data-parallel mean gradient of step t - s (computed at the weights of step t - s), so the
 * transfer can proceed while the next s steps compute. Steps 1..s apply nothing (no gradient has
 * arrived); the update of step t is update number t - s in every other respect (optimizer step
 * count and learning rate of step t - s), so the first update equals synchronous dp's first one.
 * s = 0 waits at once: synchronous dp through the non-blocking path. Deterministic: the same
 * gradients are applied at the same steps whatever the timing (Hogwild's racing writes are not).
 * Never: sharded parameters (ZeRO, refused), device arenas, the optimizer itself, printing. */
#ifndef HYP_ASYNC_DP_H
#define HYP_ASYNC_DP_H

#include "exec.h"
#include "plan.h"
#include "train.h"

typedef struct train_async_dp train_async_dp;

/* The plan's async_dp section over x's replicated gradient arena (stage 0). HYP_EINPUT at a ZeRO
 * stage or a tp mesh. */
int train_async_open(train_async_dp **out, const plan_t *p, const exec_t *x, const dp_t *d, hyp_err *e);
/* Waits for the reductions still in flight (their gradients are dropped) and frees. */
void train_async_close(train_async_dp *a, const dp_t *d);
/* In place of the blocking all-reduce of step `step` (1-based, consecutive from the run's first,
 * which is 1 or a resumed run's start + 1): copies x->grads into the ring, starts their all-reduce,
 * then (from the run's first step + s on) waits for step - s's and puts that sum into x->grads;
 * *ready = 1 then, else 0 (x->grads zeroed: nothing to apply). Collective. */
int train_async_grads(train_async_dp *a, exec_t *x, const dp_t *d, int step, int *ready, hyp_err *e);
int train_async_staleness(const train_async_dp *a);
/* 1 when a progress thread drives the reductions in flight (world > 1, staleness > 0, MPI with
 * MPI_THREAD_MULTIPLE, HYP_ASYNC_PROGRESS not 0). */
int train_async_threaded(const train_async_dp *a);
/* One phrase for the banner: "async dp (v2174): ..." */
const char *train_async_describe(const train_async_dp *a, char *buf, size_t n);

#endif
