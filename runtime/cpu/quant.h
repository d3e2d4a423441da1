/* quant.h — integer quantization on the cpu backend: the fake quantization of quantization-aware
 * training (plan op fake_quant: round to `bits`-bit integers with one absmax scale per group of
 * columns, dequantize again) and the int8 GEMMs of int8 training (plan ops int8_matmul_fwd and
 * int8_matmul_dgrad: symmetric int8 operands with per-row or per-tensor absmax scales, an exact
 * int32 product through oneDNN's s8 x s8 -> s32 GEMM, dequantized with the product of the scales).
 *
 * The arithmetic is specified here so that the device kernels (templates/quant.cu.lua) reproduce
 * it bit for bit:
 *   fake_quant:  qmax = 2^(bits-1) - 1; per group: s = amax / qmax (fp32 division);
 *                q = clamp(rne(x / s), -qmax - 1, qmax); out = (float)q * s  (s == 0: out = 0;
 *                q is an integer, so a zero is +0)
 *   int8 operand: s = amax / 127 over a row (or the whole tensor); q = clamp(rne(x / s), -127, 127)
 *                (s == 0: q = 0); amax ignores NaN (fmaxf)
 *   dequantize:  out = fmaf((float)acc, sa * sb, bias or 0); accumulating: fmaf(acc, sa * sb, out)
 * where rne is round to nearest even and acc the exact int32 dot product.
 *
 * Never: exit() or a message on stderr (a oneDNN or allocation failure is recorded with
 * op_cpu_fail and reported by op_cpu_check); a heap allocation per call once the largest shape
 * has been seen (the int8 scratch grows and is kept). Not thread-safe: one executor thread calls
 * it (oneDNN and OpenMP parallelize inside). */
#ifndef HYP_QUANT_H
#define HYP_QUANT_H

#include <stdint.h>

/* out[r, :] = fake-quantized in[r, :] for rows r < rows of C columns, groups of `group`
 * consecutive columns (the last one may be shorter; group <= 0 or >= C: one group per row).
 * out may be in. bits in [2, 16]. */
void op_fake_quant(float *out, const float *in, long rows, int C, int bits, int group);

/* q[r, :] = int8 of x[r, :] for rows x cols; scale[r] (rowwise) or scale[0] (per tensor). */
void quant_s8(int8_t *q, float *scale, const float *x, long rows, int cols, int rowwise);

/* C[M,N] = A[M,K] · op(B) in int32, exact: B is [N,K] (tb = 1, used transposed) or [K,N].
 * oneDNN's dnnl_gemm_s8s8s32 where the CPU has AVX512-VNNI; elsewhere a plain C loop (oneDNN's
 * older s8 kernels sum pairs of products in saturating 16-bit lanes, which is not exact). */
void gemm_s8s8s32(const char *where, int M, int N, int K, const int8_t *A, const int8_t *B, int tb, int32_t *C);

/* out[N,OC] = dequant(Q(x)[N,IC] · Q(w)[OC,IC]^T) + bias (bias may be NULL): x per row (rowwise)
 * or per tensor, w per tensor. */
void op_int8_matmul_fwd(float *out, const float *x, const float *w, const float *bias, int N, int IC, int OC,
                        int rowwise);
/* dx[N,IC] += dequant(Q(dout)[N,OC] · Q(w)[OC,IC]): dout per row (rowwise) or per tensor. */
void op_int8_matmul_dgrad(float *dx, const float *dout, const float *w, int N, int IC, int OC, int rowwise);

#endif
