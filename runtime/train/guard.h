/* guard.h — the loss / gradient-norm guard of v2176 fault tolerance: decides, before a step's
 * update is applied, whether the step is bad (a non-finite loss or norm, a spike against running
 * statistics, or a loss above a ceiling), so the trainer skips the update; after max_bad
 * consecutive bad steps it asks for a rollback to the last good checkpoint with a lower LR.
 *
 * Statistics: exponential moving mean and variance (weight ema) of the loss and of log(norm),
 * updated with good steps only (a spike never pollutes them). After `warmup` good steps a value
 * whose z-score (x - mean) / max(std, floor) exceeds z is a spike (upward only: a falling loss is
 * good news). The loss ceiling, loss_ceiling x ln(vocab) (a model worse than uniform guessing by
 * that factor), is checked from the first step on. The floors (2% of the mean loss, 0.1 in log
 * norm, i.e. ~10%) keep a plateau's tiny variance from calling noise a spike.
 *
 * Also the fault-injection test hook (HYP_FAULT_INJECT, see hyp_fault_parse): planted NaNs and
 * spikes at given steps, each fired once (a step replayed after a rollback runs clean).
 *
 * Pure state machine: no I/O, no collectives (the trainer all-reduces the verdict so that every
 * rank skips the same steps). Never: the optimizer, checkpoints, printing. */
#ifndef HYP_GUARD_H
#define HYP_GUARD_H

#include <stdint.h>

typedef struct {
    double z;             /* z-score threshold of a spike */
    double ema;           /* weight of the old value in the moving statistics (0.9 .. 0.999) */
    int warmup;           /* good steps before spikes are judged (non-finite and ceiling always) */
    double loss_ceiling;  /* x ln(V); 0: off */
    int max_bad;          /* consecutive bad steps before a rollback */
    double lr_factor;     /* the LR is multiplied by it at each rollback */
    int max_rollbacks;    /* then the run gives up (exit status 5) */
} hyp_guard_cfg;

/* Why a step is bad (bits). */
enum {
    HYP_GUARD_LOSS_NONFINITE = 1,
    HYP_GUARD_NORM_NONFINITE = 2,
    HYP_GUARD_LOSS_SPIKE = 4,
    HYP_GUARD_NORM_SPIKE = 8,
    HYP_GUARD_LOSS_CEILING = 16,
};

typedef struct {
    hyp_guard_cfg cfg;
    double ceiling;          /* loss_ceiling x ln(V) */
    double loss_mean, loss_var, lnorm_mean, lnorm_var;
    int n_good;              /* good steps seen (statistics warm after cfg.warmup) */
    int bad_run;             /* consecutive bad steps now */
    int64_t skipped, rollbacks;
    double lr_scale;         /* product of lr_factor over the rollbacks so far */
    double last_z_loss, last_z_norm; /* of the last judged step, for the message */
} hyp_guard;

void hyp_guard_init(hyp_guard *g, const hyp_guard_cfg *cfg, int vocab);
/* The verdict on a step's loss and gradient norm (0: good; else HYP_GUARD_* bits). Pure: the
 * state changes only in hyp_guard_record. */
int hyp_guard_judge(hyp_guard *g, double loss, double norm);
/* Records the (agreed) verdict: a good step feeds the statistics and ends a bad run; a bad one
 * counts as skipped. Returns 1 when the bad run reached max_bad: time to roll back. */
int hyp_guard_record(hyp_guard *g, int bad, double loss, double norm);
/* After a rollback: the bad run ends, the LR scale drops by lr_factor; the statistics stay (they
 * describe the good steps before). Returns 0 when max_rollbacks are used up. */
int hyp_guard_rolled_back(hyp_guard *g);
/* "loss nan", "grad-norm spike (z 12.3)", ... for a verdict, into buf. */
void hyp_guard_reason(const hyp_guard *g, int bad, double loss, double norm, char *buf, int cap);

/* ---- the test hook: HYP_FAULT_INJECT="KIND@STEP[-STEP2],..." ------------------------------
 * KIND: nan_grad (one gradient element becomes NaN before the reduction), spike_grad (this
 * rank's gradients x 1000), nan_loss / spike_loss (the loss the guard sees becomes NaN / x 100).
 * Each (kind, step) fires once. */
enum { HYP_FAULT_NAN_GRAD = 1, HYP_FAULT_SPIKE_GRAD = 2, HYP_FAULT_NAN_LOSS = 4, HYP_FAULT_SPIKE_LOSS = 8 };
#define HYP_FAULT_MAX 32
typedef struct {
    int n;
    int kind[HYP_FAULT_MAX], lo[HYP_FAULT_MAX], hi[HYP_FAULT_MAX];
    uint64_t fired[HYP_FAULT_MAX]; /* bit (step - lo) once fired; ranges up to 64 steps */
} hyp_fault;

/* Parses spec (NULL or "": no faults). Returns 0, or -1 with a message in err[cap]. */
int hyp_fault_parse(const char *spec, hyp_fault *f, char *err, int cap);
/* The faults due at `step` not yet fired (HYP_FAULT_* bits), marking them fired. */
int hyp_fault_take(hyp_fault *f, int step);

#endif
