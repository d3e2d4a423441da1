/* async_dp.c — v2174 bounded-staleness asynchronous data parallelism (async_dp.h). Never: the
 * optimizer, the loss weighting, ZeRO layouts, device arenas. */
#include "async_dp.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops_cpu.h"

#define ASYNC_MAX_STALENESS 8

struct train_async_dp {
    int s;           /* staleness: the update of step t applies the mean gradient of step t - s */
    int64_t n;       /* floats of the gradient arena (shard x world at stage 0) */
    float *ring[ASYNC_MAX_STALENESS + 1]; /* step t's gradients in ring[t % (s + 1)], summed in place */
    int req[ASYNC_MAX_STALENESS + 1];     /* its request; -1: none in flight */
};

int train_async_open(train_async_dp **out, const plan_t *p, const exec_t *x, const dp_t *d, hyp_err *e) {
    *out = NULL;
    if (d->stage != 0)
        return hyp_fail(e, HYP_EINPUT, "plan: async dp (v2174) all-reduces the whole gradient arena, and ZeRO stage %d shards it — regenerate without zero/fsdp",
                        d->stage);
    if (x->tp)
        return hyp_fail(e, HYP_EINPUT, "plan: async dp (v2174) over a dp x tp mesh is not implemented — regenerate without tp");
    if (p->adp_staleness < 0 || p->adp_staleness > ASYNC_MAX_STALENESS)
        return hyp_fail(e, HYP_EINPUT, "plan: async_dp.staleness %d is outside 0..%d — regenerate with --set v2174.staleness in range",
                        p->adp_staleness, ASYNC_MAX_STALENESS);
    train_async_dp *a = calloc(1, sizeof *a);
    if (!a) return hyp_fail(e, HYP_EFAIL, "out of memory");
    a->s = p->adp_staleness;
    a->n = x->shard * d->world;
    for (int i = 0; i <= a->s; i++) {
        a->req[i] = -1;
        if (!(a->ring[i] = malloc(sizeof(float) * (size_t)a->n))) {
            long long n = (long long)a->n * (a->s + 1);
            train_async_close(a, d);
            return hyp_fail(e, HYP_EFAIL, "out of memory for the async dp gradient ring (%lld floats)", n);
        }
    }
    *out = a;
    return HYP_OK;
}

void train_async_close(train_async_dp *a, const dp_t *d) {
    if (!a) return;
    for (int i = 0; i <= a->s; i++) {
        if (a->req[i] >= 0) {
            hyp_err e;
            (void)hyp_coll_wait(d->coll, a->req[i], &e); /* every rank drops the same steps */
        }
        free(a->ring[i]);
    }
    free(a);
}

int train_async_grads(train_async_dp *a, exec_t *x, const dp_t *d, int step, int *ready, hyp_err *e) {
    const int slots = a->s + 1, put = step % slots;
    *ready = 0;
    if (a->req[put] >= 0) /* only after a failed step: that reduction is stale beyond the bound */
        return hyp_fail(e, HYP_EFAIL, "async dp (v2174): the gradient reduction of step %d is still in flight at step %d", step - slots, step);
    memcpy(a->ring[put], x->grads, sizeof(float) * (size_t)a->n);
    int rc = hyp_coll_iallreduce_f32(d->coll, a->ring[put], (size_t)a->n, &a->req[put], e);
    if (rc) return rc;
    if (step <= a->s) { /* nothing has arrived yet: no update this step */
        op_zero(x->grads, a->n);
        return HYP_OK;
    }
    const int get = (step - a->s) % slots;
    rc = hyp_coll_wait(d->coll, a->req[get], e);
    a->req[get] = -1;
    if (rc) return rc;
    memcpy(x->grads, a->ring[get], sizeof(float) * (size_t)a->n);
    *ready = 1;
    return HYP_OK;
}

int train_async_staleness(const train_async_dp *a) { return a->s; }

const char *train_async_describe(const train_async_dp *a, char *buf, size_t n) {
    if (a->s == 0)
        snprintf(buf, n, "async dp (v2174): staleness 0 — each gradient all-reduce started non-blocking and awaited at once (synchronous dp)");
    else
        snprintf(buf, n, "async dp (v2174): staleness %d — the gradient all-reduce of step t runs in the background and is applied at step t + %d (steps 1..%d apply nothing)",
                 a->s, a->s, a->s);
    return buf;
}
