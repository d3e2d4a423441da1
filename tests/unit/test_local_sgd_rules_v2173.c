/* test_local_sgd_rules_v2173.c — the two update rules of v2173 against references written here in
 * double: the `sgd` optimizer kind (torch.optim.SGD: d = g*scale + wd*p, m = mu*m + d, p -= lr*m;
 * optim_sgd.c) over 5 steps, and local_sgd.c's outer step on one rank over 4 synchronizations
 * (average: the anchor becomes the parameters; nesterov: torch.optim.SGD(nesterov=True) on the
 * outer gradient anchor - params, so a wrong sign, a missing momentum term or plain momentum in
 * place of Nesterov's lookahead moves the anchor by ~outer_lr x delta, far outside the bound).
 * Tolerances: each fp32 element update rounds 3 operations (fused multiply-adds) of values of
 * magnitude <= 4 here, so it differs from the double reference by <= 3 x 2^-24 x 4 = 7.2e-7 per
 * step; over 5 steps with the momentum carrying earlier roundings (sum of 0.9^k < 5) <= 2e-5.
 * train_local_sgd_rebase (a v2176 rollback) restarts the anchor and the momentum.
 * Never: collectives (one rank; the np=2 behaviour is tests/gen/test_local_sgd*_v2173.sh). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "hyp_test.h"
#include "local_sgd.h"
#include "optim.h"

#define N 257 /* odd: no vector-width multiple */

static float frand(unsigned *s) {
    *s = *s * 1664525u + 1013904223u;
    return (float)((*s >> 8) & 0xffff) / 65536.0f * 2.0f - 1.0f; /* [-1, 1) */
}

static void test_sgd_step(void) {
    const hyp_optim_i *o = hyp_optim_find("sgd");
    CHECK(o && o->n_state == 1 && !strcmp(o->ckpt_suffix[0], ".momentum_buffer"), "the sgd kind is registered, one state momentum_buffer");
    if (!o) return;
    hyp_optim_cfg c;
    memset(&c, 0, sizeof c);
    snprintf(c.kind, sizeof c.kind, "sgd");
    c.n_hyper = 1;
    snprintf(c.hyper_name[0], sizeof c.hyper_name[0], "momentum");
    c.hyper[0] = 0.9;
    hyp_optim_group g = {"decay", 1.0, 0.1, 0, NULL, ""};
    float p[N], m[N], gr[N];
    double pr[N], mr[N];
    unsigned s = 7;
    for (int i = 0; i < N; i++) p[i] = frand(&s), m[i] = 0, pr[i] = p[i], mr[i] = 0;
    double err = 0;
    for (int t = 1; t <= 5; t++) {
        for (int i = 0; i < N; i++) gr[i] = frand(&s);
        hyp_optim_span sp = {p, gr, {m}, N, &g, NULL, 0};
        hyp_optim_step a = {0.05, t, 0.5f, 1.0, 0};
        o->step_span(&c, &sp, &a);
        for (int i = 0; i < N; i++) {
            double d = (double)gr[i] * 0.5 + 0.1 * pr[i];
            mr[i] = 0.9 * mr[i] + d;
            pr[i] -= 0.05 * mr[i];
        }
    }
    for (int i = 0; i < N; i++) err = fmax(err, fabs(p[i] - pr[i]));
    CHECK(err < 2e-5, "sgd: 5 steps (momentum 0.9, L2 decay 0.1, clip factor 0.5) equal torch.optim.SGD's update, max |dp| %.2g", err);
}

/* One rank, 4 synchronizations every 3 steps: before each the parameters are moved by a random
 * delta (standing for the inner steps), then after_update at steps 1..3 (only step 3 syncs). */
static void outer_case(int nesterov) {
    plan_t p;
    memset(&p, 0, sizeof p);
    p.lsgd_every = 3, p.lsgd_nesterov = nesterov, p.lsgd_outer_lr = 0.7, p.lsgd_outer_momentum = 0.9;
    exec_t x;
    memset(&x, 0, sizeof x);
    float params[N];
    unsigned s = 11;
    for (int i = 0; i < N; i++) params[i] = frand(&s);
    x.p = &p, x.params = params, x.shard = N, x.world = 1;
    dp_t d = {.coll = NULL, .rank = 0, .world = 1, .stage = 0, .opt = NULL};
    train_local_sgd *ls = NULL;
    hyp_err e = {{0}};
    int rc = train_local_sgd_open(&ls, &p, &x, &d, &e);
    CHECK(rc == HYP_OK && ls, "%s: opens at stage 0 (%s)", nesterov ? "nesterov" : "average", e.msg);
    if (rc) return;
    double a[N], mom[N];
    for (int i = 0; i < N; i++) a[i] = params[i], mom[i] = 0;
    double err = 0;
    int synced_at_3 = 1, quiet_between = 1;
    for (int round = 0, step = 0; round < 4; round++) {
        for (int i = 0; i < N; i++) params[i] += 0.1f * frand(&s);
        double cur[N];
        for (int i = 0; i < N; i++) cur[i] = params[i];
        for (int k = 0; k < 3; k++) {
            int synced = -1;
            step++;
            rc |= train_local_sgd_after_update(ls, &x, &d, step, &synced, &e);
            if (k < 2) {
                quiet_between &= synced == 0;
                for (int i = 0; i < N; i++) quiet_between &= params[i] == (float)cur[i]; /* untouched */
            } else {
                synced_at_3 &= synced == 1;
            }
        }
        for (int i = 0; i < N; i++) {
            double g = a[i] - cur[i]; /* the outer gradient: anchor - mean(params) */
            if (nesterov) {
                mom[i] = 0.9 * mom[i] + g;
                a[i] -= 0.7 * (g + 0.9 * mom[i]);
            } else {
                a[i] = cur[i];
            }
        }
        for (int i = 0; i < N; i++) err = fmax(err, fabs(params[i] - a[i]));
    }
    CHECK(rc == HYP_OK && synced_at_3 && quiet_between, "%s: only every 3rd step synchronizes", nesterov ? "nesterov" : "average");
    CHECK(err < 2e-5, "%s: 4 outer steps equal the reference (%s), max |d anchor| %.2g", nesterov ? "nesterov" : "average",
          nesterov ? "torch.optim.SGD nesterov, lr 0.7, momentum 0.9" : "the anchor becomes the parameters", err);
    /* a rollback's rebase: the loaded point becomes the anchor and the momentum restarts, so a sync
     * with no inner movement leaves it exactly (the built-up momentum would move it by ~0.1) */
    float loaded[N];
    for (int i = 0; i < N; i++) params[i] = loaded[i] = frand(&s);
    train_local_sgd_rebase(ls, &x);
    int synced = 0;
    rc = train_local_sgd_after_update(ls, &x, &d, 15, &synced, &e);
    CHECK(rc == HYP_OK && synced && !memcmp(params, loaded, sizeof loaded), "%s: after a rebase a sync without inner steps keeps the loaded point",
          nesterov ? "nesterov" : "average");
    train_local_sgd_close(ls);
}

static void test_refusals(void) {
    plan_t p;
    memset(&p, 0, sizeof p);
    p.lsgd_every = 2;
    exec_t x;
    memset(&x, 0, sizeof x);
    float w[16] = {0};
    x.p = &p, x.params = w, x.shard = 16, x.world = 1;
    dp_t d = {.coll = NULL, .rank = 0, .world = 1, .stage = 1, .opt = NULL};
    train_local_sgd *ls = NULL;
    hyp_err e = {{0}};
    int rc = train_local_sgd_open(&ls, &p, &x, &d, &e);
    CHECK(rc == HYP_EINPUT && !ls && strstr(e.msg, "ZeRO stage 1") && strstr(e.msg, " — "), "ZeRO stage 1 is refused (%s)", e.msg);
    d.stage = 0, p.param_bf16 = 1;
    rc = train_local_sgd_open(&ls, &p, &x, &d, &e);
    CHECK(rc == HYP_EINPUT && !ls && strstr(e.msg, "bf16"), "bf16 parameters are refused (%s)", e.msg);
}

int main(void) {
    test_sgd_step();
    outer_case(0);
    outer_case(1);
    test_refusals();
    return hyp_test_finish();
}
