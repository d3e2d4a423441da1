--[[ hyperion template
family = "mem_efficient_attention"
doc = "memory-efficient attention in plain SIMT fp32 (v2118, the Rabe-Staats / xFormers chunked algorithm): one thread per query (forward, dQ) or key (dK/dV) row, K/V and Q/dO chunks staged in fp32 shared memory, online softmax saving only the log-sum-exp; no mma, no architecture gate; deterministic backward; grouped-query heads; v2117's mask rule and score modifier rendered in, fully masked chunks skipped; optional document mask (v2126)"
constants = {
  NH = { "int", doc = "query heads" },
  NKV = { "int", doc = "key/value heads (NH % NKV == 0)" },
  HD = { "int", doc = "head dim (1..128)" },
  ATT_SCALE = { "float", default = 0.0, doc = "the score scale from the plan's attention attr scale (muP: 1/HD); 0: 1/sqrt(HD)" },
  ACT = { "enum", values = { "f32", "bf16" }, default = "f32", doc = "activation storage (v2102) of qkv, out and their gradients; all arithmetic in fp32" },
  DOCMASK = { "bool", default = false, doc = "the document mask hook (v2126 packing): query q sees keys from q - pos[q]; false: plain causal, pos unused" },
  MASK = { "enum", values = { "causal", "sliding_window", "prefix_lm" }, default = "causal", doc = "the mask rule (v2117), as in flash_attention.cu.lua" },
  WINDOW = { "int", default = 0, doc = "keys visible per query under MASK sliding_window" },
  PREFIX = { "int", default = 0, doc = "length of the bidirectional prefix under MASK prefix_lm" },
  SCORE_MOD = { "enum", values = { "none", "softcap", "alibi" }, default = "none", doc = "the score modifier (v2117), as in flash_attention.cu.lua" },
  SOFTCAP = { "float", default = 0.0, doc = "the cap of SCORE_MOD softcap" },
}
derive = function(K, decide)
  if K.NH % K.NKV ~= 0 then error("NH (" .. K.NH .. ") must be a multiple of NKV (" .. K.NKV .. ")") end
  if K.HD < 1 or K.HD > 128 then error("HD " .. K.HD .. " is not supported by the memory-efficient kernels (1..128: each thread keeps one or two HD-float accumulators in registers)") end
  if K.MASK == "sliding_window" and K.WINDOW < 1 then error("MASK sliding_window needs WINDOW >= 1 (got " .. K.WINDOW .. ")") end
  if K.MASK == "prefix_lm" and K.PREFIX < 1 then error("MASK prefix_lm needs PREFIX >= 1 (got " .. K.PREFIX .. ")") end
  if K.MASK == "prefix_lm" and K.DOCMASK then error("MASK prefix_lm does not compose with the document mask (DOCMASK)") end
  if K.SCORE_MOD == "softcap" and not (K.SOFTCAP > 0) then error("SCORE_MOD softcap needs SOFTCAP > 0 (got " .. K.SOFTCAP .. ")") end
  if K.SCORE_MOD == "alibi" and (K.NH & (K.NH - 1)) ~= 0 then error("SCORE_MOD alibi needs NH a power of two (got " .. K.NH .. ")") end
  K.G = K.NH // K.NKV
  K.R = (K.NH + 2 * K.NKV) * K.HD
  K.DBLOCK = 128 -- mea_bwd_d: 4 warps, one row each
  K.HDP = K.HD + 1 -- a thread's own row in shared memory: the odd stride puts the rows of a warp on distinct banks
  local big = K.HD > 64
  -- tiles: every kernel's shared memory stays under 48 KB (the static limit of every sm, no opt-in)
  K.BQ, K.BK = big and 32 or 64, big and 16 or 32      -- forward: queries per block (= threads) x keys per chunk
  K.BQB, K.BKB = big and 32 or 64, big and 8 or 16     -- dQ
  K.BKV, K.BQT = big and 32 or 64, big and 8 or 16     -- dK/dV: keys per block (= threads) x queries per chunk
  K.SMEM_FWD = 4 * (K.BQ * K.HDP + 2 * K.BK * K.HD)
  K.SMEM_DQ = 4 * (2 * K.BQB * K.HDP + 2 * K.BKB * K.HD)
  K.SMEM_DKV = 4 * (2 * K.BKV * K.HDP + 2 * K.BQT * K.HD + 3 * K.BQT)
  for _, s in ipairs({ K.SMEM_FWD, K.SMEM_DQ, K.SMEM_DKV }) do
    if s > 48 * 1024 then error(string.format("shared memory %d B over 48 KB at HD %d", s, K.HD)) end
  end
  decide("tiles", string.format("fwd %dx%d, dq %dx%d, dkv %dx%d", K.BQ, K.BK, K.BQB, K.BKB, K.BKV, K.BQT),
    string.format("one thread per row; fp32 shared memory %d / %d / %d B (fwd / dq / dkv, HD=%d), under the 48 KB every sm gives without opt-in", K.SMEM_FWD, K.SMEM_DQ, K.SMEM_DKV, K.HD))
end
kernels = {
  { name = "mea_fwd", doc = "out [B,T,NH*HD] = softmax(q k^T * scale, causal) v, lse [B,NH,T] (natural log); one thread per query",
    params = { "act_t* __restrict__ out", "float* __restrict__ lse", "const act_t* __restrict__ qkv", "const int* __restrict__ pos", "int T" },
    block = "BQ", grid = "cdiv(T, BQ), B*NH", smem = "SMEM_FWD" },
  { name = "mea_bwd_d", doc = "D[b,h,t] = dout_t . out_t over head h; one warp per row",
    params = { "float* __restrict__ D", "const act_t* __restrict__ dout", "const act_t* __restrict__ out", "int B", "int T" },
    block = "DBLOCK", grid = "cdiv(B*NH*T, 4)" },
  { name = "mea_bwd_dq", doc = "dq of BQB queries of head (b, h) += sum over visible keys of dS k (one thread per query, one writer)",
    params = { "act_t* __restrict__ dqkv", "const act_t* __restrict__ dout", "const act_t* __restrict__ qkv", "const float* __restrict__ lse",
               "const float* __restrict__ D", "const int* __restrict__ pos", "int T" },
    block = "BQB", grid = "cdiv(T, BQB), B*NH", smem = "SMEM_DQ" },
  { name = "mea_bwd_dkv", doc = "dk, dv of BKV keys of kv head (b, g) += sums over the group's G query heads and the queries at or after the keys (one thread per key, one writer)",
    params = { "act_t* __restrict__ dqkv", "const act_t* __restrict__ dout", "const act_t* __restrict__ qkv", "const float* __restrict__ lse",
               "const float* __restrict__ D", "const int* __restrict__ pos", "int T" },
    block = "BKV", grid = "cdiv(T, BKV), B*NKV", smem = "SMEM_DKV" },
}
spill_reasons = { mea_bwd_dkv = "two HD-float accumulators (dk, dv) per thread: at HD 128 they exceed the register file's per-thread share" }
-- the same plan ops and buffers as the FA2 template (v2113): flash_attention_fwd ins qkv,
-- positions?; outs atty, lse. flash_attention_bwd ins datty, qkv, atty, lse, positions?; outs dqkv
-- (accumulated), the [B,NH,T] scratch that holds D.
ops = {
  flash_attention_fwd = { { "mea_fwd", "out1", "out2", "in1", "in2", "T" } },
  flash_attention_bwd = { { "mea_bwd_d", "out2", "in1", "in3", "B", "T" },
                          { "mea_bwd_dkv", "out1", "in1", "in2", "in4", "out2", "in5", "T" },
                          { "mea_bwd_dq", "out1", "in1", "in2", "in4", "out2", "in5", "T" } },
}
-- cost of one launch (generator/lua/perf.lua): causal pairs (T(T+1)/2 per head) x HD FMAs per
-- product (forward: q.k and p v; dq: q.k, dO.v, ds k; dkv: k.q, v.dO, p dO, ds q), one exp per
-- pair; DRAM: each operand once per (b, head), chunks re-staged by later blocks hit L2 (`reread`).
cost = (function()
  local function pairs_(a) return a.B * a.NH * a.T * (a.T + 1) / 2 end
  return {
    mea_fwd = function(a) local n = a.B * a.T * a.NH * a.HD; local kv = 2 * a.B * a.T * a.NKV * a.HD * a.E
      return { fp32 = 4 * a.HD * pairs_(a), sfu = pairs_(a), rd = a.E * n + kv, wr = a.E * n + 4 * a.B * a.NH * a.T,
               reread = kv * math.max(0, a.T / 64 - 1) / 2 } end,
    mea_bwd_d = function(a) local n = a.B * a.T * a.NH * a.HD
      return { fp32 = 2 * n, rd = 2 * a.E * n, wr = 4 * a.B * a.NH * a.T } end,
    mea_bwd_dq = function(a) local n = a.B * a.T * a.NH * a.HD; local kv = 2 * a.B * a.T * a.NKV * a.HD * a.E
      return { fp32 = 6 * a.HD * pairs_(a), sfu = pairs_(a), rd = 3 * a.E * n + kv + 8 * a.B * a.NH * a.T, wr = a.E * n,
               reread = kv * math.max(0, a.T / 64 - 1) / 2 } end,
    mea_bwd_dkv = function(a) local n = a.B * a.T * a.NH * a.HD; local kv = a.B * a.T * a.NKV * a.HD * a.E
      return { fp32 = 8 * a.HD * pairs_(a), sfu = pairs_(a), rd = 2 * a.E * n + 4 * kv + 8 * a.B * a.NH * a.T, wr = 2 * kv,
               reread = 2 * a.E * n * math.max(0, a.T / 64 - 1) / 2 } end,
  }
end)()
]]
{{ partial("common") }}
typedef {{ ACT == "bf16" and "hyp_bf16" or "float" }} act_t;

// Layouts as the FA2 template's: qkv, dqkv [B, T, R] (q heads, then k heads, then v heads, HD
// each); out, dout [B, T, NH*HD]; lse, D [B, NH, T]. Causal: query t sees keys t2 <= t (and, with
// DOCMASK, t2 >= t - pos[t]); head h reads kv head h / G. Every product is an fp32 FMA chain over
// HD in a fixed order; a thread owns one row's accumulators, so every output has one writer.
static constexpr float SCALE = {{ ATT_SCALE > 0 and f32(ATT_SCALE) or f32(1.0 / math.sqrt(HD)) }};
static constexpr int OC = NH * HD;

// the first key query q may see: its document's start (DOCMASK), else 0; clamped to [0, q]
__device__ __forceinline__ int mea_lo(const int* pos, int b, int T, int q) {
    if (!DOCMASK || pos == nullptr || q >= T) return 0;
    const int v = q - pos[(long)b * T + q];
    return v < 0 ? 0 : v > q ? q : v;
}

// dst [rows][ld] <- rows of HD values from src (row stride lds), fp32; rows >= nvalid are zeros.
__device__ __forceinline__ void mea_stage(float* dst, int rows, int ld, const act_t* src, long lds, int nvalid) {
    for (int e = threadIdx.x; e < rows * HD; e += blockDim.x) {
        const int r = e / HD, c = e - r * HD;
        dst[r * ld + c] = r < nvalid ? hyp_ld(src + (long)r * lds + c) : 0.0f;
    }
}

// v2117 flex attention, rendered from MASK and SCORE_MOD (the rules of runtime/core/attn_mod.h and
// of flash_attention.cu.lua): does query q see key k; does a chunk hold a visible pair; the
// modified score of the scaled score s; its derivative from the modified score sm.
__device__ __forceinline__ bool mea_vis(int q, int k) {
    return {{ MASK == "sliding_window" and "k <= q && q - k < WINDOW" or MASK == "prefix_lm" and "k <= q || k < PREFIX" or "k <= q" }};
}
__device__ __forceinline__ bool mea_tile_any(int qlo, int qhi, int klo, int khi) {
    (void)qlo; (void)khi;
    return {{ MASK == "sliding_window" and "klo <= qhi && qlo - khi < WINDOW" or MASK == "prefix_lm" and "klo <= qhi || klo < PREFIX" or "klo <= qhi" }};
}
__device__ __forceinline__ float mea_mod(float s, int q, int k, int h) {
    (void)q; (void)k; (void)h;
    return {{ SCORE_MOD == "softcap" and "SOFTCAP * tanhf(s / SOFTCAP)" or SCORE_MOD == "alibi" and "s - exp2f(-8.0f * (float)(h + 1) / (float)NH) * (float)(q > k ? q - k : k - q)" or "s" }};
}
__device__ __forceinline__ float mea_dmod(float sm) {
    (void)sm;
    return {{ SCORE_MOD == "softcap" and "1.0f - (sm / SOFTCAP) * (sm / SOFTCAP)" or "1.0f" }};
}

__device__ __forceinline__ float mea_dot(const float* x, const float* y) {
    float acc = 0.0f;
#pragma unroll 8
    for (int d = 0; d < HD; d++) acc = fmaf(x[d], y[d], acc);
    return acc;
}

% if emit.mea_fwd then
// Block (query chunk of BQ rows, b*NH + h); thread t owns query q0 + t: its row of Q (pre-scaled)
// in shared memory, its output accumulator o[HD] and its running max m and sum l in registers.
{{ signature("mea_fwd") }} {
    extern __shared__ __align__(16) float mea_smem[];
    float* Qs = mea_smem;          // [BQ][HDP]
    float* Ks = Qs + BQ * HDP;     // [BK][HD]
    float* Vs = Ks + BK * HD;      // [BK][HD]
    __shared__ int s_lo;
    const int bh = blockIdx.y, b = bh / NH, h = bh - b * NH, g = h / G;
    const int q0 = blockIdx.x * BQ, t = threadIdx.x, q = q0 + t;
    const act_t* base = qkv + (long)b * T * R;
    mea_stage(Qs, BQ, HDP, base + (long)q0 * R + h * HD, R, min(BQ, T - q0));
    const int lo = mea_lo(pos, b, T, q);
    if (t == 0) s_lo = T;
    __syncthreads();
    if (q < T) atomicMin(&s_lo, lo);
    for (int d = 0; d < HD; d++) Qs[t * HDP + d] *= SCALE;
    float o[HD];
#pragma unroll
    for (int d = 0; d < HD; d++) o[d] = 0.0f;
    float m = -HYP_INF, l = 0.0f;
    __syncthreads();
    const int kend = {{ MASK == "prefix_lm" and "T" or "min(T, q0 + BQ)" }}, kstart = s_lo / BK * BK;
    for (int k0 = kstart; k0 < kend; k0 += BK) {
        if (!mea_tile_any(q0, q0 + BQ - 1, k0, k0 + BK - 1)) continue; // fully masked (block-uniform)
        __syncthreads(); // the previous chunk is no longer read
        mea_stage(Ks, BK, HD, base + (long)k0 * R + (NH + g) * HD, R, min(BK, T - k0));
        mea_stage(Vs, BK, HD, base + (long)k0 * R + (NH + NKV + g) * HD, R, min(BK, T - k0));
        __syncthreads();
        if (q >= T || !mea_tile_any(q, q, k0, k0 + BK - 1)) continue; // no key of the chunk visible
        float s[BK], mx = m;
#pragma unroll
        for (int j = 0; j < BK; j++) {
            const int key = k0 + j;
            s[j] = (mea_vis(q, key) && key < T && key >= lo) ? mea_mod(mea_dot(&Qs[t * HDP], &Ks[j * HD]), q, key, h) : -HYP_INF;
            mx = fmaxf(mx, s[j]);
        }
        // a row with no visible key yet (document mask) keeps m = -inf: exponents relative to 0
        const float mu = mx == -HYP_INF ? 0.0f : mx, al = expf(m - mu);
        l *= al;
#pragma unroll
        for (int d = 0; d < HD; d++) o[d] *= al;
#pragma unroll
        for (int j = 0; j < BK; j++) {
            const float p = expf(s[j] - mu);
            l += p;
#pragma unroll
            for (int d = 0; d < HD; d++) o[d] = fmaf(p, Vs[j * HD + d], o[d]);
        }
        m = mx;
    }
    if (q >= T) return;
    const float inv = 1.0f / l;
    act_t* orow = out + ((long)b * T + q) * OC + h * HD;
#pragma unroll
    for (int d = 0; d < HD; d++) hyp_st(orow + d, o[d] * inv);
    lse[(long)bh * T + q] = m + logf(l);
}
% end

% if emit.mea_bwd_d then
{{ signature("mea_bwd_d") }} {
    const long row = (long)blockIdx.x * 4 + (threadIdx.x >> 5); // (b*NH + h)*T + t
    if (row >= (long)B * NH * T) return;
    const int lane = threadIdx.x & 31, t = (int)(row % T);
    const long bh = row / T, b = bh / NH, h = bh - b * NH;
    const long off = (b * T + t) * OC + h * HD;
    float acc = 0.0f;
    for (int i = lane; i < HD; i += 32) acc += hyp_ld(dout + off + i) * hyp_ld(out + off + i);
    acc = hyp_warp_sum(acc);
    if (lane == 0) D[row] = acc;
}
% end

% if emit.mea_bwd_dq then
// Block (query chunk of BQB rows, b*NH + h); thread t owns query q0 + t: P from the saved lse,
// dS = P (dO.v - D), dq += SCALE dS k over the visible keys, added to dqkv once.
{{ signature("mea_bwd_dq") }} {
    extern __shared__ __align__(16) float mea_smem[];
    float* Qs = mea_smem;          // [BQB][HDP]
    float* Os = Qs + BQB * HDP;    // [BQB][HDP]
    float* Ks = Os + BQB * HDP;    // [BKB][HD]
    float* Vs = Ks + BKB * HD;     // [BKB][HD]
    const int bh = blockIdx.y, b = bh / NH, h = bh - b * NH, g = h / G;
    const int q0 = blockIdx.x * BQB, t = threadIdx.x, q = q0 + t;
    const act_t* base = qkv + (long)b * T * R;
    mea_stage(Qs, BQB, HDP, base + (long)q0 * R + h * HD, R, min(BQB, T - q0));
    mea_stage(Os, BQB, HDP, dout + ((long)b * T + q0) * OC + h * HD, OC, min(BQB, T - q0));
    const int lo = mea_lo(pos, b, T, q);
    const float lr = q < T ? lse[(long)bh * T + q] : 0.0f, dr = q < T ? D[(long)bh * T + q] : 0.0f;
    float dq[HD];
#pragma unroll
    for (int d = 0; d < HD; d++) dq[d] = 0.0f;
    const int kend = {{ MASK == "prefix_lm" and "T" or "min(T, q0 + BQB)" }};
    for (int k0 = 0; k0 < kend; k0 += BKB) {
        if (!mea_tile_any(q0, q0 + BQB - 1, k0, k0 + BKB - 1)) continue; // fully masked (block-uniform)
        __syncthreads();
        mea_stage(Ks, BKB, HD, base + (long)k0 * R + (NH + g) * HD, R, min(BKB, T - k0));
        mea_stage(Vs, BKB, HD, base + (long)k0 * R + (NH + NKV + g) * HD, R, min(BKB, T - k0));
        __syncthreads();
        if (q >= T || !mea_tile_any(q, q, k0, k0 + BKB - 1) || k0 + BKB <= lo) continue;
#pragma unroll 1
        for (int j = 0; j < BKB; j++) {
            const int key = k0 + j;
            if (!mea_vis(q, key) || key >= T || key < lo) continue;
            const float sm = mea_mod(SCALE * mea_dot(&Qs[t * HDP], &Ks[j * HD]), q, key, h);
            const float p = expf(sm - lr);
            const float ds = SCALE * p * (mea_dot(&Os[t * HDP], &Vs[j * HD]) - dr) * mea_dmod(sm);
#pragma unroll
            for (int d = 0; d < HD; d++) dq[d] = fmaf(ds, Ks[j * HD + d], dq[d]);
        }
    }
    if (q >= T) return;
    act_t* qr = dqkv + ((long)b * T + q) * R + h * HD;
#pragma unroll
    for (int d = 0; d < HD; d++) hyp_st(qr + d, hyp_ld(qr + d) + dq[d]);
}
% end

% if emit.mea_bwd_dkv then
// Block (key chunk of BKV rows, b*NKV + g); thread t owns key k0 + t: over the G query heads of
// the group and the query chunks from the key chunk's start (fixed order), dv += P dO and
// dk += SCALE dS q, added to dqkv once.
{{ signature("mea_bwd_dkv") }} {
    extern __shared__ __align__(16) float mea_smem[];
    float* Ks = mea_smem;          // [BKV][HDP]
    float* Vs = Ks + BKV * HDP;    // [BKV][HDP]
    float* Qs = Vs + BKV * HDP;    // [BQT][HD]
    float* Os = Qs + BQT * HD;     // [BQT][HD]
    float* Ls = Os + BQT * HD;     // [BQT]
    float* Ds = Ls + BQT;          // [BQT]
    int* Lo = (int*)(Ds + BQT);    // [BQT]: each query's first visible key
    const int bg = blockIdx.y, b = bg / NKV, g = bg - b * NKV;
    const int k0 = blockIdx.x * BKV, t = threadIdx.x, key = k0 + t;
    const act_t* base = qkv + (long)b * T * R;
    mea_stage(Ks, BKV, HDP, base + (long)k0 * R + (NH + g) * HD, R, min(BKV, T - k0));
    mea_stage(Vs, BKV, HDP, base + (long)k0 * R + (NH + NKV + g) * HD, R, min(BKV, T - k0));
    float dk[HD], dv[HD];
#pragma unroll
    for (int d = 0; d < HD; d++) { dk[d] = 0.0f; dv[d] = 0.0f; }
    for (int h = g * G; h < (g + 1) * G; h++) {
        const long bh = (long)b * NH + h;
        for (int q0 = {{ MASK == "prefix_lm" and "0" or "k0" }}; q0 < T; q0 += BQT) {
            if (!mea_tile_any(q0, q0 + BQT - 1, k0, k0 + BKV - 1)) continue; // fully masked (block-uniform)
            __syncthreads();
            mea_stage(Qs, BQT, HD, base + (long)q0 * R + h * HD, R, min(BQT, T - q0));
            mea_stage(Os, BQT, HD, dout + ((long)b * T + q0) * OC + h * HD, OC, min(BQT, T - q0));
            for (int i = threadIdx.x; i < BQT; i += blockDim.x) {
                Ls[i] = q0 + i < T ? lse[bh * T + q0 + i] : 0.0f;
                Ds[i] = q0 + i < T ? D[bh * T + q0 + i] : 0.0f;
                Lo[i] = q0 + i < T ? mea_lo(pos, b, T, q0 + i) : T;
            }
            __syncthreads();
            if (key >= T || !mea_tile_any(q0, q0 + BQT - 1, key, key)) continue;
#pragma unroll 1
            for (int i = 0; i < BQT; i++) {
                const int q = q0 + i;
                if (!mea_vis(q, key) || q >= T || key < Lo[i]) continue;
                const float sm = mea_mod(SCALE * mea_dot(&Ks[t * HDP], &Qs[i * HD]), q, key, h);
                const float p = expf(sm - Ls[i]);
                const float ds = SCALE * p * (mea_dot(&Vs[t * HDP], &Os[i * HD]) - Ds[i]) * mea_dmod(sm);
#pragma unroll
                for (int d = 0; d < HD; d++) {
                    dv[d] = fmaf(p, Os[i * HD + d], dv[d]);
                    dk[d] = fmaf(ds, Qs[i * HD + d], dk[d]);
                }
            }
        }
    }
    if (key >= T) return;
    act_t* kr = dqkv + ((long)b * T + key) * R + (NH + g) * HD;
    act_t* vr = kr + NKV * HD;
#pragma unroll
    for (int d = 0; d < HD; d++) {
        hyp_st(kr + d, hyp_ld(kr + d) + dk[d]);
        hyp_st(vr + d, hyp_ld(vr + d) + dv[d]);
    }
}
% end
