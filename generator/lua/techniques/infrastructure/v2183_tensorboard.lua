-- v2183 TensorBoard: writes the plan's tensorboard section {logdir, every}; with it the trainer
-- writes TensorBoard event files by default into logdir beside plan.json (runtime/obs/tboard.c,
-- runtime/train/train_main.c; `train --tensorboard DIR|none` overrides). Every trainer can write
-- them with --tensorboard DIR; this spec only makes it the default. Never: numerics (the section
-- is outside the checkpoint's state hash).
local M = { id = "v2183" }

function M.sections(ctx, plan)
  local logdir, every = ctx.param("logdir"), ctx.param("every")
  plan.tensorboard = { logdir = logdir, every = every }
  ctx.contribute(string.format("tensorboard: rank 0 writes event files into %s beside plan.json every %d steps (loss, val loss, lr, grad norm, tokens/s, MFU, peak RSS); train --tensorboard DIR|none overrides",
    logdir, every))
end

return M
