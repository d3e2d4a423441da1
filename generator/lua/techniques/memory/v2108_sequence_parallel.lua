-- v2108 context (sequence) parallelism. What exists is the cpu op: causal Ring Attention over a
-- cp group, contiguous or zigzag split, forward and backward (runtime/cpu/ops_ring.c, checked
-- against the full-sequence flash op by tests/unit/test_ring_attention_v2108.c). No trainer splits
-- the sequence yet: the plan transform (local T, the attention op replaced by the ring op), the
-- data loader's chunks, global positions for the position embedding/RoPE and the gradient/loss
-- reduction over cp are not written, so any selection with it is refused at gen time.
-- Never: a trainer that says it is context-parallel and is not.
local M = { id = "v2108" }

function M.model(ctx, _)
  ctx.refuse(string.format("context parallelism (degree %d, layout %s) has its cpu ring-attention op (runtime/cpu/ops_ring.c) but no trainer runs it yet: the plan transform, the data loader's sequence chunks and the cp reduction are not written",
      ctx.param("degree"), tostring(ctx.param("layout"))),
    "drop sp/ring-attention; see docs/parallelism.md, context parallelism")
end

return M
