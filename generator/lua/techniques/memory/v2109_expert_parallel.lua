-- v2109 expert parallelism: the experts of every MoE layer (model key `moe`, generator/lua/moe.lua)
-- are placed over an `ep` axis of `degree` ranks — rank r of an ep group computes experts
-- [r*E/degree, (r+1)*E/degree) — and tokens travel to their experts' ranks and back by
-- all-to-all (runtime/cpu/moe_ep.c). Every rank is also a data-parallel rank with its own
-- micro-batch, so the plan is data-parallel (train.data_parallel) and records train.ep; the
-- plan's op list is the ep=1 one (the runtime's moe ops dispatch when the trainer runs with an
-- ep communicator). Never: a selection the runtime cannot run with ep (a dense model, a device
-- target, ZeRO/FSDP, tp, local SGD, checkpoint specs, E not divisible by degree) — refused here, naming the fix.
local M = { id = "v2109" }

function M.model(ctx, m)
  local ep = ctx.param("degree")
  if not m.moe then
    ctx.refuse("model " .. tostring(m.name) .. " has no mixture-of-experts layers (no `moe` section) to place over ranks", "use an MoE model (e.g. --model tiny-moe), or drop ep")
  end
  if ctx.target.kind ~= "cpu" then
    ctx.refuse("expert parallelism runs on the cpu backend only (no NCCL send/recv dispatch on sim/cuda yet)", "use --target cpu, or drop ep")
  end
  if ep < 2 then ctx.refuse("degree must be >= 2 (degree 1 is no expert parallelism)", "set v2109.degree=2, or drop ep") end
  local E = m.moe.n_experts
  if E % ep ~= 0 then
    ctx.refuse(string.format("n_experts %d of %s is not divisible by degree %d", E, tostring(m.name), ep), "choose a v2109.degree that divides n_experts")
  end
  if ctx.facts.zero and (ctx.facts.zero.stage or 0) > 0 then
    ctx.refuse("expert parallelism with ZeRO/FSDP: sharding the optimizer state of experts that live on one ep rank is not implemented", "drop zero1/zero2/zero3/fsdp, or drop ep")
  end
  if ctx.facts.tp then ctx.refuse("expert parallelism with tensor parallelism (a dp x tp x ep mesh) is not implemented", "drop tp, or drop ep") end
  local a = ctx.cfg.active
  if a.v2173 or a.v2174 then ctx.refuse("expert parallelism with local SGD / asynchronous data parallelism: the experts' gradients must be reduced every step", "drop local-sgd/async, or drop ep") end
  if a.v2175 or a.v2181 or a.v2178 or a.v2179 or a.v2180 then
    ctx.refuse("expert parallelism with the checkpoint specs (v2175 elastic, v2178 plan settings, v2179 async, v2180 incremental, v2181 sharded): only the trainer's plain full checkpoints gather the experts from their ranks",
      "drop those specs and pass --ckpt-dir to the trainer, or drop ep")
  end
  for _, p in ipairs({ "experts", "top_k", "capacity_factor", "aux_loss_weight" }) do
    if ctx.param_source(p) == "--set" then
      ctx.refuse("v2109." .. p .. " is the model's: the experts, top_k, capacity and aux-loss coefficient come from the model file's `moe` section (docs/moe.md)", "set it in the model's moe section instead of --set v2109." .. p)
    end
  end
  ctx.facts.ep = { degree = ep, E = E }
end

function M.sections(ctx, plan)
  local f = ctx.facts.ep
  plan.train.ep = f.degree
  plan.train.data_parallel = 1
  ctx.decide("v2109.data_parallel", 1, "every ep rank is a data-parallel rank with its own micro-batch: the trainer runs under mpirun")
  ctx.decide("v2109.experts", f.E, "from the model's moe section (the spec's experts/top_k/capacity_factor/aux_loss_weight are not read)")
  ctx.contribute(string.format("experts over ep groups of %d ranks: each rank computes %d of %d experts per MoE layer; tokens dispatched and combined by all-to-all (forward and backward); expert gradients reduced over the expert's replicas only",
    f.degree, f.E // f.degree, f.E))
end

return M
