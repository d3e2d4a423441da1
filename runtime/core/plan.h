/* plan.h — the runtime plan written by `gen` (generator/lua/plan.lua): model dims, parameters,
 * buffers with arena offsets, and the forward / loss / backward op lists.
 *
 * The file format (version 2) is specified in core/PLAN_FORMAT.md.
 *
 * plan_load() trusts nothing: the file may be hand-edited, truncated or from another version.
 * It checks the format and version, every name, every buffer's dtype and byte placement, every
 * op against the op registry (core/op_registry.h: arity, attributes, dtypes), the optimizer
 * section, and that every buffer an op touches is large enough for that op at the planned
 * (maximum) batch and sequence length and lies inside its arena. After a successful load, executing the plan with B <= maxB
 * and T <= maxT cannot read or write outside the arenas.
 */
#ifndef HYP_PLAN_H
#define HYP_PLAN_H

#include <stdint.h>

#include "dtype.h"
#include "hyp_err.h"

enum { BUF_PARAM, BUF_GRAD, BUF_ACT, BUF_TOKENS };

typedef struct {
    char *name;
    int kind;
    hyp_dtype dtype;
    int64_t offset_bytes, bytes; /* in its arena, as plan.json says */
    int64_t numel, offset;       /* offset in elements of its dtype (offset_bytes / its size) */
    int ndim;
    int64_t shape[4];            /* sizes, or DIM_B / DIM_T / DIM_N; numel at the planned B, T */
} plan_buf;

/* Symbolic dims bound at run time. */
#define DIM_B (-1)
#define DIM_T (-2)
#define DIM_N (-3)

typedef struct {
    int op;                /* its id in the op registry (core/op_registry.h) */
    int nin, nout;
    int in[6], out[4];     /* buffer indices; -1 = absent (optional argument "") */
    /* attributes (unused ones are 0); dims may be DIM_B / DIM_T / DIM_N */
    int64_t B, T, N, C, IC, OC, NH, NKV, hd, H, V, Vp, n;
    float eps, theta;
    float scale, alpha;    /* optional: attention score scale (0: 1/sqrt(hd)); residual add/accumulate
                              weight of the first operand (0: 1, DeepNorm's alpha) */
    int slot;              /* fp8_quantize: index into plan_t.fp8_roles */
    int64_t bits, group;   /* fake_quant: integer bits, columns per scale (v2158) */
    int64_t rowwise;       /* int8_matmul_*: 1 = one scale per input row, 0 = per tensor (v2159) */
    int epi;               /* matmul_fwd / matmul_bwd attrs.epilogue (v2166): PLAN_EPI_* bits, 0 = none */
    /* attention (v2117, core/attn_mod.h): mask rule HYP_MASK_* (0 causal), its window / prefix,
       score modifier HYP_MOD_* (0 none) and softcap's cap */
    int64_t mask, window, prefix, score_mod;
    float softcap;
    /* moe_fwd / moe_bwd (cpu/ops_moe.h): experts, top_k, renormalise the top_k weights (1) or
       not (0), the load-balancing loss coefficient (0: none); H is the expert's hidden width */
    int64_t E, K, norm_topk;
    float aux_coef;
    float capacity;        /* moe: capacity factor, tokens over it dropped (0: dropless; cpu/ops_moe.h) */
    int64_t Hs;            /* moe: the shared experts' hidden width (0: none) */
    int64_t sigmoid;       /* moe: 1 = sigmoid router (DeepSeek-V3), 0 = softmax */
    float bias_rate;       /* moe_fwd with a selection bias (in[3]): its update rate u per step */
} plan_op;

/* v2166 GEMM epilogues a plan marks (attrs.epilogue): a device executor folds the marked matmul's
 * neighbouring GELU op into the GEMM (cuBLASLt GELU_AUX(_BIAS) forward, DGELU backward); the cpu
 * executor runs the ops as listed (the same values). */
#define PLAN_EPI_GELU 1  /* matmul_fwd: the gelu_fwd right after it, reading its output */
#define PLAN_EPI_DGELU 2 /* matmul_bwd: its input gradient through the gelu_bwd two ops later */
#define PLAN_EPI_SWIGLU 4 /* matmul_fwd: the swiglu_fwd right after it, reading its output (v2119's template) */

#define PLAN_PP_MAX_STAGES 64 /* v2107: pipeline stages a plan may have */
/* v2107: one pipeline stage: its ops fwd[from, to), bwd[from, to), its layers[from, to) and the
 * boundary activations (buffer indices) it receives (input) and sends (output); -1: none (the first
 * stage receives nothing, the last sends nothing) */
typedef struct {
    int fwd[2], bwd[2], layers[2], recv, send;
} plan_pp_stage;
#define PLAN_TP_MAX_BLOCKS 3 /* v2106: a fused QKV weight splits its q, k and v blocks */

typedef struct {
    char *name;
    hyp_dtype dtype;
    int64_t offset_bytes, bytes; /* in the parameter arena */
    int64_t offset, numel;       /* in floats (parameters are f32) */
    int ndim;
    int64_t shape[4];
    int decay;             /* its group's weight_decay != 0 */
    int group;             /* index into plan_t.optim.groups */
    int init;              /* PINIT_* */
    float init_std;
    /* v2106 tensor parallelism (plan.tp, core/plan_tp.c): tp_nblk > 0 when a tp rank holds a slice
     * of a full tensor of shape tp_full: along dimension tp_dim, 1/tp of each [start, length] block */
    int tp_nblk, tp_dim;
    int64_t tp_full[2], tp_blk[PLAN_TP_MAX_BLOCKS][2];
} plan_param;

enum { PINIT_NORMAL, PINIT_ONES, PINIT_ZEROS };

/* The plan's optimizer section (core/PLAN_FORMAT.md): which update rule, its scalars, the state
 * tensors it keeps per parameter and the parameter groups. Loaded by plan.c, executed by the
 * optimizer registered under `kind` (optim/optim.h). */
#define HYP_OPT_MAX_HYPER 12
#define HYP_OPT_MAX_STATE 4

typedef struct {
    char name[32];
    double lr_mult, weight_decay;
    int n_params;
    int *params;            /* indices into plan_t.params */
    char rule[16];          /* the update rule of this group's tensors: "" = the kind's own; a kind
                               with several rules (muon: "muon" and "adamw") names them here */
} hyp_optim_group;

typedef struct {
    char kind[32];          /* "adamw", ... */
    int n_hyper;
    char hyper_name[HYP_OPT_MAX_HYPER][16];
    double hyper[HYP_OPT_MAX_HYPER];
    int n_state;            /* state tensors per parameter, each of the parameter's shape */
    char state_name[HYP_OPT_MAX_STATE][16];
    hyp_dtype state_dtype[HYP_OPT_MAX_STATE];
    int shard_matrix;       /* 0: "elementwise" (any arena range alone), 1: "matrix" (whole tensors) */
    /* each state's layout: state k of parameter i is state_n[k][i] floats at state_off[k][i] of
     * an array of state_floats[k]. Without a "numel" list in the plan (state_compact[k] 0) that
     * is the parameter arena's layout (offset, numel, param_floats); with one, the tensors are
     * packed (16-float aligned) and may keep fewer floats than the parameter (Muon's unused v,
     * Adam-mini's one v per block) — whole tensors only, so ZeRO refuses it */
    int state_compact[HYP_OPT_MAX_STATE];
    int64_t *state_off[HYP_OPT_MAX_STATE], *state_n[HYP_OPT_MAX_STATE];
    int64_t state_floats[HYP_OPT_MAX_STATE];
    int n_groups;
    hyp_optim_group *groups;
} hyp_optim_cfg;

/* State k of parameter i (pp = &params[i]): its offset and float count; a section built by hand
 * without the layout arrays has the arena layout. */
static inline int64_t plan_state_off(const hyp_optim_cfg *c, int k, int i, const plan_param *pp) {
    return c->state_off[k] ? c->state_off[k][i] : pp->offset;
}
static inline int64_t plan_state_n(const hyp_optim_cfg *c, int k, int i, const plan_param *pp) {
    return c->state_n[k] ? c->state_n[k][i] : pp->numel;
}

typedef struct {
    /* model */
    char model_name[64], arch[16], norm[16], activation[16], position[16], tokenizer[16];
    int V, Vp, C, L, NH, NKV, hd, H, maxT, qk_norm, tied, bias;
    int64_t n_params;
    char target[32], backend[16];
    double peak_flops;      /* of the hardware the MFU is reported against (0 = unknown) */
    char hardware[64];
    char peak_dtype[16];    /* the dtype of peak_flops (fp32, tf32, bf16, fp8); "" = unknown */
    int peak_measure;       /* 1: the cpu trainer measures this machine's peak at start (v2187) */
    char flops_convention[128]; /* how flops_per_token counts attention (formulas.lua) */
    int metrics_window, metrics_skip; /* v2186: tokens/s window (steps) and warm-up steps left out */
    double flops_per_token; /* at the planned T */
    double flops_attn_coef; /* FLOPs per token per unit of T (attention): fpt(T) = fpt - coef*(planT - T) */
    /* training defaults */
    int B, T, grad_accum, warmup_steps, steps, eval_every, eval_batches, zero_stage;
    int zero_prefetch;      /* ZeRO-3: layer groups gathered ahead of the one computing (0..8) */
    int comm_overlap;       /* v2110 overlap: device gradient all-reduce during backward (0/1) */
    int comm_streams;       /* v2168 train.comm_streams: the cpu trainer's communication helper
                               threads (1-4) overlapping the gradient all-reduce; 0: no v2168 */
    char allreduce_algo[24]; /* v2171 train.allreduce.algorithm: ring, tree, halving_doubling,
                               hierarchical ("" = absent: the library's own all-reduce) */
    int allreduce_node_size; /* train.allreduce.node_size: ranks per node (0: MPI's node) */
    int tf32;               /* v2100 fp32_matmul tf32: the device's fp32 layer GEMMs on TF32 tensor
                               cores (inputs rounded to 10 mantissa bits, fp32 accumulation; sim
                               rounds the same way); 0: IEEE fp32 */
    int data_parallel;      /* train.data_parallel: the trainer may run on several ranks (0/1) */
    int tp;                 /* train.tp (v2106): the plan is one rank's of a tensor-parallel group of
                               tp ranks (params' tp_* say which tensors are slices); 0 = none */
    int pp;                 /* train.pp (v2107): pipeline stages; 0 = none (then pp_stage is unused) */
    int pp_1f1b;            /* pp.schedule: 1 = 1F1B (PipeDream-Flush), 0 = GPipe */
    plan_pp_stage pp_stage[PLAN_PP_MAX_STAGES]; /* pp.stage[s] (core/plan_pp.c) */
    int cp, cp_layout;      /* train.cp, train.cp_layout (v2108): the plan is one rank's of a
                               context-parallel group of cp ranks splitting every sequence (T is
                               the rank's share); layout 0 contiguous, 1 zigzag; 0 = none */
    int cp_comm;            /* train.cp_comm: 0 "allgather" (v2108 alone: K/V all-gathered per layer),
                               1 "ring" (v2116: K/V shifted around the cp group, overlapped) */
    int ep;                 /* train.ep (v2109): experts placed over ep groups of ep ranks, tokens
                               dispatched by all-to-all (cpu/moe_ep.c); 0 = none */
    int cuda_graphs;        /* v2165 train.cuda_graphs: device targets capture the step's regions as
                               graphs and replay them (0/1; absent: 0) */
    int ckpt_elastic;       /* checkpoint.elastic: resume at another world size (0/1) */
    int ckpt_sharded;       /* checkpoint.sharded: ZeRO ranks write their own shards (0/1) */
    int ckpt_every, ckpt_keep; /* checkpoint.every / keep (v2178): the defaults of --ckpt-every and
                               --keep (0: not in the plan) */
    char ckpt_dir[256];     /* checkpoint.dir (v2178): --ckpt-dir's default, relative to the plan's
                               directory unless absolute ("" = not in the plan) */
    int ckpt_async;         /* checkpoint.async (v2179): max checkpoints written in the background
                               at once (0: blocking saves) */
    int ckpt_full_every;    /* checkpoint.incremental.full_every (v2180): every n-th save is full,
                               the others XOR deltas against it (0: every save full) */
    int loss_scale;         /* loss_scale section present (v2162): dynamic loss scaling */
    double ls_init, ls_growth, ls_backoff;
    int ls_interval;
    int param_bf16;         /* param_storage section (v2161): the parameter arena is held in bf16
                               (same element offsets, 2 bytes each; its param buffers then read as
                               bf16), no fp32 master; the update writes it rounded as below */
    int param_nearest;      /* param_storage.rounding: 0 "stochastic", 1 "nearest" (the ablation) */
    unsigned param_seed;    /* param_storage.seed: key of the rounding hash (with step, element) */
    int grad_bf16;          /* grad_accum section (v2163) dtype "bf16": the gradient-accumulation
                               buffer holds bf16 values (rounded to nearest after each micro-batch) */
    int lsgd_every;         /* local_sgd section (v2173): optimizer steps between parameter
                               averagings (0: no section, gradients all-reduced every step) */
    int lsgd_nesterov;      /* local_sgd.outer: 0 "average", 1 "nesterov" (DiLoCo) */
    double lsgd_outer_lr, lsgd_outer_momentum; /* local_sgd: the Nesterov outer step's */
    int adp_on, adp_staleness; /* async_dp section (v2174): gradient all-reduces started non-blocking,
                               applied adp_staleness steps later (0 = at once); adp_on 0: no section */
    int gc_on;              /* grad_compress section (v2172): compressed gradient exchange */
    int gc_randk;           /* grad_compress.method: 1 "randk" (0 "topk") */
    int gc_power, gc_rank;  /* grad_compress.method "powersgd", grad_compress.rank (its r) */
    int gc_error_feedback;  /* grad_compress.error_feedback: 1 keep the unsent part */
    double gc_ratio;        /* grad_compress.ratio: fraction of the gradient entries sent */
    int guard;              /* guard section present (v2176): skip bad steps, roll back */
    double guard_z, guard_ema, guard_loss_ceiling, guard_lr_factor;
    int guard_warmup, guard_max_bad, guard_max_rollbacks;
    int preempt;            /* preempt section present: a preemptible run (v2177) — refuses to
                               start without --ckpt-dir and checks the stop fits the grace time */
    double preempt_grace_s; /* preempt.grace_seconds: notice-to-kill time of the scheduler */
    char tb_logdir[256];    /* tensorboard.logdir (v2183): event files by default, relative to the
                               plan's directory; "" = no section (only --tensorboard DIR writes) */
    int tb_every;           /* tensorboard.every: steps between scalar events (1 without section) */
    int lp_every;           /* loss_prediction.fit_every (v2148): steps between fits; 0 = no section */
    int lp_patience, lp_stop; /* loss_prediction.patience, stop: early stop after patience fits below */
    double lp_min_delta;    /* loss_prediction.min_delta: the predicted improvement left */
    int lp_law;             /* loss_prediction.law: 0 power (in the step), 1 lr_annealing (losspred.h) */
    int pr_on;              /* pruning section present (v2154): masks on the layers' matrices */
    int pr_pattern;         /* pruning.pattern: 0 unstructured, 1 "2:4" */
    double pr_target;       /* pruning.target_sparsity */
    int pr_gradual;         /* pruning.schedule: 0 "oneshot", 1 "gradual" (v2156), 2 "fixed" (v2155:
                               the mask is the initial weights' zeros, never updated) */
    double pr_start, pr_end; /* pruning.start, end: fractions of the run (gradual) */
    int pr_every;           /* pruning.every: steps between mask updates (gradual) */
    char prof_trace[256];   /* profile.trace (v2184): the Chrome trace written by default, relative to
                               the plan's directory; "" = no section (only train --profile FILE) */
    int prof_start, prof_steps; /* profile.start_step, num_steps: the profiled window */
    char memprof_svg[256];  /* memory_profile.svg (v2185): the memory profile written by default; "" = none */
    uint64_t seed;
    char schedule[16];
    double lr, min_lr_ratio, decay_fraction, max_norm;
    /* memory: the arenas in bytes as planned, and in floats (rounded up) for the f32 executors */
    int64_t param_bytes, act_bytes, act_bytes_unplanned, act_bytes_peak_live;
    int64_t param_floats, act_floats, act_floats_unplanned;
    plan_param *params;
    int n_params_t;
    hyp_optim_cfg optim;
    plan_buf *bufs;
    int n_bufs;
    plan_op *fwd, *bwd, loss;
    int n_fwd, n_bwd;
    int tokens_buf, targets_buf, losses_buf;
    int positions_buf;      /* v2126 document masking: "positions" (i32 [B,T], each input token's
                               position in its document, from the loader), or -1 */
    int prefetch;           /* train.prefetch (v2128): batches the loader thread reads ahead, 0 = none */
    int stream_buffer;      /* train.stream_buffer (v2129): rows per shuffle block of --stream, 0 = the
                               trainer reads --data shards only */
    int pack_max_docs;      /* train.pack_max_docs (v2126): > 0 = best-fit-decreasing packed rows of
                               at most that many documents; 0 = contiguous T-token windows */
    int64_t token_budget;   /* train.token_budget (v2127): > 0 = dynamic batches of <= that many
                               input slots, train.buckets length buckets; 0 = fixed B x T batches */
    int buckets;
    /* v2160 FP8: one scaling state per quantized GEMM operand (0 slots = FP8 off) */
    int fp8_slots;
    int *fp8_roles;        /* per slot: 0 weight, 1 activation, 2 gradient (hyp_fp8_role) */
    int fp8_e4m3_only, fp8_current, fp8_history, fp8_margin;
    int fp8_gemm;          /* fp8.gemm "fp8": device targets multiply fp8 operands (exec_dev.c); "fake" (or absent): fp32 */
    char *text;             /* the plan file's bytes (text_len of them, not NUL-terminated): */
    size_t text_len;        /*   what a checkpoint copies as its plan.json (ckpt.h) */
    char hash[40];          /* xxh3-128 of the plan file, hex: identifies the trainer */
    char state_hash[40];    /* the same without the ZeRO settings: what a checkpoint must match */
} plan_t;

/* Loads and validates path. On error returns HYP_EINPUT with "path: what — how to fix". */
int plan_load(const char *path, plan_t *p, hyp_err *e);
/* plan_load's reader of the v2106 'tp' section (core/plan_tp.c), after the params and train.tp. */
struct cJSON;
int plan_tp_load(const struct cJSON *root, plan_t *p, const char *path, hyp_err *e);
/* plan_load's reader of the v2107 'pp' section (core/plan_pp.c), after the op lists and buffers. */
int plan_pp_load(const struct cJSON *root, plan_t *p, const char *path, hyp_err *e);
void plan_free(plan_t *p);

#endif
