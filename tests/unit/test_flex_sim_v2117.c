/* test_flex_sim_v2117.c — v2117 flex attention in the FA2 template: templates/flash_attention.cu.lua
 * rendered by `gen render` with a mask rule and a score modifier runs under the CPU simulator and
 * matches the cpu flash op with the same rule (ops_flash.c's _mod functions, themselves checked
 * against the naive reference in test_flex_v2117), forward (out, lse) and backward (dq, dk, dv),
 * on odd shapes (partial tiles, grouped heads): sliding_window + softcap, prefix_lm + alibi, and
 * sliding_window with the v2126 document mask.
 *
 * Tolerances: as test_kernels_sim's flash cases (|err| <= atol * max|want| + rtol * |want|):
 *   bf16x3 1e-4 each — the hi + lo split keeps ~16 bits of every operand and drops lo*lo, so a
 *   product is off by ~3 * 2^-17 relative; exp of a score amplifies its absolute error and the
 *   backward sums up to T such terms. The modifiers add no error source of their own: tanh (|d/ds|
 *   <= 1) and the ALiBi bias (exact in both up to the slope's exp2 rounding, ~2^-24 relative) do
 *   not amplify the score error, and softcap's derivative factor is a product of two roundings.
 *   Any masking or modifier mismatch is O(max|want|).
 *
 * Needs g++ (the simulator's compiler); the rendered files are compiled once through its cache.
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


/* One rendered rule: the four kernels against the cpu flash op with the same rule. */
static void flex_case(const char *tag, int B, int T, int NH, int NKV, int HD, const char *rule, hyp_attn_mod md, int doc) {
    char consts[256], nm[300];
    mod_t mf;
    snprintf(consts, sizeof consts, "NH=%d NKV=%d HD=%d PREC=bf16x3 %s%s", NH, NKV, HD, rule, doc ? " DOCMASK=true" : "");
    if (open_family(&mf, "flash_attention", consts, tag)) return;
    const double tol = 1e-4;
    const long smem_fwd = rendered_const("flash_attention", tag, "SMEM_FWD");
    const long smem_dkv = rendered_const("flash_attention", tag, "SMEM_DKV");
    const long smem_dq = rendered_const("flash_attention", tag, "SMEM_DQ");
    int N = B * T, R = (NH + 2 * NKV) * HD, OC = NH * HD;
    long nr = (long)N * R, no = (long)N * OC, nl = (long)B * NH * T;
    float *qkv = frandbuf(nr, 1.5f), *out = fbuf(no), *lse = fbuf(nl), *out_ref = fbuf(no), *lse_ref = fbuf(nl);
    int32_t *pos = NULL;
    if (doc) { /* documents of 1..80 tokens */
        pos = zalloc((size_t)N * sizeof *pos);
        for (int bb = 0; bb < B; bb++)
            for (int t = 0, left = 0, p = 0; t < T; t++, p++, left--) {
                if (left <= 0) left = 1 + irand(80), p = 0;
                pos[bb * T + t] = p;
            }
    }
    void *f1[] = {&out, &lse, &qkv, &pos, &T};
    launch_smem(&mf, "flash_attention_fwd", cdiv(T, 64), B * NH, 1, 128, (size_t)smem_fwd, f1);
    op_flash_attention_fwd_mod(out_ref, lse_ref, qkv, pos, B, T, NH, NKV, HD, 0.0f, &md, NULL);
    check_f32(NAME(nm, "test_v2117_sim_fwd[%s] %s%s B=%d T=%d NH=%d NKV=%d HD=%d out", tag, rule, doc ? " +doc" : "", B, T, NH, NKV, HD), out, out_ref, no, tol, tol);
    check_f32(NAME(nm, "test_v2117_sim_fwd[%s] lse", tag), lse, lse_ref, nl, tol, tol);
    float *dout = frandbuf(no, 1.0f), *D = fbuf(nl), *D_ref = fbuf(nl);
    float *dqkv = frandbuf(nr, 1.0f), *dqkv_ref = fcopy(dqkv, nr);
    void *b1[] = {&D, &dout, &out_ref, &B, &T};
    launch(&mf, "flash_attention_bwd_d", cdiv((long)B * NH * T, 4), 1, 1, 128, b1);
    void *b2[] = {&dqkv, &dout, &qkv, &lse_ref, &D, &pos, &T};
    launch_smem(&mf, "flash_attention_bwd_dkv", cdiv(T, 64), B * NKV, 1, 128, (size_t)smem_dkv, b2);
    launch_smem(&mf, "flash_attention_bwd_dq", cdiv(T, 64), B * NH, 1, 128, (size_t)smem_dq, b2);
    op_flash_attention_bwd_mod(dqkv_ref, D_ref, dout, qkv, out_ref, lse_ref, pos, B, T, NH, NKV, HD, 0.0f, &md);
    check_f32(NAME(nm, "test_v2117_sim_bwd[%s] dqkv accumulates", tag), dqkv, dqkv_ref, nr, tol, tol);
    close_family(&mf);
}

int main(void) {
    snprintf(g_tmp, sizeof g_tmp, "%s/tests/flex_sim", HYP_BINARY_DIR);
    char mk[400];
    snprintf(mk, sizeof mk, "mkdir -p '%s'", g_tmp);
    if (system(mk) != 0) return 1;
    flex_case("sw_softcap", 2, 150, 4, 2, 32, "MASK=sliding_window WINDOW=40 SCORE_MOD=softcap SOFTCAP=2",
              (hyp_attn_mod){HYP_MASK_SLIDING_WINDOW, 40, 0, HYP_MOD_SOFTCAP, 2.0f}, 0);
    flex_case("prefix_alibi", 1, 99, 4, 1, 32, "MASK=prefix_lm PREFIX=37 SCORE_MOD=alibi",
              (hyp_attn_mod){HYP_MASK_PREFIX_LM, 0, 37, HYP_MOD_ALIBI, 0.0f}, 0);
    flex_case("sw_doc", 1, 130, 2, 1, 32, "MASK=sliding_window WINDOW=24",
              (hyp_attn_mod){HYP_MASK_SLIDING_WINDOW, 24, 0, HYP_MOD_NONE, 0.0f}, 1);
    free_all();
    return hyp_test_finish();
}
