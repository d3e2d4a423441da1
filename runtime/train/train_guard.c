/* train_guard.c — v2176 fault tolerance in the step driver (train_guard.h): the hooks, the agreed
 * verdict, the fault-injection test hook. Never: checkpoints, printing. */
#include "train_guard.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>


int train_guard_open(train_guard *tg, const plan_t *p, const dp_t *d, hyp_err *e) {
    memset(tg, 0, sizeof *tg);
    tg->coll = d->coll, tg->world = d->world, tg->rank = d->rank;
    tg->active = p->guard;
    hyp_guard_cfg cfg = {6.0, 0.95, 10, 1.5, 3, 0.5, 3}; /* without the section: the ceiling warning */
    if (p->guard)
        cfg = (hyp_guard_cfg){p->guard_z, p->guard_ema, p->guard_warmup, p->guard_loss_ceiling, p->guard_max_bad,
                              p->guard_lr_factor, p->guard_max_rollbacks};
    hyp_guard_init(&tg->g, &cfg, p->V);
    char err[200];
    if (hyp_fault_parse(getenv("HYP_FAULT_INJECT"), &tg->f, err, sizeof err))
        return hyp_fail(e, HYP_EINPUT, "%s — fix or unset the variable", err);
    return HYP_OK;
}

/* The gradients this rank holds before the reduction: the accumulation arena, or at stage 3 (and
 * 2 with its layer schedule) the own shard (reduce-scattered during backward). */
static float *grads_of(train_backend *b, int64_t *n) {
    exec_t *x = b->x;
    if (b->dp.stage >= 3 || x->zg) {
        *n = x->shard;
        return x->gshard;
    }
    *n = x->shard * b->dp.world;
    return x->grads;
}

static int before_reduce(void *ctx, train_backend *b, int step, hyp_err *e) {
    train_guard *tg = ctx;
    int due = hyp_fault_take(&tg->f, step);
    tg->loss_faults = due & (HYP_FAULT_NAN_LOSS | HYP_FAULT_SPIKE_LOSS);
    if (!(due & (HYP_FAULT_NAN_GRAD | HYP_FAULT_SPIKE_GRAD))) return HYP_OK;
    if (!b->i->caps.host_buffers)
        return hyp_fail(e, HYP_EINPUT, "HYP_FAULT_INJECT: gradient faults are planted in host gradients; the %s backend keeps them on the device — use nan_loss/spike_loss, or a cpu trainer",
                        b->name);
    int64_t n;
    float *g = grads_of(b, &n);
    for (int64_t i = 0; (due & HYP_FAULT_SPIKE_GRAD) && i < n; i++) g[i] *= 1000.0f;
    if ((due & HYP_FAULT_NAN_GRAD) && tg->rank == 0 && n > 0) g[0] = NAN;
    return HYP_OK;
}

static int gate(void *ctx, train_backend *b, int step, double *loss, double norm, int *skip, hyp_err *e) {
    (void)b, (void)step;
    train_guard *tg = ctx;
    if (tg->loss_faults & HYP_FAULT_NAN_LOSS) *loss = NAN;
    if (tg->loss_faults & HYP_FAULT_SPIKE_LOSS) *loss *= 100;
    tg->loss_faults = 0;
    *skip = 0;
    if (!tg->active) return HYP_OK;
    int bad = hyp_guard_judge(&tg->g, *loss, norm);
    /* every rank sees the same global loss and norm, but the verdict is agreed all the same: a
     * rank's statistics must never let it update alone */
    float v = (float)bad;
    if (tg->world > 1) {
        int rc = hyp_coll_allreduce_max_f32(tg->coll, &v, 1, e);
        if (rc) return rc;
    }
    bad = (int)v;
    if (!bad && v > 0) bad = HYP_GUARD_LOSS_SPIKE; /* another rank's reason */
    tg->last_bad = bad;
    if (bad) hyp_guard_reason(&tg->g, bad, *loss, norm, tg->reason, sizeof tg->reason);
    *skip = bad != 0;
    return HYP_OK;
}

static const train_hooks HOOKS = {before_reduce, gate};

void train_guard_attach(train_guard *tg, train_backend *b) {
    if (!tg->active && !tg->f.n) return;
    b->hooks = &HOOKS;
    b->hooks_ctx = tg;
}

int train_guard_after(train_guard *tg, double loss, double norm, int skipped, int *warn) {
    *warn = 0;
    if (!tg->active) {
        if (!tg->warned_ceiling && isfinite(loss) && loss > tg->g.ceiling) tg->warned_ceiling = *warn = 1;
        return 0;
    }
    return hyp_guard_record(&tg->g, skipped ? tg->last_bad | 1 : 0, loss, norm);
}

int train_guard_bad(const train_guard *tg) { return tg->active && tg->g.bad_run > 0; }
