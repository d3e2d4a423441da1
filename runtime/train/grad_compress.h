/* grad_compress.h — v2172 gradient compression for data parallelism on the cpu backend: in place
 * of the per-step all-reduce of the whole gradient arena each rank sends a fraction `ratio` of it
 * (k = round(ratio x n) entries, at least 1):
 * - topk: its k largest |g + residual| entries as (index, value) pairs, exchanged with one
 *   all-gather of 2k floats per rank (ring model: (p-1) x 8k bytes sent) and summed on every rank
 *   in rank order (Aji & Heafield 2017; Lin et al. 2018's sparsification without the momentum
 *   correction);
 * - randk: the same k indices on every rank, drawn by a partial Fisher-Yates shuffle from a
 *   generator every rank advances alike, their values all-reduced (2(p-1)/p x 4k bytes); without
 *   error feedback the values are scaled by n/k (an unbiased estimate of the sum), with error
 *   feedback they are sent unscaled.
 * - powersgd: PowerSGD rank r (Vogels et al. 2019, as torch's powerSGD_hook): each 2-D parameter's
 *   gradient M (rows x cols) as P = M Q, all-reduced with the 1-D parameters' gradients whole,
 *   orthogonalized, Q = M^T P all-reduced, the gradient P Q^T; Q warm-starts the next step.
 *   k is then the floats sent per step: sum over matrices of r(rows + cols) plus the 1-D ones.
 * With error feedback (Stich et al. 2018) the rank keeps residual = (g + residual) - sent, exactly
 * for top-k and random-k (an entry is either sent whole or kept whole; for PowerSGD it is
 * M - (P Q^T) / world), and adds it to the next step's gradient.
 * Never: sharded gradients (ZeRO stage 2-3 reduce-scatter, refused at gen time), device arenas,
 * printing. */
#ifndef HYP_GRAD_COMPRESS_H
#define HYP_GRAD_COMPRESS_H

#include <stdint.h>

#include "exec.h"
#include "plan.h"
#include "train.h"

typedef struct train_grad_compress train_grad_compress;

/* The plan's grad_compress section over x's gradient arena (shard x world floats, stages 0-1).
 * HYP_EINPUT at ZeRO stage 2-3. */
int train_grad_compress_open(train_grad_compress **out, const plan_t *p, const exec_t *x, const dp_t *d, hyp_err *e);
void train_grad_compress_close(train_grad_compress *gc);
/* In place of the all-reduce: x's gradients (this rank's, weighted for the global batch) become
 * the sum over d's ranks of what each sent (zero where no rank sent). Collective. */
int train_grad_compress_reduce(train_grad_compress *gc, exec_t *x, const dp_t *d, hyp_err *e);
/* Entries sent per rank and step, and the error-feedback residual ([n] floats; NULL without). */
int64_t train_grad_compress_k(const train_grad_compress *gc);
const float *train_grad_compress_residual(const train_grad_compress *gc);
/* The k entries of v[n] of largest magnitude (NaN counts as infinite), ties broken by the lower
 * index, written to idx[k] in ascending index order; scratch holds n floats. */
void train_topk_select(const float *v, int64_t n, int64_t k, float *scratch, int32_t *idx);
/* PowerSGD's orthogonalization: the r columns of a[rows x r] (row-major) become orthonormal by
 * modified Gram-Schmidt (a zero column stays zero). */
void train_orthogonalize(float *a, int64_t rows, int r);
/* One phrase for the banner: "gradient compression (v2172): ..." */
const char *train_grad_compress_describe(const train_grad_compress *gc, char *buf, size_t n);

#endif
