-- v2107 pipeline parallelism as a plan transformation: cuts the op lists into `stages` contiguous
-- layer ranges (the embedding with the first stage; the final norm, head and loss with the last)
-- and records, per stage, its forward and backward op ranges and the one activation that crosses
-- each boundary (the residual stream: sent forward, its gradient "d:" sent back). Every pp rank
-- loads the same plan and runs only its stage's ranges (runtime/train/train_pp.c drives the
-- micro-batches through the GPipe or 1F1B schedule); plan.pp says how.
-- Never: a cut the runtime cannot run exactly — a stage whose ops would read an activation of
-- another stage other than its boundary input (or its gradient) is an error here, not a wrong run;
-- selections that need what is not implemented (ZeRO, tp, device targets...) are refused.
local U = require("util")
local M = { id = "v2107" }

function M.model(ctx, m)
  local P = ctx.param("stages")
  local how = "drop pp, or choose another --set v2107.stages"
  if ctx.target.kind ~= "cpu" then
    ctx.refuse("pipeline parallelism runs on the cpu backend only (no sim/cuda stage driver, no NCCL send/recv yet)", "use --target cpu, or drop pp")
  end
  if ctx.cfg.active.v2106 then ctx.refuse("pipeline parallelism with tensor parallelism (pp x tp) is not implemented", "drop tp, or drop pp") end
  if ctx.cfg.active.v2108 then ctx.refuse("pipeline parallelism with context parallelism (pp x cp) is not implemented", "drop sp/cp, or drop pp") end
  if ctx.cfg.active.v2109 then ctx.refuse("pipeline parallelism with expert parallelism (pp x ep) is not implemented", "drop ep, or drop pp") end
  if ctx.cfg.active.v2172 or ctx.cfg.active.v2173 then
    ctx.refuse("pipeline parallelism with gradient compression or local SGD (v2172/v2173): the stages' dp reductions are plain all-reduces", "drop v2172/v2173, or drop pp")
  end
  if ctx.facts.zero and (ctx.facts.zero.stage or 0) > 0 then
    ctx.refuse("pipeline parallelism with ZeRO/FSDP: sharding a stage's optimizer state over a dp axis is not implemented", "drop zero1/zero2/zero3/fsdp, or drop pp")
  end
  if ctx.facts.fp8 then ctx.refuse("pipeline parallelism with FP8 GEMMs: the per-tensor amax histories are not exchanged between stages", "drop fp8, or drop pp") end
  if ctx.cfg.active.v2101 then ctx.refuse("pipeline parallelism with full recompute (v2101): a stage's replayed forward is not cut yet", "drop v2101, or drop pp") end
  if ctx.cfg.active.v2175 or ctx.cfg.active.v2181 then
    ctx.refuse("pipeline parallelism with elastic/sharded checkpoints: checkpoints of a pipeline are not written or resumed", "drop v2175/v2181, or drop pp")
  end
  if P < 2 then ctx.refuse("stages must be >= 2 (1 stage is no pipeline)", "set v2107.stages=2, or drop pp") end
  if m.n_layers % P ~= 0 then
    ctx.refuse(string.format("n_layers %d of %s is not divisible by stages %d (contiguous equal stages)", m.n_layers, m.name, P), how)
  end
  if ctx.cfg.active.v2103 and ctx.param_source("microbatches") ~= "default" then
    ctx.refuse("v2107.microbatches and v2103 gradient accumulation both set the micro-batches per step", "set only one of them")
  end
  ctx.facts.pp = { stages = P, schedule = ctx.param("schedule"), m = ctx.param("microbatches"), L = m.n_layers }
end

-- the stage of op o at position i: its layer's, or (outside the layers) the first stage before
-- the first layer op of the list and the last stage after it, in list order `dir` (fwd: embedding
-- first; bwd: loss and head first)
local function stages_of(list, per, P, before, after)
  local st, seen = {}, false
  for i, o in ipairs(list) do
    if o.layer then seen = true; st[i] = o.layer // per
    else st[i] = seen and after or before end
  end
  return st
end

-- contiguous [from, to) ranges (0-based, to exclusive) per stage; errors if not contiguous
local function ranges(st, P, what)
  local from, to = {}, {}
  for i = 1, #st do
    local s = st[i]
    if from[s] == nil then from[s] = i - 1 end
    if to[s] and to[s] ~= i - 1 then error(string.format("v2107: the %s ops of stage %d are not contiguous", what, s)) end
    to[s] = i
  end
  for s = 0, P - 1 do if from[s] == nil then error(string.format("v2107: stage %d has no %s ops", s, what)) end end
  return from, to
end

function M.schedule(ctx, g, sched)
  local t = ctx.facts.pp
  local P, per = t.stages, t.L // t.stages
  local fst = stages_of(sched.fwd, per, P, 0, P - 1)
  local bst = stages_of(sched.bwd, per, P, P - 1, 0)
  local ff, ft = ranges(fst, P, "forward")
  local bf, bt = ranges(bst, P, "backward")
  local function is_act(n) local b = g.by_name[n]; return b and b.kind == "act" end
  -- who writes each activation (stage, forward or backward)
  local wf, wb = {}, {}
  for i, o in ipairs(sched.fwd) do for _, n in ipairs(o.outs) do if is_act(n) and wf[n] == nil then wf[n] = fst[i] end end end
  for i, o in ipairs(sched.bwd) do for _, n in ipairs(o.outs) do if is_act(n) and wb[n] == nil then wb[n] = bst[i] end end end
  -- the boundary of stages s-1 | s: the activations stage s's forward reads from earlier stages
  local bound = {}
  for i, o in ipairs(sched.fwd) do
    for _, n in ipairs(o.ins) do
      local s = fst[i]
      if is_act(n) and wf[n] ~= nil and wf[n] ~= s then
        if wf[n] ~= s - 1 or (bound[s] and bound[s] ~= n) then
          error(string.format("v2107: stage %d's forward reads '%s' of stage %d: only one activation may cross each boundary", s, n, wf[n]))
        end
        bound[s] = n
      end
    end
  end
  for s = 1, P - 1 do
    if not bound[s] then error(string.format("v2107: no activation crosses the boundary of stages %d and %d", s - 1, s)) end
    if wb["d:" .. bound[s]] ~= s then error(string.format("v2107: the gradient of boundary '%s' is not written by stage %d's backward", bound[s], s)) end
  end
  -- a stage's backward reads only its own stage's activations, its input boundary and the
  -- gradient of its output boundary
  for i, o in ipairs(sched.bwd) do
    local s = bst[i]
    for _, n in ipairs(o.ins) do
      if is_act(n) then
        local own = (wf[n] == s) or (wb[n] == s) or (n == bound[s]) or (s < P - 1 and n == "d:" .. bound[s + 1])
        if not own then error(string.format("v2107: stage %d's backward reads '%s', written by another stage", s, n)) end
      end
    end
  end
  local st = U.array()
  for s = 0, P - 1 do
    st[#st + 1] = { fwd = U.array({ ff[s], ft[s] }), bwd = U.array({ bf[s], bt[s] }),
      layers = U.array({ s * per, (s + 1) * per }), recv = bound[s] or "", send = bound[s + 1] or "" }
  end
  t.plan_stages = st
end

function M.sections(ctx, plan)
  local t = ctx.facts.pp
  plan.train.pp = t.stages
  if not ctx.cfg.active.v2103 then plan.train.grad_accum = t.m end
  plan.pp = { stages = t.stages, schedule = t.schedule, stage = t.plan_stages }
  local C = plan.model.C
  ctx.contribute(string.format("plan cut into %d pipeline stages of %d layers (%s schedule, %d micro-batches per step by default): per micro-batch one B x T x %d activation sent forward and its gradient back at each of %d boundaries",
    t.stages, t.L // t.stages, t.schedule, plan.train.grad_accum, C, t.stages - 1))
end

return M
