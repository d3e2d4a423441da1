-- v2100 the core framework, active in every selection (the tree's baseline): the model file's
-- forward/backward as a static op plan, the Adam step, the shard loader. Its params set the
-- run's defaults when given (--set v2100.lr=..., batch_size, seed); its spec defaults give way
-- to the size-based defaults of plan.lua (recorded there). fp32_matmul=tf32 is not implemented
-- (every backend computes fp32 GEMMs in IEEE fp32): refused rather than ignored.
local M = { id = "v2100" }

local function given(ctx, p) return ctx.param_source(p) ~= "spec default" and ctx.param(p) ~= nil end

function M.derive(ctx)
  if ctx.param("fp32_matmul") == "tf32" then
    ctx.refuse("fp32_matmul=tf32 is not implemented: every backend computes fp32 GEMMs in IEEE fp32 (no TF32 rounding on cpu/sim, no TF32 compute type on cuda)",
      "drop tf32 (or --set v2100.fp32_matmul=ieee); bf16 mixed precision is --enable bf16")
  end
  if given(ctx, "batch_size") then ctx.facts.batch = ctx.param("batch_size") end
end

function M.sections(ctx, plan)
  local train = plan.train
  local set = {}
  if given(ctx, "lr") then train.lr = ctx.param("lr"); ctx.facts.lr = train.lr; set[#set + 1] = "train.lr = " .. train.lr end
  if given(ctx, "seed") then train.seed = ctx.param("seed"); set[#set + 1] = "train.seed = " .. train.seed end
  if ctx.facts.batch and ctx.facts.batch == train.B then set[#set + 1] = "plan.batch = " .. train.B end
  ctx.contribute(string.format("baseline plan: %d forward and %d backward ops over one activation arena, the loss op, %s in the optimizer step%s",
    #plan.forward, #plan.backward, ctx.facts.optimizer or "Adam(W)", #set > 0 and ("; " .. table.concat(set, ", ")) or ""))
end

return M
