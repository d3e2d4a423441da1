// tests/sim/basic.cu — correct kernels the simulator must run exactly (tests/unit/test_sim.c):
// block reductions, warp shuffles with width < 32, votes, atomics across blocks, dynamic shared
// memory, __syncthreads_count. Valid CUDA too (tests/gen/test_sim_cuda_valid.sh compiles it with
// NVRTC for sm_80 and sm_90). Launch stubs as the renderer writes them (kernels/DIALECT.md).
#include "hyp/reduce.cuh"
#include "hyp/types.cuh"
#ifdef HYP_SIM
#include <pthread.h>  // only to record which OS thread ran a block
#endif

// out[blockIdx.x] = sum and max of in[blockIdx.x * n .. + n), any blockDim (also not a multiple of 32).
extern "C" __global__ void block_reduce(const float* in, float* sum_out, float* max_out, int n) {
    const float* x = in + (size_t)blockIdx.x * n;
    float s = 0.0f, m = -HYP_INF;
    for (int i = hyp_block_tid(); i < n; i += hyp_block_threads()) {
        s += x[i];
        m = fmaxf(m, x[i]);
    }
    s = hyp_block_sum(s);
    m = hyp_block_max(m);
    if (hyp_block_tid() == 0) {
        sum_out[blockIdx.x] = s;
        max_out[blockIdx.x] = m;
    }
}

// Every shuffle flavour with a given width; out has 6 ints per thread.
extern "C" __global__ void shuffles(const int* in, int* out, int width) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    const int v = in[i];
    int s = v;  // segment sum by butterfly
    for (int o = width / 2; o > 0; o >>= 1) s += __shfl_xor_sync(0xFFFFFFFFu, s, o, width);
    int* o6 = out + 6 * i;
    o6[0] = s;
    o6[1] = __shfl_up_sync(0xFFFFFFFFu, v, 1, width);
    o6[2] = __shfl_down_sync(0xFFFFFFFFu, v, 3, width);
    o6[3] = __shfl_sync(0xFFFFFFFFu, v, 5, width);
    o6[4] = __shfl_xor_sync(0xFFFFFFFFu, v, 9, width);  // reaches into the next segment: own value
    o6[5] = (int)__ballot_sync(0xFFFFFFFFu, v & 1) ^ (__any_sync(0xFFFFFFFFu, v > 90) << 1) ^
            (__all_sync(0xFFFFFFFFu, v >= 0) << 2);
}

// Many blocks on several OS threads hitting the same global words.
extern "C" __global__ void atomics(int* count, float* fsum, unsigned* umax, unsigned long long* u64,
                                   int* cas_count, int* block_thread_id) {
    const unsigned gid = blockIdx.x * blockDim.x + threadIdx.x;
    atomicAdd(count, 1);
    atomicAdd(fsum, 1.0f);
    atomicMax(umax, gid);
    atomicAdd(u64, (unsigned long long)gid);
    int old = *cas_count, seen;
    while ((seen = atomicCAS(cas_count, old, old + 1)) != old) old = seen;
#ifdef HYP_SIM
    if (threadIdx.x == 0) block_thread_id[blockIdx.x] = (int)((unsigned long)pthread_self() >> 12);
#else
    if (threadIdx.x == 0) block_thread_id[blockIdx.x] = 0;
#endif
}

// Reverses each block's slice through dynamic shared memory; a second view of the same bytes.
extern "C" __global__ void dyn_reverse(const float* in, float* out, int* count_out) {
    extern __shared__ float tile[];
    const int n = blockDim.x, t = threadIdx.x;
    tile[t] = in[blockIdx.x * n + t];
    __syncthreads();
    out[blockIdx.x * n + t] = tile[n - 1 - t];
    int c = __syncthreads_count(tile[t] > 0.0f);
    if (t == 0) count_out[blockIdx.x] = c;
}

extern "C" __global__ void dyn_alias(int* out) {
    extern __shared__ __align__(16) unsigned char raw[];
    unsigned* words = reinterpret_cast<unsigned*>(raw);
    if (threadIdx.x == 0) words[0] = 0x04030201u;
    __syncthreads();
    out[threadIdx.x] = raw[threadIdx.x % 4];
}

// The other declaration forms of dynamic shared memory: at file scope, and inside a template
// (where CUDA needs one byte array for every instantiation).
extern __shared__ float dyn_file_scope[];

template <class T> __device__ void reverse_twice(T* out) {
    extern __shared__ __align__(16) unsigned char dyn_raw[];
    T* buf = reinterpret_cast<T*>(dyn_raw);
    buf[threadIdx.x] = (T)threadIdx.x;
    __syncthreads();
    out[threadIdx.x] = buf[blockDim.x - 1 - threadIdx.x] * (T)2;
    __syncthreads();
}

extern "C" __global__ void dyn_forms(float* fo, int* io) {
    reverse_twice<int>(io);
    reverse_twice<float>(fo);
    dyn_file_scope[threadIdx.x] = 0.5f * threadIdx.x;
    __syncthreads();
    fo[threadIdx.x] += dyn_file_scope[(threadIdx.x + 1) % blockDim.x];
}

// The launch-overhead benchmark: two barriers and a neighbour read per thread.
extern "C" __global__ void two_barriers(float* out) {
    __shared__ float s[1024];
    const unsigned t = threadIdx.x;
    s[t] = (float)t;
    __syncthreads();
    const float v = s[(t + 1) % blockDim.x];
    __syncthreads();
    out[blockIdx.x * blockDim.x + t] = v;
}

#ifdef HYP_SIM
extern "C" void hyp_sim_entry_two_barriers(void** args) { two_barriers(*(float**)args[0]); }
extern "C" void hyp_sim_entry_block_reduce(void** args) {
    block_reduce(*(const float**)args[0], *(float**)args[1], *(float**)args[2], *(int*)args[3]);
}
extern "C" void hyp_sim_entry_shuffles(void** args) {
    shuffles(*(const int**)args[0], *(int**)args[1], *(int*)args[2]);
}
extern "C" void hyp_sim_entry_atomics(void** args) {
    atomics(*(int**)args[0], *(float**)args[1], *(unsigned**)args[2], *(unsigned long long**)args[3],
            *(int**)args[4], *(int**)args[5]);
}
extern "C" void hyp_sim_entry_dyn_reverse(void** args) {
    dyn_reverse(*(const float**)args[0], *(float**)args[1], *(int**)args[2]);
}
extern "C" void hyp_sim_entry_dyn_alias(void** args) { dyn_alias(*(int**)args[0]); }
extern "C" void hyp_sim_entry_dyn_forms(void** args) { dyn_forms(*(float**)args[0], *(int**)args[1]); }
#endif
