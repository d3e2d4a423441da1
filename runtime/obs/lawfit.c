/* lawfit.c — Huber fits of saturating power laws in log space (see lawfit.h): the objective with
 * its analytic gradient, L-BFGS from one start (liblbfgs) and from a grid of starts. Used by
 * `gen scaling fit` (generator/fit_lua.c) and the trainer's loss prediction (losspred.c). Never
 * allocates, never exits. */
#include "lawfit.h"

#include <lbfgs.h>
#include <math.h>
#include <string.h>

double hyp_lawfit_predict_log(int terms, const double *x, const double *logvars) {
    double t[HYP_LAWFIT_MAX_TERMS + 1], m = x[terms];
    for (int j = 0; j < terms; j++) {
        t[j] = x[j] - x[terms + 1 + j] * logvars[j];
        if (t[j] > m) m = t[j];
    }
    double s = exp(x[terms] - m);
    for (int j = 0; j < terms; j++) s += exp(t[j] - m);
    return m + log(s);
}

/* The log-sum-exp is shifted by its largest term, so no exponential overflows from any start. */
double hyp_lawfit_objective(const hyp_lawfit_data *d, const double *x, double *g) {
    const int k = d->terms, np = hyp_lawfit_params(k);
    double f = 0, gg[HYP_LAWFIT_MAX_PARAMS] = {0};
    for (int q = 0; q < d->n; q++) {
        int i = d->idx ? d->idx[q] : q;
        double t[HYP_LAWFIT_MAX_TERMS], m = x[k];
        for (int j = 0; j < k; j++) {
            t[j] = x[j] - x[k + 1 + j] * d->x[j][i];
            if (t[j] > m) m = t[j];
        }
        double ee[HYP_LAWFIT_MAX_TERMS], e3 = exp(x[k] - m), s = e3;
        for (int j = 0; j < k; j++) s += (ee[j] = exp(t[j] - m));
        double r = (d->logl_alt ? d->logl_alt[i] : d->logl[i]) - (m + log(s));
        double dr; /* d Huber / d r */
        if (fabs(r) <= d->delta) {
            f += 0.5 * r * r;
            dr = r;
        } else {
            f += d->delta * (fabs(r) - 0.5 * d->delta);
            dr = r > 0 ? d->delta : -d->delta;
        }
        /* d pred / d a_j = w_j, d pred / d e = w_e, d pred / d alpha_j = -w_j x_j (softmax weights) */
        for (int j = 0; j < k; j++) {
            double w = ee[j] / s;
            gg[j] -= dr * w;
            gg[k + 1 + j] += dr * w * d->x[j][i];
        }
        gg[k] -= dr * e3 / s;
    }
    if (g) memcpy(g, gg, sizeof(double) * (size_t)np);
    return f;
}

static lbfgsfloatval_t evaluate(void *inst, const lbfgsfloatval_t *x, lbfgsfloatval_t *g, const int n,
                                const lbfgsfloatval_t step) {
    (void)n;
    (void)step;
    return hyp_lawfit_objective(inst, x, g);
}

int hyp_lawfit_minimize(const hyp_lawfit_data *d, double *x, double *fx) {
    const int np = hyp_lawfit_params(d->terms);
    lbfgs_parameter_t p;
    lbfgs_parameter_init(&p);
    p.epsilon = 1e-10;    /* |g| < eps * max(1, |x|): far below the Huber scale (1e-3) */
    p.past = 5;           /* or the objective stopped moving: relative change < delta */
    p.delta = 1e-14;      /* over 5 iterations (near double precision of f) */
    p.max_iterations = 2000;
    p.max_linesearch = 60;
    lbfgsfloatval_t xx[HYP_LAWFIT_MAX_PARAMS], f = 0;
    for (int j = 0; j < np; j++) xx[j] = x[j];
    int rc = lbfgs(np, xx, &f, evaluate, NULL, (void *)d, &p);
    for (int j = 0; j < np; j++) x[j] = xx[j];
    *fx = f;
    if (!isfinite(f)) return 0;
    for (int j = 0; j < np; j++)
        if (!isfinite(x[j])) return 0;
    for (int j = 0; d->decaying && j < d->terms; j++)
        if (!(x[d->terms + 1 + j] > 0)) return 0;
    /* converged, stalled, or the line search could not improve f (the minimum to f's precision) */
    return rc == LBFGS_SUCCESS || rc == LBFGS_STOP || rc == LBFGS_ALREADY_MINIMIZED ||
           rc == LBFGSERR_ROUNDING_ERROR || rc == LBFGSERR_MAXIMUMLINESEARCH ||
           rc == LBFGSERR_MINIMUMSTEP || rc == LBFGSERR_MAXIMUMITERATION;
}

long hyp_lawfit_grid(const hyp_lawfit_data *d, const double *const *axes, const int *na, double *x, double *fx) {
    const int np = hyp_lawfit_params(d->terms);
    long starts = 1, ok = 0;
    for (int j = 0; j < np; j++) starts *= na[j];
    double best[HYP_LAWFIT_MAX_PARAMS], bestf = INFINITY;
    for (long s = 0; s < starts; s++) {
        long r = s;
        double y[HYP_LAWFIT_MAX_PARAMS], fy;
        for (int j = np - 1; j >= 0; j--) {
            y[j] = axes[j][r % na[j]];
            r /= na[j];
        }
        if (!hyp_lawfit_minimize(d, y, &fy)) continue;
        ok++;
        if (fy < bestf) { /* strict: among equal optima the first start in grid order wins */
            bestf = fy;
            memcpy(best, y, sizeof(double) * (size_t)np);
        }
    }
    if (ok) {
        memcpy(x, best, sizeof(double) * (size_t)np);
        *fx = bestf;
    }
    return ok;
}

uint64_t hyp_lawfit_rand(uint64_t *s) {
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
