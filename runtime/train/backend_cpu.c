/* backend_cpu.c — the cpu executor (exec.h) as a trainer backend (backend.h): forward/backward
 * on the host, gradients made global over the collectives per ZeRO stage (v2110, v2104: an
 * all-reduce at stages 0-1; stages 2-3 reduce-scatter each layer's gradients into the own shard
 * during backward; under v2173 local SGD none: each rank keeps its own, local_sgd.h; under v2172 a compressed exchange,
 * grad_compress.h), the norm and
 * clip factor on the host, the optimizer (optim.h) on the own part and
 * the all-gather of the updated shards (stages 1-2), the FP8 scaling states (v2160).
 * Never: the micro-batch loop, loss weighting or evaluation loop (the driver, backend.c). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "gemm_bf16.h"
#include "async_dp.h"
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
} cpu_state;

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
    *mean = exec_backward(b->x, dloss);
    /* v2163: a bf16 accumulation buffer holds the running sum rounded after every micro-batch */
    if (b->x->p->grad_bf16) op_round_bf16(b->x->grads, b->x->grads, (long)(b->x->shard * b->dp.world));
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
        else if (d->world > 1 && !b->pp && (rc = hyp_coll_allreduce_f32(d->coll, x->grads, (size_t)x->shard * d->world, e))) return rc;
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

static void cpu_close(train_backend *b) { free(b->impl); }

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
    .comm_note = NULL,
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
    return HYP_OK;
}
