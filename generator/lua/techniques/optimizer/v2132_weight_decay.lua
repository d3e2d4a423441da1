-- v2132 decoupled weight decay (AdamW): the decay applies to 2-D weights only; `exclude` may also
-- exempt the embeddings. The optimizer's betas and eps come from here too (Adam's defaults while
-- the spec is inactive: the step is then plain Adam with weight_decay 0). They go to the plan's
-- optimizer section: the hyper-parameters and the weight decay of the "decay" group.
local M = {
  id = "v2132",
  families = { "adamw" },
  settings = {
    { "optimizer", "weight_decay", "weight_decay", 0.0, "optimizer.weight_decay" },
    { "optimizer.hyper", "beta1", "beta1", 0.9, "optimizer.beta1", quiet = true },
    { "optimizer.hyper", "beta2", "beta2", 0.95, "optimizer.beta2", quiet = true },
    { "optimizer.hyper", "eps", "eps", 1e-8, "optimizer.eps", quiet = true },
  },
}

function M.params(ctx, ps, names)
  if ctx.param("exclude") ~= "norms_biases_embeddings" then return end
  for _, p in ipairs(ps) do
    if p.name == names.wte or p.name == names.wpe or p.name == "model.embed_positions.weight" then p.decay = false end
  end
end

function M.sections(ctx, plan)
  local n = 0
  for _, p in ipairs(plan.params) do if p.decay then n = n + 1 end end
  local other = ctx.facts.optimizer -- a replacement optimizer's module said so in its derive hook
  if other and other ~= "adamw" then
    ctx.contribute("decay/no-decay groups for " .. other .. " (" .. n .. " tensors decayed; " .. other ..
      " may set its own weight decay, see its line); beta1/beta2/eps apply only where " .. other .. " keeps an Adam rule")
  else
    ctx.contribute("AdamW decoupled weight decay on 2-D weights only (" .. n .. " tensors)")
  end
end

return M
