/* backend.h — the trainer-level backend interface and the one step driver over it.
 *
 * A backend runs the pieces of a training step on its hardware: the cpu executor (backend_cpu.c)
 * and the device layer, sim or cuda (backend_dev.c), are peers behind one `static const`
 * train_backend_i, as ggml's ggml_backend_i makes the CPU one backend among others. The driver
 * (backend.c) is written once over it: the objective's micro-batches (objective.h), the
 * gradient reduction per ZeRO stage, clipping, the optimizer (optim.h) on the own shard, the FP8
 * step, evaluation and the memory report. Checkpoints (train_ckpt.h) read the host executor,
 * which sync_host brings up to date. The registry (backend_reg.c) opens the plan's backend.
 *
 * Every rank calls every function (collectives inside). Never: command-line policy, printing of
 * progress lines, or I/O besides the memory report.
 */
#ifndef HYP_BACKEND_H
#define HYP_BACKEND_H

#include "coll.h"
#include "data.h"
#include "exec.h"
#include "optim.h"
#include "train.h"

typedef struct train_backend train_backend;
typedef struct train_objective train_objective; /* objective.h */

/* Bytes of one rank by role, for the memory report. */
enum { MEM_PARAMS, MEM_GRADS, MEM_OPTIM, MEM_ACTS, MEM_OTHER, MEM_GRAD_WORKSPACE, MEM__COUNT };

/* What a backend can do, asked instead of its name (error messages name the backend: the plan's
 * backend, train_backend.name). Filled statically in each backend's table. */
typedef struct {
    /* trains in the host executor's arenas: parameters, gradients, optimizer states and
     * activations are x's host memory between calls (sync_host is NULL), so host code may read or
     * plant into x->grads, hook into x's fused loss (exec_t.loss_fused) and arm x->acts */
    unsigned host_buffers : 1;
    /* runs the generated kernels on a device with its own stream (sim, cuda): the profile has a
     * device track and the memory profile counts the device arenas */
    unsigned device_kernels : 1;
    /* rebinds the batch shape per micro-batch (v2127 dynamic batches) */
    unsigned dynamic_shapes : 1;
    /* bf16 parameters without an fp32 master (v2161) and a bf16 gradient buffer (v2163) */
    unsigned bf16_storage : 1;
    /* the preference objectives under data parallelism reproduce one rank's numbers */
    unsigned multi_rank_pref : 1;
    /* computes on this machine's CPU cores: MFU is against their measured peak */
    unsigned host_compute : 1;
} train_backend_caps;

typedef struct train_backend_i {
    /* the kind of backend ("cpu", "device"); messages name the instance (train_backend.name) */
    const char *kind;
    /* what it can do */
    train_backend_caps caps;
    /* zeroes what backward accumulates into (the gradient arena, or the ZeRO-3 gradient shard) */
    int (*zero_grads)(train_backend *b, hyp_err *e);
    /* forward + backward of the micro-batch in x->tokens/targets, the loss gradient scaled by
     * dloss, gradients accumulated; last: the step's last micro-batch (the device starts its
     * overlapped gradient all-reduce during it); *mean: this rank's mean loss of it */
    int (*micro_batch)(train_backend *b, float dloss, int last, float *mean, hyp_err *e);
    /* makes the gradients this rank owns the sum over ranks (all of them at stages 0-1, the own
     * shard at 2-3) and computes the global norm and the clip factor for o->max_norm, kept by
     * the backend for optim_step (the device keeps them in device memory) */
    int (*reduce_grads)(train_backend *b, const train_opts *o, hyp_err *e);
    /* the optimizer on what this rank owns, gradients scaled by the clip factor, then the
     * updated parameters to every rank that needs them (stages 1-2: all-gather) */
    int (*optim_step)(train_backend *b, const train_opts *o, double lr, int t, hyp_err *e);
    /* ends the step: the norm and clip factor to the host, the FP8 amax reduced over ranks (max)
     * and the scaling states advanced */
    int (*finish_step)(train_backend *b, double *norm, float *scale, hyp_err *e);
    /* the optimizer's hess_span (optim.h) on what this rank owns, its reduced gradients being
     * those of the sampled-label loss over `tokens` tokens (gnb.h); NULL: the backend cannot run
     * such an optimizer (train_backend_open refuses it) */
    int (*hess_step)(train_backend *b, double tokens, int t, hyp_err *e);
    /* the mean loss of the batch in x->tokens/targets, no gradients */
    int (*eval_batch)(train_backend *b, float *loss, hyp_err *e);
    /* the backend's parameters, optimizer and FP8 states into the host executor x (checkpoints,
     * sampling); NULL where they live there already */
    int (*sync_host)(train_backend *b, hyp_err *e);
    /* this rank's bytes by role (MEM_*) */
    void (*memory)(const train_backend *b, double *mem);
    /* how the memory report names this rank's memory ("memory", "sim device memory") and whether
     * it reports MEM_OTHER (device allocations besides the arenas) */
    const char *(*memory_title)(const train_backend *b);
    int reports_other;
    /* one line on how gradients travel between ranks, printed under the memory report with more
     * than one rank; NULL: nothing to say */
    const char *(*comm_note)(const train_backend *b);
    /* frees what open allocated (never x) */
    void (*close)(train_backend *b);
    /* the global gradient norm that reduce_grads computed, to the host before the update (the
     * v2176 guard judges it; on a device a 4-byte copy and a wait); NULL: not available */
    int (*peek_norm)(train_backend *b, double *norm, hyp_err *e);
    /* v2162 on a backend that checks after the reduction (the device): reduce_grads saw the loss
     * scale b->ls (its clip factor is computed against max_norm x S); then ls_check sets *bad =
     * the gradients this rank owns hold inf/NaN, and when clean folds 1/S into the gradient scale
     * optim_step applies and reports the norm unscaled. NULL: the driver checks and unscales the
     * host gradients x->grads before the reduction (the cpu). */
    int (*ls_check)(train_backend *b, int *bad, hyp_err *e);
    /* the objectives that weight each token (pref.c, grpo.c): the per-token losses
     * (cross-entropy, 0 at ignored targets) of the batch in x->tokens/targets, forward only, into
     * out[B*T]; NULL: the backend cannot run them */
    int (*token_losses)(train_backend *b, float *out, hyp_err *e);
    /* then the backward of that batch (the last token_losses' forward): the fused loss's
     * gradient (dloss 1) of token n scaled by row_scale[n] (B*T), gradients accumulated */
    int (*weighted_backward)(train_backend *b, const float *row_scale, hyp_err *e);
    /* the optimizer's eval_point on the backend's own parameters around evaluation (to_eval 1
     * before, 0 after); NULL where they are the host executor's (train_eval_point moves those) */
    int (*eval_point)(train_backend *b, int to_eval, hyp_err *e);
    /* v2173 local SGD on a device: the parameter arena (stage 0) into the host mirror x->params
     * (to_device 0) or from it back onto the device (1), around the host's outer step; NULL where
     * the parameters are the host executor's (the cpu) */
    int (*params_host)(train_backend *b, int to_device, hyp_err *e);
} train_backend_i;

/* v2149 distillation on a device backend (train/distill.c). The device teacher (plan and params
 * set, and train_backend_dev_teacher accepted them): a second device executor over the teacher's
 * plan runs its forward on the staged tokens of each micro-batch and its logits buffer goes to
 * the fused loss as it is, on the device. Otherwise (the host teacher) before each micro-batch
 * the teacher's logits of the batch's tokens (B*T rows of *stride floats, host memory valid until
 * the next call) go to the device. Either way the device's fused loss mixes (1 - alpha) * CE +
 * alpha * T^2 * KL. (On the cpu backend the teacher hooks into the executor's fused loss
 * instead: exec_t.loss_fused.) */
typedef struct {
    int (*logits)(void *ctx, const int32_t *tokens, int B, int T, const float **out, int *stride, hyp_err *e);
    void *ctx;
    float temperature, alpha;
    const plan_t *plan;      /* the teacher's plan (NULL: host teacher only) */
    const char *plan_path;   /* its plan.json */
    const float *params;     /* host: its parameters in the plan's arena layout */
} train_teacher;

/* v2149: the teacher's forward on b's device when b is a device backend and kernels fit the
 * teacher's plan: those rendered beside the teacher's plan for the same backend, else the
 * student's when the teacher's forward ops have the student's (same shape). *on = 1: the device
 * runs it (the teacher's weights uploaded now, its arenas counted in the memory report); 0: the
 * host teacher (how says where and why, one phrase; HYP_TEACHER_DEVICE=0 forces it). Errors only for a failure after the kernels fit. */
int train_backend_dev_teacher(train_backend *b, const train_teacher *t, int *on, char *how, size_t cap, hyp_err *e);

/* Optional hooks of the trainer into train_step (v2176 fault tolerance, guard.h); every rank
 * calls them at the same point. before_reduce: after the micro-batches, before the gradient
 * reduction (the fault-injection test hook corrupts gradients there); gate: after the reduction
 * with the global loss and norm, *skip = 1 skips this step's update (the caller agrees on it
 * across ranks; may change *loss: an injected loss fault). */
typedef struct {
    int (*before_reduce)(void *ctx, train_backend *b, int step, hyp_err *e);
    int (*gate)(void *ctx, train_backend *b, int step, double *loss, double norm, int *skip, hyp_err *e);
} train_hooks;

/* v2162 dynamic loss scaling (PyTorch GradScaler semantics), driven by train_step: the
 * loss gradient is multiplied by scale; after the micro-batches the gradients are checked for
 * inf/NaN (all ranks agree): an overflow skips the update (skipped = 1, not a guard bad step) and
 * multiplies scale by backoff, else the gradients are divided by scale before the reduction,
 * clipping and the update, and after interval clean steps in a row scale is multiplied by growth.
 * on = 0: no scaling. scale and good are the checkpointed state. The cpu checks its gradients
 * before the reduction; a backend with ls_check (the device) after it, on the global norm. */
typedef struct {
    int on;
    double scale, growth, backoff;
    long long interval, good; /* clean steps since the last change */
    int skipped;              /* the last step overflowed and was skipped */
    long long overflows;      /* skipped steps so far in this process */
    double reduce_scale;      /* set by the driver around reduce_grads: the factor the gradients
                                 carry when a backend with ls_check reduces them (0 or 1: none) */
} train_loss_scaler;

struct train_backend {
    const train_backend_i *i;
    const char *name;   /* the plan's backend this one runs: "cpu", "sim" or "cuda" (messages) */
    exec_t *x;          /* the host executor: the cpu backend's, or the device backend's mirror */
    dp_t dp;            /* the data-parallel group, ZeRO stage and optimizer */
    void *impl;         /* the backend's own state */
    const train_hooks *hooks; /* NULL: none; set by the trainer after train_backend_open */
    void *hooks_ctx;
    train_loss_scaler ls; /* v2162; zero: off (the trainer sets it from the plan after open) */
    const train_teacher *teacher; /* v2149 on a device backend; NULL: none */
    struct train_prune *prune;    /* v2154 masks on the host arenas (prune.h); NULL: none */
    struct train_local_sgd *lsgd; /* v2173 (local_sgd.h): no per-step gradient all-reduce, the outer
                                     step after the update (a device's parameters copied to the host
                                     and back around it: params_host); NULL: none */
    struct train_async_dp *adp;   /* v2174 on the cpu backend (async_dp.h): the gradient all-reduce
                                     applied staleness steps later; NULL: none */
    int adp_step, adp_ready;      /* v2174: the step reduce_grads runs for; whether it delivered a
                                     gradient to apply */
    struct train_pp *pp;          /* v2107 pipeline stage driver on the cpu backend (train_pp.h); NULL: none */
    struct train_grad_compress *gc; /* v2172 on the cpu backend (grad_compress.h): top-k / random-k
                                       in place of the gradient all-reduce; NULL: none */
    /* v2168 figures of the last gradient reduction (seconds), set when comm_measured by
     * reduce_grads (cpu) or finish_step (a device: event times of the comm stream): the time the gradient all-reduce(s) were in flight, and the part of it the
     * step waited for (the rest ran under the backward pass) */
    double comm_total_s, comm_exposed_s;
    int comm_measured;
};

/* Opens the plan's backend (backend_reg.c) over the host executor x (already initialized and,
 * when resuming, loaded): cpu for the plan's backend "cpu", the device layer for "sim" and
 * "cuda" (kernels/ next to plan_path, bound to B x T; it uploads x's state and prints which
 * device runs). Collective. */
int train_backend_open(train_backend *b, const plan_t *p, const char *plan_path, exec_t *x, const dp_t *dp, int B,
                       int T, hyp_err *e);
/* The capabilities of the plan's backend before it is opened (the host executor's layout, the
 * teacher's hook depend on them). HYP_EINPUT for a backend the registry does not know. */
int train_backend_caps_of(const plan_t *p, train_backend_caps *caps, hyp_err *e);
void train_backend_close(train_backend *b);
/* The backends (backend_cpu.c, backend_dev.c), for the registry. */
int train_backend_cpu_open(train_backend *b, const plan_t *p, const char *plan_path, int B, int T, hyp_err *e);
int train_backend_dev_open(train_backend *b, const plan_t *p, const char *plan_path, int B, int T, hyp_err *e);
extern const train_backend_i train_backend_cpu_i, train_backend_dev_i;

/* ---- the step driver (backend.c) ---- */
/* Where a step waited (v2186 throughput metrics), wall seconds (CLOCK_MONOTONIC): data_s in the
 * loader (next batch), comm_s in collectives the driver calls (token counts, the loss) and in the
 * backend's gradient reduction under several ranks (all-reduce / reduce-scatter, which includes
 * waiting for the slowest rank). Both are parts of the step: data_s + comm_s <= the step's time. */
typedef struct {
    double data_s, comm_s;
    /* this rank's batches over the step's micro-batches: input slots (rows x T), rows, padded
     * slots (v2126 / v2127 layouts), and the loss tokens of all ranks */
    double slots, rows, pad, loss_tokens;
    /* v2173 measurements: bytes this rank sent (ring model, hyp_coll_bytes_sent) and collectives
     * it took part in on the data-parallel communicator during the step */
    double comm_bytes, comm_calls;
    /* v2168: the gradient all-reduce's time in flight, and the part the step waited for (exposed;
     * total - exposed ran hidden under backward); comm_measured 0: the backend did not measure them */
    double comm_total_s, comm_exposed_s;
    int comm_measured;
} train_step_times;

/* One optimizer step (t = step) of the objective ob (objective.h) over K micro-batches: its
 * step_begin, the gradients zeroed, its micro-batches with the loss gradient x the v2162 loss
 * scale, its step_end; then the scaler's check, the reduction, the v2176 guard's gate, the
 * update, the FP8 step and the GNB pass. *loss the global mean loss, *norm the global gradient
 * norm, *scale the clip factor applied; *tm (may be NULL) where it waited. With hooks whose gate
 * says skip, or a loss-scale overflow, the update is not applied and *skipped (may be NULL) is 1. */
int train_step(train_backend *b, train_objective *ob, const train_opts *o, int K, int step, double lr, double *loss,
               double *norm, float *scale, train_step_times *tm, int *skipped, hyp_err *e);
/* The mean validation loss over `batches` batches of val, averaged over ranks, into *loss (the
 * next-token objective's evaluation, obj_tokens.c). */
int train_eval(train_backend *b, hyp_loader *val, int batches, float *loss, hyp_err *e);
/* Prints every rank's memory by role (rank 0's stdout; collective). */
void train_print_memory(train_backend *b, hyp_err *e);
/* The backend's state into the host executor (a no-op for the cpu). */
int train_sync_host(train_backend *b, hyp_err *e);

#endif
