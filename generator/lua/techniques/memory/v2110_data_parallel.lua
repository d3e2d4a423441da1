-- v2110 data parallelism: plan.train.data_parallel lets the trainer run under mpirun (without it
-- a trainer refuses several ranks); every rank reads disjoint windows and gradients are
-- averaged over the global batch; on device targets the all-reduce runs per layer bucket on a
-- communication stream while backward continues (plan.train.comm_overlap).
local M = { id = "v2110" }

function M.sections(ctx, plan)
  local train = plan.train
  train.data_parallel = 1
  if ctx.param("overlap") == false then
    train.comm_overlap = 0
    ctx.decide("v2110.overlap", false, "the gradient all-reduce runs after backward")
  end
  ctx.decide("v2110.bucket_mb", "not applied", string.format("bucket_mb=%s is not used: the device step cuts the gradient arena into one bucket per layer, each all-reduced once its last backward op is done (runtime/train/grad_buckets.c); the cpu backend all-reduces after backward unless v2168 overlaps the same buckets",
    tostring(ctx.param("bucket_mb"))))
  local kind = ctx.target.kind
  ctx.contribute(kind == "cpu"
    and "data parallel over MPI when started with mpirun: each rank reads disjoint windows; gradients averaged over the global batch"
    or "data parallel when started with mpirun, over the device collectives (" .. (kind == "sim" and "MPI on sim" or "NCCL, its id broadcast over MPI") ..
      "): each rank reads disjoint windows; gradients averaged over the global batch, all-reduced per layer bucket on a communication stream while backward runs (stages 0/1)")
end

return M
