-- sweep.lua — `gen sweep SWEEP.yaml -o DIR [--parallel N] [--resume]` (v2188): hyperparameter
-- search as trials of `gen --set` + `train` processes on this machine, N at a time: grid, random,
-- or successive halving (Jamieson & Talwalkar 2016; the synchronous form of ASHA, Li et al. 2020),
-- whose rungs stop a trial and resume the best 1/eta of them from their checkpoints. The objective
-- comes from each run's metrics (the last val_loss at the rung's end, or the mean training loss of
-- its last 5% of rows). Writes DIR/trainers/K (one trainer per distinct --set combination),
-- DIR/trials/N/{train.log, metrics.jsonl, ckpt/}, DIR/state.json after every finished job (a
-- --resume run skips what is done) and DIR/results.json; prints a table and the best trial's
-- commands. Never: runs a trial twice, or writes into a finished trial's directory.
local U = require("util")
local M = {}

local USAGE = [[
usage:
  gen sweep SWEEP.yaml -o DIR [--parallel N] [--resume]
      Runs a hyperparameter search (v2188): each trial is a trainer (gen TREE GEN_ARGS --set ...)
      and a train run (TRAIN_ARGS, --steps, the trial's flags), N processes at a time (default:
      the file's parallel, else 1). SWEEP.yaml:
        tree: specs/v2500.yaml            gen: [--enable, adamw, --model, tiny, --target, cpu]
        train: [--data, data, --eval-every, "25"]
        steps: 200                        metric: val_loss | loss
        method: grid | random | halving | pbt   trials: 8 (random, halving, pbt)   seed: 1   parallel: 2
        halving: {min_steps: 25, eta: 2}   pbt: {interval: 50, quantile: 0.25, factors: [0.8, 1.2]}
        space:
          lr: {flag: --lr, log_uniform: [1.0e-4, 1.0e-2]}     (a train flag)
          clip: {set: v2133.max_norm, values: [0.5, 1.0]}       (a gen --set: one trainer per value)
          depth: {model: n_layers, values: [2, 4]}              (v2190: a field of the --model file)
          opt: {enable: true, values: [adamw, lion]}            (v2190: techniques added to --enable)
        (each parameter: values: [...] | uniform: [a, b] | log_uniform: [a, b] | int: [a, b])
      --resume continues DIR: trials and rungs already finished are not run again.
]]

local q = U.shq

local function fmtv(v)
  if math.type(v) == "integer" then return tostring(v) end
  if type(v) == "number" then return string.format("%.6g", v) end
  return tostring(v)
end

-- splitmix64 in Lua integers (wrapping arithmetic): the sweep's own generator, reproducible
local function rng(seed)
  local s = seed
  return function()
    s = s + 0x9E3779B97F4A7C15
    local z = s
    z = (z ~ (z >> 30)) * 0xBF58476D1CE4E5B9
    z = (z ~ (z >> 27)) * 0x94D049BB133111EB
    z = z ~ (z >> 31)
    return ((z >> 11) & 0x1FFFFFFFFFFFFF) / 9007199254740992.0 -- [0, 1)
  end
end

local function check_spec(path, s)
  local function need(cond, where, what, fix) if not cond then U.fail(where, what, fix) end end
  need(type(s) == "table", path, "not a mapping", "see gen sweep --help")
  for _, k in ipairs({ "gen", "train" }) do
    need(type(s[k]) == "table", path, "'" .. k .. "' is not a list of arguments", "e.g. " .. k .. ": [--data, data]")
  end
  need(math.type(s.steps) == "integer" and s.steps >= 1, U.where(s, "steps"), "steps must be a positive integer", "e.g. steps: 200")
  s.method = s.method or "grid"
  need(s.method == "grid" or s.method == "random" or s.method == "halving" or s.method == "pbt", U.where(s, "method"),
    "method '" .. tostring(s.method) .. "' is not grid, random, halving or pbt", "pick one")
  s.metric = s.metric or "val_loss"
  need(s.metric == "val_loss" or s.metric == "loss", U.where(s, "metric"), "metric must be val_loss or loss", "pick one")
  need(type(s.space) == "table" and next(s.space) ~= nil, path, "no search space", "add space: {lr: {flag: --lr, values: [...]}}")
  for name, p in pairs(s.space) do
    local w = U.where(s.space, name)
    need(type(p) == "table", w, "space." .. name .. " is not a mapping", "e.g. {flag: --lr, values: [1e-3, 3e-3]}")
    local where_to = (p.flag and 1 or 0) + (p.set and 1 or 0) + (p.model and 1 or 0) + (p.enable and 1 or 0)
    need(where_to == 1, w, "space." .. name .. " needs exactly one of flag (a train flag), set (a gen vNNNN.param), model (a field of the model file) or enable (techniques added to --enable)",
      "add flag: --lr, set: v2133.max_norm, model: n_layers or enable: true")
    need(not p.enable or p.values, w, "space." .. name .. ": enable takes values (alias lists, \"\" for none)", "e.g. values: [\"\", \"recompute\"]")
    need(not p.model or type(p.model) == "string", w, "space." .. name .. ".model must name a field of the model file", "e.g. model: n_layers")
    local kinds = 0
    for _, k in ipairs({ "values", "uniform", "log_uniform", "int" }) do if p[k] ~= nil then kinds = kinds + 1 end end
    need(kinds == 1, w, "space." .. name .. " needs exactly one of values, uniform, log_uniform, int", "e.g. values: [1e-3, 3e-3]")
    for _, k in ipairs({ "uniform", "log_uniform", "int" }) do
      if p[k] then
        local r = p[k]
        need(type(r) == "table" and #r == 2 and type(r[1]) == "number" and type(r[2]) == "number" and r[1] < r[2],
          w, "space." .. name .. "." .. k .. " must be [low, high] with low < high", "e.g. [1.0e-4, 1.0e-2]")
        need(k ~= "log_uniform" or r[1] > 0, w, "space." .. name .. ".log_uniform needs a positive low", "e.g. [1.0e-4, 1.0e-2]")
      end
    end
    if p.values then need(type(p.values) == "table" and #p.values >= 1, w, "space." .. name .. ".values is empty", "list at least one value") end
    need(s.method ~= "grid" or p.values, w, "grid search needs values for every parameter (space." .. name .. ")", "give values: [...] or use method: random")
  end
  s.trials = s.trials or 8
  need(math.type(s.trials) == "integer" and s.trials >= 1 and s.trials <= 10000, U.where(s, "trials"), "trials must be an integer in [1, 10000]", "e.g. trials: 8")
  s.seed = s.seed or 1
  need(math.type(s.seed) == "integer" and s.seed >= 0, U.where(s, "seed"), "seed must be a non-negative integer", "e.g. seed: 1")
  if s.method == "pbt" then
    s.pbt = s.pbt or {}
    local b = s.pbt
    b.interval = b.interval or math.max(1, s.steps // 4)
    b.quantile = b.quantile or 0.25
    b.factors = b.factors or { 0.8, 1.2 }
    need(math.type(b.interval) == "integer" and b.interval >= 1 and b.interval < s.steps, U.where(s, "pbt"), "pbt.interval must be an integer in [1, steps)", "e.g. interval: " .. math.max(1, s.steps // 4))
    need(type(b.quantile) == "number" and b.quantile > 0 and b.quantile <= 0.5, U.where(s, "pbt"), "pbt.quantile must be in (0, 0.5]", "e.g. quantile: 0.25")
    need(type(b.factors) == "table" and #b.factors >= 1, U.where(s, "pbt"), "pbt.factors must list perturbation factors", "e.g. factors: [0.8, 1.2]")
    for name, p in pairs(s.space) do
      need(p.flag ~= nil, U.where(s.space, name), "pbt changes hyperparameters of running members: space." .. name .. " must be a train flag, not a gen --set", "use flag: or another method")
    end
    need(s.trials >= 2, U.where(s, "trials"), "pbt needs a population of at least 2", "e.g. trials: 8")
  end
  if s.method == "halving" then
    s.halving = s.halving or {}
    local h = s.halving
    h.eta = h.eta or 2
    h.min_steps = h.min_steps or math.max(1, s.steps // 8)
    need(math.type(h.eta) == "integer" and h.eta >= 2, U.where(s, "halving"), "halving.eta must be an integer >= 2", "e.g. eta: 3")
    need(math.type(h.min_steps) == "integer" and h.min_steps >= 1 and h.min_steps < s.steps, U.where(s, "halving"),
      "halving.min_steps must be an integer in [1, steps)", "e.g. min_steps: " .. math.max(1, s.steps // 8))
  end
  for i, a in ipairs(s.train) do
    for _, bad in ipairs({ "--steps", "--ckpt-dir", "--metrics", "--resume", "--stop-after" }) do
      need(tostring(a) ~= bad, U.where(s.train, i), "train sets " .. bad .. " itself", "drop it from train")
    end
  end
end

-- the configurations to try: grid = the product of every values list (in the file's order of
-- names, sorted); random / halving = `trials` draws
local function configs(s)
  local names = U.sorted_keys(s.space)
  local out = {}
  if s.method == "grid" then
    local function rec(i, cur)
      if i > #names then local c = {}; for k, v in pairs(cur) do c[k] = v end; out[#out + 1] = c; return end
      for _, v in ipairs(s.space[names[i]].values) do cur[names[i]] = v; rec(i + 1, cur) end
    end
    rec(1, {})
    return out, names
  end
  local r = rng(s.seed)
  for _ = 1, s.trials do
    local c = {}
    for _, n in ipairs(names) do
      local p = s.space[n]
      local u = r()
      if p.values then c[n] = p.values[math.floor(u * #p.values) + 1]
      elseif p.uniform then c[n] = p.uniform[1] + u * (p.uniform[2] - p.uniform[1])
      elseif p.log_uniform then c[n] = math.exp(math.log(p.log_uniform[1]) + u * (math.log(p.log_uniform[2]) - math.log(p.log_uniform[1])))
      else c[n] = math.tointeger(p.int[1] + math.floor(u * (p.int[2] - p.int[1] + 1))) end
    end
    out[#out + 1] = c
  end
  return out, names
end

-- the objective of a run: its last val_loss, or its mean final training loss (U.metrics_summary)
local function metric_of(path, which)
  local m = U.metrics_summary(path)
  if not m then return nil end
  if which == "val_loss" then return m.val_loss end
  return m.loss
end

-- copies directory src into dst (created), files and subdirectories
local copy_tree
function copy_tree(src, dst)
  assert(hyp.mkdir_p(dst))
  for _, f in ipairs(assert(hyp.list_dir(src))) do
    local a, b = src .. "/" .. f, dst .. "/" .. f
    if hyp.stat(a) == "dir" then copy_tree(a, b) else assert(hyp.copy_file(a, b)) end
  end
end

-- a pool of at most n background processes; each job: {argv, log, done = function(rc)}
local function pool(n, jobs)
  local running, next_job = {}, 1
  local function start(j)
    local parts = {}
    for i, a in ipairs(j.argv) do parts[i] = q(a) end
    j.rcfile = j.log .. ".rc"
    os.remove(j.rcfile)
    os.execute("( " .. table.concat(parts, " ") .. " > " .. q(j.log) .. " 2>&1; echo $? > " .. q(j.rcfile .. ".tmp") ..
      " && mv " .. q(j.rcfile .. ".tmp") .. " " .. q(j.rcfile) .. " ) &")
    running[#running + 1] = j
  end
  while next_job <= #jobs or #running > 0 do
    while #running < n and next_job <= #jobs do start(jobs[next_job]); next_job = next_job + 1 end
    local still = {}
    for _, j in ipairs(running) do
      local t = hyp.read_file(j.rcfile)
      if t then j.done(tonumber(t:match("%d+")) or 1) else still[#still + 1] = j end
    end
    running = still
    if #running > 0 then os.execute("sleep 0.1") end
  end
end

function M.main(args, parse, generate)
  for _, a in ipairs(args) do if a == "--help" or a == "-h" then io.write(USAGE); return 0 end end
  local o = parse(args, { ["-o"] = "value", ["--parallel"] = "value", ["--resume"] = "flag" }, 1)
  local path, dir = o._pos[1], o["-o"]
  if not path or not dir then U.fail("<command line>", "gen sweep needs SWEEP.yaml and -o DIR", "e.g. gen sweep sweep.yaml -o sweeps/lr") end
  local doc, err = hyp.load_yaml(path)
  if not doc then U.fail(path, err, "fix the YAML") end
  local s = doc
  check_spec(path, s)
  s = U.plain(s)
  local par = tonumber(o["--parallel"] or s.parallel or 1)
  if not par or par < 1 or par ~= math.floor(par) or par > 256 then U.fail("<command line>", "--parallel must be an integer in [1, 256]", "e.g. --parallel 2") end
  local state_path = dir .. "/state.json"
  local state
  if o["--resume"] then
    if hyp.stat(state_path) ~= "file" then U.fail(dir, "no state.json to resume", "run without --resume first") end
    state = hyp.json_decode(assert(hyp.read_file(state_path)))
    if state.spec_text ~= hyp.read_file(path) then U.fail(path, "differs from the file the sweep in " .. dir .. " started with", "resume with the same SWEEP.yaml, or start a new -o") end
  else
    if hyp.stat(dir) then U.fail(dir, "already exists", "choose a new -o, or --resume it") end
    local cs, names = configs(s)
    state = { spec_text = hyp.read_file(path), names = names, trials = U.array({}), trainers = {} }
    for i, c in ipairs(cs) do state.trials[i] = { id = i - 1, config = c, rungs = {} } end
  end
  assert(hyp.mkdir_p(dir .. "/trials"))
  assert(hyp.mkdir_p(dir .. "/trainers"))
  local function save() assert(hyp.write_file(state_path, assert(hyp.json_encode(state, true)) .. "\n")) end
  save()
  state = hyp.json_decode(assert(hyp.read_file(state_path))) -- a fresh and a resumed sweep see the same values

  -- trainers: one per distinct combination of gen --set values
  local tree = s.tree or "specs/v2500.yaml"
  local function trainer_of(c)
    local sets, key, fields, enables = {}, {}, {}, {}
    for _, n in ipairs(state.names) do
      local p = s.space[n]
      if p.set then sets[#sets + 1] = p.set .. "=" .. fmtv(c[n]); key[#key + 1] = sets[#sets] end
      if p.model then fields[p.model] = c[n]; key[#key + 1] = p.model .. "=" .. fmtv(c[n]) end
      if p.enable then enables[#enables + 1] = tostring(c[n]); key[#key + 1] = n .. "=" .. (tostring(c[n]) ~= "" and tostring(c[n]) or "none") end
    end
    local k = #key == 0 and "base" or table.concat(key, ","):gsub("[^%w%.%-=,]", "_")
    k = k:gsub(",", "_")
    local tdir = dir .. "/trainers/" .. k
    if not state.trainers[k] then
      local argv = { tree }
      local model_at
      for _, a in ipairs(s.gen) do
        argv[#argv + 1] = tostring(a)
        if a == "--model" then model_at = #argv + 1 end
      end
      if next(fields) then -- v2190: this trial's shape as a model file: the base model with the fields changed
        if not model_at or not argv[model_at] then U.fail(path, "space has model fields but gen gives no --model", "add --model NAME to gen") end
        local base = argv[model_at]
        local mpath = base:match("%.ya?ml$") and base or (U.dirname(tree) .. "/models/" .. base .. ".yaml")
        local doc, err = hyp.load_yaml(mpath)
        if not doc then U.fail(mpath, err, "give --model a model name of the tree or a model file") end
        local m = U.plain(doc)
        for f, v in pairs(fields) do
          if m[f] == nil then U.fail(path, "the model file " .. mpath .. " has no field '" .. f .. "'", "use one of its fields") end
          m[f] = v
        end
        m.name = tostring(m.name) .. "-" .. k
        m.params_note = nil
        assert(hyp.mkdir_p(dir .. "/models"))
        local out = {}
        for _, f in ipairs(U.sorted_keys(m)) do out[#out + 1] = f .. ": " .. assert(hyp.json_encode(m[f])) end
        local mfile = dir .. "/models/" .. k .. ".yaml"
        assert(hyp.write_file(mfile, table.concat(out, "\n") .. "\n"))
        argv[model_at] = mfile
      end
      for _, x in ipairs(enables) do if x ~= "" then argv[#argv + 1] = "--enable"; argv[#argv + 1] = x end end
      for _, x in ipairs(sets) do argv[#argv + 1] = "--set"; argv[#argv + 1] = x end
      argv[#argv + 1] = "-o"; argv[#argv + 1] = tdir
      local ok, e = pcall(generate, argv) -- gen's own generate command, in this process
      if not ok then
        io.stderr:write(U.is_error(e) and U.format_errors(e.list) or tostring(e), "\n")
        U.fail(path, "gen refused the trainer for " .. (#sets > 0 and table.concat(sets, " ") or "the base selection"), "fix gen or space")
      end
      state.trainers[k] = tdir
      save()
    end
    return state.trainers[k]
  end

  -- rungs: halving stops trials at min_steps * eta^k; the others run to `steps` at once
  local rungs = {}
  if s.method == "pbt" then
    local r = s.pbt.interval
    while r < s.steps do rungs[#rungs + 1] = r; r = r + s.pbt.interval end
  end
  if s.method == "halving" then
    local r = s.halving.min_steps
    while r < s.steps do rungs[#rungs + 1] = r; r = r * s.halving.eta end
  end
  rungs[#rungs + 1] = s.steps
  local active = {}
  for _, t in ipairs(state.trials) do active[#active + 1] = t end
  for ri, budget in ipairs(rungs) do
    local jobs = {}
    for _, t in ipairs(active) do
      local rk = tostring(budget)
      if not (t.rungs[rk] and t.rungs[rk].rc == 0) then
        local td = string.format("%s/trials/%d", dir, t.id)
        assert(hyp.mkdir_p(td))
        local exe = trainer_of(t.config) .. "/train"
        local argv = { exe }
        for _, a in ipairs(s.train) do argv[#argv + 1] = tostring(a) end
        for _, a in ipairs({ "--steps", tostring(s.steps), "--ckpt-dir", td .. "/ckpt", "--metrics", td .. "/metrics.jsonl" }) do argv[#argv + 1] = a end
        if budget < s.steps then argv[#argv + 1] = "--stop-after"; argv[#argv + 1] = tostring(budget - (t.done_steps or 0)) end
        if (t.done_steps or 0) > 0 then argv[#argv + 1] = "--resume" end
        for _, n in ipairs(state.names) do
          if s.space[n].flag then argv[#argv + 1] = s.space[n].flag; argv[#argv + 1] = fmtv(t.config[n]) end
        end
        jobs[#jobs + 1] = { argv = argv, log = string.format("%s/train.%d.log", td, budget), done = function(rc)
          local m = rc == 0 and metric_of(td .. "/metrics.jsonl", s.metric) or nil
          t.rungs[rk] = { rc = rc, metric = m }
          if rc == 0 then t.done_steps = budget end
          io.write(string.format("gen sweep: trial %d to step %d: %s\n", t.id, budget, rc == 0 and (m and string.format("%s %.4f", s.metric, m) or "no " .. s.metric) or ("exit " .. rc)))
          io.flush()
          save()
        end }
      end
    end
    pool(par, jobs)
    -- keep the best 1/eta (halving), ranked by this rung's metric; failed trials drop out
    local ranked = {}
    for _, t in ipairs(active) do
      local r = t.rungs[tostring(budget)]
      if r and r.rc == 0 and r.metric then ranked[#ranked + 1] = t end
    end
    table.sort(ranked, function(a, b)
      local x, y = a.rungs[tostring(budget)].metric, b.rungs[tostring(budget)].metric
      if x ~= y then return x < y end
      return a.id < b.id
    end)
    if ri < #rungs and s.method == "pbt" and not state["pbt_" .. budget] and #ranked >= 2 then
      -- exploit: the worst quantile continue from a copy of the best quantile's checkpoints;
      -- explore: their hyperparameters are the donor's, each perturbed (Jaderberg et al. 2017)
      local nq = math.max(1, math.floor(s.pbt.quantile * #ranked))
      state.rng = state.rng or (s.seed * 7919 + 1)
      local r = rng(state.rng + budget)
      for k = 1, nq do
        local i, j = ranked[#ranked - k + 1], ranked[(k - 1) % nq + 1]
        local di, dj = string.format("%s/trials/%d/ckpt", dir, i.id), string.format("%s/trials/%d/ckpt", dir, j.id)
        assert(hyp.rm_rf(di))
        copy_tree(dj, di)
        local c = {}
        for _, n in ipairs(state.names) do
          local p, v = s.space[n], j.config[n]
          if p.values then
            local at = 1
            for x, y in ipairs(p.values) do if y == v then at = x end end
            at = math.max(1, math.min(#p.values, at + (r() < 0.5 and -1 or 1)))
            v = p.values[at]
          else
            local lo, hi = table.unpack(p.uniform or p.log_uniform or p.int)
            v = math.max(lo, math.min(hi, v * s.pbt.factors[math.floor(r() * #s.pbt.factors) + 1]))
            if p.int then v = math.tointeger(math.floor(v + 0.5)) end
          end
          c[n] = v
        end
        i.history = i.history or {}
        i.history[#i.history + 1] = { step = budget, from = j.id, from_config = j.config, config = c }
        i.config = c
        io.write(string.format("gen sweep: pbt at step %d: trial %d continues from trial %d's checkpoint with %s\n", budget, i.id, j.id,
          (function() local t = {} for _, n in ipairs(state.names) do t[#t + 1] = n .. "=" .. fmtv(c[n]) end return table.concat(t, " ") end)()))
      end
      state["pbt_" .. budget] = true
      save()
    end
    if ri < #rungs and s.method == "halving" then
      local keep = math.max(1, math.ceil(#ranked / s.halving.eta))
      active = { table.unpack(ranked, 1, keep) }
      io.write(string.format("gen sweep: rung %d (step %d): %d of %d trials go on\n", ri, budget, #active, #ranked))
    end
  end

  -- results: every trial's last rung
  local rows = {}
  for _, t in ipairs(state.trials) do
    local best_budget, m = 0, nil
    for rk, r in pairs(t.rungs) do
      local b = tonumber(rk)
      if r.rc == 0 and r.metric and b > best_budget then best_budget, m = b, r.metric end
    end
    rows[#rows + 1] = { id = t.id, config = t.config, steps = best_budget, metric = m }
  end
  table.sort(rows, function(a, b)
    if a.steps ~= b.steps then return a.steps > b.steps end
    if (a.metric ~= nil) ~= (b.metric ~= nil) then return a.metric ~= nil end
    if a.metric and a.metric ~= b.metric then return a.metric < b.metric end
    return a.id < b.id
  end)
  local res = { method = s.method, metric = s.metric, steps = s.steps, trials = U.array(rows), best = rows[1] }
  assert(hyp.write_file(dir .. "/results.json", assert(hyp.json_encode(res, true)) .. "\n"))
  io.write(string.format("\n%s search, %d trials, metric %s (lower is better):\n", s.method, #rows, s.metric))
  local hdr = { string.format("%5s %6s %10s", "trial", "steps", s.metric) }
  for _, n in ipairs(state.names) do hdr[#hdr + 1] = string.format(" %12s", n) end
  io.write(table.concat(hdr), "\n")
  for _, r in ipairs(rows) do
    local line = { string.format("%5d %6d %10s", r.id, r.steps, r.metric and string.format("%.4f", r.metric) or "-") }
    for _, n in ipairs(state.names) do line[#line + 1] = string.format(" %12s", fmtv(r.config[n])) end
    io.write(table.concat(line), "\n")
  end
  if rows[1] and rows[1].metric then
    io.write(string.format("best: trial %d (%s)\n", rows[1].id, dir .. "/trials/" .. rows[1].id))
  end
  io.write("wrote " .. dir .. "/results.json\n")
  return 0
end

return M
