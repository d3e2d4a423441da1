-- v2134 Lion: the plan's optimizer becomes kind "lion" (runtime/optim/optim_lion.c on the host,
-- the lion_step kernel of templates/lion.cu.lua on sim/sm_XX): hyper-parameters beta1/beta2 only,
-- one fp32 state m, elementwise sharding (ZeRO stages 1-3 shard it by floats), and the decoupled
-- weight decay of the "decay" group taken from Lion's own weight_decay param (the no-decay group
-- keeps 0). Which tensors decay is the parameters' decay flags (2-D weights; v2132's exclude, when
-- v2132 is also active, still exempts embeddings). Without an explicit LR (v2100.lr or train
-- --lr) the size-based default peak LR is divided by 10, as the paper advises (3-10x smaller than
-- AdamW's; weight decay 10x larger keeps lr*wd the same). Never: a second optimizer beside Lion.
local U = require("util")
local M = { id = "v2134", families = { "lion" } }

local LR_DIV = 10

-- facts.optimizer: the update rule replacing Adam, for modules that describe the optimizer step
function M.derive(ctx)
  ctx.facts.optimizer = "lion"
end

function M.sections(ctx, plan)
  local o = plan.optimizer
  local b1, b2, wd = ctx.param("beta1"), ctx.param("beta2"), ctx.param("weight_decay")
  local from = o.kind
  o.kind = "lion"
  o.hyper = { beta1 = b1, beta2 = b2 }
  o.state = U.array({ { name = "m", dtype = "f32" } })
  o.shard = "elementwise"
  o.weight_decay = wd
  ctx.decide("optimizer.kind", "lion", "v2134 enabled: replaces " .. from .. " as the plan's optimizer (one fp32 state m instead of Adam's m and v)")
  ctx.decide("optimizer.weight_decay", wd, "v2134 Lion: the decay group's weight decay is Lion's weight_decay (Adam's weight_decay, beta1/beta2/eps settings do not apply to Lion; the parameters' decay flags still pick the no-decay tensors)")
  local n, floats = 0, 0
  for _, p in ipairs(plan.params) do
    if p.decay then n = n + 1; floats = floats + p.numel end
  end
  if not ctx.facts.lr then
    local lr = plan.train.lr / LR_DIV
    ctx.decide("train.lr", lr, string.format("v2134 Lion: the default peak LR for this size (%g) divided by %d (sign updates move every coordinate by lr; the paper uses a 3-10x smaller LR than AdamW); override with --set v2100.lr=... or train --lr",
      plan.train.lr, LR_DIV))
    plan.train.lr = lr
    ctx.facts.lr = lr
  end
  ctx.contribute(string.format("optimizer kind lion: beta1 = %s, beta2 = %s, state m (f32), elementwise shards", U.fmt_value(b1), U.fmt_value(b2)))
  ctx.contribute(string.format("decoupled weight decay %s on the decay group (%d tensors, %d floats), 0 on the rest", U.fmt_value(wd), n, floats))
end

function M.kernels(ctx, k)
  k.want("lion", { "lion_step" }, {})
  ctx.contribute("kernel: lion_step (sign update, momentum update, per-tensor decoupled decay) for the optimizer step")
end

return M
