/* async_dp.c — v2174 bounded-staleness asynchronous data parallelism (async_dp.h). Never: the
 * optimizer, the loss weighting, ZeRO layouts, device arenas. */
#include "async_dp.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ops_cpu.h"

#define ASYNC_MAX_STALENESS 8

struct train_async_dp {
    int s;           /* staleness: the update of step t applies the mean gradient of step t - s */
    int first;       /* the first step this run reduced (a resumed run starts after 1); 0: none yet */
    int64_t n;       /* floats of the gradient arena (shard x world at stage 0) */
    float *ring[ASYNC_MAX_STALENESS + 1]; /* step t's gradients in ring[t % (s + 1)], summed in place */
    int req[ASYNC_MAX_STALENESS + 1];     /* its request; -1: none in flight */
    int done[ASYNC_MAX_STALENESS + 1];    /* the progress thread saw it complete (request freed) */
    /* The progress thread (world > 1, s > 0, MPI_THREAD_MULTIPLE): Open MPI moves a non-blocking
     * collective only inside MPI calls, so without it the transfer would wait for the step's other
     * collectives and the final wait. It tests the requests in flight every PROGRESS_NS; all
     * request calls of this module (start, test, wait) hold mu. */
    hyp_coll *coll;
    int threaded, stop, failed;
    pthread_t th;
    pthread_mutex_t mu;
    pthread_cond_t cv;   /* a request started (to the thread), or one completed (to the step) */
    hyp_err err;         /* the thread's failure */
};

#define PROGRESS_NS 100000L

static int in_flight(const train_async_dp *a) {
    for (int i = 0; i <= a->s; i++)
        if (a->req[i] >= 0 && !a->done[i]) return 1;
    return 0;
}

static void *progress_main(void *arg) {
    train_async_dp *a = arg;
    const struct timespec nap = {0, PROGRESS_NS};
    pthread_mutex_lock(&a->mu);
    while (!a->stop) {
        if (a->failed || !in_flight(a)) {
            pthread_cond_wait(&a->cv, &a->mu);
            continue;
        }
        for (int i = 0; i <= a->s && !a->failed; i++) {
            if (a->req[i] < 0 || a->done[i]) continue;
            if (hyp_coll_test(a->coll, a->req[i], &a->done[i], &a->err)) a->failed = 1;
            if (a->done[i] || a->failed) pthread_cond_broadcast(&a->cv);
        }
        pthread_mutex_unlock(&a->mu);
        nanosleep(&nap, NULL);
        pthread_mutex_lock(&a->mu);
    }
    pthread_mutex_unlock(&a->mu);
    return NULL;
}

int train_async_open(train_async_dp **out, const plan_t *p, const exec_t *x, const dp_t *d, hyp_err *e) {
    *out = NULL;
    if (d->stage != 0)
        return hyp_fail(e, HYP_EINPUT, "plan: async dp (v2174) all-reduces the whole gradient arena, and ZeRO stage %d shards it — regenerate without zero/fsdp",
                        d->stage);
    if (x->tp)
        return hyp_fail(e, HYP_EINPUT, "plan: async dp (v2174) over a dp x tp mesh is not implemented — regenerate without tp");
    if (x->moe_ep)
        return hyp_fail(e, HYP_EINPUT, "plan: async dp (v2174) with expert parallelism (v2109) is not implemented: expert gradients are reduced every step — regenerate without ep");
    if (p->adp_staleness < 0 || p->adp_staleness > ASYNC_MAX_STALENESS)
        return hyp_fail(e, HYP_EINPUT, "plan: async_dp.staleness %d is outside 0..%d — regenerate with --set v2174.staleness in range",
                        p->adp_staleness, ASYNC_MAX_STALENESS);
    train_async_dp *a = calloc(1, sizeof *a);
    if (!a) return hyp_fail(e, HYP_EFAIL, "out of memory");
    a->s = p->adp_staleness;
    a->n = x->shard * d->world;
    a->coll = d->coll;
    for (int i = 0; i <= a->s; i++) a->req[i] = -1;
    for (int i = 0; i <= a->s; i++) {
        if (!(a->ring[i] = malloc(sizeof(float) * (size_t)a->n))) {
            long long n = (long long)a->n * (a->s + 1);
            train_async_close(a, d);
            return hyp_fail(e, HYP_EFAIL, "out of memory for the async dp gradient ring (%lld floats)", n);
        }
    }
    const char *env = getenv("HYP_ASYNC_PROGRESS"); /* 0: no progress thread (to measure what it gives) */
    if (d->world > 1 && a->s > 0 && hyp_coll_mpi_threads(d->coll) && !(env && !strcmp(env, "0"))) {
        pthread_mutex_init(&a->mu, NULL);
        pthread_cond_init(&a->cv, NULL);
        if (pthread_create(&a->th, NULL, progress_main, a)) {
            pthread_cond_destroy(&a->cv);
            pthread_mutex_destroy(&a->mu);
        } else {
            a->threaded = 1;
        }
    }
    *out = a;
    return HYP_OK;
}

int train_async_threaded(const train_async_dp *a) { return a->threaded; }

/* Waits for slot i's reduction (by the progress thread's tests, or here). */
static int wait_slot(train_async_dp *a, const dp_t *d, int i, hyp_err *e) {
    int rc = HYP_OK;
    if (a->threaded) {
        pthread_mutex_lock(&a->mu);
        while (!a->done[i] && !a->failed) pthread_cond_wait(&a->cv, &a->mu);
        if (!a->done[i]) rc = hyp_fail(e, HYP_EFAIL, "%s", a->err.msg);
        a->req[i] = -1, a->done[i] = 0;
        pthread_mutex_unlock(&a->mu);
        return rc;
    }
    rc = hyp_coll_wait(d->coll, a->req[i], e);
    a->req[i] = -1;
    return rc;
}

void train_async_close(train_async_dp *a, const dp_t *d) {
    if (!a) return;
    for (int i = 0; i <= a->s; i++)
        if (a->req[i] >= 0) {
            hyp_err e;
            (void)wait_slot(a, d, i, &e); /* every rank drops the same steps */
        }
    if (a->threaded) {
        pthread_mutex_lock(&a->mu);
        a->stop = 1;
        pthread_cond_broadcast(&a->cv);
        pthread_mutex_unlock(&a->mu);
        pthread_join(a->th, NULL);
        pthread_cond_destroy(&a->cv);
        pthread_mutex_destroy(&a->mu);
    }
    for (int i = 0; i <= a->s; i++) free(a->ring[i]);
    free(a);
}

int train_async_grads(train_async_dp *a, exec_t *x, const dp_t *d, int step, int *ready, hyp_err *e) {
    const int slots = a->s + 1, put = step % slots;
    *ready = 0;
    if (a->req[put] >= 0) /* only after a failed step: that reduction is stale beyond the bound */
        return hyp_fail(e, HYP_EFAIL, "async dp (v2174): the gradient reduction of step %d is still in flight at step %d", step - slots, step);
    memcpy(a->ring[put], x->grads, sizeof(float) * (size_t)a->n);
    if (a->threaded) pthread_mutex_lock(&a->mu);
    int rc = hyp_coll_iallreduce_f32(d->coll, a->ring[put], (size_t)a->n, &a->req[put], e);
    if (a->threaded) {
        if (!rc) pthread_cond_broadcast(&a->cv);
        pthread_mutex_unlock(&a->mu);
    }
    if (rc) return rc;
    if (!a->first) a->first = step;
    if (step - a->s < a->first) { /* nothing has arrived yet: no update this step */
        op_zero(x->grads, a->n);
        return HYP_OK;
    }
    const int get = (step - a->s) % slots;
    if ((rc = wait_slot(a, d, get, e))) return rc;
    memcpy(x->grads, a->ring[get], sizeof(float) * (size_t)a->n);
    *ready = 1;
    return HYP_OK;
}

int train_async_staleness(const train_async_dp *a) { return a->s; }

const char *train_async_describe(const train_async_dp *a, char *buf, size_t n) {
    if (a->s == 0)
        snprintf(buf, n, "async dp (v2174): staleness 0 — each gradient all-reduce started non-blocking and awaited at once (synchronous dp)");
    else
        snprintf(buf, n, "async dp (v2174): staleness %d — the gradient all-reduce of step t runs in the background (%s) and is applied at step t + %d (steps 1..%d apply nothing)",
                 a->s, a->threaded ? "a progress thread drives it" : "progressed inside the step's MPI calls", a->s, a->s);
    return buf;
}
