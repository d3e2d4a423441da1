-- v2133 global-norm gradient clipping: the optimizer step scales every gradient by
-- min(1, max_norm / ||g||) (cpu: op_sumsq + scale; devices: the global_norm kernels).
local M = {
  id = "v2133",
  families = { "global_norm" },
  settings = { { "train", "max_norm", "max_norm", 0.0, "train.max_norm (0 = no clipping)" } },
}

function M.sections(ctx)
  ctx.contribute("global-norm clipping in the optimizer step (op_sumsq + scale)")
end

function M.rendered(ctx)
  ctx.contribute("kernel: global gradient norm (deterministic two-pass reduction) writing the clip factor for AdamW")
end

return M
