/* bench_gemm.c — fp32 GEMM throughput on the gpt2-124m training shapes, oneDNN vs OpenBLAS.
 *
 * Why: every nn.Linear of the CPU trainer is one forward GEMM and two backward GEMMs
 * (op_matmul_fwd / op_matmul_bwd in runtime/ops_cpu.c), ~90% of a training step's FLOPs. This
 * measures the library we chose (oneDNN's dnnl_sgemm, linked into hyp_runtime) against OpenBLAS
 * (cblas_sgemm, loaded here with dlopen so that OpenBLAS never becomes a dependency of the
 * runtime), and the machine's fp32 FMA peak, to show how far from the roof the GEMMs are.
 *
 * Shapes: N = B*T rows for (B,T) = (4,64) and (8,256); (IC, OC) = the qkv, attention proj, MLP
 * up, MLP down and lm-head (vocab padded to 50304) linears. For each:
 *   fwd    out[N,OC]  = inp[N,IC] @ w[OC,IC]^T      M=N  Ncol=OC K=IC  ('N','T')
 *   bwd_dx dinp[N,IC] += dout[N,OC] @ w[OC,IC]     M=N  Ncol=IC K=OC  ('N','N')
 *   bwd_dw dw[OC,IC]  += dout[N,OC]^T @ inp[N,IC]  M=OC Ncol=IC K=N   ('T','N')
 * Each GEMM runs once to warm up, then --reps times (default 5); we print the median (p50).
 * Output: CSV on stdout (lib,pass,B,T,N,IC,OC,M,Ncol,K,p50_ms,gflops), one line per case, then the
 * FMA peak lines. Threads: OMP_NUM_THREADS for oneDNN (OpenMP), the same count for OpenBLAS.
 *
 * Usage: bench_gemm [--reps R] [--quick] [--no-openblas]
 *   --quick: only the (4,64) shapes.
 */
/* -std=c11 implies -ffp-contract=off in gcc: without this a*b+c in the FMA-peak loop would be a
 * separate multiply and add. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("fp-contract=fast")
#elif defined(__clang__)
#pragma clang fp contract(fast)
#endif

#include <dlfcn.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <oneapi/dnnl/dnnl.h>

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* ---- OpenBLAS through dlopen (CBLAS enum values from cblas.h; blasint is int in the LP64
 * build Debian ships) */
enum { CblasRowMajor = 101, CblasNoTrans = 111, CblasTrans = 112 };
typedef void (*cblas_sgemm_fn)(int order, int ta, int tb, int M, int N, int K, float alpha,
                               const float *A, int lda, const float *B, int ldb, float beta,
                               float *C, int ldc);
typedef void (*openblas_set_threads_fn)(int);
static cblas_sgemm_fn p_cblas_sgemm;

static int load_openblas(int nthreads) {
    const char *names[] = {"libopenblas.so.0", "libopenblas.so", "libopenblasp.so.0"};
    void *h = NULL;
    for (size_t i = 0; i < sizeof names / sizeof names[0] && !h; i++)
        h = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
    if (!h) return -1;
    p_cblas_sgemm = (cblas_sgemm_fn)dlsym(h, "cblas_sgemm");
    openblas_set_threads_fn set = (openblas_set_threads_fn)dlsym(h, "openblas_set_num_threads");
    if (!p_cblas_sgemm) return -1;
    if (set) set(nthreads);
    return 0;
}

/* ---- one GEMM case */
typedef struct {
    const char *pass;
    char ta, tb;
    long M, N, K, lda, ldb, ldc;
    float beta;
} gemm_case;

typedef enum { LIB_DNNL, LIB_OPENBLAS } lib_t;

static int run_gemm(lib_t lib, const gemm_case *g, const float *A, const float *B, float *C) {
    if (lib == LIB_DNNL) {
        dnnl_status_t st = dnnl_sgemm(g->ta, g->tb, g->M, g->N, g->K, 1.0f, A, g->lda, B, g->ldb,
                                      g->beta, C, g->ldc);
        return st == dnnl_success ? 0 : -1;
    }
    p_cblas_sgemm(CblasRowMajor, g->ta == 'T' ? CblasTrans : CblasNoTrans,
                  g->tb == 'T' ? CblasTrans : CblasNoTrans, (int)g->M, (int)g->N, (int)g->K, 1.0f,
                  A, (int)g->lda, B, (int)g->ldb, g->beta, C, (int)g->ldc);
    return 0;
}

/* median milliseconds of reps runs (after one warm-up), or -1 on failure */
static double time_gemm(lib_t lib, const gemm_case *g, const float *A, const float *B, float *C,
                        int reps) {
    double t[64];
    if (reps > 64) reps = 64;
    if (run_gemm(lib, g, A, B, C) != 0) return -1;
    for (int r = 0; r < reps; r++) {
        double t0 = now_s();
        run_gemm(lib, g, A, B, C);
        t[r] = (now_s() - t0) * 1e3;
    }
    qsort(t, (size_t)reps, sizeof t[0], cmp_double);
    return reps % 2 ? t[reps / 2] : 0.5 * (t[reps / 2 - 1] + t[reps / 2]);
}

/* ---- fp32 FMA peak: independent accumulator chains (enough to cover FMA latency x ports),
 * vector extensions of 8 and 16 floats (AVX2 / AVX-512 width when compiled -march=native). */
typedef float v8 __attribute__((vector_size(32)));
typedef float v16 __attribute__((vector_size(64)));
#define PEAK_ACC 12
#define PEAK_ITERS 20000000L

static double fma_peak_v8(int nthreads) {
    double t0 = now_s();
    float sink = 0.0f;
#pragma omp parallel num_threads(nthreads) reduction(+ : sink)
    {
        v8 acc[PEAK_ACC], m = {1.0000001f, 1.0000001f, 1.0000001f, 1.0000001f, 1.0000001f,
                               1.0000001f, 1.0000001f, 1.0000001f};
        v8 a = m * 1e-7f;
        for (int k = 0; k < PEAK_ACC; k++) acc[k] = m * (float)k;
        for (long it = 0; it < PEAK_ITERS; it++) {
            for (int k = 0; k < PEAK_ACC; k++) acc[k] = acc[k] * m + a;
            __asm__ volatile("" : "+x"(m)); /* keep the loop from being folded */
        }
        for (int k = 0; k < PEAK_ACC; k++)
            for (int l = 0; l < 8; l++) sink += acc[k][l];
    }
    double dt = now_s() - t0;
    if (sink == 12345.0f) printf("#");
    return 2.0 * 8 * PEAK_ACC * (double)PEAK_ITERS * nthreads / dt * 1e-9;
}

static double fma_peak_v16(int nthreads) {
    double t0 = now_s();
    float sink = 0.0f;
#pragma omp parallel num_threads(nthreads) reduction(+ : sink)
    {
        v16 acc[PEAK_ACC], m, a;
        for (int l = 0; l < 16; l++) { m[l] = 1.0000001f; a[l] = 1e-7f; }
        for (int k = 0; k < PEAK_ACC; k++) acc[k] = m * (float)k;
        for (long it = 0; it < PEAK_ITERS; it++) {
            for (int k = 0; k < PEAK_ACC; k++) acc[k] = acc[k] * m + a;
#if defined(__AVX512F__)
            __asm__ volatile("" : "+v"(m));
#else
            __asm__ volatile("" : "+x"(m[0])); /* no 512-bit registers: the vector lives in two */
#endif
        }
        for (int k = 0; k < PEAK_ACC; k++)
            for (int l = 0; l < 16; l++) sink += acc[k][l];
    }
    double dt = now_s() - t0;
    if (sink == 12345.0f) printf("#");
    return 2.0 * 16 * PEAK_ACC * (double)PEAK_ITERS * nthreads / dt * 1e-9;
}

int main(int argc, char **argv) {
    int reps = 5, quick = 0, use_openblas = 1;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--reps") && i + 1 < argc) reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--quick")) quick = 1;
        else if (!strcmp(argv[i], "--no-openblas")) use_openblas = 0;
        else {
            fprintf(stderr, "usage: %s [--reps R] [--quick] [--no-openblas]\n", argv[0]);
            return 2;
        }
    }
    if (reps < 1) reps = 1;
    int nthreads = omp_get_max_threads();
    if (use_openblas && load_openblas(nthreads) != 0) {
        fprintf(stderr, "bench_gemm: libopenblas not found (dlopen), OpenBLAS rows skipped\n");
        use_openblas = 0;
    }
    const char *ct = getenv("OPENBLAS_CORETYPE");
    printf("# threads=%d reps=%d OPENBLAS_CORETYPE=%s\n", nthreads, reps, ct ? ct : "(unset)");

    const int BT[2][2] = {{4, 64}, {8, 256}};
    const int shapes[5][2] = {{768, 2304}, {768, 768}, {768, 3072}, {3072, 768}, {768, 50304}};
    const char *shape_names[5] = {"qkv", "attproj", "fc", "fcproj", "lmhead"};

    /* largest buffers: N=2048 rows x 50304 (lm-head activations) and 50304 x 768 weights */
    long maxN = quick ? 256 : 2048, maxBig = 50304L * 768;
    long nA = maxN * 50304 > maxBig ? maxN * 50304 : maxBig;
    float *A = malloc((size_t)nA * sizeof(float));
    float *Bm = malloc((size_t)nA * sizeof(float));
    float *C = malloc((size_t)nA * sizeof(float));
    if (!A || !Bm || !C) {
        fprintf(stderr, "bench_gemm: out of memory — needs ~%.1f GB\n", 3.0 * nA * 4 / 1e9);
        return 1;
    }
    for (long i = 0; i < nA; i++) {
        A[i] = (float)((i * 2654435761u) % 1000) * 1e-3f - 0.5f;
        Bm[i] = (float)((i * 40503u) % 1000) * 1e-3f - 0.5f;
        C[i] = 0.0f;
    }

    printf("lib,pass,linear,B,T,N,IC,OC,M,Ncol,K,p50_ms,gflops\n");
    double sum_flops[2] = {0, 0}, sum_ms[2] = {0, 0};
    for (int lib = 0; lib < (use_openblas ? 2 : 1); lib++) {
        for (int bt = 0; bt < (quick ? 1 : 2); bt++) {
            long N = (long)BT[bt][0] * BT[bt][1];
            for (int s = 0; s < 5; s++) {
                long IC = shapes[s][0], OC = shapes[s][1];
                gemm_case cases[3] = {
                    {"fwd", 'N', 'T', N, OC, IC, IC, IC, OC, 0.0f},
                    {"bwd_dx", 'N', 'N', N, IC, OC, OC, IC, IC, 1.0f},
                    {"bwd_dw", 'T', 'N', OC, IC, N, OC, IC, IC, 1.0f},
                };
                for (int c = 0; c < 3; c++) {
                    double ms = time_gemm((lib_t)lib, &cases[c], A, Bm, C, reps);
                    double fl = 2.0 * cases[c].M * cases[c].N * cases[c].K;
                    if (ms > 0) {
                        sum_flops[lib] += fl;
                        sum_ms[lib] += ms;
                    }
                    printf("%s,%s,%s,%d,%d,%ld,%ld,%ld,%ld,%ld,%ld,%.3f,%.1f\n",
                           lib == LIB_DNNL ? "onednn" : "openblas", cases[c].pass, shape_names[s],
                           BT[bt][0], BT[bt][1], N, IC, OC, cases[c].M, cases[c].N, cases[c].K, ms,
                           ms > 0 ? fl / (ms * 1e-3) * 1e-9 : 0.0);
                    fflush(stdout);
                }
            }
        }
    }
    for (int lib = 0; lib < (use_openblas ? 2 : 1); lib++)
        printf("# %s: all cases together %.1f GFLOP in %.1f ms = %.1f GFLOP/s\n",
               lib == 0 ? "onednn" : "openblas", sum_flops[lib] * 1e-9, sum_ms[lib],
               sum_flops[lib] / (sum_ms[lib] * 1e-3) * 1e-9);
    printf("# fp32 FMA peak (12 independent chains), GFLOP/s: 8-wide %.1f (1 thread) %.1f (%d "
           "threads); 16-wide %.1f (1 thread) %.1f (%d threads)\n",
           fma_peak_v8(1), fma_peak_v8(nthreads), nthreads, fma_peak_v16(1),
           fma_peak_v16(nthreads), nthreads);
    free(A);
    free(Bm);
    free(C);
    return 0;
}
