/* test_bf16_v2102.c — v2102 bf16 storage on the cpu (runtime/cpu/gemm_bf16.c): the conversions
 * round exactly like op_round_bf16 (round to nearest even, NaN kept, overflow to inf) and widen
 * exactly; the oneDNN bf16 GEMM in the three shapes the executor uses (forward with bias into
 * bf16 and f32 outputs, the input gradient accumulated into bf16, the weight gradient with a
 * transposed A accumulated into f32) matches a double-precision reference on bf16 inputs: f32
 * outputs within fp32 accumulation error, bf16 outputs within one bf16 rounding of it; odd sizes
 * (not multiples of any blocking), and a failure-free check at the end.
 * Prints one line per check and "N passed, M failed"; exits 1 if anything failed. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gemm_bf16.h"
#include "hyp_test.h"
#include "ops_cpu.h"

static uint64_t g_rng = 0x9E3779B97F4A7C15ull;
static float rnd(void) {
    uint64_t z = (g_rng += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return (float)((double)(z >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

static uint32_t bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static float of_bits(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* A[r,c] of a row-major matrix stored [rows, cols] (t = 0) or transposed [cols, rows] (t = 1). */
static double at(const uint16_t *m, int t, int ld, int r, int c) {
    return cpu_bf16_val(t ? m[(long)c * ld + r] : m[(long)r * ld + c]);
}

/* Checks one GEMM case against the double reference. */
static void gemm_case(const char *what, int ta, int tb, int M, int N, int K, int out_bf16, int acc, int bias) {
    uint16_t *A = malloc(sizeof *A * (size_t)M * K), *B = malloc(sizeof *B * (size_t)K * N);
    float *bv = malloc(sizeof *bv * (size_t)N), *C0 = malloc(sizeof *C0 * (size_t)M * N);
    void *C = malloc((out_bf16 ? 2 : 4) * (size_t)M * N);
    for (long i = 0; i < (long)M * K; i++) A[i] = cpu_bf16_of(rnd());
    for (long i = 0; i < (long)K * N; i++) B[i] = cpu_bf16_of(rnd());
    for (int j = 0; j < N; j++) bv[j] = rnd();
    for (long i = 0; i < (long)M * N; i++) {
        float v = acc ? rnd() : 0.0f;
        if (out_bf16) v = cpu_bf16_val(cpu_bf16_of(v)), ((uint16_t *)C)[i] = cpu_bf16_of(v);
        else ((float *)C)[i] = v;
        C0[i] = v;
    }
    int lda = ta ? M : K, ldb = tb ? K : N;
    gemm_bf16(what, ta, tb, M, N, K, A, lda, B, ldb, C, out_bf16 ? HYP_DT_BF16 : HYP_DT_F32, N, acc, bias ? bv : NULL);
    double worst = 0;
    int bad = 0;
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            double ref = acc ? C0[(long)i * N + j] : 0.0, mag = fabs(ref);
            if (bias) ref += bv[j], mag += fabs(bv[j]);
            for (int k = 0; k < K; k++) {
                double p = at(A, ta, lda, i, k) * at(B, tb, ldb, k, j);
                ref += p, mag += fabs(p);
            }
            double got = out_bf16 ? cpu_bf16_val(((uint16_t *)C)[(long)i * N + j]) : ((float *)C)[(long)i * N + j];
            /* fp32 accumulation: ~K ulps of the magnitude; a bf16 output: one bf16 rounding more */
            double tol = mag * K * 1.2e-7 * (1 + 0x1p-8) + (out_bf16 ? fabs(ref) * 0x1p-8 : 0) + 1e-30;
            double err = fabs(got - ref) / tol;
            if (err > worst) worst = err;
            bad += err > 1.0;
        }
    CHECK(!bad, "%s: M=%d N=%d K=%d ta=%d tb=%d out=%s%s%s matches the double reference (worst %.2f of the tolerance)", what,
          M, N, K, ta, tb, out_bf16 ? "bf16" : "f32", acc ? " accumulate" : "", bias ? " bias" : "", worst);
    free(A), free(B), free(bv), free(C0), free(C);
}

int main(void) {
    /* conversions: op_round_bf16's rounding, bit for bit, on random values and the special ones */
    enum { NV = 4096 + 12 };
    float *x = malloc(sizeof *x * NV), *r = malloc(sizeof *r * NV), *w = malloc(sizeof *w * NV);
    uint16_t *h = malloc(sizeof *h * NV);
    for (int i = 0; i < 4096; i++) x[i] = rnd() * ldexpf(1.0f, (i % 80) - 40);
    const uint32_t special[12] = {0x7fc00000u, 0x7f800001u, 0xff800000u, 0x7f800000u, 0x7f7fffffu, 0x00000001u,
                                  0x80000000u, 0x3f808000u, 0x3f818000u, 0x3f808001u, 0x3f7fffffu, 0x7f7f8000u};
    for (int i = 0; i < 12; i++) x[4096 + i] = of_bits(special[i]);
    op_round_bf16(r, x, NV);
    cpu_f32_to_bf16(h, x, NV);
    cpu_bf16_to_f32(w, h, NV);
    int same = 1, same1 = 1;
    for (int i = 0; i < NV; i++) {
        /* a NaN's payload below bf16's 7 mantissa bits is dropped by the bf16 store; NaN stays NaN */
        same &= isnan(r[i]) ? isnan(w[i]) && (bits(w[i]) >> 16) == (bits(r[i]) >> 16) : bits(w[i]) == bits(r[i]);
        same1 &= cpu_bf16_of(x[i]) == h[i] && bits(cpu_bf16_val(h[i])) == bits(w[i]);
    }
    CHECK(same, "cpu_f32_to_bf16 + cpu_bf16_to_f32 equal op_round_bf16 bit for bit (%d values: random, NaNs, infs, max, denormal, ties)", NV);
    CHECK(same1, "cpu_bf16_of / cpu_bf16_val agree with the array conversions");
    CHECK(cpu_bf16_of(1.0f + ldexpf(1, -8)) == 0x3f80 && cpu_bf16_of(1.0f + 3 * ldexpf(1, -8)) == 0x3f82 &&
              isnan(cpu_bf16_val(cpu_bf16_of(NAN))) && isinf(cpu_bf16_val(cpu_bf16_of(3.4e38f))),
          "ties go to even, NaN stays NaN, overflow rounds to inf");
    free(x), free(r), free(w), free(h);

    /* the executor's three GEMMs (ops_bf16.c) at odd sizes */
    gemm_case("matmul_fwd", 0, 1, 37, 29, 53, 1, 0, 1);
    gemm_case("matmul_fwd", 0, 1, 37, 29, 53, 0, 0, 1);
    gemm_case("matmul_fwd", 0, 1, 64, 96, 128, 1, 0, 0);
    gemm_case("matmul_bwd (dinp)", 0, 0, 37, 53, 29, 1, 1, 0);
    gemm_case("matmul_bwd (dweight)", 1, 0, 29, 53, 37, 0, 1, 0);
    gemm_case("matmul_bwd (dweight)", 1, 0, 96, 64, 256, 0, 1, 0);
    /* the same shape again: the cached primitive with new data */
    gemm_case("matmul_fwd", 0, 1, 37, 29, 53, 1, 0, 1);
    hyp_err e;
    int rc = gemm_bf16_check(&e);
    CHECK(rc == HYP_OK, "no oneDNN failure recorded%s%s", rc ? ": " : "", rc ? e.msg : "");
    double peak = gemm_bf16_peak(0.05);
    CHECK(peak > 1e9, "gemm_bf16_peak measures a bf16 matmul rate (%.1f GFLOP/s)", peak * 1e-9);
    printf("%d passed, %d failed\n", g_pass, g_fail);
    return g_fail ? 1 : 0;
}
