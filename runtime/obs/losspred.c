/* losspred.c — v2148 loss prediction (see losspred.h). The run's per-step losses in an array; a
 * fit bins them in log t (mean log t, mean log loss per bin, so a long run costs no more than a
 * short one), fits log L = LSE(a - alpha log t, e) from a 3 x 4 x 3 grid of starts, and refits 64
 * residual-bootstrap resamples (residuals of the bins drawn with replacement, splitmix64 seeded by
 * the step) from the fit for the band. Never exits; allocation only in new. */
#include "losspred.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <lbfgs.h>

#include "lawfit.h"

enum { BINS = 128, BOOT = 64, MIN_BINS = 8 };

struct hyp_losspred {
    int max_steps;
    double *loss; /* [max_steps + 1], NAN where not recorded */
    double *s1, *s2; /* [max_steps + 1]: the LR areas (lr_annealing law); NULL: the power law */
};

hyp_losspred *hyp_losspred_new(int max_steps) {
    if (max_steps < 1) return NULL;
    hyp_losspred *lp = calloc(1, sizeof *lp);
    if (!lp) return NULL;
    lp->max_steps = max_steps;
    lp->loss = malloc(sizeof(double) * ((size_t)max_steps + 1));
    if (!lp->loss) {
        free(lp);
        return NULL;
    }
    for (int i = 0; i <= max_steps; i++) lp->loss[i] = NAN;
    return lp;
}

void hyp_losspred_free(hyp_losspred *lp) {
    if (!lp) return;
    free(lp->s1);
    free(lp->s2);
    free(lp->loss);
    free(lp);
}

int hyp_losspred_set_lr(hyp_losspred *lp, const double *lr, int n, int warmup) {
    if (!lp || n < 1 || n > lp->max_steps) return -1;
    double mx = 0;
    for (int i = 1; i <= n; i++) mx = lr[i] > mx ? lr[i] : mx;
    if (!(mx > 0)) return -1;
    double *s1 = calloc((size_t)lp->max_steps + 1, sizeof *s1), *s2 = calloc((size_t)lp->max_steps + 1, sizeof *s2);
    if (!s1 || !s2) {
        free(s1), free(s2);
        return -1;
    }
    double a1 = 0, a2 = 0, m = 0;
    for (int i = 1; i <= lp->max_steps; i++) {
        double eta = (i <= n ? lr[i] : lr[n]) / mx, prev = (i > 1 ? (i - 1 <= n ? lr[i - 1] : lr[n]) : lr[1]) / mx;
        m = i <= warmup + 1 ? 0 : 0.999 * m + (prev - eta);
        a1 += eta, a2 += m;
        s1[i] = a1, s2[i] = a2;
    }
    free(lp->s1), free(lp->s2);
    lp->s1 = s1, lp->s2 = s2;
    return 0;
}

void hyp_losspred_add(hyp_losspred *lp, int step, double loss) {
    if (lp && step >= 1 && step <= lp->max_steps) lp->loss[step] = loss > 0 && isfinite(loss) ? loss : NAN;
}

int hyp_losspred_load_metrics(hyp_losspred *lp, const char *path, int upto) {
    FILE *f = lp && path ? fopen(path, "rb") : NULL;
    if (!f) return 0;
    char line[8192];
    int n = 0;
    while (fgets(line, sizeof line, f)) {
        size_t len = strlen(line);
        if (len == sizeof line - 1 && line[len - 1] != '\n') { /* longer than any row we write: skip it */
            int ch;
            while ((ch = fgetc(f)) != EOF && ch != '\n') {}
            continue;
        }
        cJSON *row = cJSON_Parse(line);
        const cJSON *st = cJSON_GetObjectItemCaseSensitive(row, "step"), *lo = cJSON_GetObjectItemCaseSensitive(row, "loss");
        if (cJSON_IsNumber(st) && cJSON_IsNumber(lo) && st->valuedouble >= 1 && st->valuedouble <= upto) {
            hyp_losspred_add(lp, (int)st->valuedouble, lo->valuedouble);
            n++;
        }
        cJSON_Delete(row);
    }
    fclose(f);
    return n;
}

static int cmp_double(const void *a, const void *b);

/* 10th and 90th percentiles of the k bootstrap predictions (the prediction itself with < 2) */
static void band(double *fin, int k, hyp_losspred_out *out) {
    if (k < 2) {
        out->lo = out->hi = out->final;
        return;
    }
    qsort(fin, (size_t)k, sizeof *fin, cmp_double);
    double q1 = 0.1 * (k - 1), q9 = 0.9 * (k - 1);
    int i1 = (int)q1, i9 = (int)q9;
    out->lo = fin[i1] + (q1 - i1) * (i1 + 1 < k ? fin[i1 + 1] - fin[i1] : 0);
    out->hi = fin[i9] + (q9 - i9) * (i9 + 1 < k ? fin[i9 + 1] - fin[i9] : 0);
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* lr_annealing: points (S1, S2, L); theta = (L0, log A, alpha, C) */
typedef struct {
    int n;
    const double *s1, *s2, *l;
    const double *lalt; /* a residual-bootstrap resample, or NULL */
} ann_data;

static double ann_pred(const double *th, double s1, double s2) { return th[0] + exp(th[1] - th[2] * log(s1)) - th[3] * s2; }

static lbfgsfloatval_t ann_eval(void *inst, const lbfgsfloatval_t *th, lbfgsfloatval_t *g, const int np,
                                const lbfgsfloatval_t step) {
    (void)np;
    (void)step;
    const ann_data *d = inst;
    const double delta = 1e-3;
    double f = 0, g0 = 0, g1 = 0, g2 = 0, g3 = 0;
    for (int i = 0; i < d->n; i++) {
        double ls1 = log(d->s1[i]), p = exp(th[1] - th[2] * ls1);
        double r = (d->lalt ? d->lalt[i] : d->l[i]) - (th[0] + p - th[3] * d->s2[i]), dr;
        if (fabs(r) <= delta) f += 0.5 * r * r, dr = r;
        else f += delta * (fabs(r) - 0.5 * delta), dr = r > 0 ? delta : -delta;
        g0 -= dr, g1 -= dr * p, g2 += dr * p * ls1, g3 += dr * d->s2[i];
    }
    g[0] = g0, g[1] = g1, g[2] = g2, g[3] = g3;
    return f;
}

static int ann_minimize(const ann_data *d, double *th, double *fx) {
    lbfgs_parameter_t p;
    lbfgs_parameter_init(&p);
    p.epsilon = 1e-10, p.past = 5, p.delta = 1e-14, p.max_iterations = 2000, p.max_linesearch = 60;
    lbfgsfloatval_t x[4] = {th[0], th[1], th[2], th[3]}, f = 0;
    int rc = lbfgs(4, x, &f, ann_eval, NULL, (void *)d, &p);
    for (int j = 0; j < 4; j++) th[j] = x[j];
    *fx = f;
    if (!isfinite(f) || !(th[2] > 0)) return 0; /* a decaying forward term only */
    for (int j = 0; j < 4; j++)
        if (!isfinite(th[j])) return 0;
    return rc == LBFGS_SUCCESS || rc == LBFGS_STOP || rc == LBFGS_ALREADY_MINIMIZED || rc == LBFGSERR_ROUNDING_ERROR ||
           rc == LBFGSERR_MAXIMUMLINESEARCH || rc == LBFGSERR_MINIMUMSTEP || rc == LBFGSERR_MAXIMUMITERATION;
}

static int fit_annealing(hyp_losspred *lp, int skip, int now, int final, hyp_losspred_out *out) {
    enum { MAXP = 2048 };
    double s1[MAXP], s2[MAXP], l[MAXP], alt[MAXP], fitv[MAXP], res[MAXP];
    int stride = (now - skip + MAXP - 1) / MAXP, n = 0;
    if (stride < 1) stride = 1;
    double lmin = INFINITY;
    for (int s = skip + 1; s <= now && n < MAXP; s += stride) {
        double v = lp->loss[s];
        if (!(v > 0) || !(lp->s1[s] > 0)) continue;
        s1[n] = lp->s1[s], s2[n] = lp->s2[s], l[n] = v, n++;
        if (v < lmin) lmin = v;
    }
    if (n < MIN_BINS) return 0;
    ann_data d = {n, s1, s2, l, NULL};
    /* starts: L0 below the lowest loss, A from 1 to e^3, slow to fast decays, no to strong annealing */
    double a0[3] = {0.3 * lmin, 0.7 * lmin, 0.95 * lmin}, a1[3] = {0, 1.5, 3}, a2[3] = {0.2, 0.5, 1.0}, a3[3] = {0, 1e-3, 1e-2};
    double best[4] = {0}, bestf = INFINITY;
    int ok = 0;
    for (int i = 0; i < 81; i++) {
        double th[4] = {a0[i / 27], a1[i / 9 % 3], a2[i / 3 % 3], a3[i % 3]}, f;
        if (!ann_minimize(&d, th, &f)) continue;
        ok = 1;
        if (f < bestf) bestf = f, memcpy(best, th, sizeof best);
    }
    if (!ok) return 0;
    out->ok = 1, out->points = n, out->first_step = skip + 1, out->law = HYP_LAW_LR_ANNEALING;
    out->E = best[0], out->A = exp(best[1]), out->alpha = best[2], out->C = best[3];
    out->now = ann_pred(best, lp->s1[now], lp->s2[now]);
    out->final = ann_pred(best, lp->s1[final], lp->s2[final]);
    out->remaining = out->now - out->final;
    double fin[BOOT];
    for (int i = 0; i < n; i++) fitv[i] = ann_pred(best, s1[i], s2[i]), res[i] = l[i] - fitv[i];
    uint64_t seed = 0x5EED0000ull + (uint64_t)now;
    int k = 0;
    for (int b = 0; b < BOOT; b++) {
        for (int i = 0; i < n; i++) alt[i] = fitv[i] + res[hyp_lawfit_rand(&seed) % (uint64_t)n];
        ann_data db = d;
        db.lalt = alt;
        double tb[4] = {best[0], best[1], best[2], best[3]}, fb;
        if (!ann_minimize(&db, tb, &fb)) continue;
        fin[k++] = ann_pred(tb, lp->s1[final], lp->s2[final]);
    }
    band(fin, k, out);
    return 0;
}

int hyp_losspred_fit(hyp_losspred *lp, int now, int final, int first_valid, hyp_losspred_out *out) {
    memset(out, 0, sizeof *out);
    if (!lp || now < 2 || now > lp->max_steps || final < now) return 0;
    int skip = now / 10 > first_valid ? now / 10 : first_valid;
    if (skip < 1) skip = 1;
    if (skip >= now) return 0;
    if (lp->s1) return fit_annealing(lp, skip, now, final, out);
    /* bins evenly spaced in log t over (skip, now] */
    double lt[BINS], ll[BINS], cnt[BINS];
    memset(lt, 0, sizeof lt), memset(ll, 0, sizeof ll), memset(cnt, 0, sizeof cnt);
    double l0 = log((double)skip), l1 = log((double)now);
    double lmin = INFINITY;
    for (int s = skip + 1; s <= now; s++) {
        double v = lp->loss[s];
        if (!(v > 0)) continue;
        int b = (int)((log((double)s) - l0) / (l1 - l0) * BINS);
        if (b >= BINS) b = BINS - 1;
        if (b < 0) b = 0;
        lt[b] += log((double)s), ll[b] += log(v), cnt[b] += 1;
        if (v < lmin) lmin = v;
    }
    double x[BINS], y[BINS];
    int n = 0;
    for (int b = 0; b < BINS; b++)
        if (cnt[b] > 0) x[n] = lt[b] / cnt[b], y[n] = ll[b] / cnt[b], n++;
    if (n < MIN_BINS) return 0;
    hyp_lawfit_data d = {1, n, {x, NULL}, y, NULL, NULL, 1e-3, 1}; /* a loss that falls */
    /* starts (a, e, alpha): e below the lowest loss seen, A from 0.1 to 1000, slow to fast decays */
    double le = log(lmin);
    double ax_a[4] = {-2, 0, 2, 5}, ax_e[3] = {le - 2, le - 0.5, le - 0.1}, ax_al[3] = {0.1, 0.4, 1.0};
    const double *axes[3] = {ax_a, ax_e, ax_al};
    int na[3] = {4, 3, 3};
    double th[3], f;
    if (!hyp_lawfit_grid(&d, axes, na, th, &f)) return 0;
    double lnow = log((double)now), lfin = log((double)final);
    out->ok = 1, out->points = n, out->first_step = skip + 1;
    out->E = exp(th[1]), out->A = exp(th[0]), out->alpha = th[2];
    out->now = exp(hyp_lawfit_predict_log(1, th, &lnow));
    out->final = exp(hyp_lawfit_predict_log(1, th, &lfin));
    out->remaining = out->now - out->final;
    /* residual bootstrap: fitted + resampled residuals, refit from th, predict the final step */
    double fit[BINS], res[BINS], alt[BINS], fin[BOOT];
    for (int i = 0; i < n; i++) fit[i] = hyp_lawfit_predict_log(1, th, &x[i]), res[i] = y[i] - fit[i];
    uint64_t seed = 0x5EED0000ull + (uint64_t)now;
    int k = 0;
    for (int b = 0; b < BOOT; b++) {
        for (int i = 0; i < n; i++) alt[i] = fit[i] + res[hyp_lawfit_rand(&seed) % (uint64_t)n];
        hyp_lawfit_data db = d;
        db.logl_alt = alt;
        double tb[3] = {th[0], th[1], th[2]}, fb;
        if (!hyp_lawfit_minimize(&db, tb, &fb)) continue;
        fin[k++] = exp(hyp_lawfit_predict_log(1, tb, &lfin));
    }
    band(fin, k, out);
    return 0;
}
