/* guard.c — the v2176 loss / gradient-norm guard and its fault-injection test hook (guard.h).
 * Never: I/O, collectives, the optimizer. */
#include "guard.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void hyp_guard_init(hyp_guard *g, const hyp_guard_cfg *cfg, int vocab) {
    memset(g, 0, sizeof *g);
    g->cfg = *cfg;
    g->ceiling = cfg->loss_ceiling > 0 && vocab > 1 ? cfg->loss_ceiling * log((double)vocab) : INFINITY;
    g->lr_scale = 1;
}

static double zscore(double x, double mean, double var, double floor) {
    double sd = sqrt(var > 0 ? var : 0);
    if (sd < floor) sd = floor;
    return (x - mean) / sd;
}

int hyp_guard_judge(hyp_guard *g, double loss, double norm) {
    int bad = 0;
    g->last_z_loss = g->last_z_norm = 0;
    if (!isfinite(loss)) bad |= HYP_GUARD_LOSS_NONFINITE;
    if (!isfinite(norm)) bad |= HYP_GUARD_NORM_NONFINITE;
    if (!bad && loss > g->ceiling) bad |= HYP_GUARD_LOSS_CEILING;
    if (g->n_good >= g->cfg.warmup && g->n_good > 0) {
        if (isfinite(loss)) {
            g->last_z_loss = zscore(loss, g->loss_mean, g->loss_var, 0.02 * fabs(g->loss_mean));
            if (g->last_z_loss > g->cfg.z) bad |= HYP_GUARD_LOSS_SPIKE;
        }
        if (isfinite(norm) && norm > 0) {
            g->last_z_norm = zscore(log(norm), g->lnorm_mean, g->lnorm_var, 0.1);
            if (g->last_z_norm > g->cfg.z) bad |= HYP_GUARD_NORM_SPIKE;
        }
    }
    return bad;
}

/* Welford-style exponential moving mean and variance. */
static void ema_add(double *mean, double *var, double x, double beta, int first) {
    if (first) {
        *mean = x, *var = 0;
        return;
    }
    double d = x - *mean, inc = (1 - beta) * d;
    *mean += inc;
    *var = beta * (*var + d * inc);
}

int hyp_guard_record(hyp_guard *g, int bad, double loss, double norm) {
    if (bad) {
        g->skipped++;
        g->bad_run++;
        return g->bad_run >= g->cfg.max_bad;
    }
    g->bad_run = 0;
    /* the first steps move fast: a shorter memory until the warm-up is over */
    double beta = g->n_good < g->cfg.warmup ? 1.0 - 1.0 / (g->n_good + 1) : g->cfg.ema;
    if (beta > g->cfg.ema) beta = g->cfg.ema;
    ema_add(&g->loss_mean, &g->loss_var, loss, beta, g->n_good == 0);
    if (norm > 0) ema_add(&g->lnorm_mean, &g->lnorm_var, log(norm), beta, g->n_good == 0);
    g->n_good++;
    return 0;
}

int hyp_guard_rolled_back(hyp_guard *g) {
    g->rollbacks++;
    g->bad_run = 0;
    g->lr_scale *= g->cfg.lr_factor;
    return g->rollbacks <= g->cfg.max_rollbacks;
}

void hyp_guard_reason(const hyp_guard *g, int bad, double loss, double norm, char *buf, int cap) {
    int n = 0;
    buf[0] = 0;
#define ADD(...)                                                                                   \
    do {                                                                                           \
        if (n < cap) n += snprintf(buf + n, (size_t)(cap - n), __VA_ARGS__);                       \
    } while (0)
    if (bad & HYP_GUARD_LOSS_NONFINITE) ADD("%sloss %g", n ? ", " : "", loss);
    if (bad & HYP_GUARD_NORM_NONFINITE) ADD("%sgrad norm %g", n ? ", " : "", norm);
    if (bad & HYP_GUARD_LOSS_CEILING) ADD("%sloss %.4g above the ceiling %.4g", n ? ", " : "", loss, g->ceiling);
    if (bad & HYP_GUARD_LOSS_SPIKE) ADD("%sloss spike %.4g (z %.1f > %.1f)", n ? ", " : "", loss, g->last_z_loss, g->cfg.z);
    if (bad & HYP_GUARD_NORM_SPIKE) ADD("%sgrad-norm spike %.4g (z %.1f > %.1f)", n ? ", " : "", norm, g->last_z_norm, g->cfg.z);
#undef ADD
}

static const struct {
    const char *name;
    int kind;
} KINDS[] = {{"nan_grad", HYP_FAULT_NAN_GRAD},
             {"spike_grad", HYP_FAULT_SPIKE_GRAD},
             {"nan_loss", HYP_FAULT_NAN_LOSS},
             {"spike_loss", HYP_FAULT_SPIKE_LOSS}};

int hyp_fault_parse(const char *spec, hyp_fault *f, char *err, int cap) {
    memset(f, 0, sizeof *f);
    if (!spec || !*spec) return 0;
    const char *s = spec;
    while (*s) {
        const char *at = strchr(s, '@');
        const char *end = strchr(s, ',');
        if (!end) end = s + strlen(s);
        int kind = 0;
        for (size_t k = 0; at && at < end && k < sizeof KINDS / sizeof KINDS[0]; k++)
            if ((size_t)(at - s) == strlen(KINDS[k].name) && !strncmp(s, KINDS[k].name, (size_t)(at - s))) kind = KINDS[k].kind;
        char *p;
        long lo = kind ? strtol(at + 1, &p, 10) : 0, hi = lo;
        if (kind && *p == '-') hi = strtol(p + 1, &p, 10);
        if (!kind || p != end || lo < 1 || hi < lo || hi - lo >= 64 || f->n == HYP_FAULT_MAX) {
            snprintf(err, (size_t)cap, "HYP_FAULT_INJECT '%.*s' is not KIND@STEP[-STEP2] with KIND nan_grad, spike_grad, nan_loss or spike_loss (at most %d entries, ranges under 64 steps)",
                     (int)(end - s), s, HYP_FAULT_MAX);
            return -1;
        }
        f->kind[f->n] = kind, f->lo[f->n] = (int)lo, f->hi[f->n] = (int)hi, f->n++;
        s = *end ? end + 1 : end;
    }
    return 0;
}

int hyp_fault_take(hyp_fault *f, int step) {
    int due = 0;
    for (int i = 0; i < f->n; i++) {
        if (step < f->lo[i] || step > f->hi[i]) continue;
        uint64_t bit = 1ull << (step - f->lo[i]);
        if (f->fired[i] & bit) continue;
        f->fired[i] |= bit;
        due |= f->kind[i];
    }
    return due;
}
