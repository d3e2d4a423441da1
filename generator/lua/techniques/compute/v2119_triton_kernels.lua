-- v2119 the project's own templated tensor-core GEMM (templates/gemm.cu.lua). What the plan gives
-- it today: the GEMM+GELU sites v2166 marks (attrs.epilogue "gelu": the MLP's fc GEMM, its bias
-- and the GELU), when the GEMM runs on bf16 operands (v2102 storage bf16: bf16 activations and the
-- bf16 weight copy) on a device target — the kernel, rendered with EPILOGUE bias_gelu and AUX (the
-- pre-activation the GELU backward reads), replaces the cuBLASLt GELU_AUX_BIAS call
-- (runtime/device/exec_dev.c, matmul_gelu_fwd). And the SwiGLU sites this spec marks itself
-- (attrs.epilogue "swiglu": a llama MLP's fused gate|up GEMM whose output the next swiglu_fwd
-- reads; cuBLASLt has no such epilogue, so v2166 marks none): rendered EPILOGUE swiglu and AUX
-- (h = [gate | up], which swiglu_bwd reads), the GEMM writes h and a = silu(gate) up, and the
-- swiglu_fwd launch (its read of h) goes (exec_dev.c, matmul_swiglu_fwd). Every other GEMM stays cuBLASLt. Never: a GEMM on
-- fp32 operands (the template reads bf16 A and B), a plan op of its own, anything on the cpu
-- backend.
local M = { id = "v2119", families = { "gemm" } }

-- Whether the plan has sites for the template: v2166's GEMM+GELU marks on bf16 operands.
local function applies(ctx)
  local f = ctx.facts
  local sites = f.fusion and f.fusion.epilogue_sites and f.fusion.epilogue_sites.fwd or 0
  local sw = f.gemm_swiglu_sites or 0
  return ctx.target.kind ~= "cpu" and (sites > 0 or sw > 0) and f.precision and f.precision.storage == "bf16", sites, sw
end

-- Marks the SwiGLU sites (forward lists, replays included): a matmul_fwd whose output the next op,
-- a swiglu_fwd, reads — when v2166's epilogues are on (device target, no fp8) on bf16 storage.
function M.schedule(ctx, g, sched)
  local f = ctx.facts
  if not (f.fusion and f.fusion.epilogues and f.precision and f.precision.storage == "bf16") then return end
  local n = 0
  for _, list in ipairs({ sched.fwd, sched.bwd }) do
    for i, o in ipairs(list) do
      local nx = list[i + 1]
      if o.op == "matmul_fwd" and nx and nx.op == "swiglu_fwd" and nx.ins[1] == o.outs[1] and not o.attrs.epilogue then
        o.attrs.epilogue, n = "swiglu", n + 1
      end
    end
  end
  f.gemm_swiglu_sites = n
end

function M.kernels(ctx, k)
  local on, sites, sw = applies(ctx)
  if not on then
    local f = ctx.facts
    ctx.warn(ctx.target.kind == "cpu" and "the cpu backend runs its GEMMs with oneDNN; the templated GEMM is a device kernel (--target sim or sm_XX)"
      or not (f.precision and f.precision.storage == "bf16") and "the templated GEMM reads bf16 operands: enable bf16 (v2102 storage) — every GEMM of this fp32 trainer stays cuBLASLt"
      or "no GEMM+GELU or GEMM+SwiGLU site (enable fusion: v2166's epilogues) — every GEMM stays cuBLASLt")
    return
  end
  if sites == 0 then -- a llama-layout MLP: the gate|up GEMM with the SwiGLU epilogue
    k.want("gemm", { "gemm_bf16" }, { EPILOGUE = "swiglu", AUX = true, OUT = "bf16", TILE_M = ctx.param("tile_m"),
      TILE_N = ctx.param("tile_n"), TILE_K = ctx.param("tile_k"), STAGES = ctx.param("stages") })
    ctx.contribute(string.format("kernel: the templated tensor-core GEMM (gemm_bf16, SwiGLU epilogue: writes h = [gate | up] for the backward and silu(gate) up) at %d gate/up GEMM sites; the swiglu_fwd launch and its read of h go", sw))
    return
  end
  -- the spec's params are the tiles (the template checks them: multiples of 16 per warp, smem)
  k.want("gemm", { "gemm_bf16" }, { EPILOGUE = "bias_gelu", AUX = true, OUT = "bf16", TILE_M = ctx.param("tile_m"),
    TILE_N = ctx.param("tile_n"), TILE_K = ctx.param("tile_k"), STAGES = ctx.param("stages") })
  ctx.contribute(string.format("kernel: the templated tensor-core GEMM (gemm_bf16: cp.async pipeline, ldmatrix, mma.sync, bias + GELU epilogue writing the pre-activation too) at %d GEMM+GELU sites instead of cuBLASLt's GELU_AUX_BIAS", sites))
end

function M.rendered(ctx)
  local on, sites = applies(ctx)
  if not on then return end
  if sites == 0 then
    ctx.decide("kernels.gemm", "templated GEMM at the GEMM+SwiGLU sites",
      "v2119: each MLP's gate|up GEMM runs templates/gemm.cu.lua with the SwiGLU epilogue (bf16 operands, fp32 mma accumulation; h and silu(gate) up both stored); the other GEMMs stay cuBLASLt")
    return
  end
  ctx.decide("kernels.gemm", "templated GEMM at the GEMM+GELU sites",
    "v2119: the fc GEMM + bias + GELU of each MLP runs templates/gemm.cu.lua (bf16 operands, fp32 mma accumulation, GELU and the pre-activation in its epilogue); the other GEMMs stay cuBLASLt")
end

return M
