/* fma_peak.c — a second, independent measurement of this machine's fp32 FMA peak for
 * tests/gen/test_mfu.sh (the trainer's own is runtime/cpu/peak.c): fma_peak THREADS SECONDS
 * prints GFLOP/s. Eight chains of 8-wide vectors (AVX2 width, which AVX-512 machines run at
 * least as fast per instruction), one long run per thread timed by the thread's CPU time,
 * scaled to the widest vector the compiler targets. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("O3,fp-contract=fast")
#elif defined(__clang__)
#pragma clang fp contract(fast)
#endif
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#if defined(__AVX512F__)
#define W 16
#else
#define W 8
#endif
typedef float vec __attribute__((vector_size(W * 4)));
#define NACC 10

static double cpu_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 1;
    double secs = argc > 2 ? atof(argv[2]) : 0.3, total = 0;
    if (n < 1) n = 1;
#pragma omp parallel num_threads(n) reduction(+ : total)
    {
        vec acc[NACC], m, a;
        for (int l = 0; l < W; l++) m[l] = 0.9999999f, a[l] = 1e-6f;
        for (int k = 0; k < NACC; k++) acc[k] = m * (float)(k + 1);
        long iters = 0, chunk = 100000;
        double t0 = cpu_s(), dt = 0;
        while (dt < secs) {
            for (long it = 0; it < chunk; it++) {
                for (int k = 0; k < NACC; k++) acc[k] = acc[k] * m + a;
                __asm__ volatile("" : "+x"(m));
            }
            iters += chunk;
            dt = cpu_s() - t0;
        }
        float s = 0;
        for (int k = 0; k < NACC; k++)
            for (int l = 0; l < W; l++) s += acc[k][l];
        if (s == 12345.0f) printf("#");
        total += 2.0 * W * NACC * (double)iters / dt;
    }
    printf("%.1f\n", total * 1e-9);
    return 0;
}
