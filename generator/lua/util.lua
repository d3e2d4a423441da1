-- util.lua — small shared helpers: source positions, errors as values, did-you-mean, ordering.
-- Errors: every user-facing failure is raised with U.fail(where, what, fix) (or collected with
-- U.errors()) and printed by cli.lua as "where: what — fix", exit status 2. Nothing here writes
-- files.
local U = {}

-- "file:line:col" of a YAML node, or of the value under `key` in it (mapping key or list index).
function U.where(node, key)
  local mt = type(node) == "table" and getmetatable(node)
  if not mt or not mt.__file then return "<command line>" end
  local p = mt.__pos
  if key ~= nil then
    local kp = (mt.__kpos and mt.__kpos[key]) or (mt.__ipos and mt.__ipos[key])
    if kp then p = kp end
  end
  return string.format("%s:%d:%d", mt.__file, p // 1048576, p % 1048576)
end

function U.file_of(node)
  local mt = type(node) == "table" and getmetatable(node)
  return mt and mt.__file
end

local ErrMT = {}
ErrMT.__index = ErrMT
ErrMT.__tostring = function(e) return U.format_errors(e.list) end

function U.is_error(e) return getmetatable(e) == ErrMT end

function U.format_errors(list)
  local out = {}
  for _, e in ipairs(list) do
    out[#out + 1] = string.format("%s: %s — %s", e.where, e.what, e.fix)
  end
  return table.concat(out, "\n")
end

-- Raise one bad-input error.
function U.fail(where, what, fix)
  error(setmetatable({ list = { { where = where, what = what, fix = fix } } }, ErrMT), 0)
end

-- A collector: c:add(where, what, fix); c:raise_if_any() raises them all at once.
function U.errors()
  local c = { list = {} }
  function c:add(where, what, fix) self.list[#self.list + 1] = { where = where, what = what, fix = fix } end
  function c:count() return #self.list end
  function c:raise_if_any()
    if #self.list > 0 then error(setmetatable({ list = self.list }, ErrMT), 0) end
  end
  return c
end

-- Levenshtein distance, for did-you-mean.
function U.distance(a, b)
  local la, lb = #a, #b
  if la == 0 then return lb end
  if lb == 0 then return la end
  local prev, cur = {}, {}
  for j = 0, lb do prev[j] = j end
  for i = 1, la do
    cur[0] = i
    local ca = a:sub(i, i)
    for j = 1, lb do
      local cost = (ca == b:sub(j, j)) and 0 or 1
      cur[j] = math.min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + cost)
    end
    prev, cur = cur, prev
  end
  return prev[lb]
end

-- " (did you mean 'x'?)" or "" — candidates is a list of strings.
function U.did_you_mean(word, candidates)
  local best, bestd
  for _, c in ipairs(candidates) do
    local d = U.distance(word:lower(), c:lower())
    if not bestd or d < bestd or (d == bestd and c < best) then best, bestd = c, d end
  end
  if best and bestd <= math.max(2, math.floor(#word / 3)) then
    return string.format(" (did you mean '%s'?)", best)
  end
  return ""
end

function U.sorted_keys(t)
  local ks = {}
  for k in pairs(t) do ks[#ks + 1] = k end
  table.sort(ks, function(a, b) return tostring(a) < tostring(b) end)
  return ks
end

function U.split(s, sep)
  local out = {}
  for part in (s .. sep):gmatch("(.-)" .. sep:gsub("%p", "%%%0")) do
    part = part:match("^%s*(.-)%s*$")
    if part ~= "" then out[#out + 1] = part end
  end
  return out
end

function U.is_null(v) return v == hyp.null end

-- A table that encodes as a JSON array even when empty.
function U.array(t)
  return setmetatable(t or {}, { __json = "array" })
end

-- Copies a YAML-derived value into plain tables (drops position metatables, keeps arrays).
function U.plain(v)
  if type(v) ~= "table" then
    if v == hyp.null then return nil end
    return v
  end
  local out = {}
  local n = 0
  for k, x in pairs(v) do out[k] = U.plain(x); n = n + 1 end
  if n == 0 then
    local mt = getmetatable(v)
    if mt and mt.__ipos then return U.array(out) end
  end
  return out
end

function U.fmt_value(v)
  if type(v) == "number" then
    if math.type(v) == "integer" then return tostring(v) end
    return string.format("%.6g", v)
  end
  return tostring(v)
end

function U.dirname(p) return p:match("^(.*)/[^/]*$") or "." end
function U.basename(p) return p:match("([^/]*)$") end

-- A trainer's metrics JSONL summed up: the mean training loss of the last 5% of its rows (one
-- step's loss is noisy) and its last val_loss (nil without one); nil for a file without loss rows.
-- Lenient: lines that are not a JSON object with a numeric loss are skipped (a run cut short).
function U.metrics_summary(path)
  local rows = {}
  for l in ((hyp.read_file(path) or "") .. "\n"):gmatch("([^\n]*)\n") do
    if l ~= "" then
      local ok, r = pcall(hyp.json_decode, l)
      if ok and type(r) == "table" and type(r.loss) == "number" then rows[#rows + 1] = r end
    end
  end
  if #rows == 0 then return nil end
  local k, s, val = math.max(1, #rows // 20), 0, nil
  for i = #rows - k + 1, #rows do s = s + rows[i].loss end
  for i = #rows, 1, -1 do if type(rows[i].val_loss) == "number" then val = rows[i].val_loss; break end end
  return { loss = s / k, val_loss = val }
end

-- The drivers that run generated trainers (gen lottery, gen progressive, gen sweep): an argument
-- quoted for sh, a command run with its stdout and stderr into LOG (its exit status: 0, the
-- command's code, or 1 when killed), and the last N lines of a file.
function U.shq(s) return "'" .. tostring(s):gsub("'", "'\\''") .. "'" end

function U.run_logged(argv, log)
  local parts = {}
  for i, a in ipairs(argv) do parts[i] = U.shq(a) end
  local ok, how, code = os.execute(table.concat(parts, " ") .. " > " .. U.shq(log) .. " 2>&1")
  return ok and 0 or (how == "exit" and code or 1)
end

function U.tail_lines(path, n)
  local t = hyp.read_file(path) or ""
  local lines = {}
  for l in t:gmatch("[^\n]+") do lines[#lines + 1] = l end
  return table.concat(lines, "\n", math.max(1, #lines - n + 1))
end

return U
