-- perf_moe.lua — the performance model's launches of the mixture-of-experts plan ops (moe_fwd,
-- moe_bwd) as runtime/device/exec_dev_moe.c issues them, and the expert-parallel all-to-all bytes
-- (v2109, runtime/cpu/moe_ep.c). Used by perf.lua; docs/perf-model.md and docs/moe.md state it.
-- The kernels' costs are the declarations of templates/moe.cu.lua, the expert GEMMs its grouped
-- kernels (moe_gemm_rows, moe_gemm_wgrad: one launch per projection, fp32 SIMT); the router GEMMs
-- are the device layer's (fp32, or TF32 under train.tf32), each D = op(A) op(B) (+ D with beta 1).
-- Assumption (the one a plan cannot settle): every expert gets N*K/E routed rows (balance). The
-- sums over experts (FLOPs, activation bytes) are exact whatever the routing; the balance only
-- sets the grouped kernels' row tiles (and so their weight re-reads).
-- Never: a launch the executor does not issue, or a routing-dependent figure presented as exact.
local M = {}

-- The op's shape from its attributes (generator/lua/moe.lua attrs): N tokens, C, H, E, K.
function M.shape(o, N)
  local a = o.attrs or {}
  return { N = N, C = a.C, H = a.H, E = a.E, K = a.K, norm = (a.norm_topk or 0) ~= 0 and 1 or 0, R = N * a.K }
end

-- Every launch of one moe_fwd or moe_bwd op: { kernel, family, cost[, sync] }. P: perf.lua's
-- module (template_launches, norm_cost).
function M.launches(P, ctx, o, N)
  local s = M.shape(o, N)
  local C, H, E, R = s.C, s.H, s.E, s.R
  local unit = ctx.tf32 and "tc_tf32" or "fp32"
  local out = {}
  local function gemm(name, m, n, k, beta)
    local c = { [unit] = 2.0 * m * n * k, rd = 4 * (m * k + k * n) + (beta and 4 * m * n or 0), wr = 4 * m * n }
    out[#out + 1] = { kernel = name, family = "cuBLASLt", cost = P.norm_cost(c) }
  end
  local op = { op = o.op, attrs = { N = N, R = R, C = C, H = H, NE = E, TOPK = s.K, NORM = s.norm } }
  local function k(kernel, args, extra) -- extra: the scalar arguments by name (a cpu plan has no manifest to bind them)
    local o2 = op
    if extra then
      o2 = { op = op.op, attrs = {} }
      for kk, v in pairs(op.attrs) do o2.attrs[kk] = v end
      for kk, v in pairs(extra) do o2.attrs[kk] = v end
    end
    for _, l in ipairs(P.template_launches(ctx, { { kernel = kernel, file = "moe.cu", args = args } }, o2, nil, N)) do
      out[#out + 1] = l
    end
  end
  local function dispatch()
    k("moe_count", { "blk", "topi", "N" })
    k("moe_stats", { "loads", "offs", "aux", "blk", "probs", "N", "nblk", "coef" })
    k("moe_scatter", { "rows", "src", "dest", "topi", "offs", "blk", "N" })
    k("moe_gather", { "xe", "x", "rows", "R" })
  end
  local function rows(nout, kd) k("moe_gemm_rows", { "out", "act", "w", "offs", nout, kd, 1 }, { Nout = nout, Kd = kd, wt = 1 }) end
  local function wgrad(m, n) k("moe_gemm_wgrad", { "dw", "a", "b", "offs", m, n }, { M = m, Nn = n }) end
  local function experts_fwd()
    rows(2 * H, C)
    k("moe_swiglu_fwd", { "a", "h", "R" })
    rows(C, H)
  end
  local has = function(i) return o.outs and o.outs[i] and o.outs[i] ~= "" end
  if o.op == "moe_fwd" then
    gemm("gemm_moe_router", E, N, C)
    k("moe_route", { "probs", "topi", "topw", "N" })
    dispatch()
    experts_fwd()
    k("moe_combine", { "out", "ye", "topi", "topw", "dest", "N" })
  else
    dispatch()
    experts_fwd()
    k("moe_dy", { "dye", "dg", "dout", "ye", "rows", "src", "topw", "R" })
    rows(H, C)
    if has(3) then wgrad(C, H) end
    out[#out + 1] = { kernel = "memset", family = "runtime", cost = P.norm_cost({ wr = 4 * R * 2 * H }) }
    k("moe_swiglu_bwd", { "dh", "da", "h", "R" })
    if has(1) then rows(C, 2 * H) end
    if has(3) then wgrad(2 * H, C) end
    if has(1) then k("moe_scatter_add", { "dinp", "dxe", "topi", "dest", "N" }) end
    k("moe_router_bwd", { "dlog", "probs", "topi", "topw", "dg", "loads", "N", "daux", "coef" })
    if has(1) then gemm("gemm_moe_router_dgrad", C, N, E, true) end
    if has(2) then gemm("gemm_moe_router_wgrad", C, E, N, true) end
  end
  return out
end

-- The expert-parallel all-to-all of one step per rank (v2109, runtime/cpu/moe_ep.c; docs/moe.md):
-- per MoE layer and micro-batch, two count exchanges of (P-1) x E/P i32 and, per routed row whose
-- expert is on another rank, C + C floats forward and (2C+1) + (C+1) backward. Remote rows at
-- balance with the experts spread evenly: N*K*(P-1)/P. Returns nil without ep.
function M.alltoall(plan)
  local ep = plan.train and plan.train.ep or 1
  if ep < 2 then return nil end
  local N = plan.train.B * plan.train.T
  local bytes, layers = 0, 0
  for _, o in ipairs(plan.forward or {}) do
    if o.op == "moe_fwd" then
      local s = M.shape(o, N)
      local remote = s.R * (ep - 1) / ep
      bytes = bytes + 2 * (ep - 1) * (s.E / ep) * 4 + remote * 4 * (5 * s.C + 2)
      layers = layers + 1
    end
  end
  return { ep = ep, layers = layers, bytes = bytes * (plan.train.grad_accum or 1) }
end

return M
