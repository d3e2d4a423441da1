/* optim.c — what every optimizer shares (optim.h): opening the plan's optimizer section against
 * the registered kind, hyper-parameter lookup, cutting an arena range into per-tensor spans, and
 * the optimizer section of a version-1 plan. Never: an update rule (one file per optimizer) or
 * knowledge of ranks and ZeRO stages (the callers choose the ranges). */
#include "optim.h"

#include <stdlib.h>
#include <string.h>

int hyp_optim_open(const plan_t *p, const hyp_optim_i **out, hyp_err *e) {
    const hyp_optim_cfg *c = &p->optim;
    const hyp_optim_i *o = hyp_optim_find(c->kind);
    *out = NULL;
    if (!c->kind[0]) return hyp_fail(e, HYP_EINPUT, "plan: no optimizer section — regenerate the trainer with gen");
    if (!o) return hyp_fail(e, HYP_EINPUT, "plan: optimizer.kind '%s' is not an optimizer this runtime has — regenerate the trainer with this version of gen", c->kind);
    if (c->n_state != o->n_state)
        return hyp_fail(e, HYP_EINPUT, "plan: optimizer '%s' keeps %d state tensors, the plan lists %d — regenerate the trainer with gen",
                        o->kind, o->n_state, c->n_state);
    for (int k = 0; k < o->n_state; k++)
        if (strcmp(c->state_name[k], o->state_name[k]) || c->state_dtype[k] != o->state_dtype[k])
            return hyp_fail(e, HYP_EINPUT, "plan: optimizer.state[%d] is '%s' %s, optimizer '%s' keeps '%s' %s there — regenerate the trainer with gen",
                            k, c->state_name[k], hyp_dtype_name(c->state_dtype[k]), o->kind, o->state_name[k],
                            hyp_dtype_name(o->state_dtype[k]));
    if (c->shard_matrix != o->shard_matrix)
        return hyp_fail(e, HYP_EINPUT, "plan: optimizer.shard is \"%s\", optimizer '%s' shards %s — regenerate the trainer with gen",
                        c->shard_matrix ? "matrix" : "elementwise", o->kind, o->shard_matrix ? "by matrix" : "elementwise");
    for (int g = 0; g < c->n_groups; g++) {
        const char *r = c->groups[g].rule;
        int ok = !r[0];
        for (int k = 0; !ok && k < 6 && o->rules[k]; k++) ok = !strcmp(r, o->rules[k]);
        if (!ok)
            return hyp_fail(e, HYP_EINPUT, "plan: optimizer group '%s' asks for rule '%s', which optimizer '%s' does not have — regenerate the trainer with gen",
                            c->groups[g].name, r, o->kind);
    }
    for (int k = 0; k < o->n_state; k++)
        for (int i = 0; i < p->n_params_t; i++) {
            const plan_param *t = &p->params[i];
            int64_t want = o->state_numel && t->group >= 0 && t->group < c->n_groups ? o->state_numel(c, t, k) : t->numel;
            if (plan_state_n(c, k, i, t) != want)
                return hyp_fail(e, HYP_EINPUT, "plan: optimizer.state[%d] ('%s') keeps %lld floats of '%s', optimizer '%s' keeps %lld — regenerate the trainer with gen",
                                k, c->state_name[k], (long long)plan_state_n(c, k, i, t), t->name, o->kind, (long long)want);
        }
    for (int i = 0; i < p->n_params_t; i++)
        if (p->params[i].group < 0 || p->params[i].group >= c->n_groups)
            return hyp_fail(e, HYP_EINPUT, "plan: parameter '%s' is in no optimizer group — regenerate the trainer with gen", p->params[i].name);
    int rc = o->check ? o->check(c, e) : HYP_OK;
    if (!rc) *out = o;
    return rc;
}

int hyp_optim_check_hypers(const hyp_optim_cfg *c, const char *who, const hyp_optim_hyper_range *h, int n, hyp_err *e) {
    for (int i = 0; i < n; i++) {
        int found = 0;
        for (int j = 0; j < c->n_hyper; j++) {
            if (strcmp(c->hyper_name[j], h[i].name)) continue;
            found = 1;
            double v = c->hyper[j];
            if (!(v >= h[i].lo && (h[i].hi_open ? v < h[i].hi : v <= h[i].hi)))
                return hyp_fail(e, HYP_EINPUT, "plan: optimizer.hyper.%s = %g is outside [%g, %g%c — regenerate the trainer with a valid value",
                                h[i].name, v, h[i].lo, h[i].hi, h[i].hi_open ? ')' : ']');
        }
        if (!found) return hyp_fail(e, HYP_EINPUT, "plan: %s needs optimizer.hyper.%s — regenerate the trainer with gen", who, h[i].name);
    }
    for (int j = 0; j < c->n_hyper; j++) {
        int i = 0;
        while (i < n && strcmp(c->hyper_name[j], h[i].name)) i++;
        if (i < n) continue;
        char names[256] = "";
        for (int k = 0, len = 0; k < n && len < (int)sizeof names; k++)
            len += snprintf(names + len, sizeof names - (size_t)len, "%s%s", k ? ", " : "", h[k].name);
        return hyp_fail(e, HYP_EINPUT, "plan: optimizer.hyper.%s: %s takes no such hyper-parameter (%s) — regenerate the trainer with gen",
                        c->hyper_name[j], who, names);
    }
    return HYP_OK;
}

double hyp_optim_hyper(const hyp_optim_cfg *cfg, const char *name) {
    for (int i = 0; i < cfg->n_hyper; i++)
        if (!strcmp(cfg->hyper_name[i], name)) return cfg->hyper[i];
    return 0;
}

void hyp_optim_step_range(const hyp_optim_i *o, const plan_t *p, const hyp_optim_step *a, int64_t lo, int64_t hi,
                          float *param, const float *grad, float *const *state) {
    hyp_optim_range_fn(o, o->step_span, p, a, lo, hi, param, grad, state);
}

void hyp_optim_range_fn(const hyp_optim_i *o, hyp_optim_span_fn fn, const plan_t *p, const hyp_optim_step *a, int64_t lo,
                        int64_t hi, float *param, const float *grad, float *const *state) {
    for (int i = 0; i < p->n_params_t; i++) {
        const plan_param *pp = &p->params[i];
        int64_t s = pp->offset > lo ? pp->offset : lo;
        int64_t t = pp->offset + pp->numel < hi ? pp->offset + pp->numel : hi;
        if (s >= t) continue;
        hyp_optim_span sp = {param + (s - lo), grad + (s - lo), {0}, t - s, &p->optim.groups[pp->group], pp, s - pp->offset};
        /* the arena layout: state_off = the parameter's offset; a packed state: lo == 0 (stage 0) */
        for (int k = 0; k < o->n_state; k++) sp.state[k] = state[k] + (plan_state_off(&p->optim, k, i, pp) - lo) + (s - pp->offset);
        fn(&p->optim, &sp, a);
    }
}

int hyp_optim_device_begin(const hyp_optim_cfg *c, exec_dev *x, const char *kernel, int nparams, double base_lr,
                           exec_dev_own *o, double *lr, hyp_err *e) {
    int rc = exec_dev_optim_own(x, kernel, "float*", nparams, o, e);
    if (rc) return rc;
    for (int g = 1; g < c->n_groups; g++)
        if (c->groups[g].lr_mult != c->groups[0].lr_mult)
            return hyp_fail(e, HYP_EINPUT, "%s: group '%s' has lr_mult %g and '%s' %g; the device kernel takes one learning rate — give every group the same lr_mult",
                            kernel, c->groups[g].name, c->groups[g].lr_mult, c->groups[0].name, c->groups[0].lr_mult);
    for (int s = 0; s < o->nseg; s++)
        o->h_seg_val[s] = o->seg_group[s] >= 0 ? (float)c->groups[o->seg_group[s]].weight_decay : 0.0f;
    *lr = base_lr * (c->n_groups ? c->groups[0].lr_mult : 1.0);
    return x->dev->h2d(x->dev, o->seg_val, o->h_seg_val, sizeof(float) * (size_t)o->nseg, NULL, e);
}

void hyp_optim_kargs_head(hyp_kargs *k, const exec_dev_own *o, int n_states, double lr) {
    memset(k, 0, sizeof *k);
    hyp_kargs_ptr(k, o->param);
    for (int i = 0; i < n_states; i++) hyp_kargs_ptr(k, o->state[i]);
    hyp_kargs_ptr(k, o->grad);
    hyp_kargs_ptr(k, o->seg_end);
    hyp_kargs_ptr(k, o->seg_val);
    hyp_kargs_i32(k, o->nseg);
    hyp_kargs_i64(k, o->n);
    hyp_kargs_f32(k, (float)lr);
}

int hyp_optim_check_groups(const hyp_optim_cfg *c, hyp_err *e) {
    for (int g = 0; g < c->n_groups; g++)
        if (!(c->groups[g].weight_decay >= 0))
            return hyp_fail(e, HYP_EINPUT, "plan: optimizer group '%s': weight_decay %g is negative — regenerate the trainer with a valid value",
                            c->groups[g].name, c->groups[g].weight_decay);
    return HYP_OK;
}
