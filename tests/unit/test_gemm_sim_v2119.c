/* test_gemm_sim_v2119.c — v2119, the project's own tensor-core GEMM: templates/gemm.cu.lua
 * rendered by `gen render` with four tile/pipeline/epilogue/prologue choices runs under the CPU
 * simulator (exact mma.m16n8k16, ldmatrix and cp.async emulation: a wrong fragment index, a stale
 * pipeline stage or a missing zero-fill gives wrong numbers) and matches a cpu reference:
 * D[M,N] = epilogue(A[M,K] B[N,K]^T) summed in fp64 over the same bf16 inputs (op_matmul_fwd's
 * layout: B is the weight [out, in]), on regular and odd shapes — 128x128x64, 77x50x40, 1x8x16,
 * 130x72x200 and 33x24x37 (K % 8 != 0: the plain-load path instead of cp.async).
 *
 * Tolerance, per element (a rigorous bound, not a fit; docs/test-tolerances.md E1/E5/E6):
 *   the products a*b of two bf16 are exact in fp32 (8+8 significant bits) and in the fp64
 *   reference, so the only difference is the kernel's fp32 summation of K terms (the simulator's
 *   mma rounds each accumulation to fp32, in the PTX order): |err| <= (K+2) u S, u = 2^-24,
 *   S = sum_k |a_k b_k| (Higham's gamma_K, one-sided because fp64 holds the sum to 2^-53).
 *   bias: one more fp32 rounding, u (|v| + |bias|). GELU (tanh form as x*sigmoid(2z)): the
 *   derivative is at most 1.13, so the pre-activation error passes through times 1.13, plus the
 *   fp32 evaluation: expf within 2 ulp of its argument 2z, which carries ~4 roundings, so the
 *   sigmoid is off by <= 8 u (1 + |2z|) relative, times |x|. RMSNorm prologue: the scaled operand
 *   bf16(a * gain) is formed by the same fp32 multiply and bf16 rounding on both sides (bit-
 *   identical: no FMA can contract a lone multiply), the rstd row scale adds one rounding u |v|.
 *   AUX (the pre-activation stored beside gelu's output): the bias bound, before GELU.
 *   bf16 output (and its bias, which has D's type): round to nearest with 8 significant bits, <= 2^-8 relative of the value on top of
 *   the fp32 error.
 *   A dropped k-term, a wrong row/column or a missing zero-fill moves an element by ~|a b| ~ S/K,
 *   which for K <= 200 is > 1e4 times the bound.
 *
 * SwiGLU epilogue (EPILOGUE=swiglu): B is the fused [gate | up] weight [2H, K], D [M, H] =
 *   silu(gate) * up, aux [M, 2H] = h = [gate | up] (swiglu_bwd's input); the same shapes with
 *   H = N/2 (odd H = 25 checks a block whose gate/up halves run past H). gate and up each carry the
 *   GEMM bound e = (K+2) u S above (with the rstd rounding under rmsnorm); under bf16 output the
 *   kernel rounds them to bf16 before the SwiGLU (as swiglu_fwd reads the stored h), adding
 *   2^-8 (|x| + e). silu's derivative is at most 1.0998 (at x ~ 2.40), so
 *   |a - a_ref| <= 1.1 e_g (|up| + e_u) + |silu(gate)| e_u, plus the fp32 evaluation of
 *   g * (1/(1 + expf(-g))) * u: expf within 2 ulp and four roundings, <= 8 u relative of |a|;
 *   then the bf16 store of a, 2^-8 relative. A gate paired with the wrong up column (or a missed
 *   one) moves a by ~|silu(g)| |u - u'| ~ S/K-scale, > 1e3 times the bound.
 *
 * Needs g++ (the simulator's compiler); the rendered files are compiled once through its cache.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gemm_bf16.h"
#include "sim.h"

#include "hyp_test.h"

#include "sim_kernel_test.h"

typedef struct {
    const char *tag, *consts;
    int epilogue; /* 0 none, 1 bias, 2 bias_gelu, 3 swiglu */
    int rmsnorm, out_bf16, aux;
} variant_t;

static double gelu_d(double x) { return 0.5 * x * (1.0 + tanh(0.7978845608028654 * (x + 0.044715 * x * x * x))); }

/* One shape of one rendered variant against the fp64 reference with the per-element bound. */
static void gemm_case(mod_t *md, const variant_t *v, int M, int N, int K) {
    const double u = 1.0 / 16777216.0;
    uint16_t *A = zalloc((size_t)M * K * 2), *B = zalloc((size_t)N * K * 2);
    for (long i = 0; i < (long)M * K; i++) A[i] = cpu_bf16_of(frand());
    for (long i = 0; i < (long)N * K; i++) B[i] = cpu_bf16_of(frand());
    float *bias = frandbuf(N, 1.0f), *rstd = fbuf(M), *gain = fbuf(K);
    uint16_t *bias16 = zalloc((size_t)N * 2); /* OUT bf16: the bias has D's type (cuBLASLt's rule) */
    for (int n = 0; n < N; n++) bias16[n] = cpu_bf16_of(bias[n]), bias[n] = v->out_bf16 ? cpu_bf16_val(bias16[n]) : bias[n];
    for (int m = 0; m < M; m++) rstd[m] = 0.5f + 0.5f * (frand() + 1.0f); /* [0.5, 1.5) */
    for (int k = 0; k < K; k++) gain[k] = 1.0f + 0.5f * frand();          /* [0.5, 1.5) */
    const int osz = v->out_bf16 ? 2 : 4;
    unsigned char *D = zalloc((size_t)M * N * osz);
    float *aux = fbuf((long)M * N);
    memset(D, 0xff, (size_t)M * N * osz); /* NaN everywhere: an element never written fails */
    memset(aux, 0xff, (size_t)M * N * 4);
    const long smem = rendered_const("gemm", v->tag, "SMEM"), TM = rendered_const("gemm", v->tag, "TILE_M"),
               TN = rendered_const("gemm", v->tag, "TILE_N"), BLK = rendered_const("gemm", v->tag, "BLOCK");
    void *bp = v->epilogue ? (v->out_bf16 ? (void *)bias16 : (void *)bias) : NULL;
    float *rp = v->rmsnorm ? rstd : NULL, *gp = v->rmsnorm ? gain : NULL, *xp = v->aux ? aux : NULL;
    void *args[] = {&D, &xp, &A, &B, &bp, &rp, &gp, &M, &N, &K};
    launch_smem(md, "gemm_bf16", cdiv(N, TN), cdiv(M, TM), 1, (unsigned)BLK, (size_t)smem, args);

    long bad = 0, first = -1;
    double worst = 0.0, got_first = 0, want_first = 0;
    for (int m = 0; m < M; m++)
        for (int n = 0; n < N; n++) {
            double s = 0.0, S = 0.0;
            for (int k = 0; k < K; k++) {
                float a = cpu_bf16_val(A[(long)m * K + k]);
                if (v->rmsnorm) a = cpu_bf16_val(cpu_bf16_of(a * gain[k]));
                const double p = (double)a * cpu_bf16_val(B[(long)n * K + k]);
                s += p;
                S += fabs(p);
            }
            double tol = (K + 2) * u * S, x = s;
            if (v->rmsnorm) {
                x *= rstd[m];
                tol = tol * rstd[m] + u * fabs(x);
            }
            if (v->epilogue >= 1) {
                tol += u * (fabs(x) + fabs(bias[n]));
                x += bias[n];
            }
            double want = x;
            const long i = (long)m * N + n;
            if (v->aux && !(fabs(aux[i] - x) <= tol)) { /* the pre-activation, before GELU */
                if (first < 0) first = i, got_first = aux[i], want_first = x;
                bad++;
            }
            if (v->epilogue == 2) {
                const double z = 0.7978845608028654 * (x + 0.044715 * x * x * x);
                tol = 1.13 * tol + 8 * u * (1 + fabs(2 * z)) * fabs(x);
                want = gelu_d(x);
            }
            if (v->out_bf16) tol += 0x1p-8 * (fabs(want) + tol);
            const double got = v->out_bf16 ? cpu_bf16_val(((uint16_t *)D)[i]) : ((float *)D)[i];
            const double d = fabs(got - want);
            if (!(d <= tol)) {
                if (first < 0) first = i, got_first = got, want_first = want;
                bad++;
            } else if (d / (tol > 0 ? tol : 1) > worst) {
                worst = d / (tol > 0 ? tol : 1);
            }
        }
    char nm[256];
    NAME(nm, "test_v2119_gemm_sim[%s] %dx%dx%d", v->tag, M, N, K);
    if (bad)
        check(0, nm, "%ld of %ld beyond the bound; first [%ld] (row %ld col %ld): got %.9g want %.9g", bad, (long)M * N,
              first, first / N, first % N, got_first, want_first);
    else
        check(1, nm, "largest |err| / bound %.3f", worst);
}

static double silu_d(double g) { return g / (1.0 + exp(-g)); }

/* One shape of a SwiGLU variant (v->epilogue 3): B [2H, K] = [gate | up] rows, D [M, H], aux [M, 2H]. */
static void swiglu_case(mod_t *md, const variant_t *v, int M, int H, int K) {
    const double u = 1.0 / 16777216.0;
    int N = 2 * H;
    uint16_t *A = zalloc((size_t)M * K * 2), *B = zalloc((size_t)N * K * 2);
    for (long i = 0; i < (long)M * K; i++) A[i] = cpu_bf16_of(frand());
    for (long i = 0; i < (long)N * K; i++) B[i] = cpu_bf16_of(frand());
    float *rstd = fbuf(M), *gain = fbuf(K);
    for (int m = 0; m < M; m++) rstd[m] = 0.5f + 0.5f * (frand() + 1.0f);
    for (int k = 0; k < K; k++) gain[k] = 1.0f + 0.5f * frand();
    const int osz = v->out_bf16 ? 2 : 4;
    unsigned char *D = zalloc((size_t)M * H * osz), *aux = zalloc((size_t)M * N * osz);
    memset(D, 0xff, (size_t)M * H * osz); /* NaN everywhere: an element never written fails */
    memset(aux, 0xff, (size_t)M * N * osz);
    const long smem = rendered_const("gemm", v->tag, "SMEM"), TM = rendered_const("gemm", v->tag, "TILE_M"),
               TN = rendered_const("gemm", v->tag, "TILE_N"), BLK = rendered_const("gemm", v->tag, "BLOCK");
    void *bp = NULL, *xp = v->aux ? (void *)aux : NULL;
    float *rp = v->rmsnorm ? rstd : NULL, *gp = v->rmsnorm ? gain : NULL;
    void *args[] = {&D, &xp, &A, &B, &bp, &rp, &gp, &M, &N, &K};
    launch_smem(md, "gemm_bf16", cdiv(N, TN), cdiv(M, TM), 1, (unsigned)BLK, (size_t)smem, args);

#define SW_GOT(buf, i) (v->out_bf16 ? cpu_bf16_val(((uint16_t *)(buf))[i]) : ((float *)(buf))[i])
    long bad = 0, first = -1;
    double worst = 0.0, got_first = 0, want_first = 0;
    for (int m = 0; m < M; m++)
        for (int j = 0; j < H; j++) {
            double x[2], e[2];
            for (int h = 0; h < 2; h++) { /* h 0: gate (B row j), 1: up (B row H + j) */
                double s = 0.0, S = 0.0;
                for (int k = 0; k < K; k++) {
                    float a = cpu_bf16_val(A[(long)m * K + k]);
                    if (v->rmsnorm) a = cpu_bf16_val(cpu_bf16_of(a * gain[k]));
                    const double p = (double)a * cpu_bf16_val(B[((long)j + h * H) * K + k]);
                    s += p;
                    S += fabs(p);
                }
                e[h] = (K + 2) * u * S;
                if (v->rmsnorm) s *= rstd[m], e[h] = e[h] * rstd[m] + u * fabs(s);
                if (v->out_bf16) e[h] += 0x1p-8 * (fabs(s) + e[h]);
                x[h] = s;
                if (v->aux) {
                    const long i = (long)m * N + j + h * H;
                    const double got = SW_GOT(aux, i);
                    if (!(fabs(got - s) <= e[h])) {
                        if (first < 0) first = i, got_first = got, want_first = s;
                        bad++;
                    }
                }
            }
            const double want = silu_d(x[0]) * x[1];
            double tol = 1.1 * e[0] * (fabs(x[1]) + e[1]) + fabs(silu_d(x[0])) * e[1];
            tol += 8 * u * (fabs(want) + tol);
            if (v->out_bf16) tol += 0x1p-8 * (fabs(want) + tol);
            const long i = (long)m * H + j;
            const double got = SW_GOT(D, i), d = fabs(got - want);
            if (!(d <= tol)) {
                if (first < 0) first = i, got_first = got, want_first = want;
                bad++;
            } else if (d / (tol > 0 ? tol : 1) > worst) {
                worst = d / (tol > 0 ? tol : 1);
            }
        }
#undef SW_GOT
    char nm[256];
    NAME(nm, "test_v2119_gemm_sim[%s] %dx%dx%d", v->tag, M, N, K);
    if (bad)
        check(0, nm, "%ld beyond the bound (D and aux); first [%ld]: got %.9g want %.9g", bad, first, got_first, want_first);
    else
        check(1, nm, "largest |err| / bound %.3f", worst);
}

int main(void) {
    snprintf(g_tmp, sizeof g_tmp, "%s/tests/gemm_sim", HYP_BINARY_DIR);
    char mk[400];
    snprintf(mk, sizeof mk, "mkdir -p '%s'", g_tmp);
    if (system(mk) != 0) return 1;
    static const variant_t variants[] = {
        {"default", "EPILOGUE=none OUT=f32", 0, 0, 0, 0}, /* 128x128x32, 3 stages, 2x2 warps */
        {"bias_bf16", "TILE_M=64 TILE_N=64 TILE_K=32 STAGES=2 WARPS_M=2 WARPS_N=2 EPILOGUE=bias OUT=bf16", 1, 0, 1, 0},
        {"gelu_aux", "TILE_M=64 TILE_N=128 TILE_K=64 STAGES=4 WARPS_M=1 WARPS_N=4 EPILOGUE=bias_gelu AUX=true", 2, 0, 0, 1},
        {"rms_gelu", "TILE_M=32 TILE_N=64 TILE_K=16 STAGES=5 WARPS_M=2 WARPS_N=2 PROLOGUE=rmsnorm EPILOGUE=bias_gelu", 2, 1, 0, 0},
        {"swiglu_bf16", "TILE_M=64 TILE_N=64 TILE_K=32 STAGES=3 WARPS_M=2 WARPS_N=2 EPILOGUE=swiglu AUX=true OUT=bf16", 3, 0, 1, 1},
        {"swiglu_rms", "TILE_M=32 TILE_N=128 TILE_K=16 STAGES=2 WARPS_M=1 WARPS_N=4 PROLOGUE=rmsnorm EPILOGUE=swiglu", 3, 1, 0, 0},
    };
    static const int shapes[][3] = {{128, 128, 64}, {77, 50, 40}, {1, 8, 16}, {130, 72, 200}, {33, 24, 37}};
    for (size_t vi = 0; vi < sizeof variants / sizeof variants[0]; vi++) {
        mod_t md;
        if (open_family(&md, "gemm", variants[vi].consts, variants[vi].tag)) continue;
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
            if (variants[vi].epilogue == 3)
                swiglu_case(&md, &variants[vi], shapes[s][0], shapes[s][1] / 2, shapes[s][2]);
            else
                gemm_case(&md, &variants[vi], shapes[s][0], shapes[s][1], shapes[s][2]);
        close_family(&md);
        free_all();
    }
    return hyp_test_finish();
}
