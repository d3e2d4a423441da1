-- v2104 ZeRO: stage 1 shards the optimizer state, 2 also the gradients, 3 also the parameters
-- (per layer group, all-gathered before use with prefetch_layers groups ahead, gradients
-- reduce-scattered right after each group's backward; stage 2 reduces its gradients per layer
-- group the same way, into the flat shard). plan.train.zero_stage/zero_prefetch.
local M = { id = "v2104" }

local WHAT = {
  "AdamW moments sharded",
  "AdamW moments sharded; only the gradient shard is kept: each layer's gradients go to a one-layer workspace and are reduced into their owners' shards as soon as the layer's backward is done",
  "parameters, gradients and AdamW moments sharded per layer; each layer's parameters are all-gathered (the next %d prefetched) before use and released after, each layer's gradients reduce-scattered as soon as its backward is done",
}

-- the stage, known to the modules that plan before the sections (v2102's storage choice)
function M.derive(ctx) ctx.facts.zero = { stage = ctx.param("stage") or 1 } end

function M.sections(ctx, plan)
  local train = plan.train
  train.zero_stage = ctx.param("stage") or 1
  if train.zero_stage == 3 then train.zero_prefetch = ctx.param("prefetch_layers") or 1 end
  ctx.facts.zero = { stage = train.zero_stage }
  ctx.contribute(string.format("ZeRO stage %d: %s across data-parallel ranks", train.zero_stage,
    string.format(WHAT[train.zero_stage], train.zero_prefetch)))
end

return M
