-- v2140 norm placement as a switch for any model: the `model` hook sets m.norm_placement from the
-- `placement` param (pre | post | sandwich), and the plan builder then places each block's norms:
--   pre       x = x + f(norm(x))                  (GPT-2, Llama; what every model file does)
--   post      x = norm(x + f(x))                  (the original Transformer)
--   sandwich  x = x + norm_out(f(norm(x)))        (CogView, Gemma-2: two extra norms per layer)
-- with whichever norm the model uses (LayerNorm or RMSNorm, v2141). The final norm before the head
-- is kept in every placement. It must never change a plan when placement is pre.
-- The `sections` hook counts what the plan actually carries for the audit.
local M = { id = "v2140", families = { "norm_placement" } }

local chosen = setmetatable({}, { __mode = "k" }) -- per cfg: the placement

function M.model(ctx, m)
  local pl = ctx.param("placement")
  chosen[ctx.cfg] = pl
  local what = {
    pre = "pre-norm, x + f(norm(x)) in each sublayer (the model file's own placement: nothing changes)",
    post = "post-norm, norm(x + f(x)) after each residual add (ln_1/ln_2 normalize the residual stream; the final norm is kept)",
    sandwich = "sandwich norm, x + norm_out(f(norm(x))): a second norm on each sublayer's output (2 extra norm weights per layer)",
  }
  ctx.decide("model.norm_placement", pl, "v2140 enabled: model " .. tostring(m.name) .. " uses " .. what[pl] ..
    " with its " .. tostring(m.norm) .. " norms")
  m.norm_placement = pl
end

function M.sections(ctx, plan)
  local pl = chosen[ctx.cfg] or "pre"
  local nf, nb = 0, 0
  for _, o in ipairs(plan.forward) do if o.op == "layernorm_fwd" or o.op == "rmsnorm_fwd" then nf = nf + 1 end end
  for _, o in ipairs(plan.backward) do if o.op == "layernorm_bwd" or o.op == "rmsnorm_bwd" then nb = nb + 1 end end
  local extra = 0
  for _, p in ipairs(plan.params) do
    if p.name:match("ln_attn_out") or p.name:match("ln_mlp_out") or p.name:match("post_feedforward_layernorm")
      or (pl == "sandwich" and p.name:match("post_attention_layernorm")) then extra = extra + p.numel end
  end
  ctx.contribute(string.format("norm placement %s: %d norm forward and %d norm backward ops, %d extra norm parameters",
    pl, nf, nb, extra))
end

return M
