/* prof.c — the op profiler's recorder (prof.h). Never: I/O, or a failure that reaches the step. */
#include "prof.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "op_registry.h"

hyp_prof *hyp_prof_cur = NULL;

static const char *CAT_NAMES[HYP_PROF__COUNT] = {"step", "forward", "backward", "optimizer", "data", "communication",
                                                 "checkpoint"};

const char *hyp_prof_cat_name(int cat) { return cat >= 0 && cat < HYP_PROF__COUNT ? CAT_NAMES[cat] : "?"; }

double hyp_prof_now_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e6 + ts.tv_nsec * 1e-3;
}

void hyp_prof_add(hyp_prof *p, const hyp_prof_span *s) {
    if (p->n == p->cap) {
        int cap = p->cap ? 2 * p->cap : 1024;
        hyp_prof_span *g = realloc(p->spans, sizeof *g * (size_t)cap);
        if (!g) {
            p->dropped++;
            return;
        }
        p->spans = g, p->cap = cap;
    }
    p->spans[p->n++] = *s;
}

void hyp_prof_phase(const char *name, hyp_prof_cat cat, int leaf, double t0_us) {
    hyp_prof *p = hyp_prof_cur;
    if (!p || t0_us <= 0) return; /* t0 taken before the window opened */
    hyp_prof_span s;
    memset(&s, 0, sizeof s);
    snprintf(s.name, sizeof s.name, "%s", name);
    s.cat = (int8_t)cat, s.tid = HYP_PROF_TID_HOST, s.leaf = (int8_t)leaf, s.pass = -1, s.op = -1, s.index = -1;
    s.step = p->step;
    s.ts_us = t0_us;
    s.dur_us = hyp_prof_now_us() - t0_us;
    hyp_prof_add(p, &s);
}

static double bind(int64_t v, int64_t B, int64_t T) {
    return (double)(v == DIM_B ? B : v == DIM_T ? T : v == DIM_N ? B * T : v);
}

double hyp_prof_op_flops(const plan_op *o, int64_t B, int64_t T) {
    const char *n = hyp_op_name(o->op);
    double mm = 2.0 * bind(o->N, B, T) * (double)o->IC * (double)o->OC;
    double att = 4.0 * bind(o->B, B, T) * (double)o->NH * bind(o->T, B, T) * bind(o->T, B, T) * (double)o->hd;
    if (!strcmp(n, "matmul_fwd")) return mm;
    if (!strcmp(n, "matmul_bwd")) return mm * ((o->out[0] >= 0) + (o->out[1] >= 0));
    if (!strcmp(n, "attention_fwd") || !strcmp(n, "flash_attention_fwd")) return att;
    if (!strcmp(n, "attention_bwd") || !strcmp(n, "flash_attention_bwd")) return 2 * att;
    return 0;
}

void hyp_prof_op_span(const plan_t *p, const plan_op *o, int64_t B, int64_t T, hyp_prof_span *s) {
    memset(s, 0, sizeof *s);
    snprintf(s->name, sizeof s->name, "%s", hyp_op_name(o->op));
    if (o->nout > 0 && o->out[0] >= 0) snprintf(s->detail, sizeof s->detail, "%s", p->bufs[o->out[0]].name);
    s->op = (int16_t)o->op;
    s->leaf = 1;
    if (o >= p->fwd && o < p->fwd + p->n_fwd) s->pass = 0, s->index = (int32_t)(o - p->fwd);
    else if (o >= p->bwd && o < p->bwd + p->n_bwd) s->pass = 1, s->index = (int32_t)(o - p->bwd);
    else s->pass = 2, s->index = 0;
    s->cat = s->pass == 1 ? HYP_PROF_BACKWARD : HYP_PROF_FORWARD;
    s->flops = hyp_prof_op_flops(o, B, T);
}

void hyp_prof_op(const plan_t *p, const plan_op *o, int64_t B, int64_t T, double t0_us) {
    if (!hyp_prof_cur || t0_us <= 0) return;
    hyp_prof_span s;
    hyp_prof_op_span(p, o, B, T, &s);
    s.tid = HYP_PROF_TID_HOST;
    s.step = hyp_prof_cur->step;
    s.ts_us = t0_us;
    s.dur_us = hyp_prof_now_us() - t0_us;
    hyp_prof_add(hyp_prof_cur, &s);
}

int hyp_prof_flush(hyp_prof *p) { return p->dev_flush ? p->dev_flush(p) : 0; }

void hyp_prof_free(hyp_prof *p) {
    if (p->dev_free) p->dev_free(p->dev);
    free(p->spans);
    memset(p, 0, sizeof *p);
}
