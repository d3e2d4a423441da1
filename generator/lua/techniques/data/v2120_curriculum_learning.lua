-- v2120 curriculum learning: turns the spec's params into gen data's curriculum stage settings
-- (runtime/io/docs_order.c: difficulty score + pacing over the training documents). Never:
-- accepts metric=loss (not implemented) or claims the trainer follows the order (it shuffles).
local M = { id = "v2120" }

function M.data(ctx, pipe)
  local metric = ctx.param("metric")
  if metric == "loss" then
    ctx.refuse("metric=loss (ordering by a checkpoint's per-document loss) is not implemented",
      "use --set curriculum.metric=compression or length")
  end
  pipe.curriculum = { spec = ctx.id, metric = metric, pacing = ctx.param("pacing"), start = ctx.param("start"),
    warmup = ctx.param("warmup"), steps = ctx.param("steps"), seed = ctx.param("seed") }
end

function M.derive(ctx)
  ctx.contribute("data-preparation stage: `gen data --enable curriculum` writes the training documents easy to hard under a pacing function (DIR/report.json); this trainer's loader still shuffles windows")
end

return M
