/* exec_dev_copy.c — v2128 on a device: the batch's host buffers (h_tokens, h_targets,
 * h_positions) live in pinned host memory (dev->host_alloc) and are uploaded by asynchronous
 * copies on a copy stream of their own; the compute (default) stream waits on an event recorded
 * after the copies instead of the host waiting for them. The copy stream itself first waits for
 * the compute stream's work so far (the previous step's kernels may still read the device
 * buffers), and the host must call exec_dev_batch_wait before it writes the next batch into the
 * host buffers (a pinned copy reads them when it runs, not when it is issued).
 * Never: change what is uploaded (losses are bit-identical with HYP_PINNED_BATCH=0: pageable
 * buffers and copies on the default stream, as before), or leave an upload unordered with the
 * kernels that read or overwrite its device buffers. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "exec_dev.h"

struct exec_dev_up {
    hyp_stream *copy;   /* the copy stream */
    hyp_event *done;    /* recorded on the copy stream after a batch's copies */
    hyp_event *free_;   /* recorded on the compute stream before them */
    int issued;         /* done holds an upload */
    long n_async;       /* uploads issued on the copy stream */
};

/* HYP_PINNED_BATCH_STATS=1: the host time the uploads took (issuing the copies and the event
 * calls; the pageable path's driver staging included), printed when the executor is freed. */
static double up_host_s;
static long up_calls;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int pinned_wanted(void) {
    const char *v = getenv("HYP_PINNED_BATCH");
    return !(v && !strcmp(v, "0"));
}

void exec_dev_batch_free(exec_dev *x) {
    hyp_device *d = x->dev;
    hyp_err e;
    int32_t **bufs[3] = {&x->h_tokens, &x->h_targets, &x->h_positions};
    const char *st = getenv("HYP_PINNED_BATCH_STATS");
    if (st && !strcmp(st, "1") && up_calls)
        fprintf(stderr, "batch upload (v2128, %s): %ld uploads, host time %.1f us per upload\n",
                x->up ? "pinned, copy stream" : "pageable, default stream", up_calls, 1e6 * up_host_s / (double)up_calls);
    up_calls = 0, up_host_s = 0;
    for (int i = 0; i < 3; i++) {
        if (*bufs[i] && x->up) d->host_free(d, *bufs[i], &e);
        else free(*bufs[i]);
        *bufs[i] = NULL;
    }
    if (x->up) {
        if (x->up->done) d->event_destroy(d, x->up->done);
        if (x->up->free_) d->event_destroy(d, x->up->free_);
        if (x->up->copy) d->stream_destroy(d, x->up->copy);
        free(x->up);
        x->up = NULL;
    }
}

int exec_dev_batch_alloc(exec_dev *x, int64_t maxN, int positions, hyp_err *e) {
    hyp_device *d = x->dev;
    size_t n = sizeof(int32_t) * (size_t)(maxN > 0 ? maxN : 1);
    int rc = HYP_OK;
    if (pinned_wanted()) {
        if (!(x->up = calloc(1, sizeof *x->up))) return hyp_fail(e, HYP_EFAIL, "out of memory");
        rc = d->stream_create(d, &x->up->copy, e);
        if (!rc) rc = d->event_create(d, &x->up->done, e);
        if (!rc) rc = d->event_create(d, &x->up->free_, e);
        if (!rc) rc = d->host_alloc(d, (void **)&x->h_tokens, n, e);
        if (!rc) rc = d->host_alloc(d, (void **)&x->h_targets, n, e);
        if (!rc && positions) rc = d->host_alloc(d, (void **)&x->h_positions, n, e);
        if (!rc) {
            memset(x->h_tokens, 0, n);
            memset(x->h_targets, 0, n);
            if (x->h_positions) memset(x->h_positions, 0, n);
        }
    } else {
        x->h_tokens = calloc(1, n);
        x->h_targets = calloc(1, n);
        if (positions) x->h_positions = calloc(1, n);
        if (!x->h_tokens || !x->h_targets || (positions && !x->h_positions)) rc = hyp_fail(e, HYP_EFAIL, "out of memory");
    }
    if (rc) exec_dev_batch_free(x);
    return rc;
}

int exec_dev_batch_upload(exec_dev *x, hyp_err *e) {
    hyp_device *d = x->dev;
    size_t n = sizeof(int32_t) * (size_t)x->B * x->T;
    double t0 = now_s();
    hyp_stream *s = x->up ? x->up->copy : NULL;
    int rc = HYP_OK;
    if (x->up) { /* the device buffers are free once the compute stream's work so far has run */
        rc = d->event_record(d, x->up->free_, NULL, e);
        if (!rc) rc = d->event_wait(d, s, x->up->free_, e);
    }
    if (!rc) rc = d->h2d(d, x->tokens, x->h_tokens, n, s, e);
    if (!rc) rc = d->h2d(d, x->targets, x->h_targets, n, s, e);
    if (!rc && x->positions) rc = d->h2d(d, x->positions, x->h_positions, n, s, e);
    if (!rc && x->up) {
        rc = d->event_record(d, x->up->done, s, e);
        if (!rc) rc = d->event_wait(d, NULL, x->up->done, e);
        if (!rc) x->up->issued = 1, x->up->n_async++;
    }
    up_host_s += now_s() - t0, up_calls++;
    return rc;
}

int exec_dev_batch_wait(exec_dev *x, hyp_err *e) {
    if (!x->up || !x->up->issued) return HYP_OK;
    return x->dev->event_synchronize(x->dev, x->up->done, e);
}

long exec_dev_batch_async_uploads(const exec_dev *x) { return x->up ? x->up->n_async : -1; }
