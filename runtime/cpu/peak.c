/* peak.c — this machine's fp32 FMA peak (peak.h): independent FMA chains per OpenMP thread, enough
 * to cover the FMA latency times the FMA ports, so the loop runs at the core's FMA throughput.
 * The cpu trainer divides its model FLOP/s by this (train_main.c), not by a figure measured on
 * another machine. */
/* -std=c11 implies -ffp-contract=off in gcc: a*b+c must be one FMA here. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("O3,fp-contract=fast") /* also in Debug builds: registers, not memory */
#elif defined(__clang__)
#pragma clang fp contract(fast)
#endif

#include "peak.h"

#include <omp.h>
#include <time.h>

#if defined(__AVX512F__)
#define PEAK_W 16
#define PEAK_CONSTRAINT "+v"
#else
#define PEAK_W 8
#define PEAK_CONSTRAINT "+x"
#endif
typedef float vec __attribute__((vector_size(PEAK_W * 4)));
#define PEAK_ACC 12

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* This thread's CPU time: a round is timed by it, so time the OS gave another process (the cores
 * of this VM are shared) does not count against the core's peak. */
static double cpu_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* One thread's FLOP/s over iters iterations, over its own CPU time. */
static double thread_round(long iters) {
    vec acc[PEAK_ACC], m, a;
    for (int l = 0; l < PEAK_W; l++) m[l] = 1.0000001f, a[l] = 1e-7f;
    for (int k = 0; k < PEAK_ACC; k++) acc[k] = m * (float)k;
    double t0 = cpu_s();
    for (long it = 0; it < iters; it++) {
        for (int k = 0; k < PEAK_ACC; k++) acc[k] = acc[k] * m + a;
        __asm__ volatile("" : PEAK_CONSTRAINT(m)); /* keep the loop from being folded */
    }
    double dt = cpu_s() - t0;
    float sink = 0.0f;
    for (int k = 0; k < PEAK_ACC; k++)
        for (int l = 0; l < PEAK_W; l++) sink += acc[k][l];
    volatile float keep = sink;
    (void)keep;
    return 2.0 * PEAK_W * PEAK_ACC * (double)iters / (dt > 0 ? dt : 1e-9);
}

/* All threads run FMA rounds at once (as the trainer's GEMMs do: shared clocks, power) for about
 * `seconds`; each keeps its best round, timed by its own CPU time (~1 ms rounds), so a core shared
 * with another process costs wall time, not the figure; the sum of the threads' bests is the peak
 * of the cores the run uses. */
double hyp_cpu_fma_peak(int nthreads, double seconds, int *width) {
    if (nthreads < 1) nthreads = 1;
    if (seconds <= 0) seconds = 0.08;
    double total = 0;
#pragma omp parallel num_threads(nthreads) reduction(+ : total)
    {
        long iters = 1024;
        double best = 0, t0 = now_s();
        for (;;) { /* size a round to >= 1 ms */
            double r0 = cpu_s(), f = thread_round(iters);
            if (f > best) best = f;
            if (cpu_s() - r0 >= 1e-3 || iters > (1L << 30)) break;
            iters *= 2;
        }
        while (now_s() - t0 < seconds) {
            double f = thread_round(iters);
            if (f > best) best = f;
        }
        total += best;
    }
    if (width) *width = PEAK_W;
    return total;
}
