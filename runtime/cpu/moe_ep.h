/* moe_ep.h — v2109 expert parallelism for the cpu executor's mixture-of-experts ops: with x->ep
 * set (an ep group of P ranks), rank r of the group computes experts [r*E/P, (r+1)*E/P) of every
 * MoE layer; each rank routes its own tokens (the router is replicated), sends every routed row to
 * the rank of its expert and gets the expert's output back by all-to-all (hyp_coll_alltoallv),
 * forward and backward. The owner runs an expert once per source rank on that rank's rows (token
 * order) and adds the per-source weight gradients in rank order, so every expert computes exactly
 * what it computes in the data-parallel run where each rank holds every expert (docs/moe.md).
 * Gradients: the non-expert ones summed over the world, a local expert's over its replicas (x->
 * ep_rep), a non-local expert's stay zero (never sent); the norm is the data-parallel one.
 * Never: a result that depends on the ep size, or an exit — failures are kept for
 * exec_moe_ep_status.
 */
#ifndef HYP_MOE_EP_H
#define HYP_MOE_EP_H

#include "exec.h"
#include "moe_layout.h"
#include "ops_moe.h"

/* With x->ep and x->ep_rep set: checks every MoE op's E is a multiple of the ep size and makes
 * the dispatch state. EINPUT (naming plan_path) when not. */
int exec_moe_ep_open(exec_t *x, const char *plan_path, hyp_err *e);
void exec_moe_ep_close(exec_t *x);
/* The moe_fwd / moe_bwd of ops_moe.h over the ep group (same arguments, same results). */
void exec_moe_ep_fwd(exec_t *x, float *out, moe_state_view *v, const float *inp, const float *wr, const float *w1,
                     const float *w2, const moe_shape *s);
void exec_moe_ep_bwd(exec_t *x, float *dinp, float *dwr, float *dw1, float *dw2, const float *dout, float daux,
                     const float *inp, const float *wr, const float *w1, const float *w2, const moe_state_view *v,
                     const moe_shape *s);
/* The first dispatch failure since open (HYP_OK if none). */
int exec_moe_ep_status(const exec_t *x, hyp_err *e);
/* After a step's backward (ZeRO stage 0): gradients made global as above; *norm = the global
 * gradient norm summed per parameter in plan order, as train_grad_norm. world: the trainer's. */
int exec_moe_ep_reduce_grads(exec_t *x, hyp_coll *world, double *norm, hyp_err *e);

/* Before a checkpoint (collective over the ep group): every expert's weights and optimizer states
 * broadcast from its owner, so each rank (rank 0 writes) holds the whole model as trained. The
 * states must be per-element fp32 arrays of the parameter layout (ZeRO stage 0, AdamW):
 * exec_moe_ep_can_gather says so. */
int exec_moe_ep_can_gather(const exec_t *x);
int exec_moe_ep_gather(exec_t *x, hyp_err *e);

#endif
