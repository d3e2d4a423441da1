/* exec_dev.h — the plan executor of the device backends (issue #5): binds a validated plan to
 * device memory (one parameter arena, its gradient and optimizer-state twins, one activation arena,
 * token/target buffers, kernel scratch) and runs the forward, loss and backward op lists through
 * the rendered kernels of out/NAME/kernels (kernels.json says which kernels each plan op
 * launches, with which argument bindings and grid), cuBLASLt-semantics GEMMs for matmul_fwd/bwd
 * (runtime/device.h) and memsets for zero. v2166 fusion sites (kernels.json "fusions") replace
 * their op pairs' launches; v2160 FP8 keeps per-slot scaling state on the device and, when the
 * plan says fp8.gemm "fp8", runs the layer GEMMs on fp8 bytes (TN, as cuBLASLt requires).
 *
 * The arenas have exactly the cpu executor's layout (offsets of plan.h), so a host array laid out
 * like its parameters can be uploaded / downloaded as a whole: the CPU initialization and the host
 * optimizer (train.h) can be reused around the device forward/backward (what the tests do). All
 * work is enqueued on the device's default stream (NULL); train/backend_dev.c adds a
 * communication stream around it — except at ZeRO stage 3 (exec_dev_z3), whose per-group gathers
 * and gradient reduce-scatters run on the executor's own communication stream.
 */
#ifndef HYP_EXEC_DEV_H
#define HYP_EXEC_DEV_H

#include <stdint.h>

#include "device.h"
#include "fp8.h"
#include "hyp_err.h"
#include "plan.h"
#include "zero3.h"

typedef struct exec_dev_launch exec_dev_launch; /* one kernel launch of a plan op (exec_dev.c) */
typedef struct exec_dev_file exec_dev_file;     /* one rendered module (exec_dev.c) */

/* EXD_SKIP: the first op of a v2166 fusion site (kernels.json "fusions"), whose work the site's
 * launches do at the second op, or an op a GEMM epilogue does (plan attrs.epilogue) */
typedef enum { EXD_NONE, EXD_KERNELS, EXD_GEMM, EXD_ZERO, EXD_SKIP, EXD_MOE } exec_dev_how; /* EXD_MOE: exec_dev_moe.c */

typedef struct {
    exec_dev_how how;
    int first, count;               /* EXD_KERNELS: launches[first .. first+count) */
    const plan_op *pair;            /* a fusion site's first op (its dims bind too), else NULL */
} exec_dev_op;

/* ZeRO-3 on the device (exec_dev_init_z3), in the layout of core/zero3.h (the one the host mirror
 * uses: the same groups, shards and segments, so the host mirror and checkpoints agree). The device
 * keeps its shard of every group (params, gshard, m, v: [shard] each); before a segment's ops,
 * its group is all-gathered on the communication stream into slot s % n_slots (the gathers of
 * the next n_slots - 1 segments are started ahead: prefetch), the compute stream waits only for
 * that slot's event; in backward the group's gradients go to a one-group workspace (grads) that
 * is reduce-scattered, on the communication stream, into the slot the group was gathered into
 * and added to gshard (the slot is free once the group's ops ran; the next gather into it
 * follows on the same stream). */
typedef struct {
    const hyp_z3_layout *lay;       /* the layout (not owned) */
    void **ptr;                     /* per plan buffer: where a group's param/grad buffer lives now */
    float *slot[HYP_Z3_MAX_SLOTS]; /* device: [lay->slot_cap] each */
    hyp_stream *comm;
    hyp_event *ready[HYP_Z3_MAX_SLOTS], *freed[HYP_Z3_MAX_SLOTS]; /* slot gathered; its ops ran */
    hyp_event *start, *gdone, *wsfree, *done; /* compute so far; a group's grads; workspace free; comm */
} exec_dev_z3;

/* v2165 graphs (exec_dev_graph.c, docs/cuda-graphs.md): the regions of a step that are captured
 * once and replayed — each a stretch of device work on the default stream between two points
 * where the host must wait or decide (the forward; the backward up to the fused loss, whose
 * losses the host reads; the rest of the backward; the gradient norm) */
enum { EXD_G_FWD, EXD_G_BWD_HEAD, EXD_G_BWD_TAIL, EXD_G_NORM, EXD_G_MAX };
#define EXD_G_KEYS 4
typedef struct {
    hyp_graph *g;                   /* NULL: not captured (yet) */
    double key[EXD_G_KEYS];         /* the host values the region's launches were built from */
    int seen;                       /* the region ran eagerly once with this key (the warm-up) */
    unsigned long long nodes;       /* host calls the capture recorded */
} exec_dev_graph;

typedef struct {
    const plan_t *p;
    hyp_device *dev;
    /* v2165 (exec_dev_set_graphs): regions captured on their second run with the same key and
     * replayed from the third; counters for the launches-per-step report */
    int graphs;
    exec_dev_graph gr[EXD_G_MAX];
    unsigned long long g_captures, g_replays, g_nodes_replayed, g_nodes_captured;
    double g_issue_s;               /* host seconds spent issuing the regions (bodies or graph launches) */
    float *params, *grads;          /* device: [param_floats] each */
    float *state[HYP_OPT_MAX_STATE];/* device: the optimizer's states (plan optimizer.state), each
                                       the arena or this rank's shard */
    int n_state;
    void *acts;                     /* device: [act_bytes] laid out in bytes (plan offset_bytes):
                                       f32 buffers, and bf16 ones under v2102 storage bf16 */
    /* v2102 storage bf16 (the plan stores activations in bf16): the GEMMs read the weights and
     * biases from a bf16 copy of the parameter arena, cast (cast.cu's cast_f32_bf16, round to
     * nearest even) at the first forward after the parameters changed (an optimizer launch, an
     * upload, exec_dev_params_changed): once per optimizer step */
    int act_bf16;                   /* the plan stores any activation in bf16 */
    uint16_t *wcopy;                /* device: [arena] bf16 copy of params, NULL without act_bf16 */
    int wstale;                     /* wcopy must be cast again before the next GEMM */
    int cast_file;                  /* the module with cast_f32_bf16, -1: none */
    int gemm_file;                  /* v2119: gemm.cu (gemm_bf16, bias+GELU with aux), run at the gelu-marked GEMMs; -1: none */
    uint16_t *ones_bf16;            /* device: [maxB * maxT] bf16 1.0 (bias gradients of bf16 dout) */
    int32_t *tokens, *targets;      /* device: [maxB * maxT] */
    int32_t *positions;             /* device: [maxB * maxT] v2126 document positions, or NULL
                                       when the plan has no "positions" buffer */
    float *ones;                    /* device: [maxB * maxT] of 1.0f (bias-gradient GEMMs) */
    float *scratch;                 /* device: kernel scratch (kernels.json scratch bindings) */
    int32_t *h_tokens, *h_targets;  /* host: filled by the caller, uploaded by forward */
    int32_t *h_positions;           /* host: likewise (NULL without the buffer); exec_dev_bind sets
                                       row positions 0..T-1 */
    float *h_losses;                /* host: [maxB * maxT] */
    struct exec_dev_up *up;         /* v2128 pinned batch buffers and their copy stream
                                       (exec_dev_copy.c); NULL: pageable, default stream */
    int B, T;                       /* bound batch shape (<= the plan's) */
    size_t bytes;                   /* device bytes allocated */
    exec_dev_file *files;
    int n_files;
    exec_dev_launch *launches;
    int n_launches;
    exec_dev_op *fwd, *bwd, loss;   /* per plan op */
    int64_t n_scratch;              /* floats of scratch */
    /* the optimizer launch of kernels.json (ops.optimizer), run by the plan's optimizer (optim/optim.h) */
    int opt_file;                   /* index into files, -1: none */
    char opt_kernel[64];            /* its kernel */
    char opt_p0[32];                /* the type of its first parameter ("float*": fp32 weights) */
    int opt_nparams;                /* its parameter count */
    char opt_grid[64];              /* its grid expression */
    float *opt_work;                /* device: [opt_work_n] an optimizer's workspace (exec_dev_optim_work) */
    int64_t opt_work_n;
    int nseg;                       /* parameter tensors, sorted by offset */
    int64_t *seg_end;               /* device: [nseg] exclusive ends (the last is param_floats) */
    float *seg_wd;                  /* device: [nseg] a per-tensor scalar (the weight decay) */
    float *h_seg_wd;                /* host: [nseg] */
    int *seg_group;                 /* host: [nseg] the tensor's optimizer group (-1: padding) */
    /* data parallelism (exec_dev_init_dp): the arena is world equal shards (exec.c's layout) */
    int world, rank, stage;         /* stage: ZeRO 0..3 */
    int64_t shard, arena;           /* floats per rank, world * shard (>= param_floats) */
    float *gshard;                  /* device: [shard] reduce-scattered gradients (stage >= 2) */
    int sh_nseg;                    /* this rank's shard's tensor table (stage >= 1) */
    int64_t *sh_seg_end;            /* device: [sh_nseg] ends relative to the shard's start */
    float *sh_seg_wd, *sh_h_wd;     /* device, host: [sh_nseg] per-tensor scalar */
    int *sh_group;                  /* host: [sh_nseg] */
    size_t bytes_params, bytes_grads, bytes_optim, bytes_acts; /* device bytes by role (of bytes);
                                       bytes_params includes the bf16 weight copy */
    size_t bytes_grad_workspace;    /* stages 2-3: the backward gradient workspace (not in bytes_grads) */
    exec_dev_z3 *z3;                /* stage 3 only; then params/state/gshard are [shard] in the group
                                       layout and grads is the one-group workspace */
    /* stage 2 (v2104): the gradient schedule of ZeRO-3 without its gathers — grads is a one-group
     * workspace; after each group's backward its range is reduced (collective reduce, to each
     * owner of a part) and the own part added to gshard, the flat shard of stages 1-2. NULL for
     * a plan ZeRO-3's layout cannot cut into groups (then the full arena, reduce-scattered after
     * backward, as before). */
    hyp_z3_layout *zg;
    void **zg_ptr;                  /* per plan buffer: where a group's gradient buffer lives now */
    /* ---- v2160 FP8 (delayed or current scaling): one scaling state per plan fp8 slot. The cast kernels
     * bind "fp8.scale[slot]", "fp8.scale_inv[slot]", "fp8.amax[slot]"; the amax of every cast in
     * a step is merged (max) into fp8_amax, which exec_dev_fp8_step folds into the host histories.
     * Data parallel: all-reduce fp8_amax (fp8_slots floats, max) across ranks before the step. */
    float *fp8_scale, *fp8_scale_inv, *fp8_amax; /* device: [p->fp8_slots] each */
    hyp_fp8_state *fp8;             /* host: [p->fp8_slots] amax histories and scales */
    float *h_fp8;                   /* host: [p->fp8_slots] staging */
    /* plan fp8.gemm "fp8": the layer GEMMs multiply fp8 bytes (cuBLASLt TN) that the cast kernels
     * write next to each fake-quantized copy ("fp8.q[slot]" as stored [n][C], "fp8.qt[slot]"
     * transposed [C][n]); fp8_slot_of maps a fake-quantized buffer to its slot */
    int fp8_gemm;
    void **fp8_q, **fp8_qt;         /* device: per slot, n*C bytes each */
    int *fp8_slot_of;               /* host: [p->n_bufs] slot or -1 */
    /* ---- the fused loss's extension (kernels.json "crossentropy_fused_ext", rendered for a plan
     * that trains a preference objective or distills; exec_dev_loss.c): while row_scale or teacher
     * is set, the backward's crossentropy_fused op launches it instead (per-token gradient
     * weights; the distillation loss against a teacher's logits) ---- */
    exec_dev_op loss_ext;           /* how EXD_NONE: the manifest has no such launch */
    int loss_ext_op;                /* the backward op it stands in for, -1: none */
    float *row_scale, *teacher;     /* device: the set [B*T] weights, [B*T][teacher_vp] logits; NULL: off */
    float *row_scale_buf, *teacher_buf; /* device: their allocations (made on first use) */
    int64_t teacher_cap;            /* floats of teacher_buf */
    int teacher_vp;
    float temperature, alpha;
    int fwd_only;                   /* exec_dev_init_forward: no gradients, states, loss or backward */
    struct exec_dev_moe *moe;       /* the MoE ops' module and workspace (exec_dev_moe.c); NULL: none */
} exec_dev;

/* Allocates the device arenas (params and grads: the arena; the optimizer's states: the arena, or
 * this rank's shard for stage >= 1; stage >= 2 adds gshard), parses kernels_dir/kernels.json, loads every
 * module through dev->module_load (the manifest's cubin on cuda, the rendered .cu on sim) and
 * prepares the launches of every plan op. An op with no launch in the manifest (and that is not a
 * matmul or zero) is an error naming it. */
int exec_dev_init_dp(exec_dev *x, const plan_t *p, const char *kernels_dir, hyp_device *dev, int world, int rank,
                     int stage, hyp_err *e);
/* ZeRO stage 3 in layout lay (core/zero3.h, this rank's: its world, rank, groups and segments —
 * the host mirror's, exec_t.z3->L, so that checkpoints agree); lay must outlive x. The device
 * collectives must be initialized (comm_init) when lay->world > 1. */
int exec_dev_init_z3(exec_dev *x, const plan_t *p, const char *kernels_dir, hyp_device *dev, const hyp_z3_layout *lay,
                     hyp_err *e);
/* One rank, no ZeRO. */
int exec_dev_init(exec_dev *x, const plan_t *p, const char *kernels_dir, hyp_device *dev, hyp_err *e);
/* A frozen model's forward only (the v2149 teacher): one rank, the parameter and activation
 * arenas, no gradient arena, optimizer states, loss or backward launches (only exec_dev_bind,
 * exec_dev_upload_params, exec_dev_forward and exec_dev_buf are meaningful on it). */
int exec_dev_init_forward(exec_dev *x, const plan_t *p, const char *kernels_dir, hyp_device *dev, hyp_err *e);
void exec_dev_free(exec_dev *x);
/* Binds the batch shape for the following runs; B <= plan B, T <= plan T. */
int exec_dev_bind(exec_dev *x, int B, int T, hyp_err *e);
/* Parameters: host array of param_floats floats in exec.c's layout (not at stage 3: HYP_EINPUT). */
int exec_dev_upload_params(exec_dev *x, const float *host, hyp_err *e);
int exec_dev_download_params(exec_dev *x, float *host, hyp_err *e);
int exec_dev_download_grads(exec_dev *x, float *host, hyp_err *e);
int exec_dev_zero_grads(exec_dev *x, hyp_err *e);
/* The parameters were written behind the executor's back (a copy into x->params, a collective):
 * the bf16 weight copy (v2102 storage bf16) is cast again before the next forward. */
void exec_dev_params_changed(exec_dev *x);
/* Copies a plan buffer (by index) to the host: n floats from its start (a bf16 buffer is widened
 * to fp32, exactly). */
int exec_dev_download_buf(exec_dev *x, int idx, float *host, int64_t n, hyp_err *e);
/* Uploads h_tokens/h_targets (and h_positions), then runs the forward pass up to the logits. */
int exec_dev_forward(exec_dev *x, hyp_err *e);

/* v2128 (exec_dev_copy.c): the batch host buffers, pinned unless HYP_PINNED_BATCH=0, uploaded on a
 * copy stream the compute stream waits for. Call exec_dev_batch_wait before writing a new batch
 * into h_tokens/h_targets/h_positions while an upload may be in flight. */
int exec_dev_batch_alloc(exec_dev *x, int64_t maxN, int positions, hyp_err *e);
void exec_dev_batch_free(exec_dev *x);
int exec_dev_batch_upload(exec_dev *x, hyp_err *e);
int exec_dev_batch_wait(exec_dev *x, hyp_err *e);
long exec_dev_batch_async_uploads(const exec_dev *x); /* -1 when off */
/* Forward + loss (no gradients): the mean loss over non-ignored targets in *loss. */
int exec_dev_eval_loss(exec_dev *x, float *loss, hyp_err *e);
/* Fused loss + dlogits (scaled by dloss) then the backward pass, accumulating into grads; the
 * mean loss of this micro-batch in *loss (losses copied back with d2h). */
int exec_dev_backward(exec_dev *x, float dloss, float *loss, hyp_err *e);

/* ---- pieces of the device training step (train/backend_dev.c); all on the default stream, not
 * synchronized ---- */
/* exec_dev_backward, calling after(ctx, i) once bwd op i is enqueued (comm overlap hooks); with a
 * hook the default stream is left unsynchronized: the caller synchronizes what the hook started. */
int exec_dev_backward_each(exec_dev *x, float dloss, float *loss, int (*after)(void *ctx, int op, hyp_err *e),
                           void *ctx, hyp_err *e);
/* The global_norm kernels (templates/global_norm.cu.lua): PARTS partial sums of squares (0: no
 * such module), the partials of g[n] into partial[PARTS], and the finish: out[0] = the norm of
 * the summed partials, out[1] = the clip factor for max_norm (1 when max_norm <= 0). */
int exec_dev_norm_parts(const exec_dev *x);
int exec_dev_norm_partial(exec_dev *x, const float *g, int64_t n, float *partial, hyp_err *e);
int exec_dev_norm_finish(exec_dev *x, const float *partial, float max_norm, float *out, hyp_err *e);
/* What the optimizer updates on this rank (optim/optim.h): the whole arena (stage 0) or the
 * rank's shard (stage >= 1; gradients from gshard for stage >= 2, else from the arena), and the
 * tensor table of that range, for kernels that take per-tensor scalars. */
typedef struct {
    float *param;                   /* device: [n] */
    const float *grad;              /* device: [n] */
    float *state[HYP_OPT_MAX_STATE];/* device: [n] each */
    int64_t n;
    int nseg;                       /* segments of one tensor each (or padding) */
    const int64_t *seg_end;         /* device: [nseg] exclusive ends relative to param */
    const int *seg_group;           /* host: [nseg] the segment's optimizer group, -1: padding */
    float *seg_val, *h_seg_val;     /* device, host: [nseg] a per-segment scalar the optimizer fills */
} exec_dev_own;
/* HYP_EINPUT naming kernels.json when the manifest has no optimizer launch of that kernel whose
 * first parameter has type p0 and that takes nparams parameters. */
int exec_dev_optim_own(exec_dev *x, const char *kernel, const char *p0, int nparams, exec_dev_own *o, hyp_err *e);
/* Launches the manifest's optimizer kernel over n floats (its grid expression at n, its BLOCK). */
int exec_dev_optim_launch(exec_dev *x, int64_t n, hyp_kargs *a, hyp_err *e);
/* For an optimizer whose step is several kernels of the optimizer launch's module (Muon): a
 * constant of that module (its BLOCK, PARTS) in *v (HYP_EINPUT when it has none), and a launch of
 * the module's kernel `kernel` on grid blocks of its BLOCK threads. */
int exec_dev_optim_const(const exec_dev *x, const char *name, double *v, hyp_err *e);
int exec_dev_optim_launch_grid(exec_dev *x, const char *kernel, unsigned grid, hyp_kargs *a, hyp_err *e);
/* A device workspace of at least n floats for the optimizer's step, kept (and grown) across steps,
 * counted in x->bytes; freed with x. */
int exec_dev_optim_work(exec_dev *x, int64_t n, float **out, hyp_err *e);
/* v2160 FP8, once per optimizer step (after it), as exec.c's exec_fp8_step: the step's amax of
 * every slot (x->fp8_amax, downloaded) goes into its history, delayed scaling recomputes scale =
 * fp8_max * 2^-margin / max(history) and scale_inv (runtime/fp8.c), both are uploaded and the
 * device amax is cleared for the next step. A no-op for a plan without fp8 slots, and for current
 * scaling (each cast takes its tensor's amax and sets its scale on the device first). */
int exec_dev_fp8_step(exec_dev *x, hyp_err *e);
/* Replaces the host scaling states by st[p->fp8_slots] (a checkpoint's, or the host executor's) and
 * uploads their scales. */
int exec_dev_fp8_set_states(exec_dev *x, const hyp_fp8_state *st, hyp_err *e);

/* ---- v2165 graphs (exec_dev_graph.c) ---- */
/* Turns capture and replay of the regions on (1) or off (0: eager, the graphs freed). Work that
 * involves collectives or another stream forms no region and runs eagerly: the forward and
 * backward of ZeRO-3, the backward of ZeRO-2's gradient schedule and of the v2110 overlap hooks. */
int exec_dev_set_graphs(exec_dev *x, int on, hyp_err *e);
/* Runs region `slot`: body(x, ctx) issues its work on the default stream. Eager when graphs are
 * off or a profile is being taken (v2184 times each op with events); else with a key (nkey <=
 * EXD_G_KEYS values: every host value the body's launches depend on) not seen before, eagerly (a
 * warm-up: lazily made cuBLASLt workspaces and plans are made outside any capture); the second
 * time it is captured, and replayed by one graph launch from then on. The body must enqueue only
 * on the default stream and must not synchronize. */
int exec_dev_region(exec_dev *x, int slot, const double *key, int nkey, int (*body)(exec_dev *x, void *ctx, hyp_err *e),
                    void *ctx, hyp_err *e);
void exec_dev_free_graphs(exec_dev *x);

/* ---- the fused loss's extension (exec_dev_loss.c) ---- */
/* Whether the manifest has the crossentropy_fused_ext launch (else the setters refuse). */
int exec_dev_has_loss_ext(const exec_dev *x);
/* Per-token gradient weights for the following backward passes: the fused loss's gradient of token
 * n (dloss included) is multiplied by host[n], n < B*T (uploaded now); NULL: off. */
int exec_dev_set_row_scale(exec_dev *x, const float *host, hyp_err *e);
/* A distillation teacher for the following backward passes: host holds its logits of the bound
 * batch, B*T rows of vp floats (the first V valid; uploaded now); the fused loss becomes
 * (1 - alpha) * CE + alpha * T^2 * KL(teacher / T || logits / T). NULL: off. */
int exec_dev_set_teacher(exec_dev *x, const float *host, int vp, float temperature, float alpha, hyp_err *e);
/* The same with the teacher's logits already on this device (dev: B*T rows of vp floats, e.g. a
 * second executor's logits buffer, exec_dev_buf): nothing is copied; dev must stay valid until
 * the backward that reads it. */
int exec_dev_use_teacher(exec_dev *x, const float *dev, int vp, float temperature, float alpha, hyp_err *e);
/* The device address of plan buffer idx (params, grads, activations, tokens), NULL when none. */
void *exec_dev_buf(exec_dev *x, int idx);
/* The launches of backward op i: the extension's while it is on and i is the op it replaces. */
const exec_dev_op *exec_dev_bwd_op(const exec_dev *x, int i);

#endif
