/* ops_ring.c — v2108/v2116 Ring Attention on the cpu (contract and layouts in ops_ring.h).
 * Never: attention arithmetic of its own beyond the logsumexp merge (the block products are
 * ops_flash.c's), nor communication other than coll.h's ring shift (blocking or posted) and the
 * all-gather / reduce-scatter of the all-gather mode.
 *
 * A chunk pair (query chunk ia of this rank, key chunk jb of block src) is handed to the flash op
 * as a [B, c] sequence whose rows are the query chunk's q heads and the key chunk's k and v heads
 * (one copy, O(c R) against the pair's O(c^2 NH hd) products). The diagonal pair is plain causal;
 * a pair whose keys all precede its queries is prefix_lm with prefix = c, i.e. every key visible
 * (core/attn_mod.h). */
#include "ops_ring.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "attn_mod.h"
#include "ops_flash.h"

int hyp_cp_check(int layout, int cp, int T, hyp_err *e) {
    if (layout != HYP_CP_CONTIGUOUS && layout != HYP_CP_ZIGZAG)
        return hyp_fail(e, HYP_EINPUT, "context parallel: layout %d is neither contiguous nor zigzag — use one of them", layout);
    if (cp < 1) return hyp_fail(e, HYP_EINPUT, "context parallel: degree %d — use cp >= 1", cp);
    int nch = layout == HYP_CP_ZIGZAG ? 2 * cp : cp;
    if (T < nch || T % nch)
        return hyp_fail(e, HYP_EINPUT, "context parallel: sequence %d is not a multiple of %s%d — use a sequence length divisible by %d",
                        T, layout == HYP_CP_ZIGZAG ? "2 cp = " : "cp = ", nch, nch);
    return HYP_OK;
}

int hyp_cp_chunks(int layout, int cp, int rank, int chunks[2]) {
    chunks[0] = rank;
    if (layout != HYP_CP_ZIGZAG) return 1;
    chunks[1] = 2 * cp - 1 - rank;
    return 2;
}

void hyp_cp_positions(int32_t *pos, int layout, int cp, int rank, int B, int T) {
    int ch[2], n = hyp_cp_chunks(layout, cp, rank, ch), c = T / (n * cp), Tl = n * c;
    for (int b = 0; b < B; b++)
        for (int i = 0; i < n; i++)
            for (int t = 0; t < c; t++) pos[(long)b * Tl + i * c + t] = ch[i] * c + t;
}

void hyp_cp_pack_kv(float *kv, const float *qkv, int B, int Tl, int NH, int NKV, int hd) {
    const long R = (long)(NH + 2 * NKV) * hd, KV = 2L * NKV * hd;
    for (long n = 0; n < (long)B * Tl; n++) memcpy(kv + n * KV, qkv + n * R + (long)NH * hd, sizeof(float) * (size_t)KV);
}

void hyp_cp_add_dkv(float *dqkv, const float *dkv, int B, int Tl, int NH, int NKV, int hd) {
    const long R = (long)(NH + 2 * NKV) * hd, KV = 2L * NKV * hd;
    for (long n = 0; n < (long)B * Tl; n++) {
        float *d = dqkv + n * R + (long)NH * hd;
        const float *s = dkv + n * KV;
        for (long i = 0; i < KV; i++) d[i] += s[i];
    }
}

/* The pair's sequence: row (b, t) = q heads of local row (b, ia c + t), k/v of block row (b, jb c + t). */
static void pair_qkv(float *pq, const float *qkv, const float *kv, int ia, int jb, int c, int B, int Tl, int NH,
                     int NKV, int hd) {
    const long R = (long)(NH + 2 * NKV) * hd, KV = 2L * NKV * hd, Q = (long)NH * hd;
    for (int b = 0; b < B; b++)
        for (int t = 0; t < c; t++) {
            float *dst = pq + ((long)b * c + t) * R;
            memcpy(dst, qkv + ((long)b * Tl + (long)ia * c + t) * R, sizeof(float) * (size_t)Q);
            memcpy(dst + Q, kv + ((long)b * Tl + (long)jb * c + t) * KV, sizeof(float) * (size_t)KV);
        }
}

/* The pair's rule: NULL (causal) on the diagonal, every key visible below it. */
static const hyp_attn_mod *pair_mod(int ga, int gb, int c, hyp_attn_mod *full) {
    if (ga == gb) return NULL;
    *full = (hyp_attn_mod){.mask = HYP_MASK_PREFIX_LM, .prefix = c};
    return full;
}

int op_ring_attention_fwd_block(float *out, float *lse, const float *qkv, const float *kv, int layout, int cp,
                                int rank, int src, int B, int T, int NH, int NKV, int hd, hyp_ring_stats *st,
                                hyp_err *e) {
    int rc = hyp_cp_check(layout, cp, T, e);
    if (rc) return rc;
    int qc[2], kc[2], nq = hyp_cp_chunks(layout, cp, rank, qc), nk = hyp_cp_chunks(layout, cp, src, kc);
    const int c = T / (nq * cp), Tl = nq * c;
    const long R = (long)(NH + 2 * NKV) * hd, OC = (long)NH * hd;
    if (src == rank) { /* the first step: nothing merged yet */
        for (long i = 0; i < (long)B * Tl * OC; i++) out[i] = 0.0f;
        for (long i = 0; i < (long)B * NH * Tl; i++) lse[i] = -INFINITY;
    }
    float *pq = malloc(sizeof(float) * (size_t)((long)B * c * (R + OC) + (long)B * NH * c));
    if (!pq) return hyp_fail(e, HYP_EFAIL, "ring attention: out of memory for a [%d, %d] chunk pair", B, c);
    float *po = pq + (long)B * c * R, *pl = po + (long)B * c * OC;
    for (int ia = 0; ia < nq; ia++)
        for (int jb = 0; jb < nk; jb++) {
            if (kc[jb] > qc[ia]) { /* every key after every query */
                if (st) st->skipped++;
                continue;
            }
            if (st) *(qc[ia] == kc[jb] ? &st->diag : &st->full) += 1;
            hyp_attn_mod full;
            pair_qkv(pq, qkv, kv, ia, jb, c, B, Tl, NH, NKV, hd);
            op_flash_attention_fwd_mod(po, pl, pq, NULL, B, c, NH, NKV, hd, 0.0f, pair_mod(qc[ia], kc[jb], c, &full), NULL);
            /* merge, in double: both partial outputs are convex combinations of v rows, their
             * weights e^(lse_x - lse') sum to 1 */
            for (int b = 0; b < B; b++)
                for (int h = 0; h < NH; h++)
                    for (int t = 0; t < c; t++) {
                        float *L = lse + ((long)b * NH + h) * Tl + (long)ia * c + t;
                        const float lp = pl[((long)b * NH + h) * c + t];
                        float *o = out + ((long)b * Tl + (long)ia * c + t) * OC + (long)h * hd;
                        const float *op = po + ((long)b * c + t) * OC + (long)h * hd;
                        if (lp == -INFINITY) continue; /* no visible key (cannot happen causally) */
                        if (*L == -INFINITY) {
                            memcpy(o, op, sizeof(float) * (size_t)hd);
                            *L = lp;
                            continue;
                        }
                        double a = *L, p = lp, mx = a > p ? a : p, mn = a > p ? p : a;
                        double ln = mx + log1p(exp(mn - mx)), wa = exp(a - ln), wp = exp(p - ln);
                        for (int d = 0; d < hd; d++) o[d] = (float)(wa * o[d] + wp * op[d]);
                        *L = (float)ln;
                    }
        }
    free(pq);
    return HYP_OK;
}

int op_ring_attention_bwd_block(float *dqkv, float *dkv, const float *dout, const float *qkv, const float *out,
                                const float *lse, const float *kv, int layout, int cp, int rank, int src, int B,
                                int T, int NH, int NKV, int hd, hyp_err *e) {
    int rc = hyp_cp_check(layout, cp, T, e);
    if (rc) return rc;
    int qc[2], kc[2], nq = hyp_cp_chunks(layout, cp, rank, qc), nk = hyp_cp_chunks(layout, cp, src, kc);
    const int c = T / (nq * cp), Tl = nq * c;
    const long R = (long)(NH + 2 * NKV) * hd, OC = (long)NH * hd, KV = 2L * NKV * hd, Q = OC;
    /* pq, dpq [B,c,R]; po, pdo [B,c,OC]; pl, pd [B,NH,c] */
    size_t n = (size_t)(2 * (long)B * c * R + 2 * (long)B * c * OC + 2 * (long)B * NH * c);
    float *pq = malloc(sizeof(float) * n);
    if (!pq) return hyp_fail(e, HYP_EFAIL, "ring attention backward: out of memory for a [%d, %d] chunk pair", B, c);
    float *dpq = pq + (long)B * c * R, *po = dpq + (long)B * c * R, *pdo = po + (long)B * c * OC,
          *pl = pdo + (long)B * c * OC, *pd = pl + (long)B * NH * c;
    for (int ia = 0; ia < nq; ia++)
        for (int jb = 0; jb < nk; jb++) {
            if (kc[jb] > qc[ia]) continue;
            hyp_attn_mod full;
            pair_qkv(pq, qkv, kv, ia, jb, c, B, Tl, NH, NKV, hd);
            for (int b = 0; b < B; b++) {
                const long r0 = (long)b * Tl + (long)ia * c;
                memcpy(po + (long)b * c * OC, out + r0 * OC, sizeof(float) * (size_t)(c * OC));
                memcpy(pdo + (long)b * c * OC, dout + r0 * OC, sizeof(float) * (size_t)(c * OC));
                for (int h = 0; h < NH; h++)
                    memcpy(pl + ((long)b * NH + h) * c, lse + ((long)b * NH + h) * Tl + (long)ia * c, sizeof(float) * (size_t)c);
            }
            memset(dpq, 0, sizeof(float) * (size_t)((long)B * c * R));
            op_flash_attention_bwd_mod(dpq, pd, pdo, pq, po, pl, NULL, B, c, NH, NKV, hd, 0.0f,
                                       pair_mod(qc[ia], kc[jb], c, &full));
            for (int b = 0; b < B; b++)
                for (int t = 0; t < c; t++) {
                    const float *s = dpq + ((long)b * c + t) * R;
                    float *dq = dqkv + ((long)b * Tl + (long)ia * c + t) * R;
                    float *dk = dkv + ((long)b * Tl + (long)jb * c + t) * KV;
                    for (long i = 0; i < Q; i++) dq[i] += s[i];
                    for (long i = 0; i < KV; i++) dk[i] += s[Q + i];
                }
        }
    free(pq);
    return HYP_OK;
}

/* The ring (v2116): the next block's shift is posted before the current block's compute and waited
 * after it, so the transfer runs behind the chunk-pair products (st->overlapped counts the blocks
 * computed while one of this op's transfers was in flight on cp). */
int op_ring_attention_fwd(hyp_coll *cp, int layout, float *out, float *lse, const float *qkv, int B, int T, int NH,
                          int NKV, int hd, hyp_ring_stats *st, hyp_err *e) {
    const int p = hyp_coll_world(cp), r = hyp_coll_rank(cp);
    int rc = hyp_cp_check(layout, p, T, e);
    if (rc) return rc;
    const int Tl = T / p;
    const size_t nkv = (size_t)B * Tl * 2 * NKV * hd;
    float *kv = malloc(sizeof(float) * 2 * nkv);
    if (!kv) return hyp_fail(e, HYP_EFAIL, "ring attention: out of memory for the K/V blocks");
    float *next = kv + nkv, *base = kv;
    hyp_cp_pack_kv(kv, qkv, B, Tl, NH, NKV, hd);
    for (int s = 0; s < p && !rc; s++) {
        int req[2] = {-1, -1};
        if (s + 1 < p && (rc = hyp_coll_ring_ishift_f32(cp, kv, next, nkv, req, e))) break;
        if (st && hyp_coll_in_flight(cp) > 0) st->overlapped++;
        rc = op_ring_attention_fwd_block(out, lse, qkv, kv, layout, p, r, (r - s + p) % p, B, T, NH, NKV, hd, st, e);
        int wrc = hyp_coll_ring_wait(cp, req, e);
        rc = rc ? rc : wrc;
        float *t = kv;
        kv = next, next = t;
    }
    free(base);
    return rc;
}

/* Backward ring: the K/V block's shift overlaps the block's products; this rank's contribution to
 * the block's gradient is computed into a zeroed buffer `part` while the accumulator of the
 * ranks before it is still arriving, then acc = acc_in + part is posted on (overlapping the next
 * block's products). So block o's gradient is the left fold part_o + part_o+1 + ... in ring order,
 * and after cp steps (one more shift than K/V) it is home. */
int op_ring_attention_bwd(hyp_coll *cp, int layout, float *dqkv, const float *dout, const float *qkv,
                          const float *out, const float *lse, int B, int T, int NH, int NKV, int hd, hyp_ring_stats *st,
                          hyp_err *e) {
    const int p = hyp_coll_world(cp), r = hyp_coll_rank(cp);
    int rc = hyp_cp_check(layout, p, T, e);
    if (rc) return rc;
    const int Tl = T / p;
    const size_t nkv = (size_t)B * Tl * 2 * NKV * hd;
    /* kv, kv_next, part, acc (posted), acc_in (arriving) */
    float *buf = calloc(5 * nkv, sizeof(float));
    if (!buf) return hyp_fail(e, HYP_EFAIL, "ring attention backward: out of memory for the K/V blocks");
    float *kv = buf, *next = buf + nkv, *part = buf + 2 * nkv, *acc = buf + 3 * nkv, *acc_in = buf + 4 * nkv;
    int rq_acc[2] = {-1, -1};
    hyp_cp_pack_kv(kv, qkv, B, Tl, NH, NKV, hd);
    for (int s = 0; s < p && !rc; s++) {
        int rq_kv[2] = {-1, -1};
        if (s + 1 < p && (rc = hyp_coll_ring_ishift_f32(cp, kv, next, nkv, rq_kv, e))) break;
        if (st && hyp_coll_in_flight(cp) > 0) st->overlapped++;
        memset(part, 0, sizeof(float) * nkv);
        rc = op_ring_attention_bwd_block(dqkv, part, dout, qkv, out, lse, kv, layout, p, r, (r - s + p) % p, B, T, NH,
                                         NKV, hd, e);
        int wrc = hyp_coll_ring_wait(cp, rq_acc, e); /* acc_in: the ranks before this one; acc is free again */
        rc = rc ? rc : wrc;
        if (s == 0) memcpy(acc, part, sizeof(float) * nkv);
        else
            for (size_t i = 0; i < nkv; i++) acc[i] = acc_in[i] + part[i];
        if (!rc) rc = hyp_coll_ring_ishift_f32(cp, acc, acc_in, nkv, rq_acc, e);
        wrc = hyp_coll_ring_wait(cp, rq_kv, e);
        rc = rc ? rc : wrc;
        float *t = kv;
        kv = next, next = t;
    }
    int wrc = hyp_coll_ring_wait(cp, rq_acc, e); /* acc_in: the own block's whole gradient, home */
    rc = rc ? rc : wrc;
    if (!rc) hyp_cp_add_dkv(dqkv, acc_in, B, Tl, NH, NKV, hd);
    free(buf);
    return rc;
}

/* All-gather mode (v2108 without v2116): every rank's block at once, then the ring's very block
 * calls in the ring's order; no transfer overlaps them. */
int op_cp_allgather_attention_fwd(hyp_coll *cp, int layout, float *out, float *lse, const float *qkv, int B, int T,
                                  int NH, int NKV, int hd, hyp_ring_stats *st, hyp_err *e) {
    const int p = hyp_coll_world(cp), r = hyp_coll_rank(cp);
    int rc = hyp_cp_check(layout, p, T, e);
    if (rc) return rc;
    const int Tl = T / p;
    const size_t nkv = (size_t)B * Tl * 2 * NKV * hd;
    float *all = malloc(sizeof(float) * (size_t)p * nkv);
    if (!all) return hyp_fail(e, HYP_EFAIL, "context parallel attention: out of memory for %d gathered K/V blocks", p);
    hyp_cp_pack_kv(all + (size_t)r * nkv, qkv, B, Tl, NH, NKV, hd);
    rc = hyp_coll_allgather_f32(cp, all + (size_t)r * nkv, all, nkv, e);
    for (int s = 0; s < p && !rc; s++) {
        int src = (r - s + p) % p;
        rc = op_ring_attention_fwd_block(out, lse, qkv, all + (size_t)src * nkv, layout, p, r, src, B, T, NH, NKV, hd, st, e);
    }
    free(all);
    return rc;
}

/* Backward: K/V gathered again, this rank's contribution to every block's gradient computed from
 * zero (each block once), then reduce-scattered: the owner gets the sum over ranks. */
int op_cp_allgather_attention_bwd(hyp_coll *cp, int layout, float *dqkv, const float *dout, const float *qkv,
                                  const float *out, const float *lse, int B, int T, int NH, int NKV, int hd, hyp_err *e) {
    const int p = hyp_coll_world(cp), r = hyp_coll_rank(cp);
    int rc = hyp_cp_check(layout, p, T, e);
    if (rc) return rc;
    const int Tl = T / p;
    const size_t nkv = (size_t)B * Tl * 2 * NKV * hd;
    float *all = calloc((size_t)(2 * p + 1) * nkv, sizeof(float));
    if (!all) return hyp_fail(e, HYP_EFAIL, "context parallel attention backward: out of memory for %d gathered K/V blocks", p);
    float *parts = all + (size_t)p * nkv, *mine = parts + (size_t)p * nkv;
    hyp_cp_pack_kv(all + (size_t)r * nkv, qkv, B, Tl, NH, NKV, hd);
    rc = hyp_coll_allgather_f32(cp, all + (size_t)r * nkv, all, nkv, e);
    for (int s = 0; s < p && !rc; s++) {
        int src = (r - s + p) % p;
        rc = op_ring_attention_bwd_block(dqkv, parts + (size_t)src * nkv, dout, qkv, out, lse, all + (size_t)src * nkv, layout, p,
                                         r, src, B, T, NH, NKV, hd, e);
    }
    if (!rc) rc = hyp_coll_reduce_scatter_f32(cp, parts, mine, nkv, e);
    if (!rc) hyp_cp_add_dkv(dqkv, mine, B, Tl, NH, NKV, hd);
    free(all);
    return rc;
}
