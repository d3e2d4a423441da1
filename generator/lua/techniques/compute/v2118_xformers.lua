-- v2118 memory-efficient attention (the Rabe-Staats / xFormers chunked algorithm): the plan's
-- attention becomes flash_attention_fwd/bwd, as with v2113 (only the [B,NH,T] log-sum-exp is
-- saved), but the sim/sm_XX kernels are templates/mem_efficient_attention.cu.lua: plain SIMT fp32
-- FMAs, one thread per row, fp32 shared-memory chunks under 48 KB, no mma and no architecture
-- gate (the `flash` alias picks it below sm_80). cpu: the same chunked online-softmax algorithm
-- in fp32 is runtime/cpu/ops_flash.c's op. Never: a rule of v2117 (the template has none: v2117
-- refuses), a second plan op.
local M = { id = "v2118", families = { "mem_efficient_attention" } }

function M.derive(ctx)
  ctx.facts.attention = { kind = "flash", by = ctx.id, family = "mem_efficient_attention", precision = "fp32" }
  if ctx.target.kind == "cpu" then
    ctx.decide("attention", "memory-efficient (cpu chunks)", ctx.id .. " on the cpu target: the chunked online-softmax op of runtime/cpu/ops_flash.c (fp32, 64x64 chunks, log-sum-exp saved), the algorithm the SIMT template runs on a device")
  end
end

function M.sections(ctx, plan)
  local B, T, NH = plan.train.B, plan.train.T, plan.model.NH
  ctx.contribute(string.format("attention: memory-efficient forward/backward, saving [B,NH,T] log-sum-exp per layer instead of [B,NH,T,T] probabilities (%.2f MiB instead of %.2f MiB per layer at B=%d, T=%d)",
    B * NH * T * 4 / 1048576, B * NH * T * T * 4 / 1048576, B, T))
end

function M.rendered(ctx)
  ctx.decide("kernels.attention", "memory-efficient: SIMT fp32 template, one thread per row",
    "the plan uses memory-efficient attention (" .. ctx.id .. "): templates/mem_efficient_attention.cu.lua, fp32 FMAs (no tensor cores, any sm), fp32 shared-memory chunks under 48 KB, log-sum-exp saved, deterministic backward (one writer per dq / dk / dv row, no atomics)")
end

return M
