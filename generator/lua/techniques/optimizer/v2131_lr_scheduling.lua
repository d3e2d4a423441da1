-- v2131 LR schedule after warmup: constant, cosine, linear or WSD (warmup-stable-decay) down to
-- min_lr_ratio of the peak; the runtime evaluates it per optimizer step from plan.train.
return {
  id = "v2131",
  settings = {
    { "train", "schedule", "schedule", "constant", "train.schedule" },
    { "train", "min_lr_ratio", "min_lr_ratio", 1.0, "train.min_lr_ratio" },
    { "train", "decay_fraction", "decay_fraction", 0.2, "train.decay_fraction", quiet = true },
  },
}
