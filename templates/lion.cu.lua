--[[ hyperion template
family = "lion"
doc = "multi-tensor Lion (v2134) over the whole parameter arena (or this rank's shard) in one launch: fp32 weights and momentum, decoupled weight decay per tensor"
constants = {
  BLOCK = { "int", default = 256, doc = "threads per block" },
}
derive = function(K, decide)
  decide("segments", "tensor table", "one launch over the arena: seg_end[] (exclusive ends, ascending) and seg_wd[] give each element's tensor and weight decay")
end
kernels = {
  { name = "lion_step", doc = "p = p*(1 - lr*wd) - lr*sign(beta1*m + (1-beta1)*g); m = beta2*m + (1-beta2)*g over n elements; g scaled by *gscale (NULL: 1)",
    params = { "float* __restrict__ p", "float* __restrict__ m", "const float* __restrict__ g",
      "const long* __restrict__ seg_end", "const float* __restrict__ seg_wd", "int nseg", "long n", "float lr",
      "float beta1", "float beta2", "const float* __restrict__ gscale" },
    block = "BLOCK", grid = "cdiv(n, 4*BLOCK)" },
}
ops = {
  optimizer = { { "lion_step", "params", "m", "grads", "seg_end", "seg_wd", "nseg", "n", "lr", "beta1", "beta2", "gscale" } },
}
]]
{{ partial("common") }}

{{ partial("segments") }}

% if emit.lion_step then
// One thread per 4 consecutive elements (16-byte loads; a scalar tail). The float expressions, with
// every multiply-add an explicit fmaf, are runtime/optim/optim_lion.c's: whether a compiler
// contracts (nvcc, the host C) or not (the simulator's g++), cpu and device agree bit for bit.
{{ signature("lion_step") }} {
    long i0 = ((long)blockIdx.x * blockDim.x + threadIdx.x) * 4;
    if (i0 >= n) return;
    const float gs = gscale ? *gscale : 1.0f;
    int cnt = n - i0 < 4 ? (int)(n - i0) : 4;
    int s = segment_of(seg_end, nseg, i0);
    float wd = seg_wd[s];
    bool one_seg = seg_end[s] >= i0 + cnt; // else look the segment up per element
    float pv[4], mv[4], gv[4];
    if (cnt == 4) {
        hyp_f128 a = hyp_load128(p + i0), b = hyp_load128(m + i0), c = hyp_load128(g + i0);
#pragma unroll
        for (int k = 0; k < 4; k++) { pv[k] = a[k]; mv[k] = b[k]; gv[k] = c[k]; }
    } else {
#pragma unroll
        for (int k = 0; k < 4; k++) { // fixed trip counts keep the arrays in registers
            bool in = k < cnt;
            pv[k] = in ? p[i0 + k] : 0.0f; mv[k] = in ? m[i0 + k] : 0.0f; gv[k] = in ? g[i0 + k] : 0.0f;
        }
    }
#pragma unroll
    for (int k = 0; k < 4; k++) {
        float w = one_seg ? wd : seg_wd[segment_of(seg_end, nseg, i0 + k)];
        float decay = fmaf(-lr, w, 1.0f);
        float gi = gv[k] * gs;
        float ci = fmaf(beta1, mv[k], (1.0f - beta1) * gi);
        float u = (float)((ci > 0.0f) - (ci < 0.0f)); // sign, 0 at 0 as torch.sign
        pv[k] = fmaf(pv[k], decay, -(lr * u));
        mv[k] = fmaf(beta2, mv[k], (1.0f - beta2) * gi);
    }
    if (cnt == 4) {
        hyp_store128(p + i0, f128(pv[0], pv[1], pv[2], pv[3]));
        hyp_store128(m + i0, f128(mv[0], mv[1], mv[2], mv[3]));
    } else {
#pragma unroll
        for (int k = 0; k < 4; k++)
            if (k < cnt) { p[i0 + k] = pv[k]; m[i0 + k] = mv[k]; }
    }
}
% end
