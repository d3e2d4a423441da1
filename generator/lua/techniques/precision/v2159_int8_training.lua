-- v2159 INT8 training (SwitchBack-style): the forward GEMM of every transformer-layer linear
-- becomes int8_matmul_fwd and its input-gradient GEMM int8_matmul_dgrad: the GEMM input (or the
-- output gradient) quantized to int8 with one absmax scale per row (token) — per tensor with
-- granularity tensor —, the weight with one scale per tensor, an exact int32 product and a
-- dequantizing epilogue (runtime/cpu/quant.h). The weight-gradient GEMM (and the bias gradient)
-- stays in the matmul_bwd op, in v2102's dtype: with dtype bf16 its operands are rounded to bf16
-- (v2102 runs before this module and rounds every GEMM operand, so the int8 operands are
-- quantized from bf16 values, as on a GPU where the activations are bf16). The LM head stays out.
-- cpu: oneDNN's s8 x s8 -> s32 GEMM (AVX512-VNNI); sim and cuda: the quant template's int32
-- reference kernels (no cuBLASLt int8 path yet).
local M = { id = "v2159", families = { "quant" } }

function M.derive(ctx)
  local gran = ctx.param("granularity")
  local i8 = { granularity = gran, rowwise = gran == "row", fwd = 0, dgrad = 0 }
  ctx.facts.int8 = i8
  if ctx.facts.qat then
    ctx.refuse("INT8 GEMMs with QAT: the int8 GEMMs quantize the layer weights again (per tensor), so they would not see the grid QAT trains for",
      "enable one of int8 and qat")
  end
  local p = ctx.facts.precision
  if p and (p.bf16 or p.fp16) then
    if p.want_storage == "bf16" then
      ctx.refuse("storage bf16 with INT8: the int8 GEMMs read fp32 activation buffers in this runtime", "use --set v2102.storage=fp32, or drop int8")
    end
    p.want_storage = "fp32"
    ctx.decide("int8.storage", "fp32", "v2159 keeps v2102's activations in fp32 storage (the int8 GEMM ops read fp32 buffers); every GEMM operand is still rounded to " .. p.dtype)
  end
  if ctx.target.kind == "cpu" then
    ctx.decide("int8.gemm", "oneDNN s8s8s32", "cpu target: int8 operands, dnnl_gemm_s8s8s32 (AVX512-VNNI vpdpbusd where present), int32 accumulation, fp32 dequantizing epilogue")
  else
    ctx.decide("int8.gemm", "int32 reference kernel", ctx.target.kind .. " target: the quant template's exact int32 GEMM kernel (one thread per output); no cuBLASLt int8 GEMM yet")
    if ctx.target.kind == "cuda" then ctx.warn("the int8 GEMMs run as the exact int32 reference kernel, not cuBLASLt's int8 tensor-core GEMM: correct but slow") end
  end
  ctx.decide("int8.scales", gran == "row" and "per row (inputs, output gradients), per tensor (weights)" or "per tensor",
    "v2159 granularity " .. gran .. ": absmax / 127, symmetric [-127, 127]")
end

local quantized = setmetatable({}, { __mode = "k" }) -- per graph: "input|weight" of int8 forwards

function M.rewrite(ctx, g, list, op)
  local i8 = ctx.facts.int8
  local map = quantized[g] or {}
  quantized[g] = map
  if op.op == "matmul_fwd" and op.outs[1] ~= "logits" then
    map[op.ins[1] .. "|" .. op.ins[2]] = true
    op.op = "int8_matmul_fwd"
    op.attrs = { N = op.attrs.N, IC = op.attrs.IC, OC = op.attrs.OC, rowwise = i8.rowwise and 1 or nil }
    i8.fwd = i8.fwd + 1
  elseif op.op == "matmul_bwd" and map[op.ins[2] .. "|" .. op.ins[3]] and op.outs[1] and op.outs[1] ~= "" then
    local a = op.attrs
    g.emit(list, "int8_matmul_dgrad", { op.ins[1], op.ins[3] }, { op.outs[1] },
      { N = a.N, IC = a.IC, OC = a.OC, rowwise = i8.rowwise and 1 or nil })
    op.outs[1] = ""
    i8.dgrad = i8.dgrad + 1
  end
  return op
end

function M.sections(ctx, plan)
  local i8 = ctx.facts.int8
  ctx.contribute(string.format("%d forward and %d input-gradient GEMMs in int8 (%s scales, int32 accumulation); weight-gradient GEMMs stay in the compute dtype",
    i8.fwd, i8.dgrad, i8.granularity == "row" and "per-row input / per-tensor weight" or "per-tensor"))
end

function M.kernels(ctx, k)
  if k.seen.int8_matmul_fwd or k.seen.int8_matmul_dgrad then k.want("quant", { "int8_scale", "int8_quantize", "int8_gemm" }) end
end

function M.rendered(ctx, r)
  local n = (r.count.int8_matmul_fwd or 0) + (r.count.int8_matmul_dgrad or 0)
  if n > 0 then ctx.contribute(string.format("kernel: int8 quantization (absmax scales) and exact int32 GEMMs with a dequantizing epilogue for the plan's %d int8 GEMM ops", n)) end
end

return M
