-- v2174 bounded-staleness async data parallelism: plan.async_dp {staleness} makes the cpu trainer
-- start each step's gradient all-reduce non-blocking and apply its sum `staleness` steps later
-- (runtime/train/async_dp.c; on sim and cuda the device's gradients go through the same host code and
-- back each step, backend_dev.c). Selections it cannot run are refused here: ZeRO/FSDP (sharded gradients), tensor and context
-- parallelism (cp untested),
-- local SGD (the spec's conflict) and gradient compression (each replaces the per-step
-- all-reduce), a v2171 all-reduce algorithm other than auto (written on blocking point-to-point),
-- dynamic loss scaling (an overflow skip would drop a gradient already in flight), the guard
-- (its skip and rollback likewise), Sophia (its Hessian pass runs a second gradient reduction).
-- Never: Hogwild's racing writes (not deterministic); a trainer that says it overlaps while it blocks.
local M = { id = "v2174" }

function M.derive(ctx)
  local A = ctx.cfg.active
  local kind = ctx.target.kind
  if kind ~= "cpu" and kind ~= "sim" and kind ~= "cuda" then
    ctx.refuse("the delayed gradient runs in the cpu and device (sim, cuda) trainers only, not on target kind " .. tostring(kind),
      "generate the trainer with --target cpu, sim or a cuda sm_XX, or drop v2174")
  end
  local z = ctx.facts.zero
  if (z and (z.stage or 0) > 0) or A.v2104 or A.v2105 then
    ctx.refuse("the delayed gradient is the whole replicated gradient arena, and ZeRO/FSDP shard it",
      "drop zero1/zero2/zero3/fsdp (plain dp), or drop v2174")
  end
  if A.v2106 then
    ctx.refuse("async dp over the dp axis of a dp x tp mesh is not implemented",
      "drop tp, or drop v2174")
  end
  if A.v2107 then
    ctx.refuse("async dp with pipeline parallelism is not implemented (the stages' sends and the background all-reduce share the request table)",
      "drop pp, or drop v2174")
  end
  if A.v2108 then
    ctx.refuse("async dp with context parallelism (the cp ranks' gradients in the same delayed sum) is not tested",
      "drop sp, or drop v2174")
  end
  if A.v2172 then
    ctx.refuse("gradient compression (v2172) and async dp both replace the blocking gradient all-reduce",
      "enable one of v2172, v2174")
  end
  local algo = A.v2171 and A.v2171.params and A.v2171.params.algorithm and A.v2171.params.algorithm.value
  if algo and algo ~= "auto" then
    ctx.refuse("the v2171 all-reduce algorithm " .. tostring(algo) .. " is written on blocking point-to-point; the background all-reduce is MPI_Iallreduce",
      "drop --set v2171.algorithm (auto), or drop v2174")
  end
  if A.v2162 then
    ctx.refuse("dynamic loss scaling skips the update of an overflowing step, which would drop a gradient already in flight",
      "drop v2162, or drop v2174")
  end
  if A.v2176 then
    ctx.refuse("the guard's skipped steps and rollbacks would drop or replay gradients already in flight",
      "drop fault-tolerance (v2176), or drop v2174")
  end
  if A.v2135 then
    ctx.refuse("Sophia's Hessian pass runs a second gradient reduction in the step",
      "drop Sophia (v2135), or drop v2174")
  end
end

function M.sections(ctx, plan)
  local s = ctx.param("staleness")
  plan.async_dp = { staleness = s }
  if s == 0 then
    ctx.contribute("async dp, staleness 0: each gradient all-reduce started non-blocking and awaited at once (synchronous dp through the background path)")
  else
    ctx.contribute(string.format("async dp: the gradient all-reduce of step t runs in the background (MPI_Iallreduce) and its mean is applied at step t + %d; steps 1..%d apply nothing, the update of step t is update t - %d (its LR and optimizer count)", s, s, s))
  end
  ctx.decide("v2174.checkpoints", "in-flight gradients dropped", "a checkpoint holds the parameters and optimizer states, not the reductions in flight; a resumed run applies nothing for its first staleness steps")
end

return M
