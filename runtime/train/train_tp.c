/* train_tp.c — the dp x tp mesh of a v2106 tensor-parallel trainer (see train_tp.h). */
#include "train_tp.h"

#include <stdio.h>

int train_tp_mesh(const plan_t *p, const char *plan_path, dp_t *d, hyp_err *e) {
    hyp_coll *world = d->coll, *tp = NULL, *dp = NULL;
    int n = hyp_coll_world(world);
    if (p->tp < 2) return HYP_OK;
    if (n % p->tp)
        return hyp_fail(e, HYP_EINPUT, "%s: this trainer is tensor-parallel over tp=%d ranks (v2106) and %d rank%s started: the world size must be a multiple of %d — start it with mpirun -np %d (or a multiple of %d for tp x dp), or regenerate with another --set v2106.degree",
                        plan_path, p->tp, n, n == 1 ? " was" : "s were", p->tp, p->tp, p->tp);
    if (n / p->tp > 1 && !p->data_parallel)
        return hyp_fail(e, HYP_EINPUT, "%s: %d ranks make %d tp groups of %d, a data-parallel axis of %d, but this trainer was generated without data parallelism — regenerate it with --enable dp,tp, or run mpirun -np %d",
                        plan_path, n, n / p->tp, p->tp, n / p->tp, p->tp);
    int rc = hyp_coll_mesh_split(world, p->tp, &tp, &dp, e);
    if (rc) return rc;
    d->all = world, d->tp = tp, d->tp_rank = hyp_coll_rank(tp);
    d->coll = dp, d->rank = hyp_coll_rank(dp), d->world = hyp_coll_world(dp);
    return HYP_OK;
}

void train_tp_close(dp_t *d) {
    if (!d->all) return;
    if (d->coll != d->all) hyp_coll_finalize(d->coll);
    hyp_coll_finalize(d->tp);
    hyp_coll_finalize(d->pp); /* v2107 (train_pp.c) */
    d->coll = d->all, d->tp = d->all = d->pp = NULL;
}

int train_tp_refuse(const plan_t *p, const char *plan_path, const char *what, hyp_err *e) {
    return hyp_fail(e, HYP_EINPUT, "%s: %s with tensor parallelism (v2106 tp=%d) is not implemented — drop it, or regenerate the trainer without tp",
                    plan_path, what, p->tp);
}

void train_tp_describe(const dp_t *d, const plan_t *p) {
    if (!d->tp) return;
    int sharded = 0;
    for (int i = 0; i < p->n_params_t; i++) sharded += p->params[i].tp_nblk > 0;
    printf("tensor parallel (v2106): tp %d x dp %d = %d ranks (tp ranks contiguous); each rank holds %d of %d heads and %d of %d MLP units, %d tensors sharded, the rest replicated\n",
           p->tp, d->world, p->tp * d->world, p->NH, p->NH * p->tp, p->H, p->H * p->tp, sharded);
}

void train_tp_report(const dp_t *d, int steps) {
    if (!d->tp || steps < 1) return;
    unsigned long long b = (unsigned long long)hyp_coll_bytes_sent(d->tp);
    printf("tp traffic (v2106): %llu B sent by this rank on its tp group of %d in %d steps, %.0f B/step (ring model; evaluation passes and checkpoint gathers included)\n",
           b, hyp_coll_world(d->tp), steps, (double)b / steps);
}
