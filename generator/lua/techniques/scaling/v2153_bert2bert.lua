-- v2153: growth happens outside the trainer, in `gen grow SRC --to OUT -o DIR` (generator/grow.lua,
-- grow_lua.c), whose output OUT/train --init-from DIR starts from. Selecting v2153 for a trainer
-- would do nothing, so it is refused with that pointer. Never: a trainer that claims to grow.
local M = { id = "v2153" }

function M.sections(ctx)
  ctx.refuse("the trainer does not grow itself; the width growth runs as a separate step",
    "run gen grow SRC --to OUT -o DIR with OUT generated for the larger model, then OUT/train --init-from DIR")
end

return M
