// ---- shared by the templates (templates/partials/common.cuh, inlined by the renderer)
#include "hyp/reduce.cuh" // hyp_warp_sum/max, hyp_block_sum/max: fixed-order (deterministic) reductions
#include "hyp/types.cuh"  // hyp_f128 + hyp_load128/hyp_store128: 16-byte vector access (aligned)
// Four floats as one 16-byte vector (for hyp_store128).
__device__ __forceinline__ hyp_f128 f128(float a, float b, float c, float d) {
    hyp_f128 r;
    r[0] = a; r[1] = b; r[2] = c; r[3] = d;
    return r;
}
// ----
