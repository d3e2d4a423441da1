-- v2113 FlashAttention-2: the plan's attention becomes flash_attention_fwd/bwd, which keep only
-- the [B,NH,T] log-sum-exp instead of the [B,NH,T,T] probabilities. cpu: the tiled op of
-- runtime/cpu/ops_flash.c; sim and sm_XX: templates/flash_attention.cu.lua (FA2 on mma.sync,
-- bf16 operands under the bf16 policy, else hi/lo-split bf16x3 for ~fp32 accuracy).
local M = { id = "v2113", families = { "flash_attention" } }

function M.derive(ctx)
  local p = ctx.facts.precision
  local want = ctx.param("precision") or "auto"
  ctx.facts.attention = { kind = "flash", by = ctx.id, precision = want ~= "auto" and want or ((p and p.bf16) and "bf16" or "bf16x3") }
  if ctx.target.kind == "cpu" then
    ctx.decide("attention", "flash (cpu tiles)", ctx.id .. " on the cpu target: the tiled online-softmax kernel of runtime/cpu/ops_flash.c (64x64 tiles, log-sum-exp saved)")
  end
  -- the spec's tile parameters describe the reference kernels; ours choose their own
  local bq, bk = ctx.param("block_q"), ctx.param("block_k")
  if bq or bk then
    ctx.decide(ctx.id .. ".block_q/block_k", "not applied", string.format("%s sets block_q=%s, block_k=%s, but Hyperion's kernels pick their tiles: the cpu op 64x64 (hd <= 128), the CUDA template from the head dim, precision and shared memory (kernels.flash_attention.tiles in the audit of a sim/sm_XX trainer)",
      ctx.id, tostring(bq), tostring(bk)))
  end
end

function M.sections(ctx, plan)
  local B, T, NH = plan.train.B, plan.train.T, plan.model.NH
  ctx.contribute(string.format("attention: flash forward/backward, saving [B,NH,T] log-sum-exp per layer instead of [B,NH,T,T] probabilities (%.2f MiB instead of %.2f MiB per layer at B=%d, T=%d)",
    B * NH * T * 4 / 1048576, B * NH * T * T * 4 / 1048576, B, T))
end

function M.rendered(ctx)
  local prec = ctx.facts.attention.precision
  ctx.decide("kernels.attention", "flash: FA2 template, " .. (prec == "bf16" and "bf16 mma" or "bf16x3 mma (hi/lo split)") .. ", 64-row tiles",
    "the plan uses flash attention (" .. ctx.id .. "): templates/flash_attention.cu.lua, FlashAttention-2 on mma.sync m16n8k16 with fp32 accumulation, " ..
    (prec == "bf16" and "operands rounded to bf16 as the v2102 bf16 policy rounds the GEMM operands"
      or ctx.param("precision") == "bf16x3" and "fp32 operands split into hi + lo bf16 (3 mma per product, ~fp32 accuracy): v2113 precision bf16x3"
      or "fp32 operands split into hi + lo bf16 (3 mma per product, ~fp32 accuracy) because the activations policy is fp32") ..
    "; log-sum-exp saved, deterministic backward (D pre-pass, dK/dV per key tile, dQ per query tile, no atomics)")
end

return M
