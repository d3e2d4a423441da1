-- v2105 FSDP, expressed on the ZeRO machinery of the runtime: full_shard is stage 3 (parameters,
-- gradients and optimizer state sharded; per-layer units all-gathered before use), shard_grad_op
-- is stage 2 (parameters stay whole, gradients and state sharded). hybrid_shard (shard inside a
-- group of ranks, replicate across groups) needs process groups the runtime does not have yet:
-- refused at gen time. prefetch: the next unit's all-gather starts while the current computes.
local M = { id = "v2105" }

local STAGE = { full_shard = 3, shard_grad_op = 2 }

function M.derive(ctx)
  local sharding = ctx.param("sharding")
  if not STAGE[sharding] then
    ctx.refuse("sharding=" .. tostring(sharding) .. " (shard inside a group of ranks, replicate across groups) is not implemented: the runtime has one data-parallel group",
      "use --set v2105.sharding=full_shard or shard_grad_op, or zero3 / zero2")
  end
  ctx.facts.zero = { stage = STAGE[sharding] } -- known to the modules that plan before the sections
end

function M.sections(ctx, plan)
  local train = plan.train
  local sharding = ctx.param("sharding")
  train.zero_stage = STAGE[sharding]
  if train.zero_stage == 3 then train.zero_prefetch = ctx.param("prefetch") == false and 0 or 1 end
  ctx.facts.zero = { stage = train.zero_stage }
  ctx.decide("train.zero_stage", train.zero_stage, "v2105 fsdp sharding=" .. sharding .. ": " ..
    (train.zero_stage == 3 and "parameters, gradients and optimizer state sharded = ZeRO stage 3 semantics"
      or "gradients and optimizer state sharded, parameters whole = ZeRO stage 2 semantics"))
  ctx.contribute(string.format("%s across data-parallel ranks (ZeRO stage %d)%s", sharding == "full_shard"
    and "full sharding: per-layer units all-gathered before use, gradients reduce-scattered after their backward"
    or "gradients and optimizer state sharded", train.zero_stage,
    train.zero_stage == 3 and (train.zero_prefetch > 0 and ", the next unit prefetched" or ", no prefetch") or ""))
end

return M
