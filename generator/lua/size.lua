-- size.lua — `gen size`: sizing and cost of a training run (issue 7). It answers the seeds'
-- cost questions with the throughput model of seed 004 and the memory model of formulas.lua,
-- from the same model and hardware specs the generator uses: tokens/s per GPU and what bounds
-- it (compute / memory / network), GPUs and $/hr for a target throughput, $ per TB/s·hr, memory
-- per GPU (ZeRO stage, recompute, flash attention, FP8) with a fits / does-not-fit verdict,
-- Chinchilla-optimal tokens and the time and cost to train them, and a comparison of cluster
-- shapes (seed 001's 1× H100 vs 2× H100 vs 4× A100 question). Every formula lives in
-- formulas.lua; this file only gathers the inputs (each labelled with where it came from),
-- and prints a table, JSON (--json) or an SVG chart (--plot FILE).
local U = require("util")
local F = require("formulas")
local T = require("tree")
local Z = {}

local HELP = [[
usage: gen size (--model M | --params N --layers L --d-model D) [--hw LIST] [options]

Sizes a training run with the throughput model of seed 004 and the memory model of
generator/lua/formulas.lua. Every default is printed with its source.

what to size
  --tree FILE          the tree whose models/ and hardware/ are used (default specs/v2500.yaml)
  --model M            a model name from specs/models, or a model YAML path
  --params N           parameters N (default: counted from the model spec)
  --layers L           layers L (default: the model's n_layers)
  --d-model D          width d (default: the model's d_model)
  --hw LIST            comma list of hardware names from specs/hardware or YAML paths
                       (repeatable; default: every GPU entry in specs/hardware)
  --set [HW.]KEY=V     override a hardware number: memory_gb, hbm_tbps, nic_gbps,
                       price_per_hr, sm, peak_tflops.{fp32,tf32,bf16,fp16,fp8}; without HW.
                       it applies to every hardware (repeatable), e.g. --set h100-sxm.price_per_hr=2.5

throughput model (seed 004)
  --dtype T            bf16 | fp32 | fp8: bytes per element b, gradient bytes, the peak_tflops
                       entry used and the model-state layout (default: bf16 on GPUs — v2102
                       mixed precision; fp32 on CPUs — what the CPU runtime trains in)
  --bytes B            bytes per activation element b (default from --dtype: 2, 4 or 1)
  --grad-bytes B       gradient bytes per element b_g (default from --dtype: 2, 4 or 2)
  --k-flops K          FLOPs per token per parameter k (default 6: training)
  --recompute R        none | selective | full (v2111 / v2101); sets the recompute multiplier
  --recompute-mult G   recompute multiplier g (default 1; 1.33 with full; selective: from dims)
  --opt-bytes A        optimizer traffic alpha, bytes/param/step (default 16)
  --c-act C            activation traffic coefficient c (default 6)
  --tokens-per-step B  global tokens per step B (default 512000)
  --dp P|auto          data-parallel size p (default 1; auto = the GPU count for --target-tps)
  --util U             utilization of every resource (default 0.75)
  --eff-compute E      compute efficiency e_c (default --util)
  --eff-memory E       memory efficiency e_m (default --util)
  --eff-network E      network efficiency e_n (default --util)
  --target-tps R       target tokens/s: GPUs, $/hr and cluster TB/s for it

memory per GPU
  --zero S             ZeRO stage 0..3 over the --dp ranks (default 0)
  --fsdp               FSDP full sharding (= ZeRO stage 3)
  --attention A        naive | flash (default: flash on GPUs, naive on CPUs — the CPU runtime)
  --batch B            micro-batch sequences per GPU (default: 1 on GPUs, 8 on CPUs as plan.lua)
  --seq T              sequence length (default: min(context, 4096) on GPUs, min(context, 256)
                       on CPUs as plan.lua)
  --reserve-gb G       memory kept back per GPU (default: 1 on GPUs, 0 on CPUs)
  --memory-planning M  on | off: activations as the peak of live buffers (v2167 static memory
                       planning: buffers with disjoint lifetimes share memory) or as the sum of
                       every buffer (a plan generated without v2167) (default on)

time and cost (Chinchilla, v2146/v2147)
  --tokens T           tokens to train: time and cost on the cluster
  --chinchilla         train the compute-optimal 20 × N tokens
  --gpus G             cluster size for the time and cost (default: the GPUs for --target-tps,
                       else --dp); also the default --dp
  --flops-budget C     compute-optimal N and tokens for a budget of C FLOPs
  --clusters LIST      compare cluster shapes, e.g. 1xh100-sxm,2xh100-sxm,4xa100-40gb
                       (needs --tokens or --chinchilla)

output
  --json               everything as JSON
  --plot FILE          write an SVG: a roofline per hardware with the run's point, or with
                       --target-tps a bar chart of $/hr per option
  --help               this text
]]

local FLAGS = {
  ["--tree"] = "value", ["--model"] = "value", ["--params"] = "value", ["--layers"] = "value",
  ["--d-model"] = "value", ["--hw"] = "list", ["--set"] = "multi", ["--dtype"] = "value",
  ["--bytes"] = "value", ["--grad-bytes"] = "value", ["--k-flops"] = "value",
  ["--recompute"] = "value", ["--recompute-mult"] = "value", ["--opt-bytes"] = "value",
  ["--c-act"] = "value", ["--tokens-per-step"] = "value", ["--dp"] = "value", ["--util"] = "value",
  ["--eff-compute"] = "value", ["--eff-memory"] = "value", ["--eff-network"] = "value",
  ["--target-tps"] = "value", ["--zero"] = "value", ["--fsdp"] = "flag", ["--attention"] = "value",
  ["--batch"] = "value", ["--seq"] = "value", ["--reserve-gb"] = "value", ["--tokens"] = "value",
  ["--chinchilla"] = "flag", ["--gpus"] = "value", ["--flops-budget"] = "value",
  ["--clusters"] = "list", ["--json"] = "flag", ["--plot"] = "value", ["--help"] = "flag",
  ["-h"] = "flag", ["--memory-planning"] = "value",
}

local GiB = 1024 ^ 3
local SEED4 = "seed 004 default"
local DTYPE = {
  fp32 = { b = 4, bg = 4, peaks = { "fp32" } },
  bf16 = { b = 2, bg = 2, peaks = { "bf16", "fp16" } },
  fp8 = { b = 1, bg = 2, peaks = { "fp8" } },
}
local HW_KEYS = { "hbm_tbps", "memory_gb", "nic_gbps", "peak_tflops.bf16", "peak_tflops.fp16",
  "peak_tflops.fp32", "peak_tflops.fp8", "peak_tflops.tf32", "price_per_hr", "sm" }
local HW_MIN = { memory_gb = 0.001, hbm_tbps = 1e-6, sm = 50 }

-- ---- input parsing ---------------------------------------------------------------------

local function bad_number(flag, s, what, example)
  U.fail("<command line>", string.format("%s must be %s, not '%s'", flag, what, tostring(s)), "e.g. " .. flag .. " " .. example)
end

-- A number from the command line: finite, and > 0 (or >= 0 with allow_zero); integer if asked.
local function num(o, flag, opts)
  local s = o[flag]
  if s == nil then return nil end
  local v = tonumber(s)
  opts = opts or {}
  local what = opts.int and (opts.allow_zero and "an integer >= 0" or "a positive integer")
    or (opts.allow_zero and "a number >= 0" or "a positive number")
  if opts.max then what = what .. " <= " .. U.fmt_value(opts.max) end
  if not v or v ~= v or v == math.huge or v == -math.huge then bad_number(flag, s, what, opts.example or "1") end
  if v < 0 or (v == 0 and not opts.allow_zero) then bad_number(flag, s, what, opts.example or "1") end
  if opts.int and v ~= math.floor(v) then bad_number(flag, s, what, opts.example or "1") end
  if opts.max and v > opts.max then bad_number(flag, s, what, opts.example or "1") end
  if opts.int then v = math.tointeger(v) or v end
  return v
end

local function choice(o, flag, values)
  local v = o[flag]
  if v == nil then return nil end
  for _, x in ipairs(values) do if v == x then return v end end
  U.fail("<command line>", string.format("%s '%s' is not one of %s%s", flag, v, table.concat(values, " | "),
    U.did_you_mean(v, values)), "use one of " .. table.concat(values, ", "))
end

local function tree_dir(o)
  local path = o["--tree"]
  if not path then
    path = "specs/v2500.yaml"
    if hyp.stat(path) ~= "file" and hyp.home then path = hyp.home .. "/specs/v2500.yaml" end
  end
  local st = hyp.stat(path)
  if st ~= "file" then
    U.fail(path, st == "dir" and "is a directory, not the tree file" or "no such file",
      "give the tree file with --tree, e.g. --tree specs/v2500.yaml")
  end
  -- gen size needs only the tree's models/ and hardware/ next to it (T.load_model and
  -- T.load_hardware validate those files with the same schemas as the generator)
  return { path = path, dir = U.dirname(path) }
end

-- ---- the model ---------------------------------------------------------------------------

local function get_model(tree, o, inputs)
  local m, src
  if o["--model"] then
    local doc, path = T.load_model(tree, o["--model"])
    m = U.plain(doc)
    src = path
  end
  local N = num(o, "--params", { example = "7e9" })
  local L = num(o, "--layers", { int = true, example = "32" })
  local D = num(o, "--d-model", { int = true, example = "4096" })
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
  inputs.L = { value = m.n_layers, source = L and "--layers" or ("model spec " .. src) }
  inputs.d = { value = m.d_model, source = D and "--d-model" or ("model spec " .. src) }
  return m, src, counted
end

-- ---- hardware ------------------------------------------------------------------------------

local function set_path(h, key, v)
  local a, b = key:match("^([^.]+)%.(.+)$")
  if a then h[a] = h[a] or {}; h[a][b] = v else h[key] = v end
end

local function get_path(h, key)
  local a, b = key:match("^([^.]+)%.(.+)$")
  if a then return h[a] and h[a][b] end
  return h[key]
end

-- --set [HW.]KEY=VALUE, applied to the loaded hardware list (names in hws_by_name).
local function parse_sets(o, hw_names)
  local sets = {}
  for _, item in ipairs(o["--set"] or {}) do
    local key, val = item:match("^([^=]+)=(.*)$")
    if not key then
      U.fail("<command line>", "--set '" .. item .. "' is not KEY=VALUE", "e.g. --set h100-sxm.price_per_hr=2.5")
    end
    local target
    for _, n in ipairs(hw_names) do
      if key:sub(1, #n + 1) == n .. "." then
        if not target or #n > #target then target = n end
      end
    end
    local k = target and key:sub(#target + 2) or key
    local known = false
    for _, x in ipairs(HW_KEYS) do if x == k then known = true end end
    if not known then
      local first = key:match("^([^.]+)%.")
      if not target and first and first ~= "peak_tflops" then
        U.fail("<command line>", string.format("--set %s: no hardware '%s' among --hw%s", item, first,
          U.did_you_mean(first, hw_names)), "use one of: " .. table.concat(hw_names, ", ") .. " (or add it to --hw)")
      end
      U.fail("<command line>", string.format("--set %s: unknown hardware key '%s'%s", item, k, U.did_you_mean(k, HW_KEYS)),
        "use one of: " .. table.concat(HW_KEYS, ", "))
    end
    local v = tonumber(val)
    if not v or v ~= v or v == math.huge or v < (HW_MIN[k] or 0) then
      U.fail("<command line>", string.format("--set %s: %s must be a number >= %s", item, k, U.fmt_value(HW_MIN[k] or 0)),
        "e.g. --set " .. key .. "=2.5")
    end
    sets[#sets + 1] = { hw = target, key = k, value = v, text = item }
  end
  return sets
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

-- ---- formatting ------------------------------------------------------------------------------

local function si(x)
  if x == nil then return "-" end
  if x == math.huge then return "inf" end
  local a = math.abs(x)
  if a >= 1e18 then return string.format("%.3g", x) end
  local units = { { 1e15, "P" }, { 1e12, "T" }, { 1e9, "G" }, { 1e6, "M" }, { 1e3, "k" } }
  for _, u in ipairs(units) do
    if a >= u[1] then return string.format("%.3g%s", x / u[1], u[2]) end
  end
  return string.format("%.3g", x)
end

local function gib(x)
  if x == 0 then return "0" end
  if math.abs(x) >= 1024 * GiB then return string.format("%.2f TiB", x / (1024 * GiB)) end
  if math.abs(x) >= GiB then return string.format("%.1f GiB", x / GiB) end
  return string.format("%.1f MiB", x / 1024 ^ 2)
end

local function money(x)
  if x >= 1e6 then return string.format("$%.3gM", x / 1e6) end
  if x >= 1e4 then return string.format("$%.0f", x) end
  return string.format("$%.2f", x)
end

local function duration(h)
  if h >= 48 then return string.format("%.1f days", h / 24) end
  if h >= 1 then return string.format("%.1f h", h) end
  return string.format("%.1f min", h * 60)
end

-- A table with aligned columns; rows are lists of strings; first column left-aligned.
local function table_text(header, rows)
  local w = {}
  for i, h in ipairs(header) do w[i] = utf8.len(h) end
  for _, r in ipairs(rows) do for i, c in ipairs(r) do w[i] = math.max(w[i], utf8.len(c)) end end
  local function line(r)
    local parts = {}
    for i, c in ipairs(r) do
      local pad = string.rep(" ", w[i] - utf8.len(c))
      parts[i] = (i == 1) and (c .. pad) or (pad .. c)
    end
    return "  " .. table.concat(parts, "  ") .. "\n"
  end
  local out = { line(header) }
  local dash = {}
  for i = 1, #header do dash[i] = string.rep("-", w[i]) end
  out[#out + 1] = line(dash)
  for _, r in ipairs(rows) do out[#out + 1] = line(r) end
  return table.concat(out)
end

-- ---- the computation -------------------------------------------------------------------------

-- Global inputs of the throughput model, each {value, source}.
local function global_inputs(o, inputs, m)
  local function put(k, flag, opts, dflt, src)
    local v = num(o, flag, opts)
    inputs[k] = { value = v or dflt, source = v and flag or src }
  end
  put("k", "--k-flops", { example = "6" }, 6, SEED4 .. " (6 FLOPs/param/token: forward 2 + backward 4)")
  put("alpha", "--opt-bytes", { allow_zero = true, example = "16" }, 16, SEED4 .. " (Adam bf16 ≈ 16–20 B/param/step)")
  put("c", "--c-act", { allow_zero = true, example = "6" }, 6, SEED4 .. " (TrainingCfg c_act = 6)")
  put("B", "--tokens-per-step", { example = "512000" }, 512000, SEED4 .. " (global_tokens_per_step = 512,000)")
  put("util", "--util", { max = 1, example = "0.75" }, 0.75, SEED4 .. " (utilization 0.75)")
  for _, e in ipairs({ { "ec", "--eff-compute" }, { "em", "--eff-memory" }, { "en", "--eff-network" } }) do
    put(e[1], e[2], { max = 1, example = "0.75" }, inputs.util.value, "--util")
  end
  if inputs.alpha.value == 0 and inputs.c.value == 0 then
    U.fail("<command line>", "--opt-bytes and --c-act are both 0: the run would move no bytes", "give one of them a positive value")
  end
  local rec = choice(o, "--recompute", { "none", "selective", "full" })
  inputs.recompute = { value = rec or "none", source = rec and "--recompute" or "default: no recompute" }
  local g = num(o, "--recompute-mult", { example = "1.33" })
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
  local dt = choice(o, "--dtype", { "bf16", "fp32", "fp8" })
  s.dtype = { value = dt or (gpu and "bf16" or "fp32"),
    source = dt and "--dtype" or (gpu and "default on GPUs: v2102 mixed precision (bf16)" or "default on CPUs: the CPU runtime trains in fp32") }
  local D = DTYPE[s.dtype.value]
  local b = num(o, "--bytes", { example = "2" })
  s.b = { value = b or D.b, source = b and "--bytes" or ("--dtype " .. s.dtype.value) }
  local bg = num(o, "--grad-bytes", { example = "2" })
  s.bg = { value = bg or D.bg, source = bg and "--grad-bytes" or ("--dtype " .. s.dtype.value) }
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
  local att = choice(o, "--attention", { "naive", "flash" })
  s.attention = { value = att or (gpu and "flash" or "naive"),
    source = att and "--attention" or (gpu and "default on GPUs: FlashAttention (v2112-v2114)" or "default on CPUs: the CPU runtime's naive attention") }
  return s
end

local function min_zero3(N, dt, bg, m, act, res, cap)
  local full = F.model_state(N, { dtype = dt, stage = 3, p = 1, grad_bytes = bg })
  local gather = 2 * F.gather_params(m) * F.STATE_BYTES[dt].param
  local room = cap - act - res - gather
  if room <= 0 then return nil end
  return math.max(1, math.ceil(full.total / room))
end

local function memory_for(o, h, m, N, S, inputs, p, stage)
  local gpu = h.kind == "gpu"
  local bsz = num(o, "--batch", { int = true, example = "8" })
  local seq = num(o, "--seq", { int = true, example = "256" })
  local B = bsz or (gpu and 1 or 8)
  local Tn = seq or math.min(m.context, gpu and 4096 or 256)
  if seq and seq > m.context and inputs.model_named then
    U.fail("<command line>", string.format("--seq %d is longer than %s's context %d", seq, m.name, m.context), "choose a smaller --seq")
  end
  local reserve = num(o, "--reserve-gb", { allow_zero = true, example = "1" })
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
  local state = F.model_state(N, { dtype = dt, stage = stage, p = p, grad_bytes = S.bg.value,
    layer_params = F.gather_params(m) })
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
    min_gpus_zero3 = min_zero3(N, dt, S.bg.value, m, act_bytes, res, cap),
    min_gpus_zero3_full_recompute = min_zero3(N, dt, S.bg.value, m, per_layer[S.attention.value .. "/full"].peak, res, cap),
  }
end

local function throughput_for(h, S, inputs, p, strict)
  if strict and p > 1 and h.nic_gbps <= 0 then
    U.fail(h.path, string.format("%s has nic_gbps 0, so %d data-parallel GPUs cannot exchange gradients", h.name, p),
      "use one GPU, or give it a network: --set " .. h.name .. ".nic_gbps=100")
  end
  return F.throughput({ N = inputs.N.value, L = inputs.L.value, d = inputs.d.value, b = S.b.value,
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

-- JSON has no infinity: an unbounded rate (no network term) is written as null
local function json_num(x)
  if x == math.huge then return hyp.null end
  return x
end

-- ---- SVG -----------------------------------------------------------------------------------

local COLORS = { "#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf" }

local function esc(s) return (tostring(s):gsub("&", "&amp;"):gsub("<", "&lt;"):gsub(">", "&gt;"):gsub('"', "&quot;")) end

local function svg_roofline(res, title)
  local W, H, ml, mr, mt, mb = 760, 480, 80, 200, 50, 60
  local pw, ph = W - ml - mr, H - mt - mb
  local xmin, xmax, ymin, ymax = math.huge, 0, math.huge, 0
  for _, r in ipairs(res) do
    local t = r.throughput
    local peak = r.peak_flops / 1e12
    xmin = math.min(xmin, t.intensity, t.balance); xmax = math.max(xmax, t.intensity, t.balance)
    ymax = math.max(ymax, peak)
    ymin = math.min(ymin, r.achieved_tflops)
  end
  -- whole decades on x; on y a little headroom above the highest peak
  local lx0 = math.floor(math.log(xmin, 10)) - 1
  local lx1 = math.ceil(math.log(xmax, 10)) + 1
  local ly1 = math.log(ymax, 10) + 0.25
  local ly0 = math.min(math.floor(math.log(ymin, 10)), math.floor(ly1) - 3)
  local function X(v) return ml + (math.log(v, 10) - lx0) / (lx1 - lx0) * pw end
  local function Y(v) return mt + ph - (math.log(v, 10) - ly0) / (ly1 - ly0) * ph end
  local o = {}
  local function w(...) o[#o + 1] = string.format(...) end
  w('<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">\n', W, H, W, H)
  w('<rect width="100%%" height="100%%" fill="white"/>\n')
  w('<text x="%d" y="24" font-size="15" font-weight="bold">%s</text>\n', ml, esc(title))
  -- grid and ticks
  for e = lx0, lx1 do
    local x = X(10 ^ e)
    w('<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#e0e0e0"/>\n', x, mt, x, mt + ph)
    w('<text x="%.1f" y="%d" text-anchor="middle">%s</text>\n', x, mt + ph + 16, esc(si(10 ^ e)))
  end
  for e = ly0, math.floor(ly1) do
    local y = Y(10 ^ e)
    w('<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#e0e0e0"/>\n', ml, y, ml + pw, y)
    w('<text x="%d" y="%.1f" text-anchor="end">%s</text>\n', ml - 6, y + 4, esc(si(10 ^ e)))
  end
  w('<rect x="%d" y="%d" width="%d" height="%d" fill="none" stroke="#333"/>\n', ml, mt, pw, ph)
  w('<text x="%.1f" y="%d" text-anchor="middle">arithmetic intensity (FLOP/byte of HBM traffic)</text>\n', ml + pw / 2, H - 18)
  w('<text transform="translate(20,%.1f) rotate(-90)" text-anchor="middle">attainable TFLOP/s per GPU</text>\n', mt + ph / 2)
  w('<clipPath id="plot"><rect x="%d" y="%d" width="%d" height="%d"/></clipPath>\n', ml, mt, pw, ph)
  for i, r in ipairs(res) do
    local c = COLORS[(i - 1) % #COLORS + 1]
    local t = r.throughput
    local peak = r.peak_flops / 1e12
    local bw = r.hbm_tbps -- TFLOP/s per FLOP/byte = TB/s
    local xa, xb = 10 ^ lx0, 10 ^ lx1
    local ridge = t.balance
    w('<polyline clip-path="url(#plot)" fill="none" stroke="%s" stroke-width="2" points="%.1f,%.1f %.1f,%.1f %.1f,%.1f"/>\n',
      c, X(xa), Y(math.max(xa * bw, 10 ^ ly0 / 10)), X(ridge), Y(peak), X(xb), Y(peak))
    local px, py = X(t.intensity), Y(r.achieved_tflops)
    w('<circle cx="%.1f" cy="%.1f" r="5" fill="%s" stroke="black"><title>%s: %s-bound, %s tokens/s/GPU</title></circle>\n',
      px, py, c, esc(r.name), esc(t.bound), esc(si(t.rate)))
    local ly = mt + 10 + (i - 1) * 38
    w('<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s" stroke-width="2"/>\n', ml + pw + 12, ly, ml + pw + 32, ly, c)
    w('<circle cx="%d" cy="%d" r="4" fill="%s" stroke="black"/>\n', ml + pw + 22, ly, c)
    w('<text x="%d" y="%d">%s</text>\n', ml + pw + 38, ly + 4, esc(r.name))
    w('<text x="%d" y="%d" font-size="10" fill="#555">%s-bound, %s tok/s</text>\n', ml + pw + 38, ly + 17, esc(t.bound), esc(si(t.rate)))
  end
  w('<text x="%d" y="%d" font-size="10" fill="#555">lines: roofline min(peak, I·HBM); dots: the run (rate·F)</text>\n', ml, mt - 6)
  w('</svg>\n')
  return table.concat(o)
end

local function svg_bars(res, title)
  local W, mt, mb, ml, mr = 800, 50, 60, 150, 290
  local bh, gap = 26, 12
  local H = mt + mb + #res * (bh + gap)
  local pw = W - ml - mr
  local vmax = 0
  for _, r in ipairs(res) do vmax = math.max(vmax, r.cluster.usd_per_hr) end
  if vmax <= 0 then vmax = 1 end
  -- a "nice" tick step (1, 2, 2.5 or 5 × 10^k) and the axis end on a whole step
  local raw = vmax / 4
  local mag = 10 ^ math.floor(math.log(raw, 10))
  local step = mag * 10
  for _, f in ipairs({ 1, 2, 2.5, 5, 10 }) do if f * mag >= raw then step = f * mag; break end end
  local nticks = math.ceil(vmax / step - 1e-9)
  vmax = nticks * step
  local o = {}
  local function w(...) o[#o + 1] = string.format(...) end
  w('<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">\n', W, H, W, H)
  w('<rect width="100%%" height="100%%" fill="white"/>\n')
  w('<text x="%d" y="24" font-size="15" font-weight="bold">%s</text>\n', 20, esc(title))
  for k = 0, nticks do
    local v = step * k
    local x = ml + pw * k / nticks
    w('<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#e0e0e0"/>\n', x, mt - 4, x, H - mb)
    w('<text x="%.1f" y="%d" text-anchor="middle">%s</text>\n', x, H - mb + 16, esc(money(v)))
  end
  for i, r in ipairs(res) do
    local c = COLORS[(i - 1) % #COLORS + 1]
    local y = mt + (i - 1) * (bh + gap)
    local wd = math.max(1, pw * r.cluster.usd_per_hr / vmax)
    w('<text x="%d" y="%.1f" text-anchor="end">%s</text>\n', ml - 8, y + bh / 2 + 4, esc(r.name))
    w('<rect x="%d" y="%d" width="%.1f" height="%d" fill="%s"><title>%s</title></rect>\n', ml, y, wd, bh, c,
      esc(string.format("%s: %d GPUs, %s/hr", r.name, r.cluster.gpus, money(r.cluster.usd_per_hr))))
    w('<text x="%.1f" y="%.1f">%s/hr · %s GPUs · %s-bound</text>\n', ml + wd + 6, y + bh / 2 + 4,
      esc(money(r.cluster.usd_per_hr)), esc(tostring(r.cluster.gpus)), esc(r.throughput.bound))
  end
  w('<text x="%.1f" y="%d" text-anchor="middle">cluster $/hr for the target throughput</text>\n', ml + pw / 2, H - 18)
  w('</svg>\n')
  return table.concat(o)
end

-- ---- main ----------------------------------------------------------------------------------

function Z.main(args, parse)
  local o = parse(args, FLAGS, 0)
  if o["--help"] or o["-h"] then io.write(HELP); return 0 end
  local tree = tree_dir(o)
  local inputs = {}
  local notes = {}
  local m, msrc, counted = get_model(tree, o, inputs)
  inputs.model_named = o["--model"] ~= nil
  local N = inputs.N.value
  if o["--params"] and o["--model"] then
    notes[#notes + 1] = string.format("--params %s replaces %s's counted %s parameters in every formula", si(N), m.name, si(counted))
  end

  -- sequence for the selective-recompute multiplier: the same default as the memory estimate
  inputs.seq_for_g = num(o, "--seq", { int = true, example = "256" })
  global_inputs(o, inputs, m)
  inputs.seq_for_g = nil

  local target = num(o, "--target-tps", { example = "2e5" })
  inputs.target = { value = target, source = target and "--target-tps" or "not given" }
  local gpus_flag = num(o, "--gpus", { int = true, example = "8" })
  local dp_auto = o["--dp"] == "auto"
  local dp
  if dp_auto then
    if not target then U.fail("<command line>", "--dp auto needs --target-tps", "give --target-tps R or a number for --dp") end
  else
    dp = num(o, "--dp", { int = true, example = "8" })
  end
  inputs.dp = { value = dp_auto and "auto" or (dp or gpus_flag or 1),
    source = dp_auto and "--dp auto: the GPU count for --target-tps" or (dp and "--dp" or (gpus_flag and "--gpus" or SEED4 .. " (p = 1: no network term)")) }
  local zero = num(o, "--zero", { allow_zero = true, int = true, max = 3, example = "3" })
  if o["--fsdp"] and zero and zero ~= 3 then
    U.fail("<command line>", "--fsdp shards like ZeRO stage 3 but --zero " .. zero .. " was given", "drop one of them")
  end
  local stage = o["--fsdp"] and 3 or (zero or 0)
  inputs.stage = { value = stage, source = o["--fsdp"] and "--fsdp (full sharding = ZeRO-3)" or (zero and "--zero" or "default: stage 0, everything replicated") }

  local mp = choice(o, "--memory-planning", { "on", "off" })
  inputs.planning = { value = mp or "on", source = mp and "--memory-planning" or
    "default: v2167 memory planning on (gen --enable memory-planning): activations = the peak of live buffers; off = every buffer its own region" }

  local tokens = num(o, "--tokens", { example = "2e9" })
  if o["--chinchilla"] and tokens then
    U.fail("<command line>", "--tokens and --chinchilla both give the token count", "keep one")
  end
  if o["--chinchilla"] then tokens = F.chinchilla_tokens(N) end
  if tokens then
    inputs.tokens = { value = tokens, source = o["--chinchilla"] and "--chinchilla: 20 × N (Chinchilla, v2146)" or "--tokens" }
  end
  local budget = num(o, "--flops-budget", { example = "1e21" })

  -- hardware
  local specs = o["--hw"]
  local hw_src = "--hw"
  if not specs or #specs == 0 then specs = default_hw_names(tree); hw_src = "default: every GPU entry in " .. tree.dir .. "/hardware" end
  -- names for --set targeting: the names as given and the files' names
  local given = {}
  for _, s in ipairs(specs) do given[#given + 1] = (U.basename(s):gsub("%.ya?ml$", "")) end
  local cluster_items = {}
  for _, c in ipairs(o["--clusters"] or {}) do
    local n, name = c:match("^(%d+)[xX×](.+)$")
    if not n or tonumber(n) < 1 then
      U.fail("<command line>", "--clusters item '" .. c .. "' is not COUNTxHARDWARE", "e.g. --clusters 1xh100-sxm,2xh100-sxm,4xa100-40gb")
    end
    cluster_items[#cluster_items + 1] = { n = math.tointeger(tonumber(n)), spec = name }
    given[#given + 1] = (U.basename(name):gsub("%.ya?ml$", ""))
  end
  local sets = parse_sets(o, given)
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

  if o["--plot"] then
    local title = string.format("%s (%s params): %s", m.name, si(N),
      target and string.format("$/hr for %s tokens/s", si(target)) or "roofline")
    local svg = target and svg_bars(results, title) or svg_roofline(results, title)
    local ok, err = hyp.write_file(o["--plot"], svg)
    if not ok then U.fail(o["--plot"], "cannot write the plot: " .. tostring(err), "check the path and permissions") end
  end

  if o["--json"] then
    return Z.emit_json(m, msrc, inputs, results, clusters, chin, notes, hw_src, o)
  end
  io.write(Z.text(m, msrc, inputs, results, clusters, chin, notes, hw_src, o))
  return 0
end

local function plain_inputs(inputs)
  local out = {}
  for k, v in pairs(inputs) do
    if type(v) == "table" and v.source then out[k] = { value = v.value, source = v.source } end
  end
  return out
end

function Z.emit_json(m, msrc, inputs, results, clusters, chin, notes, hw_src, o)
  local hw = U.array()
  for _, r in ipairs(results) do
    local th = r.throughput
    local mem = r.memory
    local s = r.settings
    local per_layer = {}
    for k, v in pairs(mem.per_layer) do per_layer[k] = v end
    hw[#hw + 1] = {
      name = r.name, title = r.title, kind = r.kind, path = r.path, overrides = r.overrides,
      price_per_hr = r.price_per_hr, hbm_tbps = r.hbm_tbps, nic_gbps = r.nic_gbps, memory_gb = r.memory_gb,
      peak_key = r.peak_key, peak_flops = r.peak_flops,
      inputs = { dtype = s.dtype, b = s.b, bg = s.bg, attention = s.attention, p = r.p },
      throughput = { flops_per_token = th.flops_per_token, hbm_bytes_per_token = th.hbm_bytes_per_token,
        net_bytes_per_token = th.net_bytes_per_token, r_compute = th.r_compute, r_memory = th.r_memory,
        r_network = json_num(th.r_network), rate = th.rate, bound = th.bound, intensity = th.intensity,
        balance = th.balance, achieved_tflops = r.achieved_tflops, target_unreachable = r.unreachable },
      cluster = { gpus = r.cluster.gpus, usd_per_hr = r.cluster.usd_per_hr, cluster_hbm_tbps = r.cluster.cluster_hbm_tbps,
        usd_per_tbps_hr = r.cluster.usd_per_tbps_hr, for_target = r.cluster.for_target or false },
      memory = { inputs = mem.inputs, params = mem.params, grads = mem.grads, optimizer = mem.optimizer,
        fp8_extra = mem.fp8_extra, gather = mem.gather, model_state = mem.model_state, activations = mem.activations,
        activations_peak = mem.activations_peak, activations_peak_at = mem.activations_peak_at,
        activations_unplanned = mem.activations_unplanned, memory_planning = mem.memory_planning,
        saved_per_layer = mem.saved_per_layer, saved_parts = mem.saved_parts, reserve = mem.reserve,
        total = mem.total, capacity = mem.capacity, fits = mem.fits, margin = mem.margin,
        per_layer = per_layer, min_gpus_zero3 = mem.min_gpus_zero3 },
      train = r.train,
    }
  end
  local out = {
    command = "size",
    model = { name = m.name, source = msrc, arch = m.arch, params = inputs.N.value, params_counted = F.param_count(m),
      layers = m.n_layers, d_model = m.d_model, n_heads = m.n_heads, n_kv_heads = m.n_kv_heads or m.n_heads,
      ffn_hidden = m.ffn_hidden, vocab_size = m.vocab_size, context = m.context },
    inputs = plain_inputs(inputs), hardware_source = hw_src, hardware = hw,
    chinchilla = chin, clusters = clusters and U.array(clusters) or nil, notes = U.array(notes),
    plot = o["--plot"],
  }
  local s, err = hyp.json_encode(out, true)
  if not s then error("cannot encode JSON: " .. tostring(err)) end
  io.write(s, "\n")
  return 0
end

function Z.text(m, msrc, inputs, results, clusters, chin, notes, hw_src, o)
  local out = {}
  local function w(...) out[#out + 1] = string.format(...) end
  local N = inputs.N.value
  w("gen size — %s: N = %s parameters, L = %d, d = %d\n", m.name, si(N), inputs.L.value, inputs.d.value)
  w("  model: %s\n", msrc)
  w("\ninputs (value — source):\n")
  local function inp(label, k, fmt)
    local v = inputs[k]
    if not v then return end
    local val = v.value
    if type(val) == "number" then val = fmt and string.format(fmt, val) or U.fmt_value(val) end
    w("  %-34s %-12s %s\n", label, tostring(val), v.source)
  end
  inp("N parameters", "N", "%.4g")
  inp("k FLOPs/token/param", "k")
  inp("g recompute multiplier", "g", "%.3f")
  inp("recompute", "recompute")
  inp("alpha optimizer B/param/step", "alpha")
  inp("c activation coefficient", "c")
  inp("B global tokens/step", "B", "%.0f")
  inp("p data-parallel size", "dp")
  inp("ZeRO stage", "stage")
  inp("memory planning (v2167)", "planning")
  inp("e_c compute efficiency", "ec")
  inp("e_m memory efficiency", "em")
  inp("e_n network efficiency", "en")
  if inputs.target.value then inp("target tokens/s", "target", "%.4g") end
  if inputs.tokens then inp("tokens to train", "tokens", "%.4g") end
  w("  %-34s %s\n", "hardware", hw_src)
  -- per-hardware settings, grouped when they agree
  local seen = {}
  for _, r in ipairs(results) do
    local s = r.settings
    local mi = r.memory.inputs
    local f = "    %-32s %-16s %s\n"
    local line = string.format(f, "dtype", s.dtype.value, s.dtype.source) ..
      string.format(f, "b bytes/element", U.fmt_value(s.b.value), s.b.source) ..
      string.format(f, "b_g gradient bytes/element", U.fmt_value(s.bg.value), s.bg.source) ..
      string.format(f, "peak FLOP/s entry", "peak_tflops." .. r.peak_key, "--dtype " .. s.dtype.value) ..
      string.format(f, "attention", s.attention.value, s.attention.source) ..
      string.format(f, "micro-batch (sequences/GPU)", tostring(mi.batch.value), mi.batch.source) ..
      string.format(f, "sequence length", tostring(mi.seq.value), mi.seq.source) ..
      string.format(f, "reserve GiB", U.fmt_value(mi.reserve_gb.value), mi.reserve_gb.source)
    if not seen[line] then seen[line] = {}; seen[#seen + 1] = line end
    table.insert(seen[line], r.name)
  end
  for _, line in ipairs(seen) do w("  settings for %s:\n%s", table.concat(seen[line], ", "), line) end
  for _, r in ipairs(results) do
    if #r.overrides > 0 then w("  %s overrides: %s\n", r.name, table.concat(r.overrides, ", ")) end
  end

  local target = inputs.target.value
  w("\nthroughput per GPU (seed 004: F = g·k·N, M = alpha·N/B + c·L·d·b, X = 2(p-1)/p·N·b_g/(B/p))%s:\n",
    target and string.format(", cluster for %s tokens/s (sorted by $/hr)", si(target)) or "")
  local header = { "hardware", "bound", "tok/s/GPU", "r_compute", "r_memory", "r_network", "p", "GPUs", "$/hr",
    "cluster TB/s", "$/TB/s·hr", "mem/GPU", "fits?", "margin" }
  local rows = {}
  for _, r in ipairs(results) do
    local th, c, mem = r.throughput, r.cluster, r.memory
    rows[#rows + 1] = { r.name, th.bound, si(th.rate), si(th.r_compute), si(th.r_memory), si(th.r_network),
      tostring(r.p) .. (r.unreachable and "!" or ""), tostring(c.gpus), money(c.usd_per_hr), string.format("%.3g", c.cluster_hbm_tbps),
      string.format("%.2f", c.usd_per_tbps_hr), gib(mem.total), mem.fits and "fits" or "NO",
      (mem.margin >= 0 and "+" or "-") .. gib(math.abs(mem.margin)) }
  end
  w("%s", table_text(header, rows))
  if not target then w("  (no --target-tps: GPUs = p, and cluster TB/s is what p GPUs at this rate consume)\n") end
  for _, r in ipairs(results) do
    if r.unreachable then
      w("  %s!: the network term keeps the cluster below %s tokens/s at any size; the fastest is p = %d GPUs at\n", r.name, si(target), r.p)
      w("  %s tokens/s (shown) — raise --tokens-per-step, a faster NIC, or shard differently (TP/PP, not modelled)\n",
        si(r.p * r.throughput.rate))
    end
  end
  local r1 = results[1]
  if r1 then
    local th = r1.throughput
    w("  per token: F = %s FLOP, M = %s B HBM, X = %s B network (p = %d on %s); intensity F/M = %.1f FLOP/B\n",
      si(th.flops_per_token), si(th.hbm_bytes_per_token), si(th.net_bytes_per_token), r1.p, r1.name, th.intensity)
    local T_ = r1.memory.inputs.seq.value
    if inputs.model_named and inputs.N.source ~= "--params" then
      local ft = F.train_flops_per_token(m, T_)
      w("  seed 004 counts F = g·6·N (no attention term); the plan's F.train_flops_per_token at T = %d, with\n", T_)
      w("  attention and matmul weights only, is %s FLOP/token (%.2f× the 6·N value)\n", si(ft), ft / (6 * inputs.N.value))
    end
    local bal = {}
    for _, r in ipairs(results) do bal[#bal + 1] = string.format("%s %.0f", r.name, r.throughput.balance) end
    w("  machine balance peak/HBM (FLOP/B): %s — intensity below balance means memory-bound at equal efficiencies\n",
      table.concat(bal, ", "))
  end

  w("\nmemory per GPU (ZeRO stage %d over p ranks; activations = %s):\n", inputs.stage.value,
    inputs.planning.value == "on" and "the peak of live buffers over the step's schedule (v2167)" or "every buffer its own region (no v2167)")
  local mh = { "hardware", "params", "grads", "optimizer", "fp8", "gather", "activations", "reserve", "total", "capacity", "verdict" }
  local mrows = {}
  for _, r in ipairs(results) do
    local mem = r.memory
    mrows[#mrows + 1] = { r.name, gib(mem.params), gib(mem.grads), gib(mem.optimizer), gib(mem.fp8_extra), gib(mem.gather),
      gib(mem.activations), gib(mem.reserve), gib(mem.total), gib(mem.capacity),
      (mem.fits and "fits, margin " or "does NOT fit, short ") .. gib(math.abs(mem.margin)) }
  end
  w("%s", table_text(mh, mrows))
  for _, r in ipairs(results) do
    local mem = r.memory
    if not mem.fits then
      if mem.min_gpus_zero3 then
        w("  %s: fits with ZeRO-3 / FSDP over >= %d GPUs (--zero 3 --dp %d)\n", r.name, mem.min_gpus_zero3, mem.min_gpus_zero3)
      elseif mem.min_gpus_zero3_full_recompute and inputs.recompute.value ~= "full" then
        w("  %s: the activations alone do not fit; with --recompute full it fits with ZeRO-3 over >= %d GPUs (--recompute full --zero 3 --dp %d)\n",
          r.name, mem.min_gpus_zero3_full_recompute, mem.min_gpus_zero3_full_recompute)
      else
        w("  %s: the activations alone do not fit — a smaller --batch/--seq, or tensor/sequence parallelism (not modelled here)\n", r.name)
      end
    end
  end
  -- activation table by attention / recompute for each distinct (dtype, batch, seq)
  local shown = {}
  for _, r in ipairs(results) do
    local mi = r.memory.inputs
    local key = r.settings.dtype.value .. "/" .. mi.batch.value .. "/" .. mi.seq.value
    if not shown[key] then
      shown[key] = true
      w("\nactivations (%s, micro-batch %d × seq %d), stored per layer / step peak:\n", r.settings.dtype.value, mi.batch.value, mi.seq.value)
      local ah = { "attention", "no recompute", "selective (v2111)", "full (v2101)" }
      local arows = {}
      for _, a in ipairs({ "naive", "flash" }) do
        local row = { a }
        for _, rc in ipairs({ "none", "selective", "full" }) do
          local x = r.memory.per_layer[a .. "/" .. rc]
          row[#row + 1] = gib(x.saved_per_layer) .. " / " .. gib(x.peak)
        end
        arows[#arows + 1] = row
      end
      w("%s", table_text(ah, arows))
    end
  end

  w("\nChinchilla (v2146): compute-optimal tokens ≈ 20 × N = %s tokens; training compute 6·N·D = %s FLOP\n",
    si(chin.optimal_tokens), si(chin.train_flops))
  if chin.budget then
    w("  v2147: a budget of %s FLOP is best spent on N = %s parameters and D = %s tokens (C = 6·N·20·N)\n",
      si(chin.budget.flops), si(chin.budget.params), si(chin.budget.tokens))
  end
  if inputs.tokens then
    w("\ntime and cost to train %s tokens:\n", si(inputs.tokens.value))
    local th = { "hardware", "GPUs", "tokens/s", "time", "GPU-hours", "$/hr", "cost" }
    local trows = {}
    for _, r in ipairs(results) do
      local t = r.train
      trows[#trows + 1] = { r.name, tostring(t.gpus), si(t.gpus * r.throughput.rate), duration(t.hours),
        si(t.gpu_hours), money(t.gpus * r.price_per_hr), money(t.usd) }
    end
    w("%s", table_text(th, trows))
  end
  if clusters then
    w("\ncluster shapes for %s tokens (seed 001's question):\n", si(inputs.tokens.value))
    local ch = { "cluster", "bound", "tok/s/GPU", "tokens/s", "time", "$/hr", "cost", "vs cheapest", "fits?" }
    local crows = {}
    for _, c in ipairs(clusters) do
      crows[#crows + 1] = { c.shape, c.bound, si(c.rate_per_gpu), si(c.tokens_per_s), duration(c.hours), money(c.usd_per_hr),
        money(c.usd), string.format("%.2f×", c.cost_vs_cheapest), c.fits and "fits" or "NO" }
    end
    w("%s", table_text(ch, crows))
    w("  cost = GPUs × $/hr × hours. With linear scaling n GPUs finish n× sooner at n× the hourly price, so\n")
    w("  the cost is the same; it changes only through the per-GPU rate (efficiency, the network term when\n")
    w("  p > 1, a different GPU) or the price per GPU. More GPUs buy time, not savings.\n")
  end
  if #notes > 0 then
    w("\nnotes:\n")
    for _, n in ipairs(notes) do w("  - %s\n", n) end
  end
  if o["--plot"] then w("\nwrote %s\n", o["--plot"]) end
  return table.concat(out)
end

return Z
