/* optim_adamw.c — AdamW (Loshchilov & Hutter; torch.optim.AdamW's update) as an optimizer of
 * optim.h: states m and v (fp32), elementwise, so any contiguous range updates alone. The host
 * update is ops_cpu.c's op_adamw; the device update is the rendered adamw_step kernel
 * (templates/adamw.cu.lua) over this rank's range with a per-tensor weight-decay table. Both
 * compute the bias corrections in double, round them to float and invert in float, so host and
 * device steps agree bit for bit. v2161 (bf16 parameters, no fp32 master): hyp_adamw_bf16_step,
 * the element update of kernels/hyp/sr.h that the template's PARAM=bf16 kernel runs too. Never: scheduling, clipping or ZeRO (the callers do those). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "hyp/sr.h"
#include "ops_cpu.h"
#include "optim_kernels_cpu.h"
#include "optim.h"

static int check(const hyp_optim_cfg *c, hyp_err *e) {
    static const hyp_optim_hyper_range H[] = {{"beta1", 0, 1, 1}, {"beta2", 0, 1, 1}, {"eps", 0, 1, 1}};
    return hyp_optim_check_hypers(c, "AdamW", H, (int)(sizeof H / sizeof *H), e);
}

static void step_span(const hyp_optim_cfg *c, const hyp_optim_span *s, const hyp_optim_step *a) {
    op_adamw(s->param, s->grad, s->state[0], s->state[1], (long)s->n, (float)(a->lr * s->group->lr_mult),
             (float)hyp_optim_hyper(c, "beta1"), (float)hyp_optim_hyper(c, "beta2"), (float)hyp_optim_hyper(c, "eps"),
             (float)s->group->weight_decay, a->t, a->grad_scale);
}

/* adamw_step(params, m, v, grads, seg_end, seg_wd, nseg, n, lr, beta1, beta2, eps, ibc1, ibc2,
 * gscale, seed, t): 17 parameters, fp32 weights and states. */
static int step_device(const hyp_optim_cfg *c, exec_dev *x, const hyp_optim_step *a, const float *d_grad_scale,
                       hyp_err *e) {
    exec_dev_own o;
    double lr;
    int rc = hyp_optim_device_begin(c, x, "adamw_step", 17, a->lr, &o, &lr, e);
    if (rc) return rc;
    double beta1 = hyp_optim_hyper(c, "beta1"), beta2 = hyp_optim_hyper(c, "beta2");
    /* as op_adamw: the bias corrections in double, rounded to float, inverted in float */
    float ibc1 = 1.0f / (float)(1.0 - pow(beta1, (double)a->t)), ibc2 = 1.0f / (float)(1.0 - pow(beta2, (double)a->t));
    hyp_kargs k;
    hyp_optim_kargs_head(&k, &o, 2, lr);
    hyp_kargs_f32(&k, (float)beta1);
    hyp_kargs_f32(&k, (float)beta2);
    hyp_kargs_f32(&k, (float)hyp_optim_hyper(c, "eps"));
    hyp_kargs_f32(&k, ibc1);
    hyp_kargs_f32(&k, ibc2);
    hyp_kargs_ptr(&k, d_grad_scale);
    hyp_kargs_u32(&k, 0u);
    hyp_kargs_i32(&k, a->t);
    return exec_dev_optim_launch(x, o.n, &k, e);
}

void hyp_adamw_bf16_span(uint16_t *param, const float *grad, float *m, float *v, long first, long n, float lr,
                         float beta1, float beta2, float eps, float ibc1, float ibc2, float wd, float gscale,
                         unsigned seed, unsigned step, int nearest) {
#pragma omp parallel for schedule(static) if (n >= 65536)
    for (long j = first; j < first + n; j++)
        param[j] = hyp_adamw_bf16_elem(param[j], grad[j] * gscale, &m[j], &v[j], lr, beta1, beta2, eps, ibc1, ibc2, wd,
                                       seed, step, (unsigned long long)j, nearest);
}

void hyp_adamw_bf16_step(const hyp_optim_cfg *c, const plan_t *p, const hyp_optim_step *a, uint16_t *param,
                         const float *grad, float *m, float *v) {
    float beta1 = (float)hyp_optim_hyper(c, "beta1"), beta2 = (float)hyp_optim_hyper(c, "beta2");
    float eps = (float)hyp_optim_hyper(c, "eps");
    /* as op_adamw and step_device: the bias corrections in double, rounded to float, inverted in float */
    float ibc1 = 1.0f / (float)(1.0 - pow((double)beta1, (double)a->t)), ibc2 = 1.0f / (float)(1.0 - pow((double)beta2, (double)a->t));
    for (int i = 0; i < p->n_params_t; i++) {
        const plan_param *pp = &p->params[i];
        const hyp_optim_group *gr = &c->groups[pp->group];
        hyp_adamw_bf16_span(param, grad, m, v, (long)pp->offset, (long)pp->numel, (float)(a->lr * gr->lr_mult), beta1,
                            beta2, eps, ibc1, ibc2, (float)gr->weight_decay, a->grad_scale, p->param_seed,
                            (unsigned)a->t, p->param_nearest);
    }
}

const hyp_optim_i hyp_optim_adamw = {
    .kind = "adamw",
    .n_state = 2,
    .state_name = {"m", "v"},
    .state_dtype = {HYP_DT_F32, HYP_DT_F32},
    .ckpt_suffix = {".exp_avg", ".exp_avg_sq"}, /* torch.optim.AdamW's state names */
    .shard_matrix = 0,
    .check = check,
    .step_span = step_span,
    .step_device = step_device,
};
