-- v2120 curriculum learning: turns the spec's params into gen data's curriculum stage settings
-- (runtime/data/docs_order.c: difficulty score + pacing over the training documents; meta.json's
-- train_order makes the loader read the first epoch in that order). Never: accepts metric=loss
-- (not implemented).
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
  ctx.contribute("data-preparation stage: `gen data --enable curriculum` writes the training documents easy to hard under a pacing function (DIR/report.json); the loader reads the first epoch of such data in that order, later epochs shuffled")
end

return M
