/* gemm_bf16.h — bf16 storage on the cpu backend (v2102 mixed precision): the bf16 <-> f32
 * conversions (round to nearest even, NaN kept a quiet NaN, exactly like op_round_bf16) and the
 * bf16 GEMM through oneDNN's matmul primitive (bf16 inputs, fp32 accumulation, an fp32 or bf16
 * output, optionally accumulated into). On a CPU with AVX512-BF16 oneDNN runs it on the bf16 dot
 * product instructions (vdpbf16ps), about twice the fp32 sgemm's rate on the trainer's shapes.
 *
 * Never: a heap allocation per call once a shape has been seen (primitives are cached by shape),
 * exit() (a oneDNN failure is recorded and reported by gemm_bf16_check). Not thread-safe: one
 * executor thread calls it (oneDNN runs its own OpenMP team inside). */
#ifndef HYP_GEMM_BF16_H
#define HYP_GEMM_BF16_H

#include <stdint.h>

#include "dtype.h"
#include "hyp_err.h"

/* dst[i] = bf16(src[i]), round to nearest even; NaN stays a (quiet) NaN, overflow gives inf. */
void cpu_f32_to_bf16(uint16_t *dst, const float *src, long n);
/* dst[i] = src[i] widened (exact). */
void cpu_bf16_to_f32(float *dst, const uint16_t *src, long n);
/* The same for one value. */
static inline float cpu_bf16_val(uint16_t b) {
    union { uint32_t u; float f; } v = {(uint32_t)b << 16};
    return v.f;
}
static inline uint16_t cpu_bf16_of(float f) {
    union { float f; uint32_t u; } v = {f};
    uint32_t u = v.u;
    if ((u & 0x7f800000u) == 0x7f800000u && (u & 0x007fffffu)) return (uint16_t)((u | 0x00400000u) >> 16);
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

/* Row-major C[M,N] = op(A)[M,K] @ op(B)[K,N] (+ bias[N] when bias != NULL; + C when accumulate).
 * A, B: bf16; ta = 0: A is [M,K] with row stride lda, ta = 1: A is stored [K,M] (row stride lda)
 * and used transposed; the same for B (tb, ldb). C: f32 or bf16 (ct), row stride ldc; the sum is
 * fp32 and C is rounded once (bf16). bias: f32. `where` names the caller in a failure. */
void gemm_bf16(const char *where, int ta, int tb, int M, int N, int K, const uint16_t *A, int lda, const uint16_t *B,
               int ldb, void *C, hyp_dtype ct, int ldc, int accumulate, const float *bias);

/* HYP_OK, or HYP_EFAIL with the first oneDNN failure since the last call (then clears it). */
int gemm_bf16_check(hyp_err *e);

/* This machine's bf16 GEMM peak in FLOP/s: the best of oneDNN bf16 matmuls of a 1536^3 shape
 * on the current OpenMP threads over about `seconds`, each timed by the process's CPU time over
 * the thread count (the bf16 counterpart of peak.c's fp32 FMA loop; MFU of a bf16 trainer is
 * reported against it). An achieved rate, not the instruction peak: MFU against it is an upper
 * estimate of the instruction-level figure. 0 on failure. */
double gemm_bf16_peak(double seconds);

#endif
