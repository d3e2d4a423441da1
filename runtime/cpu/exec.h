/* exec.h — the plan executor of the CPU backend: binds a validated plan to memory (one
 * parameter arena, its gradient and optimizer-state twins, one activation arena) and runs the
 * forward, loss and backward op lists through ops_cpu.h. Holds no training policy: the step
 * (accumulation, clipping, schedule, optimizer) lives in train.c. */
#ifndef HYP_EXEC_H
#define HYP_EXEC_H

#include <stdint.h>

#include "coll.h"
#include "hyp_err.h"
#include "fp8.h"
#include "op_registry.h"
#include "plan.h"
#include "zero3.h"

struct exec_t;

/* A plan op's dims bound to the executor's batch: B, T, N = B*T and n = the op's n * C. */
typedef struct {
    int B, T, N;
    long n;
} exec_dims;

/* The cpu implementation of one registered op (ops_table.c): runs o over its bound inputs I and
 * outputs O (NULL where an optional argument is absent). dloss: the loss scale of a training step. */
typedef void (*exec_op_fn)(struct exec_t *x, const plan_op *o, float *const *I, float *const *O, const exec_dims *d,
                           float dloss);
/* The cpu function of the registry's op `name` (ops_table.c), or NULL. */
exec_op_fn exec_cpu_op(const char *name);

/* ZeRO-3 (v2104 stage 3) on the cpu: the layout (core/zero3.h: layer groups, shards, segments)
 * and the executor's side of it: before a segment runs, its group is all-gathered into one of
 * n_slots working slots (the gathers of the next zero_prefetch segments are started before the
 * current one computes: prefetch; 0 = gather just in time), and in backward its gradients go to
 * a one-group workspace that is reduce-scattered into the own gradient shard as soon as the
 * segment is done. */
typedef struct {
    hyp_z3_layout L;
    float **ptr;                    /* per plan buffer: where a param/grad buffer lives now */
    float *slot[HYP_Z3_MAX_SLOTS];  /* working buffers of gathered groups [L.slot_cap] each */
    float *full;                    /* exec_z3_adopt_full: a full parameter arena, no gathers */
    hyp_coll *coll;
    int rc;                         /* first collective failure (then nothing more runs) */
    hyp_err err;
} exec_z3;

typedef struct exec_t {
    const plan_t *p;
    exec_op_fn op_fn[HYP_OP_MAX];   /* per op registry id: its cpu function (NULL: none) */
    float *params, *grads;          /* [param_floats] each */
    float *state[HYP_OPT_MAX_STATE];/* the optimizer's states (plan optimizer.state), each
                                       [param_floats], or [shard] for stage >= 1 */
    int n_state;
    float *acts;                    /* [act_floats]: the activation arena; a buffer lives at its
                                       byte offset, in its dtype (f32, or bf16: v2102 storage) */
    struct exec_lowp *lowp;         /* bf16 storage (cpu/ops_bf16.h): weight copy, scratch; NULL
                                       when every activation is f32 */
    exec_op_fn lowp_fn[HYP_OP_MAX]; /* per op registry id: its function on bf16 buffers (NULL: none) */
    int32_t *tokens, *targets;      /* [maxB * maxT] */
    const float *row_scale;         /* NULL, or [B*T]: the fused loss's gradient row n is scaled by
                                       row_scale[n] (per-token loss weights: train/pref.c) */
    /* NULL, or what the fused loss op computes instead of cross-entropy (v2149 distillation,
     * train/distill.c): losses[N] and, in place, logits[N, Vp] -> d loss / d logits * dloss */
    void (*loss_fused)(struct exec_t *x, float *losses, float *logits, const int32_t *targets, float dloss, int N, int V,
                       int Vp);
    void *loss_ctx;
    int32_t *positions;             /* [maxB * maxT] v2126: each input token's position in its
                                       document (plan buffer "positions"), or NULL when the plan
                                       has none; exec_bind sets row positions 0..T-1 */
    int B, T;                       /* bound batch shape (<= the plan's) */
    size_t bytes;                   /* total bytes allocated */
    /* data parallelism / ZeRO (v2104): the parameter arena is cut into `world` equal shards of
     * `shard` floats (the arena is padded to world * shard); rank `rank` owns shard `rank`. */
    int world, rank, stage;
    int64_t shard;
    float *gshard;                  /* [shard] reduced gradients of the own shard (stage >= 2) */
    exec_z3 *z3;                    /* stage 3 only; then params/state/gshard hold the own shards
                                       [shard] in the group layout and grads is the one-group
                                       gradient workspace */
    exec_z3 *zg;                    /* stage 2 (v2104): the gradient schedule of ZeRO-3 without its
                                       gathers — grads is a one-group workspace, reduce-scattered
                                       into the flat gshard after each group's backward; NULL at
                                       other stages (and for a plan ZeRO-3's layout cannot cut into
                                       layer groups: then grads is the full arena, reduce-scattered
                                       after backward) */
    hyp_fp8_state *fp8;             /* [plan fp8_slots] v2160 per-operand scaling states */
    /* bytes per category, for reporting; with stage >= 2 the gradient workspace the backward pass
     * writes into (one layer group; the full arena only without zg at stage 2) is
     * bytes_grad_workspace and the gradients kept for the optimizer are the reduced shard
     * (bytes_grads) */
    size_t bytes_params, bytes_grads, bytes_grad_workspace, bytes_optim, bytes_acts;
    long long fp16_flushed, fp16_nonzero; /* v2102 fp16: round_fp16 operands that underflowed to 0 / were nonzero */
    struct exec_moe *moe;           /* the MoE layers' router statistics (moe_stats.h), NULL without MoE ops */
    /* v2106 tensor parallelism (cpu/exec_tp.c): the tp group's communicator the plan's allreduce_tp
     * ops sum over (set by the trainer; NULL: the plan has none), and its first failure */
    hyp_coll *tp;
    int tp_rc;
    hyp_err tp_err;
    /* v2108 context parallelism: the cp group the ring_attention ops pass K/V blocks around (set
     * by the trainer; NULL: the plan has none), and the first failure of the ring */
    hyp_coll *cp;
    int cp_rc;
    hyp_err cp_err;
    /* v2109 expert parallelism (cpu/moe_ep.h): the ep group the moe ops dispatch tokens over (set
     * by the trainer; NULL: every expert runs here), the replicas of this rank's experts (the same
     * ep rank of the other ep groups) and the dispatch's buffers and first failure */
    hyp_coll *ep, *ep_rep;
    struct moe_ep *moe_ep;
} exec_t;

int exec_init(exec_t *x, const plan_t *p, hyp_err *e);
/* Like exec_init for this rank of coll's world (coll may be NULL: one rank) under ZeRO stage 0..3:
 * stage >= 1 allocates the optimizer's states for the own shard only, stage >= 2 a reduced-gradient
 * shard, stage 3 only the parameter shards and two layer working buffers (see exec_z3). */
int exec_init_dp(exec_t *x, const plan_t *p, hyp_coll *coll, int stage, hyp_err *e);
/* A host mirror of a device run (train/backend_dev.c): exec_init_dp without the activation arena (acts
 * stays NULL) — parameters, optimizer states, FP8 states and tokens/targets only; the device computes. */
int exec_init_mirror(exec_t *x, const plan_t *p, hyp_coll *coll, int stage, hyp_err *e);
/* Allocates the activation arena if x has none (a mirror about to sample on the host). */
int exec_alloc_acts(exec_t *x, hyp_err *e);
void exec_free(exec_t *x);
/* Binds the batch shape for the following runs; B <= plan B, T <= plan T. */
int exec_bind(exec_t *x, int B, int T, hyp_err *e);
/* The same without touching positions: a batch of this shape is already in tokens, targets and
 * positions (v2127 dynamic batches, laid out [B][T]). */
int exec_reshape(exec_t *x, int B, int T, hyp_err *e);
/* Initializes parameters from the plan's init rules with the given seed (deterministic). */
void exec_init_params(exec_t *x, uint64_t seed);
/* Forward pass up to the logits. */
void exec_forward(exec_t *x);
/* Mean loss over non-ignored targets without gradients (evaluation). */
float exec_eval_loss(exec_t *x);
/* Fused loss + dlogits (scaled by dloss) then the backward pass, accumulating into grads.
 * Returns the mean loss of this micro-batch. */
float exec_backward(exec_t *x, float dloss);
/* v2107 pipeline stages: runs ops[from, to) (a slice of the plan's forward or backward list, no
 * ZeRO) with the loss scale dloss; returns the mean loss if one of them wrote the losses, else 0. */
float exec_run_range(exec_t *x, const plan_op *ops, int from, int to, float dloss);
/* v2160: ends an optimizer step for the FP8 scaling states (after the amax of this step's slot
 * has been reduced across ranks by the caller, if any): rolls the amax histories, new scales. */
void exec_fp8_step(exec_t *x);
/* Stage 3: the first collective failure of forward/backward (HYP_OK if none; e gets its message). */
int exec_z3_status(const exec_t *x, hyp_err *e);
/* Stage 3: src[shard] in the group layout -> full[param_floats] in the plan's arena layout on
 * every rank (collective), and the reverse (local: keeps the own shard of full). */
int exec_z3_gather_full(exec_t *x, const float *src, float *full, hyp_err *e);
void exec_z3_scatter_full(const exec_t *x, const float *full, float *dst);
/* Stage 3: the part of the arena range [off, off+n) this rank owns: returns its length (0: none),
 * its arena offset in *first and its index in the shard arrays (params, gshard, state) in *pos. A
 * tensor lies inside one group, so its own part is one contiguous range. */
int64_t exec_z3_own(const exec_t *x, int64_t off, int64_t n, int64_t *first, int64_t *pos);
/* Stage 3: from now on forward reads the parameters from full[param_floats] (owned by x), with no
 * collectives — for sampling on one rank after training. */
void exec_z3_adopt_full(exec_t *x, float *full);
/* Pointer to a buffer by index (a bf16 buffer's pointer is to its uint16_t elements). */
float *exec_buf(exec_t *x, int idx);
/* The parameters changed outside the executor (an optimizer step, a checkpoint load): whatever
 * the executor derived from them (the bf16 weight copy of v2102 storage) is refreshed on use. */
void exec_params_changed(exec_t *x);
/* Counts targets >= 0 of the bound batch. */
int64_t exec_count_targets(const exec_t *x);

/* v2106 tensor parallelism (cpu/exec_tp.c), for a plan with p->tp >= 2 and x->tp set:
 * allreduce_tp's work: buf[n] (rows of C) = the sum over the tp group, then + bias per row (bias
 * may be NULL). A collective failure is kept for exec_tp_status; later calls do nothing. */
void exec_allreduce_tp(exec_t *x, float *buf, const float *bias, long n, int C);
/* The first allreduce_tp failure since the executor started (HYP_OK if none; e gets its message). */
int exec_tp_status(const exec_t *x, hyp_err *e);
/* exec_init_params for tp rank `rank` of p->tp: every tensor is drawn whole, in the plan's order
 * from one stream of `seed` (as the np=1 trainer draws it) and the rank keeps its slice of each
 * sharded one, so that the tp group starts from the np=1 weights. */
void exec_init_params_tp(exec_t *x, uint64_t seed, int rank);
/* full[] (the tensor pp is a slice of, row-major tp_full) -> this rank's slice local[pp->numel]. */
void exec_tp_slice(const plan_param *pp, int tp, int rank, const float *full, float *local);
/* The reverse: this rank's slice local[pp->numel] into its places of full[] (the rest untouched). */
void exec_tp_unslice(const plan_param *pp, int tp, int rank, const float *local, float *full);
/* The squared L2 norm of the whole model's gradients: the sharded tensors' squares summed over the
 * tp group (collective), the replicated ones counted once. */
int exec_tp_grad_sumsq(const exec_t *x, double *ss, hyp_err *e);

#endif
