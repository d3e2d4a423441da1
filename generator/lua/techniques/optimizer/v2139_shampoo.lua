-- v2139 Shampoo: the plan's optimizer becomes kind "shampoo" (runtime/train/optim_shampoo.c, cpu
-- only) with two update rules named by the parameter groups: group "shampoo" (rule shampoo) holds
-- every 2-D weight matrix (embeddings and head included, as Distributed Shampoo preconditions
-- them), blocked into block_size x block_size blocks, each preconditioned by the inverse roots of
-- its left/right statistics (recomputed every precondition_frequency steps from
-- start_preconditioning_step on) and grafted to Adam's (or SGD's) per-block step norm; norm gains
-- and biases stay in decay/no_decay with rule adam. Adam's betas/eps come from v2132, the
-- statistics' EMA decay is the spec's beta2. States m, v (f32, every parameter), stat and root
-- (f32, packed: the blocks' L and R factors of a Shampoo matrix, none elsewhere), sharded by
-- matrix: ZeRO (which shards by floats) and device targets are refused here, at gen time.
-- Never: a second optimizer beside Shampoo's own Adam rule.
local U = require("util")
local M = { id = "v2139", families = { "shampoo" } }

function M.derive(ctx)
  ctx.facts.optimizer = "shampoo"
  if ctx.target.kind ~= "cpu" then
    ctx.refuse("Shampoo has no device kernel (its statistics GEMMs and LAPACK eigendecompositions run on the cpu backend only)",
      "generate the trainer with --target cpu, or use adamw/lion on " .. tostring(ctx.target.kind))
  end
end

-- the floats of a [R, K] matrix's factors over its blocks (runtime/train/optim_shampoo.c block_floats)
local function block_floats(R, K, bs)
  local n = 0
  for r0 = 0, R - 1, bs do
    for c0 = 0, K - 1, bs do
      local br, bc = math.min(bs, R - r0), math.min(bs, K - c0)
      n = n + br * br + bc * bc
    end
  end
  return n
end

function M.sections(ctx, plan)
  local z = ctx.facts.zero
  if z and (z.stage or 0) >= 1 then
    ctx.refuse(string.format("Shampoo preconditions whole matrices, and ZeRO stage %d shards the optimizer state by floats (block-wise ownership is not implemented)", z.stage),
      "drop zero1/zero2/zero3/fsdp (plain dp replicates Shampoo's state on every rank)")
  end
  local o = plan.optimizer
  local from = o.kind
  local bs, freq = ctx.param("block_size"), ctx.param("precondition_frequency")
  local start, root = ctx.param("start_preconditioning_step"), ctx.param("inv_root_override")
  local grafting = ctx.param("grafting")
  if root == 0 then root = 4 end
  o.kind = "shampoo"
  o.hyper = { beta1 = o.hyper.beta1, beta2 = o.hyper.beta2, eps = o.hyper.eps, stat_beta2 = ctx.param("beta2"),
    epsilon = ctx.param("epsilon"), freq = freq, start = start, block_size = bs, inv_root = root,
    graft_sgd = grafting == "sgd" and 1 or 0 }
  o.state = U.array({ { name = "m", dtype = "f32" }, { name = "v", dtype = "f32" }, { name = "stat", dtype = "f32" },
    { name = "root", dtype = "f32" } })
  o.shard = "matrix"
  o.rule = "adam"
  o.extra_groups = { { name = "shampoo", lr_mult = 1.0, weight_decay = o.weight_decay, rule = "shampoo" } }
  local n, floats, blocks = 0, 0, 0
  local sn = U.array()
  for i, p in ipairs(plan.params) do
    if #p.shape == 2 then
      p.group = "shampoo"
      n = n + 1; floats = floats + p.numel
      local R, K = p.shape[1], p.shape[2]
      sn[i] = block_floats(R, K, bs)
      blocks = blocks + math.ceil(R / bs) * math.ceil(K / bs)
    else
      sn[i] = 0
    end
  end
  if n == 0 then ctx.refuse("the model has no 2-D matrix for Shampoo", "use adamw") end
  local sf = 0
  for _, v in ipairs(sn) do sf = sf + v end
  o.state[3].numel = sn
  o.state[4].numel = U.array({ table.unpack(sn) })
  ctx.decide("optimizer.kind", "shampoo", "v2139 enabled: replaces " .. from .. "; 2-D matrices on blocked Shampoo grafted to " .. grafting .. ", gains and biases on Adam")
  ctx.contribute(string.format("optimizer kind shampoo: blocks of at most %d x %d, statistics EMA %s, inverse 1/%d roots (epsilon %s, float64 LAPACK dsyevd) every %d steps from step %d, %s grafting per block",
    bs, bs, U.fmt_value(ctx.param("beta2")), root, U.fmt_value(ctx.param("epsilon")), freq, start, grafting))
  ctx.contribute(string.format("Shampoo group: %d matrices (%d floats) in %d blocks, %d factor floats (x2: statistics and roots); gains and biases on Adam (beta1 %s, beta2 %s, eps %s)",
    n, floats, blocks, sf, U.fmt_value(o.hyper.beta1), U.fmt_value(o.hyper.beta2), U.fmt_value(o.hyper.eps)))
end

return M
