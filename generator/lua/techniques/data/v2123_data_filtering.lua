-- v2123 data filtering: turns the spec's rule thresholds into the settings of gen data's filter
-- stage (runtime/data/docs_filter.c: the Gopher/C4 rules and their report). Never: filters in the
-- trainer; the trainer generated with this spec active is unchanged (its audit says so).
local M = { id = "v2123" }

local KEYS = { "min_words", "max_words", "max_symbol_ratio", "max_digit_ratio", "max_ellipsis_lines",
  "max_dup_lines", "max_top_2gram", "max_dup_5gram", "min_stop_words", "min_mean_word", "max_mean_word" }

function M.data(ctx, pipe)
  local f = { spec = ctx.id }
  for _, k in ipairs(KEYS) do f[k] = ctx.param(k) end
  if f.min_words > f.max_words then
    ctx.refuse(string.format("min_words %d is above max_words %d", f.min_words, f.max_words),
      "give min_words <= max_words")
  end
  if f.min_mean_word > f.max_mean_word then
    ctx.refuse(string.format("min_mean_word %g is above max_mean_word %g", f.min_mean_word, f.max_mean_word),
      "give min_mean_word <= max_mean_word")
  end
  pipe.filter = f
end

function M.derive(ctx)
  ctx.contribute("data-preparation stage: `gen data --enable filter` drops documents failing the Gopher/C4 rules (per-rule counts in DIR/report.json); the trainer is unchanged")
end

return M
