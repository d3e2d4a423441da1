/* local_sgd.h — v2173 local SGD and DiLoCo on the cpu backend: the data-parallel ranks take
 * sync_every optimizer steps each on its own data with no gradient all-reduce, then average the
 * change of the parameters since the last synchronization with one all-reduce and apply it to the
 * anchor (the parameters every rank held then) with the outer optimizer: "average" (plain
 * parameter averaging: anchor += mean delta, local SGD as Stich 2019 / Lin et al. 2020) or
 * "nesterov" (DiLoCo, Douillard et al. 2023: the outer gradient anchor - mean(params) through
 * torch.optim.SGD(nesterov=True) with outer_lr and outer_momentum); every rank then continues from
 * the new anchor. Inner optimizer states stay local.
 * Never: sharded parameters or states (ZeRO, refused at gen time), device arenas, printing. */
#ifndef HYP_LOCAL_SGD_H
#define HYP_LOCAL_SGD_H

#include "exec.h"
#include "plan.h"
#include "train.h"

typedef struct train_local_sgd train_local_sgd;

/* The plan's local_sgd section over x's replicated parameter arena (stage 0): the anchor is the
 * current parameters (the same on every rank). HYP_EINPUT at a ZeRO stage or bf16 parameters. */
int train_local_sgd_open(train_local_sgd **out, const plan_t *p, const exec_t *x, const dp_t *d, hyp_err *e);
void train_local_sgd_close(train_local_sgd *ls);
/* In place of the per-step all-reduce: this rank's gradients (accumulated with the global batch's
 * weights 1 / (tokens of all ranks)) times the world size, so they are the rank's own mean
 * gradient when ranks hold equal token counts, and their mean over ranks is the synchronous
 * step's gradient. */
void train_local_sgd_grads(const train_local_sgd *ls, exec_t *x);
/* After the inner update of optimizer step `step` (1-based): at every sync_every-th step the outer
 * step (one all-reduce of the arena's deltas on d's communicator), the parameters set to the new
 * anchor on every rank. *synced (may be NULL) = 1 when it ran. Collective. */
int train_local_sgd_after_update(train_local_sgd *ls, exec_t *x, const dp_t *d, int step, int *synced, hyp_err *e);
/* After the parameters were replaced on every rank alike (a v2176 rollback loaded a checkpoint):
 * the anchor becomes them and the outer momentum restarts at 0. */
void train_local_sgd_rebase(train_local_sgd *ls, const exec_t *x);
/* One phrase for the banner: "local SGD (v2173): ..." */
const char *train_local_sgd_describe(const train_local_sgd *ls, char *buf, size_t n);

#endif
