/* prune.h — weight pruning on the cpu backend (v2154 masks, v2156 gradual magnitude pruning).
 *
 * Every prunable matrix (the 2-D weights of the transformer layers: attention and MLP; never
 * embeddings, norms or the head) has a byte mask. Masked weights are held at zero: their
 * gradients are zeroed before the reduction (so clipping and the optimizer never see them) and the
 * weights are zeroed again after every update (so no optimizer state or weight decay revives them);
 * the forward pass therefore computes with the pruned network. Masks are updated by magnitude:
 * per matrix the k = floor(s * numel) smallest |w| (ties broken by index) are masked, s from the
 * schedule — "oneshot": the target at the first step; "gradual" (v2156, Zhu & Gupta 2017):
 * s(t) = s_f (1 - (1 - p)^3), p the progress through [start, end] of the run, every `every` steps.
 * Pattern "2:4": in every group of 4 consecutive weights of a row the 2 smallest |w| are masked
 * (sparsity 0.5, the layout sparse tensor cores run). A checkpoint needs no mask file: masked
 * weights are exactly zero, and a resumed run takes the mask from the zeros; "fixed" (v2155, the
 * lottery ticket's retraining rounds) takes it from the initial weights' zeros and never changes
 * it. Never: device arenas
 * (the plan refuses sim/cuda), sharded or bf16 parameter arenas (refused at generation). */
#ifndef HYP_PRUNE_H
#define HYP_PRUNE_H

#include <stddef.h>

#include "exec.h"
#include "hyp_err.h"
#include "plan.h"

typedef struct train_prune train_prune;

/* NULL in *out when the plan has no pruning section. resumed: take the masks from the zeros of
 * x->params (a checkpoint's weights). total_steps: the run's length (the schedule's fractions). */
int train_prune_open(train_prune **out, const plan_t *p, exec_t *x, int total_steps, int resumed, hyp_err *e);
void train_prune_close(train_prune *pr);
/* zeroes the gradients of masked weights (before the reduction and clipping) */
void train_prune_grads(train_prune *pr, exec_t *x);
/* after the optimizer step of `step`: updates the masks when the schedule says so, then zeroes
 * every masked weight. Returns 1 when the masks changed at this step. */
int train_prune_after_update(train_prune *pr, exec_t *x, int step);
/* the fraction of prunable weights masked now, the schedule's target at `step`, the count */
double train_prune_sparsity(const train_prune *pr);
double train_prune_target(const train_prune *pr, int step);
long long train_prune_weights(const train_prune *pr);
int train_prune_matrices(const train_prune *pr);
int train_prune_last_update(const train_prune *pr); /* the step of the latest mask update, 0: none */
const char *train_prune_describe(const train_prune *pr, char *buf, size_t cap);

#endif
