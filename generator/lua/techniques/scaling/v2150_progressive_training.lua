-- v2150: progressive training runs as `gen progressive TREE --stages MODEL:STEPS,... -o DIR -- ARGS`
-- (generator/lua/progressive.lua): one generated trainer per stage, since a trainer's plan has
-- fixed shapes. Selecting v2150 for one trainer would do nothing, so it is refused with that
-- pointer. Never: a trainer that claims to grow.
local M = { id = "v2150" }

function M.sections(ctx)
  ctx.refuse("a trainer's plan has fixed shapes; progressive training runs one trainer per stage",
    "run gen progressive TREE --stages SMALL:STEPS,LARGE:STEPS -o DIR [gen options] -- --data DATA")
end

return M
