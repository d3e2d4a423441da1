// tests/sim/mma.cu — tensor-core wrappers under the simulator: a 16x16x16 bf16 GEMM tile by one
// warp with cp.async, ldmatrix and mma.m16n8k16 (and with fragments built by hand from the PTX
// ISA formulas), plus deliberately wrong fragment indexing that must give wrong numbers; and
// cp.async group semantics. Valid CUDA for sm_80+ (tests/gen/test_sim_cuda_valid.sh).
#include "hyp/mma.cuh"
#include "hyp/types.cuh"

// C[16][16] = A[16][16] * B[16][16] + bias, bf16 inputs (row-major, B is K x N), fp32 out.
//   mode 0: ldmatrix.x4 for A, ldmatrix.x4.trans for B
//   mode 1: fragments gathered by hand with the PTX formulas
//   mode 2: BUG: A's fragment indexed transposed (row and column swapped)
//   mode 3: BUG: A loaded with ldmatrix .trans
//   mode 4: BUG: B fragments of the two n-halves swapped
extern "C" __global__ void gemm16(const hyp_bf16* A, const hyp_bf16* B, float* C, float bias, int mode) {
    __shared__ __align__(16) hyp_bf16 As[16][16];
    __shared__ __align__(16) hyp_bf16 Bs[16][16];
    const unsigned lane = threadIdx.x & 31;
    // 512 bytes per matrix = 32 rows of 16 bytes: one cp.async per lane per matrix
    hyp_cp_async_16(&As[lane / 2][(lane % 2) * 8], A + (lane / 2) * 16 + (lane % 2) * 8);
    hyp_cp_async_16(&Bs[lane / 2][(lane % 2) * 8], B + (lane / 2) * 16 + (lane % 2) * 8);
    hyp_cp_async_commit();
    hyp_cp_async_wait_group<0>();
    __syncwarp();

    const unsigned g = lane >> 2, t = lane & 3;
    unsigned a[4], b0[2], b1[2];
    if (mode == 0 || mode == 3) {
        const hyp_bf16* arow = &As[(lane % 8) + 8 * ((lane / 8) % 2)][8 * (lane / 16)];
        if (mode == 0) hyp_ldmatrix_x4(a, arow);
        else hyp_ldmatrix_x4_trans(a, arow);
        unsigned b[4];
        hyp_ldmatrix_x4_trans(b, &Bs[(lane % 8) + 8 * ((lane / 8) % 2)][8 * (lane / 16)]);
        b0[0] = b[0];
        b0[1] = b[1];
        b1[0] = b[2];
        b1[1] = b[3];
    } else {
        if (mode == 2) {
            a[0] = hyp_pack_bf16x2(As[2 * t][g], As[2 * t + 1][g]);
            a[1] = hyp_pack_bf16x2(As[2 * t][g + 8], As[2 * t + 1][g + 8]);
            a[2] = hyp_pack_bf16x2(As[2 * t + 8][g], As[2 * t + 9][g]);
            a[3] = hyp_pack_bf16x2(As[2 * t + 8][g + 8], As[2 * t + 9][g + 8]);
        } else {
            a[0] = hyp_pack_bf16x2(As[g][2 * t], As[g][2 * t + 1]);
            a[1] = hyp_pack_bf16x2(As[g + 8][2 * t], As[g + 8][2 * t + 1]);
            a[2] = hyp_pack_bf16x2(As[g][2 * t + 8], As[g][2 * t + 9]);
            a[3] = hyp_pack_bf16x2(As[g + 8][2 * t + 8], As[g + 8][2 * t + 9]);
        }
        const unsigned n0 = mode == 4 ? 8 : 0, n1 = mode == 4 ? 0 : 8;
        b0[0] = hyp_pack_bf16x2(Bs[2 * t][n0 + g], Bs[2 * t + 1][n0 + g]);
        b0[1] = hyp_pack_bf16x2(Bs[2 * t + 8][n0 + g], Bs[2 * t + 9][n0 + g]);
        b1[0] = hyp_pack_bf16x2(Bs[2 * t][n1 + g], Bs[2 * t + 1][n1 + g]);
        b1[1] = hyp_pack_bf16x2(Bs[2 * t + 8][n1 + g], Bs[2 * t + 9][n1 + g]);
    }
    float d0[4] = {bias, bias, bias, bias}, d1[4] = {bias, bias, bias, bias};
    hyp_mma_m16n8k16_bf16(d0, a, b0, d0);
    hyp_mma_m16n8k16_bf16(d1, a, b1, d1);
    for (int i = 0; i < 4; i++) {
        const unsigned row = g + 8 * (i >> 1), col = 2 * t + (i & 1);
        C[row * 16 + col] = d0[i];
        C[row * 16 + 8 + col] = d1[i];
    }
}

// Each thread copies 16 bytes into dynamic shared memory with cp.async (the last one only
// `tail_bytes` of them, zero-filling the rest), then reads its neighbour's chunk. BUG when
// wait = 0: no cp.async.wait before the barrier, so the neighbour's bytes may not have landed.
extern "C" __global__ void cp_async_copy(const float* src, float* dst, int tail_bytes, int wait) {
    extern __shared__ __align__(16) float buf[];
    const unsigned t = threadIdx.x;
    if (t == blockDim.x - 1) hyp_cp_async_16_zfill(&buf[4 * t], src + 4 * t, (unsigned)tail_bytes);
    else hyp_cp_async_16(&buf[4 * t], src + 4 * t);
    hyp_cp_async_commit();
    if (wait) hyp_cp_async_wait_group<0>();
    __syncthreads();
    const unsigned u = (t + 1) % blockDim.x;
    for (int k = 0; k < 4; k++) dst[4 * t + k] = buf[4 * u + k];
}

// Two commit groups per thread; after wait_group<1> only the older one is guaranteed.
// early[] is read before wait_group<0> (racy on a GPU; in sim it always sees the poison).
extern "C" __global__ void cp_async_groups(const float* src, float* first, float* early, float* second) {
    extern __shared__ __align__(16) float buf[];
    const unsigned t = threadIdx.x;
    hyp_cp_async_16(&buf[8 * t], src + 8 * t);
    hyp_cp_async_commit();
    hyp_cp_async_16(&buf[8 * t + 4], src + 8 * t + 4);
    hyp_cp_async_commit();
    hyp_cp_async_wait_group<1>();
    for (int k = 0; k < 4; k++) first[4 * t + k] = buf[8 * t + k];
    for (int k = 0; k < 4; k++) early[4 * t + k] = buf[8 * t + 4 + k];
    hyp_cp_async_wait_group<0>();
    for (int k = 0; k < 4; k++) second[4 * t + k] = buf[8 * t + 4 + k];
}

#ifdef HYP_SIM
extern "C" void hyp_sim_entry_gemm16(void** args) {
    gemm16(*(const hyp_bf16**)args[0], *(const hyp_bf16**)args[1], *(float**)args[2], *(float*)args[3],
           *(int*)args[4]);
}
extern "C" void hyp_sim_entry_cp_async_copy(void** args) {
    cp_async_copy(*(const float**)args[0], *(float**)args[1], *(int*)args[2], *(int*)args[3]);
}
extern "C" void hyp_sim_entry_cp_async_groups(void** args) {
    cp_async_groups(*(const float**)args[0], *(float**)args[1], *(float**)args[2], *(float**)args[3]);
}
#endif
