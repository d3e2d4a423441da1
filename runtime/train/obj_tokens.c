/* obj_tokens.c — the next-token objective (objective.h): pretraining and SFT over the data loader
 * (its loss masks), and v2149 distillation (the teacher inside the backend's fused loss). Every
 * token of the global batch weighs 1 / (tokens x K), so the sum over ranks and micro-batches is
 * the global mean loss. Never: the optimizer, gradient reduction or anything a backend does
 * differently (those are backend.h's). */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "objective.h"
#include "prof.h"
#include "train_pp.h"
#include "train_stream.h"
#include "train_cp.h"

typedef struct {
    hyp_loader *train, *val; /* the caller's (it closes them) */
    int eval_batches, stream;
    dp_t d;
    int B0, T0;              /* the bound shape: a v2127 dynamic batch rebinds per micro-batch */
} tokens;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int tok_micro_batch(train_objective *o, train_backend *b, int k, int K, int step, double dscale, double *loss,
                           train_step_times *tm, hyp_err *e) {
    (void)step;
    tokens *t = o->impl;
    exec_t *x = b->x;
    if (k == 0) t->B0 = x->B, t->T0 = x->T;
    double t0 = now_s(), pt = hyp_prof_t(); /* v2184 phase spans: no-ops outside the profiled window */
    int rc = train_cp_next(t->train, x, e); /* v2108: a cp rank's chunks of the rows */
    if (rc) return rc;
    hyp_batch_info bi;
    hyp_loader_last_batch(t->train, &bi);
    if (x->cp) bi.T /= x->p->cp;
    if ((bi.B != x->B || bi.T != x->T) && (rc = exec_reshape(x, bi.B, bi.T, e))) return rc;
    tm->slots += (double)bi.B * bi.T, tm->rows += bi.B, tm->pad += (double)bi.pad;
    double cnt = (double)exec_count_targets(x), gcnt = cnt, t1 = now_s();
    tm->data_s += t1 - t0;
    hyp_prof_phase("data_next", HYP_PROF_DATA, 1, pt);
    pt = hyp_prof_t();
    if ((rc = hyp_coll_allreduce_f64(b->dp.coll, &gcnt, 1, e))) return rc;
    tm->comm_s += now_s() - t1;
    hyp_prof_phase("allreduce_token_count", HYP_PROF_COMM, 1, pt);
    pt = hyp_prof_t();
    float mean = 0;
    /* every token of the global batch weighs 1 / (tokens * K): the sum over ranks is the mean */
    float dl = gcnt > 0 ? (float)(1.0 / (gcnt * K)) : 0.0f;
    if (dscale != 1) dl = (float)(dl * dscale); /* v2162: the loss x S */
    if (b->pp) train_pp_weight(b->pp, k, cnt, gcnt); /* v2107: the means arrive after the schedule */
    rc = b->i->micro_batch(b, dl, k == K - 1, &mean, e);
    *loss += gcnt > 0 ? mean * cnt / gcnt / K : 0;
    tm->loss_tokens += gcnt;
    hyp_prof_phase("micro_batch", HYP_PROF_STEP, 0, pt);
    return rc;
}

static int tok_step_end(train_objective *o, train_backend *b, double *loss, train_step_times *tm, hyp_err *e) {
    tokens *t = o->impl;
    exec_t *x = b->x;
    int rc = x->B != t->B0 || x->T != t->T0 ? exec_bind(x, t->B0, t->T0, e) : HYP_OK;
    double t0 = now_s(), pt = hyp_prof_t();
    if (!rc && b->pp) *loss = train_pp_loss(b->pp);
    if (!rc) rc = hyp_coll_allreduce_f64(b->dp.coll, loss, 1, e);
    tm->comm_s += now_s() - t0;
    hyp_prof_phase("allreduce_loss", HYP_PROF_COMM, 1, pt);
    return rc;
}

static int tok_eval(train_objective *o, train_backend *b, int step, float *val_loss, hyp_err *e) {
    (void)step;
    tokens *t = o->impl;
    return train_eval(b, t->val, t->eval_batches, val_loss, e);
}

static void tok_describe(const train_objective *o, FILE *out) {
    const tokens *t = o->impl;
    hyp_loader *L = t->train;
    fprintf(out, "data: %llu train tokens (%d shard%s)%s\n", (unsigned long long)hyp_loader_total_tokens(L),
            hyp_loader_num_shards(L), hyp_loader_num_shards(L) == 1 ? "" : "s", t->val ? ", with validation" : "");
    if (hyp_loader_rows_mode(L)) { /* v2126 / v2127: the epoch's layout */
        uint64_t tok, slots, pad;
        hyp_loader_layout(L, &tok, &slots, &pad);
        fprintf(out, "rows: %s: %llu %s per epoch, %llu tokens in %llu input slots, padding %.2f%%\n",
                hyp_loader_rows_mode(L) == HYP_ROWS_BFD ? "best-fit-decreasing packing of whole documents"
                                                        : "dynamic batches (length buckets, token budget)",
                (unsigned long long)hyp_loader_windows(L), hyp_loader_rows_mode(L) == HYP_ROWS_BFD ? "rows" : "batches",
                (unsigned long long)tok, (unsigned long long)slots, slots ? 100.0 * (double)pad / (double)slots : 0.0);
    }
}

static int tok_ckpt_save(train_objective *o, train_backend *b, hyp_ckpt_state *st, const char *dir, hyp_err *e) {
    (void)b, (void)dir;
    tokens *t = o->impl;
    hyp_loader_state ls;
    hyp_loader_get_state(t->train, &ls);
    st->loader_epoch = ls.epoch;
    st->loader_position = ls.position * (uint64_t)t->d.world; /* windows of the whole group */
    return t->stream ? train_stream_save(&t->d, &ls, st, e) : HYP_OK;
}

static int tok_ckpt_restore(train_objective *o, const hyp_ckpt_state *st, int world, hyp_err *e) {
    tokens *t = o->impl;
    hyp_loader_state ls = {0};
    ls.epoch = st->loader_epoch;
    ls.position = st->loader_position / (uint64_t)world;
    int rc = t->stream ? train_stream_restore(&t->d, st, &ls, e) : HYP_OK;
    return rc ? rc : hyp_loader_set_state(t->train, &ls, e);
}

static void tok_close(train_objective *o) { free(o->impl); }

static const train_objective_i TOKENS = {
    .step_begin = NULL,
    .micro_batch = tok_micro_batch,
    .step_end = tok_step_end,
    .metrics = NULL, /* the batch shape (v2126 / v2127) is the driver's train_step_times */
    .line = NULL,
    .eval = tok_eval,
    .describe = tok_describe,
    .ckpt_save = tok_ckpt_save,
    .ckpt_restore = tok_ckpt_restore,
    .close = tok_close,
};

int train_objective_tokens(train_objective *o, hyp_loader *train, hyp_loader *val, int eval_batches, int stream,
                           const dp_t *d, hyp_err *e) {
    tokens *t = train_objective_alloc(o, &TOKENS, sizeof *t, "", e);
    if (!t) return HYP_EFAIL;
    t->train = train, t->val = val, t->eval_batches = eval_batches, t->stream = stream, t->d = *d;
    o->has_eval = val != NULL;
    return HYP_OK;
}
