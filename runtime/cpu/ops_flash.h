/* ops_flash.h — FlashAttention-2 style causal attention for the CPU backend (issue #6: v2112
 * forward, v2113 backward). Same math, layouts and conventions as op_attention_fwd/bwd in
 * ops_cpu.h, without the [B,NH,T,T] probability matrix:
 *
 *   qkv  [B, T, (NH + 2*NKV) * hd]  fused: all q heads, then k heads, then v heads
 *   out  [B, T, NH * hd]
 *   lse  [B, NH, T]                 log-sum-exp of each query row's scaled scores (natural log):
 *                                   lse[b,h,t] = log sum_{t2 <= t} exp(scale * q_t . k_t2)
 *   scale = 1/sqrt(hd); causal (t2 <= t); grouped-query: query head h reads kv head h / (NH/NKV).
 *   NH % NKV == 0, T >= 1, any hd >= 1.
 *
 * Forward: for each (b, h, query tile of BT rows) the key tiles 0..i are visited with an online
 * softmax (running row max m and row sum l, the output tile rescaled by exp(m_old - m_new));
 * out = O / l and lse = m + log l are written at the end. Only lse is saved for backward.
 * Backward (FA2): P is recomputed per tile from Q, K and lse; with D = rowsum(dout * out)
 * (precomputed into dscratch), dV += P^T dO, dP = dO V^T, dS = P * (dP - D),
 * dQ += scale dS K, dK += scale dS^T Q. Gradients ACCUMULATE (+=) into dqkv, like ops_cpu.
 *
 * Tiles: BT x BT (query rows x keys) with BT = 64 when hd <= 128 and 32 above (tile working sets
 * of 80-150 KB per thread stay in L1/L2; the choice is measured, see ops_flash.c).
 *
 * Parallelism and determinism (both functions are deterministic and independent of the thread
 * count: every output element is produced by one task with a fixed summation order):
 *   forward:  omp for over (b, h, query tile) (dynamic schedule, B*NH*ceil(T/BT) tasks);
 *   backward: omp for over (b, kv head). One task owns all key tiles of a kv head and all of its
 *             G = NH/NKV query heads, so it is the only writer of those dK/dV rows and of the dQ
 *             rows of those query heads: no atomics, no per-thread copies, and only the 5 tile
 *             products of FA2 (no second dQ pass). The parallel width is B*NKV tasks: enough
 *             for B*NKV >= threads (e.g. GPT-2 B=4 x 12 heads on 2-16 cores); with fewer tasks
 *             than threads the surplus threads idle (B=1, NKV=2 uses 2). Widening it would need
 *             per-query-head dK/dV partials (O(T*hd) per head) summed in a fixed order.
 *
 * Memory: besides lse [B,NH,T] (forward output, saved) and dscratch [B,NH,T] (backward's D),
 * each thread uses op_flash_attention_scratch_bytes() of tile scratch, on its stack (no heap
 * allocation in these functions): 81 KB (fwd) / 145 KB (bwd) per thread at hd = 64, 257 KB
 * (bwd) at hd = 128; hd > 128 switches to 32-row tiles (896 * hd + 8 KB bytes in backward).
 * OpenMP worker threads need that much stack (glibc's default is 8 MB; OMP_STACKSIZE sets it).
 */
#ifndef HYP_OPS_FLASH_H
#define HYP_OPS_FLASH_H

#include <stddef.h>
#include <stdint.h>

/* out [B,T,NH*hd] (overwritten), lse [B,NH,T] (overwritten, saved for backward). */
void op_flash_attention_fwd(float *out, float *lse, const float *qkv, int B, int T, int NH,
                            int NKV, int hd);

/* dqkv [B,T,(NH+2*NKV)*hd] accumulated (+=); dscratch [B,NH,T] overwritten (D = rowsum(dout*out));
 * dout, out [B,T,NH*hd]; qkv as in forward; lse from forward. */
void op_flash_attention_bwd(float *dqkv, float *dscratch, const float *dout, const float *qkv,
                            const float *out, const float *lse, int B, int T, int NH, int NKV,
                            int hd);

/* v2126 document masking through one mask hook (FlashInfer-style): query t of row b sees only
 * the keys [t - positions[b,t], t], its own document (positions: [B,T] each token's position in
 * its document; NULL = plain causal, bit-identical to the functions above). Key tiles entirely
 * before a query tile's documents are skipped in forward and backward; masked probabilities are
 * exactly 0, so no gradient crosses a document. */
void op_flash_attention_fwd_doc(float *out, float *lse, const float *qkv, const int32_t *positions,
                                int B, int T, int NH, int NKV, int hd, float scale);
void op_flash_attention_bwd_doc(float *dqkv, float *dscratch, const float *dout, const float *qkv,
                                const float *out, const float *lse, const int32_t *positions,
                                int B, int T, int NH, int NKV, int hd, float scale);
/* (the _doc functions' scale: the score scale, a plan's attention attr `scale` such as muP's
 * 1/hd; 0 = 1/sqrt(hd), bit-identical to the functions above) */

/* v2117 flex attention: the _doc functions with a mask rule and a score modifier (core/attn_mod.h;
 * NULL = plain causal, bit-identical to _doc). The document mask (positions) still applies on top.
 * tiles (may be NULL): on return the (query tile, key tile) pairs the forward visited and skipped
 * as fully masked, over the full ceil(T/BT)^2 grid of every (b, head). */
struct hyp_attn_mod_s;
struct hyp_attn_tiles_s;
void op_flash_attention_fwd_mod(float *out, float *lse, const float *qkv, const int32_t *positions,
                                int B, int T, int NH, int NKV, int hd, float scale,
                                const struct hyp_attn_mod_s *mod, struct hyp_attn_tiles_s *tiles);
void op_flash_attention_bwd_mod(float *dqkv, float *dscratch, const float *dout, const float *qkv,
                                const float *out, const float *lse, const int32_t *positions,
                                int B, int T, int NH, int NKV, int hd, float scale,
                                const struct hyp_attn_mod_s *mod);

/* The tile edge BT used for head dim hd (64 or 32). */
int op_flash_attention_tile(int hd);

/* Bytes of tile scratch ONE thread uses (on its stack) in forward (backward = 0) or backward
 * (backward = 1). Multiply by the thread count for the total. Independent of B, T and NH. */
size_t op_flash_attention_scratch_bytes(int hd, int backward);

#endif
