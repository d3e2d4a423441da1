-- render.lua — the render pass: which kernel families this trainer needs, with which
-- compile-time constants (from the plan's ops and the technique modules' `kernels` hooks), the
-- manifest binding plan ops to launches (and the fused sites), then the compile step for sm_XX
-- (kcompile.lua, NVRTC through the C host's cache). Writes nothing itself: it returns the files
-- that cli.lua stages into out/NAME/kernels/. Never: a silent choice (every block size, tile or
-- fallback is in cfg.decisions); a spec id (techniques decide through their hooks).
local U = require("util")
local TPL = require("template")
local KC = require("kcompile")
local M = {}

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
  round_fp16 = "cast", matmul_fwd = false, matmul_bwd = false, zero = false,
  fake_quant = "quant", int8_matmul_fwd = "quant", int8_matmul_dgrad = "quant",
  moe_fwd = "moe", moe_bwd = "moe",
}
local NOT_TEMPLATE = { matmul_fwd = "cuBLASLt (runtime)", matmul_bwd = "cuBLASLt (runtime)",
  zero = "cudaMemsetAsync (runtime)" }

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
    -- (a weighted residual, attr alpha, is no site: the fused kernels add with weight 1)
    if a.op == "add_fwd" and not a.attrs.alpha and (n.op == "layernorm_fwd" or n.op == "rmsnorm_fwd") and n.ins[1] == a.outs[1] then
      fwd[#fwd + 1] = { ops = U.array({ i - 1, i }), add = a.outs[1], norm = n.op }
    end
  end
  local Bk = plan.backward
  for i = 1, #Bk - 1 do
    local n, a = Bk[i], Bk[i + 1]
    if (n.op == "layernorm_bwd" or n.op == "rmsnorm_bwd") and a.op == "accumulate" and not a.attrs.alpha and a.outs[1] == n.outs[1] then
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
    -- a RoPE with per-token positions (document packing) stays a plain launch: the fused permute
    -- rotates by the row index
    local plain = (r.ins[2] or "") ~= ""
    if r.op == "rope_fwd" and not plain and a.op == "attention_fwd" and a.ins[1] == r.outs[1] then
      fwd[#fwd + 1] = { ops = U.array({ i - 1, i }), qkv = r.ins[1] }
    end
  end
  local Bk = plan.backward
  for i = 1, #Bk - 1 do
    local a, j = Bk[i], i + 1
    while Bk[j] and Bk[j].op == "zero" do j = j + 1 end -- the zeroing of rope_bwd's output stays
    local r = Bk[j]
    if a.op == "attention_bwd" and r and r.op == "rope_bwd" and (r.ins[2] or "") == "" and r.ins[1] == a.outs[1] then
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
}

-- The RoPE + attention sites launch exactly what the attention template binds for its op (the
-- template's `ops`, which differ by activation storage: bf16 keeps the scores in fp32 scratch),
-- with the op's own buffers named through the pair (`me.`) and the QKV permutes rotating (last
-- argument 1): forward (rope_fwd a, attention_fwd b), the permute reads the pre-RoPE rows a.in1;
-- backward (attention_bwd a, rope_bwd b), it re-reads the site's pre-RoPE rows and its gradient
-- accumulates into rope_bwd's output b.out1.
local function rope_attention_launches(launches, me, permute_in, permute_out)
  local out = {}
  for _, l in ipairs(launches) do
    local nl = { l[1] }
    for k = 2, #l do
      local a = l[k]
      if l[1] == "qkv_permute_fwd" and k == 5 then a = permute_in
      elseif l[1] == "qkv_permute_bwd" and k == 2 then a = permute_out
      elseif (l[1] == "qkv_permute_fwd" or l[1] == "qkv_permute_bwd") and k == #l then a = "1"
      elseif type(a) == "string" and (a:match("^in%d+$") or a:match("^out%d+$")) then a = me .. a end
      nl[k] = a
    end
    out[#out + 1] = nl
  end
  return out
end

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
  if seen.add_fwd or seen.accumulate then
    -- the residual weight (attr alpha, e.g. DeepNorm's) is a compile-time constant of the family:
    -- every add_fwd and accumulate of the plan must carry the same one
    local alpha
    for _, list in ipairs({ plan.forward, plan.backward }) do
      for _, o in ipairs(list) do
        if o.op == "add_fwd" or o.op == "accumulate" then
          local a = o.attrs.alpha or 1.0
          if alpha and a ~= alpha then
            U.fail("plan", string.format("the residual ops weight their first operand by %s and %s; the residual kernels take one weight", U.fmt_value(alpha), U.fmt_value(a)), "enable one technique that sets it")
          end
          alpha = a
        end
      end
    end
    want("residual", { "add_fwd", "accumulate" }, alpha ~= 1.0 and { ALPHA = alpha } or {})
  end
  if seen.attention_fwd then
    local rope = first_op(plan, "rope_fwd")
    local ks = { "qkv_permute_fwd", "qkv_permute_bwd" }
    if rope then ks[#ks + 1] = "rope_fwd"; ks[#ks + 1] = "rope_bwd" end
    want("rope", ks, { NH = m.NH, NKV = m.NKV, HD = m.hd, ROPE = rope ~= nil,
      THETA = rope and rope.attrs.theta or 10000.0 })
    want("attention_naive", { "attention_scores", "attention_softmax_fwd", "attention_value",
      "attention_bwd_datt", "attention_softmax_bwd", "attention_bwd_dq", "attention_bwd_dkv" },
      { NH = m.NH, NKV = m.NKV, HD = m.hd, ATT_SCALE = first_op(plan, "attention_fwd").attrs.scale })
  end
  if seen.flash_attention_fwd then
    local rope = first_op(plan, "rope_fwd") -- the flash kernels read the rotated qkv: plain rope ops
    if rope then
      want("rope", { "rope_fwd", "rope_bwd" }, { NH = m.NH, NKV = m.NKV, HD = m.hd, ROPE = true, THETA = rope.attrs.theta or 10000.0 })
    end
    -- the mask hook is compiled in only where the plan's attention reads per-token positions
    local fa = first_op(plan, "flash_attention_fwd")
    if facts.attention and facts.attention.family == "mem_efficient_attention" then -- v2118's SIMT kernels
      want("mem_efficient_attention", { "mea_fwd", "mea_bwd_d", "mea_bwd_dkv", "mea_bwd_dq" },
        { NH = m.NH, NKV = m.NKV, HD = m.hd, DOCMASK = (fa.ins[2] or "") ~= "", ATT_SCALE = fa.attrs.scale,
          MASK = fa.attrs.mask, WINDOW = fa.attrs.window, PREFIX = fa.attrs.prefix,
          SCORE_MOD = fa.attrs.score_mod, SOFTCAP = fa.attrs.softcap })
    else
    -- the forward kernel: FA2's, or the one a flash module names (v2114's flash3_attn_fwd)
    want("flash_attention", { facts.attention and facts.attention.fwd_kernel or "flash_attention_fwd", "flash_attention_bwd_d", "flash_attention_bwd_dkv", "flash_attention_bwd_dq" },
      { NH = m.NH, NKV = m.NKV, HD = m.hd, PREC = facts.attention and facts.attention.precision or "bf16x3",
        DOCMASK = (fa.ins[2] or "") ~= "", ATT_SCALE = fa.attrs.scale,
        -- the mask rule and score modifier of the op (v2117), rendered into the kernels
        MASK = fa.attrs.mask, WINDOW = fa.attrs.window, PREFIX = fa.attrs.prefix,
        SCORE_MOD = fa.attrs.score_mod, SOFTCAP = fa.attrs.softcap })
    end
  end
  if seen.gelu_fwd then want("gelu", { "gelu_fwd", "gelu_bwd" }, {}) end
  if seen.swiglu_fwd then want("swiglu", { "swiglu_fwd", "swiglu_bwd" }, { H = m.H }) end
  if seen.moe_fwd then -- runtime/device/exec_dev_moe.c runs the ops (every MoE layer has the model's moe settings)
    local a = first_op(plan, "moe_fwd").attrs
    want("moe", { "moe_route", "moe_count", "moe_stats", "moe_scatter", "moe_gather", "moe_swiglu_fwd", "moe_swiglu_bwd", "moe_combine",
      "moe_dy", "moe_scatter_add", "moe_router_bwd", "moe_gemm_rows", "moe_gemm_wgrad" }, { C = a.C, H = a.H, NE = a.E, TOPK = a.K, NORM = a.norm_topk and 1 or 0 })
  end
  if seen.crossentropy or seen.crossentropy_fused then
    want("classifier", { "crossentropy_fwd", "crossentropy_fused" }, { V = m.V, VP = m.Vp })
    -- a loss that is not plain cross-entropy (the plan's post section trains a preference
    -- objective, or its distill section names a teacher): the fused loss's variant with per-token
    -- gradient weights and teacher logits, which the device executor swaps in
    local post = plan.post and plan.post.objective
    if seen.crossentropy_fused and ((post and post ~= "sft") or plan.distill) then
      want("classifier", { "crossentropy_fused_ext" }, {})
    end
  end
  -- the optimizer step: gradient norm (reported every step, the clip factor) and, for the
  -- default optimizer kind, AdamW (fp32 parameters and moments); a module that sets another kind
  -- wants that kind's kernel in its `kernels` hook
  want("global_norm", { "global_norm_partial", "global_norm_finish" }, {})
  if plan.optimizer.kind == "adamw" then
    want("adamw", { "adamw_step" }, { PARAM = "f32", STATES = "f32", BF16_COPY = false })
  end
  -- the plan's quantization ops
  if seen.fp8_quantize then want("cast", { "fp8_fake_quantize_e4m3", "fp8_fake_quantize_e5m2" }) end
  if seen.round_bf16 then want("cast", { "round_bf16" }) end
  if seen.round_fp16 then want("cast", { "round_fp16" }) end
  TQ.run(tree, cfg, contrib, "kernels", { want = want, seen = seen })
  -- activation storage (the plan's buffer dtypes, v2102 storage bf16): every family whose template
  -- takes the ACT constant loads and stores its activation arguments in bf16
  if facts.precision and facts.precision.storage == "bf16" then
    for fam, f in pairs(need) do
      local cs = TPL.load(fam).decl.constants or {}
      if cs.ACT then f.K.ACT = "bf16" end
    end
  end
  -- assemble, in the canonical family order
  local by_family, all_families = TQ.family_specs(tree, cfg)
  local list = {}
  for _, fam in ipairs(TPL.families()) do
    local f = need[fam]
    if f then
      local ks = {}
      local t = TPL.load(fam)
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
  local compile = target.kind == "cuda" and not cfg.no_compile
  if target.kind == "cuda" and cfg.no_compile then
    decide("kernels.compile", "skipped (--no-compile)", "rendered only: no cubin or resources.json, so the trainer cannot run; the plan and kernel manifest are complete for gen perf and gen audit")
  end
  if compile and not KC.have_nvrtc() then
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
    local ops = TPL.load(inst.family).decl.ops -- a table, or a function of the constants (ACT)
    if type(ops) == "function" then ops = ops(inst.constants) end
    for op in pairs(ops or {}) do
      if notes.seen[op] then served[#served + 1] = op end
    end
    table.sort(served)
    local ok, r = pcall(TPL.render, inst.family, inst.constants, { kernels = inst.kernels, specs = inst.specs,
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
    -- a family with an arch-specific kernel (wgmma, setmaxnreg: sm_90a) compiles for the
    -- target's "a" variant, the others for the target itself: one NVRTC call per arch
    local by_arch, arch_order = {}, {}
    for i, r in ipairs(rendered) do
      local arch = target.name .. (r.arch_specific and "a" or "")
      if not by_arch[arch] then by_arch[arch] = { jobs = {}, idx = {} }; arch_order[#arch_order + 1] = arch end
      local g = by_arch[arch]
      g.jobs[#g.jobs + 1] = { name = r.family, source = r.source }
      g.idx[#g.idx + 1] = i
      if r.arch_specific then decide("kernels." .. r.family .. ".arch", arch, r.arch_specific) end
    end
    local opts, extra = KC.nvrtc_options()
    if extra then decide("kernels.nvrtc_flags", extra, "HYP_NVRTC_FLAGS adds NVRTC options") end
    local workers = tonumber(os.getenv("HYP_JOBS") or "")
    for _, arch in ipairs(arch_order) do
      local g = by_arch[arch]
      local okc, r1, r2 = pcall(hyp.nvrtc_compile, g.jobs, { arch = arch, options = opts, include_dirs = KC.include_dirs(),
        cache_dir = KC.cache_dir(), workers = workers and math.tointeger(workers) or nil, version = hyp.version })
      if not okc then -- NVRTC could not be loaded at run time (the message says what to do)
        local msg = tostring(r1)
        U.fail("<command line>", msg:match("^(.-) — ") or msg, msg:match(" — (.*)$") or "use --target cpu or sim")
      end
      for j, i in ipairs(g.idx) do results[i] = r1[j] end
      if stats then stats.cache_problem = stats.cache_problem or r2.cache_problem else stats = r2 end
    end
    if stats.cache_problem then
      io.stderr:write(string.format("gen: warning: kernel cache unavailable (%s: %s); compiling without it — set HYPERION_CACHE to a writable directory\n",
        KC.cache_dir() or "no HOME", stats.cache_problem))
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
        failed[#failed + 1] = KC.format_compile_error(rendered[i].family .. ".cu", res, rendered[i].source)
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
      for _, k in ipairs(KC.parse_ptxas(res.log or "")) do
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
    local att_ops
    for _, r in ipairs(rendered) do if r.ops.attention_fwd and r.ops.attention_bwd then att_ops = r.ops end end
    if att_ops then
      add("rope_attention_fwd", notes.rope_fwd_sites, rope_attention_launches(att_ops.attention_fwd, "b.", "a.in1", nil))
      add("rope_attention_bwd", notes.rope_bwd_sites, rope_attention_launches(att_ops.attention_bwd, "a.", "site.qkv", "b.out1"))
    end
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

return M
