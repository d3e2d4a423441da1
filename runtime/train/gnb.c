/* gnb.c — the Gauss-Newton-Bartlett pass of Sophia-G (gnb.h): the sampled-label loss as the
 * executor's fused loss hook (exec_t.loss_fused) and the pass over the backend's slots.
 * gnb_labels draws the same labels for a device backend's pass from its downloaded logits.
 * Never: the update rule (optim_sophia.c), printing, or state kept between steps (the labels are
 * a function of seed, step and row, which is what makes resume bit-exact). */
#include "gnb.h"

#include <math.h>
#include <stdlib.h>

#include "ops_cpu.h"
#include "rng.h"

typedef struct {
    uint64_t seed;
    int step;
    int32_t *labels; /* [N] the sampled labels of the micro-batch */
} gnb_ctx;

int32_t gnb_sample(const float *z, int V, uint64_t seed, int step, int64_t row) {
    hyp_rng r;
    hyp_rng_seed2(&r, seed ^ 0x9e3779b97f4a7c15ULL, ((uint64_t)(uint32_t)step << 32) ^ (uint64_t)row);
    double m = z[0], s = 0;
    for (int i = 1; i < V; i++) m = fmax(m, z[i]);
    for (int i = 0; i < V; i++) s += exp((double)z[i] - m);
    double u = hyp_rng_uniform_f64(&r) * s, c = 0;
    for (int i = 0; i < V; i++) {
        c += exp((double)z[i] - m);
        if (u < c) return i;
    }
    return V - 1; /* u within rounding of s */
}

static void loss_sampled(exec_t *x, float *losses, float *logits, const int32_t *targets, float dloss, int N, int V,
                         int Vp) {
    gnb_ctx *g = x->loss_ctx;
    int64_t row0 = (int64_t)x->rank * N;
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++)
        g->labels[n] = targets[n] < 0 ? -1 : gnb_sample(logits + (size_t)n * Vp, V, g->seed, g->step, row0 + n);
    op_crossentropy_fused(losses, logits, g->labels, dloss, N, V, Vp);
}

int gnb_labels(const exec_t *x, const float *logits, const int32_t *targets, int32_t *labels, int N, int V, int Vp) {
    if (x->loss_fused != loss_sampled) return 0;
    const gnb_ctx *g = x->loss_ctx;
    int64_t row0 = (int64_t)x->rank * N;
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++)
        labels[n] = targets[n] < 0 ? -1 : gnb_sample(logits + (size_t)n * Vp, V, g->seed, g->step, row0 + n);
    return 1;
}

int gnb_due(const train_backend *b, int step) {
    const hyp_optim_i *o = b->dp.opt;
    if (!o || !o->hess_span || !o->hess_every) return 0;
    int k = o->hess_every(&b->x->p->optim);
    return k >= 1 && step % k == 0;
}

int gnb_pass(train_backend *b, const train_opts *o, int step, hyp_err *e) {
    exec_t *x = b->x;
    if (!b->i->hess_step)
        return hyp_fail(e, HYP_EINPUT, "train: optimizer '%s' refreshes a Hessian estimate with a sampled-label pass, which the %s backend does not run — generate the trainer with --target cpu",
                        b->dp.opt->kind, b->name);
    if (x->loss_fused || x->row_scale)
        return hyp_fail(e, HYP_EINPUT, "train: optimizer '%s' needs the fused loss for its sampled-label pass, which another technique (distillation or a preference loss) replaces — enable one of them",
                        b->dp.opt->kind);
    int N = x->B * x->T;
    gnb_ctx g = {o->seed, step, malloc(sizeof(int32_t) * (size_t)N)};
    if (!g.labels) return hyp_fail(e, HYP_EFAIL, "out of memory");
    double cnt = (double)exec_count_targets(x);
    int rc = hyp_coll_allreduce_f64(b->dp.coll, &cnt, 1, e);
    float mean = 0;
    if (!rc) rc = b->i->zero_grads(b, e);
    if (!rc) {
        x->loss_fused = loss_sampled, x->loss_ctx = &g;
        rc = b->i->micro_batch(b, cnt > 0 ? (float)(1.0 / cnt) : 0.0f, 1, &mean, e);
        x->loss_fused = NULL, x->loss_ctx = NULL;
    }
    if (!rc) rc = b->i->reduce_grads(b, o, e);
    if (!rc && cnt > 0) rc = b->i->hess_step(b, cnt, step, e);
    free(g.labels);
    return rc;
}
