-- v2178 checkpoint settings: writes every, keep and dir into the plan's checkpoint section; the
-- trainer takes them as the defaults of --ckpt-every, --keep and --ckpt-dir (dir relative to the
-- plan's directory), so a generated trainer checkpoints without flags (runtime/train/
-- train_main.c; atomic writes and pruning in runtime/ckpt/ckpt.c). Never: numerics (the keys are
-- outside the checkpoint's state hash).
local M = { id = "v2178" }

function M.sections(ctx, plan)
  local every, keep, dir = ctx.param("every"), ctx.param("keep"), ctx.param("dir")
  plan.checkpoint = plan.checkpoint or {}
  plan.checkpoint.every = every
  plan.checkpoint.keep = keep
  plan.checkpoint.dir = dir
  ctx.contribute(string.format("checkpoint: every %d steps into %s beside plan.json, the newest %d kept (defaults of train --ckpt-every, --ckpt-dir, --keep)",
    every, dir, keep))
end

return M
