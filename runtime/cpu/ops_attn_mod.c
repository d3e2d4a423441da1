/* ops_attn_mod.c — v2117 flex attention on the cpu, the naive way: the attention op with a mask
 * rule and a score modifier (core/attn_mod.h) evaluated straight from the definition, materializing
 * att [B,NH,T,T] like op_attention_fwd/bwd (contract in ops_cpu.h). It is the reference the flash
 * op (ops_flash.c) and the CUDA template are tested against, and the cpu trainer's attention when
 * flash is off. Dots and sums in double (the reference's rounding stays far below the flash op's
 * fp32 error). Never: a tiled or reordered evaluation (that is the flash op's job), a heap
 * allocation, or a second copy of the rules (they live in attn_mod.h).
 */
#include "attn_mod.h"
#include "ops_cpu.h"

#include <math.h>
#include <string.h>

/* The first key query t of row b may see under the v2126 document mask, clamped to [0, t]. */
static int doc_lo(const int32_t *pos, int b, int T, int t) {
    if (!pos) return 0;
    int v = t - pos[(long)b * T + t];
    return v < 0 ? 0 : v > t ? t : v;
}

static int visible(const hyp_attn_mod *m, const int32_t *pos, int b, int T, int q, int k) {
    return hyp_attn_visible(m, q, k) && k >= doc_lo(pos, b, T, q);
}

static double dot(const float *x, const float *y, int n) {
    double acc = 0.0;
    for (int i = 0; i < n; i++) acc += (double)x[i] * (double)y[i];
    return acc;
}

void op_attention_fwd_mod(float *out, float *att, const float *qkv, const int32_t *positions,
                          int B, int T, int NH, int NKV, int hd, float scale,
                          const struct hyp_attn_mod_s *mod) {
    if (hyp_attn_is_plain(mod)) {
        op_attention_fwd_doc(out, att, qkv, positions, B, T, NH, NKV, hd, scale);
        return;
    }
    const long R = (long)(NH + 2 * NKV) * hd, OC = (long)NH * hd;
    const int G = NH / NKV;
    if (!(scale > 0.0f)) scale = 1.0f / sqrtf((float)hd);
#pragma omp parallel for collapse(3) schedule(dynamic, 16)
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int t = 0; t < T; t++) {
                const int g = h / G;
                const float *base = qkv + (long)b * T * R;
                const float *q = base + (long)t * R + (long)h * hd;
                float *arow = att + (((long)b * NH + h) * T + t) * T;
                double mx = -INFINITY;
                for (int k = 0; k < T; k++) {
                    if (!visible(mod, positions, b, T, t, k)) {
                        arow[k] = -INFINITY;
                        continue;
                    }
                    float s = (float)(scale * dot(q, base + (long)k * R + (long)(NH + g) * hd, hd));
                    arow[k] = hyp_attn_score(mod, s, t, k, h, NH);
                    if (arow[k] > mx) mx = arow[k];
                }
                double sum = 0.0; /* every query sees at least its own key: mx is finite */
                for (int k = 0; k < T; k++) sum += arow[k] == -INFINITY ? 0.0 : exp((double)arow[k] - mx);
                for (int k = 0; k < T; k++)
                    arow[k] = arow[k] == -INFINITY ? 0.0f : (float)(exp((double)arow[k] - mx) / sum);
                float *o = out + ((long)b * T + t) * OC + (long)h * hd;
                for (int d = 0; d < hd; d++) {
                    double acc = 0.0;
                    for (int k = 0; k < T; k++)
                        if (arow[k] != 0.0f) acc += (double)arow[k] * base[(long)k * R + (long)(NH + NKV + g) * hd + d];
                    o[d] = (float)acc;
                }
            }
}

void op_attention_bwd_mod(float *dqkv, float *datt, const float *dout, const float *qkv,
                          const float *att, const int32_t *positions, int B, int T, int NH,
                          int NKV, int hd, float scale, const struct hyp_attn_mod_s *mod) {
    if (hyp_attn_is_plain(mod)) {
        op_attention_bwd_doc(dqkv, datt, dout, qkv, att, positions, B, T, NH, NKV, hd, scale);
        return;
    }
    const long R = (long)(NH + 2 * NKV) * hd, OC = (long)NH * hd;
    const int G = NH / NKV;
    if (!(scale > 0.0f)) scale = 1.0f / sqrtf((float)hd);
    /* one task per (b, kv head): the only writer of its dk/dv rows and of its query heads' dq
     * rows, summing in a fixed order (head, query, key): deterministic, no atomics */
#pragma omp parallel for collapse(2) schedule(dynamic, 1)
    for (int b = 0; b < B; b++)
        for (int g = 0; g < NKV; g++) {
            const float *base = qkv + (long)b * T * R;
            float *dbase = dqkv + (long)b * T * R;
            for (int h = g * G; h < (g + 1) * G; h++)
                for (int t = 0; t < T; t++) {
                    const float *arow = att + (((long)b * NH + h) * T + t) * T;
                    float *drow = datt + (((long)b * NH + h) * T + t) * T;
                    const float *dO = dout + ((long)b * T + t) * OC + (long)h * hd;
                    const float *q = base + (long)t * R + (long)h * hd;
                    /* dP = dO . v, then the softmax backward dS' = P (dP - sum P dP) */
                    double rs = 0.0;
                    for (int k = 0; k < T; k++) {
                        drow[k] = arow[k] != 0.0f ? (float)dot(dO, base + (long)k * R + (long)(NH + NKV + g) * hd, hd) : 0.0f;
                        rs += (double)arow[k] * drow[k];
                    }
                    for (int k = 0; k < T; k++) {
                        if (!visible(mod, positions, b, T, t, k)) {
                            drow[k] = 0.0f;
                            continue;
                        }
                        double ds = (double)arow[k] * ((double)drow[k] - rs);
                        if (mod->mod == HYP_MOD_SOFTCAP) { /* ds'/ds from the recomputed score */
                            float s = (float)(scale * dot(q, base + (long)k * R + (long)(NH + g) * hd, hd));
                            ds *= hyp_attn_dscore(mod, hyp_attn_score(mod, s, t, k, h, NH));
                        }
                        drow[k] = (float)(scale * ds); /* d loss / d (q.k) */
                    }
                    float *dq = dbase + (long)t * R + (long)h * hd;
                    for (int k = 0; k < T; k++) {
                        if (drow[k] == 0.0f && arow[k] == 0.0f) continue;
                        const float *kk = base + (long)k * R + (long)(NH + g) * hd;
                        float *dk = dbase + (long)k * R + (long)(NH + g) * hd;
                        float *dv = dbase + (long)k * R + (long)(NH + NKV + g) * hd;
                        for (int d = 0; d < hd; d++) {
                            dq[d] += drow[k] * kk[d];
                            dk[d] += drow[k] * q[d];
                            dv[d] += arow[k] * dO[d];
                        }
                    }
                }
        }
}
