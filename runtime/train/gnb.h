/* gnb.h — the Gauss-Newton-Bartlett pass of Sophia-G (v2135, Liu et al. 2023 §2.3): after an
 * optimizer step whose kind keeps a Hessian estimate (optim.h hess_every/hess_span), one more
 * forward and backward on the step's last micro-batch (still in x->tokens) in which every counted
 * target (>= 0) is replaced by a label sampled from the model's own softmax; the gradients of the
 * mean cross-entropy on the sampled labels are reduced over ranks like a step's and handed to the
 * optimizer's hess_span (h = beta2*h + (1-beta2) * B * g_hat^2).
 *
 * The labels come from a stateless stream: row n of rank r at step t draws from
 * hyp_rng_seed2(seed, t << 32 | (r*N + n)), so a resumed run samples what the uninterrupted run
 * sampled (bit-exact resume) and the rows of np=2 and np=1 draw alike when the loader gives rank r
 * rows r*N.. of the global batch.
 * A device backend runs the pass on the device: its logits come to the host after the forward,
 * gnb_labels draws the same labels there, and they go back as the targets of the device's loss.
 * Never: the update rule (optim_*.c).
 */
#ifndef HYP_GNB_H
#define HYP_GNB_H

#include <stdint.h>

#include "backend.h"

/* The label drawn for one row of logits z[0..V) under (seed, step, row): inverse CDF of the
 * softmax, in double, with one uniform of the row's stream. */
int32_t gnb_sample(const float *z, int V, uint64_t seed, int step, int64_t row);
/* Whether a GNB pass is running on x (its sampled-label loss is x's fused loss); then labels[n]
 * is the label of row n of logits [N][Vp] (V real columns), -1 where targets[n] < 0, as the cpu
 * pass draws them. Returns 0 (and leaves labels alone) when no pass is running. */
int gnb_labels(const exec_t *x, const float *logits, const int32_t *targets, int32_t *labels, int N, int V, int Vp);
/* Should step t (1-based) be followed by the GNB pass under the backend's optimizer? */
int gnb_due(const train_backend *b, int step);
/* The pass (collective): sampled labels, forward + backward, gradient reduction, hess_step. */
int gnb_pass(train_backend *b, const train_opts *o, int step, hyp_err *e);

#endif
