-- v2102 mixed precision. The bf16 policy: every GEMM reads its input, weight and output gradient
-- rounded to bf16 (round_bf16 ops, round to nearest even) with fp32 accumulation; fp32 master
-- weights, norms, softmax and loss. Beside FP8 (which covers the layer GEMMs) it covers the GEMM
-- FP8 leaves out: the LM head. dtype fp16 is not emulated yet: such a trainer computes in fp32,
-- which gen says on stderr and in the audit.
local M = { id = "v2102", families = { "flash_attention", "adamw", "cast" } }

function M.derive(ctx)
  local dtype = ctx.param("dtype")
  ctx.facts.precision = { dtype = dtype, bf16 = dtype == "bf16" }
  if dtype ~= "bf16" then
    ctx.decide("precision", "fp32", "v2102 dtype " .. tostring(dtype) ..
      ": only the bf16 policy is emulated on the cpu backend so far; this trainer computes in fp32")
    ctx.warn("dtype " .. tostring(dtype) .. " is not emulated yet: this trainer computes in fp32 (use bf16)")
  end
end

local quantized = setmetatable({}, { __mode = "k" }) -- per graph: "input|weight" -> {input', weight'}

local function round(g, list, src, attrs, tag)
  local dst = g.buf(tag, "act", g.by_name[src].shape)
  g.emit(list, "round_bf16", { src }, { dst }, attrs)
  return dst
end

function M.rewrite(ctx, g, list, op)
  if not ctx.facts.precision.bf16 then return op end
  local q = quantized[g] or {}
  quantized[g] = q
  local head = op.outs[1] == "logits"
  if op.op == "matmul_fwd" and (head or not ctx.facts.fp8) then
    local inp, w, a = op.ins[1], op.ins[2], op.attrs
    local iq = round(g, list, inp, { n = "N", C = a.IC }, "bf16:" .. op.outs[1] .. ".input")
    local wq = round(g, list, w, { n = a.OC, C = a.IC }, "bf16:" .. op.outs[1] .. ".weight")
    q[inp .. "|" .. w] = { iq, wq }
    q.n = (q.n or 0) + 1
    op.ins = require("util").array({ iq, wq, op.ins[3] })
  elseif op.op == "matmul_bwd" and q[op.ins[2] .. "|" .. op.ins[3]] then
    local qq = q[op.ins[2] .. "|" .. op.ins[3]]
    local dq = round(g, list, op.ins[1], { n = "N", C = op.attrs.OC }, "bf16:" .. op.ins[1] .. ".grad")
    op.ins = require("util").array({ dq, qq[1], qq[2] })
  end
  ctx.facts.precision.rounded = q.n or 0
  return op
end

function M.sections(ctx)
  local p = ctx.facts.precision
  if not p.bf16 then return end
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
