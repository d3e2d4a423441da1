-- v2193 SFT: writes the plan's post section {objective = "sft" (unless a preference objective
-- sets its own), template, mask_prompt}. The trainer (runtime/train/train_main.c) then requires
-- loss-masked shards from `gen data --chat` (runtime/data/chat.c) when mask_prompt is on; the loader
-- turns masked targets into -1, which the loss ops ignore (zero gradient, out of the mean). With
-- v2126 packing active (ctx.facts.doc_mask) the conversations of a row are packed: the loader's
-- per-conversation positions (the S.docs sidecars gen data --chat writes) mask attention between
-- them and restart positions (tests/unit/test_sft_packing_v2193.c measures it).
-- Never: numerics of its own — the mask is data, the loss is the plan's cross-entropy.
local M = { id = "v2193" }

function M.sections(ctx, plan)
  local tpl, mask = ctx.param("template"), ctx.param("mask_prompt")
  plan.post = plan.post or {}
  plan.post.objective = plan.post.objective or "sft"
  plan.post.template = tpl
  plan.post.mask_prompt = mask and true or false
  ctx.contribute(string.format("post: %s (prepare data with gen data --chat FILE.jsonl --template %s); %s",
    plan.post.objective, tpl, mask and "loss on assistant tokens only (S.mask sidecars; prompt targets -1)" or "loss on every token"))
  if plan.post.objective == "sft" then
    if ctx.facts.doc_mask then
      ctx.contribute("data: conversations packed into rows; attention never crosses a conversation and positions restart at each (the S.docs sidecars of gen data --chat, via the packing positions)")
    else
      ctx.decide(ctx.id .. ".packing", "not applied", "without --enable packing, a row's window spans conversation boundaries and attends across them (the loss mask still scores assistant tokens only)")
    end
  end
end

return M
