-- v2126 sequence packing with document masking: with rows = "best-fit" (the default) the loader
-- packs whole documents into rows of T+1 tokens by best-fit decreasing (runtime/data/pack.c; a
-- document longer than T+1 cut into chunks, each its own document; at most max_docs_per_seq per
-- row; the row's tail padded with target -1), through train.pack_max_docs; with rows = "contiguous"
-- rows are T-token windows of the document stream (several documents per row, no padding, a
-- document continuing in another window). Either way the loader (runtime/data/data.c) reads the
-- shards' .docs sidecars and gives each input token its position in its document, in the plan's
-- "positions" token array. This module adds that array and hands it to the attention ops (the mask hook:
-- query t sees only keys [t - positions[t], t], its own document) and, with reset_positions, to
-- the position ops (learned wpe rows and RoPE angles restart at each document). Never: a second
-- attention kernel (the mask is an optional input of the existing ops and of their CUDA templates:
-- flash_attention, attention_naive, rope, embedding), a change to the loss.
local M = { id = "v2126" }

-- the plan op -> the index (1-based) of its optional positions input (op_registry.c)
local POS_ARG = { attention_fwd = 2, attention_bwd = 4, flash_attention_fwd = 2, flash_attention_bwd = 5,
  rope_fwd = 2, rope_bwd = 2, embedding_fwd = 4, embedding_bwd = 3 }
local POSITION_OPS = { rope_fwd = true, rope_bwd = true, embedding_fwd = true, embedding_bwd = true }

function M.derive(ctx)
  ctx.facts.doc_mask = { reset_positions = ctx.param("reset_positions") ~= false, by = ctx.id }
  local rows = ctx.param("rows") or "best-fit"
  ctx.facts.doc_mask.rows = rows
  if rows == "contiguous" then
    ctx.decide(ctx.id .. ".max_docs_per_seq", "not applied", "rows = contiguous: rows are T-token windows of the document stream (no bin packing): a row holds as many documents as fit, a document longer than the rest of a row continues in another row")
  end
end

function M.rewrite(ctx, g, list, op)
  local at = POS_ARG[op.op]
  if not at then return op end
  local dm = ctx.facts.doc_mask
  if POSITION_OPS[op.op] then
    if not dm.reset_positions then return op end
    -- a GPT-2 without learned positions has no wpe: nothing to restart
    if op.op == "embedding_fwd" and (op.ins[3] or "") == "" then return op end
    if op.op == "embedding_bwd" and (op.outs[2] or "") == "" then return op end
  end
  if not g.by_name.positions then g.buf("positions", "tokens", { "B", "T" }, "i32") end
  op.ins[at] = "positions" -- plan.lua leaves that optional input "" for this
  dm.ops = (dm.ops or 0) + 1
  dm.kinds = dm.kinds or {}
  dm.kinds[op.op] = true
  return op
end

function M.sections(ctx, plan)
  local dm = ctx.facts.doc_mask
  if dm.rows == "best-fit" then
    plan.train.pack_max_docs = ctx.param("max_docs_per_seq")
    ctx.contribute(string.format("data: best-fit-decreasing packing of whole documents into rows of T+1 tokens (at most %d per row; a document longer than T+1 cut into chunks of T+1, stride T, each masked alone with positions from 0; padded tail: target -1) in train.pack_max_docs",
      plan.train.pack_max_docs))
  else
    ctx.contribute("data: rows are contiguous T-token windows of the document stream (rows = contiguous): no padding, a document may continue in the next row")
  end
  local kinds = {}
  for k in pairs(dm.kinds or {}) do kinds[#kinds + 1] = k end
  table.sort(kinds)
  ctx.contribute(string.format("data: the loader's per-token document positions (the shards' .docs sidecars) in the plan's token array 'positions' [B,T], read by %d ops (%s)",
    dm.ops or 0, table.concat(kinds, ", ")))
  ctx.contribute("kernel: document mask hook in the attention op (query t sees keys [t - positions[t], t]; fully masked key tiles skipped by the flash op)")
  ctx.contribute(dm.reset_positions and "plan: positions restart at each document (learned position rows / RoPE angles from 'positions')"
    or "plan: positions not reset (reset_positions = false): position embeddings keep the row index")
end

return M
