-- v2163 bf16 accumulation: the dtype of the gradient-accumulation buffer as an explicit choice.
-- Writes the plan's grad_accum section {dtype = "bf16" | "f32"}; with bf16 the cpu trainer rounds
-- the summed parameter gradients to bf16 (nearest even) after every micro-batch, so each partial
-- sum over micro-batches (v2103) holds exactly what a bf16 buffer would: small contributions are
-- lost as the micro-batches grow (tests/unit/test_bf16_accum_v2163.c measures it). The buffer is
-- still the fp32 arena holding bf16 values (no bytes saved yet), and the data-parallel reduction
-- stays fp32 (reduce_dtype bf16 is refused). Never: a change to GEMM accumulation (fp32 always).
local M = { id = "v2163" }

function M.derive(ctx)
  if ctx.target.kind ~= "cpu" then
    ctx.refuse("a bf16 gradient-accumulation buffer runs in the cpu trainer only (the device step accumulates in f32)",
      "generate the trainer with --target cpu")
  end
  if ctx.param("reduce_dtype") == "bf16" then
    ctx.refuse("reduce_dtype bf16: the data-parallel gradient reduction is fp32 in this runtime",
      "use --set v2163.reduce_dtype=fp32")
  end
end

function M.sections(ctx, plan)
  local z = ctx.facts.zero
  if z and (z.stage or 0) >= 3 then
    ctx.refuse("ZeRO stage 3 reduce-scatters each layer's gradients during backward, so there is no accumulation buffer to round",
      "use zero1/zero2 or no ZeRO")
  end
  local dt = ctx.param("grad_buffer") == "bf16" and "bf16" or "f32"
  plan.grad_accum = { dtype = dt }
  ctx.decide("grad_accum.dtype", dt, dt == "bf16"
    and "v2163: the gradient sum over micro-batches is rounded to bf16 (nearest even) after every micro-batch, as a bf16 buffer holds it; the data-parallel reduction stays fp32"
    or "v2163: fp32 gradient accumulation (exact to fp32 rounding)")
  ctx.contribute(dt == "bf16"
    and "gradient accumulation in bf16: the running sum rounded to bf16 after each micro-batch (fp32 arena, bf16 values); fp32 reduction"
    or "gradient accumulation in fp32 (the explicit choice)")
end

return M
