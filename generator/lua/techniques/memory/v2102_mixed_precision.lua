-- v2102 mixed precision. Two ways to run the bf16 policy (param storage):
--  * storage "bf16" (the default): every activation buffer and activation gradient of the
--    arena is stored in bf16 (the plan's buffer dtypes; the arena is laid out in bytes, so it
--    halves), except the fp32 statistics (norm mean/rstd, attention log-sum-exp, per-token
--    losses); the cpu runtime runs the GEMMs as oneDNN bf16 matmuls (bf16 inputs, fp32
--    accumulation) on a bf16 copy of the fp32 master weights refreshed once per step, and every
--    other op computes in fp32 between bf16 loads and stores.
--    On sim/cuda (the default there too) the same plan rule: the device executor
--    allocates the arena in the plan's dtypes, the templates that touch activations render with
--    ACT = bf16 (load bf16, compute fp32, store bf16), and the GEMMs read a bf16 copy of the
--    weights and biases cast once per optimizer step, fp32 accumulation (dW in fp32, beta 1).
--  * storage "fp32" (on request; what auto gives beside FP8, beside QAT/INT8 or ZeRO-3 on a device):
--    every GEMM reads its input, weight and output gradient rounded to bf16 (round_bf16 ops,
--    round to nearest even) with fp32 accumulation; no memory saved.
-- Either way fp32 master weights, norms, softmax and loss. Beside FP8 (which covers the layer
-- GEMMs) the rounding covers the GEMM FP8 leaves out: the LM head (FP8 keeps fp32 storage). dtype
-- fp16 (every target): the same storage-fp32 policy with round_fp16 ops (IEEE binary16 exactly:
-- RNE, overflow to inf, subnormals; the cpu op and the cast template's round_fp16 kernel agree bit
-- for bit), so fp16 under- and overflow really happen (pair it with loss scaling).
local M = { id = "v2102", families = { "flash_attention", "adamw", "cast" } }

-- Outputs (1-based) of ops that hold fp32 statistics, never stored in bf16.
local STATS = { layernorm_fwd = { 2, 3 }, rmsnorm_fwd = { 2 }, qknorm_fwd = { 2 }, flash_attention_fwd = { 2 },
  flash_attention_bwd = { 2 }, crossentropy = { 1 }, crossentropy_fused = { 1 } }

function M.derive(ctx)
  local dtype = ctx.param("dtype")
  ctx.facts.precision = { dtype = dtype, bf16 = dtype == "bf16", fp16 = dtype == "fp16" }
  local want = ctx.param("storage") or "auto"
  if dtype == "fp16" and want == "bf16" then
    ctx.refuse("storage bf16 with dtype fp16", "use --set v2102.storage=fp32 (GEMM operands rounded to fp16) or dtype bf16")
  end
  ctx.facts.precision.want_storage = want
  if dtype ~= "bf16" and not ctx.facts.precision.fp16 then
    ctx.decide("precision", "fp32", "v2102 dtype " .. tostring(dtype) ..
      ": not a rounding policy this runtime emulates; this trainer computes in fp32")
    ctx.warn("dtype " .. tostring(dtype) .. " is not emulated: this trainer computes in fp32 (use bf16 or fp16)")
  end
end

-- The storage mode, once every module has derived (FP8, a later module, keeps fp32 storage).
-- auto: bf16 on every target, except beside FP8 (its GEMMs read fp32 activations), QAT/INT8 (their
-- fake-quantize and int8 GEMM kernels take fp32 activations) and, on a device, ZeRO-3 (the bf16
-- weight copy covers the whole parameter arena, which stage 3 never holds): there fp32 storage
-- with GEMM operands rounded to bf16, recorded with its reason.
local function storage(ctx)
  local p = ctx.facts.precision
  if p.storage then return p.storage end
  local want = p.want_storage
  p.storage = "fp32"
  if not p.bf16 then return p.storage end
  local device = ctx.target.kind ~= "cpu"
  local z3 = device and ctx.facts.zero and ctx.facts.zero.stage == 3
  local quant = ctx.facts.qat and "QAT" or ctx.facts.int8 and "INT8" or nil
  if want == "bf16" then
    if ctx.facts.fp8 then
      ctx.refuse("storage bf16 with fp8: FP8 GEMMs read fp32 activations in this runtime", "use --set v2102.storage=fp32, or drop fp8")
    end
    if z3 then
      ctx.refuse("storage bf16 with ZeRO-3 on --target " .. tostring(ctx.target.name) .. ": the device executor's bf16 weight copy covers the whole arena, which stage 3 never holds",
        "use zero2, or --set v2102.storage=fp32")
    end
    if quant and device then
      ctx.refuse("storage bf16 with " .. quant .. " on --target " .. tostring(ctx.target.name) .. ": its kernels take fp32 activations",
        "use --set v2102.storage=fp32, or --target cpu")
    end
    p.storage = "bf16"
  elseif want == "auto" then
    local why = ctx.facts.fp8 and "beside FP8 (its GEMMs read fp32 activations)"
      or (quant and device) and ("beside " .. quant .. " on a device (its kernels take fp32 activations)")
      or z3 and "with ZeRO-3 on a device (the bf16 weight copy needs the whole parameter arena)"
    if why then
      ctx.decide("v2102.storage", "fp32", "storage auto " .. why .. ": activations stay fp32, GEMM operands rounded to bf16")
    else
      p.storage = "bf16"
    end
  end
  return p.storage
end

local quantized = setmetatable({}, { __mode = "k" }) -- per graph: "input|weight" -> {input', weight'}

local function round(g, list, src, attrs, tag, op)
  local dst = g.buf(tag, "act", g.by_name[src].shape)
  g.emit(list, op, { src }, { dst }, attrs)
  return dst
end

function M.rewrite(ctx, g, list, op)
  local p = ctx.facts.precision
  if not (p.bf16 or p.fp16) or storage(ctx) == "bf16" then return op end
  local rop, pre = p.fp16 and "round_fp16" or "round_bf16", p.fp16 and "fp16:" or "bf16:"
  local q = quantized[g] or {}
  quantized[g] = q
  local head = op.outs[1] == "logits"
  if op.op == "matmul_fwd" and (head or not ctx.facts.fp8) then
    local inp, w, a = op.ins[1], op.ins[2], op.attrs
    local iq = round(g, list, inp, { n = "N", C = a.IC }, pre .. op.outs[1] .. ".input", rop)
    local wq = round(g, list, w, { n = a.OC, C = a.IC }, pre .. op.outs[1] .. ".weight", rop)
    q[inp .. "|" .. w] = { iq, wq }
    q.n = (q.n or 0) + 1
    op.ins = require("util").array({ iq, wq, op.ins[3] })
  elseif op.op == "matmul_bwd" and q[op.ins[2] .. "|" .. op.ins[3]] then
    local qq = q[op.ins[2] .. "|" .. op.ins[3]]
    local dq = round(g, list, op.ins[1], { n = "N", C = op.attrs.OC }, pre .. op.ins[1] .. ".grad", rop)
    op.ins = require("util").array({ dq, qq[1], qq[2] })
  end
  ctx.facts.precision.rounded = q.n or 0
  return op
end

-- Plan ops whose device kernels (templates with the ACT constant) and GEMMs take bf16
-- activations: storage bf16 on sim/cuda needs every op of the plan in this set.
local DEVICE_BF16 = { embedding_fwd = true, embedding_bwd = true, layernorm_fwd = true, layernorm_bwd = true,
  add_fwd = true, accumulate = true, attention_fwd = true, attention_bwd = true, rope_fwd = true, rope_bwd = true,
  gelu_fwd = true, gelu_bwd = true, crossentropy = true, crossentropy_fused = true, matmul_fwd = true,
  flash_attention_fwd = true, flash_attention_bwd = true, rmsnorm_fwd = true, rmsnorm_bwd = true, qknorm_fwd = true, qknorm_bwd = true, swiglu_fwd = true, swiglu_bwd = true,
  matmul_bwd = true, zero = true }

-- storage bf16: every activation buffer but the statistics becomes bf16 (before lifetimes, so
-- the memory plan lays out half the bytes).
function M.schedule(ctx, g, sched)
  local p = ctx.facts.precision
  if storage(ctx) ~= "bf16" then return end
  local stat = {}
  local function scan(o)
    if ctx.target.kind ~= "cpu" and not DEVICE_BF16[o.op] then
      ctx.refuse("storage bf16 on --target " .. tostring(ctx.target.name) .. ": plan op " .. o.op .. " has no bf16 device kernel yet",
        "use --set v2102.storage=fp32 (GEMM operands rounded to bf16) or --target cpu")
    end
    for _, i in ipairs(STATS[o.op] or {}) do if o.outs[i] and o.outs[i] ~= "" then stat[o.outs[i]] = true end end
  end
  for _, o in ipairs(sched.fwd) do scan(o) end
  for _, o in ipairs(sched.bwd) do scan(o) end
  scan(sched.loss)
  local n, bytes32, bytes16 = 0, 0, 0
  for _, bf in ipairs(g.bufs) do
    if bf.kind == "act" and not stat[bf.name] then
      bytes32 = bytes32 + bf.bytes
      bf.dtype, bf.bytes = "bf16", bf.numel * 2
      bytes16 = bytes16 + bf.bytes
      n = n + 1
    end
  end
  p.bf16_buffers = n
  ctx.contribute(string.format("bf16 storage: %d activation and activation-gradient buffers stored in bf16 (%.2f MiB instead of %.2f MiB before reuse); norm statistics, log-sum-exp and losses stay fp32",
    n, bytes16 / 1048576, bytes32 / 1048576))
end

function M.sections(ctx, plan)
  local p = ctx.facts.precision
  if p.fp16 then
    ctx.decide("precision", "fp16 GEMM operands", "v2102 dtype fp16: every GEMM (LM head included) reads its input, weight and output gradient rounded to IEEE fp16 (round to nearest even, overflow to inf, fp16 subnormals) and accumulates in fp32; fp32 master weights, norms, softmax and loss")
    ctx.contribute("fp16 policy: GEMM operands rounded to fp16 (RNE, inf on overflow, subnormals) with fp32 accumulation; fp32 master weights, norms, softmax and loss")
    return
  end
  if not p.bf16 then return end
  if storage(ctx) == "bf16" then
    if ctx.target.kind == "cpu" then
      ctx.decide("precision", "bf16 storage + bf16 GEMMs", "v2102 dtype bf16 on cpu: activations and their gradients stored in bf16, GEMMs as oneDNN bf16 matmuls (fp32 accumulation) on a bf16 copy of the fp32 master weights refreshed once per step; norms, softmax and loss in fp32; fp32 optimizer state")
    else
      ctx.decide("precision", "bf16 storage + bf16 GEMMs", "v2102 dtype bf16 on " .. tostring(ctx.target.name) .. ": activations and their gradients stored in bf16 (the kernels' ACT constant), GEMMs with bf16 A/B (cuBLASLt, fp32 compute) on a bf16 copy of the fp32 master weights and biases cast once per step (cast_f32_bf16), bf16 activation outputs, fp32 weight gradients accumulated in place (beta 1); norms, softmax and loss in fp32; fp32 optimizer state")
    end
    if plan.hardware and plan.hardware.peak_source == "measured" then
      plan.hardware.peak_dtype = "bf16"
      ctx.decide("hardware.peak_dtype", "bf16", "v2102 bf16 GEMMs on cpu: the trainer measures this machine's bf16 matmul peak at start and reports MFU against it")
    end
    return
  end
  if ctx.facts.fp8 then
    ctx.contribute("bf16 policy beside FP8: the LM head GEMM (outside the FP8 recipe) reads bf16-rounded (RNE) input, weight and output gradient with fp32 accumulation; fp32 master weights, norms, softmax and loss")
  else
    ctx.decide("precision", "bf16 GEMM operands", "v2102 dtype bf16: every GEMM (LM head included) reads its input, weight and output gradient rounded to bf16 (round to nearest even) and accumulates in fp32; fp32 master weights, norms, softmax and loss")
    ctx.contribute("bf16 policy: GEMM operands rounded to bf16 (RNE) with fp32 accumulation; fp32 master weights, norms, softmax and loss")
  end
end

function M.kernels(ctx, k)
  local dtype = ctx.facts.precision.dtype
  if dtype == "bf16" then k.want("cast", { "cast_f32_bf16", "cast_bf16_f32" }) end
  if dtype == "fp16" then k.want("cast", { "cast_f32_f16", "cast_f16_f32" }) end
  if dtype == "bf16" and k.seen.round_bf16 then
    ctx.decide("kernels.adamw.weights", "fp32 master only", "v2102 bf16: the plan rounds every GEMM operand to bf16 itself (round_bf16 ops), so AdamW keeps fp32 weights and writes no bf16 copy")
  end
end

return M
