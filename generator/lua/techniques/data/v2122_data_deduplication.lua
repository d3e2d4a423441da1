-- v2122 data deduplication: turns the spec's params into gen data's dedup stage settings
-- (runtime/data/docs_dedup.c: exact hash + MinHash LSH, removal report). Never: deduplicates in the
-- trainer; the trainer generated with this spec active is unchanged (its audit says so).
local M = { id = "v2122" }

function M.data(ctx, pipe)
  local num_perm, bands = ctx.param("num_perm"), ctx.param("bands")
  if num_perm % bands ~= 0 then
    ctx.refuse(string.format("bands %d does not divide num_perm %d", bands, num_perm),
      "choose bands so that num_perm = bands x rows, e.g. --set dedup.bands=16 with num_perm 128")
  end
  if not ctx.param("exact") and not ctx.param("near") then
    ctx.refuse("exact and near are both false: the stage would do nothing", "keep one of them, or drop dedup from --enable")
  end
  pipe.dedup = { spec = ctx.id, exact = ctx.param("exact"), near = ctx.param("near"), num_perm = num_perm,
    bands = bands, ngram = ctx.param("ngram"), threshold = ctx.param("threshold"), seed = ctx.param("seed") }
end

function M.derive(ctx)
  ctx.contribute("data-preparation stage: `gen data --enable dedup` removes exact and MinHash-LSH near duplicates (each with its cluster representative in DIR/report.json); the trainer is unchanged")
end

return M
