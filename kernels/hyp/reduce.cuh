/* hyp/reduce.cuh — warp and block reductions (sum, max) for generated kernels; NVRTC and sim.
 *
 * hyp_warp_sum/max: butterfly over a full warp (every lane gets the result); every lane of the
 * warp must call it. hyp_warp_sum_width: within aligned groups of `width` lanes (a power of two).
 * hyp_block_sum/max: every thread of the block must call them (they hold two __syncthreads);
 * every thread gets the same value, summed in the same order, so results are deterministic.
 * They handle blocks that are not a multiple of 32 threads (the last warp's missing lanes are
 * left out of the mask) and may be called repeatedly in one kernel.
 */
#ifndef HYP_REDUCE_CUH
#define HYP_REDUCE_CUH

#include "hyp/types.cuh"

#define HYP_FULL_MASK 0xFFFFFFFFu

__device__ __forceinline__ float hyp_warp_sum(float v) {
    for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(HYP_FULL_MASK, v, offset);
    return v;
}

__device__ __forceinline__ float hyp_warp_max(float v) {
    for (int offset = 16; offset > 0; offset >>= 1) v = fmaxf(v, __shfl_xor_sync(HYP_FULL_MASK, v, offset));
    return v;
}

__device__ __forceinline__ float hyp_warp_sum_width(float v, int width) {
    for (int offset = width / 2; offset > 0; offset >>= 1) v += __shfl_xor_sync(HYP_FULL_MASK, v, offset, width);
    return v;
}

/* Lanes of this thread's warp that exist in the block. */
__device__ __forceinline__ unsigned hyp_warp_lanes() {
    unsigned n = hyp_block_threads() - (hyp_warp() << 5);
    return n >= 32 ? 32u : n;
}

/* op 0: sum, 1: max. Result in lane 0 of each warp, over the lanes that exist. */
template <int OP> __device__ __forceinline__ float hyp_warp_reduce_partial(float v) {
    const unsigned lanes = hyp_warp_lanes(), lane = hyp_lane();
    const unsigned mask = lanes == 32 ? HYP_FULL_MASK : (1u << lanes) - 1u;
    for (unsigned offset = 16; offset > 0; offset >>= 1) {
        float other = __shfl_down_sync(mask, v, offset);
        if (lane + offset < lanes) v = OP == 0 ? v + other : fmaxf(v, other);
    }
    return v;
}

template <int OP> __device__ __forceinline__ float hyp_block_reduce(float v) {
    __shared__ float partial[32];
    const unsigned lane = hyp_lane(), warp = hyp_warp();
    const unsigned nwarps = (hyp_block_threads() + 31u) >> 5;
    __syncthreads(); /* a previous call's readers are done with `partial` */
    v = hyp_warp_reduce_partial<OP>(v);
    if (lane == 0) partial[warp] = v;
    __syncthreads();
    float r = partial[0];
    for (unsigned w = 1; w < nwarps; w++) r = OP == 0 ? r + partial[w] : fmaxf(r, partial[w]);
    return r;
}

__device__ __forceinline__ float hyp_block_sum(float v) { return hyp_block_reduce<0>(v); }
__device__ __forceinline__ float hyp_block_max(float v) { return hyp_block_reduce<1>(v); }

#endif
