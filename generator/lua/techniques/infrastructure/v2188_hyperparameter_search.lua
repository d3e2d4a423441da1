-- v2188: the search runs outside the trainer, in `gen sweep SWEEP.yaml -o DIR` (generator/lua/
-- sweep.lua), which generates and runs the trials' trainers. Selecting v2188 for one trainer would
-- do nothing, so it is refused with that pointer. Never: a trainer that claims to search.
local M = { id = "v2188" }

function M.sections(ctx)
  ctx.refuse("a search runs over many trainers, not inside one", "write a SWEEP.yaml and run gen sweep SWEEP.yaml -o DIR (gen sweep --help)")
end

return M
