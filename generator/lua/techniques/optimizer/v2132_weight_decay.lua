-- v2132 decoupled weight decay (AdamW): the decay applies to 2-D weights only; `exclude` may also
-- exempt the embeddings. The optimizer's betas and eps come from here too (Adam's defaults while
-- the spec is inactive: the step is then plain Adam with weight_decay 0). They go to the plan's
-- optimizer section: the hyper-parameters and the weight decay of the "decay" group.
-- state_dtype q8: the kind becomes "adamw8bit" (runtime/optim/optim_adamw8.c; bitsandbytes'
-- AdamW8bit: uint8 codes on the dynamic maps, one fp32 absmax per 256 elements), m and v packed per
-- tensor (the plan's state "numel" lists: ceil(n/256) + ceil(n/4) floats), sharded by matrix;
-- refused beside a replacement optimizer and under ZeRO; on sim/sm_XX the kernel of templates/adamw8.cu.lua.
local U = require("util")
local M = {
  id = "v2132",
  families = { "adamw", "adamw8" },
  settings = {
    { "optimizer", "weight_decay", "weight_decay", 0.0, "optimizer.weight_decay" },
    { "optimizer.hyper", "beta1", "beta1", 0.9, "optimizer.beta1", quiet = true },
    { "optimizer.hyper", "beta2", "beta2", 0.95, "optimizer.beta2", quiet = true },
    { "optimizer.hyper", "eps", "eps", 1e-8, "optimizer.eps", quiet = true },
  },
}

function M.derive(ctx)
  if ctx.param("state_dtype") == "q8" and not ctx.facts.optimizer then ctx.facts.optimizer = "adamw8bit" end
end

local Q8_BLOCK = 256 -- elements per absmax (bitsandbytes' BLOCKSIZE_2STATE; HYP_Q8_BLOCK)

local function q8_sections(ctx, plan)
  local other = ctx.facts.optimizer
  if other ~= "adamw8bit" then
    ctx.refuse("state_dtype=q8 quantizes AdamW's m and v, and " .. tostring(other) .. " replaces AdamW",
      "drop --set v2132.state_dtype=q8, or drop the other optimizer")
  end
  local z = ctx.facts.zero
  if z and (z.stage or 0) >= 1 then
    ctx.refuse(string.format("state_dtype=q8 packs each tensor's 8-bit codes and absmax blocks whole, and ZeRO stage %d shards the states by floats", z.stage),
      "drop zero1/zero2/zero3/fsdp (plain dp replicates the 8-bit states), or drop --set v2132.state_dtype=q8")
  end
  local o = plan.optimizer
  o.kind = "adamw8bit"
  o.shard = "matrix"
  -- Tensors that keep fp32 m and v (group rule "f32"), as bitsandbytes does: those under
  -- q8_min_size elements (its min_8bit_size) and, with q8_embeddings f32, the token/position
  -- embeddings (the paper's stable embedding layer keeps 32-bit states). An embedding row of a token
  -- absent from recent batches keeps a nonzero m while its v, 1e-7 below its block's largest, falls
  -- to the zero code; its next step is then m / eps (docs/optimizer-8bit.md "Why some tensors keep fp32").
  local min_size, emb32 = ctx.param("q8_min_size"), ctx.param("q8_embeddings") == "f32"
  local f32_groups = { decay = "decay_f32", no_decay = "no_decay_f32" }
  o.extra_groups = o.extra_groups or {}
  o.extra_groups[#o.extra_groups + 1] = { name = "decay_f32", lr_mult = 1.0, weight_decay = o.weight_decay, rule = "f32" }
  o.extra_groups[#o.extra_groups + 1] = { name = "no_decay_f32", lr_mult = 1.0, weight_decay = 0.0, rule = "f32" }
  local sn, floats, n, nf, ff = U.array(), 0, 0, 0, 0
  for i, p in ipairs(plan.params) do
    local emb = p.name:find("wte", 1, true) or p.name:find("wpe", 1, true) or p.name:find("embed", 1, true)
    if not p.group and (p.numel < min_size or (emb32 and emb)) then
      p.group = f32_groups[p.decay and "decay" or "no_decay"]
      sn[i] = p.numel
      nf, ff = nf + 1, ff + p.numel
    else
      sn[i] = (p.numel + Q8_BLOCK - 1) // Q8_BLOCK + (p.numel + 3) // 4
    end
    floats, n = floats + sn[i], n + p.numel
  end
  o.state = U.array({ { name = "m", dtype = "f32", numel = sn }, { name = "v", dtype = "f32", numel = U.array({ table.unpack(sn) }) } })
  local bpp = 8 * floats / n
  ctx.decide("optimizer.kind", "adamw8bit", string.format("v2132 state_dtype=q8: AdamW's m and v as 8-bit codes with one fp32 absmax per %d elements (%.3f bytes/param of state instead of 8)", Q8_BLOCK, bpp))
  ctx.decide("optimizer.q8_f32", nf, string.format("v2132 q8: %d tensors (%d parameters) keep fp32 states: under q8_min_size %d elements%s", nf, ff, min_size,
    emb32 and ", and the embeddings (q8_embeddings f32)" or ""))
  ctx.contribute(string.format("8-bit AdamW states (bitsandbytes' block-wise dynamic quantization, blocks of %d): %.3f bytes/param of optimizer state instead of 8 (%d packed floats for %d parameters; %d tensors of %d parameters keep fp32 states)",
    Q8_BLOCK, bpp, 2 * floats, n, nf, ff))
end

function M.kernels(ctx, k)
  if ctx.param("state_dtype") ~= "q8" then return end
  k.want("adamw8", { "adamw8_block_step", "adamw8_f32_step" }, {})
  ctx.contribute("kernel: adamw8_block_step (one CUDA block per 256-element block: dequantize, AdamW, block absmax, requantize), one launch per tensor")
end

function M.params(ctx, ps, names)
  if ctx.param("exclude") ~= "norms_biases_embeddings" then return end
  for _, p in ipairs(ps) do
    if p.name == names.wte or p.name == names.wpe or p.name == "model.embed_positions.weight" then p.decay = false end
  end
end

function M.sections(ctx, plan)
  local n = 0
  for _, p in ipairs(plan.params) do if p.decay then n = n + 1 end end
  local other = ctx.facts.optimizer -- a replacement optimizer's module said so in its derive hook
  if ctx.param("state_dtype") == "q8" then q8_sections(ctx, plan) end
  if other and other ~= "adamw" and other ~= "adamw8bit" then
    ctx.contribute("decay/no-decay groups for " .. other .. " (" .. n .. " tensors decayed; " .. other ..
      " may set its own weight decay, see its line); beta1/beta2/eps apply only where " .. other .. " keeps an Adam rule")
  else
    ctx.contribute("AdamW decoupled weight decay on 2-D weights only (" .. n .. " tensors)")
  end
end

return M
