/* backend.c — the one step driver (backend.h): a training step, evaluation and the memory
 * report, written once over the trainer-level backend interface. Never: anything a backend does
 * differently (that is a slot of train_backend_i), printing progress, checkpoints. */
#include "backend.h"
#include "gnb.h"
#include "async_dp.h"
#include "local_sgd.h"
#include "train_cp.h"
#include "objective.h"
#include "prof.h"
#include "prune.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* v2162: the verdict of every rank (any bad: an overflow, all ranks agree) advances the scaler:
 * overflow: S x backoff and the clean-step counter reset; clean: the counter advanced, S x growth
 * after interval clean steps. */
static int loss_scale_verdict(train_backend *b, int bad, int *overflow, hyp_err *e) {
    train_loss_scaler *ls = &b->ls;
    double v = bad;
    int rc = hyp_coll_allreduce_f64(b->dp.coll, &v, 1, e);
    if (rc) return rc;
    *overflow = ls->skipped = v > 0;
    if (*overflow) {
        ls->scale *= ls->backoff;
        ls->good = 0;
        ls->overflows++;
    } else if (++ls->good >= ls->interval) {
        ls->scale *= ls->growth;
        ls->good = 0;
    }
    return HYP_OK;
}

/* v2162 on the cpu: inf/NaN in this rank's gradients, then the verdict; clean: the gradients / S
 * (the scale they were computed at). Gradients are the cpu executor's fp32 arena, or at ZeRO
 * stages 2 (with its layer schedule) and 3 the own shard, already summed over ranks during
 * backward (an overflow anywhere reaches the sum; unscaling after the sum is exact when S is a
 * power of two, as init_scale, growth and backoff keep it by default). */
static int loss_scale_check(train_backend *b, int *overflow, hyp_err *e) {
    exec_t *x = b->x;
    int sharded = b->dp.stage >= 3 || x->zg;
    long n = sharded ? (long)x->shard : (long)x->p->param_floats;
    float *g = sharded ? x->gshard : x->grads;
    int bad = 0;
    for (long i = 0; i < n; i++) bad |= !isfinite(g[i]);
    float inv = (float)(1.0 / b->ls.scale);
    int rc = loss_scale_verdict(b, bad, overflow, e);
    if (rc || *overflow) return rc;
    for (long i = 0; i < n; i++) g[i] *= inv;
    return HYP_OK;
}

int train_step(train_backend *b, train_objective *ob, const train_opts *o, int K, int step, double lr, double *loss,
               double *norm, float *scale, train_step_times *tm, int *skipped, hyp_err *e) {
    train_step_times t = {0};
    uint64_t bytes0 = hyp_coll_bytes_sent(b->dp.coll), calls0 = hyp_coll_calls(b->dp.coll);
    double pt = hyp_prof_t(); /* v2184 phase spans: no-ops outside the profiled window */
    int rc = HYP_OK;
    if (ob->i->step_begin) {
        rc = ob->i->step_begin(ob, b, step, e);
        hyp_prof_phase("objective_step_begin", HYP_PROF_STEP, 1, pt);
        pt = hyp_prof_t();
    }
    if (!rc) rc = b->i->zero_grads(b, e);
    hyp_prof_phase("zero_grads", HYP_PROF_BACKWARD, 1, pt);
    *loss = 0;
    double dscale = b->ls.on ? b->ls.scale : 1; /* v2162: the loss x S */
    for (int k = 0; k < K && !rc; k++) rc = ob->i->micro_batch(ob, b, k, K, step, dscale, loss, &t, e);
    if (!rc && ob->i->step_end) rc = ob->i->step_end(ob, b, loss, &t, e);
    double t1 = now_s();
    pt = hyp_prof_t();
    const train_hooks *h = b->hooks;
    if (!rc && h && h->before_reduce) rc = h->before_reduce(b->hooks_ctx, b, step, e);
    int overflow = 0;
    if (!rc && b->ls.on && !b->i->ls_check) rc = loss_scale_check(b, &overflow, e);
    if (!rc && b->prune) train_prune_grads(b->prune, b->x); /* v2154: masked weights get no gradient */
    b->ls.reduce_scale = b->ls.on && b->i->ls_check ? b->ls.scale : 1;
    b->adp_step = step;
    b->comm_measured = 0;
    if (!rc) rc = b->i->reduce_grads(b, o, e);
    b->ls.reduce_scale = 1;
    if (!rc && b->ls.on && b->i->ls_check) { /* the device: after the reduction, on the global norm */
        int bad = 0;
        if (!(rc = b->i->ls_check(b, &bad, e))) rc = loss_scale_verdict(b, bad, &overflow, e);
    }
    if (b->dp.world > 1) t.comm_s += now_s() - t1; /* one rank: a local norm, no waiting */
    hyp_prof_phase("grad_reduce_norm", b->dp.world > 1 ? HYP_PROF_COMM : HYP_PROF_OPTIMIZER, 1, pt);
    int skip = overflow; /* v2162: an overflow skips the update; the guard does not judge it */
    if (!rc && h && h->gate && !overflow) { /* v2176: the guard's verdict before the update */
        double gn = 0;
        if (!b->i->peek_norm) rc = hyp_fail(e, HYP_EINPUT, "the %s backend cannot show the gradient norm before the update, which the guard (v2176) needs", b->name);
        else if (!(rc = b->i->peek_norm(b, &gn, e))) rc = h->gate(b->hooks_ctx, b, step, loss, gn, &skip, e);
    }
    if (skipped) *skipped = skip;
    pt = hyp_prof_t();
    int upd = step; /* v2174: the update of step t is update t - s (its LR and optimizer count), none before */
    if (b->adp) upd = b->adp_ready ? step - train_async_staleness(b->adp) : 0, lr = upd ? train_lr_at(o, upd) : lr;
    if (!rc && !skip && upd) rc = b->i->optim_step(b, o, lr, upd, e);
    if (!rc && !skip && b->prune) train_prune_after_update(b->prune, b->x, step); /* masks held, updated on schedule */
    if (!rc && b->lsgd) { /* v2173: the outer step (its all-reduce every sync_every steps is communication time) */
        double t2 = now_s();
        int host = b->i->params_host && step % b->x->p->lsgd_every == 0; /* a device: the host runs it */
        if (host) rc = b->i->params_host(b, 0, e);
        if (!rc) rc = train_local_sgd_after_update(b->lsgd, b->x, &b->dp, step, NULL, e);
        if (!rc && host) rc = b->i->params_host(b, 1, e);
        if (b->dp.world > 1) t.comm_s += now_s() - t2;
    }
    hyp_prof_phase("optimizer_step", HYP_PROF_OPTIMIZER, 1, pt);
    pt = hyp_prof_t();
    if (!rc) rc = b->i->finish_step(b, norm, scale, e);
    hyp_prof_phase("finish_step", HYP_PROF_OPTIMIZER, 1, pt);
    /* v2168: the gradient all-reduce's figures (the cpu sets them in reduce_grads, a device after
     * finish_step's synchronize; a GNB pass's second reduction below does not replace them) */
    if (b->comm_measured) t.comm_total_s = b->comm_total_s, t.comm_exposed_s = b->comm_exposed_s, t.comm_measured = 1;
    if (!rc && gnb_due(b, step)) { /* Sophia-G: the Hessian estimate from sampled labels (gnb.h) */
        pt = hyp_prof_t();
        rc = gnb_pass(b, o, step, e);
        hyp_prof_phase("hessian_gnb_pass", HYP_PROF_OPTIMIZER, 1, pt);
    }
    t.comm_bytes = (double)(hyp_coll_bytes_sent(b->dp.coll) - bytes0);
    t.comm_calls = (double)(hyp_coll_calls(b->dp.coll) - calls0);
    if (tm) *tm = t;
    return rc;
}

int train_eval(train_backend *b, hyp_loader *val, int batches, float *loss, hyp_err *e) {
    exec_t *x = b->x;
    /* each rank evaluates its own windows; the mean over ranks is the validation loss */
    hyp_loader_reset(val);
    double s = 0, pt = hyp_prof_t();
    int rc = HYP_OK;
    rc = train_eval_point_dp(x, b->dp.opt, b->dp.coll, 1, e); /* schedule-free: evaluate the average x, not y */
    if (!rc && b->i->eval_point) rc = b->i->eval_point(b, 1, e);
    for (int i = 0; i < batches && !rc; i++) {
        float l = 0;
        if (!(rc = train_cp_next(val, x, e))) rc = b->i->eval_batch(b, &l, e); /* v2108: the rank's chunks */
        s += l;
    }
    int rc2 = train_eval_point_dp(x, b->dp.opt, b->dp.coll, 0, e);
    if (!rc) rc = rc2;
    if (!rc && b->i->eval_point) rc = b->i->eval_point(b, 0, e);
    double v = batches ? (float)(s / batches) : NAN;
    if (!rc) rc = exec_bind(x, x->B, x->T, e);
    if (!rc) rc = exec_z3_status(x, e);
    if (!rc) rc = hyp_coll_allreduce_f64(b->dp.coll, &v, 1, e);
    *loss = (float)(v / b->dp.world);
    hyp_prof_phase("eval", HYP_PROF_STEP, 0, pt);
    return rc;
}

void train_print_memory(train_backend *b, hyp_err *e) {
    int W = b->dp.world, S = b->dp.stage;
    double *mem = calloc((size_t)W * MEM__COUNT, sizeof(double));
    if (!mem) return;
    b->i->memory(b, mem + b->dp.rank * MEM__COUNT);
    const char *title = b->i->memory_title(b);
    if (hyp_coll_allreduce_f64(b->dp.coll, mem, (size_t)W * MEM__COUNT, e) == HYP_OK)
        for (int r = 0; r < W; r++) {
            const double *m = mem + r * MEM__COUNT;
            printf("rank %d/%d %s (ZeRO stage %d): params %.0f B | grads %.0f B | optimizer %.0f B | activations %.0f B",
                   r, W, title, S, m[MEM_PARAMS], m[MEM_GRADS], m[MEM_OPTIM], m[MEM_ACTS]);
            if (b->i->reports_other || m[MEM_OTHER] > 0) printf(" | other %.0f B", m[MEM_OTHER]); /* cpu: v2102's bf16 weight copy + scratch */
            if (m[MEM_GRAD_WORKSPACE] > 0) printf(" | backward gradient workspace %.0f B", m[MEM_GRAD_WORKSPACE]);
            if (b->i->reports_other) /* a device: where stage 3's parameters live */
                printf("%s\n", S == 3 ? " (params: own shards + the layer working slots)" : "");
            else
                printf("  (%.2f + %.2f + %.2f + %.2f MiB)\n", m[MEM_PARAMS] / 1048576, m[MEM_GRADS] / 1048576,
                       m[MEM_OPTIM] / 1048576, m[MEM_ACTS] / 1048576);
        }
    free(mem);
    const char *note = b->i->comm_note ? b->i->comm_note(b) : NULL;
    if (W > 1 && note) printf("gradient communication: %s\n", note);
}

int train_sync_host(train_backend *b, hyp_err *e) { return b->i->sync_host ? b->i->sync_host(b, e) : HYP_OK; }

void train_backend_close(train_backend *b) {
    if (b->i && b->i->close) b->i->close(b);
    b->i = NULL;
    b->impl = NULL;
}
