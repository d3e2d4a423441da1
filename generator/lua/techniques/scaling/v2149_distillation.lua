-- v2149 distillation: writes the plan's distill section {teacher, temperature, alpha, teacher_plan};
-- the trainer (runtime/train/distill.c) loads the teacher (our checkpoint with its own plan.json,
-- or a Hugging Face directory read through ckpt/hf.c with teacher_plan or the student's plan) and
-- runs it forward per micro-batch (on sim/cuda on the device when kernels fit its plan: the
-- student's for a teacher of its shape, else on the host), mixing alpha * T^2 * KL on
-- temperature-scaled logits with (1 - alpha) * cross-entropy: inside the cpu executor's fused loss
-- op, or on sim/cuda in the fused-loss kernel the plan's distill section makes the renderer emit
-- (crossentropy_fused_ext). Never: a preference objective at the same time (both replace the
-- loss: refused here).
local U = require("util")
local M = { id = "v2149" }

function M.sections(ctx, plan)
  local teacher = ctx.param("teacher")
  if teacher == nil or teacher == "" then
    U.fail("v2149.teacher", "distillation needs a teacher checkpoint", "add --set v2149.teacher=out/BIG/ckpt/step_00001000 (a checkpoint of a trainer gen wrote, or a Hugging Face model directory; same tokenizer)")
  end
  local obj = ctx.facts.objective
  if obj then
    U.fail("v2149", "distillation and the " .. obj.kind .. " objective (" .. obj.by .. ") both replace the loss; a run trains one objective",
      "drop one of them from --enable")
  end
  plan.distill = { teacher = teacher, temperature = ctx.param("temperature"), alpha = ctx.param("alpha") }
  local tplan = ctx.param("teacher_plan")
  if tplan ~= nil and tplan ~= "" then plan.distill.teacher_plan = tplan end
  local where = ctx.target.kind == "cpu" and "forward inside the fused loss"
    or "forward on the device per micro-batch (the student's kernels for a teacher of its shape, or those beside its plan; else on the host), its logits into the device's fused-loss kernel (crossentropy_fused_ext)"
  ctx.contribute(string.format("distill: teacher %s %s; loss = %g * T^2 * KL(teacher/T || student/T) + %g * CE, T = %g, row by row over the vocabulary",
    teacher, where, plan.distill.alpha, 1 - plan.distill.alpha, plan.distill.temperature))
end

return M
