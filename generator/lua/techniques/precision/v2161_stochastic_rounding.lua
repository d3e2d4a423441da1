-- v2161 stochastic rounding: bf16 parameters without an fp32 master copy. Writes the plan's
-- param_storage section (dtype bf16, rounding stochastic|nearest, seed); with it the cpu trainer
-- holds the parameter arena in bf16 (2 bytes per parameter instead of 4, and no bf16 weight copy:
-- the GEMMs read the parameters in place), and AdamW computes each update in fp32 from the bf16
-- value and fp32 states and writes the parameter back rounded stochastically (kernels/hyp/sr.h: a
-- counter hash of seed, step and element; the adamw template's PARAM=bf16 kernel runs the same
-- body). rounding "nearest" is the ablation that shows why SR is needed: updates below half a bf16
-- ulp vanish. Refused where the runtime cannot do it: sim/cuda trainers (their executors hold f32
-- parameter arenas), ZeRO (the bf16 arena is not sharded), FP8, optimizers other than AdamW,
-- dtype fp16, and states in bf16. Never: a second copy of the parameters.
local M = { id = "v2161" }

function M.derive(ctx)
  if ctx.target.kind ~= "cpu" then
    ctx.refuse("bf16 parameters without a master run in the cpu trainer only: the " .. tostring(ctx.target.kind) ..
      " executor holds f32 parameter arenas (the adamw kernel's PARAM=bf16 path exists and matches the cpu update bit for bit under sim)",
      "generate the trainer with --target cpu")
  end
  if ctx.param("states") then
    ctx.refuse("states=true (Adam m and v in bf16): the cpu trainer keeps fp32 optimizer states", "drop --set v2161.states=true")
  end
end

function M.sections(ctx, plan)
  local z = ctx.facts.zero
  if z and (z.stage or 0) >= 1 then
    ctx.refuse(string.format("bf16 parameters are one replicated bf16 arena, and ZeRO stage %d shards an f32 one", z.stage),
      "drop zero1/zero2/zero3/fsdp (plain dp works: every rank rounds with the same bits)")
  end
  if ctx.facts.fp8 then
    ctx.refuse("bf16 parameters with fp8: the FP8 GEMMs read f32 weights in this runtime", "drop fp8")
  end
  local opt = ctx.facts.optimizer
  if opt and opt ~= "adamw" then
    ctx.refuse("bf16 parameters are updated by AdamW only (the stochastically rounded update is AdamW's), not " .. opt,
      "drop the other optimizer (adamw is the default)")
  end
  local p = ctx.facts.precision
  if not (p and p.bf16) then
    ctx.refuse("bf16 parameters need v2102 dtype bf16", "drop --set v2102.dtype=fp16")
  end
  local rounding, seed = ctx.param("rounding"), ctx.param("seed")
  plan.param_storage = { dtype = "bf16", rounding = rounding, seed = seed }
  ctx.decide("param_storage", "bf16, " .. rounding .. " rounding",
    rounding == "stochastic"
      and string.format("v2161: parameters held only in bf16 (no fp32 master); AdamW updates in fp32 and rounds each weight up with probability equal to the dropped fraction (hash of seed %d, step, element)", seed)
      or "v2161 rounding nearest: parameters held only in bf16, each update rounded to nearest even (the ablation: updates below half an ulp vanish)")
  ctx.contribute(string.format("bf16 parameters without an fp32 master: 2 bytes per parameter, no bf16 weight copy; AdamW (fp32 m, v) writes each weight with %s rounding",
    rounding))
end

return M
