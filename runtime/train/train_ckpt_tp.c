/* train_ckpt_tp.c — checkpoints of a v2106 tensor-parallel run: consolidated, in the np=1 layout.
 * Every sharded tensor (and its optimizer states) is all-gathered over the tp group and written
 * whole, under its own name and full shape, by rank 0 of the world; loading reads the whole tensors
 * on every rank and keeps the rank's slice (cpu/exec_tp.c). So a checkpoint does not depend on the
 * tp degree it was written at; the plan copy and config hash it carries are still the tp plan's
 * (resume: the same trainer). Never: FP8 states or packed optimizer states (refused with tp), ZeRO
 * shards (refused with tp), async writes (blocking here). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt_delta.h"
#include "hf.h"
#include "train_ckpt_tp.h"

#define NT (1 + HYP_OPT_MAX_STATE) /* the weights, then each optimizer state */

typedef struct {
    int n, ns;                       /* tensors, optimizer states */
    int64_t *off, total, most;       /* full-layout offset of each tensor, all floats, largest slice */
    float *buf[NT];                  /* [total] each: weights, states */
    hyp_ckpt_tensor *t[NT];          /* full shapes, data into buf */
} tp_view;

static int64_t full_n(const plan_param *pp) { return pp->tp_nblk ? pp->tp_full[0] * (pp->ndim == 2 ? pp->tp_full[1] : 1) : pp->numel; }

static void view_free(tp_view *v) {
    for (int k = 0; k < NT; k++) {
        for (int i = 0; v->t[k] && i < v->n; i++) free((char *)v->t[k][i].name);
        free(v->t[k]), free(v->buf[k]);
    }
    free(v->off);
    memset(v, 0, sizeof *v);
}

static int view_open(const dp_t *d, const exec_t *x, tp_view *v, hyp_err *e) {
    const plan_t *p = x->p;
    memset(v, 0, sizeof *v);
    v->n = p->n_params_t, v->ns = d->opt->n_state;
    int ok = (v->off = calloc((size_t)v->n, sizeof *v->off)) != NULL;
    for (int i = 0; ok && i < v->n; i++) {
        v->off[i] = v->total, v->total += full_n(&p->params[i]);
        if (p->params[i].numel > v->most) v->most = p->params[i].numel;
    }
    for (int k = 0; ok && k <= v->ns; k++) {
        ok = (v->buf[k] = calloc((size_t)v->total, sizeof(float))) && (v->t[k] = calloc((size_t)v->n, sizeof(hyp_ckpt_tensor)));
        for (int i = 0; ok && i < v->n; i++) {
            const plan_param *pp = &p->params[i];
            const char *suf = k ? d->opt->ckpt_suffix[k - 1] : "";
            size_t len = strlen(pp->name) + strlen(suf) + 1;
            char *nm = malloc(len);
            if (!(ok = nm != NULL)) break;
            snprintf(nm, len, "%s%s", pp->name, suf);
            hyp_ckpt_tensor *t = &v->t[k][i];
            t->name = nm, t->data = v->buf[k] + v->off[i], t->ndim = pp->ndim;
            for (int j = 0; j < pp->ndim; j++) t->shape[j] = pp->tp_nblk ? pp->tp_full[j] : pp->shape[j];
        }
    }
    if (!ok) {
        view_free(v);
        return hyp_fail(e, HYP_EFAIL, "out of memory for the consolidated tp checkpoint buffers");
    }
    return HYP_OK;
}

/* The rank's array k: the weights, or optimizer state k-1 (arena layout: stage 0, no packed states). */
static float *local(exec_t *x, int k) { return k ? x->state[k - 1] : x->params; }

/* Fills the view's whole tensors from every tp rank's slices (collective over the tp group). */
static int view_gather(dp_t *d, exec_t *x, tp_view *v, hyp_err *e) {
    const plan_t *p = x->p;
    int T = hyp_coll_world(d->tp), rc = HYP_OK;
    float *all = malloc(sizeof(float) * (size_t)(v->most * T));
    if (!all) return hyp_fail(e, HYP_EFAIL, "out of memory for the tp checkpoint gather");
    for (int k = 0; k <= v->ns && !rc; k++)
        for (int i = 0; i < v->n && !rc; i++) {
            const plan_param *pp = &p->params[i];
            const float *src = local(x, k) + pp->offset;
            if (!pp->tp_nblk) {
                memcpy(v->buf[k] + v->off[i], src, sizeof(float) * (size_t)pp->numel);
                continue;
            }
            if ((rc = hyp_coll_allgather_f32(d->tp, src, all, (size_t)pp->numel, e))) break;
            for (int r = 0; r < T; r++) exec_tp_unslice(pp, T, r, all + (int64_t)r * pp->numel, v->buf[k] + v->off[i]);
        }
    free(all);
    return rc;
}

int train_ckpt_tp_save(dp_t *d, exec_t *x, const char *dir, int keep, const hyp_ckpt_state *st, const char *delta_base,
                       hyp_err *e) {
    tp_view v;
    int rc = view_open(d, x, &v, e);
    if (!rc) rc = view_gather(d, x, &v, e);
    if (!rc && d->rank == 0 && d->tp_rank == 0) /* rank 0 of the world writes; v2180 deltas as usual */
        rc = hyp_ckpt_save_inc(dir, v.t[0], v.t + 1, v.ns, v.n, NULL, 0, st, keep, delta_base, NULL, e);
    view_free(&v);
    if (!hyp_coll_all_ok(d->all, rc == 0) && !rc) rc = hyp_fail(e, HYP_EFAIL, "rank 0 failed to write the checkpoint (its message is above)");
    return rc;
}

int train_ckpt_tp_load(dp_t *d, exec_t *x, const char *dir, const char *plan_hash, hyp_ckpt_state *st, hyp_err *e) {
    tp_view v;
    int rc = view_open(d, x, &v, e);
    if (rc) return rc;
    rc = hyp_ckpt_load_aux(dir, NULL, v.t[0], v.t + 1, v.ns, v.n, NULL, 0, plan_hash, st, e);
    for (int k = 0; k <= v.ns && rc == HYP_OK; k++)
        for (int i = 0; i < v.n; i++) {
            const plan_param *pp = &x->p->params[i];
            float *dst = local(x, k) + pp->offset;
            if (pp->tp_nblk) exec_tp_slice(pp, x->p->tp, d->tp_rank, v.buf[k] + v.off[i], dst);
            else memcpy(dst, v.buf[k] + v.off[i], sizeof(float) * (size_t)pp->numel);
        }
    view_free(&v);
    exec_params_changed(x);
    return rc;
}

int train_ckpt_tp_init_from(dp_t *d, exec_t *x, const char *path, char *what, size_t what_cap, hyp_err *e) {
    if (!hyp_hf_is_our_ckpt(path))
        return hyp_fail(e, HYP_EINPUT, "%s: --init-from with tensor parallelism (v2106) reads Hyperion checkpoints only (any mesh: they hold whole tensors), not Hugging Face directories yet — convert it with a trainer without tp first, or drop tp",
                        path);
    tp_view v;
    int rc = view_open(d, x, &v, e);
    if (rc) return rc;
    hyp_ckpt_state st;
    memset(&st, 0, sizeof st);
    rc = hyp_ckpt_load(path, NULL, v.t[0], NULL, 0, v.n, NULL, &st, e); /* the weights of any plan of this model */
    if (rc == HYP_ENOCKPT) rc = hyp_fail(e, HYP_EINPUT, "%s: no checkpoint in it yet — point --init-from at a trainer's --ckpt-dir", path);
    for (int i = 0; i < v.n && rc == HYP_OK; i++) {
        const plan_param *pp = &x->p->params[i];
        if (pp->tp_nblk) exec_tp_slice(pp, x->p->tp, d->tp_rank, v.buf[0] + v.off[i], x->params + pp->offset);
        else memcpy(x->params + pp->offset, v.buf[0] + v.off[i], sizeof(float) * (size_t)pp->numel);
    }
    if (!rc && what) snprintf(what, what_cap, "Hyperion checkpoint %s (step %llu), this rank's tp slices", st.path, (unsigned long long)st.step);
    view_free(&v);
    if (!hyp_coll_all_ok(d->all, rc == 0) && !rc) rc = hyp_fail(e, HYP_EINPUT, "another rank could not read %s (its message is above)", path);
    exec_params_changed(x);
    return rc;
}
