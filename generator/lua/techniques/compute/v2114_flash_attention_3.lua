-- v2114 FlashAttention-3: the plan's attention becomes flash_attention_fwd/bwd as with v2113 (only
-- the [B,NH,T] log-sum-exp is saved); on sim and sm_90 the forward is the FA3 kernel of
-- templates/flash_attention.cu.lua (flash3_attn_fwd: a producer warpgroup filling a STAGES-deep
-- K/V pipeline guarded by mbarriers, two consumer warpgroups on wgmma with online softmax in
-- registers, ping-ponging through named barriers; compiled for sm_90a) and the backward is the
-- FA2 template's (same tensors, same log-sum-exp). Never: a cpu path (the gate refuses: v2113 is
-- the cpu's flash op), a head dim the FA3 kernel has no layout for (the FA2 forward then runs,
-- and the audit says so).
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
  if HDS[hd] then
    a.fwd_kernel = "flash3_attn_fwd"
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

function M.kernels(ctx, k)
  if not k.seen.flash_attention_fwd or ctx.facts.attention.fwd_kernel ~= "flash3_attn_fwd" then return end
  k.want("flash_attention", {}, { FA3_BK = ctx.param("block_k"), FA3_STAGES = ctx.param("stages") })
  if (ctx.param("block_q") or 128) ~= 128 then
    ctx.decide(ctx.id .. ".block_q", "128 (not applied)", string.format(
      "v2114.block_q=%d, but the FA3 kernel's query tile is its two consumer warpgroups' m64 wgmma rows: 128", ctx.param("block_q")))
  end
end

function M.rendered(ctx)
  local a = ctx.facts.attention
  if a.fwd_kernel ~= "flash3_attn_fwd" then return end
  ctx.decide("kernels.attention", "flash: FA3 forward (wgmma, warp-specialized), FA2 backward",
    "the plan uses flash attention (" .. ctx.id .. "): templates/flash_attention.cu.lua's flash3_attn_fwd for sm_90a (producer warpgroup + STAGES-deep mbarrier pipeline, two consumer warpgroups of 64 query rows on wgmma m64nNk16 bf16 with fp32 accumulation, ping-pong through named barriers, setmaxnreg 24/240), operands rounded to bf16; the backward is the FA2 template's (mma.sync, bf16 operands) on the same log-sum-exp")
end

return M
