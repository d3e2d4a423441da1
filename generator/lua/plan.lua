-- plan.lua — builds the runtime plan from the model spec and the active specs: parameters
-- (Hugging Face-style names, shapes, init, decay flags), the forward and backward op lists
-- over named buffers, a static memory plan of the activation arena (offsets assigned from
-- buffer lifetimes, so activations whose lifetimes do not overlap share memory), and the
-- training settings taken from the active optimizer/schedule specs. Every value chosen here
-- that the user did not give is recorded in cfg.decisions with its reason.
-- The plan is the contract with runtime/plan.c (which validates it again on load).
local U = require("util")
local F = require("formulas")
local R = require("resolve")
local P = {}

P.FORMAT = "hyperion-plan"
P.VERSION = 2

-- bytes per element of each buffer dtype (runtime/core/dtype.h names the same set)
local DTYPE_BYTES = { f32 = 4, bf16 = 2, f16 = 2, e4m3 = 1, e5m2 = 1, i8 = 1, i32 = 4 }

-- Dims in op attributes may be symbolic: "B", "T" or "N" (= B*T) are bound by the runtime to
-- the batch actually used (at most the planned one).
local function builder(maxB, maxT)
  local b = { bufs = {}, by_name = {}, ops = nil, fwd = U.array(), bwd = U.array(), maxB = maxB, maxT = maxT }
  -- kind: param | grad | act | tokens
  function b.buf(name, kind, shape, dtype)
    assert(not b.by_name[name], "duplicate buffer " .. name)
    local numel = 1
    for _, s in ipairs(shape) do
      local v = s
      if s == "B" then v = maxB elseif s == "T" then v = maxT elseif s == "N" then v = maxB * maxT end
      numel = numel * v
    end
    dtype = dtype or "f32"
    assert(DTYPE_BYTES[dtype], "unknown dtype " .. tostring(dtype))
    local x = { id = #b.bufs, name = name, kind = kind, shape = U.array(shape), numel = numel, dtype = dtype,
      bytes = numel * DTYPE_BYTES[dtype] }
    b.bufs[#b.bufs + 1] = x
    b.by_name[name] = x
    return name
  end
  function b.op(list, name, ins, outs, attrs, by)
    list[#list + 1] = { op = name, ins = U.array(ins), outs = U.array(outs), attrs = attrs or {}, by = by }
  end
  return b
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
    n.ln2w = pre .. ln2 .. ".weight"; p(n.ln2w, { d.C }, ones, false)
    if m.norm == "layernorm" and d.bias then n.ln2b = pre .. ln2 .. ".bias"; p(n.ln2b, { d.C }, zeros, false) end
    if m.activation == "swiglu" then
      n.fcw = pre .. "mlp.gate_proj.weight"
      p(pre .. "mlp.gate_proj.weight", { d.H, d.C }, normal, true)
      p(pre .. "mlp.up_proj.weight", { d.H, d.C }, normal, true)
      n.fc_fused = { pre .. "mlp.gate_proj.weight", pre .. "mlp.up_proj.weight" }
    else
      n.fcw = pre .. (gpt and "mlp.c_fc.weight" or "mlp.up_proj.weight"); p(n.fcw, { d.fc, d.C }, normal, true)
    end
    if d.bias then n.fcb = pre .. (gpt and "mlp.c_fc.bias" or "mlp.up_proj.bias"); p(n.fcb, { d.fc }, zeros, false) end
    n.pw = pre .. (gpt and "mlp.c_proj.weight" or "mlp.down_proj.weight"); p(n.pw, { d.C, d.H }, small, true)
    if d.bias then n.pb = pre .. (gpt and "mlp.c_proj.bias" or "mlp.down_proj.bias"); p(n.pb, { d.C }, zeros, false) end
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

function P.build(tree, cfg, contrib, opts)
  local m = cfg.model
  local d = F.dims(m)
  local decisions = cfg.decisions
  local function decide(what, value, why) decisions[#decisions + 1] = { what = what, value = value, why = why } end
  local function add_contrib(id, what)
    contrib[id] = contrib[id] or {}
    table.insert(contrib[id], what)
  end

  -- planned (maximum) batch and sequence length
  local maxT = opts.seq or math.min(m.context, 256)
  if opts.seq == nil then decide("plan.seq", maxT, "no --seq: min(model context, 256); the trainer may use any T up to it") end
  if maxT < 1 or maxT > m.context then
    U.fail("<command line>", string.format("--seq %s is outside 1..%d (the model's context)", tostring(opts.seq), m.context), "choose a smaller --seq")
  end
  local maxB = opts.batch or 8
  if opts.batch == nil then decide("plan.batch", maxB, "no --batch: 8; the trainer may use any B up to it") end
  if maxB < 1 or maxB > 65536 then U.fail("<command line>", "--batch must be in 1..65536", "choose another --batch") end

  -- attention kernel: flash (v2112/v2113/v2114) keeps only the log-sum-exp, naive stores B*NH*T*T
  local flash_id = (cfg.active.v2114 and "v2114") or (cfg.active.v2113 and "v2113") or (cfg.active.v2112 and "v2112")
  if flash_id and cfg.target.kind == "cpu" then
    decide("attention", "flash (cpu tiles)", flash_id .. " on the cpu target: the tiled online-softmax kernel of runtime/ops_flash.c (64x64 tiles, log-sum-exp saved)")
  end
  if flash_id then -- the spec's tile parameters describe the reference kernels; ours choose their own
    local bq, bk = R.param(cfg, flash_id, "block_q"), R.param(cfg, flash_id, "block_k")
    if bq or bk then
      decide(flash_id .. ".block_q/block_k", "not applied", string.format("%s sets block_q=%s, block_k=%s, but Hyperion's kernels pick their tiles: the cpu op 64x64 (hd <= 128), the CUDA template from the head dim, precision and shared memory (kernels.flash_attention.tiles in the audit of a sim/sm_XX trainer)",
        flash_id, tostring(bq), tostring(bk)))
    end
  end
  local b = builder(maxB, maxT)
  local ps, names, layer = tensor_params(m, d)
  if R.param(cfg, "v2132", "exclude") == "norms_biases_embeddings" then
    for _, p in ipairs(ps) do
      if p.name == names.wte or p.name == names.wpe or p.name == "model.embed_positions.weight" then p.decay = false end
    end
  end
  local poff = 0
  local params = U.array()
  for _, p in ipairs(ps) do
    local numel = 1
    for _, s in ipairs(p.shape) do numel = numel * s end
    p.offset = poff
    poff = poff + ((numel + 15) // 16) * 16
    params[#params + 1] = { name = p.name, shape = U.array(p.shape), offset = p.offset, numel = numel,
      init = p.init, decay = p.decay }
    b.buf(p.name, "param", p.shape)
    b.buf("grad:" .. p.name, "grad", p.shape)
    b.by_name[p.name].offset = p.offset
    b.by_name["grad:" .. p.name].offset = p.offset
  end
  -- fused views (contiguous param groups)
  local function fused_view(list, shape, name)
    local first = b.by_name[list[1]]
    b.buf(name, "param", shape); b.by_name[name].offset = first.offset
    b.buf("grad:" .. name, "grad", shape); b.by_name["grad:" .. name].offset = first.offset
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
  end
  local function G(name) return name and ("grad:" .. name) or nil end

  -- v2160 FP8 (HYBRID by default): every transformer-layer GEMM reads fake-quantized copies of its
  -- input activation and weight (E4M3) in forward and of its output gradient (E5M2) in backward,
  -- each with its own per-tensor scale (delayed from an amax history, or current). The LM head,
  -- norms, softmax and the loss stay fp32. The quantized copies are fp32 buffers holding exactly
  -- representable fp8 values (the numerics of an FP8 GEMM with fp32 accumulation); on device
  -- targets (fp8.gemm = "fp8") the executor also casts each operand [n][C] to fp8 bytes, as stored
  -- and transposed, and runs the layer GEMMs on those (runtime/exec_dev.c).
  local fp8 = nil
  local bf16 = cfg.active.v2102 and not cfg.active.v2160 and R.param(cfg, "v2102", "dtype") == "bf16"
  -- with FP8, the v2102 bf16 policy still covers the GEMM the recipe leaves out: the LM head
  local head_bf16 = cfg.active.v2102 and cfg.active.v2160 and R.param(cfg, "v2102", "dtype") == "bf16"
  if cfg.active.v2102 and not cfg.active.v2160 and not bf16 then
    decide("precision", "fp32", "v2102 dtype " .. tostring(R.param(cfg, "v2102", "dtype")) ..
      ": only the bf16 policy is emulated on the cpu backend so far; this trainer computes in fp32")
  end
  if cfg.active.v2160 then
    fp8 = { recipe = R.param(cfg, "v2160", "recipe"), scaling = R.param(cfg, "v2160", "scaling"),
      history = R.param(cfg, "v2160", "amax_history"), margin = R.param(cfg, "v2160", "margin"), slots = U.array() }
    if head_bf16 then
      decide("fp8.lm_head", "bf16", "v2160 leaves the LM head out of FP8 (as Transformer Engine recipes do); v2102 dtype bf16 rounds its input, weight and output gradient to bf16 (RNE), fp32 accumulation")
    else
      decide("fp8.lm_head", "fp32", "v2160: the LM head GEMM stays in fp32 (as Transformer Engine recipes leave the output projection)")
    end
    if cfg.target.kind == "cpu" then
      fp8.gemm = "fake"
      decide("fp8.emulation", "fake-quantize", "cpu target: FP8 GEMM inputs are quantized/dequantized bit-exactly like cuda_fp8.h and multiplied in fp32")
    else
      fp8.gemm = "fp8"
      decide("fp8.gemm", "cuBLASLt fp8 (TN)", cfg.target.kind .. " target: each layer GEMM (forward, dgrad, wgrad) multiplies fp8 operands " ..
        "(E4M3 x E4M3 forward, E4M3 x E5M2 backward with hybrid) with the operands' scale_inv as cuBLASLt's A/B scales and fp32 output; " ..
        "cuBLASLt takes fp8 only as TN with leading dimensions multiple of 16, so the cast kernels also write each operand transposed " ..
        "(dgrad reads W^T, wgrad x^T and dy^T); a GEMM whose IC or OC is not a multiple of 16, and wgrad when the batch's B*T is not, " ..
        "runs fake-quantized (fp32 copies of the fp8 values, fp32 GEMM) instead. Biases are added by an fp32 rank-1 GEMM (cuBLASLt's fp8 bias epilogue takes bf16), " ..
        "bias gradients come from the fake-quantized fp32 gradient")
    end
  elseif bf16 then
    decide("precision", "bf16 GEMM operands", "v2102 dtype bf16: every GEMM (LM head included) reads its input, weight and output gradient rounded to bf16 (round to nearest even) and accumulates in fp32; fp32 master weights, norms, softmax and loss")
  end
  if fp8 or bf16 then
    local raw_op = b.op
    local quantized = {}
    local function quant(list, src, role, count_attrs, tag, as_bf16)
      local bf = b.by_name[src]
      local dst = b.buf(tag, "act", bf.shape)
      local attrs = {}
      for k, v in pairs(count_attrs) do attrs[k] = v end
      if fp8 and not as_bf16 then
        attrs.slot = #fp8.slots
        fp8.slots[#fp8.slots + 1] = role
        raw_op(list, "fp8_quantize", { src }, { dst }, attrs)
      else
        raw_op(list, "round_bf16", { src }, { dst }, attrs)
      end
      return dst
    end
    local q = fp8 and "fp8:" or "bf16:"
    b.op = function(list, name, ins, outs, attrs, by)
      local head = outs[1] == "logits"
      if name == "matmul_fwd" and (bf16 or not head or head_bf16) then
        local inp, w = ins[1], ins[2]
        local hb = fp8 and head -- the LM head under fp8: the bf16 policy's rounding
        local tq = hb and "bf16:" or q
        local iq = quant(list, inp, "activation", { n = "N", C = attrs.IC }, tq .. outs[1] .. ".input", hb)
        local wq = quant(list, w, "weight", { n = attrs.OC, C = attrs.IC }, tq .. outs[1] .. ".weight", hb)
        quantized[inp .. "|" .. w] = { iq, wq, hb }
        ins = { iq, wq, ins[3] }
      elseif name == "matmul_bwd" and quantized[ins[2] .. "|" .. ins[3]] then
        local qq = quantized[ins[2] .. "|" .. ins[3]]
        local dq = quant(list, ins[1], "gradient", { n = "N", C = attrs.OC }, (qq[3] and "bf16:" or q) .. ins[1] .. ".grad", qq[3])
        ins = { dq, qq[1], qq[2] }
      end
      return raw_op(list, name, ins, outs, attrs, by)
    end
  end

  b.buf("tokens", "tokens", { "B", "T" }, "i32")
  b.buf("targets", "tokens", { "B", "T" }, "i32")
  local F_, B_ = b.fwd, b.bwd
  local ln = m.norm == "layernorm"
  local act = function(name, shape) return b.buf(name, "act", shape) end

  -- forward ------------------------------------------------------------------------------
  local x = act("x0", { "N", d.C })
  b.op(F_, "embedding_fwd", { "tokens", names.wte, names.wpe or "" }, { x }, { B = "B", T = "T", C = d.C })
  local saved = {}
  local function norm_fwd(list, out, inp, w, bias, tag)
    if ln then
      local mean, rstd = act(tag .. ".mean", { "N" }), act(tag .. ".rstd", { "N" })
      b.op(list, "layernorm_fwd", { inp, w, bias or "" }, { out, mean, rstd }, { N = "N", C = d.C, eps = m.norm_eps or 1e-5 })
      return { mean = mean, rstd = rstd }
    else
      local rstd = act(tag .. ".rstd", { "N" })
      b.op(list, "rmsnorm_fwd", { inp, w }, { out, rstd }, { N = "N", C = d.C, eps = m.norm_eps or 1e-5 })
      return { rstd = rstd }
    end
  end
  for l = 0, d.L - 1 do
    local n, s = layer[l], {}
    local t = "l" .. l
    s.x = x
    s.ln1 = act(t .. ".ln1", { "N", d.C })
    s.ln1s = norm_fwd(F_, s.ln1, x, n.ln1w, n.ln1b, t .. ".ln1")
    s.qkv = act(t .. ".qkv", { "N", d.qkv })
    b.op(F_, "matmul_fwd", { s.ln1, n.qkvw, n.qkvb or "" }, { s.qkv }, { N = "N", IC = d.C, OC = d.qkv })
    local q = s.qkv
    if m.qk_norm then
      s.qkvn = act(t .. ".qkvn", { "N", d.qkv })
      s.qkrstd = act(t .. ".qk_rstd", { "N", d.NH + d.NKV })
      b.op(F_, "qknorm_fwd", { q, n.qn, n.kn }, { s.qkvn, s.qkrstd }, { N = "N", NH = d.NH, NKV = d.NKV, hd = d.hd, eps = m.norm_eps or 1e-5 })
      q = s.qkvn
    end
    if m.position == "rope" then
      s.qkvr = act(t .. ".qkvr", { "N", d.qkv })
      b.op(F_, "rope_fwd", { q }, { s.qkvr }, { B = "B", T = "T", NH = d.NH, NKV = d.NKV, hd = d.hd, theta = m.rope_theta or 10000.0 })
      q = s.qkvr
    end
    s.qin = q
    s.atty = act(t .. ".atty", { "N", d.NH * d.hd })
    if flash_id then
      s.lse = act(t .. ".lse", { "B", d.NH, "T" })
      b.op(F_, "flash_attention_fwd", { q }, { s.atty, s.lse }, { B = "B", T = "T", NH = d.NH, NKV = d.NKV, hd = d.hd })
    else
      s.att = act(t .. ".att", { "B", d.NH, "T", "T" })
      b.op(F_, "attention_fwd", { q }, { s.atty, s.att }, { B = "B", T = "T", NH = d.NH, NKV = d.NKV, hd = d.hd })
    end
    s.attp = act(t .. ".attproj", { "N", d.C })
    b.op(F_, "matmul_fwd", { s.atty, n.ow, n.ob or "" }, { s.attp }, { N = "N", IC = d.NH * d.hd, OC = d.C })
    s.xm = act(t .. ".xmid", { "N", d.C })
    b.op(F_, "add_fwd", { x, s.attp }, { s.xm }, { n = "N", C = d.C })
    s.ln2 = act(t .. ".ln2", { "N", d.C })
    s.ln2s = norm_fwd(F_, s.ln2, s.xm, n.ln2w, n.ln2b, t .. ".ln2")
    s.fch = act(t .. ".fch", { "N", d.fc })
    b.op(F_, "matmul_fwd", { s.ln2, n.fcw, n.fcb or "" }, { s.fch }, { N = "N", IC = d.C, OC = d.fc })
    s.fca = act(t .. ".fch_act", { "N", d.H })
    if m.activation == "swiglu" then
      b.op(F_, "swiglu_fwd", { s.fch }, { s.fca }, { N = "N", H = d.H })
    else
      b.op(F_, "gelu_fwd", { s.fch }, { s.fca }, { n = "N", C = d.H })
    end
    s.fcp = act(t .. ".fcproj", { "N", d.C })
    b.op(F_, "matmul_fwd", { s.fca, n.pw, n.pb or "" }, { s.fcp }, { N = "N", IC = d.H, OC = d.C })
    local xn = act("x" .. (l + 1), { "N", d.C })
    b.op(F_, "add_fwd", { s.xm, s.fcp }, { xn }, { n = "N", C = d.C })
    saved[l] = s
    x = xn
  end
  local lnf = act("lnf", { "N", d.C })
  local lnfs = norm_fwd(F_, lnf, x, names.lnfw, names.lnfb, "lnf")
  local head = names.head or names.wte
  local logits = act("logits", { "N", d.Vp })
  b.op(F_, "matmul_fwd", { lnf, head, "" }, { logits }, { N = "N", IC = d.C, OC = d.Vp })
  local losses = act("losses", { "N" })
  -- the loss op: forward-only for evaluation, fused (loss + dlogits in place) for training
  local loss_op = { op = "crossentropy", ins = U.array({ logits, "targets" }), outs = U.array({ losses }),
    attrs = { N = "N", V = d.V, Vp = d.Vp } }

  -- backward -----------------------------------------------------------------------------
  local dact = function(name) local src = b.by_name[name]; return b.buf("d:" .. name, "act", src.shape) end
  b.op(B_, "crossentropy_fused", { "targets" }, { losses, logits }, { N = "N", V = d.V, Vp = d.Vp })
  local dlnf = dact(lnf)
  b.op(B_, "matmul_bwd", { logits, lnf, head }, { dlnf, G(head), "" }, { N = "N", IC = d.C, OC = d.Vp })
  local dx = dact(x)
  local function norm_bwd(dinp, w, bias, dout, inp, st)
    if ln then
      b.op(B_, "layernorm_bwd", { dout, inp, w, st.mean, st.rstd }, { dinp, G(w), G(bias) or "" }, { N = "N", C = d.C })
    else
      b.op(B_, "rmsnorm_bwd", { dout, inp, w, st.rstd }, { dinp, G(w) }, { N = "N", C = d.C })
    end
  end
  norm_bwd(dx, names.lnfw, names.lnfb, dlnf, x, lnfs)
  for l = d.L - 1, 0, -1 do
    local n, s = layer[l], saved[l]
    local dfca = dact(s.fca)
    b.op(B_, "matmul_bwd", { dx, s.fca, n.pw }, { dfca, G(n.pw), G(n.pb) or "" }, { N = "N", IC = d.H, OC = d.C })
    local dfch = dact(s.fch)
    if m.activation == "swiglu" then
      b.op(B_, "swiglu_bwd", { dfca, s.fch }, { dfch }, { N = "N", H = d.H })
    else
      b.op(B_, "gelu_bwd", { dfca, s.fch }, { dfch }, { n = "N", C = d.H })
    end
    local dln2 = dact(s.ln2)
    b.op(B_, "matmul_bwd", { dfch, s.ln2, n.fcw }, { dln2, G(n.fcw), G(n.fcb) or "" }, { N = "N", IC = d.C, OC = d.fc })
    local dxm = dact(s.xm)
    norm_bwd(dxm, n.ln2w, n.ln2b, dln2, s.xm, s.ln2s)
    b.op(B_, "accumulate", { dx }, { dxm }, { n = "N", C = d.C })
    local datty = dact(s.atty)
    b.op(B_, "matmul_bwd", { dxm, s.atty, n.ow }, { datty, G(n.ow), G(n.ob) or "" }, { N = "N", IC = d.NH * d.hd, OC = d.C })
    local dq = dact(s.qin)
    if flash_id then
      local dsc = b.buf("scratch:" .. s.lse, "act", b.by_name[s.lse].shape)
      b.op(B_, "flash_attention_bwd", { datty, s.qin, s.atty, s.lse }, { dq, dsc }, { B = "B", T = "T", NH = d.NH, NKV = d.NKV, hd = d.hd })
    else
      local datt = b.buf("scratch:" .. s.att, "act", b.by_name[s.att].shape)
      b.op(B_, "attention_bwd", { datty, s.qin, s.att }, { dq, datt }, { B = "B", T = "T", NH = d.NH, NKV = d.NKV, hd = d.hd })
    end
    if m.position == "rope" then
      local src = m.qk_norm and s.qkvn or s.qkv
      local dsrc = dact(src)
      b.op(B_, "rope_bwd", { dq }, { dsrc }, { B = "B", T = "T", NH = d.NH, NKV = d.NKV, hd = d.hd, theta = m.rope_theta or 10000.0 })
      dq = dsrc
    end
    if m.qk_norm then
      local dqkv = dact(s.qkv)
      b.op(B_, "qknorm_bwd", { dq, s.qkv, n.qn, n.kn, s.qkrstd }, { dqkv, G(n.qn), G(n.kn) }, { N = "N", NH = d.NH, NKV = d.NKV, hd = d.hd })
      dq = dqkv
    end
    local dln1 = dact(s.ln1)
    b.op(B_, "matmul_bwd", { dq, s.ln1, n.qkvw }, { dln1, G(n.qkvw), G(n.qkvb) or "" }, { N = "N", IC = d.C, OC = d.qkv })
    local dxl = dact(s.x)
    norm_bwd(dxl, n.ln1w, n.ln1b, dln1, s.x, s.ln1s)
    b.op(B_, "accumulate", { dxm }, { dxl }, { n = "N", C = d.C })
    dx = dxl
  end
  b.op(B_, "embedding_bwd", { dx, "tokens" }, { G(names.wte), G(names.wpe) or "" }, { B = "B", T = "T", C = d.C, V = d.V })

  -- gradient buffers of activations accumulate (+=): zero each right before its first write
  local zeroed = {}
  local bwd = U.array()
  for _, o in ipairs(B_) do
    for _, out in ipairs(o.outs) do
      local bf = b.by_name[out]
      if bf and bf.kind == "act" and out:sub(1, 2) == "d:" and not zeroed[out] then
        zeroed[out] = true
        bwd[#bwd + 1] = { op = "zero", ins = U.array(), outs = U.array({ out }), attrs = { n = bf.numel } }
      end
    end
    bwd[#bwd + 1] = o
  end

  -- lifetimes over the schedule forward ++ backward, then offsets
  local sched = {}
  for _, o in ipairs(F_) do sched[#sched + 1] = o end
  for _, o in ipairs(bwd) do sched[#sched + 1] = o end
  local life = {}
  for i, o in ipairs(sched) do
    for _, list in ipairs({ o.ins, o.outs }) do
      for _, nm in ipairs(list) do
        local bf = b.by_name[nm]
        if bf and bf.kind == "act" then
          local lt = life[nm]
          if not lt then lt = { name = nm, numel = bf.numel, first = i, last = i }; life[nm] = lt end
          lt.last = math.max(lt.last, i)
        end
      end
    end
  end
  -- the losses are read after the step (reporting): keep them alive to the end
  life[losses].last = #sched + 1
  local items = {}
  for _, nm in ipairs(U.sorted_keys(life)) do items[#items + 1] = life[nm] end
  -- v2167: lifetime-based offset sharing; without it every buffer gets its own region
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
  local act_floats
  if cfg.active.v2167 then
    local align = math.max(1, (R.param(cfg, "v2167", "alignment") or 64) // 4)
    act_floats = P.assign_offsets(items, align)
    add_contrib("v2167", string.format("static memory plan: activation arena %.2f MiB instead of %.2f MiB without reuse (peak of simultaneously live buffers: %.2f MiB)",
      act_floats * 4 / 1048576, naive * 4 / 1048576, peak * 4 / 1048576))
  else
    act_floats = 0
    for _, it in ipairs(items) do it.offset = act_floats; act_floats = act_floats + ((it.numel + 15) // 16) * 16 end
    decide("plan.memory", "no reuse", string.format("v2167 memory_planning inactive: every activation has its own region (%.2f MiB; enable memory-planning to share)", naive * 4 / 1048576))
  end
  for _, it in ipairs(items) do b.by_name[it.name].offset = it.offset end

  -- training settings from the active specs ----------------------------------------------
  local train = { B = maxB, T = maxT }
  local function from(id, p, dflt, what)
    local v = R.param(cfg, id, p)
    if v == nil then decide(what, dflt, id .. " inactive: " .. tostring(dflt)); return dflt end
    add_contrib(id, string.format("%s = %s", what, U.fmt_value(v)))
    return v
  end
  train.grad_accum = from("v2103", "steps", 1, "train.grad_accum")
  train.warmup_steps = from("v2130", "warmup_steps", 0, "train.warmup_steps")
  train.schedule = from("v2131", "schedule", "constant", "train.schedule")
  train.min_lr_ratio = from("v2131", "min_lr_ratio", 1.0, "train.min_lr_ratio")
  train.decay_fraction = R.param(cfg, "v2131", "decay_fraction") or 0.2
  train.weight_decay = from("v2132", "weight_decay", 0.0, "train.weight_decay")
  train.beta1 = R.param(cfg, "v2132", "beta1") or 0.9
  train.beta2 = R.param(cfg, "v2132", "beta2") or 0.95
  train.eps = R.param(cfg, "v2132", "eps") or 1e-8
  train.max_norm = from("v2133", "max_norm", 0.0, "train.max_norm (0 = no clipping)")
  -- data parallelism and ZeRO (v2110, v2104, v2105): the world size is mpirun's, the stage is ours
  train.zero_stage = 0
  train.zero_prefetch = 1 -- stage 3: layers gathered ahead of the one computing (v2104 prefetch_layers)
  train.comm_overlap = 1 -- device targets: gradient all-reduce per layer bucket during backward (v2110 overlap)
  if cfg.active.v2110 then
    if R.param(cfg, "v2110", "overlap") == false then
      train.comm_overlap = 0
      decide("v2110.overlap", false, "the gradient all-reduce runs after backward")
    end
    decide("v2110.bucket_mb", "not applied", string.format("bucket_mb=%s is not used: the device step cuts the gradient arena into one bucket per layer, each all-reduced once its last backward op is done (runtime/train_dev.c); the cpu backend all-reduces after backward",
      tostring(R.param(cfg, "v2110", "bucket_mb"))))
  end
  if cfg.active.v2104 then
    train.zero_stage = R.param(cfg, "v2104", "stage") or 1
    if train.zero_stage == 3 then train.zero_prefetch = R.param(cfg, "v2104", "prefetch_layers") or 1 end
    add_contrib("v2104", string.format("ZeRO stage %d: %s across data-parallel ranks", train.zero_stage,
      ({ "AdamW moments sharded", "AdamW moments sharded, gradients reduce-scattered into shards",
         string.format("parameters, gradients and AdamW moments sharded per layer; each layer's parameters are all-gathered (the next %d prefetched) before use and released after, each layer's gradients reduce-scattered as soon as its backward is done", train.zero_prefetch) })[train.zero_stage]))
  elseif cfg.active.v2105 then
    train.zero_stage = 3
    decide("train.zero_stage", 3, "v2105 fsdp: full sharding of parameters, gradients and optimizer state = ZeRO stage 3 semantics")
    add_contrib("v2105", "full sharding (stage-3 semantics) across data-parallel ranks")
  end
  if cfg.active.v2110 then
    add_contrib("v2110", cfg.target.kind == "cpu"
      and "data parallel over MPI when started with mpirun: each rank reads disjoint windows; gradients averaged over the global batch"
      or "data parallel when started with mpirun, over the device collectives (" .. (cfg.target.kind == "sim" and "MPI on sim" or "NCCL, its id broadcast over MPI") ..
        "): each rank reads disjoint windows; gradients averaged over the global batch, all-reduced per layer bucket on a communication stream while backward runs (stages 0/1)")
  end
  train.lr = d.C <= 256 and 2e-3 or 6e-4
  decide("train.lr", train.lr, "default peak LR for d_model " .. (d.C <= 256 and "<= 256" or "> 256") .. "; override with train --lr")
  train.steps = 1000
  train.eval_every = 100
  train.eval_batches = 8
  train.seed = 1337
  if cfg.active.v2133 then add_contrib("v2133", "global-norm clipping in the optimizer step (op_sumsq + scale)") end
  if cfg.active.v2132 then add_contrib("v2132", "AdamW decoupled weight decay on 2-D weights only (" ..
    tostring(#(function() local t = {}; for _, p in ipairs(params) do if p.decay then t[#t + 1] = p end end; return t end)()) .. " tensors)") end

  if bf16 then
    add_contrib("v2102", "bf16 policy: GEMM operands rounded to bf16 (RNE) with fp32 accumulation; fp32 master weights, norms, softmax and loss")
  elseif head_bf16 then
    add_contrib("v2102", "bf16 policy beside FP8: the LM head GEMM (outside the FP8 recipe) reads bf16-rounded (RNE) input, weight and output gradient with fp32 accumulation; fp32 master weights, norms, softmax and loss")
  end
  if fp8 then
    add_contrib("v2160", string.format("%s recipe, %s scaling (amax history %d, margin %d): %d GEMM operands quantized per step (E4M3 weights/activations%s)",
      fp8.recipe, fp8.scaling, fp8.history, fp8.margin, #fp8.slots, fp8.recipe == "hybrid" and ", E5M2 gradients" or ", E4M3 gradients"))
  end
  if flash_id then
    add_contrib(flash_id, string.format("attention: flash forward/backward, saving [B,NH,T] log-sum-exp per layer instead of [B,NH,T,T] probabilities (%.2f MiB instead of %.2f MiB per layer at B=%d, T=%d)",
      maxB * d.NH * maxT * 4 / 1048576, maxB * d.NH * maxT * maxT * 4 / 1048576, maxB, maxT))
  end
  local hw_name = cfg.target.kind == "cpu" and "host-cpu" or nil
  local hw_peak = nil
  if hw_name and hyp.stat(tree.dir .. "/hardware/" .. hw_name .. ".yaml") == "file" then
    local hw = require("tree").load_hardware(tree, hw_name)
    hw_peak = hw.peak_tflops.fp32 * 1e12
  end

  return P.emit_v2({
    generator = { version = hyp.version },
    model = { name = m.name, arch = m.arch, V = d.V, Vp = d.Vp, C = d.C, L = d.L, NH = d.NH, NKV = d.NKV,
      hd = d.hd, H = d.H, maxT = d.maxT, norm = m.norm, activation = m.activation, position = m.position,
      qk_norm = m.qk_norm or false, tied = m.tied_embeddings, bias = d.bias, tokenizer = m.tokenizer or "byte",
      params = F.param_count(m) },
    target = cfg.target.name, backend = cfg.target.kind,
    hardware = { name = hw_name, peak_flops = hw_peak },
    flops_per_token = F.train_flops_per_token(m, maxT),
    flops_attn_coef = F.train_flops_per_token(m, 1) - F.train_flops_per_token(m, 0),
    train = train, params = params, param_floats = poff, bufs = b.bufs,
    act_floats = act_floats, act_floats_unplanned = naive, act_floats_peak_live = peak,
    forward = F_, loss = loss_op, backward = bwd, fp8 = fp8,
  })
end

-- Plan format v2 (runtime/core/PLAN_FORMAT.md), the one place that shapes plan.json: takes what
-- P.build decided (offsets in 4-byte units of the arenas, the optimizer's scalars in `train`,
-- a decay flag per parameter) and writes buffers and parameters with a dtype and BYTE offsets,
-- the arena sizes in bytes, and the optimizer section (kind, hyper-parameters, state tensors,
-- parameter groups derived from the decay flags).
function P.emit_v2(s)
  local buffers, by_name = U.array(), {}
  for _, bf in ipairs(s.bufs) do
    local off = 0 -- token arrays are their own; an activation no op touches gets no place
    if bf.kind ~= "tokens" then off = (bf.offset or 0) * 4 end
    buffers[#buffers + 1] = { name = bf.name, kind = bf.kind, dtype = bf.dtype, shape = bf.shape, numel = bf.numel,
      offset = off, bytes = bf.bytes }
    by_name[bf.name] = bf
  end
  local train = {}
  for k, v in pairs(s.train) do train[k] = v end
  local wd = train.weight_decay or 0.0
  local hyper = { beta1 = train.beta1, beta2 = train.beta2, eps = train.eps }
  train.weight_decay, train.beta1, train.beta2, train.eps = nil, nil, nil, nil
  local decay, no_decay = U.array(), U.array()
  local params = U.array()
  for _, p in ipairs(s.params) do
    local group = p.decay and "decay" or "no_decay"
    local list = p.decay and decay or no_decay
    list[#list + 1] = p.name
    local bf = by_name[p.name]
    params[#params + 1] = { name = p.name, shape = p.shape, numel = p.numel, dtype = bf.dtype, offset = p.offset * 4,
      bytes = bf.bytes, init = p.init, group = group }
  end
  local groups = U.array()
  if #decay > 0 then groups[#groups + 1] = { name = "decay", lr_mult = 1.0, weight_decay = wd, params = decay } end
  if #no_decay > 0 then groups[#groups + 1] = { name = "no_decay", lr_mult = 1.0, weight_decay = 0.0, params = no_decay } end
  return {
    format = P.FORMAT, version = P.VERSION,
    generator = s.generator, model = s.model, target = s.target, backend = s.backend, hardware = s.hardware,
    flops_per_token = s.flops_per_token, flops_attn_coef = s.flops_attn_coef,
    train = train,
    optimizer = {
      kind = "adamw", hyper = hyper,
      state = U.array({ { name = "m", dtype = "f32" }, { name = "v", dtype = "f32" } }),
      shard = "elementwise", groups = groups,
    },
    params = params, param_bytes = s.param_floats * 4,
    buffers = buffers, act_bytes = s.act_floats * 4, act_bytes_unplanned = s.act_floats_unplanned * 4,
    act_bytes_peak_live = s.act_floats_peak_live * 4,
    forward = s.forward, loss = s.loss, backward = s.backward, fp8 = s.fp8,
  }
end

return P
