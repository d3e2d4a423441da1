--[[ hyperion template
family = "flash_attention"
doc = "FlashAttention-2 attention on tensor cores (mma.sync m16n8k16 bf16, fp32 accumulation): online softmax saving only the log-sum-exp; deterministic backward; grouped-query heads; a mask rule (causal, sliding window, prefix-LM) and score modifier (softcap, ALiBi) rendered in (v2117), fully masked tiles skipped; optional document mask (v2126 packing); and the FlashAttention-3 forward for sm_90a (v2114: flash3_attn_fwd, warp-specialized wgmma with an mbarrier pipeline)"
constants = {
  NH = { "int", doc = "query heads" },
  NKV = { "int", doc = "key/value heads (NH % NKV == 0)" },
  HD = { "int", doc = "head dim (a multiple of 16, at most 128)" },
  ATT_SCALE = { "float", default = 0.0, doc = "the score scale from the plan's attention attr scale (muP: 1/HD); 0: 1/sqrt(HD)" },
  PREC = { "enum", values = { "bf16", "bf16x3" }, default = "bf16x3",
    doc = "operands of the mma: bf16 (each fp32 operand rounded once, ~2^-8 relative) or bf16x3 (hi + lo bf16 split, hi*hi + hi*lo + lo*hi: ~fp32 accuracy, 3x the mma work)" },
  ACT = { "enum", values = { "f32", "bf16" }, default = "f32", doc = "activation storage (v2102) of qkv, out and their gradients: f32, or bf16 (staged into shared memory exactly, outputs rounded on store); lse and D stay fp32" },
  BLOCK = { "int", default = 128, doc = "threads per block (4 warps, 16 tile rows each)" },
  DOCMASK = { "bool", default = false, doc = "the document mask hook (v2126 packing): query q sees keys from q - pos[q] (its document's start); false: plain causal, pos unused" },
  MASK = { "enum", values = { "causal", "sliding_window", "prefix_lm" }, default = "causal", doc = "the mask rule (v2117): causal k <= q; sliding_window k <= q && q - k < WINDOW; prefix_lm k <= q || k < PREFIX" },
  WINDOW = { "int", default = 0, doc = "keys visible per query under MASK sliding_window" },
  PREFIX = { "int", default = 0, doc = "length of the bidirectional prefix under MASK prefix_lm" },
  SCORE_MOD = { "enum", values = { "none", "softcap", "alibi" }, default = "none", doc = "the score modifier (v2117) of the scaled score s: softcap SOFTCAP*tanh(s/SOFTCAP); alibi s - 2^(-8(h+1)/NH) |q - k|" },
  SOFTCAP = { "float", default = 0.0, doc = "the cap of SCORE_MOD softcap" },
  FA3_BK = { "int", default = 128, doc = "flash3_attn_fwd (v2114): key rows per pipeline stage (v2114.block_k; a multiple of 16)" },
  FA3_STAGES = { "int", default = 2, doc = "flash3_attn_fwd (v2114): shared-memory K/V pipeline stages (v2114.stages)" },
  FA3_TMA = { "bool", default = false, doc = "flash3_attn_fwd (v2114): the producer loads with TMA (cp.async.bulk.tensor.3d, 64 x 64 boxes, 128-byte swizzle) through a tensor map argument tmap over qkv as [B][T][R] bf16 (needs ACT bf16); false: plain loads converted on the way (trainers: the runtime has no tensor-map argument yet)" },
}
derive = function(K, decide)
  if K.NH % K.NKV ~= 0 then error("NH (" .. K.NH .. ") must be a multiple of NKV (" .. K.NKV .. ")") end
  if K.HD % 16 ~= 0 or K.HD > 128 then
    error("HD " .. K.HD .. " is not supported by the flash kernels (a multiple of 16 up to 128: the mma k-steps are 16 wide, and the dK/dV accumulators of 16 x HD per warp must stay in registers)")
  end
  if K.BLOCK ~= 128 then error("the tiles assume BLOCK = 128 (4 warps)") end
  if K.MASK == "sliding_window" and K.WINDOW < 1 then error("MASK sliding_window needs WINDOW >= 1 (got " .. K.WINDOW .. ")") end
  if K.MASK == "prefix_lm" and K.PREFIX < 1 then error("MASK prefix_lm needs PREFIX >= 1 (got " .. K.PREFIX .. ")") end
  if K.MASK == "prefix_lm" and K.DOCMASK then error("MASK prefix_lm does not compose with the document mask (DOCMASK): the prefix is the row's, not each document's") end
  if K.SCORE_MOD == "softcap" and not (K.SOFTCAP > 0) then error("SCORE_MOD softcap needs SOFTCAP > 0 (got " .. K.SOFTCAP .. ")") end
  if K.SCORE_MOD == "alibi" and (K.NH & (K.NH - 1)) ~= 0 then error("SCORE_MOD alibi needs NH a power of two (got " .. K.NH .. "): the slopes 2^(-8(h+1)/NH) of the ALiBi paper") end
  K.G = K.NH // K.NKV
  K.R = (K.NH + 2 * K.NKV) * K.HD -- fused qkv row
  K.NS = K.PREC == "bf16x3" and 2 or 1 -- bf16 parts per operand
  K.LD = K.HD + 8 -- smem row in bf16 elements: +16 bytes staggers the 8 rows of an ldmatrix over the banks
  K.BQ, K.BK = 64, 32 -- forward and dQ: 64 queries per block (16 per warp) x 32-key tiles
  -- dK/dV: 64 keys per block (16 per warp) x query tiles of 32, or 16 when HD x parts > 128:
  -- the dK, dV accumulators (HD floats per lane) plus the 16 x BQB scores and dP must fit 255
  -- registers (HD 128 bf16x3 with 32-query tiles spilled 32 B at sm_90)
  K.BKV, K.BQB = 64, (K.NS * K.HD > 128) and 16 or 32
  K.SMEM_FWD = K.NS * (K.BQ + 2 * K.BK) * K.LD * 2
  K.SMEM_DKV = K.NS * (2 * K.BKV + 2 * K.BQB) * K.LD * 2 + 3 * K.BQB * 4
  -- dQ's key tiles: 16 when HD x parts > 128, which keeps its shared memory under the 99 KB a
  -- block may have on sm_86/sm_89 (HD 128 bf16x3: 85 KB instead of 102 KB)
  K.BKQ = (K.NS * K.HD > 128) and 16 or 32
  K.SMEM_DQ = K.NS * (2 * K.BQ + 2 * K.BKQ) * K.LD * 2
  -- flash3_attn_fwd: 1024 bytes to align the swizzled tiles, Q (128 rows), K and V stages (bf16),
  -- 4 mbarriers per stage and Q's
  K.SMEM3 = 1024 + (128 + 2 * K.FA3_STAGES * K.FA3_BK) * K.HD * 2 + 8 * (4 * K.FA3_STAGES + 1)
  decide("tiles", "fwd 64x32, dkv 64x" .. K.BQB .. ", dq 64x" .. K.BKQ,
    string.format("4 warps x 16 rows per block; dynamic shared memory %d / %d / %d B (fwd / dkv / dq, HD=%d, %s)", K.SMEM_FWD, K.SMEM_DKV, K.SMEM_DQ, K.HD, K.PREC))
  decide("precision", K.PREC, K.PREC == "bf16x3"
    and "fp32 operands split into hi + lo bf16, three mma per product (hi*hi + hi*lo + lo*hi): relative error ~2^-16, near fp32"
    or "operands rounded to bf16 (round to nearest even), fp32 accumulation: relative error ~2^-8 per product")
end
kernels = {
  { name = "flash_attention_fwd", doc = "out [B,T,NH*HD] = softmax(q k^T / sqrt(HD), causal) v, lse [B,NH,T] = log of each row's sum of exp (natural log)",
    params = { "act_t* __restrict__ out", "float* __restrict__ lse", "const act_t* __restrict__ qkv", "const int* __restrict__ pos", "int T" },
    block = "BLOCK", grid = "cdiv(T, BQ), B*NH", smem = "SMEM_FWD" },
  { name = "flash3_attn_fwd", doc = "the FlashAttention-3 forward (v2114): the outputs of flash_attention_fwd from a warp-specialized, mbarrier-pipelined wgmma kernel (bf16 operands); rendered when asked",
    params = function(K)
      local ps = { "act_t* __restrict__ out", "float* __restrict__ lse", "const act_t* __restrict__ qkv", "const int* __restrict__ pos", "int T" }
      if K.FA3_TMA then ps[#ps + 1] = "const __grid_constant__ hyp_tmap tmap" end
      return ps
    end,
    block = 384, grid = "cdiv(T, 128), B*NH", smem = "SMEM3", when = function() return false end,
    arch_specific = "flash3_attn_fwd (v2114) uses wgmma, setmaxnreg and mbarrier try_wait: sm_90a only" },
  { name = "flash_attention_bwd_d", doc = "D[b,h,t] = dout_t . out_t over head h (the softmax backward's row term); one warp per row",
    params = { "float* __restrict__ D", "const act_t* __restrict__ dout", "const act_t* __restrict__ out", "int B", "int T" },
    block = "BLOCK", grid = "cdiv(B*NH*T, 4)" },
  { name = "flash_attention_bwd_dkv", doc = "dk, dv of 64 keys of kv head (b, g) += sums over the group's G query heads and the query tiles at or after the keys (one writer per row: no atomics)",
    params = { "act_t* __restrict__ dqkv", "const act_t* __restrict__ dout", "const act_t* __restrict__ qkv", "const float* __restrict__ lse",
               "const float* __restrict__ D", "const int* __restrict__ pos", "int T" },
    block = "BLOCK", grid = "cdiv(T, BKV), B*NKV", smem = "SMEM_DKV" },
  { name = "flash_attention_bwd_dq", doc = "dq of 64 queries of head (b, h) += dS K over the key tiles up to the diagonal",
    params = { "act_t* __restrict__ dqkv", "const act_t* __restrict__ dout", "const act_t* __restrict__ qkv", "const float* __restrict__ lse",
               "const float* __restrict__ D", "const int* __restrict__ pos", "int T" },
    block = "BLOCK", grid = "cdiv(T, BQ), B*NH", smem = "SMEM_DQ" },
}
spill_reasons = { flash_attention_bwd_dkv = "at HD >= 64 the kernel sits at the 168-register cap (3 blocks of 4 warps per SM): measured at sm_90, 32 bytes for llama-176m-qknorm without DOCMASK (as before the mask hook), 16 bytes with DOCMASK (its per-key visible-query counts) for gpt2-124m and llama-176m-qknorm; gpt2-124m and llama3-8b without DOCMASK: none" }
-- flash_attention_fwd: ins qkv, positions?; outs atty, lse. flash_attention_bwd: ins datty, qkv,
-- atty, lse, positions?; outs dqkv (accumulated), the [B,NH,T] scratch that holds D. positions
-- absent: pos = NULL, plain causal.
-- FA3_TMA: flash3_attn_fwd's tensor map over qkv (in1) as [B][T][R] bf16, 64 x 64 boxes, 128-byte
-- swizzle (runtime/device/exec_dev.c tmap_arg: "tmap:BUFFER:DIMS:BOX:SWIZZLE", dim 0 innermost).
ops = function(K)
  local fa3 = { "flash3_attn_fwd", "out1", "out2", "in1", "in2", "T" }
  if K.FA3_TMA then fa3[#fa3 + 1] = "tmap:in1:R, T, B:64, 64, 1:3" end
  return {
    -- one of the two forward kernels is rendered (render.lua keeps the launches of rendered kernels)
    flash_attention_fwd = { { "flash_attention_fwd", "out1", "out2", "in1", "in2", "T" }, fa3 },
    flash_attention_bwd = { { "flash_attention_bwd_d", "out2", "in1", "in3", "B", "T" },
                            { "flash_attention_bwd_dkv", "out1", "in1", "in2", "in4", "out2", "in5", "T" },
                            { "flash_attention_bwd_dq", "out1", "in1", "in2", "in4", "out2", "in5", "T" } },
  }
end
-- cost of one launch (generator/lua/perf.lua; fields as in templates/gelu.cu.lua; mma_sync: the FA2
-- kernels issue mma.sync, tc_async: FA3's wgmma overlaps its softmax), enumerating the kernels' own loops: tiles staged by the whole block (fp32 loads), m16n8k16 products per warp
-- after its causal skips (4096 FLOPs each, x3 under PREC bf16x3: hi*hi + hi*lo + lo*hi), the
-- per-row statistics every thread loads. DRAM: q, k, v, dout, out once per (b, head); k/v tiles
-- staged again by later query tiles hit L2 (`reread`). No document mask (DOCMASK adds pos loads).
cost = (function()
  local MMA = 2 * 16 * 8 * 16
  local function mult(a) return a.PREC == "bf16x3" and 3 or 1 end
  local function rows(T, r0, n) return math.max(0, math.min(n, T - r0)) end
  -- the kernels' fa_tile_any (v2117's mask rule at tile level)
  local function any(a, qlo, qhi, klo, khi)
    if a.MASK == "sliding_window" then return klo <= qhi and qlo - khi < a.WINDOW end
    if a.MASK == "prefix_lm" then return klo <= qhi or klo < a.PREFIX end
    return klo <= qhi
  end
  local function qk_tiles(a, BQ, BK, per_warp_products) -- fwd and dq: query tiles x key tiles
    local staged, mma = 0, 0
    for q0 = 0, a.T - 1, BQ do
      local kend = a.MASK == "prefix_lm" and a.T or math.min(a.T, q0 + BQ)
      for k0 = 0, kend - 1, BK do
        if any(a, q0, q0 + BQ - 1, k0, k0 + BK - 1) then
          staged = staged + 2 * rows(a.T, k0, BK) * a.HD * a.E
          for w = 0, 3 do if any(a, q0 + 16 * w, q0 + 16 * w + 15, k0, k0 + BK - 1) then mma = mma + per_warp_products end end
        end
      end
    end
    return staged, mma
  end
  local function fwd(a)
    local BQ, BK = 64, 32
    local staged_kv, mma = qk_tiles(a, BQ, BK, (BK // 8) * (a.HD // 16) + (a.HD // 8) * (BK // 16))
    local BH, q = a.B * a.NH, a.B * a.T * a.NH * a.HD
    local kv = a.B * a.T * 2 * a.NKV * a.HD * a.E
    return { tc_bf16 = mult(a) * MMA * BH * mma, fp32 = BH * mma * 64, sfu = BH * mma * 16, mma_sync = true,
             rd = a.E * q + kv, wr = a.E * q + 4 * BH * a.T, reread = BH * staged_kv - kv }
  end
  local function dq(a)
    local BQ = 64
    local BKQ = ((a.PREC == "bf16x3" and 2 or 1) * a.HD > 128) and 16 or 32
    local staged_kv, mma = qk_tiles(a, BQ, BKQ, 2 * (BKQ // 8) * (a.HD // 16) + (a.HD // 8) * (BKQ // 16))
    local BH, q = a.B * a.NH, a.B * a.T * a.NH * a.HD
    local kv = a.B * a.T * 2 * a.NKV * a.HD * a.E
    local qtiles = (a.T + BQ - 1) // BQ
    local stats = BH * qtiles * 128 * 2 * 8 -- every thread loads lse and D of two rows
    -- q and dout staged, k/v tiles, the row statistics, dq read and written back (+=)
    return { tc_bf16 = mult(a) * MMA * BH * mma, fp32 = BH * mma * 64, sfu = BH * mma * 16, mma_sync = true,
             rd = 2 * a.E * q + kv + 8 * BH * a.T + a.E * q, wr = a.E * q,
             reread = BH * staged_kv - kv + stats - 8 * BH * a.T }
  end
  local function dkv(a)
    local BKV = 64
    local BQB = ((a.PREC == "bf16x3" and 2 or 1) * a.HD > 128) and 16 or 32
    local G = a.NH // a.NKV
    local staged_qo, mma, stats = 0, 0, 0
    for k0 = 0, a.T - 1, BKV do
      for q0 = a.MASK == "prefix_lm" and 0 or k0, a.T - 1, BQB do
        if any(a, q0, q0 + BQB - 1, k0, k0 + BKV - 1) then
          staged_qo = staged_qo + 2 * rows(a.T, q0, BQB) * a.HD * a.E
          stats = stats + 8 * rows(a.T, q0, BQB)
          for w = 0, 3 do if any(a, q0, q0 + BQB - 1, k0 + 16 * w, k0 + 16 * w + 15) then mma = mma + 4 * (BQB // 8) * (a.HD // 16) end end
        end
      end
    end
    local BG, kvh = a.B * a.NKV, a.B * a.T * a.NKV * a.HD
    local qo = 2 * a.B * a.T * a.NH * a.HD * a.E
    -- k, v staged once per key tile; q, dout tiles per head of the group; dk, dv read and written (+=)
    return { tc_bf16 = mult(a) * MMA * BG * G * mma, fp32 = BG * G * mma * 64, sfu = BG * G * mma * 16, mma_sync = true,
             rd = 2 * a.E * kvh + qo + 8 * a.B * a.NH * a.T + 2 * a.E * kvh, wr = 2 * a.E * kvh,
             reread = BG * G * (staged_qo + stats) - qo - 8 * a.B * a.NH * a.T }
  end
  -- flash3_attn_fwd (v2114): per visited (128-query, FA3_BK-key) tile both consumer warpgroups
  -- run the whole tile (wgmma has no per-warp skip): S = Q K^T and O += P V, 2 * 64 * BK * HD
  -- FLOPs each per warpgroup; per score: one exp (sfu) and ~6 fp32 ops (scale, mask select, max,
  -- subtract, sum, bf16 pack), per row and tile HD rescales of O. The producer stages q once and
  -- k/v per visited tile (fp32 or bf16 loads; the re-staged tiles hit L2, `reread`).
  local function fwd3(a)
    local BQ, BK = 128, a.FA3_BK
    local tiles, staged_kv = 0, 0
    for q0 = 0, a.T - 1, BQ do
      local kend = a.MASK == "prefix_lm" and a.T or math.min(a.T, q0 + BQ)
      for k0 = 0, kend - 1, BK do
        if any(a, q0, q0 + BQ - 1, k0, k0 + BK - 1) then
          tiles = tiles + 1
          staged_kv = staged_kv + 2 * rows(a.T, k0, BK) * a.HD * a.E
        end
      end
    end
    local BH, q = a.B * a.NH, a.B * a.T * a.NH * a.HD
    local kv = a.B * a.T * 2 * a.NKV * a.HD * a.E
    local scores = BH * tiles * BQ * BK
    return { tc_bf16 = BH * tiles * 2 * 2 * (2 * 64 * BK * a.HD), fp32 = 6 * scores + BH * tiles * BQ * a.HD, sfu = scores, tc_async = true,
             rd = a.E * q + kv, wr = a.E * q + 4 * BH * a.T, reread = BH * staged_kv - kv }
  end
  return {
    flash_attention_fwd = fwd, flash3_attn_fwd = fwd3, flash_attention_bwd_dq = dq, flash_attention_bwd_dkv = dkv,
    flash_attention_bwd_d = function(a) local n = a.B * a.T * a.NH * a.HD
      return { fp32 = 2 * n, rd = 2 * a.E * n, wr = 4 * a.B * a.NH * a.T } end,
  }
end)()
]]
{{ partial("common") }}
typedef {{ ACT == "bf16" and "hyp_bf16" or "float" }} act_t;
#include "hyp/mma.cuh"

// Layouts: qkv, dqkv [B, T, R] (all q heads, then k heads, then v heads, HD each); out, dout
// [B, T, NH*HD]; lse, D [B, NH, T]. Causal: query t sees keys t2 <= t; head h reads kv head h / G.
//
// Tiles are staged from fp32 global memory into shared memory as NS bf16 parts ([NS][rows][LD]:
// hi, then for bf16x3 lo = bf16(x - hi)); rows past T are zeros. The conversion happens on the
// way in, so cp.async (a raw byte copy) does not fit: staging is plain loads and stores. Every
// product is a warp's 16-row slab times a 16-column pair of mma n-tiles: A fragments by ldmatrix
// from a row-major tile (or, for P and dS, from the score accumulators in registers, whose C
// layout is the A layout of the next product), B fragments by ldmatrix (non-transposed when the
// tile holds B^T, i.e. the rows are the n index, transposed when it holds B). Lane (g = lane/4,
// t = lane%4) owns rows g and g + 8 of its warp's slab and columns 8j + 2t, 8j + 2t + 1 of every
// n-tile j (kernels/hyp/mma.cuh).
static constexpr float SCALE = {{ ATT_SCALE > 0 and f32(ATT_SCALE) or f32(1.0 / math.sqrt(HD)) }}; // ATT_SCALE, else 1/sqrt(HD), as the CPU op's scale
static constexpr int OC = NH * HD;

// The mask hook (v2126 document masking, FlashInfer-style): the first key query q of row b may
// see is the start of its document, q - pos[b*T + q] (pos: each token's position in its
// document); without pos (NULL) it is 0 and the kernels are plain causal. Tiles of keys entirely
// before every query's document are skipped. Clamped to [0, q] as the cpu op does.
__device__ __forceinline__ int fa_lo(const int* pos, int b, int T, int q) {
    if (!DOCMASK || pos == nullptr || q >= T) return 0;
    const int v = q - pos[(long)b * T + q];
    return v < 0 ? 0 : v > q ? q : v;
}

// The smallest lo over the rows [q0, q0 + n) (n <= T - q0), for the block-level tile skip.
__device__ __forceinline__ int fa_lo_min(const int* pos, int b, int T, int q0, int n) {
    if (!DOCMASK || pos == nullptr) return 0;
    int m = q0 + n;
    for (int q = q0; q < q0 + n; q++) m = min(m, fa_lo(pos, b, T, q));
    return m;
}

// The smallest of v over the warp.
__device__ __forceinline__ int fa_warp_min(int v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = min(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

// v2117 flex attention, rendered from MASK and SCORE_MOD (the same rules as runtime/core/attn_mod.h):
// fa_vis: does query q see key k; fa_tile_any: does the tile [qlo, qhi] x [klo, khi] hold a
// visible pair (tiles without one are skipped whole); fa_mod: the modified score of the scaled
// score s; fa_dmod: its derivative ds'/ds from the modified score sm.
__device__ __forceinline__ bool fa_vis(int q, int k) {
    return {{ MASK == "sliding_window" and "k <= q && q - k < WINDOW" or MASK == "prefix_lm" and "k <= q || k < PREFIX" or "k <= q" }};
}
__device__ __forceinline__ bool fa_tile_any(int qlo, int qhi, int klo, int khi) {
    (void)qlo; (void)khi;
    return {{ MASK == "sliding_window" and "klo <= qhi && qlo - khi < WINDOW" or MASK == "prefix_lm" and "klo <= qhi || klo < PREFIX" or "klo <= qhi" }};
}
__device__ __forceinline__ float fa_mod(float s, int q, int k, int h) {
    (void)q; (void)k; (void)h;
    return {{ SCORE_MOD == "softcap" and "SOFTCAP * tanhf(s / SOFTCAP)" or SCORE_MOD == "alibi" and "s - exp2f(-8.0f * (float)(h + 1) / (float)NH) * (float)(q > k ? q - k : k - q)" or "s" }};
}
__device__ __forceinline__ float fa_dmod(float sm) {
    (void)sm;
    return {{ SCORE_MOD == "softcap" and "1.0f - (sm / SOFTCAP) * (sm / SOFTCAP)" or "1.0f" }};
}

// fp32 pair -> packed bf16 hi (and lo = the rounding remainder, for bf16x3)
__device__ __forceinline__ void fa_split2(float x, float y, unsigned& hi, unsigned& lo) {
    hyp_bf16 hx = __float2bfloat16_rn(x), hy = __float2bfloat16_rn(y);
    hi = hyp_pack_bf16x2(hx, hy);
    lo = hyp_pack_bf16x2(__float2bfloat16_rn(x - __bfloat162float(hx)), __float2bfloat16_rn(y - __bfloat162float(hy)));
}

// dst [NS][rows][LD] <- rows of HD floats from src (row stride lds); rows >= nvalid are zeros.
template <class TS>
__device__ __forceinline__ void fa_stage(hyp_bf16* dst, int rows, const TS* src, long lds, int nvalid) {
    for (int e = threadIdx.x; e < rows * (HD / 2); e += BLOCK) {
        const int r = e / (HD / 2), c = 2 * (e - r * (HD / 2));
        float x = 0.0f, y = 0.0f;
        if (r < nvalid) {
            x = hyp_ld(src + (long)r * lds + c);
            y = hyp_ld(src + (long)r * lds + c + 1);
        }
        unsigned hi, lo;
        fa_split2(x, y, hi, lo);
        *(unsigned*)&dst[r * LD + c] = hi;
        if constexpr (NS == 2) *(unsigned*)&dst[(rows + r) * LD + c] = lo;
    }
}

// A fragments (16 x 16 at row r0, column c0) of each part of a [NS][rows][LD] tile.
__device__ __forceinline__ void fa_lda(unsigned a[NS][4], const hyp_bf16* tile, int rows, int r0, int c0) {
    const int l = threadIdx.x & 31;
#pragma unroll
    for (int s = 0; s < NS; s++)
        hyp_ldmatrix_x4(a[s], &tile[(s * rows + r0 + (l & 7) + 8 * ((l >> 3) & 1)) * LD + c0 + 8 * (l >> 4)]);
}

// B fragments of n-tiles n0 and n0 + 8 (b[s][0..1] and b[s][2..3]) for the k-step at k0, from a
// tile holding B^T (row = n, column = k).
__device__ __forceinline__ void fa_ldb_nk(unsigned b[NS][4], const hyp_bf16* tile, int rows, int n0, int k0) {
    const int l = threadIdx.x & 31;
#pragma unroll
    for (int s = 0; s < NS; s++)
        hyp_ldmatrix_x4(b[s], &tile[(s * rows + n0 + (l & 7) + 8 * (l >> 4)) * LD + k0 + 8 * ((l >> 3) & 1)]);
}

// The same from a tile holding B (row = k, column = n): transposed loads.
__device__ __forceinline__ void fa_ldb_kn(unsigned b[NS][4], const hyp_bf16* tile, int rows, int n0, int k0) {
    const int l = threadIdx.x & 31;
#pragma unroll
    for (int s = 0; s < NS; s++)
        hyp_ldmatrix_x4_trans(b[s], &tile[(s * rows + k0 + (l & 7) + 8 * ((l >> 3) & 1)) * LD + n0 + 8 * (l >> 4)]);
}

// acc[0..1] (two n-tiles) += A B: hi*hi, and for bf16x3 also hi*lo and lo*hi.
__device__ __forceinline__ void fa_mma2(float (*acc)[4], const unsigned a[NS][4], const unsigned b[NS][4]) {
#pragma unroll
    for (int j = 0; j < 2; j++) {
        const unsigned b0[2] = { b[0][2 * j], b[0][2 * j + 1] };
        if constexpr (NS == 2) {
            const unsigned b1[2] = { b[1][2 * j], b[1][2 * j + 1] };
            hyp_mma_m16n8k16_bf16(acc[j], a[0], b1, acc[j]);
            hyp_mma_m16n8k16_bf16(acc[j], a[1], b0, acc[j]);
        }
        hyp_mma_m16n8k16_bf16(acc[j], a[0], b0, acc[j]);
    }
}

// A fragments of the 16 x 16 k-step made of accumulator n-tiles c0 (columns 0-7) and c1 (8-15).
__device__ __forceinline__ void fa_acc_to_a(unsigned a[NS][4], const float c0[4], const float c1[4]) {
    unsigned lo[4];
    fa_split2(c0[0], c0[1], a[0][0], lo[0]);
    fa_split2(c0[2], c0[3], a[0][1], lo[1]);
    fa_split2(c1[0], c1[1], a[0][2], lo[2]);
    fa_split2(c1[2], c1[3], a[0][3], lo[3]);
    if constexpr (NS == 2) {
#pragma unroll
        for (int i = 0; i < 4; i++) a[NS - 1][i] = lo[i];
    }
}

// acc [16 x 8*NT] = 0
template <int NT> __device__ __forceinline__ void fa_zero(float (*acc)[4]) {
#pragma unroll
    for (int j = 0; j < NT; j++)
#pragma unroll
        for (int e = 0; e < 4; e++) acc[j][e] = 0.0f;
}

// acc [16 x 8*NT] += X Y^T over HD: X rows r0.. of tile X, Y rows 0..8*NT of tile Y (row = n).
template <int NT>
__device__ __forceinline__ void fa_xyt(float (*acc)[4], const hyp_bf16* X, int xrows, int r0, const hyp_bf16* Y, int yrows) {
#pragma unroll 1
    for (int kk = 0; kk < HD; kk += 16) {
        unsigned a[NS][4];
        fa_lda(a, X, xrows, r0, kk);
#pragma unroll
        for (int np = 0; np < NT / 2; np++) {
            unsigned b[NS][4];
            fa_ldb_nk(b, Y, yrows, 16 * np, kk);
            fa_mma2(&acc[2 * np], a, b);
        }
    }
}

// acc [16 x HD] += P Y: P the 16 x 8*NT accumulator in registers, Y rows 0..8*NT of tile Y (row = k).
template <int NT>
__device__ __forceinline__ void fa_py(float (*acc)[4], float (*p)[4], const hyp_bf16* Y, int yrows) {
#pragma unroll
    for (int ks = 0; ks < NT / 2; ks++) {
        unsigned a[NS][4];
        fa_acc_to_a(a, p[2 * ks], p[2 * ks + 1]);
#pragma unroll
        for (int np = 0; np < HD / 16; np++) {
            unsigned b[NS][4];
            fa_ldb_kn(b, Y, yrows, 16 * np, 16 * ks);
            fa_mma2(&acc[2 * np], a, b);
        }
    }
}

% if emit.flash_attention_fwd then
// Block (query tile of BQ rows, b*NH + h); warp w owns rows 16w..16w+15. Key tiles of BK up to
// the block's last row; online softmax per row (running max m, per-lane partial sums l: the 4
// lanes of a row hold different columns and are summed once at the end).
{{ signature("flash_attention_fwd") }} {
    extern __shared__ __align__(16) unsigned char fa_smem[];
    hyp_bf16* Qs = (hyp_bf16*)fa_smem;
    hyp_bf16* Ks = Qs + NS * BQ * LD;
    hyp_bf16* Vs = Ks + NS * BK * LD;
    const int bh = blockIdx.y, b = bh / NH, h = bh - b * NH, g = h / G;
    const int q0 = blockIdx.x * BQ, warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int wr = 16 * warp, qa = q0 + wr + (lane >> 2), tq = lane & 3;
    const act_t* base = qkv + (long)b * T * R;
    fa_stage(Qs, BQ, base + (long)q0 * R + h * HD, R, min(BQ, T - q0));
    float o[HD / 8][4], m[2] = { -HYP_INF, -HYP_INF }, l[2] = { 0.0f, 0.0f };
    fa_zero<HD / 8>(o);
    const int kend = {{ MASK == "prefix_lm" and "T" or "min(T, q0 + BQ)" }};
    const int lo[2] = { fa_lo(pos, b, T, qa), fa_lo(pos, b, T, qa + 8) };
    const int wlo = fa_warp_min(min(qa < T ? lo[0] : T, qa + 8 < T ? lo[1] : T)); // this warp's first key
    const int kstart = fa_lo_min(pos, b, T, q0, min(BQ, T - q0)) / BK * BK;    // the block's
    for (int k0 = kstart; k0 < kend; k0 += BK) {
        if (!fa_tile_any(q0, q0 + BQ - 1, k0, k0 + BK - 1)) continue; // fully masked (block-uniform)
        __syncthreads(); // the previous tile is no longer read
        fa_stage(Ks, BK, base + (long)k0 * R + (NH + g) * HD, R, min(BK, T - k0));
        fa_stage(Vs, BK, base + (long)k0 * R + (NH + NKV + g) * HD, R, min(BK, T - k0));
        __syncthreads();
        if (!fa_tile_any(q0 + wr, q0 + wr + 15, k0, k0 + BK - 1)) continue; // masked for this warp's rows
        if (k0 + BK <= wlo) continue;    // every key of the tile is before this warp's documents
        float s[BK / 8][4];
        fa_zero<BK / 8>(s);
        fa_xyt<BK / 8>(s, Qs, BQ, wr, Ks, BK);
        float mx[2] = { m[0], m[1] };
#pragma unroll
        for (int j = 0; j < BK / 8; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int key = k0 + 8 * j + 2 * tq + (e & 1), q = qa + 8 * (e >> 1);
                const float x = (fa_vis(q, key) && key < T && key >= lo[e >> 1]) ? fa_mod(s[j][e] * SCALE, q, key, h) : -HYP_INF;
                s[j][e] = x;
                mx[e >> 1] = fmaxf(mx[e >> 1], x);
            }
        float al[2], mu[2];
#pragma unroll
        for (int r = 0; r < 2; r++) {
            mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
            mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
            // a row with no visible key yet (document mask) keeps m = -inf: exponents relative to
            // 0 then give p = 0 and al = 0 instead of exp(-inf + inf) = NaN
            mu[r] = mx[r] == -HYP_INF ? 0.0f : mx[r];
            al[r] = expf(m[r] - mu[r]);
            m[r] = mx[r];
            l[r] *= al[r];
        }
#pragma unroll
        for (int j = 0; j < BK / 8; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const float p = expf(s[j][e] - mu[e >> 1]);
                s[j][e] = p;
                l[e >> 1] += p;
            }
#pragma unroll
        for (int j = 0; j < HD / 8; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) o[j][e] *= al[e >> 1];
        fa_py<BK / 8>(o, s, Vs, BK);
    }
#pragma unroll
    for (int r = 0; r < 2; r++) {
        l[r] += __shfl_xor_sync(0xffffffffu, l[r], 1);
        l[r] += __shfl_xor_sync(0xffffffffu, l[r], 2);
        const int q = qa + 8 * r;
        if (q >= T) continue;
        const float inv = 1.0f / l[r];
        act_t* orow = out + ((long)b * T + q) * OC + h * HD;
#pragma unroll
        for (int j = 0; j < HD / 8; j++) {
            hyp_st(orow + 8 * j + 2 * tq, o[j][2 * r] * inv);
            hyp_st(orow + 8 * j + 2 * tq + 1, o[j][2 * r + 1] * inv);
        }
        if (tq == 0) lse[(long)bh * T + q] = m[r] + logf(l[r]);
    }
}
% end

% if emit.flash3_attn_fwd then
%   if HD ~= 64 and HD ~= 128 then error("flash3_attn_fwd needs HD 64 or 128 (rows of 128-byte swizzle atoms, 64 bf16 each), got " .. HD) end
%   if FA3_BK % 16 ~= 0 or FA3_BK < 16 or FA3_BK > 256 then error("FA3_BK " .. FA3_BK .. ": a multiple of 16 up to 256 (the S wgmma's N, the P.V wgmma's k-steps)") end
%   if HD // 2 + 3 * FA3_BK // 4 > 200 then error(string.format("FA3_BK %d at HD %d: O (HD/2), S (BK/2) and P (BK/4) registers per consumer thread exceed the 240 of setmaxnreg (keep HD/2 + 3 BK/4 <= 200)", FA3_BK, HD)) end
%   if FA3_TMA and (ACT ~= "bf16" or FA3_BK % 64 ~= 0) then error("FA3_TMA needs ACT bf16 (TMA copies bytes: no conversion) and FA3_BK a multiple of 64 (64-row boxes), got ACT " .. ACT .. ", FA3_BK " .. FA3_BK) end
%   if SMEM3 > 232448 then error(string.format("FA3_STAGES %d x FA3_BK %d at HD %d needs %d bytes of shared memory; sm_90 gives a block 232448 (227 KB)", FA3_STAGES, FA3_BK, HD, SMEM3)) end
#include "hyp/hopper.cuh"
// FlashAttention-3 forward (v2114) for sm_90a. Block (query tile of 128 rows, b*NH + h), 384
// threads = 3 warpgroups. Warpgroup 0 is the producer: it stages the Q tile once and the K and V
// tiles of every visited key tile into a FA3_STAGES-deep ring of shared-memory stages: with
// FA3_TMA one thread issues TMA boxes through the tensor map `tmap` (bf16 storage), else its 128
// threads load the activations, round them to bf16 and store them swizzled; mbarriers guard each
// stage (full: the TMA thread's arrive_expect_tx and the boxes' bytes, or the 128 threads' arrivals
// after their stores; empty: the 8 consumer warps arrived after the wgmma that read it completed). Warpgroups 1 and 2 are consumers of 64 query rows each: S = Q K^T by wgmma
// m64nBKk16 with both operands in shared memory, the online softmax in registers, O += P V by
// wgmma m64nHDk16 with P from registers (its accumulator layout is the A-fragment layout, as for
// mma.sync). The S GEMM of tile i and the P V GEMM of tile i-1 are issued together; the softmax
// of tile i runs while P V of tile i-1 is still in flight (intra-warpgroup overlap), and the two
// consumers take turns issuing through named barriers (ping-pong: one's softmax under the other's
// GEMMs). setmaxnreg moves registers from the producer (40) to the consumers (232).
//
// Shared memory, bf16 tiles in the 128-byte swizzle of wgmma/TMA: a tile of `rows` rows is HD/64
// column blocks of [rows][64] (128 bytes a row, 8-row atoms of 1024 bytes, 16-byte chunk c of row
// r stored at chunk c ^ (r % 8)); base 1024-byte aligned. Q [128 rows], then K stages, V stages.
static constexpr int BQ3 = 128, CB3 = HD / 64;
static constexpr int Q3_ELEMS = BQ3 * HD, KV3_ELEMS = FA3_BK * HD;
static constexpr int FULL_K = 0, FULL_V = FA3_STAGES, EMPTY_K = 2 * FA3_STAGES, EMPTY_V = 3 * FA3_STAGES, Q_FULL = 4 * FA3_STAGES;
static constexpr int BAR_PINGPONG = 1; // named barriers 1, 2 (0 is __syncthreads)
static constexpr unsigned FILL_ARRIVALS = FA3_TMA ? 1 : 128; // a full barrier's arrivals: the TMA thread, or every producer thread

// Index (in bf16 elements) of element (r, c) of a swizzled [rows x HD] tile.
__device__ __forceinline__ int fa3_sw(int rows, int r, int c) {
    return (c >> 6) * rows * 64 + r * 64 + ((((c & 63) >> 3) ^ (r & 7)) << 3) + (c & 7);
}

// The producer's 128 threads: rows [r0, r0 + rows) of one head (column offset col of the fused
// row) into the swizzled tile dst; rows at or past T are zeros.
__device__ __forceinline__ void fa3_stage(hyp_bf16* dst, int rows, const act_t* base, int col, int r0, int T, int tid) {
    for (int e = tid; e < rows * (HD / 4); e += 128) {
        const int r = e / (HD / 4), c = 4 * (e - r * (HD / 4));
        hyp_f128 v = f128(0.0f, 0.0f, 0.0f, 0.0f);
        if (r0 + r < T) v = hyp_load4(base + (long)(r0 + r) * R + col + c);
        uint2 u;
        u.x = hyp_pack_bf16x2(__float2bfloat16_rn(v[0]), __float2bfloat16_rn(v[1]));
        u.y = hyp_pack_bf16x2(__float2bfloat16_rn(v[2]), __float2bfloat16_rn(v[3]));
        *reinterpret_cast<uint2*>(&dst[fa3_sw(rows, r, c)]) = u;
    }
}

% if FA3_TMA then
// TMA: rows [r0, r0 + rows) of the head at column col of the fused row of sequence b, as
// 64 x 64 boxes of the 3-d map tmap (qkv as [B][T][R] bf16, 128-byte swizzle) into the swizzled
// tile dst; rows at or past T arrive as zeros (out of bounds).
__device__ __forceinline__ void fa3_tma_tile(hyp_bf16* dst, int rows, const hyp_tmap* tmap, int col, int r0, int b, unsigned long long* bar) {
    for (int c = 0; c < CB3; c++)
        for (int r = 0; r < rows; r += 64)
            hyp_tma_load_3d(dst + c * rows * 64 + r * 64, tmap, col + 64 * c, r0 + r, b, bar);
}
% end

// wgmma descriptors. K-major (Q as A, K as B of S = Q K^T): the k-step kk (16 columns) starts
// at column block kk/4, byte 32 (kk % 4) of the swizzled row; 8-row atoms 1024 bytes apart.
// MN-major (V as B of O = P V: k = key rows, n = head columns): k-step ks starts at row 16 ks
// (2048 bytes), the next 64 columns are the next column block (rows x 128 bytes on).
__device__ __forceinline__ unsigned long long fa3_desc_k(const hyp_bf16* tile, int rows, int r0, int kk) {
    return hyp_wgmma_desc(tile + (kk >> 2) * rows * 64 + r0 * 64 + (kk & 3) * 16, HYP_SWZ_128B, 0, 1024);
}
__device__ __forceinline__ unsigned long long fa3_desc_v(const hyp_bf16* tile, int ks) {
    return hyp_wgmma_desc(tile + ks * 16 * 64, HYP_SWZ_128B, FA3_BK * 128, 1024);
}

// The next visited key tile at or after k0 (block-uniform: producer and consumers walk the same).
__device__ __forceinline__ int fa3_next(int k0, int kend, int q0) {
    while (k0 < kend && !fa_tile_any(q0, q0 + BQ3 - 1, k0, k0 + FA3_BK - 1)) k0 += FA3_BK;
    return k0;
}

// S = Q K^T of consumer wg's 64 rows (issued and committed; the caller waits).
__device__ __forceinline__ void fa3_qk(float* s, const hyp_bf16* Qs, const hyp_bf16* Kt, int wg) {
    hyp_wgmma_fence_operand(s, FA3_BK / 2);
    hyp_wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < HD / 16; kk++)
        hyp_wgmma_ss<FA3_BK, 0, 0>(s, fa3_desc_k(Qs, BQ3, 64 * wg, kk), fa3_desc_k(Kt, FA3_BK, 0, kk), kk > 0);
    hyp_wgmma_commit();
    hyp_wgmma_fence_operand(s, FA3_BK / 2);
}

// O += P V (P from registers; issued and committed).
__device__ __forceinline__ void fa3_pv(float* o, unsigned (*p)[4], const hyp_bf16* Vt) {
    hyp_wgmma_fence_operand(o, HD / 2);
    hyp_wgmma_fence();
#pragma unroll
    for (int ks = 0; ks < FA3_BK / 16; ks++)
        hyp_wgmma_rs<HD, 1>(o, p[ks], fa3_desc_v(Vt, ks), true);
    hyp_wgmma_commit();
    hyp_wgmma_fence_operand(o, HD / 2);
}

// The online softmax of one S tile (keys k0..) on this thread's rows qa, qa + 8, as the FA2
// forward: the mask rule and modifier, the running max m (a row with no visible key yet keeps
// -inf, its p and al 0), s <- exp(s - m), the per-lane partial sums l, al = the rescale of O.
__device__ __forceinline__ void fa3_softmax(float* s, float* m, float* l, float* al, int k0, int qa, const int* lo, int h, int T) {
    const int tq = (threadIdx.x & 31) & 3;
    float mx[2] = { m[0], m[1] }, mu[2];
#pragma unroll
    for (int j = 0; j < FA3_BK / 8; j++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
            const int key = k0 + 8 * j + 2 * tq + (e & 1), r = e >> 1, q = qa + 8 * r;
            const float x = (fa_vis(q, key) && key < T && key >= lo[r]) ? fa_mod(s[4 * j + e] * SCALE, q, key, h) : -HYP_INF;
            s[4 * j + e] = x;
            mx[r] = fmaxf(mx[r], x);
        }
#pragma unroll
    for (int r = 0; r < 2; r++) {
        mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
        mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
        mu[r] = mx[r] == -HYP_INF ? 0.0f : mx[r];
        al[r] = expf(m[r] - mu[r]);
        m[r] = mx[r];
        l[r] *= al[r];
    }
#pragma unroll
    for (int j = 0; j < FA3_BK / 8; j++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
            const float x = expf(s[4 * j + e] - mu[e >> 1]);
            s[4 * j + e] = x;
            l[e >> 1] += x;
        }
}

// P (bf16) in the A-fragment layout of the P V wgmma: k-step ks = keys 16ks..16ks+15.
__device__ __forceinline__ void fa3_pack(unsigned (*p)[4], const float* s) {
#pragma unroll
    for (int ks = 0; ks < FA3_BK / 16; ks++)
#pragma unroll
        for (int i = 0; i < 4; i++)
            p[ks][i] = hyp_pack_bf16x2(__float2bfloat16_rn(s[8 * ks + 2 * i]), __float2bfloat16_rn(s[8 * ks + 2 * i + 1]));
}

{{ signature("flash3_attn_fwd") }} {
    extern __shared__ __align__(16) unsigned char fa_smem[];
    // the swizzle and TMA work on shared-memory addresses: align the shared address (a wgmma
    // descriptor's start-address field, bits 0-13 = address >> 4, on the device and in sim alike)
    const unsigned fa_sa = (unsigned)(hyp_wgmma_desc(fa_smem, HYP_SWZ_NONE, 0, 0) & 0x3FFFu) << 4;
    hyp_bf16* Qs = (hyp_bf16*)(fa_smem + ((1024 - (fa_sa & 1023)) & 1023));
    hyp_bf16* Ks = Qs + Q3_ELEMS;                  // [FA3_STAGES][FA3_BK x HD]
    hyp_bf16* Vs = Ks + FA3_STAGES * KV3_ELEMS;    // [FA3_STAGES][FA3_BK x HD]
    unsigned long long* bar = (unsigned long long*)(Vs + FA3_STAGES * KV3_ELEMS);
    const int bh = blockIdx.y, b = bh / NH, h = bh - b * NH, g = h / G;
    const int q0 = blockIdx.x * BQ3, wgi = threadIdx.x >> 7, tid = threadIdx.x & 127;
    const act_t* base = qkv + (long)b * T * R;
    if (threadIdx.x == 0) {
        for (int s = 0; s < FA3_STAGES; s++) {
            hyp_mbar_init(&bar[FULL_K + s], FILL_ARRIVALS);
            hyp_mbar_init(&bar[FULL_V + s], FILL_ARRIVALS);
            hyp_mbar_init(&bar[EMPTY_K + s], 8);
            hyp_mbar_init(&bar[EMPTY_V + s], 8);
        }
        hyp_mbar_init(&bar[Q_FULL], FILL_ARRIVALS);
        hyp_fence_mbar_init();
    }
    __syncthreads();
    // the visited key tiles, the same sequence for producer and consumers: from the block's
    // first document start (mask hook) to its last row (prefix_lm: to T), fully masked ones skipped
    const int kend = {{ MASK == "prefix_lm" and "T" or "min(T, q0 + BQ3)" }};
    const int kstart = fa_lo_min(pos, b, T, q0, min(BQ3, T - q0)) / FA3_BK * FA3_BK;
    if (wgi == 0) { // producer
        hyp_setmaxnreg_dec<40>();
% if FA3_TMA then
        // TMA: one thread issues every copy; a stage's full barrier completes when its
        // arrive_expect_tx arrival and the boxes' bytes (zeros past T included) have landed
        if (tid == 0) {
            hyp_mbar_arrive_expect_tx(&bar[Q_FULL], Q3_ELEMS * 2);
            fa3_tma_tile(Qs, BQ3, &tmap, h * HD, q0, b, &bar[Q_FULL]);
            int i = 0;
            for (int k0 = kstart; k0 < kend; k0 += FA3_BK) {
                if (!fa_tile_any(q0, q0 + BQ3 - 1, k0, k0 + FA3_BK - 1)) continue;
                const int st = i % FA3_STAGES, ph = (i / FA3_STAGES) & 1;
                hyp_mbar_wait(&bar[EMPTY_K + st], ph ^ 1); // a fresh barrier passes parity 1: round 0 does not wait
                hyp_mbar_arrive_expect_tx(&bar[FULL_K + st], KV3_ELEMS * 2);
                fa3_tma_tile(Ks + st * KV3_ELEMS, FA3_BK, &tmap, (NH + g) * HD, k0, b, &bar[FULL_K + st]);
                hyp_mbar_wait(&bar[EMPTY_V + st], ph ^ 1);
                hyp_mbar_arrive_expect_tx(&bar[FULL_V + st], KV3_ELEMS * 2);
                fa3_tma_tile(Vs + st * KV3_ELEMS, FA3_BK, &tmap, (NH + NKV + g) * HD, k0, b, &bar[FULL_V + st]);
                i++;
            }
        }
        (void)base;
        return;
% else
        fa3_stage(Qs, BQ3, base, h * HD, q0, T, tid);
        hyp_fence_proxy_async();
        hyp_mbar_arrive(&bar[Q_FULL]);
        int i = 0;
        for (int k0 = kstart; k0 < kend; k0 += FA3_BK) {
            if (!fa_tile_any(q0, q0 + BQ3 - 1, k0, k0 + FA3_BK - 1)) continue;
            const int st = i % FA3_STAGES, ph = (i / FA3_STAGES) & 1;
            hyp_mbar_wait(&bar[EMPTY_K + st], ph ^ 1); // a fresh barrier passes parity 1: round 0 does not wait
            fa3_stage(Ks + st * KV3_ELEMS, FA3_BK, base, (NH + g) * HD, k0, T, tid);
            hyp_fence_proxy_async(); // the stores become visible to wgmma (the async proxy)
            hyp_mbar_arrive(&bar[FULL_K + st]);
            hyp_mbar_wait(&bar[EMPTY_V + st], ph ^ 1);
            fa3_stage(Vs + st * KV3_ELEMS, FA3_BK, base, (NH + NKV + g) * HD, k0, T, tid);
            hyp_fence_proxy_async();
            hyp_mbar_arrive(&bar[FULL_V + st]);
            i++;
        }
        return;
% end
    }
    hyp_setmaxnreg_inc<232>();
    const int wg = wgi - 1, warp = tid >> 5, lane = tid & 31;
    const int qa = q0 + 64 * wg + 16 * warp + (lane >> 2); // this thread's rows qa, qa + 8
    int n = 0; // the visited tiles (>= 1: the tile holding key q0 is visible under every rule)
    for (int k0 = kstart; k0 < kend; k0 += FA3_BK) n += fa_tile_any(q0, q0 + BQ3 - 1, k0, k0 + FA3_BK - 1);
    float o[HD / 2], s[FA3_BK / 2], m[2] = { -HYP_INF, -HYP_INF }, l[2] = { 0.0f, 0.0f }, al[2];
    unsigned p[FA3_BK / 16][4];
#pragma unroll
    for (int j = 0; j < HD / 2; j++) o[j] = 0.0f;
    const int lo[2] = { fa_lo(pos, b, T, qa), fa_lo(pos, b, T, qa + 8) };
    // consumer 0 issues first: consumer 1 opens its turn; each then hands the turn over after
    // issuing, consumer 1 not after its last (the arrivals and syncs of both barriers pair up)
    if (wg == 1) hyp_named_bar_arrive(BAR_PINGPONG, 256);
    hyp_mbar_wait(&bar[Q_FULL], 0);
    // tile 0: S only
    int k0 = fa3_next(kstart, kend, q0);
    hyp_mbar_wait(&bar[FULL_K], 0);
    hyp_named_bar_sync(BAR_PINGPONG + wg, 256);
    fa3_qk(s, Qs, Ks, wg);
    if (wg == 0 || n > 1) hyp_named_bar_arrive(BAR_PINGPONG + 1 - wg, 256);
    hyp_wgmma_wait<0>();
    hyp_wgmma_fence_operand(s, FA3_BK / 2);
    if (lane == 0) hyp_mbar_arrive(&bar[EMPTY_K]);
    fa3_softmax(s, m, l, al, k0, qa, lo, h, T);
    fa3_pack(p, s);
    for (int i = 1; i < n; i++) {
        k0 = fa3_next(k0 + FA3_BK, kend, q0);
        const int st = i % FA3_STAGES, ph = (i / FA3_STAGES) & 1;
        const int sp = (i - 1) % FA3_STAGES, pp = ((i - 1) / FA3_STAGES) & 1; // tile i-1
        hyp_mbar_wait(&bar[FULL_K + st], ph);
        hyp_named_bar_sync(BAR_PINGPONG + wg, 256); // this consumer's turn to issue
        fa3_qk(s, Qs, Ks + st * KV3_ELEMS, wg);
        hyp_mbar_wait(&bar[FULL_V + sp], pp);
        fa3_pv(o, p, Vs + sp * KV3_ELEMS); // O += P V of tile i-1, in flight during this softmax
        if (wg == 0 || i < n - 1) hyp_named_bar_arrive(BAR_PINGPONG + 1 - wg, 256); // the other's turn
        hyp_wgmma_wait<1>(); // S done (P V may still run)
        hyp_wgmma_fence_operand(s, FA3_BK / 2);
        if (lane == 0) hyp_mbar_arrive(&bar[EMPTY_K + st]);
        fa3_softmax(s, m, l, al, k0, qa, lo, h, T);
        hyp_wgmma_wait<0>(); // P V of tile i-1 done: o and p are free
        hyp_wgmma_fence_operand(o, HD / 2);
        if (lane == 0) hyp_mbar_arrive(&bar[EMPTY_V + sp]);
#pragma unroll
        for (int j = 0; j < HD / 8; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) o[4 * j + e] *= al[e >> 1];
        fa3_pack(p, s);
    }
    { // P V of the last tile
        const int sp = (n - 1) % FA3_STAGES, pp = ((n - 1) / FA3_STAGES) & 1;
        hyp_mbar_wait(&bar[FULL_V + sp], pp);
        fa3_pv(o, p, Vs + sp * KV3_ELEMS);
        hyp_wgmma_wait<0>();
        hyp_wgmma_fence_operand(o, HD / 2);
        if (lane == 0) hyp_mbar_arrive(&bar[EMPTY_V + sp]);
    }
    const int tq = lane & 3;
#pragma unroll
    for (int r = 0; r < 2; r++) {
        l[r] += __shfl_xor_sync(0xffffffffu, l[r], 1);
        l[r] += __shfl_xor_sync(0xffffffffu, l[r], 2);
        const int q = qa + 8 * r;
        if (q >= T) continue;
        const float inv = 1.0f / l[r];
        act_t* orow = out + ((long)b * T + q) * OC + h * HD;
#pragma unroll
        for (int j = 0; j < HD / 8; j++) {
            hyp_st(orow + 8 * j + 2 * tq, o[4 * j + 2 * r] * inv);
            hyp_st(orow + 8 * j + 2 * tq + 1, o[4 * j + 2 * r + 1] * inv);
        }
        if (tq == 0) lse[(long)bh * T + q] = m[r] + logf(l[r]);
    }
}
% end

% if emit.flash_attention_bwd_d then
{{ signature("flash_attention_bwd_d") }} {
    const long row = (long)blockIdx.x * (BLOCK / 32) + (threadIdx.x >> 5); // (b*NH + h)*T + t
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

// P (exp of the modified scaled score minus the row's lse, 0 where masked) and
// dS = SCALE P (dP - D) ds'/ds of one score/dP accumulator element: s, dp in, p, ds out.
__device__ __forceinline__ void fa_pds(float& s, float& dp, bool visible, float lse_r, float d_r, int q, int key, int h) {
    const float sm = fa_mod(s * SCALE, q, key, h);
    const float p = visible ? expf(sm - lse_r) : 0.0f;
    dp = SCALE * p * (dp - d_r) * fa_dmod(sm);
    s = p;
}

% if emit.flash_attention_bwd_dkv then
// Block (key tile of BKV rows, b*NKV + g); warp w owns keys 16w..16w+15 and computes the
// transposed scores S^T = K Q^T and dP^T = V dO^T for query tiles of BQB, then dV += P^T dO and
// dK += dS^T Q, over the G query heads of the group and the query tiles from the key tile's start
// (fixed order), and adds them to dqkv once: every dk/dv element has one writer.
{{ signature("flash_attention_bwd_dkv") }} {
    extern __shared__ __align__(16) unsigned char fa_smem[];
    hyp_bf16* Ks = (hyp_bf16*)fa_smem;
    hyp_bf16* Vs = Ks + NS * BKV * LD;
    hyp_bf16* Qs = Vs + NS * BKV * LD;
    hyp_bf16* Os = Qs + NS * BQB * LD;
    float* Ls = (float*)(Os + NS * BQB * LD);
    float* Ds = Ls + BQB;
    int* Lo = (int*)(Ds + BQB); // the query tile's first visible keys (mask hook)
    const int bg = blockIdx.y, b = bg / NKV, g = bg - b * NKV;
    const int k0 = blockIdx.x * BKV, warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int wr = 16 * warp, ka = k0 + wr + (lane >> 2), tq = lane & 3;
    const act_t* base = qkv + (long)b * T * R;
    fa_stage(Ks, BKV, base + (long)k0 * R + (NH + g) * HD, R, min(BKV, T - k0));
    fa_stage(Vs, BKV, base + (long)k0 * R + (NH + NKV + g) * HD, R, min(BKV, T - k0));
    float dk[HD / 8][4], dv[HD / 8][4];
    fa_zero<HD / 8>(dk);
    fa_zero<HD / 8>(dv);
    for (int h = g * G; h < (g + 1) * G; h++) {
        const long bh = (long)b * NH + h;
        for (int q0 = {{ MASK == "prefix_lm" and "0" or "k0" }}; q0 < T; q0 += BQB) {
            if (!fa_tile_any(q0, q0 + BQB - 1, k0, k0 + BKV - 1)) continue; // fully masked (block-uniform)
            __syncthreads(); // the previous query tile is no longer read
            fa_stage(Qs, BQB, base + (long)q0 * R + h * HD, R, min(BQB, T - q0));
            fa_stage(Os, BQB, dout + ((long)b * T + q0) * OC + h * HD, OC, min(BQB, T - q0));
            for (int i = threadIdx.x; i < BQB; i += BLOCK) {
                Ls[i] = q0 + i < T ? lse[bh * T + q0 + i] : 0.0f;
                Ds[i] = q0 + i < T ? D[bh * T + q0 + i] : 0.0f;
                if (DOCMASK) Lo[i] = q0 + i < T ? fa_lo(pos, b, T, q0 + i) : T;
            }
            __syncthreads();
            if (!fa_tile_any(q0, q0 + BQB - 1, k0 + wr, k0 + wr + 15)) continue; // masked for this warp's keys
            // the document mask: positions restart at 0 at a document start and grow by 1
            // otherwise, so lo is non-decreasing in q. Every query of the tile starts its document
            // after this warp's keys: skip. Else the queries that may see key k form a prefix of
            // the tile: qi < nvis[r] (k = this lane's key ka + 8r; two registers, not a mask).
            if (DOCMASK && Lo[0] > k0 + wr + 15) continue;
            float st[BQB / 8][4], dpt[BQB / 8][4];
            fa_zero<BQB / 8>(st);
            fa_zero<BQB / 8>(dpt);
            fa_xyt<BQB / 8>(st, Ks, BKV, wr, Qs, BQB);
            fa_xyt<BQB / 8>(dpt, Vs, BKV, wr, Os, BQB);
            int nvis[2] = { BQB, BQB }; // counted after the products: two live registers less there
% if DOCMASK then
            nvis[0] = nvis[1] = 0;
#pragma unroll 1
            for (int i = 0; i < BQB; i++) {
                const int l = Lo[i];
                nvis[0] += l <= ka;
                nvis[1] += l <= ka + 8;
            }
% end
#pragma unroll
            for (int j = 0; j < BQB / 8; j++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const int qi = 8 * j + 2 * tq + (e & 1), q = q0 + qi, key = ka + 8 * (e >> 1);
                    fa_pds(st[j][e], dpt[j][e], fa_vis(q, key) && q < T && key < T && qi < nvis[e >> 1], Ls[qi], Ds[qi], q, key, h);
                }
            fa_py<BQB / 8>(dv, st, Os, BQB);
            fa_py<BQB / 8>(dk, dpt, Qs, BQB);
        }
    }
#pragma unroll
    for (int r = 0; r < 2; r++) {
        const int key = ka + 8 * r;
        if (key >= T) continue;
        act_t* kr = dqkv + ((long)b * T + key) * R + (NH + g) * HD;
        act_t* vr = kr + NKV * HD;
#pragma unroll
        for (int j = 0; j < HD / 8; j++)
#pragma unroll
            for (int c = 0; c < 2; c++) {
                hyp_st(kr + 8 * j + 2 * tq + c, hyp_ld(kr + 8 * j + 2 * tq + c) + dk[j][2 * r + c]);
                hyp_st(vr + 8 * j + 2 * tq + c, hyp_ld(vr + 8 * j + 2 * tq + c) + dv[j][2 * r + c]);
            }
    }
}
% end

% if emit.flash_attention_bwd_dq then
// Block (query tile of BQ rows, b*NH + h); warp w owns rows 16w..16w+15: S = Q K^T and
// dP = dO V^T per key tile up to the diagonal, dQ += dS K, added to dqkv once (one writer).
{{ signature("flash_attention_bwd_dq") }} {
    extern __shared__ __align__(16) unsigned char fa_smem[];
    hyp_bf16* Qs = (hyp_bf16*)fa_smem;
    hyp_bf16* Os = Qs + NS * BQ * LD;
    hyp_bf16* Ks = Os + NS * BQ * LD;
    hyp_bf16* Vs = Ks + NS * BKQ * LD;
    const int bh = blockIdx.y, b = bh / NH, h = bh - b * NH, g = h / G;
    const int q0 = blockIdx.x * BQ, warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int wr = 16 * warp, qa = q0 + wr + (lane >> 2), tq = lane & 3;
    const act_t* base = qkv + (long)b * T * R;
    fa_stage(Qs, BQ, base + (long)q0 * R + h * HD, R, min(BQ, T - q0));
    fa_stage(Os, BQ, dout + ((long)b * T + q0) * OC + h * HD, OC, min(BQ, T - q0));
    float lr[2], dr[2];
#pragma unroll
    for (int r = 0; r < 2; r++) {
        const int q = qa + 8 * r;
        lr[r] = q < T ? lse[(long)bh * T + q] : 0.0f;
        dr[r] = q < T ? D[(long)bh * T + q] : 0.0f;
    }
    float dq[HD / 8][4];
    fa_zero<HD / 8>(dq);
    const int kend = {{ MASK == "prefix_lm" and "T" or "min(T, q0 + BQ)" }};
    const int lo[2] = { fa_lo(pos, b, T, qa), fa_lo(pos, b, T, qa + 8) };
    const int wlo = fa_warp_min(min(qa < T ? lo[0] : T, qa + 8 < T ? lo[1] : T));
    const int kstart = fa_lo_min(pos, b, T, q0, min(BQ, T - q0)) / BKQ * BKQ;
    for (int k0 = kstart; k0 < kend; k0 += BKQ) {
        if (!fa_tile_any(q0, q0 + BQ - 1, k0, k0 + BKQ - 1)) continue; // fully masked (block-uniform)
        __syncthreads(); // the previous key tile is no longer read
        fa_stage(Ks, BKQ, base + (long)k0 * R + (NH + g) * HD, R, min(BKQ, T - k0));
        fa_stage(Vs, BKQ, base + (long)k0 * R + (NH + NKV + g) * HD, R, min(BKQ, T - k0));
        __syncthreads();
        if (!fa_tile_any(q0 + wr, q0 + wr + 15, k0, k0 + BKQ - 1)) continue; // masked for this warp's rows
        if (k0 + BKQ <= wlo) continue;   // every key of the tile is before this warp's documents
        float s[BKQ / 8][4], dp[BKQ / 8][4];
        fa_zero<BKQ / 8>(s);
        fa_zero<BKQ / 8>(dp);
        fa_xyt<BKQ / 8>(s, Qs, BQ, wr, Ks, BKQ);
        fa_xyt<BKQ / 8>(dp, Os, BQ, wr, Vs, BKQ);
#pragma unroll
        for (int j = 0; j < BKQ / 8; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int key = k0 + 8 * j + 2 * tq + (e & 1), r = e >> 1, q = qa + 8 * r;
                fa_pds(s[j][e], dp[j][e], fa_vis(q, key) && q < T && key < T && key >= lo[r], lr[r], dr[r], q, key, h);
            }
        fa_py<BKQ / 8>(dq, dp, Ks, BKQ);
    }
#pragma unroll
    for (int r = 0; r < 2; r++) {
        const int q = qa + 8 * r;
        if (q >= T) continue;
        act_t* qr = dqkv + ((long)b * T + q) * R + h * HD;
#pragma unroll
        for (int j = 0; j < HD / 8; j++) {
            hyp_st(qr + 8 * j + 2 * tq, hyp_ld(qr + 8 * j + 2 * tq) + dq[j][2 * r]);
            hyp_st(qr + 8 * j + 2 * tq + 1, hyp_ld(qr + 8 * j + 2 * tq + 1) + dq[j][2 * r + 1]);
        }
    }
}
% end
