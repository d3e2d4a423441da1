-- moe.lua — the mixture-of-experts MLP in the plan (model key `moe`, docs/moe.md): which layers
-- are MoE layers, their parameters under transformers' Mixtral names, the fused `moe_fwd` /
-- `moe_bwd` ops that replace such a layer's dense MLP ops, and the selections the runtime cannot
-- run an MoE model under (refused before anything is written). plan.lua calls it at four points;
-- the cpu kernels are runtime/cpu/ops_moe.c (softmax top-k router, dropless dispatch or a capacity
-- factor with token dropping, SwiGLU experts, Switch load-balancing loss). Never: a router, capacity or expert kind the runtime op
-- does not compute (those are refused here with what is missing).
local U = require("util")
local M = {}

-- The MoE settings of layer l (0-based), or nil when the layer's MLP is dense.
function M.layer(m, l)
  local e = m.moe
  if not e or l < (e.first_dense_layers or 0) then return nil end
  return { E = e.n_experts, K = e.top_k, H = e.expert_hidden or m.ffn_hidden,
    norm_topk = e.norm_topk ~= false, aux = e.aux_loss_coef or 0,
    cap = not e.dropless and e.capacity_factor or nil,
    Hs = (e.n_shared_experts or 0) * (e.expert_hidden or m.ffn_hidden),
    sigmoid = e.router == "sigmoid", bias = e.router_bias == "aux_free",
    bias_rate = e.bias_update_rate or 0.001 }
end

-- Refuses what the runtime's MoE op cannot run: the model's router kinds and the selections whose
-- rewrites or parallel layouts do not know the op. cfg: the resolved configuration (after the
-- modules' derive and model hooks, so cfg.facts holds their decisions); m: the model.
function M.check(cfg, m, decide)
  local e = m.moe
  if not e then return end
  local where = cfg.model_path or U.where(m, "moe")
  local name = tostring(m.name)
  local function refuse(what, fix) U.fail(where, string.format("model %s (mixture of experts): %s", name, what), fix) end
  local tgt = cfg.target
  if tgt.kind ~= "cpu" and tgt.kind ~= "sim" and tgt.kind ~= "cuda" then
    refuse(string.format("no %s trainer runs the router, dispatch and expert ops", tostring(tgt.name)),
      "use --target cpu, sim or sm_XX, or `gen size` for sizing (docs/moe.md)")
  end
  if e.router ~= "softmax" and tgt.kind ~= "cpu" then refuse("the " .. e.router .. " router is in the cpu op only (the " .. tostring(tgt.name) .. " MoE op routes by softmax)", "set moe.router: softmax, or --target cpu") end
  if e.router_bias == "aux_free" and tgt.kind ~= "cpu" then refuse("the aux-loss-free router bias is in the cpu op only", "set moe.router_bias: none, or --target cpu") end
  M.check_router(cfg, e, refuse)
  if not e.dropless and tgt.kind ~= "cpu" then refuse("capacity_factor (token dropping) is in the cpu op only: the " .. tostring(tgt.name) .. " MoE op routes every token (dropless)", "set moe.dropless: true instead of a capacity_factor, or --target cpu") end
  if (e.n_shared_experts or 0) > 0 and tgt.kind ~= "cpu" then refuse("shared experts are in the cpu op only, not in the " .. tostring(tgt.name) .. " MoE op", "set moe.n_shared_experts: 0, or --target cpu") end
  if tgt.kind ~= "cpu" then M.check_device(cfg, refuse) end
  if m.activation ~= "swiglu" then refuse("the experts are SwiGLU MLPs in the runtime op, the model says " .. tostring(m.activation), "set activation: swiglu") end
  if m.bias == true or m.arch == "gpt2" then refuse("the experts and the router have no biases in the runtime op", "use a llama-arch model with bias: false") end
  local H = e.expert_hidden or m.ffn_hidden
  if (H * m.d_model) % 16 ~= 0 then
    refuse(string.format("expert_hidden x d_model = %d is not a multiple of 16, so the experts' weights are not one contiguous block of the parameter arena", H * m.d_model),
      "choose expert_hidden or d_model so that their product is a multiple of 16")
  end
  local f = cfg.facts or {}
  if f.tp then refuse("tensor parallelism does not shard the experts", "drop tp") end
  if f.precision and f.precision.dtype ~= "fp32" then
    refuse("mixed precision (" .. tostring(f.precision.dtype) .. ") would leave the expert GEMMs in fp32 behind bf16/fp16 activations: the MoE op has fp32 kernels only", "drop mixed-precision")
  end
  if f.objective then
    refuse("the " .. tostring(f.objective.kind) .. " objective weighs tokens its own way, and the load-balancing loss is weighted for the next-token objective only",
      "use pretraining or SFT, or a dense model")
  end
  if f.fp8 or f.int8 or f.qat then refuse("fp8/int8/quantization-aware GEMMs are not applied to the expert GEMMs of the MoE op", "drop fp8/int8/qat") end
  if e.norm_topk == nil then decide("model.moe.norm_topk", true, "absent: the top_k weights renormalised to sum 1 (Mixtral)") end
  if e.router_bias == "aux_free" and e.bias_update_rate == nil then
    decide("model.moe.bias_update_rate", 0.001, "absent: DeepSeek-V3's bias update speed gamma = 0.001")
  end
  if e.aux_loss_coef == nil then decide("model.moe.aux_loss_coef", 0, "absent: no load-balancing loss (set moe.aux_loss_coef, e.g. 0.02)") end
end

-- The sigmoid router and its aux-loss-free bias on cpu (ops_moe.h): the op defines no
-- load-balancing loss for sigmoid scores, and the bias is a parameter no gradient reaches that the
-- trainer moves after each step — kept unchanged by AdamW's update of a zero gradient (no decay),
-- not by every optimizer, and present on every rank only without ZeRO-3/FSDP sharding.
function M.check_router(cfg, e, refuse)
  local f = cfg.facts or {}
  if e.router == "sigmoid" and (e.aux_loss_coef or 0) > 0 then
    refuse("the sigmoid router has no load-balancing aux loss in the op (DeepSeek-V3's sequence-wise one is not implemented)",
      "set moe.aux_loss_coef: 0 and balance with router_bias: aux_free")
  end
  if e.router_bias == "aux_free" then
    if f.optimizer and f.optimizer ~= "adamw" then
      refuse("the aux-loss-free bias needs AdamW (a zero gradient leaves it unchanged), the optimizer is " .. tostring(f.optimizer), "use adamw")
    end
    if f.zero and (f.zero.stage or 0) >= 3 then
      refuse("the aux-loss-free bias is updated on every rank's full parameters, ZeRO-3/FSDP shards them", "use ZeRO stage <= 2")
    end
  end
end

-- What the device op (runtime/device/exec_dev_moe.c, templates/moe.cu.lua) does not do on sim and
-- cuda beyond the cpu op's refusals (its kernels are fp32: the mixed-precision refusal above):
-- nothing today. ZeRO-2/3 (tests/gen/test_moe_zero_sim.sh) and CUDA graphs
-- (test_moe_graphs_v2165.sh) run it: its grouped GEMMs read the expert offsets on the device, so
-- the op never reads back mid-op.
function M.check_device(cfg, refuse)
  local _ = cfg, refuse
end

-- The parameters of MoE layer l in arena order (p: tensor_params' adder; n: the layer's names;
-- pre: "model.layers.l."): the router, then every expert's gate (w1) and up (w3) projection,
-- then every expert's down projection (w2), then the shared experts' gate, up and down projections
-- (one MLP of n_shared x H, DeepSeek-V3's `shared_experts`), so that the experts' weights are one
-- contiguous block [E x 2H x C | E x C x H | 2Hs x C | C x Hs] — the layout the op reads (w1 of
-- ops_moe.h: gate rows, then up).
function M.params(p, n, pre, d, x, normal, small)
  local b = pre .. "block_sparse_moe."
  n.moe = x
  n.router = b .. "gate.weight"; p(n.router, { x.E, d.C }, normal, true)
  if x.bias then -- DeepSeek-V3's selection bias (a parameter no gradient reaches; moved after each step)
    n.router_bias = b .. "gate.e_score_correction_bias"; p(n.router_bias, { x.E }, { kind = "zeros" }, false)
  end
  n.experts_first = b .. "experts.0.w1.weight"
  for e = 0, x.E - 1 do
    p(b .. "experts." .. e .. ".w1.weight", { x.H, d.C }, normal, true)
    p(b .. "experts." .. e .. ".w3.weight", { x.H, d.C }, normal, true)
  end
  for e = 0, x.E - 1 do p(b .. "experts." .. e .. ".w2.weight", { d.C, x.H }, small, true) end
  if x.Hs > 0 then -- the shared experts as one MLP of n_shared x H (DeepSeek-V3's shared_experts names)
    p(b .. "shared_experts.gate_proj.weight", { x.Hs, d.C }, normal, true)
    p(b .. "shared_experts.up_proj.weight", { x.Hs, d.C }, normal, true)
    p(b .. "shared_experts.down_proj.weight", { d.C, x.Hs }, small, true)
  end
end

-- The fused view over one MoE layer's expert weights (place_params' fused_view); returns its name.
function M.view(fused_view, n, l, d)
  local x = n.moe
  local shape = x.Hs > 0 and { x.E * 3 * x.H + 3 * x.Hs, d.C } or { x.E, 3 * x.H, d.C }
  return fused_view({ n.experts_first }, shape, "model.layers." .. l .. ".block_sparse_moe.experts(fused)")
end

local function attrs(x, C)
  local a = { N = "N", C = C, H = x.H, E = x.E, K = x.K }
  if x.norm_topk then a.norm_topk = 1 end
  if x.aux > 0 then a.aux_coef = x.aux end
  if x.cap then a.capacity = x.cap end
  if x.Hs > 0 then a.Hs = x.Hs end
  if x.sigmoid then a.sigmoid = 1 end
  return a
end

-- The forward of an MoE layer's MLP: inp [N, C] -> s.fcp [N, C]; the op's routing state (per
-- token probabilities, chosen experts and weights, loads and aux loss) in s.moe_state for the
-- backward; scratch: the op's workspace, live during the op only.
function M.forward(g, list, act, t, s, inp, n, C)
  local x = n.moe
  local N = g.maxB * g.maxT
  s.fcp = act(t .. ".fcproj", { "N", C })
  s.moe_state = act(t .. ".moe_state", { M.state_floats(N, x) })
  local scratch = g.buf("scratch:" .. t .. ".moe_fwd", "act", { M.scratch_floats(N, C, x) })
  local a = attrs(x, C)
  if n.router_bias then a.bias_rate = x.bias_rate end
  g.op(list, "moe_fwd", { inp, n.router, n.experts, n.router_bias or "" }, { s.fcp, s.moe_state, scratch }, a)
end

-- Its backward: dout [N, C] -> dinp [N, C] (+=) and the router's and experts' gradients.
function M.backward(g, list, t, s, dout, dinp, inp, n, C, G)
  local x = n.moe
  local N = g.maxB * g.maxT
  local scratch = g.buf("scratch:" .. t .. ".moe_bwd", "act", { M.scratch_floats(N, C, x) })
  g.op(list, "moe_bwd", { dout, inp, n.router, n.experts, s.moe_state }, { dinp, G(n.router), G(n.experts), scratch }, attrs(x, C))
end

-- Sizes in floats, as runtime/core/op_registry.c's moe shape rule checks them: the state holds
-- probs [N, E], topw [N, K], topi [N, K] (i32), loads [E] (i32) and the aux loss; the scratch
-- op_moe_ws_floats (ops_moe.h) plus the [2N] i32 row lists.
function M.state_floats(N, x) return N * x.E + 2 * N * x.K + x.E + 1 end
function M.scratch_floats(N, C, x)
  return 4 * N * C + 4 * N * x.H + 2 * N * x.H + x.E + N * x.K + N * x.E + 6 * N * x.Hs + 2 * N
end

return M
