/* local_sgd.c — v2173 local SGD / DiLoCo's outer step (local_sgd.h). Never: the inner optimizer,
 * the gradient reduction of synchronous steps (backend_cpu.c), ZeRO layouts. */
#include "local_sgd.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops_cpu.h"

struct train_local_sgd {
    int every, nesterov;
    float outer_lr, outer_mom;
    int64_t n;        /* floats of the parameter arena (shard x world at stage 0, as the gradients) */
    float *anchor;    /* [n] the parameters of the last synchronization */
    float *delta;     /* [n] this rank's params - anchor, then their sum over ranks */
    float *mom;       /* [n] the outer Nesterov momentum buffer (NULL for average) */
};

int train_local_sgd_open(train_local_sgd **out, const plan_t *p, const exec_t *x, const dp_t *d, hyp_err *e) {
    *out = NULL;
    if (d->stage != 0)
        return hyp_fail(e, HYP_EINPUT, "plan: local SGD (v2173) keeps full parameters and optimizer states on every rank, and ZeRO stage %d shards them — regenerate without zero/fsdp",
                        d->stage);
    if (p->param_bf16)
        return hyp_fail(e, HYP_EINPUT, "plan: local SGD (v2173) averages fp32 parameters, and this plan stores bf16 parameters (v2161) — regenerate without v2161");
    train_local_sgd *ls = calloc(1, sizeof *ls);
    if (!ls) return hyp_fail(e, HYP_EFAIL, "out of memory");
    ls->every = p->lsgd_every, ls->nesterov = p->lsgd_nesterov;
    ls->outer_lr = (float)p->lsgd_outer_lr, ls->outer_mom = (float)p->lsgd_outer_momentum;
    ls->n = x->shard * d->world;
    ls->anchor = malloc(sizeof(float) * (size_t)ls->n);
    ls->delta = malloc(sizeof(float) * (size_t)ls->n);
    if (ls->nesterov) ls->mom = calloc((size_t)ls->n, sizeof(float));
    if (!ls->anchor || !ls->delta || (ls->nesterov && !ls->mom)) {
        long long n = (long long)ls->n;
        train_local_sgd_close(ls);
        return hyp_fail(e, HYP_EFAIL, "out of memory for the local SGD anchor (%lld floats)", n);
    }
    memcpy(ls->anchor, x->params, sizeof(float) * (size_t)ls->n);
    *out = ls;
    return HYP_OK;
}

void train_local_sgd_close(train_local_sgd *ls) {
    if (!ls) return;
    free(ls->anchor);
    free(ls->delta);
    free(ls->mom);
    free(ls);
}

void train_local_sgd_grads(const train_local_sgd *ls, exec_t *x) {
    (void)ls;
    if (x->world > 1) op_scale(x->grads, (float)x->world, (long)(x->shard * x->world));
}

int train_local_sgd_after_update(train_local_sgd *ls, exec_t *x, const dp_t *d, int step, int *synced, hyp_err *e) {
    if (synced) *synced = 0;
    if (step % ls->every) return HYP_OK;
    const int64_t n = ls->n;
    float *p = x->params, *a = ls->anchor, *dl = ls->delta;
    for (int64_t i = 0; i < n; i++) dl[i] = p[i] - a[i];
    int rc = d->world > 1 ? hyp_coll_allreduce_f32(d->coll, dl, (size_t)n, e) : HYP_OK;
    if (rc) return rc;
    const float W = (float)d->world;
    if (!ls->nesterov) { /* average: anchor + mean delta = the mean of the ranks' parameters */
        for (int64_t i = 0; i < n; i++) a[i] += dl[i] / W;
    } else { /* torch.optim.SGD(nesterov=True, dampening 0) on the outer gradient g = anchor - mean */
        const float lr = ls->outer_lr, mu = ls->outer_mom;
        float *m = ls->mom;
        for (int64_t i = 0; i < n; i++) {
            float g = -(dl[i] / W);
            m[i] = fmaf(mu, m[i], g);
            a[i] = fmaf(-lr, fmaf(mu, m[i], g), a[i]);
        }
    }
    memcpy(p, a, sizeof(float) * (size_t)n);
    exec_params_changed(x); /* v2102 bf16 storage: the weight copy is refreshed on its next use */
    if (synced) *synced = 1;
    return HYP_OK;
}

void train_local_sgd_rebase(train_local_sgd *ls, const exec_t *x) {
    memcpy(ls->anchor, x->params, sizeof(float) * (size_t)ls->n);
    if (ls->mom) memset(ls->mom, 0, sizeof(float) * (size_t)ls->n);
}

const char *train_local_sgd_describe(const train_local_sgd *ls, char *buf, size_t n) {
    if (ls->nesterov)
        snprintf(buf, n, "local SGD (v2173): parameters synchronized every %d steps by one all-reduce of the change since the last; outer Nesterov (DiLoCo) lr %g momentum %g",
                 ls->every, (double)ls->outer_lr, (double)ls->outer_mom);
    else
        snprintf(buf, n, "local SGD (v2173): parameters averaged every %d steps by one all-reduce of the change since the last; no per-step gradient all-reduce",
                 ls->every);
    return buf;
}
