-- v2194 RLHF at small scale: sets the plan's post section to the GRPO objective (runtime/train/
-- grpo.c: group sampling from the policy with a full forward per token, the byte-set reward,
-- group-normalized advantages, one update per batch of samples, beta * k3 KL against a frozen copy
-- of the starting weights), on any target: the runtime trains it through the backend's per-token
-- losses and weighted backward (the fused loss's crossentropy_fused_ext on sim/cuda), sampling on
-- the host executor with the backend's weights. Never: a second objective (the preference objectives and
-- distillation replace the loss too: refused here), a reward or value model.
local U = require("util")
local M = { id = "v2194" }

function M.derive(ctx)
  local obj = ctx.facts.objective
  if obj then
    U.fail("v2194", "GRPO and the " .. obj.kind .. " objective (" .. obj.by .. ") both replace the loss; a run trains one objective",
      "drop one of them from --enable")
  end
  ctx.facts.objective = { kind = "grpo", by = ctx.id }
end

function M.sections(ctx, plan)
  local obj = ctx.facts.objective
  if obj and obj.by ~= ctx.id then
    U.fail("v2194", "GRPO and the " .. obj.kind .. " objective (" .. obj.by .. ") both replace the loss; a run trains one objective",
      "drop one of them from --enable")
  end
  if ctx.param("reward_chars") == "" then
    U.fail("v2194.reward_chars", "the reward set is empty (every completion would score 0)", "give --set v2194.reward_chars=abc...")
  end
  plan.post = plan.post or {}
  plan.post.objective = "grpo"
  plan.post.group_size = ctx.param("group_size")
  plan.post.max_new_tokens = ctx.param("max_new_tokens")
  plan.post.temperature = ctx.param("temperature")
  plan.post.beta = ctx.param("beta")
  plan.post.reward_chars = ctx.param("reward_chars")
  ctx.contribute(string.format("post: GRPO on the prompts of gen data --pref: groups of %d completions of %d tokens sampled at temperature %g (a full forward per token, no KV cache), reward = fraction of bytes in %q, advantages normalized per group, one update per batch (ratio 1), KL beta %g to %s",
    plan.post.group_size, plan.post.max_new_tokens, plan.post.temperature, plan.post.reward_chars, plan.post.beta,
    plan.post.beta > 0 and "a frozen copy of the starting weights" or "nothing (beta 0)"))
end

return M
