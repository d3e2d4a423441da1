/* test_mea_sim_v2118.c — v2118 the memory-efficient SIMT attention template
 * (templates/mem_efficient_attention.cu.lua) rendered by `gen render`, run under the CPU simulator,
 * against the cpu flash op (ops_flash.c: the same chunked online-softmax algorithm in fp32,
 * itself checked against the naive attention in test_flash), forward (out, lse) and backward (dq,
 * dk, dv accumulated), on regular and odd shapes (partial chunks, grouped heads, hd 24/64/128,
 * bf16 activations, the v2126 document mask); the backward twice, bit-identical (one writer per
 * element, fixed order); and with v2117's rules rendered in (sliding_window + softcap, prefix_lm +
 * alibi) against the cpu flash op with the same rule.
 *
 * Tolerances (|err| <= atol * max|want| + rtol * |want|): fp32 activations 2e-5 each — both sides
 * are fp32 with different summation orders (test_flash.c's bound: docs/test-tolerances.md E1, E6,
 * 2 lambda u sqrt(hd + T) <= 1.5e-5 of the scale at hd + T <= 278, plus ~2 ulp per exp: expf vs
 * the cpu's polynomial exp2); bf16 activations: the reference runs on the same bf16-rounded inputs
 * in fp32 and is rounded to bf16 where the kernel stores bf16 (out, the accumulated dqkv), so the
 * two differ by at most one bf16 ulp where the fp32 values straddle a rounding boundary: <= 2^-7 |v|
 * <= 4e-3 (|v| + max|want|) — atol = rtol = 4e-3.
 * Any masking, indexing or missing term is O(max|want|).
 */
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attn_mod.h"
#include "ops_flash.h"
#include "sim.h"

#include "hyp_test.h"

static char g_tmp[320];

static uint64_t g_rng = 0x9E3779B97F4A7C15ull;
static float frand(void) { /* uniform in [-1, 1) */
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return (float)((g_rng >> 40) * (1.0 / 8388608.0)) - 1.0f;
}
static int irand(int n) { return (int)((frand() + 1.0f) * 0.5f * n) % n; }

/* 64-byte aligned (the runtime's arena alignment), zeroed, counted for cleanup */
static void *g_allocs[4096];
static int g_nallocs;
static void *zalloc(size_t bytes) {
    size_t sz = (bytes + 63) & ~(size_t)63;
    void *p = aligned_alloc(64, sz ? sz : 64);
    if (!p) {
        fprintf(stderr, "out of memory\n");
        exit(1);
    }
    memset(p, 0, sz ? sz : 64);
    if (g_nallocs < 4096) g_allocs[g_nallocs++] = p;
    return p;
}
static float *fbuf(long n) { return zalloc((size_t)n * sizeof(float)); }
static float *frandbuf(long n, float scale) {
    float *p = fbuf(n);
    for (long i = 0; i < n; i++) p[i] = scale * frand();
    return p;
}
static float *fcopy(const float *x, long n) {
    float *p = fbuf(n);
    memcpy(p, x, (size_t)n * sizeof(float));
    return p;
}
static void free_all(void) {
    for (int i = 0; i < g_nallocs; i++) free(g_allocs[i]);
    g_nallocs = 0;
}

/* fp32 comparison: |got - want| <= atol_rel * max|want| + rtol * |want|; NaN matches NaN. */
static void check_f32(const char *name, const float *got, const float *want, long n, double rtol,
                      double atol_rel) {
    double maxw = 0.0;
    for (long i = 0; i < n; i++)
        if (isfinite(want[i]) && fabs(want[i]) > maxw) maxw = fabs(want[i]);
    double atol = atol_rel * maxw;
    long bad = 0, first_bad = -1;
    double worst = 0.0;
    for (long i = 0; i < n; i++) {
        if (isnan(want[i]) && isnan(got[i])) continue;
        double d = fabs((double)got[i] - (double)want[i]);
        if (!(d <= atol + rtol * fabs(want[i]))) {
            if (first_bad < 0) first_bad = i;
            bad++;
        } else if (d > worst) {
            worst = d;
        }
    }
    if (bad)
        check(0, name, "%ld of %ld values beyond tolerance; first [%ld]: got %.9g want %.9g", bad, n,
               first_bad, got[first_bad], want[first_bad]);
    else
        check(1, name, "max |err| %.3g (scale %.3g)", worst, maxw);
}
#define TOL_F32 1e-5, 1e-5


/* ------------------------------------------------------------------------------------------ */
/* Rendering, compiling, launching */

typedef struct {
    hyp_sim_module *m;
    char what[160];
} mod_t;

static int open_family(mod_t *md, const char *family, const char *consts, const char *tag) {
    char cu[512], cmd[1536];
    snprintf(md->what, sizeof md->what, "%s[%s]", family, tag);
    snprintf(cu, sizeof cu, "%s/%s_%s.cu", g_tmp, family, tag);
    snprintf(cmd, sizeof cmd, "'%s/generator/gen' render %s %s -o '%s'", HYP_BINARY_DIR, family, consts, cu);
    if (system(cmd) != 0) {
        check(0, md->what, "gen render failed: %s", cmd);
        md->m = NULL;
        return -1;
    }
    hyp_err e = {{0}};
    if (hyp_sim_open(cu, NULL, &md->m, &e)) {
        check(0, md->what, "hyp_sim_open: %s", e.msg);
        md->m = NULL;
        return -1;
    }
    return 0;
}

/* A compile-time constant of a file open_family rendered (derived tile sizes), or -1. */
static long rendered_const(const char *family, const char *tag, const char *name) {
    char path[512], line[512], pat[128];
    snprintf(path, sizeof path, "%s/%s_%s.cu", g_tmp, family, tag);
    snprintf(pat, sizeof pat, "static constexpr int %s = %%ld;", name);
    FILE *f = fopen(path, "r");
    long v = -1;
    while (f && v < 0 && fgets(line, sizeof line, f)) {
        const char *p = strstr(line, "static constexpr int ");
        if (p && sscanf(p, pat, &v) != 1) v = -1;
    }
    if (f) fclose(f);
    return v;
}

static void close_family(mod_t *md) {
    if (md->m) hyp_sim_unload(md->m);
    md->m = NULL;
}

/* A launch with `smem` bytes of dynamic shared memory. */
static void launch_smem(mod_t *md, const char *kernel, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                        size_t smem, void **args) {
    hyp_err e = {{0}};
    if (hyp_sim_launch(md->m, kernel, hyp_dim3_of(gx, gy, gz), hyp_dim3_of(bx, 1, 1), smem, args, NULL, &e)) {
        char name[256];
        snprintf(name, sizeof name, "%s %s launch", md->what, kernel);
        check(0, name, "%s", e.msg);
    }
}

static void launch(mod_t *md, const char *kernel, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                   void **args) {
    launch_smem(md, kernel, gx, gy, gz, bx, 0, args);
}

static unsigned cdiv(long a, long b) { return (unsigned)((a + b - 1) / b); }

#define NAME(buf, ...) (snprintf(buf, sizeof buf, __VA_ARGS__), buf)



static uint16_t bf16_bits(float x) { /* round to nearest even (finite inputs) */
    uint32_t u;
    memcpy(&u, &x, 4);
    u += 0x7FFFu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}
static float bf16_f(uint16_t h) { uint32_t u = (uint32_t)h << 16; float f; memcpy(&f, &u, 4); return f; }
static uint16_t *to_bf16(const float *x, long n) {
    uint16_t *p = zalloc((size_t)n * 2);
    for (long i = 0; i < n; i++) p[i] = bf16_bits(x[i]);
    return p;
}
static void round_bf16(float *x, long n) { for (long i = 0; i < n; i++) x[i] = bf16_f(bf16_bits(x[i])); }
static float *of_bf16(const uint16_t *h, long n) {
    float *p = fbuf(n);
    for (long i = 0; i < n; i++) p[i] = bf16_f(h[i]);
    return p;
}

/* rule: v2117 template constants ("" = causal) and the same rule for the cpu op (NULL = causal) */
static void mea_case(const char *tag, int B, int T, int NH, int NKV, int HD, int bf16, int doc, const char *rule, const hyp_attn_mod *md) {
    char consts[300], nm[300];
    mod_t mf;
    snprintf(consts, sizeof consts, "NH=%d NKV=%d HD=%d%s%s %s", NH, NKV, HD, bf16 ? " ACT=bf16" : "", doc ? " DOCMASK=true" : "", rule);
    if (open_family(&mf, "mem_efficient_attention", consts, tag)) return;
    const double tol = bf16 ? 4e-3 : 2e-5;
    const long sf = rendered_const("mem_efficient_attention", tag, "SMEM_FWD"), sq = rendered_const("mem_efficient_attention", tag, "SMEM_DQ"),
               sk = rendered_const("mem_efficient_attention", tag, "SMEM_DKV"), bq = rendered_const("mem_efficient_attention", tag, "BQ"),
               bqb = rendered_const("mem_efficient_attention", tag, "BQB"), bkv = rendered_const("mem_efficient_attention", tag, "BKV");
    int N = B * T, R = (NH + 2 * NKV) * HD, OC = NH * HD;
    long nr = (long)N * R, no = (long)N * OC, nl = (long)B * NH * T;
    float *qkv = frandbuf(nr, 1.5f), *dout = frandbuf(no, 1.0f), *dq0 = frandbuf(nr, 1.0f);
    if (bf16) { round_bf16(qkv, nr); round_bf16(dout, no); round_bf16(dq0, nr); }
    float *out_ref = fbuf(no), *lse_ref = fbuf(nl), *lse = fbuf(nl), *D = fbuf(nl), *D_ref = fbuf(nl);
    int32_t *pos = NULL;
    if (doc) {
        pos = zalloc((size_t)N * sizeof *pos);
        for (int bb = 0; bb < B; bb++)
            for (int t = 0, left = 0, p = 0; t < T; t++, p++, left--) {
                if (left <= 0) left = 1 + irand(80), p = 0;
                pos[bb * T + t] = p;
            }
    }
    op_flash_attention_fwd_mod(out_ref, lse_ref, qkv, pos, B, T, NH, NKV, HD, 0.0f, md, NULL);
    float *dqkv_ref = fcopy(dq0, nr);
    op_flash_attention_bwd_mod(dqkv_ref, D_ref, dout, qkv, out_ref, lse_ref, pos, B, T, NH, NKV, HD, 0.0f, md);
    /* device buffers in the activation dtype */
    void *d_qkv = bf16 ? (void *)to_bf16(qkv, nr) : (void *)qkv, *d_dout = bf16 ? (void *)to_bf16(dout, no) : (void *)dout;
    void *d_out = bf16 ? (void *)zalloc((size_t)no * 2) : (void *)fbuf(no);
    void *d_dq = bf16 ? (void *)to_bf16(dq0, nr) : (void *)fcopy(dq0, nr), *d_dq2 = bf16 ? (void *)to_bf16(dq0, nr) : (void *)fcopy(dq0, nr);
    void *f1[] = {&d_out, &lse, &d_qkv, &pos, &T};
    launch_smem(&mf, "mea_fwd", cdiv(T, bq), B * NH, 1, (unsigned)bq, (size_t)sf, f1);
    float *out = bf16 ? of_bf16(d_out, no) : d_out;
    check_f32(NAME(nm, "test_v2118_sim_fwd[%s] B=%d T=%d NH=%d NKV=%d HD=%d%s%s %s out", tag, B, T, NH, NKV, HD, bf16 ? " bf16" : "", doc ? " +doc" : "", rule), out, out_ref, no, tol, tol);
    check_f32(NAME(nm, "test_v2118_sim_fwd[%s] lse", tag), lse, lse_ref, nl, 2e-5, 2e-5);
    /* backward from the reference forward's out and lse, so each direction's error is its own */
    void *d_oref = bf16 ? (void *)to_bf16(out_ref, no) : (void *)out_ref;
    void *b1[] = {&D, &d_dout, &d_oref, &B, &T};
    launch(&mf, "mea_bwd_d", cdiv((long)B * NH * T, 4), 1, 1, 128, b1);
    for (int rep = 0; rep < 2; rep++) {
        void *dq = rep ? d_dq2 : d_dq;
        void *b2[] = {&dq, &d_dout, &d_qkv, &lse_ref, &D, &pos, &T};
        launch_smem(&mf, "mea_bwd_dkv", cdiv(T, bkv), B * NKV, 1, (unsigned)bkv, (size_t)sk, b2);
        launch_smem(&mf, "mea_bwd_dq", cdiv(T, bqb), B * NH, 1, (unsigned)bqb, (size_t)sq, b2);
    }
    if (!bf16) check_f32(NAME(nm, "test_v2118_sim_bwd[%s] D = rowsum(dout*out)", tag), D, D_ref, nl, 2e-5, 2e-5);
    float *dqkv = bf16 ? of_bf16(d_dq, nr) : d_dq;
    if (bf16) round_bf16(dqkv_ref, nr); /* the kernel stores the accumulated gradient in bf16 */
    check_f32(NAME(nm, "test_v2118_sim_bwd[%s] dqkv accumulates", tag), dqkv, dqkv_ref, nr, tol, tol);
    check(!memcmp(d_dq, d_dq2, (size_t)nr * (bf16 ? 2 : 4)), NAME(nm, "test_v2118_sim_bwd[%s] deterministic", tag), "second run bit-identical");
    close_family(&mf);
}

int main(void) {
    snprintf(g_tmp, sizeof g_tmp, "%s/tests/mea_sim", HYP_BINARY_DIR);
    char mk[400];
    snprintf(mk, sizeof mk, "mkdir -p '%s'", g_tmp);
    if (system(mk) != 0) return 1;
    mea_case("regular", 1, 128, 4, 2, 64, 0, 0, "", NULL);
    mea_case("odd_hd24", 2, 45, 3, 1, 24, 0, 0, "", NULL);
    mea_case("odd_hd128_bf16_doc", 1, 70, 2, 2, 128, 1, 1, "", NULL);
    /* v2117's rules rendered into this kernel (test_v2117 in the names: the flex rule measured here) */
    const hyp_attn_mod sw = {HYP_MASK_SLIDING_WINDOW, 21, 0, HYP_MOD_SOFTCAP, 2.0f}, pa = {HYP_MASK_PREFIX_LM, 0, 37, HYP_MOD_ALIBI, 0.0f};
    mea_case("test_v2117_sw_softcap", 2, 90, 4, 2, 32, 0, 0, "MASK=sliding_window WINDOW=21 SCORE_MOD=softcap SOFTCAP=2", &sw);
    mea_case("test_v2117_prefix_alibi", 1, 99, 4, 1, 32, 0, 0, "MASK=prefix_lm PREFIX=37 SCORE_MOD=alibi", &pa);
    free_all();
    return hyp_test_finish();
}
