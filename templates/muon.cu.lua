--[[ hyperion template
family = "muon"
doc = "Muon (v2138): the elementwise pieces around the Newton-Schulz GEMMs (momentum, Frobenius normalization, update) and the AdamW step of the tensors Muon leaves to Adam, one tensor per launch; fp32 weights and state"
constants = {
  PARTS = { "int", default = 64, doc = "blocks of the sum-of-squares pass (a fixed number: the summation order never depends on the device)" },
  BLOCK = { "int", default = 256, doc = "threads per block" },
}
derive = function(K, decide)
  decide("newton_schulz", "fp32 device GEMMs", "the quintic iterations run through the device GEMM (cuBLASLt on cuda, device_gemm.c on sim) in fp32; these kernels do the elementwise work between them")
end
kernels = {
  { name = "muon_adamw_step", doc = "AdamW on one tensor (Muon's embeddings, head, gains, biases): p -= lr * (mhat / (sqrt(vhat) + eps) + wd * p); g scaled by *gscale (NULL: 1)",
    params = { "float* __restrict__ p", "float* __restrict__ m", "float* __restrict__ v", "const float* __restrict__ g",
      "long n", "float lr", "float beta1", "float beta2", "float eps", "float wd", "float ibc1", "float ibc2",
      "const float* __restrict__ gscale" },
    block = "BLOCK", grid = "cdiv(n, BLOCK)" },
  { name = "muon_momentum", doc = "m = beta*m + (1-beta)*g; u = nesterov ? beta*m + (1-beta)*g : m; partial[b] = sum of u^2 over block b's grid-stride share",
    params = { "float* __restrict__ m", "float* __restrict__ u", "const float* __restrict__ g", "long n", "float beta",
      "int nesterov", "const float* __restrict__ gscale", "float* __restrict__ partial" },
    block = "BLOCK", grid = "PARTS" },
  { name = "muon_normalize", doc = "x *= 1 / (sqrt(sum of partial[PARTS], in order, in double) + 1e-7)",
    params = { "float* __restrict__ x", "long n", "const float* __restrict__ partial" },
    block = "BLOCK", grid = "cdiv(n, BLOCK)" },
  { name = "muon_apply", doc = "p = p*decay - lr*(scale*o)",
    params = { "float* __restrict__ p", "const float* __restrict__ o", "long n", "float decay", "float lr", "float scale" },
    block = "BLOCK", grid = "cdiv(n, BLOCK)" },
}
-- cost of one launch (generator/lua/perf.lua; fields as in templates/gelu.cu.lua), per tensor of n
-- elements (perf.lua enumerates the launches as optim_muon.c's step_device issues them): the AdamW
-- step reads p, m, v, g and writes p, m, v (p's second load in `p -= lr * (... + wd * p)` and
-- *gscale per thread hit L1: reread); the momentum pass reads m, g and writes m, u (grid-stride
-- over PARTS blocks, *gscale once per thread, a partial per block); normalize reads the PARTS
-- partials per element from L1; apply reads p and the Newton-Schulz result, writes p
cost = {
  muon_adamw_step = function(a) return { fp32 = 16 * a.n, sfu = 2 * a.n, rd = 16 * a.n, wr = 12 * a.n, reread = 8 * a.n } end,
  muon_momentum = function(a) return { fp32 = 8 * a.n, rd = 8 * a.n, wr = 8 * a.n + 4 * a.PARTS, reread = 4 * a.PARTS * a.BLOCK } end,
  muon_normalize = function(a) return { fp32 = a.n + a.PARTS * a.n, sfu = 2 * a.n, rd = 4 * a.n, wr = 4 * a.n, reread = 4 * a.PARTS * a.n } end,
  muon_apply = function(a) return { fp32 = 3 * a.n, rd = 8 * a.n, wr = 4 * a.n } end,
}
ops = {
  optimizer = { { "muon_adamw_step", "params", "m", "v", "grads", "n", "lr", "beta1", "beta2", "eps", "wd", "1/(1-beta1^t)", "1/(1-beta2^t)", "gscale" } },
}
]]
{{ partial("common") }}
#include "hyp/adamw_coord.cuh"

// The float expressions are runtime/cpu/ops_cpu.c's (op_adamw, op_newton_schulz5) and
// runtime/train/optim_muon.c's, in the same order; the host may contract a multiply-add that the
// simulator does not, so cpu and device agree within rounding, not bit for bit (test_muon_dev).

% if emit.muon_adamw_step then
{{ signature("muon_adamw_step") }} {
    long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    hyp_adamw_coord(p, g, m, v, i, gscale ? *gscale : 1.0f, lr, beta1, beta2, eps, wd, ibc1, ibc2);
}
% end

% if emit.muon_momentum then
{{ signature("muon_momentum") }} {
    const float gs = gscale ? *gscale : 1.0f;
    float s = 0.0f;
    const long stride = (long)gridDim.x * blockDim.x;
    for (long i = (long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        float gi = g[i] * gs;
        float mi = beta * m[i] + (1.0f - beta) * gi;
        float ui = nesterov ? beta * mi + (1.0f - beta) * gi : mi;
        m[i] = mi;
        u[i] = ui;
        s += ui * ui;
    }
    s = hyp_block_sum(s);
    if (threadIdx.x == 0) partial[blockIdx.x] = s;
}
% end

% if emit.muon_normalize then
{{ signature("muon_normalize") }} {
    long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    double ss = 0.0;
    for (int b = 0; b < PARTS; b++) ss += (double)partial[b];
    float inv = 1.0f / ((float)sqrt(ss) + 1e-7f);
    x[i] *= inv;
}
% end

% if emit.muon_apply then
{{ signature("muon_apply") }} {
    long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    p[i] = p[i] * decay - lr * (scale * o[i]);
}
% end
