-- v2121 data mixing: turns the spec's params into gen data's mixing stage settings
-- (runtime/data/docs_mix.c): one weight per input, in input order, or sizes with a temperature.
-- Never: samples in the trainer; the trainer generated with this spec active is unchanged.
local M = { id = "v2121" }

function M.data(ctx, pipe)
  local text = ctx.param("weights")
  local weights = {}
  if text ~= "" then
    for item in (text .. ","):gmatch("([^,]*),") do
      local w = tonumber(item)
      if not w or w < 0 or w ~= w or w == math.huge then
        ctx.refuse(string.format("weights '%s': '%s' is not a number >= 0", text, item),
          "give one number per input, comma-separated, e.g. --set mixing.weights=0.7,0.3")
      end
      weights[#weights + 1] = w
    end
    if #weights ~= pipe.n_inputs then
      ctx.refuse(string.format("weights '%s' has %d value%s for %d input%s", text, #weights, #weights == 1 and "" or "s",
        pipe.n_inputs, pipe.n_inputs == 1 and "" or "s"), "give one weight per input, in the order of the inputs")
    end
    local sum = 0
    for _, w in ipairs(weights) do sum = sum + w end
    if sum <= 0 then ctx.refuse("weights '" .. text .. "' sum to 0", "give at least one positive weight") end
  end
  pipe.mix = { spec = ctx.id, weights = weights, unit = ctx.param("unit"), temperature = ctx.param("temperature"), size = ctx.param("size"),
    seed = ctx.param("seed") }
end

function M.derive(ctx)
  ctx.contribute("data-preparation stage: `gen data --enable mixing A B` draws documents from the inputs in the given proportions (target and realized shares in DIR/report.json); the trainer is unchanged")
end

return M
