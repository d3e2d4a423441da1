/* train_moe.h — a training step's router statistics for the metrics log (docs/moe.md): the cpu
 * executor's sums (cpu/moe_stats.h) made global over the data-parallel ranks, as metric entries.
 * It also moves the aux-loss-free router biases after each step (they need the step's global loads).
 * Never: a figure the MoE op did not compute.
 */
#ifndef HYP_TRAIN_MOE_H
#define HYP_TRAIN_MOE_H

#include "coll.h"
#include "exec.h"
#include "metrics.h"

/* Collective (every rank, every step): takes the sums since the last call and resets them. *kv
 * (malloc'ed, the caller frees; NULL and *n 0 without MoE layers) gets per MoE layer l and expert
 * e "moe_load_l<l>_e<e>": the tokens routed to it over the step's micro-batches and ranks (each
 * token counts top_k times, so a layer's loads sum to the step's tokens x top_k), and
 * "moe_aux_loss": the load-balancing losses of all MoE layers summed, as a mean over the step's
 * micro-batches and ranks — the term the step adds to the cross-entropy it minimises. */
int train_moe_take(exec_t *x, hyp_coll *coll, int world, hyp_metric_kv **kv, int *n, hyp_err *e);

#endif
