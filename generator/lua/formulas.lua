-- formulas.lua — the one source of truth for model arithmetic: parameter counts, FLOPs per
-- token, activation sizes. Used by the plan (MFU reporting in the runtime), the audit and
-- `gen size`. Pure functions of a model table (specs/models/*.yaml, plain) — no I/O.
local F = {}

-- Padded vocabulary: a multiple of 64 (better GEMM tiles); padded rows are zero and never trained.
function F.padded_vocab(V)
  return ((V + 63) // 64) * 64
end

-- Shapes derived from a model spec.
function F.dims(m)
  local NH = m.n_heads
  local NKV = m.n_kv_heads or NH
  local hd = m.head_dim or m.d_model // NH -- a tensor-parallel rank keeps the full model's head_dim
  return {
    V = m.vocab_size, Vp = F.padded_vocab(m.vocab_size), C = m.d_model, L = m.n_layers,
    NH = NH, NKV = NKV, hd = hd, H = m.ffn_hidden, maxT = m.context,
    qkv = (NH + 2 * NKV) * hd,
    fc = (m.activation == "swiglu") and 2 * m.ffn_hidden or m.ffn_hidden,
    bias = (m.bias ~= false) and (m.arch == "gpt2" or m.bias == true),
  }
end

-- Mixture-of-experts MLP (model key `moe`, docs/moe.md): the weights of the MLPs of one layer
-- beyond the dense MLP's own d.fc·C + C·H (which stays as the first expert's count), split in
-- `total` (every routed and shared expert plus the router) and `active` (the top_k routed and the
-- shared experts a token runs through, plus the router), and the layers that have them: all
-- but the first `first_dense_layers`, whose MLP is dense with ffn_hidden.
function F.moe_extra(m)
  local e = m.moe
  if not e then return { total = 0, active = 0, layers = 0 } end
  local d = F.dims(m)
  local Hx = e.expert_hidden or m.ffn_hidden
  local fcx = (m.activation == "swiglu") and 2 * Hx or Hx
  local one = fcx * d.C + d.C * Hx
  if d.bias then one = one + fcx + d.C end
  local dense = d.fc * d.C + d.C * d.H + (d.bias and (d.fc + d.C) or 0)
  local shared = e.n_shared_experts or 0
  local router = e.n_experts * d.C
  return { total = (e.n_experts + shared) * one + router - dense,
    active = (e.top_k + shared) * one + router - dense,
    layers = d.L - (e.first_dense_layers or 0) }
end

-- Parameter count (unpadded vocabulary, as papers count it); an MoE model's total (every expert).
function F.param_count(m)
  local d = F.dims(m)
  local C, L = d.C, d.L
  local per_layer = d.qkv * C + C * d.NH * d.hd + d.fc * C + C * d.H
  local norms = (m.norm == "layernorm" and (d.bias and 2 or 1) or 1) * C
  per_layer = per_layer + (m.norm_placement == "sandwich" and 4 or 2) * norms
  if d.bias then per_layer = per_layer + d.qkv + C + d.fc + C end
  if m.qk_norm then per_layer = per_layer + 2 * d.hd end
  local n = L * per_layer + d.V * C + norms
  if m.position == "learned" then n = n + d.maxT * C end
  if not m.tied_embeddings then n = n + d.V * C end
  local x = F.moe_extra(m)
  return n + x.layers * x.total
end

-- Parameters one token runs through (an MoE model's active count: top_k routed + shared experts
-- + router per MoE layer); equal to F.param_count for a dense model.
function F.active_param_count(m)
  local x = F.moe_extra(m)
  return F.param_count(m) - x.layers * (x.total - x.active)
end

-- Non-embedding parameters that take part in matmuls per token (for FLOPs): every linear weight
-- including the LM head (the embedding lookup itself costs no FLOPs).
function F.matmul_params(m)
  local d = F.dims(m)
  local per_layer = d.qkv * d.C + d.C * d.NH * d.hd + d.fc * d.C + d.C * d.H
  local x = F.moe_extra(m)
  return d.L * per_layer + d.V * d.C + x.layers * x.active
end

-- Training FLOPs per token at sequence length T — the one FLOP convention of Hyperion (the plan
-- carries it to the runtime's MFU, the audit and `gen size` quote it): 6 per matmul weight
-- (forward 2, backward 4; the embedding lookup costs none, the LM head counts) plus attention's
-- QK^T and AV, 12·L·NH·hd·T per token. That is PaLM's MFU definition (Chowdhery et al. 2022,
-- appendix B): the full T, causal masking NOT discounted, recomputation not counted — so MFU
-- figures compare with published ones. `causal` = true counts only the unmasked half
-- (6·L·NH·hd·T), a lower bound of the work any causal kernel must do (v2187's attention =
-- "causal"). Either way MFU <= 100% needs the peak to be the machine's real one.
F.FLOPS_CONVENTION = {
  full = "PaLM: 6 x matmul params + 12 x L x NH x hd x T, causal masking not discounted",
  causal = "6 x matmul params + 6 x L x NH x hd x T, the causal half of attention",
}
function F.train_flops_per_token(m, T, causal)
  local d = F.dims(m)
  return 6 * F.matmul_params(m) + (causal and 6 or 12) * d.L * d.NH * d.hd * T
end

-- ===========================================================================================
-- Sizing and cost (gen size, issue 7). Everything below is a pure function of numbers and
-- model tables: no I/O, no `hyp`, so tests/lua/test_formulas.lua can run it under plain lua5.4.
-- ===========================================================================================

-- Bytes one GPU sends (and receives) in a ring collective of n bytes over p GPUs: all-reduce
-- 2(p-1)/p·n (reduce-scatter then all-gather), reduce-scatter and all-gather (p-1)/p·n each, 0 on
-- one GPU. Used by F.throughput's network term and the performance model's collectives (perf.lua).
function F.ring_bytes(kind, p, n)
  if p <= 1 then return 0 end
  local f = (p - 1) / p
  if kind == "all_reduce" then return 2 * f * n end
  if kind == "reduce_scatter" or kind == "all_gather" then return f * n end
  error("F.ring_bytes: unknown collective " .. tostring(kind))
end

-- Throughput model of seed 004 ("Sizing AI Training by Cost per Memory Bandwidth"), per GPU.
-- t = { N params, L layers, d width, b bytes/element, k FLOPs/token/param (6 = training),
--       g recompute multiplier, alpha optimizer bytes/param/step, c activation coefficient,
--       B global tokens/step, bg gradient bytes/element, p data-parallel size,
--       peak_flops FLOP/s, hbm_Bps bytes/s, nic_gbps Gb/s, ec/em/en efficiencies (0..1] }
--   F = g·k·N                                   FLOPs per token
--   M = alpha·N/B + c·L·d·b                     HBM bytes per token
--   X = 2·(p−1)/p · N·bg / (B/p)  (0 if p = 1)  network bytes per token per GPU (ring all-reduce
--                                               of the gradients, amortised over local tokens)
--   r_compute = ec·peak/F, r_memory = em·hbm/M, r_network = en·(nic·1e9/8)/X (inf if X = 0 or no
--   NIC); rate = min of the three and `bound` names it (ties: compute, then memory).
--   intensity = F/M (FLOP/byte); balance = peak/hbm (FLOP/byte, raw peaks).
function F.throughput(t)
  local Ft = t.g * t.k * (t.Na or t.N) -- Na: an MoE model's active parameters (the FLOPs a token costs)
  local M = t.alpha * t.N / t.B + t.c * t.L * t.d * t.b
  local X = 0
  if t.p > 1 then X = F.ring_bytes("all_reduce", t.p, t.N * t.bg) / (t.B / t.p) end
  local r_c = t.ec * t.peak_flops / Ft
  local r_m = t.em * t.hbm_Bps / M
  local r_n = math.huge
  if X > 0 and t.nic_gbps > 0 then r_n = t.en * (t.nic_gbps * 1e9 / 8) / X
  elseif X > 0 then r_n = 0 end
  local rate, bound = r_c, "compute"
  if r_m < rate then rate, bound = r_m, "memory" end
  if r_n < rate then rate, bound = r_n, "network" end
  return { flops_per_token = Ft, hbm_bytes_per_token = M, net_bytes_per_token = X,
    r_compute = r_c, r_memory = r_m, r_network = r_n, rate = rate, bound = bound,
    intensity = Ft / M, balance = t.peak_flops / t.hbm_Bps }
end

-- Cluster plan for a target throughput (seed 004 §5-6): GPUs = max(1, ceil(target/rate)),
-- $/hr = GPUs·price, cluster HBM TB/s = target·M/1e12 (the bandwidth the run consumes),
-- $ per TB/s·hr = price / HBM TB/s of one GPU (cost of memory bandwidth; lower is better).
function F.cluster(th, target, price_per_hr, hbm_tbps)
  local gpus = (th.rate > 0) and math.max(1, math.ceil(target / th.rate - 1e-9)) or math.huge
  return { gpus = gpus, usd_per_hr = gpus * price_per_hr,
    cluster_hbm_tbps = target * th.hbm_bytes_per_token / 1e12,
    usd_per_tbps_hr = price_per_hr / hbm_tbps }
end

-- Chinchilla (v2146, Hoffmann et al. 2022): compute-optimal tokens ≈ 20 × parameters, and
-- training compute C ≈ 6·N·D. v2147: for a FLOP budget C the optimal split is N = sqrt(C/120),
-- D = 20·N (from C = 6·N·20·N).
F.CHINCHILLA_TOKENS_PER_PARAM = 20
function F.chinchilla_tokens(N) return F.CHINCHILLA_TOKENS_PER_PARAM * (N + 0.0) end
function F.compute_optimal(C)
  local N = math.sqrt(C / (6 * F.CHINCHILLA_TOKENS_PER_PARAM))
  return { params = N, tokens = F.CHINCHILLA_TOKENS_PER_PARAM * N }
end

-- Time and cost to train `tokens` on `gpus` GPUs of per-GPU rate `rate` (tokens/s) at
-- `price` $/GPU-hour: hours = tokens / (gpus·rate) / 3600, cost = gpus·price·hours.
-- With linear scaling (rate independent of gpus) the cost does not depend on gpus at all.
function F.train_cost(tokens, rate, gpus, price)
  local hours = tokens / (gpus * rate) / 3600
  return { hours = hours, gpu_hours = hours * gpus, usd = gpus * price * hours }
end

-- Bytes per element of the model state for a training precision.
--   fp32: weights 4, grads 4, AdamW m+v 8 (no master copy)           = 16 B/param
--   bf16 (v2102 mixed precision): weights 2, grads 2, fp32 master + m + v 12 = 16 B/param
--   fp8 (v2108-style, Transformer Engine): as bf16 plus a cached FP8 copy of the weights, 1 B/param
F.STATE_BYTES = {
  fp32 = { param = 4, grad = 4, optim = 8, fp8_copy = 0 },
  bf16 = { param = 2, grad = 2, optim = 12, fp8_copy = 0 },
  fp8 = { param = 2, grad = 2, optim = 12, fp8_copy = 1 },
}

-- Model state per GPU under ZeRO (Rajbhandari et al. 2020) / FSDP.
-- o = { dtype, stage 0..3, p world size, grad_bytes?, opt_state? ("f32" | "q8"), q8_f32_params? (F.q8_f32_params),
--       layer_params? (largest gather unit,
--       F.gather_params, for the stage-3 gather buffer), prefetch? (layers gathered ahead, v2104
--       prefetch_layers, default 1) }. Stage 0 replicates everything; stage 1 shards the optimizer
-- state over p; stage 2 also the gradients; stage 3 (= FSDP full shard) also the weights, and
-- then needs a gather buffer for the full weights of the layer being computed and the prefetched
-- ones: (prefetch + 1)·layer_params·param bytes (and a one-layer gradient workspace in backward, which
-- F.model_state leaves out: like the stage-2 workspace it is transient). Returns bytes per GPU by part and the total.
-- Adam's m and v per parameter: fp32 (8 B), or v2132 state_dtype q8 (bitsandbytes' block-wise
-- 8-bit: one uint8 code each plus one fp32 absmax per 256 elements, runtime/optim/optim_adamw8.c)
F.MOMENT_BYTES = { f32 = 8, q8 = 2 * (1 + 4 / 256) }

-- The parameters a q8 run keeps in fp32 states (v2132 q8_min_size 4096 and q8_embeddings f32, the
-- defaults; bitsandbytes' min_8bit_size and StableEmbedding): the token and learned position
-- embeddings, and every per-layer vector under 4096 elements (norm gains and biases).
function F.q8_f32_params(m)
  local d = F.dims(m)
  local n = d.Vp * d.C + (m.position == "learned" and d.maxT * d.C or 0)
  local small = function(k) return k < 4096 and k or 0 end
  local per = (m.norm_placement == "sandwich" and 4 or 2) * (m.norm == "layernorm" and (d.bias and 2 or 1) or 1) * small(d.C)
  if d.bias then per = per + small(d.qkv) + small(d.C) + small(d.fc) + small(d.C) end
  if m.qk_norm then per = per + 2 * small(d.hd) end
  return n + d.L * per + (m.norm == "layernorm" and (d.bias and 2 or 1) or 1) * small(d.C)
end

function F.model_state(N, o)
  local sb = F.STATE_BYTES[o.dtype]
  local p, st = o.p or 1, o.stage or 0
  local gb = o.grad_bytes or sb.grad
  local params = sb.param * N
  local grads = gb * N
  local q8f = (o.opt_state == "q8") and math.min(N, o.q8_f32_params or 0) or 0 -- these keep fp32 m, v
  local optim = (sb.optim - F.MOMENT_BYTES.f32) * N + F.MOMENT_BYTES[o.opt_state or "f32"] * (N - q8f)
    + F.MOMENT_BYTES.f32 * q8f
  local fp8 = sb.fp8_copy * N
  if st >= 1 then optim = optim / p end
  if st >= 2 then grads = grads / p end
  local gather = 0
  if st >= 3 then
    params = params / p
    fp8 = fp8 / p
    if p > 1 then gather = ((o.prefetch or 1) + 1) * (o.layer_params or 0) * sb.param end
  end
  return { params = params, grads = grads, optimizer = optim, fp8_extra = fp8, gather = gather,
    total = params + grads + optim + fp8 + gather }
end

-- Parameters of one transformer layer, norms included (an MoE model's largest: an MoE layer
-- with every expert, when its experts outweigh the dense MLP of the first_dense_layers).
function F.layer_params(m)
  local d = F.dims(m)
  local n = d.qkv * d.C + d.C * d.NH * d.hd + d.fc * d.C + d.C * d.H
  n = n + (m.norm_placement == "sandwich" and 4 or 2) * (m.norm == "layernorm" and (d.bias and 2 or 1) or 1) * d.C
  if d.bias then n = n + d.qkv + d.C + d.fc + d.C end
  if m.qk_norm then n = n + 2 * d.hd end
  local x = F.moe_extra(m)
  if x.layers > 0 and x.total > 0 then n = n + x.total end
  return n
end

-- The largest unit ZeRO-3 gathers at once (the runtime's layer groups, runtime/exec.h): one
-- transformer layer, the embeddings (padded vocabulary, learned positions) or the tensors after
-- the last layer (final norm, untied LM head). For GPT-2 124M the embeddings win (39M vs 7M).
function F.gather_params(m)
  local d = F.dims(m)
  local norm = (m.norm == "layernorm" and (d.bias and 2 or 1) or 1) * d.C
  local embed = d.Vp * d.C + (m.position == "learned" and d.maxT * d.C or 0)
  local post = norm + (m.tied_embeddings and 0 or d.Vp * d.C)
  return math.max(F.layer_params(m), embed, post)
end

-- ---- activation memory -------------------------------------------------------------------
-- The activation memory of one training step, found the way the plan's static memory planner
-- sees it: the same buffers with the same lifetimes as plan.lua's forward/backward schedule,
-- and the peak of the bytes live at any op. The planner (P.assign_offsets) packs exactly these
-- lifetimes, so its arena is this peak plus the fragmentation its greedy packing leaves.
--   o.attention = "naive": stores att [B,NH,T,T] per layer and a datt scratch in backward (the
--       CPU runtime); "flash": stores only the log-sum-exp [B,NH,T] (fp32) per layer and a
--       [B,NH,T] fp32 scratch in backward (FlashAttention, v2112-v2114).
--   o.recompute = "none"; "selective" (v2111, Korthikanti et al. 2022): the attention matrix is
--       recomputed in backward instead of stored; "full" (v2101 gradient checkpointing): only
--       each layer's input is stored and the whole layer is recomputed before its backward.
--   o.bytes = { act = bytes of activations and their gradients, stat = bytes of norm/softmax
--       statistics, mm = bytes of the matmul inputs that are saved for backward (FP8: 1) }
--   o.align = buffer alignment in bytes (the plan aligns to 16 floats = 64 B)
-- Returns { peak, peak_at, saved_per_layer, saved_parts = {name -> bytes per layer},
--   unplanned (sum of every buffer: no reuse), buffers = count }.
function F.activation_memory(m, B, T, o)
  local d = F.dims(m)
  local N = B * T
  local by = o.bytes or { act = 4, stat = 4, mm = 4 }
  local align = o.align or 64
  local flash = o.attention == "flash"
  local rec = o.recompute or "none"
  local ln = m.norm == "layernorm"
  local rope = m.position == "rope"
  local qkn = m.qk_norm and true or false
  local size, layer_of = {}, {}
  local ops, labels = {}, {}
  local function buf(name, elems, cls, layer)
    if size[name] == nil then
      local b = elems * (by[cls] or by.act)
      size[name] = ((b + align - 1) // align) * align
      layer_of[name] = layer
    end
    return name
  end
  local function op(label, ...) ops[#ops + 1] = { ... }; labels[#ops] = label end

  local function layer_fwd(l, pre, xin, with_out)
    local s = {}
    local t = pre .. "l" .. l .. "."
    s.x = xin
    s.ln1 = buf(t .. "ln1", N * d.C, "mm", l)
    s.st1 = buf(t .. "ln1.stats", (ln and 2 or 1) * N, "stat", l)
    op("forward layer " .. l, s.x, s.ln1, s.st1)
    s.qkv = buf(t .. "qkv", N * d.qkv, "act", l)
    op("forward layer " .. l, s.ln1, s.qkv)
    local q = s.qkv
    if qkn then
      s.qkvn = buf(t .. "qkvn", N * d.qkv, "act", l)
      s.qkr = buf(t .. "qk_rstd", N * (d.NH + d.NKV), "stat", l)
      op("forward layer " .. l, q, s.qkvn, s.qkr)
      q = s.qkvn
    end
    if rope then
      s.qkvr = buf(t .. "qkvr", N * d.qkv, "act", l)
      op("forward layer " .. l, q, s.qkvr)
      q = s.qkvr
    end
    s.qin = q
    s.atty = buf(t .. "atty", N * d.NH * d.hd, "mm", l)
    if flash then
      s.lse = buf(t .. "lse", B * d.NH * T, "stat", l)
      op("forward layer " .. l, s.qin, s.atty, s.lse)
    else
      s.att = buf(t .. "att", B * d.NH * T * T, "act", l)
      op("forward layer " .. l, s.qin, s.atty, s.att)
    end
    s.attp = buf(t .. "attproj", N * d.C, "act", l)
    op("forward layer " .. l, s.atty, s.attp)
    s.xm = buf(t .. "xmid", N * d.C, "act", l)
    op("forward layer " .. l, s.x, s.attp, s.xm)
    s.ln2 = buf(t .. "ln2", N * d.C, "mm", l)
    s.st2 = buf(t .. "ln2.stats", (ln and 2 or 1) * N, "stat", l)
    op("forward layer " .. l, s.xm, s.ln2, s.st2)
    s.fch = buf(t .. "fch", N * d.fc, "act", l)
    op("forward layer " .. l, s.ln2, s.fch)
    s.fca = buf(t .. "fch_act", N * d.H, "mm", l)
    op("forward layer " .. l, s.fch, s.fca)
    if with_out then
      s.fcp = buf(t .. "fcproj", N * d.C, "act", l)
      op("forward layer " .. l, s.fca, s.fcp)
      s.out = buf("x" .. (l + 1), N * d.C, "act", l + 1)
      op("forward layer " .. l, s.xm, s.fcp, s.out)
    end
    return s
  end

  -- forward
  local x = buf("x0", N * d.C, "act", 0)
  op("embedding", x)
  local saved = {}
  for l = 0, d.L - 1 do
    saved[l] = layer_fwd(l, rec == "none" and "" or "f:", x, true)
    x = saved[l].out
  end
  local lnf = buf("lnf", N * d.C, "mm")
  local stf = buf("lnf.stats", (ln and 2 or 1) * N, "stat")
  op("final norm", x, lnf, stf)
  local logits = buf("logits", N * d.Vp, "act")
  op("lm head", lnf, logits)
  -- backward
  local losses = buf("losses", N, "stat")
  op("loss", logits, losses)
  local dlnf = buf("d:lnf", N * d.C, "act")
  op("lm head backward", logits, lnf, dlnf)
  local dx = buf("d:x" .. d.L, N * d.C, "act")
  op("final norm backward", dlnf, x, stf, dx)
  for l = d.L - 1, 0, -1 do
    local s = saved[l]
    local at = "backward layer " .. l
    if rec == "full" then
      s = layer_fwd(l, "r:", s.x, false)
      at = "backward layer " .. l .. " (after recompute)"
    elseif rec == "selective" and not flash then
      local att = buf("r:l" .. l .. ".att", B * d.NH * T * T, "act", l)
      op("recompute attention " .. l, s.qin, att)
      s = setmetatable({ att = att }, { __index = s })
    end
    local t = "d:l" .. l .. "."
    local dfca = buf(t .. "fch_act", N * d.H, "act", l)
    op(at, dx, s.fca, dfca)
    local dfch = buf(t .. "fch", N * d.fc, "act", l)
    op(at, dfca, s.fch, dfch)
    local dln2 = buf(t .. "ln2", N * d.C, "act", l)
    op(at, dfch, s.ln2, dln2)
    local dxm = buf(t .. "xmid", N * d.C, "act", l)
    op(at, dln2, s.xm, s.st2, dxm)
    op(at, dx, dxm)
    local datty = buf(t .. "atty", N * d.NH * d.hd, "act", l)
    op(at, dxm, s.atty, datty)
    local dq = buf(t .. (qkn and not rope and "qkvn" or rope and "qkvr" or "qkv"), N * d.qkv, "act", l)
    if flash then
      local delta = buf(t .. "delta", B * d.NH * T, "stat", l)
      op(at, datty, s.qin, s.atty, s.lse, dq, delta)
    else
      local datt = buf("scratch:l" .. l .. ".att", B * d.NH * T * T, "act", l)
      op(at, datty, s.qin, s.att, dq, datt)
    end
    if rope then
      local dsrc = buf(t .. (qkn and "qkvn" or "qkv"), N * d.qkv, "act", l)
      op(at, dq, dsrc)
      dq = dsrc
    end
    if qkn then
      local dqkv = buf(t .. "qkv", N * d.qkv, "act", l)
      op(at, dq, s.qkv, s.qkr, dqkv)
      dq = dqkv
    end
    local dln1 = buf(t .. "ln1", N * d.C, "act", l)
    op(at, dq, s.ln1, dln1)
    local dxl = buf("d:x" .. l, N * d.C, "act", l)
    op(at, dln1, s.x, s.st1, dxl)
    op(at, dxm, dxl)
    dx = dxl
  end
  op("embedding backward", dx)

  -- lifetimes, then the peak of live bytes over the schedule (the losses stay alive to the end)
  local first, last = {}, {}
  for i, o_ in ipairs(ops) do
    for _, nm in ipairs(o_) do
      if not first[nm] then first[nm] = i end
      last[nm] = i
    end
  end
  last[losses] = #ops
  local delta = {}
  for i = 1, #ops + 1 do delta[i] = 0 end
  local unplanned, count = 0, 0
  local fwd_end = 0
  for i, lbl in ipairs(labels) do if lbl == "lm head" then fwd_end = i end end
  local saved_parts, saved_l = {}, 0
  for nm, sz in pairs(size) do
    if first[nm] then
      delta[first[nm]] = delta[first[nm]] + sz
      delta[last[nm] + 1] = delta[last[nm] + 1] - sz
      unplanned = unplanned + sz
      count = count + 1
      -- stored between forward and backward by the middle layer's view (layer 0)
      if layer_of[nm] == 0 and first[nm] <= fwd_end and last[nm] > fwd_end and nm ~= "x1" then
        local part = nm:gsub("^[fr]:", ""):gsub("^l0%.", "")
        saved_parts[part] = sz
        saved_l = saved_l + sz
      end
    end
  end
  local live, peak, peak_i = 0, 0, 1
  for i = 1, #ops do
    live = live + delta[i]
    if live > peak then peak, peak_i = live, i end
  end
  return { peak = peak, peak_at = labels[peak_i], saved_per_layer = saved_l, saved_parts = saved_parts,
    unplanned = unplanned, buffers = count, tokens = N }
end

return F
