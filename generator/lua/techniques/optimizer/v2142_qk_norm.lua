-- v2142 QK-norm as a switch for any model: the `model` hook sets m.qk_norm, and the plan builder
-- then gives every layer a q_norm and a k_norm gain ([hd] each, ones at init, no weight decay) and
-- the qknorm_fwd/bwd ops (per-head RMSNorm of queries and keys after the QKV projection, before
-- RoPE when the model has it) that Llama/Qwen3-style model files with qk_norm: true already had.
-- The `sections` hook counts what the plan actually carries for the audit.
local M = { id = "v2142", families = { "rmsnorm" } }

local had = setmetatable({}, { __mode = "k" }) -- per cfg: the model file already had qk_norm

function M.model(ctx, m)
  if m.qk_norm then
    had[ctx.cfg] = true
    ctx.warn("model " .. tostring(m.name) .. " already has qk_norm: true; enabling v2142 adds nothing new")
    return
  end
  m.qk_norm = true
  ctx.decide("model.qk_norm", true, "v2142 enabled: model " .. tostring(m.name) ..
    " (qk_norm off in its model file) gets per-head RMSNorm on queries and keys with learned q_norm/k_norm gains (eps = norm_eps " ..
    tostring(m.norm_eps or 1e-5) .. ")" .. (m.position == "rope" and ", before RoPE" or ""))
end

function M.sections(ctx, plan)
  if had[ctx.cfg] then return end
  local nw, floats = 0, 0
  for _, p in ipairs(plan.params) do
    if p.name:match("%.q_norm%.weight$") or p.name:match("%.k_norm%.weight$") then
      nw = nw + 1
      floats = floats + p.numel
    end
  end
  local nf, nb = 0, 0
  for _, o in ipairs(plan.forward) do if o.op == "qknorm_fwd" then nf = nf + 1 end end
  for _, o in ipairs(plan.backward) do if o.op == "qknorm_bwd" then nb = nb + 1 end end
  ctx.contribute(string.format("QK-norm: %d q_norm/k_norm gain weights (%d floats, no weight decay), %d qknorm_fwd and %d qknorm_bwd ops",
    nw, floats, nf, nb))
end

return M
