/* ckpt_consolidate.h — v2181 `gen consolidate`: a sharded checkpoint (every ZeRO rank's
 * shard_RRRRR.safetensors plus the layout in state.json, ckpt.h) merged offline into one file set
 * (model.safetensors, optimizer.safetensors, train_state.safetensors, state.json without a layout),
 * which any trainer of the plan resumes at any world size (with v2175 elastic resume where the
 * world size changes) and Hugging Face tools read.
 *
 * The tensors' names and shapes come from the plan (plan.json of the trainer that wrote it); the
 * optimizer states' names from the shards themselves ("<param><suffix>"). Every shard is verified
 * (sizes, xxh3, ranges that tile each tensor) by the ordinary loader before anything is written;
 * the output is written by the ordinary atomic save. Never: a partial output, a guessed shape. */
#ifndef HYP_CKPT_CONSOLIDATE_H
#define HYP_CKPT_CONSOLIDATE_H

#include <stddef.h>

#include "hyp_err.h"
#include "plan.h"

/* ckpt: a checkpoint directory (its `latest`) or one step directory; out: the directory that
 * receives step_N/ and `latest`. what[cap] (may be NULL) says what was merged. */
int hyp_ckpt_consolidate(const char *ckpt, const plan_t *p, const char *out, char *what, size_t cap, hyp_err *e);

#endif
