/* train_ep.h — the trainer's side of v2109 expert parallelism: the ep groups built at start from
 * the plan's ep degree and the world size (ep ranks contiguous: group = rank / ep, ep rank = rank %
 * ep; an expert's replicas = the ranks of one ep rank, strided by ep), what an ep run cannot do yet
 * (refused with what to do), the executor's dispatch state and the traffic report. Every rank stays
 * a data-parallel rank of the world with its own micro-batch (d->coll is the world).
 * Never: run an op or touch the weights (cpu/moe_ep.c does), nor print anything but its lines. */
#ifndef HYP_TRAIN_EP_H
#define HYP_TRAIN_EP_H

#include "train.h"

/* With p->ep >= 2: EINPUT ("plan: what — how to fix") when ep does not divide the world size or
 * `refused` names an option the run asked for that ep cannot honour (NULL: none); else makes
 * d->ep and d->ep_rep. */
int train_ep_mesh(const plan_t *p, const char *plan_path, const char *refused, dp_t *d, hyp_err *e);
/* After exec_bind: hands the groups to the executor (x->ep, x->ep_rep) and opens its dispatch. */
int train_ep_attach(const dp_t *d, exec_t *x, const char *plan_path, hyp_err *e);
/* Frees the executor's dispatch state and the sub-communicators. */
void train_ep_close(dp_t *d, exec_t *x);
/* One banner line: the groups and the experts this rank computes. */
void train_ep_describe(const dp_t *d, const plan_t *p);
/* The all-to-all bytes this rank sent on its ep group, over `steps` steps. */
void train_ep_report(const dp_t *d, int steps);

#endif
