-- v2175 elastic training: a checkpoint written at one world size resumes at another (the loader
-- re-shards ZeRO state for any world size and stage: runtime/train/train_ckpt.c). The plan's
-- checkpoint.elastic allows it; a trainer without it refuses to resume a checkpoint saved by a
-- different number of ranks (runtime/train/train_main.c). min_ranks and keep_global_batch
-- (re-deriving accumulation steps) are not implemented: recorded as not applied.
local M = { id = "v2175" }

function M.sections(ctx, plan)
  plan.checkpoint = plan.checkpoint or {}
  plan.checkpoint.elastic = true
  ctx.contribute("checkpoint.elastic: a run resumes at another world size or ZeRO stage; the loader re-shards parameters and optimizer state (the global batch changes with the rank count); without it the trainer refuses a checkpoint saved by another number of ranks")
  if ctx.param("keep_global_batch") then
    ctx.decide("v2175.keep_global_batch", "not applied", "the runtime does not re-derive the accumulation steps when the world size changes: pass --grad-accum to keep the global batch")
  end
  ctx.decide("v2175.min_ranks", "not applied", string.format("min_ranks=%s: there is no in-run membership change; a run restarts from its checkpoint with the ranks mpirun gives it",
    tostring(ctx.param("min_ranks"))))
end

return M
