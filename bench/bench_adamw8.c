/* bench_adamw8.c — the cpu optimizer step's time per parameter: fp32-state AdamW (op_adamw) vs the
 * 8-bit block-wise states of v2132 q8 (hyp_adamw8_tensor: dequantize, update, absmax, nearest-code
 * requantize by binary search), on one tensor of N floats (default 16M), best of R repeats; run
 * with OMP_NUM_THREADS to choose the threads. Never part of ctest (timings are not tests).
 * Usage: build/bench/bench_adamw8 [N] [R] */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "optim_adamw8.h"
#include "optim_kernels_cpu.h"

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 16L << 20;
    int reps = argc > 2 ? atoi(argv[2]) : 5;
    if (n < 1 || reps < 1) {
        fprintf(stderr, "bench_adamw8: N and R must be positive — usage: bench_adamw8 [N] [R]\n");
        return 2;
    }
    int64_t sf = hyp_q8_state_floats(n);
    float *p = malloc(sizeof(float) * (size_t)n), *g = malloc(sizeof(float) * (size_t)n);
    float *m = calloc((size_t)n, sizeof(float)), *v = calloc((size_t)n, sizeof(float));
    float *qm = calloc((size_t)sf, sizeof(float)), *qv = calloc((size_t)sf, sizeof(float));
    if (!p || !g || !m || !v || !qm || !qv) {
        fprintf(stderr, "bench_adamw8: out of memory for N = %ld — choose a smaller N\n", n);
        return 2;
    }
    srand(1);
    for (long i = 0; i < n; i++) p[i] = 0.02f * ((float)rand() / (float)RAND_MAX - 0.5f), g[i] = (float)rand() / (float)RAND_MAX - 0.5f;
    double best32 = 1e30, best8 = 1e30;
    for (int r = 0; r < reps; r++) {
        double t0 = now();
        op_adamw(p, g, m, v, n, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, r + 1, 1.0f);
        double t1 = now();
        hyp_adamw8_tensor(p, g, qm, qv, n, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, r + 1, 1.0f);
        double t2 = now();
        if (t1 - t0 < best32) best32 = t1 - t0;
        if (t2 - t1 < best8) best8 = t2 - t1;
    }
    printf("N %ld, best of %d: fp32 states %.2f ns/param (%.0f MB of state), q8 states %.2f ns/param (%.0f MB): %.2fx the time, %.2fx less state\n",
           n, reps, 1e9 * best32 / (double)n, 8e-6 * (double)n, 1e9 * best8 / (double)n, 8e-6 * (double)sf,
           best8 / best32, (double)n / (double)sf);
    free(p), free(g), free(m), free(v), free(qm), free(qv);
    return 0;
}
