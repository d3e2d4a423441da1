-- resolve.lua — turns a selection (--enable names, presets, --set overrides, --target) into the
-- effective configuration: the active specs with the reason each is active, every parameter
-- with its value and where the value came from, and every derived choice with its reason.
-- No silent rewrites: whatever this module decides is recorded in cfg.decisions.
-- Order of parameter sources: spec default < tree default < alias set < --set.
local U = require("util")
local S = require("schema")
local R = {}

-- --target: cpu | sim | sm_NN. `sim` runs the generated CUDA kernels on the CPU and emulates
-- an sm_90 device (tensor-core fragments, FP8 conversions), so sm gates are checked at 90.
function R.parse_target(s)
  if s == "cpu" then return { name = "cpu", kind = "cpu" } end
  if s == "sim" then return { name = "sim", kind = "sim", sm = 90 } end
  local sm = s:match("^sm_(%d+)$")
  if sm and tonumber(sm) >= 50 and tonumber(sm) <= 200 then
    return { name = s, kind = "cuda", sm = tonumber(sm) }
  end
  U.fail("<command line>", string.format("unknown --target '%s'%s", s,
    U.did_you_mean(s, { "cpu", "sim", "sm_80", "sm_86", "sm_89", "sm_90", "sm_100" })),
    "use cpu, sim, or a CUDA architecture such as sm_80 or sm_90")
end

-- Does a gate table ({min_sm, targets}) pass on this target? Returns ok, reason.
local function gate_ok(gates, target)
  if not gates then return true end
  if gates.targets then
    local ok = false
    for _, k in ipairs(gates.targets) do if k == target.kind then ok = true end end
    if not ok then
      return false, string.format("runs only on %s targets; --target %s is %s",
        table.concat(U.plain(gates.targets), "/"), target.name, target.kind)
    end
  end
  if gates.min_sm then
    if target.kind == "cpu" then
      return true, string.format("needs sm_%d on a GPU; the cpu backend emulates its numerics", gates.min_sm)
    end
    if target.sm < gates.min_sm then
      return false, string.format("needs sm_%d or newer; --target %s is sm_%d", gates.min_sm, target.name, target.sm)
    end
  end
  return true
end
R.gate_ok = gate_ok

-- opts: {enable = {names...}, set = {"vNNNN.p=v", ...}, target = "sm_90", model = name|nil}
function R.resolve(tree, opts)
  local target = R.parse_target(opts.target or "cpu")
  local cfg = {
    tree = tree.path, version = tree.doc.version, target = target,
    active = {},          -- id -> {id, name, reasons = {...}, params = {p -> {value, source}}}
    order = {},           -- active ids in tree order (filled at the end)
    decisions = {},       -- {what, value, why}
    selection = U.array(), -- the user's words, in order
    notes = U.array(),
  }
  local function decide(what, value, why) cfg.decisions[#cfg.decisions + 1] = { what = what, value = value, why = why } end
  local alias_sets = {}   -- id -> param -> {value, by}
  local names = nil

  local function activate(id, reason)
    local a = cfg.active[id]
    if not a then
      a = { id = id, name = tree.by_id[id].name, reasons = U.array(), params = {} }
      cfg.active[id] = a
    end
    for _, r in ipairs(a.reasons) do if r == reason then return a end end
    a.reasons[#a.reasons + 1] = reason
    return a
  end

  local expanding = {}
  local function enable(name, via)
    local alias = tree.aliases[name]
    if alias then
      local id = alias.spec
      if alias.choose then
        local tried = {}
        for _, rule in ipairs(alias.choose) do
          local ok, why = gate_ok(rule.when, target)
          local sok, swhy = gate_ok(tree.by_id[rule.spec].gates, target)
          if ok and sok then id = rule.spec; decide("alias " .. name, rule.spec,
            rule.why .. (#tried > 0 and (" (not " .. table.concat(tried, "; not ") .. ")") or "")); break end
          tried[#tried + 1] = rule.spec .. ": " .. (why or swhy)
        end
        if not id then
          U.fail("<command line>", string.format("'%s' has no variant for --target %s: %s", name, target.name,
            table.concat(tried, "; ")), "choose another target or drop '" .. name .. "'")
        end
      end
      activate(id, via .. " (alias " .. name .. ")")
      for _, p in ipairs(U.sorted_keys(alias.set or {})) do
        alias_sets[id] = alias_sets[id] or {}
        local prev = alias_sets[id][p]
        local v = alias.set[p]
        if prev and prev.value ~= v then
          U.fail("<command line>", string.format("'%s' and '%s' both set %s.%s (%s vs %s)", prev.by, name, id, p,
            U.fmt_value(prev.value), U.fmt_value(v)), "enable only one of them")
        end
        alias_sets[id][p] = { value = v, by = name }
      end
      return
    end
    local preset = tree.presets[name]
    if preset then
      if expanding[name] then
        U.fail(U.where(preset), "preset '" .. name .. "' includes itself", "remove the cycle from the presets")
      end
      expanding[name] = true
      decide("preset " .. name, table.concat(U.plain(preset.enable), ","), preset.doc)
      for _, item in ipairs(preset.enable) do enable(item, "preset " .. name) end
      expanding[name] = nil
      return
    end
    local spec = tree.by_id[name] or tree.by_name[name]
    if spec then
      activate(spec.id, via)
      return
    end
    names = names or require("tree").selectable_names(tree)
    U.fail("<command line>", string.format("unknown technique '%s' in --enable%s", name, U.did_you_mean(name, names)),
      "run `gen list " .. tree.path .. "` to see ids, aliases and presets")
  end

  for _, id in ipairs(tree.doc.baseline or {}) do activate(id, "baseline: part of every selection") end
  for _, name in ipairs(opts.enable or {}) do
    cfg.selection[#cfg.selection + 1] = name
    enable(name, "--enable " .. name)
  end

  -- closure over requires (breadth first, so the reason names the nearest requirer)
  local queue = {}
  for _, s in ipairs(tree.specs) do if cfg.active[s.id] then queue[#queue + 1] = s.id end end
  local qi = 1
  while qi <= #queue do
    local id = queue[qi]; qi = qi + 1
    for _, r in ipairs(tree.by_id[id].requires) do
      local fresh = not cfg.active[r]
      activate(r, "required by " .. id)
      if fresh then queue[#queue + 1] = r end
    end
  end

  -- conflicts: every pair once, both named, with how to choose
  local errs = U.errors()
  for _, s in ipairs(tree.specs) do
    if cfg.active[s.id] then
      for _, c in ipairs(s.conflicts) do
        if cfg.active[c.id] and s.id < c.id then
          local o = tree.by_id[c.id]
          errs:add("<command line>", string.format("%s %s (%s) conflicts with %s %s (%s): %s",
            s.id, s.name, table.concat(cfg.active[s.id].reasons, ", "), o.id, o.name,
            table.concat(cfg.active[c.id].reasons, ", "), c.why),
            "keep one of them: drop the other from --enable (or from the preset that brings it)")
        end
      end
    end
  end
  errs:raise_if_any()

  -- hardware gates
  for _, s in ipairs(tree.specs) do
    local a = cfg.active[s.id]
    if a then
      local ok, why = gate_ok(s.gates, target)
      if not ok then
        errs:add("<command line>", string.format("%s %s cannot run on --target %s: it %s", s.id, s.name, target.name, why),
          "choose a target that supports it, or drop it (" .. table.concat(a.reasons, ", ") .. ")")
      elseif why then
        decide(s.id .. " gate", "emulated", why)
      end
    end
  end
  errs:raise_if_any()

  -- parameters
  local defaults = tree.doc.defaults or {}
  for _, s in ipairs(tree.specs) do
    local a = cfg.active[s.id]
    if a then
      for _, p in ipairs(U.sorted_keys(s.params or {})) do
        local decl = s.params[p]
        local v, src = decl.default, "spec default"
        local key = s.id .. "." .. p
        if defaults[key] ~= nil then v, src = defaults[key], "tree default (" .. tree.path .. ")" end
        local as = alias_sets[s.id] and alias_sets[s.id][p]
        if as then v, src = as.value, "alias " .. as.by end
        local cv = S.coerce_param(U.plain(decl), v)
        a.params[p] = { value = cv == nil and v or cv, source = src }
      end
    end
  end
  for _, item in ipairs(opts.set or {}) do
    local id, p, v = item:match("^(v%d+)%.([%w_]+)=(.*)$")
    local name, np, nv = item:match("^([%a][%w_%-]*)%.([%w_]+)=(.*)$")
    if not id and name then -- a spec name or alias instead of the id: the active spec it names
      local s, al = tree.by_name[name], tree.aliases[name]
      if s then id = s.id
      elseif al and al.spec then id = al.spec
      elseif al and al.choose then
        id = al.choose[1].spec
        for _, rule in ipairs(al.choose) do if cfg.active[rule.spec] then id = rule.spec; break end end
      end
      if id then p, v = np, nv else
        errs:add("<command line>", string.format("--set '%s': unknown spec '%s'%s", item, name,
          U.did_you_mean(name, require("tree").selectable_names(tree))), "use an id, name or alias from `gen list`")
        goto continue
      end
    end
    if not id then
      errs:add("<command line>", "--set '" .. item .. "' is not of the form vNNNN.param=value", "e.g. --set v2104.stage=2")
    elseif not tree.by_id[id] then
      errs:add("<command line>", "--set names unknown spec " .. id, "use an id from `gen list`")
    elseif not cfg.active[id] then
      errs:add("<command line>", string.format("--set %s: %s %s is not active", item, id, tree.by_id[id].name),
        "enable it too, e.g. --enable " .. id)
    else
      local s = tree.by_id[id]
      local decl = s.params and s.params[p]
      if not decl then
        errs:add("<command line>", string.format("--set %s: %s has no param '%s'%s", item, id, p,
          U.did_you_mean(p, U.sorted_keys(s.params or {}))), "params of " .. id .. ": " ..
          table.concat(U.sorted_keys(s.params or {}), ", "))
      else
        local cv, msg = S.coerce_param(U.plain(decl), v)
        if msg then
          errs:add("<command line>", string.format("--set %s: %s.%s %s", item, id, p, msg), "give a valid value")
        else
          cfg.active[id].params[p] = { value = cv, source = "--set" }
        end
      end
    end
    ::continue::
  end
  errs:raise_if_any()

  for _, s in ipairs(tree.specs) do if cfg.active[s.id] then cfg.order[#cfg.order + 1] = s.id end end
  return cfg
end

-- Value of an active spec's param, or nil when the spec is inactive.
function R.param(cfg, id, p)
  local a = cfg.active[id]
  return a and a.params[p] and a.params[p].value
end

return R
