/* cublaslt_standin.c — the cuBLASLt stand-in, libcublasLt.so.13 (docs/cuda-standins.md): the
 * functions runtime/device/dev_cuda.c calls, computed by the device layer's reference GEMM
 * (runtime/device/device_gemm.c) on the driver stand-in's stream workers, over its device memory.
 *
 * It is strict: every documented cuBLASLt rule listed below is checked, at the call that checks it
 * on hardware (descriptor calls, the heuristic, cublasLtMatmul), and a violation is refused with
 * the status the library returns (the reason said once on stderr). References are to the cuBLAS
 * documentation, docs.nvidia.com/cuda/cublas/ (sections named in each rule) and to the comments
 * of cublasLt.h (CUDA 13.0), which document each attribute. It must never accept a call the real
 * library would refuse, and never compute anything other than device_gemm.c's result. What it
 * does not implement (fp16, int8, row-major orders, device pointer mode, epilogues on batches) is
 * refused with CUBLAS_STATUS_NOT_SUPPORTED and said so, never approximated. */
#define _GNU_SOURCE
#include <cublasLt.h>
#include <cuda.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "device.h"
#include "standin.h"

#define EXPORT __attribute__((visibility("default")))
#define MAGIC_HANDLE 0x4c74486eu
#define MAGIC_DESC 0x4c744465u
#define MAGIC_LAYOUT 0x4c744c61u
#define MAGIC_PREF 0x4c745072u
#define MAGIC_ALGO 0x4c74416c67000000ull
/* The algorithm that stages D through the workspace (as split-K algorithms stage partial sums):
 * offered only when the preference allows its workspace, which it really uses, so two GEMMs that
 * share one workspace concurrently corrupt each other here as on hardware. */
#define ALGO_PLAIN 0
#define ALGO_STAGED 1

#define STANDIN_WHO "hyp cublasLt stand-in: "
typedef cublasStatus_t standin_status;
#include "standin_util.h"

struct cublasLtContext {
    uint32_t magic;
};
typedef struct {
    uint32_t magic;
    int32_t compute, scale, pointer_mode, transa, transb, transc, fill;
    uint32_t epilogue;
    const void *bias, *aux, *a_scale, *b_scale, *c_scale, *d_scale, *amax_d;
    int64_t ldaux, aux_stride, bias_stride;
    int32_t bias_type, aux_type;
    int8_t fast_accum;
} lt_desc;
typedef struct {
    uint32_t magic;
    int32_t type, order;
    uint64_t rows, cols;
    int64_t ld, stride;
    int32_t batch;
} lt_layout;
typedef struct {
    uint32_t magic;
    uint32_t search, align[4];
    uint64_t max_ws;
} lt_pref;

/* ---- object life and attributes (cublasLtMatmulDescSetAttribute(), cublasLtMatrixLayoutSetAttribute(),
 * cublasLtMatmulPreferenceSetAttribute(): "CUBLAS_STATUS_INVALID_VALUE if buf is NULL or
 * sizeInBytes doesn't match the size of the internal storage for the selected attribute") ----- */

EXPORT cublasStatus_t cublasLtCreate(cublasLtHandle_t *h) {
    if (!h) return CUBLAS_STATUS_INVALID_VALUE;
    struct cublasLtContext *x = calloc(1, sizeof *x);
    if (!x) return CUBLAS_STATUS_ALLOC_FAILED;
    x->magic = MAGIC_HANDLE;
    *h = x;
    return CUBLAS_STATUS_SUCCESS;
}
EXPORT cublasStatus_t cublasLtDestroy(cublasLtHandle_t h) {
    if (!h || h->magic != MAGIC_HANDLE) return refuse(CUBLAS_STATUS_NOT_INITIALIZED, "cublasLtDestroy: not a handle");
    h->magic = 0;
    free(h);
    return CUBLAS_STATUS_SUCCESS;
}

EXPORT cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t *out, cublasComputeType_t compute, cudaDataType_t scale) {
    if (!out) return CUBLAS_STATUS_INVALID_VALUE;
    lt_desc *d = calloc(1, sizeof *d);
    if (!d) return CUBLAS_STATUS_ALLOC_FAILED;
    d->magic = MAGIC_DESC, d->compute = compute, d->scale = scale, d->epilogue = CUBLASLT_EPILOGUE_DEFAULT;
    d->transa = d->transb = d->transc = CUBLAS_OP_N, d->pointer_mode = CUBLASLT_POINTER_MODE_HOST;
    d->bias_type = d->aux_type = -1;
    *out = (cublasLtMatmulDesc_t)d;
    return CUBLAS_STATUS_SUCCESS;
}
static lt_desc *desc_of(cublasLtMatmulDesc_t p) {
    lt_desc *d = (lt_desc *)p;
    return d && d->magic == MAGIC_DESC ? d : NULL;
}
EXPORT cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t p) {
    lt_desc *d = desc_of(p);
    if (!d) return refuse(CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatmulDescDestroy: not a live descriptor");
    d->magic = 0;
    free(d);
    return CUBLAS_STATUS_SUCCESS;
}
/* One attribute set: the size must be the field's exactly (cublasLt.h documents each attribute's
 * type), then the bytes are copied. */
static cublasStatus_t set_attr(const char *who, const char *name, void *field, size_t size, const void *buf, size_t n) {
    if (n != size) return refuse(CUBLAS_STATUS_INVALID_VALUE, "%s: %s takes %zu bytes, given %zu", who, name, size, n);
    memcpy(field, buf, n);
    return CUBLAS_STATUS_SUCCESS;
}
#define ATTR(name, field) \
    case name: return set_attr(who, #name, &d->field, sizeof d->field, buf, n);
EXPORT cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t p, cublasLtMatmulDescAttributes_t a, const void *buf, size_t n) {
    static const char who[] = "cublasLtMatmulDescSetAttribute";
    lt_desc *d = desc_of(p);
    if (!d || !buf) return refuse(CUBLAS_STATUS_INVALID_VALUE, "%s: NULL or dead descriptor, or NULL buffer", who);
    switch (a) {
        ATTR(CUBLASLT_MATMUL_DESC_COMPUTE_TYPE, compute)
        ATTR(CUBLASLT_MATMUL_DESC_SCALE_TYPE, scale)
        ATTR(CUBLASLT_MATMUL_DESC_POINTER_MODE, pointer_mode)
        ATTR(CUBLASLT_MATMUL_DESC_TRANSA, transa)
        ATTR(CUBLASLT_MATMUL_DESC_TRANSB, transb)
        ATTR(CUBLASLT_MATMUL_DESC_TRANSC, transc)
        ATTR(CUBLASLT_MATMUL_DESC_FILL_MODE, fill)
        ATTR(CUBLASLT_MATMUL_DESC_EPILOGUE, epilogue)
        ATTR(CUBLASLT_MATMUL_DESC_BIAS_POINTER, bias)
        ATTR(CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE, bias_stride)
        ATTR(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, aux)
        ATTR(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, ldaux)
        ATTR(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_BATCH_STRIDE, aux_stride)
        ATTR(CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, a_scale)
        ATTR(CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, b_scale)
        ATTR(CUBLASLT_MATMUL_DESC_C_SCALE_POINTER, c_scale)
        ATTR(CUBLASLT_MATMUL_DESC_D_SCALE_POINTER, d_scale)
        ATTR(CUBLASLT_MATMUL_DESC_AMAX_D_POINTER, amax_d)
        ATTR(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE, aux_type)
        ATTR(CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, bias_type)
        ATTR(CUBLASLT_MATMUL_DESC_FAST_ACCUM, fast_accum)
    default: return refuse(CUBLAS_STATUS_NOT_SUPPORTED, "%s: attribute %d is not implemented by the stand-in", who, (int)a);
    }
}
#undef ATTR

EXPORT cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t *out, cudaDataType type, uint64_t rows, uint64_t cols, int64_t ld) {
    if (!out) return CUBLAS_STATUS_INVALID_VALUE;
    lt_layout *l = calloc(1, sizeof *l);
    if (!l) return CUBLAS_STATUS_ALLOC_FAILED;
    l->magic = MAGIC_LAYOUT, l->type = type, l->order = CUBLASLT_ORDER_COL, l->rows = rows, l->cols = cols, l->ld = ld, l->batch = 1;
    *out = (cublasLtMatrixLayout_t)l;
    return CUBLAS_STATUS_SUCCESS;
}
static lt_layout *layout_of(cublasLtMatrixLayout_t p) {
    lt_layout *l = (lt_layout *)p;
    return l && l->magic == MAGIC_LAYOUT ? l : NULL;
}
EXPORT cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t p) {
    lt_layout *l = layout_of(p);
    if (!l) return refuse(CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatrixLayoutDestroy: not a live layout");
    l->magic = 0;
    free(l);
    return CUBLAS_STATUS_SUCCESS;
}
#define ATTR(name, field) \
    case name: return set_attr(who, #name, &l->field, sizeof l->field, buf, n);
EXPORT cublasStatus_t cublasLtMatrixLayoutSetAttribute(cublasLtMatrixLayout_t p, cublasLtMatrixLayoutAttribute_t a, const void *buf, size_t n) {
    static const char who[] = "cublasLtMatrixLayoutSetAttribute";
    lt_layout *l = layout_of(p);
    if (!l || !buf) return refuse(CUBLAS_STATUS_INVALID_VALUE, "%s: NULL or dead layout, or NULL buffer", who);
    switch (a) {
        ATTR(CUBLASLT_MATRIX_LAYOUT_TYPE, type)
        ATTR(CUBLASLT_MATRIX_LAYOUT_ORDER, order)
        ATTR(CUBLASLT_MATRIX_LAYOUT_ROWS, rows)
        ATTR(CUBLASLT_MATRIX_LAYOUT_COLS, cols)
        ATTR(CUBLASLT_MATRIX_LAYOUT_LD, ld)
        ATTR(CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, batch)
        ATTR(CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, stride)
    default: return refuse(CUBLAS_STATUS_NOT_SUPPORTED, "%s: attribute %d is not implemented by the stand-in", who, (int)a);
    }
}
#undef ATTR

EXPORT cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t *out) {
    if (!out) return CUBLAS_STATUS_INVALID_VALUE;
    lt_pref *p = calloc(1, sizeof *p);
    if (!p) return CUBLAS_STATUS_ALLOC_FAILED;
    p->magic = MAGIC_PREF;
    for (int i = 0; i < 4; i++) p->align[i] = 256; /* cublasLt.h: MIN_ALIGNMENT_*_BYTES "default: 256" */
    *out = (cublasLtMatmulPreference_t)p;
    return CUBLAS_STATUS_SUCCESS;
}
static lt_pref *pref_of(cublasLtMatmulPreference_t x) {
    lt_pref *p = (lt_pref *)x;
    return p && p->magic == MAGIC_PREF ? p : NULL;
}
EXPORT cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t x) {
    lt_pref *p = pref_of(x);
    if (!p) return refuse(CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatmulPreferenceDestroy: not a live preference");
    p->magic = 0;
    free(p);
    return CUBLAS_STATUS_SUCCESS;
}
#define ATTR(name, field) \
    case name: return set_attr(who, #name, &p->field, sizeof p->field, buf, n);
EXPORT cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t x, cublasLtMatmulPreferenceAttributes_t a, const void *buf, size_t n) {
    static const char who[] = "cublasLtMatmulPreferenceSetAttribute";
    lt_pref *p = pref_of(x);
    if (!p || !buf) return refuse(CUBLAS_STATUS_INVALID_VALUE, "%s: NULL or dead preference, or NULL buffer", who);
    switch (a) {
        ATTR(CUBLASLT_MATMUL_PREF_SEARCH_MODE, search)
        ATTR(CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, max_ws)
        ATTR(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, align[0])
        ATTR(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, align[1])
        ATTR(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, align[2])
        ATTR(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, align[3])
    default: return refuse(CUBLAS_STATUS_NOT_SUPPORTED, "%s: attribute %d is not implemented by the stand-in", who, (int)a);
    }
}
#undef ATTR

EXPORT const char *cublasLtGetStatusString(cublasStatus_t st) {
    switch (st) {
    case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_MAPPING_ERROR: return "CUBLAS_STATUS_MAPPING_ERROR";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "CUBLAS_STATUS_INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
    default: return "CUBLAS_STATUS_UNKNOWN";
    }
}

/* ---- the problem: what the heuristic and cublasLtMatmul both check -------------------------- */

typedef struct {
    const lt_desc *op;
    const lt_layout *l[4]; /* A, B, C, D */
    hyp_gemm g;            /* types, shape, epilogue; pointers are device addresses */
    int es[4];             /* element sizes of A, B, C, D */
    int fp8;
} problem;

static int hyp_type(int32_t t, hyp_dtype *out) {
    switch (t) {
    case CUDA_R_32F: *out = HYP_DT_F32; return 1;
    case CUDA_R_16BF: *out = HYP_DT_BF16; return 1;
    case CUDA_R_8F_E4M3: *out = HYP_DT_E4M3; return 1;
    case CUDA_R_8F_E5M2: *out = HYP_DT_E5M2; return 1;
    default: return 0;
    }
}
static const char *tname(int32_t t) {
    switch (t) {
    case CUDA_R_32F: return "32F";
    case CUDA_R_16BF: return "16BF";
    case CUDA_R_16F: return "16F";
    case CUDA_R_8F_E4M3: return "8F_E4M3";
    case CUDA_R_8F_E5M2: return "8F_E5M2";
    case -1: return "default";
    default: return "other";
    }
}
static int epi_of(uint32_t e, hyp_epilogue *out) {
    static const uint32_t lt[HYP_EPI__COUNT] = {
        CUBLASLT_EPILOGUE_DEFAULT,  CUBLASLT_EPILOGUE_BIAS,      CUBLASLT_EPILOGUE_GELU,        CUBLASLT_EPILOGUE_GELU_AUX,
        CUBLASLT_EPILOGUE_GELU_BIAS, CUBLASLT_EPILOGUE_GELU_AUX_BIAS, CUBLASLT_EPILOGUE_DGELU, CUBLASLT_EPILOGUE_DGELU_BGRAD,
        CUBLASLT_EPILOGUE_BGRADA,   CUBLASLT_EPILOGUE_BGRADB};
    for (int i = 0; i < HYP_EPI__COUNT; i++)
        if (lt[i] == e) return *out = (hyp_epilogue)i, 1;
    return 0;
}
static int uses_aux(hyp_epilogue ep) {
    return ep == HYP_EPI_GELU_AUX || ep == HYP_EPI_GELU_AUX_BIAS || ep == HYP_EPI_DGELU || ep == HYP_EPI_DGELU_BGRAD;
}
static int is8(int32_t t) { return t == CUDA_R_8F_E4M3 || t == CUDA_R_8F_E5M2; }

/* Everything about the operation that does not depend on the data pointers. */
static cublasStatus_t check_problem(problem *p, const char *who) {
    const lt_desc *op = p->op;
    const lt_layout *A = p->l[0], *B = p->l[1], *C = p->l[2], *D = p->l[3];
    if (!op || !A || !B || !C || !D) return refuse(CUBLAS_STATUS_INVALID_VALUE, "%s: NULL or destroyed descriptor or layout", who);
    /* Implemented subset (anything else is the stand-in's limit, not a cuBLASLt rule). */
    for (int i = 0; i < 4; i++)
        if (p->l[i]->order != CUBLASLT_ORDER_COL)
            return refuse(CUBLAS_STATUS_NOT_SUPPORTED, "%s: matrix %c: only CUBLASLT_ORDER_COL is implemented by the stand-in", who, "ABCD"[i]);
    if (op->pointer_mode != CUBLASLT_POINTER_MODE_HOST)
        return refuse(CUBLAS_STATUS_NOT_SUPPORTED, "%s: only CUBLASLT_POINTER_MODE_HOST is implemented by the stand-in", who);
    if (op->transc != CUBLAS_OP_N) /* cublasLt.h TRANSC: "currently only CUBLAS_OP_N is supported" */
        return refuse(CUBLAS_STATUS_NOT_SUPPORTED, "%s: TRANSC must be CUBLAS_OP_N (cublasLt.h: only N is supported)", who);
    if ((op->transa != CUBLAS_OP_N && op->transa != CUBLAS_OP_T) || (op->transb != CUBLAS_OP_N && op->transb != CUBLAS_OP_T))
        return refuse(CUBLAS_STATUS_NOT_SUPPORTED, "%s: TRANSA/TRANSB %d/%d: real types take N or T", who, op->transa, op->transb);

    /* Rule "types": cuBLAS docs, cublasLtMatmul() "Datatypes Supported" tables (regular and FP8):
     * compute 32F with scale 32F for {A,B,C,D} = {32F,32F,32F,32F}, {16BF,16BF,16BF,16BF},
     * {16BF,16BF,32F,32F}; COMPUTE_32F_FAST_TF32 only {32F x4}; FP8 (compute 32F, scale 32F):
     * A, B in {E4M3, E5M2} but not both E5M2, (C, D) in {(32F,32F), (16BF,16BF), (16BF,E4M3)},
     * and (16BF,E5M2) only when A or B is E5M2. */
    const int32_t ta = A->type, tb = B->type, tc = C->type, td = D->type;
    int ok = 0;
    if (op->scale != CUDA_R_32F) ok = 0;
    else if (op->compute == CUBLAS_COMPUTE_32F_FAST_TF32) ok = ta == CUDA_R_32F && tb == ta && tc == ta && td == ta;
    else if (op->compute == CUBLAS_COMPUTE_32F) {
        if (ta == CUDA_R_32F) ok = tb == ta && tc == ta && td == ta;
        else if (ta == CUDA_R_16BF) ok = tb == ta && tc == td && (td == CUDA_R_16BF || td == CUDA_R_32F);
        else if (is8(ta) && is8(tb) && !(ta == CUDA_R_8F_E5M2 && tb == CUDA_R_8F_E5M2))
            ok = (tc == CUDA_R_32F && td == CUDA_R_32F) || (tc == CUDA_R_16BF && (td == CUDA_R_16BF || td == CUDA_R_8F_E4M3)) ||
                 (tc == CUDA_R_16BF && td == CUDA_R_8F_E5M2 && (ta == CUDA_R_8F_E5M2 || tb == CUDA_R_8F_E5M2));
    }
    if (!ok)
        return refuse(CUBLAS_STATUS_NOT_SUPPORTED, "%s: type combination compute %d scale %s A %s B %s C %s D %s is not in cuBLASLt's table", who,
                      op->compute, tname(op->scale), tname(ta), tname(tb), tname(tc), tname(td));
    p->fp8 = is8(ta);
    hyp_gemm *g = &p->g;
    memset(g, 0, sizeof *g);
    hyp_type(ta, &g->atype), hyp_type(tb, &g->btype), hyp_type(td, &g->dtype);
    g->compute = op->compute == CUBLAS_COMPUTE_32F_FAST_TF32 ? HYP_GEMM_TF32 : HYP_GEMM_F32;
    for (int i = 0; i < 4; i++) {
        hyp_dtype t = HYP_DT_F32;
        hyp_type(p->l[i]->type, &t);
        p->es[i] = (int)hyp_dtype_size(t);
    }

    /* Rule "shapes": cublasLtMatmul() "CUBLAS_STATUS_INVALID_VALUE: parameters are in conflict or
     * in an impossible configuration": op(A) is m x k, op(B) k x n, C and D m x n; cublasLt.h
     * MATRIX_LAYOUT_LD: for column order the column stride, >= rows. */
    const int tA = op->transa == CUBLAS_OP_T, tB = op->transb == CUBLAS_OP_T;
    const uint64_t m = tA ? A->cols : A->rows, ka = tA ? A->rows : A->cols;
    const uint64_t kb = tB ? B->cols : B->rows, n = tB ? B->rows : B->cols;
    if (!m || !n || !ka || ka != kb || D->rows != m || D->cols != n || C->rows != m || C->cols != n)
        return refuse(CUBLAS_STATUS_INVALID_VALUE, "%s: shapes in conflict: op(A) %llux%llu (trans %d), op(B) %llux%llu (trans %d), C %llux%llu, D %llux%llu", who,
                      (unsigned long long)m, (unsigned long long)ka, tA, (unsigned long long)kb, (unsigned long long)n, tB,
                      (unsigned long long)C->rows, (unsigned long long)C->cols, (unsigned long long)D->rows, (unsigned long long)D->cols);
    for (int i = 0; i < 4; i++)
        if (p->l[i]->ld < (int64_t)p->l[i]->rows)
            return refuse(CUBLAS_STATUS_INVALID_VALUE, "%s: matrix %c: ld %lld < rows %llu", who, "ABCD"[i], (long long)p->l[i]->ld,
                          (unsigned long long)p->l[i]->rows);

    /* Rule "batch": cublasLt.h BATCH_COUNT / STRIDED_BATCH_OFFSET: one batch count for all
     * matrices (cuBLASLt has no broadcast of A or B by count); strides >= 0; D's batches must not
     * overlap (they are written concurrently on hardware: overlapping outputs race). */
    const int nb = D->batch;
    if (nb < 1 || A->batch != nb || B->batch != nb || C->batch != nb)
        return refuse(CUBLAS_STATUS_INVALID_VALUE, "%s: batch counts A %d B %d C %d D %d differ", who, A->batch, B->batch, C->batch, D->batch);
    if (nb > 1) {
        for (int i = 0; i < 4; i++)
            if (p->l[i]->stride < 0) return refuse(CUBLAS_STATUS_INVALID_VALUE, "%s: matrix %c: negative batch stride", who, "ABCD"[i]);
        if ((uint64_t)D->stride < (uint64_t)D->ld * D->cols)
            return refuse(CUBLAS_STATUS_INVALID_VALUE, "%s: D's batch stride %lld < ld x cols = %lld: batches of D overlap", who,
                          (long long)D->stride, (long long)(D->ld * (int64_t)D->cols));
    }

    /* Rule "fp8 layout": cuBLAS docs, cublasLtMatmul() FP8 requirements: "A must be transposed and B
     * non-transposed (the TN format)", compute 32F, scale 32F, and the 16-byte requirements of
     * "Tensor Core Usage" for every matrix: leading dimensions x element size multiples of 16 bytes
     * (pointers: checked where they are known). */
    if (p->fp8) {
        if (!tA || tB) return refuse(CUBLAS_STATUS_NOT_SUPPORTED, "%s: FP8 needs TN (transa T, transb N), given %c%c", who, tA ? 'T' : 'N', tB ? 'T' : 'N');
        for (int i = 0; i < 4; i++)
            if ((p->l[i]->ld * p->es[i]) % 16)
                return refuse(CUBLAS_STATUS_NOT_SUPPORTED, "%s: FP8: matrix %c's ld %lld x %d bytes is not a multiple of 16", who, "ABCD"[i],
                              (long long)p->l[i]->ld, p->es[i]);
    }

    /* Rule "epilogue": cuBLAS docs, cublasLtEpilogue_t and cublasLt.h attributes: bias epilogues
     * need BIAS_POINTER (m elements; BGRADB: n), aux epilogues EPILOGUE_AUX_POINTER and
     * EPILOGUE_AUX_LD ("divisible by 8 and no less than the number of rows in the output
     * matrix"); bias type: BIAS_DATA_TYPE default (-1) = D's type, fp8 kernels take 16BF (or 32F
     * with a 32F D); aux type = D's type (fp8 aux: not implemented here). Gradient epilogues
     * (DGELU*, BGRAD*) have no FP8 kernels (cublasLtMatmul() FP8 epilogue list). */
    hyp_epilogue ep;
    if (!epi_of(op->epilogue, &ep)) return refuse(CUBLAS_STATUS_NOT_SUPPORTED, "%s: epilogue %u is not implemented by the stand-in", who, op->epilogue);
    g->epilogue = ep;
    g->m = (int64_t)m, g->n = (int64_t)n, g->k = (int64_t)ka, g->transa = tA, g->transb = tB;
    g->lda = A->ld, g->ldb = B->ld, g->ldc = C->ld, g->ldd = D->ld, g->batch = nb;
    g->stride_a = A->stride, g->stride_b = B->stride, g->stride_c = C->stride, g->stride_d = D->stride;
    if (ep != HYP_EPI_NONE && nb > 1)
        return refuse(CUBLAS_STATUS_NOT_SUPPORTED, "%s: epilogues on batched GEMMs are not implemented by the stand-in", who);
    if (p->fp8 && (ep == HYP_EPI_DGELU || ep == HYP_EPI_DGELU_BGRAD || ep == HYP_EPI_BGRADA || ep == HYP_EPI_BGRADB))
        return refuse(CUBLAS_STATUS_NOT_SUPPORTED, "%s: epilogue %s has no FP8 kernel", who, hyp_epilogue_name(ep));
    if (hyp_gemm_bias_len(g)) {
        if (!op->bias) return refuse(CUBLAS_STATUS_INVALID_VALUE, "%s: epilogue %s without CUBLASLT_MATMUL_DESC_BIAS_POINTER", who, hyp_epilogue_name(ep));
        int32_t bt = op->bias_type == -1 ? td : op->bias_type;
        int bok = p->fp8 ? (bt == CUDA_R_16BF || (bt == CUDA_R_32F && td == CUDA_R_32F)) : bt == td;
        if (!bok) return refuse(CUBLAS_STATUS_NOT_SUPPORTED, "%s: bias type %s with A %s and D %s is not supported", who, tname(bt), tname(ta), tname(td));
    }
    if (uses_aux(ep)) {
        if (!op->aux) return refuse(CUBLAS_STATUS_INVALID_VALUE, "%s: epilogue %s without CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER", who, hyp_epilogue_name(ep));
        if (op->ldaux < (int64_t)m || op->ldaux % 8)
            return refuse(CUBLAS_STATUS_INVALID_VALUE, "%s: EPILOGUE_AUX_LD %lld must be >= rows of D (%llu) and divisible by 8", who, (long long)op->ldaux,
                          (unsigned long long)m);
        if (is8(td)) return refuse(CUBLAS_STATUS_NOT_SUPPORTED, "%s: aux epilogues with an fp8 D are not implemented by the stand-in", who);
        if (op->aux_type != -1 && op->aux_type != td)
            return refuse(CUBLAS_STATUS_NOT_SUPPORTED, "%s: aux type %s differs from D's %s", who, tname(op->aux_type), tname(td));
        g->ldaux = op->ldaux;
    }
    /* Rule "scales": cublasLt.h A/B/D_SCALE_POINTER and AMAX_D_POINTER are FP8 attributes
     * (scaling factors apply to FP8 matrices; AMAX_D "only for fp8 D" in device.h's contract). */
    if (!p->fp8 && (op->a_scale || op->b_scale || op->d_scale || op->amax_d))
        return refuse(CUBLAS_STATUS_NOT_SUPPORTED, "%s: scale/amax pointers set on a non-FP8 GEMM", who);
    if (!is8(td) && (op->d_scale || op->amax_d))
        return refuse(CUBLAS_STATUS_NOT_SUPPORTED, "%s: D_SCALE/AMAX_D pointers with a %s D (fp8 D only)", who, tname(td));
    if (op->c_scale) return refuse(CUBLAS_STATUS_NOT_SUPPORTED, "%s: C_SCALE_POINTER is not implemented by the stand-in", who);
    return CUBLAS_STATUS_SUCCESS;
}

static int align_of(uintptr_t p) { return p ? 1 << (__builtin_ctzll(p | 4096)) : 4096; }

/* ---- heuristic ------------------------------------------------------------------------------ */

/* What an algorithm remembers: the alignments the heuristic was told (pointer alignment is the
 * caller's promise: cublasLt.h MIN_ALIGNMENT_*: "Selecting a smaller value will exclude
 * algorithms that can not work with matrix A that is not as strictly aligned as they need"), the
 * alignment of the bias and aux pointers it saw (cublasLt.h EPILOGUE_AUX_POINTER: "Routines that
 * don't dereference this pointer, like cublasLtMatmulAlgoGetHeuristic() depend on its value to
 * determine expected pointer alignment"), and its workspace need. */
typedef struct {
    uint64_t tag;    /* MAGIC_ALGO | id */
    uint64_t ws;     /* bytes it needs */
    uint32_t align[6]; /* A, B, C, D, bias, aux */
} algo_rec;
_Static_assert(sizeof(algo_rec) <= sizeof(cublasLtMatmulAlgo_t), "algo record fits cublasLtMatmulAlgo_t");

static size_t staged_ws(const problem *p) {
    size_t b = (size_t)p->g.m * (size_t)p->g.n * (size_t)p->es[3] * (size_t)(p->g.batch > 1 ? p->g.batch : 1);
    return (b + 255) & ~(size_t)255;
}

EXPORT cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t h, cublasLtMatmulDesc_t opd, cublasLtMatrixLayout_t a,
                                                     cublasLtMatrixLayout_t b, cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t d,
                                                     cublasLtMatmulPreference_t prefp, int requested, cublasLtMatmulHeuristicResult_t res[],
                                                     int *returned) {
    static const char who[] = "cublasLtMatmulAlgoGetHeuristic";
    if (!h || h->magic != MAGIC_HANDLE) return refuse(CUBLAS_STATUS_NOT_INITIALIZED, "%s: not a handle", who);
    const lt_pref *pref = pref_of(prefp);
    if (!pref || !res || !returned || requested <= 0) /* "INVALID_VALUE: If requestedAlgoCount is less or equal to zero" */
        return refuse(CUBLAS_STATUS_INVALID_VALUE, "%s: NULL preference/results or requestedAlgoCount %d <= 0", who, requested);
    *returned = 0;
    problem p = {desc_of(opd), {layout_of(a), layout_of(b), layout_of(c), layout_of(d)}, {0}, {0}, 0};
    cublasStatus_t st = check_problem(&p, who);
    if (st) return st;
    /* Rule "alignment told": an algorithm reads each matrix in element-sized (fp8: 16-byte) units,
     * so a preference below that excludes every algorithm (cuBLAS docs "Tensor Core Usage" for fp8). */
    for (int i = 0; i < 4; i++) {
        uint32_t need = p.fp8 ? 16 : (uint32_t)p.es[i];
        if (pref->align[i] < need || (pref->align[i] & (pref->align[i] - 1)))
            return refuse(CUBLAS_STATUS_NOT_SUPPORTED, "%s: MIN_ALIGNMENT_%c_BYTES %u: no algorithm works below %u-byte alignment", who, "ABCD"[i],
                          pref->align[i], need);
    }
    algo_rec r = {MAGIC_ALGO | ALGO_PLAIN, 0, {pref->align[0], pref->align[1], pref->align[2], pref->align[3],
                                               (uint32_t)align_of((uintptr_t)p.op->bias), (uint32_t)align_of((uintptr_t)p.op->aux)}};
    algo_rec list[2];
    int n = 0;
    size_t ws = staged_ws(&p);
    if (pref->max_ws >= ws && p.g.k >= 2) list[n] = r, list[n].tag = MAGIC_ALGO | ALGO_STAGED, list[n].ws = ws, n++;
    list[n++] = r;
    for (int i = 0; i < n && i < requested; i++) {
        memset(&res[i], 0, sizeof res[i]);
        memcpy(&res[i].algo, &list[i], sizeof list[i]);
        res[i].workspaceSize = list[i].ws, res[i].state = CUBLAS_STATUS_SUCCESS, res[i].wavesCount = 1.0f;
        ++*returned;
    }
    return CUBLAS_STATUS_SUCCESS;
}

/* ---- cublasLtMatmul ------------------------------------------------------------------------- */

typedef struct {
    hyp_gemm g; /* device addresses in the pointer fields */
    algo_rec algo;
    CUdeviceptr ws;
    size_t bytes[8]; /* extents of A, B, C, D, bias, aux, workspace; [7] unused */
    CUstream stream;
    unsigned delay_us;
} job;

static size_t extent(int64_t rows, int64_t cols, int64_t ld, int64_t stride, int batch, int es) {
    int nb = batch > 1 ? batch : 1;
    return (size_t)(((int64_t)(nb - 1) * stride + (cols - 1) * ld + rows) * es);
}

static void *view(const void *dp, size_t bytes, const char *who) { return dp ? hypsi_host_view((CUdeviceptr)(uintptr_t)dp, bytes, who) : NULL; }

static void run_job(void *arg) {
    job *j = arg;
    hyp_gemm g = j->g;
    const void *dp[6] = {j->g.a, j->g.b, j->g.c, j->g.d, j->g.bias, j->g.aux};
    void *hv[6];
    static const char *names[6] = {"cublasLtMatmul A", "cublasLtMatmul B", "cublasLtMatmul C", "cublasLtMatmul D", "cublasLtMatmul bias",
                                   "cublasLtMatmul aux"};
    for (int i = 0; i < 6; i++)
        if (dp[i] && !(hv[i] = view(dp[i], j->bytes[i], names[i]))) {
            hypsi_stream_fault(j->stream, CUDA_ERROR_ILLEGAL_ADDRESS, "cublasLtMatmul: an operand was freed before the GEMM ran");
            return;
        }
    g.a = hv[0], g.b = hv[1], g.c = dp[2] ? hv[2] : NULL, g.d = hv[3], g.bias = dp[4] ? hv[4] : NULL, g.aux = dp[5] ? hv[5] : NULL;
    const float **sp[3] = {&g.a_scale, &g.b_scale, &g.d_scale};
    for (int i = 0; i < 3; i++)
        if (*sp[i] && !(*sp[i] = view(*sp[i], sizeof(float), "cublasLtMatmul scale pointer"))) {
            hypsi_stream_fault(j->stream, CUDA_ERROR_ILLEGAL_ADDRESS, "cublasLtMatmul: a scale pointer is not device memory");
            return;
        }
    if (g.amax_d && !(g.amax_d = view(g.amax_d, sizeof(float), "cublasLtMatmul AMAX_D"))) {
        hypsi_stream_fault(j->stream, CUDA_ERROR_ILLEGAL_ADDRESS, "cublasLtMatmul: AMAX_D_POINTER is not device memory");
        return;
    }
    char *dst = g.d;
    const int64_t ldd = g.ldd, sd = g.stride_d;
    const size_t es = hyp_dtype_size(g.dtype);
    if ((j->algo.tag & 0xff) == ALGO_STAGED) { /* D through the workspace: ld m, batches packed */
        char *w = view((void *)(uintptr_t)j->ws, j->algo.ws, "cublasLtMatmul workspace");
        if (!w) {
            hypsi_stream_fault(j->stream, CUDA_ERROR_ILLEGAL_ADDRESS, "cublasLtMatmul: the workspace was freed before the GEMM ran");
            return;
        }
        g.d = w, g.ldd = g.m, g.stride_d = g.m * g.n;
    }
    hyp_err e = {0};
    if (hyp_gemm_cpu(&g, &e)) {
        note("cublasLtMatmul: the reference GEMM refused what the stand-in accepted: %s", e.msg);
        hypsi_stream_fault(j->stream, CUDA_ERROR_LAUNCH_FAILED, "cublasLtMatmul: reference GEMM refused");
        return;
    }
    if ((j->algo.tag & 0xff) == ALGO_STAGED) {
        if (j->delay_us) usleep(j->delay_us); /* the window in which a concurrent user of the workspace corrupts it */
        const char *w = g.d;
        const int nb = g.batch > 1 ? g.batch : 1;
        for (int b = 0; b < nb; b++)
            for (int64_t col = 0; col < g.n; col++)
                memcpy(dst + (size_t)(b * sd + col * ldd) * es, w + (size_t)(b * g.m * g.n + col * g.m) * es, (size_t)g.m * es);
    }
}

static void trace(const problem *p, const algo_rec *r, size_t ws_given, const void *const *ptr) {
    const char *path = getenv("HYP_STANDIN_LT_TRACE");
    if (!path || !*path) return;
    FILE *f = fopen(path, "a");
    if (!f) return;
    fprintf(f, "matmul m %lld n %lld k %lld algo %d ws_need %zu ws_given %zu align_told %u %u %u %u ptr_align %d %d %d %d\n", (long long)p->g.m,
            (long long)p->g.n, (long long)p->g.k, (int)(r->tag & 0xff), (size_t)r->ws, ws_given, r->align[0], r->align[1], r->align[2], r->align[3],
            align_of((uintptr_t)ptr[0]), align_of((uintptr_t)ptr[1]), align_of((uintptr_t)ptr[2]), align_of((uintptr_t)ptr[3]));
    fclose(f);
}

EXPORT cublasStatus_t cublasLtMatmul(cublasLtHandle_t h, cublasLtMatmulDesc_t opd, const void *alpha, const void *A, cublasLtMatrixLayout_t a,
                                     const void *B, cublasLtMatrixLayout_t b, const void *beta, const void *C, cublasLtMatrixLayout_t c, void *D,
                                     cublasLtMatrixLayout_t d, const cublasLtMatmulAlgo_t *algo, void *workspace, size_t ws_bytes,
                                     cudaStream_t stream) {
    static const char who[] = "cublasLtMatmul";
    if (!h || h->magic != MAGIC_HANDLE) return refuse(CUBLAS_STATUS_NOT_INITIALIZED, "%s: not a handle", who);
    problem p = {desc_of(opd), {layout_of(a), layout_of(b), layout_of(c), layout_of(d)}, {0}, {0}, 0};
    cublasStatus_t st = check_problem(&p, who);
    if (st) return st;
    if (!alpha || !beta || !A || !B || !D) return refuse(CUBLAS_STATUS_INVALID_VALUE, "%s: NULL alpha, beta, A, B or D", who);
    hyp_gemm *g = &p.g;
    g->alpha = *(const float *)alpha, g->beta = *(const float *)beta; /* host pointer mode: read now */
    if (g->beta != 0.0f && !C) return refuse(CUBLAS_STATUS_INVALID_VALUE, "%s: beta != 0 with a NULL C", who);
    /* Rule "in place": cuBLAS docs cublasLtMatmul(): in-place (C == D) needs ldc == ldd and the same
     * layout (Cdesc equal to Ddesc) — "CUBLAS_STATUS_INVALID_VALUE ... if C == D and Cdesc != Ddesc". */
    if (C == D && (p.l[2]->ld != p.l[3]->ld || p.l[2]->type != p.l[3]->type || p.l[2]->stride != p.l[3]->stride))
        return refuse(CUBLAS_STATUS_INVALID_VALUE, "%s: in place (C == D) with different C and D layouts (ld %lld vs %lld)", who, (long long)p.l[2]->ld,
                      (long long)p.l[3]->ld);
    algo_rec r;
    const void *ptr[4] = {A, B, C, D};
    if (algo) {
        memcpy(&r, algo, sizeof r);
        if ((r.tag & ~0xffull) != MAGIC_ALGO || (r.tag & 0xff) > ALGO_STAGED)
            return refuse(CUBLAS_STATUS_INVALID_VALUE, "%s: algo is not one cublasLtMatmulAlgoGetHeuristic returned", who);
    } else { /* cublasLtMatmul(): "If algo is NULL, the heuristic runs with the default preferences" */
        r = (algo_rec){MAGIC_ALGO | ALGO_PLAIN, 0, {256, 256, 256, 256, 4096, 4096}};
    }
    /* Rule "alignment": the pointers must be as aligned as the heuristic was told (cublasLt.h
     * PREF_MIN_ALIGNMENT_{A,B,C,D}_BYTES, default 256); the chosen algorithm assumes it: a less
     * aligned pointer is refused (on hardware: NOT_SUPPORTED or a misaligned-address fault). */
    for (int i = 0; i < 4; i++)
        if (ptr[i] && (uintptr_t)ptr[i] % r.align[i])
            return refuse(CUBLAS_STATUS_NOT_SUPPORTED, "%s: %c at %p is %d-byte aligned; the algorithm was chosen for %u (set CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_%c_BYTES)",
                          who, "ABCD"[i], ptr[i], align_of((uintptr_t)ptr[i]), r.align[i], "ABCD"[i]);
    /* bias and aux: no cuBLASLt preference states their alignment; an algorithm assumes at most the
     * 256 bytes of the matrices' (cublasLt.h: the PREF_MIN_ALIGNMENT attributes top out at 256), so
     * alignment beyond 256 at the heuristic promises nothing */
    if (p.op->bias && align_of((uintptr_t)p.op->bias) < (int)(r.align[4] < 256 ? r.align[4] : 256))
        return refuse(CUBLAS_STATUS_NOT_SUPPORTED, "%s: bias pointer less aligned (%d) than at the heuristic (%u)", who, align_of((uintptr_t)p.op->bias), r.align[4]);
    if (p.op->aux && align_of((uintptr_t)p.op->aux) < (int)(r.align[5] < 256 ? r.align[5] : 256))
        return refuse(CUBLAS_STATUS_NOT_SUPPORTED, "%s: aux pointer less aligned (%d) than at the heuristic (%u)", who, align_of((uintptr_t)p.op->aux), r.align[5]);
    /* Rule "fp8 pointers": FP8 needs every matrix 16-byte aligned (cuBLAS docs "Tensor Core Usage"). */
    if (p.fp8)
        for (int i = 0; i < 4; i++)
            if (ptr[i] && (uintptr_t)ptr[i] % 16) return refuse(CUBLAS_STATUS_NOT_SUPPORTED, "%s: FP8: %c at %p is not 16-byte aligned", who, "ABCD"[i], ptr[i]);
    /* Rule "workspace": cublasLtMatmul(): "CUBLAS_STATUS_INVALID_VALUE ... when workspaceSizeInBytes
     * is less than workspace required by the configured algo"; the workspace is device memory. */
    if (ws_bytes < r.ws)
        return refuse(CUBLAS_STATUS_INVALID_VALUE, "%s: workspace %zu bytes < the %llu the algorithm needs", who, ws_bytes, (unsigned long long)r.ws);
    if (ws_bytes && (!workspace || !hypsi_host_view((CUdeviceptr)(uintptr_t)workspace, ws_bytes, "cublasLtMatmul workspace")))
        return refuse(CUBLAS_STATUS_INVALID_VALUE, "%s: workspace %p + %zu bytes is not device memory", who, workspace, ws_bytes);
    trace(&p, &r, ws_bytes, ptr);

    job *j = calloc(1, sizeof *j);
    if (!j) return CUBLAS_STATUS_ALLOC_FAILED;
    j->g = *g, j->algo = r, j->ws = (CUdeviceptr)(uintptr_t)workspace, j->stream = (CUstream)stream;
    const lt_layout **l = p.l;
    j->g.a = A, j->g.b = B, j->g.c = g->beta != 0.0f ? C : NULL, j->g.d = D;
    j->g.bias = hyp_gemm_bias_len(g) ? (void *)p.op->bias : NULL, j->g.aux = uses_aux(g->epilogue) ? (void *)p.op->aux : NULL;
    j->g.a_scale = p.op->a_scale, j->g.b_scale = p.op->b_scale, j->g.d_scale = p.op->d_scale, j->g.amax_d = (float *)p.op->amax_d;
    for (int i = 0; i < 4; i++) j->bytes[i] = extent((int64_t)l[i]->rows, (int64_t)l[i]->cols, l[i]->ld, l[i]->stride, l[i]->batch, p.es[i]);
    j->bytes[4] = (size_t)hyp_gemm_bias_len(g) * hyp_dtype_size(hyp_gemm_bias_type(g));
    j->bytes[5] = uses_aux(g->epilogue) ? (size_t)(g->ldaux * (g->n - 1) + g->m) * hyp_dtype_size(g->dtype) : 0;
    /* Rule "memory": every operand inside one live allocation when enqueued (a host pointer or a
     * range past the end is an illegal address on hardware) — checked now and again when it runs. */
    const void *dp[6] = {A, B, j->g.c, D, j->g.bias, j->g.aux};
    for (int i = 0; i < 6; i++)
        if (dp[i] && !hypsi_host_view((CUdeviceptr)(uintptr_t)dp[i], j->bytes[i], "cublasLtMatmul operand")) {
            size_t nb = j->bytes[i];
            free(j);
            return refuse(CUBLAS_STATUS_INVALID_VALUE, "%s: %s (%p + %zu bytes) is not inside one device allocation", who,
                          (const char *[]){"A", "B", "C", "D", "bias", "aux"}[i], dp[i], nb);
        }
    const float *sc[4] = {p.op->a_scale, p.op->b_scale, p.op->d_scale, p.op->amax_d};
    for (int i = 0; i < 4; i++)
        if (sc[i] && !hypsi_host_view((CUdeviceptr)(uintptr_t)sc[i], sizeof(float), "cublasLtMatmul scale")) {
            free(j);
            return refuse(CUBLAS_STATUS_INVALID_VALUE, "%s: a scale/amax pointer (%p) is not device memory (they are device pointers)", who, (const void *)sc[i]);
        }
    const char *dl = getenv("HYP_STANDIN_LT_DELAY_US");
    j->delay_us = dl && *dl ? (unsigned)atoi(dl) : 200;
    CUresult cr = hypsi_enqueue((CUstream)stream, run_job, j, free);
    if (cr != CUDA_SUCCESS) {
        free(j);
        return refuse(CUBLAS_STATUS_EXECUTION_FAILED, "%s: the stream refused the work (CUresult %d)", who, (int)cr);
    }
    return CUBLAS_STATUS_SUCCESS;
}
