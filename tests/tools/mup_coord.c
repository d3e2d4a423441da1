/* mup_coord.c — the muP coordinate check (Yang et al. 2022, Fig. 5) for one generated plan: trains
 * it on one fixed batch with the plan's optimizer (host update through optim.h, every group's
 * lr_mult and weight decay) and prints, before the first step and after each step t, the RMS of
 * the residual stream after the embedding (x0) and after every block (x1..xL) and of the logits.
 * Under muP these stay the same size as the model widens; under SP they grow with width.
 * Used by tests/gen/test_mup_v2144.sh and bench/bench_mup_coord.sh.
 *
 * Usage: mup_coord PLAN.json TEXT STEPS LR [B T SEED]   (TEXT: bytes as tokens, byte tokenizer)
 * Output: one line per (step, tensor): "coord STEP NAME RMS", then "loss STEP LOSS".
 * Never: a schedule, clipping or warmup (a constant LR: the coordinate check's setting); exit 2 on
 * bad input with one line. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "exec.h"
#include "ops_cpu.h"
#include "optim.h"
#include "plan.h"

static int usage(const char *why) {
    fprintf(stderr, "mup_coord: %s — usage: mup_coord PLAN.json TEXT STEPS LR [B T SEED]\n", why);
    return 2;
}

static double rms(const float *v, int64_t n) {
    double s = 0;
    for (int64_t i = 0; i < n; i++) s += (double)v[i] * v[i];
    return n ? sqrt(s / (double)n) : 0;
}

static void report(exec_t *x, const plan_t *p, int step, int B, int T) {
    char name[32];
    int64_t rows = (int64_t)B * T;
    for (int l = 0; l <= p->L + 1; l++) {
        if (l <= p->L) snprintf(name, sizeof name, "x%d", l);
        else snprintf(name, sizeof name, "logits");
        for (int i = 0; i < p->n_bufs; i++) {
            if (strcmp(p->bufs[i].name, name)) continue;
            int64_t cols = l <= p->L ? p->C : p->Vp;
            /* logits: only the V real columns (the padding stays 0) */
            const float *v = exec_buf(x, i);
            double s = 0;
            int64_t used = l <= p->L ? cols : p->V;
            for (int64_t r = 0; r < rows; r++) {
                double q = rms(v + r * cols, used);
                s += q * q;
            }
            printf("coord %d %s %.6g\n", step, name, sqrt(s / (double)rows));
        }
    }
}

int main(int argc, char **argv) {
    if (argc < 5) return usage("too few arguments");
    int steps = atoi(argv[3]);
    double lr = atof(argv[4]);
    int B = argc > 5 ? atoi(argv[5]) : 4, T = argc > 6 ? atoi(argv[6]) : 32;
    unsigned long long seed = argc > 7 ? strtoull(argv[7], NULL, 10) : 1337;
    if (steps < 0 || steps > 10000 || !(lr >= 0 && lr < 10) || B < 1 || T < 2) return usage("bad STEPS, LR, B or T");
    plan_t p;
    hyp_err e;
    if (plan_load(argv[1], &p, &e)) {
        fprintf(stderr, "mup_coord: %s\n", e.msg);
        return 2;
    }
    int rc = 2;
    exec_t x;
    memset(&x, 0, sizeof x);
    const hyp_optim_i *o = NULL;
    unsigned char *text = NULL;
    FILE *f = fopen(argv[2], "rb");
    if (!f) {
        fprintf(stderr, "mup_coord: %s: cannot open — give a text file\n", argv[2]);
        goto out_plan;
    }
    text = malloc((size_t)B * (T + 1));
    size_t got = text ? fread(text, 1, (size_t)B * (T + 1), f) : 0;
    fclose(f);
    if (got < (size_t)B * (T + 1)) {
        fprintf(stderr, "mup_coord: %s: fewer than B*(T+1) = %d bytes — give a longer text\n", argv[2], B * (T + 1));
        goto out_plan;
    }
    if (hyp_optim_open(&p, &o, &e) || exec_init(&x, &p, &e) || exec_bind(&x, B, T, &e)) {
        fprintf(stderr, "mup_coord: %s\n", e.msg);
        goto out;
    }
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            x.tokens[b * T + t] = text[b * (T + 1) + t] % p.V;
            x.targets[b * T + t] = text[b * (T + 1) + t + 1] % p.V;
        }
    exec_init_params(&x, seed);
    exec_forward(&x);
    report(&x, &p, 0, B, T);
    for (int t = 1; t <= steps; t++) {
        op_zero(x.grads, (long)p.param_floats);
        float loss = exec_backward(&x, 1.0f);
        printf("loss %d %.6f\n", t - 1, loss);
        hyp_optim_step a = {.lr = lr, .t = t, .grad_scale = 1.0f, .avg_weight = 1.0, .tokens = (double)B * T};
        hyp_optim_step_range(o, &p, &a, 0, p.param_floats, x.params, x.grads, x.state);
        exec_forward(&x);
        report(&x, &p, t, B, T);
    }
    rc = 0;
out:
    exec_free(&x);
out_plan:
    free(text);
    plan_free(&p);
    return rc;
}
