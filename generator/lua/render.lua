-- render.lua — CUDA kernels from templates: the template engine, the render pass (which kernels
-- this trainer needs, with which compile-time constants) and the compile step (NVRTC through the
-- C host's cache for sm_XX targets). Writes nothing itself: it returns the files that cli.lua
-- stages into out/NAME/kernels/. Never: a silent choice (every block size, tile or fallback is
-- in cfg.decisions), a template seeing anything but its constants and the helpers below.
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
--                 doc = "..." }, ... }
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

M.FAMILIES = { "embedding", "layernorm", "rmsnorm", "residual", "rope", "attention_naive", "flash_attention",
  "gelu", "swiglu", "classifier", "adamw", "global_norm", "cast" }

-- plan op -> template family (false: not a template: cuBLASLt or a memset in the runtime)
M.OP_FAMILY = {
  embedding_fwd = "embedding", embedding_bwd = "embedding",
  layernorm_fwd = "layernorm", layernorm_bwd = "layernorm",
  rmsnorm_fwd = "rmsnorm", rmsnorm_bwd = "rmsnorm", qknorm_fwd = "rmsnorm", qknorm_bwd = "rmsnorm",
  add_fwd = "residual", accumulate = "residual",
  rope_fwd = "rope", rope_bwd = "rope",
  attention_fwd = "attention_naive", attention_bwd = "attention_naive",
  flash_attention_fwd = "flash_attention", flash_attention_bwd = "flash_attention",
  gelu_fwd = "gelu", gelu_bwd = "gelu", swiglu_fwd = "swiglu", swiglu_bwd = "swiglu",
  crossentropy = "classifier", crossentropy_fused = "classifier", fp8_quantize = "cast", round_bf16 = "cast",
  matmul_fwd = false, matmul_bwd = false, zero = false,
}
local NOT_TEMPLATE = { matmul_fwd = "cuBLASLt (runtime)", matmul_bwd = "cuBLASLt (runtime)",
  zero = "cudaMemsetAsync (runtime)" }


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
  if not text then error({ render = string.format("%s: no such template — the families are: %s", rel, table.concat(M.FAMILIES, ", ")) }) end
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
      decls[#decls + 1] = { name = k.name, params = ps, block = block, grid = k.grid, smem = k.smem or 0, doc = k.doc }
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
  return { family = family, template = t.rel, source = source, kernels = decls, constants = K,
    decisions = decisions, ops = t.decl.ops or {}, spill_reasons = t.decl.spill_reasons or {} }
end

------------------------------------------------------------------------------------------------
-- ptxas resource report (NVRTC program log with --ptxas-options=-v)

-- Per entry kernel: registers, barriers, shared/constant memory, its own stack frame and the
-- cumulative stack (with the non-inlined functions it calls), and spills. The "Function
-- properties" blocks of other functions (e.g. the slow path of double sin/cos) that follow an entry
-- add their spills to it (conservative: a spill anywhere counts) but not their stack frames.
function M.parse_ptxas(log)
  local list, cur, props = {}, nil, nil
  for line in (log .. "\n"):gmatch("(.-)\n") do
    local name = line:match("Compiling entry function '([^']+)'")
    if name then
      cur = { kernel = name, registers = 0, spill_stores = 0, spill_loads = 0, stack = 0, stack_cumulative = 0,
        smem = 0, barriers = 0, cmem0 = 0 }
      list[#list + 1] = cur
      props = nil
    elseif cur then
      props = line:match("Function properties for (%S+)") or props
      local st = line:match("(%d+) bytes stack frame")
      if st and props == cur.kernel then cur.stack = tonumber(st) end
      local ss = line:match("(%d+) bytes spill stores")
      if ss then cur.spill_stores = cur.spill_stores + tonumber(ss) end
      local sl = line:match("(%d+) bytes spill loads")
      if sl then cur.spill_loads = cur.spill_loads + tonumber(sl) end
      local rg = line:match("Used (%d+) registers")
      if rg then cur.registers = tonumber(rg) end
      local br = line:match("used (%d+) barriers")
      if br then cur.barriers = tonumber(br) end
      local cs = line:match("(%d+) bytes cumulative stack size")
      if cs then cur.stack_cumulative = tonumber(cs) end
      local sm = line:match("(%d+) bytes smem")
      if sm then cur.smem = tonumber(sm) end
      local cm = line:match("(%d+) bytes cmem%[0%]")
      if cm then cur.cmem0 = tonumber(cm) end
    end
  end
  return list
end

------------------------------------------------------------------------------------------------
-- The render pass: plan -> families with constants

local function first_op(plan, name)
  for _, list in ipairs({ plan.forward, { plan.loss }, plan.backward }) do
    for _, o in ipairs(list or {}) do if o.op == name then return o end end
  end
end

-- Sites where a residual add feeds a norm (forward) and where a norm's input gradient is then
-- accumulated into by the residual branch (backward): the residual_norm fusion sites.
local function residual_norm_sites(plan)
  local fwd, bwd = U.array(), U.array()
  local F = plan.forward
  for i = 1, #F - 1 do
    local a, n = F[i], F[i + 1]
    if a.op == "add_fwd" and (n.op == "layernorm_fwd" or n.op == "rmsnorm_fwd") and n.ins[1] == a.outs[1] then
      fwd[#fwd + 1] = { ops = U.array({ i - 1, i }), add = a.outs[1], norm = n.op }
    end
  end
  local Bk = plan.backward
  for i = 1, #Bk - 1 do
    local n, a = Bk[i], Bk[i + 1]
    if (n.op == "layernorm_bwd" or n.op == "rmsnorm_bwd") and a.op == "accumulate" and a.outs[1] == n.outs[1] then
      bwd[#bwd + 1] = { ops = U.array({ i - 1, i }), dinp = n.outs[1], norm = n.op }
    end
  end
  return fwd, bwd
end

-- Sites where RoPE feeds attention (forward) and attention's input gradient feeds RoPE's
-- backward: the rotation then happens inside qkv_permute_fwd/bwd (rope = 1), on the pre-RoPE
-- buffer, and the plain rope_fwd/rope_bwd launches are skipped.
local function rope_attention_sites(plan)
  local fwd, bwd = U.array(), U.array()
  local F = plan.forward
  local pre_rope = {} -- rope output -> its input (the pre-RoPE QKV the fused backward re-reads)
  for i = 1, #F - 1 do
    local r, a = F[i], F[i + 1]
    if r.op == "rope_fwd" then pre_rope[r.outs[1]] = r.ins[1] end
    if r.op == "rope_fwd" and a.op == "attention_fwd" and a.ins[1] == r.outs[1] then
      fwd[#fwd + 1] = { ops = U.array({ i - 1, i }), qkv = r.ins[1] }
    end
  end
  local Bk = plan.backward
  for i = 1, #Bk - 1 do
    local a, j = Bk[i], i + 1
    while Bk[j] and Bk[j].op == "zero" do j = j + 1 end -- the zeroing of rope_bwd's output stays
    local r = Bk[j]
    if a.op == "attention_bwd" and r and r.op == "rope_bwd" and r.ins[1] == a.outs[1] then
      bwd[#bwd + 1] = { ops = U.array({ i - 1, j - 1 }), dqkv = r.outs[1], qkv = pre_rope[a.ins[2]] }
    end
  end
  return fwd, bwd
end

-- How a fused site launches: the same binding vocabulary as the templates' `ops` tables, with
-- `a.` / `b.` naming the first and second op of the pair.
local FUSED_LAUNCHES = {
  residual_layernorm_fwd = { { "residual_layernorm_fwd", "a.out1", "b.out1", "b.out2", "b.out3", "a.in1", "a.in2", "b.in2", "b.in3", "N" } },
  residual_rmsnorm_fwd = { { "residual_rmsnorm_fwd", "a.out1", "b.out1", "b.out2", "a.in1", "a.in2", "b.in2", "N" } },
  residual_layernorm_bwd = { { "residual_layernorm_bwd_dx", "a.out1", "b.in1", "a.in1", "a.in2", "a.in3", "a.in4", "a.in5", "N" },
    { "layernorm_bwd_dw", "scratch(2*SEGS*C)", "a.in1", "a.in2", "a.in4", "a.in5", "N" },
    { "layernorm_bwd_dw_finish", "a.out2", "a.out3", "scratch(2*SEGS*C)" } },
  residual_rmsnorm_bwd = { { "residual_rmsnorm_bwd_dx", "a.out1", "b.in1", "a.in1", "a.in2", "a.in3", "a.in4", "N" },
    { "rmsnorm_bwd_dw", "scratch(SEGS*C)", "a.in1", "a.in2", "a.in4", "N" },
    { "rmsnorm_bwd_dw_finish", "a.out2", "scratch(SEGS*C)" } },
  rope_attention_fwd = { { "qkv_permute_fwd", "scratch.q", "scratch.k", "scratch.v", "a.in1", "N", "T", "1" },
    { "attention_scores", "b.out2", "scratch.q", "scratch.k", "T" }, { "attention_softmax_fwd", "b.out2", "B", "T" },
    { "attention_value", "b.out1", "b.out2", "scratch.v", "T" } },
  rope_attention_bwd = { { "qkv_permute_fwd", "scratch.q", "scratch.k", "scratch.v", "site.qkv", "N", "T", "1" },
    { "attention_bwd_datt", "a.out2", "a.in1", "scratch.v", "T" }, { "attention_softmax_bwd", "a.out2", "a.in3", "B", "T" },
    { "attention_bwd_dq", "scratch.dq", "a.out2", "scratch.k", "T" },
    { "attention_bwd_dkv", "scratch.dk", "scratch.dv", "a.out2", "a.in3", "scratch.q", "a.in1", "T" },
    { "qkv_permute_bwd", "b.out1", "scratch.dq", "scratch.dk", "scratch.dv", "N", "T", "1" } },
}

-- Decides the families, their constants and kernels for this plan: the ones its ops need, plus
-- what the technique modules' `kernels` hooks want (facts: cfg.facts, set by the modules).
-- Returns a list of {family, constants, kernels (names), specs (lines)} and the manifest's
-- op/fusion notes.
function M.instances(tree, cfg, plan, decide, contrib)
  local TQ = require("techniques")
  local facts = cfg.facts or {}
  local m = plan.model
  local need = {}   -- family -> {K = constants, kernels = set}
  local unmapped, missing = {}, {}
  local function want(family, kernels, K)
    local f = need[family] or { K = {}, kernels = {} }
    need[family] = f
    for _, k in ipairs(kernels) do f.kernels[k] = true end
    for k, v in pairs(K or {}) do f.K[k] = v end
  end
  local seen = {}
  for _, list in ipairs({ plan.forward, { plan.loss }, plan.backward }) do
    for _, o in ipairs(list or {}) do
      if not seen[o.op] then
        seen[o.op] = true
        local fam = M.OP_FAMILY[o.op]
        if fam == nil then missing[#missing + 1] = o.op
        elseif fam == false then unmapped[o.op] = NOT_TEMPLATE[o.op] end
      end
    end
  end
  local fusion = facts.fusion and facts.fusion.residual_norm
  local fwd_sites, bwd_sites = residual_norm_sites(plan)
  local rope_fwd_sites, rope_bwd_sites = rope_attention_sites(plan)

  if seen.embedding_fwd or seen.embedding_bwd then
    want("embedding", { "embedding_fwd", "embedding_bwd_wte", "embedding_bwd_wpe" },
      { C = m.C, V = m.V, WPE = m.position == "learned" })
  end
  for _, norm in ipairs({ "layernorm", "rmsnorm" }) do
    if seen[norm .. "_fwd"] then
      local o = first_op(plan, norm .. "_fwd")
      local ks = { norm .. "_fwd", norm .. "_bwd_dx", norm .. "_bwd_dw", norm .. "_bwd_dw_finish" }
      if fusion then
        ks[#ks + 1] = "residual_" .. norm .. "_fwd"
        ks[#ks + 1] = "residual_" .. norm .. "_bwd_dx"
      end
      want(norm, ks, { C = m.C, EPS = o.attrs.eps })
    end
  end
  if seen.qknorm_fwd then
    local o = first_op(plan, "qknorm_fwd")
    want("rmsnorm", { "qknorm_fwd", "qknorm_bwd_dx", "qknorm_bwd_dw", "qknorm_bwd_dw_finish" },
      { NH = m.NH, NKV = m.NKV, HD = m.hd, QK_EPS = o.attrs.eps })
  end
  if seen.add_fwd or seen.accumulate then want("residual", { "add_fwd", "accumulate" }, {}) end
  if seen.attention_fwd then
    local rope = first_op(plan, "rope_fwd")
    local ks = { "qkv_permute_fwd", "qkv_permute_bwd" }
    if rope then ks[#ks + 1] = "rope_fwd"; ks[#ks + 1] = "rope_bwd" end
    want("rope", ks, { NH = m.NH, NKV = m.NKV, HD = m.hd, ROPE = rope ~= nil,
      THETA = rope and rope.attrs.theta or 10000.0 })
    want("attention_naive", { "attention_scores", "attention_softmax_fwd", "attention_value",
      "attention_bwd_datt", "attention_softmax_bwd", "attention_bwd_dq", "attention_bwd_dkv" },
      { NH = m.NH, NKV = m.NKV, HD = m.hd })
  end
  if seen.flash_attention_fwd then
    local rope = first_op(plan, "rope_fwd") -- the flash kernels read the rotated qkv: plain rope ops
    if rope then
      want("rope", { "rope_fwd", "rope_bwd" }, { NH = m.NH, NKV = m.NKV, HD = m.hd, ROPE = true, THETA = rope.attrs.theta or 10000.0 })
    end
    want("flash_attention", { "flash_attention_fwd", "flash_attention_bwd_d", "flash_attention_bwd_dkv", "flash_attention_bwd_dq" },
      { NH = m.NH, NKV = m.NKV, HD = m.hd, PREC = facts.attention and facts.attention.precision or "bf16x3" })
  end
  if seen.gelu_fwd then want("gelu", { "gelu_fwd", "gelu_bwd" }, {}) end
  if seen.swiglu_fwd then want("swiglu", { "swiglu_fwd", "swiglu_bwd" }, { H = m.H }) end
  if seen.crossentropy or seen.crossentropy_fused then
    want("classifier", { "crossentropy_fwd", "crossentropy_fused" }, { V = m.V, VP = m.Vp })
  end
  -- the optimizer step: gradient norm (reported every step, the clip factor) and AdamW (fp32
  -- parameters and moments)
  want("global_norm", { "global_norm_partial", "global_norm_finish" }, {})
  want("adamw", { "adamw_step" }, { PARAM = "f32", STATES = "f32", BF16_COPY = false })
  -- the plan's quantization ops
  if seen.fp8_quantize then want("cast", { "fp8_fake_quantize_e4m3", "fp8_fake_quantize_e5m2" }) end
  if seen.round_bf16 then want("cast", { "round_bf16" }) end
  TQ.run(tree, cfg, contrib, "kernels", { want = want, seen = seen })
  -- assemble, in the canonical family order
  local by_family, all_families = TQ.family_specs(tree, cfg)
  local list = {}
  for _, fam in ipairs(M.FAMILIES) do
    local f = need[fam]
    if f then
      local ks = {}
      local t = M.load(fam)
      for _, k in ipairs(t.decl.kernels or {}) do if f.kernels[k.name] then ks[#ks + 1] = k.name end end
      local specs = {}
      for _, line in ipairs(by_family[fam] or {}) do specs[#specs + 1] = line end
      for _, line in ipairs(all_families) do specs[#specs + 1] = line end
      list[#list + 1] = { family = fam, constants = f.K, kernels = ks, specs = specs }
    end
  end
  return list, { seen = seen, unmapped = unmapped, missing = missing, fusion = fusion and true or false,
    fwd_sites = fwd_sites, bwd_sites = bwd_sites, rope_fwd_sites = rope_fwd_sites, rope_bwd_sites = rope_bwd_sites,
  }
end

------------------------------------------------------------------------------------------------
-- Compile options and the cache location

function M.cache_dir()
  local c = os.getenv("HYPERION_CACHE")
  if c and c ~= "" then return c end
  local x = os.getenv("XDG_CACHE_HOME")
  if x and x ~= "" then return x .. "/hyperion" end
  local home = os.getenv("HOME")
  if home and home ~= "" then return home .. "/.cache/hyperion" end
  return nil
end

function M.nvrtc_options()
  local o = { "--std=c++17", "-default-device", "-lineinfo", "--ptxas-options=-v" }
  local extra = os.getenv("HYP_NVRTC_FLAGS")
  if extra then for w in extra:gmatch("%S+") do o[#o + 1] = w end end
  return o, extra
end

function M.include_dirs()
  local dirs = { hyp.home .. "/kernels" }
  local cuda = os.getenv("HYP_CUDA_INCLUDE")
  if not cuda or cuda == "" then cuda = hyp.cuda_include end
  if cuda and cuda ~= "" then dirs[#dirs + 1] = cuda end
  return dirs
end

function M.have_nvrtc()
  local off = os.getenv("HYP_NVRTC_DISABLE")
  return hyp.have_nvrtc and hyp.nvrtc_compile ~= nil and not (off and off ~= "" and off ~= "0")
end

-- A compile failure as the user sees it: the NVRTC log, the options, the numbered source.
function M.format_compile_error(file, r, source)
  local L = {}
  L[#L + 1] = string.format("gen: kernels/%s: NVRTC compile failed%s", file, r.error and (" — " .. r.error) or "")
  if r.log and r.log ~= "" then
    L[#L + 1] = "--- NVRTC log ---"
    L[#L + 1] = (r.log:gsub("\n$", ""))
  end
  L[#L + 1] = "--- options ---"
  L[#L + 1] = table.concat(r.options or {}, " ")
  L[#L + 1] = "--- source (" .. file .. ") ---"
  local n = 0
  for line in (source .. (source:sub(-1) == "\n" and "" or "\n")):gmatch("(.-)\n") do
    n = n + 1
    L[#L + 1] = string.format("%5d  %s", n, line)
  end
  L[#L + 1] = "--- end ---"
  L[#L + 1] = "gen: fix the template (line numbers above are the rendered file's), or report a bug"
  return table.concat(L, "\n") .. "\n"
end

------------------------------------------------------------------------------------------------
-- The pass cli.lua calls: render (sim and sm_XX), compile (sm_XX). Returns true, files
-- (name -> contents, under kernels/), or false, message (exit status 1).

function M.build(tree, cfg, plan, contrib)
  local t0 = hyp.clock()
  local target = cfg.target
  local function decide(what, value, why) cfg.decisions[#cfg.decisions + 1] = { what = what, value = value, why = why } end
  local function add_contrib(id, what)
    contrib[id] = contrib[id] or {}
    table.insert(contrib[id], what)
  end
  local compile = target.kind == "cuda"
  if compile and not M.have_nvrtc() then
    U.fail("--target " .. target.name, "this gen was built without NVRTC (the CUDA toolkit was not found when it was configured)" ..
      ((os.getenv("HYP_NVRTC_DISABLE") or "") ~= "" and " [HYP_NVRTC_DISABLE is set]" or ""),
      "install the CUDA toolkit and reconfigure (cmake -DCUDAToolkit_ROOT=/usr/local/cuda), or use --target cpu or --target sim")
  end
  local list, notes = M.instances(tree, cfg, plan, decide, contrib)
  for _, op in ipairs(notes.missing) do
    io.stderr:write(string.format("gen: warning: plan op '%s' has no kernel template; the GPU trainer cannot run it yet\n", op))
    decide("kernels." .. op, "missing", "no template renders plan op " .. op .. " (the cpu backend runs it)")
  end
  decide("kernels.specialization", "compile-time shapes",
    "every kernel is specialized to the model's dims (constexpr constants) and compiled for this target; there are no shape-generic kernels")
  if notes.seen.attention_fwd then
    decide("kernels.attention", "naive (materialized [B,NH,T,T])", "the plan's attention ops are the naive baseline (no flash-attention spec active)")
  end
  local files, manifest_files, rendered = {}, U.array(), {}
  local model_line = string.format("%s (C=%d L=%d NH=%d NKV=%d hd=%d H=%d V=%d Vp=%d; %s, %s, %s)", plan.model.name,
    plan.model.C, plan.model.L, plan.model.NH, plan.model.NKV, plan.model.hd, plan.model.H, plan.model.V, plan.model.Vp,
    plan.model.norm, plan.model.activation, plan.model.position)
  local nkernels = 0
  for _, inst in ipairs(list) do
    local served = {}
    for op in pairs(M.load(inst.family).decl.ops or {}) do
      if notes.seen[op] then served[#served + 1] = op end
    end
    table.sort(served)
    local ok, r = pcall(M.render, inst.family, inst.constants, { kernels = inst.kernels, specs = inst.specs,
      model = model_line, file = inst.family, plan_ops = #served > 0 and served or { "(the optimizer step)" } })
    if not ok then
      if type(r) == "table" and r.input then
        U.fail("--model " .. plan.model.name, r.render, "this model's shapes are outside what the template supports; use --target cpu")
      end
      if type(r) == "table" and r.render then return false, "gen: " .. r.render .. " — fix the template\n" end
      error(r, 0)
    end
    for _, d in ipairs(r.decisions) do decide("kernels." .. d.what, d.value, d.why) end
    rendered[#rendered + 1] = r
    files["kernels/" .. inst.family .. ".cu"] = r.source
    nkernels = nkernels + #r.kernels
  end
  local t_render = hyp.clock() - t0
  -- compile
  local t1 = hyp.clock()
  local results, stats = {}, nil
  local ncached, ncompiled, corrupt = 0, 0, 0
  if compile then
    local jobs = {}
    for i, r in ipairs(rendered) do jobs[i] = { name = r.family, source = r.source } end
    local opts, extra = M.nvrtc_options()
    if extra then decide("kernels.nvrtc_flags", extra, "HYP_NVRTC_FLAGS adds NVRTC options") end
    local workers = tonumber(os.getenv("HYP_JOBS") or "")
    local okc, r1, r2 = pcall(hyp.nvrtc_compile, jobs, { arch = target.name, options = opts, include_dirs = M.include_dirs(),
      cache_dir = M.cache_dir(), workers = workers and math.tointeger(workers) or nil, version = hyp.version })
    if not okc then -- NVRTC could not be loaded at run time (the message says what to do)
      local msg = tostring(r1)
      U.fail("<command line>", msg:match("^(.-) — ") or msg, msg:match(" — (.*)$") or "use --target cpu or sim")
    end
    results, stats = r1, r2
    if stats.cache_problem then
      io.stderr:write(string.format("gen: warning: kernel cache unavailable (%s: %s); compiling without it — set HYPERION_CACHE to a writable directory\n",
        M.cache_dir() or "no HOME", stats.cache_problem))
    end
    local failed = {}
    for i, res in ipairs(results) do
      if res.corrupt then
        corrupt = corrupt + 1
        io.stderr:write(string.format("gen: kernel cache: corrupt entry %s (%s) — removed and rebuilt\n", res.entry, res.corrupt))
      end
      if res.ok then
        if res.cached then ncached = ncached + 1 else ncompiled = ncompiled + 1 end
      else
        failed[#failed + 1] = M.format_compile_error(rendered[i].family .. ".cu", res, rendered[i].source)
      end
    end
    if #failed > 0 then return false, table.concat(failed, "\n") end
  end
  local t_compile = hyp.clock() - t1
  -- manifest, resources
  local res_list, spills = U.array(), 0
  local logs = {}
  for i, r in ipairs(rendered) do
    local res = results[i]
    local kern = U.array()
    for _, d in ipairs(r.kernels) do
      local ps = U.array()
      for _, p in ipairs(d.params) do ps[#ps + 1] = { name = p.name, type = p.type } end
      kern[#kern + 1] = { name = d.name, params = ps, block = d.block, grid = d.grid, smem = d.smem, doc = d.doc }
    end
    local consts = {}
    for k, v in pairs(r.constants) do consts[k] = v end
    local entry = { file = r.family .. ".cu", family = r.family, template = r.template, constants = consts,
      specs = U.array(list[i].specs), kernels = kern }
    if res then
      entry.cubin = r.family .. ".cubin"
      entry.ptx = r.family .. ".ptx"
      entry.cache_key = res.key
      entry.cached = res.cached
      entry.compile_seconds = res.seconds
      files["kernels/" .. r.family .. ".cubin"] = res.cubin
      files["kernels/" .. r.family .. ".ptx"] = res.ptx
      logs[#logs + 1] = "== " .. r.family .. ".cu (" .. (res.cached and "cached" or "compiled") .. ")\n" .. res.log
      for _, k in ipairs(M.parse_ptxas(res.log or "")) do
        k.file = r.family .. ".cu"
        k.spills = k.spill_stores + k.spill_loads
        spills = spills + k.spills
        if k.spills > 0 and r.spill_reasons[k.kernel] then k.spill_reason = r.spill_reasons[k.kernel] end
        res_list[#res_list + 1] = k
      end
    end
    manifest_files[#manifest_files + 1] = entry
  end
  -- plan op -> launches, as the templates declare them (a launch may name another family's
  -- kernel, e.g. attention_fwd starts with rope.cu's qkv_permute_fwd); only rendered kernels
  local kernel_file = {}
  for _, r in ipairs(rendered) do
    for _, d in ipairs(r.kernels) do kernel_file[d.name] = r.family .. ".cu" end
  end
  local ops = {}
  for _, r in ipairs(rendered) do
    for op, launches in pairs(r.ops) do
      local ls = U.array()
      for _, l in ipairs(launches) do
        if kernel_file[l[1]] then
          ls[#ls + 1] = { kernel = l[1], file = kernel_file[l[1]], args = U.array({ table.unpack(l, 2) }) }
        end
      end
      if #ls > 0 then ops[op] = ls end
    end
  end
  -- fusion sites (0-based op indices into plan.forward / plan.backward: the pair a, b)
  -- and how each launches;
  -- `site.qkv` is the site's pre-RoPE QKV (the forward rope op's input, which the fused backward
  -- rotates again)
  local fusions = U.array()
  if notes.fusion then
    local function add(kind, sites, launches)
      if #sites == 0 then return end
      local ls = U.array()
      for _, l in ipairs(launches) do ls[#ls + 1] = { kernel = l[1], file = kernel_file[l[1]], args = U.array({ table.unpack(l, 2) }) } end
      fusions[#fusions + 1] = { kind = kind, sites = sites, launches = ls }
    end
    local norm = plan.model.norm
    add("residual_" .. norm .. "_fwd", notes.fwd_sites, FUSED_LAUNCHES["residual_" .. norm .. "_fwd"])
    add("residual_" .. norm .. "_bwd", notes.bwd_sites, FUSED_LAUNCHES["residual_" .. norm .. "_bwd"])
    add("rope_attention_fwd", notes.rope_fwd_sites, FUSED_LAUNCHES.rope_attention_fwd)
    add("rope_attention_bwd", notes.rope_bwd_sites, FUSED_LAUNCHES.rope_attention_bwd)
  end
  local manifest = {
    format = "hyperion-kernels", version = 1, generator = hyp.version, target = target.name,
    nvrtc = stats and stats.nvrtc or nil, files = manifest_files, ops = ops, not_templates = notes.unmapped,
    fusions = fusions,
  }
  files["kernels/kernels.json"] = assert(hyp.json_encode(manifest, true)) .. "\n"
  local summary = { target = target.name, files = #rendered, kernels = nkernels }
  if compile then
    table.sort(res_list, function(a, b) if a.file ~= b.file then return a.file < b.file end return a.kernel < b.kernel end)
    files["kernels/resources.json"] = assert(hyp.json_encode({ arch = target.name, nvrtc = stats.nvrtc,
      source = "ptxas verbose output in the NVRTC program log (--ptxas-options=-v)", spills_total = spills,
      kernels = res_list }, true)) .. "\n"
    files["kernels/compile.log"] = table.concat(logs, "\n")
    summary.compiled, summary.cached, summary.workers, summary.nvrtc = ncompiled, ncached, stats.workers, stats.nvrtc
    summary.spills_total, summary.resources = spills, res_list
    if corrupt > 0 then summary.corrupt_rebuilt = corrupt end
    local maxreg = 0
    for _, k in ipairs(res_list) do if k.registers > maxreg then maxreg = k.registers end end
    summary.max_registers = maxreg
    for _, k in ipairs(res_list) do
      if k.spills > 0 then
        io.stderr:write(string.format("gen: warning: %s %s spills %d bytes (%d registers)%s\n", k.file, k.kernel, k.spills,
          k.registers, k.spill_reason and (": " .. k.spill_reason) or " — no reason is written in its template"))
      end
    end
  end
  summary.seconds = hyp.clock() - t0
  summary.render_seconds, summary.compile_seconds = t_render, t_compile
  cfg.kernels = summary
  -- what reached the kernels, for the modules' audit contributions
  local count = {}
  for _, l in ipairs({ plan.forward, plan.backward }) do
    for _, o in ipairs(l) do count[o.op] = (count[o.op] or 0) + 1 end
  end
  require("techniques").run(tree, cfg, contrib, "rendered", { count = count, norm = plan.model.norm, files = #rendered,
    kernels = nkernels, sites = { fwd = notes.fwd_sites, bwd = notes.bwd_sites, rope_fwd = notes.rope_fwd_sites,
    rope_bwd = notes.rope_bwd_sites } })
  if compile then
    io.write(string.format("gen: kernels: %d files (%d kernels) for %s — %d compiled, %d cached (NVRTC workers: %d), %.3f s (render %.3f, compile/cache %.3f)%s\n",
      #rendered, nkernels, target.name, ncompiled, ncached, stats.workers, summary.seconds, t_render, t_compile,
      spills > 0 and string.format(", %d bytes of spills", spills) or ", no spills"))
  else
    io.write(string.format("gen: kernels: %d files (%d kernels) rendered for %s\n", #rendered, nkernels, target.name))
  end
  return true, files
end

------------------------------------------------------------------------------------------------
-- `gen render FAMILY [NAME=VALUE ...] [--kernels a,b] [-o FILE] [--list]`: one template, for tests
-- and for reading. Constants not given take the template's defaults.

function M.cli(args, parse)
  local o = parse(args, { ["--kernels"] = "list", ["-o"] = "value", ["--list"] = "flag" })
  if o["--list"] then
    for _, fam in ipairs(M.FAMILIES) do
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
  for _, f in ipairs(M.FAMILIES) do if f == fam then known = true end end
  if not known then U.fail("<command line>", "unknown template family '" .. fam .. "'" .. U.did_you_mean(fam, M.FAMILIES), "gen render --list shows them") end
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
  return 0
end

return M
