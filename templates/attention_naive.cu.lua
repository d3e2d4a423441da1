--[[ hyperion template
family = "attention_naive"
doc = "naive causal attention, the baseline: materializes P [B, NH, T, T]; SIMT tiles in shared memory; grouped-query heads"
constants = {
  NH = { "int", doc = "query heads" },
  NKV = { "int", doc = "key/value heads (NH % NKV == 0)" },
  HD = { "int", doc = "head dim" },
  ATT_SCALE = { "float", default = 0.0, doc = "the score scale from the plan's attention attr scale (muP: 1/HD); 0: 1/sqrt(HD)" },
  ACT = { "enum", values = { "f32", "bf16" }, default = "f32", doc = "activation storage (v2102): f32, or bf16 qkv/out/P and their gradients; scores, the forward softmax and the score gradients then run on an fp32 scratch [B, NH, T, T] (P is stored rounded for the backward), as the cpu executor computes them between bf16 loads and stores" },
  BLOCK = { "int", default = 256, doc = "threads per block (8 warps)" },
}
derive = function(K, decide)
  if K.NH % K.NKV ~= 0 then error("NH (" .. K.NH .. ") must be a multiple of NKV (" .. K.NKV .. ")") end
  if K.BLOCK ~= 256 then error("the tiles assume BLOCK = 256 (8 warps)") end
  K.G = K.NH // K.NKV
  K.HDC = (K.HD + 31) // 32 -- head-dim columns per lane in the P @ X kernels
  -- score tiles: TQ queries x 32 keys with both operands in shared memory (static limit 48 KB)
  K.TQ = 32
  while K.TQ > 8 and (K.TQ + 32) * (K.HD + 1) * 4 > 48 * 1024 do K.TQ = K.TQ // 2 end
  if (K.TQ + 32) * (K.HD + 1) * 4 > 48 * 1024 then error("HD " .. K.HD .. " is too large for the naive kernels (at most 306: the score tiles must fit 48 KB of static shared memory)") end
  K.RQ = K.TQ // 8
  decide("score_tile", K.TQ .. "x32", string.format("TQ queries x 32 keys, %d B of shared memory (HD=%d)", (K.TQ + 32) * (K.HD + 1) * 4, K.HD))
  decide("pv_tile", "32x" .. K.HD, "32 rows x HD per block, a 32-key slice of P and of the values at a time in shared memory")
end
kernels = {
  { name = "attention_scores", doc = "att[b,h,t,t2] = q_t . k_t2 / sqrt(HD) for t2 <= t (entries above the diagonal are left for the softmax)",
    params = { "float* __restrict__ att", "const float* __restrict__ q", "const float* __restrict__ k", "int T" },
    block = "BLOCK", grid = "cdiv(T, TQ), cdiv(T, 32), B*NH" },
  { name = "attention_softmax_fwd", doc = "in place, per row t: softmax over lo <= t2 <= t, zeros elsewhere (lo = t - pos[b,t], the start of t's document (v2126), 0 without pos)",
    params = { "float* __restrict__ att", "const int* __restrict__ pos", "int B", "int T" },
    block = "BLOCK", grid = "cdiv(B*NH*T, 8)" },
  { name = "attention_value", doc = "out[b, t, h*HD + i] = sum_t2 att[b,h,t,t2] v[b, h/G, t2, i]  (written in the [B, T, NH*HD] layout)",
    params = { "act_t* __restrict__ out", "const float* __restrict__ att", "const float* __restrict__ v", "int T" },
    block = "BLOCK", grid = "cdiv(T, 32), B*NH" },
  { name = "attention_bwd_datt", doc = "datt[b,h,t,t2] = dout_t . v_t2 for t2 <= t (dout in [B, T, NH*HD])",
    params = { "float* __restrict__ datt", "const act_t* __restrict__ dout", "const float* __restrict__ v", "int T" },
    block = "BLOCK", grid = "cdiv(T, TQ), cdiv(T, 32), B*NH" },
  { name = "attention_softmax_bwd", doc = "in place: datt = att * (datt - sum_t2 att * datt) / sqrt(HD) (the score gradient), zeros above",
    params = { "float* __restrict__ datt", "const act_t* __restrict__ att", "int B", "int T" },
    block = "BLOCK", grid = "cdiv(B*NH*T, 8)" },
  { name = "attention_bwd_dq", doc = "dq[b,h,t,:] = sum_t2 dscore[b,h,t,t2] k[b,h/G,t2,:]  (overwrites; [B, NH, T, HD])",
    params = { "float* __restrict__ dq", "const float* __restrict__ dscore", "const float* __restrict__ k", "int T" },
    block = "BLOCK", grid = "cdiv(T, 32), B*NH" },
  { name = "attention_bwd_dkv", doc = "dk[b,g,t2,:] = sum over the G heads h of group g and t >= t2 of dscore[b,h,t,t2] q[b,h,t,:]; dv likewise with att and dout (overwrite)",
    params = { "float* __restrict__ dk", "float* __restrict__ dv", "const float* __restrict__ dscore", "const act_t* __restrict__ att",
               "const float* __restrict__ q", "const act_t* __restrict__ dout", "int T" },
    block = "BLOCK", grid = "cdiv(T, 32), B*NKV, 2" },
}
-- q, k, v, dq, dk, dv: scratch in the permuted layouts (rope.cu's qkv_permute_* produce/consume them).
-- ACT bf16: the plan's att/datt buffers are bf16 (att is what the backward reads); scores, the
-- forward probabilities and the score gradients live in the fp32 scratch S, and cast.cu's
-- cast_f32_bf16 stores P rounded into att (the cpu executor's numerics: one rounding of P).
ops = function(K)
  if K.ACT ~= "bf16" then
    return {
      attention_fwd = { { "qkv_permute_fwd", "scratch.q", "scratch.k", "scratch.v", "in1", "N", "T", "0" },
                        { "attention_scores", "out2", "scratch.q", "scratch.k", "T" },
                        { "attention_softmax_fwd", "out2", "in2", "B", "T" },
                        { "attention_value", "out1", "out2", "scratch.v", "T" } },
      attention_bwd = { { "qkv_permute_fwd", "scratch.q", "scratch.k", "scratch.v", "in2", "N", "T", "0" },
                        { "attention_bwd_datt", "out2", "in1", "scratch.v", "T" },
                        { "attention_softmax_bwd", "out2", "in3", "B", "T" },
                        { "attention_bwd_dq", "scratch.dq", "out2", "scratch.k", "T" },
                        { "attention_bwd_dkv", "scratch.dk", "scratch.dv", "out2", "in3", "scratch.q", "in1", "T" },
                        { "qkv_permute_bwd", "out1", "scratch.dq", "scratch.dk", "scratch.dv", "N", "T", "0" } },
    }
  end
  local S = "scratch(B*NH*T*T)"
  return {
    attention_fwd = { { "qkv_permute_fwd", "scratch.q", "scratch.k", "scratch.v", "in1", "N", "T", "0" },
                      { "attention_scores", S, "scratch.q", "scratch.k", "T" },
                      { "attention_softmax_fwd", S, "in2", "B", "T" },
                      { "attention_value", "out1", S, "scratch.v", "T" },
                      { "cast_f32_bf16", "out2", S, "B*NH*T*T" } },
    attention_bwd = { { "qkv_permute_fwd", "scratch.q", "scratch.k", "scratch.v", "in2", "N", "T", "0" },
                      { "attention_bwd_datt", S, "in1", "scratch.v", "T" },
                      { "attention_softmax_bwd", S, "in3", "B", "T" },
                      { "attention_bwd_dq", "scratch.dq", S, "scratch.k", "T" },
                      { "attention_bwd_dkv", "scratch.dk", "scratch.dv", S, "in3", "scratch.q", "in1", "T" },
                      { "qkv_permute_bwd", "out1", "scratch.dq", "scratch.dk", "scratch.dv", "N", "T", "0" } },
  }
end
-- cost of one launch (generator/lua/perf.lua; fields as in templates/gelu.cu.lua), enumerating the
-- kernels' tiles: fp32 FMA products (2 FLOPs each) of the blocks that are not above the diagonal,
-- the tile loads they stage (only in-range, causal elements of the [B, NH, T, T] scores), and the
-- score rows the softmax kernels read (three passes forward, two backward) and write (all T).
-- DRAM: the [T, T] scores once per pass and q, k, v once per (b, head); the rest is `reread`.
cost = (function()
  local function rows(T, r0, n) return math.max(0, math.min(n, T - r0)) end
  local function tri(T, t0, j0, nr) -- staged (t, j): t0 <= t < t0+nr, j0 <= j < j0+32, t < T, j <= t
    local c = 0
    for t = t0, math.min(T, t0 + nr) - 1 do c = c + math.max(0, math.min(t, j0 + 31, T - 1) - j0 + 1) end
    return c
  end
  local function scores(a, ea) -- scores (q: ea 4) and datt (dout: ea E): TQ x 32 tiles, two staged operands
    local TQ = a.TQ or 32
    local ld, st, fl = 0, 0, 0
    for t0 = 0, a.T - 1, TQ do
      for j0 = 0, a.T - 1, 32 do
        if j0 <= t0 + TQ - 1 then
          ld = ld + (rows(a.T, t0, TQ) * ea + rows(a.T, j0, 32) * 4) * a.HD
          st = st + tri(a.T, t0, j0, TQ) * 4
          fl = fl + 2 * TQ * 32 * a.HD
        end
      end
    end
    local BH = a.B * a.NH
    local uniq = a.B * a.T * (a.NH * ea + a.NKV * 4) * a.HD
    return { fp32 = BH * fl, rd = uniq, wr = BH * st, reread = BH * ld - uniq }
  end
  local function pv(a, kv_heads, eo) -- value (out: eo E) and dq (fp32 scratch: eo 4): P (causal part) x X, 32-row tiles
    local ld, fl = 0, 0
    for t0 = 0, a.T - 1, 32 do
      for j0 = 0, math.min(a.T, t0 + 32) - 1, 32 do
        ld = ld + tri(a.T, t0, j0, 32) * 4 + rows(a.T, j0, 32) * a.HD * 4
        fl = fl + 2 * 32 * 32 * a.HD
      end
    end
    local BH = a.B * a.NH
    local p = BH * a.T * (a.T + 1) // 2 * 4
    local x = a.B * a.T * kv_heads * a.HD * 4
    return { fp32 = BH * fl, rd = p + x, wr = BH * a.T * a.HD * eo, reread = BH * ld - p - x }
  end
  -- softmax: the forward loads each visible score 3 times (fp32 scratch); the backward loads datt
  -- (fp32) and att (as stored: E) twice each
  local function softmax(a, loads_per_visible)
    local vis = a.T * (a.T + 1) // 2 -- visible (t, j <= t) entries per (b, head)
    local BH = a.B * a.NH
    local per = loads_per_visible == 3 and 4 or (4 + a.E) -- bytes per visible entry and pass
    return { fp32 = BH * vis * 4, sfu = BH * vis * (loads_per_visible == 3 and 2 or 0),
             rd = BH * vis * per, wr = BH * a.T * a.T * 4,
             reread = BH * vis * per * (loads_per_visible == 3 and 2 or 1) }
  end
  return {
    attention_scores = function(a) return scores(a, 4) end,
    attention_bwd_datt = function(a) return scores(a, a.E) end,
    attention_softmax_fwd = function(a) return softmax(a, 3) end,
    attention_softmax_bwd = function(a) return softmax(a, 4) end,
    attention_value = function(a) return pv(a, a.NKV, a.E) end,
    attention_bwd_dq = function(a) return pv(a, a.NKV, 4) end,
    -- z = 0: dk from dS^T q (fp32 scratch), z = 1: dv from P^T dout (att and dout as stored: E);
    -- G heads each; dk, dv fp32 scratch
    attention_bwd_dkv = function(a)
      local ld, fl = 0, 0
      for j0 = 0, a.T - 1, 32 do
        for t0 = j0, a.T - 1, 32 do
          ld = ld + (tri(a.T, t0, j0, 32) + rows(a.T, t0, 32) * a.HD) * (4 + a.E) -- both z
          fl = fl + 2 * 32 * 32 * a.HD
        end
      end
      local G = a.NH // a.NKV
      local BH = a.B * a.NH
      local p = BH * a.T * (a.T + 1) // 2 * (4 + a.E)
      local x = BH * a.T * a.HD * (4 + a.E)
      return { fp32 = 2 * a.B * a.NKV * G * fl, rd = p + x, wr = 2 * a.B * a.NKV * a.T * a.HD * 4,
               reread = a.B * a.NKV * G * ld - p - x }
    end,
  }
end)()
]]
{{ partial("common") }}
typedef {{ ACT == "bf16" and "hyp_bf16" or "float" }} act_t;

// Layouts: q, dq [B, NH, T, HD]; k, v, dk, dv [B, NKV, T, HD]; att, datt [B, NH, T, T];
// out, dout [B, T, NH*HD] (the attention output before the projection).
static constexpr float SCALE = {{ ATT_SCALE > 0 and f32(ATT_SCALE) or f32(1.0 / math.sqrt(HD)) }}; // ATT_SCALE, else 1/sqrt(HD), as the CPU op's scale

// Score tile: S[t, t2] = alpha * A_t . B_t2 for the TQ queries from t0 and 32 keys from j0 of one
// (b, h). A rows are q rows ([B,NH,T,HD]) or, for the backward, dout rows ([B,T,NH*HD]); B rows
// are k or v rows of head h / G. Thread (ty, lane): queries ty + 8r, key lane.
template <bool A_IS_BTC, class TA>
__device__ __forceinline__ void score_tile(float* S, const TA* A, const float* Bm, float alpha, int T) {
    __shared__ float As[TQ][HD + 1];
    __shared__ float Bs[32][HD + 1];
    const int bh = blockIdx.z, b = bh / NH, h = bh - b * NH;
    const int t0 = blockIdx.x * TQ, j0 = blockIdx.y * 32;
    if (j0 > t0 + TQ - 1) return; // entirely above the diagonal: nothing to compute
    const int ty = threadIdx.x >> 5, lane = threadIdx.x & 31;
    for (int e = threadIdx.x; e < TQ * HD; e += BLOCK) {
        int r = e / HD, i = e - r * HD, t = t0 + r;
        float x = 0.0f;
        if (t < T) x = hyp_ld(A + (A_IS_BTC ? ((long)b * T + t) * (NH * HD) + h * HD + i : ((long)bh * T + t) * HD + i));
        As[r][i] = x;
    }
    const float* Bh = Bm + ((long)b * NKV + h / G) * T * HD;
    for (int e = threadIdx.x; e < 32 * HD; e += BLOCK) {
        int r = e / HD, i = e - r * HD, t = j0 + r;
        Bs[r][i] = t < T ? Bh[(long)t * HD + i] : 0.0f;
    }
    __syncthreads();
    float acc[RQ];
#pragma unroll
    for (int r = 0; r < RQ; r++) acc[r] = 0.0f;
#pragma unroll 8 // partial unrolls: as fast here, and a third less compile time than full ones
    for (int i = 0; i < HD; i++) {
        float y = Bs[lane][i];
#pragma unroll
        for (int r = 0; r < RQ; r++) acc[r] += As[ty + 8 * r][i] * y;
    }
    const int t2 = j0 + lane;
#pragma unroll
    for (int r = 0; r < RQ; r++) {
        int t = t0 + ty + 8 * r;
        if (t < T && t2 <= t) S[((long)bh * T + t) * T + t2] = alpha * acc[r];
    }
}

% if emit.attention_scores then
{{ signature("attention_scores") }} { score_tile<false>(att, q, k, SCALE, T); }
% end
% if emit.attention_bwd_datt then
{{ signature("attention_bwd_datt") }} { score_tile<true>(datt, dout, v, 1.0f, T); }
% end

% if emit.attention_softmax_fwd then
// One warp per row (b, h, t): max, sum of exp, then p = exp(s - max) * (1 / sum); zeros above t.
{{ signature("attention_softmax_fwd") }} {
    long row = (long)blockIdx.x * 8 + (threadIdx.x >> 5);
    if (row >= (long)B * NH * T) return;
    const int t = (int)(row % T), lane = threadIdx.x & 31;
    float* a = att + row * T;
    // the mask hook (v2126): keys before the start of t's document get p = 0, so the backward
    // (which multiplies by p) sends no gradient across documents
    int lo = 0;
    if (pos != nullptr) {
        const long b = row / ((long)NH * T);
        lo = t - pos[b * T + t];
        lo = lo < 0 ? 0 : lo > t ? t : lo;
    }
    float mx = __int_as_float(0xff800000);
    for (int j = lo + lane; j <= t; j += 32) mx = fmaxf(mx, a[j]);
    mx = hyp_warp_max(mx);
    float sum = 0.0f;
    for (int j = lo + lane; j <= t; j += 32) sum += expf(a[j] - mx);
    float inv = 1.0f / hyp_warp_sum(sum);
    for (int j = lane; j < T; j += 32) a[j] = (j >= lo && j <= t) ? expf(a[j] - mx) * inv : 0.0f;
}
% end

% if emit.attention_softmax_bwd then
// One warp per row: dscore = SCALE * p * (dp - sum_j p_j dp_j) for t2 <= t, zeros above.
{{ signature("attention_softmax_bwd") }} {
    long row = (long)blockIdx.x * 8 + (threadIdx.x >> 5);
    if (row >= (long)B * NH * T) return;
    const int t = (int)(row % T), lane = threadIdx.x & 31;
    float* d = datt + row * T;
    const act_t* p = att + row * T;
    float dot = 0.0f;
    for (int j = lane; j <= t; j += 32) dot += hyp_ld(p + j) * d[j];
    dot = hyp_warp_sum(dot);
    for (int j = lane; j < T; j += 32) d[j] = j <= t ? SCALE * hyp_ld(p + j) * (d[j] - dot) : 0.0f;
}
% end

// P @ X tile: O[t, :] = sum_t2 P[t, t2] X[t2, :] for 32 rows t from t0 of one (b, h), over the
// keys t2 <= t (P is zero above the diagonal; the last slice stops at the last row). Thread
// (ty, lane) holds rows ty + 8r and columns lane + 32c. X rows are of head h / G ([B,NKV,T,HD]);
// O is written in [B,T,NH*HD] (OUT_IS_BTC) or [B,NH,T,HD].
template <bool OUT_IS_BTC, class TO>
__device__ __forceinline__ void pv_tile(TO* O, const float* P, const float* X, int T) {
    __shared__ float Ps[32][33];
    __shared__ float Xs[32][HD];
    const int bh = blockIdx.y, b = bh / NH, h = bh - b * NH;
    const int t0 = blockIdx.x * 32;
    const int ty = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const float* Xh = X + ((long)b * NKV + h / G) * T * HD;
    const float* Pb = P + (long)bh * T * T;
    float acc[4][HDC];
#pragma unroll
    for (int r = 0; r < 4; r++)
#pragma unroll
        for (int c = 0; c < HDC; c++) acc[r][c] = 0.0f;
    const int nslices = (min(T, t0 + 32) + 31) / 32; // key slices up to the last row's diagonal
    for (int sl = 0; sl < nslices; sl++) {
        const int j0 = sl * 32;
#pragma unroll
        for (int q = 0; q < 4; q++) { // thread (ty, lane) stages P[t0 + ty + 8q, j0 + lane]
            int r = ty + 8 * q, t = t0 + r, j = j0 + lane;
            Ps[r][lane] = (t < T && j <= t) ? Pb[(long)t * T + j] : 0.0f;
        }
        for (int e = threadIdx.x; e < 32 * HD; e += BLOCK) {
            int r = e / HD, i = e - r * HD, j = j0 + r;
            Xs[r][i] = j < T ? Xh[(long)j * HD + i] : 0.0f;
        }
        __syncthreads();
#pragma unroll 4
        for (int jj = 0; jj < 32; jj++) {
            float x[HDC];
#pragma unroll
            for (int c = 0; c < HDC; c++) x[c] = (lane + 32 * c < HD) ? Xs[jj][lane + 32 * c] : 0.0f;
#pragma unroll
            for (int r = 0; r < 4; r++) {
                float p = Ps[ty + 8 * r][jj];
#pragma unroll
                for (int c = 0; c < HDC; c++) acc[r][c] += p * x[c];
            }
        }
        __syncthreads();
    }
#pragma unroll
    for (int r = 0; r < 4; r++) {
        int t = t0 + ty + 8 * r;
        if (t >= T) continue;
        TO* o = OUT_IS_BTC ? O + ((long)b * T + t) * (NH * HD) + h * HD : O + ((long)bh * T + t) * HD;
#pragma unroll
        for (int c = 0; c < HDC; c++)
            if (lane + 32 * c < HD) hyp_st(o + lane + 32 * c, acc[r][c]);
    }
}

% if emit.attention_value then
{{ signature("attention_value") }} { pv_tile<true>(out, att, v, T); }
% end
% if emit.attention_bwd_dq then
{{ signature("attention_bwd_dq") }} { pv_tile<false>(dq, dscore, k, T); }
% end

% if emit.attention_bwd_dkv then
// dk (blockIdx.z == 0) or dv (== 1) for 32 key rows t2 from j0 of kv head (b, g):
//   dk[t2, :] = sum_{h in g} sum_{t >= t2} dscore[h, t, t2] q[h, t, :]
//   dv[t2, :] = sum_{h in g} sum_{t >= t2} att[h, t, t2] dout[t, h, :]
// i.e. P^T @ X over the query rows: slices of 32 queries are staged in shared memory with P
// transposed. Each output row is owned by one block: no atomics; heads and slices in fixed order.
{{ signature("attention_bwd_dkv") }} {
    __shared__ float Pt[32][33];
    __shared__ float Xs[32][HD];
    const int bg = blockIdx.y, b = bg / NKV, g = bg - b * NKV;
    const bool is_v = blockIdx.z == 1;

    float* O = (is_v ? dv : dk) + (long)bg * T * HD;
    const int j0 = blockIdx.x * 32;
    const int ty = threadIdx.x >> 5, lane = threadIdx.x & 31;
    float acc[4][HDC];
#pragma unroll
    for (int r = 0; r < 4; r++)
#pragma unroll
        for (int c = 0; c < HDC; c++) acc[r][c] = 0.0f;
    for (int h = g * G; h < (g + 1) * G; h++) {
        const long bh = (long)b * NH + h;
        for (int t0 = (j0 / 32) * 32; t0 < T; t0 += 32) {
#pragma unroll
            for (int qq = 0; qq < 4; qq++) { // thread (ty, lane) stages P[t0 + ty + 8qq, j0 + lane], transposed
                int r = ty + 8 * qq, t = t0 + r, j = j0 + lane;
                Pt[lane][r] = (t < T && j < T && j <= t) ? (is_v ? hyp_ld(att + (bh * T + t) * T + j) : dscore[(bh * T + t) * T + j]) : 0.0f;
            }
            for (int e = threadIdx.x; e < 32 * HD; e += BLOCK) {
                int r = e / HD, i = e - r * HD, t = t0 + r;
                float x = 0.0f;
                if (t < T) x = is_v ? hyp_ld(dout + ((long)b * T + t) * (NH * HD) + h * HD + i) : q[(bh * T + t) * HD + i];
                Xs[r][i] = x;
            }
            __syncthreads();
#pragma unroll 4
            for (int tt = 0; tt < 32; tt++) {
                float x[HDC];
#pragma unroll
                for (int c = 0; c < HDC; c++) x[c] = (lane + 32 * c < HD) ? Xs[tt][lane + 32 * c] : 0.0f;
#pragma unroll
                for (int r = 0; r < 4; r++) {
                    float p = Pt[ty + 8 * r][tt];
#pragma unroll
                    for (int c = 0; c < HDC; c++) acc[r][c] += p * x[c];
                }
            }
            __syncthreads();
        }
    }
#pragma unroll
    for (int r = 0; r < 4; r++) {
        int j = j0 + ty + 8 * r;
        if (j >= T) continue;
#pragma unroll
        for (int c = 0; c < HDC; c++)
            if (lane + 32 * c < HD) O[(long)j * HD + lane + 32 * c] = acc[r][c];
    }
}
% end
