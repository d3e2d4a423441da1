/* moe_stats.c — the router statistics of the cpu executor's MoE layers (moe_stats.h). */
#include "moe_stats.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "moe_layout.h"
#include "ops_moe.h"

/* The transformer layer of a state buffer named "[prefix:]l<layer>.moe_state" (a recomputation
 * prefix "r:" names the replayed forward's copy), or -1. */
static int layer_of_state(const char *name) {
    const char *c = strrchr(name, ':');
    int l = -1;
    return sscanf(c ? c + 1 : name, "l%d.", &l) == 1 ? l : -1;
}

int exec_moe_init(exec_t *x, hyp_err *e) {
    const plan_t *p = x->p;
    int op = hyp_op_find("moe_bwd"), n = 0, n_loads = 0;
    for (int i = 0; i < p->n_bwd; i++)
        if (p->bwd[i].op == op) n++, n_loads += (int)p->bwd[i].E;
    if (!n) return HYP_OK;
    exec_moe *m = x->moe = calloc(1, sizeof *m);
    if (!m) return hyp_fail(e, HYP_EFAIL, "out of memory");
    m->state_buf = calloc((size_t)n, sizeof(int));
    m->layer = calloc((size_t)n, sizeof(int));
    m->E = calloc((size_t)n, sizeof(int));
    m->first = calloc((size_t)n, sizeof(int));
    m->loads = calloc((size_t)n_loads, sizeof(double));
    m->aux = calloc((size_t)n, sizeof(double));
    m->key = calloc((size_t)n_loads + 1, sizeof *m->key);
    m->cap_of = calloc((size_t)n, sizeof(int));
    m->dropped = calloc((size_t)n, sizeof(double));
    m->dkey = calloc((size_t)n, sizeof *m->dkey);
    float *cap = calloc((size_t)n, sizeof(float));
    if (!m->state_buf || !m->layer || !m->E || !m->first || !m->loads || !m->aux || !m->key || !m->cap_of ||
        !m->dropped || !m->dkey || !cap) {
        free(cap);
        return hyp_fail(e, HYP_EFAIL, "out of memory");
    }
    /* the backward's MoE ops (the statistics come from what each one reads), in layer order */
    for (int i = 0, j = 0; i < p->n_bwd; i++) {
        const plan_op *o = &p->bwd[i];
        if (o->op != op) continue;
        int l = layer_of_state(p->bufs[o->in[4]].name), k = j++;
        if (l < 0) l = k;
        for (; k > 0 && m->layer[k - 1] > l; k--)
            m->state_buf[k] = m->state_buf[k - 1], m->layer[k] = m->layer[k - 1], m->E[k] = m->E[k - 1], cap[k] = cap[k - 1];
        m->state_buf[k] = o->in[4], m->layer[k] = l, m->E[k] = (int)o->E, cap[k] = o->capacity;
    }
    for (int j = 0; j < n; j++) {
        m->cap_of[j] = cap[j] > 0 ? m->n_cap++ : -1;
        if (cap[j] > 0) snprintf(m->dkey[m->cap_of[j]], sizeof m->dkey[0], "moe_dropped_l%d", m->layer[j]);
    }
    free(cap);
    for (int j = 0; j < n; j++) {
        m->first[j] = m->n_loads;
        for (int k = 0; k < m->E[j]; k++)
            snprintf(m->key[m->n_loads + k], sizeof m->key[0], "moe_load_l%d_e%d", m->layer[j], k);
        m->n_loads += m->E[j];
    }
    m->n = n;
    snprintf(m->key[m->n_loads], sizeof m->key[0], "moe_aux_loss");
    /* the forward's MoE ops with a selection bias (the aux-loss-free balancing), by layer */
    int fop = hyp_op_find("moe_fwd");
    m->bias_buf = calloc((size_t)n, sizeof(int)), m->bias_j = calloc((size_t)n, sizeof(int));
    m->bias_u = calloc((size_t)n, sizeof(float));
    if (!m->bias_buf || !m->bias_j || !m->bias_u) return hyp_fail(e, HYP_EFAIL, "out of memory");
    for (int i = 0; i < p->n_fwd; i++) {
        const plan_op *o = &p->fwd[i];
        if (o->op != fop || o->in[3] < 0) continue;
        int l = layer_of_state(p->bufs[o->out[1]].name);
        for (int j = 0; j < n; j++)
            if (m->layer[j] == l && m->n_bias < n)
                m->bias_buf[m->n_bias] = o->in[3], m->bias_j[m->n_bias] = j, m->bias_u[m->n_bias++] = o->bias_rate;
    }
    return HYP_OK;
}

void exec_moe_free(exec_t *x) {
    exec_moe *m = x->moe;
    if (!m) return;
    free(m->state_buf);
    free(m->layer);
    free(m->E);
    free(m->first);
    free(m->loads);
    free(m->aux);
    free(m->key);
    free(m->cap_of);
    free(m->dropped);
    free(m->dkey);
    free(m->bias_buf);
    free(m->bias_j);
    free(m->bias_u);
    free(m);
    x->moe = NULL;
}

void exec_moe_add(exec_t *x, int state_buf, const float *state, int N, int K) {
    exec_moe *m = x->moe;
    if (!m) return;
    for (int j = 0; j < m->n; j++) {
        if (m->state_buf[j] != state_buf) continue;
        moe_state_view v = moe_state_at((float *)(uintptr_t)state, N, m->E[j], K);
        for (int k = 0; k < m->E[j]; k++) m->loads[m->first[j] + k] += v.loads[k];
        m->aux[j] += *v.aux;
        if (m->cap_of[j] >= 0) /* assignments dropped over capacity: topi < 0 (cpu/ops_moe.h) */
            for (long i = 0; i < (long)N * K; i++) m->dropped[m->cap_of[j]] += v.topi[i] < 0;
        if (x->ep) { /* v2109: rows this rank sends to another ep rank's experts, from the routing itself */
            int P = hyp_coll_world(x->ep), me = hyp_coll_rank(x->ep), El = m->E[j] / P;
            for (long i = 0; i < (long)N * K; i++) m->ep_remote += v.topi[i] >= 0 && v.topi[i] / El != me;
        }
        if (j == m->n - 1) m->passes++; /* the backward reaches the last layer first */
        return;
    }
}

void exec_moe_bias_step(exec_t *x, const double *loads) {
    exec_moe *m = x->moe;
    if (!m) return;
    for (int i = 0; i < m->n_bias; i++) {
        int j = m->bias_j[i];
        op_moe_bias_update(exec_buf(x, m->bias_buf[i]), loads + m->first[j], m->E[j], m->bias_u[i]);
    }
}

void exec_moe_reset(exec_t *x) {
    exec_moe *m = x->moe;
    if (!m) return;
    memset(m->loads, 0, sizeof(double) * (size_t)m->n_loads);
    memset(m->aux, 0, sizeof(double) * (size_t)m->n);
    memset(m->dropped, 0, sizeof(double) * (size_t)m->n);
    m->ep_remote = 0;
    m->passes = 0;
}
