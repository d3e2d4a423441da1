-- v2155 lottery ticket: the trainer `gen lottery` drives. Sets v2154's pruning schedule to "fixed"
-- (the mask is the initial weights' zeros — the rewound survivors gen lottery writes — held
-- through training) and records the per-round rate for gen lottery. Never: prunes by itself.
local M = { id = "v2155" }

function M.sections(ctx, plan)
  plan.pruning = plan.pruning or {}
  plan.pruning.schedule = "fixed"
  plan.pruning.lottery_rate = ctx.param("rate")
  ctx.contribute(string.format("lottery ticket: masks fixed to the initial weights' zeros; gen lottery prunes %g of the remaining weights per round and rewinds the survivors",
    ctx.param("rate")))
end

return M
