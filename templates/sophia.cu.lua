--[[ hyperion template
family = "sophia"
doc = "multi-tensor Sophia-G (v2135) over the parameter arena (or this rank's shard) in one launch: the clipped preconditioned step with per-tensor decoupled decay, and the Gauss-Newton-Bartlett refresh of h; fp32 weights and states"
constants = {
  BLOCK = { "int", default = 256, doc = "threads per block" },
}
derive = function(K, decide)
  decide("segments", "tensor table", "one launch over the arena: seg_end[] (exclusive ends, ascending) and seg_wd[] give each element's tensor and weight decay")
end
kernels = {
  { name = "sophia_step", doc = "p = p*(1 - lr*wd) - lr*sign(m)*min(|m|/(rho*h + 1e-15), 1) with m = beta1*m + (1-beta1)*g; g scaled by *gscale (NULL: 1)",
    params = { "float* __restrict__ p", "float* __restrict__ m", "const float* __restrict__ h", "const float* __restrict__ g",
      "const long* __restrict__ seg_end", "const float* __restrict__ seg_wd", "int nseg", "long n", "float lr",
      "float beta1", "float rho", "const float* __restrict__ gscale" },
    block = "BLOCK", grid = "cdiv(n, BLOCK)" },
  { name = "sophia_hess", doc = "h = beta2*h + (1-beta2)*(B*g^2): g the mean gradient of the sampled-label loss over B tokens",
    params = { "float* __restrict__ h", "const float* __restrict__ g", "long n", "float beta2", "float B" },
    block = "BLOCK", grid = "cdiv(n, BLOCK)" },
}
ops = {
  optimizer = { { "sophia_step", "params", "m", "h", "grads", "seg_end", "seg_wd", "nseg", "n", "lr", "beta1", "rho", "gscale" } },
}
]]
{{ partial("common") }}

{{ partial("segments") }}

// The float expressions of runtime/optim/optim_sophia.c with the same explicit fmaf's: whether a
// compiler contracts (nvcc, the host C) or not (the simulator's g++), cpu and device agree bit
// for bit given the same gradients.

% if emit.sophia_step then
{{ signature("sophia_step") }} {
    long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const float gs = gscale ? *gscale : 1.0f;
    const float decay = fmaf(-lr, seg_wd[segment_of(seg_end, nseg, i)], 1.0f);
    float gi = g[i] * gs;
    float mi = fmaf(beta1, m[i], (1.0f - beta1) * gi);
    float ratio = fabsf(mi) / fmaf(rho, h[i], 1e-15f);
    if (ratio > 1.0f) ratio = 1.0f;
    float u = (float)((mi > 0.0f) - (mi < 0.0f)); // sign, 0 at 0 as torch.sign
    p[i] = fmaf(p[i], decay, -(lr * (u * ratio)));
    m[i] = mi;
}
% end

% if emit.sophia_hess then
{{ signature("sophia_hess") }} {
    long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float gi = g[i];
    h[i] = fmaf(beta2, h[i], (1.0f - beta2) * (B * (gi * gi)));
}
% end
