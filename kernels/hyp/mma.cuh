/* hyp/mma.cuh — tensor-core wrappers: mma.sync m16n8k16 (bf16 x bf16 -> fp32), ldmatrix, and
 * cp.async. Inline PTX on the device (sm_80+); exact emulation under HYP_SIM (kernels/sim/
 * prelude.h), with the same per-lane fragment layouts, so wrong tile indexing gives wrong
 * numbers in sim as on a GPU. All are warp-collective except cp.async: every lane of the warp
 * must call them together (a partial warp is an error in sim).
 *
 * Fragment layouts (PTX ISA, "Matrix Fragments for mma.m16n8k16 with floating point type"),
 * with g = lane >> 2 (groupID) and t = lane % 4 (threadID_in_group); a register holds two bf16,
 * the lower-indexed element in bits 0-15 (hyp_pack_bf16x2):
 *   A (16x16, row-major):  a[0] = A[g][2t..2t+1]     a[1] = A[g+8][2t..2t+1]
 *                          a[2] = A[g][2t+8..2t+9]   a[3] = A[g+8][2t+8..2t+9]
 *   B (16x8, K x N):       b[0] = B[2t..2t+1][g]     b[1] = B[2t+8..2t+9][g]
 *   C, D (16x8, fp32):     c[0] = C[g][2t]  c[1] = C[g][2t+1]  c[2] = C[g+8][2t]  c[3] = C[g+8][2t+1]
 * ldmatrix.m8n8.x4.b16: lane 8i+r passes the address of row r of 8x8 matrix i (16 contiguous,
 * 16-byte-aligned bytes in shared memory); register i of lane l receives row l>>2, columns
 * 2(l%4)..2(l%4)+1 of matrix i — or, with .trans, rows 2(l%4)..+1 of column l>>2. So for a
 * row-major 16x16 A tile at `As` (leading dimension lda): lane l passes
 *   &As[(l % 8) + 8 * ((l / 8) % 2)][8 * (l / 16)]         -> hyp_ldmatrix_x4 gives a[0..3];
 * for a row-major K x N B tile `Bs`, hyp_ldmatrix_x4_trans with lane l passing
 *   &Bs[(l % 8) + 8 * ((l / 8) % 2)][n0 + 8 * (l / 16)]    -> b for columns n0..n0+7 in r[0..1],
 *                                                             n0+8..n0+15 in r[2..3].
 * cp.async.cg 16 bytes global -> shared, asynchronous until waited for:
 *   hyp_cp_async_16(dst, src); ... hyp_cp_async_commit(); hyp_cp_async_wait_group<0>();
 *   __syncthreads();   // then other threads may read what this thread copied
 */
#ifndef HYP_MMA_CUH
#define HYP_MMA_CUH

#include "hyp/types.cuh"

/* D = A * B + C (d may be c). */
__device__ __forceinline__ void hyp_mma_m16n8k16_bf16(float d[4], const unsigned a[4], const unsigned b[2],
                                                      const float c[4] HYP_SITE_PARAMS) {
#ifdef HYP_SIM
    ::hyp_sim::mma_m16n8k16_bf16(d, a, b, c, hyp_file, hyp_line);
#else
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%10,%11,%12,%13};\n"
        : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "f"(c[0]), "f"(c[1]),
          "f"(c[2]), "f"(c[3]));
#endif
}

#ifdef HYP_SIM
#define HYP_LDMATRIX(NAME, NUM, TRANS, PTXSUFFIX, OUTS, ...)                                       \
    __device__ __forceinline__ void NAME(unsigned r[NUM], const void *smem_row HYP_SITE_PARAMS) {  \
        ::hyp_sim::ldmatrix(r, NUM, TRANS, smem_row, "ldmatrix.m8n8" PTXSUFFIX, hyp_file, hyp_line); \
    }
#else
#define HYP_LDMATRIX(NAME, NUM, TRANS, PTXSUFFIX, OUTS, ...)                                       \
    __device__ __forceinline__ void NAME(unsigned r[NUM], const void *smem_row) {                  \
        unsigned addr = static_cast<unsigned>(__cvta_generic_to_shared(smem_row));                 \
        asm volatile("ldmatrix.sync.aligned.m8n8" PTXSUFFIX ".shared.b16 " OUTS ", [%" #NUM "];\n" \
                     : __VA_ARGS__                                                                 \
                     : "r"(addr)                                                                   \
                     : "memory");                                                                  \
    }
#endif

HYP_LDMATRIX(hyp_ldmatrix_x1, 1, false, ".x1", "{%0}", "=r"(r[0]))
HYP_LDMATRIX(hyp_ldmatrix_x2, 2, false, ".x2", "{%0,%1}", "=r"(r[0]), "=r"(r[1]))
HYP_LDMATRIX(hyp_ldmatrix_x4, 4, false, ".x4", "{%0,%1,%2,%3}", "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]))
HYP_LDMATRIX(hyp_ldmatrix_x1_trans, 1, true, ".x1.trans", "{%0}", "=r"(r[0]))
HYP_LDMATRIX(hyp_ldmatrix_x2_trans, 2, true, ".x2.trans", "{%0,%1}", "=r"(r[0]), "=r"(r[1]))
HYP_LDMATRIX(hyp_ldmatrix_x4_trans, 4, true, ".x4.trans", "{%0,%1,%2,%3}", "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]))
#undef HYP_LDMATRIX

/* 16 bytes global -> shared; both 16-byte aligned. */
__device__ __forceinline__ void hyp_cp_async_16(void *smem_dst, const void *gmem_src HYP_SITE_PARAMS) {
#ifdef HYP_SIM
    ::hyp_sim::cp_async(smem_dst, gmem_src, 16, 16, hyp_file, hyp_line);
#else
    unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(smem_dst));
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst), "l"(gmem_src) : "memory");
#endif
}

/* Reads only src_bytes (0..16) from gmem_src and zero-fills the rest: the guard for tile edges
 * (src_bytes = 0 reads nothing; src must still be a valid, aligned address). */
__device__ __forceinline__ void hyp_cp_async_16_zfill(void *smem_dst, const void *gmem_src,
                                                      unsigned src_bytes HYP_SITE_PARAMS) {
#ifdef HYP_SIM
    ::hyp_sim::cp_async(smem_dst, gmem_src, 16, src_bytes, hyp_file, hyp_line);
#else
    unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(smem_dst));
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(gmem_src), "r"(src_bytes)
                 : "memory");
#endif
}

__device__ __forceinline__ void hyp_cp_async_commit() {
#ifdef HYP_SIM
    ::hyp_sim::cp_async_commit();
#else
    asm volatile("cp.async.commit_group;\n" ::: "memory");
#endif
}

/* Waits until at most N committed groups of this thread are still in flight. */
template <int N> __device__ __forceinline__ void hyp_cp_async_wait_group() {
#ifdef HYP_SIM
    ::hyp_sim::cp_async_wait_group(N);
#else
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
#endif
}

/* Commits the open group and waits for every copy of this thread. */
__device__ __forceinline__ void hyp_cp_async_wait_all() {
#ifdef HYP_SIM
    ::hyp_sim::cp_async_wait_all();
#else
    asm volatile("cp.async.wait_all;\n" ::: "memory");
#endif
}

#endif
