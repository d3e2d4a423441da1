-- v2189: population-based training runs over many trainers, in `gen sweep` (method: pbt,
-- generator/lua/sweep.lua). Selecting v2189 for one trainer would do nothing, so it is refused with
-- that pointer. Never: a trainer that claims to exploit and explore.
local M = { id = "v2189" }

function M.sections(ctx)
  ctx.refuse("population-based training runs over a population of trainers, not inside one", "write a SWEEP.yaml with method: pbt and run gen sweep SWEEP.yaml -o DIR (gen sweep --help)")
end

return M
