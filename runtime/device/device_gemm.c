/* device_gemm.c — the CPU implementation of the device layer's GEMM (cuBLASLt semantics, exactly
 * as written in device.h): what the sim device runs and what tests/gpu compares cuBLASLt with.
 *
 * Two passes per batch: (1) the fp32 values t(i,j) after alpha/beta, bias and the GELU/dGELU
 * epilogue (aux written or read on the way) into a temporary; (2) amax, the bias gradient and the
 * conversion into D. Pass 1 reads C before pass 2 writes D, so C == D (in place) is safe. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "device.h"
#include "fp8.h"

static float load_elem(const void *p, hyp_dtype t, int64_t i, const float *lut8) {
    switch (t) {
    case HYP_DT_F32: return ((const float *)p)[i];
    case HYP_DT_BF16: return hyp_bf16_to_f32(((const uint16_t *)p)[i]);
    default: return lut8[((const uint8_t *)p)[i]];
    }
}

/* fp32 or bf16 store (the types of D, aux and bias other than fp8 D) */
static void store_elem(void *p, hyp_dtype t, int64_t i, float v) {
    if (t == HYP_DT_F32) ((float *)p)[i] = v;
    else ((uint16_t *)p)[i] = hyp_bf16_from_f32(v);
}

#define GELU_K 0.7978845608028654f /* sqrt(2/pi) */
static float gelu(float x) { return 0.5f * x * (1.0f + tanhf(GELU_K * (x + 0.044715f * x * x * x))); }
static float gelu_grad(float x) {
    float th = tanhf(GELU_K * (x + 0.044715f * x * x * x));
    return 0.5f * (1.0f + th) + 0.5f * x * (1.0f - th * th) * GELU_K * (1.0f + 3.0f * 0.044715f * x * x);
}

int hyp_gemm_cpu(const hyp_gemm *g, hyp_err *e) {
    int rc = hyp_gemm_validate(g, e);
    if (rc) return rc;
    const int64_t m = g->m, n = g->n, k = g->k;
    const int nb = g->batch > 1 ? g->batch : 1;
    const hyp_epilogue ep = g->epilogue;
    const hyp_dtype ct = hyp_gemm_ctype(g), bt = hyp_gemm_bias_type(g);
    float lut_a[256], lut_b[256];
    if (g->atype == HYP_DT_E4M3 || g->atype == HYP_DT_E5M2)
        for (int q = 0; q < 256; q++) {
            lut_a[q] = hyp_fp8_to_float((uint8_t)q, g->atype == HYP_DT_E4M3 ? HYP_FP8_E4M3 : HYP_FP8_E5M2);
            lut_b[q] = hyp_fp8_to_float((uint8_t)q, g->btype == HYP_DT_E4M3 ? HYP_FP8_E4M3 : HYP_FP8_E5M2);
        }
    double *ao = malloc(sizeof(double) * (size_t)(m * k));
    double *bo = malloc(sizeof(double) * (size_t)(n * k));
    float *t = malloc(sizeof(float) * (size_t)(m * n));
    if (!ao || !bo || !t) {
        free(ao), free(bo), free(t);
        return hyp_fail(e, HYP_EFAIL, "gemm: out of memory for a %lldx%lldx%lld product", (long long)m, (long long)n,
                        (long long)k);
    }
    const int tf32 = g->compute == HYP_GEMM_TF32;
    const float sa = g->a_scale ? *g->a_scale : 1.0f, sb = g->b_scale ? *g->b_scale : 1.0f;
    const float alpha = g->alpha * sa * sb, beta = g->beta;
    const size_t es_a = hyp_dtype_size(g->atype), es_b = hyp_dtype_size(g->btype), es_c = hyp_dtype_size(ct),
                 es_d = hyp_dtype_size(g->dtype);
    const int has_bias = ep == HYP_EPI_BIAS || ep == HYP_EPI_GELU_BIAS || ep == HYP_EPI_GELU_AUX_BIAS;
    const int gelu_fwd = ep == HYP_EPI_GELU || ep == HYP_EPI_GELU_AUX || ep == HYP_EPI_GELU_BIAS || ep == HYP_EPI_GELU_AUX_BIAS;
    const int aux_out = ep == HYP_EPI_GELU_AUX || ep == HYP_EPI_GELU_AUX_BIAS;
    const int dgelu = ep == HYP_EPI_DGELU || ep == HYP_EPI_DGELU_BGRAD;
    float amax = 0.0f;

    for (int b = 0; b < nb; b++) {
        const char *A = (const char *)g->a + (size_t)(b * g->stride_a) * es_a;
        const char *B = (const char *)g->b + (size_t)(b * g->stride_b) * es_b;
        const char *C = g->c ? (const char *)g->c + (size_t)(b * g->stride_c) * es_c : NULL;
        char *D = (char *)g->d + (size_t)(b * g->stride_d) * es_d;
        /* op(A) as rows i of k values, op(B) as columns j of k values, decoded */
        for (int64_t i = 0; i < m; i++)
            for (int64_t kk = 0; kk < k; kk++) {
                float v = load_elem(A, g->atype, g->transa ? kk + i * g->lda : i + kk * g->lda, lut_a);
                ao[i * k + kk] = tf32 ? hyp_tf32_round(v) : v;
            }
        for (int64_t j = 0; j < n; j++)
            for (int64_t kk = 0; kk < k; kk++) {
                float v = load_elem(B, g->btype, g->transb ? j + kk * g->ldb : kk + j * g->ldb, lut_b);
                bo[j * k + kk] = tf32 ? hyp_tf32_round(v) : v;
            }
        /* pass 1 */
#pragma omp parallel for schedule(static) if (m * n * k > 32768)
        for (int64_t j = 0; j < n; j++) {
            const double *bj = bo + j * k;
            for (int64_t i = 0; i < m; i++) {
                const double *ai = ao + i * k;
                double acc = 0.0;
                for (int64_t kk = 0; kk < k; kk++) acc += ai[kk] * bj[kk];
                float v = beta != 0.0f ? fmaf(alpha, (float)acc, beta * load_elem(C, ct, i + j * g->ldc, NULL))
                                       : alpha * (float)acc;
                if (has_bias) v += load_elem(g->bias, bt, i, NULL);
                if (aux_out) store_elem(g->aux, g->dtype, i + j * g->ldaux, v);
                if (gelu_fwd) v = gelu(v);
                if (dgelu) v *= gelu_grad(load_elem(g->aux, g->dtype, i + j * g->ldaux, NULL));
                t[i + j * m] = v;
            }
        }
        /* pass 2 */
        if (ep == HYP_EPI_DGELU_BGRAD)
            for (int64_t i = 0; i < m; i++) {
                double s = 0.0;
                for (int64_t j = 0; j < n; j++) s += t[i + j * m];
                store_elem(g->bias, bt, i, (float)s);
            }
        if (ep == HYP_EPI_BGRADA)
            for (int64_t i = 0; i < m; i++) {
                double s = 0.0;
                for (int64_t kk = 0; kk < k; kk++) s += ao[i * k + kk];
                store_elem(g->bias, bt, i, (float)s);
            }
        if (ep == HYP_EPI_BGRADB)
            for (int64_t j = 0; j < n; j++) {
                double s = 0.0;
                for (int64_t kk = 0; kk < k; kk++) s += bo[j * k + kk];
                store_elem(g->bias, bt, j, (float)s);
            }
        if (g->dtype == HYP_DT_E4M3 || g->dtype == HYP_DT_E5M2) {
            const hyp_fp8_fmt f = g->dtype == HYP_DT_E4M3 ? HYP_FP8_E4M3 : HYP_FP8_E5M2;
            const float ds = g->d_scale ? *g->d_scale : 1.0f;
            for (int64_t j = 0; j < n; j++)
                for (int64_t i = 0; i < m; i++) {
                    float v = t[i + j * m];
                    if (fabsf(v) > amax) amax = fabsf(v);
                    ((uint8_t *)D)[i + j * g->ldd] = hyp_fp8_from_float(v * ds, f);
                }
        } else {
            for (int64_t j = 0; j < n; j++)
                for (int64_t i = 0; i < m; i++) store_elem(D, g->dtype, i + j * g->ldd, t[i + j * m]);
        }
    }
    if (g->amax_d) *g->amax_d = amax;
    free(ao), free(bo), free(t);
    return HYP_OK;
}
