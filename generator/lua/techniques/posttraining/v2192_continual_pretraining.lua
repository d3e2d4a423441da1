-- v2192 continual pre-training: the three parts of a continued run, each through an existing
-- mechanism. Data (`gen data NEW... --enable mixing,continual --set continual.replay_data=OLD`):
-- the `data` hook gives the old corpus the fixed mixing share replay_fraction (the v2121 stage's
-- last_share) and `data_inputs` adds it as the last input. Trainer (`gen TREE --enable continual`):
-- `sections` sets the re-warmup (train.warmup_steps = rewarm_steps, decided and recorded); the
-- weights come from `train --init-from CKPT` (runtime/train/train_main.c), which starts the
-- optimizer state and the LR schedule fresh at step 0, so the run re-warms from the new schedule.
-- Never: loads optimizer state (a continued run's optimizer is fresh), or reads data itself.
local M = { id = "v2192" }

function M.data(ctx, pipe)
  local src = ctx.param("replay_data")
  if src == "" then
    ctx.refuse("continual.replay_data is empty", "give the old corpus to replay: --set continual.replay_data=OLD.txt")
  end
  if hyp.stat(src) ~= "file" then
    ctx.refuse(string.format("replay_data '%s' is not a readable file", src), "give the old corpus as a text or .jsonl file")
  end
  if not pipe.mix then ctx.refuse("needs the mixing stage", "enable mixing too: --enable mixing,continual") end
  if pipe.mix.last_share then
    ctx.refuse("another technique already takes the last mixing share", "enable augmentation or continual, not both")
  end
  pipe.mix.last_share = ctx.param("replay_fraction")
  pipe.replay = src
end

-- The old corpus as the last input (read like every input; nothing to clean up).
function M.data_inputs(ctx, pipe)
  ctx.contribute(string.format("replay: %s at a fixed share %.3g of the documents", pipe.replay, ctx.param("replay_fraction")))
  return { { path = pipe.replay, name = pipe.replay .. " (replay)" } }
end

function M.sections(ctx, plan)
  local w = ctx.param("rewarm_steps")
  local before = plan.train.warmup_steps
  plan.train.warmup_steps = w
  ctx.decide("train.warmup_steps", w, string.format("v2192 re-warmup: a run continued with --init-from starts its schedule and optimizer fresh at step 0 and warms up over %d steps (was %s)",
    w, tostring(before)))
  ctx.contribute(string.format("re-warmup over %d steps from the new schedule's start; start from a checkpoint with `train --init-from CKPT` (weights only, optimizer fresh); replay data: `gen data NEW --enable mixing,continual --set continual.replay_data=OLD`", w))
end

return M
