/* bench_gemm_bf16.c — oneDNN bf16 matmul (runtime/cpu/gemm_bf16.c, the v2102 cpu GEMM) against
 * the fp32 sgemm on the gpt2-124m training shapes at B=8, T=256 (N = 2048 rows), side by side in
 * one run: fwd out = inp @ w^T, bwd_dx dinp += dout @ w, bwd_dw dw += dout^T @ inp, for the qkv,
 * attention proj, MLP up, MLP down and lm-head linears; then the bf16 peak (gemm_bf16_peak).
 * CSV on stdout: pass,IC,OC,fp32_ms,bf16_ms,fp32_gflops,bf16_gflops,speedup. Threads:
 * OMP_NUM_THREADS. Usage: bench_gemm_bf16 [--reps R] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <oneapi/dnnl/dnnl.h>

#include "gemm_bf16.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int main(int argc, char **argv) {
    int reps = 3;
    for (int i = 1; i + 1 < argc; i++)
        if (!strcmp(argv[i], "--reps")) reps = atoi(argv[++i]);
    const int N = 2048, shapes[5][2] = {{768, 2304}, {768, 768}, {768, 3072}, {3072, 768}, {768, 50304}};
    size_t maxe = (size_t)N * 50304;
    float *a = malloc(maxe * 4), *b = malloc(maxe * 4), *c = malloc(maxe * 4);
    uint16_t *ah = malloc(maxe * 2), *bh = malloc(maxe * 2), *ch = malloc(maxe * 2);
    if (!a || !b || !c || !ah || !bh || !ch) return 1;
    for (size_t i = 0; i < maxe; i++) a[i] = b[i] = (float)(i % 13) * 0.01f;
    cpu_f32_to_bf16(ah, a, (long)maxe), cpu_f32_to_bf16(bh, b, (long)maxe);
    printf("pass,IC,OC,fp32_ms,bf16_ms,fp32_gflops,bf16_gflops,speedup\n");
    double t32 = 0, t16 = 0;
    for (int s = 0; s < 5; s++)
        for (int pass = 0; pass < 3; pass++) {
            int IC = shapes[s][0], OC = shapes[s][1];
            double best32 = 1e9, best16 = 1e9;
            for (int r = 0; r <= reps; r++) {
                double t0 = now_s();
                if (pass == 0) dnnl_sgemm('N', 'T', N, OC, IC, 1, a, IC, b, IC, 0, c, OC);
                else if (pass == 1) dnnl_sgemm('N', 'N', N, IC, OC, 1, a, OC, b, IC, 1, c, IC);
                else dnnl_sgemm('T', 'N', OC, IC, N, 1, a, OC, b, IC, 1, c, IC);
                double t1 = now_s();
                if (pass == 0) gemm_bf16("fwd", 0, 1, N, OC, IC, ah, IC, bh, IC, ch, HYP_DT_BF16, OC, 0, NULL);
                else if (pass == 1) gemm_bf16("dx", 0, 0, N, IC, OC, ah, OC, bh, IC, ch, HYP_DT_BF16, IC, 1, NULL);
                else gemm_bf16("dw", 1, 0, OC, IC, N, ah, OC, bh, IC, c, HYP_DT_F32, IC, 1, NULL);
                double t2 = now_s();
                if (r) {
                    if (t1 - t0 < best32) best32 = t1 - t0;
                    if (t2 - t1 < best16) best16 = t2 - t1;
                }
            }
            double fl = 2.0 * N * IC * OC;
            t32 += best32, t16 += best16;
            printf("%s,%d,%d,%.2f,%.2f,%.0f,%.0f,%.2f\n", pass == 0 ? "fwd" : pass == 1 ? "bwd_dx" : "bwd_dw", IC, OC,
                   best32 * 1e3, best16 * 1e3, fl / best32 / 1e9, fl / best16 / 1e9, best32 / best16);
        }
    hyp_err e;
    int rc = gemm_bf16_check(&e);
    printf("all shapes: fp32 %.1f ms, bf16 %.1f ms, speedup %.2f%s%s\n", t32 * 1e3, t16 * 1e3, t32 / t16, rc ? " FAILED: " : "",
           rc ? e.msg : "");
    printf("bf16 peak (oneDNN %dx%d matmul, best of 1 s): %.0f GFLOP/s\n", 1536, 1536, gemm_bf16_peak(1.0) / 1e9);
    return rc ? 1 : 0;
}
