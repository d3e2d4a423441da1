/* test_grpo_grad_v2194.c — v2194 GRPO's pieces (runtime/train/grpo.c) on the cpu executor:
 *   1. the byte-set reward and the group-normalized advantages on hand-computed values;
 *   2. the gradient the trainer applies (grpo_token_weights -> exec_t.row_scale -> the fused
 *      cross-entropy's backward) is the gradient of the GRPO objective
 *        J(theta) = sum over rows b, completion tokens t of
 *                   (-A_b * exp(logp_t - logp_old_t) + beta * (exp(ref_t - logp_t) - (ref_t - logp_t) - 1)) / (N B)
 *      at theta = theta_old: central finite differences of J along the gradient's direction, for
 *      the advantage term alone, the KL term alone (a reference with perturbed weights) and both.
 *      Tolerance 1e-3 relative (fp32 forward, step 1e-3 along a unit direction; observed ~6e-5).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "exec.h"
#include "grpo.h"
#include "plan.h"
#include "rng.h"

#include "hyp_test.h"

#define B 2
#define T 24
#define N 9 /* completion tokens per row: targets at positions PSTART .. PSTART + N - 1 */
#define PSTART 12

static void logps(exec_t *x, double *lp) {
    exec_eval_loss(x);
    const float *L = exec_buf(x, x->p->losses_buf);
    for (int i = 0; i < B * T; i++) lp[i] = x->targets[i] >= 0 ? -(double)L[i] : 0;
}

static double objective(exec_t *x, const double *lp_old, const double *lref, const double *adv, double beta) {
    double lp[B * T], J = 0;
    logps(x, lp);
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            int i = b * T + t;
            if (x->targets[i] < 0) continue;
            double d = lref ? lref[i] - lp[i] : 0;
            J += (-adv[b] * exp(lp[i] - lp_old[i]) + (lref ? beta * (exp(d) - d - 1) : 0)) / ((double)N * B);
        }
    return J;
}

static void fd_case(exec_t *x, exec_t *rx, const double *adv, double beta, const char *name) {
    long P = x->p->param_floats;
    double lp[B * T], lref[B * T], kl;
    float scale[B * T];
    logps(rx, lref);
    logps(x, lp);
    grpo_token_weights(x->targets, lp, beta > 0 ? lref : NULL, adv, B, T, N, 1, beta, scale, &kl);
    memset(x->grads, 0, sizeof(float) * (size_t)P);
    x->row_scale = scale;
    exec_backward(x, 1.0f);
    x->row_scale = NULL;
    float *g = malloc(sizeof(float) * (size_t)P), *th = malloc(sizeof(float) * (size_t)P);
    memcpy(g, x->grads, sizeof(float) * (size_t)P);
    memcpy(th, x->params, sizeof(float) * (size_t)P);
    double gn = 0;
    for (long i = 0; i < P; i++) gn += (double)g[i] * g[i];
    gn = sqrt(gn);
    const double eps = 1e-3;
    for (long i = 0; i < P; i++) x->params[i] = th[i] + (float)(eps * g[i] / gn);
    double jp = objective(x, lp, beta > 0 ? lref : NULL, adv, beta);
    for (long i = 0; i < P; i++) x->params[i] = th[i] - (float)(eps * g[i] / gn);
    double jm = objective(x, lp, beta > 0 ? lref : NULL, adv, beta);
    memcpy(x->params, th, sizeof(float) * (size_t)P);
    double fd = (jp - jm) / (2 * eps);
    check(gn > 0 && fabs(fd - gn) <= 1e-3 * gn, name, "|grad| %.6g vs finite difference %.6g (rel %.2e), kl %.4g", gn, fd,
          fabs(fd - gn) / gn, kl);
    free(g), free(th);
}

int main(void) {
    /* 1. reward and advantages */
    const int32_t comp[4] = {'a', 'b', '1', ' '};
    check(fabs(grpo_reward(comp, 4, "ab ") - 0.75) < 1e-15 && grpo_reward(comp, 0, "ab") == 0, "test_v2194_byte_set_reward",
          "\"ab1 \" in \"ab \": %g", grpo_reward(comp, 4, "ab "));
    const double r[6] = {1, 0, 0, 1, 0.5, 0.5};
    double adv[6], sd = sqrt(4 * 0.25 / 3);
    grpo_advantages(r, 6, 2, adv);
    double want0 = 0.5 / (sqrt(0.5) + 1e-4);
    int ok = fabs(adv[0] - want0) < 1e-12 && fabs(adv[1] + want0) < 1e-12 && adv[4] == 0 && adv[5] == 0;
    grpo_advantages(r, 4, 4, adv);
    ok &= fabs(adv[0] - 0.5 / (sd + 1e-4)) < 1e-12 && fabs(adv[1] + 0.5 / (sd + 1e-4)) < 1e-12;
    check(ok, "test_v2194_group_normalized_advantages", "(r - mean) / (unbiased std + 1e-4) per group: %.6f", adv[0]);

    /* 2. the trainer's gradient against finite differences of the objective */
    char dir[256], cmd[1024], path[512];
    snprintf(dir, sizeof dir, "/tmp/hyp_test_grpo_%d", (int)getpid());
    snprintf(cmd, sizeof cmd,
             "cd %s && %s/generator/gen specs/v2500.yaml --enable adamw,grpo --model tests/fixtures/models/pack-gpt2.yaml "
             "--target cpu --batch %d --seq %d -o %s >/dev/null 2>&1",
             HYP_SOURCE_DIR, HYP_BINARY_DIR, B, T, dir);
    CHECK(system(cmd) == 0, "gen --enable adamw,grpo");
    snprintf(path, sizeof path, "%s/plan.json", dir);
    plan_t p;
    exec_t x, rx;
    hyp_err e;
    if (plan_load(path, &p, &e) || exec_init(&x, &p, &e) || exec_init(&rx, &p, &e)) {
        check(0, "load", "%s", e.msg);
        rm_rf(dir);
        return hyp_test_finish();
    }
    exec_init_params(&x, 1234);
    exec_bind(&x, B, T, &e);
    exec_bind(&rx, B, T, &e);
    hyp_rng rng;
    hyp_rng_seed2(&rng, 5, 7);
    /* the reference: the policy's weights moved a little (so ref != logp and the KL term acts) */
    for (long i = 0; i < p.param_floats; i++) rx.params[i] = x.params[i] + (float)(0.05 * (hyp_rng_uniform_f64(&rng) - 0.5));
    for (int i = 0; i < B * T; i++) x.tokens[i] = (int32_t)hyp_rng_below(&rng, (uint64_t)p.V);
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) x.targets[b * T + t] = t >= PSTART - 1 && t < PSTART - 1 + N ? x.tokens[b * T + t + 1 < B * T ? b * T + t + 1 : 0] : -1;
    memcpy(rx.tokens, x.tokens, sizeof(int32_t) * B * T);
    memcpy(rx.targets, x.targets, sizeof(int32_t) * B * T);
    const double a1[B] = {0.8, -1.3}, a0[B] = {0, 0};
    fd_case(&x, &rx, a1, 0, "test_v2194_gradient_matches_objective_advantage_term");
    fd_case(&x, &rx, a0, 0.5, "test_v2194_gradient_matches_objective_kl_term");
    fd_case(&x, &rx, a1, 0.5, "test_v2194_gradient_matches_objective_both");
    exec_free(&x), exec_free(&rx);
    plan_free(&p);
    rm_rf(dir);
    return hyp_test_finish();
}
