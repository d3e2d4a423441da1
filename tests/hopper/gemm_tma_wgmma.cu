// tests/hopper/gemm_tma_wgmma.cu — the Hopper pattern FA3 builds on, as a small bf16 GEMM
// C[M][N] (fp32) = A[M][K] * B[K][N], A and B row-major bf16 in global memory, read through TMA
// tensor maps (any M, N, K: the maps' out-of-bounds zero fill covers the edges; K*2 and N*2 must be
// multiples of 16 bytes, the tensor map's stride rule).
//
// One block per 64 x 128 tile of C, 256 threads in two warpgroups:
//   producer (warpgroup 0, setmaxnreg.dec 40): thread 0 streams K in 64-wide steps through a
//     2-stage ring: waits until the consumer released stage s (mbarrier `empty[s]`), then
//     arrive.expect_tx(full[s], bytes) and three TMA loads into stage s: the A box (64 rows x 64 k,
//     128-byte rows, 128B swizzle) and the B boxes (64 k-rows x 64 n, two of them for the 128 n).
//   consumer (warpgroup 1, setmaxnreg.inc 232): waits on full[s] (phase parity (kt / 2) & 1), then
//     four wgmma m64n128k16 per stage: A K-major from its descriptor (start + 32 bytes per k-step,
//     SBO 1024 = eight 128-byte rows), B N-major (transposed: the V operand of FA3's P·V) from its
//     descriptor (start + 2048 bytes per k-step = 16 rows, LBO 8192 = the second 64-column box,
//     SBO 1024), commit, wait_group 0, and arrive on empty[s]; at the end it stores its fragments
//     (row 16w + g (+8), column 8i + 2t (+1)) with bounds checks.
// Valid CUDA for sm_90a (test_hopper_nvrtc_v2114 compiles it); test_hopper_sim_v2114 runs it.
#include "hyp/hopper.cuh"
#if defined(HYP_SIM) && !defined(__launch_bounds__) // as rendered kernels do: a no-op on the CPU
#define __launch_bounds__(...)
#endif

#define BM 64
#define BN 128
#define BK 64
#define STAGES 2
#define A_BYTES (BM * BK * 2)
#define B_BYTES (BK * BN * 2)

// __launch_bounds__ is required: without it ptxas ignores setmaxnreg (C7508)
extern "C" __global__ void __launch_bounds__(256, 1) gemm_tma_wgmma(float* C, const __grid_constant__ hyp_tmap mapA,
                                                                 const __grid_constant__ hyp_tmap mapB, int M,
                                                                 int N, int K) {
    extern __shared__ __align__(1024) unsigned char smem[]; // STAGES x (A tile, B tile), 1024-aligned
    __shared__ __align__(8) unsigned long long full[STAGES], empty[STAGES];
    const int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN, KT = (K + BK - 1) / BK;
    if (threadIdx.x == 0) {
        for (int s = 0; s < STAGES; s++) {
            hyp_mbar_init(&full[s], 1);
            hyp_mbar_init(&empty[s], 128);
        }
        hyp_fence_mbar_init();
    }
    __syncthreads();
    if (threadIdx.x < 128) { // producer warpgroup
        hyp_setmaxnreg_dec<40>();
        if (threadIdx.x == 0) {
            for (int kt = 0; kt < KT; kt++) {
                const int s = kt % STAGES;
                hyp_mbar_wait(&empty[s], ((kt / STAGES) & 1) ^ 1); // the first round passes at once
                unsigned char* a = smem + s * (A_BYTES + B_BYTES);
                unsigned char* b = a + A_BYTES;
                hyp_mbar_arrive_expect_tx(&full[s], A_BYTES + B_BYTES);
                hyp_tma_load_2d(a, &mapA, kt * BK, m0, &full[s]);
                hyp_tma_load_2d(b, &mapB, n0, kt * BK, &full[s]);
                hyp_tma_load_2d(b + B_BYTES / 2, &mapB, n0 + 64, kt * BK, &full[s]);
            }
        }
        return;
    }
    hyp_setmaxnreg_inc<232>(); // consumer warpgroup
    float acc[BN / 2];
    for (int i = 0; i < BN / 2; i++) acc[i] = 0.0f;
    for (int kt = 0; kt < KT; kt++) {
        const int s = kt % STAGES;
        hyp_mbar_wait(&full[s], (kt / STAGES) & 1);
        unsigned char* a = smem + s * (A_BYTES + B_BYTES);
        unsigned char* b = a + A_BYTES;
        hyp_wgmma_fence();
        for (int kk = 0; kk < BK / 16; kk++) {
            unsigned long long da = hyp_wgmma_desc(a + kk * 32, HYP_SWZ_128B, 16, 1024);
            unsigned long long db = hyp_wgmma_desc(b + kk * 2048, HYP_SWZ_128B, B_BYTES / 2, 1024);
            hyp_wgmma_ss<BN, 0, 1>(acc, da, db, true);
        }
        hyp_wgmma_commit();
        hyp_wgmma_wait<0>();
        hyp_mbar_arrive(&empty[s]);
    }
    const int t = threadIdx.x - 128, w = t / 32, g = (t % 32) >> 2, q = t & 3;
    for (int v = 0; v < BN / 2; v++) {
        const int row = m0 + 16 * w + g + 8 * ((v >> 1) & 1), col = n0 + 8 * (v >> 2) + 2 * q + (v & 1);
        if (row < M && col < N) C[(long)row * N + col] = acc[v];
    }
}

#ifdef HYP_SIM
extern "C" void hyp_sim_entry_gemm_tma_wgmma(void** args) {
    gemm_tma_wgmma(*(float**)args[0], *(const hyp_tmap*)args[1], *(const hyp_tmap*)args[2], *(int*)args[3],
                   *(int*)args[4], *(int*)args[5]);
}
#endif
