-- v2119 the project's own templated tensor-core GEMM (templates/gemm.cu.lua). What the plan gives
-- it today: the GEMM+GELU sites v2166 marks (attrs.epilogue "gelu": the MLP's fc GEMM, its bias
-- and the GELU), when the GEMM runs on bf16 operands (v2102 storage bf16: bf16 activations and the
-- bf16 weight copy) on a device target — the kernel, rendered with EPILOGUE bias_gelu and AUX (the
-- pre-activation the GELU backward reads), replaces the cuBLASLt GELU_AUX_BIAS call
-- (runtime/device/exec_dev.c, matmul_gelu_fwd). Every other GEMM stays cuBLASLt. Never: a GEMM on
-- fp32 operands (the template reads bf16 A and B), a plan op of its own, anything on the cpu
-- backend.
local M = { id = "v2119", families = { "gemm" } }

-- Whether the plan has sites for the template: v2166's GEMM+GELU marks on bf16 operands.
local function applies(ctx)
  local f = ctx.facts
  local sites = f.fusion and f.fusion.epilogue_sites and f.fusion.epilogue_sites.fwd or 0
  return ctx.target.kind ~= "cpu" and sites > 0 and f.precision and f.precision.storage == "bf16", sites
end

function M.kernels(ctx, k)
  local on, sites = applies(ctx)
  if not on then
    local f = ctx.facts
    ctx.warn(ctx.target.kind == "cpu" and "the cpu backend runs its GEMMs with oneDNN; the templated GEMM is a device kernel (--target sim or sm_XX)"
      or not (f.precision and f.precision.storage == "bf16") and "the templated GEMM reads bf16 operands: enable bf16 (v2102 storage) — every GEMM of this fp32 trainer stays cuBLASLt"
      or "no GEMM+GELU site (enable fusion for v2166's epilogue marks; SwiGLU models have none) — every GEMM stays cuBLASLt")
    return
  end
  -- the spec's params are the tiles (the template checks them: multiples of 16 per warp, smem)
  k.want("gemm", { "gemm_bf16" }, { EPILOGUE = "bias_gelu", AUX = true, OUT = "bf16", TILE_M = ctx.param("tile_m"),
    TILE_N = ctx.param("tile_n"), TILE_K = ctx.param("tile_k"), STAGES = ctx.param("stages") })
  ctx.contribute(string.format("kernel: the templated tensor-core GEMM (gemm_bf16: cp.async pipeline, ldmatrix, mma.sync, bias + GELU epilogue writing the pre-activation too) at %d GEMM+GELU sites instead of cuBLASLt's GELU_AUX_BIAS", sites))
end

function M.rendered(ctx)
  if not applies(ctx) then return end
  ctx.decide("kernels.gemm", "templated GEMM at the GEMM+GELU sites",
    "v2119: the fc GEMM + bias + GELU of each MLP runs templates/gemm.cu.lua (bf16 operands, fp32 mma accumulation, GELU and the pre-activation in its epilogue); the other GEMMs stay cuBLASLt")
end

return M
