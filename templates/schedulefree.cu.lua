--[[ hyperion template
family = "schedulefree"
doc = "multi-tensor Schedule-Free AdamW (v2137) over the parameter arena in one launch (fp32 y, z, v; decoupled decay at y per tensor) and the y <-> x moves around evaluation"
constants = {
  BLOCK = { "int", default = 256, doc = "threads per block" },
}
derive = function(K, decide)
  decide("segments", "tensor table", "one launch over the arena: seg_end[] (exclusive ends, ascending) and seg_wd[] give each element's tensor and weight decay")
end
kernels = {
  { name = "sfadamw_step", doc = "v = beta2*v + (1-beta2)*g^2; n = g/(sqrt(v*ibc2)+eps) + wd*y; y += ck*(z-y); y += ystep*n; z -= lr*n (z = y first when first); g scaled by *gscale (NULL: 1)",
    params = { "float* __restrict__ y", "float* __restrict__ z", "float* __restrict__ v", "const float* __restrict__ g",
      "const long* __restrict__ seg_end", "const float* __restrict__ seg_wd", "int nseg", "long n", "float lr",
      "float beta2", "float eps", "float ibc2", "float ck", "float ystep", "int first", "const float* __restrict__ gscale" },
    block = "BLOCK", grid = "cdiv(n, BLOCK)" },
  { name = "sfadamw_lerp", doc = "p = p + w*(z - p) (torch.lerp_): w = 1 - 1/beta1 moves y to x, w = 1 - beta1 x to y",
    params = { "float* __restrict__ p", "const float* __restrict__ z", "long n", "float w" },
    block = "BLOCK", grid = "cdiv(n, BLOCK)" },
}
ops = {
  optimizer = { { "sfadamw_step", "params", "z", "v", "grads", "seg_end", "seg_wd", "nseg", "n", "lr", "beta2", "eps", "1/(1-beta2^t)", "c_t", "lr*(beta1*(1-c_t)-1)", "t==1", "gscale" } },
}
]]
{{ partial("common") }}

{{ partial("segments") }}

// The float expressions are runtime/optim/optim_sfadamw.c's, in its order; the host may contract a
// multiply-add the simulator does not, so cpu and device agree within rounding (test_schedulefree_dev).

% if emit.sfadamw_step then
{{ signature("sfadamw_step") }} {
    long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const float gs = gscale ? *gscale : 1.0f;
    const float wd = seg_wd[segment_of(seg_end, nseg, i)];
    float yi = y[i];
    if (first) z[i] = yi;
    float gi = g[i] * gs;
    float vi = beta2 * v[i] + (1.0f - beta2) * gi * gi;
    v[i] = vi;
    float nn = gi / (sqrtf(vi * ibc2) + eps) + wd * yi;
    float zi = z[i];
    float yn = yi + ck * (zi - yi);
    y[i] = yn + ystep * nn;
    z[i] = zi - lr * nn;
}
% end

% if emit.sfadamw_lerp then
{{ signature("sfadamw_lerp") }} {
    long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float pi = p[i];
    p[i] = pi + w * (z[i] - pi);
}
% end
