-- grow.lua — `gen grow SRC --to OUT -o DIR [--depth identity|stack] [--seed S] [--noise R]` (v2151
-- depth, v2152/v2153 function-preserving width): the starting weights of the (deeper and/or wider) trainer in
-- OUT from a trained smaller model of the same family — a checkpoint step directory (exported
-- first with its own plan) or a `gen export` directory. Writes DIR as a Hugging Face directory
-- (model.safetensors from hyp.grow, generator/grow_lua.c; config.json with the grown sizes) for
-- `OUT/train --init-from DIR`. Grows the number of layers, the MLP hidden width, d_model and the
-- heads (head size kept), or shrinks the MLP width by structured pruning (v2157); the vocabulary
-- and family must match. Never: touches SRC or OUT.
local U = require("util")
local M = {}

local USAGE = [[
usage:
  gen grow SRC --to OUT -o DIR [--depth identity|stack] [--seed S] [--noise R]
      Initializes the larger model of the trainer in OUT from SRC, a trained smaller model of the
      same family (a checkpoint step directory, or a gen export directory): more layers (--depth
      identity: new layers copy a trained one with their output projections zeroed, so the grown
      model computes exactly what SRC did; --depth stack: the trained stack repeated, G_stack) and a
      wider MLP (function-preserving: new hidden units copy existing ones and the outgoing weights
      are split among the copies, bert2BERT's fpi / Net2WiderNet), a wider d_model with more heads
      of the same size (v2152: residual unit i copies unit i mod d_model, head h copies head h mod
      heads, consumers divided by the copy count; exact when the new d_model is a multiple of the
      old, since the norms then see the same mean and variance; approximate otherwise). --noise R
      (default 0) perturbs the new units' weights by a relative Gaussian R to break the copies'
      symmetry (Net2Net; no longer function-preserving). A narrower MLP in OUT prunes
      channels instead (v2157): per layer the hidden units with the largest ||incoming weights|| x
      ||outgoing weights|| are kept and the rest removed. Then: OUT/train --init-from DIR.
]]

local function read_json(path)
  local t, err = hyp.read_file(path)
  if not t then U.fail(path, "cannot read: " .. tostring(err), "check the path") end
  local ok, v = pcall(hyp.json_decode, t)
  if not ok or type(v) ~= "table" then U.fail(path, "not a JSON object", "give a gen export directory or a checkpoint step") end
  return v
end

function M.main(args, parse)
  for _, a in ipairs(args) do if a == "--help" or a == "-h" then io.write(USAGE); return 0 end end
  local o = parse(args, { ["-o"] = "value", ["--to"] = "value", ["--depth"] = "value", ["--seed"] = "value", ["--noise"] = "value" }, 1)
  local src, out, dir = o._pos[1], o["--to"], o["-o"]
  local ex = "e.g. gen grow out/small/ckpt/step_00001000 --to out/big -o out/big-init"
  if not src or not out or not dir then U.fail("<command line>", "gen grow needs SRC, --to OUT and -o DIR", ex) end
  local depth = o["--depth"] or "identity"
  if depth ~= "identity" and depth ~= "stack" then U.fail("<command line>", "--depth '" .. depth .. "' is not identity or stack", "use --depth identity (function-preserving) or --depth stack") end
  local seed = tonumber(o["--seed"] or "1")
  if not seed or seed < 0 or seed ~= math.floor(seed) then U.fail("<command line>", "--seed must be a non-negative integer", "e.g. --seed 1") end
  local noise = tonumber(o["--noise"] or "0")
  if not noise or noise < 0 or noise > 1 then U.fail("<command line>", "--noise must be a number in [0, 1]", "e.g. --noise 0.01 (relative), or leave it out for an exact copy") end
  if hyp.stat(dir) then U.fail(dir, "already exists", "choose a new -o directory") end
  if hyp.stat(out .. "/plan.json") ~= "file" then U.fail(out, "no plan.json: not a trainer directory", "give the -o directory of gen for the larger model") end
  local tplan = read_json(out .. "/plan.json")
  local tm = tplan.model
  if hyp.stat(src) ~= "dir" then U.fail(src, "not a directory", "give a checkpoint step directory or a gen export directory") end

  -- the source as a Hugging Face export
  local hf, tmp = src, nil
  if hyp.stat(src .. "/state.json") == "file" then
    local rc, own = hyp.ckpt_plan(src)
    if rc ~= 0 or own == "" then U.fail(src, "the checkpoint carries no plan to export it with", "export it yourself: gen export " .. src .. " --plan PLAN -o DIR, then gen grow DIR") end
    tmp = assert(hyp.mkdtemp((os.getenv("TMPDIR") or "/tmp") .. "/hyp-grow"))
    hf = tmp .. "/src"
    local erc, msg = hyp.hf_export(src, own, hf)
    if erc ~= 0 then hyp.rm_rf(tmp); U.fail(src, "cannot export: " .. msg, "check the checkpoint") end
  end
  if hyp.stat(hf .. "/config.json") ~= "file" or hyp.stat(hf .. "/model.safetensors") ~= "file" then
    if tmp then hyp.rm_rf(tmp) end
    U.fail(src, "no config.json and model.safetensors", "give a checkpoint step directory or a gen export directory")
  end
  local cfg = read_json(hf .. "/config.json")
  local gpt = cfg.model_type == "gpt2"
  local s = gpt and { arch = "gpt2", L = cfg.n_layer, H = cfg.n_inner, C = cfg.n_embd, NH = cfg.n_head, NKV = cfg.n_head, V = cfg.vocab_size }
    or { arch = "llama", L = cfg.num_hidden_layers, H = cfg.intermediate_size, C = cfg.hidden_size, NH = cfg.num_attention_heads,
         NKV = cfg.num_key_value_heads or cfg.num_attention_heads, V = cfg.vocab_size }
  local function fail(what, fix) if tmp then hyp.rm_rf(tmp) end U.fail(src, what, fix) end
  if (tm.arch == "gpt2") ~= gpt then fail("a " .. s.arch .. " model cannot grow into the " .. tostring(tm.arch) .. " model of " .. out, "grow within one family") end
  if s.V ~= tm.V then
    fail(string.format("the vocabulary differs (%s here, %s in %s): gen grow keeps the tokenizer", tostring(s.V), tostring(tm.V), out),
      "give --to a trainer with the same vocab_size")
  end
  if tm.C < s.C then fail(string.format("d_model %d in %s is narrower than SRC's %d", tm.C, out, s.C), "d_model only grows: give a trainer with at least " .. s.C) end
  if tm.C > s.C and tm.H < s.H then
    fail(string.format("%s is wider in d_model (%d > %d) but narrower in the MLP (%d < %d)", out, tm.C, s.C, tm.H, s.H),
      "grow and prune in two steps: gen grow into a trainer with ffn_hidden >= " .. s.H .. ", then into the narrower one")
  end
  local hd = s.C // s.NH
  if s.C % s.NH ~= 0 or tm.C % tm.NH ~= 0 or tm.C // tm.NH ~= hd then
    fail(string.format("the head size changes (d_model %d / %d heads here, %d / %d in %s): gen grow adds heads of the same size", s.C, s.NH, tm.C, tm.NH, out),
      string.format("give --to a trainer with n_heads = d_model / %d", hd))
  end
  if tm.NH < s.NH or tm.NKV < s.NKV or s.NH % s.NKV ~= 0 or tm.NH % tm.NKV ~= 0 or s.NH // s.NKV ~= tm.NH // tm.NKV then
    fail(string.format("heads %d (kv %d) here, %d (kv %d) in %s: heads only grow, with the same number of query heads per kv head", s.NH, s.NKV, tm.NH, tm.NKV, out),
      string.format("give --to a trainer with n_kv_heads = n_heads / %d", s.NH // s.NKV))
  end
  if tm.L < s.L then fail(string.format("%s has %d layers, fewer than SRC's %d", out, tm.L, s.L), "layers only grow: give a trainer with at least as many") end

  assert(hyp.mkdir_p(dir))
  local rc, msg, st = hyp.grow(hf .. "/model.safetensors", dir .. "/model.safetensors",
    { L_s = s.L, L_t = tm.L, H_s = s.H, H_t = tm.H, depth = depth, seed = math.tointeger(seed),
      C_s = s.C, C_t = tm.C, NH_s = s.NH, NH_t = tm.NH, NKV_s = s.NKV, NKV_t = tm.NKV, noise = noise })
  if rc ~= 0 then hyp.rm_rf(dir); fail(msg, "give an export of the source trainer's checkpoint") end
  if gpt then cfg.n_layer, cfg.n_inner, cfg.n_embd, cfg.n_head = tm.L, tm.H, tm.C, tm.NH
  else
    cfg.num_hidden_layers, cfg.intermediate_size, cfg.hidden_size = tm.L, tm.H, tm.C
    cfg.num_attention_heads, cfg.num_key_value_heads = tm.NH, tm.NKV
  end
  cfg.hyperion_model = tm.name
  assert(hyp.write_file(dir .. "/config.json", assert(hyp.json_encode(cfg, true)) .. "\n"))
  if hyp.stat(hf .. "/generation_config.json") == "file" then assert(hyp.copy_file(hf .. "/generation_config.json", dir .. "/generation_config.json")) end
  if tmp then hyp.rm_rf(tmp) end
  local exact = tm.C % s.C == 0
  io.write(string.format("gen grow: %d -> %d layers (%s), MLP width %d -> %d (%s), d_model %d -> %d and heads %d -> %d (%s)%s; %d tensors in %s — train with %s/train --init-from %s\n",
    s.L, tm.L, tm.L == s.L and "unchanged" or (depth == "identity" and "new layers add zero: function-preserving" or "stacked copies"),
    s.H, tm.H, tm.H == s.H and "unchanged" or (tm.H > s.H and "function-preserving copies"
      or "structured pruning, v2157: per layer the units of largest ||in||·||out|| kept, not function-preserving"),
    s.C, tm.C, s.NH, tm.NH, tm.C == s.C and "unchanged" or (exact and "function-preserving copies, v2152"
      or "copies, v2152: not a multiple, the norms' mean and variance change: approximately function-preserving"),
    not (tm.C > s.C or tm.H > s.H) and "" or noise > 0 and string.format(", new units' weights perturbed by %g relative noise (not function-preserving)", noise)
      or ", copies stay equal under training without --noise",
    st.tensors, dir, out, dir))
  return 0
end

return M
