-- techniques.lua — the registry of technique modules and the hook points of the pipeline.
-- A technique module (generator/lua/techniques/BRANCH/vNNNN_name.lua) is the only place that
-- knows what one spec does; plan.lua and render.lua call the hooks below and never name a spec
-- id. A module returns a table:
--
--   { id = "v2167",                       -- the spec it implements (one module per spec)
--     settings = { {section, key, param, default, what, quiet} ... },   -- plan values taken
--                                         -- from its params (the default applies, and is
--                                         -- recorded, while the spec is inactive)
--     families = { "adamw", ... } | "all",-- kernel families it shapes (named in their headers)
--     derive   = function(ctx) end,       -- after resolve: checks, decisions, facts for others
--     model    = function(ctx, m) end,    -- model-graph transforms (norm kind, QK-norm, ...)
--     params   = function(ctx, ps, names) end,  -- the parameter list (init, decay flags)
--     rewrite  = function(ctx, g, list, op) return op end,  -- op-list rewrite, chained in tree
--                                         -- order; may emit ops before op with g.emit(list, o)
--     schedule = function(ctx, g, sched) end,  -- the built step: sched.fwd, sched.bwd (op lists,
--                                         -- each op with .layer = its transformer layer or nil),
--                                         -- sched.loss, sched.L; may replace or extend the lists
--                                         -- (e.g. forward replays before a layer's backward);
--                                         -- runs before lifetimes, so the memory plan sees it
--     memory   = function(ctx, mem) end,  -- the activation arena layout (mem.items, lifetimes)
--     sections = function(ctx, plan) end, -- plan sections: train, optimizer, checkpoint, ...
--     kernels  = function(ctx, k) end,    -- kernel instances: k.want(family, kernels, K), k.seen
--     rendered = function(ctx, r) end }   -- after render/compile: what reached the kernels
--
-- ctx (one per module and pass) carries cfg, the target, the module's params (ctx.param(p)),
-- ctx.decide(what, value, why) and ctx.contribute(text) — the audit's "contributed" lines, which
-- a module writes from what its hook actually changed — and ctx.facts, the decisions modules
-- share by meaning rather than by spec id (facts.precision, facts.fp8, facts.attention, ...).
-- Never: a hook that silently does nothing for an active spec; a module for a planned spec.
local U = require("util")
local T = {}

T.DIR = "generator/lua/techniques"

local cache = nil

-- Every module on disk, keyed by spec id: {id = {module, file}}.
function T.all()
  if cache then return cache end
  cache = {}
  local root = hyp.home .. "/" .. T.DIR
  for _, branch in ipairs(hyp.list_dir(root) or {}) do
    if hyp.stat(root .. "/" .. branch) == "dir" then
      for _, f in ipairs(hyp.list_dir(root .. "/" .. branch) or {}) do
        local base = f:match("^(v%d%d%d%d_[%w_]+)%.lua$")
        if base then
          local mod = require("techniques." .. branch .. "." .. base)
          local file = T.DIR .. "/" .. branch .. "/" .. f
          if type(mod) ~= "table" or mod.id ~= base:sub(1, 5) then
            error(file .. ": a technique module returns a table whose id is the spec id of its file name (" .. base:sub(1, 5) .. ")")
          end
          if cache[mod.id] then error(file .. ": a second module for " .. mod.id .. " (" .. cache[mod.id].file .. ")") end
          cache[mod.id] = { module = mod, file = file, branch = branch }
        end
      end
    end
  end
  return cache
end

-- The modules of the tree's specs in tree order; active only (default) or all.
function T.modules(tree, cfg, all)
  local mods = T.all()
  local list = {}
  for _, s in ipairs(tree.specs) do
    local e = mods[s.id]
    if e and (all or cfg.active[s.id]) then list[#list + 1] = e.module end
  end
  return list
end

-- The context a hook sees. contrib: id -> list of strings (the audit's "contributed").
function T.ctx(cfg, mod, contrib)
  local id = mod.id
  local a = cfg.active[id]
  cfg.facts = cfg.facts or {}
  local ctx = { cfg = cfg, id = id, target = cfg.target, facts = cfg.facts, active = a ~= nil,
    name = a and a.name or id }
  function ctx.param(p)
    local pv = a and a.params[p]
    return pv and pv.value
  end
  function ctx.param_source(p)
    local pv = a and a.params[p]
    return pv and pv.source
  end
  function ctx.decide(what, value, why) cfg.decisions[#cfg.decisions + 1] = { what = what, value = value, why = why } end
  function ctx.contribute(text)
    contrib[id] = contrib[id] or {}
    table.insert(contrib[id], text)
  end
  -- a one-line warning on stderr (and a decision in the audit): the spec does less than asked
  function ctx.warn(text)
    io.stderr:write(string.format("gen: warning: %s %s: %s\n", id, ctx.name, text))
    ctx.decide(id .. " warning", "partial", text)
  end
  -- refuse this selection at gen time (exit 2): the spec cannot do what the user asked
  function ctx.refuse(what, fix)
    U.fail("<command line>", string.format("%s %s: %s", id, ctx.name, what), fix)
  end
  return ctx
end

-- Runs hook `name` of every active module in tree order with (ctx, ...).
function T.run(tree, cfg, contrib, name, ...)
  for _, mod in ipairs(T.modules(tree, cfg)) do
    if mod[name] then mod[name](T.ctx(cfg, mod, contrib), ...) end
  end
end

-- The op-list rewrite chain: every active module's `rewrite` in tree order; each may emit ops
-- before the op and returns the op to append (possibly changed).
function T.rewriter(tree, cfg, contrib)
  local chain = {}
  for _, mod in ipairs(T.modules(tree, cfg)) do
    if mod.rewrite then chain[#chain + 1] = { mod = mod, ctx = T.ctx(cfg, mod, contrib) } end
  end
  return function(g, list, op)
    for _, c in ipairs(chain) do op = c.mod.rewrite(c.ctx, g, list, op) end
    return op
  end
end

-- Plan values owned by modules' `settings`: the active spec's param, or the default (recorded
-- as a decision unless quiet) while it is inactive. Every module is consulted, active or not.
function T.apply_settings(tree, cfg, contrib, sections)
  for _, mod in ipairs(T.modules(tree, cfg, true)) do
    local ctx = T.ctx(cfg, mod, contrib)
    for _, st in ipairs(mod.settings or {}) do
      local section, key, p, dflt, what, quiet = st[1], st[2], st[3], st[4], st[5], st.quiet
      local sec = sections[section]
      local v = ctx.param(p)
      if v == nil then
        sec[key] = dflt
        if not quiet then ctx.decide(what, dflt, mod.id .. " inactive: " .. tostring(dflt)) end
      else
        sec[key] = v
        if not quiet then ctx.contribute(string.format("%s = %s", what, U.fmt_value(v))) end
      end
    end
  end
end

-- Kernel families each active module shapes: family -> {"vNNNN name", ...} in tree order.
function T.family_specs(tree, cfg)
  local by = {}
  local all = {}
  for _, mod in ipairs(T.modules(tree, cfg)) do
    local line = mod.id .. " " .. cfg.active[mod.id].name
    if mod.families == "all" then all[#all + 1] = line
    else
      for _, fam in ipairs(mod.families or {}) do
        by[fam] = by[fam] or {}
        table.insert(by[fam], line)
      end
    end
  end
  return by, all
end

return T
