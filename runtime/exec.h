/* exec.h — the plan executor of the CPU backend: binds a validated plan to memory (one
 * parameter arena, its gradient and AdamW-state twins, one activation arena) and runs the
 * forward, loss and backward op lists through ops_cpu.h. Holds no training policy: the step
 * (accumulation, clipping, schedule, optimizer) lives in train.c. */
#ifndef HYP_EXEC_H
#define HYP_EXEC_H

#include <stdint.h>

#include "hyp_err.h"
#include "fp8.h"
#include "plan.h"

typedef struct {
    const plan_t *p;
    float *params, *grads, *m, *v; /* [param_floats] each */
    float *acts;                    /* [act_floats] */
    int32_t *tokens, *targets;      /* [maxB * maxT] */
    int B, T;                       /* bound batch shape (<= the plan's) */
    size_t bytes;                   /* total bytes allocated */
    /* data parallelism / ZeRO (v2104): the parameter arena is cut into `world` equal shards of
     * `shard` floats (the arena is padded to world * shard); rank `rank` owns shard `rank`. */
    int world, rank, stage;
    int64_t shard;
    float *gshard;                  /* [shard] reduced gradients of the own shard (stage >= 2) */
    hyp_fp8_state *fp8;             /* [plan fp8_slots] v2160 per-operand scaling states */
    /* bytes per category, for reporting; with stage >= 2 the full-size gradient buffer is only the
     * backward pass's accumulation workspace (bytes_grad_workspace) and the gradients kept for the
     * optimizer are the reduced shard (bytes_grads) */
    size_t bytes_params, bytes_grads, bytes_grad_workspace, bytes_optim, bytes_acts;
} exec_t;

int exec_init(exec_t *x, const plan_t *p, hyp_err *e);
/* Like exec_init for rank `rank` of `world` under ZeRO stage 0..3: stage >= 1 allocates AdamW
 * moments for the own shard only, stage >= 2 a reduced-gradient shard. */
int exec_init_dp(exec_t *x, const plan_t *p, int world, int rank, int stage, hyp_err *e);
void exec_free(exec_t *x);
/* Binds the batch shape for the following runs; B <= plan B, T <= plan T. */
int exec_bind(exec_t *x, int B, int T, hyp_err *e);
/* Initializes parameters from the plan's init rules with the given seed (deterministic). */
void exec_init_params(exec_t *x, uint64_t seed);
/* Forward pass up to the logits. */
void exec_forward(exec_t *x);
/* Mean loss over non-ignored targets without gradients (evaluation). */
float exec_eval_loss(exec_t *x);
/* Fused loss + dlogits (scaled by dloss) then the backward pass, accumulating into grads.
 * Returns the mean loss of this micro-batch. */
float exec_backward(exec_t *x, float dloss);
/* v2160: ends an optimizer step for the FP8 scaling states (after the amax of this step's slot
 * has been reduced across ranks by the caller, if any): rolls the amax histories, new scales. */
void exec_fp8_step(exec_t *x);
/* Pointer to a buffer by index. */
float *exec_buf(exec_t *x, int idx);
/* Counts targets >= 0 of the bound batch. */
int64_t exec_count_targets(const exec_t *x);

#endif
