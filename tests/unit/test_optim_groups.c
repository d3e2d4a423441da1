/* test_optim_groups.c — per-group learning-rate multipliers and weight decay through the shared
 * optimizer interface (optim.h), for every optimizer kind gen can write (adamw, lion, sophia, muon,
 * adam-mini, schedule-free), on real generated plans of the tiny reference GPT-2 (v2145 muP puts
 * hidden matrices in a group with lr_mult 1/m; v2138 Muon's group has its own lr_mult): after
 * one real step and backward, a step where one group has lr_mult 0 leaves that group's tensors bit for bit
 * unchanged and moves the others exactly as the all-1 step does; lr_mult 2 on a group equals (bit
 * for bit) the step at twice the learning rate on that group's tensors; a group's weight decay
 * reaches its tensors (a group with decay differs from the same group without it). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "exec.h"
#include "ops_cpu.h"
#include "optim.h"
#include "plan.h"

static int g_fail, g_pass;

static void check(int ok, const char *name, const char *detail) {
    printf("%s %-64s %s\n", ok ? "PASS" : "FAIL", name, detail);
    if (ok) g_pass++;
    else g_fail++;
}

typedef struct {
    float *params, *state[HYP_OPT_MAX_STATE];
} snap;

static void take(const exec_t *x, snap *s) {
    const plan_t *p = x->p;
    size_t n = (size_t)p->param_floats;
    s->params = malloc(n * sizeof(float));
    memcpy(s->params, x->params, n * sizeof(float));
    for (int k = 0; k < x->n_state; k++) {
        size_t m = (size_t)p->optim.state_floats[k];
        s->state[k] = malloc(m * sizeof(float));
        memcpy(s->state[k], x->state[k], m * sizeof(float));
    }
}

static void put(exec_t *x, const snap *s) {
    const plan_t *p = x->p;
    memcpy(x->params, s->params, (size_t)p->param_floats * sizeof(float));
    for (int k = 0; k < x->n_state; k++) memcpy(x->state[k], s->state[k], (size_t)p->optim.state_floats[k] * sizeof(float));
}

static void drop(snap *s, int n_state) {
    free(s->params);
    for (int k = 0; k < n_state; k++) free(s->state[k]);
}

/* one optimizer step from snapshot s at learning rate lr; the result's parameters into out */
static void step(exec_t *x, const hyp_optim_i *o, const snap *s, double lr, float *out) {
    put(x, s);
    hyp_optim_step a = {.lr = lr, .t = 2, .grad_scale = 1.0f, .avg_weight = 1.0, .tokens = 16};
    hyp_optim_step_range(o, x->p, &a, 0, x->p->param_floats, x->params, x->grads, x->state);
    memcpy(out, x->params, (size_t)x->p->param_floats * sizeof(float));
}

/* max |a - b| over the tensors of group g (in = 1) or of every other group (in = 0) */
static double diff_group(const plan_t *p, int g, int in, const float *a, const float *b) {
    double w = 0;
    for (int i = 0; i < p->n_params_t; i++) {
        const plan_param *t = &p->params[i];
        if ((t->group == g) != in) continue;
        for (int64_t j = t->offset; j < t->offset + t->numel; j++) w = fmax(w, fabs((double)a[j] - b[j]));
    }
    return w;
}

static void run_kind(const char *tag, const char *sel) {
    char dir[256], path[320], cmd[2048], name[160], det[256];
    snprintf(dir, sizeof dir, "/tmp/hyp-optgroups-%s-%d", tag, (int)getpid());
    snprintf(cmd, sizeof cmd,
             "cd %s && %s/generator/gen specs/v2500.yaml --enable %s --model tests/fixtures/models/ref-gpt2.yaml "
             "--target cpu --batch 2 --seq 8 -o %s >/dev/null 2>&1",
             HYP_SOURCE_DIR, HYP_BINARY_DIR, sel, dir);
    if (system(cmd)) {
        check(0, tag, "gen failed");
        return;
    }
    snprintf(path, sizeof path, "%s/plan.json", dir);
    plan_t p;
    hyp_err e;
    if (plan_load(path, &p, &e)) {
        check(0, tag, e.msg);
        return;
    }
    exec_t x;
    const hyp_optim_i *o = NULL;
    if (hyp_optim_open(&p, &o, &e) || exec_init(&x, &p, &e) || exec_bind(&x, 2, 8, &e)) {
        check(0, tag, e.msg);
        plan_free(&p);
        return;
    }
    exec_init_params(&x, 7);
    for (int i = 0; i < 16; i++) x.tokens[i] = (i * 37 + 11) % p.V, x.targets[i] = (i * 53 + 5) % p.V;
    /* one real step first (a zero-initialized readout, muP's, gives every other tensor a zero
     * gradient at step 1), then the gradients of step 2 */
    op_zero(x.grads, (long)p.param_floats);
    exec_forward(&x);
    exec_backward(&x, 1.0f);
    hyp_optim_step a1 = {.lr = 1e-3, .t = 1, .grad_scale = 1.0f, .avg_weight = 1.0, .tokens = 16};
    hyp_optim_step_range(o, &p, &a1, 0, p.param_floats, x.params, x.grads, x.state);
    op_zero(x.grads, (long)p.param_floats);
    exec_forward(&x);
    exec_backward(&x, 1.0f);
    snap s0;
    take(&x, &s0);
    size_t n = (size_t)p.param_floats;
    float *base = malloc(n * sizeof(float)), *dbl = malloc(n * sizeof(float)), *got = malloc(n * sizeof(float));
    const double lr = 1e-3;
    step(&x, o, &s0, lr, base);
    step(&x, o, &s0, 2 * lr, dbl);
    for (int g = 0; g < p.optim.n_groups; g++) {
        hyp_optim_group *G = &p.optim.groups[g];
        double keep = G->lr_mult;
        /* lr_mult 0: the group does not move, the others move as before */
        G->lr_mult = 0;
        step(&x, o, &s0, lr, got);
        double still = diff_group(&p, g, 1, got, s0.params), others = diff_group(&p, g, 0, got, base);
        double moved = diff_group(&p, g, 1, base, s0.params);
        snprintf(name, sizeof name, "optim_groups_%s_%s_lr_mult_0_frozen", tag, G->name);
        snprintf(det, sizeof det, "group moved %.3g (with lr_mult 1: %.3g), other groups differ by %.3g", still, moved, others);
        check(still == 0 && others == 0 && moved > 0, name, det);
        /* lr_mult 2 (times its own): the group's tensors as at twice the LR, the others as at LR */
        G->lr_mult = 2 * keep;
        step(&x, o, &s0, lr, got);
        double in = diff_group(&p, g, 1, got, dbl), out = diff_group(&p, g, 0, got, base);
        snprintf(name, sizeof name, "optim_groups_%s_%s_lr_mult_2_is_double_lr", tag, G->name);
        snprintf(det, sizeof det, "vs step at 2 lr: %.3g; other groups vs step at lr: %.3g", in, out);
        check(in == 0 && out == 0, name, det);
        G->lr_mult = keep;
        /* weight decay: a group's own value reaches its tensors (kinds apply it elementwise) */
        if (G->weight_decay > 0) {
            double wd = G->weight_decay;
            G->weight_decay = 0;
            step(&x, o, &s0, lr, got);
            G->weight_decay = wd;
            double d = diff_group(&p, g, 1, got, base), o2 = diff_group(&p, g, 0, got, base);
            snprintf(name, sizeof name, "optim_groups_%s_%s_weight_decay_per_group", tag, G->name);
            snprintf(det, sizeof det, "wd %g vs 0 moves the group by %.3g, the others by %.3g", wd, d, o2);
            check(d > 0 && o2 == 0, name, det);
        }
    }
    free(base);
    free(dbl);
    free(got);
    drop(&s0, x.n_state);
    exec_free(&x);
    plan_free(&p);
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd)) fprintf(stderr, "could not remove %s\n", dir);
}

int main(void) {
    const char *wd = " --set v2132.weight_decay=0.1";
    char sel[512];
    struct {
        const char *tag, *sel;
    } K[] = {
        {"adamw", "adamw"},
        {"adamw_mup_v2145", "adamw,init,mu-transfer --set v2144.scheme=mup --set v2144.base_width=16"},
        {"lion", "lion,adamw"},
        {"sophia", "sophia,adamw"},
        {"muon", "muon,adamw"},
        {"adam_mini", "adam-mini,adamw"},
        {"schedule_free", "schedule-free,adamw"},
    };
    for (size_t i = 0; i < sizeof K / sizeof *K; i++) {
        snprintf(sel, sizeof sel, "%s%s", K[i].sel, wd);
        run_kind(K[i].tag, sel);
    }
    printf("%d passed, %d failed\n", g_pass, g_fail);
    return g_fail ? 1 : 0;
}
