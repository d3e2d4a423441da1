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

#include "lawfit.h"

enum { BINS = 128, BOOT = 64, MIN_BINS = 8 };

struct hyp_losspred {
    int max_steps;
    double *loss; /* [max_steps + 1], NAN where not recorded */
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
    free(lp->loss);
    free(lp);
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

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int hyp_losspred_fit(hyp_losspred *lp, int now, int final, int first_valid, hyp_losspred_out *out) {
    memset(out, 0, sizeof *out);
    if (!lp || now < 2 || now > lp->max_steps || final < now) return 0;
    int skip = now / 10 > first_valid ? now / 10 : first_valid;
    if (skip < 1) skip = 1;
    if (skip >= now) return 0;
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
    if (k >= 2) {
        qsort(fin, (size_t)k, sizeof *fin, cmp_double);
        double q1 = 0.1 * (k - 1), q9 = 0.9 * (k - 1);
        int i1 = (int)q1, i9 = (int)q9;
        out->lo = fin[i1] + (q1 - i1) * (i1 + 1 < k ? fin[i1 + 1] - fin[i1] : 0);
        out->hi = fin[i9] + (q9 - i9) * (i9 + 1 < k ? fin[i9 + 1] - fin[i9] : 0);
    } else {
        out->lo = out->hi = out->final;
    }
    return 0;
}
