/* plan_pp.c — the plan's v2107 pipeline section (plan.pp, core/PLAN_FORMAT.md): the schedule and,
 * per stage, its forward and backward op ranges, its layers and the boundary activations it
 * receives and sends (plan.h pp_stage), checked so that the stage driver (train/train_pp.c) stays
 * inside the op lists: the ranges tile each list in order (forward stage 0 first, backward the
 * last stage first) and a boundary is an f32 activation of the planned B x T x C.
 * Never trusts the file; never allocates. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <string.h>

#include "plan.h"

#define AGAIN "the plan is damaged or from another version; regenerate it with gen"

static int pair(const cJSON *j, int lo, int hi, int out[2]) {
    if (!cJSON_IsArray(j) || cJSON_GetArraySize(j) != 2) return 0;
    for (int k = 0; k < 2; k++) {
        const cJSON *x = cJSON_GetArrayItem(j, k);
        if (!cJSON_IsNumber(x) || x->valuedouble < lo || x->valuedouble > hi || x->valuedouble != (double)(int)x->valuedouble) return 0;
        out[k] = (int)x->valuedouble;
    }
    return out[0] <= out[1];
}

/* "" -> -1; else an activation buffer of the plan's B*T*C floats */
static int boundary(const cJSON *j, const plan_t *p, int *out) {
    if (!cJSON_IsString(j)) return 0;
    *out = -1;
    if (!j->valuestring[0]) return 1;
    for (int b = 0; b < p->n_bufs; b++)
        if (!strcmp(p->bufs[b].name, j->valuestring)) {
            const plan_buf *x = &p->bufs[b];
            if (x->kind != BUF_ACT || x->dtype != HYP_DT_F32 || x->numel != (int64_t)p->B * p->T * p->C) return 0;
            *out = b;
            return 1;
        }
    return 0;
}

int plan_pp_load(const cJSON *root, plan_t *p, const char *path, hyp_err *e) {
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(root, "pp");
    if (p->pp < 2) {
        if (t) return hyp_fail(e, HYP_EINPUT, "%s: a 'pp' section without train.pp >= 2 — " AGAIN, path);
        return HYP_OK;
    }
    const cJSON *n = cJSON_IsObject(t) ? cJSON_GetObjectItemCaseSensitive(t, "stages") : NULL;
    const cJSON *sc = cJSON_IsObject(t) ? cJSON_GetObjectItemCaseSensitive(t, "schedule") : NULL;
    const cJSON *st = cJSON_IsObject(t) ? cJSON_GetObjectItemCaseSensitive(t, "stage") : NULL;
    if (!cJSON_IsNumber(n) || n->valuedouble != p->pp || !cJSON_IsString(sc) ||
        (strcmp(sc->valuestring, "gpipe") && strcmp(sc->valuestring, "1f1b")) || !cJSON_IsArray(st) ||
        cJSON_GetArraySize(st) != p->pp)
        return hyp_fail(e, HYP_EINPUT, "%s: train.pp = %d but the 'pp' section is missing, has another stage count, a schedule other than gpipe/1f1b or not one entry per stage — " AGAIN,
                        path, p->pp);
    p->pp_1f1b = !strcmp(sc->valuestring, "1f1b");
    int fend = 0, bend = p->n_bwd, lend = 0;
    for (int s = 0; s < p->pp; s++) {
        const cJSON *j = cJSON_GetArrayItem(st, s);
        plan_pp_stage *g = &p->pp_stage[s];
        if (!cJSON_IsObject(j) || !pair(cJSON_GetObjectItemCaseSensitive(j, "fwd"), 0, p->n_fwd, g->fwd) ||
            !pair(cJSON_GetObjectItemCaseSensitive(j, "bwd"), 0, p->n_bwd, g->bwd) ||
            !pair(cJSON_GetObjectItemCaseSensitive(j, "layers"), 0, p->L, g->layers) ||
            !boundary(cJSON_GetObjectItemCaseSensitive(j, "recv"), p, &g->recv) ||
            !boundary(cJSON_GetObjectItemCaseSensitive(j, "send"), p, &g->send))
            return hyp_fail(e, HYP_EINPUT, "%s: field 'pp.stage[%d]': fwd, bwd and layers must be [from, to] inside the op lists and the layers, recv and send \"\" or a B x T x C f32 activation — " AGAIN,
                            path, s);
        /* forward ranges follow each other from op 0; backward ranges from the last stage's at op 0 */
        if (g->fwd[0] != fend || g->layers[0] != lend || (s == 0) != (g->recv < 0) || (s == p->pp - 1) != (g->send < 0) ||
            (s > 0 && g->recv != p->pp_stage[s - 1].send))
            return hyp_fail(e, HYP_EINPUT, "%s: field 'pp.stage[%d]' does not continue stage %d (ops, layers or boundary) — " AGAIN, path, s, s - 1);
        fend = g->fwd[1], lend = g->layers[1];
        if (g->bwd[1] != bend) return hyp_fail(e, HYP_EINPUT, "%s: field 'pp.stage[%d].bwd' does not end where stage %d's begins — " AGAIN, path, s, s - 1);
        bend = g->bwd[0];
    }
    if (fend != p->n_fwd || bend != 0 || lend != p->L)
        return hyp_fail(e, HYP_EINPUT, "%s: field 'pp.stage': the stages do not cover every op and layer — " AGAIN, path);
    return HYP_OK;
}
