/* bench_gemm_int8.c — the v2159 int8 GEMMs of the cpu backend (runtime/cpu/quant.c) against the
 * fp32 sgemm and the oneDNN bf16 matmul (gemm_bf16.c) on the gpt2-124m layer shapes at B=8,
 * T=256 (N = 2048 rows), side by side in one run: fwd out = inp @ w^T and bwd_dx dinp += dout @ w
 * (the two GEMMs v2159 runs in int8) for the qkv, attention proj, MLP up and MLP down linears.
 * int8 is timed twice: the bare s8 x s8 -> s32 GEMM (dnnl_gemm_s8s8s32, operands already int8)
 * and the whole op (per-row / per-tensor quantization of both operands, GEMM, dequantizing
 * epilogue: what a training step pays). CSV on stdout:
 * pass,IC,OC,fp32_ms,bf16_ms,s8gemm_ms,int8op_ms,s8gemm_vs_bf16,int8op_vs_bf16,int8op_vs_fp32.
 * Threads: OMP_NUM_THREADS. Usage: bench_gemm_int8 [--reps R] */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <oneapi/dnnl/dnnl.h>

#include "gemm_bf16.h"
#include "ops_cpu.h"
#include "quant.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int main(int argc, char **argv) {
    int reps = 3;
    for (int i = 1; i + 1 < argc; i++)
        if (!strcmp(argv[i], "--reps")) reps = atoi(argv[++i]);
    const int N = 2048, shapes[4][2] = {{768, 2304}, {768, 768}, {768, 3072}, {3072, 768}};
    size_t maxe = (size_t)N * 3072;
    float *a = malloc(maxe * 4), *b = malloc(maxe * 4), *c = malloc(maxe * 4);
    uint16_t *ah = malloc(maxe * 2), *bh = malloc(maxe * 2), *ch = malloc(maxe * 2);
    int8_t *aq = malloc(maxe), *bq = malloc(maxe);
    int32_t *ci = malloc(maxe * 4);
    if (!a || !b || !c || !ah || !bh || !ch || !aq || !bq || !ci) return 1;
    for (size_t i = 0; i < maxe; i++) {
        a[i] = (float)((int)(i % 13) - 6) * 0.01f;
        b[i] = (float)((int)(i % 7) - 3) * 0.02f;
        aq[i] = (int8_t)((int)(i % 255) - 127), bq[i] = (int8_t)((int)(i % 201) - 100);
    }
    cpu_f32_to_bf16(ah, a, (long)maxe), cpu_f32_to_bf16(bh, b, (long)maxe);
    printf("pass,IC,OC,fp32_ms,bf16_ms,s8gemm_ms,int8op_ms,s8gemm_vs_bf16,int8op_vs_bf16,int8op_vs_fp32\n");
    double tt[4] = {0};
    for (int s = 0; s < 4; s++)
        for (int pass = 0; pass < 2; pass++) {
            int IC = shapes[s][0], OC = shapes[s][1];
            double best[4] = {1e9, 1e9, 1e9, 1e9};
            for (int r = 0; r <= reps; r++) {
                double t[5];
                t[0] = now_s();
                if (pass == 0) dnnl_sgemm('N', 'T', N, OC, IC, 1, a, IC, b, IC, 0, c, OC);
                else dnnl_sgemm('N', 'N', N, IC, OC, 1, a, OC, b, IC, 1, c, IC);
                t[1] = now_s();
                if (pass == 0) gemm_bf16("fwd", 0, 1, N, OC, IC, ah, IC, bh, IC, ch, HYP_DT_BF16, OC, 0, NULL);
                else gemm_bf16("dx", 0, 0, N, IC, OC, ah, OC, bh, IC, ch, HYP_DT_BF16, IC, 1, NULL);
                t[2] = now_s();
                if (pass == 0) gemm_s8s8s32("fwd", N, OC, IC, aq, bq, 1, ci);
                else gemm_s8s8s32("dx", N, IC, OC, aq, bq, 0, ci);
                t[3] = now_s();
                if (pass == 0) op_int8_matmul_fwd(c, a, b, NULL, N, IC, OC, 1);
                else op_int8_matmul_dgrad(c, a, b, N, IC, OC, 1);
                t[4] = now_s();
                for (int k = 0; r && k < 4; k++)
                    if (t[k + 1] - t[k] < best[k]) best[k] = t[k + 1] - t[k];
            }
            for (int k = 0; k < 4; k++) tt[k] += best[k];
            printf("%s,%d,%d,%.2f,%.2f,%.2f,%.2f,%.2f,%.2f,%.2f\n", pass == 0 ? "fwd" : "bwd_dx", IC, OC, best[0] * 1e3,
                   best[1] * 1e3, best[2] * 1e3, best[3] * 1e3, best[1] / best[2], best[1] / best[3], best[0] / best[3]);
        }
    hyp_err e;
    int rc = op_cpu_check(&e);
    if (!rc) rc = gemm_bf16_check(&e);
    printf("all shapes: fp32 %.1f ms, bf16 %.1f ms, s8 gemm %.1f ms, int8 op %.1f ms; s8 gemm vs bf16 %.2fx, int8 op vs bf16 %.2fx, int8 op vs fp32 %.2fx%s%s\n",
           tt[0] * 1e3, tt[1] * 1e3, tt[2] * 1e3, tt[3] * 1e3, tt[1] / tt[2], tt[1] / tt[3], tt[0] / tt[3], rc ? " FAILED: " : "",
           rc ? e.msg : "");
    return rc ? 1 : 0;
}
