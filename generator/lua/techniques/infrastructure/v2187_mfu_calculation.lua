-- v2187 MFU: chooses what the trainer's MFU is measured against and how FLOPs are counted, in
-- the plan. attention = "full" (PaLM, causal masking not discounted; the default every plan has)
-- or "causal" (half the attention term), both from formulas.lua, the one FLOP source. cpu: the
-- trainer measures this machine's fp32 FMA peak at start (runtime/cpu/peak.c); a device target:
-- the hardware YAML of its sm (specs/hardware) at the dtype the GEMMs run in — fp8 under v2160,
-- bf16 under the bf16 policy, else fp32 (TF32 is refused by v2100) — recorded in plan.hardware.
-- Never: numerics (outside the state hash).
local F = require("formulas")
local M = { id = "v2187" }

-- The dtype the plan's GEMMs compute in, from what earlier modules recorded.
local function gemm_dtype(ctx)
  if ctx.facts.fp8 then return "fp8" end
  if ctx.facts.precision and ctx.facts.precision.bf16 then return "bf16" end
  return "fp32"
end

-- The hardware YAML of an sm (by name: a deterministic pick; same-sm parts share peaks).
local function hardware_for_sm(tree_path, sm)
  local T, U = require("tree"), require("util")
  local tree = { path = tree_path, dir = U.dirname(tree_path) }
  local names = T.list_names(tree, "hardware")
  table.sort(names)
  for _, n in ipairs(names) do
    local ok, doc = pcall(T.load_hardware, tree, n)
    if ok and doc.sm == sm then return n, doc end
  end
end

function M.sections(ctx, plan)
  local attn = ctx.param("attention")
  local m, Tp = ctx.cfg.model, plan.train.T
  if attn == "causal" then
    plan.flops_per_token = F.train_flops_per_token(m, Tp, true)
    plan.flops_attn_coef = F.train_flops_per_token(m, 1, true) - F.train_flops_per_token(m, 0, true)
  end
  plan.flops_convention = F.FLOPS_CONVENTION[attn]
  local dtype = gemm_dtype(ctx)
  if ctx.target.kind == "cpu" then
    plan.hardware.peak_source = "measured"
    ctx.contribute(string.format("mfu: against this machine's fp32 FMA peak measured at trainer start (or --peak-flops); FLOPs %s",
      plan.flops_convention))
    return
  end
  if ctx.target.kind == "sim" then
    ctx.contribute("mfu: n/a on the simulator (no hardware peak; train --peak-flops to compare anyway); FLOPs " ..
      plan.flops_convention)
    return
  end
  local name, doc = hardware_for_sm(ctx.cfg.tree, ctx.target.sm)
  if not (doc and doc.peak_tflops and doc.peak_tflops[dtype]) then
    ctx.warn(string.format("no specs/hardware YAML for sm_%s with a %s peak: MFU is n/a unless train --peak-flops",
      tostring(ctx.target.sm), dtype))
    return
  end
  plan.hardware = { name = name, peak_flops = doc.peak_tflops[dtype] * 1e12, peak_dtype = dtype, peak_source = "yaml" }
  ctx.contribute(string.format("mfu: against %s's %s peak %.1f TFLOP/s (specs/hardware/%s.yaml); FLOPs %s",
    name, dtype, doc.peak_tflops[dtype], name, plan.flops_convention))
end

return M
