/* train_ckpt.h — the trainer's checkpoints over the host executor (the device backend brings it
 * up to date first: train_sync_host). Checkpoints hold the plan's tensors under their Hugging Face
 * names, the optimizer's states (named by the optimizer, optim.h) and the FP8 scaling states: with
 * stage 0 or one rank rank 0 writes one file set; with stage >= 1 on several ranks every rank
 * writes its own shard (v2181). train_ckpt_load reads either layout, saved at any world size
 * (v2175), and keeps this rank's shards. All functions are collective over d->coll. */
#ifndef HYP_TRAIN_CKPT_H
#define HYP_TRAIN_CKPT_H

#include "ckpt.h"
#include "ckpt_async.h"
#include "coll.h"
#include "exec.h"
#include "train.h"

/* Saves step st->step into dir, keeping the `keep` most recent checkpoints. */
int train_ckpt_save(dp_t *d, exec_t *x, const char *dir, int keep, const hyp_ckpt_state *st, hyp_err *e);
/* The same with v2179 async writes: rank 0 snapshots into async's buffers and its writer thread
 * writes the files (async NULL, or a sharded save: blocking); and v2180: delta_base (NULL: full)
 * names the full checkpoint in dir the new one is stored as a delta against (ignored when
 * sharded). */
int train_ckpt_save_async(dp_t *d, exec_t *x, const char *dir, int keep, const hyp_ckpt_state *st,
                          hyp_ckpt_async *async, const char *delta_base, hyp_err *e);
/* 1 when this group's checkpoints are sharded (ZeRO stage >= 1 on several ranks, v2181). */
int train_ckpt_sharded(const dp_t *d);
/* Loads dir's latest checkpoint into x (its config hash must be plan_hash, the plan's state_hash:
 * any ZeRO stage of the same plan); for_sampling with ZeRO-3 keeps the full weights for forward
 * without collectives. HYP_ENOCKPT when dir has none yet. */
int train_ckpt_load(dp_t *d, exec_t *x, const char *dir, int for_sampling, const char *plan_hash, hyp_ckpt_state *st,
                    hyp_err *e);
/* --init-from: the weights at path (an HF model directory or our checkpoint of any plan with this
 * model's shape, hf.h) into x's parameters on every rank; optimizer, schedule and step stay fresh.
 * what (may be NULL) receives what was loaded. On error x is untouched. */
int train_ckpt_init_from(dp_t *d, exec_t *x, const char *path, char *what, size_t what_cap, hyp_err *e);
/* ZeRO-3: gathers the full weights on every rank and forward reads them from then on. */
int train_unshard(exec_t *x, hyp_err *e);

#endif
