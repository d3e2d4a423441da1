--[[ hyperion template
family = "gelu"
doc = "GELU, tanh approximation (GPT-2): forward and backward over n contiguous values (fp32 or bf16 storage, ACT), vector loads"
constants = {
  BLOCK = { "int", default = 256, doc = "threads per block" },
  ACT = { "enum", values = { "f32", "bf16" }, default = "f32", doc = "activation storage (v2102): f32, or bf16 loaded into fp32 and rounded on store" },
}
kernels = {
  { name = "gelu_fwd", doc = "out = gelu(inp)",
    params = { "act_t* __restrict__ out", "const act_t* __restrict__ inp", "long n" },
    block = "BLOCK", grid = "cdiv(n, 4*BLOCK)" },
  { name = "gelu_bwd", doc = "dinp += dout * gelu'(inp)   (accumulates, like every backward)",
    params = { "act_t* __restrict__ dinp", "const act_t* __restrict__ inp", "const act_t* __restrict__ dout", "long n" },
    block = "BLOCK", grid = "cdiv(n, 4*BLOCK)" },
}
-- plan op -> launches: kernel, then its arguments (in/out = the op's buffers, the rest = dims)
ops = {
  gelu_fwd = { { "gelu_fwd", "out1", "in1", "N*C" } },
  gelu_bwd = { { "gelu_bwd", "out1", "in2", "in1", "N*C" } },
}
-- cost of one launch (generator/lua/perf.lua): FLOPs by unit (fp32 = FMA pipe, 2 per FMA; sfu =
-- special functions), DRAM bytes read (rd) and written (wr), and bytes re-read from L1/L2 (reread);
-- a = the kernel's scalar arguments, the file's constants, E = bytes per activation element
cost = {
  gelu_fwd = function(a) return { fp32 = 12 * a.n, sfu = 2 * a.n, rd = a.E * a.n, wr = a.E * a.n } end,
  gelu_bwd = function(a) return { fp32 = 22 * a.n, sfu = 2 * a.n, rd = 3 * a.E * a.n, wr = a.E * a.n } end,
}
]]
{{ partial("common") }}
typedef {{ ACT == "bf16" and "hyp_bf16" or "float" }} act_t;

// gelu(x) = 0.5 x (1 + tanh(u)), u = sqrt(2/pi) (x + 0.044715 x^3), written as x * sigmoid(2u)
// (0.5 (1 + tanh(u)) = sigmoid(2u)) exactly like the CPU op; the derivative is
// gelu'(x) = s + x * 2 s (1 - s) * du/dx with s = sigmoid(2u), du/dx = sqrt(2/pi) (1 + 3*0.044715 x^2).
#define GELU_K 0.7978845608028654f
__device__ __forceinline__ float gelu_f(float x) {
    float u = GELU_K * (x + 0.044715f * x * x * x);
    return x * (1.0f / (1.0f + expf(-2.0f * u)));
}
__device__ __forceinline__ float gelu_grad(float x) {
    float u = GELU_K * (x + 0.044715f * x * x * x);
    float s = 1.0f / (1.0f + expf(-2.0f * u));
    float du = GELU_K * (1.0f + 3.0f * 0.044715f * x * x);
    return s + x * 2.0f * s * (1.0f - s) * du;
}

% if emit.gelu_fwd then
// One thread per 4 values: a 16-byte load and store when all 4 are in range, scalars in the tail.
{{ signature("gelu_fwd") }} {
    long i = ((long)blockIdx.x * blockDim.x + threadIdx.x) * 4;
    if (i + 3 < n) {
        hyp_f128 x = hyp_load4(inp + i);
        hyp_store4(out + i, f128(gelu_f(x[0]), gelu_f(x[1]), gelu_f(x[2]), gelu_f(x[3])));
    } else {
        for (; i < n; i++) hyp_st(out + i, gelu_f(hyp_ld(inp + i)));
    }
}
% end

% if emit.gelu_bwd then
{{ signature("gelu_bwd") }} {
    long i = ((long)blockIdx.x * blockDim.x + threadIdx.x) * 4;
    if (i + 3 < n) {
        hyp_f128 x = hyp_load4(inp + i), d = hyp_load4(dout + i), g = hyp_load4(dinp + i);
        g[0] += d[0] * gelu_grad(x[0]);
        g[1] += d[1] * gelu_grad(x[1]);
        g[2] += d[2] * gelu_grad(x[2]);
        g[3] += d[3] * gelu_grad(x[3]);
        hyp_store4(dinp + i, g);
    } else {
        for (; i < n; i++) hyp_st(dinp + i, hyp_ld(dinp + i) + hyp_ld(dout + i) * gelu_grad(hyp_ld(inp + i)));
    }
}
% end
