/* prof_dev.c — device-event timing of plan ops for the profiler (prof_dev.h). The event pool
 * hangs off the recorder (hyp_prof.dev) and is reused after every flush. Never: fail the step. */
#include "prof_dev.h"

#include <stdlib.h>
#include <string.h>

#include "prof.h"

typedef struct {
    hyp_prof_span s;
    int ev0, ev1;
} pending;

typedef struct {
    hyp_device *d;
    hyp_event **ev;
    int n_ev, used;
    pending *pend;
    int n_pend, cap_pend;
} prof_dev;

static void pool_free(void *v) {
    prof_dev *q = v;
    if (!q) return;
    for (int i = 0; i < q->n_ev; i++) q->d->event_destroy(q->d, q->ev[i]);
    free(q->ev);
    free(q->pend);
    free(q);
}

static int record(prof_dev *q);

/* Resolves every pending pair into a span. The clock: an anchor event recorded now on the idle
 * stream and synchronized completes at the host's now (sim runs it at the synchronize; a GPU
 * whose stream has drained runs it at once), so an op starts elapsed(its start, anchor) before. */
static int pool_flush(hyp_prof *p) {
    prof_dev *q = p->dev;
    if (!q || !q->n_pend) return 0;
    hyp_err e;
    int anchor = record(q);
    if (anchor < 0 || q->d->event_synchronize(q->d, q->ev[anchor], &e)) {
        p->dropped += q->n_pend;
        q->n_pend = q->used = 0;
        return -1;
    }
    double now = hyp_prof_now_us();
    for (int i = 0; i < q->n_pend; i++) {
        pending *pd = &q->pend[i];
        float a = 0, b = 0;
        if (q->d->event_elapsed_ms(q->d, q->ev[pd->ev0], q->ev[anchor], &a, &e) ||
            q->d->event_elapsed_ms(q->d, q->ev[pd->ev0], q->ev[pd->ev1], &b, &e)) {
            p->dropped++;
            continue;
        }
        pd->s.ts_us = now - 1e3 * a;
        pd->s.dur_us = 1e3 * b;
        hyp_prof_add(p, &pd->s);
    }
    q->n_pend = q->used = 0;
    return 0;
}

/* The next free event of the pool, recorded on the default stream; -1 on failure. */
static int record(prof_dev *q) {
    hyp_err e;
    if (q->used == q->n_ev) {
        hyp_event **g = realloc(q->ev, sizeof *g * (size_t)(q->n_ev + 1));
        if (!g) return -1;
        q->ev = g;
        if (q->d->event_create(q->d, &q->ev[q->n_ev], &e)) return -1;
        q->n_ev++;
    }
    if (q->d->event_record(q->d, q->ev[q->used], NULL, &e)) return -1;
    return q->used++;
}

int hyp_prof_dev_begin(hyp_device *d) {
    hyp_prof *p = hyp_prof_cur;
    if (!p) return -1;
    prof_dev *q = p->dev;
    if (!q) {
        if (!(q = calloc(1, sizeof *q))) return -1;
        q->d = d;
        p->dev = q, p->dev_flush = pool_flush, p->dev_free = pool_free;
    }
    if (q->d != d) return -1; /* one device per process */
    int h = record(q);
    if (h < 0) p->dropped++;
    return h;
}

void hyp_prof_dev_end(hyp_device *d, int h, const plan_t *p, const plan_op *o, int64_t B, int64_t T) {
    hyp_prof *r = hyp_prof_cur;
    prof_dev *q = r ? r->dev : NULL;
    if (!q || h < 0 || q->d != d) return;
    int h1 = record(q);
    if (h1 >= 0 && q->n_pend == q->cap_pend) {
        int cap = q->cap_pend ? 2 * q->cap_pend : 256;
        pending *g = realloc(q->pend, sizeof *g * (size_t)cap);
        if (g) q->pend = g, q->cap_pend = cap;
    }
    if (h1 < 0 || q->n_pend == q->cap_pend) {
        r->dropped++;
        return;
    }
    pending *pd = &q->pend[q->n_pend++];
    hyp_prof_op_span(p, o, B, T, &pd->s);
    pd->s.tid = HYP_PROF_TID_DEVICE;
    pd->s.step = r->step;
    pd->ev0 = h, pd->ev1 = h1;
}
