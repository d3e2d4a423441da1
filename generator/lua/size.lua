-- size.lua — `gen size`: sizing and cost of a training run. It answers the seeds'
-- cost questions with the throughput model of seed 004 and the memory model of formulas.lua,
-- from the same model and hardware specs the generator uses: tokens/s per GPU and what bounds
-- it (compute / memory / network), GPUs and $/hr for a target throughput, $ per TB/s·hr, memory
-- per GPU (ZeRO stage, recompute, flash attention, FP8) with a fits / does-not-fit verdict,
-- Chinchilla-optimal tokens and the time and cost to train them, and a comparison of cluster
-- shapes (seed 001's 1× H100 vs 2× H100 vs 4× A100 question). Every formula lives in
-- formulas.lua; this file only gathers the inputs (each labelled with where it came from) and
-- runs the model. The flags are read and checked by size_cli.lua, the table and JSON written by
-- size_report.lua, the SVG charts (--plot FILE) drawn by size_svg.lua. It never parses a flag.
local U = require("util")
local F = require("formulas")
local T = require("tree")
local Cli = require("size_cli")
local R = require("size_report")
local Svg = require("size_svg")
local Perf = require("perf")
local Mesh = require("size_mesh")
local Z = {}

local GiB = 1024 ^ 3
local SEED4 = "seed 004 default"
local DTYPE = {
  fp32 = { b = 4, bg = 4, peaks = { "fp32" } },
  bf16 = { b = 2, bg = 2, peaks = { "bf16", "fp16" } },
  fp8 = { b = 1, bg = 2, peaks = { "fp8" } },
}

-- Below, `o` is always the checked options of size_cli.read: numbers and choices already
-- validated, so the model code only reads them.

-- ---- the model ---------------------------------------------------------------------------

local function get_model(tree, o, inputs)
  local m, src
  if o["--model"] then
    local doc, path = T.load_model(tree, o["--model"])
    m = U.plain(doc)
    src = path
  end
  local N, L, D = o["--params"], o["--layers"], o["--d-model"]
  if not m then
    if not (N and L and D) then
      U.fail("<command line>", "gen size needs --model, or all of --params, --layers and --d-model",
        "e.g. gen size --model gpt2-124m, or gen size --params 7e9 --layers 32 --d-model 4096")
    end
    local nh = (D % 64 == 0) and D // 64 or 1
    m = { name = "custom", arch = "gpt2", vocab_size = 50257, context = 1 << 16, d_model = D,
      n_layers = L, n_heads = nh, ffn_hidden = 4 * D, norm = "layernorm", activation = "gelu",
      position = "learned", tied_embeddings = true }
    src = "assumed shape (no --model): GPT-2-like, head dim 64, ffn 4·d, vocab 50257"
  else
    if D and D % m.n_heads ~= 0 then
      U.fail("<command line>", string.format("--d-model %d is not divisible by %s's n_heads %d", D, m.name, m.n_heads),
        "choose a multiple of " .. m.n_heads)
    end
    if L then m.n_layers = L end
    if D then m.d_model = D end
  end
  local counted = F.param_count(m)
  inputs.N = { value = (N or counted) + 0.0, source = N and "--params" or ("F.param_count(" .. m.name .. ")") }
  if m.moe and not N then
    inputs.Na = { value = F.active_param_count(m) + 0.0, source = "F.active_param_count(" .. m.name
      .. "): the compute term's N; memory uses the total" }
  end
  inputs.L = { value = m.n_layers, source = L and "--layers" or ("model spec " .. src) }
  inputs.d = { value = m.d_model, source = D and "--d-model" or ("model spec " .. src) }
  return m, src, counted
end

-- ---- hardware ------------------------------------------------------------------------------

local function set_path(h, key, v)
  local a, b = key:match("^([^.]+)%.(.+)$")
  if a then h[a] = h[a] or {}; h[a][b] = v else h[key] = v end
end

local function load_hw(tree, spec, sets)
  local doc, path = T.load_hardware(tree, spec)
  local h = U.plain(doc)
  h.path = path
  h.overrides = U.array()
  for _, s in ipairs(sets) do
    if s.hw == nil or s.hw == h.name or s.hw == spec then
      set_path(h, s.key, s.value)
      h.overrides[#h.overrides + 1] = s.text
    end
  end
  return h
end

local function default_hw_names(tree)
  local names = {}
  for _, n in ipairs(T.list_names(tree, "hardware")) do
    local ok, doc = pcall(T.load_hardware, tree, n)
    if ok and doc.kind == "gpu" then names[#names + 1] = n end
  end
  table.sort(names)
  if #names == 0 then
    U.fail(tree.dir .. "/hardware", "no GPU hardware entries found", "give --hw NAME or a hardware YAML path")
  end
  return names
end

-- ---- the computation -------------------------------------------------------------------------

-- Global inputs of the throughput model, each {value, source}.
local function global_inputs(o, inputs, m)
  local function put(k, flag, dflt, src)
    local v = o[flag]
    inputs[k] = { value = v or dflt, source = v and flag or src }
  end
  put("k", "--k-flops", 6, SEED4 .. " (6 FLOPs/param/token: forward 2 + backward 4)")
  put("alpha", "--opt-bytes", 16, SEED4 .. " (Adam bf16 ≈ 16–20 B/param/step)")
  put("c", "--c-act", 6, SEED4 .. " (TrainingCfg c_act = 6)")
  put("B", "--tokens-per-step", 512000, SEED4 .. " (global_tokens_per_step = 512,000)")
  put("util", "--util", 0.75, SEED4 .. " (utilization 0.75)")
  for _, e in ipairs({ { "ec", "--eff-compute" }, { "em", "--eff-memory" }, { "en", "--eff-network" } }) do
    put(e[1], e[2], inputs.util.value, "--util")
  end
  local rec = o["--recompute"]
  inputs.recompute = { value = rec or "none", source = rec and "--recompute" or "default: no recompute" }
  local g = o["--recompute-mult"]
  if g then
    inputs.g = { value = g, source = "--recompute-mult" }
  elseif inputs.recompute.value == "full" then
    inputs.g = { value = 4 / 3, source = "--recompute full: the forward runs twice, (2+2+4)/(2+4) = 1.33" }
  elseif inputs.recompute.value == "selective" then
    -- the attention core's forward (QK^T and AV: 4·T·NH·hd FLOPs per token per layer) again
    local d = F.dims(m)
    local T_ = inputs.seq_for_g or math.min(m.context, 4096)
    local extra = 4 * d.L * d.NH * d.hd * T_
    inputs.g = { value = 1 + extra / (6 * inputs.N.value),
      source = string.format("--recompute selective: 1 + 4·L·C·T/(6N), the attention core again (T = %d)", T_) }
  else
    inputs.g = { value = 1, source = SEED4 .. " (no recompute)" }
  end
end

-- Per-hardware settings: dtype, bytes, peak, attention, batch, seq, reserve.
local function hw_settings(o, h, notes)
  local gpu = h.kind == "gpu"
  local s = {}
  local dt = o["--dtype"]
  s.dtype = { value = dt or (gpu and "bf16" or "fp32"),
    source = dt and "--dtype" or (gpu and "default on GPUs: v2102 mixed precision (bf16)" or "default on CPUs: the CPU runtime trains in fp32") }
  local D = DTYPE[s.dtype.value]
  local b = o["--bytes"]
  s.b = { value = b or D.b, source = b and "--bytes" or ("--dtype " .. s.dtype.value) }
  local bg = o["--grad-bytes"]
  s.bg = { value = bg or D.bg, source = bg and "--grad-bytes" or ("--dtype " .. s.dtype.value) }
  local os_ = o["--opt-state"]
  s.opt_state = { value = os_ or "f32", source = os_ and "--opt-state" or "default: Adam's m and v in fp32" }
  local key
  for _, k in ipairs(D.peaks) do if h.peak_tflops[k] and h.peak_tflops[k] > 0 then key = k; break end end
  if not key then
    if s.dtype.value == "fp8" and (h.peak_tflops.bf16 or 0) > 0 then
      key = "bf16"
      notes[#notes + 1] = string.format("%s has no fp8 peak (FP8 tensor cores need sm_89+): its rate uses peak_tflops.bf16", h.name)
    elseif s.dtype.value ~= "fp32" and h.peak_tflops.fp32 and h.peak_tflops.fp32 > 0 then
      key = "fp32"
      notes[#notes + 1] = string.format("%s has no %s peak: its rate uses peak_tflops.fp32", h.name, s.dtype.value)
    else
      U.fail(h.path, string.format("peak_tflops has no positive entry for --dtype %s", s.dtype.value),
        "add peak_tflops." .. D.peaks[1] .. " or --set " .. h.name .. ".peak_tflops." .. D.peaks[1] .. "=...")
    end
  end
  s.peak_key = key
  local att = o["--attention"]
  s.attention = { value = att or (gpu and "flash" or "naive"),
    source = att and "--attention" or (gpu and "default on GPUs: FlashAttention (v2112-v2114)" or "default on CPUs: the CPU runtime's naive attention") }
  return s
end

local function min_zero3(N, dt, bg, m, act, res, cap, opt_state)
  local full = F.model_state(N, { dtype = dt, stage = 3, p = 1, grad_bytes = bg, opt_state = opt_state,
    q8_f32_params = F.q8_f32_params(m) })
  local gather = 2 * F.gather_params(m) * F.STATE_BYTES[dt].param
  local room = cap - act - res - gather
  if room <= 0 then return nil end
  return math.max(1, math.ceil(full.total / room))
end

local function memory_for(o, h, m, N, S, inputs, p, stage)
  local gpu = h.kind == "gpu"
  local bsz = o["--batch"]
  local seq = o["--seq"]
  local B = bsz or (gpu and 1 or 8)
  local Tn = seq or math.min(m.context, gpu and 4096 or 256)
  if seq and seq > m.context and inputs.model_named then
    U.fail("<command line>", string.format("--seq %d is longer than %s's context %d", seq, m.name, m.context), "choose a smaller --seq")
  end
  local reserve = o["--reserve-gb"]
  local res = (reserve or (gpu and 1 or 0)) * GiB
  local dt = S.dtype.value
  local bytes
  if dt == "fp32" then bytes = { act = 4, stat = 4, mm = 4 }
  elseif dt == "fp8" then bytes = { act = 2, stat = 4, mm = 1 }
  else bytes = { act = 2, stat = 4, mm = 2 } end
  -- v2167 memory planning aligns every buffer to 256 B (its default); without it the plan gives
  -- every buffer its own region, 16 floats (64 B) aligned
  local planning = inputs.planning.value == "on"
  local opts = { attention = S.attention.value, recompute = inputs.recompute.value, bytes = bytes, align = 256 }
  local act = F.activation_memory(m, B, Tn, opts)
  local act_np = F.activation_memory(m, B, Tn, { attention = S.attention.value, recompute = inputs.recompute.value,
    bytes = bytes, align = 64 })
  local act_bytes = planning and act.peak or act_np.unplanned
  local state = F.model_state(N, { dtype = dt, stage = stage, p = p, grad_bytes = S.bg.value, opt_state = S.opt_state.value,
    q8_f32_params = F.q8_f32_params(m), layer_params = F.gather_params(m) })
  local per_layer = {}
  for _, a in ipairs({ "naive", "flash" }) do
    for _, r in ipairs({ "none", "selective", "full" }) do
      local x = F.activation_memory(m, B, Tn, { attention = a, recompute = r, bytes = bytes, align = planning and 256 or 64 })
      per_layer[a .. "/" .. r] = { saved_per_layer = x.saved_per_layer, peak = planning and x.peak or x.unplanned }
    end
  end
  local cap = h.memory_gb * GiB
  local total = state.total + act_bytes + res
  return {
    inputs = {
      batch = { value = B, source = bsz and "--batch" or (gpu and "default on GPUs: 1 sequence per micro-batch" or "plan.lua's default batch (8)") },
      seq = { value = Tn, source = seq and "--seq" or (gpu and "default on GPUs: min(context, 4096)" or "plan.lua's default: min(context, 256)") },
      reserve_gb = { value = res / GiB, source = reserve and "--reserve-gb" or (gpu and "assumption: CUDA context and workspaces ≈ 1 GiB (not measured)" or "default on CPUs: 0") },
      zero_stage = { value = stage, source = inputs.stage.source },
      shards = { value = p, source = "--dp" },
    },
    params = state.params, grads = state.grads, optimizer = state.optimizer, fp8_extra = state.fp8_extra,
    gather = state.gather, model_state = state.total, activations = act_bytes, activations_peak = act.peak,
    activations_peak_at = act.peak_at, activations_unplanned = act_np.unplanned, memory_planning = planning,
    saved_per_layer = act.saved_per_layer, saved_parts = act.saved_parts,
    reserve = res, total = total, capacity = cap, fits = total <= cap, margin = cap - total,
    per_layer = per_layer,
    -- the smallest p for which ZeRO-3 / FSDP fits: state/p + gather + activations + reserve <= cap,
    -- with the chosen recompute and with full recompute
    min_gpus_zero3 = min_zero3(N, dt, S.bg.value, m, act_bytes, res, cap, S.opt_state.value),
    min_gpus_zero3_full_recompute = min_zero3(N, dt, S.bg.value, m, per_layer[S.attention.value .. "/full"].peak, res, cap, S.opt_state.value),
  }
end

local function throughput_for(h, S, inputs, p, strict)
  if strict and p > 1 and h.nic_gbps <= 0 then
    U.fail(h.path, string.format("%s has nic_gbps 0, so %d data-parallel GPUs cannot exchange gradients", h.name, p),
      "use one GPU, or give it a network: --set " .. h.name .. ".nic_gbps=100")
  end
  return F.throughput({ N = inputs.N.value, Na = inputs.Na and inputs.Na.value, L = inputs.L.value, d = inputs.d.value, b = S.b.value,
    k = inputs.k.value, g = inputs.g.value, alpha = inputs.alpha.value, c = inputs.c.value, B = inputs.B.value,
    bg = S.bg.value, p = p, peak_flops = h.peak_tflops[S.peak_key] * 1e12, hbm_Bps = h.hbm_tbps * 1e12,
    nic_gbps = h.nic_gbps, ec = inputs.ec.value, em = inputs.em.value, en = inputs.en.value })
end

-- --dp auto: the least p with p >= target / rate(p) (rate falls as p grows, so iterating
-- p <- ceil(target / rate(p)) from 1 climbs to it). Returns p, reachable. When the network term
-- keeps the cluster below the target at any size, returns the p where the cluster is fastest:
-- p·r_network(p) = K·p/(p−1) with K = e_n·nic_Bps·B/(2·N·b_g) falls with p while p·min(r_compute,
-- r_memory) grows, so the best p is next to their crossing, p = 1 + K/r.
local function solve_dp(h, S, inputs, target)
  local p = 1
  for _ = 1, 200 do
    local th = throughput_for(h, S, inputs, p)
    if th.rate <= 0 then break end
    local q = math.max(1, math.ceil(target / th.rate - 1e-9))
    if q <= p then return p, true end
    if q > 1e8 then break end
    p = q
  end
  local th1 = throughput_for(h, S, inputs, 1)
  local r = math.min(th1.r_compute, th1.r_memory)
  local K = inputs.en.value * h.nic_gbps * 1e9 / 8 * inputs.B.value / (2 * inputs.N.value * S.bg.value)
  local best, best_tps = 1, r
  for _, c in ipairs({ math.floor(1 + K / r), math.ceil(1 + K / r) }) do
    if c >= 2 and c < 1e9 then
      local tps = c * throughput_for(h, S, inputs, c).rate
      if tps > best_tps then best, best_tps = c, tps end
    end
  end
  return best, false
end

-- ---- main ----------------------------------------------------------------------------------

function Z.main(args, parse)
  local o = Cli.read(parse(args, Cli.FLAGS, 0))
  if o["--help"] or o["-h"] then io.write(Cli.HELP); return 0 end
  local tree = o.tree
  -- --plan DIR: the plan-based rate of generator/lua/perf.lua where a generated trainer exists
  local plan_dir, plan, manifest = o["--plan"], nil, nil
  if plan_dir then
    plan, manifest = Perf.load_dir(plan_dir)
    if o["--model"] and o["--model"] ~= plan.model.name then
      U.fail("<command line>", string.format("--model %s but %s/plan.json trains %s", o["--model"], plan_dir, plan.model.name),
        "drop --model, or give the plan of that model")
    end
    o["--model"] = plan.model.name
  end
  local inputs = {}
  local notes = {}
  local m, msrc, counted = get_model(tree, o, inputs)
  inputs.model_named = o["--model"] ~= nil
  local N = inputs.N.value
  if o["--params"] and o["--model"] then
    notes[#notes + 1] = string.format("--params %s replaces %s's counted %s parameters in every formula", R.si(N), m.name, R.si(counted))
  end

  -- sequence for the selective-recompute multiplier: the same default as the memory estimate
  inputs.seq_for_g = o["--seq"]
  global_inputs(o, inputs, m)
  inputs.seq_for_g = nil

  local target = o["--target-tps"]
  inputs.target = { value = target, source = target and "--target-tps" or "not given" }
  local gpus_flag = o["--gpus"]
  local dp_auto = o["--dp"] == "auto"
  local dp = not dp_auto and o["--dp"] or nil
  inputs.dp = { value = dp_auto and "auto" or (dp or gpus_flag or 1),
    source = dp_auto and "--dp auto: the GPU count for --target-tps" or (dp and "--dp" or (gpus_flag and "--gpus" or SEED4 .. " (p = 1: no network term)")) }
  local zero = o["--zero"]
  local stage = o["--fsdp"] and 3 or (zero or 0)
  inputs.stage = { value = stage, source = o["--fsdp"] and "--fsdp (full sharding = ZeRO-3)" or (zero and "--zero" or "default: stage 0, everything replicated") }

  local mp = o["--memory-planning"]
  inputs.planning = { value = mp or "on", source = mp and "--memory-planning" or
    "default: v2167 memory planning on (gen --enable memory-planning): activations = the peak of live buffers; off = every buffer its own region" }

  local tokens = o["--tokens"]
  -- v2146 --fit FILE: the law `gen scaling fit` fitted to the user's runs replaces the 20 × N rule
  local fit = o["--fit"] and require("scaling").load(o["--fit"]) or nil
  if o["--chinchilla"] then tokens = fit and require("scaling").tokens_for(fit.law, N) or F.chinchilla_tokens(N) end
  if tokens then
    inputs.tokens = { value = tokens, source = o["--chinchilla"] and (fit and ("--chinchilla --fit: the compute-optimal tokens of the law in " .. o["--fit"] .. " (v2146)")
      or "--chinchilla: 20 × N (Chinchilla, v2146)") or "--tokens" }
  end
  local budget = o["--flops-budget"]

  -- hardware
  local specs = o["--hw"]
  local hw_src = "--hw"
  if not specs or #specs == 0 then specs = default_hw_names(tree); hw_src = "default: every GPU entry in " .. tree.dir .. "/hardware" end
  -- names for --set targeting: the names as given and the files' names
  local given = {}
  for _, s in ipairs(specs) do given[#given + 1] = (U.basename(s):gsub("%.ya?ml$", "")) end
  local cluster_items = o.cluster_items
  for _, c in ipairs(cluster_items) do given[#given + 1] = (U.basename(c.spec):gsub("%.ya?ml$", "")) end
  local sets = Cli.parse_sets(o, given)
  local hws = {}
  for _, s in ipairs(specs) do hws[#hws + 1] = load_hw(tree, s, sets) end

  local results = {}
  for _, h in ipairs(hws) do
    local S = hw_settings(o, h, notes)
    local p = dp or gpus_flag or 1
    local unreachable = false
    if dp_auto then
      local reachable
      p, reachable = solve_dp(h, S, inputs, target)
      unreachable = not reachable
    end
    local th = throughput_for(h, S, inputs, p, true)
    if plan then
      if not h.perf then
        U.fail(h.path, "no perf section: --plan needs the performance model's inputs", "add a perf: section (see specs/hardware/h100-sxm.yaml)")
      end
      local pr = Perf.predict(plan, manifest, h, { gpus = p })
      th.seed4_rate = th.rate
      th.rate = pr.tokens_per_s_per_gpu
      th.bound = "plan"
      th.plan = { step_s = pr.step, mfu = pr.mfu, launches = pr.launches, top_op = pr.ops[1] and pr.ops[1].key,
        dir = plan_dir, B = plan.train.B, T = plan.train.T }
      notes[#notes + 1] = string.format("%s: tok/s/GPU %s from the performance model of %s (B=%d, T=%d, what that trainer executes; gen perf %s --hw %s); the seed-004 formula gives %s",
        h.name, R.si(th.rate), plan_dir, plan.train.B, plan.train.T, plan_dir, h.name, R.si(th.seed4_rate))
    end
    local r = { name = h.name, title = h.title, kind = h.kind, path = h.path, overrides = h.overrides,
      price_per_hr = h.price_per_hr, hbm_tbps = h.hbm_tbps, nic_gbps = h.nic_gbps, memory_gb = h.memory_gb,
      peak_key = S.peak_key, peak_flops = h.peak_tflops[S.peak_key] * 1e12, settings = S, p = p,
      throughput = th, unreachable = unreachable }
    r.achieved_tflops = th.rate * th.flops_per_token / 1e12
    if target and not unreachable then
      r.cluster = F.cluster(th, target, h.price_per_hr, h.hbm_tbps)
      r.cluster.for_target = true
    else
      -- no target: the cluster is the p data-parallel GPUs
      r.cluster = F.cluster(th, p * th.rate, h.price_per_hr, h.hbm_tbps)
      r.cluster.gpus = p
      r.cluster.usd_per_hr = p * h.price_per_hr
    end
    r.memory = memory_for(o, h, m, N, S, inputs, p, stage)
    if o["--mesh"] then -- a dp x pp x cp x tp mesh of the --gpus (generator/lua/size_mesh.lua)
      local G = gpus_flag
      if not G then U.fail("<command line>", "--mesh needs the GPU count", "add --gpus G (e.g. --gpus 64)") end
      local mem1 = memory_for(o, h, m, N, S, inputs, 1, 0) -- the unsharded figures the mesh divides
      local ctx = { m = m, N = N, h = h, S = S, mem = mem1, inputs = inputs, G = G, stage = stage }
      local res = { G = G, hw = h.name, per_node = h.gpus_per_node or (h.kind == "gpu" and 8 or 1),
        link = (h.perf and h.perf.link_name) or "the NIC" }
      if o["--mesh"] == "auto" then
        local all = Mesh.search(ctx)
        res.auto, res.rows = true, {}
        for i = 1, math.min(6, #all) do res.rows[i] = all[i] end
        res.best = all[1] and all[1].fits and all[1] or nil
      else
        local q = Mesh.parse(o["--mesh"])
        local one = Mesh.evaluate(ctx, q.tp, q.pp, q.cp)
        if one.invalid then U.fail("<command line>", "--mesh " .. o["--mesh"] .. ": " .. one.invalid, "choose sizes that divide, or --mesh auto") end
        res.rows = { one }
      end
      r.mesh = res
    end
    if tokens then
      local G = gpus_flag or (target and r.cluster.gpus) or p
      r.train = F.train_cost(tokens, th.rate, G, h.price_per_hr)
      r.train.gpus = G
      r.train.tokens = tokens
    end
    results[#results + 1] = r
  end
  if target then
    table.sort(results, function(a, b)
      if a.cluster.usd_per_hr ~= b.cluster.usd_per_hr then return a.cluster.usd_per_hr < b.cluster.usd_per_hr end
      return a.name < b.name
    end)
  end

  -- cluster shapes (seed 001: 1× H100 vs 2× H100 vs 4× A100 40GB)
  local clusters
  if #cluster_items > 0 then
    if not tokens then
      U.fail("<command line>", "--clusters compares the time and cost of training a token count", "add --tokens T or --chinchilla")
    end
    clusters = {}
    for _, c in ipairs(cluster_items) do
      local h = load_hw(tree, c.spec, sets)
      local S = hw_settings(o, h, notes)
      local th = throughput_for(h, S, inputs, c.n, true)
      local tc = F.train_cost(tokens, th.rate, c.n, h.price_per_hr)
      local mem = memory_for(o, h, m, N, S, inputs, c.n, stage)
      clusters[#clusters + 1] = { shape = c.n .. "x" .. h.name, gpus = c.n, hardware = h.name,
        rate_per_gpu = th.rate, bound = th.bound, tokens_per_s = th.rate * c.n, usd_per_hr = c.n * h.price_per_hr,
        hours = tc.hours, usd = tc.usd, gpu_hours = tc.gpu_hours, fits = mem.fits, memory_total = mem.total,
        capacity = mem.capacity }
    end
    local cheapest = math.huge
    for _, c in ipairs(clusters) do cheapest = math.min(cheapest, c.usd) end
    for _, c in ipairs(clusters) do c.cost_vs_cheapest = c.usd / cheapest end
  end

  local chin = { tokens_per_param = F.CHINCHILLA_TOKENS_PER_PARAM, optimal_tokens = F.chinchilla_tokens(N),
    train_flops = 6 * N * F.chinchilla_tokens(N) }
  if budget then
    local co = F.compute_optimal(budget)
    chin.budget = { flops = budget, params = co.params, tokens = co.tokens }
  end
  if fit then chin.fit = require("scaling").size_section(fit, o["--fit"], N, tokens, budget) end

  if o["--plot"] then
    local title = string.format("%s (%s params): %s", m.name, R.si(N),
      target and string.format("$/hr for %s tokens/s", R.si(target)) or "roofline")
    local svg = target and Svg.bars(results, title) or Svg.roofline(results, title)
    local ok, err = hyp.write_file(o["--plot"], svg)
    if not ok then U.fail(o["--plot"], "cannot write the plot: " .. tostring(err), "check the path and permissions") end
  end

  if o["--json"] then
    return R.emit_json(m, msrc, inputs, results, clusters, chin, notes, hw_src, o)
  end
  io.write(R.text(m, msrc, inputs, results, clusters, chin, notes, hw_src, o))
  for _, r in ipairs(results) do if r.mesh then io.write(Mesh.text(r.mesh)) end end
  return 0
end

return Z
