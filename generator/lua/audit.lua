-- audit.lua — the audit: every spec of the tree with its state (active / inactive / advisory),
-- why, the parameters in effect, what it contributed to this trainer (filled in by the plan and
-- render passes through `contrib`), its claimed effect (labelled as the seed's claim) and its
-- implementation status. Pure: builds tables and text, writes nothing.
local U = require("util")
local A = {}

-- The alias names that point at each spec id.
function A.aliases_by_id(tree)
  local by = {}
  for _, name in ipairs(U.sorted_keys(tree.aliases)) do
    local a = tree.aliases[name]
    local ids = {}
    if a.spec then ids[1] = a.spec end
    for _, r in ipairs(a.choose or {}) do ids[#ids + 1] = r.spec end
    for _, id in ipairs(ids) do
      by[id] = by[id] or {}
      table.insert(by[id], name)
    end
  end
  return by
end

-- contrib: id -> list of strings (what the plan/render/runtime passes took from the spec).
function A.build(tree, cfg, contrib, opts)
  contrib = contrib or {}
  local aliases = A.aliases_by_id(tree)
  local rows = U.array()
  local counts = { active = 0, inactive = 0, advisory = 0 }
  for _, s in ipairs(tree.specs) do
    local a = cfg.active[s.id]
    local state, why
    if s.status == "advisory" then
      state = "advisory"
      why = a and ("selected (" .. table.concat(a.reasons, ", ") .. "); advisory specs contribute documentation and estimates only")
        or "advisory: contributes documentation and estimates (gen size), never trainer code"
    elseif a then
      state, why = "active", table.concat(a.reasons, ", ")
    else
      state = "inactive"
      local al = aliases[s.id]
      why = "not selected" .. (al and (" (enable with --enable " .. al[1] .. ")") or (" (enable with --enable " .. s.id .. ")"))
    end
    counts[state] = counts[state] + 1
    local params = {}
    if a then for p, pv in pairs(a.params) do params[p] = { value = pv.value, source = pv.source } end end
    local c = contrib[s.id]
    local contributed = U.array()
    for _, x in ipairs(c or {}) do contributed[#contributed + 1] = x end
    if a and #contributed == 0 then
      contributed[1] = (opts and opts.no_kernels and
        "nothing to the plan; what it contributes to the kernels is listed by the audit of a generated trainer (gen ... -o DIR, then gen audit DIR)")
        or (s.status == "implemented" and "nothing for this model and target")
        or (s.status .. ": not implemented in this trainer yet — contributes nothing")
    end
    local claims = U.array()
    for _, cl in ipairs(s.claims) do claims[#claims + 1] = { claim = cl.claim, source = cl.source } end
    rows[#rows + 1] = {
      id = s.id, name = s.name, branch = s.branch, title = s.title, status = s.status,
      state = state, why = why, params = params, contributed = contributed, claims = claims,
      aliases = U.array(aliases[s.id] or {}),
    }
  end
  local decisions = U.array()
  for _, d in ipairs(cfg.decisions) do decisions[#decisions + 1] = d end
  return {
    tree = cfg.tree, version = cfg.version, target = cfg.target.name,
    model = cfg.model and cfg.model.name or nil,
    selection = cfg.selection, counts = counts, decisions = decisions, specs = rows,
    kernels = cfg.kernels, -- render.lua's summary (sim and sm_XX targets)
  }
end

local function params_text(params)
  local out = {}
  for _, p in ipairs(U.sorted_keys(params)) do
    out[#out + 1] = string.format("%s=%s (%s)", p, U.fmt_value(params[p].value), params[p].source)
  end
  return table.concat(out, ", ")
end

-- Markdown text. full=false prints inactive specs as one line each.
function A.text(audit)
  local L = {}
  local function w(fmt, ...) L[#L + 1] = string.format(fmt, ...) end
  w("# Hyperion audit — tree %s (v%s), target %s%s", audit.tree, tostring(audit.version), audit.target,
    audit.model and (", model " .. audit.model) or "")
  w("")
  w("Selection: %s", #audit.selection > 0 and table.concat(audit.selection, ", ") or "(none)")
  w("Specs: %d active, %d inactive, %d advisory (of %d)", audit.counts.active, audit.counts.inactive,
    audit.counts.advisory, #audit.specs)
  if #audit.decisions > 0 then
    w("")
    w("## Decisions")
    for _, d in ipairs(audit.decisions) do w("- %s → %s: %s", d.what, tostring(d.value), d.why) end
  end
  local k = audit.kernels
  if k then
    w("")
    w("## Kernels")
    w("%d kernels in %d files for %s%s", k.kernels, k.files, k.target, k.compiled and string.format(
      " — %d compiled, %d cached (NVRTC %s); max %d registers; %s", k.compiled, k.cached, k.nvrtc, k.max_registers,
      k.spills_total > 0 and (k.spills_total .. " bytes of spills") or "no spills") or " (rendered; compiled by the runtime)")
    for _, r in ipairs(k.resources or {}) do
      w("- %s %s: %d registers, %d B spills, %d B smem, %d B stack%s", r.file, r.kernel, r.registers, r.spills, r.smem,
        r.stack, r.spill_reason and (" — " .. r.spill_reason) or "")
    end
  end
  w("")
  w("## Active")
  for _, r in ipairs(audit.specs) do
    if r.state == "active" then
      w("- **%s %s** (%s) — %s", r.id, r.name, r.status, r.why)
      if next(r.params) then w("  - params: %s", params_text(r.params)) end
      for _, c in ipairs(r.contributed) do w("  - contributed: %s", c) end
      for _, c in ipairs(r.claims) do w("  - claim (%s): %s", c.source, c.claim) end
    end
  end
  w("")
  w("## Advisory")
  for _, r in ipairs(audit.specs) do
    if r.state == "advisory" then w("- %s %s — %s", r.id, r.name, r.why) end
  end
  w("")
  w("## Inactive")
  for _, r in ipairs(audit.specs) do
    if r.state == "inactive" then w("- %s %s (%s) — %s", r.id, r.name, r.status, r.why) end
  end
  return table.concat(L, "\n") .. "\n"
end

return A
