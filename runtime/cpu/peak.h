/* peak.h — this machine's fp32 FMA peak, measured: the denominator of the cpu trainer's MFU.
 * A short loop of independent FMA chains (AVX-512 when compiled for it, else 8-wide AVX2 vectors)
 * on every OpenMP thread; the same idea as bench/bench_gemm.c's peak lines, sized to ~seconds.
 * Never: the FLOP count of the model (generator/lua/formulas.lua, carried by the plan). */
#ifndef HYP_PEAK_H
#define HYP_PEAK_H

/* fp32 FLOP/s of nthreads threads running FMAs for about `seconds` (best of a few rounds, after a
 * warm-up round); *width the vector width in floats (16 or 8). Returns > 0. */
double hyp_cpu_fma_peak(int nthreads, double seconds, int *width);

#endif
