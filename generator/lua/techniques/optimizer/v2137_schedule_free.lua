-- v2137 Schedule-Free AdamW: the plan's optimizer becomes kind "schedulefree_adamw"
-- (runtime/optim/optim_sfadamw.c; on sim/sm_XX the kernels of templates/schedulefree.cu.lua): hyper-parameters beta1/beta2/eps (this spec's
-- beta1/beta2, v2132's eps), states z and v (f32, elementwise), the decay group's weight decay
-- v2132's. The LR stays constant after v2130's warmup (v2131's decay schedules conflict in the
-- spec); the trainer evaluates, samples and checkpoints at the average x and trains at y. ZeRO-1/2
-- (cpu: each rank moves its own shard between y and x, then the parameters are all-gathered) is
-- allowed, ZeRO-3 and ZeRO on a device target are refused here, at gen time. Never: a second optimizer beside this one.
local U = require("util")
local M = { id = "v2137", families = { "schedulefree_adamw" } }

function M.derive(ctx)
  ctx.facts.optimizer = "schedulefree_adamw"
end

function M.sections(ctx, plan)
  local z = ctx.facts.zero
  local zstage = z and z.stage or 0
  if zstage >= 3 then
    ctx.refuse(string.format("schedule-free AdamW moves the parameters between y (training) and x (evaluation, checkpoints) on the replicated parameters; ZeRO stage %d shards them", zstage),
      "use zero1 or zero2 (each rank moves its shard, then the parameters are all-gathered), or plain dp")
  end
  if zstage >= 1 and ctx.target.kind ~= "cpu" then
    ctx.refuse(string.format("schedule-free AdamW under ZeRO stage %d runs on the cpu backend only (the device moves y <-> x on whole parameter arenas)", zstage),
      "generate the trainer with --target cpu, or drop zero1/zero2 (plain dp works on " .. tostring(ctx.target.kind) .. ")")
  end
  local o = plan.optimizer
  local b1, b2 = ctx.param("beta1"), ctx.param("beta2")
  local from = o.kind
  o.kind = "schedulefree_adamw"
  o.hyper = { beta1 = b1, beta2 = b2, eps = o.hyper.eps }
  o.state = U.array({ { name = "z", dtype = "f32" }, { name = "v", dtype = "f32" } })
  o.shard = "elementwise"
  ctx.decide("optimizer.kind", "schedulefree_adamw", "v2137 enabled: replaces " .. from ..
    " (states z and v instead of Adam's m and v; the parameters hold y while training, x = the average for evaluation and checkpoints)")
  ctx.contribute(string.format("optimizer kind schedulefree_adamw: beta1 = %s (interpolation/averaging), beta2 = %s, eps = %s, weight decay %s at y; states z, v (f32), elementwise",
    U.fmt_value(b1), U.fmt_value(b2), U.fmt_value(o.hyper.eps), U.fmt_value(o.weight_decay)))
  ctx.contribute("evaluation, sampling and checkpoints at the average x = y + (1 - 1/beta1)(z - y); training at y; LR constant after warmup, averaging weight lr_max^2 / sum lr_max^2")
end

function M.kernels(ctx, k)
  k.want("schedulefree", { "sfadamw_step", "sfadamw_lerp" }, {})
  ctx.contribute("kernel: sfadamw_step (one launch over the arena, per-tensor decay at y) and sfadamw_lerp (y <-> x around evaluation)")
end

return M
