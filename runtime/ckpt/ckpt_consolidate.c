/* ckpt_consolidate.c — v2181 offline consolidation of sharded checkpoints (ckpt_consolidate.h).
 * Never: writing before every shard is verified (hyp_ckpt_load_aux does it). */
#include "ckpt_consolidate.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt.h"
#include "fsio.h"
#include "safetensors.h"

#define PCAP 4352

static void pj(char *out, const char *fmt, const char *a, const char *b) {
    int n = snprintf(out, PCAP, fmt, a, b);
    if (n < 0 || n >= PCAP) out[0] = 0;
}

/* The step directory: ckpt itself when it holds state.json, else the one its `latest` names. */
static int step_dir(const char *ckpt, char *sd, hyp_err *e) {
    char p[PCAP];
    pj(p, "%s/%s", ckpt, "state.json");
    if (hyp_fs_exists(p)) {
        pj(sd, "%s%s", ckpt, "");
        return HYP_OK;
    }
    int rc = hyp_ckpt_latest(ckpt, sd, PCAP, e);
    if (!rc && !sd[0])
        rc = hyp_fail(e, HYP_EINPUT, "%s: no checkpoint here (no state.json, no latest) — give a trainer's --ckpt-dir or one of its step_* directories", ckpt);
    return rc;
}

typedef struct {
    hyp_ckpt_tensor *t;          /* [(1 + ns) * n] */
    hyp_ckpt_tensor *st[HYP_CKPT_MAX_STATES];
    hyp_ckpt_aux *aux;
    int n, ns, n_aux;
    char *names;                 /* the state and aux names */
    void *auxbuf;
} tensors;

static void tensors_free(tensors *ts) {
    for (int i = 0; ts->t && i < (1 + ts->ns) * ts->n; i++) free(ts->t[i].data);
    free(ts->t), free(ts->aux), free(ts->names), free(ts->auxbuf);
    memset(ts, 0, sizeof *ts);
}

/* The optimizer states' suffixes, from shard 0: the names that extend a parameter's name. */
static int find_suffixes(const char *sd, const plan_t *p, char suf[][32], int *ns, hyp_err *e) {
    char path[PCAP];
    pj(path, "%s/%s", sd, "shard_00000.safetensors");
    hyp_st_file *f = NULL;
    int rc = hyp_st_open(path, &f, e);
    if (rc) return rc;
    *ns = 0;
    for (int i = 0; i < p->n_params_t && !*ns; i++) {
        const char *pn = p->params[i].name;
        size_t ln = strlen(pn);
        if (!hyp_st_find(f, pn)) continue; /* this rank holds none of it */
        for (int k = 0; k < hyp_st_count(f); k++) {
            const char *tn = hyp_st_get(f, k)->name;
            if (!strncmp(tn, pn, ln) && tn[ln] && strlen(tn + ln) < 32 && *ns < HYP_CKPT_MAX_STATES) {
                int dup = 0;
                for (int s = 0; s < *ns; s++) dup |= !strcmp(suf[s], tn + ln);
                if (!dup) snprintf(suf[(*ns)++], 32, "%s", tn + ln);
            }
        }
        if (!*ns) break;
    }
    hyp_st_close(f);
    if (!*ns)
        return hyp_fail(e, HYP_EINPUT, "%s: no optimizer state tensors named after a parameter of the plan — the checkpoint is from another model: give the --plan of the trainer that wrote it", path);
    /* the optimizer's declared order is unknown here; the loader takes any order, the writer
     * keeps this one (sorted, so that the output does not depend on the shard's layout) */
    for (int a = 0; a < *ns; a++)
        for (int b = a + 1; b < *ns; b++)
            if (strcmp(suf[b], suf[a]) < 0) {
                char t[32];
                memcpy(t, suf[a], 32), memcpy(suf[a], suf[b], 32), memcpy(suf[b], t, 32);
            }
    return HYP_OK;
}

static int build(const char *sd, const plan_t *p, tensors *ts, hyp_err *e) {
    char suf[HYP_CKPT_MAX_STATES][32];
    int ns = 0, rc = find_suffixes(sd, p, suf, &ns, e);
    if (rc) return rc;
    int n = p->n_params_t;
    ts->n = n, ts->ns = ns;
    size_t names = 0;
    for (int i = 0; i < n; i++) names += (size_t)ns * (strlen(p->params[i].name) + 32);
    ts->t = calloc((size_t)(1 + ns) * (size_t)n, sizeof *ts->t);
    ts->names = malloc(names + 4096);
    if (!ts->t || !ts->names) return hyp_fail(e, HYP_EFAIL, "out of memory");
    char *np = ts->names;
    for (int k = 0; k <= ns; k++) {
        if (k) ts->st[k - 1] = ts->t + (size_t)k * (size_t)n;
        for (int i = 0; i < n; i++) {
            const plan_param *pp = &p->params[i];
            hyp_ckpt_tensor *t = &ts->t[(size_t)k * (size_t)n + (size_t)i];
            if (k) {
                t->name = np;
                np += sprintf(np, "%s%s", pp->name, suf[k - 1]) + 1;
            } else t->name = pp->name;
            t->ndim = pp->ndim;
            memcpy(t->shape, pp->shape, sizeof t->shape);
            if (!(t->data = malloc(sizeof(float) * (size_t)(pp->numel > 0 ? pp->numel : 1))))
                return hyp_fail(e, HYP_EFAIL, "out of memory for %s", pp->name);
        }
    }
    /* the auxiliary training state (FP8 scaling), as the rank-0 file holds it */
    char path[PCAP];
    pj(path, "%s/%s", sd, "train_state.safetensors");
    if (!hyp_fs_exists(path)) return HYP_OK;
    hyp_st_file *f = NULL;
    if ((rc = hyp_st_open(path, &f, e))) return rc;
    int na = hyp_st_count(f);
    size_t bytes = 0, nl = 0;
    for (int i = 0; i < na; i++) bytes += (hyp_st_get(f, i)->nbytes + 7) & ~(uint64_t)7, nl += strlen(hyp_st_get(f, i)->name) + 1;
    ts->aux = calloc((size_t)na + 1, sizeof *ts->aux);
    ts->auxbuf = malloc(bytes + 8);
    char *an = malloc(nl + 1);
    if (!ts->aux || !ts->auxbuf || !an) {
        free(an);
        hyp_st_close(f);
        return hyp_fail(e, HYP_EFAIL, "out of memory");
    }
    /* the aux names go after the state names: one more buffer, chained through names' tail */
    unsigned char *dp = ts->auxbuf;
    char *ap = an;
    for (int i = 0; i < na && !rc; i++) {
        const hyp_st_tensor *st = hyp_st_get(f, i);
        if (st->dtype != HYP_ST_F32 && st->dtype != HYP_ST_I64)
            rc = hyp_fail(e, HYP_EINPUT, "%s: tensor %s is %s, not F32 or I64", path, st->name, hyp_st_dtype_name(st->dtype));
        size_t ln = strlen(st->name) + 1;
        memcpy(ap, st->name, ln);
        ts->aux[i] = (hyp_ckpt_aux){ap, (int)st->dtype, dp, st->ndim, {0, 0, 0, 0}};
        memcpy(ts->aux[i].shape, st->shape, sizeof ts->aux[i].shape);
        ap += ln, dp += (st->nbytes + 7) & ~(uint64_t)7;
    }
    hyp_st_close(f);
    ts->n_aux = na;
    /* keep the aux names alive with the rest: swap them into the names buffer's ownership */
    size_t used = (size_t)(np - ts->names);
    if (used + nl + 1 <= names + 4096) {
        memcpy(np, an, nl);
        for (int i = 0; i < na; i++) ts->aux[i].name = np + (ts->aux[i].name - an);
        free(an);
    } else {
        free(an);
        rc = hyp_fail(e, HYP_EFAIL, "%s: too many auxiliary tensor names", path);
    }
    return rc;
}

int hyp_ckpt_consolidate(const char *ckpt, const plan_t *p, const char *out, char *what, size_t cap, hyp_err *e) {
    char sd[PCAP], path[PCAP];
    int rc = step_dir(ckpt, sd, e);
    if (rc) return rc;
    pj(path, "%s/%s", sd, "state.json");
    char *txt = NULL;
    if ((rc = hyp_fs_read_small(path, 1u << 20, &txt, NULL, e))) return rc;
    cJSON *j = cJSON_Parse(txt);
    free(txt);
    const cJSON *lay = cJSON_GetObjectItemCaseSensitive(j, "layout");
    const cJSON *world = cJSON_GetObjectItemCaseSensitive(lay, "world");
    const cJSON *stage = cJSON_GetObjectItemCaseSensitive(lay, "stage");
    int W = cJSON_IsNumber(world) ? world->valueint : 0, S = cJSON_IsNumber(stage) ? stage->valueint : 0;
    cJSON_Delete(j);
    if (!lay)
        return hyp_fail(e, HYP_EINPUT, "%s: not a sharded checkpoint (no layout in state.json): it is one file set already — use it as it is", sd);
    tensors ts = {0};
    hyp_ckpt_state st;
    if (!(rc = build(sd, p, &ts, e)) &&
        !(rc = hyp_ckpt_load_aux(sd, NULL, ts.t, ts.st, ts.ns, ts.n, ts.aux, ts.n_aux, NULL, &st, e)))
        rc = hyp_ckpt_save_aux(out, ts.t, ts.st, ts.ns, ts.n, ts.aux, ts.n_aux, &st, 0, e);
    if (!rc && what)
        snprintf(what, cap, "step %llu: %d shards (ZeRO stage %d) -> %d tensors with %d optimizer state%s each%s",
                 (unsigned long long)st.step, W, S, ts.n, ts.ns, ts.ns == 1 ? "" : "s", ts.n_aux ? " + the training state" : "");
    tensors_free(&ts);
    return rc;
}
