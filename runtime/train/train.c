/* train.c — learning-rate schedules, clipping and the AdamW step (see train.h). */
#include "train.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "ops_cpu.h"

void train_opts_from_plan(train_opts *o, const plan_t *p) {
    memset(o, 0, sizeof *o);
    o->lr = p->lr;
    o->min_lr_ratio = p->min_lr_ratio;
    o->decay_fraction = p->decay_fraction;
    o->weight_decay = p->weight_decay;
    o->beta1 = p->beta1;
    o->beta2 = p->beta2;
    o->eps = p->eps;
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

void train_adamw_range(exec_t *x, const train_opts *o, double lr, int t, float scale, int64_t lo,
                       int64_t hi, const float *g, float *m, float *v) {
    const plan_t *p = x->p;
    for (int i = 0; i < p->n_params_t; i++) {
        const plan_param *pp = &p->params[i];
        int64_t a = pp->offset > lo ? pp->offset : lo;
        int64_t b = pp->offset + pp->numel < hi ? pp->offset + pp->numel : hi;
        if (a >= b) continue;
        float wd = pp->decay ? (float)o->weight_decay : 0.0f;
        op_adamw(x->params + a, g + (a - lo), m + (a - lo), v + (a - lo), b - a, (float)lr, (float)o->beta1,
                 (float)o->beta2, (float)o->eps, wd, t, scale);
    }
}

void train_adamw_step(exec_t *x, const train_opts *o, double lr, int t, float scale) {
    train_adamw_range(x, o, lr, t, scale, 0, x->p->param_floats, x->grads, x->m, x->v);
}

void train_adamw_zero3(exec_t *x, const train_opts *o, double lr, int t, float scale) {
    const plan_t *p = x->p;
    for (int i = 0; i < p->n_params_t; i++) {
        const plan_param *pp = &p->params[i];
        int64_t first, pos, n = exec_z3_own(x, pp->offset, pp->numel, &first, &pos);
        if (n <= 0) continue;
        float wd = pp->decay ? (float)o->weight_decay : 0.0f;
        op_adamw(x->params + pos, x->gshard + pos, x->m + pos, x->v + pos, n, (float)lr, (float)o->beta1,
                 (float)o->beta2, (float)o->eps, wd, t, scale);
    }
}
