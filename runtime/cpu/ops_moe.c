/* ops_moe.c — the mixture-of-experts MLP on CPU (see ops_moe.h for the math and the contract).
 * The expert GEMMs go through ops_cpu's op_matmul_fwd/bwd on each expert's gathered rows and the
 * SwiGLU through op_swiglu_fwd/bwd, so they share the dense MLP's kernels. It must never allocate
 * or depend on the thread count for its results.
 */
#include "ops_moe.h"

#include <math.h>
#include <string.h>

#include "ops_cpu.h"

long op_moe_ws_floats(const moe_shape *s) {
    long N = s->N, C = s->C, H = s->H;
    /* xe, ye, dye, dxe: N*C each; he, dhe: N*2H; ae, dae: N*H; aux gradient: E; dg: N*K;
     * router logit gradients: N*E. */
    return 4 * N * C + 4 * N * H + 2 * N * H + s->E + N * s->K + N * s->E + 6 * N * (long)s->Hs;
}

/* The shared experts' workspace: after the routed experts' (he, dhe [N, 2Hs], ae, dae [N, Hs]). */
static float *shared_ws(float *ws, const moe_shape *s) {
    long N = s->N, C = s->C, H = s->H;
    return ws + 4 * N * C + 4 * N * H + 2 * N * H + s->E + N * s->K + N * s->E;
}

void op_moe_shared_fwd(float *out, const float *inp, const float *ws1, const float *ws2, const moe_shape *s, float *ye,
                       float *sws) {
    if (s->Hs <= 0) return;
    int N = s->N, C = s->C, Hs = s->Hs;
    float *he = sws, *ae = he + (long)N * 4 * Hs;
    op_matmul_fwd(he, inp, ws1, NULL, N, C, 2 * Hs);
    op_swiglu_fwd(ae, he, N, Hs);
    op_matmul_fwd(ye, ae, ws2, NULL, N, Hs, C);
    for (long i = 0; i < (long)N * C; i++) out[i] += ye[i];
}

void op_moe_shared_bwd(float *dinp, float *dws1, float *dws2, const float *dout, const float *inp, const float *ws1,
                       const float *ws2, const moe_shape *s, float *sws) {
    if (s->Hs <= 0) return;
    int N = s->N, C = s->C, Hs = s->Hs;
    float *he = sws, *dhe = he + (long)N * 2 * Hs, *ae = dhe + (long)N * 2 * Hs, *dae = ae + (long)N * Hs;
    op_matmul_fwd(he, inp, ws1, NULL, N, C, 2 * Hs); /* recomputed, as the routed experts */
    op_swiglu_fwd(ae, he, N, Hs);
    memset(dae, 0, (size_t)N * Hs * sizeof(float));
    memset(dhe, 0, (size_t)N * 2 * Hs * sizeof(float));
    op_matmul_bwd(dae, dws2, NULL, dout, ae, ws2, N, Hs, C);
    op_swiglu_bwd(dhe, dae, he, N, Hs);
    op_matmul_bwd(dinp, dws1, NULL, dhe, inp, ws1, N, C, 2 * Hs);
}

/* Gathers the rows routed to expert e (token order) into rows[]; returns their count. */
static int expert_rows(int e, const int *topi, const moe_shape *s, int *rows, int *slot) {
    int n_e = 0;
    for (int n = 0; n < s->N; n++)
        for (int k = 0; k < s->K; k++)
            if (topi[(long)n * s->K + k] == e) {
                rows[n_e] = n;
                if (slot) slot[n_e] = k;
                n_e++;
            }
    return n_e;
}

void op_moe_expert_fwd(float *ye, float *ae, float *he, const float *xe, const float *w1e, const float *w2e, int n,
                       const moe_shape *s) {
    long C = s->C, H = s->H;
    op_matmul_fwd(he, xe, w1e, NULL, n, (int)C, (int)(2 * H));
    op_swiglu_fwd(ae, he, n, (int)H);
    op_matmul_fwd(ye, ae, w2e, NULL, n, (int)H, (int)C);
}

/* Runs expert e on its n_e gathered rows: xe [n_e, C] -> he [n_e, 2H] -> ae [n_e, H] -> ye. */
static void expert_fwd(float *ye, float *ae, float *he, float *xe, const float *inp,
                       const float *w1, const float *w2, int e, const int *rows, int n_e,
                       const moe_shape *s) {
    long C = s->C, H = s->H;
    for (int r = 0; r < n_e; r++) memcpy(xe + r * C, inp + (long)rows[r] * C, C * sizeof(float));
    op_moe_expert_fwd(ye, ae, he, xe, w1 + (long)e * 2 * H * C, w2 + (long)e * C * H, n_e, s);
}

void op_moe_combine_row(float *o, float g, const float *y, int C) {
    for (int c = 0; c < C; c++) o[c] += g * y[c];
}

void op_moe_route(float *probs, int *topi, float *topw, int *loads, float *aux, const float *inp, const float *wr,
                  const moe_shape *s) {
    int N = s->N, C = s->C, E = s->E, K = s->K;
    const float *b = s->bias;
    /* router logits into probs, then softmax per row (max-subtracted), or the sigmoid */
    op_matmul_fwd(probs, inp, wr, NULL, N, C, E);
    for (int n = 0; n < N; n++) {
        float *p = probs + (long)n * E;
        if (s->sigmoid) {
            for (int e = 0; e < E; e++) p[e] = 1.0f / (1.0f + expf(-p[e]));
        } else {
            float mx = p[0];
            for (int e = 1; e < E; e++) mx = p[e] > mx ? p[e] : mx;
            double sum = 0;
            for (int e = 0; e < E; e++) {
                p[e] = expf(p[e] - mx);
                sum += p[e];
            }
            for (int e = 0; e < E; e++) p[e] = (float)(p[e] / sum);
        }
        /* top-k by selection: the largest not yet taken, ties to the lower index */
        int *ti = topi + (long)n * K;
        float *tw = topw + (long)n * K;
        double tsum = 0;
        for (int k = 0; k < K; k++) {
            int best = -1;
            for (int e = 0; e < E; e++) {
                int taken = 0;
                for (int j = 0; j < k; j++) taken |= ti[j] == e;
                if (!taken && (best < 0 || (b ? p[e] + b[e] > p[best] + b[best] : p[e] > p[best]))) best = e;
            }
            ti[k] = best;
            tw[k] = p[best];
            tsum += p[best];
        }
        if (s->norm_topk)
            for (int k = 0; k < K; k++) tw[k] = (float)(tw[k] / tsum);
    }
    if (s->capacity > 0) { /* drops over capacity, k-major then token order (ops_moe.h) */
        int cap = moe_cap(s, N);
        for (int e = 0; e < E; e++) { /* one pass per expert: no storage, the cost of the counts below */
            int fill = 0;
            for (int k = 0; k < K; k++)
                for (int n = 0; n < N; n++) {
                    int *t = topi + (long)n * K + k;
                    if (*t == e && fill++ >= cap) *t = -1 - e;
                }
        }
    }
    double auxsum = 0;
    for (int e = 0; e < E; e++) {
        int n_e = 0;
        for (long i = 0; i < (long)N * K; i++) n_e += moe_expert_of(topi[i]) == e;
        if (loads) loads[e] = n_e;
        double P = 0;
        for (int n = 0; n < N; n++) P += probs[(long)n * E + e];
        auxsum += ((double)n_e / N) * (P / N);
    }
    if (aux) *aux = s->sigmoid ? 0.0f : (float)(s->aux_coef * E * auxsum); /* none for the sigmoid router (ops_moe.h) */
}

void op_moe_fwd(float *out, float *probs, int *topi, float *topw, int *loads, float *aux,
                const float *inp, const float *wr, const float *w1, const float *w2,
                const moe_shape *s, float *ws, int *rows) {
    int N = s->N, C = s->C, E = s->E, K = s->K, H = s->H;
    op_moe_route(probs, topi, topw, loads, aux, inp, wr, s);
    float *xe = ws, *ye = xe + (long)N * C, *he = ye + (long)N * C, *ae = he + (long)N * 2 * H;
    int *slot = rows + N;
    memset(out, 0, (size_t)N * C * sizeof(float));
    for (int e = 0; e < E; e++) {
        int n_e = expert_rows(e, topi, s, rows, slot);
        if (n_e == 0) continue;
        expert_fwd(ye, ae, he, xe, inp, w1, w2, e, rows, n_e, s);
        for (int r = 0; r < n_e; r++)
            op_moe_combine_row(out + (long)rows[r] * C, topw[(long)rows[r] * K + slot[r]], ye + (long)r * C, C);
    }
    op_moe_shared_fwd(out, inp, w2 + (long)E * C * H, w2 + (long)E * C * H + 2L * s->Hs * C, s, ye, shared_ws(ws, s));
}

void op_moe_expert_bwd(float *dxe, float *dg, float *dw1e, float *dw2e, const float *xe, const float *dout,
                       const int *drow, const float *g, const int *gidx, const float *w1e, const float *w2e, int n,
                       const moe_shape *s, const moe_expert_tmp *t) {
    int C = s->C, H = s->H;
    float *ye = t->ye, *dye = t->dye;
    op_moe_expert_fwd(ye, t->ae, t->he, xe, w1e, w2e, n, s);
    for (int r = 0; r < n; r++) {
        const float *d = dout + (long)(drow ? drow[r] : r) * C, *y = ye + (long)r * C;
        int gi = gidx ? gidx[r] : r;
        float gw = g[gi];
        double dot = 0;
        for (int c = 0; c < C; c++) {
            dot += (double)d[c] * y[c];
            dye[(long)r * C + c] = gw * d[c];
        }
        dg[gi] = (float)dot;
    }
    memset(t->dae, 0, (size_t)n * H * sizeof(float));
    memset(t->dhe, 0, (size_t)n * 2 * H * sizeof(float));
    op_matmul_bwd(t->dae, dw2e, NULL, dye, t->ae, w2e, n, H, C);
    op_swiglu_bwd(t->dhe, t->dae, t->he, n, H);
    if (dxe) memset(dxe, 0, (size_t)n * C * sizeof(float));
    op_matmul_bwd(dxe, dw1e, NULL, t->dhe, xe, w1e, n, C, 2 * H);
}

void op_moe_bias_update(float *bias, const double *loads, int E, float u) {
    double mean = 0;
    for (int e = 0; e < E; e++) mean += loads[e];
    mean /= E;
    for (int e = 0; e < E; e++) bias[e] += loads[e] < mean ? u : loads[e] > mean ? -u : 0.0f;
}

void op_moe_router_bwd(float *dinp, float *dwr, float daux, const float *inp, const float *wr, const float *probs,
                       const int *topi, const float *topw, const float *dgbuf, float *dlog, float *auxg, const moe_shape *s) {
    int N = s->N, C = s->C, E = s->E, K = s->K;
    /* aux gradient: d aux / d p[n, e] = coef * E * f_e / N */
    for (int e = 0; e < E; e++) {
        int cnt = 0;
        for (long i = 0; i < (long)N * K; i++) cnt += moe_expert_of(topi[i]) == e;
        auxg[e] = s->sigmoid ? 0.0f : (float)(daux * s->aux_coef * E * ((double)cnt / N) / N);
    }
    for (int n = 0; n < N; n++) {
        const float *p = probs + (long)n * E;
        const int *ti = topi + (long)n * K;
        const float *tw = topw + (long)n * K, *dg = dgbuf + (long)n * K;
        float *dlr = dlog + (long)n * E;
        for (int e = 0; e < E; e++) dlr[e] = auxg[e]; /* dp, then turned into dlogit in place */
        /* a dropped assignment (ti < 0) computes nothing: its gate weight's gradient is 0 */
#define DGK(k) (ti[k] < 0 ? 0.0f : dg[k])
        if (s->norm_topk) {
            /* g_k = p_k / S (S over the router's k choices, dropped ones included): dp_k = (dg_k - sum_j dg_j g_j) / S */
            double S = 0, dot = 0;
            for (int k = 0; k < K; k++) {
                S += p[moe_expert_of(ti[k])];
                dot += (double)DGK(k) * tw[k];
            }
            for (int k = 0; k < K; k++) dlr[moe_expert_of(ti[k])] += (float)((DGK(k) - dot) / S);
        } else {
            for (int k = 0; k < K; k++) dlr[moe_expert_of(ti[k])] += DGK(k);
        }
#undef DGK
        if (s->sigmoid) { /* ds/dl = s (1 - s); no aux term (aux_coef 0 with the sigmoid router) */
            for (int e = 0; e < E; e++) dlr[e] = dlr[e] * p[e] * (1.0f - p[e]);
            continue;
        }
        double sdp = 0;
        for (int e = 0; e < E; e++) sdp += (double)dlr[e] * p[e];
        for (int e = 0; e < E; e++) dlr[e] = (float)(p[e] * (dlr[e] - sdp));
    }
    op_matmul_bwd(dinp, dwr, NULL, dlog, inp, wr, N, C, E);
}

void op_moe_bwd(float *dinp, float *dwr, float *dw1, float *dw2, const float *dout, float daux,
                const float *inp, const float *wr, const float *w1, const float *w2,
                const float *probs, const int *topi, const float *topw, const moe_shape *s,
                float *ws, int *rows) {
    int N = s->N, C = s->C, E = s->E, K = s->K, H = s->H;
    float *xe = ws, *ye = xe + (long)N * C, *dye = ye + (long)N * C, *dxe = dye + (long)N * C;
    float *he = dxe + (long)N * C, *dhe = he + (long)N * 2 * H, *ae = dhe + (long)N * 2 * H;
    float *dae = ae + (long)N * H, *dl = dae + (long)N * H;
    int *slot = rows + N;
    float *dgbuf = dl + E;
    moe_expert_tmp t = {ye, dye, he, dhe, ae, dae};
    for (int e = 0; e < E; e++) {
        int n_e = expert_rows(e, topi, s, rows, slot);
        if (n_e == 0) continue;
        for (int r = 0; r < n_e; r++) {
            memcpy(xe + (long)r * C, inp + (long)rows[r] * C, (size_t)C * sizeof(float));
            slot[r] += rows[r] * K; /* the routed row's index into [N, K] */
        }
        op_moe_expert_bwd(dinp ? dxe : NULL, dgbuf, dw1 ? dw1 + (long)e * 2 * H * C : NULL,
                          dw2 ? dw2 + (long)e * C * H : NULL, xe, dout, rows, topw, slot, w1 + (long)e * 2 * H * C,
                          w2 + (long)e * C * H, n_e, s, &t);
        if (dinp)
            for (int r = 0; r < n_e; r++) {
                float *dx = dinp + (long)rows[r] * C;
                for (int c = 0; c < C; c++) dx[c] += dxe[(long)r * C + c];
            }
    }
    op_moe_router_bwd(dinp, dwr, daux, inp, wr, probs, topi, topw, dgbuf, dgbuf + (long)N * K, dl, s);
    long so = (long)E * C * H, s2 = so + 2L * s->Hs * C;
    op_moe_shared_bwd(dinp, dw2 ? dw2 + so : NULL, dw2 ? dw2 + s2 : NULL, dout, inp, w2 + so, w2 + s2, s, shared_ws(ws, s));
}
