-- v2198 KTO: sets the plan's post section to the KTO objective (runtime/train/pref.c: TRL's
-- KTOTrainer loss with the detached, clamped KL estimate from mismatched prompt/completion rows;
-- reference log-probs precomputed from the starting weights, or online from a frozen copy of
-- them run each step: runtime/train/pref_ref.c). Never: a second objective
-- (conflicts with v2195-v2197).
local M = { id = "v2198" }

local REF = {
  precomputed = "log-probs precomputed from the starting weights (one forward pass, kept in memory)",
  online = "online: a frozen copy of the starting weights runs forward on each step's rows (runtime/train/pref_ref.c)",
}

-- the objective other modules must agree with (v2149 distillation replaces the loss: refused)
function M.derive(ctx)
  ctx.facts.objective = { kind = "kto", by = ctx.id }
end

function M.sections(ctx, plan)
  plan.post = plan.post or {}
  plan.post.reference = ctx.param("reference")
  plan.post.objective = "kto"
  plan.post.beta = ctx.param("beta")
  plan.post.desirable_weight = ctx.param("desirable_weight")
  plan.post.undesirable_weight = ctx.param("undesirable_weight")
  ctx.contribute(string.format("post: KTO (beta %g, desirable %g, undesirable %g) on gen data --pref {prompt, completion, label}; KL reference point from mismatched pairs (detached); reference %s",
    plan.post.beta, plan.post.desirable_weight, plan.post.undesirable_weight, REF[plan.post.reference]))
end

return M
