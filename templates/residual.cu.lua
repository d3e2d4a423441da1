--[[ hyperion template
family = "residual"
doc = "the residual stream's elementwise ops: out = a + b (forward), dst += src (backward fan-in); with ALPHA != 1 (DeepNorm) out = ALPHA a + b and dst += ALPHA src"
constants = {
  BLOCK = { "int", default = 256, doc = "threads per block" },
  ACT = { "enum", values = { "f32", "bf16" }, default = "f32", doc = "activation storage (v2102): f32, or bf16 loaded into fp32 and rounded on store" },
  ALPHA = { "float", default = 1.0, doc = "the weight of the residual operand (the plan's add_fwd/accumulate attr alpha; 1 without)" },
}
kernels = {
  { name = "add_fwd", doc = "out = a + b over n floats",
    params = { "act_t* __restrict__ out", "const act_t* __restrict__ a", "const act_t* __restrict__ b", "long n" },
    block = "BLOCK", grid = "cdiv(n, 4*BLOCK)" },
  { name = "accumulate", doc = "dst += src over n floats",
    params = { "act_t* __restrict__ dst", "const act_t* __restrict__ src", "long n" },
    block = "BLOCK", grid = "cdiv(n, 4*BLOCK)" },
}
ops = {
  add_fwd = { { "add_fwd", "out1", "in1", "in2", "N*C" } },
  accumulate = { { "accumulate", "out1", "in1", "N*C" } },
}
-- cost of one launch (generator/lua/perf.lua; fields as in templates/gelu.cu.lua)
cost = {
  add_fwd = function(a) return { fp32 = 2 * a.n, rd = 2 * a.E * a.n, wr = a.E * a.n } end,
  accumulate = function(a) return { fp32 = 2 * a.n, rd = 2 * a.E * a.n, wr = a.E * a.n } end,
}
]]
{{ partial("common") }}
typedef {{ ACT == "bf16" and "hyp_bf16" or "float" }} act_t;

% if emit.add_fwd then
// One thread per 4 values: 16-byte loads and stores, scalars in the tail.
{{ signature("add_fwd") }} {
    long i = ((long)blockIdx.x * blockDim.x + threadIdx.x) * 4;
    if (i + 3 < n) {
        hyp_f128 x = hyp_load4(a + i), y = hyp_load4(b + i);
% if ALPHA == 1 then
        hyp_store4(out + i, f128(x[0] + y[0], x[1] + y[1], x[2] + y[2], x[3] + y[3]));
    } else {
        for (; i < n; i++) hyp_st(out + i, hyp_ld(a + i) + hyp_ld(b + i));
    }
% else
        const float al = {{ f32(ALPHA) }};
        hyp_store4(out + i, f128(al * x[0] + y[0], al * x[1] + y[1], al * x[2] + y[2], al * x[3] + y[3]));
    } else {
        for (; i < n; i++) hyp_st(out + i, {{ f32(ALPHA) }} * hyp_ld(a + i) + hyp_ld(b + i));
    }
% end
}
% end

% if emit.accumulate then
{{ signature("accumulate") }} {
    long i = ((long)blockIdx.x * blockDim.x + threadIdx.x) * 4;
    if (i + 3 < n) {
        hyp_f128 x = hyp_load4(dst + i), y = hyp_load4(src + i);
% if ALPHA == 1 then
        hyp_store4(dst + i, f128(x[0] + y[0], x[1] + y[1], x[2] + y[2], x[3] + y[3]));
    } else {
        for (; i < n; i++) hyp_st(dst + i, hyp_ld(dst + i) + hyp_ld(src + i));
    }
% else
        const float al = {{ f32(ALPHA) }};
        hyp_store4(dst + i, f128(x[0] + al * y[0], x[1] + al * y[1], x[2] + al * y[2], x[3] + al * y[3]));
    } else {
        for (; i < n; i++) hyp_st(dst + i, hyp_ld(dst + i) + {{ f32(ALPHA) }} * hyp_ld(src + i));
    }
% end
}
% end
