-- v2165 CUDA graphs: on device targets (sim and sm_XX) plan.train.cuda_graphs = 1, and the device
-- trainer captures the step's regions once and replays them (runtime/device/exec_dev_graph.c:
-- the forward, the backward up to the fused loss and after it, the gradient norm; the batch
-- upload, the loss read-back and the optimizer stay eager — docs/cuda-graphs.md). Work with
-- collectives inside (the v2110 overlap hooks, ZeRO-2's gradient schedule, ZeRO-3's passes) forms
-- no region and runs eagerly; the trainer names the regions it captures. The cpu backend launches
-- nothing: on --target cpu the spec contributes nothing, and gen says so.
local M = { id = "v2165" }

function M.sections(ctx, plan)
  if ctx.target.kind == "cpu" then
    ctx.warn("cuda graphs replay device launches; the cpu backend has none: this cpu trainer is unchanged")
    return
  end
  plan.train.cuda_graphs = 1
  ctx.decide("v2165.regions", "forward; backward to the loss; backward after it; norm",
    "captured at their second run and replayed by one graph launch each; regions end where the host reads the losses or decides (loss-scale overflow, guard); no region around collectives (overlap hooks, ZeRO-2's gradient schedule, ZeRO-3); the AdamW/Lion/... step stays eager: its kernels take the step's LR and bias corrections as arguments")
  ctx.contribute("runtime: the step's forward, backward (two regions around the loss read-back) and gradient norm captured as graphs once and replayed (sim: recorded command lists; cuda: cuStreamBeginCapture/cuGraphLaunch); regions with collectives inside run eagerly")
end

return M
