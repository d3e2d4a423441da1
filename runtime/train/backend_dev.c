/* backend_dev.c — the device layer (sim and cuda) as a trainer backend (backend.h): micro-batches
 * through the rendered kernels (exec_dev.h), data parallelism and ZeRO over the device
 * collectives (stage 0: all-reduce the gradients; 1: all-reduce, the optimizer on the own shard,
 * all-gather the parameters; 2: reduce-scatter, the optimizer on the shard, all-gather; 3:
 * per-layer gathers and reduce-scatters inside forward/backward, the optimizer on the shards),
 * the global gradient norm on the device with the global_norm kernels (partial sums of squares,
 * all-reduced across ranks when the gradients are sharded, finish) and the clip factor read by
 * the optimizer's kernel from device memory: no gradient leaves the device.
 *
 * With more than one rank and stage 0/1, the all-reduce of the last micro-batch's gradients
 * overlaps the backward pass (v2110): the arena is cut into buckets (contiguous parameter tensors
 * of one layer); after the last backward op that touches a bucket's gradients, an event on the
 * default (compute) stream orders that bucket's all-reduce on a communication stream; the host
 * waits for the communication stream's last event before the norm (with v2168, plan
 * train.comm_streams, the compute stream waits for it instead: cuStreamWaitEvent, the host goes
 * on issuing the norm and the optimizer). HYP_COMM_OVERLAP=0 turns this off (one all-reduce of
 * the whole arena after backward).
 *
 * v2162 loss scaling (ls_check): the gradients arrive scaled by S; the norm kernels run on them
 * as they are, the clip factor against max_norm x S (so it is the unscaled one), and the norm's
 * finish gives the inf/NaN verdict: a gradient holding inf or NaN makes the sum of squares, hence
 * the norm, non-finite (so does a finite scaled gradient whose square overflows fp32, beyond
 * ~1.8e19: counted as an overflow too, where the cpu's per-value check would not). The host reads
 * the 2 floats (a wait before the update, as the v2176 guard's peek does), and on a clean step
 * writes back norm / S and clip / S: the optimizer kernel's gradient scale becomes clip / S, the
 * unscale folded in, no pass over the gradients.
 *
 * v2165 graphs (plan train.cuda_graphs, or HYP_CUDA_GRAPHS=1; =0 turns them off): the forward, the
 * two backward regions (exec_dev.c) and the norm (below) are captured once and replayed where no
 * collective runs inside them; what stays eager, and why, is in docs/cuda-graphs.md. The host calls per
 * step (device.h `calls`) of the last step are reported at the end.
 *
 * The host executor x is a mirror without activations: it initializes, checkpoints and samples.
 * Never: the micro-batch loop or loss weighting (the driver, backend.c). */
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "async_dp.h"
#include "coll.h"
#include "device.h"
#include "exec_dev.h"
#include "gnb.h"
#include "grad_buckets.h"
#include "moe_layout.h"
#include "moe_stats.h"
#include "op_registry.h"

typedef struct {
    int64_t lo, hi;   /* arena range [lo, hi) */
    int ready;        /* its all-reduce starts after this backward op */
    hyp_event *ev;
    hyp_event *ev_s, *ev_e; /* v2168: its all-reduce's start and end on the comm stream (timing) */
} dev_bucket;

typedef struct {
    int on;           /* the device is open */
    hyp_device *dev;
    exec_dev xd;
    int rank, world, stage;
    float *partial;   /* device: [PARTS] partial sums of squares */
    float *gnorm;     /* device: [2] norm, clip factor */
    float h_gnorm[2];
    double ls_S;      /* v2162: the loss scale this step's gradients carry (1: none) */
    int ls_folded;    /* gnorm holds norm / S and clip / S */
    float h_ls[2];    /* the folded pair, uploaded from here */
    hyp_stream *comm; /* the communication stream (world > 1) */
    hyp_event *comm_done;
    dev_bucket *buckets;
    int n_buckets, overlap;
    int lsgd;         /* v2173 local SGD over world > 1 ranks: no gradient all-reduce, each rank's
                         gradients times world (dloss x world), the outer step on the host */
    int adp;          /* v2174 async dp: no device all-reduce; the gradients go to the host mirror,
                         through train_async_grads (the delayed sum) and back (dev_reduce_grads) */
    /* v2168 (plan train.comm_streams): the compute stream's point after backward, and whether this
     * step's buckets were posted (their events are read after finish_step's synchronize) */
    hyp_event *bwd_done;
    int measure, posted;
    char title[64];   /* "sim device memory" */
    train_avg_state avg; /* the schedule-free averaging weight's running sums */
    /* v2149 device teacher (train_backend_dev_teacher): its executor over the teacher's plan and
     * the index of its logits buffer; t_on 0: none (or the host teacher) */
    int t_on, t_logits, t_vp;
    exec_dev txd;
    char kdir[PATH_MAX]; /* the student's kernels */
    /* v2165: host calls (device.h calls) and region counters at the end of the previous step, and
     * the last step's figures */
    unsigned long long mark_calls, mark_replays, mark_nodes, mark_captured, step_calls, step_eager, step_graphs;
    double mark_issue, step_issue_s, issue_sum; /* issue_sum: steps 3.. (after warm-up and capture) */
    int steps_seen, issue_n;
} train_dev;

/* Buckets of contiguous tensors of one layer covering the arena, each with the backward op after
 * which its gradients are final (grad_buckets.h, the cpu trainer's v2168 buckets too); the
 * communication stream and its events. */
static int make_buckets(train_dev *t, hyp_err *e) {
    grad_bucket *gb = NULL;
    int rc = grad_buckets_make(t->xd.p, t->xd.arena, &gb, &t->n_buckets, e);
    if (rc) return rc;
    if (!(t->buckets = calloc((size_t)t->n_buckets, sizeof *t->buckets))) {
        free(gb);
        return hyp_fail(e, HYP_EFAIL, "out of memory");
    }
    for (int i = 0; i < t->n_buckets; i++) t->buckets[i].lo = gb[i].lo, t->buckets[i].hi = gb[i].hi, t->buckets[i].ready = gb[i].ready;
    free(gb);
    rc = t->dev->stream_create(t->dev, &t->comm, e);
    if (!rc) rc = t->dev->event_create(t->dev, &t->comm_done, e);
    for (int i = 0; i < t->n_buckets && !rc; i++) rc = t->dev->event_create(t->dev, &t->buckets[i].ev, e);
    t->measure = t->xd.p->comm_streams > 0;
    for (int i = 0; i < t->n_buckets && !rc && t->measure; i++)
        if (!(rc = t->dev->event_create(t->dev, &t->buckets[i].ev_s, e))) rc = t->dev->event_create(t->dev, &t->buckets[i].ev_e, e);
    if (!rc && t->measure) rc = t->dev->event_create(t->dev, &t->bwd_done, e);
    return rc;
}

/* exec_dev_backward_each's hook: start the all-reduce of every bucket whose gradients op made final. */
static int after_bwd_op(void *ctx, int op, hyp_err *e) {
    train_dev *t = ctx;
    hyp_device *d = t->dev;
    int rc = HYP_OK;
    for (int i = 0; i < t->n_buckets && !rc; i++) {
        dev_bucket *b = &t->buckets[i];
        if (b->ready != op) continue;
        if (!(rc = d->event_record(d, b->ev, NULL, e)) && !(rc = d->event_wait(d, t->comm, b->ev, e)) &&
            !(rc = t->measure ? d->event_record(d, b->ev_s, t->comm, e) : HYP_OK))
            rc = d->all_reduce(d, t->xd.grads + b->lo, (size_t)(b->hi - b->lo), HYP_DT_F32, HYP_RED_SUM, t->comm, e);
        if (!rc && t->measure) rc = d->event_record(d, b->ev_e, t->comm, e), t->posted = 1;
    }
    return rc;
}

/* The bytes of optimizer state k on this rank: `bytes`, or a packed state's own size (stage 0). */
static size_t state_bytes(const exec_t *x, int k, size_t bytes) {
    const hyp_optim_cfg *o = &x->p->optim;
    return o->state_compact[k] ? sizeof(float) * (size_t)o->state_floats[k] : bytes;
}

/* The host's optimizer states into the device's (bytes each, or a packed state's size). */
static int upload_states(train_dev *t, const exec_t *x, size_t bytes, hyp_err *e) {
    int rc = HYP_OK;
    for (int k = 0; k < x->n_state && !rc; k++)
        rc = t->dev->h2d_sync(t->dev, t->xd.state[k], x->state[k], state_bytes(x, k, bytes), e);
    return rc;
}

static int open_dev(train_dev *t, const dp_t *dp, const plan_t *p, const char *plan_path, exec_t *x, int B, int T,
                    hyp_err *e) {
    hyp_coll *coll = dp->coll;
    int stage = dp->stage;
    t->rank = dp->rank, t->world = dp->world, t->stage = stage;
    char kdir[PATH_MAX];
    snprintf(kdir, sizeof kdir, "%s", plan_path);
    char *slash = strrchr(kdir, '/');
    if (slash) snprintf(slash, sizeof kdir - (size_t)(slash - kdir), "/kernels");
    else snprintf(kdir, sizeof kdir, "kernels");
    snprintf(t->kdir, sizeof t->kdir, "%s", kdir);
    int rc;
    if (!dp->opt->step_device)
        return hyp_fail(e, HYP_EINPUT, "optimizer '%s' has no device implementation — generate the trainer for --target cpu", dp->opt->kind);
    if ((rc = hyp_device_open(p->backend, &t->dev, e))) return rc;
    t->on = 1;
    snprintf(t->title, sizeof t->title, "%s device memory", t->dev->name);
    if (t->world > 1 && (rc = t->dev->comm_init(t->dev, coll, e))) return rc;
    if (!x->moe && (rc = exec_moe_init(x, e))) return rc; /* the MoE layers' router statistics (dev_moe_stats) */
    if ((rc = stage == 3 ? exec_dev_init_z3(&t->xd, p, kdir, t->dev, &x->z3->L, e)
                         : exec_dev_init_dp(&t->xd, p, kdir, t->dev, t->world, t->rank, stage, e)) ||
        (rc = exec_dev_bind(&t->xd, B, T, e)))
        return rc;
    if (t->xd.shard != x->shard)
        return hyp_fail(e, HYP_EFAIL, "internal error: device shard %lld floats, host %lld", (long long)t->xd.shard,
                        (long long)x->shard);
    int parts = exec_dev_norm_parts(&t->xd);
    if (!parts) return hyp_fail(e, HYP_EINPUT, "%s/kernels.json has no global_norm module — regenerate the trainer with gen", kdir);
    size_t optim = sizeof(float) * (size_t)(stage >= 1 ? x->shard : t->xd.arena);
    size_t params = sizeof(float) * (size_t)(stage >= 3 ? x->shard : t->xd.arena); /* stage 3: the shard */
    hyp_device *d = t->dev;
    if ((rc = d->mem_alloc(d, (void **)&t->partial, sizeof(float) * (size_t)parts, e)) ||
        (rc = d->mem_alloc(d, (void **)&t->gnorm, 2 * sizeof(float), e)) ||
        (rc = d->h2d_sync(d, t->xd.params, x->params, params, e)) || (exec_dev_params_changed(&t->xd), 0) ||
        (rc = upload_states(t, x, optim, e)) || (rc = exec_dev_fp8_set_states(&t->xd, x->fp8, e))) /* FP8 scaling states (resumed or fresh) */
        return rc;
    const char *ov = getenv("HYP_COMM_OVERLAP");
    t->lsgd = p->lsgd_every > 0 && t->world > 1;
    t->adp = p->adp_on;
    t->overlap = t->world > 1 && stage <= 1 && p->comm_overlap && !(ov && !strcmp(ov, "0")) && !t->lsgd && !t->adp;
    const char *gv = getenv("HYP_CUDA_GRAPHS");
    if (gv && *gv && strcmp(gv, "0") && strcmp(gv, "1"))
        return hyp_fail(e, HYP_EINPUT, "HYP_CUDA_GRAPHS=%s — use 1 (capture and replay the step's regions, v2165) or 0 (eager)", gv);
    if ((gv && *gv ? !strcmp(gv, "1") : p->cuda_graphs) && (rc = exec_dev_set_graphs(&t->xd, 1, e))) return rc;
    return t->overlap ? make_buckets(t, e) : HYP_OK;
}

static void close_dev(train_dev *t) {
    if (!t->on) return;
    hyp_device *d = t->dev;
    hyp_err e;
    if (t->steps_seen) /* v2165: the last step's host calls (launches, GEMMs, copies, graph launches) */
        printf("device calls per step: %llu host calls%s (eager equivalent %llu), %llu graph launches; region issue time %.1f us/step (%s); cuda graphs %s (v2165)\n",
               t->step_calls, t->xd.graphs ? " with graphs" : "", t->step_eager, t->step_graphs,
               (t->issue_n ? t->issue_sum / t->issue_n : t->step_issue_s) * 1e6, t->issue_n ? "mean from step 3" : "last step",
               t->xd.graphs ? "on" : "off");
    d->synchronize(d, &e);
    for (int i = 0; i < t->n_buckets; i++) {
        if (t->buckets[i].ev) d->event_destroy(d, t->buckets[i].ev);
        if (t->buckets[i].ev_s) d->event_destroy(d, t->buckets[i].ev_s);
        if (t->buckets[i].ev_e) d->event_destroy(d, t->buckets[i].ev_e);
    }
    if (t->bwd_done) d->event_destroy(d, t->bwd_done);
    free(t->buckets);
    if (t->comm_done) d->event_destroy(d, t->comm_done);
    if (t->comm) d->stream_destroy(d, t->comm);
    d->mem_free(d, t->partial, &e);
    d->mem_free(d, t->gnorm, &e);
    if (t->t_on) exec_dev_free(&t->txd);
    exec_dev_free(&t->xd);
    d->close(d);
    memset(t, 0, sizeof *t);
}

/* v2165: the norm region's body (the norm and clip factor stay on the device: the optimizer reads
 * the clip factor from gnorm[1], so replaying this region passes no stale value) */
typedef struct {
    train_dev *t;
    const float *g;
    int64_t n;
    float max_norm;
} norm_ctx;
static int norm_body(exec_dev *xd, void *ctx, hyp_err *e) {
    const norm_ctx *c = ctx;
    int rc = exec_dev_norm_partial(xd, c->g, c->n, c->t->partial, e);
    return rc ? rc : exec_dev_norm_finish(xd, c->t->partial, c->max_norm, c->t->gnorm, e);
}

/* The summed gradients this rank owns (all of them for stage 0/1, gshard for stage >= 2), then
 * the global norm and clip factor into gnorm on the default stream. */
static int reduce_and_norm(train_dev *t, float max_norm, hyp_err *e) {
    hyp_device *d = t->dev;
    exec_dev *xd = &t->xd;
    int rc = HYP_OK;
    const float *g = xd->grads;
    int64_t n = xd->arena;
    if (t->overlap) {
        /* the host waits for the last bucket's all-reduce, which waited for backward; under sim this
         * runs the bucket all-reduces as early as their events allow (interleaved with backward),
         * so a bucket reduced before its last gradient write gives wrong numbers */
        if (!(rc = d->event_record(d, t->comm_done, t->comm, e)) && t->measure && t->posted)
            rc = d->event_record(d, t->bwd_done, NULL, e); /* v2168: where the compute stream starts waiting */
        if (!rc)
            rc = xd->p->comm_streams > 0 ? d->event_wait(d, NULL, t->comm_done, e) /* v2168: the compute stream waits, not the host */
                                         : d->event_synchronize(d, t->comm_done, e);
    } else if (t->world > 1 && t->stage <= 1 && !t->lsgd && !t->adp) { /* v2173: each rank keeps its own; v2174: reduced on the host */
        rc = d->all_reduce(d, xd->grads, (size_t)xd->arena, HYP_DT_F32, HYP_RED_SUM, NULL, e);
    } else if (t->stage >= 2) { /* stage 3 reduce-scattered each group into gshard during backward */
        g = xd->gshard, n = xd->shard;
        if (t->stage == 2 && !xd->zg) /* with zg each group was reduced into gshard during backward */
            rc = t->world > 1 ? d->reduce_scatter(d, xd->grads, xd->gshard, (size_t)xd->shard, HYP_DT_F32, NULL, e)
                              : d->d2d(d, xd->gshard, xd->grads, sizeof(float) * (size_t)xd->shard, NULL, e);
    }
    if (!rc && xd->graphs && !(t->stage >= 2 && t->world > 1)) { /* v2165: partial + finish as one region (no all-reduce between) */
        norm_ctx c = {t, g, n, max_norm};
        double key[2] = {(double)n, max_norm};
        return exec_dev_region(xd, EXD_G_NORM, key, 2, norm_body, &c, e);
    }
    if (!rc) rc = exec_dev_norm_partial(xd, g, n, t->partial, e);
    if (!rc && t->stage >= 2 && t->world > 1) /* the shards' partial sums, summed across ranks */
        rc = d->all_reduce(d, t->partial, (size_t)exec_dev_norm_parts(xd), HYP_DT_F32, HYP_RED_SUM, NULL, e);
    if (!rc) rc = exec_dev_norm_finish(xd, t->partial, max_norm, t->gnorm, e);
    return rc;
}

static int dev_zero_grads(train_backend *b, hyp_err *e) {
    train_dev *t = b->impl;
    return exec_dev_zero_grads(&t->xd, e);
}

/* The batch in the host executor's tokens/targets into the device executor's staging. */
static void stage_batch(train_dev *t, const exec_t *x) {
    size_t n = sizeof(int32_t) * (size_t)x->B * x->T;
    memcpy(t->xd.h_tokens, x->tokens, n);
    memcpy(t->xd.h_targets, x->targets, n);
    if (t->xd.h_positions && x->positions) memcpy(t->xd.h_positions, x->positions, n);
}

/* Sophia's sampled-label pass (gnb.h): when one runs on x, the device's logits to the host, the
 * labels drawn there as the cpu pass draws them, and uploaded as the targets the device's loss
 * reads (the fused cross-entropy op: targets in, losses and logits out). */
static int dev_sampled_targets(train_dev *t, exec_t *x, hyp_err *e) {
    const plan_t *p = x->p;
    const plan_op *ce = NULL;
    for (int i = 0; i < p->n_bwd && !ce; i++)
        if (hyp_op_get(p->bwd[i].op)->flags & HYP_OPF_WRITES_LOSSES) ce = &p->bwd[i];
    if (!ce || ce->nout < 2 || ce->out[1] < 0) return HYP_OK; /* no fused loss: nothing to sample for */
    /* bf16 logits (v2102 storage bf16) come back widened to fp32 (exec_dev_download_buf) */
    int N = t->xd.B * t->xd.T, V = (int)ce->V, Vp = (int)ce->Vp;
    float *logits = malloc(sizeof(float) * (size_t)N * (size_t)Vp);
    int32_t *labels = malloc(sizeof(int32_t) * (size_t)N);
    int rc = logits && labels ? HYP_OK : hyp_fail(e, HYP_EFAIL, "out of memory for the sampled-label pass");
    if (!rc) rc = exec_dev_download_buf(&t->xd, ce->out[1], logits, (int64_t)N * Vp, e);
    if (!rc && gnb_labels(x, logits, t->xd.h_targets, labels, N, V, Vp))
        rc = t->dev->h2d_sync(t->dev, t->xd.targets, labels, sizeof(int32_t) * (size_t)N, e);
    free(logits);
    free(labels);
    return rc;
}

/* The router statistics of the MoE layers (cpu/moe_stats.h, kept on the host mirror x as the cpu
 * executor keeps them): each moe_bwd op's routing state (core/moe_layout.h) read back after the
 * backward, so the metrics' loads and aux loss are the ones the device op used. */
static int dev_moe_stats(train_dev *t, exec_t *x, hyp_err *e) {
    const plan_t *p = t->xd.p;
    int N = t->xd.B * t->xd.T, op = hyp_op_find("moe_bwd"), rc = HYP_OK;
    for (int i = 0; i < p->n_bwd && !rc; i++) {
        const plan_op *o = &p->bwd[i];
        if (o->op != op) continue;
        int64_t n = moe_state_floats(N, o->E, o->K);
        float *h = malloc(sizeof(float) * (size_t)n);
        if (!h) return hyp_fail(e, HYP_EFAIL, "out of memory");
        if (!(rc = exec_dev_download_buf(&t->xd, o->in[4], h, n, e))) exec_moe_add(x, o->in[4], h, N, (int)o->K);
        free(h);
    }
    return rc;
}

/* The last micro-batch's backward starts the bucket all-reduces (overlap). */
static int dev_micro_batch(train_backend *b, float dloss, int last, float *mean, hyp_err *e) {
    train_dev *t = b->impl;
    int rc0 = exec_dev_batch_wait(&t->xd, e); /* v2128: the previous upload has read the buffers */
    if (rc0) return rc0;
    stage_batch(t, b->x);
    int hook = t->overlap && last;
    int rc = HYP_OK;
    /* v2173: the rank's gradients times the world size, as train_local_sgd_grads scales the cpu's
     * (the backward is linear in dloss; x2 is exact in fp32 and bf16) */
    if (t->lsgd) dloss *= (float)t->world;
    if (b->teacher && t->t_on) { /* v2149 device teacher: its forward on the same tokens, logits stay on the device */
        size_t n = sizeof(int32_t) * (size_t)t->xd.B * t->xd.T;
        memcpy(t->txd.h_tokens, t->xd.h_tokens, n);
        memcpy(t->txd.h_targets, t->xd.h_targets, n);
        if (t->txd.h_positions && t->xd.h_positions) memcpy(t->txd.h_positions, t->xd.h_positions, n);
        rc = exec_dev_forward(&t->txd, e);
        if (!rc && t->txd.p->bufs[t->t_logits].dtype != HYP_DT_F32) /* the fused loss reads fp32 teacher logits */
            rc = hyp_fail(e, HYP_EINPUT, "distillation on the device: the teacher's logits are %s and the fused loss reads fp32 ones — generate the trainer with --set v2102.storage=fp32",
                          hyp_dtype_name(t->txd.p->bufs[t->t_logits].dtype));
        if (!rc)
            rc = exec_dev_use_teacher(&t->xd, exec_dev_buf(&t->txd, t->t_logits), t->t_vp, b->teacher->temperature,
                                      b->teacher->alpha, e);
    } else if (b->teacher) { /* v2149 host teacher: its logits of this batch uploaded into the fused loss */
        const float *zt = NULL;
        int stride = 0;
        rc = b->teacher->logits(b->teacher->ctx, b->x->tokens, b->x->B, b->x->T, &zt, &stride, e);
        if (!rc) rc = exec_dev_set_teacher(&t->xd, zt, stride, b->teacher->temperature, b->teacher->alpha, e);
    }
    if (!rc) rc = exec_dev_forward(&t->xd, e);
    if (!rc && b->x->loss_fused) rc = dev_sampled_targets(t, b->x, e); /* Sophia's GNB pass */
    if (!rc) rc = exec_dev_backward_each(&t->xd, dloss, mean, hook ? after_bwd_op : NULL, t, e);
    return rc || !b->x->moe ? rc : dev_moe_stats(t, b->x, e);
}

static int dev_reduce_grads(train_backend *b, const train_opts *o, hyp_err *e) {
    train_dev *t = b->impl;
    t->ls_S = b->ls.reduce_scale > 0 ? b->ls.reduce_scale : 1.0; /* v2162: clip against max_norm x S */
    t->ls_folded = 0;
    if (t->adp) { /* v2174: the host's delayed all-reduce (async_dp.c) on a copy, 2 x 4 B x arena of PCIe a step */
        if (t->stage != 0)
            return hyp_fail(e, HYP_EINPUT, "async dp (v2174) on the device needs the replicated gradient arena, and ZeRO stage %d shards it — regenerate without zero/fsdp", t->stage);
        hyp_device *d = t->dev;
        size_t bytes = sizeof(float) * (size_t)t->xd.arena;
        int rc = d->d2h_sync(d, b->x->grads, t->xd.grads, bytes, e);
        if (!rc) rc = train_async_grads(b->adp, b->x, &b->dp, b->adp_step, &b->adp_ready, e);
        if (!rc) rc = d->h2d_sync(d, t->xd.grads, b->x->grads, bytes, e);
        if (rc) return rc;
    }
    return reduce_and_norm(t, (float)(o->max_norm * t->ls_S), e);
}

/* v2162: the verdict from the norm (non-finite: an inf/NaN gradient); clean: norm / S and the clip
 * factor / S into gnorm, which the optimizer kernel reads as its gradient scale. */
static int dev_ls_check(train_backend *b, int *bad, hyp_err *e) {
    train_dev *t = b->impl;
    hyp_device *d = t->dev;
    int rc = d->d2h(d, t->h_gnorm, t->gnorm, sizeof t->h_gnorm, NULL, e);
    if (!rc) rc = d->stream_synchronize(d, NULL, e);
    if (rc) return rc;
    *bad = !isfinite(t->h_gnorm[0]);
    if (*bad || t->ls_S == 1.0) return HYP_OK;
    float inv = (float)(1.0 / t->ls_S);
    t->h_ls[0] = t->h_gnorm[0] * inv, t->h_ls[1] = t->h_gnorm[1] * inv;
    t->ls_folded = 1;
    return d->h2d(d, t->gnorm, t->h_ls, sizeof t->h_ls, NULL, e);
}

static int dev_optim_step(train_backend *b, const train_opts *o, double lr, int t_step, hyp_err *e) {
    train_dev *t = b->impl;
    hyp_device *d = t->dev;
    exec_dev *xd = &t->xd;
    /* the clip factor is read from the device: gnorm[1]; the averaging weight as backend_cpu.c's */
    hyp_optim_step a = {lr, t_step, 1.0f, b->dp.opt->eval_point ? train_avg_weight_next(o, t_step, &t->avg) : 1.0 / t_step, 0};
    int rc = b->dp.opt->step_device(&b->x->p->optim, xd, &a, t->gnorm + 1, e);
    if (!rc && t->stage >= 1 && t->stage <= 2 && t->world > 1) { /* stage 3: gathered per group */
        float *own = xd->params + xd->shard * t->rank;
        rc = d->all_gather(d, own, xd->params, (size_t)xd->shard, HYP_DT_F32, NULL, e);
    }
    exec_dev_params_changed(xd); /* the bf16 weight copy (v2102 storage bf16) is cast again */
    return rc;
}

/* v2168: this step's bucket all-reduces, timed by their events on the comm stream (the stream runs
 * them one after another: their sum is its busy time), and the exposed part: how long after the
 * compute stream finished backward the comm stream finished (what the compute stream waited for).
 * After the default stream's synchronize, which waited for comm_done. */
static int comm_figures(train_backend *b, hyp_err *e) {
    train_dev *t = b->impl;
    hyp_device *d = t->dev;
    double total = 0;
    float ms = 0;
    int rc = HYP_OK;
    for (int i = 0; i < t->n_buckets && !rc; i++)
        if (!(rc = d->event_elapsed_ms(d, t->buckets[i].ev_s, t->buckets[i].ev_e, &ms, e))) total += ms;
    if (!rc) rc = d->event_elapsed_ms(d, t->bwd_done, t->comm_done, &ms, e);
    if (rc) return rc;
    b->comm_total_s = total * 1e-3, b->comm_exposed_s = ms > 0 ? ms * 1e-3 : 0, b->comm_measured = 1;
    t->posted = 0;
    return HYP_OK;
}

static int dev_finish_step(train_backend *b, double *norm, float *scale, hyp_err *e) {
    train_dev *t = b->impl;
    hyp_device *d = t->dev;
    exec_dev *xd = &t->xd;
    int rc = d->d2h(d, t->h_gnorm, t->gnorm, sizeof t->h_gnorm, NULL, e); /* 2 floats, for the log */
    /* v2160 delayed scaling: every rank must scale with the same amax (TE reduces it too), then the
     * amax histories roll and the next step's scales are uploaded */
    if (!rc && b->x->p->fp8_slots && t->world > 1)
        rc = d->all_reduce(d, xd->fp8_amax, (size_t)b->x->p->fp8_slots, HYP_DT_F32, HYP_RED_MAX, NULL, e);
    if (!rc) rc = d->stream_synchronize(d, NULL, e);
    if (!rc && t->posted) rc = comm_figures(b, e); /* v2168 */
    if (!rc) rc = exec_dev_fp8_step(xd, e);
    /* v2165: this step's host calls; eager equivalent = each graph launch replaced by the calls it
     * recorded, a capture's recorded calls (issued, not run) not counted twice */
    t->step_calls = d->calls - t->mark_calls;
    t->step_graphs = xd->g_replays - t->mark_replays;
    t->step_eager = t->step_calls - t->step_graphs + (xd->g_nodes_replayed - t->mark_nodes) - (xd->g_nodes_captured - t->mark_captured);
    t->step_issue_s = xd->g_issue_s - t->mark_issue;
    t->mark_calls = d->calls, t->mark_replays = xd->g_replays, t->mark_nodes = xd->g_nodes_replayed, t->mark_issue = xd->g_issue_s;
    t->mark_captured = xd->g_nodes_captured;
    if (++t->steps_seen >= 3) t->issue_sum += t->step_issue_s, t->issue_n++;
    *norm = t->h_gnorm[0];
    *scale = t->ls_folded ? (float)(t->h_gnorm[1] * t->ls_S) : t->h_gnorm[1]; /* the clip factor alone */
    return rc;
}

/* The norm for the guard before the update (v2176): the 2 floats to the host, waited for. */
static int dev_peek_norm(train_backend *b, double *norm, hyp_err *e) {
    train_dev *t = b->impl;
    hyp_device *d = t->dev;
    int rc = d->d2h(d, t->h_gnorm, t->gnorm, sizeof t->h_gnorm, NULL, e);
    if (!rc) rc = d->stream_synchronize(d, NULL, e);
    *norm = t->h_gnorm[0];
    return rc;
}

static int dev_eval_batch(train_backend *b, float *loss, hyp_err *e) {
    train_dev *t = b->impl;
    stage_batch(t, b->x);
    return exec_dev_eval_loss(&t->xd, loss, e);
}

/* Device parameters and this rank's optimizer states into the host mirror (checkpoints,
 * sampling), and the FP8 scaling states. */
static int dev_sync_host(train_backend *b, hyp_err *e) {
    train_dev *t = b->impl;
    exec_t *x = b->x;
    hyp_device *d = t->dev;
    size_t optim = sizeof(float) * (size_t)(t->stage >= 1 ? t->xd.shard : t->xd.arena);
    size_t params = sizeof(float) * (size_t)(t->stage >= 3 ? t->xd.shard : t->xd.arena);
    int rc = d->d2h_sync(d, x->params, t->xd.params, params, e);
    for (int k = 0; k < x->n_state && !rc; k++) rc = d->d2h_sync(d, x->state[k], t->xd.state[k], state_bytes(x, k, optim), e);
    if (!rc && x->p->fp8_slots && x->fp8) /* the FP8 scaling states go into checkpoints too */
        memcpy(x->fp8, t->xd.fp8, sizeof *x->fp8 * (size_t)x->p->fp8_slots);
    return rc;
}

/* v2173 (backend.h params_host): the parameter arena to the host mirror or back, 4 x arena bytes
 * each way over PCIe on cuda, waited for. */
static int dev_params_host(train_backend *b, int to_device, hyp_err *e) {
    train_dev *t = b->impl;
    hyp_device *d = t->dev;
    if (t->stage != 0)
        return hyp_fail(e, HYP_EINPUT, "local SGD (v2173) on the device needs full parameters on every rank, and ZeRO stage %d shards them — regenerate without zero/fsdp", t->stage);
    size_t bytes = sizeof(float) * (size_t)t->xd.arena;
    if (!to_device) return d->d2h_sync(d, b->x->params, t->xd.params, bytes, e);
    int rc = d->h2d_sync(d, t->xd.params, b->x->params, bytes, e);
    exec_dev_params_changed(&t->xd); /* the bf16 weight copy (v2102 storage bf16) is cast again */
    return rc;
}

static void dev_memory(const train_backend *b, double *m) {
    const train_dev *t = b->impl;
    const exec_dev *xd = &t->xd;
    m[MEM_PARAMS] = (double)xd->bytes_params, m[MEM_GRADS] = (double)xd->bytes_grads;
    m[MEM_OPTIM] = (double)xd->bytes_optim, m[MEM_ACTS] = (double)xd->bytes_acts;
    m[MEM_GRAD_WORKSPACE] = (double)xd->bytes_grad_workspace;
    m[MEM_OTHER] = (double)xd->bytes - m[MEM_PARAMS] - m[MEM_GRADS] - m[MEM_OPTIM] - m[MEM_ACTS] - m[MEM_GRAD_WORKSPACE] +
                   sizeof(float) * (exec_dev_norm_parts(xd) + 2.0);
    if (t->t_on) m[MEM_OTHER] += (double)t->txd.bytes; /* v2149: the device teacher's arenas */
}

static const char *dev_memory_title(const train_backend *b) { return ((const train_dev *)b->impl)->title; }

static const char *dev_comm_note(const train_backend *b) {
    const train_dev *t = b->impl;
    if (t->lsgd) return "none per step: each rank keeps its own gradients; the parameter delta all-reduced on the host every sync_every steps (v2173 local SGD)";
    if (t->adp) return "the gradients copied to the host, all-reduced there non-blocking and applied staleness steps later, copied back (v2174 async dp)";
    if (t->overlap && t->xd.p->comm_streams > 0)
        return "per-layer buckets all-reduced on a comm stream while backward runs, the compute stream waiting on its event before the norm (v2110 overlap, v2168)";
    return t->overlap ? "per-layer buckets all-reduced on a comm stream while backward runs (v2110 overlap)"
           : t->stage == 2 && t->xd.zg ? "each layer group's gradients reduced to their owners right after its backward, on the compute stream (ZeRO stage 2: not overlapped)"
           : t->stage >= 3 ? "each layer group's gradients reduce-scattered on a comm stream right after its backward (ZeRO stage 3)"
           : t->stage >= 2 ? "reduce-scatter after backward (ZeRO stage 2 for a plan not cut into layer groups: not overlapped)"
                           : "all-reduce after backward (v2110 overlap off)";
}

static void dev_close(train_backend *b) {
    close_dev(b->impl);
    free(b->impl);
}

/* The preference objectives' two halves (backend.h): per-token losses of a forward, then the
 * backward with the fused loss's rows weighted on the device (crossentropy_fused_ext). */
static int dev_token_losses(train_backend *b, float *out, hyp_err *e) {
    train_dev *t = b->impl;
    float mean = 0;
    stage_batch(t, b->x);
    int rc = exec_dev_eval_loss(&t->xd, &mean, e); /* leaves the per-token losses in h_losses */
    if (!rc) memcpy(out, t->xd.h_losses, sizeof(float) * (size_t)t->xd.B * t->xd.T);
    return rc;
}

static int dev_weighted_backward(train_backend *b, const float *row_scale, hyp_err *e) {
    train_dev *t = b->impl;
    float mean = 0;
    int rc = exec_dev_set_row_scale(&t->xd, row_scale, e);
    if (!rc) rc = exec_dev_backward(&t->xd, 1.0f, &mean, e);
    hyp_err ignore;
    exec_dev_set_row_scale(&t->xd, NULL, &ignore);
    return rc;
}

/* Sophia: the Hessian estimate from the pass's reduced gradients (the optimizer's hess_device) */
static int dev_hess_step(train_backend *b, double tokens, int t_step, hyp_err *e) {
    train_dev *t = b->impl;
    const hyp_optim_i *o = b->dp.opt;
    if (!o->hess_device)
        return hyp_fail(e, HYP_EINPUT, "optimizer '%s' has no device Hessian update — generate the trainer for --target cpu", o->kind);
    hyp_optim_step a = {0, t_step, 1.0f, 0, tokens};
    return o->hess_device(&b->x->p->optim, &t->xd, &a, e);
}

/* schedule-free: the device parameters between y and x (the optimizer's eval_device) */
static int dev_eval_point(train_backend *b, int to_eval, hyp_err *e) {
    train_dev *t = b->impl;
    const hyp_optim_i *o = b->dp.opt;
    if (!o->eval_point) return HYP_OK;
    if (!o->eval_device)
        return hyp_fail(e, HYP_EINPUT, "optimizer '%s' cannot move the device parameters to its evaluation point — generate the trainer for --target cpu", o->kind);
    return o->eval_device(&b->x->p->optim, &t->xd, to_eval, e);
}

/* Whether the teacher's forward ops are the student's, op by op with every dimension (the
 * student's rendered kernels then fit the teacher's forward). */
static int same_forward(const plan_t *a, const plan_t *b) {
    if (a->n_fwd != b->n_fwd || a->V != b->V || a->Vp != b->Vp) return 0;
    for (int i = 0; i < a->n_fwd; i++) {
        const plan_op *o = &a->fwd[i], *q = &b->fwd[i];
        if (o->op != q->op || o->nin != q->nin || o->nout != q->nout || o->B != q->B || o->T != q->T || o->N != q->N ||
            o->C != q->C || o->IC != q->IC || o->OC != q->OC || o->NH != q->NH || o->NKV != q->NKV || o->hd != q->hd ||
            o->H != q->H || o->V != q->V || o->Vp != q->Vp || o->n != q->n || o->eps != q->eps || o->theta != q->theta ||
            o->scale != q->scale || o->alpha != q->alpha || o->slot != q->slot || o->bits != q->bits ||
            o->group != q->group || o->rowwise != q->rowwise)
            return 0;
    }
    return 1;
}

int train_backend_dev_teacher(train_backend *b, const train_teacher *tt, int *on, char *how, size_t cap, hyp_err *e) {
    *on = 0;
    if (b->i != &train_backend_dev_i || !tt->plan || !tt->params) { /* b is not this device layer */
        snprintf(how, cap, "on the host");
        return HYP_OK;
    }
    const char *env = getenv("HYP_TEACHER_DEVICE");
    if (env && !strcmp(env, "0")) {
        snprintf(how, cap, "on the host (HYP_TEACHER_DEVICE=0)");
        return HYP_OK;
    }
    train_dev *t = b->impl;
    const plan_t *tp = tt->plan, *sp = t->xd.p;
    char kdir[PATH_MAX], mf[PATH_MAX + 16];
    snprintf(kdir, sizeof kdir, "%s", tt->plan_path);
    char *slash = strrchr(kdir, '/');
    if (slash) snprintf(slash, sizeof kdir - (size_t)(slash - kdir), "/kernels");
    else snprintf(kdir, sizeof kdir, "kernels");
    snprintf(mf, sizeof mf, "%s/kernels.json", kdir);
    FILE *f = strcmp(tp->backend, sp->backend) ? NULL : fopen(mf, "r");
    const char *which = strcmp(kdir, t->kdir) ? "the teacher's kernels" : "the student's kernels (its plan)";
    if (f) fclose(f);
    else if (same_forward(tp, sp)) {
        which = "the student's kernels (same shape)";
        snprintf(kdir, sizeof kdir, "%s", t->kdir);
    } else {
        snprintf(how, cap, "on the host (no %s kernels beside its plan, and its shape is not the student's)", sp->backend);
        return HYP_OK;
    }
    int lg = -1;
    for (int i = 0; i < tp->n_bufs; i++)
        if (!strcmp(tp->bufs[i].name, "logits")) lg = i;
    if (lg < 0 || tp->bufs[lg].dtype != HYP_DT_F32) { /* the fused loss reads fp32 rows */
        snprintf(how, cap, "on the host (the teacher's plan has %s logits; the device's fused loss reads fp32)", lg < 0 ? "no" : hyp_dtype_name(tp->bufs[lg].dtype));
        return HYP_OK;
    }
    hyp_err ie;
    if (exec_dev_init_forward(&t->txd, tp, kdir, t->dev, &ie)) { /* the kernels do not cover the teacher's plan */
        memset(&t->txd, 0, sizeof t->txd); /* exec_dev_init_forward freed what it made */
        snprintf(how, cap, "on the host (%s do not run its plan: %.300s)", which, ie.msg);
        return HYP_OK;
    }
    t->t_on = 1, t->t_logits = lg, t->t_vp = (int)tp->Vp;
    int rc = exec_dev_bind(&t->txd, t->xd.B, t->xd.T, e);
    if (!rc) rc = exec_dev_upload_params(&t->txd, tt->params, e);
    if (!rc) {
        *on = 1;
        snprintf(how, cap, "on the %s device (%s, its weights uploaded once: %.1f MB)", t->dev->name, which, t->txd.bytes / 1e6);
    }
    return rc;
}

const train_backend_i train_backend_dev_i = {
    .kind = "device",
    /* np=2 of the preference objectives does not yet reproduce np=1 on the device */
    .caps = {.host_buffers = 0, .device_kernels = 1, .dynamic_shapes = 0, .bf16_storage = 0, .multi_rank_pref = 0, .host_compute = 0},
    .zero_grads = dev_zero_grads,
    .micro_batch = dev_micro_batch,
    .reduce_grads = dev_reduce_grads,
    .optim_step = dev_optim_step,
    .finish_step = dev_finish_step,
    .eval_batch = dev_eval_batch,
    .sync_host = dev_sync_host,
    .memory = dev_memory,
    .memory_title = dev_memory_title,
    .reports_other = 1,
    .comm_note = dev_comm_note,
    .close = dev_close,
    .peek_norm = dev_peek_norm,
    .ls_check = dev_ls_check,
    .token_losses = dev_token_losses,
    .weighted_backward = dev_weighted_backward,
    .eval_point = dev_eval_point,
    .hess_step = dev_hess_step,
    .params_host = dev_params_host,
};

int train_backend_dev_open(train_backend *b, const plan_t *p, const char *plan_path, int B, int T, hyp_err *e) {
    train_dev *t = calloc(1, sizeof *t);
    if (!t) return hyp_fail(e, HYP_EFAIL, "out of memory");
    b->impl = t;
    b->i = &train_backend_dev_i; /* from here on train_backend_close frees what open made, even half of it */
    int rc = open_dev(t, &b->dp, p, plan_path, b->x, B, T, e);
    if (rc) return rc;
    if (t->dev->info.sm == 0) /* the simulator */
        printf("backend: sim — the generated CUDA kernels (kernels/ next to the plan) run on the CPU simulator (slow; for tests)\n");
    else
        printf("backend: cuda — %s, the compiled kernels (kernels/*.cubin) through the CUDA driver\n", t->dev->info.name);
    if (t->xd.graphs) { /* which regions this configuration forms (exec_dev.c, reduce_and_norm) */
        int fwd = t->stage < 3, bwd = fwd && !t->xd.zg && !t->overlap, norm = !(t->stage >= 2 && t->world > 1);
        printf("cuda graphs (v2165): captured at their second run and replayed:%s%s%s%s; eager: the batch upload, loss read-back, optimizer%s%s\n",
               fwd ? " the forward" : "", bwd ? ", the backward up to the loss and after it" : "", norm ? ", the norm" : "",
               fwd || bwd || norm ? "" : " nothing", fwd ? "" : ", the forward", bwd ? "" : ", the backward (collectives inside)");
    }
    return HYP_OK;
}
