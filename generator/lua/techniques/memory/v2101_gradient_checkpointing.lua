-- v2101 gradient (activation) checkpointing as a plan transformation: for each checkpointed
-- transformer layer the forward ops stay, and right before the layer's backward ops the plan
-- replays the forward ops that produce what the backward reads (norm outputs and statistics, the
-- attention probabilities or LSE, the MLP pre-activation...), writing copies of those buffers
-- ("r:" + name). The backward then reads the copies, so the forward's intermediates die inside
-- the forward of their layer and the copies live only during that layer's backward; the static
-- memory planner (v2167) packs the shorter lifetimes and the activation arena shrinks. Only the
-- layer's input (the residual stream) is kept from forward to backward. Policies: all layers,
-- every k-th (0, k, 2k, ...), the first n, or budget: the fewest layers from the first whose peak
-- of live activations over the new schedule (plan.lua's lifetimes) fits budget_gb GiB.
-- The replay is exact: the same ops on the same inputs (the layer input, unchanged weights), no
-- dropout, no state. Never: replay an op with state (an FP8 quantize updates its amax history;
-- fp8 with v2101 is refused), or touch an op outside the checkpointed layers.
local U = require("util")
local M = { id = "v2101" }

-- ops whose replay would not be a pure function of their inputs
local STATEFUL = { fp8_quantize = true }

-- The layers policy all / every_k / first_n checkpoints (budget: see M.schedule).
local function chosen_layers(ctx, L)
  local policy = ctx.param("policy")
  local on = {}
  if policy == "all" then
    for l = 0, L - 1 do on[l] = true end
    return on, "policy all: every layer"
  elseif policy == "every_k" then
    local k = ctx.param("k")
    for l = 0, L - 1, k do on[l] = true end
    return on, string.format("policy every_k, k = %d: layers 0, %d, %d, ...", k, k, 2 * k)
  else
    local n = ctx.param("n_layers")
    if n < 1 then ctx.refuse("policy first_n needs n_layers >= 1", "pass --set v2101.n_layers=N") end
    for l = 0, math.min(n, L) - 1 do on[l] = true end
    return on, string.format("policy first_n: layers 0..%d", math.min(n, L) - 1)
  end
end

-- The replay of layer l: the forward ops F (of that layer), the backward ops B (of that layer).
-- Returns the ops to insert before B, and copies of B's ops that read the recomputed buffers.
local function replay(g, F, B, used_outside)
  -- internal: written by a forward op of the layer and used by nothing outside the layer
  local internal = {}
  for _, o in ipairs(F) do
    for _, nm in ipairs(o.outs) do
      local bf = g.by_name[nm]
      if bf and bf.kind == "act" and not used_outside[nm] then internal[nm] = true end
    end
  end
  -- what the backward reads of them, then backwards through F: the ops to replay
  local need = {}
  for _, o in ipairs(B) do
    for _, nm in ipairs(o.ins) do if internal[nm] then need[nm] = true end end
  end
  local keep = {}
  for i = #F, 1, -1 do
    local o = F[i]
    for _, nm in ipairs(o.outs) do
      if need[nm] then keep[i] = true end
    end
    if keep[i] then
      if STATEFUL[o.op] then error("v2101: a stateful op (" .. o.op .. ") in a checkpointed layer") end
      for _, nm in ipairs(o.ins) do if internal[nm] then need[nm] = true end end
    end
  end
  local function copy_of(nm)
    local r = "r:" .. nm
    if not g.by_name[r] then
      local src = g.by_name[nm]
      g.buf(r, "act", src.shape, src.dtype)
    end
    return r
  end
  local function rename(list, all)
    local out = U.array()
    for i, nm in ipairs(list) do
      out[i] = (internal[nm] or (all and g.by_name[nm] and g.by_name[nm].kind == "act")) and copy_of(nm) or nm
    end
    return out
  end
  local ops, bytes = {}, 0
  for i, o in ipairs(F) do
    if keep[i] then
      -- every activation it writes gets a copy: a replay never overwrites a kept buffer
      local r = { op = o.op, ins = rename(o.ins), outs = rename(o.outs, true), attrs = o.attrs, layer = o.layer }
      ops[#ops + 1] = r
    end
  end
  local Bc = {}
  for i, o in ipairs(B) do Bc[i] = { op = o.op, ins = rename(o.ins), outs = rename(o.outs), attrs = o.attrs, layer = o.layer } end
  for nm in pairs(need) do bytes = bytes + g.by_name[nm].bytes end
  return ops, Bc, bytes
end

function M.schedule(ctx, g, sched)
  if ctx.facts.fp8 then
    ctx.refuse("cannot replay FP8 layers: a recomputed fp8_quantize would update the amax history and scales a second time in the step",
      "drop fp8, or drop recompute")
  end
  local F, B = {}, {}
  local used_outside = {}
  local function note(list, o)
    for _, k in ipairs({ "ins", "outs" }) do
      for _, nm in ipairs(o[k]) do
        if o.layer == nil then used_outside[nm] = true
        else
          list[nm] = list[nm] or {}
          list[nm][o.layer] = true
        end
      end
    end
  end
  local layers_of = {}
  for _, o in ipairs(sched.fwd) do
    if o.layer then F[o.layer] = F[o.layer] or {}; table.insert(F[o.layer], o) end
    note(layers_of, o)
  end
  for _, o in ipairs(sched.bwd) do
    if o.layer then B[o.layer] = B[o.layer] or {}; table.insert(B[o.layer], o) end
    note(layers_of, o)
  end
  note(layers_of, sched.loss)
  -- a buffer touched by two layers (the residual stream between them) is kept too
  for nm, ls in pairs(layers_of) do
    local n = 0
    for _ in pairs(ls) do n = n + 1 end
    if n > 1 then used_outside[nm] = true end
  end
  local lifetimes = require("plan").lifetimes
  local losses = sched.loss.outs[1]
  -- the step with the layers of `on` checkpointed: each replay right before the first op of its
  -- layer's backward, that backward reading the replayed copies
  local function build(on)
    local rep, count, nops, saved = {}, 0, 0, 0
    for l = 0, sched.L - 1 do
      if on[l] and F[l] and B[l] then
        local ops, Bc, bytes = replay(g, F[l], B[l], used_outside)
        rep[l] = { ops = ops, B = Bc, i = 0 }
        count, nops, saved = count + 1, nops + #ops, saved + bytes
      end
    end
    local bwd = U.array()
    for _, o in ipairs(sched.bwd) do
      local r = o.layer and rep[o.layer]
      if r then
        if r.i == 0 then for _, x in ipairs(r.ops) do bwd[#bwd + 1] = x end end
        r.i = r.i + 1
        bwd[#bwd + 1] = r.B[r.i]
      else
        bwd[#bwd + 1] = o
      end
    end
    local _, _, _, peak = lifetimes(g, sched.fwd, bwd, losses)
    return { bwd = bwd, count = count, nops = nops, saved = saved, peak = peak * 4 }
  end
  local base = build({})
  local on, why, best
  if ctx.param("policy") == "budget" then
    -- the fewest layers, checkpointed from the first (their replays come last in backward, when
    -- the later layers' activations are already freed), whose peak of live activations fits
    local budget = ctx.param("budget_gb") * 1073741824
    on = {}
    best = base
    local n = 0
    while best.peak > budget and n < sched.L do
      on[n] = true
      n = n + 1
      best = build(on)
    end
    if best.peak > budget then
      ctx.refuse(string.format("budget_gb %.4g GiB is below the activation peak with every layer checkpointed (%.4g GiB; %.4g GiB without recompute)",
        ctx.param("budget_gb"), best.peak / 1073741824, base.peak / 1073741824), "raise --set v2101.budget_gb, or lower --batch/--seq")
    end
    why = string.format("policy budget %.4g GiB: the first %d layer(s), the fewest whose activation peak (%.4g GiB) fits", ctx.param("budget_gb"), n,
      best.peak / 1073741824)
  else
    on, why = chosen_layers(ctx, sched.L)
    best = build(on)
  end
  sched.bwd = best.bwd
  ctx.decide("v2101.layers", best.count, why)
  ctx.contribute(string.format("%d of %d layers checkpointed (%s): %d forward ops replayed before their layer's backward recompute %.2f MiB of activations per step",
    best.count, sched.L, why, best.nops, best.saved / 1048576))
  ctx.contribute(string.format("activations live at the step's peak: %.2f MiB with recompute, %.2f MiB without (%.0f%%)",
    best.peak / 1048576, base.peak / 1048576, 100 * best.peak / base.peak))
end

return M
