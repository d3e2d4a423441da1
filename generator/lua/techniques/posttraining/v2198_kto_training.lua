-- v2198 KTO: sets the plan's post section to the KTO objective (runtime/train/pref.c: TRL's
-- KTOTrainer loss with the detached, clamped KL estimate from mismatched prompt/completion rows;
-- reference log-probs precomputed from the starting weights). Never: a second objective
-- (conflicts with v2195-v2197).
local M = { id = "v2198" }

-- the objective other modules must agree with (v2149 distillation replaces the loss: refused)
function M.derive(ctx)
  ctx.facts.objective = { kind = "kto", by = ctx.id }
end

function M.sections(ctx, plan)
  if ctx.param("reference") ~= "precomputed" then
    local U = require("util")
    U.fail("v2198.reference", "the online frozen reference copy is not implemented; the reference log-probs are precomputed",
      "use --set v2198.reference=precomputed (the default)")
  end
  plan.post = plan.post or {}
  plan.post.objective = "kto"
  plan.post.beta = ctx.param("beta")
  plan.post.desirable_weight = ctx.param("desirable_weight")
  plan.post.undesirable_weight = ctx.param("undesirable_weight")
  ctx.contribute(string.format("post: KTO (beta %g, desirable %g, undesirable %g) on gen data --pref {prompt, completion, label}; KL reference point from mismatched pairs (detached); reference log-probs precomputed",
    plan.post.beta, plan.post.desirable_weight, plan.post.undesirable_weight))
end

return M
