--[[ hyperion template
family = "adam_mini"
doc = "Adam-mini (v2136), one tensor per launch: per-block second moments (one CUDA block per Adam-mini block: the mean g^2 of its rows, then m and p) and per-coordinate AdamW for the tensors outside the partition; fp32 weights and state"
constants = {
  BLOCK = { "int", default = 256, doc = "threads per block (and per Adam-mini block)" },
}
derive = function(K, decide)
  decide("blocks", "one CUDA block per Adam-mini block", "the block's sum of g^2 in double per thread, summed in thread order; the block's step size shared through shared memory")
end
kernels = {
  { name = "adam_mini_adam_step", doc = "per-coordinate AdamW on one tensor: p -= lr * (mhat / (sqrt(vhat) + eps) + wd * p); g scaled by *gscale (NULL: 1)",
    params = { "float* __restrict__ p", "float* __restrict__ m", "float* __restrict__ v", "const float* __restrict__ g",
      "long n", "float lr", "float beta1", "float beta2", "float eps", "float wd", "float ibc1", "float ibc2",
      "const float* __restrict__ gscale" },
    block = "BLOCK", grid = "cdiv(n, BLOCK)" },
  { name = "adam_mini_block_step", doc = "Adam-mini block b of a [R, K] tensor (rows: nq blocks of hd rows, then blocks of nr rows): v[b] = beta2*v[b] + (1-beta2)*mean(g^2); m = beta1*m + (1-beta1)*g; p = p*decay - lr_bc1/(sqrt(v[b])*isbc2 + eps) * m",
    params = { "float* __restrict__ p", "float* __restrict__ m", "float* __restrict__ v", "const float* __restrict__ g",
      "long K", "int nq", "int hd", "int nr", "float beta1", "float beta2", "float lr_bc1", "float isbc2", "float eps",
      "float decay", "const float* __restrict__ gscale" },
    block = "BLOCK", grid = "nblocks" },
}
-- cost of one launch (generator/lua/perf.lua; fields as in templates/gelu.cu.lua), per tensor of n
-- elements (perf.lua enumerates the launches as optim_adammini.c's step_device issues them): the
-- per-coordinate step as muon_adamw_step; a block step over nblocks blocks reads g twice (the
-- sum of squares, then the update: the second pass an L2 hit), m and p, writes m and p, and reads
-- and writes one v per block; *gscale once per thread
cost = {
  adam_mini_adam_step = function(a) return { fp32 = 16 * a.n, sfu = 2 * a.n, rd = 16 * a.n, wr = 12 * a.n, reread = 8 * a.n } end,
  adam_mini_block_step = function(a) return { fp32 = 10 * a.n, sfu = 2 * a.nblocks, rd = 12 * a.n + 4 * a.nblocks,
    wr = 8 * a.n + 4 * a.nblocks, reread = 4 * a.n + 4 * a.BLOCK * a.nblocks } end,
}
ops = {
  optimizer = { { "adam_mini_adam_step", "params", "m", "v", "grads", "n", "lr", "beta1", "beta2", "eps", "wd", "1/(1-beta1^t)", "1/(1-beta2^t)", "gscale" } },
}
]]
{{ partial("common") }}
#include "hyp/adamw_coord.cuh"

// The float expressions are runtime/train/optim_adammini.c's and op_adamw's, in their order; the
// block's sum of squares is in double as there (per thread, then in thread order), so cpu and
// device agree within rounding (test_adam_mini_dev).

% if emit.adam_mini_adam_step then
{{ signature("adam_mini_adam_step") }} {
    long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    hyp_adamw_coord(p, g, m, v, i, gscale ? *gscale : 1.0f, lr, beta1, beta2, eps, wd, ibc1, ibc2);
}
% end

% if emit.adam_mini_block_step then
{{ signature("adam_mini_block_step") }} {
    __shared__ double part[BLOCK];
    __shared__ float step;
    const long b = blockIdx.x;
    const long r0 = b < nq ? b * hd : (long)nq * hd + (b - nq) * nr;
    const long n = (b < nq ? (long)hd : (long)nr) * K, base = r0 * K;
    const float gs = gscale ? *gscale : 1.0f;
    double s = 0.0;
    for (long i = threadIdx.x; i < n; i += blockDim.x) {
        float gi = g[base + i] * gs;
        s += (double)gi * gi;
    }
    part[threadIdx.x] = s;
    __syncthreads();
    if (threadIdx.x == 0) {
        double ss = 0.0;
        for (int t = 0; t < (int)blockDim.x; t++) ss += part[t];
        float vb = beta2 * v[b] + (1.0f - beta2) * (float)(ss / (double)n);
        v[b] = vb;
        float h = sqrtf(vb) * isbc2 + eps;
        step = lr_bc1 / h;
    }
    __syncthreads();
    const float st = step;
    for (long i = threadIdx.x; i < n; i += blockDim.x) {
        float gi = g[base + i] * gs;
        float mi = beta1 * m[base + i] + (1.0f - beta1) * gi;
        m[base + i] = mi;
        p[base + i] = p[base + i] * decay - st * mi;
    }
}
% end
