-- v2186 throughput metrics: sets the trainer's tokens/s window (plan.throughput: window steps,
-- skip_steps warm-up steps left out). Every trainer measures a step's data wait and
-- communication wait (runtime/train/backend.c) and prints the windowed tokens/s and its
-- p20/p50/p80 next to the mean (runtime/train/train_main.c); without this section the window is
-- 50 steps and only the first step is skipped. Never: numerics (outside the state hash).
local M = { id = "v2186" }

function M.sections(ctx, plan)
  local window, skip = ctx.param("window"), ctx.param("skip_steps")
  plan.throughput = { window = window, skip_steps = skip }
  ctx.contribute(string.format("throughput: tokens/s over the last %d steps (p20/p50/p80 and tokens / time) after %d warm-up steps, with data and communication wait per step, in the progress line and the metrics JSONL",
    window, skip))
end

return M
