-- v2177 preemption handling: marks the run preemptible in the plan (plan.preempt). Every trainer
-- stops after the step in flight on SIGTERM/SIGINT/SIGUSR1 and checkpoints (runtime/train/
-- preempt.h); with this section it also refuses to start without --ckpt-dir and measures a step
-- plus a checkpoint against grace_seconds (runtime/train/train_main.c). Never: numerics (the
-- section is outside the checkpoint's state hash, so checkpoints move between trainers with and
-- without it).
local M = { id = "v2177" }

function M.sections(ctx, plan)
  local grace = ctx.param("grace_seconds")
  plan.preempt = { require_ckpt_dir = true, grace_seconds = grace }
  ctx.contribute(string.format("preempt: the trainer refuses to start without --ckpt-dir; warns when a measured step plus a checkpoint write exceed grace_seconds = %d; reports the time from the notice to the saved checkpoint (exit status 3)",
    grace))
end

return M
