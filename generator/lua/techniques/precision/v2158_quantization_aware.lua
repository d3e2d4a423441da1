-- v2158 quantization-aware training: every transformer-layer GEMM reads a fake-quantized copy of
-- its weight (fake_quant op: rounded to `bits`-bit integers with one absmax scale per group of
-- group_size input columns, or per output channel, and dequantized again; runtime/cpu/quant.h),
-- and with activations also of its input (8 bits, one scale per token). The backward is the
-- straight-through estimator: the GEMM's backward reads the same quantized copies, so the
-- gradient w.r.t. the quantized weight reaches the fp32 master weight unchanged. With absmax
-- scales no value lies outside the clamp range, so the clipped variant of the estimator (zero
-- gradient outside [qmin, qmax]·s, as in Jacob et al.) is the same estimator here. The LM head
-- (tied to the embedding on GPT-2) stays unquantized. The GEMMs still run in the compute dtype.
local U = require("util")
local M = { id = "v2158", families = { "quant" } }

function M.derive(ctx)
  local q = { bits = ctx.param("bits"), group = ctx.param("group_size"), activations = ctx.param("activations"), weights = 0, inputs = 0 }
  ctx.facts.qat = q
  local p = ctx.facts.precision
  if p and p.bf16 then
    if p.want_storage == "bf16" then
      ctx.refuse("storage bf16 with QAT: the fake-quantized copies are fp32 buffers in this runtime", "use --set v2102.storage=fp32, or drop qat")
    end
    p.want_storage = "fp32"
    ctx.decide("qat.storage", "fp32", "v2158 keeps v2102's activations in fp32 storage (the fake-quantized copies are fp32 buffers); GEMM operands are still rounded to bf16")
  end
  ctx.decide("qat.estimator", "straight-through", "v2158: the backward of the rounding is the identity (Bengio et al. 2013); with absmax scales nothing is clipped, so clipping the gradient outside the range would change nothing")
  ctx.decide("qat.lm_head", "unquantized", "v2158 fake-quantizes the transformer-layer linear weights; the LM head (the tied embedding on GPT-2) stays in the compute dtype")
end

local quantized = setmetatable({}, { __mode = "k" }) -- per graph: "input|weight" -> {input', weight'}

function M.rewrite(ctx, g, list, op)
  local q = ctx.facts.qat
  if ctx.facts.fp8 or ctx.facts.int8 then
    ctx.refuse("QAT with " .. (ctx.facts.fp8 and "FP8" or "INT8") .. " GEMMs: those quantize the layer weights again (per tensor), so the GEMMs would not see the grid QAT trains for",
      "enable one of qat and " .. (ctx.facts.fp8 and "fp8" or "int8"))
  end
  local map = quantized[g] or {}
  quantized[g] = map
  if op.op == "matmul_fwd" and op.outs[1] ~= "logits" then
    local inp, w, a = op.ins[1], op.ins[2], op.attrs
    local group = (q.group == 0 or q.group > a.IC) and a.IC or q.group
    local wq = g.buf("qat:" .. op.outs[1] .. ".weight", "act", g.by_name[w].shape)
    g.emit(list, "fake_quant", { w }, { wq }, { n = a.OC, C = a.IC, bits = q.bits, group = group })
    q.weights = q.weights + 1
    local iq = inp
    if q.activations then
      iq = g.buf("qat:" .. op.outs[1] .. ".input", "act", g.by_name[inp].shape)
      g.emit(list, "fake_quant", { inp }, { iq }, { n = "N", C = a.IC, bits = 8, group = a.IC })
      q.inputs = q.inputs + 1
    end
    map[inp .. "|" .. w] = { iq, wq }
    op.ins = U.array({ iq, wq, op.ins[3] })
  elseif op.op == "matmul_bwd" and map[op.ins[2] .. "|" .. op.ins[3]] then
    local qq = map[op.ins[2] .. "|" .. op.ins[3]]
    op.ins = U.array({ op.ins[1], qq[1], qq[2] })
  end
  return op
end

function M.sections(ctx, plan)
  local q = ctx.facts.qat
  ctx.contribute(string.format("%d layer weights fake-quantized to int%d (%s)%s; straight-through backward",
    q.weights, q.bits, q.group == 0 and "one scale per output channel" or ("one scale per " .. q.group .. " input columns"),
    q.activations and string.format(", %d layer inputs to int8 per token", q.inputs) or ""))
end

function M.kernels(ctx, k)
  if k.seen.fake_quant then k.want("quant", { "fake_quant" }) end
end

function M.rendered(ctx, r)
  local n = r.count.fake_quant or 0
  if n > 0 then ctx.contribute(string.format("kernel: fused fake-quantize (absmax scale, round, clamp, dequantize) for the plan's %d fake_quant ops", n)) end
end

return M
