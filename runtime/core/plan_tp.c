/* plan_tp.c — the plan's v2106 tensor-parallel section (plan.tp, core/PLAN_FORMAT.md): for each
 * parameter a tp rank holds only a slice of, the full tensor's shape, the split dimension and the
 * blocks of that dimension each rank takes 1/degree of (plan.h plan_param.tp_*), checked against
 * the parameter's local shape so that the executor's slicing (cpu/exec_tp.c) stays inside both
 * the full tensor and the local one. Never trusts the file: every field is range-checked, and a
 * failure is one message naming the plan and the field. Never allocates. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <string.h>

#include "plan.h"

#define AGAIN "the plan is damaged or from another version; regenerate it with gen"

static int whole(const cJSON *j, int64_t lo, int64_t hi, int64_t *out) {
    if (!cJSON_IsNumber(j)) return 0;
    double d = j->valuedouble;
    if (!(d >= (double)lo && d <= (double)hi) || d != (double)(int64_t)d) return 0;
    *out = (int64_t)d;
    return 1;
}

/* One entry of plan.tp.params (index i) onto its parameter. */
static int load_one(const cJSON *j, int i, plan_t *p, const char *path, hyp_err *e) {
    const cJSON *nm = cJSON_GetObjectItemCaseSensitive(j, "name");
    if (!cJSON_IsString(nm))
        return hyp_fail(e, HYP_EINPUT, "%s: field 'tp.params[%d].name' is missing or not a string — " AGAIN, path, i);
    plan_param *pp = NULL;
    for (int k = 0; k < p->n_params_t && !pp; k++)
        if (!strcmp(p->params[k].name, nm->valuestring)) pp = &p->params[k];
    if (!pp)
        return hyp_fail(e, HYP_EINPUT, "%s: field 'tp.params[%d].name' = \"%.200s\" is no parameter of the plan — " AGAIN, path, i,
                        nm->valuestring);
    if (pp->tp_nblk)
        return hyp_fail(e, HYP_EINPUT, "%s: field 'tp.params[%d]': '%.200s' is listed twice — " AGAIN, path, i, pp->name);
    if (pp->ndim < 1 || pp->ndim > 2)
        return hyp_fail(e, HYP_EINPUT, "%s: field 'tp.params[%d]': '%.200s' has %d dimensions; tensor parallelism splits vectors and matrices only — " AGAIN,
                        path, i, pp->name, pp->ndim);
    const cJSON *fs = cJSON_GetObjectItemCaseSensitive(j, "full_shape"), *dm = cJSON_GetObjectItemCaseSensitive(j, "dim"),
                *bl = cJSON_GetObjectItemCaseSensitive(j, "blocks");
    int64_t dim = -1;
    if (!cJSON_IsArray(fs) || cJSON_GetArraySize(fs) != pp->ndim || !whole(dm, 0, pp->ndim - 1, &dim) || !cJSON_IsArray(bl) ||
        cJSON_GetArraySize(bl) < 1 || cJSON_GetArraySize(bl) > PLAN_TP_MAX_BLOCKS)
        return hyp_fail(e, HYP_EINPUT, "%s: field 'tp.params[%d]' ('%.200s'): full_shape must list %d sizes, dim be 0..%d and blocks 1..%d [start, length] pairs — " AGAIN,
                        path, i, pp->name, pp->ndim, pp->ndim - 1, PLAN_TP_MAX_BLOCKS);
    for (int d = 0; d < pp->ndim; d++) {
        if (!whole(cJSON_GetArrayItem(fs, d), 1, (int64_t)1 << 40, &pp->tp_full[d]))
            return hyp_fail(e, HYP_EINPUT, "%s: field 'tp.params[%d].full_shape[%d]' is not a positive size — " AGAIN, path, i, d);
        if (d != dim && pp->tp_full[d] != pp->shape[d])
            return hyp_fail(e, HYP_EINPUT, "%s: field 'tp.params[%d].full_shape[%d]' = %lld differs from the local shape's %lld in a dimension that is not split — " AGAIN,
                            path, i, d, (long long)pp->tp_full[d], (long long)pp->shape[d]);
    }
    int64_t end = 0, local = 0;
    for (int b = 0; b < cJSON_GetArraySize(bl); b++) {
        const cJSON *x = cJSON_GetArrayItem(bl, b);
        int64_t s = -1, n = -1;
        if (!cJSON_IsArray(x) || cJSON_GetArraySize(x) != 2 || !whole(cJSON_GetArrayItem(x, 0), 0, pp->tp_full[dim], &s) ||
            !whole(cJSON_GetArrayItem(x, 1), 1, pp->tp_full[dim], &n) || s < end || s + n > pp->tp_full[dim] || n % p->tp)
            return hyp_fail(e, HYP_EINPUT, "%s: field 'tp.params[%d].blocks[%d]' is not a [start, length] inside the full dimension %lld, after the previous block, with a length divisible by the degree %d — " AGAIN,
                            path, i, b, (long long)pp->tp_full[dim], p->tp);
        pp->tp_blk[b][0] = s, pp->tp_blk[b][1] = n;
        end = s + n, local += n / p->tp;
    }
    if (local != pp->shape[dim])
        return hyp_fail(e, HYP_EINPUT, "%s: field 'tp.params[%d]' ('%.200s'): 1/%d of its blocks is %lld, its local shape's dimension %lld is %lld — " AGAIN,
                        path, i, pp->name, p->tp, (long long)local, (long long)dim, (long long)pp->shape[dim]);
    pp->tp_dim = (int)dim;
    pp->tp_nblk = cJSON_GetArraySize(bl);
    return HYP_OK;
}

int plan_tp_load(const cJSON *root, plan_t *p, const char *path, hyp_err *e) {
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(root, "tp");
    if (p->tp < 2) {
        if (t) return hyp_fail(e, HYP_EINPUT, "%s: a 'tp' section without train.tp >= 2 — " AGAIN, path);
        return HYP_OK;
    }
    int64_t deg = 0;
    const cJSON *ps = cJSON_IsObject(t) ? cJSON_GetObjectItemCaseSensitive(t, "params") : NULL;
    if (!cJSON_IsObject(t) || !whole(cJSON_GetObjectItemCaseSensitive(t, "degree"), 2, 64, &deg) || deg != p->tp ||
        !cJSON_IsArray(ps) || cJSON_GetArraySize(ps) < 1)
        return hyp_fail(e, HYP_EINPUT, "%s: train.tp = %d but the 'tp' section is missing, has another degree or no sharded params — " AGAIN,
                        path, p->tp);
    for (int i = 0; i < cJSON_GetArraySize(ps); i++) {
        int rc = load_one(cJSON_GetArrayItem(ps, i), i, p, path, e);
        if (rc) return rc;
    }
    return HYP_OK;
}
