-- v2166 kernel fusion, in the generated CUDA kernels (sim and sm_XX): residual add + norm in one
-- kernel (forward) and the norm's input gradient + residual accumulate (backward); RoPE inside
-- the QKV split/permute of the naive attention path. The runtime executes the fused sites that
-- the manifest lists (kernels.json "fusions"). The cpu backend has no fused ops: on --target cpu
-- the spec contributes nothing, and gen says so. qkv (one GEMM for Q, K and V) is how every plan
-- is built; epilogues (bias/GELU in the GEMM) are not implemented — both recorded.
local M = { id = "v2166", families = { "layernorm", "rmsnorm", "rope", "classifier" } }

function M.derive(ctx)
  local on = ctx.param("residual_norm") == true
  ctx.facts.fusion = { residual_norm = on, rope = on }
  if ctx.target.kind == "cpu" then
    ctx.warn("the cpu backend has no fused ops; the fusions apply to the generated CUDA kernels (--target sim or sm_XX): this cpu trainer is unchanged")
  end
  if ctx.param("qkv") then
    ctx.decide("v2166.qkv", "always", "every plan computes Q, K and V with one GEMM over the contiguous q/k/v weights (fused view), with or without v2166")
  end
  if ctx.param("epilogues") then
    ctx.decide("v2166.epilogues", "not applied", "bias and GELU stay separate ops/kernels after the GEMM: cuBLASLt epilogues are not wired into the plan")
  end
  if ctx.param("cross_entropy") then
    ctx.decide("v2166.cross_entropy", "always", "every trainer's classifier is fused (softmax + cross-entropy + dlogits in place over vocabulary chunks, probabilities never stored), with or without v2166")
  end
end

function M.rendered(ctx, r)
  if not ctx.facts.fusion.residual_norm then return end
  local s = r.sites
  if #s.rope_fwd > 0 then
    ctx.contribute(string.format("kernel: RoPE fused into the QKV split/permute (qkv_permute_fwd/bwd with rope=1) at %d forward and %d backward attention sites",
      #s.rope_fwd, #s.rope_bwd))
  end
  ctx.contribute(string.format("kernel: fused residual add + norm (residual_%s_fwd) for %d add+norm pairs, and its backward (residual_%s_bwd_dx) for %d norm-backward+accumulate pairs",
    r.norm, #s.fwd, r.norm, #s.bwd))
end

return M
