-- v2172 gradient compression: plan.grad_compress {method, ratio, error_feedback} makes the cpu
-- trainer replace the data-parallel gradient all-reduce with a top-k all-gather of (index, value)
-- pairs, a random-k all-reduce of the entries every rank draws alike, or PowerSGD's rank-r factors
-- (two all-reduces), with an error-feedback
-- residual per rank (runtime/train/grad_compress.c).
-- Selections it cannot run are refused here: a device target (the device step all-reduces the
-- gradients on the device), ZeRO stage 2-3 / FSDP (they reduce-scatter the gradients, which is not
-- compressed; also the spec's conflicts), tensor parallelism, and local SGD (v2173, the spec's
-- conflict: no per-step exchange left to compress).
-- Never: a trainer that says it communicates less while it still all-reduces the whole gradient.
local U = require("util")
local M = { id = "v2172" }

function M.derive(ctx)
  local A = ctx.cfg.active
  if ctx.target.kind ~= "cpu" then
    ctx.refuse("the compressed exchange runs in the cpu trainer only (the " .. tostring(ctx.target.kind) .. " step all-reduces the gradients on the device)",
      "generate the trainer with --target cpu, or drop v2172")
  end
  local z = ctx.facts.zero
  if (z and (z.stage or 0) >= 2) or A.v2104 or A.v2105 then
    ctx.refuse("ZeRO stage 2-3 and FSDP reduce-scatter the gradients, and only the all-reduce of plain dp and ZeRO stage 1 is compressed",
      "use plain dp or zero1, or drop v2172")
  end
  if A.v2106 then
    ctx.refuse("compression over the dp axis of a dp x tp mesh is not implemented (tp's sharded gradients and its norm over the tp group)",
      "drop tp, or drop v2172")
  end
  if A.v2173 then
    ctx.refuse("local SGD (v2173) has no per-step gradient exchange left to compress",
      "drop v2173 or v2172 (they are alternative ways to cut data-parallel traffic)")
  end
end

function M.sections(ctx, plan)
  local method, ratio, ef, rank = ctx.param("method"), ctx.param("ratio"), ctx.param("error_feedback"), ctx.param("rank")
  plan.grad_compress = { method = method, ratio = ratio, error_feedback = ef and 1 or 0, rank = rank }
  if method ~= "powersgd" and ctx.param_source("rank") == "--set" then
    ctx.decide("v2172.rank", "not applied", "rank is PowerSGD's; method " .. method .. " sends the fraction ratio")
  end
  if method == "powersgd" then
    if ctx.param_source("ratio") == "--set" then
      ctx.decide("v2172.ratio", "not applied", "PowerSGD sends rank x (rows + cols) floats per matrix, set by rank, not ratio")
    end
    ctx.contribute(string.format("PowerSGD gradient compression rank %d: each 2-D gradient as P = M Q and Q = M^T P (two all-reduces, P orthogonalized, Q warm-started), 1-D gradients whole, %s",
      rank, ef and "the approximation error kept as an error-feedback residual" or "the approximation error dropped"))
  elseif method == "topk" then
    ctx.contribute(string.format("top-k gradient compression: each rank sends its ratio %s largest |g + residual| entries as (index, value) pairs in one all-gather (8 bytes an entry), %s",
      U.fmt_value(ratio), ef and "the unsent part kept as an error-feedback residual" or "the unsent part dropped"))
  else
    ctx.contribute(string.format("random-k gradient compression: every rank draws the same ratio %s of the entries each step and all-reduces only them (4 bytes an entry), %s",
      U.fmt_value(ratio), ef and "unscaled, the unsent part kept as an error-feedback residual" or "scaled by n/k (unbiased), the unsent part dropped"))
  end
  ctx.decide("v2172.checkpoints", "no residual", "the error-feedback residual and random-k's index generator are not saved: a resumed run restarts them (residual 0), so it is not the uninterrupted run bit for bit")
end

return M
