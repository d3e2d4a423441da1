/* test_flex_v2117.c — v2117 flex attention on the cpu: the flash op (ops_flash.c, _mod functions)
 * against the naive reference (ops_attn_mod.c) for every mask rule and score modifier, forward
 * and backward, regular and odd shapes; the reference's generic path against the optimized naive
 * op where the rule changes nothing; the reference's backward against central differences; the
 * flash op's skipped-tile count against the closed form for a sliding window. Never: a check of
 * the flash op against itself.
 *
 * Tolerances:
 *   flash vs reference, normwise max|a - b| / max|b| <= 2e-5 for out and each of dq, dk, dv: the
 *     two compute the same sums in different orders (online softmax, P from exp(s - lse), D =
 *     dout.out), i.e. two fp32 summation orders (docs/test-tolerances.md E1, E6) over <= hd + T
 *     = 152 terms plus ~2 ulp per exp/tanh: 2 lambda u sqrt(152) = 8.8e-6 (lambda = 6), the
 *     bound test_flash.c uses; the reference sums in double, so its own part is smaller. Any
 *     masking or modifier error is O(1).
 *   generic reference path vs the optimized naive op (rule that masks nothing extra): the same
 *     2e-5 (double vs fp32 sums of the same terms).
 *   central differences (eps 1e-2 on qkv entries of a tiny case, fp32 loss sum(out*dout) of
 *     ~10 terms of size ~1): truncation eps^2/6 |f'''| ~ 2e-5 plus rounding u |L| / eps ~ 6e-5
 *     per entry; bound 1e-3 absolute + 1e-2 relative. A missing softcap derivative (factor
 *     1 - tanh^2, here 0.3..1) is off by > 10%.
 *   tile counts: exact integers.
 */
#include "attn_mod.h"
#include "ops_cpu.h"
#include "ops_flash.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hyp_test.h"

static uint64_t g_rng = 0x243F6A8885A308D3ull;
static float urand(void) {
    uint64_t z = (g_rng += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return (float)((z >> 40) * (1.0 / 16777216.0)) * 2.0f - 1.0f;
}
static float *fal(long n) {
    float *p = calloc((size_t)(n > 0 ? n : 1), sizeof(float));
    if (!p) { fprintf(stderr, "out of memory\n"); exit(2); }
    return p;
}
static float *frnd(long n, float amp) {
    float *p = fal(n);
    for (long i = 0; i < n; i++) p[i] = amp * urand();
    return p;
}
static double rel_err(const float *a, const float *b, long N, long ld, long c0, long w) {
    double emax = 0.0, bmax = 0.0;
    for (long n = 0; n < N; n++)
        for (long c = c0; c < c0 + w; c++) {
            double d = fabs((double)a[n * ld + c] - (double)b[n * ld + c]);
            if (!(d <= emax)) emax = d;
            if (fabs((double)b[n * ld + c]) > bmax) bmax = fabs((double)b[n * ld + c]);
        }
    return bmax > 0.0 ? emax / bmax : emax;
}

#define TOL 2e-5

static const char *mask_name(int m) { return m == HYP_MASK_SLIDING_WINDOW ? "sliding_window" : m == HYP_MASK_PREFIX_LM ? "prefix_lm" : "causal"; }
static const char *mod_name(int m) { return m == HYP_MOD_SOFTCAP ? "softcap" : m == HYP_MOD_ALIBI ? "alibi" : "none"; }

/* documents of 1..40 tokens per row (v2126 positions) */
static int32_t *doc_positions(int B, int T) {
    int32_t *p = malloc(sizeof *p * (size_t)B * (size_t)T);
    for (int b = 0; b < B; b++)
        for (int t = 0, left = 0, q = 0; t < T; t++, q++, left--) {
            if (left <= 0) left = 1 + (int)((urand() + 1.0f) * 20.0f), q = 0;
            p[b * T + t] = q;
        }
    return p;
}

/* flash _mod vs the naive reference _mod: out and dq, dk, dv */
static void flash_vs_ref(const char *tag, int B, int T, int NH, int NKV, int hd, float amp, hyp_attn_mod md, int docs) {
    const long R = (long)(NH + 2 * NKV) * hd, OC = (long)NH * hd, N = (long)B * T, A = (long)B * NH * T * T;
    float *qkv = frnd(N * R, amp), *dout = frnd(N * OC, 1.0f);
    float *att = fal(A), *datt = fal(A), *on = fal(N * OC), *of = fal(N * OC), *lse = fal((long)B * NH * T), *dsc = fal((long)B * NH * T);
    float *pre = frnd(N * R, 1.0f), *dn = fal(N * R), *df = fal(N * R);
    memcpy(dn, pre, sizeof(float) * (size_t)(N * R));
    memcpy(df, pre, sizeof(float) * (size_t)(N * R));
    int32_t *pos = docs ? doc_positions(B, T) : NULL;
    op_attention_fwd_mod(on, att, qkv, pos, B, T, NH, NKV, hd, 0.0f, &md);
    op_attention_bwd_mod(dn, datt, dout, qkv, att, pos, B, T, NH, NKV, hd, 0.0f, &md);
    hyp_attn_tiles tl;
    op_flash_attention_fwd_mod(of, lse, qkv, pos, B, T, NH, NKV, hd, 0.0f, &md, &tl);
    op_flash_attention_bwd_mod(df, dsc, dout, qkv, of, lse, pos, B, T, NH, NKV, hd, 0.0f, &md);
    for (long i = 0; i < N * R; i++) { dn[i] -= pre[i]; df[i] -= pre[i]; }
    double eo = rel_err(of, on, N, OC, 0, OC), eq = rel_err(df, dn, N, R, 0, OC);
    double ek = rel_err(df, dn, N, R, OC, (long)NKV * hd), ev = rel_err(df, dn, N, R, OC + (long)NKV * hd, (long)NKV * hd);
    char nm[256];
    snprintf(nm, sizeof nm, "test_v2117_flash_vs_ref[%s] mask=%s window=%d prefix=%d mod=%s cap=%g%s B=%d T=%d NH=%d NKV=%d hd=%d",
             tag, mask_name(md.mask), md.window, md.prefix, mod_name(md.mod), md.softcap, docs ? " +docs" : "", B, T, NH, NKV, hd);
    int ok = eo <= TOL && eq <= TOL && ek <= TOL && ev <= TOL;
    check(ok, nm, "rel err out %.2e dq %.2e dk %.2e dv %.2e (tol %.0e); tiles visited %ld skipped %ld", eo, eq, ek, ev, TOL, tl.visited, tl.skipped);
    free(qkv); free(dout); free(att); free(datt); free(on); free(of); free(lse); free(dsc); free(pre); free(dn); free(df); free(pos);
}

/* the reference's generic path against the optimized naive op: a rule that masks nothing beyond
 * causal (sliding window >= T, prefix 1: key 0 is visible under causal anyway) */
static void ref_generic_vs_naive(void) {
    const int B = 2, T = 45, NH = 4, NKV = 2, hd = 16;
    const long R = (long)(NH + 2 * NKV) * hd, OC = (long)NH * hd, N = (long)B * T, A = (long)B * NH * T * T;
    hyp_attn_mod rules[2] = {{HYP_MASK_SLIDING_WINDOW, T, 0, HYP_MOD_NONE, 0.0f}, {HYP_MASK_PREFIX_LM, 0, 1, HYP_MOD_NONE, 0.0f}};
    for (int r = 0; r < 2; r++) {
        float *qkv = frnd(N * R, 1.0f), *dout = frnd(N * OC, 1.0f);
        float *a1 = fal(A), *a2 = fal(A), *d1 = fal(A), *d2 = fal(A), *o1 = fal(N * OC), *o2 = fal(N * OC), *g1 = fal(N * R), *g2 = fal(N * R);
        op_attention_fwd_doc(o1, a1, qkv, NULL, B, T, NH, NKV, hd, 0.0f);
        op_attention_bwd_doc(g1, d1, dout, qkv, a1, NULL, B, T, NH, NKV, hd, 0.0f);
        op_attention_fwd_mod(o2, a2, qkv, NULL, B, T, NH, NKV, hd, 0.0f, &rules[r]);
        op_attention_bwd_mod(g2, d2, dout, qkv, a2, NULL, B, T, NH, NKV, hd, 0.0f, &rules[r]);
        double eo = rel_err(o2, o1, N, OC, 0, OC), eg = rel_err(g2, g1, N, R, 0, R);
        char nm[160];
        snprintf(nm, sizeof nm, "test_v2117_reference_generic_path[%s] == naive causal op", mask_name(rules[r].mask));
        check(eo <= TOL && eg <= TOL, nm, "rel err out %.2e dqkv %.2e", eo, eg);
        free(qkv); free(dout); free(a1); free(a2); free(d1); free(d2); free(o1); free(o2); free(g1); free(g2);
    }
}

/* the reference backward against central differences of L = sum(out * dout) */
static void ref_gradcheck(hyp_attn_mod md, const char *tag) {
    const int B = 1, T = 9, NH = 2, NKV = 1, hd = 8;
    const long R = (long)(NH + 2 * NKV) * hd, OC = (long)NH * hd, N = (long)B * T, A = (long)B * NH * T * T;
    float *qkv = frnd(N * R, 2.0f), *dout = frnd(N * OC, 1.0f), *att = fal(A), *datt = fal(A), *out = fal(N * OC), *g = fal(N * R);
    op_attention_fwd_mod(out, att, qkv, NULL, B, T, NH, NKV, hd, 0.0f, &md);
    op_attention_bwd_mod(g, datt, dout, qkv, att, NULL, B, T, NH, NKV, hd, 0.0f, &md);
    double worst = 0.0;
    int bad = 0;
    for (long i = 0; i < N * R; i += 3) {
        const float x0 = qkv[i], eps = 1e-2f;
        double L[2];
        for (int sgn = 0; sgn < 2; sgn++) {
            qkv[i] = x0 + (sgn ? -eps : eps);
            op_attention_fwd_mod(out, att, qkv, NULL, B, T, NH, NKV, hd, 0.0f, &md);
            double s = 0.0;
            for (long j = 0; j < N * OC; j++) s += (double)out[j] * dout[j];
            L[sgn] = s;
        }
        qkv[i] = x0;
        double fd = (L[0] - L[1]) / (2.0 * eps), d = fabs(fd - g[i]);
        if (d > 1e-3 + 1e-2 * fabs(fd)) bad++;
        if (d > worst) worst = d;
    }
    char nm[160];
    snprintf(nm, sizeof nm, "test_v2117_reference_gradcheck[%s] mask=%s mod=%s", tag, mask_name(md.mask), mod_name(md.mod));
    check(!bad, nm, "%d entries beyond 1e-3 + 1e-2|fd|; max |fd - analytic| %.2e", bad, worst);
    free(qkv); free(dout); free(att); free(datt); free(out); free(g);
}

/* visited tiles of a sliding window, closed form: query tile i (rows [i BT, i BT + BT)) sees
 * keys [max(0, i BT - W + 1), i BT + BT - 1], i.e. key tiles floor(max(0, i BT - W + 1) / BT) .. i */
static long sliding_visited(int T, int BT, int W) {
    long v = 0;
    for (int i = 0; i < (T + BT - 1) / BT; i++) {
        int first = i * BT - W + 1;
        v += i - (first > 0 ? first : 0) / BT + 1;
    }
    return v;
}

static void tile_counts(void) {
    const int T = 1024, hd = 64, BT = op_flash_attention_tile(hd), NT = (T + BT - 1) / BT;
    const long R = 3L * hd;
    float *qkv = frnd((long)T * R, 1.0f), *out = fal((long)T * hd), *lse = fal(T);
    hyp_attn_tiles causal, sw;
    hyp_attn_mod c = {HYP_MASK_CAUSAL, 0, 0, HYP_MOD_NONE, 0.0f}, w = {HYP_MASK_SLIDING_WINDOW, 128, 0, HYP_MOD_NONE, 0.0f};
    op_flash_attention_fwd_mod(out, lse, qkv, NULL, 1, T, 1, 1, hd, 0.0f, &c, &causal);
    op_flash_attention_fwd_mod(out, lse, qkv, NULL, 1, T, 1, 1, hd, 0.0f, &w, &sw);
    /* brute force: a tile is visited iff some element of it is visible */
    long brute = 0;
    for (int i = 0; i < NT; i++)
        for (int j = 0; j < NT; j++) {
            int any = 0;
            for (int q = i * BT; q < (i + 1) * BT && !any; q++)
                for (int k = j * BT; k < (j + 1) * BT && !any; k++) any = hyp_attn_visible(&w, q, k);
            brute += any;
        }
    long want = sliding_visited(T, BT, 128);
    check(causal.visited == (long)NT * (NT + 1) / 2 && causal.skipped == (long)NT * (NT - 1) / 2, "test_v2117_tiles causal T=1024",
          "visited %ld skipped %ld of %d x %d (BT %d)", causal.visited, causal.skipped, NT, NT, BT);
    check(sw.visited == want && sw.visited == brute && sw.skipped == (long)NT * NT - want, "test_v2117_tiles sliding_window 128 T=1024",
          "visited %ld (closed form %ld, brute force %ld), skipped %ld of %d; %.1f%% of causal's %ld tiles skipped", sw.visited, want, brute,
          sw.skipped, NT * NT, 100.0 * (double)(causal.visited - sw.visited) / (double)causal.visited, causal.visited);
    free(qkv); free(out); free(lse);
}

int main(void) {
    const hyp_attn_mod sw40 = {HYP_MASK_SLIDING_WINDOW, 40, 0, HYP_MOD_NONE, 0.0f};
    const hyp_attn_mod sw100 = {HYP_MASK_SLIDING_WINDOW, 100, 0, HYP_MOD_NONE, 0.0f};
    const hyp_attn_mod pre50 = {HYP_MASK_PREFIX_LM, 0, 50, HYP_MOD_NONE, 0.0f};
    const hyp_attn_mod pre70 = {HYP_MASK_PREFIX_LM, 0, 70, HYP_MOD_NONE, 0.0f};
    const hyp_attn_mod cap = {HYP_MASK_CAUSAL, 0, 0, HYP_MOD_SOFTCAP, 3.0f};
    const hyp_attn_mod alibi = {HYP_MASK_CAUSAL, 0, 0, HYP_MOD_ALIBI, 0.0f};
    const hyp_attn_mod sw_cap = {HYP_MASK_SLIDING_WINDOW, 33, 0, HYP_MOD_SOFTCAP, 2.0f};
    const hyp_attn_mod pre_alibi = {HYP_MASK_PREFIX_LM, 0, 37, HYP_MOD_ALIBI, 0.0f};
    /* regular: T a multiple of the 64-row tile; odd: partial tiles, grouped heads, hd not a
     * multiple of 16; amp 1.5 gives scores of a few units (softcap 2-3 bends them) */
    flash_vs_ref("regular", 2, 128, 4, 2, 64, 1.5f, sw100, 0);
    flash_vs_ref("odd", 1, 77, 4, 1, 24, 1.5f, sw40, 0);
    flash_vs_ref("regular", 2, 128, 4, 2, 64, 1.5f, pre70, 0);
    flash_vs_ref("odd", 1, 77, 4, 1, 24, 1.5f, pre50, 0);
    flash_vs_ref("regular", 2, 128, 4, 2, 64, 1.5f, cap, 0);
    flash_vs_ref("odd", 1, 77, 4, 1, 24, 1.5f, cap, 0);
    flash_vs_ref("regular", 2, 128, 4, 2, 64, 1.5f, alibi, 0);
    flash_vs_ref("odd", 1, 77, 4, 1, 24, 1.5f, alibi, 0);
    flash_vs_ref("odd", 2, 150, 4, 2, 32, 1.5f, sw_cap, 0);
    flash_vs_ref("odd", 1, 99, 8, 2, 16, 1.5f, pre_alibi, 0);
    flash_vs_ref("odd_docs", 2, 150, 4, 2, 32, 1.5f, sw40, 1); /* composes with v2126 */
    ref_generic_vs_naive();
    ref_gradcheck(cap, "softcap 3");
    ref_gradcheck(alibi, "alibi");
    /* T = 9 there: a window of 4 and a prefix of 4 mask within it */
    ref_gradcheck((hyp_attn_mod){HYP_MASK_SLIDING_WINDOW, 4, 0, HYP_MOD_SOFTCAP, 2.0f}, "sliding_window 4 + softcap 2");
    ref_gradcheck((hyp_attn_mod){HYP_MASK_PREFIX_LM, 0, 4, HYP_MOD_ALIBI, 0.0f}, "prefix_lm 4 + alibi");
    tile_counts();
    return hyp_test_finish();
}
