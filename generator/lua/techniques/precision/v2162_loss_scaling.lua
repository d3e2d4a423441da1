-- v2162 dynamic loss scaling (PyTorch GradScaler semantics): writes the plan's loss_scale section;
-- with it the trainer multiplies the loss gradient by the scale S before backward, checks the
-- gradients for inf/NaN (the verdict all-reduced over ranks), and then either skips the update and
-- multiplies S by backoff (an overflow; not a v2176 guard bad step) or divides the gradients by S
-- before clipping and the optimizer, multiplying S by growth after growth_interval clean steps in
-- a row (runtime/train/backend.c). cpu: a host loop over the fp32 gradients before the reduction;
-- sim/cuda: after the reduction, the global_norm kernels' norm (non-finite iff a gradient is)
-- gives the verdict and 1/S is folded into the optimizer's clip factor (runtime/train/backend_dev.c).
-- S and the clean-step counter are checkpointed.
local M = { id = "v2162" }

function M.derive(ctx)
  ctx.facts.loss_scale = true
  local p = ctx.facts.precision
  if p and p.dtype ~= "fp16" then
    ctx.warn("loss scaling with dtype " .. tostring(p.dtype) .. ": harmless but unnecessary (bf16 keeps fp32's exponent range)")
  end
end

function M.sections(ctx, plan)
  if not ctx.facts.loss_scale then return end
  local s = {
    init_scale = ctx.param("init_scale"),
    growth = ctx.param("growth"),
    backoff = ctx.param("backoff"),
    growth_interval = ctx.param("growth_interval"),
  }
  plan.loss_scale = s
  local where = ctx.target.kind == "cpu" and "a host check of the gradients before the reduction"
    or "the device's global gradient norm after the reduction (non-finite iff a gradient is), 1/S folded into the optimizer's clip factor"
  ctx.decide("loss_scale", string.format("dynamic, init %g", s.init_scale),
    string.format("v2162: loss gradient x S before backward; inf/NaN in the gradients (%s) skips the step and S x %g; gradients / S before clipping and the update; S x %g after %d clean steps; S and the counter in checkpoints and metrics",
      where, s.backoff, s.growth, s.growth_interval))
  ctx.contribute(string.format("loss scaling: init %g, backoff %g on inf/NaN (step skipped), growth %g every %d clean steps", s.init_scale, s.backoff, s.growth, s.growth_interval))
end

return M
