--[[ hyperion template
family = "rope"
doc = "RoPE (Hugging Face rotate_half) on the fused QKV rows, and the QKV split/permute to [B, heads, T, HD] with RoPE fused in"
constants = {
  NH = { "int", doc = "query heads" },
  NKV = { "int", doc = "key/value heads" },
  HD = { "int", doc = "head dim (even when RoPE is used)" },
  ROPE = { "bool", default = true, doc = "the model uses RoPE (false: the permute kernels only, never rotating)" },
  THETA = { "float", default = 10000.0, doc = "RoPE base" },
  ACT = { "enum", values = { "f32", "bf16" }, default = "f32", doc = "activation storage (v2102) of the [N, R] rows (qkv, its rotation and their gradients): f32, or bf16 (rotations in fp32, rounded on store); the permuted q/k/v scratch stays fp32" },
  BLOCK = { "int", default = 256, doc = "threads per block" },
}
derive = function(K, decide)
  if K.ROPE and K.HD % 2 ~= 0 then error("RoPE needs an even HD, got " .. K.HD) end
  K.HALF = K.HD // 2
  K.NQK = K.NH + K.NKV
  K.R = (K.NH + 2 * K.NKV) * K.HD
  K.PAIRS = K.ROPE and K.HALF or K.HD -- threads per row of the permute kernels
  decide("angles", "double", "cos/sin of t * THETA^(-2i/HD) in double, once per (t, i), shared by every head (as the CPU op)")
end
local function rope(K) return K.ROPE end
kernels = {
  { name = "rope_fwd", when = rope, doc = "out = R(t) inp on the q and k heads of every [N, R] row (t = pos[n], the token's position in its document (v2126), or n % T without pos); v copied",
    params = { "act_t* __restrict__ out", "const act_t* __restrict__ inp", "const int* __restrict__ pos", "int N", "int T" },
    block = "BLOCK", grid = "cdiv(N*HALF, BLOCK)" },
  { name = "rope_bwd", when = rope, doc = "dinp += R(t)^T dout (the inverse rotation); v: dinp += dout",
    params = { "act_t* __restrict__ dinp", "const act_t* __restrict__ dout", "const int* __restrict__ pos", "int N", "int T" },
    block = "BLOCK", grid = "cdiv(N*HALF, BLOCK)" },
  { name = "qkv_permute_fwd", doc = "qkv [B, T, R] -> q [B, NH, T, HD], k and v [B, NKV, T, HD]; rotates q and k when rope != 0",
    params = { "float* __restrict__ q", "float* __restrict__ k", "float* __restrict__ v",
               "const act_t* __restrict__ qkv", "int N", "int T", "int rope" },
    block = "BLOCK", grid = "cdiv(N*PAIRS, BLOCK)" },
  { name = "qkv_permute_bwd", doc = "dqkv [B, T, R] += the permute's (and rotation's, when rope != 0) transpose of dq, dk, dv",
    params = { "act_t* __restrict__ dqkv", "const float* __restrict__ dq", "const float* __restrict__ dk",
               "const float* __restrict__ dv", "int N", "int T", "int rope" },
    block = "BLOCK", grid = "cdiv(N*PAIRS, BLOCK)" },
}
ops = {
  rope_fwd = { { "rope_fwd", "out1", "in1", "in2", "N", "T" } },
  rope_bwd = { { "rope_bwd", "out1", "in1", "in2", "N", "T" } },
}
-- cost of one launch (generator/lua/perf.lua; fields as in templates/gelu.cu.lua): every [N, R] row
-- (R = (NH + 2 NKV) HD) once; the rotation's sin/cos are special functions per q/k pair
cost = {
  -- the permutes: qkv (and dqkv) as stored (E), q, k, v, dq, dk, dv fp32 scratch
  qkv_permute_fwd = function(a) local n = a.N * (a.NH + 2 * a.NKV) * a.HD
    return { rd = a.E * n, wr = 4 * n } end,
  qkv_permute_bwd = function(a) local n = a.N * (a.NH + 2 * a.NKV) * a.HD
    return { fp32 = n, rd = (4 + a.E) * n, wr = a.E * n } end,
  rope_fwd = function(a) local R = (a.NH + 2 * a.NKV) * a.HD; local qk = a.N * (a.NH + a.NKV) * a.HD
    return { fp32 = 3 * qk, sfu = qk, rd = a.E * a.N * R, wr = a.E * a.N * R } end,
  rope_bwd = function(a) local R = (a.NH + 2 * a.NKV) * a.HD; local qk = a.N * (a.NH + a.NKV) * a.HD
    return { fp32 = 4 * qk, sfu = qk, rd = 2 * a.E * a.N * R, wr = a.E * a.N * R } end,
}
-- the head-major permutes of the naive attention (rope argument 0: no rotation): each element of
-- the [N, R] rows moved once (the backward accumulates: dqkv read and written)

]]
{{ partial("common") }}
typedef {{ ACT == "bf16" and "hyp_bf16" or "float" }} act_t;
// Rotation of the pair (x[i], x[i + HALF]) by angle(t, i) = t * THETA^(-2i/HD):
//   y[i] = x[i] cos - x[i+HALF] sin,   y[i+HALF] = x[i+HALF] cos + x[i] sin
// The angle is formed and its cos/sin taken in double, then rounded to float, exactly as the CPU
// op does (in float, t * inv_freq loses ~t * 6e-8 rad: 5e-4 at t = 8192).
__device__ __forceinline__ void rope_cs(int t, int i, float sign, float& cs, float& sn) {
    double ang = (double)t * exp(-(2.0 * i / HD) * log((double)THETA));
    cs = (float)cos(ang);
    sn = sign * (float)sin(ang);
}

% if emit.rope_fwd or emit.rope_bwd then
// One thread per (row n, pair i): rotates pair i of every q and k head of the row, and copies
// (or, backward, accumulates) elements i and i + HALF of the v part.
template <bool BACKWARD>
__device__ __forceinline__ void rope_rows(act_t* y, const act_t* x, const int* pos, int N, int T) {
    long e = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (e >= (long)N * HALF) return;
    int n = (int)(e / HALF), i = (int)(e - (long)n * HALF);
    float cs, sn;
    rope_cs(pos != nullptr ? pos[n] : n % T, i, BACKWARD ? -1.0f : 1.0f, cs, sn);
    const act_t* xr = x + (long)n * R;
    act_t* yr = y + (long)n * R;
    for (int j = 0; j < NQK; j++) {
        float a = hyp_ld(xr + j * HD + i), c = hyp_ld(xr + j * HD + i + HALF);
        if (BACKWARD) {
            hyp_st(yr + j * HD + i, hyp_ld(yr + j * HD + i) + (a * cs - c * sn));
            hyp_st(yr + j * HD + i + HALF, hyp_ld(yr + j * HD + i + HALF) + (c * cs + a * sn));
        } else {
            hyp_st(yr + j * HD + i, a * cs - c * sn);
            hyp_st(yr + j * HD + i + HALF, c * cs + a * sn);
        }
    }
    for (int m = NQK * HD + i; m < R; m += HALF) {
        if (BACKWARD) hyp_st(yr + m, hyp_ld(yr + m) + hyp_ld(xr + m)); else hyp_st(yr + m, hyp_ld(xr + m));
    }
}
% end

% if emit.rope_fwd then
{{ signature("rope_fwd") }} { rope_rows<false>(out, inp, pos, N, T); }
% end
% if emit.rope_bwd then
{{ signature("rope_bwd") }} { rope_rows<true>(dinp, dout, pos, N, T); }
% end

// The permuted layouts: head j of row n = b*T + t lives at ((b*HEADS + j) * T + t) * HD.
__device__ __forceinline__ long head_off(int n, int T, int heads, int j) {
    int b = n / T, t = n - b * T;
    return (((long)b * heads + j) * T + t) * HD;
}

% if emit.qkv_permute_fwd then
// One thread per (row n, pair i) with rope (it owns elements i and i + HALF of every head), per
// (row n, element i) without: writes are coalesced along i within each head.
{{ signature("qkv_permute_fwd") }} {
    long e = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (e >= (long)N * PAIRS) return;
    int n = (int)(e / PAIRS), i = (int)(e - (long)n * PAIRS);
    const act_t* xr = qkv + (long)n * R;
% if ROPE then
    if (rope) {
        int t = n % T;
        float cs, sn;
        rope_cs(t, i, 1.0f, cs, sn);
        for (int j = 0; j < NQK; j++) {
            float a = hyp_ld(xr + j * HD + i), c = hyp_ld(xr + j * HD + i + HALF);
            float* y = j < NH ? q + head_off(n, T, NH, j) : k + head_off(n, T, NKV, j - NH);
            y[i] = a * cs - c * sn;
            y[i + HALF] = c * cs + a * sn;
        }
        for (int g = 0; g < NKV; g++) {
            float* y = v + head_off(n, T, NKV, g);
            y[i] = hyp_ld(xr + (NQK + g) * HD + i);
            y[i + HALF] = hyp_ld(xr + (NQK + g) * HD + i + HALF);
        }
        return;
    }
    for (int half = 0; half < 2; half++) { // no rotation: elements i and i + HALF
        int ii = i + half * HALF;
% else
    (void)rope;
    {
        int ii = i;
% end
        for (int j = 0; j < NH; j++) q[head_off(n, T, NH, j) + ii] = hyp_ld(xr + j * HD + ii);
        for (int g = 0; g < NKV; g++) {
            k[head_off(n, T, NKV, g) + ii] = hyp_ld(xr + (NH + g) * HD + ii);
            v[head_off(n, T, NKV, g) + ii] = hyp_ld(xr + (NQK + g) * HD + ii);
        }
    }
}
% end

% if emit.qkv_permute_bwd then
{{ signature("qkv_permute_bwd") }} {
    long e = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (e >= (long)N * PAIRS) return;
    int n = (int)(e / PAIRS), i = (int)(e - (long)n * PAIRS);
    act_t* xr = dqkv + (long)n * R;
% if ROPE then
    if (rope) {
        int t = n % T;
        float cs, sn;
        rope_cs(t, i, -1.0f, cs, sn); // the transpose of a rotation is the rotation by -angle
        for (int j = 0; j < NQK; j++) {
            const float* y = j < NH ? dq + head_off(n, T, NH, j) : dk + head_off(n, T, NKV, j - NH);
            float a = y[i], c = y[i + HALF];
            hyp_st(xr + j * HD + i, hyp_ld(xr + j * HD + i) + (a * cs - c * sn));
            hyp_st(xr + j * HD + i + HALF, hyp_ld(xr + j * HD + i + HALF) + (c * cs + a * sn));
        }
        for (int g = 0; g < NKV; g++) {
            const float* y = dv + head_off(n, T, NKV, g);
            hyp_st(xr + (NQK + g) * HD + i, hyp_ld(xr + (NQK + g) * HD + i) + y[i]);
            hyp_st(xr + (NQK + g) * HD + i + HALF, hyp_ld(xr + (NQK + g) * HD + i + HALF) + y[i + HALF]);
        }
        return;
    }
    for (int half = 0; half < 2; half++) {
        int ii = i + half * HALF;
% else
    (void)rope;
    {
        int ii = i;
% end
        for (int j = 0; j < NH; j++) hyp_st(xr + j * HD + ii, hyp_ld(xr + j * HD + ii) + dq[head_off(n, T, NH, j) + ii]);
        for (int g = 0; g < NKV; g++) {
            hyp_st(xr + (NH + g) * HD + ii, hyp_ld(xr + (NH + g) * HD + ii) + dk[head_off(n, T, NKV, g) + ii]);
            hyp_st(xr + (NQK + g) * HD + ii, hyp_ld(xr + (NQK + g) * HD + ii) + dv[head_off(n, T, NKV, g) + ii]);
        }
    }
}
% end
