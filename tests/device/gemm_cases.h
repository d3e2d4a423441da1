/* gemm_cases.h — the device-layer GEMM checks shared by tests/unit/test_device.c (through "sim")
 * and tests/gpu/test_gpu_device.c (through "cuda", against the same reference): the case list,
 * input generation, running one case through a hyp_device, and the double-precision reference.
 *
 * Every dtype combination cuBLASLt supports (device.h) x every epilogue valid for it, on the odd
 * shape m 7, n 13, k 5; the four transposes; leading dimensions with padding (the padding holds
 * NaN, so reading it shows); alpha/beta with C, in place (C == D); strided batches; FP8 with
 * scale pointers, amax, saturation; a larger shape that runs the parallel path.
 *
 * Inputs: fp32 uniform in [-1, 1); bf16 the same rounded to bf16; fp8 +-(1 + f/8) 2^e (e4m3) or
 * +-(1 + f/4) 2^e (e5m2), e in -2..1; C and bias multiples of 1/32 in [-4, 4]; powers of two for
 * alpha, beta and the A/B scales of FP8 cases. With those, every FP8 product and sum is exact in
 * fp32, so an FP8 output is checked bit for bit against fp8(t * d_scale) of the exact t (any
 * d_scale: one rounding), except after GELU (tanh: one fp8 step allowed).
 *
 * Tolerances (|got - want| <= rtol * scale, where scale is the same expression with every term
 * replaced by its magnitude, |alpha'| sum_k |a b| + |beta c| + |bias|, carried through GELU
 * (x 1.13, the largest |gelu'|) and dGELU (x |gelu'(aux)|); bias gradients: rtol * sum of |terms|):
 *   fp32 / bf16 / fp8 inputs, fp32 output  1e-5 (fp32 accumulation in any order over k <= 96:
 *                                          the deterministic bound (k + 3) u = 5.9e-6 of the
 *                                          scale, alpha, beta and bias one rounding each)
 *   tf32 compute                           1e-3 on sim (round-to-nearest inputs: <= 2^-10 per
 *                                          product); the GPU suite allows 2e-3 (a GPU may
 *                                          truncate to tf32: <= 2^-9)
 *   bf16 output                            1e-2 (one rounding: 2^-9)
 *   fp8 output                             exact (one step after GELU); amax exact (1e-5 after GELU)
 */
#ifndef HYP_TEST_GEMM_CASES_H
#define HYP_TEST_GEMM_CASES_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "device.h"
#include "fp8.h"

typedef struct {
    char label[112];
    hyp_dtype at, bt, dt;
    hyp_gemm_compute comp;
    int ta, tb;
    int64_t m, n, k;
    int pad;        /* extra rows in every leading dimension (fp8: every one rounded up to 16) */
    hyp_epilogue ep;
    float alpha, beta;
    int batch;
    int inplace;    /* C == D */
    int scales;     /* fp8: a_scale 2, b_scale 0.25 */
    float dscale;   /* fp8 D: d_scale (0: none) */
    int want_amax;  /* fp8 D: amax_d */
} gcase;

typedef struct {
    int64_t lda, ldb, ldc, ldd, ldaux, sa, sb, sc, sd, nb;
    int64_t nA, nB, nC, nD, nbias;
    float *A, *B, *C, *aux_in, *bias_in; /* values (NaN in padding) */
    void *Ae, *Be, *Ce, *aux_e, *bias_e; /* encoded as the device holds them */
    float a_scale, b_scale;
    /* results */
    void *D, *aux_out, *bias_out;
    float amax;
} gdata;

static int gc_is_fp8(hyp_dtype t) { return t == HYP_DT_E4M3 || t == HYP_DT_E5M2; }
static int gc_has_aux(hyp_epilogue ep) {
    return ep == HYP_EPI_GELU_AUX || ep == HYP_EPI_GELU_AUX_BIAS || ep == HYP_EPI_DGELU || ep == HYP_EPI_DGELU_BGRAD;
}
static int gc_bias_in(hyp_epilogue ep) { return ep == HYP_EPI_BIAS || ep == HYP_EPI_GELU_BIAS || ep == HYP_EPI_GELU_AUX_BIAS; }
static int gc_gelu(hyp_epilogue ep) {
    return ep == HYP_EPI_GELU || ep == HYP_EPI_GELU_AUX || ep == HYP_EPI_GELU_BIAS || ep == HYP_EPI_GELU_AUX_BIAS;
}
static int gc_dgelu(hyp_epilogue ep) { return ep == HYP_EPI_DGELU || ep == HYP_EPI_DGELU_BGRAD; }

static uint64_t gc_rng;
static double gc_u01(void) {
    gc_rng ^= gc_rng << 13, gc_rng ^= gc_rng >> 7, gc_rng ^= gc_rng << 17;
    return (double)(gc_rng >> 11) * (1.0 / 9007199254740992.0);
}
static float gc_value(hyp_dtype t) {
    if (t == HYP_DT_F32) return (float)(2 * gc_u01() - 1);
    if (t == HYP_DT_BF16) return hyp_bf16_to_f32(hyp_bf16_from_f32((float)(2 * gc_u01() - 1)));
    int mant = t == HYP_DT_E4M3 ? 8 : 4, f = (int)(gc_u01() * mant), ex = (int)(gc_u01() * 4) - 2;
    float v = ldexpf(1.0f + (float)f / mant, ex);
    return gc_u01() < 0.5 ? -v : v;
}
static float gc_grid_value(void) { return (float)((int)(gc_u01() * 255) - 127) / 32.0f; } /* k/32 in [-4, 4] */

static void gc_encode(void *dst, const float *src, int64_t n, hyp_dtype t) {
    for (int64_t i = 0; i < n; i++) switch (t) {
        case HYP_DT_F32: ((float *)dst)[i] = src[i]; break;
        case HYP_DT_BF16: ((uint16_t *)dst)[i] = hyp_bf16_from_f32(src[i]); break;
        default: ((uint8_t *)dst)[i] = hyp_fp8_from_float(src[i], t == HYP_DT_E4M3 ? HYP_FP8_E4M3 : HYP_FP8_E5M2);
        }
}
static float gc_decode(const void *p, int64_t i, hyp_dtype t) {
    switch (t) {
    case HYP_DT_F32: return ((const float *)p)[i];
    case HYP_DT_BF16: return hyp_bf16_to_f32(((const uint16_t *)p)[i]);
    default: return hyp_fp8_to_float(((const uint8_t *)p)[i], t == HYP_DT_E4M3 ? HYP_FP8_E4M3 : HYP_FP8_E5M2);
    }
}

static void gc_free(gdata *g) {
    free(g->A), free(g->B), free(g->C), free(g->aux_in), free(g->bias_in);
    free(g->Ae), free(g->Be), free(g->Ce), free(g->aux_e), free(g->bias_e);
    free(g->D), free(g->aux_out), free(g->bias_out);
    memset(g, 0, sizeof *g);
}

/* A descriptor for case c (pointers left NULL). */
static hyp_gemm gc_desc(const gcase *c, const gdata *g) {
    hyp_gemm d;
    memset(&d, 0, sizeof d);
    d.transa = c->ta, d.transb = c->tb, d.m = c->m, d.n = c->n, d.k = c->k;
    d.atype = c->at, d.btype = c->bt, d.dtype = c->dt, d.compute = c->comp;
    d.alpha = c->alpha, d.beta = c->beta;
    d.lda = g->lda, d.ldb = g->ldb, d.ldc = g->ldc, d.ldd = g->ldd, d.ldaux = g->ldaux;
    d.batch = c->batch, d.stride_a = g->sa, d.stride_b = g->sb, d.stride_c = g->sc, d.stride_d = g->sd;
    d.epilogue = c->ep;
    return d;
}

/* Makes the inputs of case c (seeded by the label, so both suites use the same data). */
static int gc_make(const gcase *c, gdata *g) {
    memset(g, 0, sizeof *g);
    gc_rng = 0x9E3779B97F4A7C15ull;
    for (const char *p = c->label; *p; p++) gc_rng = (gc_rng ^ (uint64_t)(unsigned char)*p) * 0x100000001B3ull;
    if (!gc_rng) gc_rng = 1;
    int64_t ar = c->ta ? c->k : c->m, ac = c->ta ? c->m : c->k, br = c->tb ? c->n : c->k, bc = c->tb ? c->k : c->n;
    g->lda = ar + c->pad, g->ldb = br + c->pad;
    if (gc_is_fp8(c->at)) g->lda = (ar + 15) / 16 * 16, g->ldb = (br + 15) / 16 * 16;
    g->ldc = g->ldd = c->m + c->pad;
    /* cuBLASLt's FP8 rule is 16-byte leading dimensions for every matrix, C and D too */
    if (gc_is_fp8(c->at)) g->ldc = g->ldd = (c->m + c->pad + 15) / 16 * 16;
    g->ldaux = (c->m + 7) / 8 * 8;
    g->nb = c->batch > 1 ? c->batch : 1;
    g->sa = g->lda * ac, g->sb = g->ldb * bc, g->sc = g->sd = g->ldd * c->n;
    g->nA = g->sa * g->nb, g->nB = g->sb * g->nb, g->nC = g->nD = g->sd * g->nb;
    hyp_gemm d = gc_desc(c, g);
    hyp_dtype ct = hyp_gemm_ctype(&d), bt = hyp_gemm_bias_type(&d);
    g->nbias = hyp_gemm_bias_len(&d);
    g->A = malloc(sizeof(float) * g->nA), g->B = malloc(sizeof(float) * g->nB), g->C = malloc(sizeof(float) * g->nC);
    g->Ae = malloc(g->nA * hyp_dtype_size(c->at)), g->Be = malloc(g->nB * hyp_dtype_size(c->bt));
    g->Ce = malloc(g->nC * hyp_dtype_size(ct));
    g->D = malloc(g->nD * hyp_dtype_size(c->dt));
    int64_t naux = g->ldaux * c->n;
    g->aux_in = malloc(sizeof(float) * naux), g->aux_e = malloc(naux * 4);
    g->aux_out = malloc(naux * hyp_dtype_size(c->dt));
    int64_t nb1 = g->nbias ? g->nbias : 1;
    g->bias_in = malloc(sizeof(float) * nb1), g->bias_e = malloc(nb1 * 4), g->bias_out = malloc(nb1 * 4);
    if (!g->A || !g->B || !g->C || !g->Ae || !g->Be || !g->Ce || !g->D || !g->aux_in || !g->aux_e || !g->aux_out ||
        !g->bias_in || !g->bias_e || !g->bias_out)
        return -1;
    for (int64_t b = 0; b < g->nb; b++) {
        for (int64_t j = 0; j < ac; j++)
            for (int64_t i = 0; i < g->lda; i++) g->A[b * g->sa + j * g->lda + i] = i < ar ? gc_value(c->at) : NAN;
        for (int64_t j = 0; j < bc; j++)
            for (int64_t i = 0; i < g->ldb; i++) g->B[b * g->sb + j * g->ldb + i] = i < br ? gc_value(c->bt) : NAN;
        for (int64_t j = 0; j < c->n; j++)
            for (int64_t i = 0; i < g->ldc; i++) g->C[b * g->sc + j * g->ldc + i] = i < c->m ? gc_grid_value() : NAN;
    }
    for (int64_t j = 0; j < c->n; j++)
        for (int64_t i = 0; i < g->ldaux; i++)
            g->aux_in[j * g->ldaux + i] = i < c->m ? (float)(4 * gc_u01() - 2) : NAN;
    if (!gc_is_fp8(c->dt)) gc_encode(g->aux_e, g->aux_in, naux, c->dt);
    if (c->dt == HYP_DT_BF16) /* the values as stored */
        for (int64_t i = 0; i < naux; i++) g->aux_in[i] = hyp_bf16_to_f32(((uint16_t *)g->aux_e)[i]);
    for (int64_t i = 0; i < nb1; i++) g->bias_in[i] = gc_grid_value();
    gc_encode(g->bias_e, g->bias_in, nb1, bt);
    gc_encode(g->Ae, g->A, g->nA, c->at);
    gc_encode(g->Be, g->B, g->nB, c->bt);
    gc_encode(g->Ce, g->C, g->nC, ct);
    g->a_scale = c->scales ? 2.0f : 1.0f, g->b_scale = c->scales ? 0.25f : 1.0f;
    return 0;
}

/* Runs case c on device dv: uploads the inputs, enqueues the GEMM on a new stream, downloads
 * D / aux / bias / amax into g. */
static int gc_run(hyp_device *dv, const gcase *c, gdata *g, hyp_err *e) {
    hyp_gemm d = gc_desc(c, g);
    hyp_dtype ct = hyp_gemm_ctype(&d), bt = hyp_gemm_bias_type(&d);
    size_t es_d = hyp_dtype_size(c->dt), naux = (size_t)(g->ldaux * c->n), nbias = (size_t)(g->nbias ? g->nbias : 1);
    void *dA = NULL, *dB = NULL, *dC = NULL, *dD = NULL, *daux = NULL, *dbias = NULL, *dws = NULL;
    float *dsc = NULL;
    hyp_stream *s = NULL;
    int rc;
#define GC_TRY(x)                                                                                                    \
    do {                                                                                                             \
        if ((rc = (x))) goto out;                                                                                    \
    } while (0)
    GC_TRY(dv->mem_alloc(dv, &dA, g->nA * hyp_dtype_size(c->at), e));
    GC_TRY(dv->mem_alloc(dv, &dB, g->nB * hyp_dtype_size(c->bt), e));
    GC_TRY(dv->mem_alloc(dv, &dD, g->nD * es_d, e));
    GC_TRY(dv->mem_alloc(dv, &daux, naux * es_d, e));
    GC_TRY(dv->mem_alloc(dv, &dbias, nbias * 4, e));
    GC_TRY(dv->mem_alloc(dv, (void **)&dsc, 4 * sizeof(float), e));
    size_t ws = 4u << 20;
    GC_TRY(dv->mem_alloc(dv, &dws, ws, e));
    GC_TRY(dv->h2d_sync(dv, dA, g->Ae, g->nA * hyp_dtype_size(c->at), e));
    GC_TRY(dv->h2d_sync(dv, dB, g->Be, g->nB * hyp_dtype_size(c->bt), e));
    if (c->inplace) {
        GC_TRY(dv->h2d_sync(dv, dD, g->Ce, g->nC * hyp_dtype_size(ct), e));
    } else {
        GC_TRY(dv->memset_sync(dv, dD, 0xFF, g->nD * es_d, e));
        if (c->beta != 0.0f) {
            GC_TRY(dv->mem_alloc(dv, &dC, g->nC * hyp_dtype_size(ct), e));
            GC_TRY(dv->h2d_sync(dv, dC, g->Ce, g->nC * hyp_dtype_size(ct), e));
        }
    }
    if (gc_dgelu(c->ep)) GC_TRY(dv->h2d_sync(dv, daux, g->aux_e, naux * es_d, e));
    else GC_TRY(dv->memset_sync(dv, daux, 0xFF, naux * es_d, e));
    if (gc_bias_in(c->ep)) GC_TRY(dv->h2d_sync(dv, dbias, g->bias_e, nbias * hyp_dtype_size(bt), e));
    else GC_TRY(dv->memset_sync(dv, dbias, 0xFF, nbias * 4, e));
    float sc[4] = {g->a_scale, g->b_scale, c->dscale, -1.0f};
    GC_TRY(dv->h2d_sync(dv, dsc, sc, sizeof sc, e));
    d.a = dA, d.b = dB, d.c = c->inplace ? dD : dC, d.d = dD;
    if (g->nbias) d.bias = dbias;
    if (gc_has_aux(c->ep)) d.aux = daux;
    if (c->scales) d.a_scale = dsc, d.b_scale = dsc + 1;
    if (c->dscale != 0.0f) d.d_scale = dsc + 2;
    if (c->want_amax) d.amax_d = dsc + 3;
    d.workspace = dws, d.workspace_bytes = ws;
    GC_TRY(dv->stream_create(dv, &s, e));
    GC_TRY(dv->gemm(dv, &d, s, e));
    GC_TRY(dv->d2h(dv, g->D, dD, g->nD * es_d, s, e));
    GC_TRY(dv->d2h(dv, g->aux_out, daux, naux * es_d, s, e));
    GC_TRY(dv->d2h(dv, g->bias_out, dbias, nbias * 4, s, e));
    GC_TRY(dv->d2h(dv, &g->amax, dsc + 3, 4, s, e));
    GC_TRY(dv->stream_synchronize(dv, s, e));
out:
    if (s) dv->stream_destroy(dv, s);
    void *bufs[] = {dA, dB, dC, dD, daux, dbias, dsc, dws};
    hyp_err e2;
    for (int i = 0; i < 8; i++) dv->mem_free(dv, bufs[i], &e2);
    return rc;
#undef GC_TRY
}

static double gc_gelu_d(double x) { return 0.5 * x * (1.0 + tanh(0.7978845608028654 * (x + 0.044715 * x * x * x))); }
static double gc_gelu_grad_d(double x) {
    double th = tanh(0.7978845608028654 * (x + 0.044715 * x * x * x));
    return 0.5 * (1.0 + th) + 0.5 * x * (1.0 - th * th) * 0.7978845608028654 * (1.0 + 3.0 * 0.044715 * x * x);
}

/* fp8 codes of the same sign are ordered like their values: the distance in representable steps */
static int gc_fp8_steps(uint8_t a, uint8_t b) {
    if (a == b) return 0;
    if ((a ^ b) & 0x80) return ((a & 0x7F) == 0 && (b & 0x7F) == 0) ? 0 : (a & 0x7F) + (b & 0x7F);
    return abs((int)(a & 0x7F) - (int)(b & 0x7F));
}

/* Checks g's results against the double reference; tf32_rtol: 1e-3 (sim) or 2e-3 (GPU). Writes
 * a one-line summary (worst error / tolerance) into msg. Returns 1 when everything is within. */
static int gc_check(const gcase *c, const gdata *g, double tf32_rtol, char *msg, size_t msz) {
    hyp_gemm d = gc_desc(c, g);
    hyp_dtype bt = hyp_gemm_bias_type(&d);
    const int64_t m = c->m, n = c->n, k = c->k;
    double rt = c->dt == HYP_DT_BF16 ? 1e-2 : c->comp == HYP_GEMM_TF32 ? tf32_rtol : 1e-5;
    double worst = 0.0; /* err / tol */
    int bad = 0, fp8_steps = 0, nan_pad = 1;
    double alpha = (double)c->alpha * g->a_scale * g->b_scale, amax = 0.0;
    double *t = malloc(sizeof(double) * m * n), *ts = malloc(sizeof(double) * m * n);
    if (!t || !ts) {
        free(t), free(ts);
        snprintf(msg, msz, "out of memory");
        return 0;
    }
#define GC_CMP(got, want, scale, r)                                                                                  \
    do {                                                                                                             \
        double err_ = fabs((double)(got) - (want)), tol_ = (r) * (scale) + 1e-30;                                    \
        if (!(err_ <= tol_)) bad++;                                                                                  \
        if (err_ / tol_ > worst || isnan(err_)) worst = isnan(err_) ? INFINITY : err_ / tol_;                        \
    } while (0)
    for (int64_t b = 0; b < g->nb; b++) {
        const float *A = g->A + b * g->sa, *B = g->B + b * g->sb, *C = g->C + b * g->sc;
        for (int64_t j = 0; j < n; j++)
            for (int64_t i = 0; i < m; i++) {
                double acc = 0, sabs = 0;
                for (int64_t kk = 0; kk < k; kk++) {
                    double a = c->ta ? A[kk + i * g->lda] : A[i + kk * g->lda];
                    double bb = c->tb ? B[j + kk * g->ldb] : B[kk + j * g->ldb];
                    acc += a * bb, sabs += fabs(a * bb);
                }
                double v = alpha * acc, sc = fabs(alpha) * sabs;
                if (c->beta != 0.0f) v += (double)c->beta * C[i + j * g->ldc], sc += fabs((double)c->beta * C[i + j * g->ldc]);
                if (gc_bias_in(c->ep)) v += g->bias_in[i], sc += fabs(g->bias_in[i]);
                if (c->ep == HYP_EPI_GELU_AUX || c->ep == HYP_EPI_GELU_AUX_BIAS)
                    GC_CMP(gc_decode(g->aux_out, i + j * g->ldaux, c->dt), v, sc, rt);
                if (gc_gelu(c->ep)) v = gc_gelu_d(v), sc *= 1.13;
                if (gc_dgelu(c->ep)) {
                    double gg = gc_gelu_grad_d(g->aux_in[i + j * g->ldaux]);
                    v *= gg, sc *= fabs(gg);
                }
                t[i + j * m] = v, ts[i + j * m] = sc;
                if (fabs(v) > amax) amax = fabs(v);
                int64_t di = b * g->sd + i + j * g->ldd;
                if (gc_is_fp8(c->dt)) {
                    float ds = c->dscale != 0.0f ? c->dscale : 1.0f;
                    uint8_t want = hyp_fp8_from_float((float)(v * ds), c->dt == HYP_DT_E4M3 ? HYP_FP8_E4M3 : HYP_FP8_E5M2);
                    int st = gc_fp8_steps(((uint8_t *)g->D)[di], want);
                    if (st > fp8_steps) fp8_steps = st;
                    if (st > (gc_gelu(c->ep) ? 1 : 0)) bad++;
                } else {
                    GC_CMP(gc_decode(g->D, di, c->dt), v, sc, rt);
                }
            }
        if (!c->inplace) /* D's padding rows are not written */
            for (int64_t j = 0; j < n; j++)
                for (int64_t i = m; i < g->ldd; i++) {
                    const unsigned char *p = (const unsigned char *)g->D + (size_t)(b * g->sd + i + j * g->ldd) * hyp_dtype_size(c->dt);
                    for (size_t q = 0; q < hyp_dtype_size(c->dt); q++)
                        if (p[q] != 0xFF) nan_pad = 0;
                }
    }
    if (!nan_pad) bad++;
    /* bias gradients (batch 1) */
    if (c->ep == HYP_EPI_DGELU_BGRAD)
        for (int64_t i = 0; i < m; i++) {
            double s = 0, sc = 0;
            for (int64_t j = 0; j < n; j++) s += t[i + j * m], sc += ts[i + j * m];
            GC_CMP(gc_decode(g->bias_out, i, bt), s, sc, rt);
        }
    if (c->ep == HYP_EPI_BGRADA || c->ep == HYP_EPI_BGRADB) {
        int64_t len = c->ep == HYP_EPI_BGRADA ? m : n;
        for (int64_t x = 0; x < len; x++) {
            double s = 0, sc = 0;
            for (int64_t kk = 0; kk < k; kk++) {
                double v = c->ep == HYP_EPI_BGRADA ? (c->ta ? g->A[kk + x * g->lda] : g->A[x + kk * g->lda])
                                                   : (c->tb ? g->B[x + kk * g->ldb] : g->B[kk + x * g->ldb]);
                s += v, sc += fabs(v);
            }
            GC_CMP(gc_decode(g->bias_out, x, bt), s, sc, rt);
        }
    }
    double amax_err = 0;
    if (c->want_amax) {
        amax_err = fabs(g->amax - amax);
        if (gc_gelu(c->ep) ? amax_err > 1e-5 * amax : amax_err != 0) bad++;
    }
    snprintf(msg, msz, "worst error %.3g of its tolerance%s%s%s", worst, gc_is_fp8(c->dt) ? (fp8_steps ? ", fp8 off by 1 step" : ", fp8 exact") : "",
             c->want_amax ? (amax_err == 0 ? ", amax exact" : ", amax off") : "", nan_pad ? "" : ", D padding written");
    free(t), free(ts);
    return bad == 0;
#undef GC_CMP
}

/* ---- the case list -------------------------------------------------------------------------- */

static int gc_add(gcase *list, int n, int max, gcase c) {
    if (n >= max) return n;
    static const char *tn = "NT";
    snprintf(c.label, sizeof c.label, "%s x %s -> %s%s %c%c m%lld n%lld k%lld%s %s%s%s%s", hyp_dtype_name(c.at),
             hyp_dtype_name(c.bt), hyp_dtype_name(c.dt), c.comp == HYP_GEMM_TF32 ? " (tf32)" : "", tn[c.ta], tn[c.tb],
             (long long)c.m, (long long)c.n, (long long)c.k, c.pad ? " padded" : "", hyp_epilogue_name(c.ep),
             c.beta != 0.0f ? (c.inplace ? " beta in-place" : " beta") : "", c.batch > 1 ? " batched" : "",
             c.scales || c.dscale != 0.0f ? " scaled" : "");
    list[n] = c;
    return n + 1;
}

static int gc_list(gcase *list, int max) {
    static const struct {
        hyp_dtype a, b, d;
        hyp_gemm_compute comp;
    } types[] = {{HYP_DT_F32, HYP_DT_F32, HYP_DT_F32, HYP_GEMM_F32},     {HYP_DT_F32, HYP_DT_F32, HYP_DT_F32, HYP_GEMM_TF32},
                 {HYP_DT_BF16, HYP_DT_BF16, HYP_DT_F32, HYP_GEMM_F32},   {HYP_DT_BF16, HYP_DT_BF16, HYP_DT_BF16, HYP_GEMM_F32},
                 {HYP_DT_E4M3, HYP_DT_E4M3, HYP_DT_F32, HYP_GEMM_F32},   {HYP_DT_E4M3, HYP_DT_E4M3, HYP_DT_BF16, HYP_GEMM_F32},
                 {HYP_DT_E4M3, HYP_DT_E4M3, HYP_DT_E4M3, HYP_GEMM_F32},  {HYP_DT_E4M3, HYP_DT_E5M2, HYP_DT_E5M2, HYP_GEMM_F32},
                 {HYP_DT_E5M2, HYP_DT_E4M3, HYP_DT_BF16, HYP_GEMM_F32}};
    int n = 0;
    const int ntypes = (int)(sizeof types / sizeof types[0]);
    /* every dtype combination x every epilogue valid for it, odd shape */
    for (int ti = 0; ti < ntypes; ti++)
        for (int ep = 0; ep < HYP_EPI__COUNT; ep++) {
            int fp8 = gc_is_fp8(types[ti].a);
            if (fp8 && (gc_dgelu((hyp_epilogue)ep) || ep == HYP_EPI_BGRADA || ep == HYP_EPI_BGRADB)) continue;
            if (gc_is_fp8(types[ti].d) && gc_has_aux((hyp_epilogue)ep)) continue;
            gcase c = {.at = types[ti].a, .bt = types[ti].b, .dt = types[ti].d, .comp = types[ti].comp, .m = 7, .n = 13,
                       .k = 5, .ep = (hyp_epilogue)ep, .alpha = 1.0f};
            c.ta = fp8 ? 1 : (ep >> 1) & 1, c.tb = fp8 ? 0 : ep & 1; /* spread the transposes */
            if (fp8) c.scales = 1, c.dscale = gc_is_fp8(c.dt) ? 0.37f : 0.0f, c.want_amax = gc_is_fp8(c.dt);
            n = gc_add(list, n, max, c);
        }
    /* the four transposes with padded leading dimensions, alpha and beta */
    for (int ti = 0; ti < 4; ti++)
        for (int tr = 0; tr < 4; tr++) {
            gcase c = {.at = types[ti].a, .bt = types[ti].b, .dt = types[ti].d, .comp = types[ti].comp, .ta = tr >> 1,
                       .tb = tr & 1, .m = 7, .n = 13, .k = 5, .pad = 3, .alpha = 0.5f, .beta = 0.25f};
            n = gc_add(list, n, max, c);
        }
    /* in place, batched, a larger shape (parallel path) */
    n = gc_add(list, n, max, (gcase){.at = HYP_DT_F32, .bt = HYP_DT_F32, .dt = HYP_DT_F32, .m = 9, .n = 6, .k = 11, .pad = 2,
                                     .alpha = 1.0f, .beta = 1.0f, .inplace = 1, .ep = HYP_EPI_BIAS});
    n = gc_add(list, n, max, (gcase){.at = HYP_DT_BF16, .bt = HYP_DT_BF16, .dt = HYP_DT_BF16, .ta = 1, .m = 9, .n = 6,
                                     .k = 11, .alpha = 2.0f, .beta = -0.5f, .inplace = 1});
    n = gc_add(list, n, max, (gcase){.at = HYP_DT_F32, .bt = HYP_DT_F32, .dt = HYP_DT_F32, .tb = 1, .m = 7, .n = 5, .k = 9,
                                     .pad = 1, .alpha = 1.0f, .batch = 3});
    n = gc_add(list, n, max, (gcase){.at = HYP_DT_BF16, .bt = HYP_DT_BF16, .dt = HYP_DT_F32, .ta = 1, .m = 8, .n = 3, .k = 6,
                                     .alpha = 1.0f, .beta = 0.5f, .batch = 2});
    n = gc_add(list, n, max, (gcase){.at = HYP_DT_F32, .bt = HYP_DT_F32, .dt = HYP_DT_F32, .comp = HYP_GEMM_TF32, .m = 5,
                                     .n = 4, .k = 7, .alpha = 1.0f, .batch = 2});
    n = gc_add(list, n, max, (gcase){.at = HYP_DT_F32, .bt = HYP_DT_F32, .dt = HYP_DT_F32, .ta = 1, .m = 64, .n = 48, .k = 96,
                                     .alpha = 1.0f, .ep = HYP_EPI_GELU_AUX_BIAS});
    n = gc_add(list, n, max, (gcase){.at = HYP_DT_BF16, .bt = HYP_DT_BF16, .dt = HYP_DT_BF16, .m = 64, .n = 48, .k = 96,
                                     .alpha = 1.0f, .ep = HYP_EPI_BGRADB});
    /* FP8: alpha, beta with C, bias, larger shapes, saturation (d_scale 64) */
    n = gc_add(list, n, max, (gcase){.at = HYP_DT_E4M3, .bt = HYP_DT_E4M3, .dt = HYP_DT_E4M3, .ta = 1, .m = 64, .n = 48,
                                     .k = 96, .alpha = 0.5f, .beta = 0.5f, .ep = HYP_EPI_BIAS, .scales = 1, .dscale = 0.37f,
                                     .want_amax = 1});
    n = gc_add(list, n, max, (gcase){.at = HYP_DT_E4M3, .bt = HYP_DT_E5M2, .dt = HYP_DT_F32, .ta = 1, .m = 32, .n = 16,
                                     .k = 64, .alpha = 1.0f, .beta = 0.5f, .scales = 1});
    n = gc_add(list, n, max, (gcase){.at = HYP_DT_E4M3, .bt = HYP_DT_E4M3, .dt = HYP_DT_BF16, .ta = 1, .m = 16, .n = 16,
                                     .k = 32, .alpha = 1.0f, .beta = 1.0f, .inplace = 1, .ep = HYP_EPI_GELU_AUX_BIAS,
                                     .scales = 1});
    n = gc_add(list, n, max, (gcase){.at = HYP_DT_E4M3, .bt = HYP_DT_E4M3, .dt = HYP_DT_E4M3, .ta = 1, .m = 16, .n = 16,
                                     .k = 32, .alpha = 1.0f, .scales = 1, .dscale = 64.0f, .want_amax = 1});
    return n;
}

#endif
