/* train_ckpt.c — the trainer's checkpoints (see train_ckpt.h): save (a single file set, or
 * per-rank shards: v2181) and load with re-sharding to the current world size (v2175), optimizer
 * states as the optimizer declares them, FP8 scaling states included (v2160), and initial weights
 * (--init-from, hf.h). Never: the step. */
#include "train_ckpt.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt_delta.h"
#include "gemm_bf16.h"
#include "hf.h"
#include "safetensors.h"
#include "moe_ep.h"
#include "train_ckpt_tp.h"

/* The plan's tensors as checkpoint tensors "<name><suffix>", data at base's full arena layout. */
static hyp_ckpt_tensor *ckpt_tensors(exec_t *x, float *base, const char *suffix, int k) {
    const plan_t *p = x->p;
    hyp_ckpt_tensor *t = calloc((size_t)p->n_params_t, sizeof *t);
    char **names = calloc((size_t)p->n_params_t, sizeof *names);
    if (!t || !names) {
        free(t), free(names);
        return NULL;
    }
    for (int i = 0; i < p->n_params_t; i++) {
        const plan_param *pp = &p->params[i];
        size_t len = strlen(pp->name) + strlen(suffix) + 1;
        names[i] = malloc(len);
        if (names[i]) snprintf(names[i], len, "%s%s", pp->name, suffix);
        t[i].name = names[i];
        t[i].data = base ? base + pp->offset : NULL; /* NULL: names and shapes only */
        t[i].ndim = pp->ndim;
        for (int d = 0; d < pp->ndim; d++) t[i].shape[d] = pp->shape[d];
        if (k >= 0 && p->optim.state_compact[k]) { /* a packed state (stage 0): 1-D, its own floats */
            t[i].data = base ? base + p->optim.state_off[k][i] : NULL;
            t[i].ndim = 1;
            t[i].shape[0] = p->optim.state_n[k][i];
        }
    }
    free(names); /* the strings live on in t[i].name; freed by free_tensors */
    return t;
}

static void free_tensors(hyp_ckpt_tensor *t, int n) {
    if (!t) return;
    for (int i = 0; i < n; i++) free((char *)t[i].name);
    free(t);
}

/* v2160 FP8 scaling states as checkpoint tensors, so a resumed run scales exactly like an
 * uninterrupted one: amax histories [slots, history], scale and scale_inv [slots, 2], history
 * position / update count / last saturation count [slots, 3]. */
typedef struct {
    float *hist, *scale;
    int64_t *cnt;
    hyp_ckpt_aux t[3];
    int n;                      /* 3, or 0 without FP8 */
} fp8_aux;

static void fp8_aux_close(fp8_aux *a) {
    free(a->hist), free(a->scale), free(a->cnt);
    memset(a, 0, sizeof *a);
}

static int fp8_aux_open(const exec_t *x, fp8_aux *a) {
    memset(a, 0, sizeof *a);
    int S = x->p->fp8_slots;
    if (!S) return HYP_OK;
    int64_t H = x->fp8[0].recipe.history_len;
    a->hist = malloc(sizeof(float) * (size_t)(S * H));
    a->scale = malloc(sizeof(float) * (size_t)S * 2);
    a->cnt = malloc(sizeof(int64_t) * (size_t)S * 3);
    if (!a->hist || !a->scale || !a->cnt) {
        fp8_aux_close(a);
        return HYP_EFAIL;
    }
    a->t[0] = (hyp_ckpt_aux){"fp8.amax_history", HYP_ST_F32, a->hist, 2, {S, H, 0, 0}};
    a->t[1] = (hyp_ckpt_aux){"fp8.scale", HYP_ST_F32, a->scale, 2, {S, 2, 0, 0}};
    a->t[2] = (hyp_ckpt_aux){"fp8.counters", HYP_ST_I64, a->cnt, 2, {S, 3, 0, 0}};
    a->n = 3;
    return HYP_OK;
}

static void fp8_aux_pack(const exec_t *x, fp8_aux *a) {
    int64_t H = a->n ? a->t[0].shape[1] : 0;
    for (int i = 0; i < (a->n ? x->p->fp8_slots : 0); i++) {
        const hyp_fp8_state *s = &x->fp8[i];
        memcpy(a->hist + i * H, s->amax_history, sizeof(float) * (size_t)H);
        a->scale[2 * i] = s->scale, a->scale[2 * i + 1] = s->scale_inv;
        a->cnt[3 * i] = s->pos, a->cnt[3 * i + 1] = s->steps, a->cnt[3 * i + 2] = s->nsat_last;
    }
}

static void fp8_aux_unpack(exec_t *x, const fp8_aux *a) {
    int64_t H = a->n ? a->t[0].shape[1] : 0;
    for (int i = 0; i < (a->n ? x->p->fp8_slots : 0); i++) {
        hyp_fp8_state *s = &x->fp8[i];
        memcpy(s->amax_history, a->hist + i * H, sizeof(float) * (size_t)H);
        s->scale = a->scale[2 * i], s->scale_inv = a->scale[2 * i + 1];
        s->pos = (int)a->cnt[3 * i], s->steps = (long)a->cnt[3 * i + 1], s->nsat_last = (long)a->cnt[3 * i + 2];
    }
}

/* The optimizer's state tensors of every parameter, named "<param><suffix>" by the optimizer;
 * data at base[k]'s full arena layout (base NULL: names and shapes only). */
static int state_tensors(const dp_t *d, exec_t *x, float *const *base, hyp_ckpt_tensor **ts) {
    int ok = 1;
    for (int k = 0; k < d->opt->n_state; k++) ok &= (ts[k] = ckpt_tensors(x, base ? base[k] : NULL, d->opt->ckpt_suffix[k], k)) != NULL;
    return ok;
}

/* Checkpoints hold every tensor in the plan's full layout. With stage >= 1 the optimizer states
 * (and at stage 3 the weights) are sharded, so a checkpoint goes through temporary full-layout
 * buffers, allocated only while saving or loading. */
typedef struct {
    float *p, *s[HYP_OPT_MAX_STATE];      /* full layout: x's own arrays where not sharded */
    hyp_ckpt_tensor *tp, *ts[HYP_OPT_MAX_STATE];
    fp8_aux fa;                 /* the FP8 scaling states (replicated: identical on every rank) */
} ckpt_view;

static void view_close(const dp_t *d, exec_t *x, ckpt_view *cv) {
    int n = x->p->n_params_t;
    free_tensors(cv->tp, n);
    for (int k = 0; k < d->opt->n_state; k++) free_tensors(cv->ts[k], n);
    fp8_aux_close(&cv->fa);
    if (d->stage >= 3 || x->p->param_bf16) free(cv->p);
    for (int k = 0; k < d->opt->n_state && d->stage >= 1; k++) free(cv->s[k]);
    memset(cv, 0, sizeof *cv);
}

static int view_open(const dp_t *d, exec_t *x, ckpt_view *cv, hyp_err *e) {
    size_t n = (size_t)(d->stage >= 3 ? x->p->param_floats : x->shard * d->world);
    memset(cv, 0, sizeof *cv);
    /* stage 3, v2161 bf16 parameters: an fp32 full-layout copy (checkpoints hold fp32 weights) */
    int own = d->stage >= 3 || x->p->param_bf16;
    int ok = (cv->p = own ? calloc(n, sizeof(float)) : x->params) != NULL;
    for (int k = 0; k < d->opt->n_state; k++) ok &= (cv->s[k] = d->stage >= 1 ? calloc(n, sizeof(float)) : x->state[k]) != NULL;
    if (ok) ok = (cv->tp = ckpt_tensors(x, cv->p, "", -1)) != NULL && state_tensors(d, x, cv->s, cv->ts);
    if (!ok || fp8_aux_open(x, &cv->fa)) {
        view_close(d, x, cv);
        return hyp_fail(e, HYP_EFAIL, "out of memory for the checkpoint buffers");
    }
    return HYP_OK;
}

/* Fills the view from every rank's shards (collective). */
static int view_gather(dp_t *d, exec_t *x, ckpt_view *cv, hyp_err *e) {
    int rc;
    fp8_aux_pack(x, &cv->fa);
    if (d->stage >= 3 && (rc = exec_z3_gather_full(x, x->params, cv->p, e))) return rc;
    if (x->p->param_bf16) cpu_bf16_to_f32(cv->p, (const uint16_t *)(const void *)x->params, (long)x->p->param_floats);
    for (int k = 0; k < d->opt->n_state && d->stage >= 1; k++)
        if ((rc = d->stage >= 3 ? exec_z3_gather_full(x, x->state[k], cv->s[k], e)
                                : hyp_coll_allgather_f32(d->coll, x->state[k], cv->s[k], (size_t)x->shard, e)))
            return rc;
    return HYP_OK;
}

/* Keeps this rank's shards of a loaded view. */
static void view_scatter(const dp_t *d, exec_t *x, const ckpt_view *cv) {
    fp8_aux_unpack(x, &cv->fa);
    if (d->stage >= 3) exec_z3_scatter_full(x, cv->p, x->params);
    /* v2161: exact for weights saved by a bf16 run; others (an fp32 checkpoint) round to nearest */
    if (x->p->param_bf16) cpu_f32_to_bf16((uint16_t *)(void *)x->params, cv->p, (long)x->p->param_floats);
    for (int k = 0; k < d->opt->n_state && d->stage >= 1; k++) {
        if (d->stage >= 3) exec_z3_scatter_full(x, cv->s[k], x->state[k]);
        else memcpy(x->state[k], cv->s[k] + x->shard * d->rank, sizeof(float) * (size_t)x->shard);
    }
}

/* The checkpoint of one step: with stage 0 or one rank a single file set written by rank 0 from
 * full-layout views (HF-compatible model.safetensors); else sharded (v2181, see save_shards). */
static int save_full(dp_t *d, exec_t *x, const char *dir, int keep, const hyp_ckpt_state *st, hyp_ckpt_async *async,
                     const char *delta_base, hyp_err *e) {
    ckpt_view cv;
    int rc = view_open(d, x, &cv, e);
    if (!rc) rc = view_gather(d, x, &cv, e);
    if (!rc && d->rank == 0 && async) /* v2179: a snapshot now, the files from the writer thread */
        rc = hyp_ckpt_async_save_inc(async, dir, cv.tp, cv.ts, d->opt->n_state, x->p->n_params_t, cv.fa.t, cv.fa.n, st,
                                     keep, delta_base, NULL, e);
    else if (!rc && d->rank == 0) /* v2180: a delta against delta_base when given */
        rc = hyp_ckpt_save_inc(dir, cv.tp, cv.ts, d->opt->n_state, x->p->n_params_t, cv.fa.t, cv.fa.n, st, keep,
                               delta_base, NULL, e);
    if (cv.tp) view_close(d, x, &cv);
    if (!hyp_coll_all_ok(d->coll, rc == 0) && !rc) rc = hyp_fail(e, HYP_EFAIL, "rank 0 failed to write the checkpoint");
    return rc;
}

/* This rank's slice of every tensor: where it lies in the tensor and in the rank's arrays. */
static void own_slices(const dp_t *d, const exec_t *x, hyp_ckpt_slice *sl, int64_t *ranges) {
    const plan_t *p = x->p;
    for (int i = 0; i < p->n_params_t; i++) {
        const plan_param *pp = &p->params[i];
        int64_t first = 0, pos = 0, cnt;
        if (d->stage >= 3) {
            cnt = exec_z3_own(x, pp->offset, pp->numel, &first, &pos);
        } else { /* stages 1/2: the arena shard [rank*shard, +shard); the weights are replicated */
            int64_t lo = x->shard * d->rank, hi = lo + x->shard;
            first = pp->offset > lo ? pp->offset : lo;
            cnt = (pp->offset + pp->numel < hi ? pp->offset + pp->numel : hi) - first;
            pos = first - lo;
        }
        if (cnt <= 0) first = pp->offset, cnt = 0, pos = 0;
        sl[i] = (hyp_ckpt_slice){first - pp->offset, first - pp->offset + cnt,
                                 d->stage >= 3 ? x->params + pos : x->params + first, {0}};
        for (int k = 0; k < d->opt->n_state; k++) sl[i].state[k] = x->state[k] + pos;
        ranges[2 * i] = sl[i].lo, ranges[2 * i + 1] = sl[i].hi;
    }
}

/* v2181: every rank writes its own slices into rank 0's temp dir; rank 0 commits the step only
 * when every rank succeeded. */
static int save_shards(dp_t *d, exec_t *x, const char *dir, int keep, const hyp_ckpt_state *st, hyp_err *e) {
    int n = x->p->n_params_t, W = d->world, rc = HYP_OK;
    char tmp[HYP_CKPT_PATH_MAX] = {0};
    if (d->rank == 0) rc = hyp_ckpt_shard_begin(dir, st, tmp, sizeof tmp, e);
    if (!hyp_coll_all_ok(d->coll, rc == 0)) return rc ? rc : hyp_fail(e, HYP_EFAIL, "rank 0 could not start the checkpoint in %s", dir);
    if ((rc = hyp_coll_broadcast(d->coll, tmp, sizeof tmp, 0, e))) return rc;
    hyp_ckpt_tensor *tp = ckpt_tensors(x, NULL, "", -1), *ts[HYP_OPT_MAX_STATE] = {0};
    int ts_ok = state_tensors(d, x, NULL, ts);
    hyp_ckpt_slice *sl = calloc((size_t)n, sizeof *sl);
    int64_t *rg = calloc((size_t)n * 2, sizeof *rg), *all_rg = calloc((size_t)n * 2 * W, sizeof *all_rg);
    hyp_ckpt_shard_sum sum = {{0}, 0}, *sums = calloc((size_t)W, sizeof *sums);
    fp8_aux fa = {0};
    if (!tp || !ts_ok || !sl || !rg || !all_rg || !sums) rc = hyp_fail(e, HYP_EFAIL, "out of memory for the checkpoint");
    if (!rc) {
        own_slices(d, x, sl, rg);
        rc = hyp_ckpt_shard_write(tmp, d->rank, tp, ts, d->opt->n_state, n, sl, st, &sum, e);
    }
    int grc = hyp_coll_allgather_bytes(d->coll, &sum, sums, sizeof sum, e);
    if (!grc) grc = hyp_coll_allgather_bytes(d->coll, rg ? rg : all_rg, all_rg, sizeof(int64_t) * 2 * (size_t)n, e);
    if (!rc) rc = grc;
    if (!hyp_coll_all_ok(d->coll, rc == 0)) {
        if (d->rank == 0) hyp_ckpt_shard_abort(tmp);
        if (!rc) rc = hyp_fail(e, HYP_EFAIL, "another rank failed to write its checkpoint shard (its message is above)");
    } else if (d->rank == 0) {
        if (fp8_aux_open(x, &fa)) rc = hyp_fail(e, HYP_EFAIL, "out of memory for the checkpoint");
        fp8_aux_pack(x, &fa);
        if (!rc) rc = hyp_ckpt_shard_commit(dir, tmp, tp, n, W, d->stage, all_rg, sums, fa.t, fa.n, st, keep, e);
        else hyp_ckpt_shard_abort(tmp);
    }
    if (!hyp_coll_all_ok(d->coll, rc == 0) && !rc) rc = hyp_fail(e, HYP_EFAIL, "rank 0 failed to commit the checkpoint");
    fp8_aux_close(&fa);
    free_tensors(tp, n);
    for (int k = 0; k < d->opt->n_state; k++) free_tensors(ts[k], n);
    free(sl), free(rg), free(all_rg), free(sums);
    return rc;
}

/* Stage 3: every rank gathers the full weights, and forward reads them with no more collectives. */
int train_unshard(exec_t *x, hyp_err *e) {
    float *full = calloc((size_t)x->p->param_floats, sizeof(float));
    if (!full) return hyp_fail(e, HYP_EFAIL, "out of memory for the full weights to sample with");
    int rc = exec_z3_gather_full(x, x->params, full, e);
    if (rc) free(full);
    else exec_z3_adopt_full(x, full);
    return rc;
}

int train_ckpt_load(dp_t *d, exec_t *x, const char *dir, int for_sampling, const char *plan_hash, hyp_ckpt_state *st,
                    hyp_err *e) {
    if (d->tp) return train_ckpt_tp_load(d, x, dir, plan_hash, st, e); /* v2106: whole tensors, sliced */
    ckpt_view cv;
    int rc = view_open(d, x, &cv, e);
    if (rc) return rc;
    rc = hyp_ckpt_load_aux(dir, NULL, cv.tp, cv.ts, d->opt->n_state, x->p->n_params_t, cv.fa.t, cv.fa.n, plan_hash, st, e);
    if (rc == HYP_OK) view_scatter(d, x, &cv);
    if (rc == HYP_OK && d->stage >= 3 && for_sampling) { /* sampling: the full weights, no gathers */
        exec_z3_adopt_full(x, cv.p);
        cv.p = NULL;
    }
    view_close(d, x, &cv);
    exec_params_changed(x);
    return rc;
}

int train_ckpt_init_from(dp_t *d, exec_t *x, const char *path, char *what, size_t what_cap, hyp_err *e) {
    if (d->tp) return train_ckpt_tp_init_from(d, x, path, what, what_cap, e); /* v2106: whole tensors, sliced */
    /* every rank reads the files (same weights everywhere); stage 3 keeps its own shards */
    int own = d->stage >= 3 || x->p->param_bf16; /* v2161: read in fp32, kept rounded to nearest bf16 */
    float *full = own ? calloc((size_t)x->p->param_floats, sizeof(float)) : x->params;
    if (!full) return hyp_fail(e, HYP_EFAIL, "out of memory for the initial weights");
    int rc = hyp_hf_init_from(path, x->p, full, what, what_cap, e);
    if (own) {
        if (!rc && d->stage >= 3) exec_z3_scatter_full(x, full, x->params);
        if (!rc && x->p->param_bf16) cpu_f32_to_bf16((uint16_t *)(void *)x->params, full, (long)x->p->param_floats);
        free(full);
    }
    if (!hyp_coll_all_ok(d->coll, rc == 0) && !rc) rc = hyp_fail(e, HYP_EINPUT, "another rank could not read %s (its message is above)", path);
    exec_params_changed(x);
    return rc;
}

int train_ckpt_save(dp_t *d, exec_t *x, const char *dir, int keep, const hyp_ckpt_state *st, hyp_err *e) {
    return train_ckpt_save_async(d, x, dir, keep, st, NULL, NULL, e);
}

int train_ckpt_sharded(const dp_t *d) { return d->stage >= 1 && d->world > 1; }

int train_ckpt_save_async(dp_t *d, exec_t *x, const char *dir, int keep, const hyp_ckpt_state *st,
                          hyp_ckpt_async *async, const char *delta_base, hyp_err *e) {
    /* every checkpoint carries the plan that trained it (ckpt.h: plan.json) */
    hyp_ckpt_state *sp = malloc(sizeof *sp);
    if (!sp) return hyp_fail(e, HYP_EFAIL, "%s: out of memory", dir);
    *sp = *st;
    if (!sp->plan_text) sp->plan_text = x->p->text, sp->plan_len = x->p->text_len;
    int rc = exec_moe_ep_gather(x, e); /* v2109: every expert from its owner, so rank 0 holds them all */
    if (rc) {
        free(sp);
        return rc;
    }
    rc = d->tp                  ? train_ckpt_tp_save(d, x, dir, keep, sp, delta_base, e) /* v2106 */
             : train_ckpt_sharded(d) ? save_shards(d, x, dir, keep, sp, e)
                                   : save_full(d, x, dir, keep, sp, async, delta_base, e);
    free(sp);
    return rc;
}
