-- v2128 prefetch: sets train.prefetch = depth, the number of batches the data loader's producer
-- thread reads ahead into a bounded queue (runtime/data/data.c, hyp_loader_prefetch); the trainer's
-- metrics already record each step's data wait (data_wait_s). Never: numerics — the batches, their
-- order and the checkpointed loader state are those of direct reads (train.prefetch is outside the
-- checkpoint's state hash).
local M = { id = "v2128",
  settings = { { "train", "prefetch", "depth", 0, "train.prefetch", quiet = true } } }

function M.sections(ctx, plan)
  ctx.contribute(string.format("runtime: a loader thread reads %d batch%s ahead (bounded queue, pthreads); data_wait_s per step in the metrics",
    plan.train.prefetch, plan.train.prefetch == 1 and "" or "es"))
  if ctx.target.kind ~= "cpu" then
    ctx.warn("the batch is still copied to the device synchronously (no pinned buffers or copy stream)")
  end
end

return M
