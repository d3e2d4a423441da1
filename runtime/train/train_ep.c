/* train_ep.c — the ep groups of a v2109 expert-parallel trainer (see train_ep.h). */
#include "train_ep.h"

#include <stdio.h>

#include "moe_ep.h"
#include "op_registry.h"

int train_ep_mesh(const plan_t *p, const char *plan_path, const char *refused, dp_t *d, hyp_err *e) {
    int n = hyp_coll_world(d->coll), r = hyp_coll_rank(d->coll);
    if (p->ep < 2) return HYP_OK;
    if (refused)
        return hyp_fail(e, HYP_EINPUT, "%s: %s with expert parallelism (v2109 ep=%d) is not implemented — drop it, or regenerate the trainer without ep",
                        plan_path, refused, p->ep);
    if (n % p->ep)
        return hyp_fail(e, HYP_EINPUT, "%s: this trainer places its experts over ep=%d ranks (v2109) and %d rank%s started: the world size must be a multiple of %d — start it with mpirun -np %d (or a multiple of %d for ep x dp), or regenerate with another --set v2109.degree",
                        plan_path, p->ep, n, n == 1 ? " was" : "s were", p->ep, p->ep, p->ep);
    int rc = hyp_coll_split(d->coll, r / p->ep, r % p->ep, &d->ep, e);
    if (!rc) rc = hyp_coll_split(d->coll, r % p->ep, r / p->ep, &d->ep_rep, e);
    return rc;
}

int train_ep_attach(const dp_t *d, exec_t *x, const char *plan_path, hyp_err *e) {
    if (!d->ep) return HYP_OK;
    x->ep = d->ep, x->ep_rep = d->ep_rep;
    return exec_moe_ep_open(x, plan_path, e);
}

void train_ep_close(dp_t *d, exec_t *x) {
    exec_moe_ep_close(x);
    x->ep = x->ep_rep = NULL;
    hyp_coll_finalize(d->ep_rep);
    hyp_coll_finalize(d->ep);
    d->ep = d->ep_rep = NULL;
}

void train_ep_describe(const dp_t *d, const plan_t *p) {
    if (!d->ep) return;
    int op = hyp_op_find("moe_fwd"), E = 0, L = 0, P = hyp_coll_world(d->ep), me = hyp_coll_rank(d->ep);
    for (int i = 0; i < p->n_fwd; i++)
        if (p->fwd[i].op == op) E = (int)p->fwd[i].E, L++;
    printf("expert parallel (v2109): ep %d x %d groups = %d ranks (ep ranks contiguous), every rank data-parallel; rank %d computes experts %d-%d of %d in each of %d MoE layers, tokens dispatched and combined by all-to-all\n",
           P, d->world / P, d->world, d->rank, me * (E / P), (me + 1) * (E / P) - 1, E, L);
}

void train_ep_report(const dp_t *d, int steps) {
    if (!d->ep || steps < 1) return;
    unsigned long long b = (unsigned long long)hyp_coll_bytes_sent(d->ep);
    printf("ep traffic (v2109): %llu B sent by this rank in all-to-alls on its ep group of %d in %d steps, %.0f B/step (evaluation forwards included)\n",
           b, hyp_coll_world(d->ep), steps, (double)b / steps);
}
