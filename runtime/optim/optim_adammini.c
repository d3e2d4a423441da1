/* optim_adammini.c — Adam-mini (Zhang et al. 2024, "Adam-mini: Use Fewer Learning Rates To Gain
 * More"; the update of PyPI adam-mini 1.1.1, Adam_mini.step) as an optimizer of optim.h: the
 * first moment m per parameter, the second moment one scalar per block, the EMA of the block's
 * mean g^2; the update is p -= lr/bc1 * m / (sqrt(v_block)/sqrt(bc2) + eps) after the decoupled
 * decay p *= 1 - lr*wd. The plan's groups name the partition of their tensors (the rule):
 *   "adam"    per coordinate (biases, token/position embeddings, output head: as the paper)
 *   "head"    one block per attention head: head_dim consecutive rows (separate q_proj / k_proj)
 *   "qkv"     a fused QKV weight [(n_head + 2 n_kv_head) head_dim, C]: q and k rows per head, v
 *             rows per output neuron (one block per row)
 *   "neuron"  one block per output neuron = row (v_proj, attention out, MLP in and out)
 *   "block"   the whole tensor one block (norm gains)
 * States m (fp32, per parameter) and v (fp32, packed per tensor: one float per block, per
 * coordinate under "adam"; state_numel). Blocks need whole tensors (shard_matrix = 1); under
 * ZeRO stage 1 (cpu) the plan keeps v unpacked, sharded by floats like m, every element holding
 * its block's v, and a span reads its blocks' whole gradients (zero1_full_grad: stage 1 keeps
 * them all-reduced on every rank; step_span_zero1); stages 2-3 are refused. On a device: one launch per tensor, adam_mini_block_step (one CUDA block per Adam-mini
 * block) or adam_mini_adam_step (templates/adam_mini.cu.lua). Never: scheduling, clipping or ZeRO. */
#include <math.h>
#include <string.h>

#include "ops_cpu.h"
#include "optim_kernels_cpu.h"
#include "optim.h"

static const hyp_optim_hyper_range H[] = {
    {"beta1", 0, 0.999999, 0}, {"beta2", 0, 0.999999, 0}, {"eps", 0, 1, 0},
    {"n_head", 1, 65536, 0}, {"n_kv_head", 1, 65536, 0}, {"head_dim", 1, 65536, 0},
};
#define NHYP ((int)(sizeof H / sizeof *H))

static int check(const hyp_optim_cfg *c, hyp_err *e) {
    int rc = hyp_optim_check_hypers(c, "Adam-mini", H, NHYP, e);
    if (rc) return rc;
    for (int g = 0; g < c->n_groups; g++)
        if (!c->groups[g].rule[0])
            return hyp_fail(e, HYP_EINPUT, "plan: optimizer group '%s' names no rule; Adam-mini's groups say adam, head, qkv, neuron or block — regenerate the trainer with gen",
                            c->groups[g].name);
    return HYP_OK;
}

/* rows [r0, r0 + nr) of a [R, K] tensor as one block with second moment *vb */
static void block_step(float *p, const float *g, float *m, float *vb, long n, float gs, float beta1, float beta2,
                       float lr_bc1, float isbc2, float eps, float decay) {
    double ss = 0;
    for (long i = 0; i < n; i++) {
        float gi = g[i] * gs;
        ss += (double)gi * gi;
    }
    *vb = beta2 * *vb + (1.0f - beta2) * (float)(ss / (double)n);
    float h = sqrtf(*vb) * isbc2 + eps, step = lr_bc1 / h;
    for (long i = 0; i < n; i++) {
        float gi = g[i] * gs;
        m[i] = beta1 * m[i] + (1.0f - beta1) * gi;
        p[i] = p[i] * decay - step * m[i];
    }
}

/* The block partition of a [R, K] tensor under rule: nq blocks of hd rows, then blocks of nr
 * rows (as step_span walks them); 0 when the rows are not a whole number of them. */
static int64_t partition(const char *rule, int64_t R, int64_t hd, int64_t nh, int64_t nkv, int *nq, int *nr) {
    *nq = 0, *nr = 1;
    if (!strcmp(rule, "block")) *nr = (int)R;
    else if (!strcmp(rule, "head")) *nr = (int)hd;
    else if (!strcmp(rule, "qkv") && R >= (nh + nkv) * hd) *nq = (int)(nh + nkv);
    int64_t rest = R - (int64_t)*nq * hd;
    if (*nr <= 0 || rest < 0 || rest % *nr) return 0;
    return *nq + rest / *nr;
}

/* ZeRO stage 1 (the plan's v unpacked, in the arena layout, sharded by floats like m): the span is
 * this rank's part of the tensor; stage 1 keeps every rank's gradients whole (all-reduced), so
 * each block meeting the span takes its mean g^2 over the whole block from s->grad - s->first,
 * and every element of the span keeps its block's v (the same value in each, so any rank's part
 * advances it identically). The float expressions are block_step's. */
static void step_span_zero1(const hyp_optim_cfg *c, const hyp_optim_span *s, const hyp_optim_step *a, float lr,
                            float beta1, float beta2, float eps) {
    const plan_param *t = s->tensor;
    const int64_t K = t->ndim == 2 ? t->shape[1] : t->numel, R = t->numel / K;
    const int64_t hd = (int64_t)hyp_optim_hyper(c, "head_dim"), nh = (int64_t)hyp_optim_hyper(c, "n_head"),
                  nkv = (int64_t)hyp_optim_hyper(c, "n_kv_head");
    int nq, nr;
    int64_t nb = partition(s->group->rule, R, hd, nh, nkv, &nq, &nr);
    if (nb <= 0) {
        op_cpu_fail("adam-mini: a tensor's rows are not a whole number of heads (head_dim does not divide them)");
        return;
    }
    const float lr_bc1 = lr / (float)(1.0 - pow((double)beta1, (double)a->t));
    const float isbc2 = 1.0f / (float)sqrt(1.0 - pow((double)beta2, (double)a->t));
    const float decay = 1.0f - lr * (float)s->group->weight_decay, gs = a->grad_scale;
    const float *gt = s->grad - s->first; /* the tensor's whole gradient (stage 1) */
    const int64_t lo = s->first, hi = s->first + s->n;
    for (int64_t b = 0; b < nb; b++) {
        int64_t r0 = b < nq ? b * hd : (int64_t)nq * hd + (b - nq) * nr, rows = b < nq ? hd : nr;
        int64_t e0 = r0 * K, e1 = e0 + rows * K, o0 = e0 > lo ? e0 : lo, o1 = e1 < hi ? e1 : hi;
        if (o0 >= o1) continue;
        double ss = 0;
        for (int64_t i = e0; i < e1; i++) {
            float gi = gt[i] * gs;
            ss += (double)gi * gi;
        }
        float vb = beta2 * s->state[1][o0 - lo] + (1.0f - beta2) * (float)(ss / (double)(e1 - e0));
        float h = sqrtf(vb) * isbc2 + eps, step = lr_bc1 / h;
        for (int64_t i = o0; i < o1; i++) {
            float gi = gt[i] * gs;
            float *m = &s->state[0][i - lo];
            *m = beta1 * *m + (1.0f - beta1) * gi;
            s->param[i - lo] = s->param[i - lo] * decay - step * *m;
            s->state[1][i - lo] = vb;
        }
    }
}

static void step_span(const hyp_optim_cfg *c, const hyp_optim_span *s, const hyp_optim_step *a) {
    const char *rule = s->group->rule;
    const float beta1 = (float)hyp_optim_hyper(c, "beta1"), beta2 = (float)hyp_optim_hyper(c, "beta2");
    const float eps = (float)hyp_optim_hyper(c, "eps"), lr = (float)(a->lr * s->group->lr_mult);
    if (!strcmp(rule, "adam")) {
        op_adamw(s->param, s->grad, s->state[0], s->state[1], (long)s->n, lr, beta1, beta2, eps,
                 (float)s->group->weight_decay, a->t, a->grad_scale);
        return;
    }
    const plan_param *t = s->tensor;
    if (t && !c->state_compact[1]) { /* ZeRO-1: v in the arena layout, each element its block's v */
        step_span_zero1(c, s, a, lr, beta1, beta2, eps);
        return;
    }
    if (!t || s->first != 0 || s->n != t->numel) {
        op_cpu_fail("adam-mini: a block rule needs whole tensors (a sharded span reached it)");
        return;
    }
    const long K = t->ndim == 2 ? (long)t->shape[1] : (long)t->numel, R = (long)(t->numel / K);
    const long hd = (long)hyp_optim_hyper(c, "head_dim"), nh = (long)hyp_optim_hyper(c, "n_head"),
               nkv = (long)hyp_optim_hyper(c, "n_kv_head");
    const float lr_bc1 = lr / (float)(1.0 - pow((double)beta1, (double)a->t));
    const float isbc2 = 1.0f / (float)sqrt(1.0 - pow((double)beta2, (double)a->t));
    const float decay = 1.0f - lr * (float)s->group->weight_decay;
    float *p = s->param, *m = s->state[0], *v = s->state[1];
    const float *g = s->grad;
    /* the blocks as row counts: rows[b] rows each, in order */
    long b = 0, r = 0;
    while (r < R) {
        long nr = 1;
        if (!strcmp(rule, "block")) nr = R;
        else if (!strcmp(rule, "head")) nr = hd;
        else if (!strcmp(rule, "qkv")) nr = r < (nh + nkv) * hd ? hd : 1;
        if (nr <= 0 || r + nr > R) {
            op_cpu_fail("adam-mini: a tensor's rows are not a whole number of heads (head_dim does not divide them)");
            return;
        }
        block_step(p + r * K, g + r * K, m + r * K, v + b, nr * K, a->grad_scale, beta1, beta2, lr_bc1, isbc2, eps, decay);
        r += nr, b++;
    }
}

/* adam_mini_adam_step(p, m, v, g, n, lr, beta1, beta2, eps, wd, ibc1, ibc2, gscale): 13;
 * adam_mini_block_step(p, m, v, g, K, nq, hd, nr, beta1, beta2, lr_bc1, isbc2, eps, decay, gscale) */
static int step_device(const hyp_optim_cfg *c, exec_dev *x, const hyp_optim_step *a, const float *d_grad_scale,
                       hyp_err *e) {
    exec_dev_own o;
    int rc = exec_dev_optim_own(x, "adam_mini_adam_step", "float*", 13, &o, e);
    if (rc) return rc;
    if (x->stage != 0)
        return hyp_fail(e, HYP_EINPUT, "adam-mini: ZeRO stage %d shards by floats and Adam-mini's blocks need whole tensors — generate the trainer without zero1/zero2/zero3", x->stage);
    const plan_t *p = x->p;
    const float beta1 = (float)hyp_optim_hyper(c, "beta1"), beta2 = (float)hyp_optim_hyper(c, "beta2");
    const float eps = (float)hyp_optim_hyper(c, "eps");
    const int64_t hd = (int64_t)hyp_optim_hyper(c, "head_dim"), nh = (int64_t)hyp_optim_hyper(c, "n_head"),
                  nkv = (int64_t)hyp_optim_hyper(c, "n_kv_head");
    const float ibc1 = 1.0f / (float)(1.0 - pow((double)beta1, (double)a->t)), ibc2 = 1.0f / (float)(1.0 - pow((double)beta2, (double)a->t));
    const float isbc2 = 1.0f / (float)sqrt(1.0 - pow((double)beta2, (double)a->t));
    double block = 256;
    if ((rc = exec_dev_optim_const(x, "BLOCK", &block, e))) return rc;
    for (int i = 0; i < p->n_params_t && !rc; i++) {
        const plan_param *t = &p->params[i];
        const hyp_optim_group *gr = &c->groups[t->group];
        const float lr = (float)(a->lr * gr->lr_mult);
        float *pp = o.param + t->offset, *m = o.state[0] + plan_state_off(c, 0, i, t), *v = o.state[1] + plan_state_off(c, 1, i, t);
        const float *g = o.grad + t->offset;
        hyp_kargs k;
        memset(&k, 0, sizeof k);
        hyp_kargs_ptr(&k, pp);
        hyp_kargs_ptr(&k, m);
        hyp_kargs_ptr(&k, v);
        hyp_kargs_ptr(&k, g);
        if (!strcmp(gr->rule, "adam")) {
            hyp_kargs_i64(&k, t->numel);
            hyp_kargs_f32(&k, lr);
            hyp_kargs_f32(&k, beta1);
            hyp_kargs_f32(&k, beta2);
            hyp_kargs_f32(&k, eps);
            hyp_kargs_f32(&k, (float)gr->weight_decay);
            hyp_kargs_f32(&k, ibc1);
            hyp_kargs_f32(&k, ibc2);
            hyp_kargs_ptr(&k, d_grad_scale);
            rc = exec_dev_optim_launch_grid(x, "adam_mini_adam_step", (unsigned)((t->numel + (int64_t)block - 1) / (int64_t)block), &k, e);
            continue;
        }
        const int64_t K = t->ndim == 2 ? t->shape[1] : t->numel, R = t->numel / K;
        int nq, nr;
        int64_t nb = partition(gr->rule, R, hd, nh, nkv, &nq, &nr);
        if (nb <= 0 || nb != plan_state_n(c, 1, i, t))
            return hyp_fail(e, HYP_EINPUT, "plan: '%s' (%lld rows) is not a whole number of Adam-mini blocks of its rule '%s' — regenerate the trainer with gen",
                            t->name, (long long)R, gr->rule);
        hyp_kargs_i64(&k, K);
        hyp_kargs_i32(&k, nq);
        hyp_kargs_i32(&k, (int)hd);
        hyp_kargs_i32(&k, nr);
        hyp_kargs_f32(&k, beta1);
        hyp_kargs_f32(&k, beta2);
        hyp_kargs_f32(&k, lr / (float)(1.0 - pow((double)beta1, (double)a->t)));
        hyp_kargs_f32(&k, isbc2);
        hyp_kargs_f32(&k, eps);
        hyp_kargs_f32(&k, 1.0f - lr * (float)gr->weight_decay);
        hyp_kargs_ptr(&k, d_grad_scale);
        rc = exec_dev_optim_launch_grid(x, "adam_mini_block_step", (unsigned)nb, &k, e);
    }
    return rc;
}

/* the number of blocks of tensor t under its group's rule (as step_span walks them) */
static int64_t state_numel(const hyp_optim_cfg *c, const plan_param *t, int k) {
    const char *rule = c->groups[t->group].rule;
    if (k == 0 || !strcmp(rule, "adam") || !c->state_compact[1]) return t->numel; /* ZeRO-1: arena layout */
    const int64_t K = t->ndim == 2 ? t->shape[1] : t->numel, R = t->numel / K;
    const int64_t hd = (int64_t)hyp_optim_hyper(c, "head_dim"), nh = (int64_t)hyp_optim_hyper(c, "n_head"),
                  nkv = (int64_t)hyp_optim_hyper(c, "n_kv_head");
    if (!strcmp(rule, "block")) return 1;
    if (!strcmp(rule, "head")) return hd > 0 ? R / hd : R;
    if (!strcmp(rule, "qkv")) return R >= (nh + nkv) * hd ? nh + nkv + (R - (nh + nkv) * hd) : R;
    return R; /* neuron */
}

const hyp_optim_i hyp_optim_adammini = {
    .kind = "adam_mini",
    .n_state = 2,
    .state_name = {"m", "v"},
    .state_dtype = {HYP_DT_F32, HYP_DT_F32},
    /* the reference keeps state["m"], and state["vmean"] per block (state["v"] on Adam blocks) */
    .ckpt_suffix = {".m", ".vmean"},
    .shard_matrix = 1,
    .zero1_full_grad = 1,
    .rules = {"adam", "head", "qkv", "neuron", "block", NULL},
    .state_numel = state_numel,
    .check = check,
    .step_span = step_span,
    .step_device = step_device,
};
