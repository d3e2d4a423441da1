--[[ hyperion template
family = "swiglu"
doc = "SwiGLU: inp [N, 2H] = [gate | up] -> out [N, H] = silu(gate) * up, and its backward"
constants = {
  H = { "int", doc = "MLP hidden width (half the fused gate|up row)" },
  ACT = { "enum", values = { "f32", "bf16" }, default = "f32", doc = "activation storage (v2102): f32, or bf16 loaded into fp32 and rounded on store" },
  BLOCK = { "int", default = 256, doc = "threads per block" },
}
derive = function(K, decide)
  -- 16-byte loads need every row of gate, up and out to start 16-byte aligned: H % 4 == 0
  K.VEC = K.H % 4 == 0 and 4 or 1
  decide("vector_width", K.VEC, K.VEC == 4 and "H % 4 == 0: 16-byte loads" or "H is not a multiple of 4: scalar loads")
end
kernels = {
  { name = "swiglu_fwd", doc = "out[n, i] = silu(inp[n, i]) * inp[n, H + i]",
    params = { "act_t* __restrict__ out", "const act_t* __restrict__ inp", "int N" },
    block = "BLOCK", grid = "cdiv(N*H, VEC*BLOCK)" },
  { name = "swiglu_bwd", doc = "dinp[n, i] += dout * up * s * (1 + g (1 - s)); dinp[n, H + i] += dout * silu(g)",
    params = { "act_t* __restrict__ dinp", "const act_t* __restrict__ dout", "const act_t* __restrict__ inp", "int N" },
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
typedef {{ ACT == "bf16" and "hyp_bf16" or "float" }} act_t;

// silu(g) = g * sigmoid(g), sigmoid(g) = 1 / (1 + e^-g) (as the CPU op computes it)
__device__ __forceinline__ float sigmoid_f(float g) { return 1.0f / (1.0f + expf(-g)); }

% if emit.swiglu_fwd then
// One thread per VEC consecutive outputs of a row (VEC divides H, so they share the row).
{{ signature("swiglu_fwd") }} {
    long e = ((long)blockIdx.x * blockDim.x + threadIdx.x) * VEC; // flat output index
    if (e >= (long)N * H) return;
    long n = e / H;
    int i = (int)(e - n * H);
    const act_t* gate = inp + n * 2 * H + i;
    const act_t* up = gate + H;
    act_t* o = out + n * H + i;
% if VEC == 4 then
    hyp_f128 g = hyp_load4(gate), u = hyp_load4(up);
    hyp_store4(o, f128(g[0] * sigmoid_f(g[0]) * u[0], g[1] * sigmoid_f(g[1]) * u[1],
                  g[2] * sigmoid_f(g[2]) * u[2], g[3] * sigmoid_f(g[3]) * u[3]));
% else
    const float g0 = hyp_ld(gate);
    hyp_st(o, g0 * sigmoid_f(g0) * hyp_ld(up));
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
    const act_t* gate = inp + n * 2 * H + i;
    const act_t* up = gate + H;
    act_t* dg = dinp + n * 2 * H + i;
    act_t* du = dg + H;
    const act_t* d = dout + n * H + i;
% if VEC == 4 then
    hyp_f128 g = hyp_load4(gate), u = hyp_load4(up), dd = hyp_load4(d), a = hyp_load4(dg), b = hyp_load4(du);
    swiglu_grad(g[0], u[0], dd[0], a[0], b[0]);
    swiglu_grad(g[1], u[1], dd[1], a[1], b[1]);
    swiglu_grad(g[2], u[2], dd[2], a[2], b[2]);
    swiglu_grad(g[3], u[3], dd[3], a[3], b[3]);
    hyp_store4(dg, a);
    hyp_store4(du, b);
% else
    float a = hyp_ld(dg), b = hyp_ld(du);
    swiglu_grad(hyp_ld(gate), hyp_ld(up), hyp_ld(d), a, b);
    hyp_st(dg, a);
    hyp_st(du, b);
% end
}
% end
