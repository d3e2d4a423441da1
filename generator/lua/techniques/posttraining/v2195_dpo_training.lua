-- v2195 DPO: sets the plan's post section to the DPO objective (runtime/train/pref.c: the sigmoid
-- loss of TRL's DPOTrainer with label smoothing, summed response log-probs, the reference's
-- log-probs precomputed in one forward pass of the starting weights). Never: a second objective
-- (the spec conflicts with v2196-v2198, refused at resolve time).
local M = { id = "v2195" }

-- the objective other modules must agree with (v2149 distillation replaces the loss: refused)
function M.derive(ctx)
  ctx.facts.objective = { kind = "dpo", by = ctx.id }
end

function M.sections(ctx, plan)
  if ctx.param("reference") ~= "precomputed" then
    local U = require("util")
    U.fail("v2195.reference", "the online frozen reference copy is not implemented; the reference log-probs are precomputed",
      "use --set v2195.reference=precomputed (the default)")
  end
  plan.post = plan.post or {}
  plan.post.objective = "dpo"
  plan.post.beta = ctx.param("beta")
  plan.post.label_smoothing = ctx.param("label_smoothing")
  ctx.contribute(string.format("post: DPO (beta %g, label smoothing %g) on gen data --pref pairs; reference log-probs precomputed from the starting weights (one forward pass, kept in memory)",
    plan.post.beta, plan.post.label_smoothing))
end

return M
