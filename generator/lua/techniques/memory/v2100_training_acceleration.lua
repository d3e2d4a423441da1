-- v2100 the core framework, active in every selection (the tree's baseline): the model file's
-- forward/backward as a static op plan, the Adam step, the shard loader. Its params set the
-- run's defaults when given (--set v2100.lr=..., batch_size, seed); its spec defaults give way
-- to the size-based defaults of plan.lua (recorded there). fp32_matmul=tf32: the device trainers'
-- fp32 layer GEMMs on TF32 tensor cores (plan train.tf32: CUBLAS_COMPUTE_32F_FAST_TF32 on cuda,
-- the sim's reference GEMM rounding the inputs to 10 mantissa bits the same way); the cpu trainer
-- has no TF32 emulation: refused there rather than ignored.
local M = { id = "v2100" }

local function given(ctx, p) return ctx.param_source(p) ~= "spec default" and ctx.param(p) ~= nil end

function M.derive(ctx)
  if ctx.param("fp32_matmul") == "tf32" and ctx.target.kind == "cpu" then
    ctx.refuse("fp32_matmul=tf32 on --target cpu: the cpu trainer computes fp32 GEMMs in IEEE fp32 (no TF32 emulation)",
      "use --target sim or sm_XX (TF32 GEMMs), or --set v2100.fp32_matmul=ieee; bf16 mixed precision is --enable bf16")
  end
  if given(ctx, "batch_size") then ctx.facts.batch = ctx.param("batch_size") end
end

function M.sections(ctx, plan)
  local train = plan.train
  local set = {}
  if ctx.param("fp32_matmul") == "tf32" then
    train.tf32 = 1
    set[#set + 1] = "train.tf32 = 1"
    ctx.decide("train.tf32", 1, "v2100 fp32_matmul=tf32: the fp32 layer GEMMs (forward, dinp, dW) on TF32 tensor cores (CUBLAS_COMPUTE_32F_FAST_TF32; sim rounds their inputs to 10 mantissa bits, nearest even); bias gradients, the optimizer and bf16 GEMMs unchanged")
  end
  if given(ctx, "lr") then train.lr = ctx.param("lr"); ctx.facts.lr = train.lr; set[#set + 1] = "train.lr = " .. train.lr end
  if given(ctx, "seed") then train.seed = ctx.param("seed"); set[#set + 1] = "train.seed = " .. train.seed end
  if ctx.facts.batch and ctx.facts.batch == train.B then set[#set + 1] = "plan.batch = " .. train.B end
  ctx.contribute(string.format("baseline plan: %d forward and %d backward ops over one activation arena, the loss op, %s in the optimizer step%s",
    #plan.forward, #plan.backward, ctx.facts.optimizer or "Adam(W)", #set > 0 and ("; " .. table.concat(set, ", ")) or ""))
end

return M
