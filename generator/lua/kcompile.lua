-- kcompile.lua — the compile step of the kernels: NVRTC options, include directories and the
-- kernel cache location, the user-facing compile error (log, options, numbered source) and the
-- ptxas resource report parser. The compiling itself is the C host's (generator/nvrtc.c, parallel
-- workers, content-addressed cache). Never: compiles without saying where its cache is.
local M = {}

------------------------------------------------------------------------------------------------
-- Compile options and the cache location

function M.cache_dir()
  local c = os.getenv("HYPERION_CACHE")
  if c and c ~= "" then return c end
  local x = os.getenv("XDG_CACHE_HOME")
  if x and x ~= "" then return x .. "/hyperion" end
  local home = os.getenv("HOME")
  if home and home ~= "" then return home .. "/.cache/hyperion" end
  return nil
end

function M.nvrtc_options()
  local o = { "--std=c++17", "-default-device", "-lineinfo", "--ptxas-options=-v" }
  local extra = os.getenv("HYP_NVRTC_FLAGS")
  if extra then for w in extra:gmatch("%S+") do o[#o + 1] = w end end
  return o, extra
end

function M.include_dirs()
  local dirs = { hyp.home .. "/kernels" }
  local cuda = os.getenv("HYP_CUDA_INCLUDE")
  if not cuda or cuda == "" then cuda = hyp.cuda_include end
  if cuda and cuda ~= "" then dirs[#dirs + 1] = cuda end
  return dirs
end

function M.have_nvrtc()
  local off = os.getenv("HYP_NVRTC_DISABLE")
  return hyp.have_nvrtc and hyp.nvrtc_compile ~= nil and not (off and off ~= "" and off ~= "0")
end

-- A compile failure as the user sees it: the NVRTC log, the options, the numbered source.
function M.format_compile_error(file, r, source)
  local L = {}
  L[#L + 1] = string.format("gen: kernels/%s: NVRTC compile failed%s", file, r.error and (" — " .. r.error) or "")
  if r.log and r.log ~= "" then
    L[#L + 1] = "--- NVRTC log ---"
    L[#L + 1] = (r.log:gsub("\n$", ""))
  end
  L[#L + 1] = "--- options ---"
  L[#L + 1] = table.concat(r.options or {}, " ")
  L[#L + 1] = "--- source (" .. file .. ") ---"
  local n = 0
  for line in (source .. (source:sub(-1) == "\n" and "" or "\n")):gmatch("(.-)\n") do
    n = n + 1
    L[#L + 1] = string.format("%5d  %s", n, line)
  end
  L[#L + 1] = "--- end ---"
  L[#L + 1] = "gen: fix the template (line numbers above are the rendered file's), or report a bug"
  return table.concat(L, "\n") .. "\n"
end

-- cumulative stack (with the non-inlined functions it calls), and spills. The "Function
-- properties" blocks of other functions (e.g. the slow path of double sin/cos) that follow an entry
-- add their spills to it (conservative: a spill anywhere counts) but not their stack frames.
function M.parse_ptxas(log)
  local list, cur, props = {}, nil, nil
  for line in (log .. "\n"):gmatch("(.-)\n") do
    local name = line:match("Compiling entry function '([^']+)'")
    if name then
      cur = { kernel = name, registers = 0, spill_stores = 0, spill_loads = 0, stack = 0, stack_cumulative = 0,
        smem = 0, barriers = 0, cmem0 = 0 }
      list[#list + 1] = cur
      props = nil
    elseif cur then
      props = line:match("Function properties for (%S+)") or props
      local st = line:match("(%d+) bytes stack frame")
      if st and props == cur.kernel then cur.stack = tonumber(st) end
      local ss = line:match("(%d+) bytes spill stores")
      if ss then cur.spill_stores = cur.spill_stores + tonumber(ss) end
      local sl = line:match("(%d+) bytes spill loads")
      if sl then cur.spill_loads = cur.spill_loads + tonumber(sl) end
      local rg = line:match("Used (%d+) registers")
      if rg then cur.registers = tonumber(rg) end
      local br = line:match("used (%d+) barriers")
      if br then cur.barriers = tonumber(br) end
      local cs = line:match("(%d+) bytes cumulative stack size")
      if cs then cur.stack_cumulative = tonumber(cs) end
      local sm = line:match("(%d+) bytes smem")
      if sm then cur.smem = tonumber(sm) end
      local cm = line:match("(%d+) bytes cmem%[0%]")
      if cm then cur.cmem0 = tonumber(cm) end
    end
  end
  return list
end


return M
