-- v2181 sharded checkpoints: with ZeRO (stage >= 1) on several ranks every rank writes its own
-- shard_RRRRR.safetensors and rank 0 commits state.json (layout, sizes, xxh3 of every shard)
-- after all ranks report success (runtime/ckpt/ckpt.c). Recorded in the plan's checkpoint section;
-- `gen consolidate` merges the shards offline (runtime/ckpt/ckpt_consolidate.c).
local M = { id = "v2181" }

function M.sections(ctx, plan)
  plan.checkpoint = plan.checkpoint or {}
  plan.checkpoint.sharded = true
  if plan.train.zero_stage >= 1 then
    ctx.contribute(string.format("checkpoint.sharded: under mpirun each rank writes its ZeRO stage-%d shard (shard_RRRRR.safetensors) and rank 0 commits state.json with the shards' hashes",
      plan.train.zero_stage))
  else
    ctx.warn("without ZeRO (stage 0) every rank holds the whole state and rank 0 writes one file: sharded checkpoints need zero1/zero2/zero3")
  end
end

return M
