-- tree.lua — loads the technology tree (specs/v2500.yaml and every spec file it names), models
-- and hardware, validates each against its closed schema (schema.lua), then checks the
-- cross-file rules: unique ids, branch membership, references to existing specs, symmetric
-- conflicts, no dependency cycles, aliases and presets that resolve, parameter declarations
-- whose defaults fit their types. Raises one error listing every problem found; writes nothing.
local U = require("util")
local S = require("schema")
local T = {}

local function load_doc(path)
  local doc, err = hyp.load_yaml(path)
  if doc == nil then
    -- the host's message is "file:line:col: what — fix"
    local where, what, fix = err:match("^(.-:%d+:%d+): (.-) — (.*)$")
    U.fail(where or path, what or err, fix or "fix the file")
  end
  return doc
end
T.load_doc = load_doc

local function check_param_decl(spec, pname, p, errs)
  local decl = U.plain(p)
  local where = U.where(p, "default")
  if decl.type == "enum" then
    if not decl.values then
      errs:add(U.where(p), string.format("%s param '%s' is an enum without values", spec.id, pname), "add values: [...]")
      return
    end
  end
  if decl.min and decl.max and decl.min > decl.max then
    errs:add(U.where(p, "min"), string.format("%s param '%s': min > max", spec.id, pname), "swap them")
  end
  local _, msg = S.coerce_param(decl, decl.default)
  if msg then
    errs:add(where, string.format("%s param '%s': default %s %s", spec.id, pname, U.fmt_value(decl.default), msg),
      "fix the default or the declaration")
  end
end

-- Loads and validates the whole tree. Returns tree = {path, dir, doc, specs (list in tree
-- order), by_id, aliases, presets, branches}.
function T.load(path)
  local errs = U.errors()
  local st = hyp.stat(path)
  if st ~= "file" then
    U.fail(path, st == "dir" and "is a directory, not the tree file" or "no such file",
      "give the tree file, e.g. specs/v2500.yaml")
  end
  local doc = load_doc(path)
  S.check(S.tree, doc, errs, path)
  errs:raise_if_any()
  local tree = { path = path, dir = U.dirname(path), doc = doc, specs = {}, by_id = {}, by_name = {},
    branches = {}, aliases = doc.aliases or {}, presets = doc.presets or {} }
  local seen_file = {}
  local seen_branch = {}
  for bi, b in ipairs(doc.branches) do
    if seen_branch[b.id] then
      errs:add(U.where(b, "id"), "duplicate branch id '" .. b.id .. "'", "give each branch its own id")
    end
    seen_branch[b.id] = true
    tree.branches[#tree.branches + 1] = { id = b.id, title = b.title, goal = U.plain(b.goal), specs = {} }
    for si, rel in ipairs(b.specs) do
      local at = U.where(b.specs, si)
      local file = tree.dir .. "/" .. rel
      if seen_file[rel] then
        errs:add(at, "spec file '" .. rel .. "' is listed twice", "list each spec file once")
      elseif hyp.stat(file) ~= "file" then
        errs:add(at, "spec file '" .. rel .. "' does not exist", "create it or fix the path (relative to " .. tree.dir .. ")")
      else
        seen_file[rel] = true
        local ok, sdoc = pcall(load_doc, file)
        if not ok then
          if U.is_error(sdoc) then for _, e in ipairs(sdoc.list) do errs:add(e.where, e.what, e.fix) end
          else error(sdoc, 0) end
        else
          local before = errs:count()
          S.check(S.spec, sdoc, errs, file)
          if errs:count() == before then
            local spec = sdoc
            spec.__branch_index = bi
            if tree.by_id[spec.id] then
              errs:add(U.where(spec, "id"), "duplicate spec id " .. spec.id .. " (also in " ..
                U.file_of(tree.by_id[spec.id]) .. ")", "give each spec its own id")
            else
              tree.by_id[spec.id] = spec
              tree.by_name[spec.name] = spec
              tree.specs[#tree.specs + 1] = spec
              table.insert(tree.branches[bi].specs, spec.id)
            end
            if (spec.status == "partial") ~= (spec.missing ~= nil) then
              errs:add(U.where(spec, spec.missing and "missing" or "status"), spec.status == "partial"
                and (spec.id .. " is partial but does not say what is missing")
                or (spec.id .. " says what is missing but its status is " .. spec.status),
                "a partial spec has `missing: \"...\"` (what a user does not get yet); other statuses have none")
            end
            if spec.branch ~= b.id then
              errs:add(U.where(spec, "branch"), string.format("%s says branch '%s' but the tree lists it under '%s'",
                spec.id, spec.branch, b.id), "make the two agree")
            end
            local base = U.basename(file)
            if not base:match("^" .. spec.id .. "_") then
              errs:add(U.where(spec, "id"), string.format("file %s holds spec %s", base, spec.id),
                "name spec files '<id>_<name>.yaml'")
            end
            for pname, p in pairs(spec.params or {}) do check_param_decl(spec, pname, p, errs) end
          end
        end
      end
    end
  end
  errs:raise_if_any()
  T.check_references(tree, errs)
  errs:raise_if_any()
  return tree
end

local function all_ids(tree)
  local ids = {}
  for _, s in ipairs(tree.specs) do ids[#ids + 1] = s.id end
  return ids
end

function T.check_references(tree, errs)
  local ids = all_ids(tree)
  for _, s in ipairs(tree.specs) do
    for i, r in ipairs(s.requires) do
      if not tree.by_id[r] then
        errs:add(U.where(s.requires, i), s.id .. " requires unknown spec " .. r .. U.did_you_mean(r, ids), "name an existing spec id")
      elseif r == s.id then
        errs:add(U.where(s.requires, i), s.id .. " requires itself", "remove it")
      end
    end
    for _, c in ipairs(s.conflicts) do
      local other = tree.by_id[c.id]
      if not other then
        errs:add(U.where(c, "id"), s.id .. " conflicts with unknown spec " .. c.id .. U.did_you_mean(c.id, ids), "name an existing spec id")
      elseif c.id == s.id then
        errs:add(U.where(c, "id"), s.id .. " conflicts with itself", "remove it")
      else
        local back = false
        for _, oc in ipairs(other.conflicts) do if oc.id == s.id then back = true end end
        if not back then
          errs:add(U.where(c, "id"), string.format("%s conflicts with %s but %s does not list %s", s.id, c.id, c.id, s.id),
            "add the conflict to " .. U.file_of(other) .. " too (conflicts are symmetric)")
        end
      end
    end
  end
  -- cycles in requires (depth-first search with colours)
  local colour = {}
  local stack = {}
  local function visit(id)
    colour[id] = "grey"
    stack[#stack + 1] = id
    local s = tree.by_id[id]
    for i, r in ipairs(s.requires) do
      if tree.by_id[r] then
        if colour[r] == "grey" then
          local cyc = {}
          local on = false
          for _, x in ipairs(stack) do if x == r then on = true end; if on then cyc[#cyc + 1] = x end end
          cyc[#cyc + 1] = r
          errs:add(U.where(s.requires, i), "dependency cycle: " .. table.concat(cyc, " -> "),
            "remove one of these requires")
        elseif not colour[r] then
          visit(r)
        end
      end
    end
    stack[#stack] = nil
    colour[id] = "black"
  end
  for _, s in ipairs(tree.specs) do if not colour[s.id] then visit(s.id) end end
  -- aliases
  for _, name in ipairs(U.sorted_keys(tree.aliases)) do
    local a = tree.aliases[name]
    if (a.spec == nil) == (a.choose == nil) then
      errs:add(U.where(tree.aliases, name), "alias '" .. name .. "' needs exactly one of spec or choose",
        "write `spec: v21NN` or a `choose:` list")
    end
    local targets = {}
    if a.spec then targets[#targets + 1] = { id = a.spec, at = U.where(a, "spec") } end
    for i, r in ipairs(a.choose or {}) do targets[#targets + 1] = { id = r.spec, at = U.where(a.choose, i) } end
    for _, tg in ipairs(targets) do
      if not tree.by_id[tg.id] then
        errs:add(tg.at, "alias '" .. name .. "' names unknown spec " .. tg.id .. U.did_you_mean(tg.id, ids), "name an existing spec id")
      end
    end
    if a.set and a.spec and tree.by_id[a.spec] then
      local spec = tree.by_id[a.spec]
      for _, pname in ipairs(U.sorted_keys(a.set)) do
        local decl = spec.params and spec.params[pname]
        if not decl then
          errs:add(U.where(a.set, pname), string.format("alias '%s' sets unknown param %s.%s%s", name, a.spec, pname,
            U.did_you_mean(pname, U.sorted_keys(spec.params or {}))), "use a param declared by " .. a.spec)
        else
          local _, msg = S.coerce_param(U.plain(decl), a.set[pname])
          if msg then errs:add(U.where(a.set, pname), string.format("alias '%s': %s.%s %s", name, a.spec, pname, msg), "fix the value") end
        end
      end
    end
  end
  -- baseline specs (active in every selection)
  for i, id in ipairs(tree.doc.baseline or {}) do
    if not tree.by_id[id] then
      errs:add(U.where(tree.doc.baseline, i), "baseline names unknown spec " .. id .. U.did_you_mean(id, ids), "name an existing spec id")
    end
  end
  -- presets
  for _, name in ipairs(U.sorted_keys(tree.presets)) do
    local p = tree.presets[name]
    for i, item in ipairs(p.enable) do
      if not (tree.aliases[item] or tree.by_id[item] or tree.presets[item] or tree.by_name[item]) then
        errs:add(U.where(p.enable, i), "preset '" .. name .. "' enables unknown '" .. item .. "'" ..
          U.did_you_mean(item, T.selectable_names(tree)), "name an alias, spec id or preset")
      end
    end
  end
  -- tree defaults
  for _, key in ipairs(U.sorted_keys(tree.doc.defaults or {})) do
    local id, pname = key:match("^(v%d+)%.(.+)$")
    local spec = tree.by_id[id]
    local decl = spec and spec.params and spec.params[pname]
    if not decl then
      errs:add(U.where(tree.doc.defaults, key), "default for unknown param " .. key, "name a declared param")
    else
      local _, msg = S.coerce_param(U.plain(decl), tree.doc.defaults[key])
      if msg then errs:add(U.where(tree.doc.defaults, key), "default " .. key .. " " .. msg, "fix the value") end
    end
  end
end

function T.selectable_names(tree)
  local names = {}
  for k in pairs(tree.aliases) do names[#names + 1] = k end
  for k in pairs(tree.presets) do names[#names + 1] = k end
  for _, s in ipairs(tree.specs) do names[#names + 1] = s.id; names[#names + 1] = s.name end
  table.sort(names)
  return names
end

-- Loads specs/models/NAME.yaml (or a path) next to the tree.
local function load_named(tree, kind, schema, name, flag)
  local dir = tree.dir .. "/" .. kind
  local path = name
  if not name:match("%.ya?ml$") then path = dir .. "/" .. name .. ".yaml" end
  if hyp.stat(path) ~= "file" then
    local names = {}
    for _, f in ipairs(hyp.list_dir(dir) or {}) do
      local n = f:match("^(.*)%.yaml$")
      if n then names[#names + 1] = n end
    end
    U.fail("<command line>", string.format("unknown %s '%s'%s", flag, name, U.did_you_mean(name, names)),
      "use one of: " .. table.concat(names, ", "))
  end
  local doc = load_doc(path)
  local errs = U.errors()
  S.check(schema, doc, errs, path)
  errs:raise_if_any()
  return doc, path
end

-- Cross-field rules of a model's `moe` section (the schema checks each field alone).
function T.check_moe(m, errs)
  local e = m.moe
  if e.top_k > e.n_experts then
    errs:add(U.where(e, "top_k"), string.format("top_k %d exceeds n_experts %d", e.top_k, e.n_experts),
      "choose top_k <= n_experts")
  end
  if e.dropless and e.capacity_factor then
    errs:add(U.where(e, "capacity_factor"), "capacity_factor and dropless: true exclude each other",
      "drop one: dropless routes every token, a capacity factor drops the overflow")
  elseif not e.dropless and not e.capacity_factor then
    errs:add(U.where(e), "neither capacity_factor nor dropless: true is given",
      "add dropless: true (every token routed) or capacity_factor: 1.25 (tokens over capacity dropped)")
  end
  if e.capacity_factor and e.capacity_factor < 1 then
    errs:add(U.where(e, "capacity_factor"), string.format("capacity_factor %g < 1 drops tokens even under a perfectly balanced load", e.capacity_factor),
      "use a value >= 1 (1.0-2.0 is usual)")
  end
  if e.first_dense_layers and e.first_dense_layers >= m.n_layers then
    errs:add(U.where(e, "first_dense_layers"), string.format("first_dense_layers %d leaves no MoE layer of %d", e.first_dense_layers, m.n_layers),
      "choose fewer than n_layers, or drop the moe section")
  end
  if e.bias_update_rate and e.router_bias ~= "aux_free" then
    errs:add(U.where(e, "bias_update_rate"), "bias_update_rate is the aux-loss-free bias's step, and router_bias is not aux_free",
      "set router_bias: aux_free, or drop bias_update_rate")
  end
  if e.router == "softmax" and e.router_bias == "aux_free" then
    errs:add(U.where(e, "router_bias"), "the aux-loss-free bias is defined for the sigmoid router (DeepSeek-V3)",
      "set router: sigmoid, or router_bias: none")
  end
end

function T.load_model(tree, name)
  local m, path = load_named(tree, "models", S.model, name, "--model")
  local errs = U.errors()
  local nkv = m.n_kv_heads or m.n_heads
  if m.d_model % m.n_heads ~= 0 then
    errs:add(U.where(m, "n_heads"), string.format("d_model %d is not divisible by n_heads %d", m.d_model, m.n_heads),
      "choose n_heads dividing d_model")
  end
  if m.n_heads % nkv ~= 0 then
    errs:add(U.where(m, "n_kv_heads"), string.format("n_heads %d is not a multiple of n_kv_heads %d", m.n_heads, nkv),
      "choose n_kv_heads dividing n_heads")
  end
  if m.position == "rope" and (m.d_model // m.n_heads) % 2 ~= 0 then
    errs:add(U.where(m, "position"), "RoPE needs an even head dimension", "change d_model or n_heads")
  end
  if m.moe then T.check_moe(m, errs) end
  if m.tokenizer == "byte" and m.vocab_size < 256 then
    errs:add(U.where(m, "vocab_size"), "a byte tokenizer needs vocab_size >= 256", "set vocab_size: 256")
  end
  errs:raise_if_any()
  return m, path
end

function T.load_hardware(tree, name)
  local h, path = load_named(tree, "hardware", S.hardware, name, "--hw")
  if h.kind == "gpu" and not h.sm then
    U.fail(U.where(h), "GPU hardware entry needs `sm`", "add e.g. sm: 90")
  end
  return h, path
end

function T.list_names(tree, kind)
  local names = {}
  for _, f in ipairs(hyp.list_dir(tree.dir .. "/" .. kind) or {}) do
    local n = f:match("^(.*)%.yaml$")
    if n then names[#names + 1] = n end
  end
  return names
end

return T
