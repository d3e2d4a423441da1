-- v2195 DPO: sets the plan's post section to the DPO objective (runtime/train/pref.c: the sigmoid
-- loss of TRL's DPOTrainer with label smoothing, summed response log-probs, the reference's
-- log-probs precomputed in one forward pass of the starting weights, or with reference = online
-- from a frozen copy of them run each step: runtime/train/pref_ref.c). Never: a second objective
-- (the spec conflicts with v2196-v2198, refused at resolve time).
local M = { id = "v2195" }

local REF = {
  precomputed = "log-probs precomputed from the starting weights (one forward pass, kept in memory)",
  online = "online: a frozen copy of the starting weights runs forward on each step's rows (runtime/train/pref_ref.c)",
}

-- the objective other modules must agree with (v2149 distillation replaces the loss: refused)
function M.derive(ctx)
  ctx.facts.objective = { kind = "dpo", by = ctx.id }
end

function M.sections(ctx, plan)
  plan.post = plan.post or {}
  plan.post.reference = ctx.param("reference")
  plan.post.objective = "dpo"
  plan.post.beta = ctx.param("beta")
  plan.post.label_smoothing = ctx.param("label_smoothing")
  ctx.contribute(string.format("post: DPO (beta %g, label smoothing %g) on gen data --pref pairs; reference %s",
    plan.post.beta, plan.post.label_smoothing, REF[plan.post.reference]))
end

return M
