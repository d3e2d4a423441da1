/* test_kernels_sim.c — every kernel template (templates/FAMILY.cu.lua), rendered by `gen render` for
 * a regular and an odd shape, runs under the CPU simulator (runtime/sim.h) and matches the CPU
 * backend's op (runtime/ops_cpu.h), forward and backward.
 *
 * Tolerances, per dtype (|got - want| <= atol + rtol * |want|, atol relative to the largest
 * |want| of the tensor, so sums whose terms cancel are judged against the scale of the data):
 *   fp32 ops:           rtol 1e-5, atol 1e-5 * max|want|    (different summation orders, expf vs
 *                                                            the CPU's polynomial exp: ~1e-7 each)
 *                       Derivation (docs/test-tolerances.md E1, E6): the reductions here span
 *                       K <= 256 terms (classifier V 256, widths <= 128, T <= 64); each rounding
 *                       is <= u = 2^-24 relative, uniform and independent, so the difference of
 *                       two orders has rms sqrt(2/3) u sqrt(K) = 7.8e-7 of the data's scale at
 *                       K = 256, and 1e-5 is 12.8 of those sigmas (exp: <= 2 ulp each, included);
 *                       the global norm (512 fixed fp32 partials, tree depth <= 8, then double) is
 *                       within (K_thread + 8) u <= 1e-6 deterministically (positive terms). A wrong
 *                       index, mask or missing term is off by O(max|want|).
 *   fp32, same order:   bit-exact (embedding forward/backward: the GPU kernels add in the CPU's
 *                                  order, which is what "deterministic" promises)
 *   bf16 (RNE casts):   bit-exact against an independent bit-level reference
 *   bf16 (stochastic):  each value is the bf16 just below or just above the fp32 result, and the
 *                       rate of rounding up matches the fraction (unbiasedness, 5 sigma)
 *   fp16, fp8 E4M3/E5M2 casts: bit-exact against a brute-force nearest-even (saturating for fp8)
 *                       encoder written here; the transposed fp8 copies, round_bf16, NaN/inf
 *                       inputs and fp8_scale_current (amax 0, inf, NaN, overflow) bit-exact
 *                       against runtime/fp8.c; round_fp16 bit-exact against runtime/cpu's
 *                       op_round_fp16 (v2102's fp16 GEMM operands on a device).
 * Gradient buffers are prefilled with random values: backward kernels must accumulate (+=).
 *
 * Needs the simulator's host compiler (g++); each rendered file is compiled once through the
 * simulator's cache. Prints one line per check and "N passed, M failed"; exits 1 on failure.
 */
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "distill.h"
#include "fp8.h"
#include "ops_cpu.h"
#include "optim_kernels_cpu.h"
#include "ops_flash.h"
#include "optim.h"
#include "sim.h"

#include "hyp_test.h"

/* data, allocations, check_f32, rendering/opening/launching a family: shared with the other
   simulator kernel tests */
#include "sim_kernel_test.h"

static void check_exact(const char *name, const void *got, const void *want, size_t bytes) {
    const unsigned char *a = got, *b = want;
    size_t i = 0;
    while (i < bytes && a[i] == b[i]) i++;
    if (i == bytes) check(1, name, "bit-exact (%zu bytes)", bytes);
    else check(0, name, "first difference at byte %zu of %zu", i, bytes);
}

/* ------------------------------------------------------------------------------------------ */
/* Elementwise: gelu, residual add/accumulate, swiglu */

static void test_gelu(const char *tag, long n) {
    mod_t md;
    if (open_family(&md, "gelu", "", tag)) return;
    char nm[200];
    float *inp = frandbuf(n, 4.0f), *out = fbuf(n), *ref = fbuf(n);
    void *a1[] = {&out, &inp, &n};
    launch(&md, "gelu_fwd", cdiv(n, 1024), 1, 1, 256, a1);
    op_gelu_fwd(ref, inp, n);
    check_f32(NAME(nm, "gelu_fwd[%s] n=%ld", tag, n), out, ref, n, TOL_F32);
    float *dout = frandbuf(n, 1.0f), *dinp = frandbuf(n, 1.0f), *dref = fcopy(dinp, n);
    void *a2[] = {&dinp, &inp, &dout, &n};
    launch(&md, "gelu_bwd", cdiv(n, 1024), 1, 1, 256, a2);
    op_gelu_bwd(dref, inp, dout, n);
    check_f32(NAME(nm, "gelu_bwd[%s] accumulates", tag), dinp, dref, n, TOL_F32);
    close_family(&md);
}

static void test_residual(const char *tag, long n) {
    mod_t md;
    if (open_family(&md, "residual", "", tag)) return;
    char nm[200];
    float *a = frandbuf(n, 1.0f), *b = frandbuf(n, 1.0f), *out = fbuf(n), *ref = fbuf(n);
    void *a1[] = {&out, &a, &b, &n};
    launch(&md, "add_fwd", cdiv(n, 1024), 1, 1, 256, a1);
    op_add_fwd(ref, a, b, n);
    check_exact(NAME(nm, "add_fwd[%s] n=%ld", tag, n), out, ref, (size_t)n * 4);
    float *dst = frandbuf(n, 1.0f), *dref = fcopy(dst, n);
    void *a2[] = {&dst, &a, &n};
    launch(&md, "accumulate", cdiv(n, 1024), 1, 1, 256, a2);
    op_accumulate(dref, a, n);
    check_exact(NAME(nm, "accumulate[%s]", tag), dst, dref, (size_t)n * 4);
    close_family(&md);
}

static void test_swiglu(const char *tag, int N, int H) {
    char consts[64], nm[200];
    snprintf(consts, sizeof consts, "H=%d", H);
    mod_t md;
    if (open_family(&md, "swiglu", consts, tag)) return;
    int vec = H % 4 == 0 ? 4 : 1;
    long n2 = 2L * N * H, n1 = (long)N * H;
    float *inp = frandbuf(n2, 3.0f), *out = fbuf(n1), *ref = fbuf(n1);
    void *a1[] = {&out, &inp, &N};
    launch(&md, "swiglu_fwd", cdiv(n1, 256L * vec), 1, 1, 256, a1);
    op_swiglu_fwd(ref, inp, N, H);
    check_f32(NAME(nm, "swiglu_fwd[%s] N=%d H=%d", tag, N, H), out, ref, n1, TOL_F32);
    float *dout = frandbuf(n1, 1.0f), *dinp = frandbuf(n2, 1.0f), *dref = fcopy(dinp, n2);
    void *a2[] = {&dinp, &dout, &inp, &N};
    launch(&md, "swiglu_bwd", cdiv(n1, 256L * vec), 1, 1, 256, a2);
    op_swiglu_bwd(dref, dout, inp, N, H);
    check_f32(NAME(nm, "swiglu_bwd[%s] accumulates", tag), dinp, dref, n2, TOL_F32);
    close_family(&md);
}

/* ------------------------------------------------------------------------------------------ */
/* Embedding: forward and the deterministic backward, bit-exact against the CPU */

static void test_embedding(const char *tag, int B, int T, int C, int V, int wpe) {
    char consts[96], nm[200];
    snprintf(consts, sizeof consts, "C=%d V=%d WPE=%s", C, V, wpe ? "true" : "false");
    mod_t md;
    if (open_family(&md, "embedding", consts, tag)) return;
    int N = B * T, vec = C % 4 == 0 ? 4 : 1, CV = C / vec;
    int32_t *tok = zalloc((size_t)N * sizeof *tok);
    for (int i = 0; i < N; i++) tok[i] = irand(V < 8 ? V : V / 4); /* repeats: buckets with several rows */
    float *wte = frandbuf((long)V * C, 1.0f), *wpe_ = wpe ? frandbuf((long)T * C, 1.0f) : NULL;
    float *out = fbuf((long)N * C), *ref = fbuf((long)N * C);
    int32_t *nopos = NULL; /* no document positions (v2126): plain t */
    void *a1[] = {&out, &tok, &wte, &wpe_, &nopos, &N, &T};
    launch(&md, "embedding_fwd", cdiv((long)N * CV, 256), 1, 1, 256, a1);
    op_embedding_fwd(ref, tok, wte, wpe_, B, T, C);
    check_exact(NAME(nm, "embedding_fwd[%s] B=%d T=%d C=%d V=%d", tag, B, T, C, V), out, ref, (size_t)N * C * 4);
    /* backward: a few ignored (negative) tokens; prefilled gradients */
    tok[0] = -1;
    if (N > 5) tok[5] = -1;
    float *dout = frandbuf((long)N * C, 1.0f);
    float *dwte = frandbuf((long)V * C, 1.0f), *dwte_ref = fcopy(dwte, (long)V * C);
    float *dwpe = wpe ? frandbuf((long)T * C, 1.0f) : NULL, *dwpe_ref = wpe ? fcopy(dwpe, (long)T * C) : NULL;
    void *a2[] = {&dwte, &dout, &tok, &N};
    launch(&md, "embedding_bwd_wte", cdiv(V, 64), cdiv(CV, 256), 1, 256, a2);
    if (wpe) {
        void *a3[] = {&dwpe, &dout, &nopos, &B, &T};
        launch(&md, "embedding_bwd_wpe", cdiv((long)T * CV, 256), 1, 1, 256, a3);
    }
    op_embedding_bwd(dwte_ref, dwpe_ref, dout, tok, B, T, C, V);
    check_exact(NAME(nm, "embedding_bwd_wte[%s] deterministic, CPU order", tag), dwte, dwte_ref, (size_t)V * C * 4);
    if (wpe) check_exact(NAME(nm, "embedding_bwd_wpe[%s]", tag), dwpe, dwpe_ref, (size_t)T * C * 4);
    close_family(&md);
}

/* ------------------------------------------------------------------------------------------ */
/* LayerNorm (plain and fused with the residual add) */

static void test_layernorm(const char *tag, int N, int C) {
    char consts[64], nm[200];
    snprintf(consts, sizeof consts, "C=%d EPS=1e-5", C);
    mod_t md;
    if (open_family(&md, "layernorm", consts, tag)) return;
    const float eps = 1e-5f;
    const int SEGS = 64;
    long nc = (long)N * C;
    float *inp = frandbuf(nc, 2.0f), *w = frandbuf(C, 1.0f), *b = frandbuf(C, 1.0f);
    for (int c = 0; c < C; c++) w[c] += 1.0f;
    for (long i = 0; i < nc; i++) inp[i] += 0.5f; /* a nonzero mean */
    float *out = fbuf(nc), *mean = fbuf(N), *rstd = fbuf(N);
    float *oref = fbuf(nc), *mref = fbuf(N), *rref = fbuf(N);
    void *a1[] = {&out, &mean, &rstd, &inp, &w, &b, &N};
    launch(&md, "layernorm_fwd", cdiv(N, 8), 1, 1, 256, a1);
    op_layernorm_fwd(oref, mref, rref, inp, w, b, N, C, eps);
    check_f32(NAME(nm, "layernorm_fwd[%s] N=%d C=%d out", tag, N, C), out, oref, nc, TOL_F32);
    check_f32(NAME(nm, "layernorm_fwd[%s] mean", tag), mean, mref, N, TOL_F32);
    check_f32(NAME(nm, "layernorm_fwd[%s] rstd", tag), rstd, rref, N, TOL_F32);
    float *nob = NULL;
    void *a1b[] = {&out, &mean, &rstd, &inp, &w, &nob, &N};
    launch(&md, "layernorm_fwd", cdiv(N, 8), 1, 1, 256, a1b);
    op_layernorm_fwd(oref, mref, rref, inp, w, NULL, N, C, eps);
    check_f32(NAME(nm, "layernorm_fwd[%s] no bias", tag), out, oref, nc, TOL_F32);

    /* fused residual: resid = a + r, then the norm */
    float *ra = frandbuf(nc, 1.0f), *rr = frandbuf(nc, 1.0f), *resid = fbuf(nc), *resid_ref = fbuf(nc);
    void *a2[] = {&resid, &out, &mean, &rstd, &ra, &rr, &w, &b, &N};
    launch(&md, "residual_layernorm_fwd", cdiv(N, 8), 1, 1, 256, a2);
    op_add_fwd(resid_ref, ra, rr, nc);
    op_layernorm_fwd(oref, mref, rref, resid_ref, w, b, N, C, eps);
    check_exact(NAME(nm, "residual_layernorm_fwd[%s] residual", tag), resid, resid_ref, (size_t)nc * 4);
    check_f32(NAME(nm, "residual_layernorm_fwd[%s] out = add + layernorm", tag), out, oref, nc, TOL_F32);
    check_f32(NAME(nm, "residual_layernorm_fwd[%s] rstd", tag), rstd, rref, N, TOL_F32);

    /* backward, with the CPU forward's statistics */
    op_layernorm_fwd(oref, mref, rref, inp, w, b, N, C, eps);
    float *dout = frandbuf(nc, 1.0f);
    float *dinp = frandbuf(nc, 1.0f), *dw = frandbuf(C, 1.0f), *db = frandbuf(C, 1.0f);
    float *dinp_ref = fcopy(dinp, nc), *dw_ref = fcopy(dw, C), *db_ref = fcopy(db, C);
    float *partial = fbuf(2L * SEGS * C);
    void *a3[] = {&dinp, &dout, &inp, &w, &mref, &rref, &N};
    launch(&md, "layernorm_bwd_dx", cdiv(N, 8), 1, 1, 256, a3);
    void *a4[] = {&partial, &dout, &inp, &mref, &rref, &N};
    launch(&md, "layernorm_bwd_dw", cdiv(C, 32), SEGS, 1, 256, a4);
    void *a5[] = {&dw, &db, &partial};
    launch(&md, "layernorm_bwd_dw_finish", cdiv(C, 256), 1, 1, 256, a5);
    op_layernorm_bwd(dinp_ref, dw_ref, db_ref, dout, inp, w, mref, rref, N, C);
    check_f32(NAME(nm, "layernorm_bwd[%s] dinp accumulates", tag), dinp, dinp_ref, nc, TOL_F32);
    check_f32(NAME(nm, "layernorm_bwd[%s] dw", tag), dw, dw_ref, C, TOL_F32);
    check_f32(NAME(nm, "layernorm_bwd[%s] db", tag), db, db_ref, C, TOL_F32);

    /* fused residual backward: dinp += norm gradient + dres (the plan's norm_bwd + accumulate) */
    float *dres = frandbuf(nc, 1.0f);
    float *dinp2 = frandbuf(nc, 1.0f), *dinp2_ref = fcopy(dinp2, nc);
    void *a6[] = {&dinp2, &dres, &dout, &inp, &w, &mref, &rref, &N};
    launch(&md, "residual_layernorm_bwd_dx", cdiv(N, 8), 1, 1, 256, a6);
    op_layernorm_bwd(dinp2_ref, NULL, NULL, dout, inp, w, mref, rref, N, C);
    op_accumulate(dinp2_ref, dres, nc);
    check_f32(NAME(nm, "residual_layernorm_bwd_dx[%s] = layernorm_bwd + accumulate", tag), dinp2, dinp2_ref, nc, TOL_F32);
    close_family(&md);
}

/* ------------------------------------------------------------------------------------------ */
/* RMSNorm (plain, fused) and QK-norm */

static void test_rmsnorm(const char *tag, int N, int C, int NH, int NKV, int HD) {
    char consts[128], nm[200];
    snprintf(consts, sizeof consts, "C=%d EPS=1e-5 NH=%d NKV=%d HD=%d QK_EPS=1e-6", C, NH, NKV, HD);
    mod_t md;
    if (open_family(&md, "rmsnorm", consts, tag)) return;
    const float eps = 1e-5f, qeps = 1e-6f;
    const int SEGS = 64;
    long nc = (long)N * C;
    float *inp = frandbuf(nc, 2.0f), *w = frandbuf(C, 1.0f);
    for (int c = 0; c < C; c++) w[c] += 1.0f;
    float *out = fbuf(nc), *rstd = fbuf(N), *oref = fbuf(nc), *rref = fbuf(N);
    void *a1[] = {&out, &rstd, &inp, &w, &N};
    launch(&md, "rmsnorm_fwd", cdiv(N, 8), 1, 1, 256, a1);
    op_rmsnorm_fwd(oref, rref, inp, w, N, C, eps);
    check_f32(NAME(nm, "rmsnorm_fwd[%s] N=%d C=%d out", tag, N, C), out, oref, nc, TOL_F32);
    check_f32(NAME(nm, "rmsnorm_fwd[%s] rstd", tag), rstd, rref, N, TOL_F32);

    float *ra = frandbuf(nc, 1.0f), *rr = frandbuf(nc, 1.0f), *resid = fbuf(nc), *resid_ref = fbuf(nc);
    void *a2[] = {&resid, &out, &rstd, &ra, &rr, &w, &N};
    launch(&md, "residual_rmsnorm_fwd", cdiv(N, 8), 1, 1, 256, a2);
    op_add_fwd(resid_ref, ra, rr, nc);
    op_rmsnorm_fwd(oref, rref, resid_ref, w, N, C, eps);
    check_exact(NAME(nm, "residual_rmsnorm_fwd[%s] residual", tag), resid, resid_ref, (size_t)nc * 4);
    check_f32(NAME(nm, "residual_rmsnorm_fwd[%s] out = add + rmsnorm", tag), out, oref, nc, TOL_F32);

    op_rmsnorm_fwd(oref, rref, inp, w, N, C, eps);
    float *dout = frandbuf(nc, 1.0f), *dinp = frandbuf(nc, 1.0f), *dw = frandbuf(C, 1.0f);
    float *dinp_ref = fcopy(dinp, nc), *dw_ref = fcopy(dw, C), *partial = fbuf((long)SEGS * C);
    void *a3[] = {&dinp, &dout, &inp, &w, &rref, &N};
    launch(&md, "rmsnorm_bwd_dx", cdiv(N, 8), 1, 1, 256, a3);
    void *a4[] = {&partial, &dout, &inp, &rref, &N};
    launch(&md, "rmsnorm_bwd_dw", cdiv(C, 32), SEGS, 1, 256, a4);
    void *a5[] = {&dw, &partial};
    launch(&md, "rmsnorm_bwd_dw_finish", cdiv(C, 256), 1, 1, 256, a5);
    op_rmsnorm_bwd(dinp_ref, dw_ref, dout, inp, w, rref, N, C);
    check_f32(NAME(nm, "rmsnorm_bwd[%s] dinp accumulates", tag), dinp, dinp_ref, nc, TOL_F32);
    check_f32(NAME(nm, "rmsnorm_bwd[%s] dw", tag), dw, dw_ref, C, TOL_F32);

    float *dres = frandbuf(nc, 1.0f), *dinp2 = frandbuf(nc, 1.0f), *dinp2_ref = fcopy(dinp2, nc);
    void *a6[] = {&dinp2, &dres, &dout, &inp, &w, &rref, &N};
    launch(&md, "residual_rmsnorm_bwd_dx", cdiv(N, 8), 1, 1, 256, a6);
    op_rmsnorm_bwd(dinp2_ref, NULL, dout, inp, w, rref, N, C);
    op_accumulate(dinp2_ref, dres, nc);
    check_f32(NAME(nm, "residual_rmsnorm_bwd_dx[%s] = rmsnorm_bwd + accumulate", tag), dinp2, dinp2_ref, nc, TOL_F32);

    /* QK-norm over [N, (NH + 2 NKV) * HD] */
    int R = (NH + 2 * NKV) * HD, NQK = NH + NKV;
    long nr = (long)N * R;
    float *qin = frandbuf(nr, 2.0f), *qw = frandbuf(HD, 1.0f), *kw = frandbuf(HD, 1.0f);
    float *qout = fbuf(nr), *qr = fbuf((long)N * NQK), *qout_ref = fbuf(nr), *qr_ref = fbuf((long)N * NQK);
    void *b1[] = {&qout, &qr, &qin, &qw, &kw, &N};
    launch(&md, "qknorm_fwd", cdiv((long)N * (NH + 2 * NKV), 8), 1, 1, 256, b1);
    op_qknorm_fwd(qout_ref, qr_ref, qin, qw, kw, N, NH, NKV, HD, qeps);
    check_f32(NAME(nm, "qknorm_fwd[%s] NH=%d NKV=%d HD=%d out", tag, NH, NKV, HD), qout, qout_ref, nr, TOL_F32);
    check_f32(NAME(nm, "qknorm_fwd[%s] rstd", tag), qr, qr_ref, (long)N * NQK, TOL_F32);
    float *qdout = frandbuf(nr, 1.0f), *qdin = frandbuf(nr, 1.0f), *dqw = frandbuf(HD, 1.0f), *dkw = frandbuf(HD, 1.0f);
    float *qdin_ref = fcopy(qdin, nr), *dqw_ref = fcopy(dqw, HD), *dkw_ref = fcopy(dkw, HD);
    float *qpart = fbuf(2L * SEGS * HD);
    void *b2[] = {&qdin, &qdout, &qin, &qw, &kw, &qr_ref, &N};
    launch(&md, "qknorm_bwd_dx", cdiv((long)N * (NH + 2 * NKV), 8), 1, 1, 256, b2);
    void *b3[] = {&qpart, &qdout, &qin, &qr_ref, &N};
    launch(&md, "qknorm_bwd_dw", cdiv(HD, 32), SEGS, 1, 256, b3);
    void *b4[] = {&dqw, &dkw, &qpart};
    launch(&md, "qknorm_bwd_dw_finish", cdiv(HD, 256), 1, 1, 256, b4);
    op_qknorm_bwd(qdin_ref, dqw_ref, dkw_ref, qdout, qin, qw, kw, qr_ref, N, NH, NKV, HD);
    check_f32(NAME(nm, "qknorm_bwd[%s] dinp accumulates", tag), qdin, qdin_ref, nr, TOL_F32);
    check_f32(NAME(nm, "qknorm_bwd[%s] dqw", tag), dqw, dqw_ref, HD, TOL_F32);
    check_f32(NAME(nm, "qknorm_bwd[%s] dkw", tag), dkw, dkw_ref, HD, TOL_F32);
    close_family(&md);
}

/* ------------------------------------------------------------------------------------------ */
/* RoPE, the QKV permute (with RoPE fused), and naive attention */

/* [B, T, R] rows -> q [B, NH, T, HD], k, v [B, NKV, T, HD] (and back, accumulating) */
static void permute_ref(float *q, float *k, float *v, const float *x, int B, int T, int NH, int NKV, int HD) {
    int R = (NH + 2 * NKV) * HD;
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            const float *row = x + ((long)b * T + t) * R;
            for (int j = 0; j < NH + 2 * NKV; j++) {
                float *dst;
                if (j < NH) dst = q + (((long)b * NH + j) * T + t) * HD;
                else if (j < NH + NKV) dst = k + (((long)b * NKV + j - NH) * T + t) * HD;
                else dst = v + (((long)b * NKV + j - NH - NKV) * T + t) * HD;
                memcpy(dst, row + (long)j * HD, (size_t)HD * 4);
            }
        }
}
static void unpermute_ref(float *x, const float *q, const float *k, const float *v, int B, int T, int NH, int NKV, int HD) {
    int R = (NH + 2 * NKV) * HD;
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            float *row = x + ((long)b * T + t) * R;
            for (int j = 0; j < NH + 2 * NKV; j++) {
                const float *src;
                if (j < NH) src = q + (((long)b * NH + j) * T + t) * HD;
                else if (j < NH + NKV) src = k + (((long)b * NKV + j - NH) * T + t) * HD;
                else src = v + (((long)b * NKV + j - NH - NKV) * T + t) * HD;
                for (int i = 0; i < HD; i++) row[(long)j * HD + i] += src[i];
            }
        }
}

static void test_rope(const char *tag, int B, int T, int NH, int NKV, int HD, int rope) {
    char consts[128], nm[200];
    snprintf(consts, sizeof consts, "NH=%d NKV=%d HD=%d ROPE=%s THETA=10000", NH, NKV, HD, rope ? "true" : "false");
    mod_t md;
    if (open_family(&md, "rope", consts, tag)) return;
    int N = B * T, R = (NH + 2 * NKV) * HD, half = HD / 2, pairs = rope ? half : HD;
    long nr = (long)N * R, nq = (long)B * NH * T * HD, nk = (long)B * NKV * T * HD;
    const float theta = 10000.0f;
    float *x = frandbuf(nr, 1.0f);
    if (rope) {
        float *y = fbuf(nr), *yref = fbuf(nr);
        int32_t *nopos = NULL;
        void *a1[] = {&y, &x, &nopos, &N, &T};
        launch(&md, "rope_fwd", cdiv((long)N * half, 256), 1, 1, 256, a1);
        op_rope_fwd(yref, x, B, T, NH, NKV, HD, theta);
        check_f32(NAME(nm, "rope_fwd[%s] B=%d T=%d NH=%d NKV=%d HD=%d", tag, B, T, NH, NKV, HD), y, yref, nr, TOL_F32);
        float *d = frandbuf(nr, 1.0f), *dx = frandbuf(nr, 1.0f), *dx_ref = fcopy(dx, nr);
        void *a2[] = {&dx, &d, &nopos, &N, &T};
        launch(&md, "rope_bwd", cdiv((long)N * half, 256), 1, 1, 256, a2);
        op_rope_bwd(dx_ref, d, B, T, NH, NKV, HD, theta);
        check_f32(NAME(nm, "rope_bwd[%s] accumulates", tag), dx, dx_ref, nr, TOL_F32);
    }
    for (int r = 0; r <= rope; r++) {
        /* forward permute (rotating when r) vs the CPU rope then a plain permute */
        float *q = fbuf(nq), *k = fbuf(nk), *v = fbuf(nk), *qr = fbuf(nq), *kr = fbuf(nk), *vr = fbuf(nk);
        float *src = x;
        if (r) {
            src = fbuf(nr);
            op_rope_fwd(src, x, B, T, NH, NKV, HD, theta);
        }
        void *a3[] = {&q, &k, &v, &x, &N, &T, &r};
        launch(&md, "qkv_permute_fwd", cdiv((long)N * pairs, 256), 1, 1, 256, a3);
        permute_ref(qr, kr, vr, src, B, T, NH, NKV, HD);
        check_f32(NAME(nm, "qkv_permute_fwd[%s] rope=%d q", tag, r), q, qr, nq, TOL_F32);
        check_f32(NAME(nm, "qkv_permute_fwd[%s] rope=%d k", tag, r), k, kr, nk, TOL_F32);
        check_exact(NAME(nm, "qkv_permute_fwd[%s] rope=%d v", tag, r), v, vr, (size_t)nk * 4);
        /* backward: dqkv += permute^T (rotation^T) of dq, dk, dv */
        float *dq = frandbuf(nq, 1.0f), *dk = frandbuf(nk, 1.0f), *dv = frandbuf(nk, 1.0f);
        float *dqkv = frandbuf(nr, 1.0f), *dqkv_ref = fcopy(dqkv, nr);
        void *a4[] = {&dqkv, &dq, &dk, &dv, &N, &T, &r};
        launch(&md, "qkv_permute_bwd", cdiv((long)N * pairs, 256), 1, 1, 256, a4);
        if (r) {
            float *tmp = fbuf(nr);
            unpermute_ref(tmp, dq, dk, dv, B, T, NH, NKV, HD);
            op_rope_bwd(dqkv_ref, tmp, B, T, NH, NKV, HD, theta);
        } else {
            unpermute_ref(dqkv_ref, dq, dk, dv, B, T, NH, NKV, HD);
        }
        check_f32(NAME(nm, "qkv_permute_bwd[%s] rope=%d accumulates", tag, r), dqkv, dqkv_ref, nr, TOL_F32);
    }
    close_family(&md);
}

/* The attention op as the runtime runs it (kernels/kernels.json): permute, scores, softmax, P@V;
 * backward: permute, dP, softmax backward, dQ, dK/dV, permute back. With rope != 0 the permutes
 * rotate (v2166: RoPE fused into the split/permute) and the input is the pre-RoPE QKV. */
static void test_attention(const char *tag, int B, int T, int NH, int NKV, int HD, int rope) {
    char consts[128], nm[200];
    mod_t ma, mr;
    snprintf(consts, sizeof consts, "NH=%d NKV=%d HD=%d", NH, NKV, HD);
    if (open_family(&ma, "attention_naive", consts, tag)) return;
    snprintf(consts, sizeof consts, "NH=%d NKV=%d HD=%d ROPE=%s", NH, NKV, HD, rope ? "true" : "false");
    char rtag[64]; /* not test_rope's file: one path holds one rendered source (coverage reads it) */
    snprintf(rtag, sizeof rtag, "attn_%s", tag);
    if (open_family(&mr, "rope", consts, rtag)) {
        close_family(&ma);
        return;
    }
    const int TQ = 32; /* the template's score tile for HD <= 160 */
    int N = B * T, R = (NH + 2 * NKV) * HD, pairs = rope ? HD / 2 : HD, OC = NH * HD;
    long nr = (long)N * R, nq = (long)B * NH * T * HD, nk = (long)B * NKV * T * HD, na = (long)B * NH * T * T;
    const float theta = 10000.0f;
    float *qkv = frandbuf(nr, 1.5f);
    float *q = fbuf(nq), *k = fbuf(nk), *v = fbuf(nk), *att = fbuf(na), *out = fbuf((long)N * OC);
    void *p1[] = {&q, &k, &v, &qkv, &N, &T, &rope};
    launch(&mr, "qkv_permute_fwd", cdiv((long)N * pairs, 256), 1, 1, 256, p1);
    void *s1[] = {&att, &q, &k, &T};
    launch(&ma, "attention_scores", cdiv(T, TQ), cdiv(T, 32), B * NH, 256, s1);
    int32_t *nopos = NULL;
    void *s2[] = {&att, &nopos, &B, &T};
    launch(&ma, "attention_softmax_fwd", cdiv((long)B * NH * T, 8), 1, 1, 256, s2);
    void *s3[] = {&out, &att, &v, &T};
    launch(&ma, "attention_value", cdiv(T, 32), B * NH, 1, 256, s3);
    float *src = qkv;
    if (rope) {
        src = fbuf(nr);
        op_rope_fwd(src, qkv, B, T, NH, NKV, HD, theta);
    }
    float *att_ref = fbuf(na), *out_ref = fbuf((long)N * OC);
    op_attention_fwd(out_ref, att_ref, src, B, T, NH, NKV, HD);
    check_f32(NAME(nm, "attention_fwd[%s] B=%d T=%d NH=%d NKV=%d HD=%d rope=%d P", tag, B, T, NH, NKV, HD, rope), att, att_ref, na, TOL_F32);
    check_f32(NAME(nm, "attention_fwd[%s] out", tag), out, out_ref, (long)N * OC, TOL_F32);

    /* backward (from the CPU's probabilities) */
    float *dout = frandbuf((long)N * OC, 1.0f), *datt = fbuf(na), *datt_ref = fbuf(na);
    float *dq = fbuf(nq), *dk = fbuf(nk), *dv = fbuf(nk);
    float *dqkv = frandbuf(nr, 1.0f), *dqkv_ref = fcopy(dqkv, nr);
    launch(&mr, "qkv_permute_fwd", cdiv((long)N * pairs, 256), 1, 1, 256, p1);
    void *b1[] = {&datt, &dout, &v, &T};
    launch(&ma, "attention_bwd_datt", cdiv(T, TQ), cdiv(T, 32), B * NH, 256, b1);
    void *b2[] = {&datt, &att_ref, &B, &T};
    launch(&ma, "attention_softmax_bwd", cdiv((long)B * NH * T, 8), 1, 1, 256, b2);
    void *b3[] = {&dq, &datt, &k, &T};
    launch(&ma, "attention_bwd_dq", cdiv(T, 32), B * NH, 1, 256, b3);
    void *b4[] = {&dk, &dv, &datt, &att_ref, &q, &dout, &T};
    launch(&ma, "attention_bwd_dkv", cdiv(T, 32), B * NKV, 2, 256, b4);
    void *b5[] = {&dqkv, &dq, &dk, &dv, &N, &T, &rope};
    launch(&mr, "qkv_permute_bwd", cdiv((long)N * pairs, 256), 1, 1, 256, b5);
    if (rope) {
        float *dsrc = fbuf(nr);
        op_attention_bwd(dsrc, datt_ref, dout, src, att_ref, B, T, NH, NKV, HD);
        op_rope_bwd(dqkv_ref, dsrc, B, T, NH, NKV, HD, theta);
    } else {
        op_attention_bwd(dqkv_ref, datt_ref, dout, src, att_ref, B, T, NH, NKV, HD);
    }
    check_f32(NAME(nm, "attention_bwd[%s] dscore", tag), datt, datt_ref, na, TOL_F32);
    check_f32(NAME(nm, "attention_bwd[%s] dqkv accumulates%s", tag, rope ? " (through the fused RoPE)" : ""), dqkv, dqkv_ref, nr, TOL_F32);
    close_family(&ma);
    close_family(&mr);
}

/* Flash attention (v2112 forward, v2113 backward): the four kernels as kernels.json launches them,
 * against ops_flash.c's CPU op. The backward runs from the CPU forward's out and lse, so each
 * direction's error is its own. Tolerances (|err| <= atol * max|want| + rtol * |want|):
 *   bf16x3: 1e-4 each — the hi + lo split keeps ~16 bits of every operand and drops lo*lo, so a
 *           product is off by ~3 * 2^-17 relative; exp of a score amplifies its absolute error
 *           and the backward sums up to T such terms (observed max |err| <= 2e-5 at scale ~5,
 *           i.e. ~4e-6 of the scale);
 *   bf16:   1e-2 each — every operand (q, k, v, P, dO, dS) rounded once to 8 bits (2^-9
 *           relative each); a score's error is ~2^-9 * |q||k|/sqrt(HD) and goes through exp into
 *           P, and the gradients compound two such roundings (observed 8.4e-3 at scale 3.6,
 *           i.e. ~2.4e-3 of the scale). */
/* doc (v2126): DOCMASK=true and rows of several documents (positions restarting at 0), against
 * the cpu op's mask hook (op_flash_attention_*_doc); else plain causal, no positions. */
static void flash_case(const char *tag, int B, int T, int NH, int NKV, int HD, const char *prec, int again, int doc) {
    char consts[160], nm[240];
    mod_t mf;
    snprintf(consts, sizeof consts, "NH=%d NKV=%d HD=%d PREC=%s%s", NH, NKV, HD, prec, doc ? " DOCMASK=true" : "");
    if (open_family(&mf, "flash_attention", consts, tag)) return;
    const int x3 = !strcmp(prec, "bf16x3");
    const double tol = x3 ? 1e-4 : 1e-2;
    /* dynamic shared memory per kernel, as the template derived it (the manifest's smem) */
    const long smem_fwd = rendered_const("flash_attention", tag, "SMEM_FWD");
    const long smem_dkv = rendered_const("flash_attention", tag, "SMEM_DKV");
    const long smem_dq = rendered_const("flash_attention", tag, "SMEM_DQ");
    if (smem_fwd <= 0 || smem_dkv <= 0 || smem_dq <= 0) {
        check(0, mf.what, "no SMEM_FWD/SMEM_DKV/SMEM_DQ constants in the rendered file");
        close_family(&mf);
        return;
    }
    int N = B * T, R = (NH + 2 * NKV) * HD, OC = NH * HD;
    long nr = (long)N * R, no = (long)N * OC, nl = (long)B * NH * T;
    float *qkv = frandbuf(nr, 1.5f), *out = fbuf(no), *lse = fbuf(nl), *out_ref = fbuf(no), *lse_ref = fbuf(nl);
    int32_t *nopos = NULL;
    if (doc) { /* documents of 1..80 tokens: some rows cross several 32/64 tiles, some tiles hold several */
        nopos = zalloc((size_t)N * sizeof *nopos);
        for (int bb = 0; bb < B; bb++)
            for (int t = 0, left = 0, p = 0; t < T; t++, p++, left--) {
                if (left <= 0) left = 1 + irand(80), p = 0;
                nopos[bb * T + t] = p;
            }
    }
    void *f1[] = {&out, &lse, &qkv, &nopos, &T};
    launch_smem(&mf, "flash_attention_fwd", cdiv(T, 64), B * NH, 1, 128, (size_t)smem_fwd, f1);
    op_flash_attention_fwd_doc(out_ref, lse_ref, qkv, nopos, B, T, NH, NKV, HD, 0.0f);
    check_f32(NAME(nm, "test_v2112_flash_fwd[%s] B=%d T=%d NH=%d NKV=%d HD=%d %s out", tag, B, T, NH, NKV, HD, prec), out, out_ref, no, tol, tol);
    check_f32(NAME(nm, "test_v2112_flash_fwd[%s] lse", tag), lse, lse_ref, nl, tol, tol);

    float *dout = frandbuf(no, 1.0f), *D = fbuf(nl), *D_ref = fbuf(nl);
    float *dqkv = frandbuf(nr, 1.0f), *dqkv_ref = fcopy(dqkv, nr), *dqkv0 = fcopy(dqkv, nr);
    void *b1[] = {&D, &dout, &out_ref, &B, &T};
    launch(&mf, "flash_attention_bwd_d", cdiv((long)B * NH * T, 4), 1, 1, 128, b1);
    void *b2[] = {&dqkv, &dout, &qkv, &lse_ref, &D, &nopos, &T};
    launch_smem(&mf, "flash_attention_bwd_dkv", cdiv(T, 64), B * NKV, 1, 128, (size_t)smem_dkv, b2);
    launch_smem(&mf, "flash_attention_bwd_dq", cdiv(T, 64), B * NH, 1, 128, (size_t)smem_dq, b2);
    op_flash_attention_bwd_doc(dqkv_ref, D_ref, dout, qkv, out_ref, lse_ref, nopos, B, T, NH, NKV, HD, 0.0f);
    check_f32(NAME(nm, "test_v2113_flash_bwd[%s] D = rowsum(dout*out)", tag), D, D_ref, nl, TOL_F32);
    check_f32(NAME(nm, "test_v2113_flash_bwd[%s] dqkv accumulates", tag), dqkv, dqkv_ref, nr, tol, tol);
    if (again) { /* deterministic: one writer per element, fixed order (blocks run on 2 OS threads) */
        float *dqkv2 = fcopy(dqkv0, nr);
        void *b3[] = {&dqkv2, &dout, &qkv, &lse_ref, &D, &nopos, &T};
        launch_smem(&mf, "flash_attention_bwd_dkv", cdiv(T, 64), B * NKV, 1, 128, (size_t)smem_dkv, b3);
        launch_smem(&mf, "flash_attention_bwd_dq", cdiv(T, 64), B * NH, 1, 128, (size_t)smem_dq, b3);
        check_exact(NAME(nm, "test_v2113_flash_bwd[%s] deterministic (second run bit-identical)", tag), dqkv2, dqkv, (size_t)nr * sizeof(float));
    }
    close_family(&mf);
}

static void test_flash(const char *tag, int B, int T, int NH, int NKV, int HD, const char *prec, int again) {
    flash_case(tag, B, T, NH, NKV, HD, prec, again, 0);
}

/* v2126: the template's document mask hook against the cpu op's */
static void test_flash_doc(const char *tag, int B, int T, int NH, int NKV, int HD, const char *prec, int again) {
    flash_case(tag, B, T, NH, NKV, HD, prec, again, 1);
}

/* ------------------------------------------------------------------------------------------ */
/* Classifier */

static void test_classifier(const char *tag, int N, int V, int Vp) {
    char consts[96], nm[200];
    snprintf(consts, sizeof consts, "V=%d VP=%d", V, Vp);
    mod_t md;
    if (open_family(&md, "classifier", consts, tag)) return;
    long nl = (long)N * Vp;
    float *logits = frandbuf(nl, 4.0f);
    int32_t *tg = zalloc((size_t)N * sizeof *tg);
    for (int i = 0; i < N; i++) tg[i] = irand(V);
    tg[0] = V - 1;           /* the last valid column (a tail element when V % 4 != 0) */
    if (N > 2) tg[2] = -1;   /* ignored */
    if (N > 3) tg[3] = V;    /* a data error: NaN loss, zero gradient */
    float *loss = fbuf(N), *loss_ref = fbuf(N);
    void *a1[] = {&loss, &logits, &tg, &N};
    launch(&md, "crossentropy_fwd", N, 1, 1, 512, a1);
    op_crossentropy_fwd(loss_ref, logits, tg, N, V, Vp);
    check_f32(NAME(nm, "crossentropy_fwd[%s] N=%d V=%d Vp=%d", tag, N, V, Vp), loss, loss_ref, N, TOL_F32);
    float dloss = 1.0f / N;
    float *z = fcopy(logits, nl), *zref = fcopy(logits, nl);
    void *a2[] = {&loss, &z, &tg, &dloss, &N};
    launch(&md, "crossentropy_fused", N, 1, 1, 512, a2);
    op_crossentropy_fused(loss_ref, zref, tg, dloss, N, V, Vp);
    check_f32(NAME(nm, "crossentropy_fused[%s] losses", tag), loss, loss_ref, N, TOL_F32);
    check_f32(NAME(nm, "crossentropy_fused[%s] dlogits in place (padding, ignored rows 0)", tag), z, zref, nl, TOL_F32);
    /* v2195-v2198: crossentropy_fused_ext with per-token weights (the preference objectives'
     * -dL/dlogp of each row's sequence, some negative) = crossentropy_fused times the weight */
    float *w = frandbuf(N, 2.0f), *nulp = NULL, one_t = 1.0f, zero_a = 0.0f;
    int tvp = Vp;
    z = fcopy(logits, nl), zref = fcopy(logits, nl);
    void *a3[] = {&loss, &z, &tg, &dloss, &w, &nulp, &tvp, &one_t, &zero_a, &N};
    launch(&md, "crossentropy_fused_ext", N, 1, 1, 512, a3);
    op_crossentropy_fused(loss_ref, zref, tg, dloss, N, V, Vp);
    for (long i = 0; i < nl; i++) zref[i] *= w[i / Vp];
    check_f32(NAME(nm, "test_v2195_crossentropy_fused_ext[%s] row-weighted losses", tag), loss, loss_ref, N, TOL_F32);
    check_f32(NAME(nm, "test_v2195_crossentropy_fused_ext[%s] row-weighted dlogits", tag), z, zref, nl, TOL_F32);
    /* v2149: with a teacher's logits (rows of TVP = Vp + 3 floats) the distillation loss and
     * gradient, against the cpu backend's double-precision row (train/distill.c distill_row) */
    tvp = Vp + 3;
    float *zt = frandbuf((long)N * tvp, 4.0f), temp = 2.0f, alpha = 0.7f;
    z = fcopy(logits, nl), zref = fcopy(logits, nl);
    void *a4[] = {&loss, &z, &tg, &dloss, &w, &zt, &tvp, &temp, &alpha, &N};
    launch(&md, "crossentropy_fused_ext", N, 1, 1, 512, a4);
    for (int n = 0; n < N; n++) {
        float *zr = zref + (long)n * Vp;
        loss_ref[n] = distill_row(zr, zt + (long)n * tvp, tg[n], V, temp, alpha, dloss * w[n]);
        for (int i = V; i < Vp; i++) zr[i] = 0.0f;
    }
    check_f32(NAME(nm, "test_v2149_distill_ext[%s] T=2 alpha=0.7 losses", tag), loss, loss_ref, N, TOL_F32);
    check_f32(NAME(nm, "test_v2149_distill_ext[%s] T=2 alpha=0.7 dlogits", tag), z, zref, nl, TOL_F32);
    close_family(&md);
}

/* ------------------------------------------------------------------------------------------ */
/* bf16 / fp16 / fp8 references (independent of cuda_*.h) */

static float f32_of_bits(uint32_t b) { float f; memcpy(&f, &b, 4); return f; }
static uint32_t bits_of_f32(float f) { uint32_t b; memcpy(&b, &f, 4); return b; }
static uint16_t bf16_rne(float x) {
    uint32_t b = bits_of_f32(x);
    if ((b & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((b >> 16) | 0x40); /* NaN stays NaN */
    return (uint16_t)((b + 0x7fffu + ((b >> 16) & 1u)) >> 16);
}
static float bf16_val(uint16_t h) { return f32_of_bits((uint32_t)h << 16); }

/* A minifloat with E exponent bits, M mantissa bits, bias: value of a non-negative code. */
static double mf_value(unsigned code, int E, int M, int bias) {
    unsigned e = (code >> M) & ((1u << E) - 1), m = code & ((1u << M) - 1);
    if (e == 0) return ldexp((double)m, 1 - bias - M);
    return ldexp(1.0 + (double)m / (1 << M), (int)e - bias);
}
/* Round to nearest even; saturating (fp8 SATFINITE) or to infinity (fp16). maxcode: largest
 * finite code; infcode: the +inf code or 0 when the format has none; nancode: a NaN code. */
static unsigned mf_encode(float xf, int E, int M, int bias, unsigned maxcode, unsigned infcode,
                          unsigned nancode, int saturate) {
    unsigned sign = signbit(xf) ? 1u << (E + M) : 0u;
    if (isnan(xf)) return nancode;
    double x = fabs((double)xf);
    double maxv = mf_value(maxcode, E, M, bias);
    if (x >= maxv) {
        if (saturate || !infcode) return sign | maxcode;
        double ulp = maxv - mf_value(maxcode - 1, E, M, bias);
        return sign | (x >= maxv + ulp / 2 ? infcode : maxcode);
    }
    unsigned lo = 0, hi = maxcode; /* largest code with value <= x */
    while (lo < hi) {
        unsigned mid = (lo + hi + 1) / 2;
        if (mf_value(mid, E, M, bias) <= x) lo = mid;
        else hi = mid - 1;
    }
    double a = mf_value(lo, E, M, bias), b = mf_value(lo + 1, E, M, bias);
    unsigned c = (x - a < b - x) ? lo : (x - a > b - x) ? lo + 1 : ((lo & 1u) ? lo + 1 : lo);
    return sign | c;
}

static void test_cast(const char *tag, long n) {
    mod_t md;
    if (open_family(&md, "cast", "", tag)) return;
    char nm[200];
    float *x = fbuf(n);
    for (long i = 0; i < n; i++) x[i] = frand() * ldexpf(1.0f, irand(40) - 20); /* wide range */
    x[0] = 0.0f;
    if (n > 8) {
        x[1] = -0.0f; x[2] = 1e30f; x[3] = -1e30f; x[4] = 1.00390625f; /* a bf16 tie */
        x[5] = 448.0f; x[6] = 464.0f; x[7] = 1e-9f;
    }
    /* bf16 */
    uint16_t *hb = zalloc((size_t)n * 2), *hb_ref = zalloc((size_t)n * 2);
    for (long i = 0; i < n; i++) hb_ref[i] = bf16_rne(x[i]);
    void *a1[] = {&hb, &x, &n};
    launch(&md, "cast_f32_bf16", cdiv(n, 1024), 1, 1, 256, a1);
    check_exact(NAME(nm, "cast_f32_bf16[%s] n=%ld round to nearest even", tag, n), hb, hb_ref, (size_t)n * 2);
    float *y = fbuf(n), *yref = fbuf(n);
    for (long i = 0; i < n; i++) yref[i] = bf16_val(hb_ref[i]);
    void *a2[] = {&y, &hb_ref, &n};
    launch(&md, "cast_bf16_f32", cdiv(n, 1024), 1, 1, 256, a2);
    check_exact(NAME(nm, "cast_bf16_f32[%s]", tag), y, yref, (size_t)n * 4);
    /* fp16 */
    uint16_t *hh = zalloc((size_t)n * 2), *hh_ref = zalloc((size_t)n * 2);
    for (long i = 0; i < n; i++) hh_ref[i] = (uint16_t)mf_encode(x[i], 5, 10, 15, 0x7bff, 0x7c00, 0x7e00, 0);
    void *a3[] = {&hh, &x, &n};
    launch(&md, "cast_f32_f16", cdiv(n, 1024), 1, 1, 256, a3);
    check_exact(NAME(nm, "cast_f32_f16[%s] round to nearest even, overflow to inf", tag), hh, hh_ref, (size_t)n * 2);
    for (long i = 0; i < n; i++) {
        unsigned c = hh_ref[i] & 0x7fff;
        double v = c >= 0x7c00 ? INFINITY : mf_value(c, 5, 10, 15);
        yref[i] = (float)((hh_ref[i] & 0x8000) ? -v : v);
    }
    void *a4[] = {&y, &hh_ref, &n};
    launch(&md, "cast_f16_f32", cdiv(n, 1024), 1, 1, 256, a4);
    check_exact(NAME(nm, "cast_f16_f32[%s]", tag), y, yref, (size_t)n * 4);
    /* fp8, scaled, with the fused amax */
    const char *names[2] = {"e4m3", "e5m2"};
    for (int f = 0; f < 2; f++) {
        int E = f ? 5 : 4, M = f ? 2 : 3, bias = f ? 15 : 7;
        unsigned maxc = f ? 0x7b : 0x7e, nanc = f ? 0x7f : 0x7f;
        float *scale = fbuf(1), *amax = fbuf(1), *sinv = fbuf(1);
        scale[0] = f ? 0.5f : 2.0f;
        uint8_t *q = zalloc((size_t)n), *q_ref = zalloc((size_t)n);
        float amax_ref = 0.0f;
        for (long i = 0; i < n; i++) {
            q_ref[i] = (uint8_t)mf_encode(x[i] * scale[0], E, M, bias, maxc, 0, nanc, 1);
            if (fabsf(x[i]) > amax_ref) amax_ref = fabsf(x[i]);
        }
        char kn[32];
        snprintf(kn, sizeof kn, "cast_f32_%s", names[f]);
        void *a5[] = {&q, &x, &scale, &amax, &n};
        launch(&md, kn, cdiv(n, 1024), 1, 1, 256, a5);
        check_exact(NAME(nm, "%s[%s] scaled, nearest even, saturating", kn, tag), q, q_ref, (size_t)n);
        check_exact(NAME(nm, "%s[%s] amax", kn, tag), amax, &amax_ref, 4);
        sinv[0] = 1.0f / scale[0];
        for (long i = 0; i < n; i++) {
            double v = mf_value(q_ref[i] & 0x7f, E, M, bias);
            yref[i] = (float)((q_ref[i] & 0x80) ? -v : v) * sinv[0];
        }
        snprintf(kn, sizeof kn, "cast_%s_f32", names[f]);
        void *a6[] = {&y, &q_ref, &sinv, &n};
        launch(&md, kn, cdiv(n, 1024), 1, 1, 256, a6);
        check_exact(NAME(nm, "%s[%s]", kn, tag), y, yref, (size_t)n * 4);
    }
    /* fake quantization (the plan's fp8_quantize op) vs runtime/fp8.h, which is bit-exact with
     * cuda_fp8.h; and the byte casts vs hyp_fp8_from_float too (a second, independent reference) */
    for (int f = 0; f < 2; f++) {
        float *scale = fbuf(1), *sinv = fbuf(1), *amax = fbuf(1);
        scale[0] = f ? 0.25f : 3.0f;
        sinv[0] = 1.0f / scale[0];
        float *fq = fbuf(n), *fq_ref = fcopy(x, n);
        hyp_fp8_stats st;
        hyp_fp8_fake_quantize(fq_ref, n, scale[0], sinv[0], f ? HYP_FP8_E5M2 : HYP_FP8_E4M3, &st);
        char kn[40];
        snprintf(kn, sizeof kn, "fp8_fake_quantize_%s", names[f]);
        void *a8[] = {&fq, &x, &scale, &sinv, &amax, &n};
        launch(&md, kn, cdiv(n, 1024), 1, 1, 256, a8);
        check_exact(NAME(nm, "%s[%s] = hyp_fp8_fake_quantize", kn, tag), fq, fq_ref, (size_t)n * 4);
        check_exact(NAME(nm, "%s[%s] amax", kn, tag), amax, &st.amax, 4);
        uint8_t *qb = zalloc((size_t)n), *qb_ref = zalloc((size_t)n);
        for (long i = 0; i < n; i++) qb_ref[i] = hyp_fp8_from_float(x[i] * scale[0], f ? HYP_FP8_E5M2 : HYP_FP8_E4M3);
        float *nul = NULL;
        snprintf(kn, sizeof kn, "cast_f32_%s", names[f]);
        void *a9[] = {&qb, &x, &scale, &nul, &n};
        launch(&md, kn, cdiv(n, 1024), 1, 1, 256, a9);
        check_exact(NAME(nm, "%s[%s] = hyp_fp8_from_float (no amax)", kn, tag), qb, qb_ref, (size_t)n);
    }
    /* the transposed fp8 copies an FP8 GEMM's TN layout reads: x as [rows][cols], out [cols][rows] */
    const long rows = n > 8 ? 7 : 1, cols = n / rows;
    for (int f = 0; f < 2; f++) {
        float *scale = fbuf(1);
        scale[0] = f ? 0.5f : 4.0f;
        uint8_t *qt = zalloc((size_t)(rows * cols)), *qt_ref = zalloc((size_t)(rows * cols));
        for (long r = 0; r < rows; r++)
            for (long c = 0; c < cols; c++)
                qt_ref[c * rows + r] = hyp_fp8_from_float(x[r * cols + c] * scale[0], f ? HYP_FP8_E5M2 : HYP_FP8_E4M3);
        char kn[32];
        snprintf(kn, sizeof kn, "cast_f32_%s_t", names[f]);
        long rr = rows, cc = cols;
        void *a10[] = {&qt, &x, &scale, &rr, &cc};
        launch(&md, kn, cdiv(rows * cols, 256), 1, 1, 256, a10);
        check_exact(NAME(nm, "%s[%s] [%ld][%ld] transposed = hyp_fp8_from_float", kn, tag, rows, cols), qt, qt_ref,
                    (size_t)(rows * cols));
    }
    /* round_bf16 in place (the plan's bf16 GEMM operands): the bf16 value, kept as fp32 */
    float *rb = fcopy(x, n);
    for (long i = 0; i < n; i++) yref[i] = bf16_val(bf16_rne(x[i]));
    void *a11[] = {&rb, &rb, &n};
    launch(&md, "round_bf16", cdiv(n, 1024), 1, 1, 256, a11);
    check_exact(NAME(nm, "round_bf16[%s] in place = bf16 round to nearest even", tag), rb, yref, (size_t)n * 4);
    float *am = fbuf(1), am_ref = 0.0f;
    for (long i = 0; i < n; i++) if (fabsf(x[i]) > am_ref) am_ref = fabsf(x[i]);
    void *a7[] = {&am, &x, &n};
    launch(&md, "amax", cdiv(n, 1024), 1, 1, 256, a7);
    check_exact(NAME(nm, "amax[%s]", tag), am, &am_ref, 4);
    close_family(&md);
}

/* round_fp16 (v2102's fp16 GEMM operands on a device) = runtime/cpu's op_round_fp16 bit for bit on
 * numbers, so a sim trainer rounds as the cpu one does: values spread over 2^-30..2^20 (fp16
 * subnormals, flushes to signed zero, normals, inf from 65520 up) plus the edges 65504, 65519.99,
 * 65520, 2^-24, the 2^-25 tie, 3*2^-26, +-inf, in place and out of place, a vector part and a
 * scalar tail; NaN stays NaN (payload aside). */
static void test_round_fp16(void) {
    mod_t md;
    if (open_family(&md, "cast", "", "fp16")) return;
    char nm[200];
    long n = 4099;
    float *x = fbuf(n), *want = fbuf(n), *got = fbuf(n);
    uint64_t st = 0x1602u;
    for (long i = 0; i < n; i++) {
        st = st * 6364136223846793005ull + 1442695040888963407ull;
        float m = 1.0f + (float)((st >> 40) & 0xffffff) / 16777216.0f; /* [1, 2), 24 random bits */
        x[i] = ldexpf((st >> 20) & 1 ? -m : m, (int)((st >> 24) % 51) - 30);
    }
    const float edges[] = {65504.0f, 65519.99f, 65520.0f, -65520.0f, 0x1p-24f, 0x1p-25f, 3 * 0x1p-26f, -0x1p-25f,
                           INFINITY, -INFINITY, 0.0f, -0.0f, 1.0f + 0x1p-11f, 1.0f + 3 * 0x1p-11f};
    for (size_t k = 0; k < sizeof edges / sizeof edges[0]; k++) x[k * 7] = edges[k];
    long long fl = 0, nz = 0;
    op_round_fp16(want, x, n, &fl, &nz);
    void *a[] = {&got, &x, &n};
    launch(&md, "round_fp16", cdiv(n, 1024), 1, 1, 256, a);
    check_exact(NAME(nm, "round_fp16 = op_round_fp16 on %ld values (%lld flushed to 0, edges, inf)", n, fl), got, want,
                (size_t)n * 4);
    float *in = fcopy(x, n);
    void *b[] = {&in, &in, &n};
    launch(&md, "round_fp16", cdiv(n, 1024), 1, 1, 256, b);
    check_exact(NAME(nm, "round_fp16 in place = op_round_fp16"), in, want, (size_t)n * 4);
    long one = 3;
    float *q = fbuf(3);
    q[0] = NAN, q[1] = -NAN, q[2] = 70000.0f;
    void *c[] = {&q, &q, &one};
    launch(&md, "round_fp16", 1, 1, 1, 256, c);
    check(isnan(q[0]) && isnan(q[1]) && isinf(q[2]), NAME(nm, "round_fp16 keeps NaN, 70000 -> inf"), "got %g %g %g", q[0], q[1], q[2]);
    close_family(&md);
}

/* fp8_scale_current = runtime/fp8.c's hyp_fp8_scale_current (margin 0, no pow2) on the edge cases
 * (amax 0, inf, NaN: scale 1; a tiny amax: FLT_MAX), and the fp8 casts on NaN/inf inputs: NaN stays
 * NaN (E4M3 has no inf: 0x7f; E5M2: 0x7f), inf saturates to the largest finite, the amax skips NaN. */
static void test_fp8_edges(void) {
    mod_t md;
    if (open_family(&md, "cast", "", "edges")) return;
    char nm[200];
    const float amaxes[] = {0.0f, INFINITY, NAN, 1e-44f, 3.0f, 448.0f};
    for (int f = 0; f < 2; f++) {
        float fmax = hyp_fp8_max(f ? HYP_FP8_E5M2 : HYP_FP8_E4M3);
        for (size_t k = 0; k < sizeof amaxes / sizeof amaxes[0]; k++) {
            float *sc = fbuf(3); /* scale, scale_inv, amax */
            sc[2] = amaxes[k];
            float *s = sc, *si = sc + 1, *am = sc + 2;
            void *a[] = {&s, &si, &am, &fmax};
            launch(&md, "fp8_scale_current", 1, 1, 1, 32, a);
            float want[3] = {hyp_fp8_scale_current(amaxes[k], fmax, 0.0f, 0), 0.0f, 0.0f};
            want[1] = 1.0f / want[0];
            check_exact(NAME(nm, "fp8_scale_current(fp8_max %g, amax %g) = hyp_fp8_scale_current, amax reset", fmax,
                             amaxes[k]), sc, want, sizeof want);
        }
    }
    long n = 13; /* a vector part and a scalar tail */
    float *x = fbuf(n);
    for (long i = 0; i < n; i++) x[i] = (float)(i - 6) * 0.75f;
    x[1] = NAN; x[5] = INFINITY; x[6] = -INFINITY; x[11] = -NAN; x[12] = 1e6f;
    const char *names[2] = {"e4m3", "e5m2"};
    for (int f = 0; f < 2; f++) {
        hyp_fp8_fmt fmt = f ? HYP_FP8_E5M2 : HYP_FP8_E4M3;
        float *scale = fbuf(1), *amax = fbuf(1);
        scale[0] = 1.0f;
        uint8_t *q = zalloc((size_t)n), *q_ref = zalloc((size_t)n);
        for (long i = 0; i < n; i++) q_ref[i] = hyp_fp8_from_float(x[i], fmt);
        char kn[32];
        snprintf(kn, sizeof kn, "cast_f32_%s", names[f]);
        void *a1[] = {&q, &x, &scale, &amax, &n};
        launch(&md, kn, 1, 1, 1, 256, a1);
        check_exact(NAME(nm, "%s[nan/inf] = hyp_fp8_from_float", kn), q, q_ref, (size_t)n);
        int nan_ok = (q[1] & 0x7f) == 0x7f && (q[11] & 0x7f) == 0x7f;
        int sat_ok = hyp_fp8_to_float(q[5], fmt) == hyp_fp8_max(fmt) && hyp_fp8_to_float(q[6], fmt) == -hyp_fp8_max(fmt);
        check(nan_ok && sat_ok, NAME(nm, "%s[nan/inf] NaN -> NaN code, +-inf -> +-max finite", kn),
               "q[1]=0x%02x q[5]=0x%02x q[6]=0x%02x", q[1], q[5], q[6]);
        check(isinf(amax[0]), NAME(nm, "%s[nan/inf] amax skips NaN, records inf", kn), "amax %g", amax[0]);
    }
    close_family(&md);
}

/* ------------------------------------------------------------------------------------------ */
/* Global norm and AdamW */

static void test_global_norm(const char *tag, long n) {
    mod_t md;
    if (open_family(&md, "global_norm", "", tag)) return;
    char nm[200];
    float *g = frandbuf(n, 1.0f), *partial = fbuf(512), *out = fbuf(2);
    void *a1[] = {&partial, &g, &n};
    double norm = sqrt(op_sumsq(g, n));
    float maxes[2] = {0.0f, (float)(norm / 2)};
    for (int c = 0; c < 2; c++) {
        float mx = maxes[c];
        launch(&md, "global_norm_partial", 512, 1, 1, 256, a1);
        void *a2[] = {&out, &partial, &mx};
        launch(&md, "global_norm_finish", 1, 1, 1, 32, a2);
        float want[2] = {(float)norm, mx <= 0 ? 1.0f : (float)(mx / (norm + 1e-6))};
        check_f32(NAME(nm, "global_norm[%s] n=%ld max_norm=%g: norm, clip factor", tag, n, mx), out, want, 2, TOL_F32);
    }
    close_family(&md);
}

typedef struct {
    float lr, b1, b2, eps, ibc1, ibc2;
    int t;
} adam_hp;

static adam_hp adam_params(int t) {
    adam_hp h = {1e-2f, 0.9f, 0.95f, 1e-8f, 0, 0, t};
    h.ibc1 = 1.0f / (float)(1.0 - pow((double)h.b1, (double)t)); /* as op_adamw computes them */
    h.ibc2 = 1.0f / (float)(1.0 - pow((double)h.b2, (double)t));
    return h;
}

/* The arena of nseg tensors of the given lengths, back to back: *seg_end gets each tensor's end
 * offset; returns the total length. */
static long segments(const int *sizes, int nseg, long **seg_end) {
    long n = 0;
    *seg_end = zalloc((size_t)nseg * sizeof **seg_end);
    for (int s = 0; s < nseg; s++) {
        n += sizes[s];
        (*seg_end)[s] = n;
    }
    return n;
}

/* Per-tensor weight decay: wd on the even tensors, none on the odd ones. */
static float *seg_decay(int nseg, float wd) {
    float *seg_wd = fbuf(nseg);
    for (int s = 0; s < nseg; s++) seg_wd[s] = s % 2 ? 0.0f : wd;
    return seg_wd;
}

/* v2134 lion_step (templates/lion.cu.lua) vs Lion's host step (optim_lion.c through optim.h) per
 * tensor: weights and m bit for bit (the same float expressions in the same order), with a clip
 * factor and one tensor without decay. */
static void test_lion(const char *tag, const int *sizes, int nseg) {
    char nm[200];
    long *seg_end, n = segments(sizes, nseg, &seg_end);
    float *seg_wd = seg_decay(nseg, 1.0f);
    mod_t md;
    if (open_family(&md, "lion", "", tag)) return;
    float lr = 3e-4f, b1 = 0.9f, b2 = 0.99f, *gs = fbuf(1);
    gs[0] = 0.5f;
    float *p = frandbuf(n, 1.0f), *g = frandbuf(n, 1.0f), *m = frandbuf(n, 0.1f);
    for (long i = 0; i < n; i += 97) g[i] = m[i] = 0.0f; /* sign(0) = 0: no step, decay only */
    float *pr = fcopy(p, n), *mr = fcopy(m, n);
    void *args[] = {&p, &m, &g, &seg_end, &seg_wd, &nseg, &n, &lr, &b1, &b2, &gs};
    launch(&md, "lion_step", cdiv(n, 1024), 1, 1, 256, args);
    const hyp_optim_i *o = hyp_optim_find("lion");
    hyp_optim_cfg c;
    memset(&c, 0, sizeof c);
    c.n_hyper = 2;
    snprintf(c.hyper_name[0], sizeof c.hyper_name[0], "beta1"), c.hyper[0] = b1;
    snprintf(c.hyper_name[1], sizeof c.hyper_name[1], "beta2"), c.hyper[1] = b2;
    long off = 0;
    for (int s = 0; s < nseg; s++) {
        hyp_optim_group grp = {"t", 1.0, seg_wd[s], 0, NULL, ""};
        hyp_optim_span sp = {pr + off, g + off, {mr + off}, sizes[s], &grp, NULL, 0};
        hyp_optim_step a = {lr, 1, gs[0], 0, 0};
        o->step_span(&c, &sp, &a);
        off += sizes[s];
    }
    check_exact(NAME(nm, "v2134 lion_step[%s] params equal the host step bit for bit (n=%ld, %d tensors)", tag, n, nseg), p, pr,
                sizeof(float) * (size_t)n);
    check_exact(NAME(nm, "v2134 lion_step[%s] m equals the host step bit for bit", tag), m, mr, sizeof(float) * (size_t)n);
    close_family(&md);
}

/* A host optimizer section with the given hyper-parameters (name, value pairs). */
static void optim_cfg(hyp_optim_cfg *c, int n, const char *const *names, const double *vals) {
    memset(c, 0, sizeof *c);
    c->n_hyper = n;
    for (int i = 0; i < n; i++) {
        snprintf(c->hyper_name[i], sizeof c->hyper_name[i], "%s", names[i]);
        c->hyper[i] = vals[i];
    }
}

/* v2137 sfadamw_step and sfadamw_lerp (templates/schedulefree.cu.lua) vs schedule-free AdamW's
 * host step and eval_point (optim_sfadamw.c) per tensor, steps 1 (z = y) and 2, with a clip factor
 * and a tensor without decay: within float rounding (the host may contract a multiply-add). */
static void test_sfadamw(const char *tag, const int *sizes, int nseg) {
    char nm[200];
    long *seg_end, n = segments(sizes, nseg, &seg_end);
    float *seg_wd = seg_decay(nseg, 0.1f);
    mod_t md;
    if (open_family(&md, "schedulefree", "", tag)) return;
    const double b1 = 0.9, b2 = 0.999, eps = 1e-8, lr = 1e-2;
    static const char *const H[] = {"beta1", "beta2", "eps"};
    const double V[] = {b1, b2, eps};
    hyp_optim_cfg c;
    optim_cfg(&c, 3, H, V);
    const hyp_optim_i *o = hyp_optim_find("schedulefree_adamw");
    float *y = frandbuf(n, 1.0f), *z = fbuf(n), *v = fbuf(n), *gs = fbuf(1);
    gs[0] = 0.5f;
    float *yr = fcopy(y, n), *zr = fcopy(z, n), *vr = fcopy(v, n);
    for (int t = 1; t <= 2; t++) {
        float *g = frandbuf(n, 1.0f);
        double ckd = 1.0 / t; /* constant LR: c_t = 1/t */
        float flr = (float)lr, fb2 = (float)b2, feps = (float)eps, ibc2 = 1.0f / (float)(1.0 - pow(b2, (double)t));
        float ck = (float)ckd, ystep = (float)(lr * (b1 * (1.0 - ckd) - 1.0));
        int first = t == 1;
        void *args[] = {&y, &z, &v, &g, &seg_end, &seg_wd, &nseg, &n, &flr, &fb2, &feps, &ibc2, &ck, &ystep, &first, &gs};
        launch(&md, "sfadamw_step", cdiv(n, 256), 1, 1, 256, args);
        long off = 0;
        for (int s = 0; s < nseg; s++) {
            hyp_optim_group grp = {"t", 1.0, seg_wd[s], 0, NULL, ""};
            hyp_optim_span sp = {yr + off, g + off, {zr + off, vr + off}, sizes[s], &grp, NULL, 0};
            hyp_optim_step a = {lr, t, gs[0], ckd, 0};
            o->step_span(&c, &sp, &a);
            off += sizes[s];
        }
    }
    check_f32(NAME(nm, "v2137 sfadamw_step[%s] y after 2 steps equals the host step (n=%ld, %d tensors)", tag, n, nseg), y, yr, n, 1e-6, 1e-7);
    check_f32(NAME(nm, "v2137 sfadamw_step[%s] z equals the host step", tag), z, zr, n, 1e-6, 1e-7);
    check_f32(NAME(nm, "v2137 sfadamw_step[%s] v equals the host step", tag), v, vr, n, 1e-6, 1e-7);
    float w = (float)(1.0 - 1.0 / b1);
    void *la[] = {&y, &z, &n, &w};
    launch(&md, "sfadamw_lerp", cdiv(n, 256), 1, 1, 256, la);
    hyp_optim_group grp0 = {"t", 1.0, 0.0, 0, NULL, ""};
    hyp_optim_span all = {yr, NULL, {zr, vr}, n, &grp0, NULL, 0};
    o->eval_point(&c, &all, 1);
    check_f32(NAME(nm, "v2137 sfadamw_lerp[%s] x equals the host eval_point", tag), y, yr, n, 1e-6, 1e-7);
    close_family(&md);
}

/* v2136 adam_mini_block_step (templates/adam_mini.cu.lua) vs Adam-mini's host step (optim_adammini.c)
 * on a fused QKV weight [(nh + 2 nkv) hd, K] (q and k rows per head, then one block per v row) and a
 * norm gain (one block), steps 1 and 2, with a clip factor: m, block v and weights within rounding. */
static void test_adam_mini(const char *tag, int nh, int nkv, int hd, int K) {
    char nm[200];
    mod_t md;
    if (open_family(&md, "adam_mini", "", tag)) return;
    const int R = (nh + 2 * nkv) * hd;
    const long n = (long)R * K;
    static const char *const H[] = {"beta1", "beta2", "eps", "n_head", "n_kv_head", "head_dim"};
    const double V[] = {0.9, 0.95, 1e-8, nh, nkv, hd};
    hyp_optim_cfg c;
    optim_cfg(&c, 6, H, V);
    c.state_compact[1] = 1;
    const hyp_optim_i *o = hyp_optim_find("adam_mini");
    const int nq = nh + nkv, nb = nq + (R - nq * hd);
    plan_param t = {0};
    t.ndim = 2, t.shape[0] = R, t.shape[1] = K, t.numel = n;
    float *p = frandbuf(n, 1.0f), *m = fbuf(n), *v = fbuf(nb), *gs = fbuf(1);
    gs[0] = 0.5f;
    float *pr = fcopy(p, n), *mr = fcopy(m, n), *vr = fcopy(v, nb);
    const float lr = 1e-2f, wd = 0.1f, beta1 = 0.9f, beta2 = 0.95f, eps = 1e-8f;
    for (int step = 1; step <= 2; step++) {
        float *g = frandbuf(n, 1.0f);
        long Kl = K;
        int hdi = hd, nr = 1;
        float lr_bc1 = lr / (float)(1.0 - pow((double)beta1, (double)step));
        float isbc2 = 1.0f / (float)sqrt(1.0 - pow((double)beta2, (double)step)), decay = 1.0f - lr * wd;
        float b1 = beta1, b2 = beta2, e = eps;
        int nqi = nq;
        void *args[] = {&p, &m, &v, &g, &Kl, &nqi, &hdi, &nr, &b1, &b2, &lr_bc1, &isbc2, &e, &decay, &gs};
        launch(&md, "adam_mini_block_step", (unsigned)nb, 1, 1, 256, args);
        hyp_optim_group grp = {"qkv", 1.0, wd, 0, NULL, "qkv"};
        hyp_optim_span sp = {pr, g, {mr, vr}, n, &grp, &t, 0};
        hyp_optim_step a = {lr, step, gs[0], 0, 0};
        o->step_span(&c, &sp, &a);
    }
    check_f32(NAME(nm, "v2136 adam_mini_block_step[%s] weights after 2 steps equal the host step (%dx%d, %d blocks)", tag, R, K, nb), p, pr, n, 1e-6, 1e-7);
    check_f32(NAME(nm, "v2136 adam_mini_block_step[%s] m equals the host step", tag), m, mr, n, 1e-6, 1e-7);
    check_f32(NAME(nm, "v2136 adam_mini_block_step[%s] block v equals the host step", tag), v, vr, nb, 1e-6, 1e-7);
    close_family(&md);
}

/* v2135 sophia_step and sophia_hess (templates/sophia.cu.lua) vs Sophia-G's host step_span and
 * hess_span (optim_sophia.c) per tensor: bit for bit (the same explicit fmaf's), with a clip
 * factor, clipped and unclipped ratios and one tensor without decay. */
static void test_sophia(const char *tag, const int *sizes, int nseg) {
    char nm[200];
    long *seg_end, n = segments(sizes, nseg, &seg_end);
    float *seg_wd = seg_decay(nseg, 0.1f);
    mod_t md;
    if (open_family(&md, "sophia", "", tag)) return;
    static const char *const H[] = {"beta1", "beta2", "rho", "hess_every"};
    const double V[] = {0.965, 0.99, 0.04, 2};
    hyp_optim_cfg c;
    optim_cfg(&c, 4, H, V);
    const hyp_optim_i *o = hyp_optim_find("sophia");
    float lr = 1e-3f, b1 = 0.965f, rho = 0.04f, b2 = 0.99f, B = 256.0f, *gs = fbuf(1);
    gs[0] = 0.5f;
    float *p = frandbuf(n, 1.0f), *m = frandbuf(n, 0.1f), *h = frandbuf(n, 0.5f), *g = frandbuf(n, 1.0f);
    for (long i = 0; i < n; i++) h[i] = fabsf(h[i]);
    float *pr = fcopy(p, n), *mr = fcopy(m, n), *hr = fcopy(h, n);
    void *args[] = {&p, &m, &h, &g, &seg_end, &seg_wd, &nseg, &n, &lr, &b1, &rho, &gs};
    launch(&md, "sophia_step", cdiv(n, 256), 1, 1, 256, args);
    void *hargs[] = {&h, &g, &n, &b2, &B};
    launch(&md, "sophia_hess", cdiv(n, 256), 1, 1, 256, hargs);
    long off = 0;
    for (int s = 0; s < nseg; s++) {
        hyp_optim_group grp = {"t", 1.0, seg_wd[s], 0, NULL, ""};
        hyp_optim_span sp = {pr + off, g + off, {mr + off, hr + off}, sizes[s], &grp, NULL, 0};
        hyp_optim_step a = {lr, 1, gs[0], 0, 0}, ah = {0, 1, 1.0f, 0, B};
        o->step_span(&c, &sp, &a);
        o->hess_span(&c, &sp, &ah);
        off += sizes[s];
    }
    check_exact(NAME(nm, "v2135 sophia_step[%s] params equal the host step bit for bit (n=%ld, %d tensors)", tag, n, nseg), p, pr,
                sizeof(float) * (size_t)n);
    check_exact(NAME(nm, "v2135 sophia_step[%s] m equals the host step bit for bit", tag), m, mr, sizeof(float) * (size_t)n);
    check_exact(NAME(nm, "v2135 sophia_hess[%s] h equals the host hess_span bit for bit", tag), h, hr, sizeof(float) * (size_t)n);
    close_family(&md);
}

static int bf16_brackets(uint16_t got, float exact) {
    uint32_t b = bits_of_f32(exact);
    uint16_t down = (uint16_t)(b >> 16), up = (uint16_t)(down + 1);
    return got == down || ((b & 0xffffu) && got == up);
}

/* sizes: tensor lengths in arena order (each followed by no padding: boundaries may be odd) */
static void test_adamw(const char *tag, const int *sizes, int nseg) {
    char nm[200];
    long *seg_end, n = segments(sizes, nseg, &seg_end);
    float *seg_wd = seg_decay(nseg, 0.1f);
    adam_hp h = adam_params(3);
    float *gs = fbuf(1);
    gs[0] = 0.5f;
    unsigned seed = 1234;
    /* fp32 master weights (optionally with the bf16 copy) vs op_adamw per tensor */
    for (int copy = 0; copy < 2; copy++) {
        mod_t md;
        char t2[64];
        snprintf(t2, sizeof t2, "%s%s", tag, copy ? "_copy" : "");
        if (open_family(&md, "adamw", copy ? "PARAM=f32 STATES=f32 BF16_COPY=true" : "PARAM=f32 STATES=f32", t2)) return;
        float *p = frandbuf(n, 1.0f), *g = frandbuf(n, 1.0f), *m = frandbuf(n, 0.1f), *v = fbuf(n);
        for (long i = 0; i < n; i++) v[i] = 0.01f * (frand() + 1.0f);
        float *pr = fcopy(p, n), *mr = fcopy(m, n), *vr = fcopy(v, n);
        uint16_t *pb = zalloc((size_t)n * 2);
        void *args_plain[] = {&p, &m, &v, &g, &seg_end, &seg_wd, &nseg, &n, &h.lr, &h.b1, &h.b2, &h.eps, &h.ibc1, &h.ibc2, &gs, &seed, &h.t};
        void *args_copy[] = {&p, &pb, &m, &v, &g, &seg_end, &seg_wd, &nseg, &n, &h.lr, &h.b1, &h.b2, &h.eps, &h.ibc1, &h.ibc2, &gs, &seed, &h.t};
        launch(&md, "adamw_step", cdiv(n, 1024), 1, 1, 256, copy ? args_copy : args_plain);
        long off = 0;
        for (int s = 0; s < nseg; s++) {
            op_adamw(pr + off, g + off, mr + off, vr + off, sizes[s], h.lr, h.b1, h.b2, h.eps, seg_wd[s], h.t, gs[0]);
            off += sizes[s];
        }
        check_f32(NAME(nm, "adamw_step[%s] f32 params (n=%ld, %d tensors)", t2, n, nseg), p, pr, n, TOL_F32);
        check_f32(NAME(nm, "adamw_step[%s] m", t2), m, mr, n, TOL_F32);
        check_f32(NAME(nm, "adamw_step[%s] v", t2), v, vr, n, TOL_F32);
        if (copy) {
            long bad = 0;
            for (long i = 0; i < n; i++) bad += !bf16_brackets(pb[i], p[i]);
            check(bad == 0, NAME(nm, "adamw_step[%s] bf16 copy is a stochastic rounding of the master", t2),
                   "%ld of %ld outside [down, up]", bad, n);
        }
        close_family(&md);
    }
    /* bf16 weights and states (v2161): each output brackets the fp32 update of the bf16 inputs */
    mod_t mb;
    char t3[64];
    snprintf(t3, sizeof t3, "%s_bf16", tag);
    if (open_family(&mb, "adamw", "PARAM=bf16 STATES=bf16", t3)) return;
    uint16_t *p = zalloc((size_t)n * 2), *m = zalloc((size_t)n * 2), *v = zalloc((size_t)n * 2);
    float *pf = fbuf(n), *mf = fbuf(n), *vf = fbuf(n), *g = frandbuf(n, 1.0f);
    for (long i = 0; i < n; i++) {
        p[i] = bf16_rne(frand()); m[i] = bf16_rne(0.1f * frand()); v[i] = bf16_rne(0.01f * (frand() + 1.0f));
        pf[i] = bf16_val(p[i]); mf[i] = bf16_val(m[i]); vf[i] = bf16_val(v[i]);
    }
    void *ab[] = {&p, &m, &v, &g, &seg_end, &seg_wd, &nseg, &n, &h.lr, &h.b1, &h.b2, &h.eps, &h.ibc1, &h.ibc2, &gs, &seed, &h.t};
    launch(&mb, "adamw_step", cdiv(n, 1024), 1, 1, 256, ab);
    long off = 0;
    for (int s = 0; s < nseg; s++) {
        op_adamw(pf + off, g + off, mf + off, vf + off, sizes[s], h.lr, h.b1, h.b2, h.eps, seg_wd[s], h.t, gs[0]);
        off += sizes[s];
    }
    long bad = 0;
    for (long i = 0; i < n; i++) bad += !bf16_brackets(p[i], pf[i]) + !bf16_brackets(m[i], mf[i]) + !bf16_brackets(v[i], vf[i]);
    check(bad == 0, NAME(nm, "adamw_step[%s] bf16 params and states: stochastic roundings of the fp32 update", t3),
           "%ld of %ld outside [down, up]", bad, 3 * n);
    close_family(&mb);
}

/* Unbiasedness: with lr = 0 the bf16 copy is SR(p); p = 1 + 0.3 ulp rounds up 30% of the time. */
static void test_stochastic_rounding(void) {
    mod_t md;
    if (open_family(&md, "adamw", "PARAM=f32 STATES=f32 BF16_COPY=true", "sr")) return;
    long n = 65536;
    int nseg = 1;
    long *seg_end = zalloc(sizeof *seg_end);
    seg_end[0] = n;
    float *seg_wd = fbuf(1), *p = fbuf(n), *g = fbuf(n), *m = fbuf(n), *v = fbuf(n);
    const float frac = 0.3f, x = 1.0f + frac * ldexpf(1.0f, -7); /* bf16 ulp at 1 is 2^-7 */
    for (long i = 0; i < n; i++) p[i] = x;
    uint16_t *pb = zalloc((size_t)n * 2);
    adam_hp h = adam_params(1);
    h.lr = 0.0f;
    float *gs = NULL;
    unsigned seed = 42;
    void *args[] = {&p, &pb, &m, &v, &g, &seg_end, &seg_wd, &nseg, &n, &h.lr, &h.b1, &h.b2, &h.eps, &h.ibc1, &h.ibc2, &gs, &seed, &h.t};
    launch(&md, "adamw_step", cdiv(n, 1024), 1, 1, 256, args);
    long up = 0, other = 0;
    for (long i = 0; i < n; i++) {
        if (pb[i] == 0x3f81) up++;
        else if (pb[i] != 0x3f80) other++;
    }
    double rate = (double)up / n, sigma = sqrt(frac * (1 - frac) / n);
    check(other == 0 && fabs(rate - frac) < 5 * sigma, "test_v2161_stochastic_rounding_unbiased",
           "rounded up %.4f of the time (want %.2f +- %.4f), %ld other values", rate, frac, 5 * sigma, other);
    /* reproducible: same (seed, step) -> same bits */
    uint16_t *pb2 = zalloc((size_t)n * 2);
    void *args2[] = {&p, &pb2, &m, &v, &g, &seg_end, &seg_wd, &nseg, &n, &h.lr, &h.b1, &h.b2, &h.eps, &h.ibc1, &h.ibc2, &gs, &seed, &h.t};
    launch(&md, "adamw_step", cdiv(n, 1024), 1, 1, 256, args2);
    check_exact("test_v2161_stochastic_rounding_reproducible (seed, step, element)", pb2, pb, (size_t)n * 2);
    close_family(&md);
}

/* v2161: the adamw kernel with bf16 weights and fp32 states (PARAM=bf16 STATES=f32, the mode the
 * cpu trainer runs) against the cpu trainer's update (hyp_adamw_bf16_span, optim_adamw.c): both
 * run kernels/hyp/sr.h's element update, so after 12 steps with fresh gradients, a clip factor
 * and per-tensor weight decay the bf16 weights and the fp32 m, v are the same bits. */
static void test_adamw_bf16_vs_cpu(const char *tag, const int *sizes, int nseg) {
    char nm[200], t3[64];
    snprintf(t3, sizeof t3, "%s_bf16p", tag);
    long *seg_end, n = segments(sizes, nseg, &seg_end);
    float *seg_wd = seg_decay(nseg, 0.1f);
    mod_t mb;
    if (open_family(&mb, "adamw", "PARAM=bf16 STATES=f32", t3)) return;
    uint16_t *p = zalloc((size_t)n * 2), *pc = zalloc((size_t)n * 2);
    float *m = fbuf(n), *v = fbuf(n), *mc = fbuf(n), *vc = fbuf(n), *gs = fbuf(1);
    for (long i = 0; i < n; i++) pc[i] = p[i] = bf16_rne(0.02f * frand());
    unsigned seed = 1234;
    int steps = 12, first_bad = 0;
    long moved = 0;
    for (int t = 1; t <= steps; t++) {
        adam_hp h = adam_params(t);
        h.lr = 1e-3f;
        gs[0] = t % 3 ? 1.0f : 0.5f;
        float *g = frandbuf(n, 1.0f);
        void *ab[] = {&p, &m, &v, &g, &seg_end, &seg_wd, &nseg, &n, &h.lr, &h.b1, &h.b2, &h.eps, &h.ibc1, &h.ibc2, &gs, &seed, &h.t};
        launch(&mb, "adamw_step", cdiv(n, 1024), 1, 1, 256, ab);
        long off = 0;
        uint16_t before0 = pc[0];
        for (int s = 0; s < nseg; s++) {
            hyp_adamw_bf16_span(pc, g, mc, vc, off, sizes[s], h.lr, h.b1, h.b2, h.eps, h.ibc1, h.ibc2, seg_wd[s], gs[0],
                                seed, (unsigned)t, 0);
            off += sizes[s];
        }
        moved += pc[0] != before0;
        if (!first_bad && (memcmp(p, pc, (size_t)n * 2) || memcmp(m, mc, sizeof(float) * (size_t)n) ||
                           memcmp(v, vc, sizeof(float) * (size_t)n)))
            first_bad = t;
    }
    check(first_bad == 0, NAME(nm, "test_v2161_adamw_bf16_params_sim_equals_cpu_bitwise[%s] (n=%ld, %d tensors, %d steps)", t3, n, nseg, steps),
          first_bad ? "weights or states differ first after step %d" : "bf16 weights, m, v bit-identical after every step%.0d", first_bad);
    check(moved > 0, NAME(nm, "test_v2161_adamw_bf16_params_move[%s]", t3), "weight 0 changed in %ld of %d steps", moved, steps);
    close_family(&mb);
}

/* ------------------------------------------------------------------------------------------ */

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}
/* runs one test, then prints how long it took (compile through the sim cache + launches) */
#define RUN(call)                                                        \
    do {                                                                 \
        double t0_ = now_s();                                            \
        call;                                                            \
        printf("# %-60.60s %.2f s\n", #call, now_s() - t0_);               \
        free_all();                                                      \
    } while (0)

int main(void) {
    /* a fixed directory: the simulator's compile cache keys the source path too */
    snprintf(g_tmp, sizeof g_tmp, "%s/tests/kernels_sim", HYP_BINARY_DIR);
    char mk[400];
    snprintf(mk, sizeof mk, "mkdir -p '%s'", g_tmp);
    if (system(mk) != 0) {
        fprintf(stderr, "cannot create %s\n", g_tmp);
        return 1;
    }
    /* regular shapes (vector paths, divisible tiles) and odd ones (scalar tails, partial tiles) */
    RUN(test_gelu("regular", 4096));
    RUN(test_gelu("odd", 1001));
    RUN(test_residual("regular", 4096));
    RUN(test_residual("odd", 1001));
    RUN(test_swiglu("regular", 32, 128));
    RUN(test_swiglu("odd", 13, 77));
    RUN(test_embedding("regular", 4, 32, 128, 256, 1));
    RUN(test_embedding("odd", 3, 7, 77, 61, 1));
    RUN(test_embedding("odd_nowpe", 2, 9, 36, 1000, 0));
    RUN(test_layernorm("regular", 64, 128));
    RUN(test_layernorm("odd", 13, 77));
    RUN(test_rmsnorm("regular", 64, 128, 4, 2, 32));
    RUN(test_rmsnorm("odd", 13, 77, 3, 1, 10));
    RUN(test_rope("regular", 2, 32, 4, 2, 32, 1));
    RUN(test_rope("odd", 3, 13, 3, 1, 10, 1));
    RUN(test_rope("odd_norope", 2, 7, 3, 3, 13, 0));
    RUN(test_rope("odd_h6", 1, 37, 6, 2, 10, 1)); /* the shape test_attention("odd_rope") renders */
    RUN(test_attention("regular", 2, 64, 4, 2, 32, 0));
    RUN(test_attention("odd", 2, 45, 3, 1, 10, 0));
    RUN(test_attention("regular_rope", 2, 64, 4, 2, 32, 1));
    RUN(test_attention("odd_rope", 1, 37, 6, 2, 10, 1));
    RUN(test_flash("regular", 1, 64, 2, 1, 64, "bf16x3", 0));
    RUN(test_flash("odd_g3", 2, 45, 3, 1, 32, "bf16x3", 1));
    RUN(test_flash("odd_hd128", 1, 70, 2, 2, 128, "bf16x3", 0));
    RUN(test_flash("bf16", 1, 50, 4, 2, 64, "bf16", 0));
    RUN(test_flash("odd_hd48_bf16", 1, 33, 2, 1, 48, "bf16", 0));
    RUN(test_flash_doc("v2126_doc_g2", 2, 150, 4, 2, 64, "bf16x3", 1));
    RUN(test_flash_doc("v2126_doc_bf16", 1, 97, 2, 1, 32, "bf16", 0));
    RUN(test_classifier("regular", 16, 256, 256));
    RUN(test_classifier("odd", 13, 61, 64));
    RUN(test_classifier("gpt2_vocab", 4, 50257, 50304));
    static const int regular_sizes[] = {64, 16, 48, 256};
    static const int odd_sizes[] = {13, 487, 501};
    RUN(test_adamw("regular", regular_sizes, 4));
    RUN(test_adamw("odd", odd_sizes, 3));
    RUN(test_lion("regular", regular_sizes, 4));
    RUN(test_lion("odd", odd_sizes, 3));
    RUN(test_sfadamw("regular", regular_sizes, 4));
    RUN(test_sfadamw("odd", odd_sizes, 3));
    RUN(test_adam_mini("regular", 4, 2, 16, 64));
    RUN(test_adam_mini("odd", 3, 1, 5, 37));
    RUN(test_sophia("regular", regular_sizes, 4));
    RUN(test_sophia("odd", odd_sizes, 3));
    RUN(test_stochastic_rounding());
    RUN(test_adamw_bf16_vs_cpu("regular", regular_sizes, 4));
    RUN(test_adamw_bf16_vs_cpu("odd", odd_sizes, 3));
    RUN(test_global_norm("regular", 1 << 16));
    RUN(test_global_norm("odd", 100003));
    RUN(test_cast("regular", 4096));
    RUN(test_cast("odd", 1001));
    RUN(test_fp8_edges());
    RUN(test_round_fp16()); /* v2162 */
    free_all();
    return hyp_test_finish();
}
