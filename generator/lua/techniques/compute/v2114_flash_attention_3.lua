-- v2114 FlashAttention-3: the plan's attention becomes flash_attention_fwd/bwd as with v2113 (only
-- the [B,NH,T] log-sum-exp is saved); on sim and sm_90 the forward is the FA3 kernel of
-- templates/flash_attention.cu.lua (flash3_attn_fwd: a producer warpgroup filling a STAGES-deep
-- K/V pipeline guarded by mbarriers, two consumer warpgroups on wgmma with online softmax in
-- registers, ping-ponging through named barriers; compiled for sm_90a) and the backward is the
-- FA2 template's (same tensors, same log-sum-exp). Never: a cpu path (the gate refuses: v2113 is
-- the cpu's flash op), a head dim the FA3 kernel has no layout for (the FA2 forward then runs,
-- and the audit says so).
local U = require("util")
local M = { id = "v2114", families = { "flash_attention" } }

local HDS = { [64] = true, [128] = true } -- the head dims of the FA3 kernel (128-byte swizzle rows)

function M.derive(ctx)
  local p = ctx.facts.precision
  -- the FA2 template's operands where it runs (as v2113's auto); the FA3 kernel's are bf16
  ctx.facts.attention = { kind = "flash", by = ctx.id, precision = (p and p.bf16) and "bf16" or "bf16x3" }
end

function M.sections(ctx, plan)
  local B, T, NH, hd = plan.train.B, plan.train.T, plan.model.NH, plan.model.hd
  local a = ctx.facts.attention
  a.hd = hd
  if HDS[hd] then
    a.fwd_kernel = "flash3_attn_fwd"
    a.block_k = ctx.param("block_k")
    -- wgmma bf16: q, k, v and P are bf16 operands whatever the activation storage; the FA2
    -- backward then rounds the same way (its P from the same log-sum-exp)
    if a.precision ~= "bf16" then
      ctx.decide(ctx.id .. ".precision", "bf16", "the FA3 kernel multiplies bf16 operands (wgmma m64nNk16 bf16): the fp32 activations are rounded to bf16 on their way into shared memory, and the FA2 backward uses bf16 operands too (FA2's bf16x3 split has no FA3 counterpart; use fa2 for ~fp32 attention)")
    end
    a.precision = "bf16"
  else
    ctx.decide(ctx.id .. ".forward", "FA2 template", string.format(
      "head dim %d: the FA3 kernel has layouts for head dims 64 and 128 only (rows of 128-byte swizzle atoms), so the forward is the FA2 template's (mma.sync, bf16 operands); the backward is FA2's either way", hd))
  end
  ctx.contribute(string.format("attention: flash forward/backward, saving [B,NH,T] log-sum-exp per layer instead of [B,NH,T,T] probabilities (%.2f MiB instead of %.2f MiB per layer at B=%d, T=%d)",
    B * NH * T * 4 / 1048576, B * NH * T * T * 4 / 1048576, B, T))
end

-- the FA3 kernel's limits on block_k and stages at head dim hd (templates/flash_attention.cu.lua
-- checks the same when it renders): nil, or what is wrong and how to fix it
function M.check_tiles(hd, bk, st)
  if bk % 16 ~= 0 then
    return string.format("block_k %d is not a multiple of 16 (the k-steps of the P V wgmma)", bk), "use --set v2114.block_k=64 or 128"
  end
  if hd // 2 + 3 * bk // 4 > 200 then
    return string.format("block_k %d at head dim %d: the S (block_k/2), P (block_k/4) and O (head dim/2) registers of a consumer thread exceed its 232 (setmaxnreg)", bk, hd),
      "use --set v2114.block_k=128 or less"
  end
  local smem = 1024 + (128 + 2 * st * bk) * hd * 2 + 8 * (4 * st + 1)
  if smem > 232448 then
    return string.format("%d stages of %d keys at head dim %d need %d bytes of shared memory; an sm_90 block has 232448", st, bk, hd, smem),
      "use fewer --set v2114.stages or a smaller v2114.block_k"
  end
end

function M.kernels(ctx, k)
  if not k.seen.flash_attention_fwd or ctx.facts.attention.fwd_kernel ~= "flash3_attn_fwd" then return end
  local bk, st = ctx.param("block_k"), ctx.param("stages")
  local what, fix = M.check_tiles(ctx.facts.attention.hd, bk, st)
  if what then U.fail("v2114.block_k", what, fix) end
  -- TMA copies bytes: with bf16 storage (v2102) the producer loads K/V tiles with TMA through a
  -- tensor map the executor builds per launch; fp32 storage keeps the load-and-convert producer
  local p = ctx.facts.precision
  local tma = (p and p.storage == "bf16") and bk % 64 == 0
  k.want("flash_attention", {}, { FA3_BK = bk, FA3_STAGES = st, FA3_TMA = tma and true or false })
  ctx.decide(ctx.id .. ".producer", tma and "TMA" or "loads + bf16 conversion",
    tma and "bf16 activation storage: one producer thread issues cp.async.bulk.tensor.3d (64 x 64 boxes, 128-byte swizzle) through a tensor map over qkv that the executor encodes per launch (cuTensorMapEncodeTiled on cuda)"
      or ((p and p.storage == "bf16") and string.format("block_k %d is not a multiple of the 64-row TMA box: the producer warpgroup loads and stores the tiles", bk)
        or "fp32 activation storage: TMA copies bytes and cannot round to bf16, so the producer warpgroup loads the fp32 tiles, rounds them to bf16 and stores them swizzled"))
  if (ctx.param("block_q") or 128) ~= 128 then
    ctx.decide(ctx.id .. ".block_q", "128 (not applied)", string.format(
      "v2114.block_q=%d, but the FA3 kernel's query tile is its two consumer warpgroups' m64 wgmma rows: 128", ctx.param("block_q")))
  end
end

function M.rendered(ctx)
  local a = ctx.facts.attention
  if a.fwd_kernel ~= "flash3_attn_fwd" then return end
  ctx.decide("kernels.attention", "flash: FA3 forward (wgmma, warp-specialized), FA2 backward",
    "the plan uses flash attention (" .. ctx.id .. "): templates/flash_attention.cu.lua's flash3_attn_fwd for sm_90a (producer warpgroup + STAGES-deep mbarrier pipeline, two consumer warpgroups of 64 query rows on wgmma m64nNk16 bf16 with fp32 accumulation, ping-pong through named barriers, setmaxnreg 40/232), operands rounded to bf16; the backward is the FA2 template's (mma.sync, bf16 operands) on the same log-sum-exp")
end

return M
