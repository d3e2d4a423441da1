-- v2179 async checkpoints: writes checkpoint.async = max_inflight into the plan; with it rank 0 of
-- the trainer snapshots every tensor into host buffers and a writer thread writes the files
-- (runtime/ckpt/ckpt_async.c; the same writer as a blocking save, so the same bytes). A sharded ZeRO
-- save under mpirun stays blocking. Never: numerics (outside the checkpoint's state hash).
local M = { id = "v2179" }

function M.sections(ctx, plan)
  local n = ctx.param("max_inflight")
  plan.checkpoint = plan.checkpoint or {}
  plan.checkpoint.async = n
  ctx.contribute(string.format("checkpoint.async: rank 0 snapshots the checkpoint into host buffers and a writer thread writes it while training goes on; at most %d in flight (a save that finds them busy waits: metrics ckpt_s)",
    n))
  if plan.train.zero_stage >= 1 then
    ctx.warn("with ZeRO every rank writes its own shard under mpirun: those saves stay blocking (one rank: async)")
  end
end

return M
