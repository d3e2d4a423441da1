/* optim_sfadamw.c — Schedule-Free AdamW (Defazio et al. 2024, "The Road Less Scheduled"; the
 * update of PyPI schedulefree's AdamWScheduleFree with r = 0, weight_lr_power = 2, its warmup left
 * to the trainer's schedule) as an optimizer of optim.h: states z (the base sequence) and v (fp32),
 * elementwise. The parameters hold y, the point the gradient is taken at, while training; the
 * average x = y + (1 - 1/beta1) (z - y) is what evaluation, sampling and checkpoints see
 * (eval_point, as the reference's optimizer.eval() / .train()). Per element, with g the gradient
 * times the clip factor, lr the step's LR times the group's multiplier, c the averaging weight
 * c_t = lr_max_t^2 / sum_{i<=t} lr_max_i^2 (hyp_optim_step.avg_weight):
 *     z = y                                   (first step only: the reference clones p into z)
 *     v = beta2*v + (1-beta2)*g^2
 *     n = g / (sqrt(v / (1-beta2^t)) + eps) + wd*y       (decay at y)
 *     y = y + c*(z - y);  y += lr*(beta1*(1-c) - 1)*n;  z -= lr*n
 * On a device the same expressions run in the sfadamw_step kernel (templates/schedulefree.cu.lua,
 * one launch over the arena with a per-tensor weight-decay table) and the moves in sfadamw_lerp.
 * Never: scheduling, clipping or ZeRO (the callers do those; the trainer refuses ZeRO for kinds
 * with an eval_point). */
#include <math.h>
#include <string.h>

#include "optim.h"

static int check(const hyp_optim_cfg *c, hyp_err *e) {
    static const hyp_optim_hyper_range H[] = {{"beta1", 1e-6, 1, 1}, {"beta2", 0, 1, 1}, {"eps", 0, 1, 1}};
    return hyp_optim_check_hypers(c, "schedule-free AdamW", H, (int)(sizeof H / sizeof *H), e);
}

static void step_span(const hyp_optim_cfg *c, const hyp_optim_span *s, const hyp_optim_step *a) {
    const float lr = (float)(a->lr * s->group->lr_mult), wd = (float)s->group->weight_decay;
    const double b1 = hyp_optim_hyper(c, "beta1"), b2 = hyp_optim_hyper(c, "beta2");
    const float beta2 = (float)b2, eps = (float)hyp_optim_hyper(c, "eps");
    const float ibc2 = 1.0f / (float)(1.0 - pow(b2, (double)a->t));
    const float ck = (float)a->avg_weight, ystep = (float)(a->lr * s->group->lr_mult * (b1 * (1.0 - a->avg_weight) - 1.0));
    const float gs = a->grad_scale;
    float *y = s->param, *z = s->state[0], *v = s->state[1];
    const float *g = s->grad;
    const int first = a->t == 1;
#pragma omp parallel for schedule(static) if (s->n >= 32768)
    for (int64_t i = 0; i < s->n; i++) {
        if (first) z[i] = y[i];
        float gi = g[i] * gs;
        float vi = beta2 * v[i] + (1.0f - beta2) * gi * gi;
        v[i] = vi;
        float n = gi / (sqrtf(vi * ibc2) + eps) + wd * y[i];
        float yi = y[i] + ck * (z[i] - y[i]);
        y[i] = yi + ystep * n;
        z[i] -= lr * n;
    }
}

/* torch.lerp_(p, z, w) as the reference's eval() (w = 1 - 1/beta1: y -> x) and train()
 * (w = 1 - beta1: x -> y) */
static void eval_point(const hyp_optim_cfg *c, const hyp_optim_span *s, int to_eval) {
    const double b1 = hyp_optim_hyper(c, "beta1");
    const float w = (float)(to_eval ? 1.0 - 1.0 / b1 : 1.0 - b1);
    float *p = s->param;
    const float *z = s->state[0];
    for (int64_t i = 0; i < s->n; i++) p[i] = p[i] + w * (z[i] - p[i]);
}

/* sfadamw_step(y, z, v, g, seg_end, seg_wd, nseg, n, lr, beta2, eps, ibc2, ck, ystep, first, gscale): 16 */
static int step_device(const hyp_optim_cfg *c, exec_dev *x, const hyp_optim_step *a, const float *d_grad_scale,
                       hyp_err *e) {
    exec_dev_own o;
    double lr;
    int rc = hyp_optim_device_begin(c, x, "sfadamw_step", 16, a->lr, &o, &lr, e);
    if (rc) return rc;
    const double b1 = hyp_optim_hyper(c, "beta1"), b2 = hyp_optim_hyper(c, "beta2");
    const double lm = c->n_groups ? c->groups[0].lr_mult : 1.0; /* one multiplier (device_begin checked) */
    hyp_kargs k;
    hyp_optim_kargs_head(&k, &o, 2, lr);
    hyp_kargs_f32(&k, (float)b2);
    hyp_kargs_f32(&k, (float)hyp_optim_hyper(c, "eps"));
    hyp_kargs_f32(&k, 1.0f / (float)(1.0 - pow(b2, (double)a->t)));
    hyp_kargs_f32(&k, (float)a->avg_weight);
    hyp_kargs_f32(&k, (float)(a->lr * lm * (b1 * (1.0 - a->avg_weight) - 1.0)));
    hyp_kargs_i32(&k, a->t == 1);
    hyp_kargs_ptr(&k, d_grad_scale);
    return exec_dev_optim_launch(x, o.n, &k, e);
}

/* sfadamw_lerp over what this rank owns (the whole arena: padding holds y = z = 0) */
static int eval_device(const hyp_optim_cfg *c, exec_dev *x, int to_eval, hyp_err *e) {
    exec_dev_own o;
    int rc = exec_dev_optim_own(x, "sfadamw_step", "float*", 16, &o, e);
    if (rc) return rc;
    const double b1 = hyp_optim_hyper(c, "beta1");
    double block = 256;
    if ((rc = exec_dev_optim_const(x, "BLOCK", &block, e))) return rc;
    hyp_kargs k;
    memset(&k, 0, sizeof k);
    hyp_kargs_ptr(&k, o.param);
    hyp_kargs_ptr(&k, o.state[0]);
    hyp_kargs_i64(&k, o.n);
    hyp_kargs_f32(&k, (float)(to_eval ? 1.0 - 1.0 / b1 : 1.0 - b1));
    return exec_dev_optim_launch_grid(x, "sfadamw_lerp", (unsigned)((o.n + (int64_t)block - 1) / (int64_t)block), &k, e);
}

const hyp_optim_i hyp_optim_sfadamw = {
    .kind = "schedulefree_adamw",
    .n_state = 2,
    .state_name = {"z", "v"},
    .state_dtype = {HYP_DT_F32, HYP_DT_F32},
    .ckpt_suffix = {".z", ".exp_avg_sq"}, /* the reference's state names */
    .shard_matrix = 0,
    .check = check,
    .step_span = step_span,
    .eval_point = eval_point,
    .step_device = step_device,
    .eval_device = eval_device,
};
