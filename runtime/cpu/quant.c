/* quant.c — integer quantization on the cpu backend (quant.h): fake quantization for QAT and the
 * int8 GEMMs of int8 training (oneDNN's dnnl_gemm_s8s8s32, which runs on AVX512-VNNI's vpdpbusd
 * where the CPU has it). Must never round differently from templates/quant.cu.lua (the formulas
 * in quant.h), allocate per call once warm, or call exit(). */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("O3")
#endif

#include "quant.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <oneapi/dnnl/dnnl.h>

#include "ops_cpu.h"

#define PAR_MIN 32768L

/* max |x| over n values, NaN ignored as fmaxf does on the device (a NaN compares false); written
 * as a comparison, which vectorizes (fmaxf is a libm call per element here) */
static float absmax(const float *x, long n) {
    float m = 0.0f;
    for (long i = 0; i < n; i++) {
        float a = fabsf(x[i]);
        m = a > m ? a : m;
    }
    return m;
}

void op_fake_quant(float *out, const float *in, long rows, int C, int bits, int group) {
    if (group <= 0 || group > C) group = C;
    const int qmax = (1 << (bits - 1)) - 1, qmin = -qmax - 1;
    const float fq = (float)qmax;
    const int ng = (C + group - 1) / group;
#pragma omp parallel for schedule(static) if (rows * C >= PAR_MIN)
    for (long r = 0; r < rows; r++) {
        for (int g = 0; g < ng; g++) {
            const long c0 = (long)g * group, len = C - c0 < group ? C - c0 : group;
            const float *x = in + r * C + c0;
            float *o = out + r * C + c0;
            const float s = absmax(x, len) / fq;
            for (long i = 0; i < len; i++) {
                if (!(s > 0.0f)) { o[i] = 0.0f; continue; }
                float q = nearbyintf(x[i] / s);
                q = q < (float)qmin ? (float)qmin : q > fq ? fq : q;
                o[i] = (q + 0.0f) * s; /* + 0: -0 becomes +0, as the device's integer round trip gives */
            }
        }
    }
}

void quant_s8(int8_t *q, float *scale, const float *x, long rows, int cols, int rowwise) {
    const long n = rows * cols;
    float st = 0.0f;
    if (!rowwise) {
#pragma omp parallel for schedule(static) reduction(max : st) if (n >= PAR_MIN)
        for (long i = 0; i < n; i++) {
            float a = fabsf(x[i]);
            st = a > st ? a : st;
        }
        st = st / 127.0f;
        scale[0] = st;
    }
#pragma omp parallel for schedule(static) if (n >= PAR_MIN)
    for (long r = 0; r < rows; r++) {
        const float *xr = x + r * cols;
        int8_t *qr = q + r * cols;
        float s = st;
        if (rowwise) scale[r] = s = absmax(xr, cols) / 127.0f;
        for (int i = 0; i < cols; i++) {
            float v = s > 0.0f ? nearbyintf(xr[i] / s) : 0.0f;
            v = v < -127.0f ? -127.0f : v > 127.0f ? 127.0f : v;
            qr[i] = (int8_t)v;
        }
    }
}

/* Whether this CPU has the VNNI dot product (vpdpbusd), with which oneDNN's s8 x s8 GEMM is exact. */
static int vnni(void) {
#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
    return __builtin_cpu_supports("avx512vnni");
#else
    return 0;
#endif
}

void gemm_s8s8s32(const char *where, int M, int N, int K, const int8_t *A, const int8_t *B, int tb, int32_t *C) {
    if (M <= 0 || N <= 0) return;
    if (K <= 0) {
        memset(C, 0, sizeof(int32_t) * (size_t)M * (size_t)N);
        return;
    }
    if (!vnni()) { /* oneDNN's pre-VNNI s8 kernels may saturate 16-bit pair sums: exact C instead */
#pragma omp parallel for schedule(static) if ((long)M * N * K >= PAR_MIN * 64)
        for (int m = 0; m < M; m++)
            for (int n = 0; n < N; n++) {
                int32_t acc = 0;
                for (int k = 0; k < K; k++) acc += (int32_t)A[(long)m * K + k] * (tb ? B[(long)n * K + k] : B[(long)k * N + n]);
                C[(long)m * N + n] = acc;
            }
        return;
    }
    const int32_t co = 0;
    dnnl_status_t st = dnnl_gemm_s8s8s32('N', tb ? 'T' : 'N', 'F', M, N, K, 1.0f, A, K, 0, B, tb ? K : N, 0, 0.0f, C, N, &co);
    if (st != dnnl_success) op_cpu_fail_status(where, (int)st);
}

/* ---- the int8 scratch: operands, scales and the int32 product, grown to the largest shape --- */
static struct {
    int8_t *a, *b;
    int32_t *c;
    float *sa;
    size_t na, nb, nc, ns;
} g_s;

static int grow(void **p, size_t *have, size_t want, size_t elem) {
    if (want <= *have) return 0;
    void *q = realloc(*p, want * elem);
    if (!q) return -1;
    *p = q;
    *have = want;
    return 0;
}

static int scratch(const char *where, size_t na, size_t nb, size_t nc, size_t ns) {
    if (grow((void **)&g_s.a, &g_s.na, na, 1) || grow((void **)&g_s.b, &g_s.nb, nb, 1) ||
        grow((void **)&g_s.c, &g_s.nc, nc, sizeof(int32_t)) || grow((void **)&g_s.sa, &g_s.ns, ns, sizeof(float))) {
        op_cpu_fail(where);
        return -1;
    }
    return 0;
}

/* out[r, c] = fmaf(acc[r, c], sa[r or 0] * sb, base) with base = bias[c], 0 or out[r, c] (acc) */
static void dequant(float *out, const int32_t *acc, const float *sa, int rowwise, float sb, const float *bias,
                    int accumulate, long M, int N) {
#pragma omp parallel for schedule(static) if (M * N >= PAR_MIN)
    for (long r = 0; r < M; r++) {
        const float s = (rowwise ? sa[r] : sa[0]) * sb;
        const int32_t *a = acc + r * N;
        float *o = out + r * N;
        for (int c = 0; c < N; c++) o[c] = fmaf((float)a[c], s, accumulate ? o[c] : bias ? bias[c] : 0.0f);
    }
}

void op_int8_matmul_fwd(float *out, const float *x, const float *w, const float *bias, int N, int IC, int OC,
                        int rowwise) {
    if (scratch("op_int8_matmul_fwd", (size_t)N * IC, (size_t)OC * IC, (size_t)N * OC, (size_t)N + 1)) return;
    float sw;
    quant_s8(g_s.a, g_s.sa, x, N, IC, rowwise);
    quant_s8(g_s.b, &sw, w, OC, IC, 0);
    gemm_s8s8s32("op_int8_matmul_fwd", N, OC, IC, g_s.a, g_s.b, 1, g_s.c);
    dequant(out, g_s.c, g_s.sa, rowwise, sw, bias, 0, N, OC);
}

void op_int8_matmul_dgrad(float *dx, const float *dout, const float *w, int N, int IC, int OC, int rowwise) {
    if (scratch("op_int8_matmul_dgrad", (size_t)N * OC, (size_t)OC * IC, (size_t)N * IC, (size_t)N + 1)) return;
    float sw;
    quant_s8(g_s.a, g_s.sa, dout, N, OC, rowwise);
    quant_s8(g_s.b, &sw, w, OC, IC, 0);
    gemm_s8s8s32("op_int8_matmul_dgrad", N, IC, OC, g_s.a, g_s.b, 0, g_s.c);
    dequant(dx, g_s.c, g_s.sa, rowwise, sw, NULL, 1, N, IC);
}
