-- v2162 dynamic loss scaling (PyTorch GradScaler semantics): writes the plan's loss_scale section;
-- with it the cpu trainer multiplies the loss gradient by the scale S before backward, checks the
-- accumulated gradients for inf/NaN (the verdict all-reduced over ranks), and then either skips
-- the update and multiplies S by backoff (an overflow; not a v2176 guard bad step) or divides the
-- gradients by S before clipping and the optimizer, multiplying S by growth after growth_interval
-- clean steps in a row (runtime/train/backend.c). S and the clean-step counter are checkpointed.
-- On sim/cuda the device step has no scaler yet and v2102 fp16 computes in fp32 there: no section is
-- written (gen warns and the audit says so), so such a trainer trains in fp32 unscaled.
local M = { id = "v2162" }

function M.derive(ctx)
  ctx.facts.loss_scale = ctx.target.kind == "cpu"
  if not ctx.facts.loss_scale then
    ctx.warn("loss scaling runs in the cpu trainer only so far: this " .. tostring(ctx.target.kind) .. " trainer computes in fp32 without it (use --target cpu)")
    ctx.decide("loss_scale", "none", "v2162 on " .. tostring(ctx.target.kind) .. ": the device step has no scaler yet (and v2102 fp16 computes in fp32 there); no loss scaling")
  end
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
  ctx.decide("loss_scale", string.format("dynamic, init %g", s.init_scale),
    string.format("v2162: loss gradient x S before backward; inf/NaN in the gradients skips the step and S x %g; gradients / S before clipping and the update; S x %g after %d clean steps; S and the counter in checkpoints and metrics",
      s.backoff, s.growth, s.growth_interval))
  ctx.contribute(string.format("loss scaling: init %g, backoff %g on inf/NaN (step skipped), growth %g every %d clean steps", s.init_scale, s.backoff, s.growth, s.growth_interval))
end

return M
