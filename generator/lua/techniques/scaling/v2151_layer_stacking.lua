-- v2151: growth happens outside the trainer, in `gen grow SRC --to OUT -o DIR` (generator/grow.lua,
-- grow_lua.c), whose output OUT/train --init-from DIR starts from. Selecting v2151 for a trainer
-- would do nothing, so it is refused with that pointer. Never: a trainer that claims to grow.
local M = { id = "v2151" }

function M.sections(ctx)
  ctx.refuse("the trainer does not grow itself; the depth growth runs as a separate step",
    "run gen grow SRC --to OUT -o DIR (--depth stack|identity) with OUT generated for the larger model, then OUT/train --init-from DIR")
end

return M
