-- v2157: structured pruning of MLP channels happens outside the trainer, in `gen grow SRC --to OUT
-- -o DIR` with OUT generated for the narrower model (generator/grow.lua, grow_lua.c: the units of
-- largest ||in|| x ||out|| kept, the rest removed from the tensors); OUT/train --init-from DIR
-- then recovers. Selecting v2157 for a trainer would do nothing, so it is refused with that
-- pointer. Never: a trainer that claims to prune structurally.
local M = { id = "v2157" }

function M.sections(ctx)
  ctx.refuse("the trainer does not prune channels itself; structured pruning runs as a separate step",
    "generate OUT for the model with a smaller ffn_hidden, run gen grow SRC --to OUT -o DIR (the channels of largest weight norm are kept), then OUT/train --init-from DIR")
end

return M
