/* hyp/adamw_coord.cuh — one AdamW coordinate update for the optimizer templates that fall back to
 * AdamW for part of the parameters (Adam-mini outside its partition, Muon's non-matrix tensors).
 * The float expressions are op_adamw's (runtime/optim/optim_kernels_cpu.c) in their order, so the
 * cpu and device updates agree within rounding (test_adam_mini_dev, test_muon_dev). Compiles under
 * NVRTC and the simulator prelude; uses no host headers. */
#ifndef HYP_ADAMW_COORD_CUH
#define HYP_ADAMW_COORD_CUH

/* p[i], m[i], v[i] after one AdamW step on gradient g[i] * gs; ibc1 = 1/(1-beta1^t), ibc2 likewise. */
__device__ __forceinline__ void hyp_adamw_coord(float *p, const float *g, float *m, float *v, long i, float gs, float lr,
                                                float beta1, float beta2, float eps, float wd, float ibc1, float ibc2) {
    float gi = g[i] * gs;
    float mi = beta1 * m[i] + (1.0f - beta1) * gi;
    float vi = beta2 * v[i] + (1.0f - beta2) * gi * gi;
    m[i] = mi;
    v[i] = vi;
    float mhat = mi * ibc1, vhat = vi * ibc2;
    p[i] -= lr * (mhat / (sqrtf(vhat) + eps) + wd * p[i]);
}

#endif
