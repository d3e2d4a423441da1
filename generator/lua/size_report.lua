-- size_report.lua — what `gen size` prints: the text report (tables with every input and its
-- source) and the JSON document (--json), from the results size.lua computed, and the number
-- formats (si, gib, money, duration) the SVG charts share. It computes nothing but presentation
-- (the one formula call, F.train_flops_per_token, is a figure the text quotes) and parses no flag.
local U = require("util")
local F = require("formulas")
local R = {}

local GiB = 1024 ^ 3

-- ---- formatting ------------------------------------------------------------------------------

function R.si(x)
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

function R.gib(x)
  if x == 0 then return "0" end
  if math.abs(x) >= 1024 * GiB then return string.format("%.2f TiB", x / (1024 * GiB)) end
  if math.abs(x) >= GiB then return string.format("%.1f GiB", x / GiB) end
  return string.format("%.1f MiB", x / 1024 ^ 2)
end

function R.money(x)
  if x >= 1e6 then return string.format("$%.3gM", x / 1e6) end
  if x >= 1e4 then return string.format("$%.0f", x) end
  return string.format("$%.2f", x)
end

function R.duration(h)
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

local si, gib, money, duration = R.si, R.gib, R.money, R.duration

-- JSON has no infinity: an unbounded rate (no network term) is written as null
local function json_num(x)
  if x == math.huge then return hyp.null end
  return x
end

local function plain_inputs(inputs)
  local out = {}
  for k, v in pairs(inputs) do
    if type(v) == "table" and v.source then out[k] = { value = v.value, source = v.source } end
  end
  return out
end

function R.emit_json(m, msrc, inputs, results, clusters, chin, notes, hw_src, o)
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
      inputs = { dtype = s.dtype, b = s.b, bg = s.bg, opt_state = s.opt_state, attention = s.attention, p = r.p },
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
      allreduce = r.allreduce,
    }
  end
  local out = {
    command = "size",
    model = { name = m.name, source = msrc, arch = m.arch, params = inputs.N.value, params_counted = F.param_count(m),
      params_active = inputs.Na and inputs.Na.value,
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

function R.text(m, msrc, inputs, results, clusters, chin, notes, hw_src, o)
  local out = {}
  local function w(...) out[#out + 1] = string.format(...) end
  local N = inputs.N.value
  w("gen size — %s: N = %s parameters, L = %d, d = %d\n", m.name, si(N), inputs.L.value, inputs.d.value)
  if inputs.Na then w("  mixture of experts: %s active per token (%s)\n", si(inputs.Na.value), inputs.Na.source) end
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
      string.format(f, "optimizer m, v", s.opt_state.value .. string.format(" (%.3g B/param)", F.MOMENT_BYTES[s.opt_state.value]), s.opt_state.source) ..
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

  -- v2171: the all-reduce algorithm the alpha-beta model picks per message size (v2169/v2170 facts)
  for _, r in ipairs(results) do
    local ar = r.allreduce
    if ar and ar.missing then
      w("\nall-reduce algorithm (v2171) on %s: not modelled — %s\n", r.name, ar.missing)
    elseif ar then
      w("\nall-reduce algorithm (v2171) on %s, p = %d over %d node(s) of %d: alpha-beta time per call (round = alpha + bytes/beta; %s %.3g us, %s GB/s; NIC %.3g us, %s GB/s):\n",
        r.name, ar.p, ar.nodes, ar.gpus_per_node, ar.link, ar.net.a_in * 1e6, si(ar.net.b_in / 1e9), ar.net.a_out * 1e6, si(ar.net.b_out / 1e9))
      local ah = { "message", "ring", "tree", "halving_doubling", "hierarchical", "pick", "cuda (NCCL_ALGO)" }
      local arows = {}
      local function us(t) return t and string.format("%.1f us", t * 1e6) or "-" end
      for _, row in ipairs(ar.rows) do
        local t = row.times
        arows[#arows + 1] = { gib(row.bytes) .. (row.gradient and " (gradient)" or ""), us(t.ring), us(t.tree),
          us(t.halving_doubling), us(t.hierarchical), row.best, t.tree < t.ring and "tree" or "ring" }
      end
      w("%s", table_text(ah, arows))
      w("  pick: --enable allreduce --set v2171.algorithm=<pick> (cpu/sim: runtime/coll/coll_algo.c; cuda: ring or tree, as NCCL_ALGO).\n")
      w("  The model has no link contention, pipelining or NCCL protocol choice: a guide between algorithms, not a measured time.\n")
    end
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
  if chin.fit then
    local f, law = chin.fit, chin.fit.law
    local function iv(t, fmt) return t and string.format(" [" .. fmt .. ", " .. fmt .. "]", t[1], t[2]) or "" end
    local function ivs(t) return t and string.format(" [%s, %s]", si(t[1]), si(t[2])) or "" end
    w("\nfitted law (v2146, %s): L(N, D) = %.4g + %.4g/N^%.4f + %.4g/D^%.4f%s\n", f.path, law.E, law.A, law.alpha, law.B, law.beta,
      f.bootstrap_samples > 0 and string.format("; intervals: 2.5–97.5 percentiles of %d bootstrap fits", f.bootstrap_samples) or "")
    w("  compute-optimal tokens for N = %s: %s%s (%.1f per parameter), loss there %.4f\n", si(N), si(f.tokens_opt),
      ivs(f.tokens_opt_interval), f.tokens_opt / N, f.loss_at_opt)
    if f.tokens then w("  predicted loss after %s tokens: %.4f%s\n", si(f.tokens), f.loss, iv(f.loss_interval, "%.4f")) end
    if f.budget then
      w("  v2147 with the fitted law: %s FLOP is best spent on N = %s%s parameters and D = %s tokens, loss %.4f%s\n",
        si(f.budget.C), si(f.budget.N), ivs(f.budget.N_interval), si(f.budget.D), f.budget.loss, iv(f.budget.loss_interval, "%.4f"))
    end
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

return R
