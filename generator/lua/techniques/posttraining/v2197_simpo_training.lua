-- v2197 SimPO: sets the plan's post section to the SimPO objective (runtime/train/pref.c: TRL's
-- CPOTrainer loss_type "simpo" with cpo_alpha 0: -log sigmoid(beta * (avg logp_w - avg logp_l) -
-- gamma); no reference model). Never: a second objective (conflicts with v2195, v2196, v2198).
local M = { id = "v2197" }

-- the objective other modules must agree with (v2149 distillation replaces the loss: refused)
function M.derive(ctx)
  ctx.facts.objective = { kind = "simpo", by = ctx.id }
end

function M.sections(ctx, plan)
  plan.post = plan.post or {}
  plan.post.objective = "simpo"
  plan.post.beta = ctx.param("beta")
  plan.post.gamma = ctx.param("gamma")
  ctx.contribute(string.format("post: SimPO (beta %g, gamma %g) on length-averaged response log-probs, no reference model",
    plan.post.beta, plan.post.gamma))
end

return M
