/* test_gnb.c — v2135 Sophia-G's label sampler for the Gauss-Newton-Bartlett pass (train/gnb.c):
 * the same (seed, step, row) always draws the same label (what makes a resumed run sample what
 * the uninterrupted one sampled); other steps, rows or seeds draw other streams; and the labels
 * follow the softmax of the row's logits (frequencies over 200000 draws within 5 standard
 * errors of each probability, and a chi-square below the 0.999 quantile); and the optimizer's
 * hess_span and step on one coordinate against the equations by hand. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "gnb.h"
#include "optim.h"

#include "hyp_test.h"

int main(void) {
    enum { V = 8, N = 200000 };
    const float z[V] = {1.5f, -0.3f, 0.0f, 2.2f, -4.0f, 0.7f, 0.7f, -1.1f};
    double p[V], s = 0;
    for (int i = 0; i < V; i++) s += exp(z[i]);
    for (int i = 0; i < V; i++) p[i] = exp(z[i]) / s;

    int same = 1, diff_row = 0, diff_step = 0, diff_seed = 0;
    for (int r = 0; r < 1000; r++) {
        int32_t a = gnb_sample(z, V, 42, 10, r), b = gnb_sample(z, V, 42, 10, r);
        same &= a == b;
        diff_row += a != gnb_sample(z, V, 42, 10, r + 1);
        diff_step += a != gnb_sample(z, V, 42, 20, r);
        diff_seed += a != gnb_sample(z, V, 43, 10, r);
    }
    check(same, "test_v2135_gnb_sample_deterministic_per_seed_step_row", "1000 rows drawn twice");
    /* independent draws differ with probability 1 - sum p^2 (~0.62 here): hundreds of 1000 */
    double q = 0;
    for (int i = 0; i < V; i++) q += p[i] * p[i];
    check(diff_row > 400 && diff_step > 400 && diff_seed > 400, "test_v2135_gnb_streams_differ_by_row_step_seed",
          "differing draws of 1000: row %d, step %d, seed %d (independent: %.0f expected)", diff_row, diff_step, diff_seed,
          1000 * (1 - q));

    long cnt[V] = {0};
    int bad = 0;
    for (int r = 0; r < N; r++) {
        int32_t y = gnb_sample(z, V, 7, 3, r);
        if (y < 0 || y >= V) bad = 1;
        else cnt[y]++;
    }
    check(!bad, "test_v2135_gnb_sample_in_vocabulary", "every label in [0, %d)", V);
    double chi = 0, worst = 0;
    for (int i = 0; i < V; i++) {
        double e = N * p[i], se = sqrt(N * p[i] * (1 - p[i]));
        chi += (cnt[i] - e) * (cnt[i] - e) / e;
        double zs = fabs(cnt[i] - e) / se;
        worst = zs > worst ? zs : worst;
    }
    /* chi-square with 7 degrees of freedom: 0.999 quantile 24.32 */
    check(worst < 5 && chi < 24.32, "test_v2135_gnb_labels_follow_the_softmax",
          "%d draws: worst |count - N p| = %.2f standard errors, chi-square %.2f (7 dof, 0.999 quantile 24.32)", N, worst, chi);

    /* the update rule on a few coordinates against the equations */
    const hyp_optim_i *o = hyp_optim_find("sophia");
    check(o && o->hess_span && o->hess_every && o->n_state == 2, "test_v2135_registered_with_a_hessian_pass", "kind sophia");
    if (o) {
        hyp_optim_cfg c;
        memset(&c, 0, sizeof c);
        const char *hn[] = {"beta1", "beta2", "rho", "hess_every"};
        double hv[] = {0.9, 0.99, 0.04, 3};
        for (int i = 0; i < 4; i++) snprintf(c.hyper_name[i], sizeof c.hyper_name[i], "%s", hn[i]), c.hyper[i] = hv[i];
        c.n_hyper = 4;
        hyp_optim_group grp;
        memset(&grp, 0, sizeof grp);
        grp.lr_mult = 1, grp.weight_decay = 0.5;
        float prm[3] = {1.0f, -2.0f, 0.5f}, g[3] = {0.2f, -1e-3f, 0.0f}, m[3] = {0, 0, 0}, h[3] = {0, 0, 0};
        float gh[3] = {0.01f, 0.02f, 0.0f};
        hyp_optim_span sp = {prm, gh, {m, h}, 3, &grp, NULL, 0};
        hyp_optim_step a = {0, 3, 1.0f, 0, 100};
        o->hess_span(&c, &sp, &a); /* h = 0.01 * 100 * gh^2 */
        double hw[3] = {0.01 * 100 * 1e-4, 0.01 * 100 * 4e-4, 0};
        int okh = 1;
        /* three fp32 operations on exact inputs: <= 3 u = 1.8e-7 relative; a wrong B or EMA weight is off by >= 1% */
        for (int i = 0; i < 3; i++) okh &= fabs(h[i] - hw[i]) <= 1e-6 * (hw[i] + 1e-12);
        check(okh && o->hess_every(&c) == 3, "test_v2135_hess_span_is_ema_of_B_g_squared", "h = %g %g %g", h[0], h[1], h[2]);
        sp.grad = g;
        hyp_optim_step st = {0.1, 1, 1.0f, 0, 0};
        o->step_span(&c, &sp, &st);
        /* m = 0.1 g; ratio = min(|m| / (0.04 h + 1e-15), 1); p = p (1 - 0.05) - 0.1 sign(m) ratio */
        double want[3];
        for (int i = 0; i < 3; i++) {
            double mi = 0.1 * g[i], r = fabs(mi) / (0.04 * hw[i] + 1e-15);
            r = r > 1 ? 1 : r;
            double sg = (mi > 0) - (mi < 0);
            want[i] = (i == 0 ? 1.0 : i == 1 ? -2.0 : 0.5) * 0.95 - 0.1 * sg * r;
        }
        int okp = 1;
        /* a few fp32 operations on values <= 2: <= 4 u x 2 = 4.8e-7 absolute; a missed clip or decay is off by >= 0.025 */
        for (int i = 0; i < 3; i++) okp &= fabs(prm[i] - want[i]) <= 1e-6;
        /* coordinates 0 and 1 clipped (|m| / (rho h) = 5 and 6.25), 2 has m = 0 (decay only) */
        check(okp, "test_v2135_step_is_clipped_sign_update_with_decoupled_decay", "p = %.7g %.7g %.7g, want %.7g %.7g %.7g",
              prm[0], prm[1], prm[2], want[0], want[1], want[2]);
        float prm2[1] = {1.0f}, g2[1] = {1e-5f}, m2[1] = {0}, h2[1] = {1.0f};
        hyp_optim_span sp2 = {prm2, g2, {m2, h2}, 1, &grp, NULL, 0};
        o->step_span(&c, &sp2, &st);
        double w2 = 0.95 - 0.1 * (0.1 * 1e-5) / 0.04; /* unclipped: ratio 2.5e-5 */
        check(fabs(prm2[0] - w2) <= 1e-7, "test_v2135_step_unclipped_divides_by_rho_h", "p = %.9g, want %.9g", prm2[0], w2);
    }
    return hyp_test_finish();
}
