--[[ hyperion template
family = "cast"
doc = "casts between fp32 and bf16/fp16 (round to nearest even) and fp8 E4M3/E5M2 (scaled, saturating), with a fused amax"
constants = {
  BLOCK = { "int", default = 256, doc = "threads per block" },
}
local function fp8(name, fmt)
  return {
    { name = "cast_f32_" .. name, doc = "out = " .. fmt .. "(in * *scale), saturating to the finite range; *amax = max(*amax, max |in|) when amax != NULL",
      params = { "__nv_fp8_" .. name .. "* __restrict__ out", "const float* __restrict__ in", "const float* __restrict__ scale",
                 "float* __restrict__ amax", "long n" },
      block = "BLOCK", grid = "cdiv(n, 4*BLOCK)" },
    { name = "cast_" .. name .. "_f32", doc = "out = float(in) * *scale_inv",
      params = { "float* __restrict__ out", "const __nv_fp8_" .. name .. "* __restrict__ in", "const float* __restrict__ scale_inv", "long n" },
      block = "BLOCK", grid = "cdiv(n, 4*BLOCK)" },
    { name = "cast_f32_" .. name .. "_t", doc = "out[c][r] = " .. fmt .. "(in[r][c] * *scale) for in [rows][cols]: the transposed copy an FP8 GEMM's TN layout needs (cuBLASLt), saturating",
      params = { "__nv_fp8_" .. name .. "* __restrict__ out", "const float* __restrict__ in", "const float* __restrict__ scale",
                 "long rows", "long cols" },
      block = "BLOCK", grid = "cdiv(rows*cols, BLOCK)" },
  }
end
kernels = {
  { name = "cast_f32_bf16", doc = "out = bf16(in), round to nearest even",
    params = { "__nv_bfloat16* __restrict__ out", "const float* __restrict__ in", "long n" }, block = "BLOCK", grid = "cdiv(n, 4*BLOCK)" },
  { name = "cast_bf16_f32", doc = "out = float(in)",
    params = { "float* __restrict__ out", "const __nv_bfloat16* __restrict__ in", "long n" }, block = "BLOCK", grid = "cdiv(n, 4*BLOCK)" },
  { name = "cast_f32_f16", doc = "out = half(in), round to nearest even",
    params = { "__half* __restrict__ out", "const float* __restrict__ in", "long n" }, block = "BLOCK", grid = "cdiv(n, 4*BLOCK)" },
  { name = "cast_f16_f32", doc = "out = float(in)",
    params = { "float* __restrict__ out", "const __half* __restrict__ in", "long n" }, block = "BLOCK", grid = "cdiv(n, 4*BLOCK)" },
  fp8("e4m3", "E4M3")[1], fp8("e4m3", "E4M3")[2], fp8("e4m3", "E4M3")[3],
  fp8("e5m2", "E5M2")[1], fp8("e5m2", "E5M2")[2], fp8("e5m2", "E5M2")[3],
  { name = "fp8_fake_quantize_e4m3", doc = "out = float(e4m3(in * *scale)) * *scale_inv (what an FP8 GEMM sees, as fp32; out may be in); *amax = max(*amax, max |in|) when amax != NULL",
    params = { "float* out", "const float* in", "const float* __restrict__ scale", "const float* __restrict__ scale_inv",
               "float* __restrict__ amax", "long n" },
    block = "BLOCK", grid = "cdiv(n, 4*BLOCK)" },
  { name = "fp8_fake_quantize_e5m2", doc = "as fp8_fake_quantize_e4m3, through E5M2 (gradients in the HYBRID recipe)",
    params = { "float* out", "const float* in", "const float* __restrict__ scale", "const float* __restrict__ scale_inv",
               "float* __restrict__ amax", "long n" },
    block = "BLOCK", grid = "cdiv(n, 4*BLOCK)" },
  { name = "round_bf16", doc = "out = float(bf16(in)): round to nearest even, kept in fp32 (the plan's bf16 GEMM operands, v2102; out may be in)",
    params = { "float* out", "const float* in", "long n" }, block = "BLOCK", grid = "cdiv(n, 4*BLOCK)" },
  { name = "round_fp16", doc = "out = float(half(in)): IEEE binary16, round to nearest even, inf from 65520 up, fp16 subnormals, kept in fp32 (the plan's fp16 GEMM operands, v2102; out may be in)",
    params = { "float* out", "const float* in", "long n" }, block = "BLOCK", grid = "cdiv(n, 4*BLOCK)" },
  { name = "amax", doc = "*amax = max(*amax, max |in|)",
    params = { "float* __restrict__ amax", "const float* __restrict__ in", "long n" }, block = "BLOCK", grid = "cdiv(n, 4*BLOCK)" },
  { name = "fp8_scale_current", doc = "current scaling (runtime/fp8.c's hyp_fp8_scale_current): *scale = scaled_max / *amax (1 when amax is 0, inf or NaN; FLT_MAX on overflow), *scale_inv = 1 / *scale; *amax = 0 for the tensor's next cast",
    params = { "float* __restrict__ scale", "float* __restrict__ scale_inv", "float* __restrict__ amax", "float scaled_max" },
    block = "BLOCK", grid = "1" },
}
-- plan op fp8_quantize (v2160, one scaling slot per tensor): E4M3, or E5M2 for "gradient" slots
-- with the HYBRID recipe (plan.fp8.slots, plan.fp8.recipe). Delayed scaling reads the slot's
-- scale and records its amax; current scaling runs `amax` first and sets the scale from it.
-- "(current)": current scaling on a device, three launches: this tensor's amax, the scale from it,
-- the cast (fp8.scaled_max: fp8_max * 2^-margin of the slot's format, computed by the executor).
-- "(fp8 gemm)": what the device executor adds when the plan runs the layer GEMMs in FP8
-- (plan.fp8.gemm, device targets): the operand [n][C] as fp8 bytes and transposed, for cuBLASLt's
-- TN layout (forward: both as stored; dgrad: the weight transposed; wgrad: both transposed).
ops = {
  fp8_quantize = { { "fp8_fake_quantize_e4m3", "out1", "in1", "fp8.scale[slot]", "fp8.scale_inv[slot]", "fp8.amax[slot]", "n*C" } },
  round_bf16 = { { "round_bf16", "out1", "in1", "n*C" } },
  round_fp16 = { { "round_fp16", "out1", "in1", "n*C" } },
  ["fp8_quantize(gradient, hybrid)"] = { { "fp8_fake_quantize_e5m2", "out1", "in1", "fp8.scale[slot]", "fp8.scale_inv[slot]", "fp8.amax[slot]", "n*C" } },
  ["fp8_quantize(current)"] = { { "amax", "fp8.amax[slot]", "in1", "n*C" },
    { "fp8_scale_current", "fp8.scale[slot]", "fp8.scale_inv[slot]", "fp8.amax[slot]", "fp8.scaled_max[slot]" },
    { "fp8_fake_quantize_e4m3", "out1", "in1", "fp8.scale[slot]", "fp8.scale_inv[slot]", "0", "n*C" } },
  ["fp8_quantize(current, gradient, hybrid)"] = { { "amax", "fp8.amax[slot]", "in1", "n*C" },
    { "fp8_scale_current", "fp8.scale[slot]", "fp8.scale_inv[slot]", "fp8.amax[slot]", "fp8.scaled_max[slot]" },
    { "fp8_fake_quantize_e5m2", "out1", "in1", "fp8.scale[slot]", "fp8.scale_inv[slot]", "0", "n*C" } },
  ["fp8_quantize(fp8 gemm)"] = { { "cast_f32_e4m3", "fp8.q[slot]", "in1", "fp8.scale[slot]", "0", "n*C" },
    { "cast_f32_e4m3_t", "fp8.qt[slot]", "in1", "fp8.scale[slot]", "n", "C" } },
  ["fp8_quantize(fp8 gemm, gradient, hybrid)"] = { { "cast_f32_e5m2", "fp8.q[slot]", "in1", "fp8.scale[slot]", "0", "n*C" },
    { "cast_f32_e5m2_t", "fp8.qt[slot]", "in1", "fp8.scale[slot]", "n", "C" } },
}
-- cost of one launch (generator/lua/perf.lua; fields as in templates/gelu.cu.lua); fp8 casts read
-- fp32 and write one byte per element (the transposed copy the same)
cost = {
  round_bf16 = function(a) return { fp32 = 4 * a.n, rd = 4 * a.n, wr = a.E * a.n } end,
  round_fp16 = function(a) return { fp32 = 6 * a.n, rd = 4 * a.n, wr = a.E * a.n } end,
  amax = function(a) return { fp32 = 2 * a.n, rd = 4 * a.n, wr = 4 } end,
  cast_f32_bf16 = function(a) return { fp32 = 4 * a.n, rd = 4 * a.n, wr = 2 * a.n } end,
  cast_bf16_f32 = function(a) return { fp32 = a.n, rd = 2 * a.n, wr = 4 * a.n } end,
  cast_f32_f16 = function(a) return { fp32 = 6 * a.n, rd = 4 * a.n, wr = 2 * a.n } end,
  cast_f16_f32 = function(a) return { fp32 = a.n, rd = 2 * a.n, wr = 4 * a.n } end,
  -- the fp8 byte casts: every thread (4 elements) loads *scale; the transposed copy, one element per
  -- thread, loads it per element
  cast_f32_e4m3 = function(a) return { fp32 = 8 * a.n, rd = 4 * a.n + 4, wr = a.n, reread = a.n - 4 } end,
  cast_f32_e5m2 = function(a) return { fp32 = 8 * a.n, rd = 4 * a.n + 4, wr = a.n, reread = a.n - 4 } end,
  cast_f32_e4m3_t = function(a) local n = a.rows * a.cols return { fp32 = 2 * n, rd = 4 * n + 4, wr = n, reread = 4 * n - 4 } end,
  cast_f32_e5m2_t = function(a) local n = a.rows * a.cols return { fp32 = 2 * n, rd = 4 * n + 4, wr = n, reread = 4 * n - 4 } end,
  cast_e4m3_f32 = function(a) return { fp32 = 2 * a.n, rd = a.n, wr = 4 * a.n } end,
  cast_e5m2_f32 = function(a) return { fp32 = 2 * a.n, rd = a.n, wr = 4 * a.n } end,
  -- fake quantization: every thread (4 elements) loads *scale and *scale_inv
  fp8_fake_quantize_e4m3 = function(a) return { fp32 = 10 * a.n, rd = 4 * a.n + 8, wr = 4 * a.n, reread = 2 * a.n - 8 } end,
  fp8_fake_quantize_e5m2 = function(a) return { fp32 = 10 * a.n, rd = 4 * a.n + 8, wr = 4 * a.n, reread = 2 * a.n - 8 } end,
  fp8_scale_current = function(a) return { fp32 = 4, sfu = 1, rd = 4, wr = 12 } end,
}
]]
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
{{ partial("common") }}

// amax: a block's max |x|, merged into *amax with an integer atomicMax on the bit pattern (for
// non-negative floats the bit patterns order like the values; max is order-independent, so the
// result is deterministic). NaN inputs are skipped by fmaxf.
__device__ __forceinline__ void amax_merge(float* amax, float local) {
    float m = hyp_block_max(local);
    if (threadIdx.x == 0 && m > 0.0f) atomicMax(reinterpret_cast<int*>(amax), __float_as_int(m));
}


% if emit.cast_f32_bf16 then
{{ signature("cast_f32_bf16") }} {
    long i = ((long)blockIdx.x * blockDim.x + threadIdx.x) * 4;
    if (i + 3 < n) {
        hyp_f128 x = hyp_load128(in + i);
        out[i] = __float2bfloat16(x[0]); out[i + 1] = __float2bfloat16(x[1]);
        out[i + 2] = __float2bfloat16(x[2]); out[i + 3] = __float2bfloat16(x[3]);
    } else {
        for (; i < n; i++) out[i] = __float2bfloat16(in[i]);
    }
}
% end
% if emit.cast_bf16_f32 then
{{ signature("cast_bf16_f32") }} {
    long i = ((long)blockIdx.x * blockDim.x + threadIdx.x) * 4;
    if (i + 3 < n) {
        hyp_store128(out + i, f128(__bfloat162float(in[i]), __bfloat162float(in[i + 1]), __bfloat162float(in[i + 2]), __bfloat162float(in[i + 3])));
    } else {
        for (; i < n; i++) out[i] = __bfloat162float(in[i]);
    }
}
% end
% if emit.cast_f32_f16 then
{{ signature("cast_f32_f16") }} {
    long i = ((long)blockIdx.x * blockDim.x + threadIdx.x) * 4;
    if (i + 3 < n) {
        hyp_f128 x = hyp_load128(in + i);
        out[i] = __float2half(x[0]); out[i + 1] = __float2half(x[1]);
        out[i + 2] = __float2half(x[2]); out[i + 3] = __float2half(x[3]);
    } else {
        for (; i < n; i++) out[i] = __float2half(in[i]);
    }
}
% end
% if emit.cast_f16_f32 then
{{ signature("cast_f16_f32") }} {
    long i = ((long)blockIdx.x * blockDim.x + threadIdx.x) * 4;
    if (i + 3 < n) {
        hyp_store128(out + i, f128(__half2float(in[i]), __half2float(in[i + 1]), __half2float(in[i + 2]), __half2float(in[i + 3])));
    } else {
        for (; i < n; i++) out[i] = __half2float(in[i]);
    }
}
% end
% for _, f in ipairs({ "e4m3", "e5m2" }) do
% if emit["cast_f32_" .. f] then
{{ signature("cast_f32_" .. f) }} {
    const float s = *scale;
    long i = ((long)blockIdx.x * blockDim.x + threadIdx.x) * 4;
    float local = 0.0f;
    if (i + 3 < n) {
        hyp_f128 x = hyp_load128(in + i);
        out[i] = __nv_fp8_{{ f }}(x[0] * s); out[i + 1] = __nv_fp8_{{ f }}(x[1] * s);
        out[i + 2] = __nv_fp8_{{ f }}(x[2] * s); out[i + 3] = __nv_fp8_{{ f }}(x[3] * s);
        local = fmaxf(fmaxf(fabsf(x[0]), fabsf(x[1])), fmaxf(fabsf(x[2]), fabsf(x[3])));
    } else {
        for (; i < n; i++) { out[i] = __nv_fp8_{{ f }}(in[i] * s); local = fmaxf(local, fabsf(in[i])); }
    }
    if (amax) amax_merge(amax, local); // uniform per launch: every thread takes the same branch
}
% end
% if emit["cast_f32_" .. f .. "_t"] then
{{ signature("cast_f32_" .. f .. "_t") }} {
    const long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < rows * cols) {
        const long r = i / cols, c = i - r * cols;
        out[c * rows + r] = __nv_fp8_{{ f }}(in[i] * *scale);
    }
}
% end
% if emit["cast_" .. f .. "_f32"] then
{{ signature("cast_" .. f .. "_f32") }} {
    const float s = *scale_inv;
    long i = ((long)blockIdx.x * blockDim.x + threadIdx.x) * 4;
    if (i + 3 < n) {
        hyp_store128(out + i, f128(float(in[i]) * s, float(in[i + 1]) * s, float(in[i + 2]) * s, float(in[i + 3]) * s));
    } else {
        for (; i < n; i++) out[i] = float(in[i]) * s;
    }
}
% end
% if emit["fp8_fake_quantize_" .. f] then
// Fake quantization: the fp32 value an FP8 GEMM with fp32 accumulation sees (runtime/fp8.h's
// hyp_fp8_fake_quantize, bit for bit), with the tensor's amax fused in.
{{ signature("fp8_fake_quantize_" .. f) }} {
    const float s = *scale, si = *scale_inv;
    long i = ((long)blockIdx.x * blockDim.x + threadIdx.x) * 4;
    float local = 0.0f;
    if (i + 3 < n) {
        hyp_f128 x = hyp_load128(in + i);
        local = fmaxf(fmaxf(fabsf(x[0]), fabsf(x[1])), fmaxf(fabsf(x[2]), fabsf(x[3])));
        hyp_store128(out + i, f128(float(__nv_fp8_{{ f }}(x[0] * s)) * si, float(__nv_fp8_{{ f }}(x[1] * s)) * si,
                                   float(__nv_fp8_{{ f }}(x[2] * s)) * si, float(__nv_fp8_{{ f }}(x[3] * s)) * si));
    } else {
        for (; i < n; i++) {
            float x = in[i];
            local = fmaxf(local, fabsf(x));
            out[i] = float(__nv_fp8_{{ f }}(x * s)) * si;
        }
    }
    if (amax) amax_merge(amax, local);
}
% end
% end
% if emit.round_bf16 then
// v2102 bf16 policy: the operand a bf16 GEMM with fp32 accumulation reads (runtime/exec.c's
// round_bf16 op, bit for bit on numbers).
{{ signature("round_bf16") }} {
    long i = ((long)blockIdx.x * blockDim.x + threadIdx.x) * 4;
    if (i + 3 < n) {
        hyp_f128 x = hyp_load128(in + i);
        hyp_store128(out + i, f128(__bfloat162float(__float2bfloat16(x[0])), __bfloat162float(__float2bfloat16(x[1])),
                                   __bfloat162float(__float2bfloat16(x[2])), __bfloat162float(__float2bfloat16(x[3]))));
    } else {
        for (; i < n; i++) out[i] = __bfloat162float(__float2bfloat16(in[i]));
    }
}
% end
% if emit.round_fp16 then
// v2102 fp16 policy: the operand an fp16 GEMM with fp32 accumulation reads (runtime/cpu's
// round_fp16 op, bit for bit on numbers: __float2half rounds to nearest even, overflows to inf and
// keeps fp16 subnormals).
{{ signature("round_fp16") }} {
    long i = ((long)blockIdx.x * blockDim.x + threadIdx.x) * 4;
    if (i + 3 < n) {
        hyp_f128 x = hyp_load128(in + i);
        hyp_store128(out + i, f128(__half2float(__float2half_rn(x[0])), __half2float(__float2half_rn(x[1])),
                                   __half2float(__float2half_rn(x[2])), __half2float(__float2half_rn(x[3]))));
    } else {
        for (; i < n; i++) out[i] = __half2float(__float2half_rn(in[i]));
    }
}
% end
% if emit.fp8_scale_current then
{{ signature("fp8_scale_current") }} {
    if (blockIdx.x != 0 || threadIdx.x != 0) return;
    const float a = *amax;
    float s = (isinf(a) || isnan(a) || a == 0.0f) ? 1.0f : scaled_max / a;
    if (isinf(s)) s = 3.402823466e+38f; // FLT_MAX
    *scale = s;
    *scale_inv = 1.0f / s;
    *amax = 0.0f;
}
% end
% if emit.amax then
{{ signature("amax") }} {
    long i = ((long)blockIdx.x * blockDim.x + threadIdx.x) * 4;
    float local = 0.0f;
    if (i + 3 < n) {
        hyp_f128 x = hyp_load128(in + i);
        local = fmaxf(fmaxf(fabsf(x[0]), fabsf(x[1])), fmaxf(fabsf(x[2]), fabsf(x[3])));
    } else {
        for (; i < n; i++) local = fmaxf(local, fabsf(in[i]));
    }
    amax_merge(amax, local);
}
% end
