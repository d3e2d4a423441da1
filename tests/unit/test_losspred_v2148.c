/* test_losspred_v2148.c — the trainer's loss prediction (runtime/obs/losspred.c) and the shared
 * law fitter (runtime/obs/lawfit.c) on curves whose answer is known:
 * - exact losses of L(t) = 2 + 5 t^-0.5: the fit at step 300 recovers E, A, alpha and predicts step
 *   3000. Bound: the losses are exact doubles, so the Huber objective is 0 at the truth and the
 *   fitted parameters are limited by the stopping rule (|g| <= 1e-10 |x|) and by the binning (bins
 *   average log t and log L, and log L is not linear in log t: within one of 128 bins over log(300/30)
 *   the averaging moves a point off the curve by at most (w^2/8) max|d2 logL/d(log t)^2| with bin
 *   width w = 0.018, i.e. < 1e-5 relative); 1e-4 relative on each figure;
 * - the residual bootstrap on exact data: every residual is ~0, so the band collapses onto the
 *   prediction (within the same 1e-4);
 * - a growing loss is never extrapolated as a law with a negative exponent (decaying fits only):
 *   no fit, or one with alpha > 0;
 * - too few points: no fit; determinism: the same losses give bit-identical predictions;
 * - the analytic gradient of the objective equals central differences (h = 1e-6: truncation
 *   O(h^2 f''') ~ 1e-12, rounding eps f / h ~ 1e-10 on objectives of order 1: 1e-6 relative bound). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "hyp_test.h"
#include "lawfit.h"
#include "losspred.h"

static double rel(double a, double b) { return fabs(a - b) / fabs(b); }

int main(void) {
    /* exact power law */
    hyp_losspred *lp = hyp_losspred_new(3000);
    CHECK(lp != NULL, "losspred allocates");
    for (int s = 1; s <= 300; s++) hyp_losspred_add(lp, s, 2.0 + 5.0 * pow(s, -0.5));
    hyp_losspred_out o;
    hyp_losspred_fit(lp, 300, 3000, 0, &o);
    double want_final = 2.0 + 5.0 * pow(3000, -0.5), want_now = 2.0 + 5.0 * pow(300, -0.5);
    CHECK(o.ok && o.first_step == 31, "a fit over steps 31..300 (the first tenth is the transient)");
    printf("    E %.8f A %.8f alpha %.8f final %.8f (want %.8f) band [%.8f, %.8f]\n", o.E, o.A, o.alpha, o.final, want_final,
           o.lo, o.hi);
    CHECK(rel(o.E, 2.0) < 1e-4 && rel(o.A, 5.0) < 1e-4 && rel(o.alpha, 0.5) < 1e-4, "the law recovered to 1e-4");
    CHECK(rel(o.final, want_final) < 1e-4 && rel(o.now, want_now) < 1e-4 &&
              rel(o.remaining, want_now - want_final) < 1e-3,
          "the final step's loss predicted to 1e-4 (the remaining improvement, a difference, to 1e-3)");
    CHECK(rel(o.lo, o.final) < 1e-4 && rel(o.hi, o.final) < 1e-4 && o.lo <= o.hi,
          "exact data: the bootstrap band collapses onto the prediction");

    hyp_losspred_out o2;
    hyp_losspred_fit(lp, 300, 3000, 0, &o2);
    CHECK(!memcmp(&o, &o2, sizeof o), "the same losses give a bit-identical prediction");

    /* warm-up steps left out: first_valid moves the window */
    hyp_losspred_fit(lp, 300, 3000, 100, &o2);
    CHECK(o2.ok && o2.first_step == 101, "steps up to first_valid (the warm-up) stay out of the fit");

    /* too few points */
    hyp_losspred *few = hyp_losspred_new(100);
    for (int s = 1; s <= 5; s++) hyp_losspred_add(few, s, 3.0);
    hyp_losspred_fit(few, 5, 100, 0, &o2);
    CHECK(!o2.ok, "five steps: no fit");
    hyp_losspred_free(few);

    /* a growing loss: never a law with alpha <= 0 */
    hyp_losspred *up = hyp_losspred_new(1000);
    for (int s = 1; s <= 200; s++) hyp_losspred_add(up, s, 2.0 + 0.01 * s);
    hyp_losspred_fit(up, 200, 1000, 0, &o2);
    CHECK(!o2.ok || o2.alpha > 0, "a rising loss is not extrapolated with a negative exponent");
    printf("    rising loss: ok %d alpha %.4f final %.4f\n", o2.ok, o2.alpha, o2.final);
    hyp_losspred_free(up);

    /* NaN and out-of-range steps are ignored, not fitted */
    hyp_losspred_add(lp, 150, NAN);
    hyp_losspred_add(lp, 0, 1.0);
    hyp_losspred_add(lp, 5000, 1.0);
    hyp_losspred_fit(lp, 300, 3000, 0, &o2);
    CHECK(o2.ok && rel(o2.final, want_final) < 1e-4, "a NaN loss and out-of-range steps do not disturb the fit");
    hyp_losspred_free(lp);

    /* the LR-annealing law (Tissue et al.) on exact data: warm-up 20 then cosine to 10% over 1000
     * steps; L = 2 + 5 S1^-0.5 - 1e-3 S2 (an annealing drop of ~0.34) with the areas the fitter computes from the schedule. The
     * fit at step 300 (no binning: every step is a point) recovers the law and predicts step 1000;
     * bound as above (exact data; the stopping rule), 1e-4 relative. */
    enum { NS = 1000, WU = 20 };
    static double lr[NS + 1];
    for (int s = 1; s <= NS; s++) {
        if (s <= WU) lr[s] = 1e-3 * s / WU;
        else lr[s] = 1e-4 + 0.5 * (1e-3 - 1e-4) * (1 + cos(M_PI * (s - WU) / (double)(NS - WU)));
    }
    lr[0] = lr[1];
    hyp_losspred *an = hyp_losspred_new(NS);
    CHECK(hyp_losspred_set_lr(an, lr, NS, WU) == 0, "the schedule's areas computed");
    /* the same areas by the definition, here: S1 = sum eta/eta_max, m = 0.999 m + (eta_prev - eta)/eta_max after warm-up */
    double s1[NS + 1], s2[NS + 1], a1 = 0, a2 = 0, m = 0;
    for (int s = 1; s <= NS; s++) {
        double eta = lr[s] / 1e-3, prev = lr[s - 1] / 1e-3;
        m = s <= WU + 1 ? 0 : 0.999 * m + (prev - eta);
        a1 += eta, a2 += m, s1[s] = a1, s2[s] = a2;
    }
    for (int s = 1; s <= 300; s++) hyp_losspred_add(an, s, 2.0 + 5.0 * pow(s1[s], -0.5) - 1e-3 * s2[s]);
    hyp_losspred_fit(an, 300, NS, WU, &o);
    double want = 2.0 + 5.0 * pow(s1[NS], -0.5) - 1e-3 * s2[NS];
    printf("    lr_annealing: L0 %.6f A %.6f alpha %.6f C %.6f final %.6f (want %.6f)\n", o.E, o.A, o.alpha, o.C, o.final, want);
    CHECK(o.ok && o.law == HYP_LAW_LR_ANNEALING && rel(o.E, 2.0) < 1e-4 && rel(o.A, 5.0) < 1e-4 && rel(o.alpha, 0.5) < 1e-4 &&
              rel(o.C, 1e-3) < 1e-4,
          "the LR-annealing law recovered to 1e-4 from the first 30%% of the run");
    CHECK(rel(o.final, want) < 1e-4, "its final loss (the decay still to come) predicted to 1e-4");
    hyp_losspred_free(an);

    /* the objective's analytic gradient (two terms, as gen scaling fit uses it) */
    double ln[6] = {18, 19, 20, 21, 22, 23}, ld[6] = {20, 22, 21, 24, 23, 25}, ll[6] = {1.2, 1.1, 1.0, 0.95, 0.9, 0.85};
    hyp_lawfit_data d = {2, 6, {ln, ld}, ll, NULL, NULL, 0.05, 0};
    double x[5] = {6.0, 7.5, 0.5, 0.34, 0.36}, g[5];
    hyp_lawfit_objective(&d, x, g);
    double worst = 0;
    for (int j = 0; j < 5; j++) {
        double xp[5], xm[5];
        memcpy(xp, x, sizeof x), memcpy(xm, x, sizeof x);
        xp[j] += 1e-6, xm[j] -= 1e-6;
        double num = (hyp_lawfit_objective(&d, xp, NULL) - hyp_lawfit_objective(&d, xm, NULL)) / 2e-6;
        double err = fabs(num - g[j]) / fmax(fabs(g[j]), 1e-3);
        if (err > worst) worst = err;
    }
    printf("    gradient vs central differences: worst relative error %.2e\n", worst);
    CHECK(worst < 1e-6, "the analytic gradient equals central differences");
    return hyp_test_finish();
}
