-- v2117 flex attention: the attention ops get a mask rule (causal, sliding_window, prefix_lm;
-- document = causal within v2126's documents) and a score modifier (softcap, alibi) as op
-- attributes (mask, window, prefix, score_mod, softcap). The cpu ops read them
-- (runtime/core/attn_mod.h: ops_attn_mod.c naive, ops_flash.c flash); render.lua passes them to
-- the FA2 template and v2118's memory-efficient template as MASK/WINDOW/PREFIX/SCORE_MOD/SOFTCAP,
-- which render the rule as one expression each (templates/flash_attention.cu.lua,
-- templates/mem_efficient_attention.cu.lua). The audit gets the tiles the flash kernels
-- visit and skip at the plan's T. Never: a copy of an attention kernel, a rule on a kernel that
-- cannot apply it (the naive attention template: refused).
local U = require("util")
local M = { id = "v2117", families = { "flash_attention", "mem_efficient_attention" } }

local ATT = { attention_fwd = true, attention_bwd = true, flash_attention_fwd = true, flash_attention_bwd = true }

-- the rule at tile level (as runtime/core/attn_mod.h's hyp_attn_tile_any), for the audit's count
local function tile_any(r, qlo, qhi, klo, khi)
  if r.mask == "sliding_window" then return klo <= qhi and qlo - khi < r.window end
  if r.mask == "prefix_lm" then return klo <= qhi or klo < r.prefix end
  return klo <= qhi
end

-- (visited, grid) of one (b, head)'s BQ x BK tiles at T
function M.tiles(r, T, BQ, BK)
  local v, n = 0, 0
  for q0 = 0, T - 1, BQ do
    for k0 = 0, T - 1, BK do
      n = n + 1
      if tile_any(r, q0, math.min(T, q0 + BQ) - 1, k0, math.min(T, k0 + BK) - 1) then v = v + 1 end
    end
  end
  return v, n
end

function M.derive(ctx)
  local r = { mask = ctx.param("mask") or "causal", mod = ctx.param("score_mod") or "none", by = ctx.id }
  if r.mask == "sliding_window" then r.window = ctx.param("window") end
  if r.mask == "prefix_lm" then
    r.prefix = ctx.param("prefix") or 0
    if r.prefix < 1 then
      U.fail("v2117.prefix", "mask prefix_lm needs the length of its bidirectional prefix (v2117.prefix is " .. r.prefix .. ")",
        "add --set v2117.prefix=N with 1 <= N <= T")
    end
  end
  if r.mod == "softcap" then r.softcap = ctx.param("softcap") end
  ctx.facts.flex = r
end

function M.model(ctx, m)
  local r = ctx.facts.flex
  local att = ctx.facts.attention and ctx.facts.attention.kind or "naive"
  if ctx.target.kind ~= "cpu" and att ~= "flash" then
    ctx.refuse("the mask rule and score modifier are rendered into the flash templates only (FA2, v2118's memory-efficient kernel); the naive attention kernels of the " .. ctx.target.kind .. " target have no rule",
      "enable flash (v2113, or v2118 below sm_80) with flex, or use --target cpu")
  end
  if r.mask == "document" and not ctx.facts.doc_mask then
    U.fail("v2117.mask", "mask document is causal attention within each packed document, which needs the per-token document positions of v2126 packing",
      "add --enable v2126 (packing), or use --set v2117.mask=causal")
  end
  if r.mask == "prefix_lm" and ctx.facts.doc_mask then
    U.fail("v2117.mask", "prefix_lm does not compose with v2126's document mask (the prefix is the row's, not each document's)",
      "use mask causal or sliding_window with packing, or drop v2126")
  end
  local NH = m.n_heads
  if r.mod == "alibi" and NH and (NH & (NH - 1)) ~= 0 then
    U.fail("v2117.score_mod", string.format("alibi's slopes 2^(-8h/H) (Press et al.) need a power-of-two head count; model %s has %d query heads", tostring(m.name), NH),
      "use a model with 2^k heads, or --set v2117.score_mod=softcap|none")
  end
  if r.mask == "document" then r.mask = "causal" end -- the document part is v2126's positions input
end

function M.rewrite(ctx, g, list, op)
  if not ATT[op.op] then return op end
  local r = ctx.facts.flex
  if r.mask ~= "causal" then op.attrs.mask = r.mask end
  if r.window then op.attrs.window = r.window end
  if r.prefix then op.attrs.prefix = r.prefix end
  if r.mod ~= "none" then op.attrs.score_mod = r.mod end
  if r.softcap then op.attrs.softcap = r.softcap end
  r.ops = (r.ops or 0) + 1
  return op
end

function M.sections(ctx, plan)
  local r, T = ctx.facts.flex, plan.train.T
  if r.prefix and r.prefix > T then
    U.fail("v2117.prefix", string.format("the prefix (%d) is longer than the sequence (T = %d)", r.prefix, T), "give 1 <= v2117.prefix <= T")
  end
  local rule = r.mask == "sliding_window" and string.format("sliding_window (each query sees its last %d keys)", r.window)
    or r.mask == "prefix_lm" and string.format("prefix_lm (bidirectional over the first %d tokens, causal after)", r.prefix)
    or (ctx.param("mask") == "document" and "causal within each document (v2126's positions)" or "causal")
  local mod = r.mod == "softcap" and string.format("softcap %s (s -> %s tanh(s / %s))", U.fmt_value(r.softcap), U.fmt_value(r.softcap), U.fmt_value(r.softcap))
    or r.mod == "alibi" and string.format("alibi (slopes 2^(-8(h+1)/%d) per query head)", plan.model.NH) or "none"
  ctx.contribute(string.format("plan: mask %s, score modifier %s on %d attention ops (attributes mask/window/prefix/score_mod/softcap)", rule, mod, r.ops or 0))
  if plan.backend == "cpu" and not (ctx.facts.attention and ctx.facts.attention.kind == "flash") then
    ctx.contribute("kernel: the cpu's naive attention evaluates the rule directly (runtime/cpu/ops_attn_mod.c; enable flash for the tiled op and its tile skipping)")
    return
  end
  local cv, cn = M.tiles(r, T, plan.model.hd <= 128 and 64 or 32, plan.model.hd <= 128 and 64 or 32)
  local tv, tn = M.tiles(r, T, 64, 32)
  local ccv = M.tiles({ mask = "causal" }, T, plan.model.hd <= 128 and 64 or 32, plan.model.hd <= 128 and 64 or 32)
  local tcv = M.tiles({ mask = "causal" }, T, 64, 32)
  ctx.contribute(string.format("kernel: flash tiles per (sequence, head) at T=%d: cpu op visits %d of %d, skips %d fully masked (causal visits %d: %.1f%% fewer); FA2 template (64x32 forward tiles) visits %d of %d, skips %d (causal %d: %.1f%% fewer)",
    T, cv, cn, cn - cv, ccv, 100 * (ccv - cv) / ccv, tv, tn, tn - tv, tcv, 100 * (tcv - tv) / tcv))
  ctx.decide("attention.tiles_skipped", tostring(cn - cv) .. " (cpu) / " .. tostring(tn - tv) .. " (FA2 template)",
    string.format("v2117 mask %s at T=%d: (query tile, key tile) pairs with no visible pair, of %d / %d per (sequence, head)", r.mask, T, cn, tn))
  local fa3 = ctx.facts.attention and ctx.facts.attention.fwd_kernel == "flash3_attn_fwd" and ctx.facts.attention.block_k
  if fa3 then -- v2114's FA3 forward walks 128-query x block_k tiles
    local v3, n3 = M.tiles(r, T, 128, fa3)
    local c3 = M.tiles({ mask = "causal" }, T, 128, fa3)
    ctx.contribute(string.format("kernel: the FA3 forward (128x%d tiles) visits %d of %d, skips %d fully masked (causal %d: %.1f%% fewer)",
      fa3, v3, n3, n3 - v3, c3, 100 * (c3 - v3) / c3))
  end
end

return M
