-- perf.lua — `gen perf DIR --hw NAME[,NAME]`: the performance model of a generated trainer, read
-- from what it executes (DIR/plan.json, DIR/kernels/kernels.json) and not from model formulas.
-- Every launch of a step gets FLOPs by unit (bf16/fp8/tf32 tensor cores, fp32 FMA pipe, special
-- functions) and DRAM bytes from the cost declaration of its template (templates/*.cu.lua,
-- `cost = { kernel = function(a) ... end }`) or, for the runtime's own ops (cuBLASLt GEMMs,
-- memsets), from the GEMM the device executor issues (runtime/device/exec_dev.c). A roofline time
-- per launch against the hardware YAML's peaks, bandwidth and efficiency factors; launch overhead
-- eager and with CUDA graphs (a host/GPU queue simulation); collectives on the hardware's links;
-- predicted step time, tokens/s, MFU and the top ops. docs/perf-model.md states the method.
-- Never: a number without its source (peaks and factors come from the hardware file, FLOP
-- conventions from formulas.lua); a silent what-if (a --policy other than the plan's is printed).
local U = require("util")
local F = require("formulas")
local TPL = require("template")
local PM = require("perf_moe")
local M = {}

local UNITS = { "tc_bf16", "tc_fp8", "tc_tf32", "fp32", "sfu" }
M.UNITS = UNITS
-- unit -> the hardware peak it runs at (peak_tflops key, or the perf section's sfu_tops)
local UNIT_PEAK = { tc_bf16 = "bf16", tc_fp8 = "fp8", tc_tf32 = "tf32", fp32 = "fp32" }
local UNIT_EFF = { tc_bf16 = "tc", tc_fp8 = "tc", tc_tf32 = "tc", fp32 = "fp32", sfu = "sfu" }

------------------------------------------------------------------------------------------------
-- Expressions of the kernel manifest ("N*C", "cdiv(n, 4*BLOCK)"), evaluated as Lua.

local function eval(expr, env)
  if type(expr) == "number" then return expr end
  local src = tostring(expr) -- C-like: + - * / % ^ ( ) and cdiv/min/max read the same in Lua
  local fenv = setmetatable({ cdiv = function(a, b) return (a + b - 1) // b end, min = math.min, max = math.max },
    { __index = function(_, k) return env[k] end })
  local chunk = load("return " .. src, "=expr", "t", fenv)
  if not chunk then return nil end
  local ok, v = pcall(chunk)
  if ok and type(v) == "number" then return v end
  return nil
end
M.eval = eval

------------------------------------------------------------------------------------------------
-- Cost declarations of the templates

local decl_cache = {}
local function family_decl(family)
  if decl_cache[family] == nil then
    local ok, t = pcall(TPL.load, family)
    decl_cache[family] = ok and t.decl or false
  end
  return decl_cache[family] or nil
end

-- A cost table with every unit and byte field present (missing ones 0), and the two issue flags a
-- template may declare: mma_sync (its tensor-core work is mma.sync, which reaches eff.mma_sync of
-- the tc rate where the hardware file gives one: Hopper), tc_async (its tensor-core work is
-- asynchronous wgmma that overlaps its other units: v2114's FA3).
local function norm_cost(c)
  local o = { rd = c.rd or 0, wr = c.wr or 0, reread = c.reread or 0, mma_sync = c.mma_sync or nil, tc_async = c.tc_async or nil }
  for _, u in ipairs(UNITS) do o[u] = c[u] or 0 end
  return o
end
M.norm_cost = norm_cost

-- The declared cost of one launch of `kernel` of `family` with the values `a` (its scalar
-- arguments by parameter name, the file's constants, the op's dims, E = activation bytes).
function M.kernel_cost(family, kernel, a)
  local d = family_decl(family)
  local fn = d and d.cost and d.cost[kernel]
  if not fn then return nil end
  local ok, c = pcall(fn, a)
  if not ok then error(string.format("templates/%s.cu.lua: the cost of %s cannot be computed: %s", family, kernel, tostring(c)), 0) end
  return norm_cost(c)
end

------------------------------------------------------------------------------------------------
-- The step's launches, from the plan and the manifest

-- The op's dims (the runtime's env_op): B, T, N and the op's attributes resolved.
local function op_dims(o, B, T)
  local N = B * T
  local env = { B = B, T = T, N = N }
  for k, v in pairs(o.attrs or {}) do
    if v == "B" then v = B elseif v == "T" then v = T elseif v == "N" then v = N end
    if type(v) == "number" then env[k] = v end
  end
  return env
end

local function buf_index(plan)
  local idx = {}
  for _, b in ipairs(plan.buffers or {}) do idx[b.name] = b end
  return idx
end

-- Element bytes of the activation arenas the kernels read and write: the plan's dtype of the
-- activation buffers (all f32 on the device today, v2102), or the what-if policy's.
local DT_BYTES = { f32 = 4, bf16 = 2, f16 = 2, fp16 = 2, e4m3 = 1, e5m2 = 1, i32 = 4 }

-- Bytes per element of buffer `name` as the trainer stores it: its plan dtype, or 2 for an
-- activation (or activation gradient) under the bf16 what-if.
local function buf_eb(ctx, name)
  local b = ctx.bufs[name]
  if not b then return ctx.E end
  if ctx.policy == "bf16" and b.kind == "act" then return 2 end
  return DT_BYTES[b.dtype or "f32"] or 4
end

-- The GEMM unit of a matmul: the dtype its operands are stored in, as the device executor issues
-- it (exec_dev.c: fp32 buffers -> HYP_GEMM_F32 on the FP32 pipe; fp8 slots -> FP8 tensor cores;
-- bf16 buffers -> BF16 tensor cores).
local function gemm_unit(ctx, o)
  local inb = ctx.bufs[o.ins[1]]
  if ctx.fp8_slot[o.ins[1]] and ctx.fp8_slot[o.ins[2]] then return "tc_fp8", 1 end
  if ctx.policy == "bf16" and o.ins[1]:match("^bf16:") then return "tc_bf16", 2 end
  local dt = inb and inb.dtype or "f32"
  if dt == "bf16" then return "tc_bf16", 2 end
  if ctx.tf32 then return "tc_tf32", 4 end
  return "fp32", 4
end

-- The launches of a matmul op as exec_dev.c issues them (one cuBLASLt call each). Outputs are
-- written (and, accumulated with beta = 1, read) in their own dtype: activations per the plan or
-- the policy, parameter gradients fp32.
local function gemm_launches(ctx, o, N)
  local IC, OC = o.attrs.IC, o.attrs.OC
  local unit, eb = gemm_unit(ctx, o)
  local out = {}
  local function g(name, m, n, k, ra, rb, eo, rwc, extra)
    local c = { [unit] = 2.0 * m * n * k, rd = ra + rb + (rwc and m * n * eo or 0), wr = m * n * eo }
    if extra then for kk, v in pairs(extra) do c[kk] = (c[kk] or 0) + v end end
    out[#out + 1] = { kernel = name, family = "cuBLASLt", cost = norm_cost(c) }
  end
  if o.op == "matmul_fwd" then
    local bias = o.ins[3] and o.ins[3] ~= ""
    local ey = buf_eb(ctx, o.outs[1])
    g("gemm_fwd", N, OC, IC, N * IC * eb, OC * IC * eb, ey, false, bias and { rd = OC * ey, fp32 = N * OC } or nil)
    local epi = ctx.epi_fwd[o]
    if epi then -- the GELU epilogue (v2166): the GEMM also writes the pre-activation (aux) and applies GELU
      local c = out[#out].cost
      c.wr, c.fp32, c.sfu = c.wr + N * OC * buf_eb(ctx, epi.out), c.fp32 + 12 * N * OC, c.sfu + 2 * N * OC
      out[#out].kernel = "gemm_fwd_bias_gelu"
    end
  else
    local has = function(i) return o.outs[i] and o.outs[i] ~= "" end
    local ed = buf_eb(ctx, o.ins[1]) -- dout as stored (the bias gradient reads it so)
    if has(1) then
      g("gemm_dgrad", N, IC, OC, N * OC * eb, OC * IC * eb, buf_eb(ctx, o.outs[1]), true)
      local epi = ctx.epi_bwd[o]
      if epi then -- the dGELU epilogue: dinp of the GELU's input, reading the aux pre-activation
        local c = out[#out].cost
        c.rd, c.fp32, c.sfu = c.rd + N * IC * buf_eb(ctx, epi.aux), c.fp32 + 22 * N * IC, c.sfu + 2 * N * IC
        out[#out].kernel = "gemm_dgrad_dgelu"
      end
    end
    if has(2) then g("gemm_wgrad", OC, IC, N, N * OC * eb, N * IC * eb, 4, true) end
    -- db += dout^T 1: an n = 1 GEMM (a GEMV) on the fp32 pipe, memory-bound
    if has(3) and ctx.epi_bgrad[o] and has(2) then -- BGRADB: the wgrad GEMM sums dout's columns it reads anyway
      local c = out[#out].cost
      c.rd, c.wr, c.fp32 = c.rd + OC * 4, c.wr + OC * 4, c.fp32 + N * OC
      out[#out].kernel = "gemm_wgrad_bgrad"
    elseif has(3) then
      out[#out + 1] = { kernel = "gemm_dbias", family = "cuBLASLt",
        cost = norm_cost({ fp32 = 2.0 * N * OC, rd = N * OC * ed + OC * 4, wr = OC * 4 }) }
    end
  end
  return out
end

-- Launches of one template op (or fusion site) with their declared costs.
local function template_launches(ctx, binding, o, o2, N)
  local res = {}
  for _, L in ipairs(binding) do
    -- a launch whose first argument is an absent optional output does not run (exec_dev_bind.c:
    -- a llama's embedding_bwd_wpe)
    local pre, k = tostring(L.args[1] or ""):match("^(%a?%.?)out(%d+)$")
    local src = (pre == "b." and o2) or o
    local absent = k and (src.outs[tonumber(k)] == nil or src.outs[tonumber(k)] == "")
    if not absent then
    local file = ctx.files[L.file]
    local family = file and file.family or (L.file or ""):gsub("%.cu$", "")
    local a = op_dims(o, ctx.B, ctx.T)
    if o2 then for k, v in pairs(op_dims(o2, ctx.B, ctx.T)) do if a[k] == nil then a[k] = v end end end
    a.C = a.C or 1
    -- template constants: the rendered file's, else the template's defaults
    local d = family_decl(family)
    if d and d.constants then
      for k, spec in pairs(d.constants) do
        if a[k] == nil and type(spec) == "table" and spec.default ~= nil then a[k] = spec.default end
      end
    end
    if file then for k, v in pairs(file.constants or {}) do a[k] = v end end
    -- the kernel's scalar arguments by parameter name
    local kd = file and file.kernels[L.kernel]
    if kd then
      for i, p in ipairs(kd.params) do
        local arg = L.args[i]
        if not p.type:find("%*") and arg then
          local v = eval(arg, a)
          if v then a[p.name] = v end
        elseif p.type:find("%*") then -- has_NAME: the pointer is given (not "0", not an absent input or output)
          local sarg = tostring(arg or "0")
          local io, j = sarg:match("^(%a+)(%d+)$")
          local given = sarg ~= "0" and sarg ~= ""
          if given and (io == "in" or io == "out") then
            local v = (io == "in" and o.ins or o.outs or {})[tonumber(j)]
            given = v ~= nil and v ~= ""
          end
          a["has_" .. p.name] = given
        end
      end
    end
    -- E: the file's activation storage (ACT, v2102) as rendered; the what-if's bf16; else the plan's
    if ctx.policy == "bf16" then a.E = 2
    elseif type(a.ACT) == "string" then a.E = DT_BYTES[a.ACT] or ctx.E
    else a.E = ctx.E end
    -- the rendered constants' names for a plan without a manifest (cpu target): from the op dims
    a.HD = a.HD or a.hd
    a.VP = a.VP or a.Vp
    a.VEC = a.VEC or ((a.C % 4 == 0) and 4 or 1)
    a.CV = a.CV or a.C // a.VEC
    local cost = M.kernel_cost(family, L.kernel, a)
    res[#res + 1] = { kernel = L.kernel, family = family, cost = cost, args = a }
    if not cost then ctx.undeclared[family .. "." .. L.kernel] = true end
    end
  end
  return res
end

M.template_launches = template_launches

-- The manifest's kernel declarations by file and kernel name.
local function index_files(manifest)
  local files = {}
  for _, f in ipairs(manifest.files or {}) do
    local ks = {}
    for _, k in ipairs(f.kernels or {}) do ks[k.name] = k end
    files[f.file] = { family = f.family, constants = f.constants, kernels = ks }
  end
  return files
end

-- Fusion sites: op index (0-based, per list) -> { skip = true } or { launches = ... }
local function index_fusions(manifest)
  local fwd, bwd = {}, {}
  for _, fu in ipairs(manifest.fusions or {}) do
    local list = fu.kind:find("bwd") and bwd or fwd
    for _, s in ipairs(fu.sites or {}) do
      local i, j = s.ops[1], s.ops[2]
      list[i] = { skip = true }
      list[j] = { launches = fu.launches, first = i }
    end
  end
  return fwd, bwd
end

-- The optimizers that step one tensor per launch on a device (runtime/optim/optim_muon.c and
-- optim_adammini.c step_device), enumerated from the plan's parameters and groups: Muon matrices
-- take momentum (PARTS blocks), normalize, ns_steps x three fp32 GEMMs (A = X X^T, B = b A + c A A,
-- Y = a X + B X on r = min(R, K)) and apply; Muon's other tensors and Adam-mini's "adam" rule a
-- per-coordinate AdamW step; Adam-mini's block rules one CUDA block per block (the v state's numel).
-- Returns the launches, or nil for an optimizer that runs as one launch over the arena.
local function per_tensor_optimizer(ctx, plan, N)
  local opt = plan.optimizer or {}
  local family = ({ muon = "muon", ["adam-mini"] = "adam_mini", adam_mini = "adam_mini" })[opt.kind or ""]
  if not family then return nil end
  local file
  for name, f in pairs(ctx.files) do if f.family == family then file = name end end
  file = file or (family .. ".cu")
  local rule = {}
  for _, g in ipairs(opt.groups or {}) do rule[g.name] = g.rule end
  local h = opt.hyper or {}
  local vnum = ((opt.state or {})[2] or {}).numel
  local res = {}
  local function L(kernel, args, n, nb)
    for _, l in ipairs(template_launches(ctx, { { kernel = kernel, file = file, args = args } },
      { op = "optimizer", attrs = { n = n, nblocks = nb } }, nil, N)) do res[#res + 1] = l end
  end
  local function gemm(m, n, k, beta)
    res[#res + 1] = { kernel = "gemm_newton_schulz", family = "cuBLASLt",
      cost = norm_cost({ fp32 = 2.0 * m * n * k, rd = 4 * (m * k + k * n) + (beta and 4 * m * n or 0), wr = 4 * m * n }) }
  end
  for i, t in ipairs(plan.params or {}) do
    local r, n = rule[t.group], t.numel
    local adam_args = { "p", "m", "v", "g", n, 0, h.beta1 or 0.9, h.beta2 or 0.999, h.eps or 1e-8, 0, 1, 1, "gscale" }
    if family == "muon" and r == "muon" then
      local R, K = t.shape[1], t.shape[2]
      local rr, kk = math.min(R, K), math.max(R, K)
      L("muon_momentum", { "m", "u", "g", n, h.momentum or 0.95, h.nesterov or 1, "gscale", "partial" }, n)
      L("muon_normalize", { "x", n, "partial" }, n)
      for _ = 1, (h.ns_steps or 5) do
        gemm(rr, rr, kk, false); gemm(rr, rr, rr, true); gemm(rr, kk, rr, true)
      end
      L("muon_apply", { "p", "o", n, 1, 0, 1 }, n)
    elseif family == "muon" or r == "adam" then
      L(family == "muon" and "muon_adamw_step" or "adam_mini_adam_step", adam_args, n)
    else
      local K = (#(t.shape or {}) == 2) and t.shape[2] or n
      local nb = vnum and vnum[i] or (n // K)
      L("adam_mini_block_step", { "p", "m", "v", "g", K, 0, 0, 0, h.beta1 or 0.9, h.beta2 or 0.999, 0, 1, h.eps or 1e-8, 1, "gscale" }, n, nb)
    end
  end
  return res
end

-- Every launch of one training step: { op, phase, kernel, family, cost }.
function M.step_launches(plan, manifest, opts)
  opts = opts or {}
  local B, T = plan.train.B, plan.train.T
  local N = B * T
  local ctx = { B = B, T = T, bufs = buf_index(plan), files = index_files(manifest), undeclared = {},
    policy = opts.policy or "plan", E = 4, fp8_slot = {}, tf32 = opts.tf32 }
  -- activation bytes where no file says (a cpu plan, the runtime's ops): bf16 when the plan stores
  -- activations in bf16 (v2102), else fp32; and whether the device executor keeps the bf16 weight
  -- copy (exec_dev.c act_bf16: any bf16 activation buffer)
  ctx.act_bf16 = false
  for _, b in ipairs(plan.buffers or {}) do if b.kind == "act" and b.dtype == "bf16" then ctx.act_bf16 = true end end
  if ctx.policy == "bf16" or ctx.act_bf16 then ctx.E = 2 end
  -- GEMM epilogues (v2166), from the plan's marks (a matmul op's attrs.epilogue naming gelu, dgelu,
  -- bgrad) or every site under the --epilogues what-if: a matmul_fwd whose output only a gelu_fwd
  -- reads computes the GELU in its epilogue (writing the pre-activation as aux) and the gelu_fwd
  -- launch goes; the dgrad GEMM producing that GELU's output gradient applies dGELU (reading aux)
  -- and the gelu_bwd launch goes; a bias gradient folds into the wgrad GEMM (BGRADB), which reads
  -- dout anyway
  ctx.epi_fwd, ctx.epi_bwd, ctx.epi_skip, ctx.epi_bgrad = {}, {}, {}, {}
  local function marked(o, what)
    local e = o.attrs and o.attrs.epilogue
    return opts.epilogues or (type(e) == "string" and e:find(what, 1, true) ~= nil)
  end
  local gelu_of = {} -- forward GELU input buffer -> its gelu_fwd op
  for _, o in ipairs(plan.forward or {}) do if o.op == "gelu_fwd" then gelu_of[o.ins[1]] = o end end
  local fused_pre = {}
  for _, o in ipairs(plan.forward or {}) do
    local gl = o.op == "matmul_fwd" and gelu_of[o.outs[1]]
    if gl and marked(o, "gelu") then
      ctx.epi_fwd[o], ctx.epi_skip[gl] = { out = gl.outs[1] }, true
      fused_pre[o.outs[1]] = true
    end
  end
  local bwd_of = {} -- output-gradient buffer of a fused GELU -> its gelu_bwd op
  for _, o in ipairs(plan.backward or {}) do
    if o.op == "gelu_bwd" and fused_pre[o.ins[2]] then bwd_of[o.ins[1]] = o end
  end
  local zeros_of = {} -- buffer -> the zero ops clearing it
  for _, o in ipairs(plan.backward or {}) do
    if o.op == "zero" then zeros_of[o.outs[1]] = zeros_of[o.outs[1]] or {}; table.insert(zeros_of[o.outs[1]], o) end
  end
  for _, o in ipairs(plan.backward or {}) do
    if o.op == "matmul_bwd" then
      local gl = o.outs[1] and bwd_of[o.outs[1]]
      if gl and marked(o, "dgelu") then
        -- the GEMM writes dP (beta 0): the memsets of dP and of the never-formed dA go too (exec_dev.c)
        ctx.epi_bwd[o], ctx.epi_skip[gl] = { aux = gl.ins[2] }, true
        for _, b in ipairs({ o.outs[1], gl.outs[1] }) do for _, z in ipairs(zeros_of[b] or {}) do ctx.epi_skip[z] = true end end
      end
      if o.outs[3] and o.outs[3] ~= "" and marked(o, "bgrad") then ctx.epi_bgrad[o] = true end
    end
  end
  for _, list in ipairs({ plan.forward, plan.backward }) do
    for _, o in ipairs(list) do if o.op == "fp8_quantize" then ctx.fp8_slot[o.outs[1]] = true end end
  end
  local fus_f, fus_b = index_fusions(manifest)
  local out = {}
  local function add(phase, o, ls)
    for _, l in ipairs(ls) do
      l.op, l.phase, l.name = o.op, phase, (o.outs and o.outs[1]) or o.op
      out[#out + 1] = l
    end
  end
  local function run(phase, list, fus)
    for i, o in ipairs(list) do
      local f = fus[i - 1]
      if f and f.skip then -- run by the site's launches at its second op
      elseif ctx.epi_skip[o] then -- run by a GEMM's epilogue
      elseif f and f.launches then
        add(phase, o, template_launches(ctx, f.launches, list[f.first + 1], o, N))
      elseif o.op == "matmul_fwd" or o.op == "matmul_bwd" then
        add(phase, o, gemm_launches(ctx, o, N))
      elseif o.op == "moe_fwd" or o.op == "moe_bwd" then -- perf_moe.lua: exec_dev_moe.c's launches
        add(phase, o, PM.launches(M, ctx, o, N))
      elseif o.op == "zero" then
        local n = op_dims(o, B, T).n or 0
        add(phase, o, { { kernel = "memset", family = "runtime", cost = norm_cost({ wr = n * buf_eb(ctx, o.outs[1]) }) } })
      elseif o.op == "fp8_quantize" and plan.fp8 then
        -- the manifest key the executor picks (exec_dev_bind.c op_key): E5M2 for gradient slots of
        -- the hybrid recipe, the current-scaling variant, and with FP8 GEMMs the byte casts too
        local f8 = plan.fp8
        local e5 = f8.recipe ~= "e4m3" and (f8.slots or {})[(o.attrs.slot or 0) + 1] == "gradient"
        local tag = e5 and "gradient, hybrid" or nil
        local base = f8.scaling == "current" and ("fp8_quantize(current" .. (tag and ", " .. tag or "") .. ")")
          or (tag and "fp8_quantize(" .. tag .. ")" or "fp8_quantize")
        for _, key in ipairs({ base, f8.gemm == "fp8" and ("fp8_quantize(fp8 gemm" .. (tag and ", " .. tag or "") .. ")") or nil }) do
          local binding = manifest.ops and manifest.ops[key]
          if binding then add(phase, o, template_launches(ctx, binding, o, nil, N))
          else ctx.undeclared["op." .. key] = true; add(phase, o, { { kernel = key, family = "unbound" } }) end
        end
      elseif o.op == "round_bf16" and ctx.policy == "bf16" and ctx.bufs[o.ins[1]] and ctx.bufs[o.ins[1]].kind == "act" then
        -- bf16 arenas: the producer already wrote bf16; nothing to launch
      else
        local binding = manifest.ops and manifest.ops[o.op]
        if binding then add(phase, o, template_launches(ctx, binding, o, nil, N))
        else ctx.undeclared["op." .. o.op] = true; add(phase, o, { { kernel = o.op, family = "unbound" } }) end
      end
    end
  end
  run("forward", plan.forward or {}, fus_f)
  run("backward", plan.backward or {}, fus_b)
  -- the optimizer (and the gradient norm when clipping) over every parameter
  -- the optimizer runs over the parameter arena (param_bytes: views such as a fused QKV's q, k, v
  -- share it); its segment table ends at every distinct parameter tensor end (exec_dev_bind.c)
  local nparam, ends, ntensors = (plan.param_bytes or 0) // 4, {}, 0
  for _, b in ipairs(plan.buffers or {}) do
    if b.kind == "param" then
      local e = b.offset + b.bytes
      if not ends[e] then ends[e], ntensors = true, ntensors + 1 end
    end
  end
  local oo = { op = "optimizer", attrs = { n = nparam, nseg = ntensors }, outs = { "params" } }
  -- the gradient arena zeroed at the step's start (exec_dev_zero_grads; the cpu backend likewise)
  table.insert(out, 1, { op = "zero_grads", phase = "forward", name = "grads", kernel = "memset", family = "runtime",
    cost = norm_cost({ wr = 4 * nparam }) })
  -- the gradient norm runs every step (the progress line prints it), clipping or not
  if manifest.ops and manifest.ops.grad_norm then
    add("optimizer", { op = "grad_norm", attrs = { n = nparam }, outs = { "gnorm" } },
      template_launches(ctx, manifest.ops.grad_norm, { op = "grad_norm", attrs = { n = nparam } }, nil, N))
  end
  local per_tensor = per_tensor_optimizer(ctx, plan, N)
  if per_tensor then add("optimizer", oo, per_tensor)
  elseif manifest.ops and manifest.ops.optimizer then
    add("optimizer", oo, template_launches(ctx, manifest.ops.optimizer, oo, nil, N))
  end
  -- bf16 activations on a device: the executor refreshes the bf16 weight copy the GEMMs read from
  -- the fp32 masters once the parameters changed (exec_dev.c refresh_wcopy: cast_f32_bf16 over the arena)
  if ctx.act_bf16 and ctx.files["cast.cu"] and ctx.files["cast.cu"].kernels.cast_f32_bf16 then
    add("optimizer", { op = "weight_copy", outs = { "wcopy" } },
      template_launches(ctx, { { kernel = "cast_f32_bf16", file = "cast.cu", args = { "wcopy", "params", "n" } } },
        { op = "weight_copy", attrs = { n = nparam } }, nil, N))
  end
  return out, ctx
end

------------------------------------------------------------------------------------------------
-- Hardware and the roofline

-- The hardware's rates in FLOP/s (or op/s) and B/s, each with its efficiency factor applied.
function M.rates(h)
  local p = h.perf
  local r = { hbm = h.hbm_tbps * 1e12 * p.eff.hbm, hbm_peak = h.hbm_tbps * 1e12 }
  for u, key in pairs(UNIT_PEAK) do
    local pk = (h.peak_tflops[key] or 0) * 1e12
    r[u] = pk * p.eff[UNIT_EFF[u]]
    r[u .. "_peak"] = pk
  end
  r.sfu = p.sfu_tops * 1e12 * p.eff.sfu
  r.sfu_peak = p.sfu_tops * 1e12
  r.mma_sync = p.eff.mma_sync
  return r
end

-- Roofline time of one launch: the compute units share the SMs' issue slots (their times add),
-- memory traffic overlaps them (the larger of the two). DRAM bytes = rd + wr (reread: served by
-- L1/L2, not DRAM). Returns seconds, the bound, and the pure-peak bound (no efficiency factors).
-- A launch declaring mma_sync runs its bf16 tensor-core work at eff.mma_sync of the tc rate
-- (where the hardware gives it); one declaring tc_async overlaps its tensor-core time with its
-- other units (the larger of the two instead of the sum), at peaks too.
function M.launch_time(c, r)
  local tc, tp, ta, tap = 0, 0, 0, 0
  for _, u in ipairs(UNITS) do
    if c[u] > 0 then
      if r[u] <= 0 then return math.huge, "no " .. u .. " unit", math.huge end
      local rate = r[u]
      if c.mma_sync and u == "tc_bf16" and r.mma_sync then rate = rate * r.mma_sync end
      if c.tc_async and u:sub(1, 3) == "tc_" then
        ta, tap = ta + c[u] / rate, tap + c[u] / r[u .. "_peak"]
      else
        tc = tc + c[u] / rate
        tp = tp + c[u] / r[u .. "_peak"]
      end
    end
  end
  tc, tp = math.max(tc, ta), math.max(tp, tap)
  local bytes = c.rd + c.wr
  local tm, tmp = bytes / r.hbm, bytes / r.hbm_peak
  if tc >= tm then return tc, "compute", math.max(tp, tmp) end
  return tm, "memory", math.max(tp, tmp)
end

-- Host/GPU queue. Eager: the host issues launch i at i * launch_us; it starts when it is issued
-- and the previous one ended plus the GPU's dispatch gap (graph_node_us, the same gap a graph
-- node has). With CUDA graphs (v2165, runtime/device/exec_dev_graph.c) the launches of a region
-- (region[i]: 1 forward, 2 backward up to the fused loss, 3 the rest of the backward, 4 the
-- gradient norm) are one graph: the host issues it once (one launch_us) when its first node is
-- due, its nodes then follow each other by the gap alone; launches outside every region (the
-- gradient memset, the optimizer, the bf16 weight cast) stay host launches. So graph <= eager,
-- equal when every kernel outlasts a host launch.
function M.timeline(times, h, region, sync)
  local L, gap = h.perf.launch_us * 1e-6, h.perf.graph_node_us * 1e-6
  local host, gpu = 0, 0
  for i, t in ipairs(times) do
    host = host + L
    gpu = math.max(gpu + gap, host) + t
    if sync and sync[i] then host = gpu end -- a read-back: the host waits for the GPU to drain
  end
  local ghost, g, cur, nhost, ngraph = 0, 0, nil, 0, 0
  for i, t in ipairs(times) do
    local r = region and region[i]
    if not r or r ~= cur then -- a host launch, or the region's graph launch
      ghost, nhost = ghost + L, nhost + 1
      if r then ngraph = ngraph + 1 end
    end
    cur = r
    g = math.max(g + gap, ghost) + t
    if sync and sync[i] then ghost = g end
  end
  return gpu, g, nhost, ngraph
end

-- The v2165 region of each launch (M.timeline), as the device trainer cuts the step.
function M.regions(launches)
  local region, seen_loss = {}, false
  for i, l in ipairs(launches) do
    local r
    local is_loss = l.phase == "backward" and l.op == "crossentropy_fused"
    if l.op == "zero_grads" or l.host then r = nil -- l.host: an op that reads back mid-op (perf_moe.lua)
    elseif l.phase == "forward" then r = 1
    elseif l.phase == "backward" then r = (seen_loss and not is_loss) and 3 or 2
    elseif l.op == "grad_norm" then r = 4 end
    seen_loss = seen_loss or is_loss
    region[i] = r
  end
  return region
end

-- Collectives of the step on the hardware's links: data parallel over `gpus` GPUs (ring:
-- all-reduce moves 2(p-1)/p of the bytes per GPU; reduce-scatter and all-gather (p-1)/p each).
function M.collectives(plan, h, gpus, grad_bytes, param_bytes)
  local out = {}
  if gpus <= 1 then return out end
  local link = gpus <= 8 and h.perf.link_gbps * 1e9 * h.perf.eff.link or h.nic_gbps * 1e9 / 8 * h.perf.eff.nic
  local via = gpus <= 8 and (h.perf.link_name .. " " .. h.perf.link_gbps .. " GB/s per direction") or
    (h.nic_gbps .. " Gb/s NIC")
  local stage = plan.train.zero_stage or 0
  local function c(name, kind, n)
    local bytes = F.ring_bytes(kind, gpus, n)
    out[#out + 1] = { name = name, bytes = bytes, time = bytes / link, via = via }
  end
  if stage == 0 then c("all_reduce(grads)", "all_reduce", grad_bytes)
  else
    c("reduce_scatter(grads)", "reduce_scatter", grad_bytes)
    c("all_gather(params)", "all_gather", param_bytes)
    if stage == 3 then c("all_gather(params, backward)", "all_gather", param_bytes) end
  end
  return out
end

-- FA3 vs FA2 (v2114) per attention layer's forward on a Hopper part, from the two kernels'
-- declared work at this launch's shapes (templates/flash_attention.cu.lua: flash3_attn_fwd and
-- flash_attention_fwd with bf16 operands): FA2's mma.sync reaches eff.mma_sync of the wgmma rate
-- and its softmax adds to its GEMMs (the roofline's sum); FA3's ping-pong hides the softmax
-- under the other warpgroup's GEMMs (the larger of the two). nil without a flash launch or
-- without eff.mma_sync (not a Hopper entry).
function M.fa3_vs_fa2(launches, h)
  local ms = h.perf.eff.mma_sync
  if not ms then return nil end
  local a
  for _, l in ipairs(launches) do
    if l.family == "flash_attention" and (l.kernel == "flash_attention_fwd" or l.kernel == "flash3_attn_fwd") then a = l.args; break end
  end
  if not a then return nil end
  local a2 = {}
  for k, v in pairs(a) do a2[k] = v end
  a2.PREC = "bf16"
  a2.FA3_BK = a2.FA3_BK or 128
  local c2, c3 = M.kernel_cost("flash_attention", "flash_attention_fwd", a2), M.kernel_cost("flash_attention", "flash3_attn_fwd", a2)
  local r = M.rates(h)
  local t2, t3 = M.launch_time(c2, r), M.launch_time(c3, r)
  return { fa2 = t2, fa3 = t3, ratio = t2 / t3, B = a.B, T = a.T, NH = a.NH, HD = a.HD, mma_sync = ms }
end

-- The whole prediction for one hardware entry.
function M.predict(plan, manifest, h, opts)
  opts = opts or {}
  local launches, ctx = M.step_launches(plan, manifest, opts)
  local r = M.rates(h)
  -- a unit the trainer needs and the hardware lacks (FP8 GEMMs on an A100): a bad pairing
  for _, l in ipairs(launches) do
    for _, u in ipairs(UNITS) do
      if l.cost and l.cost[u] > 0 and not (r[u] > 0) then
        U.fail(h.path or h.name, string.format("%s has %s = 0, but this trainer runs %s work (%s in %s)", h.name,
          UNIT_PEAK[u] and ("peak_tflops." .. UNIT_PEAK[u]) or "perf.sfu_tops", u, l.kernel, l.op),
          "predict it on hardware that has the unit (e.g. FP8 tensor cores: sm_89+), or generate the trainer without it")
      end
    end
  end
  local times, total = {}, { bytes = 0 }
  for _, u in ipairs(UNITS) do total[u] = 0 end
  local by_op = {}
  local sum_kernel, sum_bound, n_undeclared = 0, 0, 0
  for i, l in ipairs(launches) do
    local t, bound, tpeak = 0, "undeclared", 0
    if not l.cost then n_undeclared = n_undeclared + 1 end
    if l.cost then
      t, bound, tpeak = M.launch_time(l.cost, r)
      for _, u in ipairs(UNITS) do total[u] = total[u] + l.cost[u] end
      total.bytes = total.bytes + l.cost.rd + l.cost.wr
    end
    l.time, l.bound, l.time_peak = t, bound, tpeak
    times[i] = t
    sum_kernel = sum_kernel + t
    sum_bound = sum_bound + tpeak
    local key = l.phase .. " " .. l.op .. " / " .. l.kernel
    local e = by_op[key]
    if not e then
      e = { key = key, op = l.op, kernel = l.kernel, family = l.family, phase = l.phase, count = 0, time = 0, time_peak = 0, bytes = 0, flops = 0, bound = bound }
      by_op[key] = e
    end
    e.count, e.time, e.time_peak = e.count + 1, e.time + t, e.time_peak + tpeak
    if l.cost then
      e.bytes = e.bytes + l.cost.rd + l.cost.wr
      for _, u in ipairs(UNITS) do if u ~= "sfu" then e.flops = e.flops + l.cost[u] end end
    end
  end
  local sync = {}
  for i, l in ipairs(launches) do sync[i] = l.sync or false end
  local eager, graph, graph_host, graph_launches = M.timeline(times, h, M.regions(launches), sync)
  local gpus = opts.gpus or 1
  local grad_bytes, param_bytes = 0, 0
  for _, b in ipairs(plan.buffers or {}) do
    if b.kind == "grad" then grad_bytes = grad_bytes + b.bytes elseif b.kind == "param" then param_bytes = param_bytes + b.bytes end
  end
  local coll = M.collectives(plan, h, gpus, grad_bytes, param_bytes)
  local t_comm = 0
  for _, c in ipairs(coll) do t_comm = t_comm + c.time end
  -- overlap (plan.train.comm_overlap): communication hides behind the backward pass
  local bwd = 0
  for _, l in ipairs(launches) do if l.phase == "backward" then bwd = bwd + l.time end end
  local exposed = (plan.train.comm_overlap or 0) ~= 0 and math.max(0, t_comm - bwd) or t_comm
  -- expert parallelism (v2109): the MoE layers' all-to-alls sit inside the forward and backward,
  -- in the critical path (nothing overlaps them)
  local a2a = PM.alltoall(plan)
  if a2a then
    local link = a2a.ep <= (h.gpus_per_node or 8) and h.perf.link_gbps * 1e9 * h.perf.eff.link or h.nic_gbps * 1e9 / 8 * h.perf.eff.nic
    local via = a2a.ep <= (h.gpus_per_node or 8) and (h.perf.link_name .. " " .. h.perf.link_gbps .. " GB/s per direction") or (h.nic_gbps .. " Gb/s NIC")
    local c = { name = string.format("all_to_all(moe rows, ep %d, %d layers)", a2a.ep, a2a.layers), bytes = a2a.bytes, time = a2a.bytes / link, via = via }
    coll[#coll + 1] = c
    t_comm, exposed = t_comm + c.time, exposed + c.time
  end
  local tokens = plan.train.B * plan.train.T * (plan.train.grad_accum or 1)
  local mode = opts.graphs and "graph" or "eager"
  local step = (opts.graphs and graph or eager) * (plan.train.grad_accum or 1) + exposed
  local fpt = plan.flops_per_token
  local peak_mfu = (h.peak_tflops.bf16 or 0) > 0 and h.peak_tflops.bf16 * 1e12 or h.peak_tflops.fp32 * 1e12
  local ops = {}
  for _, e in pairs(by_op) do ops[#ops + 1] = e end
  table.sort(ops, function(a, b) if a.time ~= b.time then return a.time > b.time end return a.key < b.key end)
  local undeclared = U.sorted_keys(ctx.undeclared)
  return {
    hardware = h.name, policy = ctx.policy, mode = mode, gpus = gpus,
    launches = #launches, kernel_time = sum_kernel, roofline_bound = sum_bound,
    step_eager = eager, step_graph = graph, graph_host_launches = graph_host, graph_launches = graph_launches, step = step, comm = coll, comm_time = t_comm, comm_exposed = exposed,
    tokens_per_step = tokens, tokens_per_s = tokens / step * gpus,
    tokens_per_s_per_gpu = tokens / step,
    flops_per_token = fpt, flops_convention = plan.flops_convention,
    mfu = fpt * tokens / step / peak_mfu, mfu_peak = peak_mfu,
    mfu_peak_name = (h.peak_tflops.bf16 or 0) > 0 and "bf16 dense" or "fp32",
    mfu_cap = h.perf.eff.tc, totals = total, ops = ops, undeclared = undeclared, undeclared_launches = n_undeclared, epilogues = opts.epilogues and true or false,
    launch_list = opts.keep_launches and launches or nil, fa3 = M.fa3_vs_fa2(launches, h),
  }
end

------------------------------------------------------------------------------------------------
-- The command

local function fmt_t(s)
  if s >= 1 then return string.format("%.3f s", s) end
  if s >= 1e-3 then return string.format("%.2f ms", s * 1e3) end
  return string.format("%.1f us", s * 1e6)
end
local function fmt_n(x)
  if x >= 1e15 then return string.format("%.2fP", x / 1e15) end
  if x >= 1e12 then return string.format("%.2fT", x / 1e12) end
  if x >= 1e9 then return string.format("%.2fG", x / 1e9) end
  if x >= 1e6 then return string.format("%.2fM", x / 1e6) end
  if x >= 1e3 then return string.format("%.1fk", x / 1e3) end
  return string.format("%.0f", x)
end
M.fmt_t, M.fmt_n = fmt_t, fmt_n

function M.text(rep, plan, top)
  local o = {}
  local function w(...) o[#o + 1] = string.format(...) end
  w("## %s — %s, B=%d T=%d, policy %s%s", rep.hardware, plan.model.name, plan.train.B, plan.train.T, rep.policy,
    (rep.policy == "plan" and " (what the trainer executes)" or " (WHAT-IF: activations and GEMM operands in bf16; not what the trainer executes today)")
    .. (rep.epilogues and " + WHAT-IF --epilogues (GEMM+GELU, dGELU, bias-gradient sites fused into cuBLASLt epilogues)" or ""))
  w("step: %s eager (%d launches), %s with CUDA graphs (%d host launches, %d of them graphs); kernels alone %s; roofline bound (peaks, no efficiency) %s",
    fmt_t(rep.step_eager), rep.launches, fmt_t(rep.step_graph), rep.graph_host_launches, rep.graph_launches, fmt_t(rep.kernel_time),
    fmt_t(rep.roofline_bound))
  for _, c in ipairs(rep.comm) do w("collective %s: %sB over %s: %s", c.name, fmt_n(c.bytes), c.via, fmt_t(c.time)) end
  if #rep.comm > 0 then w("communication exposed: %s", fmt_t(rep.comm_exposed)) end
  w("predicted (%s): %s tokens/s per GPU, MFU %.1f%% of the %s peak (%s FLOP/token, %s)", rep.mode,
    fmt_n(rep.tokens_per_s_per_gpu), 100 * rep.mfu, rep.mfu_peak_name, fmt_n(rep.flops_per_token), rep.flops_convention or "")
  local t = rep.totals
  w("per step: tc_bf16 %sFLOP, tc_fp8 %sFLOP, tc_tf32 %sFLOP, fp32 %sFLOP, sfu %s ops, DRAM %sB",
    fmt_n(t.tc_bf16), fmt_n(t.tc_fp8), fmt_n(t.tc_tf32), fmt_n(t.fp32), fmt_n(t.sfu), fmt_n(t.bytes))
  w("")
  w("| op / kernel | launches | time | share | FLOP | DRAM bytes | bound |")
  w("|---|---:|---:|---:|---:|---:|---|")
  for i = 1, math.min(top or 10, #rep.ops) do
    local e = rep.ops[i]
    w("| %s | %d | %s | %.1f%% | %s | %s | %s |", e.key, e.count, fmt_t(e.time), 100 * e.time / rep.kernel_time,
      fmt_n(e.flops), fmt_n(e.bytes), e.bound)
  end
  if rep.fa3 then
    local f = rep.fa3
    w("attention forward per layer (B=%d T=%d NH=%d HD=%d, bf16 operands): FA2 (mma.sync at %.3g of the wgmma rate, softmax after the GEMMs) %s, FA3 (wgmma, softmax hidden by ping-pong) %s: FA3 predicted %.2fx faster; the FA3 paper measured 1.5-2.0x on H100 (FP16 forward, arXiv 2407.08608)",
      f.B, f.T, f.NH, f.HD, f.mma_sync, fmt_t(f.fa2), fmt_t(f.fa3), f.ratio)
  end
  if #rep.undeclared > 0 then
    w("INCOMPLETE: %d launch(es) have no cost declaration and count as 0 s (the figures above are optimistic): %s",
      rep.undeclared_launches, table.concat(rep.undeclared, ", "))
  end
  return table.concat(o, "\n") .. "\n"
end

local USAGE = [[
usage: gen perf DIR --hw NAME[,NAME] [--policy plan|bf16] [--graphs] [--epilogues] [--gpus P] [--top K]
                [--tree FILE] [--set KEY=V] [--json]
  the performance model of the trainer generated into DIR (its plan.json and kernels/kernels.json)
  --hw LIST      hardware names from specs/hardware (or YAML paths)
  --policy P     plan: what the trainer executes (default); bf16: the what-if of bf16 activation
                 arenas and bf16 tensor-core GEMMs (the plan's dtypes switched), printed as such
  --graphs       headline figures with CUDA graphs (both are always printed)
  --epilogues    what-if: every GEMM+GELU, dGELU and bias-gradient site fused into the GEMM's
                 cuBLASLt epilogue (v2166) as if the plan marked it (attrs.epilogue); printed as such
  --gpus P       data-parallel GPUs for the collectives (default 1)
  --set KEY=V    override a hardware number: hbm_tbps, peak_tflops.{fp32,bf16,fp8},
                 perf.{sfu_tops,launch_us,graph_node_us} (e.g. this machine's measured peak)
  --top K        rows of the top-ops table (default 10)
  --launches     with --json: every launch of the step with its declared cost
]]

function M.load_dir(dir)
  if hyp.stat(dir) ~= "dir" then U.fail(dir, "not a directory", "give a directory written by gen, e.g. out/tiny") end
  local txt = hyp.read_file(dir .. "/plan.json")
  if not txt then U.fail(dir, "no plan.json here", "give a directory written by gen, e.g. gen specs/v2500.yaml --enable bf16 --target sm_90 -o out/x") end
  local plan = hyp.json_decode(txt)
  if type(plan) ~= "table" or not plan.forward or not plan.train then U.fail(dir .. "/plan.json", "not a Hyperion plan", "regenerate the trainer with gen") end
  local mtxt = hyp.read_file(dir .. "/kernels/kernels.json")
  local manifest
  if mtxt then
    manifest = hyp.json_decode(mtxt)
    if type(manifest) ~= "table" then U.fail(dir .. "/kernels/kernels.json", "corrupt kernel manifest", "regenerate the trainer with gen") end
  else
    -- a cpu-target trainer has no manifest: bind its ops through the templates' own declarations
    manifest = M.manifest_from_templates(plan)
  end
  return plan, manifest
end

-- The op bindings of the templates (their `ops` tables) for a plan without a kernel manifest.
function M.manifest_from_templates(plan)
  local RND = require("render")
  local ops = {}
  -- the family that declares each kernel (a binding may launch another family's kernel: the
  -- naive attention's qkv permutes live in rope)
  local home = {}
  for _, fam in ipairs(TPL.families()) do
    local d = family_decl(fam)
    if d and type(d.kernels) == "table" then
      for _, k in ipairs(d.kernels) do if type(k) == "table" and k.name and not home[k.name] then home[k.name] = fam end end
    end
  end
  local act = "f32"
  for _, b in ipairs(plan.buffers or {}) do if b.kind == "act" and b.dtype == "bf16" then act = "bf16" end end
  local function bind(name, family)
    local d = family_decl(family)
    local dops = d and d.ops
    if type(dops) == "function" then -- a table of the constants (render.lua does the same): the defaults, ACT the plan's
      local K = {}
      for k, spec in pairs(type(d.constants) == "table" and d.constants or {}) do
        if type(spec) == "table" then K[k] = spec.default end
      end
      K.ACT = act
      dops = dops(K)
    end
    if not dops or not dops[name] then return end
    local b = {}
    for _, L in ipairs(dops[name]) do
      local args = {}
      for i = 2, #L do args[#args + 1] = L[i] end
      b[#b + 1] = { kernel = L[1], file = (home[L[1]] or family) .. ".cu", args = args }
    end
    ops[name] = b
  end
  for _, list in ipairs({ plan.forward or {}, plan.backward or {} }) do
    for _, o in ipairs(list) do
      local fam = RND.OP_FAMILY[o.op]
      if fam and not ops[o.op] then bind(o.op, fam) end
    end
  end
  bind("grad_norm", "global_norm")
  local okind = plan.optimizer and plan.optimizer.kind
  local opt_family = ({ adamw = "adamw", lion = "lion", sophia = "sophia", muon = "muon", ["adam-mini"] = "adam_mini",
    adam_mini = "adam_mini", schedulefree = "schedulefree" })[okind or "adamw"]
  if opt_family then bind("optimizer", opt_family) end
  -- the files: kernel parameter lists from the template declarations, default constants
  local files = {}
  local seen = {}
  for _, b in pairs(ops) do
    for _, L in ipairs(b) do
      local fam = L.file:gsub("%.cu$", "")
      if not seen[fam] then
        seen[fam] = true
        local d = family_decl(fam)
        local ks = {}
        local kl = type(d.kernels) == "table" and d.kernels or {}
        for _, k in ipairs(kl) do
          local ps = {}
          for _, p in ipairs(type(k.params) == "table" and k.params or {}) do
            local ty, name = p:match("^(.-)%s*([%w_]+)$")
            ps[#ps + 1] = { type = ty or p, name = name or p }
          end
          ks[#ks + 1] = { name = k.name, params = ps }
        end
        files[#files + 1] = { file = L.file, family = fam, constants = {}, kernels = ks }
      end
    end
  end
  return { ops = ops, files = files, fusions = {} }
end

function M.load_hw(tree, name, sets)
  local T = require("tree")
  local doc, path = T.load_hardware(tree, name)
  local h = U.plain(doc)
  h.path = path
  if not h.perf then
    U.fail(path, "no perf section: the performance model needs sfu_tops, launch_us, graph_node_us, link_gbps, link_name and eff",
      "add a perf: section with sources as the other files in specs/hardware have")
  end
  for _, s in ipairs(sets or {}) do
    local a, b = s.key:match("^([^.]+)%.(.+)$")
    if a then h[a] = h[a] or {}; h[a][b] = s.value else h[s.key] = s.value end
  end
  return h
end

function M.main(args, parse)
  local o = parse(args, { ["--hw"] = "list", ["--policy"] = "value", ["--graphs"] = "flag", ["--epilogues"] = "flag", ["--gpus"] = "value",
    ["--top"] = "value", ["--tree"] = "value", ["--json"] = "flag", ["--launches"] = "flag", ["--set"] = "multi", ["--help"] = "flag", ["-h"] = "flag" })
  if o["--help"] or o["-h"] then io.write(USAGE); return 0 end
  if #o._pos ~= 1 then U.fail("<command line>", "gen perf needs one trainer directory", "e.g. gen perf out/gpt2 --hw h100-sxm") end
  if not o["--hw"] or #o["--hw"] == 0 then U.fail("<command line>", "gen perf needs --hw NAME[,NAME]", "e.g. --hw h100-sxm,a100-80gb") end
  local policy = o["--policy"] or "plan"
  if policy ~= "plan" and policy ~= "bf16" then U.fail("<command line>", "--policy must be plan or bf16, not " .. policy, "e.g. --policy bf16") end
  local gpus = tonumber(o["--gpus"] or "1")
  if not gpus or gpus < 1 or gpus % 1 ~= 0 then U.fail("<command line>", "--gpus must be a positive integer", "e.g. --gpus 8") end
  local top = tonumber(o["--top"] or "10")
  if not top or top < 1 then U.fail("<command line>", "--top must be a positive integer", "e.g. --top 10") end
  local sets = {}
  local ALLOWED = { hbm_tbps = true, ["peak_tflops.fp32"] = true, ["peak_tflops.bf16"] = true, ["peak_tflops.fp8"] = true,
    ["perf.sfu_tops"] = true, ["perf.launch_us"] = true, ["perf.graph_node_us"] = true }
  for _, s in ipairs(o["--set"] or {}) do
    local k, v = s:match("^([%w_.]+)=(.+)$")
    local n = tonumber(v)
    local may_be_zero = k == "perf.launch_us" or k == "perf.graph_node_us"
    if not k or not ALLOWED[k] or not n or n < 0 or (n == 0 and not may_be_zero) then
      U.fail("<command line>", "--set " .. s .. ": expected KEY=number with KEY one of hbm_tbps, peak_tflops.{fp32,bf16,fp8}, perf.sfu_tops (> 0), perf.{launch_us,graph_node_us} (>= 0)",
        "e.g. --set hbm_tbps=0.019")
    end
    sets[#sets + 1] = { key = k, value = n }
  end
  local plan, manifest = M.load_dir(o._pos[1])
  local tree = require("tree").load(o["--tree"] or "specs/v2500.yaml")
  local reps = {}
  for _, name in ipairs(o["--hw"]) do
    local h = M.load_hw(tree, name, sets)
    local rep = M.predict(plan, manifest, h, { policy = policy, graphs = o["--graphs"], epilogues = o["--epilogues"], gpus = gpus, keep_launches = o["--launches"] })
    -- a launch without a declared cost counts 0 s: said on stderr, in the text and the JSON
    if #rep.undeclared > 0 then
      io.stderr:write(string.format("gen: warning: gen perf %s: %d launch(es) of %s have no cost declaration and count as 0 s — the prediction is optimistic; declare `cost` in the template\n",
        name, rep.undeclared_launches, table.concat(rep.undeclared, ", ")))
    end
    if rep.launch_list then -- JSON-friendly: the launch, its op and its declared cost
      local ll = U.array()
      for _, l in ipairs(rep.launch_list) do
        ll[#ll + 1] = { kernel = l.kernel, family = l.family, op = l.op, phase = l.phase, cost = l.cost or hyp.null, time = l.time }
      end
      rep.launch_list = ll
    end
    reps[#reps + 1] = rep
  end
  if o["--json"] then
    io.write(assert(hyp.json_encode({ model = plan.model.name, B = plan.train.B, T = plan.train.T, predictions = reps }, true)), "\n")
  else
    for i, r in ipairs(reps) do
      if i > 1 then io.write("\n") end
      io.write(M.text(r, plan, top))
    end
  end
  return 0
end

return M
