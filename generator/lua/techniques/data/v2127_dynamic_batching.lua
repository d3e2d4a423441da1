-- v2127 dynamic batching: token-budget batches bucketed by length. Sets train.token_budget and
-- train.buckets; the loader (runtime/data/data.c + pack.c, hyp_loader_dynamic) then cuts the
-- documents (longer ones into chunks of T+1) into batches whose rows hold one document each,
-- padded to the row's length bucket (T, T/2, T/4, ...), min(B, token_budget / bucket) rows, and
-- the step driver (runtime/train/backend.c) runs each batch at its own shape (exec_reshape: B and
-- T at most the plan's; the activation arena is planned for B x T). The loss stays the token-
-- weighted mean over the step's loss tokens. Never: a kernel specialization per bucket (the cpu
-- executor binds shapes at run time; sim/cuda trainers run one planned shape, so this module
-- refuses those targets), a change to the loss.
local M = { id = "v2127" }

function M.derive(ctx)
  if ctx.target.kind ~= "cpu" then
    ctx.refuse("the " .. ctx.target.kind .. " target runs one planned batch shape; dynamic batches (a shape per step) run on the cpu trainer only",
      "use --target cpu, or use packing (v2126) for padding-free fixed-shape rows")
  end
end

function M.sections(ctx, plan)
  local budget, buckets = ctx.param("token_budget"), ctx.param("buckets")
  local T, B = plan.train.T, plan.train.B
  if budget < T then
    ctx.refuse(string.format("token_budget %d is below one row of the longest bucket (T = %d)", budget, T),
      string.format("use --set v2127.token_budget=%d or more", T))
  end
  plan.train.token_budget = budget
  plan.train.buckets = buckets
  local lens = {}
  for k = 0, buckets - 1 do
    local v = T // (1 << k)
    if v < 1 then break end
    local rows = math.max(1, math.min(B, budget // v))
    lens[#lens + 1] = string.format("%dx%d", rows, v)
  end
  ctx.contribute(string.format("data: length-bucketed batches under a budget of %d input tokens, one document (or chunk of T+1) per row padded to its bucket; rows x length per bucket: %s (B <= %d, the arena's)",
    budget, table.concat(lens, ", "), B))
  ctx.contribute("runtime: each batch runs at its own shape (B and T bound per micro-batch on the cpu executor); the loss is the token-weighted mean over the step's loss tokens")
end

return M
