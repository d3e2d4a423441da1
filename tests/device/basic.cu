// tests/device/basic.cu — tiny kernels for the device-layer tests (tests/unit/test_device.c through
// "sim", tests/gpu/test_gpu_device.c through NVRTC + "cuda"). Launch stubs as the renderer writes
// them (kernels/DIALECT.md). Arguments of every size the layer passes: pointers, int, float, int64.

// x[i] = v
extern "C" __global__ void fill(float* x, float v, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = v;
}

// y[i] = x[i] + v   (reads what another launch wrote: the stream/event ordering checks)
extern "C" __global__ void add_scalar(float* y, const float* x, float v, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i] + v;
}

// y[i] += a * x[i] with a 64-bit count and a 2D grid (blockIdx.y selects a half)
extern "C" __global__ void axpy64(float* y, const float* x, float a, long long n) {
    const long long half = (n + 1) / 2;
    const long long i = (long long)blockIdx.y * half + (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if ((long long)blockIdx.x * blockDim.x + threadIdx.x < half && i < n) y[i] += a * x[i];
}

// out = each block's slice reversed through dynamic shared memory
extern "C" __global__ void reverse_block(float* out, const float* in) {
    extern __shared__ float tile[];
    const int base = blockIdx.x * blockDim.x;
    tile[threadIdx.x] = in[base + threadIdx.x];
    __syncthreads();
    out[base + threadIdx.x] = tile[blockDim.x - 1 - threadIdx.x];
}

// a kernel that faults on purpose when bad != 0 (a sticky asynchronous error)
extern "C" __global__ void maybe_trap(int bad) {
    if (bad && threadIdx.x == 0) __trap();
}

#ifdef HYP_SIM
extern "C" void hyp_sim_entry_fill(void** args) { fill(*(float**)args[0], *(float*)args[1], *(int*)args[2]); }
extern "C" void hyp_sim_entry_add_scalar(void** args) {
    add_scalar(*(float**)args[0], *(const float**)args[1], *(float*)args[2], *(int*)args[3]);
}
extern "C" void hyp_sim_entry_axpy64(void** args) {
    axpy64(*(float**)args[0], *(const float**)args[1], *(float*)args[2], *(long long*)args[3]);
}
extern "C" void hyp_sim_entry_reverse_block(void** args) {
    reverse_block(*(float**)args[0], *(const float**)args[1]);
}
extern "C" void hyp_sim_entry_maybe_trap(void** args) { maybe_trap(*(int*)args[0]); }
#endif
