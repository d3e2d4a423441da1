/* test_hopper_dev_v2114.c — the TMA path through the device layer (device.h tensor_map and
 * hyp_kargs_tmap) on the sim device: the demonstration GEMM of tests/hopper/gemm_tma_wgmma.cu
 * (producer TMA + 2-stage mbarrier ring, consumer wgmma) launched with two encoded tensor maps as
 * kernel arguments equals a double-precision reference within the fp32 summation bound on an odd
 * shape; tensor_map refuses a tensor overrunning its block and a box wider than the swizzle span;
 * a launch set with more tensor maps than HYP_KARGS_TMAP_MAX is refused. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "device.h"

#include "hyp_test.h"

static uint64_t g_seed = 42;
static float rnd1(void) { /* in [-1, 1] */
    g_seed = g_seed * 6364136223846793005ULL + 1442695040888963407ULL;
    return (float)((int)((g_seed >> 33) % 2001) - 1000) / 1000.0f;
}

int main(void) {
    char cache[1024], path[1024];
    snprintf(cache, sizeof cache, "%s/sim-cache", HYP_BINARY_DIR);
    setenv("HYP_SIM_CACHE", cache, 0);
    hyp_err e;
    hyp_device *d;
    if (hyp_device_open("sim", &d, &e)) {
        printf("FAIL sim device: %s\n", e.msg);
        return 1;
    }
    const int M = 100, N = 136, K = 72;
    uint16_t *hA = malloc((size_t)M * K * 2), *hB = malloc((size_t)K * N * 2);
    float *hC = malloc((size_t)M * N * 4);
    for (int i = 0; i < M * K; i++) hA[i] = hyp_bf16_from_f32(rnd1());
    for (int i = 0; i < K * N; i++) hB[i] = hyp_bf16_from_f32(rnd1());
    void *A, *B, *C;
    int rc = d->mem_alloc(d, &A, (size_t)M * K * 2, &e) || d->mem_alloc(d, &B, (size_t)K * N * 2, &e) ||
             d->mem_alloc(d, &C, (size_t)M * N * 4, &e) || d->h2d_sync(d, A, hA, (size_t)M * K * 2, &e) ||
             d->h2d_sync(d, B, hB, (size_t)K * N * 2, &e);
    CHECK(!rc, "device buffers%s%s", rc ? ": " : "", rc ? e.msg : "");
    unsigned char mapA[128] __attribute__((aligned(64))), mapB[128] __attribute__((aligned(64)));
    uint64_t dA[2] = {K, M}, sA[1] = {K * 2}, dB[2] = {N, K}, sB[1] = {N * 2};
    uint32_t box[2] = {64, 64};
    rc = d->tensor_map(d, mapA, HYP_DT_BF16, 2, A, dA, sA, box, 3, &e) || d->tensor_map(d, mapB, HYP_DT_BF16, 2, B, dB, sB, box, 3, &e);
    CHECK(!rc, "test_v2114_tensor_map encodes A and B (bf16, 64x64 boxes, 128B swizzle)%s%s", rc ? ": " : "", rc ? e.msg : "");
    uint64_t dBig[2] = {N, K + 1};
    rc = d->tensor_map(d, mapB, HYP_DT_BF16, 2, B, dBig, sB, box, 3, &e);
    CHECK(rc == HYP_EINPUT && strstr(e.msg, "overrun"), "test_v2114_tensor_map refuses a tensor one row past its block (%s)", e.msg);
    uint32_t wide[2] = {128, 8};
    unsigned char scratch[128] __attribute__((aligned(64)));
    rc = d->tensor_map(d, scratch, HYP_DT_BF16, 2, B, dB, sB, wide, 3, &e);
    CHECK(rc == HYP_EINPUT && strstr(e.msg, "swizzle span"), "test_v2114_tensor_map refuses a 256-byte box row under the 128B swizzle (%s)", e.msg);
    hyp_kargs many = {0};
    for (int i = 0; i <= HYP_KARGS_TMAP_MAX; i++) hyp_kargs_tmap(&many, mapA);
    CHECK(many.n < 0, "hyp_kargs_tmap: more than %d tensor maps mark the set invalid", HYP_KARGS_TMAP_MAX);

    snprintf(path, sizeof path, "%s/tests/hopper/gemm_tma_wgmma.cu", HYP_SOURCE_DIR);
    hyp_module *m = NULL;
    rc = d->module_load(d, path, &m, &e);
    CHECK(!rc, "module gemm_tma_wgmma.cu loads%s%s", rc ? ": " : "", rc ? e.msg : "");
    if (!rc) {
        hyp_kargs a = {0};
        hyp_kargs_ptr(&a, C);
        hyp_kargs_tmap(&a, mapA);
        hyp_kargs_tmap(&a, mapB);
        hyp_kargs_i32(&a, M);
        hyp_kargs_i32(&a, N);
        hyp_kargs_i32(&a, K);
        rc = d->launch(d, m, "gemm_tma_wgmma", HYP_DIM3((N + 127) / 128, (M + 63) / 64, 1), HYP_DIM3(256, 1, 1),
                       2 * (64 * 64 * 2 + 64 * 128 * 2), &a, NULL, &e) ||
             d->d2h(d, hC, C, (size_t)M * N * 4, NULL, &e) || d->synchronize(d, &e);
        int ok = !rc;
        double worst = 0;
        for (int i = 0; i < M && ok; i++)
            for (int j = 0; j < N; j++) {
                double s = 0, mag = 0;
                for (int k = 0; k < K; k++) {
                    double t = (double)hyp_bf16_to_f32(hA[i * K + k]) * hyp_bf16_to_f32(hB[k * N + j]);
                    s += t;
                    mag += fabs(t);
                }
                double err = fabs((double)hC[i * N + j] - s);
                /* fp32 accumulation of K exact bf16 products: |err| <= K * 2^-24 * sum|terms| */
                if (!(err <= K * ldexp(1.0, -24) * mag)) ok = 0;
                if (err > worst || isnan(err)) worst = isnan(err) ? INFINITY : err;
            }
        CHECK(ok, "test_v2114_gemm_tma_wgmma through the sim device (tensor maps as kernel arguments), %dx%dx%d, "
              "within K * 2^-24 * sum|terms| (max |diff| %.3g)%s%s", M, N, K, worst, rc ? ": " : "", rc ? e.msg : "");
        d->module_unload(d, m);
    }
    d->mem_free(d, A, &e);
    d->mem_free(d, B, &e);
    d->mem_free(d, C, &e);
    d->close(d);
    free(hA);
    free(hB);
    free(hC);
    printf("%d passed, %d failed\n", g_pass, g_fail);
    return g_fail ? 1 : 0;
}
