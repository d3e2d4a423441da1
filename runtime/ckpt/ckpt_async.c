/* ckpt_async.c — v2179 background checkpoint writes (ckpt_async.h): snapshot slots reused from
 * save to save, one writer thread, a FIFO of at most max_inflight saves. Never: collectives,
 * writing anything but through hyp_ckpt_save_aux. */
#include "ckpt_async.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ckpt_delta.h"
#include "safetensors.h"

/* One queued save: a deep copy of everything hyp_ckpt_save_aux reads. */
typedef struct {
    int busy;                       /* queued or being written */
    uint64_t seq;                   /* queue order */
    char dir[HYP_CKPT_PATH_MAX];
    int n, n_states, n_aux, keep;
    char delta_base[64];            /* v2180: "" for a full checkpoint */
    hyp_ckpt_state st;
    hyp_ckpt_tensor *t;             /* [(1 + n_states) * n]: params, then each state's */
    hyp_ckpt_tensor *states[HYP_CKPT_MAX_STATES];
    hyp_ckpt_aux *aux;              /* [n_aux] */
    char *names;                    /* every name, NUL-separated */
    size_t names_cap;
    unsigned char *data;            /* every tensor's bytes */
    size_t data_cap;
} slot;

struct hyp_ckpt_async {
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;              /* a slot was queued, finished, or stop */
    int max, stop;
    slot *slots;
    uint64_t next_seq, done_seq;    /* seq of the next save; saves < done_seq are finished */
    int failed;                     /* the first background failure, kept until reported */
    hyp_err err;
};

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void *writer(void *arg) {
    hyp_ckpt_async *a = arg;
    pthread_mutex_lock(&a->mu);
    for (;;) {
        slot *s = NULL;
        for (int i = 0; i < a->max; i++)
            if (a->slots[i].busy && a->slots[i].seq == a->done_seq) s = &a->slots[i];
        if (!s) {
            if (a->stop) break;
            pthread_cond_wait(&a->cv, &a->mu);
            continue;
        }
        pthread_mutex_unlock(&a->mu);
        hyp_err e = {{0}};
        int rc = hyp_ckpt_save_inc(s->dir, s->t, s->states, s->n_states, s->n, s->aux, s->n_aux, &s->st, s->keep,
                                   s->delta_base, NULL, &e);
        pthread_mutex_lock(&a->mu);
        if (rc && !a->failed) a->failed = rc, a->err = e;
        s->busy = 0;
        a->done_seq++;
        pthread_cond_broadcast(&a->cv);
    }
    pthread_mutex_unlock(&a->mu);
    return NULL;
}

int hyp_ckpt_async_open(hyp_ckpt_async **out, int max_inflight, hyp_err *e) {
    *out = NULL;
    if (max_inflight < 1 || max_inflight > 16)
        return hyp_fail(e, HYP_EINPUT, "async checkpoints: max_inflight %d is not in [1, 16] — regenerate with a valid --set v2179.max_inflight", max_inflight);
    hyp_ckpt_async *a = calloc(1, sizeof *a);
    if (!a || !(a->slots = calloc((size_t)max_inflight, sizeof *a->slots))) {
        free(a);
        return hyp_fail(e, HYP_EFAIL, "async checkpoints: out of memory");
    }
    a->max = max_inflight;
    pthread_mutex_init(&a->mu, NULL);
    pthread_cond_init(&a->cv, NULL);
    if (pthread_create(&a->thread, NULL, writer, a)) {
        pthread_mutex_destroy(&a->mu);
        pthread_cond_destroy(&a->cv);
        free(a->slots), free(a);
        return hyp_fail(e, HYP_EFAIL, "async checkpoints: cannot start the writer thread");
    }
    *out = a;
    return HYP_OK;
}

static size_t numel(int ndim, const int64_t *shape) {
    size_t n = 1;
    for (int d = 0; d < ndim; d++) n *= (size_t)shape[d];
    return n;
}

/* Grows a buffer to at least need bytes (kept for the next save). */
static int reserve(void **buf, size_t *cap, size_t need) {
    if (need <= *cap) return 0;
    void *p = realloc(*buf, need);
    if (!p) return -1;
    *buf = p, *cap = need;
    return 0;
}

/* The deep copy: names and bytes into the slot's buffers. */
static int snapshot(slot *s, const char *dir, const hyp_ckpt_tensor *params, hyp_ckpt_tensor *const *states,
                    int n_states, int n, const hyp_ckpt_aux *aux, int n_aux, const hyp_ckpt_state *st, int keep) {
    size_t names = 0, bytes = 0;
    for (int k = 0; k <= n_states; k++)
        for (int i = 0; i < n; i++) {
            const hyp_ckpt_tensor *src = k ? &states[k - 1][i] : &params[i];
            names += strlen(src->name) + 1;
            bytes += numel(src->ndim, src->shape) * sizeof(float);
        }
    bytes += 8; /* aligning the aux tensors */
    for (int i = 0; i < n_aux; i++) {
        names += strlen(aux[i].name) + 1;
        bytes += numel(aux[i].ndim, aux[i].shape) * 8; /* F32 or I64: 8 bytes is enough either way */
    }
    free(s->t), free(s->aux);
    s->t = calloc((size_t)(n_states + 1) * (size_t)(n > 0 ? n : 1), sizeof *s->t);
    s->aux = calloc((size_t)(n_aux > 0 ? n_aux : 1), sizeof *s->aux);
    if (!s->t || !s->aux || reserve((void **)&s->names, &s->names_cap, names + 1) ||
        reserve((void **)&s->data, &s->data_cap, bytes + 1))
        return -1;
    char *np = s->names;
    unsigned char *dp = s->data;
    for (int k = 0; k <= n_states; k++) {
        if (k) s->states[k - 1] = s->t + (size_t)k * (size_t)n;
        for (int i = 0; i < n; i++) {
            const hyp_ckpt_tensor *src = k ? &states[k - 1][i] : &params[i];
            hyp_ckpt_tensor *d = &s->t[(size_t)k * (size_t)n + (size_t)i];
            *d = *src;
            size_t ln = strlen(src->name) + 1, b = numel(src->ndim, src->shape) * sizeof(float);
            memcpy(np, src->name, ln);
            d->name = np, np += ln;
            memcpy(dp, src->data, b);
            d->data = (float *)(void *)dp, dp += b;
        }
    }
    dp = s->data + (((size_t)(dp - s->data) + 7) & ~(size_t)7); /* I64 aux tensors */
    for (int i = 0; i < n_aux; i++) {
        s->aux[i] = aux[i];
        size_t ln = strlen(aux[i].name) + 1, b = numel(aux[i].ndim, aux[i].shape) * (aux[i].dtype == HYP_ST_I64 ? 8 : 4);
        memcpy(np, aux[i].name, ln);
        s->aux[i].name = np, np += ln;
        memcpy(dp, aux[i].data, b);
        s->aux[i].data = dp, dp += (b + 7) & ~(size_t)7;
    }
    snprintf(s->dir, sizeof s->dir, "%s", dir);
    s->n = n, s->n_states = n_states, s->n_aux = n_aux, s->keep = keep, s->st = *st;
    return 0;
}

static int take_failure(hyp_ckpt_async *a, hyp_err *e) {
    int rc = a->failed;
    if (rc) {
        *e = a->err;
        a->failed = 0;
    }
    return rc;
}

int hyp_ckpt_async_save(hyp_ckpt_async *a, const char *dir, const hyp_ckpt_tensor *params,
                        hyp_ckpt_tensor *const *states, int n_states, int n, const hyp_ckpt_aux *aux, int n_aux,
                        const hyp_ckpt_state *st, int keep, double *stall_s, hyp_err *e) {
    return hyp_ckpt_async_save_inc(a, dir, params, states, n_states, n, aux, n_aux, st, keep, NULL, stall_s, e);
}

int hyp_ckpt_async_save_inc(hyp_ckpt_async *a, const char *dir, const hyp_ckpt_tensor *params,
                            hyp_ckpt_tensor *const *states, int n_states, int n, const hyp_ckpt_aux *aux, int n_aux,
                            const hyp_ckpt_state *st, int keep, const char *delta_base, double *stall_s, hyp_err *e) {
    if (n_states > HYP_CKPT_MAX_STATES || n < 0 || n_aux < 0)
        return hyp_fail(e, HYP_EINPUT, "async checkpoint: %d states, %d tensors, %d aux is out of range", n_states, n, n_aux);
    double t0 = now_s();
    pthread_mutex_lock(&a->mu);
    slot *s = NULL;
    for (;;) {
        for (int i = 0; i < a->max && !s; i++)
            if (!a->slots[i].busy) s = &a->slots[i];
        if (s) break;
        pthread_cond_wait(&a->cv, &a->mu);
    }
    int rc = take_failure(a, e);
    pthread_mutex_unlock(&a->mu);
    if (stall_s) *stall_s = now_s() - t0;
    if (rc) return rc;
    /* the slot is free: nobody else touches it until it is queued */
    if (snapshot(s, dir, params, states, n_states, n, aux, n_aux, st, keep))
        return hyp_fail(e, HYP_EFAIL, "async checkpoint: out of memory for the snapshot of step %llu", (unsigned long long)st->step);
    snprintf(s->delta_base, sizeof s->delta_base, "%s", delta_base ? delta_base : "");
    pthread_mutex_lock(&a->mu);
    s->seq = a->next_seq++;
    s->busy = 1;
    pthread_cond_broadcast(&a->cv);
    pthread_mutex_unlock(&a->mu);
    return HYP_OK;
}

int hyp_ckpt_async_wait(hyp_ckpt_async *a, hyp_err *e) {
    if (!a) return HYP_OK;
    pthread_mutex_lock(&a->mu);
    while (a->done_seq < a->next_seq) pthread_cond_wait(&a->cv, &a->mu);
    int rc = take_failure(a, e);
    pthread_mutex_unlock(&a->mu);
    return rc;
}

void hyp_ckpt_async_close(hyp_ckpt_async *a) {
    if (!a) return;
    pthread_mutex_lock(&a->mu);
    a->stop = 1;
    pthread_cond_broadcast(&a->cv);
    pthread_mutex_unlock(&a->mu);
    pthread_join(a->thread, NULL); /* the writer drains the queue before it stops */
    for (int i = 0; i < a->max; i++) {
        slot *s = &a->slots[i];
        free(s->t), free(s->aux), free(s->names), free(s->data);
    }
    pthread_mutex_destroy(&a->mu);
    pthread_cond_destroy(&a->cv);
    free(a->slots);
    free(a);
}
