-- v2171 all-reduce algorithm: plan.train.allreduce = { algorithm, node_size } chooses how the
-- data-parallel gradient all-reduce runs. cpu/sim: the runtime's point-to-point implementations
-- (runtime/coll/coll_algo.c: ring, tree, halving_doubling, hierarchical) on the dp communicator;
-- cuda: NCCL_ALGO=Ring/Tree set before the NCCL communicator is made. auto writes nothing: MPI's
-- or NCCL's own choice, as without the spec. Refused: halving_doubling and hierarchical on cuda
-- (NCCL has neither), and ZeRO stages 2-3 (they reduce-scatter gradients; no all-reduce to choose).
local M = { id = "v2171" }

local NCCL = { ring = "Ring", tree = "Tree" }

local HOW = {
  ring = "ring: reduce-scatter then all-gather around the ranks, 2(p-1) rounds, 2(p-1)/p of the gradient bytes sent per rank",
  tree = "tree: binomial reduce to rank 0 then binomial broadcast, 2 ceil(log2 p) rounds at rank 0, the whole gradient per tree edge",
  halving_doubling = "halving_doubling: recursive-halving reduce-scatter and recursive-doubling all-gather (Rabenseifner), ranks above a power of two folded in pairwise",
  hierarchical = "hierarchical: binomial reduce inside each node, ring among the nodes' first ranks, binomial broadcast inside each node",
}

function M.derive(ctx)
  local algo = ctx.param("algorithm") or "auto"
  if algo == "auto" then return end
  local stage = ctx.facts.zero and ctx.facts.zero.stage or 0
  if stage >= 2 then
    ctx.refuse(string.format("algorithm=%s chooses the gradient all-reduce, but ZeRO stage %d reduce-scatters gradients instead", algo, stage),
      "use ZeRO stage 0 or 1 (dp, zero1), or leave v2171 out")
  end
  if ctx.target.kind == "cuda" and not NCCL[algo] then
    ctx.refuse(string.format("algorithm=%s: NCCL has no such all-reduce (NCCL_ALGO offers Ring, Tree and the switch/NVLink-SHARP ones CollnetDirect, CollnetChain, NVLS, NVLSTree)", algo),
      "pick ring or tree (or auto) for --target cuda; halving_doubling and hierarchical run on cpu and sim")
  end
end

function M.sections(ctx, plan)
  local algo = ctx.param("algorithm") or "auto"
  local node = ctx.param("node_size") or 0
  if algo == "auto" then
    ctx.decide("v2171.algorithm", "auto", ctx.target.kind == "cuda" and "NCCL's tuner picks per call (NCCL_ALGO unset)"
      or "MPI_Allreduce: the MPI library's own choice per message size")
    ctx.contribute("all-reduce algorithm: the library's own (" .. (ctx.target.kind == "cuda" and "NCCL" or "MPI_Allreduce") .. ")")
    return
  end
  plan.train.allreduce = { algorithm = algo, node_size = node }
  if node > 0 and algo ~= "hierarchical" then
    ctx.decide("v2171.node_size", "not used", string.format("node_size=%d applies to hierarchical only; %s does not group ranks by node", node, algo))
  end
  if ctx.target.kind == "cuda" then
    ctx.contribute(string.format("gradient all-reduce: NCCL_ALGO=%s set before the communicator is made (%s)", NCCL[algo], HOW[algo]))
  else
    ctx.contribute("gradient all-reduce on MPI point-to-point, " .. HOW[algo] ..
      (algo == "hierarchical" and (node > 0 and string.format("; %d ranks per node", node) or "; nodes = the ranks MPI finds sharing a machine") or ""))
  end
  if not plan.train.data_parallel or plan.train.data_parallel == 0 then
    ctx.decide("v2171.data_parallel", "none", "the trainer runs one rank (no data parallelism enabled): there is no all-reduce to choose")
  end
end

return M
