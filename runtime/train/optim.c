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
    for (int i = 0; i < p->n_params_t; i++)
        if (p->params[i].group < 0 || p->params[i].group >= c->n_groups)
            return hyp_fail(e, HYP_EINPUT, "plan: parameter '%s' is in no optimizer group — regenerate the trainer with gen", p->params[i].name);
    int rc = o->check ? o->check(c, e) : HYP_OK;
    if (!rc) *out = o;
    return rc;
}

double hyp_optim_hyper(const hyp_optim_cfg *cfg, const char *name) {
    for (int i = 0; i < cfg->n_hyper; i++)
        if (!strcmp(cfg->hyper_name[i], name)) return cfg->hyper[i];
    return 0;
}

void hyp_optim_step_range(const hyp_optim_i *o, const plan_t *p, const hyp_optim_step *a, int64_t lo, int64_t hi,
                          float *param, const float *grad, float *const *state) {
    for (int i = 0; i < p->n_params_t; i++) {
        const plan_param *pp = &p->params[i];
        int64_t s = pp->offset > lo ? pp->offset : lo;
        int64_t t = pp->offset + pp->numel < hi ? pp->offset + pp->numel : hi;
        if (s >= t) continue;
        hyp_optim_span sp = {param + (s - lo), grad + (s - lo), {0}, t - s, &p->optim.groups[pp->group]};
        for (int k = 0; k < o->n_state; k++) sp.state[k] = state[k] + (s - lo);
        o->step_span(&p->optim, &sp, a);
    }
}

void hyp_optim_cfg_free(plan_t *p) {
    for (int g = 0; g < p->optim.n_groups; g++) free(p->optim.groups[g].params);
    free(p->optim.groups);
    p->optim.groups = NULL;
    p->optim.n_groups = 0;
}

int optim_cfg_from_v1(plan_t *p, hyp_err *e) {
    hyp_optim_cfg *c = &p->optim;
    if (c->kind[0]) return HYP_OK;
    memset(c, 0, sizeof *c);
    snprintf(c->kind, sizeof c->kind, "adamw");
    const char *hn[3] = {"beta1", "beta2", "eps"};
    double hv[3] = {p->beta1, p->beta2, p->eps};
    for (int i = 0; i < 3; i++) {
        snprintf(c->hyper_name[i], sizeof c->hyper_name[i], "%s", hn[i]);
        c->hyper[i] = hv[i];
    }
    c->n_hyper = 3;
    snprintf(c->state_name[0], sizeof c->state_name[0], "m");
    snprintf(c->state_name[1], sizeof c->state_name[1], "v");
    c->state_dtype[0] = c->state_dtype[1] = HYP_DT_F32;
    c->n_state = 2;
    c->groups = calloc(2, sizeof *c->groups);
    if (!c->groups) return hyp_fail(e, HYP_EFAIL, "plan: out of memory for the optimizer groups");
    c->n_groups = 2;
    snprintf(c->groups[0].name, sizeof c->groups[0].name, "decay");
    snprintf(c->groups[1].name, sizeof c->groups[1].name, "no_decay");
    c->groups[0].lr_mult = c->groups[1].lr_mult = 1.0;
    c->groups[0].weight_decay = p->weight_decay;
    for (int g = 0; g < 2; g++) {
        c->groups[g].params = calloc((size_t)p->n_params_t + 1, sizeof(int));
        if (!c->groups[g].params) {
            hyp_optim_cfg_free(p);
            return hyp_fail(e, HYP_EFAIL, "plan: out of memory for the optimizer groups");
        }
    }
    for (int i = 0; i < p->n_params_t; i++) {
        hyp_optim_group *g = &c->groups[p->params[i].decay ? 0 : 1];
        p->params[i].group = p->params[i].decay ? 0 : 1;
        g->params[g->n_params++] = i;
    }
    return HYP_OK;
}
