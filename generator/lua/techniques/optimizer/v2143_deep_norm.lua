-- v2143 DeepNorm (Wang et al. 2022, "DeepNet"): every block becomes post-norm with an up-weighted
-- residual, x = norm(alpha * x + f(x)) after each sublayer, and the value projection, the
-- attention output and both MLP matrices are initialized N(0, (0.02 beta)^2) instead of SP's;
-- decoder-only constants from the paper: alpha = (2N)^(1/4), beta = (8N)^(-1/4), N = n_layers.
-- The `model` hook sets the placement (post) and the residual weight (m.residual_alpha: the plan's
-- add_fwd/accumulate attr alpha, cpu ops and the residual kernels honour it); the `params` hook
-- scales the init. GPT-2's fused c_attn holds q, k and v in one tensor with one init std: it keeps
-- SP's (the value third is not beta-scaled there; Llama-style v_proj is).
-- Never: a norm placement other than post; alpha or beta other than the paper's (no parameters).
local U = require("util")
local M = { id = "v2143", families = { "residual" } }

local consts = setmetatable({}, { __mode = "k" }) -- per cfg: {alpha, beta, N, scaled}

function M.model(ctx, m)
  local N = m.n_layers
  local alpha, beta = (2 * N) ^ 0.25, (8 * N) ^ -0.25
  consts[ctx.cfg] = { alpha = alpha, beta = beta, N = N, scaled = 0 }
  m.norm_placement = "post"
  m.residual_alpha = alpha
  ctx.decide("model.norm_placement", "post", "v2143 DeepNorm: post-norm blocks, x = norm(alpha x + f(x)) after each sublayer")
  ctx.decide("model.residual_alpha", alpha, string.format("v2143 DeepNorm: alpha = (2N)^(1/4) with N = %d layers (decoder-only, Wang et al. 2022)", N))
end

-- the tensors DeepNorm scales by beta: v_proj, the attention output, the MLP matrices (an MoE
-- layer's: every expert's, not the router)
local function beta_scaled(name)
  return name:find("v_proj.weight", 1, true) or name:find("attn.c_proj.weight", 1, true)
    or name:find("o_proj.weight", 1, true) or name:find("mlp.", 1, true) and name:find("weight", 1, true)
    or name:find("block_sparse_moe.experts.", 1, true)
end

function M.params(ctx, ps)
  local c = consts[ctx.cfg]
  for _, p in ipairs(ps) do
    if #p.shape == 2 and p.init.kind == "normal" and beta_scaled(p.name) then
      p.init = { kind = "normal", std = 0.02 * c.beta }
      c.scaled = c.scaled + 1
    end
  end
  ctx.decide("init.deepnorm_beta", c.beta, string.format("v2143 DeepNorm: beta = (8N)^(-1/4); v_proj, attention-out and MLP weights N(0, (0.02 beta)^2) = std %s (%d tensors; SP's 1/sqrt(2L) residual scaling replaced)",
    U.fmt_value(0.02 * c.beta), c.scaled))
end

function M.sections(ctx, plan)
  local c = consts[ctx.cfg]
  local n = 0
  for _, list in ipairs({ plan.forward, plan.backward }) do
    for _, o in ipairs(list) do if (o.op == "add_fwd" or o.op == "accumulate") and o.attrs.alpha then n = n + 1 end end
  end
  ctx.contribute(string.format("DeepNorm: post-norm with residual weight alpha = %s on %d residual ops (forward adds and backward fan-ins), init beta = %s on %d tensors (N = %d)",
    U.fmt_value(c.alpha), n, U.fmt_value(c.beta), c.scaled, c.N))
end

return M
