/* device.c — the shared part of the device layer (device.h): kernel argument sets, bf16/tf32
 * rounding, and the GEMM rules both implementations enforce. Never names an implementation (the
 * registry, device_reg.c, opens them): dev_sim.c and dev_cuda.c depend on this file, not back. */
#include "device.h"

#include <math.h>
#include <string.h>

const char *hyp_epilogue_name(hyp_epilogue ep) {
    static const char *names[] = {"none",  "bias",        "gelu", "gelu_aux", "gelu_bias", "gelu_aux_bias",
                                  "dgelu", "dgelu_bgrad", "bgrada", "bgradb"};
    return (unsigned)ep < HYP_EPI__COUNT ? names[ep] : "?";
}

static uint32_t f2u(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    return u;
}
static float u2f(uint32_t u) {
    float x;
    memcpy(&x, &u, 4);
    return x;
}

uint16_t hyp_bf16_from_f32(float x) {
    uint32_t u = f2u(x);
    if ((u & 0x7FFFFFFFu) > 0x7F800000u) return (uint16_t)((u >> 16) | 0x40); /* quiet NaN */
    u += 0x7FFFu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

float hyp_bf16_to_f32(uint16_t b) { return u2f((uint32_t)b << 16); }

float hyp_tf32_round(float x) {
    uint32_t u = f2u(x);
    if ((u & 0x7FFFFFFFu) > 0x7F800000u) return u2f(u | 0x00400000u);
    u += 0xFFFu + ((u >> 13) & 1u);
    return u2f(u & ~0x1FFFu);
}

void hyp_kargs_add(hyp_kargs *a, const void *value, size_t size) {
    if (a->n < 0) return;
    if (a->n >= HYP_KARGS_MAX || size > sizeof a->val[0] || size == 0) {
        a->n = -1;
        return;
    }
    memset(a->val[a->n], 0, sizeof a->val[0]);
    memcpy(a->val[a->n], value, size);
    a->size[a->n] = (unsigned short)size;
    a->n++;
}

void hyp_kargs_tmap(hyp_kargs *a, const void *map) {
    if (a->n < 0) return;
    if (a->n >= HYP_KARGS_MAX || a->ntmap >= HYP_KARGS_TMAP_MAX) {
        a->n = -1;
        return;
    }
    memcpy(a->tmap[a->ntmap], map, 128);
    memset(a->val[a->n], 0, sizeof a->val[0]);
    a->val[a->n][0] = (uint64_t)a->ntmap++;
    a->size[a->n] = 128;
    a->n++;
}

void **hyp_kargs_params(hyp_kargs *a) {
    for (int i = 0; i < a->n; i++) {
        if (a->size[i] != 128) {
            a->ptr[i] = a->val[i];
            continue;
        }
        /* a tensor map: 64-byte aligned where this copy of the set lives (a kernel's hyp_tmap
         * parameter is alignas(64); the sim reads it in place) */
        unsigned k = (unsigned)a->val[i][0];
        unsigned char *at = a->tmap_at[k] + ((64 - ((uintptr_t)a->tmap_at[k] & 63)) & 63);
        memcpy(at, a->tmap[k], 128);
        a->ptr[i] = at;
    }
    return a->ptr;
}

/* ---- GEMM rules ----------------------------------------------------------------------------- */

static int is_fp8(hyp_dtype t) { return t == HYP_DT_E4M3 || t == HYP_DT_E5M2; }

hyp_dtype hyp_gemm_ctype(const hyp_gemm *g) { return is_fp8(g->dtype) ? HYP_DT_BF16 : g->dtype; }

hyp_dtype hyp_gemm_bias_type(const hyp_gemm *g) { return is_fp8(g->atype) ? HYP_DT_BF16 : g->dtype; }

int64_t hyp_gemm_bias_len(const hyp_gemm *g) {
    switch (g->epilogue) {
    case HYP_EPI_BIAS:
    case HYP_EPI_GELU_BIAS:
    case HYP_EPI_GELU_AUX_BIAS:
    case HYP_EPI_DGELU_BGRAD:
    case HYP_EPI_BGRADA: return g->m;
    case HYP_EPI_BGRADB: return g->n;
    default: return 0;
    }
}

#define BAD(...) return hyp_fail(e, HYP_EINPUT, __VA_ARGS__)

int hyp_gemm_validate(const hyp_gemm *g, hyp_err *e) {
    if (!g) BAD("gemm: no descriptor");
    if (g->m < 1 || g->n < 1 || g->k < 1)
        BAD("gemm: m %lld, n %lld, k %lld — every dimension must be at least 1", (long long)g->m, (long long)g->n,
            (long long)g->k);
    if ((unsigned)g->transa > 1 || (unsigned)g->transb > 1) BAD("gemm: transa/transb must be 0 (N) or 1 (T)");
    if ((unsigned)g->atype > HYP_DT_E5M2 || (unsigned)g->btype > HYP_DT_E5M2 || (unsigned)g->dtype > HYP_DT_E5M2)
        BAD("gemm: unknown dtype");
    if ((unsigned)g->compute > HYP_GEMM_TF32) BAD("gemm: unknown compute mode %d", (int)g->compute);
    if ((unsigned)g->epilogue >= HYP_EPI__COUNT) BAD("gemm: unknown epilogue %d", (int)g->epilogue);
    const char *at = hyp_dtype_name(g->atype), *bt = hyp_dtype_name(g->btype), *dt = hyp_dtype_name(g->dtype);
    int fp8 = is_fp8(g->atype) || is_fp8(g->btype);
    if (fp8) {
        if (!is_fp8(g->atype) || !is_fp8(g->btype)) BAD("gemm: %s x %s — fp8 GEMMs need both inputs in fp8", at, bt);
        if (g->atype == HYP_DT_E5M2 && g->btype == HYP_DT_E5M2)
            BAD("gemm: e5m2 x e5m2 is not supported by cuBLASLt — make one input e4m3 (HYBRID: e4m3 forward, e5m2 gradients)");
        if (g->dtype == HYP_DT_E5M2 && g->atype != HYP_DT_E5M2 && g->btype != HYP_DT_E5M2)
            BAD("gemm: an e5m2 output needs an e5m2 input — use an e4m3, bf16 or f32 output");
        if (!(g->transa == 1 && g->transb == 0))
            BAD("gemm: fp8 GEMMs must be TN (transa = 1, transb = 0), cuBLASLt's only fp8 layout — store A transposed");
        if (g->lda % 16 || g->ldb % 16)
            BAD("gemm: fp8 lda %lld / ldb %lld must be multiples of 16 — pad the leading dimension", (long long)g->lda,
                (long long)g->ldb);
        if (((uintptr_t)g->a | (uintptr_t)g->b) & 15) BAD("gemm: fp8 A and B must be 16-byte aligned");
        if (g->compute != HYP_GEMM_F32) BAD("gemm: tf32 compute applies to f32 inputs only");
    } else {
        if (g->atype != g->btype) BAD("gemm: %s x %s — A and B must have the same type", at, bt);
        if (g->atype == HYP_DT_F32 && g->dtype != HYP_DT_F32) BAD("gemm: f32 inputs give an f32 output, not %s", dt);
        if (g->atype == HYP_DT_BF16 && g->dtype != HYP_DT_F32 && g->dtype != HYP_DT_BF16)
            BAD("gemm: bf16 inputs give an f32 or bf16 output, not %s", dt);
        if (g->compute == HYP_GEMM_TF32 && g->atype != HYP_DT_F32) BAD("gemm: tf32 compute applies to f32 inputs only");
        if (g->a_scale || g->b_scale) BAD("gemm: a_scale/b_scale apply to fp8 inputs only");
    }
    if ((g->d_scale || g->amax_d) && !is_fp8(g->dtype)) BAD("gemm: d_scale/amax_d apply to an fp8 output only");
    if (!g->a || !g->b || !g->d) BAD("gemm: A, B and D pointers are required");
    int64_t arows = g->transa ? g->k : g->m, brows = g->transb ? g->n : g->k;
    if (g->lda < arows)
        BAD("gemm: lda %lld < %lld, the rows of A as stored (column-major, transa %d)", (long long)g->lda,
            (long long)arows, g->transa);
    if (g->ldb < brows)
        BAD("gemm: ldb %lld < %lld, the rows of B as stored (column-major, transb %d)", (long long)g->ldb,
            (long long)brows, g->transb);
    if (g->ldd < g->m) BAD("gemm: ldd %lld < m %lld", (long long)g->ldd, (long long)g->m);
    if (g->beta != 0.0f) {
        if (!g->c) BAD("gemm: beta != 0 needs C");
        if (g->ldc < g->m) BAD("gemm: ldc %lld < m %lld", (long long)g->ldc, (long long)g->m);
        if (g->c == g->d && g->ldc != g->ldd) BAD("gemm: in place (C == D) needs ldc == ldd");
    }
    if (g->batch < 0) BAD("gemm: batch %d < 0", g->batch);
    if (g->batch > 1) {
        if (g->stride_a < 0 || g->stride_b < 0 || g->stride_c < 0 || g->stride_d < 0)
            BAD("gemm: negative batch stride");
        if (g->stride_d < g->ldd * g->n)
            BAD("gemm: stride_d %lld < ldd * n = %lld: the batches of D would overlap", (long long)g->stride_d,
                (long long)(g->ldd * g->n));
        if (g->epilogue != HYP_EPI_NONE) BAD("gemm: epilogues need batch <= 1 (got %d)", g->batch);
    }
    hyp_epilogue ep = g->epilogue;
    int need_bias = hyp_gemm_bias_len(g) > 0;
    int need_aux = ep == HYP_EPI_GELU_AUX || ep == HYP_EPI_GELU_AUX_BIAS || ep == HYP_EPI_DGELU || ep == HYP_EPI_DGELU_BGRAD;
    if (need_bias && !g->bias) BAD("gemm: epilogue %s needs the bias pointer", hyp_epilogue_name(ep));
    if (need_aux) {
        if (!g->aux) BAD("gemm: epilogue %s needs the aux pointer", hyp_epilogue_name(ep));
        if (g->ldaux < g->m || g->ldaux % 8)
            BAD("gemm: ldaux %lld must be >= m (%lld) and a multiple of 8 (cuBLASLt) — pad it", (long long)g->ldaux,
                (long long)g->m);
        if (is_fp8(g->dtype)) BAD("gemm: epilogue %s needs an f32 or bf16 output (aux has D's type)", hyp_epilogue_name(ep));
    }
    if (fp8 && (ep == HYP_EPI_DGELU || ep == HYP_EPI_DGELU_BGRAD || ep == HYP_EPI_BGRADA || ep == HYP_EPI_BGRADB))
        BAD("gemm: epilogue %s is not available for fp8 inputs — run it in bf16 or as a separate kernel",
            hyp_epilogue_name(ep));
    if (g->workspace_bytes && !g->workspace) BAD("gemm: workspace_bytes %zu without a workspace", g->workspace_bytes);
    return HYP_OK;
}
