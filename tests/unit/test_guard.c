/* test_guard.c — v2176's guard state machine (runtime/train/guard.c): non-finite values, the loss
 * ceiling from step 1, spikes only after the warm-up and only upward, statistics fed by good
 * steps only, the rollback count and LR scale; and the HYP_FAULT_INJECT parser (each fault once). */
#include <math.h>

#include "guard.h"
#include "hyp_test.h"

int main(void) {
    hyp_guard g;
    hyp_guard_cfg cfg = {6.0, 0.9, 5, 1.5, 3, 0.5, 2};
    hyp_guard_init(&g, &cfg, 256);
    CHECK(fabs(g.ceiling - 1.5 * log(256.0)) < 1e-12, "v2176 ceiling = 1.5 ln 256");
    CHECK(hyp_guard_judge(&g, NAN, 1.0) == HYP_GUARD_LOSS_NONFINITE, "a NaN loss is bad from step 1");
    CHECK(hyp_guard_judge(&g, 3.0, INFINITY) == HYP_GUARD_NORM_NONFINITE, "an infinite norm is bad from step 1");
    CHECK(hyp_guard_judge(&g, 9.0, 1.0) == HYP_GUARD_LOSS_CEILING, "a loss above the ceiling is bad in the warm-up");
    CHECK(hyp_guard_judge(&g, 5.0, 1000.0) == 0, "no spike judged during the warm-up");
    /* 20 good steps around loss 3 +- 0.01, norm 1 +- 5% */
    for (int i = 0; i < 20; i++) {
        double l = 3.0 + 0.01 * ((i % 2) ? 1 : -1), n = 1.0 + 0.05 * ((i % 3) - 1);
        CHECK(hyp_guard_judge(&g, l, n) == 0 && hyp_guard_record(&g, 0, l, n) == 0, "good step %d", i);
    }
    CHECK(fabs(g.loss_mean - 3.0) < 0.02, "loss mean tracks 3.0 (%g)", g.loss_mean);
    CHECK(hyp_guard_judge(&g, 3.0, 50.0) == HYP_GUARD_NORM_SPIKE, "norm x50 is a spike (z %.1f)", g.last_z_norm);
    CHECK(hyp_guard_judge(&g, 4.5, 1.0) == HYP_GUARD_LOSS_SPIKE, "loss +1.5 is a spike (z %.1f)", g.last_z_loss);
    CHECK(hyp_guard_judge(&g, 2.0, 0.2) == 0, "a falling loss and norm are not spikes");
    CHECK(hyp_guard_judge(&g, 3.1, 1.2) == 0, "loss +0.1 (inside the 2%% floor x 6) is not a spike");
    double mean = g.loss_mean;
    CHECK(hyp_guard_record(&g, HYP_GUARD_LOSS_SPIKE, 4.5, 1.0) == 0 && g.loss_mean == mean, "a bad step leaves the statistics");
    CHECK(hyp_guard_record(&g, 1, NAN, NAN) == 0, "two bad steps: no rollback yet");
    CHECK(hyp_guard_record(&g, 1, NAN, NAN) == 1, "three bad steps in a row: roll back");
    CHECK(g.skipped == 3, "3 skipped");
    CHECK(hyp_guard_rolled_back(&g) == 1 && g.lr_scale == 0.5 && g.bad_run == 0, "rollback 1: lr x 0.5");
    CHECK(hyp_guard_rolled_back(&g) == 1 && g.lr_scale == 0.25, "rollback 2: lr x 0.25");
    CHECK(hyp_guard_rolled_back(&g) == 0, "rollback 3 > max_rollbacks 2: give up");
    char why[256];
    hyp_guard_reason(&g, HYP_GUARD_LOSS_NONFINITE | HYP_GUARD_NORM_NONFINITE, NAN, NAN, why, sizeof why);
    CHECK(strstr(why, "loss nan") && strstr(why, "grad norm nan"), "reason: %s", why);

    hyp_fault f;
    char err[256];
    CHECK(hyp_fault_parse("nan_grad@3,spike_loss@5-6", &f, err, sizeof err) == 0 && f.n == 2, "fault spec parses");
    CHECK(hyp_fault_take(&f, 3) == HYP_FAULT_NAN_GRAD && hyp_fault_take(&f, 3) == 0, "a fault fires once");
    CHECK(hyp_fault_take(&f, 4) == 0 && hyp_fault_take(&f, 6) == HYP_FAULT_SPIKE_LOSS, "ranges");
    CHECK(hyp_fault_parse("", &f, err, sizeof err) == 0 && f.n == 0, "empty: none");
    const char *bad[] = {"nan@3", "nan_grad@0", "nan_grad@5-4", "nan_grad@3x", "nan_grad", "nan_grad@1-100"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        CHECK(hyp_fault_parse(bad[i], &f, err, sizeof err) == -1 && strstr(err, "KIND@STEP"), "refused: %s", bad[i]);
    return hyp_test_finish();
}
