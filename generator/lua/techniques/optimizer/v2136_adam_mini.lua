-- v2136 Adam-mini: the plan's optimizer becomes kind "adam_mini" (runtime/train/optim_adammini.c;
-- on sim/sm_XX the kernels of templates/adam_mini.cu.lua) with the paper's partition written into the parameter groups' rules: "qkv" for a
-- fused QKV weight (query and key rows per head, value rows per output neuron), "head" for
-- separate q_proj/k_proj, "neuron" for v_proj, attention out and the MLP matrices (one block per
-- output row), "block" for norm gains (one block per tensor), and "adam" (per-coordinate v, the
-- default decay/no_decay groups) for biases, embeddings and the output head. Hyper-parameters
-- beta1/beta2 (this spec), eps (v2132), n_head/n_kv_head/head_dim (the model). States m (f32,
-- every parameter) and v (f32, packed: one float per block, the plan's state "numel" list),
-- sharded by matrix; under ZeRO-1 (cpu only) v is unpacked and sharded by floats like m; ZeRO-2/3
-- and ZeRO on a device target are refused here, at gen time. Never: a second optimizer beside this one.
local U = require("util")
local M = { id = "v2136", families = { "adam_mini" } }

local function embedding_or_head(name)
  return name:find("wte", 1, true) or name:find("wpe", 1, true) or name:find("embed", 1, true)
    or name:find("lm_head", 1, true)
end

-- the partition rule of one parameter (nil: per-coordinate Adam)
local function rule_of(p)
  local n = p.name
  if n:find("bias", 1, true) or embedding_or_head(n) then return nil end
  if #p.shape == 1 then return "block" end
  if n:find("c_attn.weight", 1, true) or n:find("qkv", 1, true) then return "qkv" end
  if n:find("q_proj", 1, true) or n:find("k_proj", 1, true) then return "head" end
  return "neuron"
end

function M.derive(ctx)
  ctx.facts.optimizer = "adam_mini"
end

function M.sections(ctx, plan)
  local z = ctx.facts.zero
  local zstage = z and z.stage or 0
  if zstage >= 2 then
    ctx.refuse(string.format("Adam-mini's blocks (heads, rows, whole norm gains) take their mean g^2 over whole tensors, and ZeRO stage %d shards the gradients", zstage),
      "use zero1 (gradients stay whole on every rank; m and v sharded by floats), or plain dp")
  end
  if zstage == 1 and ctx.target.kind ~= "cpu" then
    ctx.refuse("Adam-mini under ZeRO stage 1 runs on the cpu backend only (the device step keeps whole tensors' states on every rank)",
      "generate the trainer with --target cpu, or drop zero1 (plain dp works on " .. tostring(ctx.target.kind) .. ")")
  end
  local o = plan.optimizer
  local m = plan.model
  local b1, b2 = ctx.param("beta1"), ctx.param("beta2")
  local from = o.kind
  o.kind = "adam_mini"
  o.hyper = { beta1 = b1, beta2 = b2, eps = o.hyper.eps, n_head = m.NH, n_kv_head = m.NKV, head_dim = m.hd }
  o.state = U.array({ { name = "m", dtype = "f32" }, { name = "v", dtype = "f32" } })
  o.shard = "matrix"
  o.rule = "adam"
  local wd = o.weight_decay
  o.extra_groups = {
    { name = "qkv", lr_mult = 1.0, weight_decay = wd, rule = "qkv" },
    { name = "head", lr_mult = 1.0, weight_decay = wd, rule = "head" },
    { name = "neuron", lr_mult = 1.0, weight_decay = wd, rule = "neuron" },
    { name = "block", lr_mult = 1.0, weight_decay = 0.0, rule = "block" },
  }
  -- v packed per tensor: one float per block (runtime/train/optim_adammini.c state_numel)
  local count, blocks, adam, vn = {}, 0, 0, U.array()
  for i, p in ipairs(plan.params) do
    local r = rule_of(p)
    local nb = p.numel
    if r then
      p.group = r
      count[r] = (count[r] or 0) + 1
      local rows = #p.shape == 2 and p.shape[1] or 1
      if r == "block" then nb = 1
      elseif r == "head" then nb = rows // m.hd
      elseif r == "qkv" then nb = m.NH + m.NKV + (rows - (m.NH + m.NKV) * m.hd)
      else nb = rows end
      blocks = blocks + nb
    else
      adam = adam + p.numel
    end
    vn[i] = nb
  end
  if zstage == 0 then
    o.state[2].numel = vn
  else -- ZeRO-1: v unpacked (the arena layout, sharded by floats like m; each element its block's v)
    ctx.decide("optimizer.adam_mini.zero", zstage, "v2136 Adam-mini under ZeRO stage 1: m and v sharded by floats, v unpacked (each element holds its block's second moment; the block mean of g^2 is taken from the whole all-reduced gradient)")
  end
  ctx.decide("optimizer.kind", "adam_mini", "v2136 enabled: replaces " .. from ..
    " (one second moment per block: heads of q/k, rows of v/out/MLP, whole norm gains; Adam on biases, embeddings, head)")
  ctx.contribute(string.format("optimizer kind adam_mini: beta1 = %s, beta2 = %s, eps = %s; partition: %d qkv, %d head, %d neuron, %d block tensors (%d second-moment blocks), %d floats on per-coordinate Adam",
    U.fmt_value(b1), U.fmt_value(b2), U.fmt_value(o.hyper.eps), count.qkv or 0, count.head or 0, count.neuron or 0,
    count.block or 0, blocks, adam))
end

function M.kernels(ctx, k)
  k.want("adam_mini", { "adam_mini_adam_step", "adam_mini_block_step" }, {})
  ctx.contribute("kernel: adam_mini_block_step (one CUDA block per Adam-mini block: mean g^2, m, p) and adam_mini_adam_step (per-coordinate tensors), one launch per tensor")
end

return M
