/* backend_cpu.c — the cpu executor (exec.h) as a trainer backend (backend.h): forward/backward
 * on the host, gradients made global over the collectives per ZeRO stage (v2110, v2104: an
 * all-reduce at stages 0-1 — under v2168 per layer bucket on helper threads while backward runs,
 * comm_overlap.h; stages 2-3 reduce-scatter each layer's gradients into the own shard
 * during backward; under v2173 local SGD none: each rank keeps its own, local_sgd.h; under v2172 a compressed exchange,
 * grad_compress.h), the norm and
 * clip factor on the host, the optimizer (optim.h) on the own part and
 * the all-gather of the updated shards (stages 1-2), the FP8 scaling states (v2160).
 * Never: the micro-batch loop, loss weighting or evaluation loop (the driver, backend.c). */
#include <math.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "backend.h"
#include "gemm_bf16.h"
#include "async_dp.h"
#include "comm_overlap.h"
#include "grad_compress.h"
#include "local_sgd.h"
#include "train_pp.h"
#include "moe_ep.h"
#include "ops_bf16.h"
#include "ops_cpu.h"

typedef struct {
    double norm;    /* this step's global gradient norm */
    float scale;    /* and its clip factor */
    train_avg_state avg; /* schedule-free averaging weight sums (train_avg_weight_next) */
    train_comm_overlap *ovl; /* v2168: the gradient buckets' helper threads; NULL: none */
} cpu_state;

/* HYP_COMM_OVERLAP=0: the v2168 buckets reduced after backward on the main thread (the same sums). */
static int getenv_off(void) {
    const char *v = getenv("HYP_COMM_OVERLAP");
    return v && !strcmp(v, "0");
}

static double mono_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* v2168: the plain all-reduce path (stage 0-1, none of the techniques that replace or precede the
 * reduction) is the one the helpers can take over; NULL when the trainer has no helpers. */
static train_comm_overlap *overlap_of(const train_backend *b) {
    const cpu_state *s = b->impl;
    const exec_t *x = b->x;
    if (!s->ovl || b->dp.world < 2 || b->dp.stage >= 2 || x->zg || x->z3 || x->moe_ep || x->tp || b->pp || b->lsgd ||
        b->adp || b->gc)
        return NULL;
    return s->ovl;
}

static int cpu_zero_grads(train_backend *b, hyp_err *e) {
    (void)e;
    exec_t *x = b->x;
    exec_params_changed(x); /* a checkpoint may have been loaded since the last forward */
    if (b->dp.stage >= 3 || x->zg) op_zero(x->gshard, x->shard);
    else op_zero(x->grads, x->shard * b->dp.world);
    return HYP_OK;
}

static int cpu_micro_batch(train_backend *b, float dloss, int last, float *mean, hyp_err *e) {
    (void)last;
    if (b->pp) { /* v2107: kept until the last micro-batch runs the stage's schedule */
        *mean = 0;
        return train_pp_micro_batch(b->pp, b->x, dloss, last, e);
    }
    exec_forward(b->x);
    train_comm_overlap *ovl = last && !getenv_off() ? overlap_of(b) : NULL;
    if (ovl && (b->ls.on || b->prune || b->hooks))
        return hyp_fail(e, HYP_EINPUT, "v2168 overlap: %s reads or changes the gradients before their reduction, which the helper threads have already begun — regenerate the trainer without v2168 (or without %s)",
                        b->ls.on ? "dynamic loss scaling (v2162)" : b->prune ? "pruning (v2154)" : "the guard / fault injection (v2176)",
                        b->ls.on ? "v2162" : b->prune ? "v2154" : "v2176 and HYP_FAULT_INJECT");
    if (ovl) { /* v2168: buckets handed to the helpers as backward finishes them (bf16 rounding per bucket) */
        int rc = train_overlap_backward(ovl, b->x, dloss, b->x->p->grad_bf16, mean, e);
        if (rc) return rc;
    } else {
        *mean = exec_backward(b->x, dloss);
        /* v2163: a bf16 accumulation buffer holds the running sum rounded after every micro-batch */
        if (b->x->p->grad_bf16) op_round_bf16(b->x->grads, b->x->grads, (long)(b->x->shard * b->dp.world));
    }
    int rc = exec_z3_status(b->x, e);
    if (!rc) rc = exec_moe_ep_status(b->x, e); /* v2109: a failed all-to-all */
    return rc ? rc : exec_tp_status(b->x, e); /* v2106: an allreduce_tp that failed */
}

/* Every rank's gradients (stages 0/1) or gradient shard (stage >= 2) become the sum over ranks. */
static int cpu_reduce_grads(train_backend *b, const train_opts *o, hyp_err *e) {
    exec_t *x = b->x;
    const dp_t *d = &b->dp;
    cpu_state *s = b->impl;
    int rc;
    if (d->stage >= 2) { /* stage 3 (and 2 with x->zg) reduce-scattered each layer's gradients during backward */
        if (d->stage == 2 && !x->zg && (rc = hyp_coll_reduce_scatter_f32(d->coll, x->grads, x->gshard, (size_t)x->shard, e)))
            return rc;
        double ss = op_sumsq(x->gshard, x->shard);
        if ((rc = hyp_coll_allreduce_f64(d->coll, &ss, 1, e))) return rc;
        s->norm = sqrt(ss);
    } else if (x->moe_ep) { /* v2109: expert gradients over their replicas only (moe_ep.h) */
        if ((rc = exec_moe_ep_reduce_grads(x, d->coll, &s->norm, e))) return rc;
    } else {
        if (b->lsgd) train_local_sgd_grads(b->lsgd, x); /* v2173: no all-reduce, each rank its own gradient */
        else if (b->adp) { /* v2174: step t - s's sum, or none yet (b->adp_ready) */
            if ((rc = train_async_grads(b->adp, x, d, b->adp_step, &b->adp_ready, e))) return rc;
        } else if (b->gc) { /* v2172: the sum of what each rank sent of its top-k / random-k entries */
            if ((rc = train_grad_compress_reduce(b->gc, x, d, e))) return rc;
        }
        else if (overlap_of(b)) { /* v2168: wait for the helpers, or the same buckets here (HYP_COMM_OVERLAP=0, a weighted backward) */
            train_comm_overlap *ovl = overlap_of(b);
            if ((rc = train_overlap_posted(ovl) ? train_overlap_wait(ovl, e) : train_overlap_reduce_serial(ovl, x->grads, e))) return rc;
            train_overlap_last(ovl, &b->comm_total_s, &b->comm_exposed_s);
            b->comm_measured = 1;
        } else if (d->world > 1 && !b->pp) { /* one all-reduce after backward: all of it exposed */
            double t0 = mono_s();
            if ((rc = hyp_coll_allreduce_f32(d->coll, x->grads, (size_t)x->shard * d->world, e))) return rc;
            b->comm_total_s = b->comm_exposed_s = mono_s() - t0;
            b->comm_measured = 1;
        }
        /* v2107 pp x dp: train_pp_reduce sums the stage's own tensors over the dp axis */
        if (b->pp) { /* v2107: each stage's tensors once, summed over the stages */
            double pss = 0;
            if ((rc = train_pp_reduce(b->pp, x, d->coll, &pss, e))) return rc;
            s->norm = sqrt(pss);
            s->scale = train_clip_scale(o, s->norm);
            return HYP_OK;
        }
        double ss = 0; /* v2106: sharded tensors' squares summed over the tp group, replicated ones once */
        if (x->tp && (rc = exec_tp_grad_sumsq(x, &ss, e))) return rc;
        s->norm = x->tp ? sqrt(ss) : train_grad_norm(x);
    }
    s->scale = train_clip_scale(o, s->norm);
    return HYP_OK;
}

static int cpu_optim_step(train_backend *b, const train_opts *o, double lr, int t, hyp_err *e) {
    exec_t *x = b->x;
    const dp_t *d = &b->dp;
    cpu_state *s = b->impl;
    hyp_optim_step a = {lr, t, s->scale, d->opt->eval_point ? train_avg_weight_next(o, t, &s->avg) : 1.0 / t, 0};
    if (x->p->param_bf16) { /* v2161: bf16 parameters, no fp32 master (stage 0, AdamW: checked at open) */
        hyp_adamw_bf16_step(&x->p->optim, x->p, &a, (uint16_t *)(void *)x->params, x->grads, x->state[0], x->state[1]);
    } else if (d->stage >= 1 && d->opt->matrix_solve) { /* distributed Muon: whole matrices per rank */
        int rc = train_optim_own_matrix(x, d->opt, &a, d->coll, e);
        if (rc) return rc;
    } else if (b->pp) { /* v2107: the stage's own tensors */
        train_pp_optim(b->pp, x, d->opt, &a);
    } else {
        train_optim_own_a(x, d->opt, &a);
    }
    exec_params_changed(x); /* v2102 bf16 storage: the weight copy is refreshed on its next use */
    /* stage 3: the shards stay sharded, the next forward gathers them per layer */
    if (d->stage >= 1 && d->stage <= 2 && d->world > 1) {
        int64_t lo = x->shard * d->rank;
        int rc = hyp_coll_allgather_f32(d->coll, x->params + lo, x->params, (size_t)x->shard, e);
        if (rc) return rc;
    }
    int rc = op_cpu_check(e);
    return rc ? rc : gemm_bf16_check(e);
}

static int cpu_finish_step(train_backend *b, double *norm, float *scale, hyp_err *e) {
    exec_t *x = b->x;
    const cpu_state *s = b->impl;
    int rc = HYP_OK;
    if (x->p->fp8_slots) { /* every rank must scale with the same amax (TE reduces it too) */
        for (int i = 0; i < x->p->fp8_slots && b->dp.world > 1 && !rc; i++)
            rc = hyp_coll_allreduce_max_f32(b->dp.coll, &x->fp8[i].amax_history[x->fp8[i].pos], 1, e);
        if (!rc) exec_fp8_step(x);
    }
    *norm = s->norm;
    *scale = s->scale;
    return rc;
}

static int cpu_hess_step(train_backend *b, double tokens, int t, hyp_err *e) {
    hyp_optim_step a = {0, t, 1.0f, 0, tokens};
    train_hess_own(b->x, b->dp.opt, &a);
    return op_cpu_check(e);
}

static int cpu_eval_batch(train_backend *b, float *loss, hyp_err *e) {
    if (b->pp) return train_pp_eval(b->pp, b->x, loss, e); /* v2107: through the stages */
    *loss = exec_eval_loss(b->x);
    int rc = exec_moe_ep_status(b->x, e); /* v2109 */
    return rc ? rc : exec_tp_status(b->x, e);
}

static void cpu_memory(const train_backend *b, double *m) {
    const exec_t *x = b->x;
    m[MEM_PARAMS] = (double)x->bytes_params;
    m[MEM_GRADS] = (double)x->bytes_grads;
    m[MEM_OPTIM] = (double)x->bytes_optim;
    m[MEM_ACTS] = (double)x->bytes_acts;
    m[MEM_OTHER] = (double)(exec_lowp_weight_bytes(x) + exec_lowp_scratch_bytes(x)); /* v2102 bf16 storage */
    m[MEM_GRAD_WORKSPACE] = (double)x->bytes_grad_workspace;
}

static const char *cpu_memory_title(const train_backend *b) {
    (void)b;
    return "memory";
}

static void cpu_close(train_backend *b) {
    cpu_state *s = b->impl;
    if (s) train_overlap_close(s->ovl);
    free(b->impl);
}

static const char *cpu_comm_note(const train_backend *b) {
    static char note[200];
    const cpu_state *s = b->impl;
    if (!s->ovl) return NULL;
    snprintf(note, sizeof note, "%d per-layer buckets all-reduced by %d helper thread%s while backward runs (v2168%s)",
             train_overlap_buckets(s->ovl), train_overlap_streams(s->ovl), train_overlap_streams(s->ovl) == 1 ? "" : "s",
             getenv_off() ? "; HYP_COMM_OVERLAP=0: the same buckets after backward" : "");
    return note;
}

static int cpu_peek_norm(train_backend *b, double *norm, hyp_err *e) {
    (void)e;
    *norm = ((const cpu_state *)b->impl)->norm;
    return HYP_OK;
}

static int cpu_token_losses(train_backend *b, float *out, hyp_err *e) {
    (void)e;
    exec_t *x = b->x;
    exec_eval_loss(x);
    memcpy(out, exec_buf(x, x->p->losses_buf), sizeof(float) * (size_t)x->B * x->T);
    return HYP_OK;
}

static int cpu_weighted_backward(train_backend *b, const float *row_scale, hyp_err *e) {
    (void)e;
    b->x->row_scale = row_scale;
    exec_backward(b->x, 1.0f);
    b->x->row_scale = NULL;
    return HYP_OK;
}

const train_backend_i train_backend_cpu_i = {
    .kind = "cpu",
    .caps = {.host_buffers = 1, .device_kernels = 0, .dynamic_shapes = 1, .bf16_storage = 1, .multi_rank_pref = 1, .host_compute = 1},
    .zero_grads = cpu_zero_grads,
    .micro_batch = cpu_micro_batch,
    .reduce_grads = cpu_reduce_grads,
    .optim_step = cpu_optim_step,
    .finish_step = cpu_finish_step,
    .hess_step = cpu_hess_step,
    .eval_batch = cpu_eval_batch,
    .sync_host = NULL, /* the host executor is the backend */
    .memory = cpu_memory,
    .memory_title = cpu_memory_title,
    .reports_other = 0,
    .comm_note = cpu_comm_note,
    .close = cpu_close,
    .peek_norm = cpu_peek_norm,
    .token_losses = cpu_token_losses,
    .weighted_backward = cpu_weighted_backward,
};

int train_backend_cpu_open(train_backend *b, const plan_t *p, const char *plan_path, int B, int T, hyp_err *e) {
    (void)plan_path, (void)B, (void)T;
    if (p->param_bf16 && strcmp(p->optim.kind, "adamw"))
        return hyp_fail(e, HYP_EINPUT, "plan: bf16 parameters (param_storage, v2161) are updated by AdamW only, the plan's optimizer is '%s' — regenerate the trainer with adamw",
                        p->optim.kind);
    if (!(b->impl = calloc(1, sizeof(cpu_state)))) return hyp_fail(e, HYP_EFAIL, "out of memory");
    b->i = &train_backend_cpu_i;
    cpu_state *s = b->impl;
    /* v2168: helpers only where there is a plain all-reduce to overlap (gen refuses the rest) */
    if (p->comm_streams > 0 && b->dp.world > 1 && b->dp.stage <= 1)
        return train_overlap_open(&s->ovl, p, b->dp.coll, p->comm_streams, b->x->shard * b->dp.world, e);
    return HYP_OK;
}
