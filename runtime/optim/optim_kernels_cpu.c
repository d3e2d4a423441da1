/* optim_kernels_cpu.c — the cpu kernels of the optimizers: one AdamW step over a contiguous tensor
 * (every optimizer that grafts or falls back to AdamW calls it) and Muon's Newton–Schulz
 * orthogonalization. Pure numerics over host arrays; they never touch a plan or a backend. */
#include "optim_kernels_cpu.h"

#include "ops_cpu.h"

#include <math.h>
#include <string.h>

#define HYP_PAR_MIN 32768L /* below this many elements a parallel region costs more than it saves */


void op_adamw(float *p, const float *g, float *m, float *v, long n, float lr, float beta1,
              float beta2, float eps, float wd, int t, float grad_scale) {
    float bc1 = (float)(1.0 - pow((double)beta1, (double)t)); // bias corrections
    float bc2 = (float)(1.0 - pow((double)beta2, (double)t));
    float ibc1 = 1.0f / bc1, ibc2 = 1.0f / bc2;
    // (sqrtf keeps this loop scalar: with math-errno, the default, neither gcc nor clang
    // vectorizes it. AdamW is ~2% of a gpt2-124m step, so we leave it.)
#pragma omp parallel for schedule(static) if (n >= HYP_PAR_MIN)
    for (long i = 0; i < n; i++) {
        float gi = g[i] * grad_scale;
        float mi = beta1 * m[i] + (1.0f - beta1) * gi;
        float vi = beta2 * v[i] + (1.0f - beta2) * gi * gi;
        m[i] = mi;
        v[i] = vi;
        float mhat = mi * ibc1, vhat = vi * ibc2;
        p[i] -= lr * (mhat / (sqrtf(vhat) + eps) + wd * p[i]);
    }
}

void op_newton_schulz5(float *out, const float *G, long R, long K, int steps, float a, float b, float c,
                       float *work) {
    int tr = R > K;
    long r = tr ? K : R, k = tr ? R : K;
    float *X = work, *Y = work + r * k, *A = work + 2 * r * k, *Bm = A + r * r;
    if (tr) {
        for (long i = 0; i < R; i++)
            for (long j = 0; j < K; j++) X[j * R + i] = G[i * K + j];
    } else {
        memcpy(X, G, sizeof(float) * (size_t)(r * k));
    }
    double ss = 0;
    for (long i = 0; i < r * k; i++) ss += (double)X[i] * X[i];
    float inv = 1.0f / ((float)sqrt(ss) + 1e-7f);
    for (long i = 0; i < r * k; i++) X[i] *= inv;
    for (int s = 0; s < steps; s++) {
        op_sgemm("newton_schulz A = X X^T", 'N', 'T', r, r, k, 1.0f, X, k, X, k, 0.0f, A, r);
        for (long i = 0; i < r * r; i++) Bm[i] = b * A[i];
        op_sgemm("newton_schulz B = bA + cAA", 'N', 'N', r, r, r, c, A, r, A, r, 1.0f, Bm, r);
        for (long i = 0; i < r * k; i++) Y[i] = a * X[i];
        op_sgemm("newton_schulz X = aX + BX", 'N', 'N', r, k, r, 1.0f, Bm, r, X, k, 1.0f, Y, k);
        float *t = X;
        X = Y;
        Y = t;
    }
    if (tr) {
        for (long i = 0; i < R; i++)
            for (long j = 0; j < K; j++) out[i * K + j] = X[j * R + i];
    } else {
        memcpy(out, X, sizeof(float) * (size_t)(r * k));
    }
}
