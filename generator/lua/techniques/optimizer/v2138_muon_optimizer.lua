-- v2138 Muon: the plan's optimizer becomes kind "muon" (runtime/train/optim_muon.c; on sim/sm_XX the
-- kernels of templates/muon.cu.lua around fp32 device GEMMs)
-- with two update rules named by the parameter groups: group "muon" (rule muon) holds the hidden
-- 2-D weight matrices of the blocks (fused QKV, attention out, MLP in/out), orthogonalized by
-- Newton-Schulz; the embeddings, the output head, norm gains and biases stay in the decay /
-- no_decay groups with rule adamw and v2132's betas, eps and weight decay. Hyper-parameters:
-- momentum, nesterov (0/1), ns_steps, match_adamw (1: scale 0.2*sqrt(max(R,K)) so AdamW's LR and
-- weight decay carry over; 0: "spectral", the reference's max(1, R/K)^0.5) and beta1/beta2/eps
-- for the AdamW rule. The Muon group's LR is the schedule's times lr_mult, its weight decay the
-- decay group's. States m (f32, every parameter) and v (f32, packed: none for a Muon matrix, the
-- plan's state "numel" list; under ZeRO stages 1-2, cpu only, both in the arena layout and the
-- trainer runs distributed Muon), sharded by matrix: ZeRO-3 is refused here, at gen time.
-- Never: a second optimizer beside Muon's own AdamW rule.
local U = require("util")
local M = { id = "v2138", families = { "muon" } }

-- the tensors Muon leaves to AdamW although they are 2-D: token/position embeddings, output head
local function embedding_or_head(name)
  return name:find("wte", 1, true) or name:find("wpe", 1, true) or name:find("embed", 1, true)
    or name:find("lm_head", 1, true)
end

function M.derive(ctx)
  ctx.facts.optimizer = "muon"
end

function M.sections(ctx, plan)
  local z = ctx.facts.zero
  local zstage = z and z.stage or 0
  if zstage >= 3 then
    ctx.refuse(string.format("Muon updates whole matrices, and ZeRO stage %d shards the parameters by floats", zstage),
      "use zero1 or zero2 (distributed Muon: each matrix's Newton-Schulz on one rank), or plain dp")
  end
  if zstage >= 1 and ctx.target.kind ~= "cpu" then
    ctx.refuse(string.format("distributed Muon (ZeRO stage %d) runs on the cpu backend only; the device step keeps whole matrices on every rank", zstage),
      "generate the trainer with --target cpu, or drop zero1/zero2 (plain dp works on " .. tostring(ctx.target.kind) .. ")")
  end
  local o = plan.optimizer
  local scale = ctx.param("scale")
  local from = o.kind
  o.kind = "muon"
  o.hyper = { momentum = ctx.param("momentum"), nesterov = ctx.param("nesterov") and 1 or 0,
    ns_steps = ctx.param("ns_steps"), match_adamw = scale == "match_adamw" and 1 or 0,
    beta1 = o.hyper.beta1, beta2 = o.hyper.beta2, eps = o.hyper.eps }
  o.state = U.array({ { name = "m", dtype = "f32" }, { name = "v", dtype = "f32" } })
  o.shard = "matrix"
  o.rule = "adamw"
  o.extra_groups = { { name = "muon", lr_mult = ctx.param("lr_mult"), weight_decay = o.weight_decay, rule = "muon" } }
  local n, floats = 0, 0
  for _, p in ipairs(plan.params) do
    if #p.shape == 2 and not embedding_or_head(p.name) then
      p.group = "muon"
      n = n + 1; floats = floats + p.numel
    end
  end
  if n == 0 then ctx.refuse("the model has no hidden 2-D matrix for Muon", "use adamw") end
  -- v packed per tensor: a Muon matrix keeps none (runtime/train/optim_muon.c state_numel)
  -- (under ZeRO v keeps the arena's layout, sharded by floats like m: the Muon matrices' part unused)
  if zstage == 0 then
    local vn = U.array()
    for i, p in ipairs(plan.params) do vn[i] = p.group == "muon" and 0 or p.numel end
    o.state[2].numel = vn
  else
    ctx.decide("optimizer.muon.zero", zstage, string.format("v2138 Muon under ZeRO stage %d: m and v sharded by floats (v in the arena layout), each matrix's Newton-Schulz on one rank (largest first to the least loaded), results all-reduced", zstage))
  end
  ctx.decide("optimizer.kind", "muon", "v2138 enabled: replaces " .. from .. "; hidden matrices on Muon, the rest on AdamW")
  ctx.decide("optimizer.muon.scale", scale, scale == "match_adamw"
    and "v2138 Muon: updates scaled by 0.2*sqrt(max(rows, cols)) (Moonlight) so AdamW's LR and weight decay carry over"
    or "v2138 Muon: updates scaled by max(1, rows/cols)^0.5 (KellerJordan/Muon); the Muon group's LR is lr_mult x the schedule's")
  ctx.contribute(string.format("optimizer kind muon: momentum %s%s, %d quintic Newton-Schulz steps (fp32 GEMMs), %s scaling, lr_mult %s, weight decay %s",
    U.fmt_value(ctx.param("momentum")), ctx.param("nesterov") and " (Nesterov)" or "", ctx.param("ns_steps"), scale,
    U.fmt_value(ctx.param("lr_mult")), U.fmt_value(o.weight_decay)))
  ctx.contribute(string.format("Muon group: %d hidden matrices (%d floats); embeddings, head, gains and biases on AdamW (beta1 %s, beta2 %s, eps %s)",
    n, floats, U.fmt_value(o.hyper.beta1), U.fmt_value(o.hyper.beta2), U.fmt_value(o.hyper.eps)))
end

function M.kernels(ctx, k)
  k.want("muon", { "muon_adamw_step", "muon_momentum", "muon_normalize", "muon_apply" }, {})
  ctx.contribute("kernel: muon_momentum, muon_normalize, muon_apply around fp32 device GEMMs (Newton-Schulz), muon_adamw_step for the AdamW tensors")
end

return M
