-- cli.lua — the `gen` command line. Parses arguments, runs the passes (tree → resolve → plan →
-- render/compile → audit) and writes outputs. Returns the exit status: 0 ok, 1 internal or
-- environment failure, 2 bad input. All output of the main command is built in a staging
-- directory and moved into place last, so a failure never leaves a partial out/ directory.
local U = require("util")
local argv = ...

local USAGE = [[
usage:
  gen TREE --enable LIST [--model M] [--target T] [--set vNNNN.p=v ...] [--batch B] [--seq T] [-o OUT]
                                          generate a trainer into OUT (default out/<model>)
  gen list TREE [--json]                  the tree by branch: id, name, status, aliases
  gen explain TREE NAME [--json]          one spec (id, name or alias) in full
  gen audit TREE --enable LIST [--target T] [--model M] [--json]
  gen audit OUTDIR [--json]               the audit of a generated trainer
  gen data INPUT... -o DIR [--val-fraction F] [--force] [--tokenizer byte|PATH] [--doc-sep SEP]
           [--enable dedup,filter,mixing,curriculum,augmentation] [--set NAME.p=v ...]
                                          documents (.jsonl "text", .txt, SEP-separated, .gz)
                                          through the data stages into training shards with
                                          .docs sidecars and DIR/report.json; --doc-sep SEP: a
                                          line equal to SEP ends a document (% for fortune
                                          files), --doc-sep blank (or '') a blank line does
  gen data --chat CHATS.jsonl -o DIR [--template chatml|plain|T.json] [--tokenizer byte|PATH] [--val-fraction F] [--force]
  gen data --pref PREFS.jsonl -o DIR [--template chatml|plain|T.json] [--tokenizer byte|PATH] [--val-fraction F] [--force]
                                          post-training data: conversations through a chat
                                          template into shards + loss masks / preference examples
  gen tokenizer train FILE... --vocab N -o DIR   train a byte-level BPE: DIR/tokenizer.json
  gen tokenizer encode|decode TOKENIZER [FILE]   text -> ids (one per line) / ids -> text
  gen tokenizer info TOKENIZER            kind, vocabulary size, EOT id and hash
  gen size --model M [--hw LIST] [...]    size a training run (see gen size --help)
  gen perf DIR --hw LIST [--policy plan|bf16] [--graphs] [--epilogues] [--gpus P] [--top K] [--json]
                                          predicted step time, tokens/s, MFU and top ops of the
                                          trainer in DIR, from its plan and kernels (gen perf --help)
  gen scaling fit RUNS... [-o FIT] [--svg FILE] [--budget C] [--bootstrap N] [--exclude-top K]
                  [--grid full|coarse] [--seed S] [--params N] [--json]
                                          fit L(N, D) = E + A/N^alpha + B/D^beta to runs (CSV or
                                          metrics JSONL) with bootstrap intervals (gen scaling --help)
  gen lottery OUT -o DIR [--rounds R] [--rate P] [--rewind K] [--control] -- TRAIN_ARGS...
                                          the lottery ticket (v2155): rounds of training, magnitude
                                          pruning and rewinding with the trainer in OUT
  gen grow SRC --to OUT -o DIR [--depth identity|stack] [--seed S] [--noise R]
                                          a deeper/wider model's starting weights from a trained
                                          smaller one (function-preserving; then train --init-from)
  gen progressive TREE --stages MODEL:STEPS,... -o DIR [GEN_OPTIONS] -- TRAIN_ARGS
                                          progressive training (v2150): stages whose model grows
                                          (gen grow) inside one run (gen progressive --help)
  gen sweep SWEEP.yaml -o DIR [--parallel N] [--resume]
                                          hyperparameter search (grid, random, successive halving)
                                          over gen + train processes (gen sweep --help)
  gen export CKPT -o DIR [--plan PLAN]    a checkpoint as a Hugging Face model directory
                                          (GPT2LMHeadModel, LlamaForCausalLM, Qwen3ForCausalLM);
                                          PLAN defaults to the checkpoint's own copy (plan.json
                                          in its step directory), else the one beside or above
  gen consolidate CKPT -o DIR [--plan PLAN]
                                          merge a sharded (ZeRO, mpirun) checkpoint into one
                                          file set in DIR/step_N that resumes at any world size
  gen render FAMILY [NAME=VALUE ...] [--kernels LIST] [-o FILE] [--target sm_XX]
                                          render one kernel template (gen render --list)
options:
  --enable LIST   comma-separated aliases, spec ids or names, and presets (repeatable)
  --target T      cpu | sim | sm_80 | sm_86 | sm_89 | sm_90 | ... (default cpu)
  --batch B, --seq T  the micro-batch size and sequence length the plan's buffers are sized for
  --set K=V       override a parameter of an active spec, e.g. --set v2104.stage=2 (or by spec name
                  or alias: --set dedup.threshold=0.7, --set mixing.weights=0.7,0.3)
  --allow-planned generate even though the selection activates planned specs (they contribute
                  nothing: each is named in a warning and in the audit)
  --no-compile    sm_XX: render the kernels but do not compile them (no cubins: the trainer
                  cannot run; its plan and kernel manifest are complete for gen perf and audit)
A selection that activates a planned spec is refused (exit 2); a partial spec is named in a
one-line warning saying what it lacks; an advisory spec adds documentation and estimates only.
]]

-- flag spec: name -> "value" | "list" | "flag"
local function parse(args, spec, positional_max)
  local o = { _pos = {} }
  local i = 1
  local names = {}
  for k in pairs(spec) do names[#names + 1] = k end
  table.sort(names)
  while i <= #args do
    local a = args[i]
    if a:sub(1, 1) == "-" and a ~= "-" then
      local name, inline = a:match("^(%-%-?[^=]+)=(.*)$")
      name = name or a
      local kind = spec[name]
      if not kind then
        U.fail("<command line>", "unknown option '" .. name .. "'" .. U.did_you_mean(name, names),
          "see `gen --help`")
      end
      if kind == "flag" then
        o[name] = true
      else
        local v = inline
        if not v then
          i = i + 1
          v = args[i]
          if v == nil then U.fail("<command line>", "option " .. name .. " needs a value", "see `gen --help`") end
        end
        if kind == "list" then
          o[name] = o[name] or {}
          for _, x in ipairs(U.split(v, ",")) do table.insert(o[name], x) end
        elseif kind == "multi" then
          o[name] = o[name] or {}
          table.insert(o[name], v)
        else
          o[name] = v
        end
      end
    else
      o._pos[#o._pos + 1] = a
    end
    i = i + 1
  end
  if positional_max and #o._pos > positional_max then
    U.fail("<command line>", "unexpected argument '" .. o._pos[positional_max + 1] .. "'", "see `gen --help`")
  end
  return o
end

local function emit_json(v)
  local s, err = hyp.json_encode(v, true)
  if not s then error("cannot encode JSON: " .. err) end
  io.write(s, "\n")
end

local function need_tree(path)
  if not path then U.fail("<command line>", "missing the tree file", "e.g. gen list specs/v2500.yaml") end
  return require("tree").load(path)
end

local commands = {}

function commands.list(args)
  local o = parse(args, { ["--json"] = "flag" }, 1)
  local tree = need_tree(o._pos[1])
  local by_alias = require("audit").aliases_by_id(tree)
  if o["--json"] then
    local out = { tree = tree.path, version = tree.doc.version, branches = U.array() }
    for _, b in ipairs(tree.branches) do
      local specs = U.array()
      for _, id in ipairs(b.specs) do
        local s = tree.by_id[id]
        specs[#specs + 1] = { id = s.id, name = s.name, title = s.title, status = s.status,
          aliases = U.array(by_alias[id] or {}) }
      end
      out.branches[#out.branches + 1] = { id = b.id, title = b.title, specs = specs }
    end
    out.presets = {}
    for name, p in pairs(tree.presets) do out.presets[name] = { doc = p.doc, enable = U.plain(p.enable) } end
    emit_json(out)
    return 0
  end
  io.write(string.format("%s — technology tree v%s (%d specs)\n", tree.doc.name, tostring(tree.doc.version), #tree.specs))
  for bi, b in ipairs(tree.branches) do
    io.write(string.format("\n%d. %s [%s]\n", bi, b.title, b.id))
    for _, id in ipairs(b.specs) do
      local s = tree.by_id[id]
      local al = by_alias[id] and ("  aliases: " .. table.concat(by_alias[id], ", ")) or ""
      io.write(string.format("  %s  %-26s %-10s %s%s\n", s.id, s.name, s.status, s.title, al))
    end
  end
  io.write("\npresets:\n")
  for _, name in ipairs(U.sorted_keys(tree.presets)) do
    local p = tree.presets[name]
    local planned = {}
    local ok, cfg = pcall(require("resolve").resolve, tree, { enable = { name }, target = "sm_90" })
    for _, id in ipairs(ok and cfg.order or {}) do if tree.by_id[id].status == "planned" then planned[#planned + 1] = id end end
    io.write(string.format("  %-12s %s — %s%s\n", name, table.concat(U.plain(p.enable), ","), p.doc,
      #planned > 0 and (" [planned: " .. table.concat(planned, ", ") .. " — needs --allow-planned]") or ""))
  end
  return 0
end

local function find_spec(tree, name)
  local s = tree.by_id[name] or tree.by_name[name]
  if s then return s end
  local a = tree.aliases[name]
  if a then return tree.by_id[a.spec or a.choose[1].spec], a end
  U.fail("<command line>", "unknown spec '" .. name .. "'" ..
    U.did_you_mean(name, require("tree").selectable_names(tree)), "use an id, name or alias from `gen list`")
end

function commands.explain(args)
  local o = parse(args, { ["--json"] = "flag" }, 2)
  local tree = need_tree(o._pos[1])
  if not o._pos[2] then U.fail("<command line>", "missing the spec to explain", "e.g. gen explain specs/v2500.yaml v2160") end
  local s = find_spec(tree, o._pos[2])
  local by_alias = require("audit").aliases_by_id(tree)
  local required_by = {}
  for _, x in ipairs(tree.specs) do
    for _, r in ipairs(x.requires) do if r == s.id then required_by[#required_by + 1] = x.id end end
  end
  if o["--json"] then
    local out = U.plain(s)
    out.__branch_index = nil
    out.file = U.file_of(s)
    out.aliases = U.array(by_alias[s.id] or {})
    out.required_by = U.array(required_by)
    emit_json(out)
    return 0
  end
  local w = function(...) io.write(string.format(...)) end
  w("%s %s — %s\n", s.id, s.name, s.title)
  w("branch: %s   status: %s   file: %s\n", s.branch, s.status, U.file_of(s))
  if by_alias[s.id] then w("aliases: %s\n", table.concat(by_alias[s.id], ", ")) end
  w("\n%s\n", (s.summary:gsub("%s+$", "")))
  w("\nrequires: %s\n", #s.requires > 0 and table.concat(U.plain(s.requires), ", ") or "(nothing)")
  w("required by: %s\n", #required_by > 0 and table.concat(required_by, ", ") or "(nothing)")
  if #s.conflicts > 0 then
    w("conflicts:\n")
    for _, c in ipairs(s.conflicts) do w("  %s %s — %s\n", c.id, tree.by_id[c.id].name, c.why) end
  end
  if s.gates then
    w("gates: %s%s\n", s.gates.min_sm and ("min_sm " .. s.gates.min_sm .. " ") or "",
      s.gates.targets and ("targets " .. table.concat(U.plain(s.gates.targets), "/")) or "")
  end
  if s.params and next(s.params) then
    w("params:\n")
    for _, p in ipairs(U.sorted_keys(s.params)) do
      local d = s.params[p]
      local range = ""
      if d.min or d.max then range = string.format(" [%s..%s]", d.min and U.fmt_value(d.min) or "", d.max and U.fmt_value(d.max) or "") end
      if d.values then range = " {" .. table.concat(U.plain(d.values), ", ") .. "}" end
      w("  %-16s %-6s default %s%s — %s\n", p, d.type, U.fmt_value(d.default), range, d.doc)
    end
  end
  if s.contributes and #s.contributes > 0 then
    w("contributes when active:\n")
    for _, c in ipairs(s.contributes) do w("  - %s\n", c) end
  end
  if #s.claims > 0 then
    w("claims (as stated by the seed documents, not measured here):\n")
    for _, c in ipairs(s.claims) do w("  - %s  [%s]\n", c.claim, c.source) end
  end
  if s.references and #s.references > 0 then
    w("references:\n")
    for _, r in ipairs(s.references) do
      w("  - %s%s (%d)%s\n", r.authors and (r.authors .. ": ") or "", r.title, r.year, r.url and (" " .. r.url) or "")
    end
  end
  return 0
end

local SELECT_FLAGS = {
  ["--enable"] = "list", ["--preset"] = "list", ["--target"] = "value", ["--model"] = "value",
  ["--set"] = "multi", ["--json"] = "flag", ["-o"] = "value", ["--out"] = "value",
  ["--batch"] = "value", ["--seq"] = "value", ["--allow-planned"] = "flag", ["--no-compile"] = "flag",
}

-- What the active specs can do, said before anything is written: planned specs are refused
-- (unless --allow-planned: then a warning each), partial ones warn with what they lack,
-- advisory ones warn that they add nothing to the trainer. One line per spec.
local function check_statuses(tree, cfg, allow_planned)
  local errs = U.errors()
  local function warn(fmt, ...) io.stderr:write("gen: warning: " .. string.format(fmt, ...) .. "\n") end
  for _, id in ipairs(cfg.order) do
    local s, a = tree.by_id[id], cfg.active[id]
    local why = table.concat(a.reasons, ", ")
    if s.status == "planned" then
      if allow_planned then
        warn("%s %s (%s): planned: contributes nothing yet (--allow-planned)", id, s.name, why)
        cfg.decisions[#cfg.decisions + 1] = { what = id, value = "planned", why = "enabled with --allow-planned; contributes nothing to this trainer" }
      else
        errs:add("<command line>", string.format("%s %s (%s): planned: contributes nothing yet", id, s.name, why),
          "drop it, or pass --allow-planned to generate anyway")
      end
    elseif s.status == "partial" and why ~= "baseline: part of every selection" then
      warn("%s %s is partial: %s", id, s.name, s.missing)
    elseif s.status == "advisory" then
      warn("%s %s (%s) is advisory: documentation and estimates only, nothing in the trainer", id, s.name, why)
    end
  end
  errs:raise_if_any()
end

local function selection(o)
  local enable = {}
  for _, x in ipairs(o["--preset"] or {}) do enable[#enable + 1] = x end
  for _, x in ipairs(o["--enable"] or {}) do enable[#enable + 1] = x end
  return { enable = enable, set = o["--set"] or {}, target = o["--target"] or "cpu" }
end

local function run_passes(tree, o)
  local R = require("resolve")
  local cfg = R.resolve(tree, selection(o))
  local T = require("tree")
  if o["--model"] then
    local m, path = T.load_model(tree, o["--model"])
    cfg.model = U.plain(m)
    cfg.model_path = path
  end
  return cfg
end

-- run_passes with the model tiny when no --model is given (recorded as a decision, with why)
local function resolve_with_model(tree, o, why)
  local default_model = not o["--model"]
  if default_model then o["--model"] = "tiny" end
  local cfg = run_passes(tree, o)
  if default_model then cfg.decisions[#cfg.decisions + 1] = { what = "model", value = "tiny", why = why } end
  return cfg
end

function commands.audit(args)
  local o = parse(args, SELECT_FLAGS, 1)
  local first = o._pos[1]
  if not first then U.fail("<command line>", "missing the tree file or output directory", "e.g. gen audit specs/v2500.yaml --enable fp8") end
  if hyp.stat(first) == "dir" then
    local path = first .. "/audit.json"
    local data = hyp.read_file(path)
    if not data then U.fail(first, "no audit.json here", "give a directory written by gen, e.g. out/run1") end
    local audit = hyp.json_decode(data)
    if not audit then U.fail(path, "corrupt audit.json", "regenerate the trainer with gen") end
    if o["--json"] then io.write(data) else
      local text = hyp.read_file(first .. "/audit.md")
      io.write(text or require("audit").text(audit))
      -- the performance model of this trainer on its target's hardware (gen perf DIR --hw NAME)
      local okp, ptxt = pcall(function()
        local P = require("perf")
        local plan, manifest = P.load_dir(first)
        local T = require("tree")
        local tree = T.load(o._pos[2] or "specs/v2500.yaml")
        local hwname = plan.hardware and plan.hardware.name
        local sm = tonumber(tostring(plan.target or ""):match("^sm_(%d+)$"))
        if not hwname and sm then -- the first hardware entry (by name) of the target's architecture
          local names = T.list_names(tree, "hardware")
          table.sort(names)
          for _, n in ipairs(names) do
            local okh, d = pcall(T.load_hardware, tree, n)
            if okh and d.sm == sm and d.perf then hwname = n; break end
          end
        end
        if not hwname then return nil end
        local h = P.load_hw(tree, hwname)
        return P.text(P.predict(plan, manifest, h), plan, 5)
      end)
      if okp and ptxt then io.write("\n# Performance model (gen perf " .. first .. " --hw ...)\n\n", ptxt) end
    end
    return 0
  end
  local tree = need_tree(first)
  local cfg = resolve_with_model(tree, o, "no --model given: the plan's contributions below are computed for tiny")
  -- the plan's contributions (a few ms); the kernels' need a generated trainer (render + NVRTC)
  local contrib = {}
  require("plan").build(tree, cfg, contrib, { batch = tonumber(o["--batch"]), seq = tonumber(o["--seq"]) })
  local audit = require("audit").build(tree, cfg, contrib, { no_kernels = cfg.target.kind ~= "cpu" })
  if o["--json"] then emit_json(audit) else io.write(require("audit").text(audit)) end
  return 0
end

local function effective_config(cfg)
  local active = U.array()
  for _, id in ipairs(cfg.order) do
    local a = cfg.active[id]
    active[#active + 1] = { id = a.id, name = a.name, reasons = a.reasons, params = a.params }
  end
  return {
    generator = { name = "hyperion", version = hyp.version },
    tree = cfg.tree, tree_version = cfg.version, target = cfg.target,
    model = cfg.model, selection = cfg.selection, active = active, decisions = U.array(cfg.decisions),
  }
end

-- HYP_TIMINGS=1 prints how long each pass took (to stderr)
local T0 = hyp.clock()
local function lap(what)
  if os.getenv("HYP_TIMINGS") then io.stderr:write(string.format("gen: %-8s %7.1f ms\n", what, (hyp.clock() - T0) * 1e3)) end
end

function commands.generate(args)
  local o = parse(args, SELECT_FLAGS, 1)
  local tree = need_tree(o._pos[1])
  lap("load")
  local cfg = resolve_with_model(tree, o, "no --model given: the default")
  check_statuses(tree, cfg, o["--allow-planned"])
  cfg.no_compile = o["--no-compile"] and true or nil
  local out = o["-o"] or o["--out"] or ("out/" .. cfg.model.name)
  local contrib = {}
  local files = {}
  lap("resolve")
  local plan = require("plan").build(tree, cfg, contrib, { batch = tonumber(o["--batch"]), seq = tonumber(o["--seq"]) })
  lap("plan")
  files["plan.json"] = assert(hyp.json_encode(plan, true)) .. "\n"
  lap("json")
  -- kernels (issue #4): render the plan's CUDA kernels for sim and sm_XX, compile them for sm_XX
  if plan and cfg.target.kind ~= "cpu" then
    local okk, kfiles = require("render").build(tree, cfg, plan, contrib)
    if not okk then io.stderr:write(kfiles); return 1 end
    for name, data in pairs(kfiles) do files[name] = data end
  end
  lap("kernels")
  -- the effective configuration last, so it holds the plan's and the renderer's decisions too
  files["config.json"] = assert(hyp.json_encode(effective_config(cfg), true)) .. "\n"
  local audit = require("audit").build(tree, cfg, contrib)
  files["audit.json"] = assert(hyp.json_encode(audit, true)) .. "\n"
  files["audit.md"] = require("audit").text(audit)

  lap("audit")
  -- write everything into a staging directory, then move it into place
  local stage, err = hyp.mkdtemp(out)
  if not stage then U.fail(out, "cannot create the output directory: " .. err, "check the path and permissions") end
  local ok, e = pcall(function()
    local made = {}
    for _, name in ipairs(U.sorted_keys(files)) do
      local sub = name:match("^(.*)/[^/]*$") -- e.g. kernels/
      if sub and not made[sub] then hyp.mkdir_p(stage .. "/" .. sub); made[sub] = true end
      local okw, werr = hyp.write_file(stage .. "/" .. name, files[name], 420, true) -- synced below
      if not okw then error({ env = werr }) end
    end
    if plan and hyp.stat(hyp.train_bin) == "file" then
      local okc, cerr = hyp.copy_file(hyp.train_bin, stage .. "/train", 493, true)
      if not okc then error({ env = cerr }) end
    end
    local oks, serr = hyp.sync_fs(stage) -- one filesystem sync instead of one fsync per file
    if not oks then error({ env = serr }) end
    local okr, rerr = hyp.replace_dir(stage, out)
    if not okr then error({ env = rerr }) end
  end)
  if not ok then
    hyp.rm_rf(stage)
    if type(e) == "table" and e.env then
      io.stderr:write("gen: " .. e.env .. "\n")
      return 1
    end
    error(e, 0)
  end
  lap("write")
  io.write(string.format("gen: wrote %s (%d active specs, target %s, model %s)\n", out, #cfg.order,
    cfg.target.name, cfg.model.name))
  return 0
end

-- gen data --chat FILE.jsonl / --pref FILE.jsonl: post-training data (runtime/data/chat.h).
local function post_data(o)
  if #o._pos > 0 then U.fail("<command line>", "gen data --chat/--pref takes its one input as the flag's value, not " .. o._pos[1], "e.g. gen data --chat chats.jsonl -o data/sft") end
  if o["--chat"] and o["--pref"] then U.fail("<command line>", "gen data takes --chat or --pref, not both", "run gen data once per kind") end
  if o["--template"] and not (o["--chat"] or o["--pref"]) then U.fail("<command line>", "--template applies to --chat or --pref data", "add --chat FILE or --pref FILE") end
  local vf = tonumber(o["--val-fraction"] or "0.1")
  if not vf or vf < 0 or vf >= 1 then U.fail("<command line>", "--val-fraction must be in [0, 1)", "e.g. --val-fraction 0.1") end
  local rc, msg
  local force = o["--force"] and true or false
  if o["--chat"] then rc, msg = hyp.chat_prepare(o["--chat"], o["--template"], o["-o"], vf, force, o["--tokenizer"])
  else rc, msg = hyp.pref_prepare(o["--pref"], o["--template"], o["-o"], vf, force, o["--tokenizer"]) end
  if rc ~= 0 then io.stderr:write(msg, "\n"); return rc end
  io.write(msg, "\n")
  return 0
end

function commands.data(args)
  -- post-training data (--chat / --pref) has its own flags: runtime/data/chat.h
  for _, a in ipairs(args) do
    local name = a:match("^(%-%-[%w-]+)")
    if name == "--chat" or name == "--pref" then
      local o = parse(args, { ["-o"] = "value", ["--val-fraction"] = "value", ["--force"] = "flag",
        ["--chat"] = "value", ["--pref"] = "value", ["--template"] = "value", ["--tokenizer"] = "value" })
      if not o["-o"] then U.fail("<command line>", "gen data needs -o DIR", "e.g. gen data --chat chats.jsonl -o data/sft") end
      return post_data(o)
    end
  end
  return require("data_cli").main(args, parse, check_statuses)
end

-- gen tokenizer train|encode|decode|info (v2125): generator/lua/tokenizer_cli.lua
function commands.tokenizer(args)
  return require("tokenizer_cli").main(args, parse)
end

-- The plan that describes CKPT's model when CKPT carries no copy of its own (older checkpoints):
-- the first plan.json in CKPT or the three directories above it (a trainer's --ckpt-dir usually
-- lives inside out/NAME/).
local function find_plan(ckpt)
  local dir = ckpt:gsub("/+$", "")
  for _ = 1, 4 do
    if hyp.stat(dir .. "/plan.json") == "file" then return dir .. "/plan.json" end
    local parent = dir:match("^(.*)/[^/]+$")
    if not parent then
      if dir ~= "." and hyp.stat("plan.json") == "file" then return "plan.json" end
      break
    end
    dir = parent == "" and "/" or parent
  end
  return nil
end

-- gen export / gen consolidate: CKPT -o DIR [--plan P], the plan found beside or above CKPT;
-- fn (hyp.hf_export or hyp.ckpt_consolidate) does the work and returns rc, message.
local function ckpt_command(name, fn, args)
  local o = parse(args, { ["-o"] = "value", ["--plan"] = "value" })
  local example = "e.g. gen " .. name .. " out/tiny/ckpt -o " ..
    (name == "export" and "out/tiny-hf" or "out/tiny/ckpt-one") .. " [--plan out/tiny/plan.json]"
  if #o._pos ~= 1 then U.fail("<command line>", "gen " .. name .. " needs one checkpoint directory", example) end
  if not o["-o"] then U.fail("<command line>", "gen " .. name .. " needs -o DIR", example) end
  local ckpt = o._pos[1]
  if hyp.stat(ckpt) ~= "dir" then U.fail(ckpt, "not a directory", "give a trainer's --ckpt-dir or one of its step_* directories") end
  local plan = o["--plan"]
  if not plan then -- the checkpoint's own copy (verified), else the trainer's beside or above it
    local rc, own = hyp.ckpt_plan(ckpt)
    if rc ~= 0 then io.stderr:write("gen " .. name .. ": " .. own, "\n"); return rc end
    plan = own ~= "" and own or find_plan(ckpt)
  end
  if not plan then U.fail(ckpt, "no plan.json in the checkpoint (saved before checkpoints carried one), beside or above it", "say which trainer wrote it: --plan out/NAME/plan.json") end
  local rc, msg = fn(ckpt, plan, o["-o"])
  if rc ~= 0 then io.stderr:write(msg, "\n"); return rc end
  io.write(msg, "\n")
  return 0
end

function commands.export(args) return ckpt_command("export", hyp.hf_export, args) end
function commands.consolidate(args) return ckpt_command("consolidate", hyp.ckpt_consolidate, args) end

function commands.render(args)
  return require("template").cli(args, parse)
end

-- gen perf DIR --hw LIST: the performance model of a generated trainer (generator/lua/perf.lua)
function commands.perf(args)
  return require("perf").main(args, parse)
end

-- gen scaling fit RUNS...: the loss law of a set of runs (generator/lua/scaling.lua, v2146/v2147)
function commands.scaling(args)
  return require("scaling").main(args, parse)
end

-- gen lottery OUT -o DIR -- TRAIN_ARGS: iterative magnitude pruning with rewinding (v2155)
function commands.lottery(args)
  return require("lottery").main(args, parse)
end

-- gen grow SRC --to OUT -o DIR: a larger model's starting weights from a trained smaller one (v2151, v2152, v2153)
function commands.grow(args)
  return require("grow").main(args, parse)
end

-- gen progressive TREE --stages M:N,... -o DIR -- TRAIN_ARGS: a run whose model grows between stages (v2150)
function commands.progressive(args)
  return require("progressive").main(args, parse, commands.generate)
end

-- gen sweep SWEEP.yaml -o DIR: hyperparameter search over trainer processes (v2188)
function commands.sweep(args)
  return require("sweep").main(args, parse, commands.generate)
end

function commands.size(args)
  local ok, size = pcall(require, "size")
  if not ok then U.fail("<command line>", "gen size is not available in this build", "update Hyperion") end
  return size.main(args, parse)
end

-- The usage of one command: its entries of USAGE (a line "  gen CMD ..." and the deeper-indented
-- lines under it; "gen TREE ..." is the main command, `generate`), then the options block.
local function command_usage(cmd)
  local out, mine, options = { "usage:" }, false, nil
  for line in USAGE:gmatch("[^\n]*\n?") do
    if line:match("^options:") then options = USAGE:sub(USAGE:find("\noptions:", 1, true) + 1); break end
    local word = line:match("^  gen (%S+)")
    if word then
      if not commands[word] then word = "generate" end
      mine = word == cmd
    elseif not line:match("^   ") then
      mine = false
    end
    if mine then out[#out + 1] = line:gsub("\n$", "") end
  end
  local text = table.concat(out, "\n") .. "\n"
  -- the --enable/--set/--allow-planned options belong to the commands that resolve a selection
  if options and text:find("--enable", 1, true) then text = text .. options end
  return text
end

-- --help or -h anywhere among a command's arguments asks for its usage.
local function asks_help(args)
  for _, a in ipairs(args) do
    if a == "--help" or a == "-h" then return true end
  end
  return false
end

local function main(args)
  local cmd = args[1]
  if cmd == nil or cmd == "--help" or cmd == "-h" or cmd == "help" then
    io.write(USAGE)
    return cmd == nil and 2 or 0
  end
  if cmd == "--version" then io.write("gen (hyperion) " .. hyp.version .. "\n"); return 0 end
  local rest = { table.unpack(args, 2) }
  if commands[cmd] and cmd ~= "generate" then
    -- gen size prints its own, longer help
    if cmd ~= "size" and cmd ~= "scaling" and asks_help(rest) then io.write(command_usage(cmd)); return 0 end
    return commands[cmd](rest)
  end
  if cmd:sub(1, 1) == "-" or not (cmd:match("%.ya?ml$") or hyp.stat(cmd)) then
    local names = U.sorted_keys(commands)
    U.fail("<command line>", "unknown command '" .. cmd .. "'" .. U.did_you_mean(cmd, names),
      "use one of list, explain, audit, data, tokenizer, export, consolidate, size, perf, scaling, lottery, grow, progressive, sweep, render, or give the tree file first")
  end
  if asks_help(rest) then io.write(command_usage("generate")); return 0 end
  return commands.generate(args)
end

local ok, rc = xpcall(main, function(e)
  if U.is_error(e) then return e end
  return debug.traceback(tostring(e), 2)
end, argv)
if ok then return rc or 0 end
if U.is_error(rc) then
  io.stderr:write(U.format_errors(rc.list), "\n")
  return 2
end
io.stderr:write("gen: internal error: ", tostring(rc), "\n")
return 1
