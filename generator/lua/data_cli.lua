-- data_cli.lua — `gen data`: the data-preparation command. Resolves --enable/--set through the
-- tree like the main command (resolve.lua), asks each active technique module's `data` hook for
-- its stage settings, and hands inputs + settings to the C pipeline (hyp.data_prepare:
-- runtime/data/data.c, docs*.c), which writes the shards, meta.json and report.json.
-- Never: names a spec id (the modules do), or accepts a technique that does not act here.
local U = require("util")
local D = {}

D.FLAGS = {
  ["-o"] = "value", ["--val-fraction"] = "value", ["--force"] = "flag", ["--enable"] = "list",
  ["--set"] = "multi", ["--doc-sep"] = "value", ["--tree"] = "value", ["--allow-planned"] = "flag",
  ["--tokenizer"] = "value",
}

local EXAMPLE = "e.g. gen data corpus.txt -o data/corpus, or gen data a.jsonl b.txt --enable dedup,filter,mixing --set mixing.weights=0.7,0.3 -o data/mix"

-- The stage settings of the selection: {filter=, dedup=, mix=, curriculum=} (absent = off).
local function stages(o, n_inputs, check_statuses)
  local pipe = { n_inputs = n_inputs }
  if not o["--enable"] then
    if o["--set"] then U.fail("<command line>", "--set without --enable: no data stage is active", "e.g. gen data A B --enable mixing --set mixing.weights=0.7,0.3 -o DIR") end
    return pipe
  end
  local tree_path = o["--tree"] or (hyp.home .. "/specs/v2500.yaml")
  local tree = require("tree").load(tree_path)
  local cfg = require("resolve").resolve(tree, { enable = o["--enable"], set = o["--set"] or {}, target = "cpu" })
  local T = require("techniques")
  local mods = T.all()
  local contrib = {}
  pipe.hooks = {}
  for _, id in ipairs(cfg.order) do
    local a = cfg.active[id]
    local baseline_only = #a.reasons == 1 and a.reasons[1]:match("^baseline") ~= nil
    local e = mods[id]
    if e and e.module.data then
      local ctx = T.ctx(cfg, e.module, contrib)
      e.module.data(ctx, pipe)
      if e.module.data_inputs then pipe.hooks[#pipe.hooks + 1] = { module = e.module, ctx = ctx } end
    elseif not baseline_only and e then
      U.fail("<command line>", string.format("%s %s (%s) does not act in gen data: it shapes the trainer", id, a.name,
        table.concat(a.reasons, ", ")), "enable it when generating the trainer (gen TREE --enable ...); gen data takes the data-preparation stages dedup, filter, mixing, curriculum")
    end
  end
  -- refusals above come first, so a bad selection prints its one line and no warnings
  check_statuses(tree, cfg, o["--allow-planned"])
  return pipe
end

function D.main(args, parse, check_statuses)
  local o = parse(args, D.FLAGS)
  if #o._pos == 0 then U.fail("<command line>", "gen data needs at least one input text file", EXAMPLE) end
  if not o["-o"] then U.fail("<command line>", "gen data needs -o DIR", EXAMPLE) end
  local vf = tonumber(o["--val-fraction"] or "0.05")
  if not vf or vf < 0 or vf >= 1 then U.fail("<command line>", "--val-fraction must be in [0, 1)", "e.g. --val-fraction 0.05") end
  if o["--doc-sep"] == "" then U.fail("<command line>", "--doc-sep needs a non-empty separator line", "e.g. --doc-sep % for fortune files") end
  if not hyp.data_prepare then U.fail("<command line>", "this gen was built without the data pipeline", "rebuild") end
  local pipe = stages(o, #o._pos, check_statuses)
  pipe.doc_sep = o["--doc-sep"]
  -- inputs a module adds (synthetic documents), after the real ones; removed when done
  local inputs, cleanup = { table.unpack(o._pos) }, {}
  pipe.names = {}
  for _, h in ipairs(pipe.hooks or {}) do
    local ok, added = pcall(h.module.data_inputs, h.ctx, pipe, o["-o"])
    if not ok then
      for _, d in ipairs(cleanup) do hyp.rm_rf(d) end
      error(added, 0)
    end
    for _, x in ipairs(added) do
      inputs[#inputs + 1] = x.path
      pipe.names[#inputs] = x.name
      cleanup[#cleanup + 1] = x.cleanup
    end
  end
  pipe.hooks = nil
  local rc, msg = hyp.data_prepare(inputs, o["-o"], vf, o["--force"] and true or false, o["--tokenizer"], pipe)
  for _, d in ipairs(cleanup) do hyp.rm_rf(d) end
  if rc ~= 0 then io.stderr:write(msg, "\n"); return rc end
  io.write(msg, "\n")
  -- one line per stage from the report the pipeline wrote
  local rep = hyp.json_decode(hyp.read_file(o["-o"] .. "/report.json") or "")
  for _, st in ipairs(rep and rep.stages or {}) do
    io.write(string.format("gen data: %-10s %s %d -> %d documents\n", st.stage, st.spec or "", st.documents_in or 0,
      st.documents_out or 0))
  end
  return 0
end

return D
