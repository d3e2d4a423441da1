/* train_pp.c — the v2107 pipeline stage driver on the cpu backend (see train_pp.h).
 * Tags: micro-batch k's activation travels forward under 2k, its gradient back under 2k+1; sends
 * are non-blocking from per-micro-batch buffers (waited at the end of the step), receives block,
 * so neither schedule can deadlock. */
#include "train_pp.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ops_cpu.h"

typedef struct { int64_t off, n; } region;

struct train_pp {
    hyp_coll *c;
    const plan_t *p;
    int s, P, K, slots;      /* stage, stages, micro-batches per step, stash slots */
    int dsend, drecv;        /* buffer indices of the gradients of the send / recv boundaries */
    region *reg;             /* activation regions the stage's backward needs from its forward */
    int nreg;
    int64_t stash_n, bt;     /* floats per stash slot; B*T */
    float *stash;            /* [slots][stash_n] */
    float *fsend, *bsend;    /* [K][B*T*C] outgoing activations / gradients */
    int32_t *tok, *tgt, *pos;/* [K][B*T] the micro-batches' inputs */
    float *dl;               /* [K] loss scales */
    double *mean, *cnt, *gcnt; /* [K] mean losses (double for the broadcast), targets here and in all */
    int *own;                /* per parameter: 1 when this stage's ops use it */
    int *shared;             /* per parameter: the other stage that uses it too, or -1 */
    int req[HYP_COLL_MAX_REQS], nreq;
    double busy_s, wait_s, step_s; /* this rank: computing, blocked in receives, whole schedules */
    uint64_t bytes_p2p;      /* bytes sent by sends (activations, gradients) */
    int steps, next;         /* schedules run; the next micro-batch's index */
};

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int find_buf(const plan_t *p, const char *name) {
    for (int b = 0; b < p->n_bufs; b++)
        if (!strcmp(p->bufs[b].name, name)) return b;
    return -1;
}

static int cmp_region(const void *a, const void *b) {
    const region *x = a, *y = b;
    return x->off < y->off ? -1 : x->off > y->off;
}

/* The union of the arena ranges of the activations the stage's forward writes and of its input. */
static int stash_regions(train_pp *pp) {
    const plan_t *p = pp->p;
    const plan_pp_stage *g = &p->pp_stage[pp->s];
    region *r = calloc((size_t)p->n_bufs + 1, sizeof *r);
    int *seen = calloc((size_t)p->n_bufs, sizeof *seen), n = 0;
    if (!r || !seen) return free(r), free(seen), 0;
    for (int i = g->fwd[0]; i <= g->fwd[1]; i++) {
        const plan_op *o = &p->fwd[i];
        int cnt = i < g->fwd[1] ? o->nout : 1;
        for (int k = 0; k < cnt; k++) {
            int b = i < g->fwd[1] ? o->out[k] : g->recv;
            if (b < 0 || seen[b] || p->bufs[b].kind != BUF_ACT) continue;
            seen[b] = 1;
            r[n].off = p->bufs[b].offset_bytes / 4, r[n].n = (p->bufs[b].bytes + 3) / 4, n++;
        }
    }
    qsort(r, (size_t)n, sizeof *r, cmp_region);
    int m = 0;
    for (int i = 0; i < n; i++) { /* merge overlapping ranges (the memory plan may share them) */
        if (m && r[i].off <= r[m - 1].off + r[m - 1].n) {
            int64_t end = r[i].off + r[i].n;
            if (end > r[m - 1].off + r[m - 1].n) r[m - 1].n = end - r[m - 1].off;
        } else r[m++] = r[i];
    }
    free(seen);
    pp->reg = r, pp->nreg = m;
    for (int i = 0; i < m; i++) pp->stash_n += r[i].n;
    return 1;
}

/* Which stages use each parameter (a forward op of the stage reads its buffer). */
static int param_owners(train_pp *pp, hyp_err *e) {
    const plan_t *p = pp->p;
    pp->own = calloc((size_t)p->n_params_t, sizeof(int));
    pp->shared = malloc(sizeof(int) * (size_t)p->n_params_t);
    int *first = malloc(sizeof(int) * (size_t)p->n_params_t);
    if (!pp->own || !pp->shared || !first) return free(first), hyp_fail(e, HYP_EFAIL, "out of memory for the pipeline's parameter map");
    for (int i = 0; i < p->n_params_t; i++) pp->shared[i] = -1, first[i] = -1;
    for (int s = 0; s < p->pp; s++)
        for (int i = p->pp_stage[s].fwd[0]; i < p->pp_stage[s].fwd[1]; i++)
            for (int k = 0; k < p->fwd[i].nin; k++) {
                int b = p->fwd[i].in[k];
                if (b < 0 || p->bufs[b].kind != BUF_PARAM) continue;
                for (int j = 0; j < p->n_params_t; j++) {
                    if (p->params[j].offset_bytes != p->bufs[b].offset_bytes) continue;
                    if (s == pp->s) pp->own[j] = 1;
                    if (first[j] < 0) first[j] = s;
                    else if (first[j] != s) {
                        if (pp->shared[j] >= 0 && pp->shared[j] != s) {
                            free(first);
                            return hyp_fail(e, HYP_EINPUT, "plan: parameter '%s' is used by more than two pipeline stages (v2107) — regenerate without pp", p->params[j].name);
                        }
                        pp->shared[j] = s; /* the later stage; the first is first[j] */
                    }
                }
            }
    /* shared[j]: for this rank, the other stage (or -1 when this rank does not hold j) */
    for (int j = 0; j < p->n_params_t; j++) {
        if (pp->shared[j] < 0) continue;
        int a = first[j], b = pp->shared[j];
        pp->shared[j] = pp->s == a ? b : pp->s == b ? a : -1;
    }
    free(first);
    return HYP_OK;
}

int train_pp_mesh(const plan_t *p, const char *plan_path, dp_t *d, hyp_err *e) {
    hyp_coll *world = d->coll, *pp = NULL, *dp = NULL;
    int n = hyp_coll_world(world);
    if (n % p->pp)
        return hyp_fail(e, HYP_EINPUT, "%s: this trainer is a pipeline of %d stages (v2107), one rank each, and %d rank%s started: the world size must be a multiple of %d — start it with mpirun -np %d (or a multiple of %d for pp x dp), or regenerate with another --set v2107.stages",
                        plan_path, p->pp, n, n == 1 ? " was" : "s were", p->pp, p->pp, p->pp);
    if (n / p->pp > 1 && !p->data_parallel)
        return hyp_fail(e, HYP_EINPUT, "%s: %d ranks make %d pipelines of %d stages, a data-parallel axis of %d, but this trainer was generated without data parallelism — regenerate it with --enable dp,pp, or run mpirun -np %d",
                        plan_path, n, n / p->pp, p->pp, n / p->pp, p->pp);
    int rc = hyp_coll_mesh_split(world, p->pp, &pp, &dp, e); /* a pipeline's stages: contiguous ranks */
    if (rc) return rc;
    d->all = world, d->pp = pp, d->tp_rank = hyp_coll_rank(pp);
    d->coll = dp, d->rank = hyp_coll_rank(dp), d->world = hyp_coll_world(dp);
    return HYP_OK;
}

int train_pp_open(const plan_t *p, const char *plan_path, hyp_coll *world, exec_t *x, int K, train_pp **out, hyp_err *e) {
    (void)plan_path;
    *out = NULL;
    train_pp *pp = calloc(1, sizeof *pp);
    if (!pp) return hyp_fail(e, HYP_EFAIL, "out of memory");
    pp->c = world, pp->p = p, pp->s = hyp_coll_rank(world), pp->P = p->pp, pp->K = K;
    pp->slots = p->pp_1f1b ? (K < p->pp - pp->s ? K : p->pp - pp->s) : K;
    const plan_pp_stage *g = &p->pp_stage[pp->s];
    char name[300];
    pp->dsend = pp->drecv = -1;
    if (g->send >= 0) snprintf(name, sizeof name, "d:%s", p->bufs[g->send].name), pp->dsend = find_buf(p, name);
    if (g->recv >= 0) snprintf(name, sizeof name, "d:%s", p->bufs[g->recv].name), pp->drecv = find_buf(p, name);
    int rc = HYP_OK;
    if ((g->send >= 0 && pp->dsend < 0) || (g->recv >= 0 && pp->drecv < 0))
        rc = hyp_fail(e, HYP_EINPUT, "%s: pipeline stage %d's boundary has no gradient buffer 'd:...' — regenerate the trainer with gen", plan_path, pp->s);
    if (!rc && !stash_regions(pp)) rc = hyp_fail(e, HYP_EFAIL, "out of memory");
    if (!rc) rc = param_owners(pp, e);
    pp->bt = (int64_t)x->B * x->T; /* the bound batch (<= the plan's) */
    int64_t btc = pp->bt * p->C;
    if (!rc) {
        pp->stash = malloc(sizeof(float) * (size_t)(pp->stash_n * pp->slots));
        pp->fsend = g->send >= 0 ? malloc(sizeof(float) * (size_t)(btc * K)) : NULL;
        pp->bsend = g->recv >= 0 ? malloc(sizeof(float) * (size_t)(btc * K)) : NULL;
        pp->tok = malloc(sizeof(int32_t) * (size_t)(pp->bt * K));
        pp->tgt = malloc(sizeof(int32_t) * (size_t)(pp->bt * K));
        pp->pos = x->positions ? malloc(sizeof(int32_t) * (size_t)(pp->bt * K)) : NULL;
        pp->dl = calloc((size_t)K, sizeof(float));
        pp->mean = calloc((size_t)K, sizeof(double));
        pp->cnt = calloc((size_t)K, sizeof(double));
        pp->gcnt = calloc((size_t)K, sizeof(double));
        if (!pp->stash || (g->send >= 0 && !pp->fsend) || (g->recv >= 0 && !pp->bsend) || !pp->tok || !pp->tgt ||
            (x->positions && !pp->pos) || !pp->dl || !pp->mean || !pp->cnt || !pp->gcnt)
            rc = hyp_fail(e, HYP_EFAIL, "out of memory for the pipeline's %d stash slots of %lld floats", pp->slots, (long long)pp->stash_n);
    }
    if (rc) {
        train_pp_close(pp);
        return rc;
    }
    *out = pp;
    return HYP_OK;
}

void train_pp_close(train_pp *pp) {
    if (!pp) return;
    free(pp->reg), free(pp->stash), free(pp->fsend), free(pp->bsend), free(pp->tok), free(pp->tgt), free(pp->pos);
    free(pp->dl), free(pp->mean), free(pp->cnt), free(pp->gcnt), free(pp->own), free(pp->shared);
    free(pp);
}

static void stash_io(train_pp *pp, exec_t *x, int k, int save) {
    float *slot = pp->stash + (int64_t)(k % pp->slots) * pp->stash_n;
    for (int i = 0; i < pp->nreg; i++) {
        float *a = x->acts + pp->reg[i].off;
        if (save) memcpy(slot, a, sizeof(float) * (size_t)pp->reg[i].n);
        else memcpy(a, slot, sizeof(float) * (size_t)pp->reg[i].n);
        slot += pp->reg[i].n;
    }
}

static void inputs_in(train_pp *pp, exec_t *x, int k) {
    size_t n = sizeof(int32_t) * (size_t)pp->bt;
    memcpy(x->tokens, pp->tok + k * pp->bt, n);
    memcpy(x->targets, pp->tgt + k * pp->bt, n);
    if (pp->pos) memcpy(x->positions, pp->pos + k * pp->bt, n);
}

static int pp_send(train_pp *pp, const float *buf, size_t n, int peer, int tag, hyp_err *e) {
    if (pp->nreq == HYP_COLL_MAX_REQS / 2) { /* keep room for other requests: the oldest first */
        int rc = hyp_coll_wait(pp->c, pp->req[0], e);
        if (rc) return rc;
        memmove(pp->req, pp->req + 1, sizeof(int) * (size_t)--pp->nreq);
    }
    int rc = hyp_coll_isend_f32(pp->c, buf, n, peer, tag, &pp->req[pp->nreq], e);
    if (!rc) pp->nreq++, pp->bytes_p2p += n * sizeof(float);
    return rc;
}

static int pp_recv(train_pp *pp, float *buf, size_t n, int peer, int tag, hyp_err *e) {
    double t0 = now_s();
    int rc = hyp_coll_recv_f32(pp->c, buf, n, peer, tag, e);
    pp->wait_s += now_s() - t0;
    return rc;
}

static int forward(train_pp *pp, exec_t *x, int k, hyp_err *e) {
    const plan_t *p = pp->p;
    const plan_pp_stage *g = &p->pp_stage[pp->s];
    size_t btc = (size_t)(pp->bt * p->C);
    int rc = HYP_OK;
    inputs_in(pp, x, k);
    if (g->recv >= 0 && (rc = pp_recv(pp, exec_buf(x, g->recv), btc, pp->s - 1, 2 * k, e))) return rc;
    double t0 = now_s();
    exec_run_range(x, p->fwd, g->fwd[0], g->fwd[1], 0);
    stash_io(pp, x, k, 1);
    pp->busy_s += now_s() - t0;
    if (g->send >= 0) {
        float *b = pp->fsend + k * btc;
        memcpy(b, exec_buf(x, g->send), sizeof(float) * btc);
        rc = pp_send(pp, b, btc, pp->s + 1, 2 * k, e);
    }
    return rc;
}

static int backward(train_pp *pp, exec_t *x, int k, hyp_err *e) {
    const plan_t *p = pp->p;
    const plan_pp_stage *g = &p->pp_stage[pp->s];
    size_t btc = (size_t)(pp->bt * p->C);
    int rc = HYP_OK;
    inputs_in(pp, x, k);
    stash_io(pp, x, k, 0);
    if (pp->dsend >= 0 && (rc = pp_recv(pp, exec_buf(x, pp->dsend), btc, pp->s + 1, 2 * k + 1, e))) return rc;
    double t0 = now_s();
    float l = exec_run_range(x, p->bwd, g->bwd[0], g->bwd[1], pp->dl[k]);
    pp->busy_s += now_s() - t0;
    if (g->send < 0) pp->mean[k] = l; /* the last stage computes the loss */
    if (pp->drecv >= 0) {
        float *b = pp->bsend + k * btc;
        memcpy(b, exec_buf(x, pp->drecv), sizeof(float) * btc);
        rc = pp_send(pp, b, btc, pp->s - 1, 2 * k + 1, e);
    }
    return rc;
}

/* The order of stage s's forwards (F) and backwards (B): GPipe all F then all B; 1F1B (PipeDream-
 * Flush) min(P-1-s, K) warm-up forwards, then alternating F and B, then the remaining Bs. Event
 * i of 2K: *fwd and *k. */
static void event(int P, int s, int K, int f1b1, int i, int *fwd, int *k) {
    if (!f1b1) {
        *fwd = i < K, *k = i < K ? i : i - K;
        return;
    }
    int w = P - 1 - s < K ? P - 1 - s : K;
    if (i < w) *fwd = 1, *k = i;
    else if (i < w + 2 * (K - w)) {
        int j = i - w;
        *fwd = !(j & 1), *k = (j & 1) ? j / 2 : w + j / 2;
    } else *fwd = 0, *k = K - w + (i - w - 2 * (K - w));
}

/* The bubble of a schedule with unit forward and backward times, every dependency honoured: the
 * fraction of P x makespan in which stages idle (GPipe and 1F1B: (P-1)/(K+P-1) with tf = tb). */
static double schedule_bubble(int P, int K, int f1b1) {
    double *fe = calloc((size_t)(P * K), sizeof *fe), *be = calloc((size_t)(P * K), sizeof *be);
    int *next = calloc((size_t)P, sizeof *next);
    double *clock = calloc((size_t)P, sizeof *clock), span = 0;
    if (!fe || !be || !next || !clock) return free(fe), free(be), free(next), free(clock), -1;
    for (int done = 0; done < 2 * P * K;) { /* run any stage whose next event's inputs are ready */
        int moved = 0;
        for (int s = 0; s < P; s++) {
            if (next[s] == 2 * K) continue;
            int f, k;
            event(P, s, K, f1b1, next[s], &f, &k);
            double ready;
            if (f) {
                if (s > 0 && fe[(s - 1) * K + k] == 0) continue;
                ready = s > 0 ? fe[(s - 1) * K + k] : 0;
            } else {
                if (s < P - 1 && be[(s + 1) * K + k] == 0) continue;
                ready = s < P - 1 ? be[(s + 1) * K + k] : fe[s * K + k];
            }
            double t = (clock[s] > ready ? clock[s] : ready) + 1;
            (f ? fe : be)[s * K + k] = clock[s] = t;
            if (t > span) span = t;
            next[s]++, done++, moved = 1;
        }
        if (!moved) break; /* cannot happen for these schedules */
    }
    free(fe), free(be), free(next), free(clock);
    return span > 0 ? 1.0 - 2.0 * K / span : -1;
}

int train_pp_eval(train_pp *pp, exec_t *x, float *loss, hyp_err *e) {
    const plan_t *p = pp->p;
    const plan_pp_stage *g = &p->pp_stage[pp->s];
    size_t btc = (size_t)((int64_t)x->B * x->T * p->C);
    int rc = HYP_OK, req = -1, tag = 2 * pp->K + p->n_params_t; /* after the step's tags */
    double l = 0;
    if (g->recv >= 0) rc = hyp_coll_recv_f32(pp->c, exec_buf(x, g->recv), btc, pp->s - 1, tag, e);
    if (!rc) exec_run_range(x, p->fwd, g->fwd[0], g->fwd[1], 0);
    if (!rc && g->send >= 0 && !(rc = hyp_coll_isend_f32(pp->c, exec_buf(x, g->send), btc, pp->s + 1, tag, &req, e)))
        rc = hyp_coll_wait(pp->c, req, e);
    if (!rc && g->send < 0) {
        exec_run_range(x, &p->loss, 0, 1, 0);
        l = op_mean_loss(exec_buf(x, p->losses_buf), x->targets, (long)x->B * x->T);
    }
    if (!rc) rc = hyp_coll_broadcast(pp->c, &l, sizeof l, pp->P - 1, e);
    *loss = (float)l;
    return rc ? rc : op_cpu_check(e);
}

int train_pp_micro_batch(train_pp *pp, exec_t *x, float dloss, int last, hyp_err *e) {
    int k = pp->next++;
    if (last) pp->next = 0;
    if (k >= pp->K || (last && k != pp->K - 1) || x->B * x->T != pp->bt)
        return hyp_fail(e, HYP_EINPUT, "pipeline (v2107): micro-batch %d of a step planned for %d micro-batches of %lld tokens — run with the --grad-accum and batch shape the trainer opened with",
                        k, pp->K, (long long)pp->bt);
    size_t n = sizeof(int32_t) * (size_t)pp->bt;
    memcpy(pp->tok + k * pp->bt, x->tokens, n);
    memcpy(pp->tgt + k * pp->bt, x->targets, n);
    if (pp->pos) memcpy(pp->pos + k * pp->bt, x->positions, n);
    pp->dl[k] = dloss;
    if (!last) return HYP_OK;
    double t0 = now_s();
    int rc = HYP_OK;
    for (int i = 0; i < 2 * pp->K && !rc; i++) {
        int f, j;
        event(pp->P, pp->s, pp->K, pp->p->pp_1f1b, i, &f, &j);
        rc = f ? forward(pp, x, j, e) : backward(pp, x, j, e);
    }
    for (int i = 0; i < pp->nreq && !rc; i++) rc = hyp_coll_wait(pp->c, pp->req[i], e);
    pp->nreq = 0;
    if (!rc) rc = hyp_coll_broadcast(pp->c, pp->mean, sizeof(double) * (size_t)pp->K, pp->P - 1, e);
    pp->step_s += now_s() - t0;
    pp->steps++;
    return rc ? rc : op_cpu_check(e);
}

void train_pp_weight(train_pp *pp, int k, double cnt, double gcnt) {
    if (k < pp->K) pp->cnt[k] = cnt, pp->gcnt[k] = gcnt;
}

double train_pp_loss(const train_pp *pp) {
    double l = 0;
    for (int k = 0; k < pp->K; k++) /* the objective's expression (obj_tokens.c), term by term */
        l += pp->gcnt[k] > 0 ? (float)pp->mean[k] * pp->cnt[k] / pp->gcnt[k] / pp->K : 0;
    return l;
}

int train_pp_reduce(train_pp *pp, exec_t *x, hyp_coll *dp, double *sumsq, hyp_err *e) {
    const plan_t *p = pp->p;
    int rc = HYP_OK;
    /* pp x dp: each of the stage's tensors summed over the replicas of this stage */
    for (int i = 0; i < p->n_params_t && !rc && dp && hyp_coll_world(dp) > 1; i++)
        if (pp->own[i]) rc = hyp_coll_allreduce_f32(dp, x->grads + p->params[i].offset, (size_t)p->params[i].numel, e);
    /* a parameter two stages use (tied embeddings: the first stage's embedding, the last stage's
     * head): each sends its part of the gradient to the other and both add first-stage + last-stage
     * part, the same sum bit for bit on both */
    for (int i = 0; i < p->n_params_t && !rc; i++) {
        int o = pp->shared[i];
        if (o < 0) continue;
        const plan_param *q = &p->params[i];
        float *g = x->grads + q->offset, *other = malloc(sizeof(float) * (size_t)q->numel);
        if (!other) return hyp_fail(e, HYP_EFAIL, "out of memory for a shared gradient of %lld floats", (long long)q->numel);
        int req = -1;
        rc = hyp_coll_isend_f32(pp->c, g, (size_t)q->numel, o, 2 * pp->K + i, &req, e);
        if (!rc) pp->bytes_p2p += (uint64_t)q->numel * sizeof(float);
        if (!rc) rc = hyp_coll_recv_f32(pp->c, other, (size_t)q->numel, o, 2 * pp->K + i, e);
        if (!rc) rc = hyp_coll_wait(pp->c, req, e);
        if (!rc) {
            const float *lo = pp->s < o ? g : other, *hi = pp->s < o ? other : g;
            for (int64_t j = 0; j < q->numel; j++) g[j] = lo[j] + hi[j];
        }
        free(other);
    }
    double ss = 0; /* each tensor once: a shared one by its first stage */
    for (int i = 0; i < p->n_params_t; i++)
        if (pp->own[i] && (pp->shared[i] < 0 || pp->shared[i] > pp->s)) ss += op_sumsq(x->grads + p->params[i].offset, p->params[i].numel);
    if (!rc) rc = hyp_coll_allreduce_f64(pp->c, &ss, 1, e);
    *sumsq = ss;
    return rc;
}

void train_pp_optim(train_pp *pp, exec_t *x, const hyp_optim_i *o, const hyp_optim_step *a) {
    const plan_t *p = pp->p;
    for (int i = 0; i < p->n_params_t; i++) {
        if (!pp->own[i]) continue;
        const plan_param *q = &p->params[i];
        float *st[HYP_OPT_MAX_STATE] = {0};
        for (int k = 0; k < o->n_state; k++) st[k] = x->state[k] + q->offset;
        hyp_optim_range_fn(o, o->step_span, p, a, q->offset, q->offset + q->numel, x->params + q->offset, x->grads + q->offset, st);
    }
}

void train_pp_describe(const train_pp *pp, const plan_t *p) {
    const plan_pp_stage *g = &p->pp_stage[pp->s];
    int own = 0, shared = 0;
    for (int i = 0; i < p->n_params_t; i++) own += pp->own[i], shared += pp->shared[i] >= 0;
    printf("pipeline (v2107): stage %d of %d: layers %d..%d%s%s, %d micro-batches per step, %s schedule, %d stash slot%s of %.2f MiB, %d parameter tensors (%d shared with another stage)\n",
           pp->s, pp->P, g->layers[0], g->layers[1] - 1, pp->s == 0 ? " + embedding" : "", pp->s == pp->P - 1 ? " + final norm, head, loss" : "",
           pp->K, p->pp_1f1b ? "1F1B" : "GPipe", pp->slots, pp->slots == 1 ? "" : "s", pp->stash_n * 4.0 / 1048576, own, shared);
}

void train_pp_report(const train_pp *pp, int steps) {
    if (steps < 1 || !pp->steps) return;
    /* every stage's figures to world rank 0, which prints (the others' stdout is closed) */
    double mine[6] = {(double)hyp_coll_bytes_sent(pp->c), (double)pp->bytes_p2p, pp->wait_s, pp->busy_s, pp->step_s,
                      (double)pp->slots * (double)pp->stash_n * 4.0};
    double *all = calloc((size_t)pp->P * 6, sizeof(double));
    hyp_err e;
    if (!all || hyp_coll_allgather_bytes(pp->c, mine, all, sizeof mine, &e)) {
        free(all);
        return;
    }
    double formula = (double)(pp->P - 1) / (pp->K + pp->P - 1);
    double sched = schedule_bubble(pp->P, pp->K, pp->p->pp_1f1b);
    printf("pipeline bubble (v2107, %s, p=%d, m=%d): %.4f of each stage's step idle with unit forward/backward times in the schedule the stages ran, formula (p-1)/(m+p-1) = %.4f\n",
           pp->p->pp_1f1b ? "1F1B" : "GPipe", pp->P, pp->K, sched, formula);
    for (int s = 0; s < pp->P; s++) {
        const double *m = all + 6 * s;
        printf("pp stage %d (v2107): sent %.0f B in %d steps, %.0f B/step (point-to-point %.0f B/step: activations, gradients, shared-parameter gradients; the rest the clip norm's all-reduce); stash %.0f B; wall time in schedules %.3f s: %.1f%% computing, %.1f%% blocked in receives\n",
               s, m[0], steps, m[0] / steps, m[1] / steps, m[5], m[4], m[4] > 0 ? 100 * m[3] / m[4] : 0, m[4] > 0 ? 100 * m[2] / m[4] : 0);
    }
    free(all);
}
