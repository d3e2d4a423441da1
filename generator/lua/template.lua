-- template.lua — the kernel template engine: loads templates/FAMILY.cu.lua, renders one family
-- with its compile-time constants, and the `gen render` command (one template, for tests and
-- for reading). Writes nothing but what `gen render -o` asks for. Never: a template seeing
-- anything but its constants and the helpers below; a constant without its declared type.
--
-- Template files (templates/FAMILY.cu.lua) are CUDA C++ with a Lua header:
--
--   --[[ hyperion template
--   family = "gelu"                          -- must match the file name
--   doc = "one line"
--   constants = { H = "int", EPS = { "float", default = 1e-5, doc = "..." }, ... }
--   derive = function(K, decide) ... end     -- optional: derived constants, recorded choices
--   kernels = { { name = "gelu_fwd", params = { "float* __restrict__ out", ..., "long n" },
--                 block = 256, grid = "cdiv(n, 1024)", smem = 0, when = function(K) ... end,
--                 doc = "...", arch_specific = "why" }, ... }  -- arch_specific: compiled for
--                                         -- the target's "a" variant (sm_90a), the reason given
--   ops = { gelu_fwd = { { "gelu_fwd", "out1", "in1", "N*C" } }, ... }   -- plan op -> launches
--   ]]
--   ...CUDA...
--
-- Body syntax: `{{ expr }}` inserts a Lua expression; a line whose first non-blank character is
-- `%` is a Lua statement (`% if emit.gelu_bwd then` ... `% end`). The sandbox sees the constants
-- (as globals), `emit` (the kernels being rendered), and the helpers signature(name), f32(x),
-- cdiv(a, b), partial(name) and the math/string/table libraries; any other name is an error.
-- Rendered files start with a comment naming the template, specs, model and constants, then the
-- constants as `static constexpr`, the body, and the HYP_SIM launch stubs of kernels/DIALECT.md.
local U = require("util")
local M = {}

-- The template families are the files templates/FAMILY.cu.lua, found on disk (sorted by name: the
-- order kernels are listed in a trainer's manifest). A new family is a new file, nothing else.
local families_cache
function M.families()
  if families_cache then return families_cache end
  local names, err = hyp.list_dir(hyp.home .. "/templates")
  if not names then error({ render = "templates/: " .. tostring(err) .. " — gen needs its templates folder beside specs/" }) end
  local fams = {}
  for _, n in ipairs(names) do
    local fam = n:match("^([%w_]+)%.cu%.lua$")
    if fam then fams[#fams + 1] = fam end
  end
  families_cache = fams
  return fams
end

------------------------------------------------------------------------------------------------
-- The template engine

local SAFE = { math = math, string = string, table = table, ipairs = ipairs, pairs = pairs,
  tostring = tostring, tonumber = tonumber, type = type, select = select, error = error,
  assert = assert, next = next }

-- The names are copied in (plain lookups are fast); only an unknown name reaches __index.
local function strict_env(vars, what)
  local env = {}
  for k, v in pairs(SAFE) do env[k] = v end
  for k, v in pairs(vars) do env[k] = v end
  return setmetatable(env, {
    __index = function(_, k) error(string.format("unknown name '%s' in %s", tostring(k), what), 2) end,
  })
end

local function tpath(family) return "templates/" .. family .. ".cu.lua" end

local loaded = {}

-- Parses templates/FAMILY.cu.lua: the header's declarations and the body, compiled to a Lua
-- function whose line numbers are the template file's.
function M.load(family)
  if loaded[family] then return loaded[family] end
  local rel = tpath(family)
  local path = hyp.home .. "/" .. rel
  local text = hyp.read_file(path)
  if not text then error({ render = string.format("%s: no such template — the families are: %s", rel, table.concat(M.families(), ", ")) }) end
  local hs, he = text:find("^%-%-%[%[ hyperion template\n")
  local ce = hs and text:find("\n%]%]\n", he)
  if not hs or not ce then
    error({ render = rel .. ":1: a template starts with a '--[[ hyperion template' header closed by a ']]' line — see generator/lua/render.lua" })
  end
  local header_src = text:sub(he + 1, ce)
  local body = text:sub(ce + 4)
  local header_lines = select(2, text:sub(1, ce + 3):gsub("\n", "")) -- lines before the body
  local decl = {}
  local henv = setmetatable(decl, { __index = SAFE })
  local chunk, err = load(string.rep("\n", 1) .. header_src, "@" .. rel, "t", henv)
  if not chunk then error({ render = err }) end
  local ok, e = pcall(chunk)
  if not ok then error({ render = tostring(e) }) end
  if decl.family ~= family then error({ render = string.format("%s:2: family = %q, expected %q (the file name)", rel, tostring(decl.family), family) }) end
  -- body -> Lua code, one Lua line per template line
  local code = { string.rep("\n", header_lines - 1) }
  if body:sub(-1) ~= "\n" then body = body .. "\n" end
  local find, sub, fmt = string.find, string.sub, string.format
  local p = 1
  while p <= #body do
    local nl = find(body, "\n", p, true)
    local line = sub(body, p, nl - 1)
    p = nl + 1
    local stmt = find(line, "%", 1, true) and line:match("^%s*%%(.*)$")
    if stmt then
      code[#code + 1] = stmt .. "\n"
    elseif not find(line, "{{", 1, true) then
      code[#code + 1] = "_o(" .. fmt("%q", line) .. ', "\\n")\n' -- plain text (the common case)
    else
      local parts, pos = {}, 1
      while true do
        local s, e2, expr = line:find("{{(.-)}}", pos)
        if not s then break end
        if s > pos then parts[#parts + 1] = string.format("%q", line:sub(pos, s - 1)) end
        parts[#parts + 1] = "_s(" .. expr .. ")"
        pos = e2 + 1
      end
      if pos <= #line then parts[#parts + 1] = string.format("%q", line:sub(pos)) end
      parts[#parts + 1] = '"\\n"'
      code[#code + 1] = "_o(" .. table.concat(parts, ", ") .. ")\n"
    end
  end
  local t = { family = family, rel = rel, decl = decl, code = table.concat(code) }
  loaded[family] = t
  return t
end

-- A Lua value as C++ source.
local function cxx(v)
  if type(v) == "boolean" then return v and "true" or "false" end
  if math.type(v) == "integer" then return tostring(v) end
  if type(v) == "number" then
    if v ~= v or v == math.huge or v == -math.huge then error("non-finite constant " .. tostring(v)) end
    local s = string.format("%.9g", v)
    if not s:find("[%.eEn]") then s = s .. ".0" end
    return s .. "f"
  end
  return tostring(v)
end

local function cdiv(a, b) return (a + b - 1) // b end

-- "const float* __restrict__ inp" -> {type = "const float*", name = "inp", decl = the text}
local function parse_param(s)
  local ty, name = s:match("^%s*(.-)%s*([%a_][%w_]*)%s*$")
  if not ty or ty == "" then error("bad kernel parameter '" .. s .. "' (want 'TYPE NAME')") end
  local bare = ty:gsub("__restrict__", ""):gsub("%s+", " "):gsub("%s*%*", "*"):gsub("^%s+", ""):gsub("%s+$", "")
  return { type = bare, name = name, decl = s }
end

local function coerce_constant(family, name, spec, v)
  local ty = spec.type
  local where = "templates/" .. family .. ".cu.lua"
  if ty == "int" then
    local n = tonumber(v)
    if not n or n ~= math.floor(n) then error({ input = true, render = string.format("%s: constant %s must be an integer, got %s", where, name, tostring(v)) }) end
    return math.tointeger(n)
  elseif ty == "float" then
    local n = tonumber(v)
    if not n then error({ input = true, render = string.format("%s: constant %s must be a number, got %s", where, name, tostring(v)) }) end
    return n + 0.0
  elseif ty == "bool" then
    if v == true or v == "true" or v == 1 or v == "1" then return true end
    if v == false or v == "false" or v == 0 or v == "0" then return false end
    error({ input = true, render = string.format("%s: constant %s must be true or false, got %s", where, name, tostring(v)) })
  elseif ty == "enum" then
    for _, x in ipairs(spec.values or {}) do if x == v then return v end end
    error({ input = true, render = string.format("%s: constant %s must be one of %s, got %s", where, name, table.concat(spec.values or {}, ", "), tostring(v)) })
  end
  error({ render = string.format("%s: constant %s has unknown type %s", where, name, tostring(ty)) })
end

-- The declared constants, normalized: name -> {type, default, doc, values}.
local function constant_specs(t)
  local out = {}
  for name, s in pairs(t.decl.constants or {}) do
    if type(s) == "string" then s = { s } end
    out[name] = { type = s[1] or s.type, default = s.default, doc = s.doc, values = s.values }
  end
  return out
end

-- Renders one family. K: constants (name -> value, strings accepted); opts = {kernels = list |
-- nil (all whose `when` holds), specs = {lines}, model = "name", version = "x"}. Returns
-- {source, kernels = {{name, params, block, grid, smem, doc}}, constants, decisions, ops}.
function M.render(family, K_in, opts)
  opts = opts or {}
  local t = M.load(family)
  local cs = constant_specs(t)
  local K = {}
  for name, v in pairs(K_in or {}) do
    if not cs[name] then
      error({ input = true, render = string.format("%s: no constant %s%s", t.rel, name, U.did_you_mean(name, U.sorted_keys(cs))) })
    end
    K[name] = coerce_constant(family, name, cs[name], v)
  end
  for _, name in ipairs(U.sorted_keys(cs)) do
    if K[name] == nil then
      if cs[name].default == nil then
        error({ input = true, render = string.format("%s: constant %s (%s) is required", t.rel, name, cs[name].doc or cs[name].type) })
      end
      K[name] = coerce_constant(family, name, cs[name], cs[name].default)
    end
  end
  local decisions = {}
  local derived = {}
  if t.decl.derive then
    local before = {}
    for k, v in pairs(K) do before[k] = v end
    local ok, e = pcall(t.decl.derive, K, function(what, value, why)
      decisions[#decisions + 1] = { what = family .. "." .. what, value = value, why = why }
    end)
    if not ok then error({ input = true, render = tostring(e) }) end -- derive checks the constants
    for k in pairs(K) do if before[k] == nil then derived[k] = true end end
  end
  -- the kernels to emit
  local decls, by_name = {}, {}
  for _, k in ipairs(t.decl.kernels or {}) do by_name[k.name] = k end
  local want = opts.kernels
  if want then
    for _, n in ipairs(want) do
      if not by_name[n] then error({ input = true, render = string.format("%s: no kernel %s%s", t.rel, n, U.did_you_mean(n, U.sorted_keys(by_name))) }) end
    end
  end
  local wanted = {}
  for _, n in ipairs(want or {}) do wanted[n] = true end
  local emit = {}
  for _, k in ipairs(t.decl.kernels or {}) do
    local on
    if want then on = wanted[k.name] else on = not k.when or k.when(K) end
    if on then
      local params = k.params
      if type(params) == "function" then params = params(K) end
      local ps = {}
      for i, p in ipairs(params) do ps[i] = parse_param(p) end
      local block = k.block
      if type(block) == "string" then block = K[block] end
      if type(block) == "function" then block = block(K) end
      decls[#decls + 1] = { name = k.name, params = ps, block = block, grid = k.grid, smem = k.smem or 0, doc = k.doc,
        arch_specific = k.arch_specific }
      emit[k.name] = true
    end
  end
  -- body
  local out = {}
  local decl_by = {}
  for _, d in ipairs(decls) do decl_by[d.name] = d end
  local helpers = {
    _o = function(...) for i = 1, select("#", ...) do out[#out + 1] = select(i, ...) end end,
    _s = function(v) return cxx(v) end,
    emit = emit, cdiv = cdiv,
    f32 = function(x) return cxx(x + 0.0) end,
    signature = function(name)
      local d = decl_by[name]
      if not d then error("signature(" .. tostring(name) .. "): not a kernel being rendered (check `% if emit." .. tostring(name) .. "`)", 2) end
      local ps = {}
      for i, p in ipairs(d.params) do ps[i] = p.decl end
      return string.format('extern "C" __global__ void __launch_bounds__(%d) %s(%s)', d.block, d.name, table.concat(ps, ", "))
    end,
  }
  helpers.partial = function(name)
    local p = hyp.read_file(hyp.home .. "/templates/partials/" .. name .. ".cuh")
    if not p then error("partial('" .. name .. "'): no templates/partials/" .. name .. ".cuh", 2) end
    return p:gsub("\n$", "")
  end
  local vars = {}
  for k, v in pairs(K) do vars[k] = v end
  for k, v in pairs(helpers) do vars[k] = v end
  local env = strict_env(vars, t.rel)
  local fn, err = load(t.code, "@" .. t.rel, "t", env)
  if not fn then error({ render = err }) end
  local ok, e = pcall(fn)
  if not ok then error({ render = tostring(e) }) end
  -- assemble
  local H = {}
  local function h(fmt, ...) H[#H + 1] = string.format(fmt, ...) end
  h("// %s.cu — rendered by gen (hyperion %s) from %s; do not edit: change the template and regenerate.", opts.file or family, hyp.version, t.rel)
  if t.decl.doc then h("// %s", t.decl.doc) end
  if opts.specs == nil then h("// specs: (none: rendered by `gen render`)")
  else h("// specs: %s", #opts.specs > 0 and table.concat(opts.specs, "; ") or "none active (the baseline kernels for this model)") end
  if opts.plan_ops then h("// plan ops: %s", table.concat(opts.plan_ops, ", ")) end
  if opts.model then h("// model: %s", opts.model) end
  local cl = {}
  for _, name in ipairs(U.sorted_keys(K)) do
    if not derived[name] then cl[#cl + 1] = name .. "=" .. U.fmt_value(K[name]) end
  end
  h("// parameters: %s", #cl > 0 and table.concat(cl, " ") or "(none)")
  local dl = {}
  for _, name in ipairs(U.sorted_keys(derived)) do dl[#dl + 1] = name .. "=" .. U.fmt_value(K[name]) end
  if #dl > 0 then h("// derived: %s", table.concat(dl, " ")) end
  local kl = {}
  for _, d in ipairs(decls) do kl[#kl + 1] = d.name end
  h("// kernels: %s", table.concat(kl, ", "))
  h("")
  h("#if defined(HYP_SIM) && !defined(__launch_bounds__) // the sim prelude may not define it (no-op on the CPU)")
  h("#define __launch_bounds__(...)")
  h("#endif")
  h("")
  h("// compile-time constants")
  for _, name in ipairs(U.sorted_keys(K)) do
    local v = K[name]
    if type(v) == "string" then
      h("// %s = %s (render-time choice)", name, v)
    elseif type(v) == "boolean" then
      h("[[maybe_unused]] static constexpr bool %s = %s;", name, cxx(v))
    elseif math.type(v) == "integer" then
      h("[[maybe_unused]] static constexpr %s %s = %s;", (v > 2147483647 or v < -2147483648) and "long long" or "int", name, cxx(v))
    else
      h("[[maybe_unused]] static constexpr float %s = %s;", name, cxx(v))
    end
  end
  h("")
  local stub = { "", "#ifdef HYP_SIM", "// launch stubs for the CPU simulator (kernels/DIALECT.md): args as cuLaunchKernel takes them" }
  for _, d in ipairs(decls) do
    local a = {}
    for i, p in ipairs(d.params) do a[i] = string.format("*(%s*)args[%d]", p.type, i - 1) end
    stub[#stub + 1] = string.format('extern "C" void hyp_sim_entry_%s(void** args) {', d.name)
    stub[#stub + 1] = string.format("    %s(%s);", d.name, table.concat(a, ", "))
    stub[#stub + 1] = "}"
  end
  stub[#stub + 1] = "#endif"
  local body = table.concat(out):gsub("\n\n\n+", "\n\n")
  local source = table.concat(H, "\n") .. "\n" .. body .. table.concat(stub, "\n") .. "\n"
  -- a kernel that needs the arch-specific variant of the target (sm_90a: wgmma, setmaxnreg) makes
  -- the whole file compile for it; the value is the reason, for the audit
  local arch_specific
  for _, d in ipairs(decls) do arch_specific = arch_specific or d.arch_specific end
  return { family = family, template = t.rel, source = source, kernels = decls, constants = K, arch_specific = arch_specific,
    decisions = decisions, ops = (type(t.decl.ops) == "function" and t.decl.ops(K) or t.decl.ops) or {}, spill_reasons = t.decl.spill_reasons or {} }
end

------------------------------------------------------------------------------------------------
-- ptxas resource report (NVRTC program log with --ptxas-options=-v)

-- Per entry kernel: registers, barriers, shared/constant memory, its own stack frame and the
------------------------------------------------------------------------------------------------
-- `gen render FAMILY [NAME=VALUE ...] [--kernels a,b] [-o FILE] [--list] [--target sm_XX]`: one
-- template, for tests and for reading. Constants not given take the template's defaults. With
-- --target the rendered file is also compiled with NVRTC (through the kernel cache) and each
-- kernel's ptxas resources are printed to stderr as `gen: KERNEL: N registers, S bytes spilled,
-- M bytes smem (sm_XX)`; exit 1 if the compile fails or a kernel spills without a spill_reason.

function M.cli(args, parse)
  local o = parse(args, { ["--kernels"] = "list", ["-o"] = "value", ["--list"] = "flag", ["--target"] = "value" })
  if o["--list"] then
    for _, fam in ipairs(M.families()) do
      local t = M.load(fam)
      local cs = constant_specs(t)
      local c = {}
      for _, name in ipairs(U.sorted_keys(cs)) do
        c[#c + 1] = name .. (cs[name].default ~= nil and ("=" .. U.fmt_value(cs[name].default)) or "")
      end
      local ks = {}
      for _, k in ipairs(t.decl.kernels or {}) do ks[#ks + 1] = k.name end
      io.write(string.format("%-16s %s\n  constants: %s\n  kernels: %s\n", fam, t.decl.doc or "", table.concat(c, " "), table.concat(ks, ", ")))
    end
    return 0
  end
  local fam = o._pos[1]
  if not fam then U.fail("<command line>", "gen render needs a template family", "e.g. gen render layernorm C=768 EPS=1e-5 (gen render --list shows them)") end
  local known = false
  for _, f in ipairs(M.families()) do if f == fam then known = true end end
  if not known then U.fail("<command line>", "unknown template family '" .. fam .. "'" .. U.did_you_mean(fam, M.families()), "gen render --list shows them") end
  local K = {}
  for i = 2, #o._pos do
    local k, v = o._pos[i]:match("^([%w_]+)=(.*)$")
    if not k then U.fail("<command line>", "'" .. o._pos[i] .. "' is not NAME=VALUE", "e.g. gen render layernorm C=768") end
    K[k] = v
  end
  local ok, r = pcall(M.render, fam, K, { kernels = o["--kernels"] })
  if not ok then
    if type(r) == "table" and r.input then U.fail("<command line>", r.render, "gen render --list shows the constants and kernels") end
    if type(r) == "table" and r.render then io.stderr:write("gen: " .. r.render .. " — fix the template\n"); return 1 end
    error(r, 0)
  end
  if o["-o"] then
    local okw, err = hyp.write_file(o["-o"], r.source)
    if not okw then io.stderr:write("gen: " .. err .. "\n"); return 1 end
  else
    io.write(r.source)
  end
  if o["--target"] then return M.compile_report(fam, r, o["--target"]) end
  return 0
end

-- `gen render --target sm_XX`: NVRTC compile of one rendered family, its ptxas report on stderr.
function M.compile_report(fam, r, arch)
  local KC = require("kcompile")
  if not arch:match("^sm_%d+a?$") then U.fail("--target " .. arch, "gen render compiles for a GPU arch only", "e.g. --target sm_90") end
  if not KC.have_nvrtc() then
    U.fail("--target " .. arch, "this gen was built without NVRTC", "install the CUDA toolkit and reconfigure, or render without --target")
  end
  if r.arch_specific and not arch:match("a$") then arch = arch .. "a" end -- as render.lua compiles it
  local okc, res = pcall(hyp.nvrtc_compile, { { name = fam, source = r.source } }, { arch = arch, options = KC.nvrtc_options(),
    include_dirs = KC.include_dirs(), cache_dir = KC.cache_dir(), version = hyp.version })
  if not okc then io.stderr:write("gen: " .. tostring(res) .. "\n"); return 1 end
  res = res[1]
  if not res.ok then io.stderr:write(KC.format_compile_error(fam .. ".cu", res, r.source)); return 1 end
  local bad = 0
  for _, k in ipairs(KC.parse_ptxas(res.log or "")) do
    local sp = k.spill_stores + k.spill_loads
    local why = sp > 0 and r.spill_reasons[k.kernel]
    io.stderr:write(string.format("gen: %s: %d registers, %d bytes spilled, %d bytes smem (%s)%s\n", k.kernel, k.registers, sp, k.smem, arch,
      why and (" — " .. why) or ""))
    if sp > 0 and not why then bad = 1 end
  end
  return bad
end

return M
