--[[ hyperion template
family = "adamw"
doc = "multi-tensor AdamW over the whole parameter arena in one launch: fp32 master weights (+ a bf16 copy) or bf16 weights, stochastic rounding to bf16"
constants = {
  PARAM = { "enum", values = { "f32", "bf16" }, default = "f32", doc = "weights: f32 (master) or bf16 (v2161: no fp32 master)" },
  STATES = { "enum", values = { "f32", "bf16" }, default = "f32", doc = "Adam m and v: f32, or bf16 with stochastic rounding (v2161 states)" },
  BF16_COPY = { "bool", default = false, doc = "with f32 weights: also write the bf16 copy the GEMMs read (v2102), stochastically rounded" },
  BLOCK = { "int", default = 256, doc = "threads per block" },
}
derive = function(K, decide)
  if K.PARAM == "bf16" and K.BF16_COPY then error("BF16_COPY needs PARAM=f32 (bf16 weights are the copy)") end
  K.SR = K.PARAM == "bf16" or K.STATES == "bf16" or K.BF16_COPY
  decide("weights", K.PARAM .. (K.BF16_COPY and " master + bf16 copy" or ""), K.SR and "bf16 values are written with stochastic rounding (counter hash of seed, step, element)" or "fp32 throughout")
  decide("segments", "tensor table", "one launch over the arena: seg_end[] (exclusive ends, ascending) and seg_wd[] give each element's tensor and weight decay")
end
local function ty(d) return d == "bf16" and "__nv_bfloat16" or "float" end
kernels = {
  { name = "adamw_step", doc = "p -= lr * (mhat / (sqrt(vhat) + eps) + wd * p) over n elements; g scaled by *gscale (NULL: 1)",
    params = function(K)
      local ps = { ty(K.PARAM) .. "* __restrict__ p" }
      if K.BF16_COPY then ps[#ps + 1] = "__nv_bfloat16* __restrict__ pb" end
      for _, x in ipairs({ ty(K.STATES) .. "* __restrict__ m", ty(K.STATES) .. "* __restrict__ v",
        "const float* __restrict__ g", "const long* __restrict__ seg_end", "const float* __restrict__ seg_wd", "int nseg",
        "long n", "float lr", "float beta1", "float beta2", "float eps", "float ibc1", "float ibc2",
        "const float* __restrict__ gscale", "unsigned seed", "int step" }) do ps[#ps + 1] = x end
      return ps
    end,
    block = "BLOCK", grid = "cdiv(n, 4*BLOCK)" },
}
ops = {
  optimizer = { { "adamw_step", "params", "m", "v", "grads", "seg_end", "seg_wd", "nseg", "n", "lr", "beta1", "beta2", "eps", "1/(1-beta1^t)", "1/(1-beta2^t)", "gscale", "seed", "t" } },
}
-- cost of one launch (generator/lua/perf.lua; fields as in templates/gelu.cu.lua): p, m, v, g read,
-- p, m, v written (bf16 variants: 2 bytes for those stored in bf16). Each thread (4 elements) also
-- binary-searches the segment table (about log2(nseg) 8-byte loads, then seg_end, seg_wd and
-- *gscale): L1 hits, `reread`; the search depth is log2(nseg) on average, not exactly
cost = {
  adamw_step = function(a)
    local pb = a.PARAM == "bf16" and 2 or 4
    local sb = a.STATES == "bf16" and 2 or 4
    local copy = (a.BF16_COPY and 2 or 0)
    local threads = (a.n + 3) // 4
    return { fp32 = 16 * a.n, sfu = 2 * a.n, rd = (pb + 2 * sb + 4) * a.n, wr = (pb + 2 * sb + copy) * a.n,
             reread = threads * (8 * math.log(math.max(a.nseg or 1, 1), 2) + 16) } end,
}
]]
{{ partial("common") }}

% if SR then
// Counter-based random bits and stochastic rounding to bf16: kernels/hyp/sr.h, the same body the
// cpu trainer runs (runtime/train/optim_adamw.c), so both give the same bits for (seed, step, element).
#include "hyp/sr.h"
__device__ __forceinline__ unsigned hash_u32(unsigned seed, unsigned step, unsigned long long idx, unsigned stream) {
    return hyp_sr_hash(seed, step, idx, stream);
}
__device__ __forceinline__ __nv_bfloat16 sr_bf16(float x, unsigned r) {
    __nv_bfloat16_raw raw;
    raw.x = hyp_sr_bf16_bits(hyp_sr_f32_bits(x), r, 0);
    return __nv_bfloat16(raw);
}
% end

__device__ __forceinline__ float to_f(float x) { return x; }
__device__ __forceinline__ float to_f(__nv_bfloat16 x) { return __bfloat162float(x); }
// 4 consecutive values from i (16-byte load for f32)
__device__ __forceinline__ void load4(float* d, const float* s, long i) { hyp_f128 v = hyp_load128(s + i); d[0] = v[0]; d[1] = v[1]; d[2] = v[2]; d[3] = v[3]; }
__device__ __forceinline__ void load4(float* d, const __nv_bfloat16* s, long i) {
#pragma unroll
    for (int k = 0; k < 4; k++) d[k] = __bfloat162float(s[i + k]);
}

{{ partial("segments") }}

% if emit.adamw_step then
// One thread per 4 consecutive elements (16-byte loads of the fp32 arrays; a scalar tail).
{{ signature("adamw_step") }} {
    long i0 = ((long)blockIdx.x * blockDim.x + threadIdx.x) * 4;
    if (i0 >= n) return;
    const float gs = gscale ? *gscale : 1.0f;
    int cnt = n - i0 < 4 ? (int)(n - i0) : 4;
    int s = segment_of(seg_end, nseg, i0);
    float wd = seg_wd[s];
    bool one_seg = seg_end[s] >= i0 + cnt; // else look the segment up per element
    float pv[4], mv[4], vv[4], gv[4];
    if (cnt == 4) {
        load4(pv, p, i0); load4(mv, m, i0); load4(vv, v, i0); load4(gv, g, i0);
    } else {
#pragma unroll
        for (int k = 0; k < 4; k++) { // fixed trip counts keep the arrays in registers
            bool in = k < cnt;
            pv[k] = in ? to_f(p[i0 + k]) : 0.0f; mv[k] = in ? to_f(m[i0 + k]) : 0.0f;
            vv[k] = in ? to_f(v[i0 + k]) : 0.0f; gv[k] = in ? g[i0 + k] : 0.0f;
        }
    }
% if PARAM == "bf16" and STATES == "f32" then
    // v2161 without states in bf16: hyp/sr.h's element update, bit-identical to the cpu trainer's
#pragma unroll
    for (int k = 0; k < 4; k++) {
        if (k >= cnt) continue;
        float w = one_seg ? wd : seg_wd[segment_of(seg_end, nseg, i0 + k)];
        __nv_bfloat16_raw raw;
        raw.x = hyp_adamw_bf16_elem(((__nv_bfloat16_raw)p[i0 + k]).x, gv[k] * gs, &mv[k], &vv[k], lr, beta1, beta2, eps,
                                    ibc1, ibc2, w, seed, (unsigned)step, (unsigned long long)(i0 + k), 0);
        p[i0 + k] = __nv_bfloat16(raw);
        m[i0 + k] = mv[k];
        v[i0 + k] = vv[k];
    }
}
% else
#pragma unroll
    for (int k = 0; k < 4; k++) {
        float w = one_seg ? wd : seg_wd[segment_of(seg_end, nseg, i0 + k)];
        float gi = gv[k] * gs;
        float mi = beta1 * mv[k] + (1.0f - beta1) * gi;
        float vi = beta2 * vv[k] + (1.0f - beta2) * gi * gi;
        float mhat = mi * ibc1, vhat = vi * ibc2;
        pv[k] -= lr * (mhat / (sqrtf(vhat) + eps) + w * pv[k]);
        mv[k] = mi;
        vv[k] = vi;
    }
% if PARAM == "f32" and STATES == "f32" then
    if (cnt == 4) {
        hyp_store128(p + i0, f128(pv[0], pv[1], pv[2], pv[3]));
        hyp_store128(m + i0, f128(mv[0], mv[1], mv[2], mv[3]));
        hyp_store128(v + i0, f128(vv[0], vv[1], vv[2], vv[3]));
    } else {
#pragma unroll
        for (int k = 0; k < 4; k++)
            if (k < cnt) { p[i0 + k] = pv[k]; m[i0 + k] = mv[k]; v[i0 + k] = vv[k]; }
    }
% else
#pragma unroll
    for (int k = 0; k < 4; k++) {
        if (k >= cnt) continue;
        const unsigned long long e = (unsigned long long)(i0 + k);
% if PARAM == "f32" then
        p[i0 + k] = pv[k];
% else
        p[i0 + k] = sr_bf16(pv[k], hash_u32(seed, (unsigned)step, e, 0u));
% end
% if STATES == "f32" then
        m[i0 + k] = mv[k];
        v[i0 + k] = vv[k];
% else
        m[i0 + k] = sr_bf16(mv[k], hash_u32(seed, (unsigned)step, e, 1u));
        v[i0 + k] = sr_bf16(vv[k], hash_u32(seed, (unsigned)step, e, 2u));
% end
    }
% end
% if BF16_COPY then
#pragma unroll
    for (int k = 0; k < 4; k++)
        if (k < cnt) pb[i0 + k] = sr_bf16(pv[k], hash_u32(seed, (unsigned)step, (unsigned long long)(i0 + k), 0u));
% else
    (void)seed; (void)step;
% end
}
% end
% end
