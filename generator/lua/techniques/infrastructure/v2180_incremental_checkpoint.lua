-- v2180 incremental checkpoints: writes checkpoint.full_every into the plan; with it the trainer
-- stores every save but each full_every-th one as the XOR of its model and optimizer files with
-- the last full checkpoint, zstd-compressed (runtime/ckpt/ckpt_delta.c); loading rebuilds and
-- verifies the full files, so a resume is bit-exact. Sharded ZeRO saves under mpirun stay full.
-- Never: numerics (outside the checkpoint's state hash).
local M = { id = "v2180" }

function M.sections(ctx, plan)
  local n = ctx.param("full_every")
  plan.checkpoint = plan.checkpoint or {}
  plan.checkpoint.full_every = n
  ctx.contribute(string.format("checkpoint.full_every: every %d-th save is full, the others XOR deltas against it compressed with zstd (the ratio achieved depends on how much the weights move: measured, not assumed)",
    n))
end

return M
