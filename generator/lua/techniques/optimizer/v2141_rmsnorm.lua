-- v2141 RMSNorm as a switch for any model: the `model` hook sets m.norm = "rmsnorm", and the plan
-- builder then makes every norm (per layer the two pre-norms, and the final one) an RMSNorm with a
-- weight and no bias (GPT-2 keeps its names: ln_1/ln_2/ln_f .weight), computed by the
-- rmsnorm_fwd/bwd ops that Llama-style model files with norm: rmsnorm already use.
-- The `sections` hook counts what the plan actually carries for the audit.
local M = { id = "v2141", families = { "rmsnorm" } }

local had = setmetatable({}, { __mode = "k" }) -- per cfg: the model file already used rmsnorm

function M.model(ctx, m)
  if m.norm == "rmsnorm" then
    had[ctx.cfg] = true
    ctx.warn("model " .. tostring(m.name) .. " already uses norm: rmsnorm; enabling v2141 changes nothing")
    return
  end
  ctx.decide("model.norm", "rmsnorm", "v2141 enabled: model " .. tostring(m.name) .. " (norm: " .. tostring(m.norm) ..
    " in its model file) uses RMSNorm (weight only, no bias, eps = norm_eps " .. tostring(m.norm_eps or 1e-5) .. ") for every norm")
  m.norm = "rmsnorm"
end

function M.sections(ctx, plan)
  if had[ctx.cfg] then return end
  local nf, nb = 0, 0
  for _, o in ipairs(plan.forward) do if o.op == "rmsnorm_fwd" then nf = nf + 1 end end
  for _, o in ipairs(plan.backward) do if o.op == "rmsnorm_bwd" then nb = nb + 1 end end
  ctx.contribute(string.format("RMSNorm in place of LayerNorm: %d rmsnorm_fwd and %d rmsnorm_bwd ops, no norm biases", nf, nb))
end

return M
