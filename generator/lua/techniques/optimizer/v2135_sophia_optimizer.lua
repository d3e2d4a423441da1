-- v2135 Sophia-G: the plan's optimizer becomes kind "sophia" (runtime/optim/optim_sophia.c, cpu
-- only): hyper-parameters beta1/beta2/rho/hess_every (the spec's hessian_interval), states m (gradient EMA) and h (EMA of
-- the Gauss-Newton-Bartlett diagonal Hessian estimate B * g_hat^2), f32, elementwise sharding
-- (ZeRO stages 1-3 shard both by floats), and the decoupled weight decay of the "decay" group
-- taken from Sophia's own weight_decay param (the no-decay group keeps 0). Every hessian_interval
-- steps the trainer runs one more forward and backward on the step's last micro-batch with labels
-- sampled from the model's softmax (train/gnb.c) and refreshes h. On sim/sm_XX: the kernels of
-- templates/sophia.cu.lua, the labels drawn on the host from the device's logits. Never: a second
-- optimizer beside Sophia.
local U = require("util")
local M = { id = "v2135", families = { "sophia" } }

function M.derive(ctx)
  ctx.facts.optimizer = "sophia"
end

function M.sections(ctx, plan)
  local o = plan.optimizer
  local b1, b2, rho, k, wd = ctx.param("beta1"), ctx.param("beta2"), ctx.param("rho"), ctx.param("hessian_interval"),
    ctx.param("weight_decay")
  local from = o.kind
  o.kind = "sophia"
  o.hyper = { beta1 = b1, beta2 = b2, rho = rho, hess_every = k }
  o.state = U.array({ { name = "m", dtype = "f32" }, { name = "h", dtype = "f32" } })
  o.shard = "elementwise"
  o.weight_decay = wd
  ctx.decide("optimizer.kind", "sophia", "v2135 enabled: replaces " .. from ..
    " as the plan's optimizer (states m and h: the gradient EMA and the EMA of the Gauss-Newton-Bartlett diagonal Hessian estimate)")
  ctx.decide("optimizer.weight_decay", wd, "v2135 Sophia: the decay group's weight decay is Sophia's weight_decay (decoupled, p *= 1 - lr*wd before the step as SophiaG; the parameters' decay flags still pick the no-decay tensors)")
  ctx.contribute(string.format("optimizer kind sophia: beta1 = %s, beta2 = %s, rho = %s; update p -= lr * sign(m) * min(|m| / (rho * h + 1e-15), 1); states m, h (f32), elementwise shards",
    U.fmt_value(b1), U.fmt_value(b2), U.fmt_value(rho)))
  ctx.contribute(string.format("every %d steps: one extra forward/backward on the step's last micro-batch with labels sampled from the model's softmax; h = beta2 * h + (1 - beta2) * B * g_hat^2 (B = that batch's tokens)", k))
  ctx.contribute(string.format("decoupled weight decay %s on the decay group, 0 on the rest", U.fmt_value(wd)))
end

function M.kernels(ctx, k)
  k.want("sophia", { "sophia_step", "sophia_hess" }, {})
  ctx.contribute("kernel: sophia_step (clipped preconditioned update, per-tensor decoupled decay) and sophia_hess (the Gauss-Newton-Bartlett refresh of h)")
end

return M
