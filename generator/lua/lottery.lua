-- lottery.lua — `gen lottery OUT -o DIR --rounds R --rate p --rewind K -- TRAIN_ARGS...` (v2155):
-- iterative magnitude pruning with rewinding (Frankle & Carbin 2019; late rewinding, Frankle et al.
-- 2020) as a loop over training runs of the trainer in OUT (generated with --enable lottery-ticket):
-- round 0 trains densely and checkpoints step K; round r prunes `rate` of each prunable matrix's
-- remaining weights by round r-1's final magnitudes, rewinds the survivors to step K
-- (hyp.lottery_rewind on the `gen export` of both checkpoints) and retrains from there with the
-- mask held. Writes DIR/round_N/{train.log, metrics.jsonl, ckpt/}, DIR/init_N (the rewound model),
-- DIR/lottery.json, and prints a table. Never: edits the trainer or a round's checkpoints.
local U = require("util")
local M = {}

local USAGE = [[
usage:
  gen lottery OUT -o DIR [--rounds R] [--rate P] [--rewind K] [--control] -- TRAIN_ARGS...
      Iterative magnitude pruning with rewinding (the lottery ticket, v2155) over runs of the
      trainer in OUT (generated with --enable lottery-ticket): round 0 trains densely, each later
      round prunes P (default: the plan's v2155.rate) of every layer matrix's remaining weights by
      the previous round's final magnitudes, rewinds the survivors to step K (default: 5% of the
      run) and retrains. TRAIN_ARGS go to every round's `train` (they must give --data and
      --steps); gen lottery adds --ckpt-dir, --ckpt-every, --metrics and --init-from.
  --rounds R    pruning rounds after the dense one (default 3)
  --control     one more run: the last round's mask on a fresh random initialization (the
                trainer's init at seed + 1), trained like a round (the ticket's control)
]]

local q, run, tail = U.shq, U.run_logged, U.tail_lines

function M.main(args, parse)
  local split
  for i, a in ipairs(args) do if a == "--" then split = i; break end end
  local mine = split and { table.unpack(args, 1, split - 1) } or args
  local targs = split and { table.unpack(args, split + 1) } or {}
  for _, a in ipairs(mine) do if a == "--help" or a == "-h" then io.write(USAGE); return 0 end end
  local o = parse(mine, { ["-o"] = "value", ["--rounds"] = "value", ["--rate"] = "value", ["--rewind"] = "value", ["--control"] = "flag" }, 1)
  local out = o._pos[1]
  if not out then U.fail("<command line>", "gen lottery needs the trainer's directory", "e.g. gen lottery out/tiny -o lottery -- --data data --steps 1000") end
  if not o["-o"] then U.fail("<command line>", "gen lottery needs -o DIR", "e.g. gen lottery " .. out .. " -o lottery -- --data data --steps 1000") end
  local plan_path = out .. "/plan.json"
  if hyp.stat(plan_path) ~= "file" or hyp.stat(out .. "/train") ~= "file" then
    U.fail(out, "no trainer here (plan.json and train)", "give the -o directory of gen")
  end
  local plan = hyp.json_decode(assert(hyp.read_file(plan_path)))
  local pr = type(plan) == "table" and plan.pruning or nil
  if type(pr) ~= "table" or pr.schedule ~= "fixed" then
    U.fail(plan_path, "the trainer was not generated for the lottery ticket (its pruning masks are not fixed)", "regenerate it with --enable lottery-ticket")
  end
  local steps
  for i, a in ipairs(targs) do
    if a == "--steps" then steps = tonumber(targs[i + 1]) end
    local v = a:match("^%-%-steps=(.*)$"); if v then steps = tonumber(v) end
    for _, bad in ipairs({ "--ckpt-dir", "--ckpt-every", "--metrics", "--init-from", "--resume" }) do
      if a == bad or a:sub(1, #bad + 1) == bad .. "=" then U.fail("<command line>", "gen lottery sets " .. bad .. " itself", "drop it from the arguments after --") end
    end
  end
  if not steps or steps < 2 or steps ~= math.floor(steps) then U.fail("<command line>", "the arguments after -- must give --steps N (N >= 2)", "e.g. -- --data data --steps 1000") end
  local function num(name, default, lo, hi, int)
    local v = o[name]
    if v == nil then return default end
    local n = tonumber(v)
    if not n or n < lo or n > hi or (int and n ~= math.floor(n)) then
      U.fail("<command line>", string.format("%s '%s' is not %s in [%s, %s]", name, v, int and "an integer" or "a number", lo, hi), "e.g. " .. name .. " " .. default)
    end
    return int and math.tointeger(n) or n
  end
  local rounds = num("--rounds", 3, 1, 100, true)
  local rate = num("--rate", pr.lottery_rate or 0.2, 0.01, 0.95, false)
  local rewind = num("--rewind", math.max(1, steps // 20), 1, steps - 1, true)
  local dir = o["-o"]
  if hyp.stat(dir) then U.fail(dir, "already exists", "choose a new -o directory (a lottery never overwrites rounds)") end
  assert(hyp.mkdir_p(dir))

  local res = { rounds = U.array({}), rate = rate, rewind = rewind, steps = steps, trainer = out }
  -- round r (a number, or "control"); extra: arguments after the trainer's own (later flags win)
  local function do_round(r, init, extra)
    local rd = string.format("%s/round_%s", dir, r)
    assert(hyp.mkdir_p(rd))
    local argv = { out .. "/train", table.unpack(targs) }
    for _, a in ipairs({ "--ckpt-dir", rd .. "/ckpt", "--ckpt-every", tostring(r == 0 and rewind or steps), "--keep", "1000",
      "--metrics", rd .. "/metrics.jsonl" }) do argv[#argv + 1] = a end
    if init then argv[#argv + 1] = "--init-from"; argv[#argv + 1] = init end
    for _, a in ipairs(extra or {}) do argv[#argv + 1] = a end
    io.write(string.format("gen lottery: round %s%s ...\n", r, init and (" from " .. init) or " (dense)"))
    io.flush()
    local rc = run(argv, rd .. "/train.log")
    if rc ~= 0 then
      io.stderr:write(tail(rd .. "/train.log", 8), "\n")
      U.fail(rd .. "/train.log", string.format("round %d's training exited with status %d", r, rc), "see the log; fix the arguments after --")
    end
    local m = U.metrics_summary(rd .. "/metrics.jsonl") or {}
    return rd, m.loss, m.val_loss
  end
  local function export(ck, to)
    local rc, msg = hyp.hf_export(ck, plan_path, to)
    if rc ~= 0 then U.fail(ck, "cannot export: " .. msg, "check the round's checkpoint") end
  end

  local rd, loss, val = do_round(0, nil)
  local rewind_ck = string.format("%s/ckpt/step_%08d", rd, rewind)
  if hyp.stat(rewind_ck) ~= "dir" then U.fail(rewind_ck, "round 0 wrote no checkpoint at the rewind step", "check --rewind against --steps") end
  export(rewind_ck, dir .. "/rewind_hf")
  res.rounds[1] = { round = 0, sparsity = 0, loss = loss, val_loss = val }
  local prev = rd
  for r = 1, rounds do
    export(string.format("%s/ckpt/step_%08d", prev, steps), prev .. "/final_hf")
    local init = string.format("%s/init_%d", dir, r)
    assert(hyp.mkdir_p(init))
    for _, f in ipairs(hyp.list_dir(dir .. "/rewind_hf") or {}) do
      if f ~= "model.safetensors" then assert(hyp.copy_file(dir .. "/rewind_hf/" .. f, init .. "/" .. f)) end
    end
    local rc, msg, st = hyp.lottery_rewind(dir .. "/rewind_hf/model.safetensors", prev .. "/final_hf/model.safetensors", rate, init .. "/model.safetensors")
    if rc ~= 0 then U.fail(init, msg, "give a trainer of one model") end
    local rdr, l, v = do_round(r, init)
    res.rounds[#res.rounds + 1] = { round = r, sparsity = st.pruned / st.prunable, pruned = st.pruned, prunable = st.prunable, loss = l, val_loss = v }
    prev = rdr
  end
  -- the control (Frankle & Carbin's comparison): the last round's mask on a fresh random
  -- initialization (the trainer's init at another seed: one step at lr 0 leaves it as drawn),
  -- trained like a round; a winning ticket beats it
  if o["--control"] then
    local seed = (plan.train and plan.train.seed or 1337) + 1
    for i, a in ipairs(targs) do if a == "--seed" then seed = (tonumber(targs[i + 1]) or seed) + 1 end end
    local rd0 = dir .. "/control_init_run"
    assert(hyp.mkdir_p(rd0))
    local argv = { out .. "/train", table.unpack(targs) }
    for _, a in ipairs({ "--seed", tostring(seed), "--steps", "1", "--lr", "0", "--eval-every", "0", "--ckpt-dir", rd0 .. "/ckpt", "--ckpt-every", "1" }) do
      argv[#argv + 1] = a
    end
    local rc = run(argv, rd0 .. "/train.log")
    if rc ~= 0 then U.fail(rd0 .. "/train.log", "the control's initialization run exited with status " .. rc, "see the log") end
    export(rd0 .. "/ckpt/step_00000001", rd0 .. "/init_hf")
    local init = dir .. "/init_control"
    assert(hyp.mkdir_p(init))
    for _, f in ipairs(hyp.list_dir(rd0 .. "/init_hf") or {}) do
      if f ~= "model.safetensors" then assert(hyp.copy_file(rd0 .. "/init_hf/" .. f, init .. "/" .. f)) end
    end
    -- rate 0: exactly the zeros of the last round's starting model (its mask), nothing more
    local last_init = string.format("%s/init_%d/model.safetensors", dir, rounds)
    local rc2, msg, st = hyp.lottery_rewind(rd0 .. "/init_hf/model.safetensors", last_init, 0, init .. "/model.safetensors")
    if rc2 ~= 0 then U.fail(init, msg, "give a trainer of one model") end
    local _, l, v = do_round("control", init, { "--seed", tostring(seed) })
    res.control = { seed = seed, sparsity = st.pruned / st.prunable, pruned = st.pruned, prunable = st.prunable, loss = l, val_loss = v }
  end
  assert(hyp.write_file(dir .. "/lottery.json", assert(hyp.json_encode(res, true)) .. "\n"))
  io.write(string.format("\nlottery ticket (v2155): %d rounds, %g of the remaining weights pruned per round, rewound to step %d of %d\n", rounds, rate, rewind, steps))
  io.write(string.format("%6s %10s %12s %10s\n", "round", "sparsity", "final loss", "val loss"))
  for _, x in ipairs(res.rounds) do
    io.write(string.format("%6d %10.4f %12.4f %10s\n", x.round, x.sparsity, x.loss or 0 / 0, x.val_loss and string.format("%.4f", x.val_loss) or "-"))
  end
  local c = res.control
  if c then
    io.write(string.format("%6s %10.4f %12.4f %10s   (round %d's mask, random re-init, seed %d)\n", "ctrl", c.sparsity, c.loss or 0 / 0,
      c.val_loss and string.format("%.4f", c.val_loss) or "-", rounds, c.seed))
  end
  io.write("wrote " .. dir .. "/lottery.json\n")
  return 0
end

return M
