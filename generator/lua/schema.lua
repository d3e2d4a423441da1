-- schema.lua — closed schemas for every kind of spec file (tree, technique spec, model,
-- hardware) and the checker that applies them. specs/SCHEMA.md is the prose of these tables.
-- A schema node is one of:
--   {t="string", pattern=?}, {t="int", min=?, max=?}, {t="number", min=?, max=?}, {t="bool"},
--   {t="enum", values={...}}, {t="scalar"} (string/number/bool), {t="any"},
--   {t="list", of=node, min=?}, {t="map", fields={name=node...}, required={...}},
--   {t="mapof", key_pattern=?, of=node}
-- Checking never stops at the first problem: it collects every error (U.errors()).
local U = require("util")
local S = {}

local str = { t = "string" }
local int = { t = "int" }
local bool = { t = "bool" }
local function enum(...) return { t = "enum", values = { ... } } end
local function list(of, min) return { t = "list", of = of, min = min } end
local function map(fields, required) return { t = "map", fields = fields, required = required or {} } end
local function num(min, max) return { t = "number", min = min, max = max } end
local function intr(min, max) return { t = "int", min = min, max = max } end

local spec_id = { t = "string", pattern = "^v21%d%d$", pattern_doc = "an id v2100..v2199" }
local word = { t = "string", pattern = "^[a-z][a-z0-9_]*$", pattern_doc = "a lowercase word [a-z][a-z0-9_]*" }
local target_kind = enum("cuda", "sim", "cpu")

S.gates = map({ min_sm = intr(50, 200), targets = list(target_kind, 1) })

S.tree = map({
  version = int, name = str, description = str,
  branches = list(map({ id = word, title = str, goal = str, specs = list(str, 1) },
    { "id", "title", "specs" }), 1),
  aliases = { t = "mapof", key_pattern = "^[a-z0-9][a-z0-9_-]*$", of = map({
    spec = spec_id, set = { t = "mapof", key_pattern = "^[a-z_][a-z0-9_]*$", of = { t = "scalar" } },
    choose = list(map({ spec = spec_id, why = str,
      when = map({ min_sm = intr(50, 200), targets = list(target_kind, 1) }) }, { "spec", "why" }), 1),
    doc = str,
  }) },
  presets = { t = "mapof", key_pattern = "^[a-z0-9][a-z0-9_-]*$", of = map({
    doc = str, source = str, enable = list(str, 1) }, { "doc", "enable" }) },
  defaults = { t = "mapof", key_pattern = "^v21%d%d%.[a-z_][a-z0-9_]*$", of = { t = "scalar" } },
  baseline = list(spec_id, 1),
}, { "version", "name", "branches", "aliases" })

S.param = map({
  type = enum("int", "float", "bool", "enum", "string"),
  default = { t = "scalar" }, min = num(), max = num(), values = list({ t = "scalar" }, 1), doc = str,
}, { "type", "default", "doc" })

S.spec = map({
  id = spec_id, name = word, branch = word, title = str, summary = str,
  status = enum("implemented", "partial", "planned", "advisory"),
  missing = str,
  claims = list(map({ claim = str, source = str }, { "claim", "source" })),
  requires = list(spec_id),
  conflicts = list(map({ id = spec_id, why = str }, { "id", "why" })),
  gates = S.gates,
  params = { t = "mapof", key_pattern = "^[a-z_][a-z0-9_]*$", of = S.param },
  contributes = list(str),
  references = list(map({ title = str, authors = str, year = intr(1950, 2100), url = str },
    { "title", "year" })),
}, { "id", "name", "branch", "title", "summary", "status", "claims", "requires", "conflicts" })

S.model = map({
  name = str, description = str, arch = enum("gpt2", "llama"),
  vocab_size = intr(2, 1 << 24), context = intr(1, 1 << 22), d_model = intr(1, 1 << 20),
  n_layers = intr(1, 10000), n_heads = intr(1, 4096), n_kv_heads = intr(1, 4096),
  ffn_hidden = intr(1, 1 << 22), norm = enum("layernorm", "rmsnorm"), norm_eps = num(0, 1),
  activation = enum("gelu", "swiglu"), position = enum("learned", "rope"),
  rope_theta = num(1, 1e9), qk_norm = bool, tied_embeddings = bool, bias = bool,
  tokenizer = enum("byte", "gpt2"), params_note = str,
  -- mixture-of-experts MLP (docs/moe.md); cross-field rules in tree.lua's T.load_model
  moe = map({
    n_experts = intr(2, 1 << 16), top_k = intr(1, 1 << 16), router = enum("softmax", "sigmoid"),
    norm_topk = bool, aux_loss_coef = num(0, 10), router_bias = enum("none", "aux_free"),
    capacity_factor = num(0, 1e3), dropless = bool, n_shared_experts = intr(0, 1 << 10), bias_update_rate = num(0, 1),
    expert_hidden = intr(1, 1 << 22), first_dense_layers = intr(0, 10000),
  }, { "n_experts", "top_k", "router" }),
}, { "name", "arch", "vocab_size", "context", "d_model", "n_layers", "n_heads", "ffn_hidden",
  "norm", "activation", "position", "tied_embeddings" })

S.hardware = map({
  name = str, title = str, kind = enum("gpu", "cpu"), sm = intr(50, 200),
  memory_gb = num(0.001, 1e6), hbm_tbps = num(1e-6, 1e4), nic_gbps = num(0, 1e6),
  peak_tflops = map({ fp32 = num(0, 1e6), tf32 = num(0, 1e6), bf16 = num(0, 1e6),
    fp16 = num(0, 1e6), fp8 = num(0, 1e6) }, { "fp32" }),
  price_per_hr = num(0, 1e6), source = str,
  gpus_per_node = intr(1, 1 << 16), -- GPUs sharing one node's link (the all-reduce model, --mesh)
  -- the performance model's inputs (generator/lua/perf.lua, docs/perf-model.md); every number
  -- carries its source in a comment of the hardware file
  perf = map({
    sfu_tops = num(0, 1e6), launch_us = num(0, 1e6), graph_node_us = num(0, 1e6),
    link_gbps = num(0, 1e7), link_name = str,
    link_latency_us = num(0, 1e6), nic_latency_us = num(0, 1e6), -- per round of an all-reduce (v2171 model)
    eff = map({ tc = num(0.01, 1), fp32 = num(0.01, 1), sfu = num(0.01, 1), hbm = num(0.01, 1),
      link = num(0.01, 1), nic = num(0.01, 1),
      mma_sync = num(0.01, 1) }, { "tc", "fp32", "sfu", "hbm", "link", "nic" }), -- mma_sync: of tc, on sm_90 (v2114's FA3 vs FA2)
    eff_source = str,
  }, { "sfu_tops", "launch_us", "graph_node_us", "link_gbps", "link_name", "eff", "eff_source" }),
}, { "name", "title", "kind", "memory_gb", "hbm_tbps", "nic_gbps", "peak_tflops", "price_per_hr", "source" })

local function typename(v)
  if v == hyp.null then return "null" end
  local t = type(v)
  if t == "number" then return math.type(v) == "integer" and "integer" or "number" end
  if t == "table" then
    local mt = getmetatable(v)
    return (mt and mt.__ipos) and "list" or "mapping"
  end
  return t
end
S.typename = typename

local function is_list(v) local mt = getmetatable(v); return type(v) == "table" and mt and mt.__ipos ~= nil end
local function is_map(v) local mt = getmetatable(v); return type(v) == "table" and mt and mt.__kpos ~= nil end

local function field_names(node)
  local names = node._names
  if not names then names = U.sorted_keys(node.fields); node._names = names end
  return names
end

local function check(node, v, parent, key, errs, path)
  local t = node.t
  local function bad(expected)
    errs:add(U.where(parent, key), string.format("%s must be %s, not %s", path, expected, typename(v)),
      "write " .. expected)
  end
  if t == "any" then return end
  if t == "string" then
    if type(v) ~= "string" then return bad("a string") end
    if node.pattern and not v:match(node.pattern) then
      errs:add(U.where(parent, key), string.format("%s: '%s' is not %s", path, v, node.pattern_doc or node.pattern),
        "write " .. (node.pattern_doc or "a matching value"))
    end
  elseif t == "int" then
    if math.type(v) ~= "integer" then return bad("an integer") end
  elseif t == "number" then
    if type(v) ~= "number" then return bad("a number") end
  elseif t == "bool" then
    if type(v) ~= "boolean" then return bad("true or false") end
  elseif t == "scalar" then
    if not (type(v) == "string" or type(v) == "number" or type(v) == "boolean") then
      return bad("a scalar (string, number or boolean)")
    end
  elseif t == "enum" then
    local ok = false
    for _, x in ipairs(node.values) do if v == x then ok = true end end
    if not ok then
      local vs = table.concat(node.values, " | ")
      errs:add(U.where(parent, key), string.format("%s: '%s' is not one of %s%s", path, tostring(v), vs,
        type(v) == "string" and U.did_you_mean(v, node.values) or ""), "use one of " .. vs)
    end
  elseif t == "list" then
    if not is_list(v) then return bad("a list") end
    if node.min and #v < node.min then
      errs:add(U.where(parent, key), string.format("%s must have at least %d item(s)", path, node.min), "add an item")
    end
    for i, x in ipairs(v) do check(node.of, x, v, i, errs, string.format("%s[%d]", path, i)) end
  elseif t == "map" then
    if not is_map(v) then return bad("a mapping") end
    for _, k in ipairs(U.sorted_keys(v)) do
      local f = node.fields[k]
      local sub = path == "" and k or (path .. "." .. k)
      if not f then
        local names = field_names(node)
        errs:add(U.where(v, k), string.format("unknown key '%s'%s", sub, U.did_you_mean(k, names)),
          "remove it or use one of: " .. table.concat(names, ", "))
      else
        check(f, v[k], v, k, errs, sub)
      end
    end
    for _, k in ipairs(node.required) do
      if v[k] == nil then
        errs:add(U.where(parent, key), string.format("missing required key '%s'", path == "" and k or (path .. "." .. k)),
          "add it (see specs/SCHEMA.md)")
      end
    end
  elseif t == "mapof" then
    if not is_map(v) then return bad("a mapping") end
    for _, k in ipairs(U.sorted_keys(v)) do
      local sub = path == "" and k or (path .. "." .. k)
      if node.key_pattern and not tostring(k):match(node.key_pattern) then
        errs:add(U.where(v, k), string.format("key '%s' has an invalid form", sub),
          "use lowercase letters, digits, '-' or '_'")
      end
      check(node.of, v[k], v, k, errs, sub)
    end
  end
  if (t == "int" or t == "number") and type(v) == "number" then
    if v ~= v then
      errs:add(U.where(parent, key), path .. " is NaN", "write a finite number")
    elseif node.min and v < node.min then
      errs:add(U.where(parent, key), string.format("%s = %s is below the minimum %s", path, U.fmt_value(v), U.fmt_value(node.min)),
        "use a value >= " .. U.fmt_value(node.min))
    elseif node.max and v > node.max then
      errs:add(U.where(parent, key), string.format("%s = %s is above the maximum %s", path, U.fmt_value(v), U.fmt_value(node.max)),
        "use a value <= " .. U.fmt_value(node.max))
    end
  end
end

-- Checks document `doc` (parsed by hyp.load_yaml) against schema `node`; adds errors to errs.
function S.check(node, doc, errs, file)
  if typename(doc) ~= "mapping" then
    errs:add((U.file_of(doc) or file) .. ":1:1", "the document must be a mapping of keys to values, not " ..
      typename(doc), "see specs/SCHEMA.md for this kind of file")
    return
  end
  check(node, doc, doc, nil, errs, "")
end

-- Type-checks one parameter value against a param declaration (plain table). Returns the value
-- converted to the param's type, or nil and a message.
function S.coerce_param(decl, v)
  local t = decl.type
  if type(v) == "string" and t ~= "string" and t ~= "enum" then
    if t == "bool" then
      if v == "true" then v = true elseif v == "false" then v = false end
    else
      v = math.tointeger(tonumber(v)) or tonumber(v) or v
    end
  end
  if t == "int" then
    if math.type(v) ~= "integer" then return nil, "must be an integer" end
  elseif t == "float" then
    if type(v) ~= "number" then return nil, "must be a number" end
    v = v + 0.0
  elseif t == "bool" then
    if type(v) ~= "boolean" then return nil, "must be true or false" end
  elseif t == "string" then
    if type(v) ~= "string" then return nil, "must be a string" end
  elseif t == "enum" then
    local ok = false
    for _, x in ipairs(decl.values or {}) do if x == v then ok = true end end
    if not ok then
      local vs = {}
      for _, x in ipairs(decl.values or {}) do vs[#vs + 1] = tostring(x) end
      return nil, "must be one of " .. table.concat(vs, " | ") ..
        (type(v) == "string" and U.did_you_mean(v, vs) or "")
    end
  end
  if (t == "int" or t == "float") then
    if decl.min and v < decl.min then return nil, "must be >= " .. U.fmt_value(decl.min) end
    if decl.max and v > decl.max then return nil, "must be <= " .. U.fmt_value(decl.max) end
  end
  return v
end

return S
