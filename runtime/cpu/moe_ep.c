/* moe_ep.c — v2109 expert parallelism of the cpu executor's MoE ops (see moe_ep.h).
 *
 * Layouts. A rank's routed rows in expert order, each expert's rows in token order, are also in
 * destination-rank order (rank q owns experts q*El..): send block q is experts q*El.. of them.
 *   forward dispatch  q <- [x rows]                 (C floats a row)
 *   forward combine   q -> [y rows]                 (C)
 *   backward dispatch q <- [x rows | dout rows | g] (C, C, 1 float a row, three sections)
 *   backward return   q -> [dx rows | <dout, y>]    (C, 1)
 * each preceded by an all-to-all of the El row counts per (source, expert). A received block of
 * source q holds, section by section, the rows of local expert 0, then 1, ...
 * Never: an exit, or a sum in another order than the data-parallel op's (ops_moe.c).
 */
#include "moe_ep.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "op_registry.h"
#include "ops_cpu.h"

enum { B_SEND, B_RECV, B_OUT, B_BACK, B_YE, B_DYE, B_HE, B_DHE, B_AE, B_DAE, B_TW1, B_TW2, B_DG, B_DLOG, B_AUXG, B_SH, B__N };

typedef struct moe_ep {
    int P, me;
    float *buf[B__N];
    size_t cap[B__N];
    int *rows, *slot;     /* [N*K] routed rows in expert order and their top-k slot */
    int *scnt, *rcnt;     /* [E] rows this rank routes to each expert; [P*El] rows (source, local expert) */
    size_t *a2a;          /* [4P] counts and displacements in bytes */
    size_t cap_rows;
    int rc;
    hyp_err err;
} moe_ep;

static int fail(exec_t *x, int rc, const hyp_err *e) {
    moe_ep *m = x->moe_ep;
    if (!m->rc) m->rc = rc, m->err = *e;
    return rc;
}

static float *need(exec_t *x, int b, size_t n) {
    moe_ep *m = x->moe_ep;
    if (n > m->cap[b]) {
        float *p = realloc(m->buf[b], n * sizeof(float));
        if (!p) return NULL;
        m->buf[b] = p, m->cap[b] = n;
    }
    return m->buf[b];
}

int exec_moe_ep_open(exec_t *x, const char *plan_path, hyp_err *e) {
    const plan_t *p = x->p;
    int P = hyp_coll_world(x->ep), op = hyp_op_find("moe_fwd"), E = 0;
    for (int i = 0; i < p->n_fwd; i++)
        if (p->fwd[i].op == op) {
            if (p->fwd[i].E % P)
                return hyp_fail(e, HYP_EINPUT, "%s: an MoE layer has %d experts, not a multiple of the ep size %d (v2109) — regenerate with --set v2109.degree dividing n_experts",
                                plan_path, (int)p->fwd[i].E, P);
            if (p->fwd[i].E > E) E = (int)p->fwd[i].E;
        }
    if (!E) return hyp_fail(e, HYP_EINPUT, "%s: expert parallelism (v2109) but the plan has no moe_fwd op — regenerate it with an MoE model", plan_path);
    for (int i = 1; i < p->n_params_t; i++)
        if (p->params[i].offset < p->params[i - 1].offset + p->params[i - 1].numel)
            return hyp_fail(e, HYP_EINPUT, "%s: parameter '%s' overlaps the one before it in the arena — the expert-parallel gradient reduction (v2109) needs parameters in arena order; regenerate the plan",
                            plan_path, p->params[i].name);
    moe_ep *m = x->moe_ep = calloc(1, sizeof *m);
    if (!m || !(m->scnt = calloc((size_t)E, sizeof(int))) || !(m->rcnt = calloc((size_t)E, sizeof(int))) ||
        !(m->a2a = calloc(4 * (size_t)P, sizeof(size_t))))
        return hyp_fail(e, HYP_EFAIL, "out of memory");
    m->P = P, m->me = hyp_coll_rank(x->ep);
    return HYP_OK;
}

void exec_moe_ep_close(exec_t *x) {
    moe_ep *m = x->moe_ep;
    if (!m) return;
    for (int b = 0; b < B__N; b++) free(m->buf[b]);
    free(m->rows), free(m->slot), free(m->scnt), free(m->rcnt), free(m->a2a);
    free(m);
    x->moe_ep = NULL;
}

int exec_moe_ep_status(const exec_t *x, hyp_err *e) {
    const moe_ep *m = x->moe_ep;
    if (!m || !m->rc) return HYP_OK;
    *e = m->err;
    return m->rc;
}

/* This rank's routed rows in expert order (token order within) into m->rows/slot, the count per
 * expert into m->scnt; then the counts per (source, local expert) into m->rcnt by all-to-all.
 * Returns the rows routed to this rank's experts from every source, or -1 on failure. */
static long route_counts(exec_t *x, const int *topi, const moe_shape *s) {
    moe_ep *m = x->moe_ep;
    int N = s->N, K = s->K, E = s->E, P = m->P, El = E / P;
    hyp_err e = {0};
    if ((size_t)N * K > m->cap_rows) {
        free(m->rows), free(m->slot);
        m->rows = malloc(sizeof(int) * (size_t)N * K), m->slot = malloc(sizeof(int) * (size_t)N * K);
        if (!m->rows || !m->slot) {
            m->cap_rows = 0;
            fail(x, hyp_fail(&e, HYP_EFAIL, "out of memory"), &e);
            return -1;
        }
        m->cap_rows = (size_t)N * K;
    }
    int j = 0;
    for (int ex = 0; ex < E; ex++) {
        m->scnt[ex] = 0;
        for (int n = 0; n < N; n++)
            for (int k = 0; k < K; k++)
                if (topi[(long)n * K + k] == ex) m->rows[j] = n, m->slot[j] = k, j++, m->scnt[ex]++;
    }
    size_t *sc = m->a2a, *sd = sc + P, *rc = sd + P, *rd = rc + P;
    for (int q = 0; q < P; q++) sc[q] = rc[q] = (size_t)El * sizeof(int), sd[q] = rd[q] = (size_t)q * El * sizeof(int);
    if (m->rc) return -1;
    if (hyp_coll_alltoallv(x->ep, m->scnt, sc, sd, m->rcnt, rc, rd, &e)) {
        fail(x, HYP_EFAIL, &e);
        return -1;
    }
    long tot = 0;
    for (int i = 0; i < P * El; i++) tot += m->rcnt[i];
    return tot;
}

/* Rows this rank sends to rank q (its experts' rows) and the first of them in expert order. */
static long sent_rows(const moe_ep *m, int q, int El, long *first) {
    long f = 0, n = 0;
    for (int ex = 0; ex < q * El; ex++) f += m->scnt[ex];
    for (int ex = q * El; ex < (q + 1) * El; ex++) n += m->scnt[ex];
    *first = f;
    return n;
}

static long recv_rows(const moe_ep *m, int q, int El) {
    long n = 0;
    for (int j = 0; j < El; j++) n += m->rcnt[q * El + j];
    return n;
}

/* Sets the byte counts of an exchange: to rank q, its rows x `out_w` floats; from q, its rows x
 * `in_w`; `fwd` 1: this rank sends its routed rows (dispatch), 0: it returns the received ones. */
static void exchange_counts(moe_ep *m, int El, int dispatch, int out_w, int in_w) {
    size_t *sc = m->a2a, *sd = sc + m->P, *rc = sd + m->P, *rd = rc + m->P, so = 0, ro = 0;
    for (int q = 0; q < m->P; q++) {
        long f, ns = sent_rows(m, q, El, &f), nr = recv_rows(m, q, El);
        long nout = dispatch ? ns : nr, nin = dispatch ? nr : ns;
        sc[q] = (size_t)nout * out_w * sizeof(float), sd[q] = so, so += sc[q];
        rc[q] = (size_t)nin * in_w * sizeof(float), rd[q] = ro, ro += rc[q];
    }
}

static int expert_tmp(exec_t *x, long n, const moe_shape *s, moe_expert_tmp *t) {
    long C = s->C, H = s->H;
    t->ye = need(x, B_YE, (size_t)(n * C)), t->dye = need(x, B_DYE, (size_t)(n * C));
    t->he = need(x, B_HE, (size_t)(n * 2 * H)), t->dhe = need(x, B_DHE, (size_t)(n * 2 * H));
    t->ae = need(x, B_AE, (size_t)(n * H)), t->dae = need(x, B_DAE, (size_t)(n * H));
    return t->ye && t->dye && t->he && t->dhe && t->ae && t->dae;
}

static void oom(exec_t *x) {
    hyp_err e = {0};
    fail(x, hyp_fail(&e, HYP_EFAIL, "out of memory for the expert-parallel dispatch (v2109)"), &e);
}

void exec_moe_ep_fwd(exec_t *x, float *out, moe_state_view *v, const float *inp, const float *wr, const float *w1,
                     const float *w2, const moe_shape *s) {
    moe_ep *m = x->moe_ep;
    int N = s->N, C = s->C, K = s->K, H = s->H, P = m->P, El = s->E / P;
    op_moe_route(v->probs, v->topi, v->topw, v->loads, v->aux, inp, wr, s);
    memset(out, 0, (size_t)N * C * sizeof(float));
    long nr = route_counts(x, v->topi, s);
    if (nr < 0) return;
    hyp_err e = {0};
    long ns = 0; /* this rank's routed rows: N * K less the ones dropped over capacity (ops_moe.h) */
    for (int ex = 0; ex < s->E; ex++) ns += m->scnt[ex];
    float *sb = need(x, B_SEND, (size_t)(ns * C) + 1), *rb = need(x, B_RECV, (size_t)(nr * C) + 1);
    float *yb = need(x, B_OUT, (size_t)(nr * C) + 1), *back = need(x, B_BACK, (size_t)(ns * C) + 1);
    moe_expert_tmp t;
    if (!sb || !rb || !yb || !back || !expert_tmp(x, N, s, &t)) {
        oom(x);
        return;
    }
    for (long i = 0; i < ns; i++) memcpy(sb + i * C, inp + (long)m->rows[i] * C, (size_t)C * sizeof(float));
    exchange_counts(m, El, 1, C, C);
    size_t *a = m->a2a;
    if (hyp_coll_alltoallv(x->ep, sb, a, a + P, rb, a + 2 * P, a + 3 * P, &e)) {
        fail(x, HYP_EFAIL, &e);
        return;
    }
    /* each (source, local expert) block on its own, as the source rank's data-parallel op runs it */
    long off = 0;
    for (int q = 0; q < P; q++)
        for (int j = 0; j < El; j++) {
            int n = m->rcnt[q * El + j], ex = m->me * El + j;
            if (n)
                op_moe_expert_fwd(yb + off * C, t.ae, t.he, rb + off * C, w1 + (long)ex * 2 * H * C,
                                  w2 + (long)ex * C * H, n, s);
            off += n;
        }
    exchange_counts(m, El, 0, C, C);
    if (hyp_coll_alltoallv(x->ep, yb, a, a + P, back, a + 2 * P, a + 3 * P, &e)) {
        fail(x, HYP_EFAIL, &e);
        return;
    }
    for (long i = 0; i < ns; i++) /* expert order, token order within: op_moe_fwd's combine order */
        op_moe_combine_row(out + (long)m->rows[i] * C, v->topw[(long)m->rows[i] * K + m->slot[i]], back + i * C, C);
    if (s->Hs > 0) { /* the shared experts: replicated, on the rank's own rows, as op_moe_fwd */
        float *sh = need(x, B_SH, (size_t)N * (C + 6 * (size_t)s->Hs));
        if (!sh) {
            oom(x);
            return;
        }
        long so = (long)s->E * C * H;
        op_moe_shared_fwd(out, inp, w2 + so, w2 + so + 2L * s->Hs * C, s, sh, sh + (long)N * C);
    }
}

void exec_moe_ep_bwd(exec_t *x, float *dinp, float *dwr, float *dw1, float *dw2, const float *dout, float daux,
                     const float *inp, const float *wr, const float *w1, const float *w2, const moe_state_view *v,
                     const moe_shape *s) {
    moe_ep *m = x->moe_ep;
    int N = s->N, C = s->C, K = s->K, H = s->H, E = s->E, P = m->P, El = E / P;
    long nr = route_counts(x, v->topi, s);
    if (nr < 0) return;
    hyp_err e = {0};
    long ns = (long)N * K, wi = 2L * C + 1, wo = (long)C + 1;
    float *sb = need(x, B_SEND, (size_t)(ns * wi)), *rb = need(x, B_RECV, (size_t)(nr * wi) + 1);
    float *ob = need(x, B_OUT, (size_t)(nr * wo) + 1), *back = need(x, B_BACK, (size_t)(ns * wo));
    float *tw1 = need(x, B_TW1, (size_t)2 * H * C), *tw2 = need(x, B_TW2, (size_t)C * H);
    float *dg = need(x, B_DG, (size_t)ns), *dlog = need(x, B_DLOG, (size_t)N * E), *auxg = need(x, B_AUXG, (size_t)E);
    moe_expert_tmp t;
    if (!sb || !rb || !ob || !back || !tw1 || !tw2 || !dg || !dlog || !auxg || !expert_tmp(x, N, s, &t)) {
        oom(x);
        return;
    }
    /* pack per destination: [x rows | dout rows | gate weights] */
    for (int q = 0; q < P; q++) {
        long f, n = sent_rows(m, q, El, &f);
        float *bx = sb + f * wi, *bd = bx + n * C, *bg = bd + n * C;
        for (long i = 0; i < n; i++) {
            int row = m->rows[f + i];
            memcpy(bx + i * C, inp + (long)row * C, (size_t)C * sizeof(float));
            memcpy(bd + i * C, dout + (long)row * C, (size_t)C * sizeof(float));
            bg[i] = v->topw[(long)row * K + m->slot[f + i]];
        }
    }
    exchange_counts(m, El, 1, (int)wi, (int)wi);
    size_t *a = m->a2a;
    if (hyp_coll_alltoallv(x->ep, sb, a, a + P, rb, a + 2 * P, a + 3 * P, &e)) {
        fail(x, HYP_EFAIL, &e);
        return;
    }
    /* each source's block: its rows per local expert; the weight gradients of one source into
     * zeroed scratch (what that rank's data-parallel op adds to its zeroed gradient), then added
     * to the expert's gradient in source-rank order */
    long boff = 0;
    for (int q = 0; q < P; q++) {
        long n = recv_rows(m, q, El), off = 0;
        const float *bx = rb + boff * wi, *bd = bx + n * C, *bg = bd + n * C;
        float *ox = ob + boff * wo, *od = ox + n * C;
        for (int j = 0; j < El; j++) {
            int nj = m->rcnt[q * El + j], ex = m->me * El + j;
            if (!nj) continue;
            long o1 = (long)ex * 2 * H * C, o2 = (long)ex * C * H;
            if (dw1) memset(tw1, 0, sizeof(float) * 2 * (size_t)H * C);
            if (dw2) memset(tw2, 0, sizeof(float) * (size_t)C * H);
            op_moe_expert_bwd(ox + off * C, od + off, dw1 ? tw1 : NULL, dw2 ? tw2 : NULL, bx + off * C, bd + off * C, NULL,
                              bg + off, NULL, w1 + o1, w2 + o2, nj, s, &t);
            if (dw1)
                for (long i = 0; i < 2L * H * C; i++) dw1[o1 + i] += tw1[i];
            if (dw2)
                for (long i = 0; i < (long)C * H; i++) dw2[o2 + i] += tw2[i];
            off += nj;
        }
        boff += n;
    }
    exchange_counts(m, El, 0, (int)wo, (int)wo);
    if (hyp_coll_alltoallv(x->ep, ob, a, a + P, back, a + 2 * P, a + 3 * P, &e)) {
        fail(x, HYP_EFAIL, &e);
        return;
    }
    /* unpack per source block [dx rows | dots]: input gradients in expert order, as op_moe_bwd */
    for (int q = 0; q < P; q++) {
        long f, n = sent_rows(m, q, El, &f);
        const float *bx = back + f * wo, *bd = bx + n * C;
        for (long i = 0; i < n; i++) {
            int row = m->rows[f + i];
            if (dinp) {
                float *dx = dinp + (long)row * C;
                for (int c = 0; c < C; c++) dx[c] += bx[i * C + c];
            }
            dg[(long)row * K + m->slot[f + i]] = bd[i];
        }
    }
    op_moe_router_bwd(dinp, dwr, daux, inp, wr, v->probs, v->topi, v->topw, dg, dlog, auxg, s);
    if (s->Hs > 0) { /* the shared experts (replicated: their gradients are all-reduced with the router's) */
        float *sh = need(x, B_SH, (size_t)N * 6 * (size_t)s->Hs);
        if (!sh) {
            oom(x);
            return;
        }
        long so = (long)E * C * H, s2 = so + 2L * s->Hs * C;
        op_moe_shared_bwd(dinp, dw2 ? dw2 + so : NULL, dw2 ? dw2 + s2 : NULL, dout, inp, w2 + so, w2 + s2, s, sh);
    }
}

/* Which experts a parameter holds: -1 none, else the expert index in its layer (from transformers'
 * Mixtral name "...block_sparse_moe.experts.<e>.w1/w2/w3.weight"). */
static int expert_of(const char *name) {
    const char *c = strstr(name, ".block_sparse_moe.experts.");
    int ex = -1;
    return c && sscanf(c + strlen(".block_sparse_moe.experts."), "%d.", &ex) == 1 ? ex : -1;
}

int exec_moe_ep_reduce_grads(exec_t *x, hyp_coll *world, double *norm, hyp_err *e) {
    const plan_t *p = x->p;
    moe_ep *m = x->moe_ep;
    int op = hyp_op_find("moe_fwd"), El = 0, rc = HYP_OK;
    for (int i = 0; i < p->n_fwd && !El; i++)
        if (p->fwd[i].op == op) El = (int)p->fwd[i].E / m->P;
    int rep = hyp_coll_world(x->ep_rep) > 1, W = hyp_coll_world(world);
    /* runs of consecutive parameters of one kind: 0 summed over the world, 1 a local expert (over
     * its replicas), 2 another rank's expert (zero here, not sent) */
    int64_t start = 0, end = 0;
    int kind = -1;
    double *ss = malloc(sizeof(double) * ((size_t)p->n_params_t + 1));
    if (!ss) return hyp_fail(e, HYP_EFAIL, "out of memory");
    int nx = 0;
    for (int i = 0; i <= p->n_params_t && !rc; i++) {
        int k = -1;
        int64_t off = 0, len = 0;
        if (i < p->n_params_t) {
            int ex = expert_of(p->params[i].name);
            k = ex < 0 ? 0 : ex / El == m->me ? 1 : 2;
            off = p->params[i].offset, len = p->params[i].numel;
        }
        if (k != kind) { /* flush the run (exec_moe_ep_open checked the offsets increase) */
            if (kind == 0 && W > 1) rc = hyp_coll_allreduce_f32(world, x->grads + start, (size_t)(end - start), e);
            if (kind == 1 && rep) rc = hyp_coll_allreduce_f32(x->ep_rep, x->grads + start, (size_t)(end - start), e);
            kind = k, start = off;
        }
        end = off + len;
    }
    /* the norm: per parameter in plan order, as train_grad_norm; an expert's square sum comes from
     * its owner's first replica, every other rank adding an exact zero, through one sum over the
     * world (so the ep group carries the all-to-alls only) */
    int first = hyp_coll_rank(x->ep_rep) == 0;
    for (int i = 0; i < p->n_params_t && !rc; i++) {
        int ex = expert_of(p->params[i].name);
        if (ex >= 0) ss[nx++] = ex / El == m->me && first ? op_sumsq(x->grads + p->params[i].offset, p->params[i].numel) : 0.0;
    }
    if (!rc && nx && W > 1) rc = hyp_coll_allreduce_f64(world, ss, (size_t)nx, e);
    double s = 0;
    for (int i = 0, j = 0; i < p->n_params_t && !rc; i++)
        s += expert_of(p->params[i].name) >= 0 ? ss[j++] : op_sumsq(x->grads + p->params[i].offset, p->params[i].numel);
    free(ss);
    *norm = sqrt(s);
    return rc;
}

int exec_moe_ep_can_gather(const exec_t *x) {
    const plan_t *p = x->p;
    if (strcmp(p->optim.kind, "adamw") || p->zero_stage) return 0;
    for (int k = 0; k < x->n_state; k++)
        if (p->optim.state_dtype[k] != HYP_DT_F32) return 0;
    return 1;
}

int exec_moe_ep_gather(exec_t *x, hyp_err *e) {
    const plan_t *p = x->p;
    moe_ep *m = x->moe_ep;
    if (!m) return HYP_OK;
    if (!exec_moe_ep_can_gather(x))
        return hyp_fail(e, HYP_EINPUT, "a checkpoint with expert parallelism (v2109) gathers AdamW's fp32 states at ZeRO stage 0 only, this plan's optimizer is '%s' — drop --ckpt-dir, or use adamw",
                        p->optim.kind);
    int op = hyp_op_find("moe_fwd"), El = 0, rc = HYP_OK;
    for (int i = 0; i < p->n_fwd && !El; i++)
        if (p->fwd[i].op == op) El = (int)p->fwd[i].E / m->P;
    for (int i = 0; i < p->n_params_t && !rc; i++) {
        int ex = expert_of(p->params[i].name);
        if (ex < 0) continue;
        size_t off = (size_t)p->params[i].offset, bytes = sizeof(float) * (size_t)p->params[i].numel;
        rc = hyp_coll_broadcast(x->ep, x->params + off, bytes, ex / El, e);
        for (int k = 0; k < x->n_state && !rc; k++) rc = hyp_coll_broadcast(x->ep, x->state[k] + off, bytes, ex / El, e);
    }
    exec_params_changed(x);
    return rc;
}
