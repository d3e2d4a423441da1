-- v2144 initialization: sp (GPT-2's standard parametrization, the plan's default: matrices
-- N(0, std^2), residual-output projections std/sqrt(2L), biases 0, norm gains 1) or mup (muP,
-- Yang et al. 2022, Table 3 form, relative to base_width): every hidden matrix's std times
-- sqrt(base_width / d_model) (variance proportional to 1/fan_in, equal to SP at the base width),
-- the output layer (param readout) N(0, (std / m)^2) (`scaled`: variance proportional to
-- 1/fan_in^2, SP's at the base width) or zero (`zero`, the limit, as many muP codebases do), so the
-- head is untied from the embedding (which keeps its width-independent init and LR). Measured
-- (bench_mup_transfer.sh): a zero head at LR/m trains far slower over short runs than `scaled`. The `std` param scales every normal init by
-- std / 0.02. Facts for v2145: ctx.facts.init = {scheme, base_width, width_mult}.
-- Never: learning rates or multipliers (v2145's); a model file's init changed when scheme is sp
-- and std 0.02.
local U = require("util")
local M = { id = "v2144", families = {} }

local state = setmetatable({}, { __mode = "k" })

local function embedding_or_head(name)
  return name:find("wte", 1, true) or name:find("wpe", 1, true) or name:find("embed", 1, true)
    or name:find("lm_head", 1, true)
end
M.embedding_or_head = embedding_or_head

function M.derive(ctx)
  ctx.facts.init = { scheme = ctx.param("scheme"), base_width = ctx.param("base_width"), std = ctx.param("std"),
    readout = ctx.param("readout") }
end

function M.model(ctx, m)
  local f = ctx.facts.init
  f.width_mult = m.d_model / f.base_width
  state[ctx.cfg] = { hidden = 0, head = nil }
  if f.scheme == "mup" and m.tied_embeddings then
    m.tied_embeddings = false
    ctx.decide("model.tied_embeddings", false, "v2144 mup: the output layer is zero-initialized with its own 1/m learning rate while the input embedding keeps a width-independent init and LR: they cannot share one tensor")
  end
end

function M.params(ctx, ps, names)
  local f, st = ctx.facts.init, state[ctx.cfg]
  local k = f.std / 0.02
  local mup = f.scheme == "mup"
  local hk = mup and 1 / math.sqrt(f.width_mult) or 1
  for _, p in ipairs(ps) do
    if p.init.kind == "normal" then
      local s = p.init.std * k
      if mup and #p.shape == 2 and not embedding_or_head(p.name) then s = s * hk; st.hidden = st.hidden + 1 end
      if s ~= p.init.std then p.init = { kind = "normal", std = s } end
      if mup and p.name == names.head then
        p.init = f.readout == "zero" and { kind = "zeros" } or { kind = "normal", std = f.std / f.width_mult }
        st.head = p.name
      end
    end
  end
  if mup then
    ctx.decide("init.scheme", "mup", string.format("v2144 mup: width multiplier m = d_model / base_width = %s; %d hidden matrices at std x 1/sqrt(m) = x %s (variance ~ 1/fan_in), output layer %s %s",
      U.fmt_value(f.width_mult), st.hidden, U.fmt_value(hk), tostring(st.head),
      f.readout == "zero" and "zero" or ("N(0, (std/m)^2), std " .. U.fmt_value(f.std / f.width_mult))))
  else
    ctx.decide("init.scheme", "sp", string.format("v2144 sp: matrices N(0, %s^2), residual projections / sqrt(2L), biases 0, gains 1", U.fmt_value(f.std)))
  end
end

function M.sections(ctx, plan)
  local f, st = ctx.facts.init, state[ctx.cfg]
  local n0 = 0
  for _, p in ipairs(plan.params) do if p.init.kind == "zeros" and #p.shape == 2 then n0 = n0 + 1 end end
  if f.scheme == "mup" then
    ctx.contribute(string.format("muP init (base width %d, m = %s): %d hidden matrices std / sqrt(m), output layer %s (%d zero-initialized matrices)",
      f.base_width, U.fmt_value(f.width_mult), st.hidden, f.readout == "zero" and "zero" or "std / m", n0))
  else
    ctx.contribute(string.format("SP init: std %s", U.fmt_value(f.std)))
  end
end

return M
