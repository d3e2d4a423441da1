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
local R = require("replay") -- the shared replay machinery (split, layer, splice)
local M = { id = "v2101" }

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

function M.schedule(ctx, g, sched)
  if ctx.facts.fp8 then
    ctx.refuse("cannot replay FP8 layers: a recomputed fp8_quantize would update the amax history and scales a second time in the step",
      "drop fp8, or drop recompute")
  end
  local F, B, used_outside = R.split(sched)
  local lifetimes = require("plan").lifetimes
  local losses = sched.loss.outs[1]
  -- the step with the layers of `on` checkpointed: each replay right before the first op of its
  -- layer's backward, that backward reading the replayed copies
  local function build(on)
    local rep, count, nops, saved = {}, 0, 0, 0
    for l = 0, sched.L - 1 do
      if on[l] and F[l] and B[l] then
        local ops, Bc, bytes = R.layer(g, F[l], B[l], used_outside)
        rep[l] = { ops = ops, B = Bc }
        count, nops, saved = count + 1, nops + #ops, saved + bytes
      end
    end
    local bwd = R.splice(sched, rep)
    local _, _, _, peak = lifetimes(g, sched.fwd, bwd, losses)
    return { bwd = bwd, on = rep, count = count, nops = nops, saved = saved, peak = peak * 4 }
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
  -- later recompute (selective) leaves these layers alone: their backward reads only replays
  sched.recomputed = sched.recomputed or {}
  for l in pairs(best.on) do sched.recomputed[l] = true end
  ctx.decide("v2101.layers", best.count, why)
  ctx.contribute(string.format("%d of %d layers checkpointed (%s): %d forward ops replayed before their layer's backward recompute %.2f MiB of activations per step",
    best.count, sched.L, why, best.nops, best.saved / 1048576))
  ctx.contribute(string.format("activations live at the step's peak: %.2f MiB with recompute, %.2f MiB without (%.0f%%)",
    best.peak / 1048576, base.peak / 1048576, 100 * best.peak / base.peak))
end

return M
