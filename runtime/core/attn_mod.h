/* attn_mod.h — v2117 flex attention: the mask rule and the score modifier of an attention op, as
 * the cpu ops apply them (the CUDA templates get the same rules rendered from
 * generator/lua/attn_rules.lua; the two are held together by tests/unit/test_flex_v2117.c).
 * Header-only, shared by every backend. Never: a second copy of an attention kernel, an
 * allocation, or a rule that differs from the Lua one.
 *
 * A query q (sequence index) sees key k when the mask rule holds (and, with v2126 packing, when k
 * is in q's document: k >= q - positions[q], applied by the ops on top of this):
 *   causal          k <= q
 *   sliding_window  k <= q && q - k < window          (each query sees the last `window` keys)
 *   prefix_lm       k <= q || k < prefix              (bidirectional over the first `prefix`)
 * The score modifier takes the scaled score s = scale * q.k:
 *   softcap  s' = cap * tanh(s / cap)                 ds'/ds = 1 - tanh^2(s/cap) = 1 - (s'/cap)^2
 *   alibi    s' = s - slope_h * |q - k|,  slope_h = 2^(-8 (h+1) / NH)   (Press et al., NH a power
 *            of two; query head h of NH)                ds'/ds = 1
 * mod NULL or all-zero = causal, no modifier (the ops' plain paths, bit-identical).
 */
#ifndef HYP_ATTN_MOD_H
#define HYP_ATTN_MOD_H

#include <math.h>

enum { HYP_MASK_CAUSAL = 0, HYP_MASK_SLIDING_WINDOW = 1, HYP_MASK_PREFIX_LM = 2 };
enum { HYP_MOD_NONE = 0, HYP_MOD_SOFTCAP = 1, HYP_MOD_ALIBI = 2 };

typedef struct hyp_attn_mod_s {
    int mask;      /* HYP_MASK_* */
    int window;    /* sliding_window: keys visible per query (>= 1) */
    int prefix;    /* prefix_lm: length of the bidirectional prefix (>= 1) */
    int mod;       /* HYP_MOD_* */
    float softcap; /* softcap: the cap (> 0) */
} hyp_attn_mod;

/* Tiles visited and skipped (fully masked) by a flash op over all (b, head) pairs of one call:
 * the full grid of query tiles x key tiles counts once per (b, head). */
typedef struct hyp_attn_tiles_s {
    long visited, skipped;
} hyp_attn_tiles;

/* The rule of a plan op (plan_op's mask, window, prefix, score_mod, softcap attributes). */
#define HYP_ATTN_MOD_OF(o)                                                                          \
    ((hyp_attn_mod){(int)(o)->mask, (int)(o)->window, (int)(o)->prefix, (int)(o)->score_mod,      \
                    (o)->softcap})

static inline int hyp_attn_is_plain(const hyp_attn_mod *m) {
    return !m || (m->mask == HYP_MASK_CAUSAL && m->mod == HYP_MOD_NONE);
}

/* The mask rule: does query q see key k? */
static inline int hyp_attn_visible(const hyp_attn_mod *m, int q, int k) {
    int mask = m ? m->mask : HYP_MASK_CAUSAL;
    if (mask == HYP_MASK_SLIDING_WINDOW) return k <= q && q - k < m->window;
    if (mask == HYP_MASK_PREFIX_LM) return k <= q || k < m->prefix;
    return k <= q;
}

/* Does the tile of queries [qlo, qhi] x keys [klo, khi] hold any visible pair? (exact for these
 * rules: causal and prefix_lm are monotone towards (qhi, klo); the window is the band
 * 0 <= q - k < window, which meets the tile iff qhi - klo >= 0 and qlo - khi < window) */
static inline int hyp_attn_tile_any(const hyp_attn_mod *m, int qlo, int qhi, int klo, int khi) {
    int mask = m ? m->mask : HYP_MASK_CAUSAL;
    if (mask == HYP_MASK_SLIDING_WINDOW) return klo <= qhi && qlo - khi < m->window;
    if (mask == HYP_MASK_PREFIX_LM) return klo <= qhi || klo < m->prefix;
    (void)qlo;
    (void)khi;
    return klo <= qhi;
}

/* ALiBi slope of query head h (0-based) of NH. */
static inline float hyp_attn_alibi_slope(int h, int NH) {
    return (float)exp2(-8.0 * (double)(h + 1) / (double)NH);
}

/* The modified score s' of the scaled score s for query q, key k, head h of NH. */
static inline float hyp_attn_score(const hyp_attn_mod *m, float s, int q, int k, int h, int NH) {
    if (!m || m->mod == HYP_MOD_NONE) return s;
    if (m->mod == HYP_MOD_SOFTCAP) return m->softcap * tanhf(s / m->softcap);
    return s - hyp_attn_alibi_slope(h, NH) * (float)(q > k ? q - k : k - q);
}

/* ds'/ds from the modified score s'. */
static inline float hyp_attn_dscore(const hyp_attn_mod *m, float s_mod) {
    if (!m || m->mod != HYP_MOD_SOFTCAP) return 1.0f;
    float t = s_mod / m->softcap;
    return 1.0f - t * t;
}

#endif
