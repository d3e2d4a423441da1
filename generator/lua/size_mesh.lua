-- size_mesh.lua — `gen size --gpus G --mesh auto|tp=T,pp=P,cp=C`: a device mesh dp x pp x cp x tp
-- for a model on a GPU type, sized the way Megatron-LM users size one (Narayanan et al. 2021,
-- "Efficient Large-Scale Language Model Training on GPU Clusters"; Korthikanti et al. 2022 for
-- sequence-parallel activations; Liu et al. 2023 for ring attention): memory per GPU, bytes each
-- GPU sends per step on each axis, the pipeline bubble and a step time. A planning model of
-- formulas (generated cpu trainers run tp, pp and cp — v2106-v2108, v2116 — each beside dp only).
-- Never: reads a plan, or claims a figure was measured.
local F = require("formulas")
local U = require("util")

local M = {}

local function ring(n) return n > 1 and 2 * (n - 1) / n or 0 end

-- "tp=8,pp=2,cp=1" -> {tp, pp, cp}; each a positive integer, unknown keys refused
function M.parse(spec)
  local r = { tp = 1, pp = 1, cp = 1 }
  for item in tostring(spec):gmatch("[^,]+") do
    local k, v = item:match("^%s*(%a+)%s*=%s*(%d+)%s*$")
    if not k or r[k] == nil or tonumber(v) < 1 then
      U.fail("<command line>", "--mesh item '" .. item .. "' is not tp=N, pp=N or cp=N (N >= 1)", "e.g. --mesh tp=8,pp=2 or --mesh auto")
    end
    r[k] = math.tointeger(tonumber(v))
  end
  return r
end

-- The figures of one mesh. ctx: m (model), N, h (hardware), S (its settings), mem (memory_for's
-- result: micro-batch, seq, saved activations per layer), inputs (k, g, B tokens/step, e_c), G.
function M.evaluate(ctx, tp, pp, cp)
  local m, N, h, S, mem, inputs, G = ctx.m, ctx.N, ctx.h, ctx.S, ctx.mem, ctx.inputs, ctx.G
  local d = F.dims(m)
  local L, C, NH, NKV, hd = d.L, d.C, d.NH, d.NKV, d.hd
  local b, s = mem.inputs.batch.value, mem.inputs.seq.value
  local r = { tp = tp, pp = pp, cp = cp }
  local why
  if G % (tp * pp * cp) ~= 0 then why = string.format("tp·pp·cp = %d does not divide %d GPUs", tp * pp * cp, G)
  elseif NH % tp ~= 0 or NKV % tp ~= 0 then why = string.format("tp %d does not divide the %d heads / %d KV heads", tp, NH, NKV)
  elseif L % pp ~= 0 then why = string.format("pp %d does not divide the %d layers", pp, L)
  elseif s % (2 * cp) ~= 0 then why = string.format("cp %d: the sequence %d is not a multiple of 2·cp (the load-balanced causal split)", cp, s) end
  if why then r.invalid = why; return r end
  local dp = G // (tp * pp * cp)
  r.dp = dp
  local tokens = inputs.B.value
  local mb = math.max(1, math.floor(tokens / (dp * b * s) + 0.5)) -- micro-batches per pipeline per step
  r.micro_batches = mb
  local ab = S.b.value
  -- memory: the model state of the rank's 1/(tp·pp) of the parameters, ZeRO over dp; activations
  -- sharded over tp (sequence parallel) and cp, L/pp layers, 1F1B keeps min(pp, mb) micro-batches
  -- in flight on the first stage; the step's transient peak beyond the saved layers likewise
  local stage = ctx.stage
  local state = F.model_state(N / (tp * pp), { dtype = S.dtype.value, stage = stage, p = dp, grad_bytes = S.bg.value,
    opt_state = S.opt_state.value, q8_f32_params = F.q8_f32_params(m) / (tp * pp), layer_params = F.gather_params(m) / tp })
  local saved = mem.saved_per_layer
  local transient = math.max(0, mem.activations - L * saved)
  local acts = (saved * (L / pp) * math.min(pp, mb) + transient) / (tp * cp)
  r.memory = { state = state.total, activations = acts, reserve = mem.reserve,
    total = state.total + acts + mem.reserve, capacity = mem.capacity }
  r.fits = r.memory.total <= r.memory.capacity
  -- bytes sent per GPU per step, by axis
  local tok_mb = b * s / cp -- tokens of one micro-batch on one rank
  local layers = L / pp
  local bytes = {
    tp = layers * mb * 4 * ring(tp) * tok_mb * C * ab,                     -- 2 fwd + 2 bwd all-reduce (or RS+AG) per layer
    cp = cp > 1 and layers * mb * 3 * (cp - 1) * 2 * tok_mb * NKV * hd * ab or 0, -- K,V blocks around the ring: fwd once, bwd twice
    pp = pp > 1 and mb * 2 * tok_mb * C * ab / tp or 0,                     -- activation forward, its gradient back (scatter/gather over tp)
    dp = ring(dp) * (N / (tp * pp)) * S.bg.value + (stage >= 3 and 2 * (dp - 1) / dp * (N / (tp * pp)) * F.STATE_BYTES[S.dtype.value].param or 0),
  }
  r.bytes = bytes
  -- placement: tp innermost, then cp, pp, dp; an axis whose group fits in a node uses NVLink
  local per_node = h.gpus_per_node or (h.kind == "gpu" and 8 or 1)
  local perf = h.perf or {}
  local eff = perf.eff or {}
  local link = (perf.link_gbps or 0) * 1e9 * (eff.link or 0.8)
  local nic = (h.nic_gbps or 0) / 8 * 1e9 * (eff.nic or 0.8)
  local inner, bw, where = 1, {}, {}
  for _, ax in ipairs({ { "tp", tp }, { "cp", cp }, { "pp", pp }, { "dp", dp } }) do
    inner = inner * ax[2]
    local intra = inner <= per_node and link > 0
    bw[ax[1]], where[ax[1]] = intra and link or nic, intra and (perf.link_name or "NVLink") or "NIC"
  end
  r.where = where
  local t = {}
  for ax, by in pairs(bytes) do t[ax] = by > 0 and (bw[ax] > 0 and by / bw[ax] or math.huge) or 0 end
  r.comm_s = t
  -- compute: k·g·N FLOPs per token over the GPUs; the bubble stretches it by 1/(1 - bubble)
  local peak = h.peak_tflops[S.peak_key] * 1e12 * inputs.ec.value
  local tc = inputs.k.value * inputs.g.value * N * tokens / G / peak
  local bubble = (pp - 1) / (mb + pp - 1)
  r.bubble = bubble
  r.compute_s = tc
  -- exposed: tp and pp in the critical path; cp's ring passes behind the layer compute and dp's
  -- reduction behind the backward (2/3 of the compute) — only what exceeds them shows
  local exposed = t.tp + t.pp + math.max(0, t.cp - tc) + math.max(0, t.dp - tc * 2 / 3)
  r.step_s = tc / (1 - bubble) + exposed
  r.tokens_per_s_per_gpu = tokens / G / r.step_s
  r.mfu = inputs.k.value * N * r.tokens_per_s_per_gpu / (h.peak_tflops[S.peak_key] * 1e12)
  return r
end

-- Every valid mesh of G GPUs (tp up to a node, pp dividing L, cp up to 8), best first: those that
-- fit by step time, then the rest by memory.
function M.search(ctx)
  local out = {}
  local per_node = ctx.h.gpus_per_node or (ctx.h.kind == "gpu" and 8 or 1)
  local L = F.dims(ctx.m).L
  for tp = 1, per_node do
    for pp = 1, math.min(L, ctx.G) do
      for _, cp in ipairs({ 1, 2, 4, 8 }) do
        if tp * pp * cp <= ctx.G then
          local r = M.evaluate(ctx, tp, pp, cp)
          if not r.invalid then out[#out + 1] = r end
        end
      end
    end
  end
  table.sort(out, function(a, b)
    if a.fits ~= b.fits then return a.fits end
    if a.fits then
      if a.step_s ~= b.step_s then return a.step_s < b.step_s end
    elseif a.memory.total ~= b.memory.total then return a.memory.total < b.memory.total end
    return a.tp * 1000 + a.pp * 10 + a.cp < b.tp * 1000 + b.pp * 10 + b.cp
  end)
  return out
end

local function gib(x) return string.format("%.1f GiB", x / 2 ^ 30) end
local function gb(x) return x >= 1e9 and string.format("%.2f GB", x / 1e9) or string.format("%.0f MB", x / 1e6) end

function M.text(res)
  local lines = {}
  local function w(...) lines[#lines + 1] = string.format(...) end
  w("")
  w("mesh for %d GPUs on %s (%d per node): dp x pp x cp x tp — a planning model (generated trainers run v2106 tp, v2107 pp", res.G, res.hw, res.per_node)
  w("  and v2108 cp on the cpu target only, one axis beside dp). tp innermost, then cp, pp, dp; an axis inside a node uses %s.", res.link)
  w("  bytes = sent per GPU per step: tp 4 all-reduces/layer/micro-batch (sequence parallel), cp K/V around the ring (fwd 1x, bwd 2x),")
  w("  pp activations and gradients per micro-batch, dp the gradient all-reduce (+ ZeRO-3 gathers); exposed: tp, pp, cp beyond the")
  w("  compute, dp beyond the backward; step = compute / (1 - bubble) + exposed; bubble (pp-1)/(m+pp-1), m micro-batches per step")
  w("  %-16s %4s %6s %9s %9s %9s %9s %9s %8s %9s %10s %6s  %s", "mesh", "m", "bubble", "mem/GPU", "tp", "cp", "pp", "dp", "step", "tok/s/GPU", "MFU", "fits", "links (tp/cp/pp/dp)")
  for _, r in ipairs(res.rows) do
    w("  %-16s %4d %5.1f%% %9s %9s %9s %9s %9s %7.2fs %9.0f %9.1f%% %6s  %s/%s/%s/%s",
      string.format("dp%d pp%d cp%d tp%d", r.dp, r.pp, r.cp, r.tp), r.micro_batches, 100 * r.bubble, gib(r.memory.total),
      gb(r.bytes.tp), gb(r.bytes.cp), gb(r.bytes.pp), gb(r.bytes.dp), r.step_s, r.tokens_per_s_per_gpu, 100 * r.mfu,
      r.fits and "yes" or "NO", r.where.tp, r.where.cp, r.where.pp, r.where.dp)
  end
  if res.best then
    local r = res.best
    w("  suggested: tp %d, pp %d, cp %d, dp %d — %.0f tokens/s per GPU predicted, %s of %s per GPU", r.tp, r.pp, r.cp, r.dp,
      r.tokens_per_s_per_gpu, gib(r.memory.total), gib(r.memory.capacity))
  elseif res.auto then
    w("  no mesh of %d GPUs fits: more GPUs, --recompute full, --zero 1..3 or a smaller --batch/--seq", res.G)
  end
  return table.concat(lines, "\n") .. "\n"
end

return M
