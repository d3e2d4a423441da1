--[[ hyperion template
family = "swiglu"
doc = "SwiGLU: inp [N, 2H] = [gate | up] -> out [N, H] = silu(gate) * up, and its backward"
constants = {
  H = { "int", doc = "MLP hidden width (half the fused gate|up row)" },
  BLOCK = { "int", default = 256, doc = "threads per block" },
}
derive = function(K, decide)
  -- 16-byte loads need every row of gate, up and out to start 16-byte aligned: H % 4 == 0
  K.VEC = K.H % 4 == 0 and 4 or 1
  decide("vector_width", K.VEC, K.VEC == 4 and "H % 4 == 0: 16-byte loads" or "H is not a multiple of 4: scalar loads")
end
kernels = {
  { name = "swiglu_fwd", doc = "out[n, i] = silu(inp[n, i]) * inp[n, H + i]",
    params = { "float* __restrict__ out", "const float* __restrict__ inp", "int N" },
    block = "BLOCK", grid = "cdiv(N*H, VEC*BLOCK)" },
  { name = "swiglu_bwd", doc = "dinp[n, i] += dout * up * s * (1 + g (1 - s)); dinp[n, H + i] += dout * silu(g)",
    params = { "float* __restrict__ dinp", "const float* __restrict__ dout", "const float* __restrict__ inp", "int N" },
    block = "BLOCK", grid = "cdiv(N*H, VEC*BLOCK)" },
}
ops = {
  swiglu_fwd = { { "swiglu_fwd", "out1", "in1", "N" } },
  swiglu_bwd = { { "swiglu_bwd", "out1", "in1", "in2", "N" } },
}
-- cost of one launch (generator/lua/perf.lua; fields as in templates/gelu.cu.lua)
cost = {
  swiglu_fwd = function(a) local n = a.N * a.H
    return { fp32 = 6 * n, sfu = 2 * n, rd = 2 * a.E * n, wr = a.E * n } end,
  swiglu_bwd = function(a) local n = a.N * a.H
    return { fp32 = 14 * n, sfu = 2 * n, rd = 5 * a.E * n, wr = 2 * a.E * n } end,
}
]]
{{ partial("common") }}

// silu(g) = g * sigmoid(g), sigmoid(g) = 1 / (1 + e^-g) (as the CPU op computes it)
__device__ __forceinline__ float sigmoid_f(float g) { return 1.0f / (1.0f + expf(-g)); }

% if emit.swiglu_fwd then
// One thread per VEC consecutive outputs of a row (VEC divides H, so they share the row).
{{ signature("swiglu_fwd") }} {
    long e = ((long)blockIdx.x * blockDim.x + threadIdx.x) * VEC; // flat output index
    if (e >= (long)N * H) return;
    long n = e / H;
    int i = (int)(e - n * H);
    const float* gate = inp + n * 2 * H + i;
    const float* up = gate + H;
    float* o = out + n * H + i;
% if VEC == 4 then
    hyp_f128 g = hyp_load128(gate), u = hyp_load128(up);
    hyp_store128(o, f128(g[0] * sigmoid_f(g[0]) * u[0], g[1] * sigmoid_f(g[1]) * u[1],
                  g[2] * sigmoid_f(g[2]) * u[2], g[3] * sigmoid_f(g[3]) * u[3]));
% else
    o[0] = gate[0] * sigmoid_f(gate[0]) * up[0];
% end
}
% end

% if emit.swiglu_bwd then
// dgate = dout * up * s * (1 + g (1 - s)),  dup = dout * g * s   (s = sigmoid(g)); accumulates.
__device__ __forceinline__ void swiglu_grad(float g, float u, float d, float& dg, float& du) {
    float s = sigmoid_f(g);
    dg += d * u * s * (1.0f + g * (1.0f - s));
    du += d * g * s;
}
{{ signature("swiglu_bwd") }} {
    long e = ((long)blockIdx.x * blockDim.x + threadIdx.x) * VEC;
    if (e >= (long)N * H) return;
    long n = e / H;
    int i = (int)(e - n * H);
    const float* gate = inp + n * 2 * H + i;
    const float* up = gate + H;
    float* dg = dinp + n * 2 * H + i;
    float* du = dg + H;
    const float* d = dout + n * H + i;
% if VEC == 4 then
    hyp_f128 g = hyp_load128(gate), u = hyp_load128(up), dd = hyp_load128(d), a = hyp_load128(dg), b = hyp_load128(du);
    swiglu_grad(g[0], u[0], dd[0], a[0], b[0]);
    swiglu_grad(g[1], u[1], dd[1], a[1], b[1]);
    swiglu_grad(g[2], u[2], dd[2], a[2], b[2]);
    swiglu_grad(g[3], u[3], dd[3], a[3], b[3]);
    hyp_store128(dg, a);
    hyp_store128(du, b);
% else
    float a = dg[0], b = du[0];
    swiglu_grad(gate[0], up[0], d[0], a, b);
    dg[0] = a;
    du[0] = b;
% end
}
% end
