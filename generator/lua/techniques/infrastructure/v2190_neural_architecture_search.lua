-- v2190: architecture search generates and trains many models, in `gen sweep` (space parameters
-- of kind model: and enable:, generator/lua/sweep.lua). Selecting v2190 for one trainer would do
-- nothing, so it is refused with that pointer. Never: a trainer that claims to search.
local M = { id = "v2190" }

function M.sections(ctx)
  ctx.refuse("architecture search generates many trainers, not one", "write a SWEEP.yaml whose space has model: fields or enable: choices and run gen sweep SWEEP.yaml -o DIR")
end

return M
