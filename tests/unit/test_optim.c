/* test_optim.c — the optimizer interface (runtime/optim/optim.h) with AdamW, its first
 * implementation: the state layout it declares, its update through the interface against a
 * straightforward AdamW loop written here, the same update sharded elementwise into 3 uneven
 * ranges (cutting tensors) bit-identical to the unsharded one, per-group weight decay and lr
 * multipliers, and the refusals (unknown kind, a plan whose states differ from the kind's, ZeRO
 * over an optimizer that needs whole matrices); then Lion (v2134), the second implementation, through
 * the same interface: its one state, its update against lion-pytorch's written here, 3 uneven
 * shards bit-identical to the whole arena, its refusals. Plans are built in memory: no gen, no files. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "exec.h"
#include "hyp_test.h"
#include "optim.h"
#include "train.h"

#define FLOATS 64

/* Three tensors with alignment gaps: a decayed 4x6 matrix, a 7-float vector (no decay), a decayed
 * 5x3 matrix. */
static void make_plan(plan_t *p) {
    memset(p, 0, sizeof *p);
    static plan_param params[3];
    static char names[3][16] = {"w1", "b1", "w2"};
    int64_t off[3] = {0, 32, 48}, numel[3] = {24, 7, 15};
    for (int i = 0; i < 3; i++) {
        params[i] = (plan_param){.name = names[i], .offset = off[i], .numel = numel[i], .ndim = i == 1 ? 1 : 2,
                                 .decay = i != 1};
        params[i].shape[0] = i == 1 ? 7 : numel[i] / (i ? 3 : 6);
        if (i != 1) params[i].shape[1] = i ? 3 : 6;
    }
    p->params = params;
    p->n_params_t = 3;
    p->param_floats = FLOATS;
    /* the optimizer section plan.c would load: AdamW, states m, v (f32), groups decay / no_decay */
    hyp_optim_cfg *c = &p->optim;
    static hyp_optim_group groups[2];
    static int members[2][2] = {{0, 2}, {1}};
    snprintf(c->kind, sizeof c->kind, "adamw");
    const char *hn[3] = {"beta1", "beta2", "eps"};
    const double hv[3] = {0.9, 0.95, 1e-8};
    for (int i = 0; i < 3; i++) snprintf(c->hyper_name[i], sizeof c->hyper_name[i], "%s", hn[i]), c->hyper[i] = hv[i];
    c->n_hyper = 3;
    snprintf(c->state_name[0], sizeof c->state_name[0], "m");
    snprintf(c->state_name[1], sizeof c->state_name[1], "v");
    c->state_dtype[0] = c->state_dtype[1] = HYP_DT_F32;
    c->n_state = 2;
    groups[0] = (hyp_optim_group){"decay", 1.0, 0.1, 2, members[0], ""};
    groups[1] = (hyp_optim_group){"no_decay", 1.0, 0.0, 1, members[1], ""};
    c->groups = groups;
    c->n_groups = 2;
    for (int i = 0; i < 3; i++) params[i].group = i == 1 ? 1 : 0;
}

static void fill(float *a, int n, unsigned seed, float scale) {
    for (int i = 0; i < n; i++) {
        seed = seed * 1103515245u + 12345u;
        a[i] = scale * ((float)((seed >> 9) & 0xffff) / 32768.0f - 1.0f);
    }
}

/* AdamW as torch.optim.AdamW documents it, one element at a time. */
static void reference_adamw(float *p, const float *g, float *m, float *v, int64_t n, double lr, double wd, int t,
                            float scale) {
    const double b1 = 0.9, b2 = 0.95, eps = 1e-8;
    for (int64_t i = 0; i < n; i++) {
        float gi = g[i] * scale;
        m[i] = (float)b1 * m[i] + (1.0f - (float)b1) * gi;
        v[i] = (float)b2 * v[i] + (1.0f - (float)b2) * gi * gi;
        float mhat = m[i] / (float)(1.0 - pow(b1, t)), vhat = v[i] / (float)(1.0 - pow(b2, t));
        p[i] -= (float)lr * (mhat / (sqrtf(vhat) + (float)eps) + (float)wd * p[i]);
    }
}

static double max_rel(const float *a, const float *b, int n) {
    double w = 0;
    for (int i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]) / (fabs((double)b[i]) + 1e-12);
        if (d > w) w = d;
    }
    return w;
}

static void test_v2132_adamw_state_layout(plan_t *p) {
    const hyp_optim_i *o = NULL;
    hyp_err e = {{0}};
    int rc = hyp_optim_open(p, &o, &e);
    CHECK(rc == HYP_OK && o == hyp_optim_find("adamw"), "the plan's optimizer section opens as the registered AdamW (%s)", e.msg);
    if (!o) return;
    CHECK(o->n_state == 2 && !strcmp(o->state_name[0], "m") && !strcmp(o->state_name[1], "v") &&
              o->state_dtype[0] == HYP_DT_F32 && o->state_dtype[1] == HYP_DT_F32,
          "AdamW declares two fp32 states m, v");
    CHECK(!strcmp(o->ckpt_suffix[0], ".exp_avg") && !strcmp(o->ckpt_suffix[1], ".exp_avg_sq"),
          "its checkpoint names are torch's exp_avg / exp_avg_sq");
    CHECK(!o->shard_matrix && o->step_span && o->step_device, "AdamW shards elementwise and has host and device steps");
    CHECK(p->optim.n_groups == 2 && p->optim.groups[0].weight_decay == 0.1 && p->optim.groups[1].weight_decay == 0 &&
              p->params[0].group == 0 && p->params[1].group == 1 && p->params[2].group == 0 &&
              p->optim.groups[0].n_params == 2 && p->optim.groups[1].n_params == 1,
          "the groups decay (wd 0.1) and no_decay (wd 0) hold their parameters");
}

/* Three steps through the interface over the whole arena vs the reference loop per tensor, and
 * the same steps in 3 uneven ranges vs the whole arena (bit for bit). */
static void test_v2132_adamw_steps_and_shards(const plan_t *p) {
    const hyp_optim_i *o = hyp_optim_find("adamw");
    static float w[3][FLOATS], g[FLOATS], st[3][2][FLOATS];
    fill(w[0], FLOATS, 1, 0.5f);
    for (int i = 0; i < FLOATS; i++) /* the gaps hold zeros, as the arena's padding */
        if ((i >= 24 && i < 32) || (i >= 39 && i < 48) || i >= 63) w[0][i] = 0;
    memcpy(w[1], w[0], sizeof w[0]), memcpy(w[2], w[0], sizeof w[0]);
    memset(st, 0, sizeof st);
    float rm[FLOATS] = {0}, rv[FLOATS] = {0};
    const int64_t cuts[4] = {0, 13, 37, FLOATS}; /* inside w1 and inside b1 */
    for (int t = 1; t <= 3; t++) {
        fill(g, FLOATS, 100u + (unsigned)t, 1.0f);
        double lr = 1e-2 / t;
        float scale = t == 2 ? 0.5f : 1.0f; /* a clipped step */
        hyp_optim_step a = {lr, t, scale, 0, 0};
        float *s0[2] = {st[0][0], st[0][1]};
        hyp_optim_step_range(o, p, &a, 0, FLOATS, w[0], g, s0);
        for (int k = 0; k < 3; k++) {
            float *sk[2] = {st[1][0] + cuts[k], st[1][1] + cuts[k]};
            hyp_optim_step_range(o, p, &a, cuts[k], cuts[k + 1], w[1] + cuts[k], g + cuts[k], sk);
        }
        for (int i = 0; i < p->n_params_t; i++) {
            const plan_param *pp = &p->params[i];
            reference_adamw(w[2] + pp->offset, g + pp->offset, rm + pp->offset, rv + pp->offset, pp->numel, lr,
                            pp->decay ? 0.1 : 0.0, t, scale);
        }
    }
    double rel = max_rel(w[0], w[2], FLOATS);
    CHECK(rel < 1e-6, "3 AdamW steps through the interface match the reference loop (max rel %.2g)", rel);
    CHECK(!memcmp(w[0], w[1], sizeof w[0]) && !memcmp(st[0], st[1], sizeof st[0]),
          "sharded elementwise in 3 uneven ranges equals the unsharded update, bit for bit");
    int gaps_zero = 1;
    for (int i = 24; i < 32; i++) gaps_zero &= w[0][i] == 0 && st[0][0][i] == 0;
    CHECK(gaps_zero, "the alignment gaps between tensors are left alone");
}

/* A group's lr multiplier and weight decay reach its tensors only. */
static void test_v2132_adamw_groups(plan_t *p) {
    const hyp_optim_i *o = hyp_optim_find("adamw");
    static float w[2][FLOATS], g[FLOATS], s[2][2][FLOATS];
    fill(w[0], FLOATS, 7, 0.5f);
    memcpy(w[1], w[0], sizeof w[0]);
    fill(g, FLOATS, 8, 1.0f);
    memset(s, 0, sizeof s);
    p->optim.groups[1].lr_mult = 0.25;
    p->optim.groups[1].weight_decay = 0.3;
    hyp_optim_step a = {1e-2, 1, 1.0f, 0, 0};
    float *s0[2] = {s[0][0], s[0][1]};
    hyp_optim_step_range(o, p, &a, 0, FLOATS, w[0], g, s0);
    p->optim.groups[1].lr_mult = 1.0;
    p->optim.groups[1].weight_decay = 0.0;
    const plan_param *b1 = &p->params[1];
    hyp_optim_group grp = {"by hand", 0.25, 0.3, 0, NULL, ""};
    hyp_optim_span sp = {w[1] + b1->offset, g + b1->offset, {s[1][0] + b1->offset, s[1][1] + b1->offset}, b1->numel, &grp, b1, 0};
    o->step_span(&p->optim, &sp, &a);
    CHECK(!memcmp(w[0] + b1->offset, w[1] + b1->offset, sizeof(float) * (size_t)b1->numel),
          "the no_decay group's lr_mult 0.25 and weight decay 0.3 apply to its tensor");
    float *s1[2] = {s[1][0], s[1][1]};
    /* w1 of the other copy with the plan's own groups: the decay group is unchanged */
    hyp_optim_step_range(o, p, &a, 0, b1->offset, w[1], g, s1);
    CHECK(!memcmp(w[0], w[1], sizeof(float) * (size_t)b1->offset), "and not to the other group's tensors");
}

static void test_optimizer_refusals(plan_t *p) {
    const hyp_optim_i *o;
    hyp_err e = {{0}};
    hyp_optim_cfg keep = p->optim;
    snprintf(p->optim.kind, sizeof p->optim.kind, "adagrad");
    int rc = hyp_optim_open(p, &o, &e);
    CHECK(rc == HYP_EINPUT && strstr(e.msg, "'adagrad'") && strstr(e.msg, "regenerate"), "an unknown kind is refused (%s)", e.msg);
    p->optim = keep;
    p->optim.state_dtype[1] = HYP_DT_BF16;
    rc = hyp_optim_open(p, &o, &e);
    CHECK(rc == HYP_EINPUT && strstr(e.msg, "optimizer.state[1]") && strstr(e.msg, "bf16"),
          "states other than the kind's are refused, naming the field (%s)", e.msg);
    p->optim = keep;
    p->optim.hyper[0] = 1.5;
    rc = hyp_optim_open(p, &o, &e);
    CHECK(rc == HYP_EINPUT && strstr(e.msg, "beta1"), "a hyper-parameter out of range is refused (%s)", e.msg);
    p->optim = keep;
    p->optim.shard_matrix = 1;
    exec_t x;
    rc = exec_init_dp(&x, p, NULL, 3, &e); /* stages 1-2: the trainer distributes it (or refuses) */
    CHECK(rc == HYP_EINPUT && strstr(e.msg, "whole matrices") && strstr(e.msg, "ZeRO stage 3"),
          "ZeRO-3 over an optimizer that needs whole matrices is refused (%s)", e.msg);
    p->optim = keep;
}

/* The plan's section as gen writes it for v2134: Lion, hyper beta1 0.9 / beta2 0.99, one f32
 * state m, the decay group's weight decay 1.0 (no_decay 0). */
static void make_lion(plan_t *p) {
    hyp_optim_cfg *c = &p->optim;
    snprintf(c->kind, sizeof c->kind, "lion");
    c->n_hyper = 2;
    snprintf(c->hyper_name[0], sizeof c->hyper_name[0], "beta1"), c->hyper[0] = 0.9;
    snprintf(c->hyper_name[1], sizeof c->hyper_name[1], "beta2"), c->hyper[1] = 0.99;
    c->n_state = 1;
    snprintf(c->state_name[0], sizeof c->state_name[0], "m");
    c->state_dtype[0] = HYP_DT_F32;
    c->groups[0].weight_decay = 1.0;
}

/* lion-pytorch's update (lion_pytorch.py, update_fn) one element at a time: decay first, the sign
 * of the interpolation, then the momentum. */
static void reference_lion(float *p, const float *g, float *m, int64_t n, double lr, double wd, float scale) {
    const float b1 = 0.9f, b2 = 0.99f;
    for (int64_t i = 0; i < n; i++) {
        float gi = g[i] * scale;
        p[i] *= 1.0f - (float)lr * (float)wd;
        float c = b1 * m[i] + (1.0f - b1) * gi;
        p[i] -= (float)lr * (c > 0 ? 1.0f : c < 0 ? -1.0f : 0.0f);
        m[i] = b2 * m[i] + (1.0f - b2) * gi;
    }
}

static void test_v2134_lion_state_layout(plan_t *p) {
    const hyp_optim_i *o = NULL;
    hyp_err e = {{0}};
    int rc = hyp_optim_open(p, &o, &e);
    CHECK(rc == HYP_OK && o == hyp_optim_find("lion"), "a lion section opens as the registered Lion (%s)", e.msg);
    if (!o) return;
    CHECK(o->n_state == 1 && !strcmp(o->state_name[0], "m") && o->state_dtype[0] == HYP_DT_F32,
          "Lion declares one fp32 state m (half of AdamW's optimizer state)");
    CHECK(!strcmp(o->ckpt_suffix[0], ".exp_avg"), "its checkpoint name is lion-pytorch's exp_avg");
    CHECK(!o->shard_matrix && o->step_span && o->step_device, "Lion shards elementwise and has host and device steps");
}

/* Three steps (one clipped) through the interface vs the reference loop, and in 3 uneven ranges
 * (cutting tensors) vs the whole arena, bit for bit. */
static void test_v2134_lion_steps_and_shards(const plan_t *p) {
    const hyp_optim_i *o = hyp_optim_find("lion");
    static float w[3][FLOATS], g[FLOATS], st[2][FLOATS];
    fill(w[0], FLOATS, 3, 0.5f);
    for (int i = 0; i < FLOATS; i++)
        if ((i >= 24 && i < 32) || (i >= 39 && i < 48) || i >= 63) w[0][i] = 0;
    memcpy(w[1], w[0], sizeof w[0]), memcpy(w[2], w[0], sizeof w[0]);
    memset(st, 0, sizeof st);
    float rm[FLOATS] = {0};
    const int64_t cuts[4] = {0, 13, 37, FLOATS};
    for (int t = 1; t <= 3; t++) {
        fill(g, FLOATS, 200u + (unsigned)t, 1.0f);
        double lr = 1e-3 / t;
        float scale = t == 2 ? 0.5f : 1.0f;
        hyp_optim_step a = {lr, t, scale, 0, 0};
        float *s0[1] = {st[0]};
        hyp_optim_step_range(o, p, &a, 0, FLOATS, w[0], g, s0);
        for (int k = 0; k < 3; k++) {
            float *sk[1] = {st[1] + cuts[k]};
            hyp_optim_step_range(o, p, &a, cuts[k], cuts[k + 1], w[1] + cuts[k], g + cuts[k], sk);
        }
        for (int i = 0; i < p->n_params_t; i++) {
            const plan_param *pp = &p->params[i];
            reference_lion(w[2] + pp->offset, g + pp->offset, rm + pp->offset, pp->numel, lr, pp->decay ? 1.0 : 0.0, scale);
        }
    }
    double rel = max_rel(w[0], w[2], FLOATS);
    CHECK(rel < 1e-6, "3 Lion steps through the interface match lion-pytorch's update written here (max rel %.2g)", rel);
    CHECK(!memcmp(w[0], w[1], sizeof w[0]) && !memcmp(st[0], st[1], sizeof st[0]),
          "Lion sharded elementwise in 3 uneven ranges equals the unsharded update, bit for bit");
    /* every coordinate of the no-decay vector b1 moved by at most lr per step (sign updates) */
    int bounded = 1;
    float w0[FLOATS];
    fill(w0, FLOATS, 3, 0.5f);
    for (int i = 32; i < 39; i++) bounded &= fabs((double)w[0][i] - w0[i]) <= 1e-3 * (1 + 0.5 + 1.0 / 3) + 1e-7;
    CHECK(bounded, "a no-decay coordinate moves by at most the sum of the step LRs");
    int gaps_zero = 1;
    for (int i = 24; i < 32; i++) gaps_zero &= w[0][i] == 0 && st[0][i] == 0;
    CHECK(gaps_zero, "the alignment gaps between tensors are left alone");
}

static void test_v2134_lion_refusals(plan_t *p) {
    const hyp_optim_i *o;
    hyp_err e = {{0}};
    hyp_optim_cfg keep = p->optim;
    snprintf(p->optim.hyper_name[1], sizeof p->optim.hyper_name[1], "eps");
    int rc = hyp_optim_open(p, &o, &e);
    CHECK(rc == HYP_EINPUT && strstr(e.msg, "beta2"), "Lion without beta2 is refused (%s)", e.msg);
    p->optim = keep;
    p->optim.n_hyper = 3;
    snprintf(p->optim.hyper_name[2], sizeof p->optim.hyper_name[2], "eps");
    rc = hyp_optim_open(p, &o, &e);
    CHECK(rc == HYP_EINPUT && strstr(e.msg, "eps") && strstr(e.msg, "Lion takes no such"), "an Adam hyper-parameter is refused (%s)", e.msg);
    p->optim = keep;
    p->optim.hyper[0] = 1.5;
    rc = hyp_optim_open(p, &o, &e);
    CHECK(rc == HYP_EINPUT && strstr(e.msg, "beta1"), "beta1 out of range is refused (%s)", e.msg);
    p->optim = keep;
    p->optim.n_state = 2;
    rc = hyp_optim_open(p, &o, &e);
    CHECK(rc == HYP_EINPUT && strstr(e.msg, "keeps 1 state"), "Adam's two states under kind lion are refused (%s)", e.msg);
    p->optim = keep;
    p->optim.groups[0].weight_decay = -1;
    rc = hyp_optim_open(p, &o, &e);
    CHECK(rc == HYP_EINPUT && strstr(e.msg, "weight_decay"), "a negative weight decay is refused (%s)", e.msg);
    p->optim = keep;
}

/* v2137: the schedule-free averaging weight c_t = lr_max_t^2 / sum_{i<=t} lr_max_i^2 follows the
 * trainer's schedule as the reference's ckp1 follows its own warmup: 1/t at a constant LR; with a
 * 4-step linear warmup, step 2 weighs (2/4)^2 / ((1/4)^2 + (2/4)^2) = 0.8; after a peak the LR
 * may fall (a decay schedule), lr_max stays at the peak. */
static void test_v2137_avg_weight(void) {
    train_opts o;
    memset(&o, 0, sizeof o);
    o.lr = 1e-3, o.total_steps = 100, o.min_lr_ratio = 0.1;
    snprintf(o.schedule, sizeof o.schedule, "constant");
    CHECK(fabs(train_avg_weight(&o, 1) - 1.0) < 1e-15 && fabs(train_avg_weight(&o, 7) - 1.0 / 7) < 1e-15,
          "constant LR: c_1 = 1, c_7 = 1/7 (%g)", train_avg_weight(&o, 7));
    o.warmup_steps = 4;
    CHECK(fabs(train_avg_weight(&o, 2) - 0.8) < 1e-12, "warmup 4: c_2 = 0.8 (%g)", train_avg_weight(&o, 2));
    double s = 0.0625 + 0.25 + 0.5625 + 1 + 1;
    CHECK(fabs(train_avg_weight(&o, 5) - 1.0 / s) < 1e-12, "warmup 4: c_5 = 1/%g (%g)", s, train_avg_weight(&o, 5));
    snprintf(o.schedule, sizeof o.schedule, "cosine");
    CHECK(fabs(train_avg_weight(&o, 6) - 1.0 / (s + 1)) < 1e-12, "cosine after the peak: lr_max stays 1 (%g)",
          train_avg_weight(&o, 6));
    /* step by step (the trainer's O(1) path) gives the one-pass bits at every step: a resumed run
     * recomputes them in one pass */
    train_avg_state st = {0, 0, 0};
    int bad = 0;
    double wa = 0, wb = 0;
    for (int t = 1; t <= 100 && !bad; t++) {
        wa = train_avg_weight_next(&o, t, &st), wb = train_avg_weight(&o, t);
        if (wa != wb) bad = t;
    }
    CHECK(!bad, "incremental averaging weights equal the one-pass ones bit for bit over 100 steps (first difference at %d: %.17g vs %.17g)",
          bad, wa, wb);
}

int main(void) {
    test_v2137_avg_weight();
    plan_t p;
    make_plan(&p);
    test_v2132_adamw_state_layout(&p);
    if (p.optim.n_groups == 2) {
        test_v2132_adamw_steps_and_shards(&p);
        test_v2132_adamw_groups(&p);
        test_optimizer_refusals(&p);
        make_lion(&p);
        test_v2134_lion_state_layout(&p);
        test_v2134_lion_steps_and_shards(&p);
        test_v2134_lion_refusals(&p);
    }
    return hyp_test_finish();
}
