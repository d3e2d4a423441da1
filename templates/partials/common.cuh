// ---- shared by the templates (templates/partials/common.cuh, inlined by the renderer)
#include "hyp/reduce.cuh" // hyp_warp_sum/max, hyp_block_sum/max: fixed-order (deterministic) reductions
#include "hyp/types.cuh"  // hyp_f128 + hyp_load128/hyp_store128: 16-byte vector access (aligned)
// Four floats as one 16-byte vector (for hyp_store128).
__device__ __forceinline__ hyp_f128 f128(float a, float b, float c, float d) {
    hyp_f128 r;
    r[0] = a; r[1] = b; r[2] = c; r[3] = d;
    return r;
}
// Activation storage (v2102): a template with the constant ACT declares `typedef ... act_t;`
// (float, or hyp_bf16 for bf16 storage) and reads and writes its activation arguments through
// these, so one body serves both: loads widen exactly, every computation is fp32, stores round to
// nearest even (__float2bfloat16_rn, as the cpu executor's store_bf16).
__device__ __forceinline__ float hyp_ld(const float* p) { return *p; }
__device__ __forceinline__ float hyp_ld(const hyp_bf16* p) { return __bfloat162float(*p); }
__device__ __forceinline__ void hyp_st(float* p, float v) { *p = v; }
__device__ __forceinline__ void hyp_st(hyp_bf16* p, float v) { *p = __float2bfloat16_rn(v); }
// Four consecutive values as fp32: one 16-byte load (float, p 16-byte aligned) or one 8-byte
// load (bf16, p 8-byte aligned); the store rounds each (bf16).
__device__ __forceinline__ hyp_f128 hyp_load4(const float* p) { return hyp_load128(p); }
__device__ __forceinline__ hyp_f128 hyp_load4(const hyp_bf16* p) {
    uint2 bits = *reinterpret_cast<const uint2*>(p);
    return f128(__uint_as_float(bits.x << 16), __uint_as_float(bits.x & 0xffff0000u),
                __uint_as_float(bits.y << 16), __uint_as_float(bits.y & 0xffff0000u));
}
__device__ __forceinline__ void hyp_store4(float* p, hyp_f128 v) { hyp_store128(p, v); }
__device__ __forceinline__ void hyp_store4(hyp_bf16* p, hyp_f128 v) {
    uint2 bits;
    bits.x = hyp_pack_bf16x2(__float2bfloat16_rn(v[0]), __float2bfloat16_rn(v[1]));
    bits.y = hyp_pack_bf16x2(__float2bfloat16_rn(v[2]), __float2bfloat16_rn(v[3]));
    *reinterpret_cast<uint2*>(p) = bits;
}
// ----
