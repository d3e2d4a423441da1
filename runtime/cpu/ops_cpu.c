/* ops_cpu.c — the CPU backend's kernels (the contract, shapes and conventions are in ops_cpu.h).
 *
 * How the work is spread:
 *   - matmuls go to oneDNN's dnnl_sgemm, which runs its own OpenMP team; we never call it from
 *     inside an omp region (no nesting);
 *   - row-wise ops (norms, cross-entropy, embedding forward) run `omp parallel for` over rows and
 *     vectorize inside a row (`omp simd` on reductions: without -ffast-math gcc will not reorder
 *     a float sum on its own, and `omp simd reduction` is how we allow it, explicitly);
 *   - reductions over rows into a parameter gradient (dweight, dbias, dwte) are parallelized over
 *     column blocks instead, each thread owning whole columns and summing rows in order 0..N-1:
 *     no atomics, no per-thread partial buffers, and results independent of the thread count;
 *   - attention is parallel over (b, h, block of query rows) (its backward's dk/dv part over
 *     (b, kv head, block of key rows), because the query heads of a group all write the same
 *     dk/dv rows), with register-tiled kernels (see the attention section).
 * Every output is computed by one thread in a fixed order, so results are bitwise identical
 * whatever the number of threads (test_ops_gradcheck checks it), except the matmuls (oneDNN's
 * blocking may depend on the thread count).
 *
 * exp() is our own 16-lane hyp_expv below: glibc's expf/tanhf are only vectorized under
 * -ffast-math, and the classifier alone does N*V exps per step (2048 * 50257 ~ 1e8 for gpt2-124m).
 */
#include "ops_cpu.h"

/* The build uses -std=c11 (no GNU extensions), under which gcc defaults to -ffp-contract=off:
 * no a*b+c is fused into an FMA, which halves the throughput of every multiply-add loop here
 * (and FMA rounds once instead of twice, so it is also the more accurate choice). */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("fp-contract=fast")
#elif defined(__clang__)
#pragma clang fp contract(fast)
#endif

#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include <oneapi/dnnl/dnnl.h>

/* Element counts below which an elementwise op stays on one thread: forking a team costs a few
 * microseconds, more than adding up 32K floats. */
#define HYP_PAR_MIN 32768L
/* Column block of the column-parallel reductions: 64 floats = 4 cache lines, so two threads
 * share at most the one line at a block boundary (none when the array is 64-byte aligned). */
#define HYP_CBLK 64

/* ------------------------------------------------------------------------------------------ */
/* Error record (see op_cpu_check in ops_cpu.h). */

static atomic_int g_op_status;  /* 0 = ok, else the first dnnl_status_t that failed */
static char g_op_where[160];    /* written only by the caller that won the compare-exchange */

static void record_failure(const char *where, int status) {
    int expected = 0;
    if (atomic_compare_exchange_strong(&g_op_status, &expected, status)) {
        snprintf(g_op_where, sizeof g_op_where, "%s", where);
    }
}

void op_cpu_fail(const char *where) { record_failure(where, (int)dnnl_out_of_memory); }

void op_cpu_fail_status(const char *where, int status) { record_failure(where, status ? status : (int)dnnl_runtime_error); }

int op_cpu_check(hyp_err *e) {
    int st = atomic_exchange(&g_op_status, 0);
    if (st == 0) return HYP_OK;
    return hyp_fail(e, HYP_EFAIL,
                    "ops_cpu: oneDNN sgemm failed in %s (dnnl_status_t %d: %s) — "
                    "check free memory and the model shapes",
                    g_op_where, st,
                    st == dnnl_out_of_memory ? "out of memory"
                    : st == dnnl_invalid_arguments ? "invalid arguments" : "internal error");
}

/* C[M,N] = alpha * op(A) op(B) + beta * C, row-major, via oneDNN. */
static void sgemm(const char *where, char ta, char tb, long M, long N, long K, float alpha,
                  const float *A, long lda, const float *B, long ldb, float beta, float *C,
                  long ldc) {
    if (M <= 0 || N <= 0) return;
    if (K <= 0) {
        /* nothing to multiply: C = beta * C (beta is 0 or 1 here) */
        if (beta == 0.0f) {
            for (long i = 0; i < M; i++) memset(C + i * ldc, 0, (size_t)N * sizeof(float));
        }
        return;
    }
    dnnl_status_t st = dnnl_sgemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    if (st != dnnl_success) record_failure(where, (int)st);
}

void op_sgemm(const char *where, char ta, char tb, long M, long N, long K, float alpha, const float *A, long lda,
              const float *B, long ldb, float beta, float *C, long ldc) {
    sgemm(where, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

/* ------------------------------------------------------------------------------------------ */
/* ------------------------------------------------------------------------------------------ */
/* Vectors. GCC/Clang vector extensions (portable C, no ISA intrinsics: the compiler lowers them
 * to whatever SIMD the target has). 16 floats = one AVX-512 register. We use them where gcc's
 * auto-vectorizer is unreliable without -ffast-math (max reductions, exp) or picks 256-bit
 * vectors on AVX-512 machines (gcc's default -mprefer-vector-width=256 there). */

typedef float vf __attribute__((vector_size(64)));
typedef int32_t vi __attribute__((vector_size(64)));
typedef float vf_u __attribute__((vector_size(64), aligned(4))); /* for unaligned access */
#define VW 16

static inline vf vf_load(const float *p) { return *(const vf_u *)p; }
static inline void vf_store(float *p, vf v) { *(vf_u *)p = v; }
static inline vf vf_splat(float x) { return (vf){x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x}; }
/* first n < VW lanes from p, the others = pad */
static inline vf vf_load_part(const float *p, int n, float pad) {
    float tmp[VW];
    for (int l = 0; l < VW; l++) tmp[l] = l < n ? p[l] : pad;
    return vf_load(tmp);
}
static inline void vf_store_part(float *p, vf v, int n) {
    float tmp[VW];
    vf_store(tmp, v);
    for (int l = 0; l < n; l++) p[l] = tmp[l];
}
/* mask ? a : b, lane by lane (mask lanes are all ones or all zeros, as comparisons give) */
static inline vf vf_select(vi mask, vf a, vf b) { return (vf)((mask & (vi)a) | (~mask & (vi)b)); }
static inline vf vf_max(vf a, vf b) { return vf_select(a > b, a, b); }
static inline float vf_hsum(vf v) {
    float s = 0.0f;
    for (int l = 0; l < VW; l++) s += v[l];
    return s;
}
static inline float vf_hmax(vf v) {
    float m = v[0];
    for (int l = 1; l < VW; l++) m = v[l] > m ? v[l] : m;
    return m;
}

/* exp, 16 lanes at once. Cephes expf: x = n*ln2 + r with |r| <= ln2/2 (Cody-Waite split of ln2
 * so n*ln2_hi is exact), exp(r) by a degree-7 polynomial, times 2^n built in the exponent bits.
 * Max relative error ~1e-7 (checked against exp() in double by the tests' forward checks).
 * Range: x < -69 gives 0 and x > 69 gives exp(69) ~ 9e29. Our callers only need that (softmax
 * feeds x - max <= 0; sigmoid 1/(1+e^-x) is 0 or 1 to float precision beyond |x| = 69), and it
 * keeps every result, and the products formed with it (probability * dloss, x * sigmoid), out of
 * the denormal range: on x86 without flush-to-zero each denormal costs ~100 cycles, which made
 * GELU 30x slower on large pre-activations. NaN in, NaN out. glibc's expf/tanhf are vectorized
 * only under -ffast-math, and the classifier alone does N*V exps per step (2048 * 50257 ~ 1e8
 * for gpt2-124m). */
static inline vf hyp_expv(vf x) {
    const vf hi = vf_splat(69.0f), lo = vf_splat(-69.0f);
    vf xc = vf_select(x < lo, lo, x);
    xc = vf_select(xc > hi, hi, xc);
    const float magic = 12582912.0f; /* 1.5 * 2^23: (y + magic) - magic rounds y to an integer */
    vf fn = (xc * 1.44269504088896341f + magic) - magic;
    vf r = xc - fn * 0.693359375f; /* ln2_hi: few mantissa bits, so fn * ln2_hi is exact */
    r = r - fn * -2.12194440e-4f;  /* ln2_lo = ln2 - ln2_hi */
    vf z = r * r;
    vf p = r * 1.9875691500E-4f + 1.3981999507E-3f;
    p = p * r + 8.3334519073E-3f;
    p = p * r + 4.1665795894E-2f;
    p = p * r + 1.6666665459E-1f;
    p = p * r + 5.0000001201E-1f;
    vf y = p * z + r + 1.0f;
    vi pow2n = (__builtin_convertvector(fn, vi) + 127) << 23;
    y = y * (vf)pow2n;
    return vf_select(x < lo, vf_splat(0.0f), y);
}

/* sigmoid(x) = 1 / (1 + e^-x): exact limits 0 and 1 for large |x|. */
static inline vf hyp_sigmoidv(vf x) { return 1.0f / (1.0f + hyp_expv(-x)); }

/* max of x[0..n) (n >= 1). A NaN is never selected by the compare; callers' exp(x - max) then
 * turns it into a NaN sum, so it still shows. */
static float row_max(const float *x, int n) {
    vf m = vf_splat(-INFINITY);
    int i = 0;
    for (; i + VW <= n; i += VW) m = vf_max(vf_load(x + i), m);
    if (i < n) m = vf_max(vf_load_part(x + i, n - i, -INFINITY), m);
    return vf_hmax(m);
}

/* sum of exp(x[i] - m) over i < n, in 16 lane partial sums (each adds ~n/16 terms <= 1) that
 * are then added in a fixed order. row_exp_inplace also writes x[i] := exp(x[i] - m). */
static float row_exp_sum(const float *x, int n, float m) {
    vf acc = vf_splat(0.0f), vm = vf_splat(m);
    int i = 0;
    for (; i + VW <= n; i += VW) acc += hyp_expv(vf_load(x + i) - vm);
    if (i < n) acc += hyp_expv(vf_load_part(x + i, n - i, -INFINITY) - vm); /* pad: exp(-inf) = 0 */
    return vf_hsum(acc);
}

static float row_exp_inplace(float *x, int n, float m) {
    vf acc = vf_splat(0.0f), vm = vf_splat(m);
    int i = 0;
    for (; i + VW <= n; i += VW) {
        vf e = hyp_expv(vf_load(x + i) - vm);
        vf_store(x + i, e);
        acc += e;
    }
    if (i < n) {
        vf e = hyp_expv(vf_load_part(x + i, n - i, -INFINITY) - vm);
        vf_store_part(x + i, e, n - i);
        acc += e;
    }
    return vf_hsum(acc);
}

/* x[0..n) *= s */
static void row_scale(float *x, int n, float s) {
    vf vs = vf_splat(s);
    int i = 0;
    for (; i + VW <= n; i += VW) vf_store(x + i, vf_load(x + i) * vs);
    for (; i < n; i++) x[i] *= s;
}

/* ------------------------------------------------------------------------------------------ */
/* Embedding */

void op_embedding_fwd(float *out, const int32_t *tokens, const float *wte, const float *wpe,
                      int B, int T, int C) {
    op_embedding_fwd_pos(out, tokens, wte, wpe, NULL, B, T, C);
}

void op_embedding_fwd_pos(float *out, const int32_t *tokens, const float *wte, const float *wpe,
                          const int32_t *positions, int B, int T, int C) {
    // out [B,T,C], tokens [B,T], wte [V,C], wpe [maxT,C] or NULL, positions [B,T] or NULL (= t)
    long N = (long)B * T;
#pragma omp parallel for schedule(static) if (N * C >= HYP_PAR_MIN)
    for (long n = 0; n < N; n++) {
        int t = positions ? positions[n] : (int)(n % T);
        float *o = out + n * C;
        const float *we = wte + (long)tokens[n] * C;
        if (wpe) {
            const float *pe = wpe + (long)t * C;
            for (int c = 0; c < C; c++) o[c] = we[c] + pe[c];
        } else {
            memcpy(o, we, (size_t)C * sizeof(float));
        }
    }
}

void op_embedding_bwd(float *dwte, float *dwpe, const float *dout, const int32_t *tokens,
                      int B, int T, int C, int V) {
    op_embedding_bwd_pos(dwte, dwpe, dout, tokens, NULL, B, T, C, V);
}

void op_embedding_bwd_pos(float *dwte, float *dwpe, const float *dout, const int32_t *tokens,
                          const int32_t *positions, int B, int T, int C, int V) {
    // dwte [V,C], dwpe [maxT,C] or NULL, dout [B,T,C]
    // Deterministic scatter-add: every thread owns a block of channels [c0, c0+64) of ALL rows
    // of dwte and walks the tokens in order n = 0..N-1, so each dwte[v,c] receives its
    // contributions in the same order whatever the thread count, with no atomics.
    // Tokens outside [0, V) are skipped (the forward would have read out of bounds anyway).
    long N = (long)B * T;
    int nblk = (C + HYP_CBLK - 1) / HYP_CBLK;
    if (dwte) {
#pragma omp parallel for schedule(static) if (N * C >= HYP_PAR_MIN)
        for (int blk = 0; blk < nblk; blk++) {
            int c0 = blk * HYP_CBLK, c1 = c0 + HYP_CBLK < C ? c0 + HYP_CBLK : C;
            for (long n = 0; n < N; n++) {
                int32_t tok = tokens[n];
                if (tok < 0 || tok >= V) continue;
                float *dw = dwte + (long)tok * C;
                const float *d = dout + n * C;
                for (int c = c0; c < c1; c++) dw[c] += d[c];
            }
        }
    }
    if (dwpe && positions) {
        // v2126: dwpe[p] += sum of dout[b,t] with positions[b,t] = p. Parallel over channel
        // blocks, tokens walked in order: a fixed summation order whatever the thread count.
#pragma omp parallel for schedule(static) if (N * C >= HYP_PAR_MIN)
        for (int blk = 0; blk < nblk; blk++) {
            int c0 = blk * HYP_CBLK, c1 = c0 + HYP_CBLK < C ? c0 + HYP_CBLK : C;
            for (long n = 0; n < N; n++) {
                float *dp = dwpe + (long)positions[n] * C;
                const float *d = dout + n * C;
                for (int c = c0; c < c1; c++) dp[c] += d[c];
            }
        }
    } else if (dwpe) {
        // dwpe[t] += sum_b dout[b,t]: parallel over t, b summed in order
#pragma omp parallel for schedule(static) if (N * C >= HYP_PAR_MIN)
        for (int t = 0; t < T; t++) {
            float *dp = dwpe + (long)t * C;
            for (int b = 0; b < B; b++) {
                const float *d = dout + ((long)b * T + t) * C;
                for (int c = 0; c < C; c++) dp[c] += d[c];
            }
        }
    }
}

/* ------------------------------------------------------------------------------------------ */
/* LayerNorm: out = (x - mean) * rstd * w + b, rstd = 1/sqrt(var + eps), biased variance. */

void op_layernorm_fwd(float *out, float *mean, float *rstd, const float *inp, const float *w,
                      const float *b, int N, int C, float eps) {
    // out, inp [N,C]; mean, rstd [N]; w, b [C]
#pragma omp parallel for schedule(static) if ((long)N * C >= HYP_PAR_MIN)
    for (int n = 0; n < N; n++) {
        const float *x = inp + (long)n * C;
        float *o = out + (long)n * C;
        // two passes (mean, then variance of x - mean): no cancellation from E[x^2] - E[x]^2.
        // The mean's sum is in double: a float sum of an offset row loses ~sqrt(C) ulps of the
        // sum, and how many depends on whether the compiler vectorized the loop.
        double s = 0.0;
#pragma omp simd reduction(+ : s)
        for (int c = 0; c < C; c++) s += x[c];
        float m = (float)(s / C);
        float v = 0.0f;
#pragma omp simd reduction(+ : v)
        for (int c = 0; c < C; c++) {
            float d = x[c] - m;
            v += d * d;
        }
        float r = 1.0f / sqrtf(v / C + eps);
        if (b) {
            for (int c = 0; c < C; c++) o[c] = (x[c] - m) * r * w[c] + b[c];
        } else {
            for (int c = 0; c < C; c++) o[c] = (x[c] - m) * r * w[c];
        }
        if (mean) mean[n] = m;
        rstd[n] = r;
    }
}

void op_layernorm_bwd(float *dinp, float *dw, float *db, const float *dout, const float *inp,
                      const float *w, const float *mean, const float *rstd, int N, int C) {
    // dinp, dout, inp [N,C]; dw, db, w [C]; mean, rstd [N]
    // With xhat = (x - mean) * rstd and g = dout * w (the gradient w.r.t. xhat):
    //   dx = rstd * (g - mean_c(g) - xhat * mean_c(g * xhat))
    //   dw += sum_n dout * xhat,   db += sum_n dout
    if (dinp) {
#pragma omp parallel for schedule(static) if ((long)N * C >= HYP_PAR_MIN)
        for (int n = 0; n < N; n++) {
            const float *x = inp + (long)n * C;
            const float *d = dout + (long)n * C;
            float *dx = dinp + (long)n * C;
            float m = mean[n], r = rstd[n];
            float sg = 0.0f, sgx = 0.0f;
#pragma omp simd reduction(+ : sg, sgx)
            for (int c = 0; c < C; c++) {
                float g = d[c] * w[c];
                sg += g;
                sgx += g * (x[c] - m) * r;
            }
            sg /= C;
            sgx /= C;
            for (int c = 0; c < C; c++) {
                float g = d[c] * w[c];
                dx[c] += r * (g - sg - (x[c] - m) * r * sgx);
            }
        }
    }
    if (dw || db) {
        int nblk = (C + HYP_CBLK - 1) / HYP_CBLK;
#pragma omp parallel for schedule(static) if ((long)N * C >= HYP_PAR_MIN)
        for (int blk = 0; blk < nblk; blk++) {
            int c0 = blk * HYP_CBLK, len = C - c0 < HYP_CBLK ? C - c0 : HYP_CBLK;
            float aw[HYP_CBLK] = {0}, ab[HYP_CBLK] = {0};
            for (int n = 0; n < N; n++) {
                const float *x = inp + (long)n * C + c0;
                const float *d = dout + (long)n * C + c0;
                float m = mean[n], r = rstd[n];
                for (int c = 0; c < len; c++) {
                    aw[c] += d[c] * (x[c] - m) * r;
                    ab[c] += d[c];
                }
            }
            if (dw) for (int c = 0; c < len; c++) dw[c0 + c] += aw[c];
            if (db) for (int c = 0; c < len; c++) db[c0 + c] += ab[c];
        }
    }
}

/* ------------------------------------------------------------------------------------------ */
/* RMSNorm: out = x * rstd * w, rstd = 1/sqrt(mean(x^2) + eps). */

void op_rmsnorm_fwd(float *out, float *rstd, const float *inp, const float *w, int N, int C,
                    float eps) {
    // out, inp [N,C]; rstd [N]; w [C]
#pragma omp parallel for schedule(static) if ((long)N * C >= HYP_PAR_MIN)
    for (int n = 0; n < N; n++) {
        const float *x = inp + (long)n * C;
        float *o = out + (long)n * C;
        float ss = 0.0f;
#pragma omp simd reduction(+ : ss)
        for (int c = 0; c < C; c++) ss += x[c] * x[c];
        float r = 1.0f / sqrtf(ss / C + eps);
        for (int c = 0; c < C; c++) o[c] = x[c] * r * w[c];
        rstd[n] = r;
    }
}

void op_rmsnorm_bwd(float *dinp, float *dw, const float *dout, const float *inp, const float *w,
                    const float *rstd, int N, int C) {
    // dinp, dout, inp [N,C]; dw, w [C]; rstd [N]
    // With xhat = x * rstd and g = dout * w:  dx = rstd * (g - xhat * mean_c(g * xhat)),
    // dw += sum_n dout * xhat.
    if (dinp) {
#pragma omp parallel for schedule(static) if ((long)N * C >= HYP_PAR_MIN)
        for (int n = 0; n < N; n++) {
            const float *x = inp + (long)n * C;
            const float *d = dout + (long)n * C;
            float *dx = dinp + (long)n * C;
            float r = rstd[n];
            float sgx = 0.0f;
#pragma omp simd reduction(+ : sgx)
            for (int c = 0; c < C; c++) sgx += d[c] * w[c] * x[c];
            sgx = sgx * r / C;
            for (int c = 0; c < C; c++) dx[c] += r * (d[c] * w[c] - x[c] * r * sgx);
        }
    }
    if (dw) {
        int nblk = (C + HYP_CBLK - 1) / HYP_CBLK;
#pragma omp parallel for schedule(static) if ((long)N * C >= HYP_PAR_MIN)
        for (int blk = 0; blk < nblk; blk++) {
            int c0 = blk * HYP_CBLK, len = C - c0 < HYP_CBLK ? C - c0 : HYP_CBLK;
            float aw[HYP_CBLK] = {0};
            for (int n = 0; n < N; n++) {
                const float *x = inp + (long)n * C + c0;
                const float *d = dout + (long)n * C + c0;
                float r = rstd[n];
                for (int c = 0; c < len; c++) aw[c] += d[c] * x[c] * r;
            }
            for (int c = 0; c < len; c++) dw[c0 + c] += aw[c];
        }
    }
}

/* ------------------------------------------------------------------------------------------ */
/* Matmul (nn.Linear): out = inp @ w^T + bias. */

void op_matmul_fwd(float *out, const float *inp, const float *w, const float *bias, int N, int IC,
                   int OC) {
    // out [N,OC], inp [N,IC], w [OC,IC], bias [OC] or NULL
    float beta = 0.0f;
    if (bias) {
        // broadcast the bias into out, then let the GEMM accumulate on top (beta = 1): one write
        // pass instead of a read-modify-write pass after the GEMM
#pragma omp parallel for schedule(static) if ((long)N * OC >= HYP_PAR_MIN)
        for (int n = 0; n < N; n++) memcpy(out + (long)n * OC, bias, (size_t)OC * sizeof(float));
        beta = 1.0f;
    }
    // out[N,OC] = inp[N,IC] @ (w[OC,IC])^T
    sgemm("op_matmul_fwd", 'N', 'T', N, OC, IC, 1.0f, inp, IC, w, IC, beta, out, OC);
}

void op_matmul_bwd(float *dinp, float *dw, float *dbias, const float *dout, const float *inp,
                   const float *w, int N, int IC, int OC) {
    // dinp [N,IC], dw [OC,IC], dbias [OC], dout [N,OC], inp [N,IC], w [OC,IC]
    if (dinp) {
        // dinp[N,IC] += dout[N,OC] @ w[OC,IC]
        sgemm("op_matmul_bwd (dinp)", 'N', 'N', N, IC, OC, 1.0f, dout, OC, w, IC, 1.0f, dinp, IC);
    }
    if (dw) {
        // dw[OC,IC] += dout[N,OC]^T @ inp[N,IC]
        sgemm("op_matmul_bwd (dweight)", 'T', 'N', OC, IC, N, 1.0f, dout, OC, inp, IC, 1.0f, dw,
              IC);
    }
    if (dbias) {
        // dbias[o] += sum_n dout[n,o]: column blocks, rows summed in order (deterministic)
        int nblk = (OC + HYP_CBLK - 1) / HYP_CBLK;
#pragma omp parallel for schedule(static) if ((long)N * OC >= HYP_PAR_MIN)
        for (int blk = 0; blk < nblk; blk++) {
            int o0 = blk * HYP_CBLK, len = OC - o0 < HYP_CBLK ? OC - o0 : HYP_CBLK;
            float acc[HYP_CBLK] = {0};
            for (int n = 0; n < N; n++) {
                const float *d = dout + (long)n * OC + o0;
                for (int o = 0; o < len; o++) acc[o] += d[o];
            }
            for (int o = 0; o < len; o++) dbias[o0 + o] += acc[o];
        }
    }
}

/* ------------------------------------------------------------------------------------------ */
/* QK-norm: RMSNorm over hd of each q head (weights qw) and each k head (weights kw). */

void op_qknorm_fwd(float *out, float *rstd, const float *inp, const float *qw, const float *kw,
                   int N, int NH, int NKV, int hd, float eps) {
    // out, inp [N, (NH+2*NKV)*hd]; rstd [N, NH+NKV]; qw, kw [hd]
    int R = (NH + 2 * NKV) * hd; // row stride
    int NQK = NH + NKV;          // normalized heads per row
#pragma omp parallel for schedule(static) if ((long)N * R >= HYP_PAR_MIN)
    for (int n = 0; n < N; n++) {
        const float *xr = inp + (long)n * R;
        float *orow = out + (long)n * R;
        for (int j = 0; j < NQK; j++) {
            const float *x = xr + j * hd;
            float *o = orow + j * hd;
            const float *w = j < NH ? qw : kw;
            float ss = 0.0f;
#pragma omp simd reduction(+ : ss)
            for (int i = 0; i < hd; i++) ss += x[i] * x[i];
            float r = 1.0f / sqrtf(ss / hd + eps);
            for (int i = 0; i < hd; i++) o[i] = x[i] * r * w[i];
            rstd[(long)n * NQK + j] = r;
        }
        // v heads pass through
        memcpy(orow + NQK * hd, xr + NQK * hd, (size_t)NKV * hd * sizeof(float));
    }
}

void op_qknorm_bwd(float *dinp, float *dqw, float *dkw, const float *dout, const float *inp,
                   const float *qw, const float *kw, const float *rstd, int N, int NH, int NKV,
                   int hd) {
    // dinp, dout, inp [N, (NH+2*NKV)*hd]; dqw, dkw, qw, kw [hd]; rstd [N, NH+NKV]
    // Per head, the RMSNorm backward: dx = r * (g - xhat * mean_i(g * xhat)), g = dout * w.
    int R = (NH + 2 * NKV) * hd;
    int NQK = NH + NKV;
    if (dinp) {
#pragma omp parallel for schedule(static) if ((long)N * R >= HYP_PAR_MIN)
        for (int n = 0; n < N; n++) {
            for (int j = 0; j < NQK; j++) {
                const float *x = inp + (long)n * R + j * hd;
                const float *d = dout + (long)n * R + j * hd;
                float *dx = dinp + (long)n * R + j * hd;
                const float *w = j < NH ? qw : kw;
                float r = rstd[(long)n * NQK + j];
                float sgx = 0.0f;
#pragma omp simd reduction(+ : sgx)
                for (int i = 0; i < hd; i++) sgx += d[i] * w[i] * x[i];
                sgx = sgx * r / hd;
                for (int i = 0; i < hd; i++) dx[i] += r * (d[i] * w[i] - x[i] * r * sgx);
            }
            const float *dv = dout + (long)n * R + NQK * hd;
            float *dxv = dinp + (long)n * R + NQK * hd;
            for (int i = 0; i < NKV * hd; i++) dxv[i] += dv[i];
        }
    }
    // dqw[i] += sum over rows and q heads of dout * xhat (dkw likewise over k heads). Parallel
    // over (which weight, block of i): each task owns its outputs and sums rows in order.
    int nblk = (hd + HYP_CBLK - 1) / HYP_CBLK;
#pragma omp parallel for collapse(2) schedule(static) if ((long)N * R >= HYP_PAR_MIN)
    for (int which = 0; which < 2; which++) {
        for (int blk = 0; blk < nblk; blk++) {
            float *dwt = which == 0 ? dqw : dkw;
            if (!dwt) continue;
            int j0 = which == 0 ? 0 : NH, j1 = which == 0 ? NH : NQK;
            int i0 = blk * HYP_CBLK, len = hd - i0 < HYP_CBLK ? hd - i0 : HYP_CBLK;
            float acc[HYP_CBLK] = {0};
            for (int n = 0; n < N; n++) {
                for (int j = j0; j < j1; j++) {
                    const float *x = inp + (long)n * R + j * hd + i0;
                    const float *d = dout + (long)n * R + j * hd + i0;
                    float r = rstd[(long)n * NQK + j];
                    for (int i = 0; i < len; i++) acc[i] += d[i] * x[i] * r;
                }
            }
            for (int i = 0; i < len; i++) dwt[i0 + i] += acc[i];
        }
    }
}

/* ------------------------------------------------------------------------------------------ */
/* RoPE, Hugging Face rotate_half convention. With half = hd/2 and, for i < half,
 * angle(t, i) = t * theta^(-2i/hd), the pair (x[i], x[i+half]) is rotated by +angle:
 *   y[i]      = x[i] * cos - x[i+half] * sin
 *   y[i+half] = x[i+half] * cos + x[i] * sin
 * The backward applies the inverse rotation (the transpose), i.e. angle -> -angle.
 * cos/sin depend on (t, i) only: we compute them once per t, in double, and reuse them for all
 * b and all heads (chunks of ROPE_CHUNK pairs on the stack, so any hd works without a malloc). */

#define ROPE_CHUNK 128

static void rope_apply(float *out, const float *inp, const int32_t *positions, int accumulate,
                       float sign, int B, int T, int NH, int NKV, int hd, float theta) {
    int R = (NH + 2 * NKV) * hd;
    int NQK = NH + NKV;
    int half = hd / 2;
    double log_theta = log((double)theta);
#pragma omp parallel for schedule(static) if ((long)B * T * R >= HYP_PAR_MIN)
    for (int t = 0; t < T; t++) {
        float cs[ROPE_CHUNK], sn[ROPE_CHUNK];
        for (int i0 = 0; i0 < half; i0 += ROPE_CHUNK) {
            int m = half - i0 < ROPE_CHUNK ? half - i0 : ROPE_CHUNK;
            long have = -1; /* the position cs/sn hold */
            for (int b = 0; b < B; b++) {
                /* v2126: the token's position in its document when given, else t */
                long pos = positions ? positions[(long)b * T + t] : t;
                if (pos != have) {
                    for (int i = 0; i < m; i++) {
                        double ang = (double)pos * exp(-(2.0 * (i0 + i) / hd) * log_theta);
                        cs[i] = (float)cos(ang);
                        sn[i] = sign * (float)sin(ang);
                    }
                    have = pos;
                }
                const float *xr = inp + ((long)b * T + t) * R;
                float *yr = out + ((long)b * T + t) * R;
                for (int j = 0; j < NQK; j++) {
                    const float *x1 = xr + j * hd + i0, *x2 = x1 + half;
                    float *y1 = yr + j * hd + i0, *y2 = y1 + half;
                    if (accumulate) {
                        for (int i = 0; i < m; i++) {
                            float a = x1[i], c = x2[i];
                            y1[i] += a * cs[i] - c * sn[i];
                            y2[i] += c * cs[i] + a * sn[i];
                        }
                    } else {
                        for (int i = 0; i < m; i++) {
                            float a = x1[i], c = x2[i];
                            y1[i] = a * cs[i] - c * sn[i];
                            y2[i] = c * cs[i] + a * sn[i];
                        }
                    }
                }
            }
        }
        // v heads pass through
        for (int b = 0; b < B; b++) {
            const float *xv = inp + ((long)b * T + t) * R + NQK * hd;
            float *yv = out + ((long)b * T + t) * R + NQK * hd;
            if (accumulate) {
                for (int i = 0; i < NKV * hd; i++) yv[i] += xv[i];
            } else {
                memcpy(yv, xv, (size_t)NKV * hd * sizeof(float));
            }
        }
    }
}

void op_rope_fwd_pos(float *out, const float *inp, const int32_t *positions, int B, int T, int NH,
                     int NKV, int hd, float theta) {
    // out, inp [B,T,(NH+2*NKV)*hd]; positions [B,T] or NULL (= t)
    rope_apply(out, inp, positions, 0, 1.0f, B, T, NH, NKV, hd, theta);
}

void op_rope_bwd_pos(float *dinp, const float *dout, const int32_t *positions, int B, int T,
                     int NH, int NKV, int hd, float theta) {
    // dinp, dout [B,T,(NH+2*NKV)*hd]; dinp += R(-angle) dout
    rope_apply(dinp, dout, positions, 1, -1.0f, B, T, NH, NKV, hd, theta);
}

void op_rope_fwd(float *out, const float *inp, int B, int T, int NH, int NKV, int hd, float theta) {
    op_rope_fwd_pos(out, inp, NULL, B, T, NH, NKV, hd, theta);
}

void op_rope_bwd(float *dinp, const float *dout, int B, int T, int NH, int NKV, int hd,
                 float theta) {
    op_rope_bwd_pos(dinp, dout, NULL, B, T, NH, NKV, hd, theta);
}

/* ------------------------------------------------------------------------------------------ */
/* Causal self-attention with grouped-query heads.
 *   score[t,t2] = scale * q_t . k_t2  (t2 <= t),  att = softmax_t2(score),  out_t = sum att * v
 * Query head h uses kv head g = h / (NH/NKV).
 *
 * The two products (Q K^T and P V, and their backward counterparts) are done by two small
 * register-tiled kernels rather than one dot product per (t, t2) pair: a dot product of
 * hd = 64 floats is 8 dependent FMAs plus a horizontal sum, ~8 GFLOP/s per core; a tile keeps
 * 16 accumulators in registers and reuses every load for several FMAs. At gpt2-124m shapes
 * (B=8, T=256, 2 cores) that took the forward from 55 to ~14 ms and the backward from 103 to
 * ~26 ms (~60 GFLOP/s counting only the causal half).
 * oneDNN is not used because the per-(b, h) GEMMs are small (T x T x hd) and, being called
 * outside our parallel region, would each be split over the threads (poor scaling at this size)
 * and could not skip the masked upper triangle.
 * The tiles use GCC/Clang vector extensions (portable: lowered to whatever SIMD the target has). */

#define ATT_QB 8  /* query rows per score tile */
#define ATT_KB 32 /* keys per score tile (2 vectors): 8 x 2 = 16 independent accumulators */
#define ATT_KC 64 /* keys per transposed chunk */
#define ATT_RB 4  /* rows per accumulate tile (x 64 columns = 16 accumulators) */

#if defined(__clang__) || (defined(__GNUC__) && __GNUC__ >= 12)
#define HYP_HAVE_SHUFFLEVECTOR 1
#define SHUF(a, b, ...) __builtin_shufflevector(a, b, __VA_ARGS__)
/* Transposes the 16 x 16 block at Y (row stride ldy) into Yt (row stride ldt): 4 rounds of
 * two-register shuffles (64 shuffles instead of 256 scalar moves). */
static inline void transpose16(float *Yt, long ldt, const float *const *rows, int i0) {
    vf r[16], t[16];
    for (int k = 0; k < 16; k++) r[k] = vf_load(rows[k] + i0);
    for (int k = 0; k < 16; k += 2) { /* interleave 32-bit elements of rows k, k+1 */
        t[k] = SHUF(r[k], r[k + 1], 0, 16, 1, 17, 4, 20, 5, 21, 8, 24, 9, 25, 12, 28, 13, 29);
        t[k + 1] = SHUF(r[k], r[k + 1], 2, 18, 3, 19, 6, 22, 7, 23, 10, 26, 11, 27, 14, 30, 15, 31);
    }
    for (int k = 0; k < 16; k += 4) /* 64-bit pairs */
        for (int m = 0; m < 2; m++) {
            r[k + m] = SHUF(t[k + m], t[k + m + 2], 0, 1, 16, 17, 4, 5, 20, 21, 8, 9, 24, 25, 12, 13,
                            28, 29);
            r[k + m + 2] = SHUF(t[k + m], t[k + m + 2], 2, 3, 18, 19, 6, 7, 22, 23, 10, 11, 26, 27,
                                14, 15, 30, 31);
        }
    for (int k = 0; k < 16; k += 8) /* 128-bit quarters */
        for (int m = 0; m < 4; m++) {
            t[k + m] = SHUF(r[k + m], r[k + m + 4], 0, 1, 2, 3, 16, 17, 18, 19, 8, 9, 10, 11, 24, 25,
                            26, 27);
            t[k + m + 4] = SHUF(r[k + m], r[k + m + 4], 4, 5, 6, 7, 20, 21, 22, 23, 12, 13, 14, 15,
                                28, 29, 30, 31);
        }
    for (int m = 0; m < 8; m++) { /* 256-bit halves */
        r[m] = SHUF(t[m], t[m + 8], 0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23);
        r[m + 8] = SHUF(t[m], t[m + 8], 8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31);
    }
    /* r[k] now holds column c(k) = k with bits 0 and 1 swapped */
    for (int k = 0; k < 16; k++) {
        int c = (k & ~3) | ((k & 1) << 1) | ((k >> 1) & 1);
        vf_store(Yt + (long)(i0 + c) * ldt, r[k]);
    }
}
#endif

/* Transposes Y rows [j0, j0 + ATT_KC), columns [0, hd) (row stride ldy) into Yt[hd][ATT_KC].
 * Rows >= T are read as row T-1: the tiles never store scores for keys >= T. */
static void att_transpose_chunk(float *Yt, const float *Y, long ldy, int j0, int T, int hd) {
    for (int jb = 0; jb < ATT_KC; jb += 16) {
        const float *rows[16];
        for (int k = 0; k < 16; k++) {
            int j = j0 + jb + k < T ? j0 + jb + k : T - 1;
            rows[k] = Y + (long)j * ldy;
        }
        int i = 0;
#ifdef HYP_HAVE_SHUFFLEVECTOR
        for (; i + 16 <= hd; i += 16) transpose16(Yt + jb, ATT_KC, rows, i);
#endif
        for (; i < hd; i++)
            for (int k = 0; k < 16; k++) Yt[(long)i * ATT_KC + jb + k] = rows[k][i];
    }
}

/* S[r][c] (+)= alpha * X_r . Y_c for rows r < nrows of a tile starting at X (row stride ldx) and
 * the ATT_KB keys starting at column jj of the transposed chunk Yt (hd dims); writes (or, with
 * accumulate, adds to) columns [0, ncols) of the rows of S (row stride lds). Rows past nrows
 * re-read the last valid row and are not stored. */
static void att_score_tile(float *S, long lds, int nrows, int ncols, const float *X, long ldx,
                           const float *Yt, int jj, int hd, float alpha, int accumulate) {
    const float *xr[ATT_QB];
    for (int r = 0; r < ATT_QB; r++) xr[r] = X + (long)(r < nrows ? r : nrows - 1) * ldx;
    vf acc0[ATT_QB], acc1[ATT_QB];
    for (int r = 0; r < ATT_QB; r++) { acc0[r] = vf_splat(0.0f); acc1[r] = vf_splat(0.0f); }
    for (int i = 0; i < hd; i++) {
        vf y0 = vf_load(Yt + i * ATT_KC + jj), y1 = vf_load(Yt + i * ATT_KC + jj + VW);
        for (int r = 0; r < ATT_QB; r++) {
            vf x = vf_splat(xr[r][i]);
            acc0[r] += x * y0;
            acc1[r] += x * y1;
        }
    }
    vf va = vf_splat(alpha);
    if (ncols == ATT_KB) { /* full tile: straight vector stores */
        for (int r = 0; r < nrows; r++) {
            float *srow = S + r * lds;
            if (accumulate) {
                vf_store(srow, vf_load(srow) + acc0[r] * va);
                vf_store(srow + VW, vf_load(srow + VW) + acc1[r] * va);
            } else {
                vf_store(srow, acc0[r] * va);
                vf_store(srow + VW, acc1[r] * va);
            }
        }
        return;
    }
    for (int r = 0; r < nrows; r++) { /* partial tile (diagonal or the last columns) */
        float tmp[ATT_KB];
        vf_store(tmp, acc0[r] * va);
        vf_store(tmp + VW, acc1[r] * va);
        if (accumulate) {
            for (int c = 0; c < ncols; c++) S[r * lds + c] += tmp[c];
        } else {
            for (int c = 0; c < ncols; c++) S[r * lds + c] = tmp[c];
        }
    }
}

/* O[r][:] += sum_{s in [s0, s1)} A[r*ars + s*acs] * Y[s][:], for r < nrows (<= ATT_RB), hd
 * columns; Y row stride ldy, O row stride ldo. Register tile: ATT_RB rows x 64 columns. */
static void att_accum_tile(float *O, long ldo, int nrows, const float *A, long ars, long acs,
                           int s0, int s1, const float *Y, long ldy, int hd) {
    const float *ar[ATT_RB];
    for (int r = 0; r < ATT_RB; r++) ar[r] = A + (long)(r < nrows ? r : nrows - 1) * ars;
    int i0 = 0;
    for (; i0 + 4 * VW <= hd; i0 += 4 * VW) {
        vf acc[ATT_RB][4];
        for (int r = 0; r < ATT_RB; r++)
            for (int k = 0; k < 4; k++) acc[r][k] = vf_splat(0.0f);
        for (int s = s0; s < s1; s++) {
            const float *y = Y + (long)s * ldy + i0;
            vf y0 = vf_load(y), y1 = vf_load(y + VW), y2 = vf_load(y + 2 * VW),
               y3 = vf_load(y + 3 * VW);
            for (int r = 0; r < ATT_RB; r++) {
                vf a = vf_splat(ar[r][(long)s * acs]);
                acc[r][0] += a * y0;
                acc[r][1] += a * y1;
                acc[r][2] += a * y2;
                acc[r][3] += a * y3;
            }
        }
        for (int r = 0; r < nrows; r++)
            for (int k = 0; k < 4; k++) {
                float *o = O + (long)r * ldo + i0 + VW * k;
                vf_store(o, vf_load(o) + acc[r][k]);
            }
    }
    for (; i0 + VW <= hd; i0 += VW) {
        vf acc[ATT_RB];
        for (int r = 0; r < ATT_RB; r++) acc[r] = vf_splat(0.0f);
        for (int s = s0; s < s1; s++) {
            vf y = vf_load(Y + (long)s * ldy + i0);
            for (int r = 0; r < ATT_RB; r++) acc[r] += vf_splat(ar[r][(long)s * acs]) * y;
        }
        for (int r = 0; r < nrows; r++) {
            float *o = O + (long)r * ldo + i0;
            vf_store(o, vf_load(o) + acc[r]);
        }
    }
    for (; i0 < hd; i0++) { /* hd not a multiple of 16 */
        for (int r = 0; r < nrows; r++) {
            float acc = 0.0f;
            for (int s = s0; s < s1; s++) acc += ar[r][(long)s * acs] * Y[(long)s * ldy + i0];
            O[(long)r * ldo + i0] += acc;
        }
    }
}

/* Blocking. A task is one block of ATT_TB consecutive rows of one (b, h) [forward, backward
 * pass 1] or one block of ATT_TB key rows of one (b, kv head) [backward pass 2]. Inside, keys are
 * walked in chunks of ATT_KC; each chunk of K or V (rows ~9 KB apart in qkv for gpt2-124m, a
 * stride hardware prefetchers do not follow) is first copied into a small contiguous buffer
 * (ATT_KC x ATT_HC floats, 32 KB, on the stack: L1-resident), and all row tiles of the block
 * run over it. The rows of att/datt a block touches (ATT_TB x T) stay in L2 between the scores,
 * the softmax and the second product. Head dims above ATT_HC are done in slices. */
#define ATT_TB 128 /* rows per block: a multiple of ATT_QB and ATT_RB */
#define ATT_HC 128 /* head-dim slice */

/* Rows [r0, r1) of S (row stride T): S[t][j] = alpha * X_t . Y_j for keys j <= t (tiles on the
 * diagonal also write a few entries above it; callers overwrite those). */
static void att_scores_rows(float *S, int T, int r0, int r1, const float *X, long ldx,
                            const float *Y, long ldy, int hd, float alpha, float *Yt) {
    for (int i0 = 0; i0 < hd; i0 += ATT_HC) {
        int hc = hd - i0 < ATT_HC ? hd - i0 : ATT_HC;
        for (int j0 = 0; j0 < r1; j0 += ATT_KC) {
            att_transpose_chunk(Yt, Y + i0, ldy, j0, T, hc);
            for (int t0 = r0; t0 < r1; t0 += ATT_QB) {
                int nrows = r1 - t0 < ATT_QB ? r1 - t0 : ATT_QB;
                int jend = t0 + nrows < j0 + ATT_KC ? t0 + nrows : j0 + ATT_KC; // keys <= last row
                for (int j = j0; j < jend; j += ATT_KB) {
                    int ncols = jend - j < ATT_KB ? jend - j : ATT_KB;
                    att_score_tile(S + (long)t0 * T + j, T, nrows, ncols, X + (long)t0 * ldx + i0,
                                   ldx, Yt, j - j0, hc, alpha, i0 > 0);
                }
            }
        }
    }
}

/* Copies rows [j0, j1) x columns [0, hc) of Y (row stride ldy) into Yp[j1 - j0][hc]. */
static void att_pack_rows(float *Yp, const float *Y, long ldy, int j0, int j1, int hc) {
    for (int s = j0; s < j1; s++)
        memcpy(Yp + (long)(s - j0) * hc, Y + (long)s * ldy, (size_t)hc * sizeof(float));
}

/* Rows [r0, r1) of O (row stride ldo): O[t][:] += sum_{s <= t} A[t*T + s] Y[s][:].
 * A must be 0 above the diagonal (diagonal tiles do not mask). */
static void att_accum_rows(float *O, long ldo, const float *A, int T, int r0, int r1,
                           const float *Y, long ldy, int hd, float *Yp) {
    for (int i0 = 0; i0 < hd; i0 += ATT_HC) {
        int hc = hd - i0 < ATT_HC ? hd - i0 : ATT_HC;
        for (int j0 = 0; j0 < r1; j0 += ATT_KC) {
            int j1 = j0 + ATT_KC < r1 ? j0 + ATT_KC : r1; // no row of the block reads s >= r1
            att_pack_rows(Yp, Y + i0, ldy, j0, j1, hc);
            const float *Ys = Yp - (long)j0 * hc; // so that Ys row s is Y row s
            for (int t0 = r0; t0 < r1; t0 += ATT_RB) {
                int nrows = r1 - t0 < ATT_RB ? r1 - t0 : ATT_RB;
                int s1 = t0 + nrows < j1 ? t0 + nrows : j1;
                if (s1 <= j0) continue;
                att_accum_tile(O + (long)t0 * ldo + i0, ldo, nrows, A + (long)t0 * T, T, 1, j0,
                               s1, Ys, hc, hc);
            }
        }
    }
}

/* Rows [c0, c1) of O (row stride ldo), transposed use of A: O[c][:] += sum_{s >= c} A[s*T + c]
 * Y[s][:]. A must be 0 above the diagonal. A tile reads A[s][t0..t0+3] for the chunk's rows s:
 * the chunk x block piece of A (16 KB) is brought into L1 by the block's first tile and reused by
 * the others. */
static void att_accum_cols(float *O, long ldo, const float *A, int T, int c0, int c1,
                           const float *Y, long ldy, int hd, float *Yp) {
    for (int j0 = c0; j0 < T; j0 += ATT_KC) {
        int j1 = j0 + ATT_KC < T ? j0 + ATT_KC : T;
        for (int i0 = 0; i0 < hd; i0 += ATT_HC) {
            int hc = hd - i0 < ATT_HC ? hd - i0 : ATT_HC;
            att_pack_rows(Yp, Y + i0, ldy, j0, j1, hc);
            const float *Ys = Yp - (long)j0 * hc;
            for (int t0 = c0; t0 < c1; t0 += ATT_RB) {
                int nrows = c1 - t0 < ATT_RB ? c1 - t0 : ATT_RB;
                int s0 = t0 > j0 ? t0 : j0; // s >= first row of the tile
                if (s0 >= j1) continue;
                att_accum_tile(O + (long)t0 * ldo + i0, ldo, nrows, A + t0, 1, T, s0, j1, Ys, hc,
                               hc);
            }
        }
    }
}

void op_attention_fwd(float *out, float *att, const float *qkv, int B, int T, int NH, int NKV,
                      int hd) {
    op_attention_fwd_doc(out, att, qkv, NULL, B, T, NH, NKV, hd, 0.0f);
}

static void attention_bwd_scaled(float *dqkv, float *datt, const float *dout, const float *qkv, const float *att, int B,
                                 int T, int NH, int NKV, int hd, float scale);

void op_attention_bwd_doc(float *dqkv, float *datt, const float *dout, const float *qkv,
                          const float *att, const int32_t *positions, int B, int T, int NH,
                          int NKV, int hd, float scale) {
    // The document mask lives in att: the forward wrote exact zeros for the keys outside the
    // query's document, so dscore = att * (...) is exactly 0 there and dq, dk, dv get nothing
    // across documents; the plain backward is already the masked one.
    (void)positions;
    attention_bwd_scaled(dqkv, datt, dout, qkv, att, B, T, NH, NKV, hd, scale);
}

void op_attention_fwd_doc(float *out, float *att, const float *qkv, const int32_t *positions,
                          int B, int T, int NH, int NKV, int hd, float scale) {
    // out [B,T,NH*hd]; att [B,NH,T,T]; qkv [B,T,(NH+2*NKV)*hd]; positions [B,T] or NULL
    int R = (NH + 2 * NKV) * hd;
    int G = NH / NKV; // query heads per kv head
    int OC = NH * hd;
    int nblk = (T + ATT_TB - 1) / ATT_TB;
    if (!(scale > 0.0f)) scale = 1.0f / sqrtf((float)hd);
    // row blocks of one (b, h) are independent; later blocks have more keys (dynamic schedule)
#pragma omp parallel for collapse(3) schedule(dynamic)
    for (int b = 0; b < B; b++) {
        for (int h = 0; h < NH; h++) {
            for (int blk = 0; blk < nblk; blk++) {
                float buf[ATT_KC * ATT_HC];
                int g = h / G;
                int r0 = blk * ATT_TB, r1 = r0 + ATT_TB < T ? r0 + ATT_TB : T;
                const float *base = qkv + (long)b * T * R;
                const float *q = base + h * hd;              // q_t = q + t*R
                const float *k = base + (NH + g) * hd;       // k_t2 = k + t2*R
                const float *v = base + (NH + NKV + g) * hd; // v_t2 = v + t2*R
                float *A = att + ((long)b * NH + h) * T * T; // [T,T]
                float *o = out + (long)b * T * OC + h * hd;  // o_t = o + t*OC
                // scores (scaled), then softmax in place: the rows hold the saved probabilities
                att_scores_rows(A, T, r0, r1, q, R, k, R, hd, scale, buf);
                for (int t = r0; t < r1; t++) {
                    float *arow = A + (long)t * T;
                    // keys [lo, t]: the query's document (v2126 mask hook), else all of [0, t]
                    int lo = positions ? t - positions[(long)b * T + t] : 0;
                    lo = lo < 0 ? 0 : lo > t ? t : lo;
                    float maxv = row_max(arow + lo, t + 1 - lo);
                    float sum = row_exp_inplace(arow + lo, t + 1 - lo, maxv);
                    row_scale(arow + lo, t + 1 - lo, 1.0f / sum);
                    for (int t2 = 0; t2 < lo; t2++) arow[t2] = 0.0f;
                    for (int t2 = t + 1; t2 < T; t2++) arow[t2] = 0.0f;
                    memset(o + (long)t * OC, 0, (size_t)hd * sizeof(float));
                }
                // out_t = sum_{t2 <= t} att[t,t2] v_t2
                att_accum_rows(o, OC, A, T, r0, r1, v, R, hd, buf);
            }
        }
    }
}

void op_attention_bwd(float *dqkv, float *datt, const float *dout, const float *qkv,
                      const float *att, int B, int T, int NH, int NKV, int hd) {
    attention_bwd_scaled(dqkv, datt, dout, qkv, att, B, T, NH, NKV, hd, 0.0f);
}

static void attention_bwd_scaled(float *dqkv, float *datt, const float *dout, const float *qkv, const float *att, int B,
                                 int T, int NH, int NKV, int hd, float scale) {
    // dqkv [B,T,(NH+2*NKV)*hd] (+=); datt [B,NH,T,T] scratch; dout [B,T,NH*hd];
    // qkv [B,T,(NH+2*NKV)*hd]; att [B,NH,T,T]
    // Backprop, per (b, h) and query row t:
    //   datt[t,t2]  = dout_t . v_t2
    //   dscore      = att * (datt - sum_t2 att * datt)       (softmax backward)
    //   dq_t       += scale * sum_t2 dscore[t,t2] k_t2
    //   dk_t2      += scale * dscore[t,t2] q_t,   dv_t2 += att[t,t2] dout_t
    // Pass 1 (parallel over (b, h, row block)) computes scale*dscore into datt (0 above the
    // diagonal) and dq. Pass 2 (parallel over (b, kv head, key-row block)) does dk and dv: the G
    // query heads of a group all add into the same kv rows, so one task owns a block of kv rows
    // for the whole group and sums the heads in order: no races, no atomics.
    int R = (NH + 2 * NKV) * hd;
    int G = NH / NKV;
    int OC = NH * hd;
    int nblk = (T + ATT_TB - 1) / ATT_TB;
    if (!(scale > 0.0f)) scale = 1.0f / sqrtf((float)hd);
#pragma omp parallel for collapse(3) schedule(dynamic)
    for (int b = 0; b < B; b++) {
        for (int h = 0; h < NH; h++) {
            for (int blk = 0; blk < nblk; blk++) {
                float buf[ATT_KC * ATT_HC];
                int g = h / G;
                int r0 = blk * ATT_TB, r1 = r0 + ATT_TB < T ? r0 + ATT_TB : T;
                const float *base = qkv + (long)b * T * R;
                const float *k = base + (NH + g) * hd;
                const float *v = base + (NH + NKV + g) * hd;
                const float *d = dout + (long)b * T * OC + h * hd; // dout_t = d + t*OC
                const float *A = att + ((long)b * NH + h) * T * T;
                float *D = datt + ((long)b * NH + h) * T * T;
                float *dq = dqkv + (long)b * T * R + h * hd;
                att_scores_rows(D, T, r0, r1, d, OC, v, R, hd, 1.0f, buf); // datt = dout . v
                for (int t = r0; t < r1; t++) {
                    const float *arow = A + (long)t * T;
                    float *drow = D + (long)t * T;
                    float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
                    for (int t2 = 0; t2 <= t; t2++) dot += arow[t2] * drow[t2];
                    for (int t2 = 0; t2 <= t; t2++) drow[t2] = scale * arow[t2] * (drow[t2] - dot);
                    for (int t2 = t + 1; t2 < T; t2++) drow[t2] = 0.0f;
                }
                // dq_t += sum_{t2 <= t} dscore[t,t2] k_t2
                att_accum_rows(dq, R, D, T, r0, r1, k, R, hd, buf);
            }
        }
    }
#pragma omp parallel for collapse(3) schedule(dynamic)
    for (int b = 0; b < B; b++) {
        for (int g = 0; g < NKV; g++) {
            for (int blk = 0; blk < nblk; blk++) {
                float buf[ATT_KC * ATT_HC];
                int c0 = blk * ATT_TB, c1 = c0 + ATT_TB < T ? c0 + ATT_TB : T;
                const float *base = qkv + (long)b * T * R;
                float *dk = dqkv + (long)b * T * R + (NH + g) * hd;       // dk_t2 = dk + t2*R
                float *dv = dqkv + (long)b * T * R + (NH + NKV + g) * hd; // dv_t2 = dv + t2*R
                for (int h = g * G; h < (g + 1) * G; h++) {
                    const float *q = base + h * hd;
                    const float *d = dout + (long)b * T * OC + h * hd;
                    const float *A = att + ((long)b * NH + h) * T * T;
                    const float *D = datt + ((long)b * NH + h) * T * T;
                    // dk_t2 += sum_{t >= t2} dscore[t,t2] q_t; dv_t2 += sum_{t >= t2} att[t,t2] dout_t
                    att_accum_cols(dk, R, D, T, c0, c1, q, R, hd, buf);
                    att_accum_cols(dv, R, A, T, c0, c1, d, OC, hd, buf);
                }
            }
        }
    }
}

/* ------------------------------------------------------------------------------------------ */
/* GELU, tanh approximation: gelu(x) = 0.5 x (1 + tanh(u)), u = sqrt(2/pi) (x + 0.044715 x^3).
 * We use 0.5 (1 + tanh(u)) = sigmoid(2u): one exp, no tanh. Then
 *   gelu'(x) = s + x * 2 s (1 - s) * du/dx,  s = sigmoid(2u), du/dx = sqrt(2/pi)(1 + 3*0.044715 x^2)
 * (0.5 sech^2(u) = 2 s (1 - s)). */

#define GELU_K 0.7978845608028654f /* sqrt(2/pi) */

static inline vf gelu_v(vf x) {
    vf u = GELU_K * (x + 0.044715f * x * x * x);
    return x * hyp_sigmoidv(2.0f * u);
}

static inline vf gelu_grad_v(vf x) {
    vf u = GELU_K * (x + 0.044715f * x * x * x);
    vf s = hyp_sigmoidv(2.0f * u);
    vf du = GELU_K * (1.0f + 3.0f * 0.044715f * x * x);
    return s + x * 2.0f * s * (1.0f - s) * du;
}

/* Elementwise loops run over 16-float chunks (the last one partial), split over threads. */
void op_gelu_fwd(float *out, const float *inp, long n) {
    long nv = (n + VW - 1) / VW;
#pragma omp parallel for schedule(static) if (n >= HYP_PAR_MIN)
    for (long c = 0; c < nv; c++) {
        long i = c * VW;
        int m = n - i < VW ? (int)(n - i) : VW;
        if (m == VW) {
            vf_store(out + i, gelu_v(vf_load(inp + i)));
        } else {
            vf_store_part(out + i, gelu_v(vf_load_part(inp + i, m, 0.0f)), m);
        }
    }
}

void op_gelu_bwd(float *dinp, const float *inp, const float *dout, long n) {
    long nv = (n + VW - 1) / VW;
#pragma omp parallel for schedule(static) if (n >= HYP_PAR_MIN)
    for (long c = 0; c < nv; c++) {
        long i = c * VW;
        int m = n - i < VW ? (int)(n - i) : VW;
        if (m == VW) {
            vf_store(dinp + i, vf_load(dinp + i) + vf_load(dout + i) * gelu_grad_v(vf_load(inp + i)));
        } else {
            vf g = vf_load_part(dout + i, m, 0.0f) * gelu_grad_v(vf_load_part(inp + i, m, 0.0f));
            vf_store_part(dinp + i, vf_load_part(dinp + i, m, 0.0f) + g, m);
        }
    }
}

/* ------------------------------------------------------------------------------------------ */
/* SwiGLU: out = silu(gate) * up, silu(g) = g * sigmoid(g).
 *   dgate = dout * up * sigmoid(g) * (1 + g (1 - sigmoid(g))),  dup = dout * silu(g) */

void op_swiglu_fwd(float *out, const float *inp, int N, int H) {
    // out [N,H]; inp [N,2H] = [gate | up]
#pragma omp parallel for schedule(static) if ((long)N * H >= HYP_PAR_MIN)
    for (int n = 0; n < N; n++) {
        const float *gate = inp + (long)n * 2 * H;
        const float *up = gate + H;
        float *o = out + (long)n * H;
        for (int i = 0; i < H; i += VW) {
            int m = H - i < VW ? H - i : VW;
            vf g = m == VW ? vf_load(gate + i) : vf_load_part(gate + i, m, 0.0f);
            vf u = m == VW ? vf_load(up + i) : vf_load_part(up + i, m, 0.0f);
            vf y = g * hyp_sigmoidv(g) * u;
            if (m == VW) vf_store(o + i, y); else vf_store_part(o + i, y, m);
        }
    }
}

void op_swiglu_bwd(float *dinp, const float *dout, const float *inp, int N, int H) {
    // dinp [N,2H] (+=); dout [N,H]; inp [N,2H]
#pragma omp parallel for schedule(static) if ((long)N * H >= HYP_PAR_MIN)
    for (int n = 0; n < N; n++) {
        const float *gate = inp + (long)n * 2 * H;
        const float *up = gate + H;
        float *dg = dinp + (long)n * 2 * H;
        float *du = dg + H;
        const float *d = dout + (long)n * H;
        for (int i = 0; i < H; i += VW) {
            int m = H - i < VW ? H - i : VW;
            if (m == VW) {
                vf g = vf_load(gate + i), u = vf_load(up + i), dd = vf_load(d + i);
                vf sg = hyp_sigmoidv(g);
                vf_store(dg + i, vf_load(dg + i) + dd * u * sg * (1.0f + g * (1.0f - sg)));
                vf_store(du + i, vf_load(du + i) + dd * g * sg);
            } else {
                vf g = vf_load_part(gate + i, m, 0.0f), u = vf_load_part(up + i, m, 0.0f);
                vf dd = vf_load_part(d + i, m, 0.0f);
                vf sg = hyp_sigmoidv(g);
                vf_store_part(dg + i, vf_load_part(dg + i, m, 0.0f) +
                                          dd * u * sg * (1.0f + g * (1.0f - sg)), m);
                vf_store_part(du + i, vf_load_part(du + i, m, 0.0f) + dd * g * sg, m);
            }
        }
    }
}

/* ------------------------------------------------------------------------------------------ */
/* Elementwise */

void op_add_fwd(float *out, const float *a, const float *b, long n) {
#pragma omp parallel for simd schedule(static) if (n >= HYP_PAR_MIN)
    for (long i = 0; i < n; i++) out[i] = a[i] + b[i];
}

void op_add_scaled_fwd(float *out, const float *a, const float *b, float alpha, long n) {
#pragma omp parallel for simd schedule(static) if (n >= HYP_PAR_MIN)
    for (long i = 0; i < n; i++) out[i] = alpha * a[i] + b[i];
}

void op_accumulate_scaled(float *dst, const float *src, float alpha, long n) {
#pragma omp parallel for simd schedule(static) if (n >= HYP_PAR_MIN)
    for (long i = 0; i < n; i++) dst[i] += alpha * src[i];
}

void op_accumulate(float *dst, const float *src, long n) {
#pragma omp parallel for simd schedule(static) if (n >= HYP_PAR_MIN)
    for (long i = 0; i < n; i++) dst[i] += src[i];
}

void op_zero(float *dst, long n) {
#pragma omp parallel for simd schedule(static) if (n >= HYP_PAR_MIN)
    for (long i = 0; i < n; i++) dst[i] = 0.0f;
}

void op_round_bf16(float *out, const float *in, long n) {
    const uint32_t *src = (const uint32_t *)(const void *)in;
    uint32_t *dst = (uint32_t *)(void *)out;
#pragma omp parallel for schedule(static)
    for (long i = 0; i < n; i++) {
        uint32_t u = src[i];
        if ((u & 0x7f800000u) == 0x7f800000u && (u & 0x007fffffu)) dst[i] = u | 0x00400000u; /* quiet NaN */
        else dst[i] = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
    }
}

/* v2162 fp16 emulation: float(half(x)) exactly as IEEE binary16 rounds — to nearest even, beyond
 * 65504 (from 65520 up) to inf, below 2^-14 to the subnormal grid 2^-24 (so 2^-25 and less flush
 * to a signed zero), NaN kept a quiet NaN. */
static float round_fp16_one(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    uint32_t sign = u & 0x80000000u, a = u & 0x7fffffffu;
    if (a > 0x7f800000u) u |= 0x00400000u;               /* NaN: quiet */
    else if (a >= 0x477ff000u) u = sign | 0x7f800000u;   /* >= 65520 (or inf): inf */
    else if (a >= 0x38800000u) {                         /* normal fp16: drop 13 mantissa bits, RNE */
        a = (a + 0xfffu + ((a >> 13) & 1u)) & ~0x1fffu;
        u = sign | a;
    } else {                                             /* subnormal fp16: multiples of 2^-24 */
        float y = fabsf(f) * 16777216.0f;                /* exact: < 1024 */
        float i = floorf(y), fr = y - i;                 /* exact */
        if (fr > 0.5f || (fr == 0.5f && fmodf(i, 2.0f) != 0.0f)) i += 1.0f;
        float r = i / 16777216.0f;
        memcpy(&a, &r, 4);
        u = sign | a;
    }
    memcpy(&f, &u, 4);
    return f;
}

void op_round_fp16(float *out, const float *in, long n, long long *flushed, long long *nonzero) {
    long long fl = 0, nz = 0;
#pragma omp parallel for schedule(static) reduction(+ : fl, nz)
    for (long i = 0; i < n; i++) {
        float v = in[i], r = round_fp16_one(v);
        nz += v != 0.0f;
        fl += v != 0.0f && r == 0.0f;
        out[i] = r;
    }
    *flushed += fl;
    *nonzero += nz;
}

void op_scale(float *x, float s, long n) {
#pragma omp parallel for simd schedule(static) if (n >= HYP_PAR_MIN)
    for (long i = 0; i < n; i++) x[i] *= s;
}

double op_sumsq(const float *x, long n) {
    // Sum of squares in double. The split into SUMSQ_CHUNKS fixed chunks (not one per thread)
    // makes the summation order, hence the result, independent of the thread count.
    enum { SUMSQ_CHUNKS = 64 };
    double part[SUMSQ_CHUNKS];
    long chunk = (n + SUMSQ_CHUNKS - 1) / SUMSQ_CHUNKS;
#pragma omp parallel for schedule(static) if (n >= HYP_PAR_MIN)
    for (int k = 0; k < SUMSQ_CHUNKS; k++) {
        long i0 = k * chunk, i1 = i0 + chunk < n ? i0 + chunk : n;
        double s = 0.0;
#pragma omp simd reduction(+ : s)
        for (long i = i0; i < i1; i++) s += (double)x[i] * (double)x[i];
        part[k] = s;
    }
    double total = 0.0;
    for (int k = 0; k < SUMSQ_CHUNKS; k++) total += part[k];
    return total;
}

/* ------------------------------------------------------------------------------------------ */
/* Cross-entropy. loss = logsumexp(z) - z[target], with logsumexp(z) = max + log(sum exp(z-max))
 * (subtracting the max keeps every exp <= 1: no overflow). Only columns [0, V) are read; the
 * padding columns [V, Vp) may hold anything.
 * A target >= V is a data error: its loss is NaN (so the mean loss shows it) and no gradient. */

void op_crossentropy_fwd(float *losses, const float *logits, const int32_t *targets, int N, int V,
                         int Vp) {
    // losses [N]; logits [N,Vp]; targets [N]
#pragma omp parallel for schedule(static) if ((long)N * V >= HYP_PAR_MIN)
    for (int n = 0; n < N; n++) {
        int tg = targets[n];
        if (tg < 0) { losses[n] = 0.0f; continue; }
        if (tg >= V) { losses[n] = NAN; continue; }
        const float *z = logits + (long)n * Vp;
        float maxv = row_max(z, V);
        float sum = row_exp_sum(z, V, maxv);
        losses[n] = maxv + logf(sum) - z[tg];
    }
}

void op_crossentropy_fused(float *losses, float *logits, const int32_t *targets, float dloss,
                           int N, int V, int Vp) {
    // losses [N]; logits [N,Vp] in: logits, out: dlogits; targets [N]
    // Three sweeps over a row (it stays in L2: 200 KB for V = 50257), one exp per element:
    //   1. max;  2. e = exp(z - max) written in place, summed;  3. z := dloss * e / sum, then
    //   the target column gets -dloss (the one-hot), padding columns get 0.
#pragma omp parallel for schedule(static) if ((long)N * V >= HYP_PAR_MIN)
    for (int n = 0; n < N; n++) {
        int tg = targets[n];
        float *z = logits + (long)n * Vp;
        if (tg < 0 || tg >= V) {
            losses[n] = tg < 0 ? 0.0f : NAN;
            for (int i = 0; i < Vp; i++) z[i] = 0.0f;
            continue;
        }
        float maxv = row_max(z, V);
        float ztg = z[tg];
        float sum = row_exp_inplace(z, V, maxv);
        losses[n] = maxv + logf(sum) - ztg;
        row_scale(z, V, dloss / sum);
        z[tg] -= dloss;
        for (int i = V; i < Vp; i++) z[i] = 0.0f;
    }
}

/* ------------------------------------------------------------------------------------------ */
/* AdamW (Loshchilov & Hutter; the same update as torch.optim.AdamW):
 *   g = grad_scale * g;  m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2
 *   p -= lr * ( (m / (1-b1^t)) / (sqrt(v / (1-b2^t)) + eps) + wd * p ) */
