// tests/hopper/hopper_sim.cu — kernels for test_hopper_sim_v2114 (the sim's emulation of
// kernels/hyp/hopper.cuh): a TMA box into dynamic shared memory dumped byte for byte, several
// TMA loads on one barrier, mbarrier phases, named barriers, setmaxnreg, one wgmma over a
// shared-memory image the test builds, and each with planted bugs selected by `mode`. Valid CUDA
// for sm_90a; the demonstration GEMM (producer warpgroup + consumer warpgroup) is gemm_tma_wgmma.cu.
#include "hyp/hopper.cuh"

// One box at (c0, c1, c2) into smem, then every thread dumps the `bytes` bytes of smem to out.
//   mode 0: correct; mode 1: BUG: reads smem before waiting on the barrier
extern "C" __global__ void tma_box(unsigned char* out, const __grid_constant__ hyp_tmap map, int rank, int c0,
                                   int c1, int c2, unsigned bytes, int mode) {
    extern __shared__ __align__(1024) unsigned char smem[];
    __shared__ __align__(8) unsigned long long bar;
    if (threadIdx.x == 0) {
        hyp_mbar_init(&bar, 1);
        hyp_fence_mbar_init();
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        hyp_mbar_arrive_expect_tx(&bar, bytes);
        if (rank == 2) hyp_tma_load_2d(smem, &map, c0, c1, &bar);
        else hyp_tma_load_3d(smem, &map, c0, c1, c2, &bar);
    }
    if (mode != 1) hyp_mbar_wait(&bar, 0);
    for (unsigned i = threadIdx.x; i < bytes; i += blockDim.x) out[i] = smem[i];
}

// A TMA store: every thread copies `img` (a box image, already swizzled) into smem, then thread 0
// stores the box at (c0, c1, c2).
//   mode 0: correct; mode 1: BUG: overwrites the smem source before cp.async.bulk.wait_group.read;
//   mode 2: BUG: never waits for the store
extern "C" __global__ void tma_store_box(const __grid_constant__ hyp_tmap map, int rank, int c0, int c1, int c2,
                                         const unsigned char* img, unsigned bytes, int mode) {
    extern __shared__ __align__(1024) unsigned char smem[];
    for (unsigned i = threadIdx.x; i < bytes; i += blockDim.x) smem[i] = img[i];
    hyp_fence_proxy_async();
    __syncthreads();
    if (threadIdx.x == 0) {
        if (rank == 2) hyp_tma_store_2d(&map, c0, c1, smem);
        else hyp_tma_store_3d(&map, c0, c1, c2, smem);
        hyp_tma_store_commit();
        if (mode == 1)
            for (unsigned i = 0; i < bytes; i++) smem[i] = 0x33;
        if (mode != 2) hyp_tma_store_wait<0>();
    }
}

// `n` boxes of a 2-D map side by side along dim 1 (rows c1 + i * box1), `bytes` each, one barrier.
//   mode 0: one arrive.expect_tx for all; mode 1: expect_tx per load, then one plain arrive (the
//   loads are issued BEFORE the expect_tx: the tx-count goes negative first, as the ISA allows);
//   mode 2: BUG: expects 16 bytes more than the loads bring (the wait never completes)
extern "C" __global__ void tma_multi(unsigned char* out, const __grid_constant__ hyp_tmap map, int c0, int c1,
                                     int box1, int n, unsigned bytes, int mode) {
    extern __shared__ __align__(1024) unsigned char smem[];
    __shared__ __align__(8) unsigned long long bar;
    if (threadIdx.x == 0) {
        hyp_mbar_init(&bar, 1);
        hyp_fence_mbar_init();
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        if (mode == 1) {
            for (int i = 0; i < n; i++) hyp_tma_load_2d(smem + i * bytes, &map, c0, c1 + i * box1, &bar);
            for (int i = 0; i < n; i++) hyp_mbar_expect_tx(&bar, bytes);
            hyp_mbar_arrive(&bar);
        } else {
            hyp_mbar_arrive_expect_tx(&bar, n * bytes + (mode == 2 ? 16 : 0));
            for (int i = 0; i < n; i++) hyp_tma_load_2d(smem + i * bytes, &map, c0, c1 + i * box1, &bar);
        }
    }
    hyp_mbar_wait(&bar, 0);
    for (unsigned i = threadIdx.x; i < n * bytes; i += blockDim.x) out[i] = smem[i];
}

// mbarrier phases: every thread adds 1 to a shared counter, arrives, waits for the phase, then
// records the counter (which must be blockDim * (p + 1) for phase p, p = 0..5). Also records
// that a wait on parity 1 of a fresh barrier returns at once (out[6 * blockDim + tid] = 1).
//   mode 1: BUG: the count is one more than the threads (deadlock)
//   mode 2: BUG: arrive on a phase with no pending arrival (expect_tx outstanding)
//   mode 3: BUG: a barrier used without init
extern "C" __global__ void mbar_phases(int* out, int mode) {
    __shared__ __align__(8) unsigned long long bar[2];
    __shared__ int counter;
    const unsigned n = blockDim.x, tid = threadIdx.x;
    if (tid == 0) {
        hyp_mbar_init(&bar[0], mode == 1 ? n + 1 : n);
        hyp_mbar_init(&bar[1], 1);
        counter = 0;
        hyp_fence_mbar_init();
    }
    __syncthreads();
    if (mode == 2) {
        if (tid == 0) {
            hyp_mbar_arrive_expect_tx(&bar[1], 16);
            hyp_mbar_arrive(&bar[1]);
        }
        return;
    }
    if (mode == 3) {
        __shared__ __align__(8) unsigned long long never;
        hyp_mbar_arrive(&never);
        return;
    }
    hyp_mbar_wait(&bar[1], 1); // the phase before the first: complete, returns at once
    out[6 * n + tid] = 1;
    for (unsigned p = 0; p < 6; p++) {
        atomicAdd(&counter, 1);
        hyp_mbar_arrive(&bar[0]);
        hyp_mbar_wait(&bar[0], p & 1);
        out[p * n + tid] = counter;
        // nobody may add for phase p+1 before everyone read phase p's count
        __syncthreads();
    }
}

// Named barriers between two warpgroups (256 threads), ping-pong three rounds: warpgroup 0 writes
// a value and bar.arrive(1), warpgroup 1 bar.sync(1) then reads it; back with barrier 2.
//   mode 1: BUG: warpgroup 1 passes another thread count; mode 2: BUG: bar.sync 3 that only
//   warpgroup 0 reaches (deadlock); mode 3: BUG: id 0
extern "C" __global__ void named_bars(int* out, int mode) {
    __shared__ int v[2];
    const unsigned wg = threadIdx.x / 128;
    for (int round = 0; round < 3; round++) {
        if (wg == 0) {
            if (threadIdx.x == 0) v[0] = 100 + round;
            hyp_named_bar_arrive(1, 256);
            hyp_named_bar_sync(2, 256);
            out[round * 256 + threadIdx.x] = v[1];
        } else {
            hyp_named_bar_sync(1, mode == 1 ? 192 : 256);
            out[round * 256 + threadIdx.x] = v[0];
            if (threadIdx.x == 128) v[1] = 200 + round;
            hyp_named_bar_arrive(2, 256);
        }
    }
    if (mode == 2 && wg == 0) hyp_named_bar_sync(3, 256);
    if (mode == 3) hyp_named_bar_sync(0, 256);
}

// setmaxnreg: warpgroup 0 gives registers up, warpgroup 1 takes them; out[tid] = 1 after.
//   mode 1: BUG: one thread of warpgroup 1 asks for another count
extern "C" __global__ void regs(int* out, int mode) {
    if (threadIdx.x < 128) hyp_setmaxnreg_dec<40>();
    else if (mode == 1 && threadIdx.x == 133) hyp_setmaxnreg_inc<240>();
    else hyp_setmaxnreg_inc<232>();
    out[threadIdx.x] = 1;
}

// One wgmma of a 128-thread block over a shared-memory image the test built (copied in with
// plain stores: hence hyp_fence_proxy_async). Each thread's N/2 accumulators start from
// cin[tid * N/2 + v] and end in out[tid * N/2 + v].
//   mode 0: correct; mode 1: BUG: reads the accumulators before wgmma.wait_group; mode 2: BUG: no
//   wgmma.fence; mode 3: BUG: thread 77 returns before the wgmma (deadlock); mode 4: two wgmmas
//   in two groups (the second into out2's accumulators, same operands) and wait_group 1: the
//   first group is readable, the second not yet (NaN), then wait_group 0 makes it so (out3);
//   mode 5: BUG: thread 127 (the first to run on after the wgmma) overwrites an A element before
//   its wait_group; mode 6: BUG: thread 127 issues a TMA load into B's shared memory while the
//   wgmma is in flight (`map`: any bf16 map with a 64x8 box)
template <int N, int TA, int TB>
__device__ void wgmma_one(float* d, unsigned long long da, const unsigned* a, unsigned long long db, bool acc,
                          bool rs) {
    if (rs) hyp_wgmma_rs<N, TB>(d, a, db, acc);
    else hyp_wgmma_ss<N, TA, TB>(d, da, db, acc);
}
template <int N>
__device__ void wgmma_n(float* d, unsigned long long da, const unsigned* a, unsigned long long db, bool acc, bool rs,
                        int ta, int tb) {
    if (ta == 0 && tb == 0) wgmma_one<N, 0, 0>(d, da, a, db, acc, rs);
    else if (ta == 0) wgmma_one<N, 0, 1>(d, da, a, db, acc, rs);
    else if (tb == 0) wgmma_one<N, 1, 0>(d, da, a, db, acc, rs);
    else wgmma_one<N, 1, 1>(d, da, a, db, acc, rs);
}
__device__ void wgmma_dispatch(int n, float* d, unsigned long long da, const unsigned* a, unsigned long long db,
                               bool acc, bool rs, int ta, int tb) {
    switch (n) {
    case 8: wgmma_n<8>(d, da, a, db, acc, rs, ta, tb); break;
    case 16: wgmma_n<16>(d, da, a, db, acc, rs, ta, tb); break;
    case 24: wgmma_n<24>(d, da, a, db, acc, rs, ta, tb); break;
    case 64: wgmma_n<64>(d, da, a, db, acc, rs, ta, tb); break;
    case 128: wgmma_n<128>(d, da, a, db, acc, rs, ta, tb); break;
    default: wgmma_n<256>(d, da, a, db, acc, rs, ta, tb); break;
    }
}
struct wgmma_args {
    unsigned offA, lboA, sboA, offB, lboB, sboB;
    int swA, swB, n, ta, tb, rs, accumulate, mode;
};
extern "C" __global__ void wgmma_tile(float* out, float* out2, float* out3, const unsigned char* img,
                                      unsigned img_bytes, const float* cin, const unsigned* afrag, wgmma_args p,
                                      const __grid_constant__ hyp_tmap map) {
    __shared__ __align__(8) unsigned long long bar;
    extern __shared__ __align__(1024) unsigned char smem[];
    const unsigned tid = threadIdx.x, nv = p.n / 2;
    for (unsigned i = tid; i < img_bytes; i += blockDim.x) smem[i] = img[i];
    hyp_fence_proxy_async();
    __syncthreads();
    if (p.mode == 3 && tid == 77) return;
    float d[128], d2[128];
    for (unsigned v = 0; v < nv; v++) d[v] = d2[v] = cin[tid * nv + v];
    unsigned a[4];
    for (int j = 0; j < 4; j++) a[j] = p.rs ? afrag[tid * 4 + j] : 0u;
    unsigned long long da = hyp_wgmma_desc(smem + p.offA, p.swA, p.lboA, p.sboA);
    unsigned long long db = hyp_wgmma_desc(smem + p.offB, p.swB, p.lboB, p.sboB);
    if (p.mode != 2) hyp_wgmma_fence();
    wgmma_dispatch(p.n, d, da, a, db, p.accumulate != 0, p.rs != 0, p.ta, p.tb);
    hyp_wgmma_commit();
    if (p.mode == 5 && tid == 127) smem[p.offA] ^= 0x40;
    if (p.mode == 6 && tid == 127) {
        hyp_mbar_init(&bar, 1);
        hyp_mbar_arrive_expect_tx(&bar, 1024);
        hyp_tma_load_2d(smem + p.offB, &map, 0, 0, &bar);
    }
    if (p.mode == 4) {
        wgmma_dispatch(p.n, d2, da, a, db, p.accumulate != 0, p.rs != 0, p.ta, p.tb);
        hyp_wgmma_commit();
        hyp_wgmma_wait<1>();
        for (unsigned v = 0; v < nv; v++) out2[tid * nv + v] = d2[v];
    }
    if (p.mode != 1) hyp_wgmma_wait<0>();
    for (unsigned v = 0; v < nv; v++) out[tid * nv + v] = d[v];
    if (p.mode == 4)
        for (unsigned v = 0; v < nv; v++) out3[tid * nv + v] = d2[v];
}

#ifdef HYP_SIM
extern "C" void hyp_sim_entry_tma_box(void** args) {
    tma_box(*(unsigned char**)args[0], *(const hyp_tmap*)args[1], *(int*)args[2], *(int*)args[3], *(int*)args[4],
            *(int*)args[5], *(unsigned*)args[6], *(int*)args[7]);
}
extern "C" void hyp_sim_entry_tma_store_box(void** args) {
    tma_store_box(*(const hyp_tmap*)args[0], *(int*)args[1], *(int*)args[2], *(int*)args[3], *(int*)args[4],
                  *(const unsigned char**)args[5], *(unsigned*)args[6], *(int*)args[7]);
}
extern "C" void hyp_sim_entry_tma_multi(void** args) {
    tma_multi(*(unsigned char**)args[0], *(const hyp_tmap*)args[1], *(int*)args[2], *(int*)args[3], *(int*)args[4],
              *(int*)args[5], *(unsigned*)args[6], *(int*)args[7]);
}
extern "C" void hyp_sim_entry_mbar_phases(void** args) { mbar_phases(*(int**)args[0], *(int*)args[1]); }
extern "C" void hyp_sim_entry_named_bars(void** args) { named_bars(*(int**)args[0], *(int*)args[1]); }
extern "C" void hyp_sim_entry_regs(void** args) { regs(*(int**)args[0], *(int*)args[1]); }
extern "C" void hyp_sim_entry_wgmma_tile(void** args) {
    wgmma_tile(*(float**)args[0], *(float**)args[1], *(float**)args[2], *(const unsigned char**)args[3],
               *(unsigned*)args[4], *(const float**)args[5], *(const unsigned**)args[6], *(wgmma_args*)args[7],
               *(const hyp_tmap*)args[8]);
}
#endif
