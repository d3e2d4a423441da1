-- v2148 loss prediction: writes the plan's loss_prediction section {fit_every, min_delta, patience,
-- stop, law}; the trainer fits the law (lr_annealing: Tissue et al.'s L0 + A S1^-alpha - C S2 over
-- the LR schedule's areas; power: E + A t^-alpha) to its losses every fit_every steps
-- (runtime/obs/losspred.c, the Huber/L-BFGS core of `gen scaling fit`), prints and logs the
-- predicted final loss with an 80% band, and with stop = true ends the run (checkpoint first) when
-- `patience` fits in a row expect less than min_delta from the remaining steps. Never: numerics
-- (the section is outside the checkpoint's state hash).
local M = { id = "v2148" }

function M.sections(ctx, plan)
  local every, delta, patience, stop = ctx.param("fit_every"), ctx.param("min_delta"), ctx.param("patience"), ctx.param("stop")
  local law = ctx.param("law")
  plan.loss_prediction = { fit_every = every, min_delta = delta, patience = patience, stop = stop, law = law }
  ctx.contribute(string.format("loss prediction: every %d steps a fit of %s to the losses so far; the predicted final loss with an 80%% band in the log and the metrics (pred_final_loss, pred_final_lo, pred_final_hi, pred_remaining)%s",
    every, law == "power" and "L(t) = E + A·t^-alpha" or "L = L0 + A·S1^-alpha - C·S2 (Tissue et al.: S1, S2 the LR schedule's forward and annealing areas)", stop and string.format("; early stop with a checkpoint after %d fits in a row predict less than %g improvement", patience, delta) or ""))
end

return M
