-- v2166 kernel fusion, in the generated CUDA kernels (sim and sm_XX): residual add + norm in one
-- kernel (forward) and the norm's input gradient + residual accumulate (backward); RoPE inside
-- the QKV split/permute of the naive attention path. The runtime executes the fused sites that
-- the manifest lists (kernels.json "fusions"). The cpu backend has no fused ops: on --target cpu
-- the spec contributes nothing, and gen says so. qkv (one GEMM for Q, K and V) is how every plan
-- is built. GEMM epilogues (device targets): a matmul_fwd whose output the next op's GELU reads is
-- marked attrs.epilogue = "gelu" (cuBLASLt GELU_AUX(_BIAS): the GELU's output is D, the
-- pre-activation aux), and the matmul_bwd whose input gradient only a gelu_bwd reads is marked
-- "dgelu" (DGELU: that GEMM writes the GELU input's gradient); runtime/core/plan.c checks the
-- pattern, runtime/device/exec_dev.c folds the ops. Bias gradients stay a GEMV: the plan
-- accumulates them over micro-batches, and cuBLASLt's BGRAD epilogues overwrite.
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
  ctx.facts.fusion.epilogues = ctx.param("epilogues") == true and ctx.target.kind ~= "cpu" and not ctx.facts.fp8
  if ctx.param("epilogues") and not ctx.facts.fusion.epilogues then
    ctx.decide("v2166.epilogues", "not applied", ctx.target.kind == "cpu"
      and "the cpu backend runs each GEMM and its GELU as two ops (cuBLASLt epilogues are a device feature)"
      or "FP8 GEMMs add their bias after the GEMM (a second, fp32 GEMM), so a GELU epilogue would run before the bias")
  end
  if ctx.param("cross_entropy") then
    ctx.decide("v2166.cross_entropy", "always", "every trainer's classifier is fused (softmax + cross-entropy + dlogits in place over vocabulary chunks, probabilities never stored), with or without v2166")
  end
end

-- Marks the GEMM epilogue sites of the finished step (forward replays in the backward list too).
-- The cuBLASLt rule: aux's leading dimension (the GELU's width) a multiple of 8.
function M.schedule(ctx, g, sched)
  if not ctx.facts.fusion.epilogues then return end
  local nf, nb = 0, 0
  local function mark(list)
    local readers, writers = {}, {} -- per buffer: ops reading it; ops other than zero writing it
    for _, o in ipairs(list) do
      for _, b in ipairs(o.ins) do if b ~= "" then readers[b] = (readers[b] or 0) + 1 end end
      if o.op ~= "zero" then for _, b in ipairs(o.outs) do if b ~= "" then writers[b] = (writers[b] or 0) + 1 end end end
    end
    for i, o in ipairs(list) do
      local nx = list[i + 1]
      if o.op == "matmul_fwd" and nx and nx.op == "gelu_fwd" and nx.ins[1] == o.outs[1] and o.attrs.OC % 8 == 0 then
        o.attrs.epilogue, nf = "gelu", nf + 1
      elseif o.op == "matmul_bwd" and o.outs[1] ~= "" and o.attrs.IC % 8 == 0 then
        local z, gb = list[i + 1], list[i + 2]
        if z and gb and z.op == "zero" and gb.op == "gelu_bwd" and gb.ins[1] == o.outs[1] and z.outs[1] == gb.outs[1]
            and readers[o.outs[1]] == 1 and writers[o.outs[1]] == 1 then
          o.attrs.epilogue, nb = "dgelu", nb + 1
        end
      end
    end
  end
  mark(sched.fwd)
  mark(sched.bwd)
  ctx.facts.fusion.epilogue_sites = { fwd = nf, bwd = nb }
  if nf + nb > 0 then
    ctx.contribute(string.format("gemm: cuBLASLt epilogues at %d GEMM+GELU sites (GELU_AUX_BIAS: the gelu_fwd launch goes) and %d dGELU sites (the dgrad GEMM writes the GELU input's gradient: the gelu_bwd launch and two memsets go); bias gradients stay a GEMV (they accumulate; BGRAD overwrites)",
      nf, nb))
  else
    ctx.decide("v2166.epilogues", "no site", "no GEMM whose output feeds a GELU (SwiGLU models have none: their gate product is not a cuBLASLt epilogue)")
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
