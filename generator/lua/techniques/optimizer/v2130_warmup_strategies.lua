-- v2130 warmup: linear LR warmup over the first warmup_steps optimizer steps (runtime/train/train.c
-- computes the schedule from plan.train).
return {
  id = "v2130",
  settings = { { "train", "warmup_steps", "warmup_steps", 0, "train.warmup_steps" } },
}
