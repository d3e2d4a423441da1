-- v2108 context (sequence) parallelism on the cpu: the plan is ONE rank's of a cp group of
-- `degree` ranks that split every sequence of --seq tokens (contiguous chunks, or zigzag: chunks
-- r and 2cp-1-r, load-balanced for the causal mask). Its T is --seq / degree; the flash attention
-- ops become ring_attention ops (runtime/cpu/ops_ring.c: chunk-pair blocks merged through the
-- logsumexp; K/V all-gathered per layer and their gradients reduce-scattered, train.cp_comm =
-- "allgather", or with v2116 passed around the ring, "ring"); the position ops read the tokens'
-- global positions from the token array "positions"; every other op is per token. The trainer
-- reads each dp group's rows whole and keeps its chunks; the loss and the gradients are reduced
-- over dp x cp like data parallelism (each token weighs 1 / all tokens).
-- Never: a selection it cannot run correctly (anything but cpu, flash and dp; tp, ZeRO, mixed
-- precision, fp8, packing, elastic/sharded checkpoints) — refused with what is missing.
local M = { id = "v2108" }

-- the plan op -> the index (1-based) of its optional positions input (op_registry.c)
local POS_ARG = { rope_fwd = 2, rope_bwd = 2, embedding_fwd = 4, embedding_bwd = 3 }
local RING = { flash_attention_fwd = "ring_attention_fwd", flash_attention_bwd = "ring_attention_bwd" }

function M.model(ctx, m)
  local cp, layout = ctx.param("degree"), ctx.param("layout") or "zigzag"
  local function no(what, fix) ctx.refuse(what, fix or "drop sp") end
  if ctx.target.kind ~= "cpu" then no("context parallelism runs on the cpu backend only (no device ring attention, no NCCL send/recv yet)", "use --target cpu, or drop sp") end
  if cp < 2 then no("degree must be >= 2 (degree 1 is no context parallelism)", "set v2108.degree=2, or drop sp") end
  if not (ctx.facts.attention and ctx.facts.attention.kind == "flash") then
    no("context parallelism replaces the flash attention ops by the ring: enable flash", "add flash: --enable dp,flash,sp")
  end
  if not ctx.cfg.active.v2110 then no("context parallelism reduces the loss and gradients over the ranks like data parallelism: enable dp", "add dp: --enable dp,flash,sp") end
  if ctx.facts.tp then no("context parallelism with tensor parallelism (cp x tp) is not implemented", "drop tp or sp") end
  if ctx.facts.zero and (ctx.facts.zero.stage or 0) > 0 then no("context parallelism with ZeRO/FSDP is not implemented", "drop zero1/zero2/zero3/fsdp, or drop sp") end
  if ctx.facts.fp8 then no("context parallelism with FP8 GEMMs is not implemented", "drop fp8, or drop sp") end
  local prec = ctx.facts.precision
  if prec and (prec.bf16 or prec.fp16) then no("context parallelism with mixed precision (v2102) is not implemented: the ring op is fp32", "drop v2102, or drop sp") end
  if ctx.facts.doc_mask then no("context parallelism with document masks (v2126 packing) is not implemented: the ring masks causally only", "drop packing, or drop sp") end
  if m.attn_scale or ctx.cfg.active.v2117 then no("context parallelism with another attention score scale or a flex mask/modifier (v2117) is not implemented: the ring is plain causal at 1/sqrt(hd)", "drop v2117/muP, or drop sp") end
  if ctx.cfg.active.v2127 then no("context parallelism with dynamic batching (v2127) is not implemented", "drop dynamic-batching, or drop sp") end
  if ctx.cfg.active.v2175 or ctx.cfg.active.v2181 then no("context parallelism with elastic/sharded checkpoints is not implemented", "drop v2175/v2181, or drop sp") end
  local nch = layout == "zigzag" and 2 * cp or cp
  ctx.facts.seq_split = { degree = cp, layout = layout, local_T = function(T)
    if T % nch ~= 0 then
      ctx.refuse(string.format("--seq %d is not a multiple of %d (%s layout over %d ranks: %d chunks)", T, nch, layout, cp, nch),
        string.format("choose --seq divisible by %d", nch))
    end
    ctx.facts.seq_split.T = T
    return T // cp
  end }
end

function M.rewrite(ctx, g, list, op)
  local s = ctx.facts.seq_split
  if RING[op.op] then
    op.op = RING[op.op]
    s.ring = (s.ring or 0) + 1
    return op
  end
  local at = POS_ARG[op.op]
  if not at then return op end
  if op.op == "embedding_fwd" and (op.ins[3] or "") == "" then return op end -- no learned positions
  if op.op == "embedding_bwd" and (op.outs[2] or "") == "" then return op end
  if not g.by_name.positions then g.buf("positions", "tokens", { "B", "T" }, "i32") end
  op.ins[at] = "positions"
  s.pos = (s.pos or 0) + 1
  return op
end

function M.sections(ctx, plan)
  local s = ctx.facts.seq_split
  plan.train.cp = s.degree
  plan.train.cp_layout = s.layout
  plan.train.cp_comm = ctx.facts.cp_comm or "allgather"
  ctx.contribute(string.format("plan of one cp rank of %d (%s): T = %d of --seq %d; %d flash attention ops replaced by ring_attention (K/V exchange: %s), %d position ops read the global positions",
    s.degree, s.layout, s.T // s.degree, s.T, s.ring or 0, plan.train.cp_comm == "ring" and "ring, v2116" or "all-gather per layer", s.pos or 0))
end

return M
