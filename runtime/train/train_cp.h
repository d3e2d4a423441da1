/* train_cp.h — the trainer's side of v2108 context parallelism: the cp groups built at start from
 * the plan's cp degree (cp ranks contiguous: group = rank / cp, place = rank % cp), the options a
 * cp run cannot honour yet (refused with what to do), each rank's share of every batch, and the
 * ring's traffic report. The world stays the data-parallel communicator: the loss and gradients
 * are reduced over dp x cp (each token weighs 1 / all tokens, so the sum is the global mean); the
 * data loader runs over the dp axis (rank / cp of world / cp) and reads whole rows of cp x T tokens.
 * Never: run an op (cpu/ops_ring.c does), nor print anything but the banner and the report. */
#ifndef HYP_TRAIN_CP_H
#define HYP_TRAIN_CP_H

#include "data.h"
#include "exec.h"
#include "train.h"

/* With p->cp >= 2: *cp = the rank's cp group (split from world). EINPUT ("plan: what — how to
 * fix") when cp does not divide the world size or `what` (an option it cannot run) is non-NULL. */
int train_cp_open(const plan_t *p, const char *plan_path, hyp_coll *world, const char *what, hyp_coll **cp, hyp_err *e);
/* The loader's rank, world and sequence length: the dp axis, rows of cp x T tokens (1, the world
 * and T without cp). */
void train_cp_loader_shape(const plan_t *p, const dp_t *d, int T, int *rank, int *world, int *Tl);
/* The next batch into x: without cp hyp_loader_next_pos; with cp the whole rows, of which the
 * rank keeps its chunks (tokens, targets) and their global positions (x->positions). */
int train_cp_next(hyp_loader *L, exec_t *x, hyp_err *e);
/* One banner line, and the bytes this rank sent on its cp group over `steps` steps. */
void train_cp_describe(const plan_t *p, const hyp_coll *cp, int dp);
void train_cp_report(const plan_t *p, const hyp_coll *cp, int steps);

#endif
