-- v2152: width growth happens outside the trainer, in `gen grow SRC --to OUT -o DIR [--noise R]`
-- (generator/lua/grow.lua, grow_lua.c), whose output OUT/train --init-from DIR starts from.
-- Selecting v2152 for a trainer would do nothing, so it is refused with that pointer. Never: a
-- trainer that claims to grow.
local M = { id = "v2152" }

function M.sections(ctx)
  ctx.refuse("the trainer does not grow itself; the width growth (d_model, heads, MLP) runs as a separate step",
    "generate OUT for the wider model (d_model a multiple of the old one for an exact copy, n_heads = d_model / head size), run gen grow SRC --to OUT -o DIR [--noise 0.01], then OUT/train --init-from DIR")
end

return M
