-- v2106 Megatron tensor parallelism as a plan transformation: the plan is the plan of ONE rank of
-- a tensor-parallel group of `degree` ranks (every rank runs the same plan; the runtime picks the
-- rank's slices by its tp rank). Column-parallel QKV (the rank's NH/degree heads: its rows of the
-- q, k and v blocks) and MLP-in (H/degree rows); row-parallel attention-out and MLP-out
-- (IC/degree columns), each followed by an `allreduce_tp` op (sum over the tp group, in place)
-- that then adds the row-parallel GEMM's bias once; in backward the input gradients of the
-- column-parallel GEMMs (d:ln1, d:ln2: partial sums over the rank's heads / hidden units) are
-- all-reduced before the norms' backward. Norms, embeddings, the head and the loss stay
-- replicated (every tp rank reads the same batch). plan.tp records the degree and, per sharded
-- parameter, its full shape and the blocks of the split dimension each rank takes 1/degree of.
-- Never: a selection this plan cannot run correctly (ZeRO, bf16/fp16, fp8, flash, a device target, models
-- whose head counts or MLP width do not divide) — those are refused with what is missing.
local U = require("util")
local M = { id = "v2106" }

-- the checks need every module's derive (ZeRO, fp8 and flash set their facts there)
function M.model(ctx, m)
  local tp = ctx.param("degree")
  local how = "drop tp, or choose another --set v2106.degree"
  if ctx.target.kind ~= "cpu" then
    ctx.refuse("tensor parallelism runs on the cpu backend only (no sim/cuda allreduce_tp yet)", "use --target cpu, or drop tp")
  end
  if m.arch ~= "gpt2" then
    ctx.refuse("tensor parallelism shards the GPT-2 layer layout only (fused c_attn/c_fc); " .. tostring(m.arch) .. " is not sharded yet", "use a gpt2-arch model (e.g. --model tiny), or drop tp")
  end
  if ctx.facts.zero and (ctx.facts.zero.stage or 0) > 0 then
    ctx.refuse("tensor parallelism with ZeRO/FSDP: sharding the optimizer state of tp-sharded parameters is not implemented", "drop zero1/zero2/zero3/fsdp, or drop tp")
  end
  if ctx.facts.fp8 then ctx.refuse("tensor parallelism with FP8 GEMMs: the per-tensor scales would need a tp all-reduce of amax, not implemented", "drop fp8, or drop tp") end
  local prec = ctx.facts.precision
  if prec and (prec.bf16 or prec.fp16) then
    ctx.refuse("tensor parallelism with mixed precision (v2102 " .. tostring(prec.dtype) .. "): the allreduce_tp op sums fp32 activations only, and the tp ranks' rounded partial sums are not derived against np=1",
      "drop v2102 (and v2161/v2163, which need it), or drop tp")
  end
  if ctx.facts.attention and ctx.facts.attention.kind == "flash" then
    ctx.refuse("tensor parallelism with flash attention: only the naive attention op is sharded by heads", "drop flash, or drop tp")
  end
  if ctx.cfg.active.v2175 or ctx.cfg.active.v2181 then
    ctx.refuse("tensor parallelism with elastic/sharded checkpoints: checkpoints of tp-sharded parameters are not written or resumed", "drop v2175/v2181, or drop tp")
  end
  if tp < 2 then ctx.refuse("degree must be >= 2 (degree 1 is no tensor parallelism)", "set v2106.degree=2, or drop tp") end
  local NH, NKV = m.n_heads, m.n_kv_heads or m.n_heads
  if NH % tp ~= 0 then ctx.refuse(string.format("n_heads %d of %s is not divisible by degree %d", NH, m.name, tp), how) end
  if NKV % tp ~= 0 then ctx.refuse(string.format("n_kv_heads %d of %s is not divisible by degree %d", NKV, m.name, tp), how) end
  if m.ffn_hidden % tp ~= 0 then ctx.refuse(string.format("ffn_hidden %d of %s is not divisible by degree %d", m.ffn_hidden, m.name, tp), how) end
  -- the plan of one rank: its heads and hidden units (head_dim stays d_model / n_heads)
  ctx.facts.tp = { degree = tp, NH = NH, NKV = NKV, H = m.ffn_hidden, hd = m.d_model // NH }
  m.head_dim = m.d_model // NH
  m.n_heads, m.n_kv_heads, m.ffn_hidden = NH // tp, NKV // tp, m.ffn_hidden // tp
  ctx.decide("v2106.local_model", string.format("n_heads %d, ffn_hidden %d", m.n_heads, m.ffn_hidden),
    string.format("one tp rank of %d holds n_heads/%d heads and ffn_hidden/%d MLP units", tp, tp, tp))
end

-- the sharded parameters: full shape, split dim, and the blocks of that dim (each split degree-way)
function M.params(ctx, ps)
  local t = ctx.facts.tp
  local tp, hd, C = t.degree, t.hd, nil
  t.shards = U.array()
  for _, p in ipairs(ps) do
    local full, dim, blocks
    local n = p.name
    if n:match("%.attn%.c_attn%.weight$") or n:match("%.attn%.c_attn%.bias$") then
      local q, kv = t.NH * hd, t.NKV * hd
      full = U.array({ q + 2 * kv }); if #p.shape == 2 then full[2] = p.shape[2] end
      dim, blocks = 0, U.array({ { 0, q }, { q, kv }, { q + kv, kv } })
    elseif n:match("%.mlp%.c_fc%.weight$") or n:match("%.mlp%.c_fc%.bias$") then
      full = U.array({ t.H }); if #p.shape == 2 then full[2] = p.shape[2] end
      dim, blocks = 0, U.array({ { 0, t.H } })
    elseif n:match("%.attn%.c_proj%.weight$") then
      C = p.shape[1]
      full, dim, blocks = U.array({ C, t.NH * hd }), 1, U.array({ { 0, t.NH * hd } })
    elseif n:match("%.mlp%.c_proj%.weight$") then
      full, dim, blocks = U.array({ p.shape[1], t.H }), 1, U.array({ { 0, t.H } })
    end
    if full then
      local b = U.array()
      for _, x in ipairs(blocks) do b[#b + 1] = U.array({ x[1], x[2] }) end
      t.shards[#t.shards + 1] = { name = n, shape = U.array(p.shape), full_shape = full, dim = dim, blocks = b }
    end
  end
end

-- forward: allreduce_tp after the row-parallel GEMMs (their bias moves into it, added once after
-- the sum); backward: allreduce_tp of the column-parallel GEMMs' input gradients
function M.schedule(ctx, g, sched)
  local t = ctx.facts.tp
  t.fwd, t.bwd = 0, 0
  local function is_row(name) return name:match("^l%d+%.attproj$") or name:match("^l%d+%.fcproj$") end
  local function is_col_dinp(name) return name:match("^d:l%d+%.ln1$") or name:match("^d:l%d+%.ln2$") end
  local fwd = U.array()
  for _, o in ipairs(sched.fwd) do
    fwd[#fwd + 1] = o
    if o.op == "matmul_fwd" and is_row(o.outs[1]) then
      local bias = o.ins[3] or ""
      o.ins = U.array({ o.ins[1], o.ins[2], "" })
      fwd[#fwd + 1] = { op = "allreduce_tp", ins = U.array({ o.outs[1], bias }), outs = U.array({ o.outs[1] }),
        attrs = { n = "N", C = o.attrs.OC }, layer = o.layer }
      t.fwd = t.fwd + 1
    end
  end
  local bwd = U.array()
  t.recompute = 0
  for _, o in ipairs(sched.bwd) do
    bwd[#bwd + 1] = o
    -- full recompute (v2101) re-runs a layer's forward in backward ("r:" buffers): its row-parallel
    -- GEMMs need the same all-reduce as in forward, or the recomputed residual is half a sum
    if o.op == "matmul_fwd" and is_row((o.outs[1]:gsub("^r:", ""))) and o.outs[1]:match("^r:") then
      local bias = o.ins[3] or ""
      o.ins = U.array({ o.ins[1], o.ins[2], "" })
      bwd[#bwd + 1] = { op = "allreduce_tp", ins = U.array({ o.outs[1], bias }), outs = U.array({ o.outs[1] }),
        attrs = { n = "N", C = o.attrs.OC }, layer = o.layer }
      t.recompute = t.recompute + 1
    end
    if o.op == "matmul_bwd" and o.outs[1] ~= "" and is_col_dinp(o.outs[1]) then
      bwd[#bwd + 1] = { op = "allreduce_tp", ins = U.array({ o.outs[1], "" }), outs = U.array({ o.outs[1] }),
        attrs = { n = "N", C = o.attrs.IC }, layer = o.layer }
      t.bwd = t.bwd + 1
    end
  end
  if t.fwd ~= 2 * sched.L or t.bwd ~= 2 * sched.L then
    error(string.format("v2106: expected 2 forward and 2 backward all-reduces per layer, placed %d and %d for %d layers", t.fwd, t.bwd, sched.L))
  end
  sched.fwd, sched.bwd = fwd, bwd
end

function M.sections(ctx, plan)
  local t = ctx.facts.tp
  plan.train.tp = t.degree
  plan.tp = { degree = t.degree, full_model = { NH = t.NH, NKV = t.NKV, H = t.H, hd = t.hd }, params = t.shards }
  ctx.contribute(string.format("plan of one tp rank of %d: %d column-parallel and %d row-parallel GEMMs sharded (%d parameters), %d allreduce_tp ops in forward and %d in backward",
    t.degree, 2 * plan.model.L, 2 * plan.model.L, #t.shards, t.fwd, t.bwd + t.recompute))
end

return M
