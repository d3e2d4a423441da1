/* lawfit.h — fitting saturating power laws to losses, the one numerical core of `gen scaling fit`
 * (v2146: L(N, D) = E + A / N^alpha + B / D^beta over runs) and of the trainer's loss prediction
 * (v2148: L(t) = E + A / t^alpha over the steps of one run).
 *
 * The model, in logs: log L_hat = LSE(a_1 - alpha_1 x_1, ..., a_k - alpha_k x_k, e) with x_j = log
 * of the j-th variable, k = 1 or 2 terms; the objective is the sum over points of
 * Huber_delta(log L - log L_hat) (Hoffmann et al. 2022 use delta = 1e-3), minimized by L-BFGS
 * (Debian's liblbfgs). Parameter vector order: a_1..a_k, e, alpha_1..alpha_k (k = 2: a, b, e, alpha,
 * beta). Nothing here allocates after hyp_lawfit_* returns, reads files or exits. */
#ifndef HYP_LAWFIT_H
#define HYP_LAWFIT_H

#include <stdint.h>

enum { HYP_LAWFIT_MAX_TERMS = 2, HYP_LAWFIT_MAX_PARAMS = 2 * HYP_LAWFIT_MAX_TERMS + 1 };

typedef struct {
    int terms;             /* k: 1 or 2 */
    int n;                 /* points (or the length of idx) */
    const double *x[HYP_LAWFIT_MAX_TERMS]; /* log of each term's variable, per point */
    const double *logl;    /* log loss per point */
    const int *idx;        /* NULL: points 0..n-1; else the points to use (a bootstrap resample) */
    const double *logl_alt;/* NULL, or log losses replacing logl (a residual bootstrap) */
    double delta;          /* Huber threshold on log residuals */
    int decaying;          /* 1: an optimum with an exponent <= 0 (a loss that grows) is not usable */
} hyp_lawfit_data;

static inline int hyp_lawfit_params(int terms) { return 2 * terms + 1; }

/* The objective at x; g (may be NULL) receives its gradient. */
double hyp_lawfit_objective(const hyp_lawfit_data *d, const double *x, double *g);
/* log L_hat at one point given its term variables' logs */
double hyp_lawfit_predict_log(int terms, const double *x, const double *logvars);
/* One L-BFGS run from x (in place; stops at |g| <= 1e-10 max(1, |x|) or when f stalls to 1e-14
 * over 5 iterations). Returns 1 when it ended at a usable optimum (finite, converged or stopped by
 * the precision of f), 0 otherwise; *fx the objective at the end. */
int hyp_lawfit_minimize(const hyp_lawfit_data *d, double *x, double *fx);
/* The best of a grid of starts: axes[j][0..na[j]) for each of the 2k+1 parameters, every
 * combination tried in order (the first of equal optima wins). Returns the number of usable starts
 * (0: none, x untouched); best in x, its objective in *fx. */
long hyp_lawfit_grid(const hyp_lawfit_data *d, const double *const *axes, const int *na, double *x, double *fx);
/* splitmix64: the bootstraps' generator (reproducible from a seed) */
uint64_t hyp_lawfit_rand(uint64_t *state);

#endif
