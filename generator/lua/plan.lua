-- plan.lua — builds the runtime plan: the model graph (parameters with Hugging Face-style names,
-- shapes and init; the forward and backward op lists over named buffers) and the plan sections,
-- driven by the technique modules' hooks (techniques.lua): they transform the model, rewrite the
-- op lists, lay out the activation arena and fill the training, optimizer and parallelism
-- sections. Never: a spec id here (a technique's logic lives in its module); a value the user
-- did not give without a decision recording it and why.
-- The plan is the contract with runtime/core/plan.c (which validates it again on load).
local U = require("util")
local F = require("formulas")
local MOE = require("moe")
local P = {}

P.FORMAT = "hyperion-plan"
P.VERSION = 2

-- bytes per element of each buffer dtype (runtime/core/dtype.h names the same set)
local DTYPE_BYTES = { f32 = 4, bf16 = 2, f16 = 2, e4m3 = 1, e5m2 = 1, i8 = 1, i32 = 4 }

-- Dims in op attributes may be symbolic: "B", "T" or "N" (= B*T) are bound by the runtime to
-- the batch actually used (at most the planned one). The builder's op/emit are set by P.build
-- (they run the modules' rewrite chain).
local function builder(maxB, maxT)
  local g = { bufs = {}, by_name = {}, fwd = U.array(), bwd = U.array(), maxB = maxB, maxT = maxT }
  -- kind: param | grad | act | tokens
  function g.buf(name, kind, shape, dtype)
    assert(not g.by_name[name], "duplicate buffer " .. name)
    local numel = 1
    for _, s in ipairs(shape) do
      local v = s
      if s == "B" then v = maxB elseif s == "T" then v = maxT elseif s == "N" then v = maxB * maxT end
      numel = numel * v
    end
    dtype = dtype or "f32"
    assert(DTYPE_BYTES[dtype], "unknown dtype " .. tostring(dtype))
    local x = { id = #g.bufs, name = name, kind = kind, shape = U.array(shape), numel = numel, dtype = dtype,
      bytes = numel * DTYPE_BYTES[dtype] }
    g.bufs[#g.bufs + 1] = x
    g.by_name[name] = x
    return name
  end
  return g
end

local function tensor_params(m, d)
  -- returns list of {name, shape, init, decay, group} in arena order; fused groups contiguous
  local ps = {}
  local L = d.L
  local resid_std = 0.02 / math.sqrt(2 * L)
  local function p(name, shape, init, decay) ps[#ps + 1] = { name = name, shape = shape, init = init, decay = decay } end
  local normal, small = { kind = "normal", std = 0.02 }, { kind = "normal", std = resid_std }
  local ones, zeros = { kind = "ones" }, { kind = "zeros" }
  local gpt = m.arch == "gpt2"
  local names = {}
  if gpt then
    names.wte, names.wpe = "transformer.wte.weight", "transformer.wpe.weight"
  else
    names.wte = "model.embed_tokens.weight"
  end
  p(names.wte, { d.Vp, d.C }, normal, true)
  if m.position == "learned" then p(names.wpe or "model.embed_positions.weight", { d.maxT, d.C }, normal, true) end
  local layer = {}
  for l = 0, L - 1 do
    local n = {}
    local pre = gpt and ("transformer.h." .. l .. ".") or ("model.layers." .. l .. ".")
    local ln1 = gpt and "ln_1" or "input_layernorm"
    local ln2 = gpt and "ln_2" or "post_attention_layernorm"
    local sandwich = m.norm_placement == "sandwich"
    -- sandwich: a second norm on each sublayer's output (Gemma-2 names for Llama-style models,
    -- where post_attention_layernorm is the attention output's norm and the MLP's pre-norm is
    -- pre_feedforward_layernorm)
    if sandwich and not gpt then ln2 = "pre_feedforward_layernorm" end
    local function sandwich_norm(key, nm)
      n[key .. "w"] = pre .. nm .. ".weight"; p(n[key .. "w"], { d.C }, ones, false)
      if m.norm == "layernorm" and d.bias then n[key .. "b"] = pre .. nm .. ".bias"; p(n[key .. "b"], { d.C }, zeros, false) end
    end
    n.ln1w = pre .. ln1 .. ".weight"; p(n.ln1w, { d.C }, ones, false)
    if m.norm == "layernorm" and d.bias then n.ln1b = pre .. ln1 .. ".bias"; p(n.ln1b, { d.C }, zeros, false) end
    if gpt then
      n.qkvw = pre .. "attn.c_attn.weight"; p(n.qkvw, { d.qkv, d.C }, normal, true)
    else
      -- q, k, v projections stored contiguously: together they are the fused QKV weight
      n.qkvw = pre .. "self_attn.q_proj.weight"
      p(pre .. "self_attn.q_proj.weight", { d.NH * d.hd, d.C }, normal, true)
      p(pre .. "self_attn.k_proj.weight", { d.NKV * d.hd, d.C }, normal, true)
      p(pre .. "self_attn.v_proj.weight", { d.NKV * d.hd, d.C }, normal, true)
      n.qkv_fused = { pre .. "self_attn.q_proj.weight", pre .. "self_attn.k_proj.weight", pre .. "self_attn.v_proj.weight" }
    end
    if d.bias then
      n.qkvb = pre .. (gpt and "attn.c_attn.bias" or "self_attn.qkv_bias"); p(n.qkvb, { d.qkv }, zeros, false)
    end
    if m.qk_norm then
      n.qn = pre .. (gpt and "attn.q_norm.weight" or "self_attn.q_norm.weight"); p(n.qn, { d.hd }, ones, false)
      n.kn = pre .. (gpt and "attn.k_norm.weight" or "self_attn.k_norm.weight"); p(n.kn, { d.hd }, ones, false)
    end
    n.ow = pre .. (gpt and "attn.c_proj.weight" or "self_attn.o_proj.weight"); p(n.ow, { d.C, d.NH * d.hd }, small, true)
    if d.bias then n.ob = pre .. (gpt and "attn.c_proj.bias" or "self_attn.o_proj.bias"); p(n.ob, { d.C }, zeros, false) end
    if sandwich then sandwich_norm("lnao", gpt and "ln_attn_out" or "post_attention_layernorm") end
    n.ln2w = pre .. ln2 .. ".weight"; p(n.ln2w, { d.C }, ones, false)
    if m.norm == "layernorm" and d.bias then n.ln2b = pre .. ln2 .. ".bias"; p(n.ln2b, { d.C }, zeros, false) end
    local moe = MOE.layer(m, l)
    if moe then
      MOE.params(p, n, pre, d, moe, normal, small)
    elseif m.activation == "swiglu" then
      n.fcw = pre .. "mlp.gate_proj.weight"
      p(pre .. "mlp.gate_proj.weight", { d.H, d.C }, normal, true)
      p(pre .. "mlp.up_proj.weight", { d.H, d.C }, normal, true)
      n.fc_fused = { pre .. "mlp.gate_proj.weight", pre .. "mlp.up_proj.weight" }
    else
      n.fcw = pre .. (gpt and "mlp.c_fc.weight" or "mlp.up_proj.weight"); p(n.fcw, { d.fc, d.C }, normal, true)
    end
    if d.bias then n.fcb = pre .. (gpt and "mlp.c_fc.bias" or "mlp.up_proj.bias"); p(n.fcb, { d.fc }, zeros, false) end
    if not moe then n.pw = pre .. (gpt and "mlp.c_proj.weight" or "mlp.down_proj.weight"); p(n.pw, { d.C, d.H }, small, true) end
    if d.bias then n.pb = pre .. (gpt and "mlp.c_proj.bias" or "mlp.down_proj.bias"); p(n.pb, { d.C }, zeros, false) end
    if sandwich then sandwich_norm("lnmo", gpt and "ln_mlp_out" or "post_feedforward_layernorm") end
    layer[l] = n
  end
  names.lnfw = gpt and "transformer.ln_f.weight" or "model.norm.weight"
  p(names.lnfw, { d.C }, ones, false)
  if m.norm == "layernorm" and d.bias then names.lnfb = gpt and "transformer.ln_f.bias" or "model.norm.bias"; p(names.lnfb, { d.C }, zeros, false) end
  if not m.tied_embeddings then names.head = "lm_head.weight"; p(names.head, { d.Vp, d.C }, normal, true) end
  return ps, names, layer
end

-- Greedy static memory planner: buffers sorted by size (largest first) take the lowest offset
-- that does not overlap any already placed buffer whose lifetime [first, last] intersects.
-- Returns the arena size in floats. Offsets are aligned to 16 floats (64 bytes).
function P.assign_offsets(items, align)
  align = align or 16
  local order = {}
  for i, it in ipairs(items) do order[i] = it end
  table.sort(order, function(a, b) if a.numel ~= b.numel then return a.numel > b.numel end return a.name < b.name end)
  local placed = {}
  local top = 0
  for _, it in ipairs(order) do
    local size = ((it.numel + align - 1) // align) * align
    local clashes = {}
    for _, p in ipairs(placed) do
      if not (p.last < it.first or it.last < p.first) then clashes[#clashes + 1] = p end
    end
    table.sort(clashes, function(a, b) return a.offset < b.offset end)
    local off = 0
    for _, p in ipairs(clashes) do
      if off + size <= p.offset then break end
      off = math.max(off, p.offset + p.size)
    end
    it.offset, it.size = off, size
    placed[#placed + 1] = it
    top = math.max(top, off + size)
  end
  return top
end


-- The parameter arena: every tensor 16-float aligned, its gradient buffer at the same offset,
-- and the fused views (contiguous Q/K/V and gate/up weights read as one GEMM operand).
local function place_params(g, ps, d, layer)
  local poff = 0
  local params = U.array()
  for _, p in ipairs(ps) do
    local numel = 1
    for _, s in ipairs(p.shape) do numel = numel * s end
    p.offset = poff
    poff = poff + ((numel + 15) // 16) * 16
    params[#params + 1] = { name = p.name, shape = U.array(p.shape), offset = p.offset, numel = numel,
      init = p.init, decay = p.decay }
    g.buf(p.name, "param", p.shape)
    g.buf("grad:" .. p.name, "grad", p.shape)
    g.by_name[p.name].offset = p.offset
    g.by_name["grad:" .. p.name].offset = p.offset
  end
  local function fused_view(list, shape, name)
    local first = g.by_name[list[1]]
    g.buf(name, "param", shape); g.by_name[name].offset = first.offset
    g.buf("grad:" .. name, "grad", shape); g.by_name["grad:" .. name].offset = first.offset
    return name
  end
  for l = 0, d.L - 1 do
    local n = layer[l]
    if n.qkv_fused then
      n.qkvw = fused_view(n.qkv_fused, { d.qkv, d.C }, "model.layers." .. l .. ".self_attn.qkv_proj(fused)")
    end
    if n.fc_fused then
      n.fcw = fused_view(n.fc_fused, { d.fc, d.C }, "model.layers." .. l .. ".mlp.gate_up_proj(fused)")
    end
    if n.moe then n.experts = MOE.view(fused_view, n, l, d) end
  end
  return params, poff
end

-- The hardware the runtime reports MFU against. cpu: the trainer measures the running machine's
-- fp32 FMA peak at start (peak_source "measured"); host-cpu.yaml's figure stays as a record of
-- another machine. Devices: none here (a module may name the hardware and dtype).
local function hardware(tree, cfg)
  if cfg.target.kind ~= "cpu" then return { peak_source = "none" } end
  local peak = nil
  if hyp.stat(tree.dir .. "/hardware/host-cpu.yaml") == "file" then
    peak = require("tree").load_hardware(tree, "host-cpu").peak_tflops.fp32 * 1e12
  end
  return { name = "host-cpu", peak_flops = peak, peak_dtype = "fp32", peak_source = "measured" }
end

-- The forward graph of one transformer (the model file after the modules' `model` transforms),
-- its backward, and the loss op. g: the graph builder; names/layer: the parameters' buffers.
local function build_graph(g, m, d, names, layer, attention)
  local G = function(name) return name and ("grad:" .. name) or nil end
  g.buf("tokens", "tokens", { "B", "T" }, "i32")
  g.buf("targets", "tokens", { "B", "T" }, "i32")
  local F_, B_ = g.fwd, g.bwd
  local ln = m.norm == "layernorm"
  local act = function(name, shape) return g.buf(name, "act", shape) end
  local flash = attention == "flash"

  -- forward ------------------------------------------------------------------------------
  -- the last "" of the position and attention ops is their optional per-token positions input
  -- (a technique module's rewrite may name a "positions" token array there)
  local x = act("x0", { "N", d.C })
  g.op(F_, "embedding_fwd", { "tokens", names.wte, names.wpe or "", "" }, { x }, { B = "B", T = "T", C = d.C })
  local saved = {}
  local function norm_fwd(list, out, inp, w, bias, tag)
    if ln then
      local mean, rstd = act(tag .. ".mean", { "N" }), act(tag .. ".rstd", { "N" })
      g.op(list, "layernorm_fwd", { inp, w, bias or "" }, { out, mean, rstd }, { N = "N", C = d.C, eps = m.norm_eps or 1e-5 })
      return { mean = mean, rstd = rstd }
    else
      local rstd = act(tag .. ".rstd", { "N" })
      g.op(list, "rmsnorm_fwd", { inp, w }, { out, rstd }, { N = "N", C = d.C, eps = m.norm_eps or 1e-5 })
      return { rstd = rstd }
    end
  end
  -- norm placement (m.norm_placement): pre (default) x + f(norm(x)); post norm(x + f(x));
  -- sandwich x + norm_out(f(norm(x))). The final norm before the head is there in all three.
  local placement = m.norm_placement or "pre"
  local post, sandwich = placement == "post", placement == "sandwich"
  -- post only: the residual's weight (m.residual_alpha, DeepNorm: norm(alpha x + f(x))), the
  -- add's and its backward fan-in's attr alpha; m.attn_scale: the attention ops' score scale
  -- (absent: 1/sqrt(hd))
  local alpha = post and m.residual_alpha or nil
  local ascale = m.attn_scale
  for l = 0, d.L - 1 do
    local n, s = layer[l], {}
    local t = "l" .. l
    g.layer = l
    s.x = x
    if post then
      s.ln1 = x
    else
      s.ln1 = act(t .. ".ln1", { "N", d.C })
      s.ln1s = norm_fwd(F_, s.ln1, x, n.ln1w, n.ln1b, t .. ".ln1")
    end
    s.qkv = act(t .. ".qkv", { "N", d.qkv })
    g.op(F_, "matmul_fwd", { s.ln1, n.qkvw, n.qkvb or "" }, { s.qkv }, { N = "N", IC = d.C, OC = d.qkv })
    local q = s.qkv
    if m.qk_norm then
      s.qkvn = act(t .. ".qkvn", { "N", d.qkv })
      s.qkrstd = act(t .. ".qk_rstd", { "N", d.NH + d.NKV })
      g.op(F_, "qknorm_fwd", { q, n.qn, n.kn }, { s.qkvn, s.qkrstd }, { N = "N", NH = d.NH, NKV = d.NKV, hd = d.hd, eps = m.norm_eps or 1e-5 })
      q = s.qkvn
    end
    if m.position == "rope" then
      s.qkvr = act(t .. ".qkvr", { "N", d.qkv })
      g.op(F_, "rope_fwd", { q, "" }, { s.qkvr }, { B = "B", T = "T", NH = d.NH, NKV = d.NKV, hd = d.hd, theta = m.rope_theta or 10000.0 })
      q = s.qkvr
    end
    s.qin = q
    s.atty = act(t .. ".atty", { "N", d.NH * d.hd })
    if flash then
      s.lse = act(t .. ".lse", { "B", d.NH, "T" })
      g.op(F_, "flash_attention_fwd", { q, "" }, { s.atty, s.lse }, { B = "B", T = "T", NH = d.NH, NKV = d.NKV, hd = d.hd, scale = ascale })
    else
      s.att = act(t .. ".att", { "B", d.NH, "T", "T" })
      g.op(F_, "attention_fwd", { q, "" }, { s.atty, s.att }, { B = "B", T = "T", NH = d.NH, NKV = d.NKV, hd = d.hd, scale = ascale })
    end
    s.attp = act(t .. ".attproj", { "N", d.C })
    g.op(F_, "matmul_fwd", { s.atty, n.ow, n.ob or "" }, { s.attp }, { N = "N", IC = d.NH * d.hd, OC = d.C })
    local attout = s.attp
    if sandwich then
      s.attn_o = act(t .. ".attproj_norm", { "N", d.C })
      s.attn_os = norm_fwd(F_, s.attn_o, s.attp, n.lnaow, n.lnaob, t .. ".attproj_norm")
      attout = s.attn_o
    end
    if post then
      s.h1 = act(t .. ".xres1", { "N", d.C })
      g.op(F_, "add_fwd", { x, attout }, { s.h1 }, { n = "N", C = d.C, alpha = alpha })
      s.xm = act(t .. ".xmid", { "N", d.C })
      s.ln1s = norm_fwd(F_, s.xm, s.h1, n.ln1w, n.ln1b, t .. ".ln1")
      s.ln2 = s.xm
    else
      s.xm = act(t .. ".xmid", { "N", d.C })
      g.op(F_, "add_fwd", { x, attout }, { s.xm }, { n = "N", C = d.C })
      s.ln2 = act(t .. ".ln2", { "N", d.C })
      s.ln2s = norm_fwd(F_, s.ln2, s.xm, n.ln2w, n.ln2b, t .. ".ln2")
    end
    if n.moe then
      MOE.forward(g, F_, act, t, s, s.ln2, n, d.C)
    else
      s.fch = act(t .. ".fch", { "N", d.fc })
      g.op(F_, "matmul_fwd", { s.ln2, n.fcw, n.fcb or "" }, { s.fch }, { N = "N", IC = d.C, OC = d.fc })
      s.fca = act(t .. ".fch_act", { "N", d.H })
      if m.activation == "swiglu" then
        g.op(F_, "swiglu_fwd", { s.fch }, { s.fca }, { N = "N", H = d.H })
      else
        g.op(F_, "gelu_fwd", { s.fch }, { s.fca }, { n = "N", C = d.H })
      end
      s.fcp = act(t .. ".fcproj", { "N", d.C })
      g.op(F_, "matmul_fwd", { s.fca, n.pw, n.pb or "" }, { s.fcp }, { N = "N", IC = d.H, OC = d.C })
    end
    local mlpout = s.fcp
    if sandwich then
      s.mlp_o = act(t .. ".fcproj_norm", { "N", d.C })
      s.mlp_os = norm_fwd(F_, s.mlp_o, s.fcp, n.lnmow, n.lnmob, t .. ".fcproj_norm")
      mlpout = s.mlp_o
    end
    local xn = act("x" .. (l + 1), { "N", d.C })
    if post then
      s.h2 = act(t .. ".xres2", { "N", d.C })
      g.op(F_, "add_fwd", { s.xm, mlpout }, { s.h2 }, { n = "N", C = d.C, alpha = alpha })
      s.ln2s = norm_fwd(F_, xn, s.h2, n.ln2w, n.ln2b, t .. ".ln2")
    else
      g.op(F_, "add_fwd", { s.xm, mlpout }, { xn }, { n = "N", C = d.C })
    end
    saved[l] = s
    x = xn
  end
  g.layer = nil
  local lnf = act("lnf", { "N", d.C })
  local lnfs = norm_fwd(F_, lnf, x, names.lnfw, names.lnfb, "lnf")
  local head = names.head or names.wte
  local logits = act("logits", { "N", d.Vp })
  g.op(F_, "matmul_fwd", { lnf, head, "" }, { logits }, { N = "N", IC = d.C, OC = d.Vp })
  local losses = act("losses", { "N" })
  -- the loss op: forward-only for evaluation, fused (loss + dlogits in place) for training
  local loss_op = { op = "crossentropy", ins = U.array({ logits, "targets" }), outs = U.array({ losses }),
    attrs = { N = "N", V = d.V, Vp = d.Vp } }

  -- backward -----------------------------------------------------------------------------
  local dact = function(name) local src = g.by_name[name]; return g.buf("d:" .. name, "act", src.shape) end
  g.op(B_, "crossentropy_fused", { "targets" }, { losses, logits }, { N = "N", V = d.V, Vp = d.Vp })
  local dlnf = dact(lnf)
  g.op(B_, "matmul_bwd", { logits, lnf, head }, { dlnf, G(head), "" }, { N = "N", IC = d.C, OC = d.Vp })
  local dx = dact(x)
  local function norm_bwd(dinp, w, bias, dout, inp, st)
    if ln then
      g.op(B_, "layernorm_bwd", { dout, inp, w, st.mean, st.rstd }, { dinp, G(w), G(bias) or "" }, { N = "N", C = d.C })
    else
      g.op(B_, "rmsnorm_bwd", { dout, inp, w, st.rstd }, { dinp, G(w) }, { N = "N", C = d.C })
    end
  end
  norm_bwd(dx, names.lnfw, names.lnfb, dlnf, x, lnfs)
  for l = d.L - 1, 0, -1 do
    local n, s = layer[l], saved[l]
    g.layer = l
    -- dx: the gradient of this block's output
    local dh2 = dx
    if post then
      dh2 = dact(s.h2)
      norm_bwd(dh2, n.ln2w, n.ln2b, dx, s.h2, s.ln2s)
    end
    local dmlp = dh2
    if sandwich then
      dmlp = dact(s.fcp)
      norm_bwd(dmlp, n.lnmow, n.lnmob, dh2, s.fcp, s.mlp_os)
    end
    local dln2 = dact(s.ln2)
    if n.moe then
      MOE.backward(g, B_, "l" .. l, s, dmlp, dln2, s.ln2, n, d.C, G)
    else
      local dfca = dact(s.fca)
      g.op(B_, "matmul_bwd", { dmlp, s.fca, n.pw }, { dfca, G(n.pw), G(n.pb) or "" }, { N = "N", IC = d.H, OC = d.C })
      local dfch = dact(s.fch)
      if m.activation == "swiglu" then
        g.op(B_, "swiglu_bwd", { dfca, s.fch }, { dfch }, { N = "N", H = d.H })
      else
        g.op(B_, "gelu_bwd", { dfca, s.fch }, { dfch }, { n = "N", C = d.H })
      end
      g.op(B_, "matmul_bwd", { dfch, s.ln2, n.fcw }, { dln2, G(n.fcw), G(n.fcb) or "" }, { N = "N", IC = d.C, OC = d.fc })
    end
    local dxm = dln2
    if not post then
      dxm = dact(s.xm)
      norm_bwd(dxm, n.ln2w, n.ln2b, dln2, s.xm, s.ln2s)
    end
    g.op(B_, "accumulate", { dh2 }, { dxm }, { n = "N", C = d.C, alpha = alpha })
    local dh1 = dxm
    if post then
      dh1 = dact(s.h1)
      norm_bwd(dh1, n.ln1w, n.ln1b, dxm, s.h1, s.ln1s)
    end
    local dattn = dh1
    if sandwich then
      dattn = dact(s.attp)
      norm_bwd(dattn, n.lnaow, n.lnaob, dh1, s.attp, s.attn_os)
    end
    local datty = dact(s.atty)
    g.op(B_, "matmul_bwd", { dattn, s.atty, n.ow }, { datty, G(n.ow), G(n.ob) or "" }, { N = "N", IC = d.NH * d.hd, OC = d.C })
    local dq = dact(s.qin)
    if flash then
      local dsc = g.buf("scratch:" .. s.lse, "act", g.by_name[s.lse].shape)
      g.op(B_, "flash_attention_bwd", { datty, s.qin, s.atty, s.lse, "" }, { dq, dsc }, { B = "B", T = "T", NH = d.NH, NKV = d.NKV, hd = d.hd, scale = ascale })
    else
      local datt = g.buf("scratch:" .. s.att, "act", g.by_name[s.att].shape)
      g.op(B_, "attention_bwd", { datty, s.qin, s.att, "" }, { dq, datt }, { B = "B", T = "T", NH = d.NH, NKV = d.NKV, hd = d.hd, scale = ascale })
    end
    if m.position == "rope" then
      local src = m.qk_norm and s.qkvn or s.qkv
      local dsrc = dact(src)
      g.op(B_, "rope_bwd", { dq, "" }, { dsrc }, { B = "B", T = "T", NH = d.NH, NKV = d.NKV, hd = d.hd, theta = m.rope_theta or 10000.0 })
      dq = dsrc
    end
    if m.qk_norm then
      local dqkv = dact(s.qkv)
      g.op(B_, "qknorm_bwd", { dq, s.qkv, n.qn, n.kn, s.qkrstd }, { dqkv, G(n.qn), G(n.kn) }, { N = "N", NH = d.NH, NKV = d.NKV, hd = d.hd })
      dq = dqkv
    end
    local dln1 = dact(s.ln1)
    g.op(B_, "matmul_bwd", { dq, s.ln1, n.qkvw }, { dln1, G(n.qkvw), G(n.qkvb) or "" }, { N = "N", IC = d.C, OC = d.qkv })
    local dxl = dln1
    if not post then
      dxl = dact(s.x)
      norm_bwd(dxl, n.ln1w, n.ln1b, dln1, s.x, s.ln1s)
    end
    g.op(B_, "accumulate", { dh1 }, { dxl }, { n = "N", C = d.C, alpha = alpha })
    dx = dxl
  end
  g.layer = nil
  g.op(B_, "embedding_bwd", { dx, "tokens", "" }, { G(names.wte), G(names.wpe) or "" }, { B = "B", T = "T", C = d.C, V = d.V })

  -- gradient buffers of activations accumulate (+=): zero each right before its first write
  local zeroed = {}
  local bwd = U.array()
  for _, o in ipairs(B_) do
    for _, out in ipairs(o.outs) do
      local bf = g.by_name[out]
      if bf and bf.kind == "act" and out:sub(1, 2) == "d:" and not zeroed[out] then
        zeroed[out] = true
        bwd[#bwd + 1] = { op = "zero", ins = U.array(), outs = U.array({ out }), attrs = { n = bf.numel }, layer = o.layer }
      end
    end
    bwd[#bwd + 1] = o
  end
  return F_, loss_op, bwd, losses
end

-- Activation lifetimes over the schedule forward ++ backward: the items the memory hooks lay
-- out ({name, numel, first, last}; numel counts 4-byte units: the buffer's bytes / 4, rounded
-- up), the size without reuse and the peak of live units.
function P.lifetimes(g, fwd, bwd, losses)
  local sched = {}
  for _, o in ipairs(fwd) do sched[#sched + 1] = o end
  for _, o in ipairs(bwd) do sched[#sched + 1] = o end
  local life = {}
  for i, o in ipairs(sched) do
    for _, list in ipairs({ o.ins, o.outs }) do
      for _, nm in ipairs(list) do
        local bf = g.by_name[nm]
        if bf and bf.kind == "act" then
          local lt = life[nm]
          -- sizes in 4-byte units of the arena (a bf16 buffer takes half the units of an f32 one)
          if not lt then lt = { name = nm, numel = (bf.bytes + 3) // 4, first = i, last = i }; life[nm] = lt end
          lt.last = math.max(lt.last, i)
        end
      end
    end
  end
  -- a GEMM with a v2166 epilogue (attrs.epilogue) also writes the outputs of the op it folds in
  -- (the gelu_fwd after it; the gelu_bwd two ops on), at its own place in the step: those buffers
  -- live from there, so they never share memory with the GEMM's inputs
  for i, o in ipairs(sched) do
    local e = o.attrs and o.attrs.epilogue
    local f = (e == "gelu" or e == "swiglu") and sched[i + 1] or e == "dgelu" and sched[i + 2] or nil
    for _, nm in ipairs(f and f.outs or {}) do
      if life[nm] then life[nm].first = math.min(life[nm].first, i) end
    end
  end
  -- the losses are read after the step (reporting): keep them alive to the end
  life[losses].last = #sched + 1
  local items = {}
  for _, nm in ipairs(U.sorted_keys(life)) do items[#items + 1] = life[nm] end
  local naive = 0
  for _, it in ipairs(items) do naive = naive + ((it.numel + 15) // 16) * 16 end
  -- peak of simultaneously live floats: a sweep over lifetime starts and ends
  local delta = {}
  for _, it in ipairs(items) do
    delta[it.first] = (delta[it.first] or 0) + it.numel
    delta[it.last + 1] = (delta[it.last + 1] or 0) - it.numel
  end
  local peak, live = 0, 0
  for i = 1, #sched + 2 do
    live = live + (delta[i] or 0)
    if live > peak then peak = live end
  end
  return items, life, naive, peak
end

-- The planned (maximum) batch and sequence length: the command line, else what a module derived
-- (facts.batch), else the defaults — each recorded.
local function planned_shape(m, opts, facts, decide)
  local maxT = opts.seq or math.min(m.context, 256)
  if opts.seq == nil then decide("plan.seq", maxT, "no --seq: min(model context, 256); the trainer may use any T up to it") end
  if maxT < 1 or maxT > m.context then
    U.fail("<command line>", string.format("--seq %s is outside 1..%d (the model's context)", tostring(opts.seq), m.context), "choose a smaller --seq")
  end
  local maxB = opts.batch or facts.batch
  if maxB == nil then maxB = 8; decide("plan.batch", maxB, "no --batch: 8; the trainer may use any B up to it") end
  if maxB < 1 or maxB > 65536 then U.fail("<command line>", "--batch must be in 1..65536", "choose another --batch") end
  return maxB, maxT
end

-- The plan: a short driver over the technique hooks (techniques.lua). contrib collects what each
-- spec contributed (the audit); opts: {batch, seq}.
function P.build(tree, cfg, contrib, opts)
  local TQ = require("techniques")
  local decisions = cfg.decisions
  local function decide(what, value, why) decisions[#decisions + 1] = { what = what, value = value, why = why } end
  cfg.facts = cfg.facts or {}
  local facts = cfg.facts
  TQ.run(tree, cfg, contrib, "derive")

  -- the model graph: the model file, then the modules' transforms
  local m = {}
  for k, v in pairs(cfg.model) do m[k] = v end
  TQ.run(tree, cfg, contrib, "model", m)
  MOE.check(cfg, m, decide) -- a mixture of experts: what the runtime's MoE op cannot run is refused
  local d = F.dims(m)
  local maxB, maxT = planned_shape(m, opts, facts, decide)
  if facts.seq_split then -- a module that splits the sequence over ranks: the plan is one rank's share
    maxT = facts.seq_split.local_T(maxT)
  end
  local attention = facts.attention and facts.attention.kind or "naive"

  local ps, names, layer = tensor_params(m, d)
  TQ.run(tree, cfg, contrib, "params", ps, names)
  local g = builder(maxB, maxT)
  local rewrite = TQ.rewriter(tree, cfg, contrib)
  -- every op carries the transformer layer it belongs to (g.layer while build_graph builds that
  -- layer's forward or backward; nil outside the layers); emit_v2 drops the field
  function g.op(list, name, ins, outs, attrs)
    local o = { op = name, ins = U.array(ins), outs = U.array(outs), attrs = attrs or {}, layer = g.layer }
    o = rewrite(g, list, o)
    o.layer = g.layer
    list[#list + 1] = o
  end
  -- ops a rewrite hook inserts go straight into the list (they are not rewritten again)
  function g.emit(list, name, ins, outs, attrs)
    list[#list + 1] = { op = name, ins = U.array(ins), outs = U.array(outs), attrs = attrs or {}, layer = g.layer }
  end
  local params, poff = place_params(g, ps, d, layer)
  local fwd, loss_op, bwd, losses = build_graph(g, m, d, names, layer, attention)
  -- the whole schedule, once built: a schedule hook may reorder or add ops (forward replays)
  local sched = { fwd = fwd, bwd = bwd, loss = loss_op, L = d.L }
  TQ.run(tree, cfg, contrib, "schedule", g, sched)
  fwd, bwd = sched.fwd, sched.bwd

  -- the activation arena: a memory hook may lay it out; else every buffer gets its own region
  local items, _, naive, peak = P.lifetimes(g, fwd, bwd, losses)
  local mem = { items = items, naive = naive, peak = peak }
  TQ.run(tree, cfg, contrib, "memory", mem)
  if not mem.size then
    mem.size = 0
    for _, it in ipairs(items) do it.offset = mem.size; mem.size = mem.size + ((it.numel + 15) // 16) * 16 end
    decide("plan.memory", "no reuse", string.format("no memory-planning technique active: every activation has its own region (%.2f MiB; enable memory-planning to share)", naive * 4 / 1048576))
  end
  for _, it in ipairs(items) do g.by_name[it.name].offset = it.offset end

  -- plan sections: the runtime's defaults, the modules' settings, then their section hooks.
  -- The optimizer: Adam with fp32 moments unless a module says otherwise; its parameter groups
  -- come from the parameters' decay flags (emit_v2).
  local train = { B = maxB, T = maxT, decay_fraction = 0.2, zero_stage = 0,
    zero_prefetch = 1, -- stage 3: layer groups gathered ahead of the one computing
    comm_overlap = 1,  -- device targets: gradient all-reduce per layer bucket during backward
    data_parallel = 0, -- one process; a data-parallel technique lets the trainer run under mpirun
    steps = 1000, eval_every = 100, eval_batches = 8, seed = 1337 }
  train.lr = d.C <= 256 and 2e-3 or 6e-4
  local optimizer = { kind = "adamw", hyper = { beta1 = 0.9, beta2 = 0.95, eps = 1e-8 }, weight_decay = 0.0,
    state = U.array({ { name = "m", dtype = "f32" }, { name = "v", dtype = "f32" } }), shard = "elementwise" }
  local plan = {
    format = P.FORMAT, version = P.VERSION,
    generator = { version = hyp.version },
    model = { name = m.name, arch = m.arch, V = d.V, Vp = d.Vp, C = d.C, L = d.L, NH = d.NH, NKV = d.NKV,
      hd = d.hd, H = d.H, maxT = d.maxT, norm = m.norm, activation = m.activation, position = m.position,
      qk_norm = m.qk_norm or false, tied = m.tied_embeddings, bias = d.bias, tokenizer = m.tokenizer or "byte",
      params = F.param_count(m) },
    target = cfg.target.name, backend = cfg.target.kind,
    hardware = hardware(tree, cfg),
    flops_per_token = F.train_flops_per_token(m, maxT),
    flops_attn_coef = F.train_flops_per_token(m, 1) - F.train_flops_per_token(m, 0),
    flops_convention = F.FLOPS_CONVENTION.full,
    train = train, optimizer = optimizer,
    params = params, param_floats = poff,
    bufs = g.bufs, act_floats = mem.size, act_floats_unplanned = naive, act_floats_peak_live = peak,
    forward = fwd, loss = loss_op, backward = bwd,
  }
  TQ.apply_settings(tree, cfg, contrib, { train = train, optimizer = optimizer, ["optimizer.hyper"] = optimizer.hyper })
  TQ.run(tree, cfg, contrib, "sections", plan)
  if facts.lr == nil then
    decide("train.lr", train.lr, "default peak LR for d_model " .. (d.C <= 256 and "<= 256" or "> 256") .. "; override with train --lr")
  end
  return P.emit_v2(plan)
end

-- Plan format v2 (runtime/core/PLAN_FORMAT.md), the one place that shapes plan.json: takes the
-- plan P.build assembled (offsets in 4-byte units of the arenas, a decay flag per parameter, the
-- optimizer's weight decay) and writes buffers and parameters with a dtype and BYTE offsets, the
-- arena sizes in bytes, and the optimizer section's parameter groups from the decay flags. Any
-- other section a module added (fp8, checkpoint, ...) is passed through.
local INTERNAL = { bufs = true, params = true, param_floats = true, act_floats = true, act_floats_unplanned = true,
  act_floats_peak_live = true, optimizer = true }

-- An op as plan.json holds it: the builder's own fields (its layer) left out.
local function op_v2(o)
  return { op = o.op, ins = o.ins, outs = o.outs, attrs = o.attrs }
end

local function ops_v2(list)
  local out = U.array()
  for i, o in ipairs(list) do out[i] = op_v2(o) end
  return out
end

function P.emit_v2(s)
  local out = {}
  for k, v in pairs(s) do if not INTERNAL[k] then out[k] = v end end
  out.forward, out.backward, out.loss = ops_v2(s.forward), ops_v2(s.backward), op_v2(s.loss)
  local buffers, by_name = U.array(), {}
  for _, bf in ipairs(s.bufs) do
    local off = 0 -- token arrays are their own; an activation no op touches gets no place
    if bf.kind ~= "tokens" then off = (bf.offset or 0) * 4 end
    buffers[#buffers + 1] = { name = bf.name, kind = bf.kind, dtype = bf.dtype, shape = bf.shape, numel = bf.numel,
      offset = off, bytes = bf.bytes }
    by_name[bf.name] = bf
  end
  local decay, no_decay = U.array(), U.array()
  local o = s.optimizer
  -- a module may put parameters in groups of its own: p.group names one of o.extra_groups
  -- ({name, lr_mult, weight_decay, rule}); the rest go to decay/no_decay by their decay flag,
  -- with o.rule (if any) as those groups' update rule
  local extra = {}
  for _, eg in ipairs(o.extra_groups or {}) do extra[eg.name] = U.array() end
  local params = U.array()
  for _, p in ipairs(s.params) do
    local group = p.group or (p.decay and "decay" or "no_decay")
    local list = p.group and extra[p.group] or (p.decay and decay or no_decay)
    assert(list, "plan: parameter " .. p.name .. " names an optimizer group no module declared: " .. tostring(p.group))
    list[#list + 1] = p.name
    local bf = by_name[p.name]
    params[#params + 1] = { name = p.name, shape = p.shape, numel = p.numel, dtype = bf.dtype, offset = p.offset * 4,
      bytes = bf.bytes, init = p.init, group = group }
  end
  local groups = U.array()
  for _, eg in ipairs(o.extra_groups or {}) do
    if #extra[eg.name] > 0 then
      groups[#groups + 1] = { name = eg.name, lr_mult = eg.lr_mult, weight_decay = eg.weight_decay, rule = eg.rule,
        params = extra[eg.name] }
    end
  end
  if #decay > 0 then groups[#groups + 1] = { name = "decay", lr_mult = 1.0, weight_decay = o.weight_decay, rule = o.rule, params = decay } end
  if #no_decay > 0 then groups[#groups + 1] = { name = "no_decay", lr_mult = 1.0, weight_decay = 0.0, rule = o.rule, params = no_decay } end
  out.optimizer = { kind = o.kind, hyper = o.hyper, state = o.state, shard = o.shard, groups = groups }
  out.params, out.param_bytes = params, s.param_floats * 4
  out.buffers = buffers
  out.act_bytes, out.act_bytes_unplanned, out.act_bytes_peak_live = s.act_floats * 4, s.act_floats_unplanned * 4,
    s.act_floats_peak_live * 4
  return out
end

return P
