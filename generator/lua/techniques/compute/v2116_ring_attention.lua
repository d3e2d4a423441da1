-- v2116 Ring Attention: the K/V exchange of v2108's context parallelism goes around the cp group's
-- ring instead of v2108's default all-gather, each shift posted before the block compute it
-- overlaps (runtime/cpu/ops_ring.c op_ring_attention_fwd/bwd; coll.h hyp_coll_ring_ishift_f32).
-- The plan records it as train.cp_comm = "ring" (v2108's sections write "allgather" without it).
-- Never: a selection v2108 does not run (its own refusals apply; v2116 requires v2108), a second
-- attention kernel.
local M = { id = "v2116" }

function M.derive(ctx)
  ctx.facts.cp_comm = "ring"
  ctx.decide("cp.comm", "ring (overlapped)", ctx.id .. ": K/V blocks shifted around the cp group with non-blocking send/receive posted before each block's compute; the dK/dV accumulator follows one step behind; no rank holds more than two K/V blocks")
end

function M.sections(ctx, plan)
  local s = ctx.facts.seq_split
  if not s then ctx.refuse("ring attention without v2108's context parallelism", "enable sp (v2108)") end
  ctx.contribute(string.format("cp comm: ring over %d ranks, each K/V shift overlapped with the block compute (per layer (cp-1)|kv| forward, (2cp-1)|kv| backward per rank; v2108 alone all-gathers: (cp-1)|kv| and 2(cp-1)|kv|, holding all %d blocks)",
    s.degree, s.degree))
end

return M
