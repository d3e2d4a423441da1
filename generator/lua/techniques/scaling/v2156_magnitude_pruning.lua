-- v2156 gradual magnitude pruning: turns v2154's one-shot mask into Zhu & Gupta's cubic schedule,
-- s(t) = s_f (1 - (1 - p)^3) over [start, end] of the run, masks recomputed by magnitude every
-- update_every steps (runtime/train/prune.c). Never: a schedule of its own without v2154's masks.
local M = { id = "v2156" }

function M.sections(ctx, plan)
  local start, stop, every = ctx.param("start"), ctx.param("end"), ctx.param("update_every")
  if stop <= start then
    ctx.refuse(string.format("end (%g) is not after start (%g)", stop, start), "e.g. --set v2156.start=0.1 --set v2156.end=0.8")
  end
  plan.pruning = plan.pruning or {}
  plan.pruning.schedule, plan.pruning.start, plan.pruning["end"], plan.pruning.every = "gradual", start, stop, every
  ctx.contribute(string.format("pruning schedule: sparsity grows as s_f (1 - (1 - p)^3) from %g to %g of the run, masks recomputed by magnitude every %d steps",
    start, stop, every))
end

return M
