/* ops_cpu.h — the CPU backend's kernels: forward and backward of every op of the GPT-2 and
 * Llama architectures, in fp32, row-major, parallel with OpenMP, matmuls through oneDNN's sgemm.
 *
 * Conventions (one name per concept, as in llm.c):
 *   B batch, T sequence length, C model width, V vocabulary, Vp padded vocabulary (row stride of
 *   the logits), NH query heads, NKV key/value heads (NH % NKV == 0), hd head dim, N = B*T rows,
 *   H the MLP hidden width.
 *   Linear weights are stored [OC, IC] (out-features major, like torch.nn.Linear).
 *   The fused QKV activation is [B, T, (NH + 2*NKV) * hd]: all q heads, then k heads, then v heads.
 *   The fused SwiGLU input is [N, 2H]: the gate half first, then the up half.
 *
 * Backward functions ACCUMULATE (+=) into every gradient they write (dinp, dweight, dbias): the
 * executor zeroes gradients once per optimizer step, which makes gradient accumulation and
 * residual fan-in free. A NULL gradient pointer means "not needed" and is skipped.
 * Nothing here allocates on the heap in a hot path, and nothing here calls exit().
 */
#ifndef HYP_OPS_CPU_H
#define HYP_OPS_CPU_H

#include <stdint.h>

#include "hyp_err.h"

/* Added (ops_cpu.c): the kernels return void, but a oneDNN sgemm can fail (out of memory,
 * invalid arguments). A failure is recorded (the first one wins; the output of that matmul is
 * unspecified) and the executor asks once per step: op_cpu_check returns HYP_OK, or HYP_EFAIL
 * with a message in *e, and clears the record. */
int op_cpu_check(hyp_err *e);
/* Records a failure outside oneDNN (a workspace that could not be allocated, a call that broke a
 * kernel's precondition) the same way: the next op_cpu_check reports it, naming `where`. */
void op_cpu_fail(const char *where);
/* The same with a failed oneDNN call's dnnl_status_t (quant.c's int8 GEMM). */
void op_cpu_fail_status(const char *where, int status);

/* C[M,N] = alpha * op(A) op(B) + beta * C, row-major, through oneDNN; a failure is recorded for
 * op_cpu_check, naming `where`. For kernels outside this file (the optimizers'). */
void op_sgemm(const char *where, char ta, char tb, long M, long N, long K, float alpha, const float *A, long lda,
              const float *B, long ldb, float beta, float *C, long ldc);

/* out[B,T,C] = wte[tokens] (+ wpe[t] when wpe != NULL). */
void op_embedding_fwd(float *out, const int32_t *tokens, const float *wte, const float *wpe,
                      int B, int T, int C);
/* dwte[tok] += dout (deterministic: no float atomics, fixed summation order); dwpe may be NULL. */
void op_embedding_bwd(float *dwte, float *dwpe, const float *dout, const int32_t *tokens,
                      int B, int T, int C, int V);
/* v2126: the same with wpe[positions[b,t]] instead of wpe[t] (positions NULL: t), positions in
 * [0, T): each token's position in its document. */
void op_embedding_fwd_pos(float *out, const int32_t *tokens, const float *wte, const float *wpe,
                          const int32_t *positions, int B, int T, int C);
void op_embedding_bwd_pos(float *dwte, float *dwpe, const float *dout, const int32_t *tokens,
                          const int32_t *positions, int B, int T, int C, int V);

/* LayerNorm over the last dim. mean, rstd: [N] saved for backward. bias may be NULL. */
void op_layernorm_fwd(float *out, float *mean, float *rstd, const float *inp, const float *w,
                      const float *b, int N, int C, float eps);
void op_layernorm_bwd(float *dinp, float *dw, float *db, const float *dout, const float *inp,
                      const float *w, const float *mean, const float *rstd, int N, int C);

/* RMSNorm over the last dim: out = inp * rstd * w, rstd: [N] saved for backward. */
void op_rmsnorm_fwd(float *out, float *rstd, const float *inp, const float *w, int N, int C,
                    float eps);
void op_rmsnorm_bwd(float *dinp, float *dw, const float *dout, const float *inp, const float *w,
                    const float *rstd, int N, int C);

/* out[N,OC] = inp[N,IC] @ w[OC,IC]^T (+ bias[OC] when bias != NULL). */
void op_matmul_fwd(float *out, const float *inp, const float *w, const float *bias, int N, int IC,
                   int OC);
/* dinp[N,IC] += dout @ w ; dw[OC,IC] += dout^T @ inp ; dbias[OC] += sum_rows(dout). */
void op_matmul_bwd(float *dinp, float *dw, float *dbias, const float *dout, const float *inp,
                   const float *w, int N, int IC, int OC);

/* QK-norm: RMSNorm of every q head with qw[hd] and every k head with kw[hd]; v copied through.
 * out, inp: [B*T, (NH+2*NKV)*hd]; rstd: [B*T, NH+NKV]. */
void op_qknorm_fwd(float *out, float *rstd, const float *inp, const float *qw, const float *kw,
                   int N, int NH, int NKV, int hd, float eps);
void op_qknorm_bwd(float *dinp, float *dqw, float *dkw, const float *dout, const float *inp,
                   const float *qw, const float *kw, const float *rstd, int N, int NH, int NKV,
                   int hd);

/* Rotary embedding (Hugging Face Llama "rotate_half" convention: dims i and i + hd/2 form a pair,
 * angle = t * theta^(-2i/hd)) on the q and k heads; v copied through. Out of place.
 * out, inp: [B, T, (NH+2*NKV)*hd]; hd must be even; t is the position within the sequence. */
void op_rope_fwd(float *out, const float *inp, int B, int T, int NH, int NKV, int hd, float theta);
/* dinp += R^T dout (the rotation is linear, nothing is saved). */
void op_rope_bwd(float *dinp, const float *dout, int B, int T, int NH, int NKV, int hd,
                 float theta);
/* v2126: angles from positions[b,t] (each token's position in its document) instead of t;
 * positions NULL: t. */
void op_rope_fwd_pos(float *out, const float *inp, const int32_t *positions, int B, int T, int NH,
                     int NKV, int hd, float theta);
void op_rope_bwd_pos(float *dinp, const float *dout, const int32_t *positions, int B, int T,
                     int NH, int NKV, int hd, float theta);

/* Naive causal attention (the baseline: materializes [B,NH,T,T]). scale = 1/sqrt(hd).
 * Query head h reads key/value head h / (NH/NKV) (grouped-query attention).
 * qkv: [B,T,(NH+2*NKV)*hd]; out: [B,T,NH*hd]; att: [B,NH,T,T] softmax probabilities, saved. */
void op_attention_fwd(float *out, float *att, const float *qkv, int B, int T, int NH, int NKV,
                      int hd);
/* datt: [B,NH,T,T] scratch (overwritten, not accumulated; on return it holds
 * d loss / d score, 0 above the diagonal). dqkv accumulated. */
void op_attention_bwd(float *dqkv, float *datt, const float *dout, const float *qkv,
                      const float *att, int B, int T, int NH, int NKV, int hd);
/* v2126 document masking: query t of row b sees only the keys [t - positions[b,t], t] — its own
 * document (positions: each token's position in its document, 0 at a document start; NULL =
 * plain causal). att is exactly 0 outside, so no gradient crosses a document. */
/* scale: the score scale (a plan's attention attr `scale`, e.g. muP's 1/hd); 0 = 1/sqrt(hd). */
void op_attention_fwd_doc(float *out, float *att, const float *qkv, const int32_t *positions,
                          int B, int T, int NH, int NKV, int hd, float scale);
void op_attention_bwd_doc(float *dqkv, float *datt, const float *dout, const float *qkv,
                          const float *att, const int32_t *positions, int B, int T, int NH,
                          int NKV, int hd, float scale);

/* v2117 flex attention (core/attn_mod.h): the same ops with a mask rule (causal, sliding_window,
 * prefix_lm; ANDed with the v2126 document mask when positions is given) and a score modifier
 * (softcap, alibi), forward and backward. mod NULL or plain: exactly op_attention_*_doc. Otherwise
 * a direct evaluation of the definition (ops_attn_mod.c: every visible score, softmax, sum; the
 * backward recomputes the scores for softcap's derivative): the reference of the flash op. */
struct hyp_attn_mod_s;
void op_attention_fwd_mod(float *out, float *att, const float *qkv, const int32_t *positions,
                          int B, int T, int NH, int NKV, int hd, float scale,
                          const struct hyp_attn_mod_s *mod);
void op_attention_bwd_mod(float *dqkv, float *datt, const float *dout, const float *qkv,
                          const float *att, const int32_t *positions, int B, int T, int NH,
                          int NKV, int hd, float scale, const struct hyp_attn_mod_s *mod);

/* GELU, tanh approximation (GPT-2). */
void op_gelu_fwd(float *out, const float *inp, long n);
void op_gelu_bwd(float *dinp, const float *inp, const float *dout, long n);

/* SwiGLU: inp [N, 2H] = [gate | up]; out [N, H] = silu(gate) * up. */
void op_swiglu_fwd(float *out, const float *inp, int N, int H);
void op_swiglu_bwd(float *dinp, const float *dout, const float *inp, int N, int H);

/* out = a + b (the residual add). Its backward is two op_accumulate calls. */
void op_add_fwd(float *out, const float *a, const float *b, long n);
/* dst += src. */
void op_accumulate(float *dst, const float *src, long n);
/* The weighted residual (DeepNorm's x_{l+1} = LN(alpha x + f(x))): out = alpha a + b, and its
 * backward's fan-in dst += alpha src. */
void op_add_scaled_fwd(float *out, const float *a, const float *b, float alpha, long n);
void op_accumulate_scaled(float *dst, const float *src, float alpha, long n);
/* dst = 0. */
void op_zero(float *dst, long n);
/* v2102: out = in rounded to bf16 (round to nearest even; NaN stays a quiet NaN), kept in fp32. */
void op_round_bf16(float *out, const float *in, long n);
/* out = float(fp16(in)): IEEE binary16 round to nearest even, overflow to inf, fp16 subnormals (v2162); out may be
 * in; adds to *flushed the nonzero inputs that became zero (fp16 underflow) and to *nonzero the nonzero inputs */
void op_round_fp16(float *out, const float *in, long n, long long *flushed, long long *nonzero);

/* Cross-entropy over logits [N, Vp] whose first V columns are valid; targets < 0 are ignored
 * (loss 0, no gradient). losses[N] = logsumexp(row) - row[target]. Never stores probabilities.
 * A target >= V is a data error: its loss is NaN (the mean loss shows it) and its gradient 0. */
void op_crossentropy_fwd(float *losses, const float *logits, const int32_t *targets, int N, int V,
                         int Vp);
/* Fused classifier for training: writes losses[N] and, IN PLACE, logits := dloss * (softmax - onehot)
 * (columns V..Vp-1 set to 0; ignored rows set to 0). One pass over each row after the max/sum. */
void op_crossentropy_fused(float *losses, float *logits, const int32_t *targets, float dloss,
                           int N, int V, int Vp);

/* Sum of squares in double (for the global gradient norm). */
double op_sumsq(const float *x, long n);
/* x *= s */
void op_scale(float *x, float s, long n);

#include "numerics.h" /* op_mean_loss, shared with the device executor */

#endif
