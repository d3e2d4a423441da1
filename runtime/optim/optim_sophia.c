/* optim_sophia.c — Sophia-G (Liu et al. 2023, "Sophia: A Scalable Stochastic Second-order
 * Optimizer for Language Model Pre-training"; the SophiaG class of github.com/Liuhong99/Sophia in
 * its rho/bs form) as an optimizer of optim.h: states m (the gradient EMA) and h (the EMA of the
 * Gauss-Newton-Bartlett diagonal Hessian estimate), fp32, elementwise, so any contiguous range
 * updates alone and ZeRO shards both by floats. Per element, g the gradient times the clip factor:
 *     p *= 1 - lr*wd                                   (decoupled decay first, as SophiaG)
 *     m  = beta1*m + (1-beta1)*g                       (no bias correction, as SophiaG)
 *     p -= lr * sign(m) * min(|m| / (rho*h + 1e-15), 1)
 * and every hessian_interval steps (hess_span, after that step's update), with g_hat the mean
 * gradient of the loss on labels sampled from the model's softmax over B tokens (train/gnb.c):
 *     h  = beta2*h + (1-beta2) * B * g_hat^2
 * h holds the paper's h (B * g_hat^2 averaged); the reference keeps the EMA of g_hat^2 and
 * multiplies by bs in the step (rho*bs*hess): the same number when bs is the estimate's B.
 * On a device the same expressions, with the same explicit fmaf's, run in sophia_step and
 * sophia_hess (templates/sophia.cu.lua) over the rank's range with a per-tensor weight-decay table.
 * Never: scheduling, clipping, ZeRO or the sampled-label pass (the callers do those). */
#include <math.h>
#include <string.h>

#include "optim.h"

static int check(const hyp_optim_cfg *c, hyp_err *e) {
    /* rho > 0 and a whole hess_every are checked below, with their own messages */
    static const hyp_optim_hyper_range H[] = {
        {"beta1", 0, 1, 1}, {"beta2", 0, 1, 1}, {"rho", -HUGE_VAL, HUGE_VAL, 0}, {"hess_every", -HUGE_VAL, HUGE_VAL, 0}};
    int rc = hyp_optim_check_hypers(c, "Sophia", H, (int)(sizeof H / sizeof *H), e);
    if (rc) return rc;
    double rho = hyp_optim_hyper(c, "rho"), k = hyp_optim_hyper(c, "hess_every");
    if (!(rho > 0))
        return hyp_fail(e, HYP_EINPUT, "plan: optimizer.hyper.rho = %g must be > 0 — regenerate the trainer with a valid value", rho);
    if (!(k >= 1 && k <= 1e6 && k == floor(k)))
        return hyp_fail(e, HYP_EINPUT, "plan: optimizer.hyper.hess_every = %g must be a whole number >= 1 — regenerate the trainer with a valid value", k);
    return hyp_optim_check_groups(c, e);
}

/* Explicit fmaf's: the same rounding whatever -ffp-contract does. */
static void step_span(const hyp_optim_cfg *c, const hyp_optim_span *s, const hyp_optim_step *a) {
    const float lr = (float)(a->lr * s->group->lr_mult), decay = fmaf(-lr, (float)s->group->weight_decay, 1.0f);
    const float beta1 = (float)hyp_optim_hyper(c, "beta1"), rho = (float)hyp_optim_hyper(c, "rho");
    const float gs = a->grad_scale;
    float *p = s->param, *m = s->state[0];
    const float *h = s->state[1], *g = s->grad;
#pragma omp parallel for schedule(static) if (s->n >= 32768)
    for (int64_t i = 0; i < s->n; i++) {
        float gi = g[i] * gs;
        float mi = fmaf(beta1, m[i], (1.0f - beta1) * gi);
        float ratio = fabsf(mi) / fmaf(rho, h[i], 1e-15f);
        if (ratio > 1.0f) ratio = 1.0f;
        float u = (float)((mi > 0.0f) - (mi < 0.0f)); /* sign, 0 at 0 as torch.sign */
        p[i] = fmaf(p[i], decay, -(lr * (u * ratio)));
        m[i] = mi;
    }
}

/* The GNB refresh: s->grad holds the mean gradient of the sampled-label loss over a->tokens. */
static void hess_span(const hyp_optim_cfg *c, const hyp_optim_span *s, const hyp_optim_step *a) {
    const float beta2 = (float)hyp_optim_hyper(c, "beta2"), B = (float)a->tokens;
    float *h = s->state[1];
    const float *g = s->grad;
#pragma omp parallel for schedule(static) if (s->n >= 32768)
    for (int64_t i = 0; i < s->n; i++) h[i] = fmaf(beta2, h[i], (1.0f - beta2) * (B * (g[i] * g[i])));
}

static int hess_every(const hyp_optim_cfg *c) { return (int)hyp_optim_hyper(c, "hess_every"); }

/* sophia_step(p, m, h, g, seg_end, seg_wd, nseg, n, lr, beta1, rho, gscale): 12 parameters */
static int step_device(const hyp_optim_cfg *c, exec_dev *x, const hyp_optim_step *a, const float *d_grad_scale,
                       hyp_err *e) {
    exec_dev_own o;
    double lr;
    int rc = hyp_optim_device_begin(c, x, "sophia_step", 12, a->lr, &o, &lr, e);
    if (rc) return rc;
    hyp_kargs k;
    hyp_optim_kargs_head(&k, &o, 2, lr);
    hyp_kargs_f32(&k, (float)hyp_optim_hyper(c, "beta1"));
    hyp_kargs_f32(&k, (float)hyp_optim_hyper(c, "rho"));
    hyp_kargs_ptr(&k, d_grad_scale);
    return exec_dev_optim_launch(x, o.n, &k, e);
}

/* sophia_hess(h, g, n, beta2, B) over what this rank owns */
static int hess_device(const hyp_optim_cfg *c, exec_dev *x, const hyp_optim_step *a, hyp_err *e) {
    exec_dev_own o;
    int rc = exec_dev_optim_own(x, "sophia_step", "float*", 12, &o, e);
    double block = 256;
    if (!rc) rc = exec_dev_optim_const(x, "BLOCK", &block, e);
    if (rc) return rc;
    hyp_kargs k;
    memset(&k, 0, sizeof k);
    hyp_kargs_ptr(&k, o.state[1]);
    hyp_kargs_ptr(&k, o.grad);
    hyp_kargs_i64(&k, o.n);
    hyp_kargs_f32(&k, (float)hyp_optim_hyper(c, "beta2"));
    hyp_kargs_f32(&k, (float)a->tokens);
    return exec_dev_optim_launch_grid(x, "sophia_hess", (unsigned)((o.n + (int64_t)block - 1) / (int64_t)block), &k, e);
}

const hyp_optim_i hyp_optim_sophia = {
    .kind = "sophia",
    .n_state = 2,
    .state_name = {"m", "h"},
    .state_dtype = {HYP_DT_F32, HYP_DT_F32},
    /* SophiaG's state names: exp_avg, hessian (ours holds B times the reference's, see above) */
    .ckpt_suffix = {".exp_avg", ".hessian"},
    .shard_matrix = 0,
    .check = check,
    .step_span = step_span,
    .hess_every = hess_every,
    .hess_span = hess_span,
    .step_device = step_device,
    .hess_device = hess_device,
};
