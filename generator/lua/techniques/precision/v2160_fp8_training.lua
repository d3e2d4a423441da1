-- v2160 FP8 training (HYBRID by default): every transformer-layer GEMM reads quantized copies of
-- its input activation and weight (E4M3) in forward and of its output gradient (E5M2) in
-- backward, each with its own per-tensor scale (delayed from an amax history, or current). The
-- LM head, norms, softmax and the loss stay out of FP8. The quantized copies are fp32 buffers
-- holding exactly representable fp8 values (the numerics of an FP8 GEMM with fp32
-- accumulation); on device targets (fp8.gemm = "fp8") the executor also casts each operand to
-- fp8 bytes, as stored and transposed, and runs the layer GEMMs on those (runtime/device/exec_dev.c).
local U = require("util")
local M = { id = "v2160", families = { "cast" } }

function M.derive(ctx)
  local fp8 = { recipe = ctx.param("recipe"), scaling = ctx.param("scaling"), history = ctx.param("amax_history"),
    margin = ctx.param("margin"), slots = U.array() }
  ctx.facts.fp8 = fp8
  local p = ctx.facts.precision
  if p and p.bf16 then
    ctx.decide("fp8.lm_head", "bf16", "v2160 leaves the LM head out of FP8 (as Transformer Engine recipes do); v2102 dtype bf16 rounds its input, weight and output gradient to bf16 (RNE), fp32 accumulation")
  else
    ctx.decide("fp8.lm_head", "fp32", "v2160: the LM head GEMM stays in fp32 (as Transformer Engine recipes leave the output projection)")
  end
  if ctx.target.kind == "cpu" then
    fp8.gemm = "fake"
    ctx.decide("fp8.emulation", "fake-quantize", "cpu target: FP8 GEMM inputs are quantized/dequantized bit-exactly like cuda_fp8.h and multiplied in fp32")
  else
    fp8.gemm = "fp8"
    ctx.decide("fp8.gemm", "cuBLASLt fp8 (TN)", ctx.target.kind .. " target: each layer GEMM (forward, dgrad, wgrad) multiplies fp8 operands " ..
      "(E4M3 x E4M3 forward, E4M3 x E5M2 backward with hybrid) with the operands' scale_inv as cuBLASLt's A/B scales and fp32 output; " ..
      "cuBLASLt takes fp8 only as TN with leading dimensions multiple of 16, so the cast kernels also write each operand transposed " ..
      "(dgrad reads W^T, wgrad x^T and dy^T); a GEMM whose IC or OC is not a multiple of 16, and wgrad when the batch's B*T is not, " ..
      "runs fake-quantized (fp32 copies of the fp8 values, fp32 GEMM) instead. Biases are added by an fp32 rank-1 GEMM (cuBLASLt's fp8 bias epilogue takes bf16), " ..
      "bias gradients come from the fake-quantized fp32 gradient")
  end
end

local quantized = setmetatable({}, { __mode = "k" }) -- per graph: "input|weight" -> {input', weight'}

local function quant(fp8, g, list, src, role, attrs, tag)
  local dst = g.buf(tag, "act", g.by_name[src].shape)
  attrs.slot = #fp8.slots
  fp8.slots[#fp8.slots + 1] = role
  g.emit(list, "fp8_quantize", { src }, { dst }, attrs)
  return dst
end

function M.rewrite(ctx, g, list, op)
  local fp8 = ctx.facts.fp8
  local q = quantized[g] or {}
  quantized[g] = q
  if op.op == "matmul_fwd" and op.outs[1] ~= "logits" then
    local inp, w, a = op.ins[1], op.ins[2], op.attrs
    local iq = quant(fp8, g, list, inp, "activation", { n = "N", C = a.IC }, "fp8:" .. op.outs[1] .. ".input")
    local wq = quant(fp8, g, list, w, "weight", { n = a.OC, C = a.IC }, "fp8:" .. op.outs[1] .. ".weight")
    q[inp .. "|" .. w] = { iq, wq }
    op.ins = U.array({ iq, wq, op.ins[3] })
  elseif op.op == "matmul_bwd" and q[op.ins[2] .. "|" .. op.ins[3]] then
    local qq = q[op.ins[2] .. "|" .. op.ins[3]]
    local dq = quant(fp8, g, list, op.ins[1], "gradient", { n = "N", C = op.attrs.OC }, "fp8:" .. op.ins[1] .. ".grad")
    op.ins = U.array({ dq, qq[1], qq[2] })
  end
  return op
end

function M.sections(ctx, plan)
  local fp8 = ctx.facts.fp8
  plan.fp8 = fp8
  ctx.contribute(string.format("%s recipe, %s scaling (amax history %d, margin %d): %d GEMM operands quantized per step (E4M3 weights/activations%s)",
    fp8.recipe, fp8.scaling, fp8.history, fp8.margin, #fp8.slots, fp8.recipe == "hybrid" and ", E5M2 gradients" or ", E4M3 gradients"))
end

function M.kernels(ctx, k)
  k.want("cast", { "cast_f32_e4m3", "cast_e4m3_f32", "cast_f32_e5m2", "cast_e5m2_f32", "amax",
    "cast_f32_e4m3_t", "cast_f32_e5m2_t", "fp8_scale_current" })
  if ctx.facts.precision and ctx.facts.precision.bf16 and k.seen.fp8_quantize then
    ctx.decide("kernels.adamw.weights", "fp32 master only", "v2160 fp8: the layer GEMMs read fp8 casts of the fp32 weights (fp8_quantize ops), so AdamW writes no bf16 copy")
  end
end

function M.rendered(ctx, r)
  local nq = r.count.fp8_quantize or 0
  ctx.contribute("kernel: fp32<->E4M3/E5M2 casts with a per-tensor scale and a fused amax reduction" ..
    (nq > 0 and string.format("; fake-quantize kernels (bit-exact with the cpu backend) for the plan's %d fp8_quantize ops", nq) or ""))
end

return M
