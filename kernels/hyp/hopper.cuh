/* hyp/hopper.cuh — the Hopper (sm_90a) asynchronous instructions as kernel-dialect wrappers:
 * mbarrier, TMA (cp.async.bulk.tensor with a tensor map), wgmma (warpgroup MMA from shared-memory
 * descriptors or registers), setmaxnreg and named barriers. Inline PTX on the device (compile for
 * `sm_90a`: wgmma and setmaxnreg need the arch-specific target), exact emulation under HYP_SIM
 * (kernels/sim/prelude.h, kernels/sim/README.md "Hopper"). Never used for sm_80 kernels.
 *
 * API (everything __device__ unless said; `bar` is a 64-bit mbarrier object in shared memory):
 *   hyp_mbar_init(bar, count)             mbarrier.init: expected arrivals `count`, phase 0, tx 0
 *   hyp_fence_mbar_init()                 makes the inits visible to the async proxy (TMA); then
 *                                         __syncthreads() before other threads use the barriers
 *   hyp_mbar_arrive(bar)                  one arrival
 *   hyp_mbar_arrive_expect_tx(bar, bytes) tx-count += bytes, then one arrival
 *   hyp_mbar_expect_tx(bar, bytes)        tx-count += bytes (no arrival)
 *   hyp_mbar_try_wait(bar, parity)        true once the phase with this parity has completed
 *   hyp_mbar_wait(bar, parity)            loops on try_wait.parity. A phase completes when its
 *                                         pending arrivals reach 0 AND its tx-count reaches 0;
 *                                         wait(parity) returns when the current phase's parity
 *                                         differs from `parity` (the phase `parity` is done).
 *   hyp_fence_proxy_async()               fence.proxy.async.shared::cta: generic-proxy writes to
 *                                         shared memory become visible to wgmma/TMA (after writing
 *                                         a wgmma operand with ordinary stores)
 *   hyp_tmap                              the 128-byte, 64-byte-aligned tensor map (CUtensorMap
 *                                         bits). Pass it as `const __grid_constant__ hyp_tmap m`
 *                                         (a kernel parameter; sim supports exactly this form) and
 *                                         give the wrappers `&m`. Encoded on the host by
 *                                         cuTensorMapEncodeTiled; for sim, by
 *                                         hyp_sim_tmap_encode_tiled (kernels/sim/sim_tmap.h: the
 *                                         same arguments and checks; the stand-in libcuda's
 *                                         cuTensorMapEncodeTiled calls it).
 *   hyp_tma_load_2d(dst, &m, c0, c1, bar) cp.async.bulk.tensor.2d.shared::cluster.global.tile.
 *   hyp_tma_load_3d(dst, &m, c0, c1, c2, bar)    mbarrier::complete_tx::bytes: the box at element
 *                                         coordinates (c0 innermost, may be negative or past the
 *                                         end: out-of-bounds elements are zero) lands at `dst`
 *                                         (shared, 128-byte aligned; 1024 for the 128B swizzle),
 *                                         rows packed at box[0]*elemsize bytes, swizzled as the
 *                                         map says; completes by tx-count -= box bytes on `bar`.
 *                                         Issue from one thread after its arrive_expect_tx.
 *   hyp_tma_store_2d(&m, c0, c1, src)    cp.async.bulk.tensor.2d.global.shared::cta.bulk_group: the
 *   hyp_tma_store_3d(&m, c0, c1, c2, src)        box at `src` (shared, 128-byte aligned, laid out and
 *                                         swizzled as a load would write it) to the tensor at those
 *                                         coordinates; out-of-bounds elements are not written. Write
 *                                         `src` with ordinary stores, hyp_fence_proxy_async(), sync the
 *                                         writers, then one thread issues:
 *   hyp_tma_store_commit()                cp.async.bulk.commit_group
 *   hyp_tma_store_wait<N>()               cp.async.bulk.wait_group.read N: the source shared memory of
 *                                         all but the newest N groups may be reused. Every store must
 *                                         be waited for (wait<0>) before the thread exits.
 *   hyp_wgmma_desc(smem, swizzle, lbo, sbo)  the 64-bit shared-memory matrix descriptor (PTX ISA
 *                                         "Matrix Descriptor Format"): start address>>4 in bits
 *                                         0-13, LBO>>4 in 16-29, SBO>>4 in 32-45, base offset 0,
 *                                         swizzle in 62-63 (HYP_SWZ_NONE 0, HYP_SWZ_128B 1,
 *                                         HYP_SWZ_64B 2, HYP_SWZ_32B 3). lbo/sbo in bytes.
 *   hyp_wgmma_fence()                     wgmma.fence: before the first wgmma, and whenever the
 *                                         accumulators or an A register were touched by other code
 *   hyp_wgmma_ss<N, TA, TB>(d, da, db, accumulate)   D(64xN,f32) = A(64x16) * B(16xN) (+ D if
 *                                         accumulate), A and B bf16 from descriptors. TA/TB: 0 =
 *                                         K-major (A rows of K / B columns of K contiguous), 1 =
 *                                         M-/N-major (transposed). N in 8,16,24,32,48,64,96,128,
 *                                         192,256. d: N/2 floats per thread.
 *   hyp_wgmma_rs<N, TB>(d, a, db, accumulate)        the same with A from registers: a[4] in the
 *                                         mma.m16n8k16 A layout, warp w of the warpgroup holding
 *                                         rows 16w..16w+15 (FA3's P·V).
 *   hyp_wgmma_commit()                    wgmma.commit_group
 *   hyp_wgmma_wait<N>()                   wgmma.wait_group N: at most N groups still pending; the
 *                                         accumulators of a wgmma may be read only after it
 *   hyp_wgmma_fence_operand(d, n)         compiler-only barrier on n accumulator registers (keeps
 *                                         the compiler from moving their reads/writes across an
 *                                         asynchronous wgmma)
 *   hyp_setmaxnreg_inc<R>() / _dec<R>()   setmaxnreg (warpgroup-uniform; R in 24..256, multiple
 *                                         of 8). The kernel needs __launch_bounds__(threads, 1):
 *                                         without it ptxas ignores setmaxnreg (warning C7508)
 *   hyp_named_bar_sync(id, n)             bar.sync id, n   (id 1..15: 0 is __syncthreads'; n a
 *   hyp_named_bar_arrive(id, n)           bar.arrive id, n  multiple of 32)
 *
 * wgmma is warpgroup-collective: the 128 threads of warps 4k..4k+3 call it together with the same
 * descriptors. Fragment of D (PTX ISA "Register Fragments" for wgmma .m64nNk16, f32 accumulator),
 * with w = warp % 4, g = lane >> 2, t = lane % 4, for i in 0..N/8-1:
 *   d[4i+0] = D[16w+g][8i+2t]    d[4i+1] = D[16w+g][8i+2t+1]
 *   d[4i+2] = D[16w+g+8][8i+2t]  d[4i+3] = D[16w+g+8][8i+2t+1]
 * Shared-memory layouts the descriptors describe (bf16, T = 8 elements = 16 bytes, "core matrix" =
 * 8 rows x 16 bytes; addresses in bytes from the start address, then swizzled):
 *   K-major, no swizzle:  (row r, k) at (r%8)*16 + (r/8)*SBO + (k/8)*LBO + (k%8)*2
 *   K-major, swizzle S (32/64/128 bytes per row): (r, k) at (r%8)*S + (r/8)*SBO + k*2 (K = 16 fits
 *                         in a row; LBO unused)
 *   MN-major, no swizzle: (mn, k) at (mn%8)*2 + (mn/8)*SBO + (k%8)*16 + (k/8)*LBO
 *   MN-major, swizzle S:  (mn, k) at (mn%(S/2))*2 + (mn/(S/2))*LBO + (k%8)*S + (k/8)*SBO
 * and the swizzle permutes 16-byte chunks by address bits: 128B: bits 4-6 ^= bits 7-9; 64B: bits
 * 4-5 ^= bits 7-8; 32B: bit 4 ^= bit 7 (the same function TMA writes with).
 */
#ifndef HYP_HOPPER_CUH
#define HYP_HOPPER_CUH

#include "hyp/types.cuh"

#ifndef __grid_constant__
#define __grid_constant__
#endif

struct alignas(64) hyp_tmap {
    unsigned long long opaque[16];
};

enum { HYP_SWZ_NONE = 0, HYP_SWZ_128B = 1, HYP_SWZ_64B = 2, HYP_SWZ_32B = 3 };

#ifdef HYP_SIM
#include "sim/hopper_sim.h"
/* the caller's site for wrappers without other parameters */
#define HYP_HOPPER_SITE const char *hyp_file = __builtin_FILE(), unsigned hyp_line = __builtin_LINE()

__device__ __forceinline__ void hyp_mbar_init(unsigned long long *bar, unsigned count HYP_SITE_PARAMS) {
    ::hyp_sim::hopper::mbar_init(bar, count, hyp_file, hyp_line);
}
/* the sim's barrier state is visible to every thread of the block at once */
__device__ __forceinline__ void hyp_fence_mbar_init() {}
__device__ __forceinline__ void hyp_mbar_arrive(unsigned long long *bar HYP_SITE_PARAMS) {
    ::hyp_sim::hopper::mbar_arrive(bar, 0, "mbarrier.arrive", hyp_file, hyp_line);
}
__device__ __forceinline__ void hyp_mbar_arrive_expect_tx(unsigned long long *bar, unsigned bytes HYP_SITE_PARAMS) {
    ::hyp_sim::hopper::mbar_arrive(bar, bytes, "mbarrier.arrive.expect_tx", hyp_file, hyp_line);
}
__device__ __forceinline__ void hyp_mbar_expect_tx(unsigned long long *bar, unsigned bytes HYP_SITE_PARAMS) {
    ::hyp_sim::hopper::mbar_expect_tx(bar, bytes, hyp_file, hyp_line);
}
__device__ __forceinline__ bool hyp_mbar_try_wait(unsigned long long *bar, unsigned parity HYP_SITE_PARAMS) {
    return ::hyp_sim::hopper::mbar_wait(bar, parity, hyp_file, hyp_line);
}
__device__ __forceinline__ void hyp_mbar_wait(unsigned long long *bar, unsigned parity HYP_SITE_PARAMS) {
    ::hyp_sim::hopper::mbar_wait(bar, parity, hyp_file, hyp_line);
}
/* sim has one proxy: generic writes are visible to the emulated wgmma/TMA at once */
__device__ __forceinline__ void hyp_fence_proxy_async() {}
__device__ __forceinline__ void hyp_tma_load_2d(void *smem_dst, const hyp_tmap *map, int c0, int c1,
                                                unsigned long long *bar HYP_SITE_PARAMS) {
    const int c[2] = {c0, c1};
    ::hyp_sim::hopper::tma_load(smem_dst, map, c, 2, bar, hyp_file, hyp_line);
}
__device__ __forceinline__ void hyp_tma_load_3d(void *smem_dst, const hyp_tmap *map, int c0, int c1, int c2,
                                                unsigned long long *bar HYP_SITE_PARAMS) {
    const int c[3] = {c0, c1, c2};
    ::hyp_sim::hopper::tma_load(smem_dst, map, c, 3, bar, hyp_file, hyp_line);
}
__device__ __forceinline__ void hyp_tma_store_2d(const hyp_tmap *map, int c0, int c1,
                                                 const void *smem_src HYP_SITE_PARAMS) {
    const int c[2] = {c0, c1};
    ::hyp_sim::hopper::tma_store(smem_src, map, c, 2, hyp_file, hyp_line);
}
__device__ __forceinline__ void hyp_tma_store_3d(const hyp_tmap *map, int c0, int c1, int c2,
                                                 const void *smem_src HYP_SITE_PARAMS) {
    const int c[3] = {c0, c1, c2};
    ::hyp_sim::hopper::tma_store(smem_src, map, c, 3, hyp_file, hyp_line);
}
__device__ __forceinline__ void hyp_tma_store_commit() { ::hyp_sim::hopper::bulk_commit(); }
template <int N> __device__ __forceinline__ void hyp_tma_store_wait() { ::hyp_sim::hopper::bulk_wait(N); }
__device__ __forceinline__ unsigned long long hyp_wgmma_desc(const void *smem, int swizzle, unsigned lbo_bytes,
                                                             unsigned sbo_bytes HYP_SITE_PARAMS) {
    return ::hyp_sim::hopper::wgmma_desc(smem, swizzle, lbo_bytes, sbo_bytes, hyp_file, hyp_line);
}
__device__ __forceinline__ void hyp_wgmma_fence(HYP_HOPPER_SITE) { ::hyp_sim::hopper::wgmma_fence(hyp_file, hyp_line); }
__device__ __forceinline__ void hyp_wgmma_commit(HYP_HOPPER_SITE) { ::hyp_sim::hopper::wgmma_commit(hyp_file, hyp_line); }
template <int N> __device__ __forceinline__ void hyp_wgmma_wait(HYP_HOPPER_SITE) {
    ::hyp_sim::hopper::wgmma_wait(N, hyp_file, hyp_line);
}
__device__ __forceinline__ void hyp_wgmma_fence_operand(float *, int) {}
template <int N> struct hyp_wgmma_n_ok {
    static constexpr bool value = N == 8 || N == 16 || N == 24 || N == 32 || N == 48 || N == 64 || N == 96 ||
                                  N == 128 || N == 192 || N == 256;
};
template <int N, int TA, int TB>
__device__ __forceinline__ void hyp_wgmma_ss(float *d, unsigned long long da, unsigned long long db,
                                             bool accumulate HYP_SITE_PARAMS) {
    static_assert(hyp_wgmma_n_ok<N>::value, "hyp_wgmma_ss: N is one of 8,16,24,32,48,64,96,128,192,256");
    static_assert(TA == 0 || TA == 1, "hyp_wgmma_ss: TA is 0 (K-major) or 1 (M-major)");
    static_assert(TB == 0 || TB == 1, "hyp_wgmma_ss: TB is 0 (K-major) or 1 (N-major)");
    ::hyp_sim::hopper::wgmma(d, N, da, nullptr, db, TA, TB, accumulate, hyp_file, hyp_line);
}
template <int N, int TB>
__device__ __forceinline__ void hyp_wgmma_rs(float *d, const unsigned a[4], unsigned long long db,
                                             bool accumulate HYP_SITE_PARAMS) {
    static_assert(hyp_wgmma_n_ok<N>::value, "hyp_wgmma_rs: N is one of 8,16,24,32,48,64,96,128,192,256");
    static_assert(TB == 0 || TB == 1, "hyp_wgmma_rs: TB is 0 (K-major) or 1 (N-major)");
    ::hyp_sim::hopper::wgmma(d, N, 0, a, db, 0, TB, accumulate, hyp_file, hyp_line);
}
template <int R> __device__ __forceinline__ void hyp_setmaxnreg_inc(HYP_HOPPER_SITE) {
    static_assert(R >= 24 && R <= 256 && R % 8 == 0, "setmaxnreg: 24..256, a multiple of 8");
    ::hyp_sim::hopper::setmaxnreg(R, true, hyp_file, hyp_line);
}
template <int R> __device__ __forceinline__ void hyp_setmaxnreg_dec(HYP_HOPPER_SITE) {
    static_assert(R >= 24 && R <= 256 && R % 8 == 0, "setmaxnreg: 24..256, a multiple of 8");
    ::hyp_sim::hopper::setmaxnreg(R, false, hyp_file, hyp_line);
}
__device__ __forceinline__ void hyp_named_bar_sync(int id, int nthreads HYP_SITE_PARAMS) {
    ::hyp_sim::hopper::named_bar(id, nthreads, true, hyp_file, hyp_line);
}
__device__ __forceinline__ void hyp_named_bar_arrive(int id, int nthreads HYP_SITE_PARAMS) {
    ::hyp_sim::hopper::named_bar(id, nthreads, false, hyp_file, hyp_line);
}
#undef HYP_HOPPER_SITE

#else /* the device: sm_90a inline PTX */

__device__ __forceinline__ unsigned hyp_smem_addr(const void *p) {
    return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

/* ---- mbarrier ---- */
__device__ __forceinline__ void hyp_mbar_init(unsigned long long *bar, unsigned count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(hyp_smem_addr(bar)), "r"(count) : "memory");
}
__device__ __forceinline__ void hyp_fence_mbar_init() {
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}
__device__ __forceinline__ void hyp_mbar_arrive(unsigned long long *bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(hyp_smem_addr(bar)) : "memory");
}
__device__ __forceinline__ void hyp_mbar_arrive_expect_tx(unsigned long long *bar, unsigned bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(hyp_smem_addr(bar)), "r"(bytes)
                 : "memory");
}
__device__ __forceinline__ void hyp_mbar_expect_tx(unsigned long long *bar, unsigned bytes) {
    asm volatile("mbarrier.expect_tx.relaxed.cta.shared::cta.b64 [%0], %1;\n" ::"r"(hyp_smem_addr(bar)), "r"(bytes)
                 : "memory");
}
__device__ __forceinline__ bool hyp_mbar_try_wait(unsigned long long *bar, unsigned parity) {
    unsigned ok;
    asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
                 : "=r"(ok)
                 : "r"(hyp_smem_addr(bar)), "r"(parity)
                 : "memory");
    return ok != 0;
}
__device__ __forceinline__ void hyp_mbar_wait(unsigned long long *bar, unsigned parity) {
    while (!hyp_mbar_try_wait(bar, parity)) {
    }
}
__device__ __forceinline__ void hyp_fence_proxy_async() {
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

/* ---- TMA ---- */
__device__ __forceinline__ void hyp_tma_load_2d(void *smem_dst, const hyp_tmap *map, int c0, int c1,
                                                unsigned long long *bar) {
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n"
                 ::"r"(hyp_smem_addr(smem_dst)), "l"(map), "r"(c0), "r"(c1), "r"(hyp_smem_addr(bar))
                 : "memory");
}
__device__ __forceinline__ void hyp_tma_load_3d(void *smem_dst, const hyp_tmap *map, int c0, int c1, int c2,
                                                unsigned long long *bar) {
    asm volatile("cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4}], [%5];\n"
                 ::"r"(hyp_smem_addr(smem_dst)), "l"(map), "r"(c0), "r"(c1), "r"(c2), "r"(hyp_smem_addr(bar))
                 : "memory");
}

__device__ __forceinline__ void hyp_tma_store_2d(const hyp_tmap *map, int c0, int c1, const void *smem_src) {
    asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%1, %2}], [%3];\n"
                 ::"l"(map), "r"(c0), "r"(c1), "r"(hyp_smem_addr(smem_src))
                 : "memory");
}
__device__ __forceinline__ void hyp_tma_store_3d(const hyp_tmap *map, int c0, int c1, int c2, const void *smem_src) {
    asm volatile("cp.async.bulk.tensor.3d.global.shared::cta.bulk_group [%0, {%1, %2, %3}], [%4];\n"
                 ::"l"(map), "r"(c0), "r"(c1), "r"(c2), "r"(hyp_smem_addr(smem_src))
                 : "memory");
}
__device__ __forceinline__ void hyp_tma_store_commit() { asm volatile("cp.async.bulk.commit_group;\n" ::: "memory"); }
template <int N> __device__ __forceinline__ void hyp_tma_store_wait() {
    asm volatile("cp.async.bulk.wait_group.read %0;\n" ::"n"(N) : "memory");
}

/* ---- wgmma ---- */
__device__ __forceinline__ unsigned long long hyp_wgmma_desc(const void *smem, int swizzle, unsigned lbo_bytes,
                                                             unsigned sbo_bytes) {
    unsigned long long a = hyp_smem_addr(smem);
    return ((a & 0x3FFFFull) >> 4) | ((unsigned long long)((lbo_bytes & 0x3FFFFu) >> 4) << 16) |
           ((unsigned long long)((sbo_bytes & 0x3FFFFu) >> 4) << 32) | ((unsigned long long)(swizzle & 3) << 62);
}
__device__ __forceinline__ void hyp_wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void hyp_wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N> __device__ __forceinline__ void hyp_wgmma_wait() {
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
__device__ __forceinline__ void hyp_wgmma_fence_operand(float *d, int n) {
    for (int i = 0; i < n; i++) asm volatile("" : "+f"(d[i])::"memory");
}

template <int N> struct hyp_wgmma_ptx;
template <> struct hyp_wgmma_ptx<8> {
    template <int TA, int TB> __device__ __forceinline__ static void ss(float *d, unsigned long long da, unsigned long long db, int scale_d) {
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %6, 0;\n"
                     "wgmma.mma_async.sync.aligned.m64n8k16.f32.bf16.bf16 {%0,%1,%2,%3}, %4, %5, p, 1, 1, %7, %8;\n}\n"
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                     : "l"(da), "l"(db), "r"(scale_d), "n"(TA), "n"(TB));
    }
    template <int TB> __device__ __forceinline__ static void rs(float *d, const unsigned *a, unsigned long long db, int scale_d) {
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %9, 0;\n"
                     "wgmma.mma_async.sync.aligned.m64n8k16.f32.bf16.bf16 {%0,%1,%2,%3}, {%4,%5,%6,%7}, %8, p, 1, 1, %10;\n}\n"
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(scale_d), "n"(TB));
    }
};
template <> struct hyp_wgmma_ptx<16> {
    template <int TA, int TB> __device__ __forceinline__ static void ss(float *d, unsigned long long da, unsigned long long db, int scale_d) {
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %10, 0;\n"
                     "wgmma.mma_async.sync.aligned.m64n16k16.f32.bf16.bf16 {%0,%1,%2,%3,%4,%5,%6,%7}, %8, %9, p, 1, 1, %11, %12;\n}\n"
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7])
                     : "l"(da), "l"(db), "r"(scale_d), "n"(TA), "n"(TB));
    }
    template <int TB> __device__ __forceinline__ static void rs(float *d, const unsigned *a, unsigned long long db, int scale_d) {
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %13, 0;\n"
                     "wgmma.mma_async.sync.aligned.m64n16k16.f32.bf16.bf16 {%0,%1,%2,%3,%4,%5,%6,%7}, {%8,%9,%10,%11}, %12, p, 1, 1, %14;\n}\n"
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(scale_d), "n"(TB));
    }
};
template <> struct hyp_wgmma_ptx<24> {
    template <int TA, int TB> __device__ __forceinline__ static void ss(float *d, unsigned long long da, unsigned long long db, int scale_d) {
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %14, 0;\n"
                     "wgmma.mma_async.sync.aligned.m64n24k16.f32.bf16.bf16 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11}, %12, %13, p, 1, 1, %15, %16;\n}\n"
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11])
                     : "l"(da), "l"(db), "r"(scale_d), "n"(TA), "n"(TB));
    }
    template <int TB> __device__ __forceinline__ static void rs(float *d, const unsigned *a, unsigned long long db, int scale_d) {
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %17, 0;\n"
                     "wgmma.mma_async.sync.aligned.m64n24k16.f32.bf16.bf16 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11}, {%12,%13,%14,%15}, %16, p, 1, 1, %18;\n}\n"
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(scale_d), "n"(TB));
    }
};
template <> struct hyp_wgmma_ptx<32> {
    template <int TA, int TB> __device__ __forceinline__ static void ss(float *d, unsigned long long da, unsigned long long db, int scale_d) {
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %18, 0;\n"
                     "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15}, %16, %17, p, 1, 1, %19, %20;\n}\n"
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
                     : "l"(da), "l"(db), "r"(scale_d), "n"(TA), "n"(TB));
    }
    template <int TB> __device__ __forceinline__ static void rs(float *d, const unsigned *a, unsigned long long db, int scale_d) {
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %21, 0;\n"
                     "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15}, {%16,%17,%18,%19}, %20, p, 1, 1, %22;\n}\n"
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(scale_d), "n"(TB));
    }
};
template <> struct hyp_wgmma_ptx<48> {
    template <int TA, int TB> __device__ __forceinline__ static void ss(float *d, unsigned long long da, unsigned long long db, int scale_d) {
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %26, 0;\n"
                     "wgmma.mma_async.sync.aligned.m64n48k16.f32.bf16.bf16 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23}, %24, %25, p, 1, 1, %27, %28;\n}\n"
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23])
                     : "l"(da), "l"(db), "r"(scale_d), "n"(TA), "n"(TB));
    }
    template <int TB> __device__ __forceinline__ static void rs(float *d, const unsigned *a, unsigned long long db, int scale_d) {
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %29, 0;\n"
                     "wgmma.mma_async.sync.aligned.m64n48k16.f32.bf16.bf16 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23}, {%24,%25,%26,%27}, %28, p, 1, 1, %30;\n}\n"
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(scale_d), "n"(TB));
    }
};
template <> struct hyp_wgmma_ptx<64> {
    template <int TA, int TB> __device__ __forceinline__ static void ss(float *d, unsigned long long da, unsigned long long db, int scale_d) {
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
                     "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31}, %32, %33, p, 1, 1, %35, %36;\n}\n"
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
                     : "l"(da), "l"(db), "r"(scale_d), "n"(TA), "n"(TB));
    }
    template <int TB> __device__ __forceinline__ static void rs(float *d, const unsigned *a, unsigned long long db, int scale_d) {
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
                     "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31}, {%32,%33,%34,%35}, %36, p, 1, 1, %38;\n}\n"
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(scale_d), "n"(TB));
    }
};
template <> struct hyp_wgmma_ptx<96> {
    template <int TA, int TB> __device__ __forceinline__ static void ss(float *d, unsigned long long da, unsigned long long db, int scale_d) {
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %50, 0;\n"
                     "wgmma.mma_async.sync.aligned.m64n96k16.f32.bf16.bf16 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47}, %48, %49, p, 1, 1, %51, %52;\n}\n"
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47])
                     : "l"(da), "l"(db), "r"(scale_d), "n"(TA), "n"(TB));
    }
    template <int TB> __device__ __forceinline__ static void rs(float *d, const unsigned *a, unsigned long long db, int scale_d) {
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %53, 0;\n"
                     "wgmma.mma_async.sync.aligned.m64n96k16.f32.bf16.bf16 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47}, {%48,%49,%50,%51}, %52, p, 1, 1, %54;\n}\n"
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(scale_d), "n"(TB));
    }
};
template <> struct hyp_wgmma_ptx<128> {
    template <int TA, int TB> __device__ __forceinline__ static void ss(float *d, unsigned long long da, unsigned long long db, int scale_d) {
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
                     "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63}, %64, %65, p, 1, 1, %67, %68;\n}\n"
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
                     : "l"(da), "l"(db), "r"(scale_d), "n"(TA), "n"(TB));
    }
    template <int TB> __device__ __forceinline__ static void rs(float *d, const unsigned *a, unsigned long long db, int scale_d) {
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
                     "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63}, {%64,%65,%66,%67}, %68, p, 1, 1, %70;\n}\n"
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(scale_d), "n"(TB));
    }
};
template <> struct hyp_wgmma_ptx<192> {
    template <int TA, int TB> __device__ __forceinline__ static void ss(float *d, unsigned long long da, unsigned long long db, int scale_d) {
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %98, 0;\n"
                     "wgmma.mma_async.sync.aligned.m64n192k16.f32.bf16.bf16 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63,%64,%65,%66,%67,%68,%69,%70,%71,%72,%73,%74,%75,%76,%77,%78,%79,%80,%81,%82,%83,%84,%85,%86,%87,%88,%89,%90,%91,%92,%93,%94,%95}, %96, %97, p, 1, 1, %99, %100;\n}\n"
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95])
                     : "l"(da), "l"(db), "r"(scale_d), "n"(TA), "n"(TB));
    }
    template <int TB> __device__ __forceinline__ static void rs(float *d, const unsigned *a, unsigned long long db, int scale_d) {
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %101, 0;\n"
                     "wgmma.mma_async.sync.aligned.m64n192k16.f32.bf16.bf16 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63,%64,%65,%66,%67,%68,%69,%70,%71,%72,%73,%74,%75,%76,%77,%78,%79,%80,%81,%82,%83,%84,%85,%86,%87,%88,%89,%90,%91,%92,%93,%94,%95}, {%96,%97,%98,%99}, %100, p, 1, 1, %102;\n}\n"
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(scale_d), "n"(TB));
    }
};
template <> struct hyp_wgmma_ptx<256> {
    template <int TA, int TB> __device__ __forceinline__ static void ss(float *d, unsigned long long da, unsigned long long db, int scale_d) {
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"
                     "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63,%64,%65,%66,%67,%68,%69,%70,%71,%72,%73,%74,%75,%76,%77,%78,%79,%80,%81,%82,%83,%84,%85,%86,%87,%88,%89,%90,%91,%92,%93,%94,%95,%96,%97,%98,%99,%100,%101,%102,%103,%104,%105,%106,%107,%108,%109,%110,%111,%112,%113,%114,%115,%116,%117,%118,%119,%120,%121,%122,%123,%124,%125,%126,%127}, %128, %129, p, 1, 1, %131, %132;\n}\n"
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]), "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]), "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
                     : "l"(da), "l"(db), "r"(scale_d), "n"(TA), "n"(TB));
    }
    template <int TB> __device__ __forceinline__ static void rs(float *d, const unsigned *a, unsigned long long db, int scale_d) {
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %133, 0;\n"
                     "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63,%64,%65,%66,%67,%68,%69,%70,%71,%72,%73,%74,%75,%76,%77,%78,%79,%80,%81,%82,%83,%84,%85,%86,%87,%88,%89,%90,%91,%92,%93,%94,%95,%96,%97,%98,%99,%100,%101,%102,%103,%104,%105,%106,%107,%108,%109,%110,%111,%112,%113,%114,%115,%116,%117,%118,%119,%120,%121,%122,%123,%124,%125,%126,%127}, {%128,%129,%130,%131}, %132, p, 1, 1, %134;\n}\n"
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]), "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]), "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(scale_d), "n"(TB));
    }
};

template <int N, int TA, int TB>
__device__ __forceinline__ void hyp_wgmma_ss(float *d, unsigned long long da, unsigned long long db, bool accumulate) {
    static_assert(TA == 0 || TA == 1, "hyp_wgmma_ss: TA is 0 (K-major) or 1 (M-major)");
    static_assert(TB == 0 || TB == 1, "hyp_wgmma_ss: TB is 0 (K-major) or 1 (N-major)");
    hyp_wgmma_ptx<N>::template ss<TA, TB>(d, da, db, accumulate ? 1 : 0);
}
template <int N, int TB>
__device__ __forceinline__ void hyp_wgmma_rs(float *d, const unsigned a[4], unsigned long long db, bool accumulate) {
    static_assert(TB == 0 || TB == 1, "hyp_wgmma_rs: TB is 0 (K-major) or 1 (N-major)");
    hyp_wgmma_ptx<N>::template rs<TB>(d, a, db, accumulate ? 1 : 0);
}

/* ---- setmaxnreg, named barriers ---- */
template <int R> __device__ __forceinline__ void hyp_setmaxnreg_inc() {
    static_assert(R >= 24 && R <= 256 && R % 8 == 0, "setmaxnreg: 24..256, a multiple of 8");
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(R));
}
template <int R> __device__ __forceinline__ void hyp_setmaxnreg_dec() {
    static_assert(R >= 24 && R <= 256 && R % 8 == 0, "setmaxnreg: 24..256, a multiple of 8");
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(R));
}
__device__ __forceinline__ void hyp_named_bar_sync(int id, int nthreads) {
    asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(nthreads) : "memory");
}
__device__ __forceinline__ void hyp_named_bar_arrive(int id, int nthreads) {
    asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(nthreads) : "memory");
}

#endif /* HYP_SIM */
#endif
