/* test_quant_v2158_v2159.c — the integer quantization ops of the cpu backend (runtime/cpu/quant.h)
 * and their device kernels (templates/quant.cu.lua, run under the CPU simulator):
 *
 * v2158 QAT, fake_quant: bit-exact against a scalar reference written here (its own round half to
 *   even) for 2, 4 and 8 bits, per-channel and per-group scales (a partial last group too); every
 *   output on its group's grid (an integer multiple of the scale within [qmin, qmax], the absmax
 *   element at +-qmax exactly, error <= scale/2); the simulator's fake_quant kernel bit-identical;
 *   the straight-through estimator: the weight gradient the GEMM backward gives through Q(w) equals
 *   the finite-difference derivative of the loss w.r.t. the quantized weight (the true derivative
 *   through the rounding, measured too, is 0 almost everywhere: why the estimator is needed).
 * v2159 INT8, int8_matmul_fwd / int8_matmul_dgrad: oneDNN's s8 x s8 -> s32 GEMM exact against an
 *   int64 reference (full-range operands, K = 3072); both ops bit-exact against a scalar reference
 *   of quantization + exact integer product + dequantization, per-row and per-tensor; the
 *   simulator's int8_scale / int8_quantize / int8_gemm launches (the manifest's sequence)
 *   bit-identical to the cpu ops (integer math: no tolerance); and the effect measured: the int8
 *   forward's relative error against the fp32 GEMM (< 1.5%), smaller with per-row scales than per
 *   tensor on inputs whose rows differ in scale.
 * Prints one line per check and "N passed, M failed"; exits 1 on failure. Needs g++ (the sim). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops_cpu.h"
#include "quant.h"
#include "sim.h"

#include "hyp_test.h"

static uint64_t g_rng = 0x2545F4914F6CDD1Dull;
static float frand(void) { /* uniform in [-1, 1) */
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return (float)((g_rng >> 40) * (1.0 / 8388608.0)) - 1.0f;
}
static float *fbuf(long n) { return calloc((size_t)n, sizeof(float)); }
static float *frandbuf(long n, float scale) {
    float *p = fbuf(n);
    for (long i = 0; p && i < n; i++) p[i] = scale * frand();
    return p;
}

/* round half to even, written without the library's rounding functions */
static double rhe(double v) {
    double f = floor(v), d = v - f;
    if (d > 0.5) return f + 1.0;
    if (d < 0.5) return f;
    return fmod(f, 2.0) == 0.0 ? f : f + 1.0;
}

static void ref_fake_quant(float *out, const float *in, long rows, int C, int bits, int group) {
    if (group <= 0 || group > C) group = C;
    const int qmax = (1 << (bits - 1)) - 1;
    for (long r = 0; r < rows; r++)
        for (int c0 = 0; c0 < C; c0 += group) {
            int len = C - c0 < group ? C - c0 : group;
            const float *x = in + r * C + c0;
            float m = 0.0f;
            for (int i = 0; i < len; i++) m = fabsf(x[i]) > m ? fabsf(x[i]) : m;
            float s = m / (float)qmax;
            for (int i = 0; i < len; i++) {
                double q = s > 0.0f ? rhe((double)(x[i] / s)) : 0.0;
                q += 0.0; /* an integer: +0, never -0 */
                if (q < -qmax - 1) q = -qmax - 1;
                if (q > qmax) q = qmax;
                out[r * C + c0 + i] = s > 0.0f ? (float)q * s : 0.0f;
            }
        }
}

static int bit_equal(const float *a, const float *b, long n, long *first) {
    for (long i = 0; i < n; i++)
        if (memcmp(&a[i], &b[i], 4)) {
            *first = i;
            return 0;
        }
    return 1;
}

/* ---- the simulator ------------------------------------------------------------------------- */
static hyp_sim_module *g_mod;

static int open_quant(void) {
    char cu[512], cmd[1400];
    snprintf(cmd, sizeof cmd, "mkdir -p '%s/tests/quant_sim'", HYP_BINARY_DIR);
    if (system(cmd) != 0) return -1;
    snprintf(cu, sizeof cu, "%s/tests/quant_sim/quant.cu", HYP_BINARY_DIR);
    snprintf(cmd, sizeof cmd, "'%s/generator/gen' render quant -o '%s'", HYP_BINARY_DIR, cu);
    if (system(cmd) != 0) return -1;
    hyp_err e = {{0}};
    if (hyp_sim_open(cu, NULL, &g_mod, &e)) {
        printf("hyp_sim_open: %s\n", e.msg);
        return -1;
    }
    return 0;
}

static int launch(const char *k, long threads_or_blocks, int per_block, void **args) {
    hyp_err e = {{0}};
    unsigned grid = per_block ? (unsigned)threads_or_blocks : (unsigned)((threads_or_blocks + 255) / 256);
    int rc = hyp_sim_launch(g_mod, k, hyp_dim3_of(grid, 1, 1), hyp_dim3_of(256, 1, 1), 0, args, NULL, &e);
    if (rc) printf("launch %s: %s\n", k, e.msg);
    return rc;
}

/* ---- v2158 --------------------------------------------------------------------------------- */
static void test_fake_quant(long rows, int C, int bits, int group, int sim) {
    long n = rows * C;
    float *x = frandbuf(n, 0.05f), *out = fbuf(n), *ref = fbuf(n), *dev = fbuf(n);
    for (long r = 0; r < rows; r++) x[r * C + (r * 7) % C] *= 9.0f; /* an outlier per row */
    op_fake_quant(out, x, rows, C, bits, group);
    ref_fake_quant(ref, x, rows, C, bits, group);
    long first = -1;
    int ok = bit_equal(out, ref, n, &first);
    CHECK(ok, "v2158 fake_quant bits=%d group=%d [%ld x %d] bit-exact vs the scalar reference%s", bits, group, rows, C,
          ok ? "" : " (mismatch)");
    /* on the grid: out / s integral in [qmin, qmax], the absmax element at +-qmax, error <= s/2 */
    int g = group <= 0 || group > C ? C : group, qmax = (1 << (bits - 1)) - 1, grid_ok = 1, hit_max = 1;
    double worst = 0;
    for (long r = 0; r < rows; r++)
        for (int c0 = 0; c0 < C; c0 += g) {
            int len = C - c0 < g ? C - c0 : g;
            float m = 0;
            for (int i = 0; i < len; i++) m = fmaxf(m, fabsf(x[r * C + c0 + i]));
            float s = m / (float)qmax;
            int saw = 0;
            for (int i = 0; i < len; i++) {
                long k = r * C + c0 + i;
                double q = out[k] / s;
                if (fabs(q - rhe(q)) > 1e-3 || q < -qmax - 1 - 1e-3 || q > qmax + 1e-3) grid_ok = 0;
                if (fabs(fabs(q) - qmax) < 1e-3 && fabsf(x[k]) == m) saw = 1;
                double err = fabs(out[k] - x[k]) / s;
                if (err > worst) worst = err;
            }
            if (!saw) hit_max = 0;
        }
    CHECK(grid_ok && hit_max && worst <= 0.5 + 1e-5, "v2158 fake_quant bits=%d group=%d: outputs on the grid, absmax at +-qmax, max error %.4f scale",
          bits, group, worst);
    if (sim && g_mod) {
        long rr = rows;
        int cc = C, bb = bits, gg = g;
        void *a[] = {&dev, &x, &rr, &cc, &bb, &gg};
        int rc = launch("fake_quant", rows * ((C + g - 1) / g), 1, a);
        ok = !rc && bit_equal(dev, out, n, &first);
        CHECK(ok, "v2158 sim fake_quant kernel bits=%d group=%d bit-identical to the cpu op", bits, group);
        /* in place (out == in), as the template allows */
        float *inpl = fbuf(n);
        memcpy(inpl, x, (size_t)n * 4);
        void *a2[] = {&inpl, &inpl, &rr, &cc, &bb, &gg};
        rc = launch("fake_quant", rows * ((C + g - 1) / g), 1, a2);
        CHECK(!rc && bit_equal(inpl, out, n, &first), "v2158 sim fake_quant in place bit-identical");
        free(inpl);
    }
    free(x), free(out), free(ref), free(dev);
}

/* L(x, v) = sum(g * (x v^T)): the STE weight gradient (matmul_bwd through Q(w)) equals dL/dv at
 * v = Q(w) by central differences; dL/dw through the rounding itself is 0 for a small move. */
static void test_ste(void) {
    enum { N = 6, IC = 40, OC = 5 };
    float *x = frandbuf(N * IC, 1.0f), *w = frandbuf(OC * IC, 0.2f), *g = frandbuf(N * OC, 1.0f);
    float *wq = fbuf(OC * IC), *dw = fbuf(OC * IC), *dx = fbuf(N * IC), *y = fbuf(N * OC);
    op_fake_quant(wq, w, OC, IC, 4, 16);
    op_matmul_bwd(dx, dw, NULL, g, x, wq, N, IC, OC);
    double worst = 0, maxg = 0;
    int moved = 0;
    for (int k = 0; k < OC * IC; k++) {
        double L[2], Lt[2];
        for (int sgn = 0; sgn < 2; sgn++) {
            const float h = 1e-2f;
            float *v = fbuf(OC * IC), *wt = fbuf(OC * IC);
            memcpy(v, wq, sizeof(float) * OC * IC);
            memcpy(wt, w, sizeof(float) * OC * IC);
            v[k] += sgn ? h : -h;
            wt[k] += sgn ? 1e-5f : -1e-5f; /* a move that leaves the scale and the rounding alone */
            float *vq = fbuf(OC * IC);
            op_fake_quant(vq, wt, OC, IC, 4, 16);
            double s = 0, st = 0;
            for (int n = 0; n < N; n++)
                for (int o = 0; o < OC; o++) {
                    double a = 0, at = 0;
                    for (int i = 0; i < IC; i++) a += (double)x[n * IC + i] * v[o * IC + i], at += (double)x[n * IC + i] * vq[o * IC + i];
                    s += g[n * OC + o] * a, st += g[n * OC + o] * at;
                }
            L[sgn] = s, Lt[sgn] = st;
            free(v), free(wt), free(vq);
        }
        double fd = (L[1] - L[0]) / 2e-2, fdt = (Lt[1] - Lt[0]) / 2e-5;
        if (fabs(fd - dw[k]) > worst) worst = fabs(fd - dw[k]);
        if (fdt != 0.0) moved++; /* a group's absmax element moves the scale; the rest stay put */
        if (fabs(dw[k]) > maxg) maxg = fabs(dw[k]);
    }
    CHECK(worst <= 1e-3 * (1 + maxg), "v2158 STE: dW from the GEMM backward through Q(w) = d loss / d Q(w) by finite differences (max |diff| %.2e, max |grad| %.3g)",
          worst, maxg);
    CHECK(moved <= OC * ((IC + 15) / 16) && maxg > 0.1,
          "v2158 STE: the derivative through the rounding is 0 for %d of %d weights (the others are their group's absmax): the straight-through estimator supplies it",
          OC * IC - moved, OC * IC);
    free(x), free(w), free(g), free(wq), free(dw), free(dx), free(y);
}

/* ---- v2159 --------------------------------------------------------------------------------- */
static void ref_quant_s8(int8_t *q, float *scale, const float *x, long rows, int cols, int rowwise) {
    float mt = 0;
    for (long i = 0; i < rows * cols; i++) mt = fabsf(x[i]) > mt ? fabsf(x[i]) : mt;
    for (long r = 0; r < rows; r++) {
        float m = 0;
        for (int i = 0; i < cols; i++) m = fabsf(x[r * cols + i]) > m ? fabsf(x[r * cols + i]) : m;
        float s = (rowwise ? m : mt) / 127.0f;
        if (rowwise) scale[r] = s;
        else scale[0] = s;
        for (int i = 0; i < cols; i++) {
            double v = s > 0 ? rhe((double)(x[r * cols + i] / s)) : 0;
            q[r * cols + i] = (int8_t)(v < -127 ? -127 : v > 127 ? 127 : v);
        }
    }
}

/* out[M,Nn] (+)= dequant(qa[M,K] . qb): qb [Nn,K] (tb) or [K,Nn]; exact int64 sums */
static void ref_int8_gemm(float *out, const float *x, const float *w, const float *bias, int M, int Nn, int K, int tb,
                          int rowwise, int acc) {
    int8_t *qa = malloc((size_t)M * K), *qb = malloc((size_t)Nn * K);
    float *sa = fbuf(M), sb;
    ref_quant_s8(qa, sa, x, M, K, rowwise);
    ref_quant_s8(qb, &sb, w, tb ? Nn : K, tb ? K : Nn, 0);
    for (int m = 0; m < M; m++)
        for (int n = 0; n < Nn; n++) {
            int64_t s = 0;
            for (int k = 0; k < K; k++) s += (int64_t)qa[(long)m * K + k] * (tb ? qb[(long)n * K + k] : qb[(long)k * Nn + n]);
            float sc = (rowwise ? sa[m] : sa[0]) * sb;
            float *o = &out[(long)m * Nn + n];
            *o = fmaf((float)s, sc, acc ? *o : bias ? bias[n] : 0.0f);
        }
    free(qa), free(qb), free(sa);
}

static void test_s8gemm(void) {
    enum { M = 9, N = 17, K = 3072 };
    int8_t *a = malloc(M * K), *b = malloc(N * K);
    int32_t *c = calloc(M * N, 4);
    for (int i = 0; i < M * K; i++) a[i] = (int8_t)(i % 5 == 0 ? -127 : (int)(frand() * 127.0f));
    for (int i = 0; i < N * K; i++) b[i] = (int8_t)(i % 3 == 0 ? -127 : i % 3 == 1 ? 127 : (int)(frand() * 127.0f));
    for (int k = 0; k < K; k++) a[k] = -127, b[k] = -127; /* a saturating-prone all -127 dot product */
    int bad = 0;
    for (int tb = 0; tb < 2; tb++) {
        gemm_s8s8s32("test", M, N, K, a, b, tb, c);
        for (int m = 0; m < M; m++)
            for (int n = 0; n < N; n++) {
                int64_t s = 0;
                for (int k = 0; k < K; k++) s += (int64_t)a[m * K + k] * (tb ? b[n * K + k] : b[(long)k * N + n]);
                if (s != c[m * N + n]) bad++;
            }
    }
    hyp_err e;
    CHECK(!bad && op_cpu_check(&e) == HYP_OK, "v2159 oneDNN s8 x s8 -> s32 GEMM exact vs int64 sums (K=%d, full range, both layouts; %d wrong)", K, bad);
    free(a), free(b), free(c);
}

static void test_int8_ops(int N, int IC, int OC, int rowwise, int sim) {
    float *x = frandbuf((long)N * IC, 1.0f), *w = frandbuf((long)OC * IC, 0.1f), *bias = frandbuf(OC, 0.1f);
    float *dy = frandbuf((long)N * OC, 0.01f);
    for (int r = 0; r < N; r++) /* rows of different scales: what per-row scales are for */
        for (int i = 0; i < IC; i++) x[(long)r * IC + i] *= (float)(1 + (r % 4) * 10);
    float *y = fbuf((long)N * OC), *yref = fbuf((long)N * OC), *dx = frandbuf((long)N * IC, 0.5f);
    float *dxref = fbuf((long)N * IC), *dx0 = fbuf((long)N * IC);
    memcpy(dxref, dx, sizeof(float) * N * IC);
    memcpy(dx0, dx, sizeof(float) * N * IC);
    op_int8_matmul_fwd(y, x, w, bias, N, IC, OC, rowwise);
    ref_int8_gemm(yref, x, w, bias, N, OC, IC, 1, rowwise, 0);
    op_int8_matmul_dgrad(dx, dy, w, N, IC, OC, rowwise);
    ref_int8_gemm(dxref, dy, w, NULL, N, IC, OC, 0, rowwise, 1);
    long first = -1;
    const char *gr = rowwise ? "row" : "tensor";
    CHECK(bit_equal(y, yref, (long)N * OC, &first), "v2159 int8_matmul_fwd [%d x %d -> %d] %s scales bit-exact vs the reference", N, IC, OC, gr);
    CHECK(bit_equal(dx, dxref, (long)N * IC, &first), "v2159 int8_matmul_dgrad [%d x %d <- %d] %s scales (accumulating) bit-exact vs the reference", N, IC, OC, gr);
    /* the effect: relative error against the fp32 GEMM */
    float *y32 = fbuf((long)N * OC);
    op_matmul_fwd(y32, x, w, bias, N, IC, OC);
    double num = 0, den = 0;
    for (long i = 0; i < (long)N * OC; i++) num += (double)(y[i] - y32[i]) * (y[i] - y32[i]), den += (double)y32[i] * y32[i];
    double rel = sqrt(num / den);
    printf("# v2159 int8 forward vs fp32 [%d x %d -> %d], %s scales: relative error %.4f\n", N, IC, OC, gr, rel);
    CHECK(rel < 0.015, "v2159 int8 forward within 1.5%% of fp32 (%s scales: %.4f)", gr, rel);
    if (sim && g_mod) {
        long NN = N, OCl = OC, ICl = IC;
        int ic = IC, oc = OC, zero = 0, one = 1, rw = rowwise;
        float *sa = fbuf(N), *sb = fbuf(1), *dev = fbuf((long)N * OC), *ddx = fbuf((long)N * IC);
        signed char *qa = malloc((size_t)N * (IC > OC ? IC : OC)), *qb = malloc((size_t)OC * IC);
        memcpy(ddx, dx0, sizeof(float) * N * IC);
        int rc = 0;
        /* the manifest's int8_matmul_fwd sequence */
        void *a1[] = {&sa, &x, &NN, &ic, &rw};
        rc |= launch("int8_scale", N, 1, a1);
        void *a2[] = {&qa, &sa, &x, &NN, &ic, &rw};
        rc |= launch("int8_quantize", (long)N * IC, 0, a2);
        void *a3[] = {&sb, &w, &OCl, &ic, &zero};
        rc |= launch("int8_scale", OC, 1, a3);
        void *a4[] = {&qb, &sb, &w, &OCl, &ic, &zero};
        rc |= launch("int8_quantize", (long)OC * IC, 0, a4);
        void *a5[] = {&dev, &qa, &sa, &qb, &sb, &bias, &NN, &oc, &ic, &one, &rw, &zero};
        rc |= launch("int8_gemm", (long)N * OC, 0, a5);
        CHECK(!rc && bit_equal(dev, y, (long)N * OC, &first), "v2159 sim int8_matmul_fwd kernels (%s) bit-identical to the cpu op (oneDNN)", gr);
        /* int8_matmul_dgrad */
        void *b1[] = {&sa, &dy, &NN, &oc, &rw};
        rc |= launch("int8_scale", N, 1, b1);
        void *b2[] = {&qa, &sa, &dy, &NN, &oc, &rw};
        rc |= launch("int8_quantize", (long)N * OC, 0, b2);
        rc |= launch("int8_scale", OC, 1, a3);
        rc |= launch("int8_quantize", (long)OC * IC, 0, a4);
        float *nul = NULL;
        void *b5[] = {&ddx, &qa, &sa, &qb, &sb, &nul, &NN, &ic, &oc, &zero, &rw, &one};
        rc |= launch("int8_gemm", (long)N * IC, 0, b5);
        CHECK(!rc && bit_equal(ddx, dx, (long)N * IC, &first), "v2159 sim int8_matmul_dgrad kernels (%s) bit-identical to the cpu op", gr);
        (void)ICl;
        free(sa), free(sb), free(dev), free(ddx), free(qa), free(qb);
    }
    free(x), free(w), free(bias), free(dy), free(y), free(yref), free(dx), free(dxref), free(dx0), free(y32);
}

/* per-row scales beat per-tensor scales on inputs whose rows differ in scale */
static void test_granularity(void) {
    enum { N = 32, IC = 96, OC = 24 };
    float *x = frandbuf(N * IC, 1.0f), *w = frandbuf(OC * IC, 0.1f), *y32 = fbuf(N * OC), *y = fbuf(N * OC);
    for (int r = 0; r < N; r++)
        for (int i = 0; i < IC; i++) x[r * IC + i] *= r % 8 == 0 ? 50.0f : 1.0f;
    op_matmul_fwd(y32, x, w, NULL, N, IC, OC);
    double e[2];
    for (int rw = 0; rw < 2; rw++) {
        op_int8_matmul_fwd(y, x, w, NULL, N, IC, OC, rw);
        double num = 0, den = 0;
        for (int r = 0; r < N; r++)
            if (r % 8) /* the small rows, which a per-tensor scale quantizes coarsely */
                for (int o = 0; o < OC; o++) {
                    double d = y[r * OC + o] - y32[r * OC + o];
                    num += d * d, den += (double)y32[r * OC + o] * y32[r * OC + o];
                }
        e[rw] = sqrt(num / den);
    }
    CHECK(e[1] < e[0] / 4, "v2159 granularity: per-row scales keep small rows accurate (relative error %.4f) where a per-tensor scale does not (%.4f)", e[1], e[0]);
    free(x), free(w), free(y32), free(y);
}

int main(void) {
    int sim = open_quant() == 0;
    CHECK(sim, "the quant template renders and compiles for the simulator");
    test_fake_quant(16, 128, 4, 128, sim);
    test_fake_quant(16, 128, 4, 0, sim);
    test_fake_quant(7, 77, 4, 32, sim); /* partial last group */
    test_fake_quant(5, 300, 2, 64, sim);
    test_fake_quant(9, 64, 8, 0, sim);
    test_ste();
    test_s8gemm();
    test_int8_ops(64, 128, 96, 1, sim);
    test_int8_ops(64, 128, 96, 0, sim);
    test_int8_ops(13, 77, 31, 1, sim); /* odd shapes */
    test_granularity();
    if (g_mod) hyp_sim_unload(g_mod);
    return hyp_test_finish();
}
