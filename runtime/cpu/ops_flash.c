/* ops_flash.c — FlashAttention-2 style causal attention on the CPU (contract in ops_flash.h).
 *
 * Layouts inside a tile (BT = op_flash_attention_tile(hd), a multiple of 32):
 *   forward   QT [hd][BT]  the query tile transposed once per task, pre-multiplied by
 *                          scale*log2(e) so that the softmax runs in base 2 (exp2, no multiply);
 *             KP, VP [BT][hd]  the key/value tile packed contiguous (see fa_pack);
 *             ST [BT][BT]  scores transposed: row = key, column = query. The online-softmax
 *                          updates (row max, exp, row sum) then run down columns, i.e. element-
 *                          wise across the rows of ST: plain vector max/add over queries, no
 *                          horizontal reductions;
 *             O  [BT][hd]  the running (unnormalized) output tile, rescaled per key tile.
 *   backward  KT, VT [hd][BT]  the key/value tile transposed once per (task, key tile);
 *             KP [BT][hd]      the key tile packed; QP, OP [BT][hd] the query / dout tile packed;
 *             S  [BT][BT]  scores then P (row = query, column = key);
 *             DS [BT][BT]  dP then dS (scaled by 1/sqrt(hd));
 *             DK, DV [BT][hd]  the key tile's dK/dV accumulators (summed over the group's query
 *                          heads and all query tiles, then added to dqkv once).
 * Two register-tiled micro-kernels do all products (as in ops_cpu.c's naive attention):
 *   fa_score: S[r][c] = alpha * X_r . Yt[:, c]   8 rows x 32 columns = 16 vector accumulators;
 *   fa_accum: O[r][:] = rs[r]*O[r][:] + sum_s A[r,s] Y[s][:]   4 rows x 64 dims = 16 accumulators.
 * On L1-resident data both run at ~75-95% of the fp32 FMA peak of this machine's AVX-512 core;
 * the rest of the time goes to L2 traffic between tiles and the element-wise softmax.
 * Element-wise work (exp2, masks) is scalar code in `omp simd` loops, which gcc vectorizes.
 *
 * Tile size: BT = 64 for hd <= 128; 32 above, which bounds the per-thread stack scratch
 * (~(7 hd BT + 2 BT^2) floats in backward). Measured at hd = 64 (B=1 NH=12 T=2048 and B=4 T=256,
 * one thread): BT = 64 beat 32 by ~25% at T=2048 (fewer transposes/packs, fewer O rescales) and
 * tied 128 (whose scratch is 3x larger). Compile-time override: -DFA_BT=32|64|128.
 *
 * Masking: query tile i and key tile j start at the same index when i == j (same BT), so every
 * query row sees at least its own key in the diagonal tile and at least key 0 in tile 0 (the
 * first visited): the running max is finite after the first tile, so no -inf - -inf = NaN.
 * Keys past T only occur in the last (diagonal) tile, where they are above the diagonal.
 *
 * v2117 (the _mod functions): the mask rule and score modifier of core/attn_mod.h. Key tiles
 * with no visible pair for the query tile are skipped (hyp_attn_tile_any) and counted; the causal
 * shortcuts on the diagonal tile hold for causal and sliding_window (nothing visible above the
 * diagonal) and are off for prefix_lm's diagonal tiles inside the prefix; visited tiles get the
 * rule and the modifier element by element (fa_flex_tile; the backward's P loop). With a rule,
 * the first visited tile of a row may hold no visible key: the m = -inf handling below covers it
 * (every row sees at least its own key somewhere).
 */
#include "ops_flash.h"

#include "attn_mod.h"

/* -std=c11 means -ffp-contract=off in gcc: allow a*b+c to become an FMA (see ops_cpu.c). */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("fp-contract=fast")
#elif defined(__clang__)
#pragma clang fp contract(fast)
#endif

#include <math.h>
#include <stdint.h>
#include <string.h>

/* gcc's -march=native on AVX-512 parts still prefers 256-bit vectors for auto-vectorized loops;
 * the element-wise softmax loops (exp2 on every score) are a sizeable part of the forward's
 * instructions, so let them use the full width where the target has it (measured ~5-10% on the
 * forward; -DFA_VW512=0 disables). */
#ifndef FA_VW512
#define FA_VW512 1
#endif
#if FA_VW512 && defined(__AVX512F__) && defined(__GNUC__) && !defined(__clang__)
#pragma GCC target("prefer-vector-width=512")
#endif

#define FA_LOG2E 1.44269504088896341f
#define FA_LN2 0.693147180559945309f

#ifndef FA_BT
#define FA_BT 64
#endif
int op_flash_attention_tile(int hd) { return hd <= 128 ? FA_BT : 32; }

size_t op_flash_attention_scratch_bytes(int hd, int backward) {
    size_t bt = (size_t)op_flash_attention_tile(hd);
    size_t h = (size_t)(hd > 0 ? hd : 1);
    if (!backward) /* QT O KP VP, ST, m l al mn ls */
        return sizeof(float) * (4 * h * bt + bt * bt + 5 * bt);
    /* KT VT DK DV KP QP OP, S DS, L2 Dl */
    return sizeof(float) * (7 * h * bt + 2 * bt * bt + 2 * bt);
}

/* ------------------------------------------------------------------------------------------ */
/* 2^x for x <= ~0 (the callers feed score - max), vectorizable inside `omp simd` loops:
 * x = n + f with |f| <= 1/2, 2^f = e^(f ln2) by the Cephes expf polynomial (rel. error ~1e-7),
 * times 2^n built in the exponent bits. x < -125 gives exactly 0 (also -inf: the masked scores),
 * which keeps every result out of the denormal range (each denormal costs ~100 cycles on x86).
 * NaN in, NaN out. */
static inline float fa_exp2(float x) {
    const float lo = -125.0f, hi = 125.0f;
    float xc = x < lo ? lo : x;
    xc = xc > hi ? hi : xc;
    const float magic = 12582912.0f; /* 1.5 * 2^23: (y + magic) - magic rounds y to an integer */
    float fn = (xc + magic) - magic;
    float r = (xc - fn) * FA_LN2;
    float z = r * r;
    float p = 1.9875691500E-4f;
    p = p * r + 1.3981999507E-3f;
    p = p * r + 8.3334519073E-3f;
    p = p * r + 4.1665795894E-2f;
    p = p * r + 1.6666665459E-1f;
    p = p * r + 5.0000001201E-1f;
    float y = p * z + r + 1.0f;
    union { int32_t i; float f; } pow2n = { .i = ((int32_t)fn + 127) << 23 };
    y = y * pow2n.f;
    return x < lo ? 0.0f : y;
}

/* ------------------------------------------------------------------------------------------ */
/* Micro-kernels (GCC/Clang vector extensions: one AVX-512 register, or two AVX2 ones). */

/* Without AVX-512 (HYP_NATIVE=OFF) gcc warns that passing a 64-byte vector "changes the ABI":
 * irrelevant for these static functions, which never cross a library boundary. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wpsabi"
#endif

typedef float vf __attribute__((vector_size(64)));
typedef float vf_u __attribute__((vector_size(64), aligned(4))); /* unaligned access */
#define VW 16
static inline vf vf_load(const float *p) { return *(const vf_u *)p; }
static inline void vf_store(float *p, vf v) { *(vf_u *)p = v; }
static inline vf vf_splat(float x) { return (vf){x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x}; }

#define FA_SR 8  /* rows per score tile */
#define FA_SC 32 /* columns per score tile (2 vectors) */
#define FA_AR 4  /* rows per accumulate tile (x 64 dims) */

/* S[r][0..32) = alpha * sum_d X[r*ldx + d] * Yt[d*ldyt + 0..32), r < nrows (<= FA_SR); hd dims.
 * Rows past nrows re-read the last valid row and are not stored. */
static void fa_score(float *S, long lds, int nrows, const float *X, long ldx, const float *Yt,
                     long ldyt, int hd, float alpha) {
    const float *xr[FA_SR];
    for (int r = 0; r < FA_SR; r++) xr[r] = X + (long)(r < nrows ? r : nrows - 1) * ldx;
    vf a0[FA_SR], a1[FA_SR];
    for (int r = 0; r < FA_SR; r++) { a0[r] = vf_splat(0.0f); a1[r] = vf_splat(0.0f); }
    for (int d = 0; d < hd; d++) {
        vf y0 = vf_load(Yt + (long)d * ldyt), y1 = vf_load(Yt + (long)d * ldyt + VW);
        for (int r = 0; r < FA_SR; r++) {
            vf x = vf_splat(xr[r][d]);
            a0[r] += x * y0;
            a1[r] += x * y1;
        }
    }
    vf va = vf_splat(alpha);
    for (int r = 0; r < nrows; r++) {
        vf_store(S + r * lds, a0[r] * va);
        vf_store(S + r * lds + VW, a1[r] * va);
    }
}

/* O[r][:] = (rs ? rs[r] : 1) * O[r][:] + sum_{s in [s0, s1)} A[r*ars + s*acs] * Y[s*ldy + :],
 * for r < nrows (<= FA_AR), hd dims; O row stride ldo. */
static void fa_accum(float *O, long ldo, int nrows, const float *rs, const float *A, long ars,
                     long acs, int s0, int s1, const float *Y, long ldy, int hd) {
    const float *ar[FA_AR];
    float sc[FA_AR];
    for (int r = 0; r < FA_AR; r++) {
        ar[r] = A + (long)(r < nrows ? r : nrows - 1) * ars;
        sc[r] = rs ? rs[r < nrows ? r : nrows - 1] : 1.0f;
    }
    int i0 = 0;
    for (; i0 + 4 * VW <= hd; i0 += 4 * VW) {
        vf acc[FA_AR][4];
        for (int r = 0; r < FA_AR; r++)
            for (int k = 0; k < 4; k++) acc[r][k] = vf_splat(0.0f);
        for (int s = s0; s < s1; s++) {
            const float *y = Y + (long)s * ldy + i0;
            vf y0 = vf_load(y), y1 = vf_load(y + VW), y2 = vf_load(y + 2 * VW),
               y3 = vf_load(y + 3 * VW);
            for (int r = 0; r < FA_AR; r++) {
                vf a = vf_splat(ar[r][(long)s * acs]);
                acc[r][0] += a * y0;
                acc[r][1] += a * y1;
                acc[r][2] += a * y2;
                acc[r][3] += a * y3;
            }
        }
        for (int r = 0; r < nrows; r++) {
            vf s = vf_splat(sc[r]);
            for (int k = 0; k < 4; k++) {
                float *o = O + (long)r * ldo + i0 + VW * k;
                vf_store(o, vf_load(o) * s + acc[r][k]);
            }
        }
    }
    for (; i0 + VW <= hd; i0 += VW) {
        vf acc[FA_AR];
        for (int r = 0; r < FA_AR; r++) acc[r] = vf_splat(0.0f);
        for (int s = s0; s < s1; s++) {
            vf y = vf_load(Y + (long)s * ldy + i0);
            for (int r = 0; r < FA_AR; r++) acc[r] += vf_splat(ar[r][(long)s * acs]) * y;
        }
        for (int r = 0; r < nrows; r++) {
            float *o = O + (long)r * ldo + i0;
            vf_store(o, vf_load(o) * vf_splat(sc[r]) + acc[r]);
        }
    }
    for (; i0 < hd; i0++) { /* hd not a multiple of 16 */
        for (int r = 0; r < nrows; r++) {
            float acc = 0.0f;
            for (int s = s0; s < s1; s++) acc += ar[r][(long)s * acs] * Y[(long)s * ldy + i0];
            float *o = O + (long)r * ldo + i0;
            *o = *o * sc[r] + acc;
        }
    }
}

#if defined(__clang__) || (defined(__GNUC__) && __GNUC__ >= 12)
#define FA_HAVE_SHUFFLE 1
#define FA_SHUF(a, b, ...) __builtin_shufflevector(a, b, __VA_ARGS__)
/* In-place transpose of the 16 x 16 matrix held in r[0..16) (row k = r[k]): for block sizes
 * b = 8, 4, 2, 1, rows i and i + b (bit b of i clear) exchange their off-diagonal b x b blocks
 * ([[A, B], [C, D]] -> [[A, C], [B, D]] at every level is the transpose). 64 two-register
 * shuffles instead of 256 scalar moves. */
static inline void fa_transpose16(vf *r) {
    for (int i = 0; i < 16; i++) {
        if (i & 8) continue;
        vf a = r[i], c = r[i + 8];
        r[i] = FA_SHUF(a, c, 0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23);
        r[i + 8] = FA_SHUF(a, c, 8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31);
    }
    for (int i = 0; i < 16; i++) {
        if (i & 4) continue;
        vf a = r[i], c = r[i + 4];
        r[i] = FA_SHUF(a, c, 0, 1, 2, 3, 16, 17, 18, 19, 8, 9, 10, 11, 24, 25, 26, 27);
        r[i + 4] = FA_SHUF(a, c, 4, 5, 6, 7, 20, 21, 22, 23, 12, 13, 14, 15, 28, 29, 30, 31);
    }
    for (int i = 0; i < 16; i++) {
        if (i & 2) continue;
        vf a = r[i], c = r[i + 2];
        r[i] = FA_SHUF(a, c, 0, 1, 16, 17, 4, 5, 20, 21, 8, 9, 24, 25, 12, 13, 28, 29);
        r[i + 2] = FA_SHUF(a, c, 2, 3, 18, 19, 6, 7, 22, 23, 10, 11, 26, 27, 14, 15, 30, 31);
    }
    for (int i = 0; i < 16; i += 2) {
        vf a = r[i], c = r[i + 1];
        r[i] = FA_SHUF(a, c, 0, 16, 2, 18, 4, 20, 6, 22, 8, 24, 10, 26, 12, 28, 14, 30);
        r[i + 1] = FA_SHUF(a, c, 1, 17, 3, 19, 5, 21, 7, 23, 9, 25, 11, 27, 13, 29, 15, 31);
    }
}
#endif

/* Yt[d][c] = alpha * Y[c*ldy + d] for c < n, 0 for n <= c < BT (d < hd); BT a multiple of 16. */
static void fa_transpose(float *Yt, int BT, const float *Y, long ldy, int n, int hd, float alpha) {
    for (int c0 = 0; c0 < BT; c0 += 16) {
        int d = 0;
#ifdef FA_HAVE_SHUFFLE
        const vf va = vf_splat(alpha);
        for (; d + 16 <= hd; d += 16) {
            vf r[16];
            for (int k = 0; k < 16; k++)
                r[k] = c0 + k < n ? vf_load(Y + (long)(c0 + k) * ldy + d) * va : vf_splat(0.0f);
            fa_transpose16(r);
            for (int k = 0; k < 16; k++) vf_store(Yt + (long)(d + k) * BT + c0, r[k]);
        }
#endif
        for (; d < hd; d++)
            for (int k = 0; k < 16; k++)
                Yt[(long)d * BT + c0 + k] = c0 + k < n ? alpha * Y[(long)(c0 + k) * ldy + d] : 0.0f;
    }
}

/* dst[c][0..hd) = src[c*lds + 0..hd) for c < n: a tile packed contiguous (row stride hd). The
 * fused qkv rows are (NH+2*NKV)*hd floats apart (9 KB for GPT-2 small), a stride that maps the 64
 * rows of a tile onto a few L1 sets; packed, a tile is 16 KB of consecutive lines that stays in L1
 * while the micro-kernels re-read it. */
static void fa_pack(float *dst, const float *src, long lds, int n, int hd) {
    for (int c = 0; c < n; c++)
        memcpy(dst + (long)c * hd, src + (long)c * lds, sizeof(float) * (size_t)hd);
}

static inline int imin(int a, int b) { return a < b ? a : b; }
static inline int round_up(int a, int m) { return (a + m - 1) / m * m; }

/* ------------------------------------------------------------------------------------------ */
/* Forward */

void op_flash_attention_fwd(float *out, float *lse, const float *qkv, int B, int T, int NH,
                            int NKV, int hd) {
    op_flash_attention_fwd_doc(out, lse, qkv, NULL, B, T, NH, NKV, hd, 0.0f);
}

/* lo[r] = the first key query q0 + r may see: the start of its document (v2126: q - position),
 * 0 without positions; clamped to [0, q]. Returns the tile's smallest and largest lo. */
static void fa_doc_lo(int *lo, const int32_t *pos, int q0, int nq, int *lomin, int *lomax) {
    int mn = q0 + nq, mx = 0;
    for (int r = 0; r < nq; r++) {
        int q = q0 + r, v = pos ? q - pos[q] : 0;
        v = v < 0 ? 0 : v > q ? q : v;
        lo[r] = v;
        mn = v < mn ? v : mn;
        mx = v > mx ? v : mx;
    }
    *lomin = mn;
    *lomax = mx;
}

void op_flash_attention_fwd_doc(float *out, float *lse, const float *qkv, const int32_t *positions,
                                int B, int T, int NH, int NKV, int hd, float scale) {
    op_flash_attention_fwd_mod(out, lse, qkv, positions, B, T, NH, NKV, hd, scale, NULL, NULL);
}

/* v2117: the rule's mask and modifier on the rows [0, nqr) x keys [0, nk) of a score tile ST
 * (transposed, base-2 units: ST[c][r] = log2(e) * scale * q_r . k_c), after the products and
 * before the document mask. Masked pairs become -inf. */
static void fa_flex_tile(float *ST, int BT, const hyp_attn_mod *mod, int q0, int nqr, int k0, int nk,
                         int h, int NH) {
    for (int c = 0; c < nk; c++) {
        float *s = ST + (long)c * BT;
        for (int r = 0; r < nqr; r++) {
            const int q = q0 + r, k = k0 + c;
            s[r] = hyp_attn_visible(mod, q, k) ? hyp_attn_score(mod, s[r] * FA_LN2, q, k, h, NH) * FA_LOG2E
                                               : -INFINITY;
        }
    }
}

void op_flash_attention_fwd_mod(float *out, float *lse, const float *qkv, const int32_t *positions,
                                int B, int T, int NH, int NKV, int hd, float scale,
                                const struct hyp_attn_mod_s *mod, struct hyp_attn_tiles_s *tiles) {
    if (tiles) tiles->visited = tiles->skipped = 0;
    if (B <= 0 || T <= 0 || NH <= 0 || NKV <= 0 || hd <= 0) return;
    const long R = (long)(NH + 2 * NKV) * hd;
    const long OC = (long)NH * hd;
    const int G = NH / NKV;
    const int BT = op_flash_attention_tile(hd);
    const int NQT = (T + BT - 1) / BT;
    /* scores in base-2 units; a plan-given scale (muP: 1/hd) or 1/sqrt(hd) */
    const float cl = scale > 0.0f ? FA_LOG2E * scale : FA_LOG2E / sqrtf((float)hd);
    const long BH = (long)B * NH;
    const long ntasks = BH * NQT;
    const int plain = hyp_attn_is_plain(mod);
    long nvisited = 0;
#pragma omp parallel reduction(+ : nvisited)
    {
        float QT[hd * BT], O[BT * hd], ST[BT * BT], KP[BT * hd], VP[BT * hd], m[BT], l[BT], al[BT];
        int lo[BT];
        /* task = (b, h, query tile): (b, h)-major, and within a head the query tiles from the
         * last (most causal work) down, so a thread's consecutive tasks mostly re-read the same
         * head's K/V (from L2: measured ~10-15% faster than tile-major) and the dynamic schedule
         * ends on small tiles. Each task writes only its own rows of out and lse. */
#pragma omp for schedule(dynamic, 1)
        for (long task = 0; task < ntasks; task++) {
            const int i = NQT - 1 - (int)(task % NQT);
            const long bh = task / NQT;
            const int b = (int)(bh / NH), h = (int)(bh % NH), g = h / G;
            const int q0 = i * BT, nq = imin(BT, T - q0);
            const int nqr = round_up(nq, FA_SC); /* query columns computed in ST */
            const float *base = qkv + (long)b * T * R;
            const float *q = base + (long)q0 * R + (long)h * hd;
            const float *k = base + (long)(NH + g) * hd;
            const float *v = base + (long)(NH + NKV + g) * hd;
            fa_transpose(QT, BT, q, R, nq, hd, cl);
            for (int r = 0; r < BT; r++) { m[r] = -INFINITY; l[r] = 0.0f; }
            memset(O, 0, sizeof(float) * (size_t)BT * (size_t)hd);
            /* the mask hook (v2126): keys before lo[r] are another document's; key tiles that
             * end before the smallest lo are skipped whole */
            int lomin, lomax;
            fa_doc_lo(lo, positions ? positions + (long)b * T : NULL, q0, nq, &lomin, &lomax);
            for (int j = lomin / BT; j < NQT; j++) {
                const int k0 = j * BT, nk = imin(BT, T - k0);
                /* the mask rule (v2117): a tile with no visible pair is skipped (plain causal:
                 * the tiles after the diagonal) */
                if (!hyp_attn_tile_any(mod, q0, q0 + nq - 1, k0, k0 + nk - 1)) continue;
                nvisited++;
                /* diag: the diagonal tile with nothing visible above the diagonal (the causal
                 * shortcuts apply) */
                const int diag = (j == i) && !(mod && mod->mask == HYP_MASK_PREFIX_LM && k0 < mod->prefix);
                fa_pack(KP, k + (long)k0 * R, R, nk, hd);
                fa_pack(VP, v + (long)k0 * R, R, nk, hd);
                /* ST[c][r] = cl * q_r . k_c ; on the diagonal only query columns >= c's block */
                for (int c0 = 0; c0 < nk; c0 += FA_SR) {
                    int cstart = diag ? (c0 / FA_SC) * FA_SC : 0;
                    for (int r0 = cstart; r0 < nqr; r0 += FA_SC)
                        fa_score(ST + (long)c0 * BT + r0, BT, imin(FA_SR, nk - c0),
                                 KP + (long)c0 * hd, hd, QT + r0, BT, hd, 1.0f);
                }
                if (diag) /* causal mask: query r sees keys c <= r */
                    for (int c = 0; c < nk; c++)
                        for (int r = 0; r < imin(c, nqr); r++) ST[(long)c * BT + r] = -INFINITY;
                if (!plain) fa_flex_tile(ST, BT, mod, q0, nqr, k0, nk, h, NH);
                if (k0 < lomax) /* document mask: query r sees keys >= lo[r] */
                    for (int c = 0; c < nk && k0 + c < lomax; c++)
                        for (int r = 0; r < nq; r++)
                            if (k0 + c < lo[r]) ST[(long)c * BT + r] = -INFINITY;
                /* online softmax, element-wise over the query columns; a row with no visible key
                 * yet (m = mn = -inf, document mask) takes exponents relative to 0: p = 0, al = 0 */
                float mn[BT], mu[BT];
                for (int r = 0; r < nqr; r++) mn[r] = m[r];
                for (int c = 0; c < nk; c++) {
                    const float *s = ST + (long)c * BT;
#pragma omp simd
                    for (int r = 0; r < nqr; r++) mn[r] = s[r] > mn[r] ? s[r] : mn[r];
                }
                float ls[BT];
#pragma omp simd
                for (int r = 0; r < nqr; r++) {
                    mu[r] = mn[r] == -INFINITY ? 0.0f : mn[r];
                    al[r] = fa_exp2(m[r] - mu[r]);
                    ls[r] = 0.0f;
                }
                for (int c = 0; c < nk; c++) {
                    float *s = ST + (long)c * BT;
#pragma omp simd
                    for (int r = 0; r < nqr; r++) {
                        float p = fa_exp2(s[r] - mu[r]);
                        s[r] = p;
                        ls[r] += p;
                    }
                }
#pragma omp simd
                for (int r = 0; r < nqr; r++) { l[r] = l[r] * al[r] + ls[r]; m[r] = mn[r]; }
                /* O[r] = al[r] O[r] + sum_c P[r][c] v_c (P^T is stored: A[r*1 + c*BT]) */
                for (int r0 = 0; r0 < nq; r0 += FA_AR) {
                    int s1 = diag ? imin(nk, r0 + FA_AR) : nk;
                    fa_accum(O + (long)r0 * hd, hd, imin(FA_AR, nq - r0), al + r0, ST + r0, 1, BT,
                             0, s1, VP, hd, hd);
                }
            }
            float *o = out + (long)b * T * OC + (long)q0 * OC + (long)h * hd;
            float *ls = lse + bh * T + q0;
            for (int r = 0; r < nq; r++) {
                float inv = 1.0f / l[r];
                const float *orow = O + (long)r * hd;
                float *dst = o + (long)r * OC;
#pragma omp simd
                for (int d = 0; d < hd; d++) dst[d] = orow[d] * inv;
                ls[r] = m[r] * FA_LN2 + logf(l[r]);
            }
        }
    }
    if (tiles) {
        tiles->visited = nvisited;
        tiles->skipped = (long)B * NH * NQT * NQT - nvisited;
    }
}

/* ------------------------------------------------------------------------------------------ */
/* Backward */

void op_flash_attention_bwd(float *dqkv, float *dscratch, const float *dout, const float *qkv,
                            const float *out, const float *lse, int B, int T, int NH, int NKV,
                            int hd) {
    op_flash_attention_bwd_doc(dqkv, dscratch, dout, qkv, out, lse, NULL, B, T, NH, NKV, hd, 0.0f);
}

void op_flash_attention_bwd_doc(float *dqkv, float *dscratch, const float *dout, const float *qkv,
                                const float *out, const float *lse, const int32_t *positions,
                                int B, int T, int NH, int NKV, int hd, float scale) {
    op_flash_attention_bwd_mod(dqkv, dscratch, dout, qkv, out, lse, positions, B, T, NH, NKV, hd, scale, NULL);
}

void op_flash_attention_bwd_mod(float *dqkv, float *dscratch, const float *dout, const float *qkv,
                                const float *out, const float *lse, const int32_t *positions,
                                int B, int T, int NH, int NKV, int hd, float scale,
                                const struct hyp_attn_mod_s *mod) {
    const int plain = hyp_attn_is_plain(mod);
    if (B <= 0 || T <= 0 || NH <= 0 || NKV <= 0 || hd <= 0) return;
    const long R = (long)(NH + 2 * NKV) * hd;
    const long OC = (long)NH * hd;
    const int G = NH / NKV;
    const int BT = op_flash_attention_tile(hd);
    const int NKT = (T + BT - 1) / BT;
    if (!(scale > 0.0f)) scale = 1.0f / sqrtf((float)hd);
    const float cl = FA_LOG2E * scale;
    float *Dall = dscratch; /* [B,NH,T]: D = rowsum(dout * out) */

    /* pass 1: D, parallel over (b, t) rows */
    const long N = (long)B * T;
#pragma omp parallel for schedule(static)
    for (long n = 0; n < N; n++) {
        const int b = (int)(n / T), t = (int)(n % T);
        for (int h = 0; h < NH; h++) {
            const float *dor = dout + n * OC + (long)h * hd;
            const float *orr = out + n * OC + (long)h * hd;
            float acc = 0.0f;
#pragma omp simd reduction(+ : acc)
            for (int d = 0; d < hd; d++) acc += dor[d] * orr[d];
            Dall[((long)b * NH + h) * T + t] = acc;
        }
    }

    /* pass 2: one task per (b, kv head): the only writer of its dK/dV rows and of the dQ rows of
     * its G query heads, summing in a fixed order (key tile j, query head h, query tile i) */
    const long ntasks = (long)B * NKV;
#pragma omp parallel
    {
        float KT[hd * BT], VT[hd * BT], DK[BT * hd], DV[BT * hd], S[BT * BT], DS[BT * BT];
        float KP[BT * hd], QP[BT * hd], OP[BT * hd];
        float L2[BT], Dl[BT];
        int lo[BT];
#pragma omp for schedule(dynamic, 1)
        for (long task = 0; task < ntasks; task++) {
            const int b = (int)(task / NKV), g = (int)(task % NKV);
            const float *base = qkv + (long)b * T * R;
            const float *k = base + (long)(NH + g) * hd;
            const float *v = base + (long)(NH + NKV + g) * hd;
            float *dbase = dqkv + (long)b * T * R;
            float *dk = dbase + (long)(NH + g) * hd;
            float *dv = dbase + (long)(NH + NKV + g) * hd;
            for (int j = 0; j < NKT; j++) {
                const int k0 = j * BT, nk = imin(BT, T - k0);
                const int ncr = round_up(nk, FA_SC); /* key columns computed in S / DS */
                const float *kt = k + (long)k0 * R, *vt = v + (long)k0 * R;
                fa_pack(KP, kt, R, nk, hd);
                fa_transpose(KT, BT, KP, hd, nk, hd, 1.0f);
                fa_transpose(VT, BT, vt, R, nk, hd, 1.0f);
                memset(DK, 0, sizeof(float) * (size_t)BT * (size_t)hd);
                memset(DV, 0, sizeof(float) * (size_t)BT * (size_t)hd);
                for (int h = g * G; h < (g + 1) * G; h++) {
                    const float *q = base + (long)h * hd;
                    const float *dO = dout + (long)b * T * OC + (long)h * hd;
                    float *dq = dbase + (long)h * hd;
                    const float *lseh = lse + ((long)b * NH + h) * T;
                    const float *Dh = Dall + ((long)b * NH + h) * T;
                    for (int i = plain ? j : 0; i < NKT; i++) {
                        const int q0 = i * BT, nq = imin(BT, T - q0);
                        if (!hyp_attn_tile_any(mod, q0, q0 + nq - 1, k0, k0 + nk - 1)) continue;
                        const int diag = (i == j) && !(mod && mod->mask == HYP_MASK_PREFIX_LM && k0 < mod->prefix);
                        /* the mask hook (v2126): a query tile whose rows all start their
                         * document after this key tile gets nothing from it: skipped */
                        int lomin, lomax;
                        fa_doc_lo(lo, positions ? positions + (long)b * T : NULL, q0, nq, &lomin,
                                  &lomax);
                        if (lomin >= k0 + nk) continue;
                        fa_pack(QP, q + (long)q0 * R, R, nq, hd);
                        fa_pack(OP, dO + (long)q0 * OC, OC, nq, hd);
                        const float *qi = QP, *doi = OP;
                        for (int r = 0; r < nq; r++) {
                            L2[r] = lseh[q0 + r] * FA_LOG2E;
                            Dl[r] = Dh[q0 + r];
                        }
                        /* S = cl Q K^T, DS = dO V^T (on the diagonal: key columns <= the rows) */
                        for (int r0 = 0; r0 < nq; r0 += FA_SR) {
                            int cend = diag ? imin(ncr, round_up(r0 + FA_SR, FA_SC)) : ncr;
                            int nr = imin(FA_SR, nq - r0);
                            for (int c0 = 0; c0 < cend; c0 += FA_SC) {
                                fa_score(S + (long)r0 * BT + c0, BT, nr, qi + (long)r0 * hd, hd,
                                         KT + c0, BT, hd, cl);
                                fa_score(DS + (long)r0 * BT + c0, BT, nr, doi + (long)r0 * hd, hd,
                                         VT + c0, BT, hd, 1.0f);
                            }
                        }
                        /* P = 2^(S - lse2), 0 above the diagonal; dS = scale P (dP - D) */
                        for (int r = 0; r < nq; r++) {
                            const int rb_end = (r / FA_SR) * FA_SR + FA_SR; /* r's score block */
                            int cend = diag ? imin(ncr, round_up(rb_end, FA_SC)) : ncr;
                            float *s = S + (long)r * BT, *ds = DS + (long)r * BT;
                            const float lr = L2[r], dr = Dl[r];
                            const int cmax = diag ? r : BT; /* keys c <= cmax are visible */
                            const int cmin = lo[r] - k0;    /* and keys c >= cmin (document) */
                            if (!plain) { /* v2117: the rule's mask, P from the modified score,
                                           * dS through the modifier's derivative */
                                for (int c = 0; c < cend; c++) {
                                    const int q = q0 + r, k = k0 + c;
                                    float p = 0.0f, dm = 1.0f;
                                    if (c < nk && c >= cmin && hyp_attn_visible(mod, q, k)) {
                                        float sm = hyp_attn_score(mod, s[c] * FA_LN2, q, k, h, NH);
                                        p = fa_exp2(sm * FA_LOG2E - lr);
                                        dm = hyp_attn_dscore(mod, sm);
                                    }
                                    s[c] = p; /* (columns past the tile's keys hold stale values: 0 exactly) */
                                    ds[c] = p == 0.0f ? 0.0f : scale * p * (ds[c] - dr) * dm;
                                }
                                continue;
                            }
#pragma omp simd
                            for (int c = 0; c < cend; c++) {
                                float p = (c <= cmax && c >= cmin) ? fa_exp2(s[c] - lr) : 0.0f;
                                s[c] = p;
                                ds[c] = scale * p * (ds[c] - dr);
                            }
                        }
                        /* dV[c] += sum_r P[r][c] dO_r ; dK[c] += sum_r dS[r][c] q_r
                         * (on the diagonal rows r < c contribute 0: start at r = c0) */
                        for (int c0 = 0; c0 < nk; c0 += FA_AR) {
                            int nc = imin(FA_AR, nk - c0);
                            int s0 = diag ? c0 : 0;
                            fa_accum(DV + (long)c0 * hd, hd, nc, NULL, S + c0, 1, BT, s0, nq, doi,
                                     hd, hd);
                            fa_accum(DK + (long)c0 * hd, hd, nc, NULL, DS + c0, 1, BT, s0, nq, qi,
                                     hd, hd);
                        }
                        /* dQ_r += sum_c dS[r][c] k_c (on the diagonal keys c <= r) */
                        for (int r0 = 0; r0 < nq; r0 += FA_AR) {
                            int s1 = diag ? imin(nk, r0 + FA_AR) : nk;
                            fa_accum(dq + (long)(q0 + r0) * R, R, imin(FA_AR, nq - r0), NULL,
                                     DS + (long)r0 * BT, BT, 1, 0, s1, KP, hd, hd);
                        }
                    }
                }
                for (int c = 0; c < nk; c++) {
                    float *dkr = dk + (long)(k0 + c) * R, *dvr = dv + (long)(k0 + c) * R;
                    const float *a = DK + (long)c * hd, *bb = DV + (long)c * hd;
#pragma omp simd
                    for (int d = 0; d < hd; d++) { dkr[d] += a[d]; dvr[d] += bb[d]; }
                }
            }
        }
    }
}
