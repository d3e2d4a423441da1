/* optim_lion.c — Lion (Chen et al. 2023, "Symbolic Discovery of Optimization Algorithms"; the
 * update of lion-pytorch) as an optimizer of optim.h: one state m (fp32), elementwise, so any
 * contiguous range updates alone and ZeRO shards it by floats. Per element, with g the gradient
 * times the clip factor:
 *     p *= 1 - lr*wd                      (decoupled decay first, as lion-pytorch)
 *     p -= lr * sign(beta1*m + (1-beta1)*g)
 *     m  = beta2*m + (1-beta2)*g
 * The host update is the loop below; the device update is the rendered lion_step kernel
 * (templates/lion.cu.lua) over this rank's range with a per-tensor weight-decay table; both
 * evaluate the same float expressions with the same explicit fmaf's, so host and device agree
 * bit for bit (test_kernels_sim).
 * Never: scheduling, clipping or ZeRO (the callers do those). */
#include <math.h>
#include <string.h>

#include "optim.h"

static int check(const hyp_optim_cfg *c, hyp_err *e) {
    static const hyp_optim_hyper_range H[] = {{"beta1", 0, 1, 0}, {"beta2", 0, 1, 0}};
    int rc = hyp_optim_check_hypers(c, "Lion", H, (int)(sizeof H / sizeof *H), e);
    if (rc) return rc;
    return hyp_optim_check_groups(c, e);
}

/* Every multiply-add is an explicit fmaf, so the host (where -ffp-contract=fast would fuse some
 * and not others), the simulator (no FMA contraction) and nvcc (contraction on) round the same:
 * bit-identical steps on every backend. */
static void step_span(const hyp_optim_cfg *c, const hyp_optim_span *s, const hyp_optim_step *a) {
    const float lr = (float)(a->lr * s->group->lr_mult), decay = fmaf(-lr, (float)s->group->weight_decay, 1.0f);
    const float beta1 = (float)hyp_optim_hyper(c, "beta1"), beta2 = (float)hyp_optim_hyper(c, "beta2");
    const float gs = a->grad_scale;
    float *p = s->param, *m = s->state[0];
    const float *g = s->grad;
#pragma omp parallel for schedule(static) if (s->n >= 32768)
    for (int64_t i = 0; i < s->n; i++) {
        float gi = g[i] * gs;
        float ci = fmaf(beta1, m[i], (1.0f - beta1) * gi);
        float u = (float)((ci > 0.0f) - (ci < 0.0f)); /* sign, 0 at 0 as torch.sign */
        p[i] = fmaf(p[i], decay, -(lr * u));
        m[i] = fmaf(beta2, m[i], (1.0f - beta2) * gi);
    }
}

/* lion_step(params, m, grads, seg_end, seg_wd, nseg, n, lr, beta1, beta2, gscale): 11
 * parameters, fp32 weights and state. */
static int step_device(const hyp_optim_cfg *c, exec_dev *x, const hyp_optim_step *a, const float *d_grad_scale,
                       hyp_err *e) {
    exec_dev_own o;
    double lr;
    int rc = hyp_optim_device_begin(c, x, "lion_step", 11, a->lr, &o, &lr, e);
    if (rc) return rc;
    hyp_kargs k;
    hyp_optim_kargs_head(&k, &o, 1, lr);
    hyp_kargs_f32(&k, (float)hyp_optim_hyper(c, "beta1"));
    hyp_kargs_f32(&k, (float)hyp_optim_hyper(c, "beta2"));
    hyp_kargs_ptr(&k, d_grad_scale);
    return exec_dev_optim_launch(x, o.n, &k, e);
}

const hyp_optim_i hyp_optim_lion = {
    .kind = "lion",
    .n_state = 1,
    .state_name = {"m"},
    .state_dtype = {HYP_DT_F32},
    /* lion-pytorch keeps its one moment as state['exp_avg'], as torch's Adam names m: the same
     * checkpoint name, so a checkpoint's m reads as the reference's momentum */
    .ckpt_suffix = {".exp_avg"},
    .shard_matrix = 0,
    .check = check,
    .step_span = step_span,
    .step_device = step_device,
};
