-- v2168 compute/communication overlap: plan.train.comm_streams = N. On cpu the trainer cuts the
-- gradient arena into v2110's per-layer buckets and hands each to one of N communication helper
-- threads as soon as the backward pass has finished it; the helpers all-reduce while backward
-- continues and the step waits for them only before the norm and the optimizer
-- (runtime/train/comm_overlap.c). On sim/cuda it is v2110's communication stream (buckets after
-- their last backward op, an event on the compute stream, the all-reduce on the comm stream) with
-- the compute stream waiting on the comm stream's event before the norm (no host wait).
-- Both report the all-reduce's time in flight and its exposed part per step.
-- Refused: selections whose gradients are not one plain all-reduce of the whole arena after backward
-- (ZeRO-2/3, FSDP, tp, pp, cp, ep, v2172-v2174) and, on cpu, techniques that read or change the
-- gradients between backward and the reduction (v2162 loss scaling, v2154 pruning, v2176 guard);
-- v2110.overlap=false (it says the opposite); comm_streams > 1 on a device (one NCCL communicator
-- is one ordered channel).
-- Never: a trainer that says it overlaps while it blocks.
local M = { id = "v2168" }

local function off(ctx, what, fix) ctx.refuse(what, fix) end

function M.derive(ctx)
  local A = ctx.cfg.active
  local cpu = ctx.target.kind == "cpu"
  local z = ctx.facts.zero
  if (z and (z.stage or 0) >= 2) or A.v2105 then
    off(ctx, "ZeRO stage 2-3 and FSDP reduce-scatter each layer's gradients during backward on the main thread; overlapping those is not implemented",
      "use plain dp or zero1, or drop v2168")
  end
  local other = {
    { "v2106", "tensor parallelism (its per-layer all-reduces and the dp axis of the mesh)", "tp" },
    { "v2107", "pipeline parallelism (the stages' sends and their own gradient reduction)", "pp" },
    { "v2108", "context parallelism (cp ranks' gradients, untested with the helpers)", "sp" },
    { "v2109", "expert parallelism (expert gradients reduced over their replicas only)", "ep" },
    { "v2172", "gradient compression (it replaces the all-reduce)", "v2172" },
    { "v2173", "local SGD (no per-step all-reduce)", "v2173" },
    { "v2174", "async dp (its own background all-reduce)", "v2174" },
  }
  for _, o in ipairs(other) do
    if A[o[1]] then off(ctx, "the overlapped reduction is the plain data-parallel all-reduce; " .. o[2] .. " reduces otherwise", "drop " .. o[3] .. ", or drop v2168") end
  end
  if cpu then
    local pre = { { "v2162", "dynamic loss scaling checks and unscales the gradients before their reduction" },
      { "v2154", "pruning masks the gradients before their reduction" },
      { "v2176", "the guard's fault injection plants gradient faults before their reduction" } }
    for _, o in ipairs(pre) do
      if A[o[1]] then off(ctx, o[2] .. ", which the helper threads have already begun on cpu", "drop " .. o[1] .. ", or drop v2168 (on sim/cuda they compose: the check runs after the reduction)") end
    end
  end
  local dp = A.v2110
  if dp and dp.params and dp.params.overlap and dp.params.overlap.value == false then
    off(ctx, "v2110.overlap=false asks for the all-reduce after backward", "drop --set v2110.overlap=false, or drop v2168")
  end
  if not cpu and (ctx.param("comm_streams") or 1) > 1 then
    off(ctx, string.format("comm_streams=%d on %s: one NCCL communicator is one ordered channel, so more comm streams need one communicator each (ncclCommSplit), which is not implemented", ctx.param("comm_streams"), ctx.target.kind),
      "use --set v2168.comm_streams=1 on sim/cuda (several helpers run on --target cpu)")
  end
end

function M.sections(ctx, plan)
  local n = ctx.param("comm_streams") or 1
  plan.train.comm_streams = n
  plan.train.comm_overlap = 1
  if ctx.target.kind == "cpu" then
    ctx.contribute(string.format("runtime: the gradient all-reduce in per-layer buckets (v2110's), each handed to one of %d communication helper thread%s (own duplicate communicator, MPI_THREAD_MULTIPLE) right after its last backward op and reduced while backward continues; the step waits before the norm and the optimizer; per step the all-reduce time in flight, exposed and hidden (metrics grad_comm_*_s, trace tracks)",
      n, n == 1 and "" or "s"))
  else
    ctx.contribute("runtime: v2110's per-layer buckets on the communication stream (event after each bucket's last backward op, all-reduce there), and the compute stream waits on the comm stream's event before the norm instead of the host")
  end
  ctx.decide("v2168.buckets", "per layer", "v2110's buckets (one per transformer layer, embeddings and final norm their own); bucket_mb is not applied")
  ctx.decide("v2168.prefetch", "not overlapped", "ZeRO-3/FSDP next-layer all-gathers are v2104/v2105's prefetch (not this spec's streams); the next batch's host-to-device copy is v2128's pinned double buffer")
end

return M
