/* test_fa3_sim_v2114.c — v2114 FlashAttention-3: the flash3_attn_fwd kernel of
 * templates/flash_attention.cu.lua (producer warpgroup, mbarrier K/V pipeline, two consumer
 * warpgroups on wgmma with ping-pong named barriers, setmaxnreg) rendered by `gen render` runs
 * under the CPU simulator, whose hyp/hopper.cuh emulation follows the PTX ISA (wgmma descriptors
 * and the 128-byte swizzle, mbarrier phases, named barriers), and matches the cpu flash op
 * (out and lse) with the same mask rule: regular (T a multiple of the 128-row tile) and odd shapes
 * (partial query and key tiles), head dims 64 and 128, grouped heads, causal, the v2126 document
 * mask, and a v2117 rule (sliding window + softcap) with 64-key tiles and 3 stages, where fully
 * masked tiles are skipped and the stage ring wraps several times; and the TMA producer variant
 * (FA3_TMA: bf16 storage, cp.async.bulk.tensor.3d through a tensor map encoded as
 * cuTensorMapEncodeTiled would, 64 x 64 boxes, 128-byte swizzle, rows past T zero-filled as out of
 * bounds) at head dims 64 and 128 with odd T and the document mask. The FA2 backward kernels
 * (the v2114 backward) are test_kernels_sim's and test_flex_sim_v2117's.
 *
 * Tolerance: the FA2 template's bf16 bound (test_kernels_sim's flash cases, |err| <= atol *
 * max|want| + rtol * |want|, 1e-2 each): every operand (q, k, v, P) is rounded once to bf16 (2^-9
 * relative each); a score's error is ~2^-9 |q||k|/sqrt(HD) and goes through exp into P, and O
 * sums P V over the visible keys with fp32 accumulation. The wgmma's fp32 accumulation order
 * differs from mma.sync's, which adds rounding at the fp32 level only (~2^-24 per term). The TMA
 * cases store bf16 inputs (the reference reads the same values widened, exactly) and a bf16
 * output (one more rounding, 2^-9 relative).
 *
 * Needs g++ (the simulator's compiler); the rendered files are compiled once through its cache.
 */
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../kernels/sim/sim_tmap.h"
#include "attn_mod.h"
#include "ops_flash.h"
#include "sim.h"

#include "hyp_test.h"

#include "sim_kernel_test.h"

/* One rendered FA3 forward (rule: extra constants) against the cpu flash op with the same rule. */
static void fa3_case(const char *tag, int B, int T, int NH, int NKV, int HD, const char *rule, hyp_attn_mod md, int doc) {
    char consts[320], nm[300];
    mod_t mf;
    snprintf(consts, sizeof consts, "NH=%d NKV=%d HD=%d PREC=bf16 %s%s --kernels flash3_attn_fwd", NH, NKV, HD, rule,
             doc ? " DOCMASK=true" : "");
    if (open_family(&mf, "flash_attention", consts, tag)) return;
    const double tol = 1e-2;
    const long smem = rendered_const("flash_attention", tag, "SMEM3");
    if (smem <= 0) {
        check(0, mf.what, "no SMEM3 constant in the rendered file");
        close_family(&mf);
        return;
    }
    int N = B * T, R = (NH + 2 * NKV) * HD, OC = NH * HD;
    long nr = (long)N * R, no = (long)N * OC, nl = (long)B * NH * T;
    float *qkv = frandbuf(nr, 1.5f), *out = fbuf(no), *lse = fbuf(nl), *out_ref = fbuf(no), *lse_ref = fbuf(nl);
    int32_t *pos = NULL;
    if (doc) { /* documents of 1..150 tokens: some span several 128-key tiles, some tiles hold several */
        pos = zalloc((size_t)N * sizeof *pos);
        for (int bb = 0; bb < B; bb++)
            for (int t = 0, left = 0, p = 0; t < T; t++, p++, left--) {
                if (left <= 0) left = 1 + irand(150), p = 0;
                pos[bb * T + t] = p;
            }
    }
    void *f1[] = {&out, &lse, &qkv, &pos, &T};
    launch_smem(&mf, "flash3_attn_fwd", cdiv(T, 128), B * NH, 1, 384, (size_t)smem, f1);
    op_flash_attention_fwd_mod(out_ref, lse_ref, qkv, pos, B, T, NH, NKV, HD, 0.0f, &md, NULL);
    check_f32(NAME(nm, "test_v2114_fa3_sim_fwd[%s] %s%s B=%d T=%d NH=%d NKV=%d HD=%d out", tag, rule, doc ? " +doc" : "", B, T, NH, NKV, HD),
              out, out_ref, no, tol, tol);
    check_f32(NAME(nm, "test_v2114_fa3_sim_fwd[%s] lse", tag), lse, lse_ref, nl, tol, tol);
    close_family(&mf);
}

static uint16_t to_bf16(float x) { /* round to nearest even (finite inputs) */
    uint32_t u;
    memcpy(&u, &x, 4);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}
static float from_bf16(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float x;
    memcpy(&x, &u, 4);
    return x;
}

/* The TMA producer: qkv and out in bf16, the tensor map over qkv as [B][T][R]. */
static void fa3_tma_case(const char *tag, int B, int T, int NH, int NKV, int HD, int doc) {
    char consts[320], nm[300];
    mod_t mf;
    snprintf(consts, sizeof consts, "NH=%d NKV=%d HD=%d PREC=bf16 ACT=bf16 FA3_TMA=true%s --kernels flash3_attn_fwd", NH, NKV, HD,
             doc ? " DOCMASK=true" : "");
    if (open_family(&mf, "flash_attention", consts, tag)) return;
    const double tol = 1e-2;
    const long smem = rendered_const("flash_attention", tag, "SMEM3");
    int N = B * T, R = (NH + 2 * NKV) * HD, OC = NH * HD;
    long nr = (long)N * R, no = (long)N * OC, nl = (long)B * NH * T;
    float *qf = frandbuf(nr, 1.5f), *outf = fbuf(no), *lse = fbuf(nl), *out_ref = fbuf(no), *lse_ref = fbuf(nl);
    uint16_t *q16 = zalloc((size_t)nr * 2), *o16 = zalloc((size_t)no * 2);
    for (long i = 0; i < nr; i++) q16[i] = to_bf16(qf[i]), qf[i] = from_bf16(q16[i]);
    int32_t *pos = NULL;
    if (doc) {
        pos = zalloc((size_t)N * sizeof *pos);
        for (int bb = 0; bb < B; bb++)
            for (int t = 0, left = 0, p = 0; t < T; t++, p++, left--) {
                if (left <= 0) left = 1 + irand(150), p = 0;
                pos[bb * T + t] = p;
            }
    }
    _Alignas(64) unsigned char map[128];
    const uint64_t dims[3] = {(uint64_t)R, (uint64_t)T, (uint64_t)B}, strides[2] = {(uint64_t)R * 2, (uint64_t)T * R * 2};
    const uint32_t box[3] = {64, 64, 1}, es[3] = {1, 1, 1};
    char why[200];
    if (hyp_sim_tmap_encode_tiled(map, HYP_TMAP_BF16, 3, q16, dims, strides, box, es, 0, HYP_TMAP_SWIZZLE_128B, 0, 0, why, sizeof why)) {
        check(0, mf.what, "tensor map: %s", why);
        close_family(&mf);
        return;
    }
    void *f1[] = {&o16, &lse, &q16, &pos, &T, map};
    launch_smem(&mf, "flash3_attn_fwd", cdiv(T, 128), B * NH, 1, 384, (size_t)smem, f1);
    for (long i = 0; i < no; i++) outf[i] = from_bf16(o16[i]);
    hyp_attn_mod causal = {HYP_MASK_CAUSAL, 0, 0, HYP_MOD_NONE, 0.0f};
    op_flash_attention_fwd_mod(out_ref, lse_ref, qf, pos, B, T, NH, NKV, HD, 0.0f, &causal, NULL);
    check_f32(NAME(nm, "test_v2114_fa3_sim_fwd_tma[%s]%s B=%d T=%d NH=%d NKV=%d HD=%d out (bf16)", tag, doc ? " +doc" : "", B, T, NH, NKV, HD),
              outf, out_ref, no, tol, tol);
    check_f32(NAME(nm, "test_v2114_fa3_sim_fwd_tma[%s] lse", tag), lse, lse_ref, nl, tol, tol);
    close_family(&mf);
}

int main(void) {
    snprintf(g_tmp, sizeof g_tmp, "%s/tests/fa3_sim", HYP_BINARY_DIR);
    char mk[400];
    snprintf(mk, sizeof mk, "mkdir -p '%s'", g_tmp);
    if (system(mk) != 0) return 1;
    const hyp_attn_mod causal = {HYP_MASK_CAUSAL, 0, 0, HYP_MOD_NONE, 0.0f};
    fa3_case("regular", 1, 256, 2, 1, 64, "", causal, 0);
    fa3_case("odd_hd128", 2, 200, 2, 2, 128, "", causal, 0);
    fa3_case("doc", 1, 230, 2, 1, 64, "", causal, 1);
    fa3_case("sw_softcap_bk64_st3", 1, 333, 2, 1, 64, "MASK=sliding_window WINDOW=100 SCORE_MOD=softcap SOFTCAP=5 FA3_BK=64 FA3_STAGES=3",
             (hyp_attn_mod){HYP_MASK_SLIDING_WINDOW, 100, 0, HYP_MOD_SOFTCAP, 5.0f}, 0);
    fa3_tma_case("tma_hd128_gqa", 2, 190, 4, 2, 128, 0);
    fa3_tma_case("tma_hd64_doc", 1, 260, 2, 1, 64, 1);
    free_all();
    return hyp_test_finish();
}
