/* test_standin_lt.c — the cuBLASLt stand-in (tests/standins/cublaslt_standin.c): every rule seen
 * refusing a planted violation next to the legal call it differs from, GEMMs through dev_cuda.c
 * on the stand-ins equal to the reference (device_gemm.c) for every type combination and epilogue
 * dev_cuda.c uses, and dev_cuda.c's alignment and workspace handling. Never needs a GPU; never
 * touches a real library (the stand-ins are opened from the build's folder by path). */
#define _GNU_SOURCE
#include <cublasLt.h>
#include <cuda.h>
#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../unit/hyp_test.h"
#include "device.h"
#include "fp8.h"

#define STR(x) #x
#define XSTR(x) STR(x)
#define LT_FUNCS(X)                                                                                                  \
    X(cublasLtCreate) X(cublasLtDestroy) X(cublasLtMatmulDescCreate) X(cublasLtMatmulDescDestroy)                    \
    X(cublasLtMatmulDescSetAttribute) X(cublasLtMatrixLayoutCreate) X(cublasLtMatrixLayoutDestroy)                   \
    X(cublasLtMatrixLayoutSetAttribute) X(cublasLtMatmulPreferenceCreate) X(cublasLtMatmulPreferenceDestroy)         \
    X(cublasLtMatmulPreferenceSetAttribute) X(cublasLtMatmulAlgoGetHeuristic) X(cublasLtMatmul)
#define MEMBER(f) static __typeof__(f) *p_##f;
LT_FUNCS(MEMBER)

static hyp_device *D;
static hyp_err E;
static hyp_stream *S;
static cublasLtHandle_t H;

/* ---- direct calls: one problem, built legal, then one thing changed ------------------------- */

typedef struct {
    int ta, tb; /* cudaDataType of A, B, C, D */
    int type[4];
    int compute, transa, transb;
    uint64_t rows[4], cols[4];
    int64_t ld[4];
    int batch[4];
    int64_t stride[4];
    uint32_t epilogue;
    const void *bias, *aux, *a_scale;
    int64_t ldaux;
    int32_t bias_type;
    uint32_t align[4];
    uint64_t max_ws;
    void *ptr[4];
    size_t ws_bytes;
    void *ws;
    int size_mismatch; /* TRANSA set with a wrong size */
} prob;

static void *dev_a, *dev_b, *dev_c, *dev_ws; /* 64 KiB each, zeroed */

/* m 32 n 16 k 32, f32 NN, pointers at the start of their allocations */
static prob base(void) {
    prob p;
    memset(&p, 0, sizeof p);
    for (int i = 0; i < 4; i++) p.type[i] = CUDA_R_32F, p.batch[i] = 1, p.align[i] = 256;
    p.compute = CUBLAS_COMPUTE_32F, p.transa = CUBLAS_OP_N, p.transb = CUBLAS_OP_N;
    p.rows[0] = 32, p.cols[0] = 32, p.ld[0] = 32; /* A m x k */
    p.rows[1] = 32, p.cols[1] = 16, p.ld[1] = 32; /* B k x n */
    p.rows[2] = p.rows[3] = 32, p.cols[2] = p.cols[3] = 16, p.ld[2] = p.ld[3] = 32;
    p.epilogue = CUBLASLT_EPILOGUE_DEFAULT, p.bias_type = -1;
    p.ptr[0] = dev_a, p.ptr[1] = dev_b, p.ptr[2] = p.ptr[3] = dev_c;
    return p;
}
static prob fp8(void) {
    prob p = base();
    p.type[0] = p.type[1] = CUDA_R_8F_E4M3, p.type[2] = p.type[3] = CUDA_R_16BF;
    p.transa = CUBLAS_OP_T, p.rows[0] = 32, p.cols[0] = 32; /* A stored k x m */
    return p;
}

/* Runs the problem: heuristic (stage 1) then matmul (stage 2) with the first algorithm; returns
 * the first status that is not SUCCESS, with *stage set to where. */
static cublasStatus_t run(const prob *p, int *stage, size_t *ws_need) {
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t l[4] = {0};
    cublasLtMatmulPreference_t pref;
    cublasStatus_t st;
    *stage = 0;
    p_cublasLtMatmulDescCreate(&op, p->compute, CUDA_R_32F);
    int32_t ta = p->transa, tb = p->transb;
    st = p_cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, p->size_mismatch ? 8 : sizeof ta);
    if (st) goto out;
    p_cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb);
    p_cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE, &p->epilogue, sizeof p->epilogue);
    if (p->bias) p_cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &p->bias, sizeof p->bias);
    if (p->aux) p_cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &p->aux, sizeof p->aux);
    if (p->ldaux) p_cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &p->ldaux, sizeof p->ldaux);
    if (p->a_scale) p_cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &p->a_scale, sizeof p->a_scale);
    if (p->bias_type != -1) p_cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &p->bias_type, sizeof p->bias_type);
    for (int i = 0; i < 4; i++) {
        p_cublasLtMatrixLayoutCreate(&l[i], p->type[i], p->rows[i], p->cols[i], p->ld[i]);
        if (p->batch[i] != 1) {
            p_cublasLtMatrixLayoutSetAttribute(l[i], CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &p->batch[i], sizeof p->batch[i]);
            p_cublasLtMatrixLayoutSetAttribute(l[i], CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &p->stride[i], sizeof p->stride[i]);
        }
    }
    p_cublasLtMatmulPreferenceCreate(&pref);
    p_cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &p->max_ws, sizeof p->max_ws);
    static const cublasLtMatmulPreferenceAttributes_t al[4] = {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                                                                CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
    for (int i = 0; i < 4; i++) p_cublasLtMatmulPreferenceSetAttribute(pref, al[i], &p->align[i], sizeof p->align[i]);
    cublasLtMatmulHeuristicResult_t res[2];
    int found = 0;
    *stage = 1;
    st = p_cublasLtMatmulAlgoGetHeuristic(H, op, l[0], l[1], l[2], l[3], pref, 2, res, &found);
    p_cublasLtMatmulPreferenceDestroy(pref);
    if (st) goto out;
    if (!found) {
        st = CUBLAS_STATUS_NOT_SUPPORTED;
        goto out;
    }
    if (ws_need) *ws_need = res[0].workspaceSize;
    *stage = 2;
    float alpha = 1.0f, beta = 0.0f;
    st = p_cublasLtMatmul(H, op, &alpha, p->ptr[0], l[0], p->ptr[1], l[1], &beta, p->ptr[2], l[2], p->ptr[3], l[3], &res[0].algo, p->ws,
                          p->ws_bytes, (cudaStream_t)S);
out:
    for (int i = 0; i < 4; i++)
        if (l[i]) p_cublasLtMatrixLayoutDestroy(l[i]);
    p_cublasLtMatmulDescDestroy(op);
    return st;
}

/* legal must pass both stages; bad must be refused with status want at stage want_stage */
static void rule(const char *name, prob legal, prob bad, cublasStatus_t want, int want_stage) {
    int s1, s2;
    cublasStatus_t a = run(&legal, &s1, NULL), b = run(&bad, &s2, NULL);
    check(a == CUBLAS_STATUS_SUCCESS && b == want && s2 == want_stage, name, "legal: status %d; planted: status %d at stage %d (want %d at %d)", (int)a,
          (int)b, s2, (int)want, want_stage);
}

static void rules(void) {
    prob p, q;
    /* attributes */
    q = base(), q.size_mismatch = 1;
    rule("attribute size mismatch -> INVALID_VALUE", base(), q, CUBLAS_STATUS_INVALID_VALUE, 0);
    /* types */
    p = base(), q = base(), q.type[1] = CUDA_R_16BF;
    rule("types: A 32F x B 16BF -> NOT_SUPPORTED", p, q, CUBLAS_STATUS_NOT_SUPPORTED, 1);
    p = base(), p.compute = CUBLAS_COMPUTE_32F_FAST_TF32;
    q = p, q.type[0] = q.type[1] = CUDA_R_16BF, q.type[2] = q.type[3] = CUDA_R_16BF;
    rule("types: FAST_TF32 with 16BF -> NOT_SUPPORTED", p, q, CUBLAS_STATUS_NOT_SUPPORTED, 1);
    p = base(), p.type[0] = p.type[1] = CUDA_R_16BF;
    q = p, q.type[3] = CUDA_R_16BF; /* C 32F, D 16BF */
    rule("types: 16BF inputs, C 32F with D 16BF -> NOT_SUPPORTED", p, q, CUBLAS_STATUS_NOT_SUPPORTED, 1);
    p = fp8(), q = fp8(), q.type[0] = q.type[1] = CUDA_R_8F_E5M2;
    rule("types: FP8 E5M2 x E5M2 -> NOT_SUPPORTED", p, q, CUBLAS_STATUS_NOT_SUPPORTED, 1);
    p = fp8(), p.type[3] = CUDA_R_8F_E4M3, p.ptr[2] = dev_ws, q = p, q.type[3] = CUDA_R_8F_E5M2; /* C 16BF != D: not in place */
    rule("types: FP8 E4M3 x E4M3 -> D E5M2 -> NOT_SUPPORTED", p, q, CUBLAS_STATUS_NOT_SUPPORTED, 1);
    p = fp8(), p.type[2] = p.type[3] = CUDA_R_32F, q = p, q.type[2] = CUDA_R_16BF;
    rule("types: FP8 with C 16BF, D 32F -> NOT_SUPPORTED", p, q, CUBLAS_STATUS_NOT_SUPPORTED, 1);
    /* shapes */
    q = base(), q.rows[1] = 16, q.ld[1] = 16;
    rule("shapes: k of A != k of B -> INVALID_VALUE", base(), q, CUBLAS_STATUS_INVALID_VALUE, 1);
    q = base(), q.rows[3] = 16;
    rule("shapes: D rows != m -> INVALID_VALUE", base(), q, CUBLAS_STATUS_INVALID_VALUE, 1);
    p = base(), p.transa = CUBLAS_OP_T; /* A 32x32 square: T is legal */
    q = base(), q.transb = CUBLAS_OP_T; /* B 32x16 read as 16x32: k 16 != 32 */
    rule("shapes: transb turns B's k into n -> INVALID_VALUE", p, q, CUBLAS_STATUS_INVALID_VALUE, 1);
    q = base(), q.ld[0] = 16;
    rule("layout: lda < rows -> INVALID_VALUE", base(), q, CUBLAS_STATUS_INVALID_VALUE, 1);
    q = base(), q.ld[3] = q.ld[2] = 31;
    rule("layout: ldd < rows -> INVALID_VALUE", base(), q, CUBLAS_STATUS_INVALID_VALUE, 1);
    /* batches: A/B/C/D 2 batches; D's stride one column short of ld x cols overlaps */
    p = base();
    p.rows[0] = p.cols[0] = p.ld[0] = 16, p.rows[1] = 16, p.cols[1] = 8, p.ld[1] = 16, p.rows[2] = p.rows[3] = 16, p.cols[2] = p.cols[3] = 8;
    p.ld[2] = p.ld[3] = 16;
    for (int i = 0; i < 4; i++) p.batch[i] = 2, p.stride[i] = 256;
    q = p, q.batch[1] = 1;
    rule("batch: counts differ -> INVALID_VALUE", p, q, CUBLAS_STATUS_INVALID_VALUE, 1);
    q = p, q.stride[3] = q.stride[2] = 16 * 8 - 16;
    rule("batch: D's batches overlap -> INVALID_VALUE", p, q, CUBLAS_STATUS_INVALID_VALUE, 1);
    /* fp8 */
    q = fp8(), q.transa = CUBLAS_OP_N;
    rule("fp8: NN instead of TN -> NOT_SUPPORTED", fp8(), q, CUBLAS_STATUS_NOT_SUPPORTED, 1);
    p = fp8(), p.rows[0] = 32, p.ld[0] = 48, q = fp8(), q.ld[0] = 40;
    rule("fp8: lda 40 not a multiple of 16 -> NOT_SUPPORTED", p, q, CUBLAS_STATUS_NOT_SUPPORTED, 1);
    p = fp8(), p.ld[2] = p.ld[3] = 40, q = fp8(), q.ld[2] = q.ld[3] = 36; /* bf16 D: 72 bytes */
    rule("fp8: ldd x 2 bytes not a multiple of 16 -> NOT_SUPPORTED", p, q, CUBLAS_STATUS_NOT_SUPPORTED, 1);
    p = fp8(), p.align[0] = 16, p.ptr[0] = (char *)dev_a + 16, q = p, q.align[0] = 16, q.ptr[0] = (char *)dev_a + 16;
    q.align[1] = 8;
    rule("fp8: heuristic told 8-byte B -> NOT_SUPPORTED", p, q, CUBLAS_STATUS_NOT_SUPPORTED, 1);
    /* alignment the heuristic was told vs the pointers */
    p = base(), p.align[0] = 4, p.ptr[0] = (char *)dev_a + 4;
    q = base(), q.ptr[0] = (char *)dev_a + 4;
    rule("alignment: A +4 bytes, heuristic told 256 (default) -> NOT_SUPPORTED", p, q, CUBLAS_STATUS_NOT_SUPPORTED, 2);
    p = base(), p.align[3] = p.align[2] = 16, p.ptr[3] = p.ptr[2] = (char *)dev_c + 16;
    q = p, q.ptr[3] = q.ptr[2] = (char *)dev_c + 8;
    rule("alignment: D +8 bytes, heuristic told 16 -> NOT_SUPPORTED", p, q, CUBLAS_STATUS_NOT_SUPPORTED, 2);
    q = base(), q.align[1] = 2;
    rule("alignment: told 2 bytes for a 32F matrix -> NOT_SUPPORTED", base(), q, CUBLAS_STATUS_NOT_SUPPORTED, 1);
    /* workspace */
    size_t need = 0;
    int st = 0;
    p = base(), p.max_ws = 1 << 20, p.ws = dev_ws, p.ws_bytes = 64 << 10;
    cublasStatus_t r = run(&p, &st, &need);
    check(r == CUBLAS_STATUS_SUCCESS && need > 0, "workspace: the heuristic offers an algorithm that needs workspace when allowed", "need %zu", need);
    p = base(), r = run(&p, &st, &need);
    check(r == CUBLAS_STATUS_SUCCESS && need == 0, "workspace: with no workspace allowed, only a workspace-free algorithm", "need %zu", need);
    p = base(), p.max_ws = 1 << 20, p.ws = dev_ws, p.ws_bytes = 64 << 10;
    q = p, q.ws_bytes = 256;
    rule("workspace: less than the algorithm needs -> INVALID_VALUE", p, q, CUBLAS_STATUS_INVALID_VALUE, 2);
    static char host_ws[64 << 10];
    q = p, q.ws = host_ws;
    rule("workspace: a host pointer -> INVALID_VALUE", p, q, CUBLAS_STATUS_INVALID_VALUE, 2);
    /* epilogues */
    p = base(), p.epilogue = CUBLASLT_EPILOGUE_BIAS, p.bias = dev_ws;
    q = p, q.bias = NULL;
    rule("epilogue: BIAS without BIAS_POINTER -> INVALID_VALUE", p, q, CUBLAS_STATUS_INVALID_VALUE, 1);
    q = p, q.bias_type = CUDA_R_16BF;
    rule("epilogue: 16BF bias with a 32F D -> NOT_SUPPORTED", p, q, CUBLAS_STATUS_NOT_SUPPORTED, 1);
    p = base(), p.epilogue = CUBLASLT_EPILOGUE_GELU_AUX, p.aux = dev_ws, p.ldaux = 32;
    q = p, q.aux = NULL;
    rule("epilogue: GELU_AUX without AUX_POINTER -> INVALID_VALUE", p, q, CUBLAS_STATUS_INVALID_VALUE, 1);
    q = p, q.ldaux = 36;
    rule("epilogue: AUX_LD 36 not divisible by 8 -> INVALID_VALUE", p, q, CUBLAS_STATUS_INVALID_VALUE, 1);
    q = p, q.ldaux = 24;
    rule("epilogue: AUX_LD 24 < rows 32 -> INVALID_VALUE", p, q, CUBLAS_STATUS_INVALID_VALUE, 1);
    p = base(), p.epilogue = CUBLASLT_EPILOGUE_DGELU_BGRAD, p.aux = dev_ws, p.ldaux = 32, p.bias = (char *)dev_ws + 8192;
    q = fp8(), q.epilogue = CUBLASLT_EPILOGUE_DGELU_BGRAD, q.aux = dev_ws, q.ldaux = 32, q.bias = (char *)dev_ws + 8192;
    rule("epilogue: DGELU_BGRAD with FP8 inputs -> NOT_SUPPORTED", p, q, CUBLAS_STATUS_NOT_SUPPORTED, 1);
    p = fp8(), p.epilogue = CUBLASLT_EPILOGUE_BIAS, p.bias = dev_ws, p.bias_type = CUDA_R_16BF;
    q = p, q.bias_type = CUDA_R_8F_E4M3;
    rule("epilogue: FP8 bias of type E4M3 -> NOT_SUPPORTED", p, q, CUBLAS_STATUS_NOT_SUPPORTED, 1);
    /* scales */
    p = fp8(), p.a_scale = dev_ws, q = base(), q.a_scale = dev_ws;
    rule("scales: A_SCALE_POINTER on a 32F GEMM -> NOT_SUPPORTED", p, q, CUBLAS_STATUS_NOT_SUPPORTED, 1);
    static float host_scale = 1.0f;
    q = fp8(), q.a_scale = &host_scale;
    rule("scales: a host A_SCALE_POINTER -> INVALID_VALUE", p, q, CUBLAS_STATUS_INVALID_VALUE, 2);
    /* memory */
    static float host_a[32 * 32];
    q = base(), q.ptr[0] = host_a, q.align[0] = 4;
    rule("memory: a host pointer as A -> INVALID_VALUE", base(), q, CUBLAS_STATUS_INVALID_VALUE, 2);
    q = base(), q.ptr[0] = (char *)dev_a + (64 << 10) - 1024; /* 4 KiB of A from 1 KiB before the end */
    rule("memory: A past the end of its allocation -> INVALID_VALUE", base(), q, CUBLAS_STATUS_INVALID_VALUE, 2);
    /* in place */
    p = base(), p.ld[2] = p.ld[3] = 40, q = p, q.ld[2] = 32;
    rule("in place: C == D with ldc != ldd -> INVALID_VALUE", p, q, CUBLAS_STATUS_INVALID_VALUE, 2);
    q = fp8(), q.type[3] = CUDA_R_8F_E4M3; /* C 16BF and D E4M3 at one address */
    rule("in place: C == D with C 16BF, D E4M3 -> INVALID_VALUE", p, q, CUBLAS_STATUS_INVALID_VALUE, 2);
    /* heuristic arguments */
    {
        cublasLtMatmulDesc_t op;
        cublasLtMatrixLayout_t l;
        cublasLtMatmulPreference_t pref;
        cublasLtMatmulHeuristicResult_t res;
        int found = 0;
        p_cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F);
        p_cublasLtMatrixLayoutCreate(&l, CUDA_R_32F, 8, 8, 8);
        p_cublasLtMatmulPreferenceCreate(&pref);
        cublasStatus_t a = p_cublasLtMatmulAlgoGetHeuristic(H, op, l, l, l, l, pref, 1, &res, &found);
        cublasStatus_t b = p_cublasLtMatmulAlgoGetHeuristic(H, op, l, l, l, l, pref, 0, &res, &found);
        check(a == CUBLAS_STATUS_SUCCESS && found == 1 && b == CUBLAS_STATUS_INVALID_VALUE, "heuristic: requestedAlgoCount 0 -> INVALID_VALUE",
              "%d %d", (int)a, (int)b);
        p_cublasLtMatmulPreferenceDestroy(pref), p_cublasLtMatrixLayoutDestroy(l), p_cublasLtMatmulDescDestroy(op);
    }
}

/* ---- dev_cuda.c on the stand-ins vs the reference ------------------------------------------- */

static uint32_t g_rng = 12345;
static float frand(void) {
    g_rng = g_rng * 1664525u + 1013904223u;
    return (float)((g_rng >> 8) & 0xffff) / 32768.0f - 1.0f;
}
static void fill(void *p, hyp_dtype t, size_t n) {
    for (size_t i = 0; i < n; i++) {
        float v = frand();
        if (t == HYP_DT_F32) ((float *)p)[i] = v;
        else if (t == HYP_DT_BF16) ((uint16_t *)p)[i] = hyp_bf16_from_f32(v);
        else ((uint8_t *)p)[i] = hyp_fp8_from_float(v, t == HYP_DT_E4M3 ? HYP_FP8_E4M3 : HYP_FP8_E5M2);
    }
}

/* One GEMM case: operands random on the host, copied to the device at offset off (bytes) inside
 * their allocations, run through dev_cuda.c (stream s) and through hyp_gemm_cpu on the host
 * copies; D, bias and aux must be equal byte for byte (the same code computes both). */
static int same_as_reference(hyp_gemm g, size_t off, hyp_stream *s, char *why, size_t nwhy) {
    const int nb = g.batch > 1 ? g.batch : 1;
    size_t bytes[6];
    bytes[0] = (size_t)((nb - 1) * g.stride_a + g.lda * (g.transa ? g.m : g.k)) * hyp_dtype_size(g.atype);
    bytes[1] = (size_t)((nb - 1) * g.stride_b + g.ldb * (g.transb ? g.k : g.n)) * hyp_dtype_size(g.btype);
    bytes[2] = g.c ? (size_t)((nb - 1) * g.stride_c + g.ldc * g.n) * hyp_dtype_size(hyp_gemm_ctype(&g)) : 0;
    bytes[3] = (size_t)((nb - 1) * g.stride_d + g.ldd * g.n) * hyp_dtype_size(g.dtype);
    bytes[4] = (size_t)hyp_gemm_bias_len(&g) * hyp_dtype_size(hyp_gemm_bias_type(&g));
    bytes[5] = g.aux ? (size_t)(g.ldaux * g.n) * hyp_dtype_size(g.dtype) : 0;
    const hyp_dtype types[6] = {g.atype, g.btype, hyp_gemm_ctype(&g), g.dtype, hyp_gemm_bias_type(&g), g.dtype};
    void *host[6] = {0}, *ref[6] = {0}, *dev[6] = {0};
    float *scales_h = calloc(4, sizeof(float)), *scales_d = NULL;
    int rc = 0;
    for (int i = 0; i < 6; i++) {
        if (!bytes[i]) continue;
        host[i] = calloc(1, bytes[i]), ref[i] = calloc(1, bytes[i]);
        fill(host[i], types[i], bytes[i] / hyp_dtype_size(types[i]));
        memcpy(ref[i], host[i], bytes[i]);
        rc |= D->mem_alloc(D, &dev[i], bytes[i] + off, &E);
        rc |= D->h2d_sync(D, (char *)dev[i] + off, host[i], bytes[i], &E);
    }
    scales_h[0] = 0.5f, scales_h[1] = 2.0f, scales_h[2] = 4.0f;
    rc |= D->mem_alloc(D, (void **)&scales_d, 16, &E);
    rc |= D->h2d_sync(D, scales_d, scales_h, 16, &E);
    hyp_gemm gd = g, gr = g;
    void **pd[6] = {(void **)&gd.a, (void **)&gd.b, (void **)&gd.c, &gd.d, &gd.bias, &gd.aux};
    void **pr[6] = {(void **)&gr.a, (void **)&gr.b, (void **)&gr.c, &gr.d, &gr.bias, &gr.aux};
    for (int i = 0; i < 6; i++) *pd[i] = dev[i] ? (char *)dev[i] + off : NULL, *pr[i] = ref[i];
    if (g.atype >= HYP_DT_E4M3) {
        gd.a_scale = scales_d, gd.b_scale = scales_d + 1, gr.a_scale = scales_h, gr.b_scale = scales_h + 1;
        if (g.dtype >= HYP_DT_E4M3) gd.d_scale = scales_d + 2, gd.amax_d = scales_d + 3, gr.d_scale = scales_h + 2, gr.amax_d = scales_h + 3;
    }
    if (g.c == g.d) gd.c = gd.d, gr.c = gr.d;
    int same = 0;
    if (!rc && !(rc = D->gemm(D, &gd, s, &E)) && !(rc = D->stream_synchronize(D, s, &E)) && !(rc = hyp_gemm_cpu(&gr, &E))) {
        same = 1;
        for (int i = 3; i < 6; i++)
            if (bytes[i]) {
                D->d2h_sync(D, host[i], (char *)dev[i] + off, bytes[i], &E);
                if (memcmp(host[i], ref[i], bytes[i])) same = 0, snprintf(why, nwhy, "%s differs", i == 3 ? "D" : i == 4 ? "bias" : "aux");
            }
        if (gd.amax_d) {
            float am;
            D->d2h_sync(D, &am, scales_d + 3, 4, &E);
            if (am != scales_h[3]) same = 0, snprintf(why, nwhy, "amax %g vs %g", am, scales_h[3]);
        }
    } else {
        snprintf(why, nwhy, "%.250s", E.msg);
    }
    for (int i = 0; i < 6; i++) {
        if (dev[i]) D->mem_free(D, dev[i], &E);
        free(host[i]), free(ref[i]);
    }
    D->mem_free(D, scales_d, &E);
    free(scales_h);
    return same;
}

static hyp_gemm mk(hyp_dtype at, hyp_dtype bt, hyp_dtype dt, int ta, int tb, int64_t m, int64_t n, int64_t k) {
    hyp_gemm g;
    memset(&g, 0, sizeof g);
    g.atype = at, g.btype = bt, g.dtype = dt, g.transa = ta, g.transb = tb, g.m = m, g.n = n, g.k = k, g.alpha = 1.0f;
    g.lda = ta ? k : m, g.ldb = tb ? n : k, g.ldd = m, g.ldc = m;
    g.a = g.b = g.d = (void *)1; /* non-NULL markers: same_as_reference allocates them */
    return g;
}

static void equal_reference(void) {
    struct {
        const char *name;
        hyp_gemm g;
    } cs[32];
    int n = 0;
    hyp_gemm g;
    cs[n].name = "f32 NN", cs[n++].g = mk(HYP_DT_F32, HYP_DT_F32, HYP_DT_F32, 0, 0, 48, 20, 36);
    g = mk(HYP_DT_F32, HYP_DT_F32, HYP_DT_F32, 1, 0, 48, 20, 36), g.compute = HYP_GEMM_TF32;
    cs[n].name = "f32 TN tf32", cs[n++].g = g;
    g = mk(HYP_DT_F32, HYP_DT_F32, HYP_DT_F32, 0, 1, 48, 20, 36), g.beta = 1.0f, g.c = g.d;
    cs[n].name = "f32 NT beta 1 in place", cs[n++].g = g;
    cs[n].name = "bf16 -> f32 TN", cs[n++].g = mk(HYP_DT_BF16, HYP_DT_BF16, HYP_DT_F32, 1, 0, 64, 24, 40);
    cs[n].name = "bf16 -> bf16 NN", cs[n++].g = mk(HYP_DT_BF16, HYP_DT_BF16, HYP_DT_BF16, 0, 0, 64, 24, 40);
    cs[n].name = "e4m3 x e4m3 -> bf16", cs[n++].g = mk(HYP_DT_E4M3, HYP_DT_E4M3, HYP_DT_BF16, 1, 0, 32, 16, 64);
    cs[n].name = "e4m3 x e4m3 -> f32", cs[n++].g = mk(HYP_DT_E4M3, HYP_DT_E4M3, HYP_DT_F32, 1, 0, 32, 16, 64);
    cs[n].name = "e4m3 x e4m3 -> e4m3 (d_scale, amax)", cs[n++].g = mk(HYP_DT_E4M3, HYP_DT_E4M3, HYP_DT_E4M3, 1, 0, 32, 16, 64);
    cs[n].name = "e5m2 x e4m3 -> bf16", cs[n++].g = mk(HYP_DT_E5M2, HYP_DT_E4M3, HYP_DT_BF16, 1, 0, 32, 16, 64);
    cs[n].name = "e4m3 x e5m2 -> e5m2", cs[n++].g = mk(HYP_DT_E4M3, HYP_DT_E5M2, HYP_DT_E5M2, 1, 0, 32, 16, 64);
    static const hyp_epilogue eps[] = {HYP_EPI_BIAS, HYP_EPI_GELU, HYP_EPI_GELU_AUX, HYP_EPI_GELU_BIAS, HYP_EPI_GELU_AUX_BIAS,
                                       HYP_EPI_DGELU, HYP_EPI_DGELU_BGRAD, HYP_EPI_BGRADA, HYP_EPI_BGRADB};
    static char names[32][64];
    for (int i = 0; i < 9; i++) {
        for (int bf = 0; bf < 2; bf++) {
            if (n >= 30) break;
            hyp_dtype t = bf ? HYP_DT_BF16 : HYP_DT_F32;
            g = mk(t, t, t, 1, 0, 40, 24, 32), g.epilogue = eps[i];
            if (hyp_gemm_bias_len(&g)) g.bias = (void *)1;
            if (eps[i] == HYP_EPI_GELU_AUX || eps[i] == HYP_EPI_GELU_AUX_BIAS || eps[i] == HYP_EPI_DGELU || eps[i] == HYP_EPI_DGELU_BGRAD)
                g.aux = (void *)1, g.ldaux = 40;
            if (bf && i % 2) continue; /* bf16 for every other epilogue: enough to cover the types */
            snprintf(names[n], 64, "%s epilogue %s", bf ? "bf16" : "f32", hyp_epilogue_name(eps[i]));
            cs[n].name = names[n], cs[n++].g = g;
        }
    }
    g = mk(HYP_DT_F32, HYP_DT_F32, HYP_DT_F32, 1, 0, 16, 8, 16), g.batch = 3, g.stride_a = 16 * 16 + 16, g.stride_b = 16 * 8, g.stride_d = 16 * 8 + 32;
    cs[n].name = "f32 strided batch 3", cs[n++].g = g;
    for (int i = 0; i < n; i++) {
        char why[300] = "";
        for (int off = 0; off < 2; off++) { /* at the allocation's start, and 16 bytes in (the ZeRO sub-buffers) */
            int ok = same_as_reference(cs[i].g, off ? 16 : 0, S, why, sizeof why);
            check(ok, cs[i].name, "%s%s", off ? "at +16 bytes " : "", why);
        }
    }
}

/* dev_cuda.c's fixes: a 4-byte aligned operand (the ZeRO reduce's grads + (a - start)) runs; the
 * heuristic is given a workspace (32 MiB on sm_90) and the matmul uses it; two streams' GEMMs with
 * a workspace-staged algorithm concurrently each get the right result (a workspace per stream). */
static void dev_cuda_fixes(void) {
    char why[300] = "";
    hyp_gemm g = mk(HYP_DT_F32, HYP_DT_F32, HYP_DT_F32, 0, 0, 32, 1, 16);
    g.beta = 1.0f, g.c = g.d;
    check(same_as_reference(g, 4, S, why, sizeof why), "dev_cuda: operands at +4 bytes (ZeRO sub-buffers) run", "%s", why);
    char trace[256];
    snprintf(trace, sizeof trace, "/tmp/hyp_lt_trace_%d.txt", (int)getpid());
    unlink(trace);
    setenv("HYP_STANDIN_LT_TRACE", trace, 1);
    g = mk(HYP_DT_F32, HYP_DT_F32, HYP_DT_F32, 0, 0, 64, 48, 32);
    int ok = same_as_reference(g, 0, S, why, sizeof why);
    unsetenv("HYP_STANDIN_LT_TRACE");
    FILE *f = fopen(trace, "r");
    char line[512] = "";
    int algo = -1;
    size_t need = 0, given = 0;
    if (f && fgets(line, sizeof line, f)) sscanf(line, "matmul m %*d n %*d k %*d algo %d ws_need %zu ws_given %zu", &algo, &need, &given);
    if (f) fclose(f);
    unlink(trace);
    check(ok && algo == 1 && need > 0 && given == ((size_t)32 << 20), "dev_cuda: a 32 MiB workspace on sm_90, the workspace algorithm chosen",
          "algo %d need %zu given %zu %s", algo, need, given, why);
    /* two streams, GEMMs alternating, all in flight before one synchronize */
    hyp_stream *s2;
    D->stream_create(D, &s2, &E);
    enum { NG = 6, M = 64, N = 48, K = 32 };
    float *ha = malloc(4 * M * K), *hb = malloc(4 * K * N * NG), *hd = malloc(4 * M * N * NG), *rd = malloc(4 * M * N * NG);
    fill(ha, HYP_DT_F32, M * K), fill(hb, HYP_DT_F32, (size_t)K * N * NG);
    void *da, *db, *dd;
    D->mem_alloc(D, &da, 4 * M * K, &E), D->mem_alloc(D, &db, 4 * K * N * NG, &E), D->mem_alloc(D, &dd, 4 * M * N * NG, &E);
    D->h2d_sync(D, da, ha, 4 * M * K, &E), D->h2d_sync(D, db, hb, 4 * K * N * NG, &E);
    int rc = 0;
    for (int i = 0; i < NG; i++) {
        g = mk(HYP_DT_F32, HYP_DT_F32, HYP_DT_F32, 0, 0, M, N, K);
        g.a = da, g.b = (float *)db + i * K * N, g.d = (float *)dd + i * M * N;
        rc |= D->gemm(D, &g, i % 2 ? s2 : S, &E);
        g.a = ha, g.b = hb + i * K * N, g.d = rd + i * M * N;
        rc |= hyp_gemm_cpu(&g, &E);
    }
    rc |= D->synchronize(D, &E);
    rc |= D->d2h_sync(D, hd, dd, 4 * M * N * NG, &E);
    check(!rc && !memcmp(hd, rd, 4 * M * N * NG), "dev_cuda: concurrent GEMMs on two streams, each with its own workspace, equal the reference",
          "%s", rc ? E.msg : "");
    D->mem_free(D, da, &E), D->mem_free(D, db, &E), D->mem_free(D, dd, &E);
    D->stream_destroy(D, s2);
    free(ha), free(hb), free(hd), free(rd);
}

#define LOAD(f)                                                                                                      \
    if (!(p_##f = (__typeof__(f) *)dlsym(h, XSTR(f)))) {                                                             \
        printf("FAIL the stand-in lacks %s\n", XSTR(f));                                                            \
        return 1;                                                                                                    \
    }

int main(void) {
    setenv("HYP_CUDA_LIBDIR", HYP_STANDIN_DIR, 1);
    setenv("HYP_STANDIN_SM", "90", 1);
    if (hyp_device_open("cuda", &D, &E)) {
        printf("FAIL opening the cuda device on the stand-ins: %s\n", E.msg);
        return 1;
    }
    void *h = dlopen(HYP_STANDIN_DIR "/libcublasLt.so.13", RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        printf("FAIL dlopen the cuBLASLt stand-in: %s\n", dlerror());
        return 1;
    }
    LT_FUNCS(LOAD)
    p_cublasLtCreate(&H);
    D->stream_create(D, &S, &E);
    D->mem_alloc(D, &dev_a, 64 << 10, &E), D->mem_alloc(D, &dev_b, 64 << 10, &E);
    D->mem_alloc(D, &dev_c, 64 << 10, &E), D->mem_alloc(D, &dev_ws, 64 << 10, &E);
    D->memset_sync(D, dev_a, 0, 64 << 10, &E), D->memset_sync(D, dev_b, 0, 64 << 10, &E);
    D->memset_sync(D, dev_c, 0, 64 << 10, &E), D->memset_sync(D, dev_ws, 0, 64 << 10, &E);
    rules();
    D->synchronize(D, &E);
    equal_reference();
    dev_cuda_fixes();
    p_cublasLtDestroy(H);
    D->close(D);
    return hyp_test_finish();
}
