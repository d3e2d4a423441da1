/* ops_ring.h — v2108/v2116 context parallelism on the cpu: causal Ring Attention over the ranks of
 * a cp group, forward (out, logsumexp) and backward (dq, dk, dv). Never: a second attention kernel
 * (every block product is ops_flash.c's), nor a collective other than coll.h's ring shift (blocking
 * or posted) and, in the all-gather mode, its all-gather and reduce-scatter.
 *
 * The sequence of T tokens is cut into nch equal chunks of c = T / nch tokens:
 *   contiguous  nch = cp,   rank r holds chunk r;
 *   zigzag      nch = 2 cp, rank r holds chunks r and 2cp-1-r, in that order (the load-balanced
 *               causal split of Striped/Llama-3 context parallelism: every rank gets 2cp+1 visible
 *               chunk pairs, where contiguous gives rank r r+1 of them).
 * A rank's tensors hold its chunks one after another, Tl = T / cp rows per sequence:
 *   qkv [B, Tl, (NH + 2*NKV) * hd]  (as ops_flash.h; q and k must already carry their GLOBAL
 *                                    positions: RoPE/position embeddings from hyp_cp_positions)
 *   out [B, Tl, NH * hd], lse [B, NH, Tl]   (the full-sequence flash attention's rows, permuted)
 *   kv  [B, Tl, 2 * NKV * hd]       a rank's K and V heads packed: the block passed around the ring.
 *
 * Forward, rank r, steps s = 0 .. cp-1: the block of rank src = (r - s) mod cp is attended
 * chunk pair by chunk pair (query chunk a, key chunk b: b > a skipped, b == a the causal diagonal,
 * b < a fully visible) by op_flash_attention_fwd_mod on a [B, c] sequence, and each pair's
 * (out_p, lse_p) merged into the running (out, lse) in double: lse' = log(e^lse + e^lse_p),
 * out' = e^(lse - lse') out + e^(lse_p - lse') out_p; between steps the block moves one rank on.
 * Backward: with the FINAL out and lse, P = exp(S - lse) of every pair is the full softmax's, so
 * op_flash_attention_bwd_mod per pair gives exact contributions: dq stays local; the block's dK/dV
 * accumulator follows it one step behind (acc = acc_in + this rank's part) and, after the last
 * step, is home. v2116 ring: every shift is posted before the block compute and waited after it.
 * Bytes sent per rank per call (counted by coll): forward (cp-1)|kv|, backward (2cp-1)|kv|
 * (K/V cp-1 times, the gradient accumulator cp times), |kv| = B Tl 2 NKV hd 4 bytes.
 *
 * The _block functions are one ring step of one rank: the drivers call exactly them, so a single
 * process can run the whole ring over in-memory blocks (tests/unit/test_ring_attention_v2108.c)
 * and must get the mpirun result bit for bit.
 */
#ifndef HYP_OPS_RING_H
#define HYP_OPS_RING_H

#include <stddef.h>
#include <stdint.h>

#include "coll.h"
#include "hyp_err.h"

enum { HYP_CP_CONTIGUOUS = 0, HYP_CP_ZIGZAG = 1 };

/* Chunk pairs one rank visited (summed over calls): the work balance of a layout. */
typedef struct {
    long diag, full, skipped;
    long overlapped; /* blocks computed while one of the op's transfers was in flight (v2116 ring) */
} hyp_ring_stats;

/* EINPUT ("where: what — how to fix") unless cp >= 1, the layout is known and T % nch == 0. */
int hyp_cp_check(int layout, int cp, int T, hyp_err *e);
/* The global chunk indices rank holds, in local order; returns their count (1 or 2). */
int hyp_cp_chunks(int layout, int cp, int rank, int chunks[2]);
/* pos[b * Tl + t] = the global position of local token t (same for every b): for RoPE
 * (op_rope_fwd_pos), position embeddings and the data loader. */
void hyp_cp_positions(int32_t *pos, int layout, int cp, int rank, int B, int T);

/* kv [B,Tl,2 NKV hd] = the K and V heads of qkv [B,Tl,R]. */
void hyp_cp_pack_kv(float *kv, const float *qkv, int B, int Tl, int NH, int NKV, int hd);

/* One forward ring step of rank `rank`: merge the attention of its queries over the block kv of
 * rank src into (out, lse). Before the first step (src == rank) out and lse are overwritten. */
int op_ring_attention_fwd_block(float *out, float *lse, const float *qkv, const float *kv, int layout,
                                int cp, int rank, int src, int B, int T, int NH, int NKV, int hd,
                                hyp_ring_stats *st, hyp_err *e);
/* One backward ring step: dq rows of dqkv += the block's contribution; dkv [B,Tl,2 NKV hd] (the
 * block's gradient accumulator) += its queries' contribution. out, lse: the final forward. */
int op_ring_attention_bwd_block(float *dqkv, float *dkv, const float *dout, const float *qkv,
                                const float *out, const float *lse, const float *kv, int layout, int cp,
                                int rank, int src, int B, int T, int NH, int NKV, int hd, hyp_err *e);
/* dqkv's K and V rows += dkv (the own block's gradient, home after the ring). */
void hyp_cp_add_dkv(float *dqkv, const float *dkv, int B, int Tl, int NH, int NKV, int hd);

/* The ring over the communicator cp (its world = the cp degree, its rank = the rank's place).
 * T is the FULL sequence length. out, lse overwritten; dqkv accumulated (+=). */
int op_ring_attention_fwd(hyp_coll *cp, int layout, float *out, float *lse, const float *qkv, int B,
                          int T, int NH, int NKV, int hd, hyp_ring_stats *st, hyp_err *e);
int op_ring_attention_bwd(hyp_coll *cp, int layout, float *dqkv, const float *dout, const float *qkv,
                          const float *out, const float *lse, int B, int T, int NH, int NKV, int hd,
                          hyp_ring_stats *st, hyp_err *e);
/* v2108 alone: all-gather mode, the same contract. Forward: K/V all-gathered, then the ring's block
 * calls in the ring's order (out, lse bit-identical to the ring's). Backward: K/V all-gathered
 * again, the rank's contribution to each block's gradient from zero, reduce-scattered to the
 * owners. Bytes per rank per call (coll's ring model): forward (cp-1)|kv|, backward 2(cp-1)|kv|. */
int op_cp_allgather_attention_fwd(hyp_coll *cp, int layout, float *out, float *lse, const float *qkv, int B, int T,
                                  int NH, int NKV, int hd, hyp_ring_stats *st, hyp_err *e);
int op_cp_allgather_attention_bwd(hyp_coll *cp, int layout, float *dqkv, const float *dout, const float *qkv,
                                  const float *out, const float *lse, int B, int T, int NH, int NKV, int hd, hyp_err *e);

#endif
