-- scaling.lua — `gen scaling fit RUNS... [-o fit.json] [--svg FILE]` (v2146/v2147): fits the
-- Chinchilla loss law L(N, D) = E + A / N^alpha + B / D^beta to a set of runs and says what it
-- implies (compute-optimal N and D for a budget, the predicted loss of a planned run), with
-- bootstrap intervals; and the IsoFLOP approach (Hoffmann et al. approach 2) where the runs have
-- several model sizes per compute budget. The numerical minimization is C (generator/fit_lua.c,
-- libLBFGS); reading runs, approach 2, the report, the JSON and the plot are here.
-- `gen size --fit fit.json` reads what this writes (M.load, M.optimum, M.predict).
-- Never invents a run: a run without N, D (or C) and a loss is an error, not a default.
local U = require("util")
local M = {}

M.FORMAT = "hyperion-scaling-fit"
M.VERSION = 1

local function range(a, b, step)
  local t = {}
  for i = 0, math.floor((b - a) / step + 1e-9) do t[#t + 1] = a + i * step end
  return t
end

-- Starting points of the approach-3 fit. "full": Hoffmann et al. (appendix D.2) as replicated by
-- Epoch AI (alpha, beta in {0, 0.5, ..., 2}, e in {-1, -0.5, ..., 1}, a, b in {0, 5, ..., 25}:
-- 4500 starts); "coarse": every other point of each axis (3^5 = 243 starts) for quick looks.
M.GRIDS = {
  full = { a = range(0, 25, 5), b = range(0, 25, 5), e = range(-1, 1, 0.5), alpha = range(0, 2, 0.5), beta = range(0, 2, 0.5) },
  coarse = { a = { 0, 10, 20 }, b = { 0, 10, 20 }, e = { -1, 0, 1 }, alpha = { 0, 0.5, 1 }, beta = { 0, 0.5, 1 } },
}

local USAGE = [[
usage:
  gen scaling fit RUNS... [-o fit.json] [--svg FILE] [--bootstrap N] [--seed S] [--grid full|coarse]
                  [--exclude-top K] [--delta D] [--budget C] [--json]
      Fits L(N, D) = E + A/N^alpha + B/D^beta (Hoffmann et al. 2022, approach 3: Huber loss with
      delta 1e-3 on log-loss residuals, L-BFGS from a grid of starts) to the runs, with bootstrap
      percentile intervals (default 200 resamples), and the IsoFLOP approach 2 where runs share a
      compute budget. RUNS: CSV files with a header naming the columns N (or params, "Model Size"),
      D (or tokens, "Training Tokens") or C (or flops, "Training FLOP"; D = C / 6N), and loss; or a
      trainer's metrics JSONL (--metrics), whose N comes from plan.json beside it (or --params N),
      D from its last row's tokens_seen, and the loss from its last val_loss (else the mean
      training loss of its last 10% of rows).
  -o FILE            write the fit (law, intervals, bootstrap samples, runs) as JSON; gen size
                     --fit FILE uses it
  --svg FILE         plot the runs and the fitted law (loss against N, one curve per budget)
  --bootstrap N      resamples for the intervals (0: none)          --seed S   their seed (1)
  --grid G           full (4500 starts, default) or coarse (243)
  --exclude-top K    leave out the K runs with the highest loss (Epoch AI's replication: 5)
  --budget C         also print the compute-optimal N and D for C FLOPs
  --params N         the parameter count of metrics JSONL runs without a plan.json beside them
]]

local function fail_at(where, what, fix) U.fail(where, what, fix) end

local function trim(s) return (s:gsub("^%s+", ""):gsub("%s+$", "")) end

-- one CSV line into fields: commas, optional double quotes ("" inside quotes is a quote)
local function csv_fields(line)
  local out, i, n = {}, 1, #line
  while i <= n + 1 do
    if line:sub(i, i) == '"' then
      local buf, j = {}, i + 1
      while true do
        local c = line:sub(j, j)
        if c == "" then return nil end
        if c == '"' then
          if line:sub(j + 1, j + 1) == '"' then buf[#buf + 1] = '"'; j = j + 2 else j = j + 1; break end
        else buf[#buf + 1] = c; j = j + 1 end
      end
      out[#out + 1] = table.concat(buf)
      if j <= n and line:sub(j, j) ~= "," then return nil end
      i = j + 1
    else
      local j = line:find(",", i, true) or (n + 1)
      out[#out + 1] = trim(line:sub(i, j - 1))
      i = j + 1
    end
  end
  return out
end

local ALIASES = {
  N = { "n", "params", "parameters", "model size", "model_size", "n_params" },
  D = { "d", "tokens", "training tokens", "training_tokens", "n_tokens" },
  C = { "c", "flops", "training flop", "training flops", "training_flop", "training_flops", "compute" },
  loss = { "loss", "l", "final_loss", "final loss", "val_loss" },
}

local function column_of(header, key)
  for i, h in ipairs(header) do
    local low = h:lower()
    for _, a in ipairs(ALIASES[key]) do if low == a then return i end end
  end
  return nil
end

local function number_at(s, where, what)
  local v = tonumber(s)
  if not v or v ~= v or v == math.huge or v <= 0 then
    fail_at(where, what .. " '" .. tostring(s) .. "' is not a positive number", "fix or delete the row")
  end
  return v
end

local function read_csv(path, runs)
  local text, err = hyp.read_file(path)
  if not text then fail_at(path, "cannot read: " .. tostring(err), "check the path") end
  local lineno, header, cols = 0, nil, nil
  for line in (text .. "\n"):gmatch("([^\n]*)\n") do
    lineno = lineno + 1
    line = line:gsub("\r$", "")
    if line:match("^%s*$") or line:match("^%s*#") then goto continue end
    local f = csv_fields(line)
    local where = path .. ":" .. lineno
    if not f then fail_at(where, "unterminated quote or text after a closing quote", "fix the CSV quoting") end
    if not header then
      header = f
      cols = { N = column_of(f, "N"), D = column_of(f, "D"), C = column_of(f, "C"), loss = column_of(f, "loss") }
      if not cols.N or not cols.loss or not (cols.D or cols.C) then
        fail_at(where, "the header names no " .. (not cols.N and "N (params)" or not cols.loss and "loss" or "D (tokens) or C (flops)") ..
          " column", "name the columns N, D (or C) and loss in the first line")
      end
    else
      if #f ~= #header then
        fail_at(where, string.format("%d fields, the header has %d", #f, #header), "give every row one value per column")
      end
      local N = number_at(f[cols.N], where, "N")
      local D, C
      if cols.D and f[cols.D] ~= "" then D = number_at(f[cols.D], where, "D") end
      if cols.C and f[cols.C] ~= "" then C = number_at(f[cols.C], where, "C") end
      if not D and not C then fail_at(where, "neither D nor C is given", "fill one of them") end
      D = D or C / (6 * N)
      C = C or 6 * N * D
      runs[#runs + 1] = { N = N, D = D, C = C, loss = number_at(f[cols.loss], where, "loss"), source = where }
    end
    ::continue::
  end
  if not header then fail_at(path, "no header and no runs", "give a CSV with columns N, D (or C), loss") end
end

-- A trainer's metrics JSONL: the run's N from plan.json (beside it or one level up), D the tokens
-- it had seen at its last row, the loss its last validation loss (else the mean training loss of
-- the last tenth of its rows: one step's loss is noisy).
local function read_metrics(path, runs, params)
  local text, err = hyp.read_file(path)
  if not text then fail_at(path, "cannot read: " .. tostring(err), "check the path") end
  local rows, lineno = {}, 0
  for line in (text .. "\n"):gmatch("([^\n]*)\n") do
    lineno = lineno + 1
    if not line:match("^%s*$") then
      local ok, row = pcall(hyp.json_decode, line)
      if not ok or type(row) ~= "table" then
        fail_at(path .. ":" .. lineno, "not a JSON object", "give the metrics file a trainer wrote (--metrics)")
      end
      if type(row.step) == "number" and type(row.loss) == "number" then rows[#rows + 1] = row end
    end
  end
  if #rows == 0 then fail_at(path, "no rows with a step and a loss", "give the metrics file a trainer wrote (--metrics)") end
  local last = rows[#rows]
  local D = last.tokens_seen
  if type(D) ~= "number" or not (D > 0) then
    fail_at(path, "the last row has no tokens_seen", "train with this version of the trainer, or give the run as a CSV row")
  end
  local N = params
  if not N then
    local dir = U.dirname(path)
    for _, p in ipairs({ dir .. "/plan.json", U.dirname(dir) .. "/plan.json" }) do
      if hyp.stat(p) == "file" then
        local pt = hyp.json_decode(assert(hyp.read_file(p)))
        N = type(pt) == "table" and type(pt.model) == "table" and pt.model.params or nil
        if N then break end
      end
    end
  end
  if not N then fail_at(path, "no plan.json beside it or above it to count the parameters", "add --params N") end
  local loss, how
  for i = #rows, 1, -1 do
    if type(rows[i].val_loss) == "number" then loss, how = rows[i].val_loss, "val_loss at step " .. rows[i].step; break end
  end
  if not loss then
    local k = math.max(1, #rows // 10)
    local s = 0
    for i = #rows - k + 1, #rows do s = s + rows[i].loss end
    loss, how = s / k, string.format("mean training loss of the last %d rows", k)
  end
  if not (loss > 0) then fail_at(path, "the loss is not positive", "check the run") end
  runs[#runs + 1] = { N = N, D = D, C = 6 * N * D, loss = loss, source = path .. " (" .. how .. ")" }
end

function M.read_runs(paths, opts)
  local runs = {}
  for _, p in ipairs(paths) do
    if hyp.stat(p) ~= "file" then fail_at(p, "no such file", "give CSV files or metrics JSONL files") end
    if p:match("%.jsonl$") then read_metrics(p, runs, opts.params) else read_csv(p, runs) end
  end
  return runs
end

-- The law and what it implies.
function M.loss(law, N, D) return law.E + law.A / N ^ law.alpha + law.B / D ^ law.beta end

-- Minimizing L(N, C / 6N) over N: dL/dN = 0 gives N_opt = G (C/6)^(beta/(alpha+beta)) with
-- G = (alpha A / (beta B))^(1/(alpha+beta)) (Hoffmann et al. eq. 4).
function M.optimum(law, C)
  local a, b = law.alpha, law.beta
  local G = (a * law.A / (b * law.B)) ^ (1 / (a + b))
  local N = G * (C / 6) ^ (b / (a + b))
  local D = C / (6 * N)
  return { N = N, D = D, loss = M.loss(law, N, D), a = b / (a + b), b = a / (a + b) }
end

-- The compute-optimal token count of a model of N parameters: the D at which N is N_opt(6 N D),
-- i.e. N = G (N D)^(beta/(alpha+beta)) solved for D.
function M.tokens_for(law, N)
  local a, b = law.alpha, law.beta
  local G = (a * law.A / (b * law.B)) ^ (1 / (a + b))
  return (N / G) ^ ((a + b) / b) / N
end

-- What gen size prints from a fit: the compute-optimal tokens of the model, the predicted loss of
-- the planned run (tokens given) and the optimum for a budget, each with its bootstrap interval.
function M.size_section(fit, path, N, tokens, budget)
  local law, samples = fit.law, fit.bootstrap and fit.bootstrap.params or {}
  local out = { path = path, law = law, bootstrap_samples = #samples,
    tokens_opt = M.tokens_for(law, N),
    tokens_opt_interval = M.interval(samples, function(s) return M.tokens_for(s, N) end) }
  out.loss_at_opt = M.loss(law, N, out.tokens_opt)
  if tokens then
    out.tokens = tokens
    out.loss = M.loss(law, N, tokens)
    out.loss_interval = M.interval(samples, function(s) return M.loss(s, N, tokens) end)
  end
  if budget then
    local opt = M.optimum(law, budget)
    out.budget = { C = budget, N = opt.N, D = opt.D, loss = opt.loss,
      N_interval = M.interval(samples, function(s) return M.optimum(s, budget).N end),
      loss_interval = M.interval(samples, function(s) return M.optimum(s, budget).loss end) }
  end
  return out
end

local function percentile(sorted, q)
  if #sorted == 0 then return nil end
  local x = q * (#sorted - 1) + 1
  local i = math.floor(x)
  local f = x - i
  if i >= #sorted then return sorted[#sorted] end
  return sorted[i] + f * (sorted[i + 1] - sorted[i])
end

-- 2.5th and 97.5th percentiles of fn over the bootstrap samples (nil without samples)
function M.interval(samples, fn)
  if not samples or #samples == 0 then return nil end
  local v = {}
  for _, s in ipairs(samples) do
    local x = fn(s)
    if x == x and x ~= math.huge and x ~= -math.huge then v[#v + 1] = x end
  end
  table.sort(v)
  return { percentile(v, 0.025), percentile(v, 0.975) }
end

-- Approach 2 (IsoFLOP profiles): runs grouped by compute (a new group where the sorted log10 C
-- jumps by more than 0.05, i.e. budgets within 12% are one profile); a parabola in log N fitted to
-- each group with >= 3 distinct sizes; its vertex is that budget's N_opt if it curves upwards and
-- lies inside the sizes tried; then log N_opt = a log C + const by least squares.
local function solve3(A, y)
  -- Gaussian elimination with partial pivoting on a 3x3 system
  local m = { { A[1][1], A[1][2], A[1][3], y[1] }, { A[2][1], A[2][2], A[2][3], y[2] }, { A[3][1], A[3][2], A[3][3], y[3] } }
  for c = 1, 3 do
    local p = c
    for r = c + 1, 3 do if math.abs(m[r][c]) > math.abs(m[p][c]) then p = r end end
    m[c], m[p] = m[p], m[c]
    if math.abs(m[c][c]) < 1e-300 then return nil end
    for r = c + 1, 3 do
      local f = m[r][c] / m[c][c]
      for k = c, 4 do m[r][k] = m[r][k] - f * m[c][k] end
    end
  end
  local x = {}
  for r = 3, 1, -1 do
    local s = m[r][4]
    for k = r + 1, 3 do s = s - m[r][k] * x[k] end
    x[r] = s / m[r][r]
  end
  return x
end

function M.isoflop(runs)
  local sorted = {}
  for _, r in ipairs(runs) do sorted[#sorted + 1] = r end
  table.sort(sorted, function(p, q) return p.C < q.C end)
  local groups, cur = {}, nil
  for _, r in ipairs(sorted) do
    if not cur or math.log(r.C, 10) - math.log(cur[#cur].C, 10) > 0.05 then cur = {}; groups[#groups + 1] = cur end
    cur[#cur + 1] = r
  end
  local profiles = {}
  for _, g in ipairs(groups) do
    local sizes, lo, hi, Csum = {}, math.huge, -math.huge, 0
    for _, r in ipairs(g) do
      sizes[string.format("%.6g", r.N)] = true
      lo, hi = math.min(lo, math.log(r.N)), math.max(hi, math.log(r.N))
      Csum = Csum + math.log(r.C)
    end
    local distinct = 0
    for _ in pairs(sizes) do distinct = distinct + 1 end
    if distinct >= 3 then
      -- in x = ln N - its mean: the normal equations of 1, x, x^2 stay well conditioned (uncentred,
      -- ln N ~ 20 squares the Vandermonde's condition number to ~1e10)
      local S = { { 0, 0, 0 }, { 0, 0, 0 }, { 0, 0, 0 } }
      local y = { 0, 0, 0 }
      local mx = 0
      for _, r in ipairs(g) do mx = mx + math.log(r.N) / #g end
      for _, r in ipairs(g) do
        local x = math.log(r.N) - mx
        local v = { 1, x, x * x }
        for i = 1, 3 do
          for j = 1, 3 do S[i][j] = S[i][j] + v[i] * v[j] end
          y[i] = y[i] + v[i] * r.loss
        end
      end
      local c = solve3(S, y)
      local prof = { C = math.exp(Csum / #g), runs = #g, sizes = distinct }
      if c and c[3] > 0 then
        local xv = -c[2] / (2 * c[3])
        prof.N_opt = math.exp(xv + mx)
        prof.loss_opt = c[1] + c[2] * xv + c[3] * xv * xv
        prof.inside = xv + mx >= lo and xv + mx <= hi
      end
      profiles[#profiles + 1] = prof
    end
  end
  local pts = {}
  for _, p in ipairs(profiles) do if p.N_opt and p.inside then pts[#pts + 1] = p end end
  local res = { profiles = U.array(profiles), used = #pts }
  if #pts >= 2 then
    local sx, sy, sxx, sxy = 0, 0, 0, 0
    for _, p in ipairs(pts) do
      local x, yv = math.log(p.C), math.log(p.N_opt)
      sx, sy, sxx, sxy = sx + x, sy + yv, sxx + x * x, sxy + x * yv
    end
    local n = #pts
    local den = n * sxx - sx * sx
    if den > 0 then
      res.a = (n * sxy - sx * sy) / den -- N_opt ∝ C^a
      res.log_k = (sy - res.a * sx) / n
      res.b = 1 - res.a               -- D_opt = C / (6 N_opt) ∝ C^(1-a)
    end
  end
  return res
end

local function si(v)
  local units = { { 1e24, "Y" }, { 1e21, "Z" }, { 1e18, "E" }, { 1e15, "P" }, { 1e12, "T" }, { 1e9, "G" }, { 1e6, "M" }, { 1e3, "k" } }
  for _, u in ipairs(units) do if math.abs(v) >= u[1] then return string.format("%.3g%s", v / u[1], u[2]) end end
  return string.format("%.3g", v)
end
M.si = si

local function esc(s) return (tostring(s):gsub("&", "&amp;"):gsub("<", "&lt;"):gsub(">", "&gt;")) end

-- Loss against N (log axis), the runs as dots coloured by compute, and the law's IsoFLOP curve
-- L(N, C/6N) for each decade of compute the runs span, its minimum marked.
function M.svg(runs, law, title)
  local W, H, ml, mr, mt, mb = 760, 480, 70, 150, 50, 55
  local pw, ph = W - ml - mr, H - mt - mb
  local nlo, nhi, llo, lhi, clo, chi = math.huge, -math.huge, math.huge, -math.huge, math.huge, -math.huge
  for _, r in ipairs(runs) do
    nlo, nhi = math.min(nlo, math.log(r.N, 10)), math.max(nhi, math.log(r.N, 10))
    llo, lhi = math.min(llo, r.loss), math.max(lhi, r.loss)
    clo, chi = math.min(clo, math.log(r.C, 10)), math.max(chi, math.log(r.C, 10))
  end
  nlo, nhi = math.floor(nlo), math.ceil(nhi)
  if nhi == nlo then nhi = nlo + 1 end
  local pad = 0.05 * (lhi - llo + 1e-9)
  llo, lhi = llo - pad, lhi + pad
  local function X(n) return ml + (math.log(n, 10) - nlo) / (nhi - nlo) * pw end
  local function Y(l) return mt + ph - (l - llo) / (lhi - llo) * ph end
  local function colour(lc)
    local t = chi > clo and (lc - clo) / (chi - clo) or 0.5
    return string.format("#%02x%02x%02x", math.floor(30 + 200 * t), 60, math.floor(220 - 180 * t))
  end
  local o = {}
  local function w(...) o[#o + 1] = string.format(...) end
  w('<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">\n', W, H, W, H)
  w('<rect width="100%%" height="100%%" fill="white"/>\n')
  w('<text x="%d" y="24" font-size="15" font-weight="bold">%s</text>\n', ml, esc(title))
  for e = nlo, nhi do
    w('<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#e0e0e0"/>\n', X(10 ^ e), mt, X(10 ^ e), mt + ph)
    w('<text x="%.1f" y="%d" text-anchor="middle">%s</text>\n', X(10 ^ e), mt + ph + 16, si(10 ^ e))
  end
  for k = 0, 4 do
    local l = llo + k * (lhi - llo) / 4
    w('<text x="%d" y="%.1f" text-anchor="end">%.2f</text>\n', ml - 6, Y(l) + 4, l)
  end
  w('<rect x="%d" y="%d" width="%d" height="%d" fill="none" stroke="#444"/>\n', ml, mt, pw, ph)
  w('<text x="%d" y="%d" text-anchor="middle">parameters N</text>\n', ml + pw // 2, H - 12)
  w('<text x="16" y="%d" transform="rotate(-90 16 %d)" text-anchor="middle">loss</text>\n', mt + ph // 2, mt + ph // 2)
  if law then
    local li = 0
    for lc = math.ceil(clo), math.floor(chi) do
      local pts = {}
      for k = 0, 120 do
        local n = 10 ^ (nlo + k * (nhi - nlo) / 120)
        local l = M.loss(law, n, 10 ^ lc / (6 * n))
        if l >= llo and l <= lhi then pts[#pts + 1] = string.format("%.1f,%.1f", X(n), Y(l)) end
      end
      if #pts > 1 then
        w('<polyline fill="none" stroke="%s" stroke-width="1.5" points="%s"/>\n', colour(lc), table.concat(pts, " "))
        local opt = M.optimum(law, 10 ^ lc)
        if opt.loss >= llo and opt.loss <= lhi and opt.N >= 10 ^ nlo and opt.N <= 10 ^ nhi then
          w('<circle cx="%.1f" cy="%.1f" r="4" fill="none" stroke="black"/>\n', X(opt.N), Y(opt.loss))
        end
        w('<text x="%d" y="%d" fill="%s">C = 1e%d</text>\n', ml + pw + 10, mt + 14 + 16 * li, colour(lc), lc)
        li = li + 1
      end
    end
  end
  for _, r in ipairs(runs) do
    w('<circle cx="%.1f" cy="%.1f" r="2.5" fill="%s"/>\n', X(r.N), Y(r.loss), colour(math.log(r.C, 10)))
  end
  w("</svg>\n")
  return table.concat(o)
end

local PARAMS = { "A", "B", "E", "alpha", "beta" }

function M.load(path)
  local text, err = hyp.read_file(path)
  if not text then fail_at(path, "cannot read: " .. tostring(err), "give the -o file of `gen scaling fit`") end
  local ok, t = pcall(hyp.json_decode, text)
  if not ok or type(t) ~= "table" or t.format ~= M.FORMAT or type(t.law) ~= "table" then
    fail_at(path, "not a fit written by `gen scaling fit -o`", "run gen scaling fit RUNS -o " .. path)
  end
  for _, k in ipairs(PARAMS) do
    local v = t.law[k]
    if type(v) ~= "number" or v ~= v or v < 0 or v == math.huge then fail_at(path, "law." .. k .. " is not a non-negative number", "refit") end
  end
  if not (t.law.alpha > 0 and t.law.beta > 0) then fail_at(path, "alpha and beta must be positive for an optimum to exist", "refit with more runs") end
  return t
end

local function fit(runs, o)
  local N, D, L = {}, {}, {}
  for i, r in ipairs(runs) do N[i], D[i], L[i] = r.N, r.D, r.loss end
  local t0 = hyp.clock()
  local best = hyp.scaling_fit(N, D, L, { a = o.grid.a, b = o.grid.b, e = o.grid.e, alpha = o.grid.alpha, beta = o.grid.beta, delta = o.delta })
  local samples = {}
  if o.bootstrap > 0 then samples = hyp.scaling_bootstrap(N, D, L, best, o.bootstrap, o.seed, o.delta) end
  return best, samples, hyp.clock() - t0
end

function M.main(args, parse)
  local sub = args[1]
  if sub == nil or sub == "--help" or sub == "-h" then io.write(USAGE); return sub == nil and 2 or 0 end
  if sub ~= "fit" then fail_at("<command line>", "unknown scaling command '" .. sub .. "'", "use gen scaling fit RUNS...") end
  local rest = { table.unpack(args, 2) }
  for _, a in ipairs(rest) do if a == "--help" or a == "-h" then io.write(USAGE); return 0 end end
  local o = parse(rest, { ["-o"] = "value", ["--svg"] = "value", ["--bootstrap"] = "value", ["--seed"] = "value",
    ["--grid"] = "value", ["--exclude-top"] = "value", ["--delta"] = "value", ["--budget"] = "value",
    ["--params"] = "value", ["--json"] = "flag" })
  if #o._pos == 0 then fail_at("<command line>", "gen scaling fit needs runs", "e.g. gen scaling fit runs.csv -o fit.json") end
  local function int_opt(name, default, lo, hi)
    local v = o[name]
    if v == nil then return default end
    local n = tonumber(v)
    if not n or n ~= math.floor(n) or n < lo or n > hi then
      fail_at("<command line>", name .. " '" .. v .. "' is not an integer in [" .. lo .. ", " .. hi .. "]", "e.g. " .. name .. " " .. default)
    end
    return math.tointeger(n)
  end
  local opts = {
    bootstrap = int_opt("--bootstrap", 200, 0, 100000), seed = int_opt("--seed", 1, 0, 2 ^ 53),
    exclude = int_opt("--exclude-top", 0, 0, 1e9), delta = tonumber(o["--delta"] or "1e-3"),
    grid = M.GRIDS[o["--grid"] or "full"],
  }
  if not opts.grid then fail_at("<command line>", "--grid '" .. o["--grid"] .. "' is not full or coarse", "use --grid full or --grid coarse") end
  if not opts.delta or not (opts.delta > 0) then fail_at("<command line>", "--delta must be a positive number", "e.g. --delta 1e-3") end
  if o["--params"] then opts.params = number_at(o["--params"], "<command line>", "--params") end
  local budget = o["--budget"] and number_at(o["--budget"], "<command line>", "--budget") or nil

  local runs = M.read_runs(o._pos, opts)
  if opts.exclude > 0 then
    if opts.exclude >= #runs then fail_at("<command line>", "--exclude-top " .. opts.exclude .. " leaves no runs of " .. #runs, "exclude fewer") end
    table.sort(runs, function(p, q) return p.loss < q.loss end)
    for _ = 1, opts.exclude do table.remove(runs) end
  end
  if #runs < 5 then
    fail_at(o._pos[1], #runs .. " runs for 5 parameters", "fit at least 5 runs (tens, over several N and D, to mean anything)")
  end
  local best, samples, secs = fit(runs, opts)
  local law = { A = best.A, B = best.B, E = best.E, alpha = best.alpha, beta = best.beta }
  local ci = {}
  for _, k in ipairs(PARAMS) do ci[k] = M.interval(samples, function(s) return s[k] end) end
  ci.a_opt = M.interval(samples, function(s) return s.beta / (s.alpha + s.beta) end)
  local iso = M.isoflop(runs)
  local res = {
    format = M.FORMAT, version = M.VERSION, method = "approach 3 (Hoffmann et al. 2022): Huber(delta) on log-loss residuals, L-BFGS from a grid",
    law = law, log_params = { a = best.a, b = best.b, e = best.e }, objective = best.objective, delta = opts.delta,
    starts = best.starts, converged_starts = best.usable, seconds = secs,
    intervals = ci, bootstrap = { samples = #samples, requested = opts.bootstrap, seed = opts.seed, params = U.array({}) },
    approach2 = iso, runs = U.array({}),
  }
  for _, s in ipairs(samples) do
    res.bootstrap.params[#res.bootstrap.params + 1] = { A = s.A, B = s.B, E = s.E, alpha = s.alpha, beta = s.beta }
  end
  for _, r in ipairs(runs) do res.runs[#res.runs + 1] = { N = r.N, D = r.D, C = r.C, loss = r.loss, predicted = M.loss(law, r.N, r.D) } end
  if budget then
    local opt = M.optimum(law, budget)
    res.budget = { C = budget, N = opt.N, D = opt.D, loss = opt.loss,
      N_interval = M.interval(samples, function(s) return M.optimum(s, budget).N end),
      loss_interval = M.interval(samples, function(s) return M.optimum(s, budget).loss end) }
  end
  if o["-o"] then
    local text = assert(hyp.json_encode(res, true))
    local ok, err = hyp.write_file(o["-o"], text .. "\n")
    if not ok then fail_at(o["-o"], "cannot write: " .. tostring(err), "check the path and permissions") end
  end
  if o["--svg"] then
    local ok, err = hyp.write_file(o["--svg"], M.svg(runs, law, string.format("L(N,D) = %.3g + %.4g/N^%.3f + %.4g/D^%.3f", law.E, law.A, law.alpha, law.B, law.beta)))
    if not ok then fail_at(o["--svg"], "cannot write: " .. tostring(err), "check the path and permissions") end
  end
  if o["--json"] then io.write(assert(hyp.json_encode(res, true)), "\n"); return 0 end

  local function iv(k, fmt)
    local c = ci[k]
    return c and string.format(" [" .. fmt .. ", " .. fmt .. "]", c[1], c[2]) or ""
  end
  io.write(string.format("gen scaling fit: %d runs (N %s–%s, D %s–%s), %d of %d starts converged, %.1f s\n", #runs,
    si(math.min(table.unpack((function() local t = {} for i, r in ipairs(runs) do t[i] = r.N end return t end)()))),
    si(math.max(table.unpack((function() local t = {} for i, r in ipairs(runs) do t[i] = r.N end return t end)()))),
    si(math.min(table.unpack((function() local t = {} for i, r in ipairs(runs) do t[i] = r.D end return t end)()))),
    si(math.max(table.unpack((function() local t = {} for i, r in ipairs(runs) do t[i] = r.D end return t end)()))),
    best.usable, best.starts, secs))
  io.write(string.format("  L(N, D) = E + A/N^alpha + B/D^beta   (Huber delta %g; objective %.6g)\n", opts.delta, best.objective))
  io.write(string.format("  E     = %.4f%s\n  A     = %.2f%s\n  B     = %.2f%s\n  alpha = %.4f%s\n  beta  = %.4f%s\n",
    law.E, iv("E", "%.4f"), law.A, iv("A", "%.2f"), law.B, iv("B", "%.2f"), law.alpha, iv("alpha", "%.4f"), law.beta, iv("beta", "%.4f")))
  io.write(string.format("  compute-optimal: N_opt ∝ C^%.3f%s, D_opt ∝ C^%.3f (Chinchilla approach 3 published: 0.46 / 0.54)\n",
    law.beta / (law.alpha + law.beta), iv("a_opt", "%.3f"), law.alpha / (law.alpha + law.beta)))
  if #samples > 0 then
    io.write(string.format("  intervals: 2.5–97.5 percentiles of %d bootstrap refits (seed %d)\n", #samples, opts.seed))
  end
  if iso.a then
    io.write(string.format("  approach 2 (IsoFLOP): %d profiles with a minimum inside their sizes; N_opt ∝ C^%.3f, D_opt ∝ C^%.3f\n", iso.used, iso.a, iso.b))
  else
    io.write(string.format("  approach 2 (IsoFLOP): %d profiles of >= 3 sizes, %d with a minimum inside them — too few for a fit\n", #iso.profiles, iso.used))
  end
  if res.budget then
    local b = res.budget
    io.write(string.format("  budget %s FLOP: N = %s%s, D = %s, predicted loss %.4f%s\n", si(b.C), si(b.N),
      b.N_interval and string.format(" [%s, %s]", si(b.N_interval[1]), si(b.N_interval[2])) or "", si(b.D), b.loss,
      b.loss_interval and string.format(" [%.4f, %.4f]", b.loss_interval[1], b.loss_interval[2]) or ""))
  end
  if o["-o"] then io.write("  wrote " .. o["-o"] .. " (gen size --fit " .. o["-o"] .. ")\n") end
  if o["--svg"] then io.write("  wrote " .. o["--svg"] .. "\n") end
  return 0
end

return M
