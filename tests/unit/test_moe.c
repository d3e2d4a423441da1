/* test_moe.c — correctness of the CPU mixture-of-experts MLP (runtime/cpu/ops_moe.c).
 *
 * An independent double-precision reference written per token from the Mixtral formula (router
 * softmax, top-k, renormalised weights, each chosen expert's SwiGLU MLP, weighted sum; the aux
 * loss as transformers' load_balancing_loss_func: coef * E * sum_e (count_e / N) * mean_n p[n,e])
 * checks:
 *   1. forward output, loads and aux loss against the reference on odd shapes;
 *   2. every gradient (input, router, w1, w2) against central finite differences of the reference
 *      of L = sum(out * R) + daux * aux, with and without renormalisation;
 *   3. the backward accumulates (+=), loads sum to N * top_k, two runs are bit-identical;
 *   4. the workspace size agrees with the plan's layout (core/moe_layout.h);
 *   6. shared experts (DeepSeek-V3: one ungated SwiGLU MLP of n_shared x H on every token, added):
 *      the reference adds it per token; its weights' gradients are checked with w2's (they follow it);
 *   5. capacity with token dropping (cf > 0): the reference drops by its own pass (capacity
 *      ceil(cf * N * K / E), first choices of all tokens in token order, then second choices...),
 *      the op's dropped assignments equal it (and the case drops some), outputs and gradients as
 *      in 1-2; a capacity nobody reaches is bit-identical to dropless.
 * Finite differences do not cross a top-k boundary: a test shape whose smallest gap between the
 * k-th and (k+1)-th probability (with a capacity: between any two chosen ones too, their order
 * sets the priority) is under 100 h is rejected and redrawn (reported).
 * Prints one line per check and "N passed, M failed"; exits 1 if anything failed. It must never
 * compare against the kernel itself.
 */
#include "ops_moe.h"

#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hyp_test.h"
#include "moe_layout.h"

static uint64_t g_rng = 0x2545F4914F6CDD1Dull;
static uint64_t rng_u64(void) {
    uint64_t z = (g_rng += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
static float rng_uniform(float lo, float hi) {
    return lo + (hi - lo) * (float)((rng_u64() >> 40) * (1.0 / 16777216.0));
}
static void *xalloc(size_t n) {
    void *p = calloc(n ? n : 1, 1);
    if (!p) {
        fprintf(stderr, "out of memory\n");
        exit(2);
    }
    return p;
}

typedef struct {
    moe_shape s;
    float *inp, *wr, *w1, *w2, *R;
} problem;

/* Reference: returns L = sum(out * R) + daux * aux in double; out/aux/loads/gap/dropped optional.
 * Two passes: every token's probabilities and the rank of each chosen expert, then (capacity > 0)
 * the drops — capacity ceil(cf * N * K / E), the rank-0 choices of all tokens in token order first,
 * then rank 1, ... (GShard's top-2 priority) — then the outputs from the kept assignments. */
static double ref_loss(const problem *P, const double *inp, const double *wr, const double *w1,
                       const double *w2, double daux, double *out, double *aux_out, int *loads,
                       double *min_gap, int *dropped) {
    const moe_shape *s = &P->s;
    int N = s->N, C = s->C, E = s->E, K = s->K, H = s->H;
    double L = 0, *pall = xalloc(sizeof(double) * N * E), *Pm = xalloc(sizeof(double) * E);
    int *cnt = xalloc(sizeof(int) * E), *rank = xalloc(sizeof(int) * N * E), *fill = xalloc(sizeof(int) * E);
    double *a = xalloc(sizeof(double) * H);
    int ndrop = 0;
    if (min_gap) *min_gap = 1e30;
    for (int n = 0; n < N; n++) {
        const double *x = inp + (long)n * C;
        double *p = pall + (long)n * E;
        double mx = -1e300, z = 0;
        for (int e = 0; e < E; e++) {
            double l = 0;
            for (int c = 0; c < C; c++) l += x[c] * wr[(long)e * C + c];
            p[e] = l;
            mx = l > mx ? l : mx;
        }
        if (s->sigmoid) { /* DeepSeek-V3: sigmoid scores, chosen by score + bias */
            for (int e = 0; e < E; e++) p[e] = 1 / (1 + exp(-p[e]));
        } else {
            for (int e = 0; e < E; e++) z += (p[e] = exp(p[e] - mx));
            for (int e = 0; e < E; e++) p[e] /= z;
        }
        for (int e = 0; e < E; e++) Pm[e] += p[e] / N;
#define Q(e) (p[e] + (s->bias ? (double)s->bias[e] : 0.0)) /* the selection score */
        /* top-k: rank of e = number of experts strictly above it (ties to lower index) */
        double kth = 1e30, next = -1e30;
        for (int e = 0; e < E; e++) {
            int above = 0;
            for (int j = 0; j < E; j++) above += Q(j) > Q(e) || (Q(j) == Q(e) && j < e);
            rank[(long)n * E + e] = above < K ? above : -1;
            if (above < K) {
                cnt[e]++;
                kth = Q(e) < kth ? Q(e) : kth;
                /* with a capacity the order of the chosen matters too (it sets the priority) */
                if (s->capacity > 0 && min_gap)
                    for (int j = 0; j < e; j++)
                        if (rank[(long)n * E + j] >= 0 && fabs(Q(j) - Q(e)) < *min_gap) *min_gap = fabs(Q(j) - Q(e));
            } else {
                next = Q(e) > next ? Q(e) : next;
            }
        }
#undef Q
        if (min_gap && K < E && kth - next < *min_gap) *min_gap = kth - next;
    }
    if (s->capacity > 0) {
        int cap = (int)ceil((double)s->capacity * N * K / E);
        for (int r = 0; r < K; r++)
            for (int n = 0; n < N; n++)
                for (int e = 0; e < E; e++)
                    if (rank[(long)n * E + e] == r && ++fill[e] > cap) rank[(long)n * E + e] = -2, ndrop++;
    }
    for (int n = 0; n < N; n++) {
        const double *x = inp + (long)n * C, *p = pall + (long)n * E;
        double S = 0;
        for (int e = 0; e < E; e++) S += rank[(long)n * E + e] != -1 ? p[e] : 0; /* dropped ones too */
        for (int c = 0; c < C; c++) {
            double o = 0;
            for (int e = 0; e < E; e++) {
                if (rank[(long)n * E + e] < 0) continue; /* not chosen, or dropped */
                double g = s->norm_topk ? p[e] / S : p[e];
                for (int h = 0; h < H; h++) {
                    double gt = 0, up = 0;
                    for (int i = 0; i < C; i++) {
                        gt += x[i] * w1[((long)e * 2 * H + h) * C + i];
                        up += x[i] * w1[((long)e * 2 * H + H + h) * C + i];
                    }
                    a[h] = gt / (1 + exp(-gt)) * up;
                }
                double y = 0;
                for (int h = 0; h < H; h++) y += a[h] * w2[((long)e * C + c) * H + h];
                o += g * y;
            }
            if (s->Hs > 0) { /* the shared MLP, ungated: ws1 [2Hs, C], ws2 [C, Hs] after w2 */
                int Hs = s->Hs;
                const double *ws1 = w2 + (long)E * C * H, *ws2 = ws1 + 2L * Hs * C;
                double y = 0;
                for (int h = 0; h < Hs; h++) {
                    double gt = 0, up = 0;
                    for (int i = 0; i < C; i++) gt += x[i] * ws1[(long)h * C + i], up += x[i] * ws1[(long)(Hs + h) * C + i];
                    y += gt / (1 + exp(-gt)) * up * ws2[(long)c * Hs + h];
                }
                o += y;
            }
            if (out) out[(long)n * C + c] = o;
            L += o * P->R[(long)n * C + c];
        }
    }
    double aux = 0;
    for (int e = 0; e < E; e++) aux += ((double)cnt[e] / N) * Pm[e];
    aux *= s->sigmoid ? 0 : s->aux_coef * E; /* no aux loss with the sigmoid router (ops_moe.h) */
    if (aux_out) *aux_out = aux;
    if (loads) memcpy(loads, cnt, sizeof(int) * E);
    if (dropped) *dropped = ndrop;
    free(pall); free(Pm); free(cnt); free(rank); free(fill); free(a);
    return L + daux * aux;
}

static double *to_d(const float *f, long n) {
    double *d = xalloc(sizeof(double) * n);
    for (long i = 0; i < n; i++) d[i] = f[i];
    return d;
}

static void run_case_all(const char *name, int N, int C, int E, int K, int H, int norm_topk, float cf, int Hs,
                         int sigmoid, const float *bias) {
    problem P = {.s = {N, C, E, K, H, norm_topk, 0.02f, cf, Hs, sigmoid, bias}};
    const moe_shape *s = &P.s;
    /* w2 holds the shared experts' ws1, ws2 after the routed experts' (ops_moe.h) */
    long nin = (long)N * C, nwr = (long)E * C, nw1 = (long)E * 2 * H * C, nw2 = (long)E * C * H + 3L * Hs * C;
    P.inp = xalloc(4 * nin); P.wr = xalloc(4 * nwr); P.w1 = xalloc(4 * nw1);
    P.w2 = xalloc(4 * nw2); P.R = xalloc(4 * nin);
    const double h = 1e-5, daux = 3.0; /* daux != 1 so the aux gradient's scale is checked */
    double gap = 0;
    for (int tries = 0;; tries++) {
        for (long i = 0; i < nin; i++) P.inp[i] = rng_uniform(-1, 1);
        for (long i = 0; i < nwr; i++) P.wr[i] = rng_uniform(-1, 1);
        for (long i = 0; i < nw1; i++) P.w1[i] = rng_uniform(-0.5f, 0.5f);
        for (long i = 0; i < nw2; i++) P.w2[i] = rng_uniform(-0.5f, 0.5f);
        for (long i = 0; i < nin; i++) P.R[i] = rng_uniform(-1, 1);
        double *di = to_d(P.inp, nin), *dr = to_d(P.wr, nwr), *d1 = to_d(P.w1, nw1),
               *d2 = to_d(P.w2, nw2);
        ref_loss(&P, di, dr, d1, d2, daux, NULL, NULL, NULL, &gap, NULL);
        free(di); free(dr); free(d1); free(d2);
        if (gap > 100 * h || tries == 50) break;
    }
    check(gap > 100 * h, name, "smallest top-k probability gap %.2e (> 100 h)", gap);
    check(op_moe_ws_floats(s) == moe_ws_floats_sh(N, C, H, E, K, Hs), name, "workspace %ld floats = core/moe_layout.h's %lld",
          op_moe_ws_floats(s), (long long)moe_ws_floats_sh(N, C, H, E, K, Hs));

    float *out = xalloc(4 * nin), *out2 = xalloc(4 * nin), *probs = xalloc(4L * N * E);
    float *topw = xalloc(4L * N * K), *ws = xalloc(4 * op_moe_ws_floats(s));
    int *topi = xalloc(4L * N * K), *loads = xalloc(4L * E), *rows = xalloc(8L * N);
    float aux = 0, aux2 = 0;
    op_moe_fwd(out, probs, topi, topw, loads, &aux, P.inp, P.wr, P.w1, P.w2, s, ws, rows);
    op_moe_fwd(out2, probs, topi, topw, NULL, &aux2, P.inp, P.wr, P.w1, P.w2, s, ws, rows);
    double *di = to_d(P.inp, nin), *dr = to_d(P.wr, nwr), *d1 = to_d(P.w1, nw1),
           *d2 = to_d(P.w2, nw2), *rout = xalloc(8 * nin), raux = 0;
    int *rloads = xalloc(4L * E), rdrop = 0;
    ref_loss(&P, di, dr, d1, d2, daux, rout, &raux, rloads, NULL, &rdrop);
    /* fp32 forward vs double: each output is two chained dot products of length <= max(C, H)
     * (< 32 here) plus a softmax; error <= ~3 * 32 * 2^-24 relative to the magnitudes (< 2),
     * ~1e-5 absolute; 1e-4 leaves room for the exp/expf difference (1 ulp each). */
    double fe = 0;
    for (long i = 0; i < nin; i++) fe = fmax(fe, fabs(out[i] - rout[i]));
    char nm[96];
    snprintf(nm, sizeof nm, "%s forward", name);
    check(fe < 1e-4, nm, "max |out - ref| %.2e", fe);
    int lok = 1, lsum = 0, idle = 0;
    for (int e = 0; e < E; e++) {
        lok &= loads[e] == rloads[e];
        lsum += loads[e];
        idle += loads[e] == 0;
    }
    snprintf(nm, sizeof nm, "%s loads", name);
    check(lok && lsum == N * K, nm, "equal to the reference, sum %d = N*K %d, %d idle", lsum,
          N * K, idle);
    int kdrop = 0, krouted = 0;
    for (long i = 0; i < (long)N * K; i++) kdrop += topi[i] < 0, krouted += topi[i] >= 0;
    snprintf(nm, sizeof nm, "%s dropped", name);
    if (cf > 0) { /* the op's drops equal the reference's, and the case does drop (so capacity is measured) */
        int cap = moe_cap(s, N), over = 0;
        for (int e = 0; e < E; e++) {
            int kept = 0;
            for (long i = 0; i < (long)N * K; i++) kept += topi[i] == e;
            over |= kept > cap;
        }
        check(kdrop == rdrop && rdrop > 0 && !over && krouted + kdrop == N * K, nm,
              "%d of %d assignments dropped (reference %d), capacity %d = ceil(%g*%d*%d/%d), no expert over it", kdrop, N * K,
              rdrop, cap, (double)cf, N, K, E);
    } else {
        check(kdrop == 0 && rdrop == 0, nm, "dropless: none dropped");
    }
    snprintf(nm, sizeof nm, "%s aux loss", name);
    /* aux is a sum of E products of float means: relative error ~ E * N * 2^-24 < 1e-5 */
    check(fabs(aux - raux) <= 1e-5 * fabs(raux) + 1e-9, nm, "%.8f vs ref %.8f", aux, raux);
    snprintf(nm, sizeof nm, "%s deterministic", name);
    check(!memcmp(out, out2, 4 * nin) && aux == aux2, nm, "two forwards bit-identical");

    /* backward with prefilled gradients (checks +=) */
    float *g[4], *pre[4];
    long cnt[4] = {nin, nwr, nw1, nw2};
    for (int t = 0; t < 4; t++) {
        g[t] = xalloc(4 * cnt[t]);
        pre[t] = xalloc(4 * cnt[t]);
        for (long i = 0; i < cnt[t]; i++) g[t][i] = pre[t][i] = rng_uniform(-1, 1);
    }
    op_moe_bwd(g[0], g[1], g[2], g[3], P.R, (float)daux, P.inp, P.wr, P.w1, P.w2, probs, topi,
               topw, s, ws, rows);
    double *dv[4] = {di, dr, d1, d2};
    const char *tn[4] = {"d inp", "d router", "d w1", "d w2"};
    for (int t = 0; t < 4; t++) {
        double maxg = 0, maxe = 0;
        for (long i = 0; i < cnt[t]; i++) {
            double v = dv[t][i];
            dv[t][i] = v + h;
            double lp = ref_loss(&P, di, dr, d1, d2, daux, NULL, NULL, NULL, NULL, NULL);
            dv[t][i] = v - h;
            double lm = ref_loss(&P, di, dr, d1, d2, daux, NULL, NULL, NULL, NULL, NULL);
            dv[t][i] = v;
            double fd = (lp - lm) / (2 * h), kg = (double)g[t][i] - pre[t][i];
            maxg = fmax(maxg, fabs(fd));
            maxe = fmax(maxe, fabs(kg - fd));
        }
        /* FD in double: truncation ~h^2, round-off ~1e-16/h, both ~1e-10. The kernel's fp32
         * gradients are chains of dot products of length <= N*K (< 64) accumulated in fp32:
         * ~64 * 2^-24 ~ 4e-6 relative to the largest gradient, plus the prefill subtraction
         * (|pre| <= 1, 2^-24). 1e-4 of max |g| + 1e-6 bounds both. */
        snprintf(nm, sizeof nm, "%s %s", name, tn[t]);
        check(maxe <= 1e-4 * maxg + 1e-6, nm, "max |kernel - fd| %.2e (max |g| %.2e)", maxe, maxg);
    }
    for (int t = 0; t < 4; t++) { free(g[t]); free(pre[t]); }
    free(P.inp); free(P.wr); free(P.w1); free(P.w2); free(P.R);
    free(out); free(out2); free(probs); free(topw); free(ws); free(topi); free(loads);
    free(rows); free(di); free(dr); free(d1); free(d2); free(rout); free(rloads);
}

/* A capacity no expert reaches (cf = E: cap = N * K) drops nothing: the forward and the backward
 * are bit-identical to the dropless op's (the same rows in the same GEMMs). */
static void check_cap_large(void) {
    int N = 10, C = 6, E = 4, K = 2, H = 5;
    moe_shape s0 = {N, C, E, K, H, 1, 0.02f, 0, 0, 0, NULL}, s1 = s0;
    s1.capacity = (float)E;
    long nin = (long)N * C, nwr = (long)E * C, nw = (long)E * 3 * H * C;
    float *inp = xalloc(4 * nin), *wr = xalloc(4 * nwr), *w = xalloc(4 * nw), *R = xalloc(4 * nin);
    for (long i = 0; i < nin; i++) inp[i] = rng_uniform(-1, 1), R[i] = rng_uniform(-1, 1);
    for (long i = 0; i < nwr; i++) wr[i] = rng_uniform(-1, 1);
    for (long i = 0; i < nw; i++) w[i] = rng_uniform(-0.5f, 0.5f);
    float *out[2], *g[2], aux[2];
    int same_topi = 1;
    int *ti0 = NULL;
    for (int v = 0; v < 2; v++) {
        const moe_shape *s = v ? &s1 : &s0;
        float *probs = xalloc(4L * N * E), *topw = xalloc(4L * N * K), *ws = xalloc(4 * op_moe_ws_floats(s));
        int *topi = xalloc(4L * N * K), *rows = xalloc(8L * N);
        out[v] = xalloc(4 * nin);
        g[v] = xalloc(4 * (nin + nwr + nw));
        op_moe_fwd(out[v], probs, topi, topw, NULL, &aux[v], inp, wr, w, w + (long)E * 2 * H * C, s, ws, rows);
        op_moe_bwd(g[v], g[v] + nin, g[v] + nin + nwr, g[v] + nin + nwr + (long)E * 2 * H * C, R, 3.0f, inp, wr, w,
                   w + (long)E * 2 * H * C, probs, topi, topw, s, ws, rows);
        if (v) same_topi = !memcmp(ti0, topi, 4L * N * K);
        free(probs); free(topw); free(ws); free(rows);
        if (v) free(topi), free(ti0);
        else ti0 = topi;
    }
    check(same_topi && !memcmp(out[0], out[1], 4 * nin) && aux[0] == aux[1] && !memcmp(g[0], g[1], 4 * (nin + nwr + nw)),
          "capacity N*K (cf = E) = dropless", "routing, output, aux and all gradients bit-identical");
    free(inp); free(wr); free(w); free(R);
    for (int v = 0; v < 2; v++) free(out[v]), free(g[v]);
}

static void run_case_cf(const char *name, int N, int C, int E, int K, int H, int norm_topk, float cf) {
    run_case_all(name, N, C, E, K, H, norm_topk, cf, 0, 0, NULL);
}
static void run_case(const char *name, int N, int C, int E, int K, int H, int norm_topk) {
    run_case_all(name, N, C, E, K, H, norm_topk, 0, 0, 0, NULL);
}

/* DeepSeek-V3's aux-loss-free bias: the update's arithmetic, then on a skewed batch (every token
 * leans to expert 0) 60 steps of route -> loads -> update move the loads toward balance. */
static void check_bias_update(void) {
    float b[4] = {0, 0, 0, 0};
    const double l1[4] = {10, 2, 2, 2}, l2[4] = {4, 4, 4, 4};
    op_moe_bias_update(b, l1, 4, 0.01f);
    int ok = b[0] == -0.01f && b[1] == 0.01f && b[2] == 0.01f && b[3] == 0.01f;
    op_moe_bias_update(b, l2, 4, 0.01f);
    ok &= b[0] == -0.01f && b[1] == 0.01f; /* load == mean: sign 0, unchanged */
    check(ok, "aux-free bias update", "loads {10,2,2,2}: bias {%g, %g, %g, %g} (u = 0.01); balanced loads leave it", b[0], b[1], b[2], b[3]);

    int N = 64, C = 8, E = 4, K = 2;
    float *inp = xalloc(4L * N * C), *wr = xalloc(4L * E * C), *probs = xalloc(4L * N * E), *topw = xalloc(4L * N * K);
    int *topi = xalloc(4L * N * K), loads[4];
    for (long i = 0; i < (long)N * C; i++) inp[i] = rng_uniform(-1, 1) + (i % C == 0 ? 1.0f : 0.0f);
    for (long i = 0; i < (long)E * C; i++) wr[i] = rng_uniform(-0.3f, 0.3f);
    wr[0] = 2.5f; /* expert 0's logit follows the shared input component */
    float bias[4] = {0, 0, 0, 0};
    moe_shape s = {N, C, E, K, 8, 1, 0, 0, 0, 1, bias};
    double first = 0, last = 0;
    for (int it = 0; it <= 60; it++) {
        op_moe_route(probs, topi, topw, loads, NULL, inp, wr, &s);
        double mx = 0, ld[4];
        for (int e = 0; e < E; e++) mx = loads[e] > mx ? loads[e] : mx, ld[e] = loads[e];
        double imb = mx / ((double)N * K / E);
        if (it == 0) first = imb;
        if (it >= 51) last += imb / 10; /* mean over the last 10 (the sign update oscillates by u) */
        op_moe_bias_update(bias, ld, E, 0.02f);
    }
    check(first > 1.5 && last < first - 0.5 && bias[0] < 0, "aux-free bias balances a skewed batch",
          "max/mean load %.2f before, %.2f over steps 51-60 (u = 0.02); bias {%.2f, %.2f, %.2f, %.2f}", first, last, bias[0],
          bias[1], bias[2], bias[3]);
    free(inp); free(wr); free(probs); free(topw); free(topi);
}

int main(void) {
    run_case("N7 C13 E4 k2 H9 norm", 7, 13, 4, 2, 9, 1);
    run_case("N11 C6 E5 k3 H5 no-norm", 11, 6, 5, 3, 5, 0);
    run_case("N9 C10 E3 k1 H7 norm", 9, 10, 3, 1, 7, 1);
    run_case("N5 C7 E6 k2 H4", 5, 7, 6, 2, 4, 1);
    run_case("N3 C5 E8 k1 H3 (idle experts)", 3, 5, 8, 1, 3, 1);
    /* capacity with token dropping: cap = ceil(cf * N * K / E) */
    run_case_cf("N11 C7 E4 k2 H5 norm cf1.0", 11, 7, 4, 2, 5, 1, 1.0f);   /* cap 6 */
    run_case_cf("N13 C6 E5 k3 H4 no-norm cf1.0", 13, 6, 5, 3, 4, 0, 1.0f); /* cap 8 */
    run_case_cf("N12 C6 E4 k2 H4 norm cf0.75", 12, 6, 4, 2, 4, 1, 0.75f); /* cap 5: >= 4 dropped */
    run_case_cf("N9 C8 E3 k1 H6 norm cf0.5", 9, 8, 3, 1, 6, 1, 0.5f);     /* cap 2: >= 3 dropped */
    check_cap_large();
    /* shared experts (Hs = n_shared x H): their ws1/ws2 gradients are in "d w2" */
    run_case_all("N7 C6 E4 k2 H4 norm shared Hs8", 7, 6, 4, 2, 4, 1, 0, 8, 0, NULL);
    run_case_all("N12 C5 E4 k2 H3 cf0.75 shared Hs3", 12, 5, 4, 2, 3, 1, 0.75f, 3, 0, NULL);
    /* the sigmoid router (DeepSeek-V3), without and with a selection bias that changes the choice */
    static const float bias5[5] = {0.3f, -0.2f, 0.05f, 0.0f, -0.4f}, bias4[4] = {-0.25f, 0.1f, 0.2f, 0.0f};
    run_case_all("N9 C7 E5 k2 H4 sigmoid norm", 9, 7, 5, 2, 4, 1, 0, 0, 1, NULL);
    run_case_all("N9 C7 E5 k2 H4 sigmoid norm bias", 9, 7, 5, 2, 4, 1, 0, 0, 1, bias5);
    run_case_all("N10 C6 E4 k3 H3 sigmoid no-norm bias shared Hs3", 10, 6, 4, 3, 3, 0, 0, 3, 1, bias4);
    check_bias_update();
    return hyp_test_finish();
}
