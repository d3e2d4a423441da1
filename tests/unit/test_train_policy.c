/* test_train_policy.c — the optimizer-step policy of train.c against values computed by hand:
 * v2130 linear warmup, v2131 cosine / warmup-stable-decay / linear schedules, v2133 global-norm
 * clipping (the norm itself against PyTorch's clip_grad_norm_ on the reference fixture). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "train.h"

/* the one harness (hyp_test.h) under this file's names */
#include "hyp_test.h"
#define passed g_pass
#define failed g_fail

/* Tolerances: train_lr_at computes in double (a handful of operations on values <= 1e-3: error
 * < 1e-18), so 1e-12 absolute (1e-9 relative) is exact arithmetic up to the expected value's own
 * decimal rounding (10 digits); a wrong progress formula is off by >= 1e-6. train_clip_scale returns
 * a float: one fp32 rounding of a value ~0.25, <= 2^-24 x 0.25 = 1.5e-8, so 1e-7. */
static void near(const char *name, double got, double want, double tol) {
    check(fabs(got - want) <= tol, name, "got %.9g want %.9g", got, want);
}

int main(void) {
    train_opts o;
    memset(&o, 0, sizeof o);
    o.lr = 1e-3;
    o.min_lr_ratio = 0.1; /* floor 1e-4 */
    o.warmup_steps = 10;
    o.total_steps = 110; /* 100 steps after warmup */
    o.decay_fraction = 0.2;

    strcpy(o.schedule, "cosine");
    near("test_v2130_warmup_step1", train_lr_at(&o, 1), 1e-4, 1e-12);      /* 1e-3 * 1/10 */
    near("test_v2130_warmup_step5", train_lr_at(&o, 5), 5e-4, 1e-12);      /* 1e-3 * 5/10 */
    near("test_v2130_warmup_peak", train_lr_at(&o, 10), 1e-3, 1e-12);
    /* progress = (60-10)/100 = 0.5: 1e-4 + 0.5*(9e-4)*(1+cos(pi/2)) = 5.5e-4 */
    near("test_v2131_cosine_half", train_lr_at(&o, 60), 5.5e-4, 1e-12);
    /* progress 0.25: 1e-4 + 0.45e-3*(1+cos(pi/4)) = 1e-4 + 0.45e-3*1.70710678 = 8.68198052e-4 */
    near("test_v2131_cosine_quarter", train_lr_at(&o, 35), 8.6819805153e-4, 1e-12);
    near("test_v2131_cosine_end", train_lr_at(&o, 110), 1e-4, 1e-12);

    strcpy(o.schedule, "wsd");
    near("test_v2131_wsd_stable", train_lr_at(&o, 80), 1e-3, 1e-12);       /* progress 0.7 < 0.8 */
    /* progress 0.9: 1e-3 + (1e-4 - 1e-3) * (0.9 - 0.8) / 0.2 = 5.5e-4 */
    near("test_v2131_wsd_decay", train_lr_at(&o, 100), 5.5e-4, 1e-12);
    near("test_v2131_wsd_end", train_lr_at(&o, 110), 1e-4, 1e-12);

    strcpy(o.schedule, "linear");
    near("test_v2131_linear_half", train_lr_at(&o, 60), 5.5e-4, 1e-12);   /* midway 1e-3 -> 1e-4 */
    strcpy(o.schedule, "constant");
    o.warmup_steps = 0;
    near("test_v2131_constant", train_lr_at(&o, 77), 1e-3, 1e-12);

    /* v2133: clip factor = max_norm / (norm + 1e-6) when norm > max_norm; else 1 */
    o.max_norm = 1.0;
    near("test_v2133_clip_scale", train_clip_scale(&o, 4.0), 1.0 / (4.0 + 1e-6), 1e-7);
    near("test_v2133_no_clip_below", train_clip_scale(&o, 0.5), 1.0, 0);
    o.max_norm = 0;
    near("test_v2133_disabled", train_clip_scale(&o, 100.0), 1.0, 0);

    printf("%d passed, %d failed\n", passed, failed);
    return failed != 0;
}
