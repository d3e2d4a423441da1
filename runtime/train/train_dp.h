/* train_dp.h — data parallelism and checkpoints for the trainer program on the CPU backend
 * (train_main.c): after backward, dp_reduce_grads makes the gradients global (all-reduce, or the
 * reduced shard with ZeRO >= 2; ZeRO-3 reduce-scattered per layer during backward) and gives the
 * norm; dp_step runs the optimizer on what this rank owns and all-gathers the updated shards (stages 1-2).
 * Checkpoints hold the plan's tensors under their Hugging Face names, the optimizer's states and the
 * FP8 scaling states: with stage 0 or one rank rank 0 writes one file set; with stage >= 1 on
 * several ranks every rank writes its own shard (v2181). dp_load reads either layout, saved at
 * any world size, and keeps this rank's shards. All functions are collective over d->coll. */
#ifndef HYP_TRAIN_DP_H
#define HYP_TRAIN_DP_H

#include "ckpt.h"
#include "coll.h"
#include "exec.h"
#include "train.h"

typedef struct {
    hyp_coll *coll;
    int rank, world, stage;
    const hyp_optim_i *opt;     /* the plan's optimizer (hyp_optim_open) */
} dp_t;

int dp_reduce_grads(dp_t *d, exec_t *x, double *norm, hyp_err *e);
int dp_step(dp_t *d, exec_t *x, double lr, int t, float scale, hyp_err *e);
/* Prints every rank's allocated bytes by category (rank 0's stdout). */
void dp_print_memory(dp_t *d, exec_t *x, hyp_err *e);
/* Saves step st->step into dir, keeping the `keep` most recent checkpoints. */
int dp_save(dp_t *d, exec_t *x, const char *dir, int keep, const hyp_ckpt_state *st, hyp_err *e);
/* Loads dir's latest checkpoint into x (its config hash must be plan_hash, the plan's state_hash:
 * any ZeRO stage of the same plan); for_sampling with ZeRO-3 keeps the full weights for forward
 * without collectives. HYP_ENOCKPT when dir has none yet. */
int dp_load(dp_t *d, exec_t *x, const char *dir, int for_sampling, const char *plan_hash, hyp_ckpt_state *st,
            hyp_err *e);
/* ZeRO-3: gathers the full weights on every rank and forward reads them from then on. */
int dp_unshard(exec_t *x, hyp_err *e);

#endif
