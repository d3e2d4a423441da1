-- v2173 local SGD / DiLoCo: plan.local_sgd {sync_every, outer, outer_lr, outer_momentum} makes the
-- cpu trainer skip the per-step gradient all-reduce of data parallelism; every sync_every steps the
-- ranks all-reduce the change of the parameters since the last synchronization and apply it to the
-- anchor with the outer optimizer (average, or DiLoCo's Nesterov), runtime/train/local_sgd.c.
-- inner = sgd replaces the plan's optimizer with SGD + momentum (runtime/optim/optim_sgd.c).
-- On sim and cuda the inner steps are the device step without its gradient all-reduce
-- (runtime/train/backend_dev.c) and the outer step is the same host code, the parameters copied
-- device -> host and back around it (backend.c, params_host).
-- Selections it cannot run are refused here: inner sgd on a device (no device kernel), ZeRO/FSDP
-- (sharded parameters and states; also the spec's conflicts), tensor parallelism, bf16 parameters
-- without master (v2161), schedule-free (its parameters are a mix of states the outer step does
-- not move), and inner sgd beside another optimizer technique.
-- Never: a trainer that says it communicates less while it still all-reduces every step.
local U = require("util")
local M = { id = "v2173" }

function M.derive(ctx)
  local A = ctx.cfg.active
  local kind = ctx.target.kind
  if kind ~= "cpu" and kind ~= "sim" and kind ~= "cuda" then
    ctx.refuse("the outer step runs in the cpu and device (sim, cuda) trainers only, not on target kind " .. tostring(kind),
      "generate the trainer with --target cpu, sim or a cuda sm_XX, or drop v2173")
  end
  if kind ~= "cpu" and ctx.param("inner") == "sgd" then
    ctx.refuse("inner = sgd has no device optimizer kernel (runtime/optim/optim_sgd.c is host only)",
      "generate the trainer with --target cpu, or drop --set v2173.inner=sgd (the device's inner steps use the plan's optimizer)")
  end
  local z = ctx.facts.zero
  if (z and (z.stage or 0) > 0) or A.v2104 or A.v2105 then
    ctx.refuse("every rank keeps full parameters and optimizer states between synchronizations, and ZeRO/FSDP shards them",
      "drop zero1/zero2/zero3/fsdp (plain dp), or drop v2173")
  end
  if A.v2106 then
    ctx.refuse("local SGD over the dp axis of a dp x tp mesh is not implemented (the tp ranks of a group would have to average identical slices)",
      "drop tp, or drop v2173")
  end
  if A.v2161 then
    ctx.refuse("bf16 parameters without an fp32 master (v2161): the outer step averages fp32 parameters",
      "drop v2161, or drop v2173")
  end
  if A.v2137 then
    ctx.refuse("schedule-free's parameters are an interpolation of its states z and x, which the outer step does not move",
      "drop schedule-free (v2137), or drop v2173")
  end
  if ctx.param("inner") == "sgd" then
    if ctx.facts.optimizer then
      ctx.refuse("inner = sgd replaces the plan's optimizer, and " .. tostring(ctx.facts.optimizer) .. " is selected",
        "drop --set v2173.inner=sgd (the inner steps then use " .. tostring(ctx.facts.optimizer) .. "), or drop that optimizer")
    end
    ctx.facts.optimizer = "sgd"
  end
end

function M.sections(ctx, plan)
  local H, outer = ctx.param("sync_every"), ctx.param("outer")
  local lr, mom = ctx.param("outer_lr"), ctx.param("outer_momentum")
  plan.local_sgd = { sync_every = H, outer = outer, outer_lr = lr, outer_momentum = mom }
  if outer == "average" then
    for _, k in ipairs({ "outer_lr", "outer_momentum" }) do
      if ctx.param_source(k) == "--set" then
        ctx.decide("v2173." .. k, "not applied", "outer = average sets the anchor to the mean of the ranks' parameters (outer SGD with lr 1, no momentum); " .. k .. " applies to outer = nesterov")
      end
    end
    ctx.contribute(string.format("local SGD: no per-step gradient all-reduce; every %d steps one all-reduce of the parameter change since the last synchronization, the ranks' parameters averaged (gradient traffic / %d)", H, H))
  else
    ctx.contribute(string.format("DiLoCo: no per-step gradient all-reduce; every %d steps one all-reduce of the parameter change, the mean change as the outer gradient of Nesterov SGD (outer lr %s, momentum %s) on the anchor (gradient traffic / %d)",
      H, U.fmt_value(lr), U.fmt_value(mom), H))
  end
  if ctx.param("inner") == "sgd" then
    local o = plan.optimizer
    local from = o.kind
    o.kind = "sgd"
    o.hyper = { momentum = ctx.param("inner_momentum") }
    o.state = U.array({ { name = "m", dtype = "f32" } })
    o.shard = "elementwise"
    ctx.decide("optimizer.kind", "sgd", "v2173 inner = sgd: replaces " .. from .. " (SGD with momentum " .. U.fmt_value(o.hyper.momentum) ..
      ", torch.optim.SGD's update; L2 weight decay " .. U.fmt_value(o.weight_decay) .. " on the decay group); the default peak LR is AdamW's: pass train --lr for SGD")
    ctx.contribute(string.format("inner optimizer sgd: momentum %s, one f32 state (momentum_buffer)", U.fmt_value(o.hyper.momentum)))
  end
  ctx.decide("v2173.checkpoints", "rank 0's state", "a checkpoint at a multiple of sync_every holds the averaged parameters, one between synchronizations rank 0's own; neither holds the other ranks' inner optimizer states or the outer momentum, so a resume restarts every rank from rank 0's states (use --ckpt-every a multiple of sync_every)")
end

return M
