-- progressive.lua — `gen progressive TREE --stages M1:N1,M2:N2,... -o DIR [GEN_OPTIONS] -- TRAIN_ARGS`
-- (v2150): progressive training as one run of stages. Every stage's model gets its own trainer
-- (re-planned and re-specialized: DIR/stage_K/trainer, from TREE with the same GEN_OPTIONS); stage 1
-- trains N1 steps of a run of N1 + N2 + ... steps, its final checkpoint is grown into stage 2's
-- model by `gen grow` (v2151 depth, v2152/v2153 width; function-preserving by default), and stage 2
-- resumes from a checkpoint holding the grown weights and stage 1's step, RNG and data position
-- (hyp.prog_handoff, generator/progressive_lua.c), so the global step, the learning-rate schedule
-- (spanning the whole run) and the data continue; and so on. At each boundary the loss of one step at
-- lr 0 on the same batch is measured before and after the growth (the function-preservation check).
-- Writes DIR/metrics.jsonl (every stage's rows with a "stage" field, and one "grow" row per
-- boundary), DIR/progressive.json and the stages' logs and checkpoints. Never: leaves DIR behind
-- when it refuses its input (every check runs before the first training step), or edits TREE.
local U = require("util")
local M = {}

local USAGE = [[
usage:
  gen progressive TREE --stages MODEL:STEPS,MODEL:STEPS[,...] -o DIR [--depth identity|stack]
                  [--noise R] [--grow-seed S] [GEN_OPTIONS...] -- TRAIN_ARGS...
      Progressive training (v2150): one run whose model grows between stages. MODEL is a model of
      the tree (specs/models/NAME.yaml) or a model file; STEPS the stage's steps. Each stage's
      trainer is generated from TREE with GEN_OPTIONS (e.g. --enable adamw --target cpu --batch 4
      --seq 32; not --model or -o); each model must be growable from the one before (gen grow:
      more layers, a wider MLP, a wider d_model with heads of the same size; same family and
      vocabulary). The global step, the learning-rate schedule (over the sum of the stages'
      steps) and the data position carry over; the optimizer state is carried for every tensor
      whose shape does not change and starts at zero for new or widened ones. --depth, --noise and
      --grow-seed go to gen grow. TRAIN_ARGS go to every stage's train (they must give --data or
      --stream, not --steps: gen progressive sets --steps, --ckpt-dir, --metrics, --resume).
      Writes DIR/metrics.jsonl (a "stage" field on every row; a "grow" row per boundary with the
      loss of one step at lr 0 on the same batch before and after), DIR/progressive.json.
]]

local q, run, tail = U.shq, U.run_logged, U.tail_lines

local function rows(path)
  local r = {}
  for l in ((hyp.read_file(path) or "") .. "\n"):gmatch("([^\n]*)\n") do
    if l ~= "" then
      local ok, v = pcall(hyp.json_decode, l)
      if ok and type(v) == "table" then r[#r + 1] = { line = l, v = v } end
    end
  end
  return r
end

-- the checkpoint step directory `step` as the only checkpoint of a new directory `to`
local function ckpt_copy(step_dir, to)
  local name = step_dir:match("([^/]+)/*$")
  assert(hyp.mkdir_p(to .. "/" .. name))
  for _, f in ipairs(hyp.list_dir(step_dir) or {}) do assert(hyp.copy_file(step_dir .. "/" .. f, to .. "/" .. name .. "/" .. f)) end
  assert(hyp.write_file(to .. "/latest", name .. "\n"))
end

-- whether plan model b can be grown from a by gen grow (the checks of grow.lua, before any training)
local function growable(a, b, where)
  local function no(what, fix) U.fail(where, what, fix) end
  if (a.arch == "gpt2") ~= (b.arch == "gpt2") then no(string.format("a %s model cannot grow into a %s model", a.arch, b.arch), "give every stage a model of one family") end
  if a.V ~= b.V then no(string.format("the vocabulary changes (%d -> %d)", a.V, b.V), "give every stage the same vocab_size") end
  if b.L < a.L or b.H < a.H or b.C < a.C or b.NH < a.NH or b.NKV < a.NKV then
    no(string.format("%s (%d layers, MLP %d, d_model %d, %d heads) is smaller than %s (%d, %d, %d, %d) in some dimension", b.name, b.L, b.H, b.C, b.NH, a.name, a.L, a.H, a.C, a.NH),
      "list the stages from the smallest model to the largest; each may only grow")
  end
  if b.L == a.L and b.H == a.H and b.C == a.C then no(string.format("%s is not larger than %s", b.name, a.name), "drop the stage, or give it a model with more layers or width") end
  if a.C // a.NH ~= b.C // b.NH or a.C % a.NH ~= 0 or b.C % b.NH ~= 0 then
    no(string.format("the head size changes (%d / %d heads -> %d / %d)", a.C, a.NH, b.C, b.NH), string.format("give %s n_heads = d_model / %d", b.name, a.C // a.NH))
  end
  if a.NH % a.NKV ~= 0 or b.NH % b.NKV ~= 0 or a.NH // a.NKV ~= b.NH // b.NKV then
    no("the query heads per kv head change", string.format("give %s n_kv_heads = n_heads / %d", b.name, a.NH // a.NKV))
  end
end

function M.main(args, parse, generate)
  local split
  for i, a in ipairs(args) do if a == "--" then split = i; break end end
  local mine = split and { table.unpack(args, 1, split - 1) } or args
  local targs = split and { table.unpack(args, split + 1) } or {}
  for _, a in ipairs(mine) do if a == "--help" or a == "-h" then io.write(USAGE); return 0 end end
  local ex = "e.g. gen progressive specs/v2500.yaml --stages tiny-2L.yaml:200,tiny:400 -o run --enable adamw --target cpu -- --data data"
  -- own options out; the rest (after TREE) are gen's options for every stage
  local own = { ["--stages"] = true, ["-o"] = true, ["--depth"] = true, ["--noise"] = true, ["--grow-seed"] = true }
  local o, gargs, tree = {}, {}, nil
  local i = 1
  while i <= #mine do
    local a = mine[i]
    if own[a] then
      if mine[i + 1] == nil then U.fail("<command line>", a .. " needs a value", ex) end
      o[a] = mine[i + 1]; i = i + 2
    elseif a == "--model" or a == "-o" or a:match("^%-%-model=") then
      U.fail("<command line>", "gen progressive sets --model per stage", "give the models in --stages")
    elseif not tree and a:sub(1, 1) ~= "-" then tree = a; i = i + 1
    else gargs[#gargs + 1] = a; i = i + 1 end
  end
  if not tree then U.fail("<command line>", "gen progressive needs the tree file", ex) end
  if not o["-o"] then U.fail("<command line>", "gen progressive needs -o DIR", ex) end
  if not o["--stages"] then U.fail("<command line>", "gen progressive needs --stages MODEL:STEPS,MODEL:STEPS", ex) end
  local depth = o["--depth"] or "identity"
  if depth ~= "identity" and depth ~= "stack" then U.fail("<command line>", "--depth '" .. depth .. "' is not identity or stack", "use --depth identity (function-preserving) or --depth stack") end
  local noise = tonumber(o["--noise"] or "0")
  if not noise or noise < 0 or noise > 1 then U.fail("<command line>", "--noise must be a number in [0, 1]", "e.g. --noise 0.01, or leave it out") end
  local gseed = tonumber(o["--grow-seed"] or "1")
  if not gseed or gseed < 0 or gseed ~= math.floor(gseed) then U.fail("<command line>", "--grow-seed must be a non-negative integer", "e.g. --grow-seed 1") end

  local stages, total = {}, 0
  for item in (o["--stages"] .. ","):gmatch("([^,]*),") do
    local m, n = item:match("^(.+):(%d+)$")
    n = tonumber(n)
    if not m or not n or n < 1 then U.fail("--stages", "'" .. item .. "' is not MODEL:STEPS with STEPS >= 1", "e.g. --stages tiny-2L.yaml:200,tiny:400") end
    local mpath = m:match("%.ya?ml$") and m or (U.dirname(tree) .. "/models/" .. m .. ".yaml")
    if hyp.stat(mpath) ~= "file" then U.fail("--stages", "model '" .. m .. "': no file " .. mpath, "give a model name of the tree or a model file") end
    stages[#stages + 1] = { model = m, model_file = mpath, steps = math.tointeger(n), start = total }
    total = total + n
  end
  if #stages < 2 then U.fail("--stages", "progressive training needs at least two stages", ex) end
  local data
  for k, a in ipairs(targs) do
    if a == "--data" or a == "--stream" then data = targs[k + 1] or "" end
    for _, bad in ipairs({ "--steps", "--ckpt-dir", "--metrics", "--init-from", "--resume", "--stop-after" }) do
      if a == bad or a:sub(1, #bad + 1) == bad .. "=" then U.fail("<command line>", "gen progressive sets " .. bad .. " itself", "drop it from the arguments after -- (the stages give the steps)") end
    end
  end
  if not data then U.fail("<command line>", "the arguments after -- must give --data DIR (or --stream FILES)", ex) end
  if not data:find("[,*]") and not hyp.stat(data) then U.fail(data, "no such data", "make it with gen data TEXT -o " .. data) end
  local dir = o["-o"]
  if hyp.stat(dir) then U.fail(dir, "already exists", "choose a new -o directory") end

  -- every stage's trainer, and the growth checks, before any training: a refusal leaves no DIR
  assert(hyp.mkdir_p(dir))
  local ok, err = pcall(function()
    for k, s in ipairs(stages) do
      s.dir = string.format("%s/stage_%d", dir, k)
      s.trainer = s.dir .. "/trainer"
      local argv = { tree, "--model", s.model_file }
      for _, a in ipairs(gargs) do argv[#argv + 1] = a end
      argv[#argv + 1] = "-o"; argv[#argv + 1] = s.trainer
      local gok, e = pcall(generate, argv)
      if not gok then
        io.stderr:write(U.is_error(e) and U.format_errors(e.list) or tostring(e), "\n")
        U.fail("--stages", "gen refused stage " .. k .. "'s trainer (" .. s.model .. ")", "fix the model or the gen options")
      end
      s.plan = hyp.json_decode(assert(hyp.read_file(s.trainer .. "/plan.json")))
      -- what the handoff checkpoint cannot carry (progressive_lua.c refuses it too, after stage 1)
      for _, st in ipairs((s.plan.optimizer or {}).state or {}) do
        if type(st) == "table" and st.numel then
          U.fail("<command line>", "the " .. tostring(s.plan.optimizer.kind) .. " optimizer keeps packed states whose layout depends on the shapes",
            "use adamw, sgd or lion for progressive training")
        end
      end
      if type(s.plan.fp8) == "table" and type(s.plan.fp8.slots) == "table" and #s.plan.fp8.slots > 0 then
        U.fail("<command line>", "FP8 scaling states are per tensor of one shape", "train the stages without FP8")
      end
      if k > 1 then growable(stages[k - 1].plan.model, s.plan.model, "--stages") end
    end
  end)
  if not ok then hyp.rm_rf(dir); error(err, 0) end

  local tps = 0
  do
    local t = stages[1].plan.train or {}
    tps = (t.B or 0) * (t.T or 0) * (t.grad_accum or 1)
    for _, a in ipairs(targs) do if a == "--batch" or a == "--seq" or a == "--grad-accum" then tps = nil end end
  end
  local merged, boundaries = {}, U.array({})
  local function step_dir(s, n) return string.format("%s/ckpt/step_%08d", s.dir, n) end
  for k, s in ipairs(stages) do
    local stop = s.start + s.steps
    if k > 1 then
      local p = stages[k - 1]
      local src = step_dir(p, s.start)
      if hyp.stat(src) ~= "dir" then U.fail(src, "stage " .. (k - 1) .. " left no checkpoint at step " .. s.start, "see " .. p.dir .. "/train.log") end
      local init = s.dir .. "/grown"
      local gok, e = pcall(require("grow").main, { src, "--to", s.trainer, "-o", init, "--depth", depth, "--noise", tostring(noise), "--seed", tostring(math.tointeger(gseed)) }, parse)
      if not gok then error(e, 0) end
      local rc, msg, hs = hyp.prog_handoff(src, p.trainer .. "/plan.json", init, s.trainer .. "/plan.json", s.dir .. "/ckpt")
      if rc ~= 0 then U.fail(s.dir .. "/ckpt", msg, "give every stage the same optimizer, without FP8") end
      -- the function-preservation check: one step at lr 0 on the batch after the boundary, before and after
      local chk = s.dir .. "/check"
      ckpt_copy(src, chk .. "/before")
      ckpt_copy(step_dir(s, s.start), chk .. "/after")
      local loss = {}
      for _, w in ipairs({ { "before", p }, { "after", s } }) do
        local argv = { w[2].trainer .. "/train", table.unpack(targs) }
        for _, a in ipairs({ "--steps", tostring(total), "--stop-after", "1", "--lr", "0", "--resume", "--ckpt-dir", chk .. "/" .. w[1],
          "--metrics", chk .. "/" .. w[1] .. ".jsonl", "--eval-every", "0", "--sample", "0" }) do argv[#argv + 1] = a end
        local rc2 = run(argv, chk .. "/" .. w[1] .. ".log")
        local r = rows(chk .. "/" .. w[1] .. ".jsonl")
        if (rc2 ~= 0 and rc2 ~= 3) or not r[1] or type(r[1].v.loss) ~= "number" then
          io.stderr:write(tail(chk .. "/" .. w[1] .. ".log", 8), "\n")
          U.fail(chk .. "/" .. w[1] .. ".log", "the boundary check's step exited with status " .. rc2, "see the log")
        end
        loss[w[1]] = r[1].v.loss
      end
      hyp.rm_rf(chk .. "/before"); hyp.rm_rf(chk .. "/after")
      local b = { event = "grow", stage = k, step = s.start, from = p.plan.model.name, to = s.plan.model.name,
        params_before = p.plan.model.params, params_after = s.plan.model.params, loss_before = loss.before, loss_after = loss.after,
        optimizer_state_carried = hs.carried, optimizer_state_fresh = hs.fresh }
      boundaries[#boundaries + 1] = b
      merged[#merged + 1] = assert(hyp.json_encode(b))
      io.write(string.format("gen progressive: step %d: %s -> %s; loss of the next step at lr 0: %.8g before, %.8g after; optimizer state carried for %d tensors, fresh for %d\n",
        s.start, b.from, b.to, loss.before, loss.after, hs.carried, hs.fresh))
    end
    local argv = { s.trainer .. "/train", table.unpack(targs) }
    for _, a in ipairs({ "--steps", tostring(total), "--ckpt-dir", s.dir .. "/ckpt", "--metrics", s.dir .. "/metrics.jsonl" }) do argv[#argv + 1] = a end
    if k > 1 then argv[#argv + 1] = "--resume" end
    if k < #stages then argv[#argv + 1] = "--stop-after"; argv[#argv + 1] = tostring(s.steps) end
    io.write(string.format("gen progressive: stage %d: %s, steps %d-%d ...\n", k, s.plan.model.name, s.start + 1, stop))
    io.flush()
    local rc = run(argv, s.dir .. "/train.log")
    if rc ~= 0 and not (rc == 3 and k < #stages) then
      io.stderr:write(tail(s.dir .. "/train.log", 8), "\n")
      U.fail(s.dir .. "/train.log", string.format("stage %d's training exited with status %d", k, rc), "see the log; fix the arguments after --")
    end
    local r = rows(s.dir .. "/metrics.jsonl")
    for _, x in ipairs(r) do merged[#merged + 1] = x.line:gsub("^{", string.format('{"stage":%d,', k), 1) end
    local m = U.metrics_summary(s.dir .. "/metrics.jsonl") or {}
    s.loss, s.val_loss = m.loss, m.val_loss
    s.first_step = r[1] and r[1].v.step
  end
  assert(hyp.write_file(dir .. "/metrics.jsonl", table.concat(merged, "\n") .. "\n"))
  local res = { total_steps = total, stages = U.array({}), boundaries = boundaries, depth = depth, noise = noise }
  local flops = 0
  for k, s in ipairs(stages) do
    local f = tps and s.plan.flops_per_token and s.plan.flops_per_token * tps * s.steps or nil
    if f then flops = flops + f end
    res.stages[k] = { model = s.plan.model.name, params = s.plan.model.params, steps = s.steps, first_step = s.start + 1, last_step = s.start + s.steps,
      flops = f, loss = s.loss, val_loss = s.val_loss }
  end
  res.flops = tps and flops or nil
  res.tokens_per_step = tps
  assert(hyp.write_file(dir .. "/progressive.json", assert(hyp.json_encode(res, true)) .. "\n"))
  io.write(string.format("\nprogressive training (v2150): %d stages, %d steps\n%6s %-16s %12s %12s %12s %10s\n", #stages, total, "stage", "model", "params", "steps", "final loss", "val loss"))
  for k, s in ipairs(res.stages) do
    io.write(string.format("%6d %-16s %12d %12s %12.4f %10s\n", k, s.model, s.params or 0, s.first_step .. "-" .. s.last_step, s.loss or 0 / 0,
      s.val_loss and string.format("%.4f", s.val_loss) or "-"))
  end
  if res.flops then io.write(string.format("training FLOPs %.4g (plans' flops_per_token x %d tokens per step)\n", res.flops, tps)) end
  io.write("wrote " .. dir .. "/metrics.jsonl, " .. dir .. "/progressive.json\n")
  return 0
end

return M
