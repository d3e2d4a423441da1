-- v2129 streaming dataset: the trainer reads raw text / JSONL files (gzip'd or not) with
-- `train --stream FILES|GLOBS` instead of `gen data` shards, tokenizing in the loader thread
-- (runtime/data/stream.c): documents dealt to the data-parallel ranks round-robin (disjoint), rows of
-- T+1 tokens cut like the shard loader's windows, a block shuffle buffer of shuffle_buffer rows,
-- and the stream position (file, offset, document, tokens into it, block) in the checkpoints for a
-- bit-exact resume. This module writes train.stream_buffer, which tells the trainer to expect
-- --stream. Never: reads or tokenizes the corpus at gen time (the files are named when training).
local M = { id = "v2129" }

function M.sections(ctx, plan)
  local k = math.tointeger(ctx.param("shuffle_buffer")) or 10000
  plan.train.stream_buffer = k
  ctx.decide("train.stream_buffer", k, "v2129: rows per shuffle block (permuted, then handed out); 1 keeps the file order")
  ctx.contribute(string.format("data: train --stream FILES reads text/JSONL(.gz) directly, tokenizing in the loader thread; documents dealt round-robin to ranks; block shuffle of %d rows; stream position in checkpoints (bit-exact resume)", k))
  if k * plan.train.T > 64 * 1024 * 1024 then
    ctx.warn(string.format("the shuffle buffer holds %d rows of %d tokens (%.0f MiB per rank)", k, plan.train.T + 1, k * (2 * plan.train.T + 1) * 4 / 1048576))
  end
end

return M
