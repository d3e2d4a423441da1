/* optim_sgd.c — SGD with momentum (torch.optim.SGD's update: dampening 0, not Nesterov, L2 weight
 * decay added to the gradient) as an optimizer of optim.h: one state m (fp32, torch's
 * momentum_buffer), elementwise, so any contiguous range updates alone and ZeRO shards it by
 * floats. Per element, with g the gradient times the clip factor:
 *     d = g + wd*p
 *     m = momentum*m + d            (m starts at 0, so the first step is m = d, as torch's)
 *     p = p - lr*m
 * The update is linear in the gradients, which is what makes v2173 local SGD with one inner step
 * average the same update as synchronous data parallelism (docs/local-sgd.md). Host only: a device
 * target is refused where the plan chooses it (v2173 inner sgd). Every multiply-add is an explicit
 * fmaf, so the result does not depend on the compiler's contraction.
 * Never: scheduling, clipping or ZeRO (the callers do those). */
#include <math.h>

#include "optim.h"

static int check(const hyp_optim_cfg *c, hyp_err *e) {
    static const hyp_optim_hyper_range H[] = {{"momentum", 0, 1, 1}};
    int rc = hyp_optim_check_hypers(c, "SGD", H, (int)(sizeof H / sizeof *H), e);
    return rc ? rc : hyp_optim_check_groups(c, e);
}

static void step_span(const hyp_optim_cfg *c, const hyp_optim_span *s, const hyp_optim_step *a) {
    const float lr = (float)(a->lr * s->group->lr_mult), wd = (float)s->group->weight_decay;
    const float mu = (float)hyp_optim_hyper(c, "momentum"), gs = a->grad_scale;
    float *p = s->param, *m = s->state[0];
    const float *g = s->grad;
#pragma omp parallel for schedule(static) if (s->n >= 32768)
    for (int64_t i = 0; i < s->n; i++) {
        float d = fmaf(wd, p[i], g[i] * gs);
        m[i] = fmaf(mu, m[i], d);
        p[i] = fmaf(-lr, m[i], p[i]);
    }
}

const hyp_optim_i hyp_optim_sgd = {
    .kind = "sgd",
    .n_state = 1,
    .state_name = {"m"},
    .state_dtype = {HYP_DT_F32},
    .ckpt_suffix = {".momentum_buffer"}, /* torch.optim.SGD's state name */
    .shard_matrix = 0,
    .check = check,
    .step_span = step_span,
    .step_device = NULL,
};
