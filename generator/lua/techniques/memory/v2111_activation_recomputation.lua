-- v2111 selective activation recompute (Korthikanti et al. 2022) as a plan transformation: in
-- each transformer layer only chosen activations that are large but cheap to rebuild are dropped
-- after their forward use and recomputed right before the layer's backward, by replaying the one
-- forward op that made them into an "r:" copy (generator/lua/replay.lua, shared with v2101's
-- full checkpointing); the GEMM inputs stay saved. Targets: attention (the probabilities
-- [B,NH,T,T] of naive attention, replayed from the kept q/k/v), mlp_act (the GELU/SwiGLU output,
-- replayed from the kept pre-activation), norms (the block norms' outputs and statistics, replayed
-- from the kept norm input), attention_mlp (the default: attention and mlp_act), all (the three).
-- With flash attention only the LSE [B,NH,T] is saved: there is nothing to recompute there, and
-- the module says so (a warning and a decision). Layers that full checkpointing (v2101) already
-- replays are left alone (sched.recomputed): there v2101 wins, the rest get selective recompute.
-- The replay is exact (same op, same inputs): losses and weights are bit-identical.
local R = require("replay")
local M = { id = "v2111" }

-- target -> op -> the outputs (by position) that are recomputed
local TARGETS = {
  attention = { attention_fwd = { [2] = true } },
  mlp_act = { gelu_fwd = { [1] = true }, swiglu_fwd = { [1] = true } },
  norms = { layernorm_fwd = { true, true, true }, rmsnorm_fwd = { true, true } },
}
local SETS = {
  attention = { "attention" }, mlp_act = { "mlp_act" }, norms = { "norms" },
  attention_mlp = { "attention", "mlp_act" }, all = { "attention", "mlp_act", "norms" },
}

function M.schedule(ctx, g, sched)
  local targets = ctx.param("targets")
  local flash = ctx.facts.attention and ctx.facts.attention.kind == "flash"
  local chosen = {}
  for _, t in ipairs(SETS[targets]) do chosen[t] = true end
  if chosen.attention and flash then
    chosen.attention = nil
    ctx.warn("flash attention saves only the log-sum-exp [B,NH,T] per layer, no [B,NH,T,T] probabilities: the attention target recomputes nothing")
  end
  local function pick(o, i)
    for t in pairs(chosen) do
      local outs = TARGETS[t][o.op]
      if outs and outs[i] then return true end
    end
    return false
  end
  local F, B, used_outside = R.split(sched)
  local rep, count, nops, saved, skipped = {}, 0, 0, 0, 0
  for l = 0, sched.L - 1 do
    if F[l] and B[l] then
      local ops, Bc, bytes = R.layer(g, F[l], B[l], used_outside, pick)
      if #ops > 0 then
        rep[l] = { ops = ops, B = Bc }
        count, nops, saved = count + 1, nops + #ops, saved + bytes
      end
    elseif sched.recomputed and sched.recomputed[l] then
      skipped = skipped + 1
    end
  end
  local names = {}
  for _, t in ipairs(SETS[targets]) do if chosen[t] then names[#names + 1] = t end end
  local what = #names > 0 and table.concat(names, " + ") or "nothing"
  if skipped > 0 then
    ctx.decide("v2111.with_v2101", skipped, string.format("%d layer(s) fully checkpointed by v2101 are left to it (their backward reads only replays); selective recompute in the other %d",
      skipped, sched.L - skipped))
  end
  if count == 0 then
    ctx.warn(string.format("targets %s: no layer's backward reads a recomputable activation of this plan; nothing recomputed", targets))
  end
  sched.bwd = R.splice(sched, rep)
  sched.recomputed = sched.recomputed or {}
  for l in pairs(rep) do sched.recomputed[l] = true end
  ctx.decide("v2111.targets", what, string.format("targets %s%s", targets, flash and " with flash attention" or ""))
  ctx.contribute(string.format("selective recompute (%s) in %d of %d layers: %d forward ops replayed before their layer's backward recompute %.2f MiB of activations per step",
    what, count, sched.L, nops, saved / 1048576))
end

return M
