/* hyp/types.cuh — element types and 16-byte vector access for generated kernels.
 * Compiles under NVRTC (sm_80, sm_90) and under the simulator prelude (HYP_SIM); uses no host
 * headers. Conversions round to nearest even (bf16) or saturate to the finite range (fp8, as
 * cuda_fp8.h's __NV_SATFINITE constructors do).
 *
 *   hyp_f128 v = hyp_load128(in + i);            // 4 floats; i a multiple of 4, 16-byte aligned
 *   for (int k = 0; k < hyp_f128::size; k++) v[k] *= 2.0f;
 *   hyp_store128(out + i, v);
 *   hyp_bf128 w = hyp_load128cs(x + j);          // 8 bf16, streaming (evict-first) load
 */
#ifndef HYP_TYPES_CUH
#define HYP_TYPES_CUH

#include <cuda_bf16.h>
#include <cuda_fp8.h>

typedef __nv_bfloat16 hyp_bf16;
typedef __nv_bfloat162 hyp_bf16x2;
typedef __nv_fp8_e4m3 hyp_e4m3;
typedef __nv_fp8_e5m2 hyp_e5m2;

/* NVRTC has no <math.h>: INFINITY is not defined there. */
#define HYP_INF __int_as_float(0x7f800000)
#define HYP_E4M3_MAX 448.0f
#define HYP_E5M2_MAX 57344.0f

/* Where a sim error should point: the caller's line under HYP_SIM, nothing on the device. */
#ifdef HYP_SIM
#define HYP_SITE_PARAMS , const char *hyp_file = __builtin_FILE(), unsigned hyp_line = __builtin_LINE()
#define HYP_SITE_ARGS , hyp_file, hyp_line
#else
#define HYP_SITE_PARAMS
#define HYP_SITE_ARGS
#endif

__device__ __forceinline__ float hyp_bf16_to_f32(hyp_bf16 x) { return __bfloat162float(x); }
__device__ __forceinline__ hyp_bf16 hyp_f32_to_bf16(float x) { return __float2bfloat16_rn(x); }
__device__ __forceinline__ float hyp_e4m3_to_f32(hyp_e4m3 x) { return static_cast<float>(x); }
__device__ __forceinline__ hyp_e4m3 hyp_f32_to_e4m3(float x) { return hyp_e4m3(x); }
__device__ __forceinline__ float hyp_e5m2_to_f32(hyp_e5m2 x) { return static_cast<float>(x); }
__device__ __forceinline__ hyp_e5m2 hyp_f32_to_e5m2(float x) { return hyp_e5m2(x); }

/* Two bf16 in one 32-bit register, `lo` in bits 0-15: the operand format of mma and ldmatrix. */
__device__ __forceinline__ unsigned hyp_pack_bf16x2(hyp_bf16 lo, hyp_bf16 hi) {
    return (unsigned)__bfloat16_as_ushort(lo) | ((unsigned)__bfloat16_as_ushort(hi) << 16);
}
__device__ __forceinline__ hyp_bf16 hyp_bf16_lo(unsigned r) { return __ushort_as_bfloat16((unsigned short)(r & 0xFFFFu)); }
__device__ __forceinline__ hyp_bf16 hyp_bf16_hi(unsigned r) { return __ushort_as_bfloat16((unsigned short)(r >> 16)); }

/* 16 bytes of elements, loaded and stored as one int4 (llm.c's Packed128). */
template <class T> struct alignas(16) hyp_packed128 {
    static constexpr int size = 16 / sizeof(T);
    T payload[size];

    hyp_packed128() = default;
    __device__ __forceinline__ explicit hyp_packed128(int4 bits) { memcpy(&payload, &bits, sizeof bits); }
    __device__ __forceinline__ static hyp_packed128 constant(T v) {
        hyp_packed128 r;
        for (int k = 0; k < size; k++) r.payload[k] = v;
        return r;
    }
    __device__ __forceinline__ T &operator[](int k) { return payload[k]; }
    __device__ __forceinline__ const T &operator[](int k) const { return payload[k]; }
    __device__ __forceinline__ int4 get_bits() const {
        int4 bits;
        memcpy(&bits, &payload, sizeof bits);
        return bits;
    }
};

typedef hyp_packed128<float> hyp_f128;
typedef hyp_packed128<hyp_bf16> hyp_bf128;

#ifdef HYP_SIM
#define HYP_CHECK_ALIGN16(p, what) ::hyp_sim::check_align((p), 16, (what), hyp_file, hyp_line)
#else
#define HYP_CHECK_ALIGN16(p, what) ((void)0)
#endif

template <class T> __device__ __forceinline__ hyp_packed128<T> hyp_load128(const T *p HYP_SITE_PARAMS) {
    HYP_CHECK_ALIGN16(p, "hyp_load128");
    return hyp_packed128<T>{*reinterpret_cast<const int4 *>(p)};
}
/* Streaming load: the data is used once (evict first). */
template <class T> __device__ __forceinline__ hyp_packed128<T> hyp_load128cs(const T *p HYP_SITE_PARAMS) {
    HYP_CHECK_ALIGN16(p, "hyp_load128cs");
    return hyp_packed128<T>{__ldcs(reinterpret_cast<const int4 *>(p))};
}
template <class T> __device__ __forceinline__ void hyp_store128(T *p, hyp_packed128<T> v HYP_SITE_PARAMS) {
    HYP_CHECK_ALIGN16(p, "hyp_store128");
    *reinterpret_cast<int4 *>(p) = v.get_bits();
}
/* Streaming store: not read again soon. */
template <class T> __device__ __forceinline__ void hyp_store128cs(T *p, hyp_packed128<T> v HYP_SITE_PARAMS) {
    HYP_CHECK_ALIGN16(p, "hyp_store128cs");
    __stcs(reinterpret_cast<int4 *>(p), v.get_bits());
}
/* Cache-global store: skip L1 (data another block reads next). */
template <class T> __device__ __forceinline__ void hyp_store128cg(T *p, hyp_packed128<T> v HYP_SITE_PARAMS) {
    HYP_CHECK_ALIGN16(p, "hyp_store128cg");
    __stcg(reinterpret_cast<int4 *>(p), v.get_bits());
}

/* Thread coordinates flattened the way warps are formed: x fastest, then y, then z. */
__device__ __forceinline__ unsigned hyp_block_tid() {
    return threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
}
__device__ __forceinline__ unsigned hyp_block_threads() { return blockDim.x * blockDim.y * blockDim.z; }
__device__ __forceinline__ unsigned hyp_lane() { return hyp_block_tid() & 31u; }
__device__ __forceinline__ unsigned hyp_warp() { return hyp_block_tid() >> 5; }

#endif
