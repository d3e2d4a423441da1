-- replay.lua — activation recompute as a plan transformation, shared by the recompute techniques
-- (full checkpointing and selective recompute): group a built step's ops by transformer layer,
-- build the forward replay of a layer (every forward op whose output the layer's backward reads,
-- or only chosen ops' chosen outputs) writing "r:" copies, rename the backward's reads to those
-- copies, and splice each replay right before its layer's first backward op. Names no spec id.
-- Never: replay an op with state (an FP8 quantize updates its amax history), touch an op outside
-- its layer, or overwrite a kept buffer (every activation a replay writes is a fresh copy).
local U = require("util")
local R = {}

-- ops whose replay would not be a pure function of their inputs
R.STATEFUL = { fp8_quantize = true }

-- Per-layer forward ops F[l], backward ops B[l], and used_outside: buffers touched outside the
-- layers (or by two layers: the residual stream between them), which a replay never drops.
-- Layers in sched.recomputed (set by an earlier replay) are left out of F and B.
function R.split(sched)
  local F, B, used_outside, layers_of = {}, {}, {}, {}
  local skip = sched.recomputed or {}
  local function note(o)
    for _, k in ipairs({ "ins", "outs" }) do
      for _, nm in ipairs(o[k]) do
        if o.layer == nil then used_outside[nm] = true
        else
          layers_of[nm] = layers_of[nm] or {}
          layers_of[nm][o.layer] = true
        end
      end
    end
  end
  for _, o in ipairs(sched.fwd) do
    if o.layer and not skip[o.layer] then F[o.layer] = F[o.layer] or {}; table.insert(F[o.layer], o) end
    note(o)
  end
  for _, o in ipairs(sched.bwd) do
    if o.layer and not skip[o.layer] then B[o.layer] = B[o.layer] or {}; table.insert(B[o.layer], o) end
    note(o)
  end
  note(sched.loss)
  for nm, ls in pairs(layers_of) do
    local n = 0
    for _ in pairs(ls) do n = n + 1 end
    if n > 1 then used_outside[nm] = true end
  end
  return F, B, used_outside
end

-- The replay of one layer: forward ops F, backward ops B. pick = nil: every layer-internal
-- activation the backward reads is recomputed, with the forward ops it needs (full
-- checkpointing); pick(o, i) = true: output i of forward op o is recomputed by replaying o alone
-- (its inputs are kept from the forward; selective recompute). Returns the ops to insert before
-- B, copies of B's ops that read the recomputed buffers, and the bytes recomputed.
function R.layer(g, F, B, used_outside, pick)
  local internal = {}
  for _, o in ipairs(F) do
    for _, nm in ipairs(o.outs) do
      local bf = g.by_name[nm]
      if bf and bf.kind == "act" and not used_outside[nm] then internal[nm] = true end
    end
  end
  local read = {}
  for _, o in ipairs(B) do
    for _, nm in ipairs(o.ins) do if internal[nm] then read[nm] = true end end
  end
  local need, keep = {}, {}
  if pick then
    for i, o in ipairs(F) do
      for j, nm in ipairs(o.outs) do
        if read[nm] and pick(o, j) then need[nm] = true; keep[i] = true end
      end
    end
  else
    for nm in pairs(read) do need[nm] = true end
    for i = #F, 1, -1 do
      local o = F[i]
      for _, nm in ipairs(o.outs) do
        if need[nm] then keep[i] = true end
      end
      if keep[i] then
        for _, nm in ipairs(o.ins) do if internal[nm] then need[nm] = true end end
      end
    end
  end
  for i, o in ipairs(F) do
    if keep[i] and R.STATEFUL[o.op] then error("replay: a stateful op (" .. o.op .. ") in a recomputed layer") end
  end
  local function copy_of(nm)
    local r = "r:" .. nm
    if not g.by_name[r] then
      local src = g.by_name[nm]
      g.buf(r, "act", src.shape, src.dtype)
    end
    return r
  end
  local function rename(list, all)
    local out = U.array()
    for i, nm in ipairs(list) do
      out[i] = (need[nm] or (all and g.by_name[nm] and g.by_name[nm].kind == "act")) and copy_of(nm) or nm
    end
    return out
  end
  local ops, bytes = {}, 0
  for i, o in ipairs(F) do
    if keep[i] then
      ops[#ops + 1] = { op = o.op, ins = rename(o.ins), outs = rename(o.outs, true), attrs = o.attrs, layer = o.layer }
    end
  end
  local Bc = {}
  for i, o in ipairs(B) do Bc[i] = { op = o.op, ins = rename(o.ins), outs = rename(o.outs), attrs = o.attrs, layer = o.layer } end
  for nm in pairs(need) do bytes = bytes + g.by_name[nm].bytes end
  return ops, Bc, bytes
end

-- The backward with rep[l] = {ops, B} spliced in: rep[l].ops right before layer l's first
-- backward op, its backward ops replaced by rep[l].B (in order).
function R.splice(sched, rep)
  local at = {}
  local bwd = U.array()
  for _, o in ipairs(sched.bwd) do
    local r = o.layer and rep[o.layer]
    if r then
      local i = at[o.layer] or 0
      if i == 0 then for _, x in ipairs(r.ops) do bwd[#bwd + 1] = x end end
      i = i + 1
      at[o.layer] = i
      bwd[#bwd + 1] = r.B[i]
    else
      bwd[#bwd + 1] = o
    end
  end
  return bwd
end

return R
