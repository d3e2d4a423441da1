-- v2103 gradient accumulation: `steps` micro-batches per optimizer step (the runtime sums their
-- gradients and averages over the global batch).
return {
  id = "v2103",
  settings = { { "train", "grad_accum", "steps", 1, "train.grad_accum" } },
}
