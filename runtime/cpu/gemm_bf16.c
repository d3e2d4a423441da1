/* gemm_bf16.c — bf16 conversions and the oneDNN bf16 matmul of the cpu backend (gemm_bf16.h).
 *
 * One oneDNN matmul primitive per distinct call shape (transposes, sizes, strides, output dtype,
 * accumulate, bias), created on first use and kept for the life of the process: a training step
 * of gpt2-124m uses about 15 shapes, so after the first step no descriptor or primitive is built.
 * Accumulation into C is oneDNN's sum post-op (C = C + A·B, in fp32 before C's rounding).
 *
 * On a CPU where oneDNN has no bf16 matmul (it needs AVX-512 or AVX2-VNNI-2; an AVX2- or AVX-only
 * x86 answers dnnl_unimplemented) the same contract is met by widening A and B to fp32 (exact) and
 * calling oneDNN's sgemm: every bf16 x bf16 product is exact in fp32, so the two paths differ only
 * in the fp32 summation order, which is all a bf16 matmul ever promises. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("O3")
#endif

#include "gemm_bf16.h"

#include <omp.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <oneapi/dnnl/dnnl.h>

#if defined(__AVX512BF16__) && defined(__AVX512F__)
#include <immintrin.h>
#endif

#define PAR_MIN 32768L

void cpu_f32_to_bf16(uint16_t *dst, const float *src, long n) {
    const uint32_t *s = (const uint32_t *)(const void *)src;
#pragma omp parallel for simd schedule(static) if (n >= PAR_MIN)
    for (long i = 0; i < n; i++) {
        uint32_t u = s[i];
        uint32_t r = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
        dst[i] = (uint16_t)(((u & 0x7f800000u) == 0x7f800000u && (u & 0x007fffffu)) ? ((u | 0x00400000u) >> 16) : r);
    }
}

void cpu_bf16_to_f32(float *dst, const uint16_t *src, long n) {
    uint32_t *d = (uint32_t *)(void *)dst;
#pragma omp parallel for simd schedule(static) if (n >= PAR_MIN)
    for (long i = 0; i < n; i++) d[i] = (uint32_t)src[i] << 16;
}

/* ---- the first failure, reported once per step (like ops_cpu.c's sgemm record) ---------- */
static atomic_int g_status;
static const char *g_where = "";

static void fail(const char *where, dnnl_status_t st) {
    int expected = 0;
    if (atomic_compare_exchange_strong(&g_status, &expected, (int)st ? (int)st : -1)) g_where = where;
}

int gemm_bf16_check(hyp_err *e) {
    int st = atomic_exchange(&g_status, 0);
    if (!st) return HYP_OK;
    return hyp_fail(e, HYP_EFAIL,
                    "gemm_bf16: oneDNN bf16 matmul failed in %s (dnnl_status_t %d: %s) — this CPU or oneDNN build may lack bf16 matmul; regenerate the trainer without bf16",
                    g_where, st, st == dnnl_out_of_memory ? "out of memory" : st == dnnl_unimplemented ? "unimplemented" : "error");
}

/* ---- primitive cache ---------------------------------------------------------------------- */
typedef struct {
    int ta, tb, M, N, K, lda, ldb, ldc, ct, acc, bias;
} gkey;

typedef struct {
    gkey k;
    dnnl_primitive_t prim;
    dnnl_memory_t a, b, c, bias;
} gentry;

#define CACHE_MAX 128
static gentry g_cache[CACHE_MAX];
static int g_n;
static dnnl_engine_t g_eng;
static int g_widen;        /* 1: this CPU has no oneDNN bf16 matmul; widen and use sgemm */
static float *g_scr;       /* the widened operands (and a bf16 C's fp32 sum) */
static size_t g_scr_n;
static dnnl_stream_t g_stream;

static int init_engine(void) {
    if (g_eng) return 0;
    if (dnnl_engine_create(&g_eng, dnnl_cpu, 0) != dnnl_success) return -1;
    if (dnnl_stream_create(&g_stream, g_eng, dnnl_stream_default_flags) != dnnl_success) return -1;
    return 0;
}

/* A 2-d descriptor of rows x cols stored row-major with row stride ld, or transposed (stored
 * [cols, rows]) when t. */
static dnnl_status_t md2(dnnl_memory_desc_t *md, int rows, int cols, int ld, int t, dnnl_data_type_t dt) {
    dnnl_dims_t dims = {rows, cols};
    dnnl_dims_t strides = {t ? 1 : ld, t ? ld : 1};
    return dnnl_memory_desc_init_by_strides(md, 2, dims, dt, strides);
}

static gentry *lookup(const char *where, const gkey *k) {
    for (int i = 0; i < g_n; i++)
        if (!memcmp(&g_cache[i].k, k, sizeof *k)) return &g_cache[i];
    if (g_n == CACHE_MAX || init_engine()) {
        fail(where, dnnl_out_of_memory);
        return NULL;
    }
    dnnl_memory_desc_t amd, bmd, cmd, biasmd;
    dnnl_data_type_t cdt = k->ct == HYP_DT_BF16 ? dnnl_bf16 : dnnl_f32;
    dnnl_status_t st = md2(&amd, k->M, k->K, k->lda, k->ta, dnnl_bf16);
    if (st == dnnl_success) st = md2(&bmd, k->K, k->N, k->ldb, k->tb, dnnl_bf16);
    if (st == dnnl_success) st = md2(&cmd, k->M, k->N, k->ldc, 0, cdt);
    if (st == dnnl_success && k->bias) st = md2(&biasmd, 1, k->N, k->N, 0, dnnl_f32);
    dnnl_matmul_desc_t desc;
    if (st == dnnl_success) st = dnnl_matmul_desc_init(&desc, &amd, &bmd, k->bias ? &biasmd : NULL, &cmd);
    dnnl_primitive_attr_t attr = NULL;
    dnnl_post_ops_t po = NULL;
    if (st == dnnl_success) st = dnnl_primitive_attr_create(&attr);
    if (st == dnnl_success && k->acc) {
        st = dnnl_post_ops_create(&po);
        if (st == dnnl_success) st = dnnl_post_ops_append_sum(po, 1.0f);
        if (st == dnnl_success) st = dnnl_primitive_attr_set_post_ops(attr, po);
    }
    dnnl_primitive_desc_t pd = NULL;
    if (st == dnnl_success) st = dnnl_primitive_desc_create(&pd, &desc, attr, g_eng, NULL);
    if (st == dnnl_unimplemented) { /* no bf16 matmul on this CPU: gemm_bf16 widens instead */
        if (po) dnnl_post_ops_destroy(po);
        if (attr) dnnl_primitive_attr_destroy(attr);
        g_widen = 1;
        return NULL;
    }
    gentry *en = &g_cache[g_n];
    memset(en, 0, sizeof *en);
    if (st == dnnl_success) st = dnnl_primitive_create(&en->prim, pd);
    if (st == dnnl_success) st = dnnl_memory_create(&en->a, &amd, g_eng, DNNL_MEMORY_NONE);
    if (st == dnnl_success) st = dnnl_memory_create(&en->b, &bmd, g_eng, DNNL_MEMORY_NONE);
    if (st == dnnl_success) st = dnnl_memory_create(&en->c, &cmd, g_eng, DNNL_MEMORY_NONE);
    if (st == dnnl_success && k->bias) st = dnnl_memory_create(&en->bias, &biasmd, g_eng, DNNL_MEMORY_NONE);
    if (pd) dnnl_primitive_desc_destroy(pd);
    if (po) dnnl_post_ops_destroy(po);
    if (attr) dnnl_primitive_attr_destroy(attr);
    if (st != dnnl_success) {
        if (en->prim) dnnl_primitive_destroy(en->prim);
        if (en->a) dnnl_memory_destroy(en->a);
        if (en->b) dnnl_memory_destroy(en->b);
        if (en->c) dnnl_memory_destroy(en->c);
        if (en->bias) dnnl_memory_destroy(en->bias);
        memset(en, 0, sizeof *en);
        fail(where, st);
        return NULL;
    }
    en->k = *k;
    g_n++;
    return en;
}

/* The stored extent of a [rows, cols] operand (transposed: stored [cols, rows]) with row stride ld. */
static size_t stored_n(int rows, int cols, int ld, int t) {
    long r = t ? cols : rows, c = t ? rows : cols;
    return (size_t)((r - 1) * (long)ld + c);
}

/* gemm_bf16's contract through fp32 sgemm (see the file's header). */
static void gemm_widened(const char *where, int ta, int tb, int M, int N, int K, const uint16_t *A, int lda,
                         const uint16_t *B, int ldb, void *C, hyp_dtype ct, int ldc, int accumulate, const float *bias) {
    size_t na = stored_n(M, K, lda, ta), nb = stored_n(K, N, ldb, tb), nc = ct == HYP_DT_BF16 ? (size_t)M * N : 0;
    if (na + nb + nc > g_scr_n) {
        float *p = realloc(g_scr, (na + nb + nc) * sizeof(float));
        if (!p) {
            fail(where, dnnl_out_of_memory);
            return;
        }
        g_scr = p, g_scr_n = na + nb + nc;
    }
    float *a = g_scr, *b = g_scr + na, *cf = ct == HYP_DT_BF16 ? g_scr + na + nb : (float *)C;
    int ldcf = ct == HYP_DT_BF16 ? N : ldc;
    cpu_bf16_to_f32(a, A, (long)na);
    cpu_bf16_to_f32(b, B, (long)nb);
    if (ct == HYP_DT_BF16 && accumulate)
        for (int i = 0; i < M; i++) cpu_bf16_to_f32(cf + (long)i * N, (const uint16_t *)C + (long)i * ldc, N);
    dnnl_status_t st = dnnl_sgemm(ta ? 'T' : 'N', tb ? 'T' : 'N', M, N, K, 1.0f, a, lda, b, ldb, accumulate ? 1.0f : 0.0f, cf, ldcf);
    if (st != dnnl_success) {
        fail(where, st);
        return;
    }
    if (bias)
        for (int i = 0; i < M; i++)
            for (int j = 0; j < N; j++) cf[(long)i * ldcf + j] += bias[j];
    if (ct == HYP_DT_BF16)
        for (int i = 0; i < M; i++) cpu_f32_to_bf16((uint16_t *)C + (long)i * ldc, cf + (long)i * N, N);
}

void gemm_bf16(const char *where, int ta, int tb, int M, int N, int K, const uint16_t *A, int lda, const uint16_t *B,
               int ldb, void *C, hyp_dtype ct, int ldc, int accumulate, const float *bias) {
    if (M <= 0 || N <= 0) return;
    if (K <= 0) { /* an empty sum: C unchanged when accumulating, else the bias or 0 */
        if (accumulate) return;
        for (int i = 0; i < M; i++)
            for (int j = 0; j < N; j++) {
                float v = bias ? bias[j] : 0.0f;
                if (ct == HYP_DT_BF16) ((uint16_t *)C)[(long)i * ldc + j] = cpu_bf16_of(v);
                else ((float *)C)[(long)i * ldc + j] = v;
            }
        return;
    }
    gkey k;
    memset(&k, 0, sizeof k);
    k.ta = ta, k.tb = tb, k.M = M, k.N = N, k.K = K, k.lda = lda, k.ldb = ldb, k.ldc = ldc;
    k.ct = ct == HYP_DT_BF16 ? HYP_DT_BF16 : HYP_DT_F32, k.acc = accumulate != 0, k.bias = bias != NULL;
    gentry *en = g_widen ? NULL : lookup(where, &k);
    if (!en) {
        if (g_widen) gemm_widened(where, ta, tb, M, N, K, A, lda, B, ldb, C, ct, ldc, accumulate, bias);
        return;
    }
    dnnl_status_t st = dnnl_memory_set_data_handle(en->a, (void *)A);
    if (st == dnnl_success) st = dnnl_memory_set_data_handle(en->b, (void *)B);
    if (st == dnnl_success) st = dnnl_memory_set_data_handle(en->c, C);
    if (st == dnnl_success && bias) st = dnnl_memory_set_data_handle(en->bias, (void *)bias);
    dnnl_exec_arg_t args[4] = {{DNNL_ARG_SRC, en->a}, {DNNL_ARG_WEIGHTS, en->b}, {DNNL_ARG_DST, en->c}, {DNNL_ARG_BIAS, en->bias}};
    if (st == dnnl_success) st = dnnl_primitive_execute(en->prim, g_stream, bias ? 4 : 3, args);
    if (st == dnnl_success) st = dnnl_stream_wait(g_stream);
    if (st != dnnl_success) fail(where, st);
}

/* ---- the bf16 peak ------------------------------------------------------------------------ */
static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static double cpu_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

double gemm_bf16_peak(double seconds) {
    /* a square shape large enough for oneDNN's best blocking, small enough to stay in L2/L3 tiles */
    enum { S = 1536 };
    uint16_t *a = aligned_alloc(64, sizeof(uint16_t) * S * S), *b = aligned_alloc(64, sizeof(uint16_t) * S * S);
    float *c = aligned_alloc(64, sizeof(float) * S * S);
    double best = 0;
    if (a && b && c) {
        for (long i = 0; i < (long)S * S; i++) a[i] = b[i] = cpu_bf16_of((float)(i % 7) * 0.125f);
        hyp_err e;
        gemm_bf16("gemm_bf16_peak", 0, 0, S, S, S, a, S, b, S, c, HYP_DT_F32, S, 0, NULL); /* warm-up */
        /* each round timed by the process's CPU time over the thread count (as peak.c times its
         * threads): time the OS gives another process on these shared cores does not count */
        int nt = omp_get_max_threads();
        double t0 = now_s();
        do {
            double t = cpu_s();
            gemm_bf16("gemm_bf16_peak", 0, 0, S, S, S, a, S, b, S, c, HYP_DT_F32, S, 0, NULL);
            double dt = (cpu_s() - t) / nt, f = 2.0 * S * S * (double)S / (dt > 0 ? dt : 1e-9);
            if (f > best) best = f;
        } while (now_s() - t0 < seconds);
        if (gemm_bf16_check(&e)) best = 0;
    }
    free(a), free(b), free(c);
    return best;
}
