-- v2154 pruning-aware training: writes the plan's pruning section {pattern, target_sparsity,
-- schedule = "oneshot"}; the cpu trainer (runtime/train/prune.c) masks the layers' 2-D weights by
-- magnitude at the first step (v2156 turns that into a gradual schedule) and holds the masked
-- weights at zero through backward (no gradient) and every update. Never: embeddings, norms, the
-- head; device arenas (gated to cpu).
local M = { id = "v2154" }

function M.sections(ctx, plan)
  local pattern = ctx.param("pattern") == "structured_2_4" and "2:4" or "unstructured"
  local target = pattern == "2:4" and 0.5 or ctx.param("target_sparsity")
  plan.pruning = plan.pruning or {}
  plan.pruning.pattern, plan.pruning.target_sparsity = pattern, target
  plan.pruning.schedule = plan.pruning.schedule or "oneshot"
  ctx.contribute(string.format("pruning: %s masks on every 2-D weight of the layers (attention, MLP) at sparsity %g, by magnitude; masked weights get no gradient and are re-zeroed after every update",
    pattern == "2:4" and "2:4 (2 of every 4 consecutive weights)" or "unstructured", target))
end

return M
