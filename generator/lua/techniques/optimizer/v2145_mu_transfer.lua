-- v2145 muTransfer: the rest of muP (Yang et al. 2022, Table 3 form, Adam) on top of v2144's
-- mup init, with width multiplier m = d_model / base_width: the hidden matrices and the output
-- layer go to an optimizer group "mup_hidden" with lr_mult 1/m (the decay group's weight decay);
-- embeddings, gains and biases keep lr_mult 1; attention scores are scaled by 1/d_head instead of
-- 1/sqrt(d_head) (the attention ops' attr scale: cpu ops, flash and the device templates). With v2144's
-- readout init (std/m or zero) and its 1/m LR the output logits need no extra multiplier (Table
-- 3's form of Table 8's 1/m readout). Workflow: tune lr (and warmup) at base_width, generate the wide
-- trainer with the same values (bench/bench_mup_transfer.sh measures the shift of the best LR).
-- Device optimizer kernels take one learning rate: device targets only at m = 1.
-- Never: an init (v2144's) or a second group for a parameter another module grouped.
local U = require("util")
local M = { id = "v2145", families = { "attention_naive", "flash_attention" } }

local embedding_or_head = function(name)
  return name:find("wte", 1, true) or name:find("wpe", 1, true) or name:find("embed", 1, true)
end

function M.derive(ctx)
  local f = ctx.facts.init
  if not f or f.scheme ~= "mup" then
    ctx.refuse("muTransfer needs the muP initialization", "enable init with --set v2144.scheme=mup")
  end
end

function M.model(ctx, m)
  local hd = m.d_model // m.n_heads
  m.attn_scale = 1.0 / hd
  local mult = ctx.facts.init.width_mult
  if ctx.target.kind ~= "cpu" and mult ~= 1 then
    ctx.refuse(string.format("muTransfer's per-group learning rates (1/m = %s on hidden matrices) need the cpu optimizer: the device kernels take one learning rate", U.fmt_value(1 / mult)),
      "use --target cpu, or d_model = base_width on a device target")
  end
  ctx.decide("model.attn_scale", m.attn_scale, string.format("v2145 muP: attention scores scaled by 1/d_head = 1/%d instead of 1/sqrt(d_head)", hd))
end

function M.sections(ctx, plan)
  local o = plan.optimizer
  local mult = ctx.facts.init.width_mult
  local n, floats = 0, 0
  for _, p in ipairs(plan.params) do
    if #p.shape == 2 and not embedding_or_head(p.name) then
      if p.group then
        ctx.refuse(string.format("parameter %s is already in optimizer group %s (another technique's)", p.name, p.group),
          "use muTransfer with adamw, lion, sophia or schedule-free")
      end
      p.group = "mup_hidden"
      n = n + 1; floats = floats + p.numel
    end
  end
  o.extra_groups = o.extra_groups or {}
  o.extra_groups[#o.extra_groups + 1] = { name = "mup_hidden", lr_mult = 1 / mult, weight_decay = o.weight_decay, rule = o.rule }
  ctx.decide("optimizer.group.mup_hidden.lr_mult", 1 / mult, string.format("v2145 muP (Adam): hidden matrices and the output layer at LR / m, m = %s", U.fmt_value(mult)))
  ctx.contribute(string.format("muP optimizer group mup_hidden: %d matrices (%d floats) at lr_mult 1/m = %s, weight decay %s; attention scale 1/d_head",
    n, floats, U.fmt_value(1 / mult), U.fmt_value(o.weight_decay)))
end

return M
