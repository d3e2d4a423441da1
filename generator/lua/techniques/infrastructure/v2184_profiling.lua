-- v2184 profiling: writes the plan's profile section {start_step, num_steps, trace}; with it the
-- trainer writes a Chrome/Perfetto trace (trace.json beside plan.json) of steps start_step ..
-- start_step + num_steps - 1 and prints the per-op table after them (runtime/train/profile.c; the
-- op and phase hooks of runtime/core/prof.h, device events in runtime/device/prof_dev.c).
-- Every trainer profiles with `train --profile FILE [--profile-steps A:B]`; this spec makes it
-- the default and sets the window (`--profile none` turns it off). Never: numerics (the section
-- is outside the checkpoint's state hash; outside the window a hook is one branch).
local M = { id = "v2184" }

function M.sections(ctx, plan)
  local start, n = ctx.param("start_step"), ctx.param("num_steps")
  plan.profile = { start_step = start, num_steps = n, trace = "trace.json" }
  ctx.contribute(string.format("profile: steps %d..%d timed per plan op (%d forward, %d backward) and per phase (data, communication, optimizer, checkpoint) into trace.json beside plan.json, with a per-op table (calls, ms, %% of step, GFLOP/s of the GEMMs and attention); %s; train --profile FILE|none, --profile-steps A:B override",
    math.max(start, 1), math.max(start, 1) + n - 1, #plan.forward, #plan.backward,
    plan.backend == "cpu" and "host timers" or "device events on the compute stream"))
end

return M
