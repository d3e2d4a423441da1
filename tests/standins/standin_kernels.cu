// standin_kernels.cu — the kernels test_standin_driver.c compiles with NVRTC (cubins) and runs on
// the driver stand-in (the simulator builds this same source): each exercises one rule. Never
// used by a trainer.
#if defined(HYP_SIM) && !defined(__launch_bounds__)
#define __launch_bounds__(...)
#endif
extern "C" __global__ void fill(float* out, float v, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = v;
}
extern "C" __global__ void scale(const float* in, float* out, float a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = a * in[i];
}
// 4096 bytes of static shared memory: they count against the launch's 48 KB with the dynamic bytes
extern "C" __global__ void static_smem(float* out) {
    __shared__ float s[1024];
    s[threadIdx.x] = (float)threadIdx.x;
    __syncthreads();
    out[threadIdx.x] = s[(threadIdx.x + 1) % blockDim.x];
}
extern "C" __global__ void dyn_smem(float* out, int n) {
    extern __shared__ float d[];
    for (int i = threadIdx.x; i < n; i += blockDim.x) d[i] = (float)i;
    __syncthreads();
    if (threadIdx.x == 0) out[0] = d[n - 1];
}
// at most 128 threads per block (EIATTR_MAX_THREADS in the cubin)
extern "C" __global__ void __launch_bounds__(128) bounded(float* out) { out[threadIdx.x] = 1; }
// reads *p: a pointer the device cannot reach faults here
extern "C" __global__ void deref(const float* p, float* out) { out[0] = p[0]; }

#ifdef HYP_SIM
extern "C" void hyp_sim_entry_bounded(void** a) { bounded(*(float**)a[0]); }
extern "C" void hyp_sim_entry_fill(void** a) { fill(*(float**)a[0], *(float*)a[1], *(int*)a[2]); }
extern "C" void hyp_sim_entry_scale(void** a) { scale(*(const float**)a[0], *(float**)a[1], *(float*)a[2], *(int*)a[3]); }
extern "C" void hyp_sim_entry_static_smem(void** a) { static_smem(*(float**)a[0]); }
extern "C" void hyp_sim_entry_dyn_smem(void** a) { dyn_smem(*(float**)a[0], *(int*)a[1]); }
extern "C" void hyp_sim_entry_deref(void** a) { deref(*(const float**)a[0], *(float**)a[1]); }
#endif
