/* train.c — learning-rate schedules, clipping and the optimizer on the own part (see train.h). */
#include "train.h"

#include <math.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

#include "ops_cpu.h"

void train_opts_from_plan(train_opts *o, const plan_t *p) {
    memset(o, 0, sizeof *o);
    o->lr = p->lr;
    o->min_lr_ratio = p->min_lr_ratio;
    o->decay_fraction = p->decay_fraction;
    o->max_norm = p->max_norm;
    o->warmup_steps = p->warmup_steps;
    o->total_steps = p->steps;
    snprintf(o->schedule, sizeof o->schedule, "%s", p->schedule);
}

double train_lr_at(const train_opts *o, int step) {
    double peak = o->lr, lo = o->lr * o->min_lr_ratio;
    int W = o->warmup_steps, S = o->total_steps;
    if (W > 0 && step <= W) return peak * step / W;
    if (!strcmp(o->schedule, "constant") || S <= W) return peak;
    double progress = (double)(step - W) / (double)(S - W); /* (0, 1] after warmup */
    if (progress > 1) progress = 1;
    if (!strcmp(o->schedule, "cosine")) return lo + 0.5 * (peak - lo) * (1 + cos(M_PI * progress));
    if (!strcmp(o->schedule, "linear")) return peak + (lo - peak) * progress;
    /* wsd: stable at peak, then a linear decay over the last decay_fraction of the steps */
    double start = 1.0 - o->decay_fraction;
    if (progress <= start || o->decay_fraction <= 0) return peak;
    return peak + (lo - peak) * (progress - start) / o->decay_fraction;
}

double train_grad_norm(const exec_t *x) {
    const plan_t *p = x->p;
    double s = 0;
    for (int i = 0; i < p->n_params_t; i++) s += op_sumsq(x->grads + p->params[i].offset, p->params[i].numel);
    return sqrt(s);
}

float train_clip_scale(const train_opts *o, double norm) {
    if (o->max_norm <= 0 || !(norm > o->max_norm)) return 1.0f;
    return (float)(o->max_norm / (norm + 1e-6));
}

double train_avg_weight_next(const train_opts *o, int t, train_avg_state *st) {
    if (st->t >= t) memset(st, 0, sizeof *st); /* not the next step: start over */
    for (int i = st->t + 1; i <= t; i++) {
        double lr = train_lr_at(o, i);
        if (lr > st->lr_max) st->lr_max = lr;
        st->sum = fma(st->lr_max, st->lr_max, st->sum); /* explicit: -ffp-contract=fast fuses or not by context */
    }
    st->t = t;
    return st->sum > 0 ? st->lr_max * st->lr_max / st->sum : 0;
}

double train_avg_weight(const train_opts *o, int t) {
    train_avg_state st = {0, 0, 0};
    return train_avg_weight_next(o, t, &st);
}

void train_eval_point(exec_t *x, const hyp_optim_i *o, int to_eval) {
    const plan_t *p = x->p;
    if (!o->eval_point || x->stage != 0) return;
    for (int i = 0; i < p->n_params_t; i++) {
        const plan_param *pp = &p->params[i];
        hyp_optim_span s = {x->params + pp->offset, x->grads + pp->offset, {0}, pp->numel, &p->optim.groups[pp->group], pp, 0};
        for (int k = 0; k < o->n_state; k++) s.state[k] = x->state[k] + plan_state_off(&p->optim, k, i, pp);
        o->eval_point(&p->optim, &s, to_eval);
    }
}

int train_eval_point_dp(exec_t *x, const hyp_optim_i *o, hyp_coll *coll, int to_eval, hyp_err *e) {
    if (!o->eval_point || x->stage == 0) {
        train_eval_point(x, o, to_eval);
        return HYP_OK;
    }
    if (x->stage > 2)
        return hyp_fail(e, HYP_EINPUT, "optimizer '%s' moves its parameters for evaluation only without ZeRO or at stages 1-2 (stage %d here) — use zero1 or zero2",
                        o->kind, x->stage);
    const plan_t *p = x->p;
    const int64_t lo = x->shard * x->rank, hi = lo + x->shard;
    for (int i = 0; i < p->n_params_t; i++) {
        const plan_param *pp = &p->params[i];
        int64_t s0 = pp->offset > lo ? pp->offset : lo, s1 = pp->offset + pp->numel < hi ? pp->offset + pp->numel : hi;
        if (s0 >= s1) continue;
        hyp_optim_span s = {x->params + s0, x->grads + s0, {0}, s1 - s0, &p->optim.groups[pp->group], pp, s0 - pp->offset};
        for (int k = 0; k < o->n_state; k++) s.state[k] = x->state[k] + (plan_state_off(&p->optim, k, i, pp) - lo) + (s0 - pp->offset);
        o->eval_point(&p->optim, &s, to_eval);
    }
    exec_params_changed(x);
    return x->world > 1 ? hyp_coll_allgather_f32(coll, x->params + lo, x->params, (size_t)x->shard, e) : HYP_OK;
}

void train_optim_own(exec_t *x, const hyp_optim_i *o, double lr, int t, float scale) {
    hyp_optim_step a = {lr, t, scale, 1.0 / t, 0};
    train_optim_own_a(x, o, &a);
}

static void own_fn(exec_t *x, const hyp_optim_i *o, hyp_optim_span_fn fn, const hyp_optim_step *ap) {
    const plan_t *p = x->p;
    hyp_optim_step a = *ap;
    if (x->stage == 0) {
        hyp_optim_range_fn(o, fn, p, &a, 0, p->param_floats, x->params, x->grads, x->state);
        return;
    }
    if (x->stage < 3) {
        int64_t lo = x->shard * x->rank;
        const float *g = x->stage >= 2 ? x->gshard : x->grads + lo;
        hyp_optim_range_fn(o, fn, p, &a, lo, lo + x->shard, x->params + lo, g, x->state);
        return;
    }
    for (int i = 0; i < p->n_params_t; i++) { /* stage 3: each tensor's own part, in the group layout */
        const plan_param *pp = &p->params[i];
        int64_t first, pos, n = exec_z3_own(x, pp->offset, pp->numel, &first, &pos);
        if (n <= 0) continue;
        hyp_optim_span s = {x->params + pos, x->gshard + pos, {0}, n, &p->optim.groups[pp->group], pp, first - pp->offset};
        for (int k = 0; k < o->n_state; k++) s.state[k] = x->state[k] + pos;
        fn(&p->optim, &s, &a);
    }
}

void train_optim_own_a(exec_t *x, const hyp_optim_i *o, const hyp_optim_step *a) { own_fn(x, o, o->step_span, a); }

/* The rank that runs tensor i's matrix_solve: the matrices of rule r, largest first (ties: lower
 * index), each to the rank with the fewest floats so far (ties: lower rank). owner[] per tensor,
 * -1 for the other tensors. */
static void assign_matrices(const plan_t *p, const char *rule, int world, int *owner) {
    double *load = calloc((size_t)world, sizeof *load);
    for (int i = 0; i < p->n_params_t; i++) owner[i] = strcmp(p->optim.groups[p->params[i].group].rule, rule) ? -1 : -2;
    for (;;) {
        int best = -1;
        for (int i = 0; i < p->n_params_t; i++)
            if (owner[i] == -2 && (best < 0 || p->params[i].numel > p->params[best].numel)) best = i;
        if (best < 0) break;
        int r = 0;
        for (int k = 1; load && k < world; k++)
            if (load[k] < load[r]) r = k;
        owner[best] = r;
        if (load) load[r] += (double)p->params[best].numel;
    }
    free(load);
}

int train_optim_own_matrix(exec_t *x, const hyp_optim_i *o, const hyp_optim_step *a, hyp_coll *coll, hyp_err *e) {
    const plan_t *p = x->p;
    const hyp_optim_cfg *c = &p->optim;
    if (x->stage < 1 || x->stage > 2 || !o->matrix_solve)
        return hyp_fail(e, HYP_EINPUT, "optimizer '%s': whole-matrix updates under ZeRO stage %d are not implemented — generate the trainer without zero1/zero2/zero3",
                        o->kind, x->stage);
    const int64_t arena = x->shard * x->world, lo = x->shard * x->rank, hi = lo + x->shard;
    float *u = calloc((size_t)arena, sizeof *u), *ob = calloc((size_t)arena, sizeof *ob);
    int *owner = malloc(sizeof *owner * (size_t)(p->n_params_t + 1));
    int rc = HYP_OK;
    if (!u || !ob || !owner) rc = hyp_fail(e, HYP_EFAIL, "out of memory for the distributed %s step (%lld floats)", o->kind, (long long)arena);
    const float *gbase = x->stage >= 2 ? x->gshard - lo : x->grads; /* element j's gradient: gbase[j], j in [lo, hi) */
    /* pass 1: the own spans: pre_span (matrices) or the whole step (the rest) */
    for (int i = 0; rc == HYP_OK && i < p->n_params_t; i++) {
        const plan_param *pp = &p->params[i];
        int64_t s0 = pp->offset > lo ? pp->offset : lo, s1 = pp->offset + pp->numel < hi ? pp->offset + pp->numel : hi;
        if (s0 >= s1) continue;
        hyp_optim_span sp = {x->params + s0, gbase + s0, {0}, s1 - s0, &c->groups[pp->group], pp, s0 - pp->offset};
        for (int k = 0; k < o->n_state; k++) sp.state[k] = x->state[k] + (plan_state_off(c, k, i, pp) - lo) + (s0 - pp->offset);
        if (!strcmp(c->groups[pp->group].rule, o->matrix_rule)) o->pre_span(c, &sp, a, u + s0);
        else o->step_span(c, &sp, a);
    }
    if (!rc) rc = hyp_coll_allgather_f32(coll, u + lo, u, (size_t)x->shard, e);
    if (!rc) {
        assign_matrices(p, o->matrix_rule, x->world, owner);
        for (int i = 0; i < p->n_params_t; i++)
            if (owner[i] == x->rank) o->matrix_solve(c, &p->params[i], u + p->params[i].offset, ob + p->params[i].offset);
        rc = op_cpu_check(e);
    }
    if (!rc) rc = hyp_coll_allreduce_f32(coll, ob, (size_t)arena, e); /* each matrix's result from its one rank */
    for (int i = 0; rc == HYP_OK && i < p->n_params_t; i++) {
        const plan_param *pp = &p->params[i];
        if (strcmp(c->groups[pp->group].rule, o->matrix_rule)) continue;
        int64_t s0 = pp->offset > lo ? pp->offset : lo, s1 = pp->offset + pp->numel < hi ? pp->offset + pp->numel : hi;
        if (s0 >= s1) continue;
        hyp_optim_span sp = {x->params + s0, gbase + s0, {0}, s1 - s0, &c->groups[pp->group], pp, s0 - pp->offset};
        o->post_span(c, &sp, a, ob + s0);
    }
    free(u), free(ob), free(owner);
    return rc;
}

void train_hess_own(exec_t *x, const hyp_optim_i *o, const hyp_optim_step *a) {
    if (o->hess_span) own_fn(x, o, o->hess_span, a);
}
