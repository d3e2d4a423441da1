-- v2176 fault tolerance: writes the plan's guard section; with it the trainer judges every step's
-- loss and gradient norm before the update (runtime/train/guard.c: non-finite values, a z-score
-- spike against exponential moving statistics after a warm-up, a loss above loss_ceiling x ln V),
-- skips a bad step's update on every rank (an all-reduced verdict), and after max_bad_steps
-- consecutive bad steps rolls back to the last checkpoint with the LR times lr_factor; it never
-- saves a checkpoint while the last step was bad (runtime/train/train_guard.c). Never: numerics of
-- a good step (the section is outside the checkpoint's state hash).
local M = { id = "v2176" }

function M.sections(ctx, plan)
  local g = {
    z_threshold = ctx.param("z_threshold"),
    ema = ctx.param("ema"),
    warmup_steps = ctx.param("warmup_steps"),
    loss_ceiling = ctx.param("loss_ceiling"),
    max_bad_steps = ctx.param("max_bad_steps"),
    lr_factor = ctx.param("lr_factor"),
    max_rollbacks = ctx.param("max_rollbacks"),
  }
  plan.guard = g
  ctx.contribute(string.format("guard: a step with a non-finite loss or grad norm, a spike (z > %g over EMA %g statistics after %d steps) or a loss above %g x ln V skips its update on every rank; %d bad steps in a row roll back to the last checkpoint with LR x %g (at most %d times, then exit status 5); no checkpoint is written while the last step was bad",
    g.z_threshold, g.ema, g.warmup_steps, g.loss_ceiling, g.max_bad_steps, g.lr_factor, g.max_rollbacks))
end

return M
