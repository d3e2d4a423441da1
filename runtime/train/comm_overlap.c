/* comm_overlap.c — the cpu trainer's overlapped gradient all-reduce (v2168; see comm_overlap.h). */
#include "comm_overlap.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "grad_buckets.h"
#include "op_registry.h"
#include "ops_cpu.h"
#include "prof.h"

#define MAX_STREAMS 4

typedef struct {
    int64_t lo, hi;
    int ready;          /* backward op after which it is final */
    double t0, t1;      /* its all-reduce, CLOCK_MONOTONIC seconds (this step) */
    int helper;         /* the helper that reduced it this step */
} ov_bucket;

typedef struct {
    struct train_comm_overlap *o;
    int id;
    pthread_t th;
    hyp_coll *coll;     /* its duplicate of the dp communicator */
    int *queue;         /* bucket ids in posting order ([n_buckets]) */
    int head, tail;     /* queue[head..tail) waits, guarded by o->mu */
    int rc;             /* first failure (guarded) */
    hyp_err err;
    int started;
} ov_helper;

struct train_comm_overlap {
    hyp_coll *dp;
    ov_bucket *b;
    int nb;
    int *order;         /* bucket ids by (ready op, then arena offset descending) */
    ov_helper h[MAX_STREAMS];
    int streams;
    float *grads;       /* this step's gradient arena */
    pthread_mutex_t mu;
    pthread_cond_t work, done;
    int posted, finished, stop;
    double last_total, last_exposed;
};

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* One bucket's all-reduce: MPI_Iallreduce completed by MPI_Test with 20 us sleeps between the
 * tests, so a helper waiting for the other ranks (or the network) leaves the cores to the
 * backward pass instead of spinning in MPI's progress loop (a blocking MPI_Allreduce busy-polls);
 * the v2171 algorithms have no non-blocking form and run blocking. The serial path calls it too,
 * so overlapped and serial runs sum each bucket with the same MPI collective. */
static int bucket_allreduce(hyp_coll *c, float *buf, size_t n, hyp_err *e) {
    if (hyp_coll_world(c) < 2 || hyp_coll_allreduce_algo(c) != HYP_AR_MPI) return hyp_coll_allreduce_f32(c, buf, n, e);
    double t0 = now_s();
    uint64_t b0 = hyp_coll_bytes_sent(c);
    int req = -1, done = 0, rc = hyp_coll_iallreduce_f32(c, buf, n, &req, e);
    const struct timespec nap = {0, 20000};
    while (!rc && !(rc = hyp_coll_test(c, req, &done, e)) && !done) nanosleep(&nap, NULL);
    if (!rc) hyp_coll_link_delay(c, hyp_coll_bytes_sent(c) - b0, t0);
    return rc;
}

static void *helper_main(void *arg) {
    ov_helper *h = arg;
    struct train_comm_overlap *o = h->o;
    pthread_mutex_lock(&o->mu);
    for (;;) {
        while (h->head == h->tail && !o->stop) pthread_cond_wait(&o->work, &o->mu);
        if (h->head == h->tail) break; /* stop, nothing queued */
        int k = h->queue[h->head++];
        int failed = h->rc;
        float *g = o->grads;
        pthread_mutex_unlock(&o->mu);
        ov_bucket *b = &o->b[k];
        b->helper = h->id;
        b->t0 = now_s();
        hyp_err e = {0};
        int rc = failed ? failed : bucket_allreduce(h->coll, g + b->lo, (size_t)(b->hi - b->lo), &e);
        b->t1 = now_s();
        pthread_mutex_lock(&o->mu);
        if (rc && !h->rc) h->rc = rc, h->err = e;
        o->finished++;
        pthread_cond_broadcast(&o->done);
    }
    pthread_mutex_unlock(&o->mu);
    return NULL;
}

static int cmp_post(const void *a, const void *b, void *ctx) {
    const ov_bucket *v = ctx;
    int x = *(const int *)a, y = *(const int *)b;
    if (v[x].ready != v[y].ready) return v[x].ready < v[y].ready ? -1 : 1;
    return x > y ? -1 : x < y; /* same op: the later layer first */
}

static const ov_bucket *g_sort_ctx; /* qsort has no context argument in C11 */
static int cmp_post_g(const void *a, const void *b) { return cmp_post(a, b, (void *)g_sort_ctx); }

int train_overlap_open(train_comm_overlap **out, const plan_t *p, hyp_coll *dp, int streams, int64_t arena, hyp_err *e) {
    *out = NULL;
    if (streams < 1 || streams > MAX_STREAMS)
        return hyp_fail(e, HYP_EINPUT, "plan: train.comm_streams = %d — use 1 to %d helper threads (v2168)", streams, MAX_STREAMS);
    if (hyp_coll_world(dp) > 1 && !hyp_coll_mpi_threads(dp))
        return hyp_fail(e, HYP_EINPUT, "v2168 overlap: this MPI does not provide MPI_THREAD_MULTIPLE (the helper threads run collectives while the main thread runs its own) — use an MPI built with thread support (Open MPI's default), or regenerate the trainer without v2168");
    struct train_comm_overlap *o = calloc(1, sizeof *o);
    if (!o) return hyp_fail(e, HYP_EFAIL, "out of memory");
    o->dp = dp, o->streams = streams;
    pthread_mutex_init(&o->mu, NULL);
    pthread_cond_init(&o->work, NULL);
    pthread_cond_init(&o->done, NULL);
    grad_bucket *gb = NULL;
    int rc = grad_buckets_make(p, arena, &gb, &o->nb, e);
    if (!rc && (!(o->b = calloc((size_t)o->nb, sizeof *o->b)) || !(o->order = malloc(sizeof(int) * (size_t)o->nb))))
        rc = hyp_fail(e, HYP_EFAIL, "out of memory");
    for (int i = 0; !rc && i < o->nb; i++) o->b[i].lo = gb[i].lo, o->b[i].hi = gb[i].hi, o->b[i].ready = gb[i].ready, o->order[i] = i;
    free(gb);
    if (!rc) {
        g_sort_ctx = o->b;
        qsort(o->order, (size_t)o->nb, sizeof(int), cmp_post_g);
    }
    for (int s = 0; s < streams && !rc; s++) {
        ov_helper *h = &o->h[s];
        h->o = o, h->id = s;
        if (!(h->queue = malloc(sizeof(int) * (size_t)o->nb))) rc = hyp_fail(e, HYP_EFAIL, "out of memory");
        else if (!(rc = hyp_coll_dup(dp, &h->coll, e))) {
            if (pthread_create(&h->th, NULL, helper_main, h)) rc = hyp_fail(e, HYP_EFAIL, "v2168: could not start a communication helper thread");
            else h->started = 1;
        }
    }
    if (rc) {
        train_overlap_close(o);
        return rc;
    }
    *out = o;
    return HYP_OK;
}

void train_overlap_close(train_comm_overlap *o) {
    if (!o) return;
    pthread_mutex_lock(&o->mu);
    o->stop = 1;
    pthread_cond_broadcast(&o->work);
    pthread_mutex_unlock(&o->mu);
    for (int s = 0; s < o->streams; s++) {
        if (o->h[s].started) pthread_join(o->h[s].th, NULL);
    }
    for (int s = o->streams - 1; s >= 0; s--) { /* duplicates freed in reverse order of making */
        if (o->h[s].coll) hyp_coll_finalize(o->h[s].coll);
        free(o->h[s].queue);
    }
    pthread_cond_destroy(&o->work);
    pthread_cond_destroy(&o->done);
    pthread_mutex_destroy(&o->mu);
    free(o->b);
    free(o->order);
    free(o);
}

/* Hands bucket k to the next helper (posting order k-th -> helper posted mod streams). */
static void post(struct train_comm_overlap *o, int k) {
    pthread_mutex_lock(&o->mu);
    ov_helper *h = &o->h[o->posted % o->streams];
    h->queue[h->tail++] = k;
    o->posted++;
    pthread_cond_broadcast(&o->work);
    pthread_mutex_unlock(&o->mu);
}

int train_overlap_backward(train_comm_overlap *o, exec_t *x, float dloss, int round_bf16, float *loss, hyp_err *e) {
    const plan_t *p = x->p;
    *loss = 0;
    if (o->posted) return hyp_fail(e, HYP_EFAIL, "internal error: v2168 buckets handed over twice in one step");
    o->grads = x->grads;
    int from = 0;
    for (int j = 0; j < o->nb; j++) {
        int k = o->order[j], to = o->b[k].ready + 1;
        if (to > from) {
            float l = exec_run_range(x, p->bwd, from, to, dloss);
            for (int i = from; i < to; i++)
                if (hyp_op_get(p->bwd[i].op)->flags & HYP_OPF_WRITES_LOSSES) *loss = l;
            from = to;
        }
        if (round_bf16) op_round_bf16(x->grads + o->b[k].lo, x->grads + o->b[k].lo, (long)(o->b[k].hi - o->b[k].lo));
        post(o, k);
    }
    if (from < p->n_bwd) { /* ops after the last bucket's (none write gradients) */
        float l = exec_run_range(x, p->bwd, from, p->n_bwd, dloss);
        for (int i = from; i < p->n_bwd; i++)
            if (hyp_op_get(p->bwd[i].op)->flags & HYP_OPF_WRITES_LOSSES) *loss = l;
    }
    return HYP_OK;
}

int train_overlap_posted(const train_comm_overlap *o) { return o->posted > 0; }

/* Length of the union of the buckets' [t0, t1) intervals. */
static double busy_union(const struct train_comm_overlap *o) {
    double total = 0, end = -1e300;
    int n = o->nb;
    int *ord = malloc(sizeof(int) * (size_t)n);
    if (!ord) return 0;
    for (int i = 0; i < n; i++) ord[i] = i;
    for (int i = 1; i < n; i++) /* insertion sort by start: a few dozen buckets */
        for (int j = i; j > 0 && o->b[ord[j]].t0 < o->b[ord[j - 1]].t0; j--) {
            int t = ord[j];
            ord[j] = ord[j - 1], ord[j - 1] = t;
        }
    for (int i = 0; i < n; i++) {
        const ov_bucket *b = &o->b[ord[i]];
        double s = b->t0 > end ? b->t0 : end;
        if (b->t1 > s) total += b->t1 - s;
        if (b->t1 > end) end = b->t1;
    }
    free(ord);
    return total;
}

int train_overlap_wait(train_comm_overlap *o, hyp_err *e) {
    double pt = hyp_prof_t(), t0 = now_s();
    pthread_mutex_lock(&o->mu);
    while (o->finished < o->posted) pthread_cond_wait(&o->done, &o->mu);
    int rc = HYP_OK;
    for (int s = 0; s < o->streams && !rc; s++)
        if (o->h[s].rc) rc = o->h[s].rc, *e = o->h[s].err, o->h[s].rc = 0;
    o->posted = o->finished = 0;
    for (int s = 0; s < o->streams; s++) o->h[s].head = o->h[s].tail = 0;
    pthread_mutex_unlock(&o->mu);
    double t1 = now_s();
    hyp_prof_phase("comm_wait_exposed", HYP_PROF_COMM, 1, pt);
    for (int s = 0; s < o->streams; s++) hyp_coll_take_counts(o->dp, o->h[s].coll);
    o->last_exposed = t1 - t0;
    o->last_total = busy_union(o);
    if (hyp_prof_cur) /* each bucket's all-reduce on its helper's track */
        for (int k = 0; k < o->nb; k++) {
            hyp_prof_span sp;
            memset(&sp, 0, sizeof sp);
            snprintf(sp.name, sizeof sp.name, "allreduce_bucket");
            snprintf(sp.detail, sizeof sp.detail, "%d: %lld floats", k, (long long)(o->b[k].hi - o->b[k].lo));
            sp.cat = HYP_PROF_COMM, sp.tid = (int8_t)(HYP_PROF_TID_COMM + o->b[k].helper), sp.leaf = 0;
            sp.pass = -1, sp.op = -1, sp.index = k, sp.step = hyp_prof_cur->step;
            sp.ts_us = o->b[k].t0 * 1e6, sp.dur_us = (o->b[k].t1 - o->b[k].t0) * 1e6;
            hyp_prof_add(hyp_prof_cur, &sp);
        }
    return rc;
}

int train_overlap_reduce_serial(train_comm_overlap *o, float *grads, hyp_err *e) {
    double pt = hyp_prof_t(), t0 = now_s();
    int rc = HYP_OK;
    for (int j = 0; j < o->nb && !rc; j++) {
        ov_bucket *b = &o->b[o->order[j]];
        b->t0 = now_s();
        rc = bucket_allreduce(o->dp, grads + b->lo, (size_t)(b->hi - b->lo), e);
        b->t1 = now_s();
    }
    hyp_prof_phase("comm_wait_exposed", HYP_PROF_COMM, 1, pt);
    o->last_exposed = o->last_total = now_s() - t0;
    return rc;
}

void train_overlap_last(const train_comm_overlap *o, double *total_s, double *exposed_s) {
    *total_s = o->last_total, *exposed_s = o->last_exposed;
}
int train_overlap_buckets(const train_comm_overlap *o) { return o->nb; }
int train_overlap_streams(const train_comm_overlap *o) { return o->streams; }
