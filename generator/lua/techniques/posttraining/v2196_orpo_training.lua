-- v2196 ORPO: sets the plan's post section to the ORPO objective (runtime/train/pref.c: TRL's
-- ORPOTrainer odds-ratio loss on length-averaged response log-probs plus the chosen tokens' NLL;
-- no reference model). Never: a second objective (conflicts with v2195, v2197, v2198).
local M = { id = "v2196" }

-- the objective other modules must agree with (v2149 distillation replaces the loss: refused)
function M.derive(ctx)
  ctx.facts.objective = { kind = "orpo", by = ctx.id }
end

function M.sections(ctx, plan)
  plan.post = plan.post or {}
  plan.post.objective = "orpo"
  plan.post.lambda = ctx.param("lambda")
  plan.post.beta = ctx.param("lambda") -- TRL names the odds-ratio weight beta; rewards = beta * avg logp
  ctx.contribute(string.format("post: ORPO (lambda %g): NLL of the chosen response + lambda * -log sigmoid(log odds ratio), length-averaged log-probs, no reference model",
    plan.post.lambda))
end

return M
