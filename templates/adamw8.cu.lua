--[[ hyperion template
family = "adamw8"
doc = "AdamW with 8-bit block-wise quantized states (v2132 state_dtype q8; bitsandbytes' AdamW8bit), one tensor per launch, one CUDA block per 256-element block: dequantize m, v (code * absmax), op_adamw's fp32 update, the block's new absmax, nearest-code requantization; fp32 weights, states packed per tensor (absmax floats, then uint8 codes)"
constants = {
  BLOCK = { "int", default = 256, doc = "threads per block = elements per absmax block (HYP_Q8_BLOCK; the kernel requires 256)" },
}
derive = function(K, decide)
  decide("blocks", "one CUDA block per 256-element block", "every float operation an _rn intrinsic (no contraction), so the device step is runtime/optim/optim_adamw8.c's bit for bit")
end
kernels = {
  { name = "adamw8_block_step", doc = "one q8 block of one tensor p[n]: sm/sv = [nb absmax | n codes] packed states, maps = the signed then the unsigned dynamic map (512 floats); g scaled by *gscale (NULL: 1)",
    params = { "float* __restrict__ p", "float* __restrict__ sm", "float* __restrict__ sv", "const float* __restrict__ g",
      "const float* __restrict__ maps", "long n", "float lr", "float beta1", "float beta2", "float eps", "float wd",
      "float ibc1", "float ibc2", "const float* __restrict__ gscale" },
    block = "BLOCK", grid = "cdiv(n, BLOCK)" },
  { name = "adamw8_f32_step", doc = "one tensor that keeps fp32 states in a q8 run (group rule f32: under q8_min_size elements, or an embedding): op_adamw's update on plain float m[n], v[n], every operation _rn (optim_adamw8.c f32_step bit for bit)",
    params = { "float* __restrict__ p", "float* __restrict__ m", "float* __restrict__ v", "const float* __restrict__ g",
      "long n", "float lr", "float beta1", "float beta2", "float eps", "float wd", "float ibc1", "float ibc2",
      "const float* __restrict__ gscale" },
    block = "BLOCK", grid = "cdiv(n, BLOCK)" },
}
ops = {
  optimizer = { { "adamw8_block_step", "params", "m", "v", "grads", "maps", "n", "lr", "beta1", "beta2", "eps", "wd", "1/(1-beta1^t)", "1/(1-beta2^t)", "gscale" } },
}
]]
{{ partial("common") }}

// The float expressions are runtime/optim/optim_adamw8.c's (op_adamw's) in their order, each an
// _rn intrinsic so that no multiply-add is fused: the same bits as the cpu step (test_v2132_q8_train).

% if emit.adamw8_block_step or emit.adamw8_f32_step then
// the new m (beta1 * prev + (1 - beta1) * g), the new v (beta2 * prev + ((1 - beta2) * g) * g) and
// op_adamw's step from them, each in optim_adamw8.c's order of roundings
__device__ __forceinline__ float q8_first(float beta1, float prev, float g) {
    return __fadd_rn(__fmul_rn(beta1, prev), __fmul_rn(__fsub_rn(1.0f, beta1), g));
}
__device__ __forceinline__ float q8_second(float beta2, float prev, float g) {
    return __fadd_rn(__fmul_rn(beta2, prev), __fmul_rn(__fmul_rn(__fsub_rn(1.0f, beta2), g), g));
}
__device__ __forceinline__ float q8_update(float p, float mi, float vi, float lr, float eps, float wd, float ibc1, float ibc2) {
    const float mhat = __fmul_rn(mi, ibc1), vhat = __fmul_rn(vi, ibc2);
    const float u = __fadd_rn(__fdiv_rn(mhat, __fadd_rn(__fsqrt_rn(vhat), eps)), __fmul_rn(wd, p));
    return __fsub_rn(p, __fmul_rn(lr, u));
}
% end

% if emit.adamw8_block_step then
// the largest index lo with map[lo] <= x (x inside (map[0], map[255])), then the nearer neighbour,
// ties to the lower code: optim_adamw8.c's nearest()
__device__ __forceinline__ int q8_nearest(const float *map, float x) {
    if (!(x > map[0])) return 0;
    if (x >= map[255]) return 255;
    int lo = 0, hi = 255;
    while (hi - lo > 1) {
        int mid = (lo + hi) / 2;
        if (map[mid] <= x) lo = mid;
        else hi = mid;
    }
    return __fsub_rn(map[hi], x) < __fsub_rn(x, map[lo]) ? hi : lo;
}

{{ signature("adamw8_block_step") }} {
    __shared__ float ms_[256], mu_[256], rm[BLOCK], rv[BLOCK];
    const int t = threadIdx.x;
    const long b = blockIdx.x, i = b * BLOCK + t, nb = (n + BLOCK - 1) / BLOCK;
    const bool live = i < n;
    unsigned char *cm = (unsigned char *)(sm + nb), *cv = (unsigned char *)(sv + nb);
    ms_[t] = maps[t];
    mu_[t] = maps[256 + t];
    const float a1 = sm[b], a2 = sv[b];
    __syncthreads();
    float mi = 0.0f, vi = 0.0f;
    if (live) {
        const float gi = __fmul_rn(g[i], gscale ? *gscale : 1.0f);
        mi = q8_first(beta1, __fmul_rn(ms_[cm[i]], a1), gi);
        vi = q8_second(beta2, __fmul_rn(mu_[cv[i]], a2), gi);
        p[i] = q8_update(p[i], mi, vi, lr, eps, wd, ibc1, ibc2);
    }
    rm[t] = fabsf(mi);
    rv[t] = fabsf(vi);
    __syncthreads();
    for (int s = BLOCK / 2; s > 0; s >>= 1) { // max is exact in any order
        if (t < s) {
            rm[t] = fmaxf(rm[t], rm[t + s]);
            rv[t] = fmaxf(rv[t], rv[t + s]);
        }
        __syncthreads();
    }
    const float nm = rm[0], nv = rv[0];
    if (t == 0) {
        sm[b] = nm;
        sv[b] = nv;
    }
    if (!live) return;
    int c = q8_nearest(ms_, 0.0f);
    if (nm > 0.0f) {
        c = q8_nearest(ms_, __fdiv_rn(mi, nm));
        if ((__float_as_uint(ms_[c]) >> 31) != (__float_as_uint(mi) >> 31)) c += mi > 0.0f ? 1 : -1; // m keeps its sign
    }
    cm[i] = (unsigned char)c;
    cv[i] = (unsigned char)(nv > 0.0f ? q8_nearest(mu_, __fdiv_rn(vi, nv)) : q8_nearest(mu_, 0.0f));
}
% end

% if emit.adamw8_f32_step then
{{ signature("adamw8_f32_step") }} {
    const long i = (long)blockIdx.x * BLOCK + threadIdx.x;
    if (i >= n) return;
    const float gi = __fmul_rn(g[i], gscale ? *gscale : 1.0f);
    const float mi = q8_first(beta1, m[i], gi), vi = q8_second(beta2, v[i], gi);
    m[i] = mi;
    v[i] = vi;
    p[i] = q8_update(p[i], mi, vi, lr, eps, wd, ibc1, ibc2);
}
% end
