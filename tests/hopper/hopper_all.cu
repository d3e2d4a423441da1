/* tests/hopper/hopper_all.cu — one kernel that calls every wrapper of kernels/hyp/hopper.cuh, for
 * test_hopper_nvrtc_v2114.sh: NVRTC must compile it for sm_90a with zero spills and emit the real
 * instructions. It is never run (its numbers mean nothing); it must stay free of sim-only code.
 */
#include "hyp/hopper.cuh"
extern "C" __global__ void __launch_bounds__(384) hopper_all(float *out, const __grid_constant__ hyp_tmap ma, const __grid_constant__ hyp_tmap mb3) {
    extern __shared__ __align__(1024) unsigned char smem[];
    __shared__ unsigned long long bar[2];
    hyp_bf16 *As = (hyp_bf16 *)smem, *Bs = (hyp_bf16 *)(smem + 16384);
    int wg = threadIdx.x / 128;
    if (threadIdx.x == 0) { hyp_mbar_init(&bar[0], 1); hyp_mbar_init(&bar[1], 256); hyp_fence_mbar_init(); }
    __syncthreads();
    if (wg == 0) {
        hyp_setmaxnreg_dec<40>();
        if (threadIdx.x == 0) {
            hyp_mbar_arrive_expect_tx(&bar[0], 16384);
            hyp_mbar_expect_tx(&bar[0], 16384);
            hyp_tma_load_2d(As, &ma, 0, blockIdx.x * 64, &bar[0]);
            hyp_tma_load_3d(Bs, &mb3, 0, 0, blockIdx.y, &bar[0]);
        }
        hyp_mbar_wait(&bar[1], 0);
        if (threadIdx.x == 0) {
            hyp_tma_store_2d(&ma, 0, blockIdx.x * 64, As);
            hyp_tma_store_3d(&mb3, 0, 0, blockIdx.y, Bs);
            hyp_tma_store_commit();
            hyp_tma_store_wait<0>();
        }
    } else {
        hyp_setmaxnreg_inc<232>();
        hyp_mbar_wait(&bar[0], 0);
        float acc[64], acc2[32], acc3[4];
        for (int i = 0; i < 64; i++) acc[i] = 0.f;
        for (int i = 0; i < 32; i++) acc2[i] = 0.f;
        for (int i = 0; i < 4; i++) acc3[i] = 0.f;
        unsigned long long da = hyp_wgmma_desc(As, HYP_SWZ_128B, 16, 1024);
        unsigned long long db = hyp_wgmma_desc(Bs, HYP_SWZ_128B, 16, 1024);
        unsigned long long dn = hyp_wgmma_desc(Bs, HYP_SWZ_NONE, 128, 256);
        hyp_wgmma_fence_operand(acc, 64);
        hyp_wgmma_fence();
        for (int k = 0; k < 4; k++) hyp_wgmma_ss<128, 0, 0>(acc, da + 2 * k, db + 2 * k, k > 0);
        hyp_wgmma_ss<64, 1, 1>(acc2, da, db, false);
        hyp_wgmma_ss<8, 0, 1>(acc3, da, dn, true);
        unsigned a[4] = {threadIdx.x, threadIdx.x * 3u, 7u, 9u};
        hyp_wgmma_rs<64, 1>(acc2, a, db, true);
        hyp_wgmma_rs<16, 0>(acc, a, db, true);
        hyp_wgmma_commit();
        hyp_wgmma_wait<0>();
        hyp_wgmma_fence_operand(acc, 64);
        hyp_named_bar_sync(1 + wg, 128);
        if (wg == 1) hyp_named_bar_arrive(3, 256); else hyp_named_bar_sync(3, 256);
        hyp_fence_proxy_async();
        hyp_mbar_arrive(&bar[1]);
        float s = 0.f;
        for (int i = 0; i < 64; i++) s += acc[i];
        for (int i = 0; i < 32; i++) s += acc2[i];
        for (int i = 0; i < 4; i++) s += acc3[i];
        out[blockIdx.x * 384 + threadIdx.x] = s + (hyp_mbar_try_wait(&bar[0], 1) ? 1.f : 0.f);
    }
}
