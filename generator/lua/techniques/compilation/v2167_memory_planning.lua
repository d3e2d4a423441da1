-- v2167 static memory planning: activation buffers whose lifetimes over the step's schedule do
-- not overlap share arena offsets (greedy, largest first; plan.lua's assign_offsets).
local M = { id = "v2167" }

function M.memory(ctx, mem)
  local align = math.max(1, (ctx.param("alignment") or 64) // 4)
  mem.size = require("plan").assign_offsets(mem.items, align)
  ctx.contribute(string.format("static memory plan: activation arena %.2f MiB instead of %.2f MiB without reuse (peak of simultaneously live buffers: %.2f MiB)",
    mem.size * 4 / 1048576, mem.naive * 4 / 1048576, mem.peak * 4 / 1048576))
end

return M
