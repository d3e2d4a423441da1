// tests/sim/planted.cu — kernels with planted bugs that the simulator must report (and their
// fixed twins, selected by an argument, that must run clean). Each bug is real CUDA that compiles
// (tests/gen/test_sim_cuda_valid.sh) and misbehaves or is undefined on a GPU.
#include "hyp/types.cuh"

// BUG: the two halves of the block wait at different __syncthreads.
extern "C" __global__ void divergent_barrier(int* out) {
    if (threadIdx.x < 16) {
        out[threadIdx.x] = 1;
        __syncthreads();  // PLANTED-DIVERGENT-A
    } else {
        __syncthreads();  // PLANTED-DIVERGENT-B
        out[threadIdx.x] = 2;
    }
}

// BUG: thread 5 returns while the others wait at the barrier.
extern "C" __global__ void exit_before_barrier(int* out) {
    if (threadIdx.x == 5) return;
    __syncthreads();
    out[threadIdx.x] = 1;
}

// BUG when shift = 1: the last thread writes s[128] of a 128-element static shared array.
extern "C" __global__ void oob_static_shared(const float* in, float* out, int shift) {
    __shared__ float s[128];
    s[threadIdx.x + shift] = in[threadIdx.x];  // PLANTED-OOB-STATIC
    __syncthreads();
    out[threadIdx.x] = s[threadIdx.x];
}

// BUG when the index runs past shared_bytes: the dynamic array ends on a guard page (or, inside
// the last 16 bytes, on canary bytes checked after the block).
extern "C" __global__ void oob_dynamic_shared(float* out, int shift) {
    extern __shared__ float dyn[];
    dyn[threadIdx.x + shift] = 1.0f;
    __syncthreads();
    out[threadIdx.x] = dyn[threadIdx.x];
}

// BUG when with_barrier = 0: reads the neighbour's shared value without waiting for its write.
// In thread order every neighbour t-1 has already run, so only a varied order shows the race.
extern "C" __global__ void missing_barrier(const int* in, int* out, int with_barrier) {
    __shared__ int s[256];
    const int t = threadIdx.x;
    s[t] = in[t];
    if (with_barrier) __syncthreads();  // uniform condition: every thread takes the same path
    out[t] = s[t > 0 ? t - 1 : 0];
}

// BUGs in warp collectives, by `which`:
//   0: a lane calls with a mask that does not name itself
//   1: lanes 0-15 and 16-31 name each other with different masks
//   2: lane 3 exits while the others shuffle with it
//   3: lanes 0-7 shuffle while lane 8 goes on to __syncthreads
//   4 (fine): a half-warp shuffle with the half-warp mask
extern "C" __global__ void warp_bugs(int* out, int which) {
    const unsigned lane = threadIdx.x & 31;
    int v = (int)threadIdx.x;
    if (which == 0) {
        v = __shfl_sync(0x1u, v, 0);
    } else if (which == 1) {
        v = __shfl_xor_sync(lane < 16 ? 0xFFFFFFFFu : 0xFFFF0000u, v, 1);
    } else if (which == 2) {
        if (lane == 3) return;
        v = __shfl_xor_sync(0xFFFFFFFFu, v, 1);
    } else if (which == 3) {
        if (lane < 8) v = __shfl_xor_sync(0xFFFFFFFFu, v, 1);
        __syncthreads();
    } else if (lane < 16) {
        v = __shfl_xor_sync(0x0000FFFFu, v, 1);
    }
    out[threadIdx.x] = v;
}

__device__ int deep(int n) {
    volatile char buf[1024];
    buf[n & 1023] = (char)n;
    return n <= 0 ? buf[0] : deep(n - 1) + buf[(n * 7) & 1023];
}

// BUG when depth is large: about 1 KiB of stack per level overflows a 64 KiB fiber stack.
extern "C" __global__ void stack_hog(int* out, int depth) { out[threadIdx.x] = deep(depth); }

// BUG: writes through a wild pointer (the caller passes a small non-null address).
extern "C" __global__ void wild_pointer(float* p) { p[threadIdx.x] = 1.0f; }

// A kernel that traps.
extern "C" __global__ void traps(int* out) {
    if (threadIdx.x == 7) __trap();
    out[threadIdx.x] = 1;
}

#ifdef HYP_SIM
extern "C" void hyp_sim_entry_divergent_barrier(void** args) { divergent_barrier(*(int**)args[0]); }
extern "C" void hyp_sim_entry_exit_before_barrier(void** args) { exit_before_barrier(*(int**)args[0]); }
extern "C" void hyp_sim_entry_oob_static_shared(void** args) {
    oob_static_shared(*(const float**)args[0], *(float**)args[1], *(int*)args[2]);
}
extern "C" void hyp_sim_entry_oob_dynamic_shared(void** args) {
    oob_dynamic_shared(*(float**)args[0], *(int*)args[1]);
}
extern "C" void hyp_sim_entry_missing_barrier(void** args) {
    missing_barrier(*(const int**)args[0], *(int**)args[1], *(int*)args[2]);
}
extern "C" void hyp_sim_entry_warp_bugs(void** args) { warp_bugs(*(int**)args[0], *(int*)args[1]); }
extern "C" void hyp_sim_entry_stack_hog(void** args) { stack_hog(*(int**)args[0], *(int*)args[1]); }
extern "C" void hyp_sim_entry_wild_pointer(void** args) { wild_pointer(*(float**)args[0]); }
extern "C" void hyp_sim_entry_traps(void** args) { traps(*(int**)args[0]); }
#endif
