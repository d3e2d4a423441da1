-- v2185 memory profiling: writes the plan's memory_profile section {svg}; with it the trainer
-- writes memory.svg beside plan.json (runtime/obs/memprof.c): every activation buffer's
-- lifetime over forward ++ backward and its arena offset as the memory planner (v2167, or one
-- region each) placed it, the live bytes after each op, the buffers live at the peak, and what
-- it measured against the plan (the arena's high-water mark on cpu, peak RSS vs the executors'
-- bytes). The trace of `--profile` carries the live bytes as a counter track. Every trainer takes
-- `train --memory-profile FILE.svg`; this spec makes it the default (`none` turns it off).
-- Never: numerics (outside the checkpoint's state hash).
local M = { id = "v2185" }

function M.sections(ctx, plan)
  plan.memory_profile = { svg = "memory.svg" }
  ctx.contribute(string.format("memory profile: memory.svg beside plan.json — arena timeline and the buffers live at the peak (%.2f MiB live of a %.2f MiB arena, %.2f MiB without reuse), measured arena high-water and peak RSS printed against the plan; train --memory-profile FILE|none overrides",
    plan.act_floats_peak_live * 4 / 1048576, plan.act_floats * 4 / 1048576, plan.act_floats_unplanned * 4 / 1048576))
end

return M
