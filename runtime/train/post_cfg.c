/* post_cfg.c — reads the plan's "post" section (post_cfg.h). Every number is checked finite and in
 * its range before it is converted (a JSON 1e999 is inf; casting it to int is undefined).
 * Never: anything beyond the post section; a cast of an unchecked double. */
#include "post_cfg.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fsio.h"

static const char *OBJ[] = {"none", "sft", "dpo", "orpo", "simpo", "kto", "grpo"};

const char *post_objective_name(int objective) {
    return objective >= 0 && objective <= POST_GRPO ? OBJ[objective] : "?";
}

/* post.<k> as a finite double in [lo, hi] (dflt when absent). */
static int num(const char *path, const cJSON *o, const char *k, double dflt, double lo, double hi, double *out, hyp_err *e) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    if (!v) {
        *out = dflt;
        return HYP_OK;
    }
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble) || v->valuedouble < lo || v->valuedouble > hi)
        return hyp_fail(e, HYP_EINPUT, "%s: post.%s is not a number in [%g, %g] — regenerate the plan with gen", path, k, lo, hi);
    *out = v->valuedouble;
    return HYP_OK;
}

/* post.<k> as an integer in [lo, hi] (dflt when absent). */
static int inum(const char *path, const cJSON *o, const char *k, int dflt, int lo, int hi, int *out, hyp_err *e) {
    double d = 0;
    int rc = num(path, o, k, dflt, lo, hi, &d, e);
    if (rc) return rc;
    if (d != floor(d))
        return hyp_fail(e, HYP_EINPUT, "%s: post.%s = %g is not an integer — regenerate the plan with gen", path, k, d);
    *out = (int)d;
    return HYP_OK;
}

int post_cfg_load(const char *plan_path, post_cfg *c, hyp_err *e) {
    memset(c, 0, sizeof *c);
    c->mask_prompt = 1;
    char *txt = NULL;
    int rc = hyp_fs_read_small(plan_path, (size_t)256 << 20, &txt, NULL, e);
    if (rc) return rc;
    cJSON *root = cJSON_Parse(txt);
    free(txt);
    const cJSON *p = cJSON_GetObjectItemCaseSensitive(root, "post");
    if (p && !cJSON_IsObject(p)) rc = hyp_fail(e, HYP_EINPUT, "%s: field 'post' is not an object — regenerate the plan with gen", plan_path);
    if (!rc && p) {
        const cJSON *o = cJSON_GetObjectItemCaseSensitive(p, "objective"), *t = cJSON_GetObjectItemCaseSensitive(p, "template");
        const cJSON *m = cJSON_GetObjectItemCaseSensitive(p, "mask_prompt");
        c->objective = -1;
        for (int i = 0; i <= POST_GRPO && cJSON_IsString(o); i++)
            if (!strcmp(o->valuestring, OBJ[i])) c->objective = i;
        if (c->objective < 0)
            rc = hyp_fail(e, HYP_EINPUT, "%s: post.objective is none of sft, dpo, orpo, simpo, kto, grpo — regenerate the plan with gen", plan_path);
        c->sft = cJSON_IsString(t);
        if (c->sft) snprintf(c->template_name, sizeof c->template_name, "%s", t->valuestring);
        if (cJSON_IsBool(m)) c->mask_prompt = cJSON_IsTrue(m);
        /* the losses' hyper-parameters: any finite value is the loss's business (grpo.c and the
         * losses check what they need); 1e30 keeps exp()/products of them finite enough to report */
        const double B = 1e30;
        if (!rc) rc = num(plan_path, p, "beta", 0.1, -B, B, &c->beta, e);
        if (!rc) rc = num(plan_path, p, "gamma", 0, -B, B, &c->gamma, e);
        if (!rc) rc = num(plan_path, p, "lambda", 0.1, -B, B, &c->lambda, e);
        if (!rc) rc = num(plan_path, p, "label_smoothing", 0, -B, B, &c->label_smoothing, e);
        if (!rc) rc = num(plan_path, p, "desirable_weight", 1, -B, B, &c->desirable_weight, e);
        if (!rc) rc = num(plan_path, p, "undesirable_weight", 1, -B, B, &c->undesirable_weight, e);
        if (!rc) rc = num(plan_path, p, "temperature", 1, -B, B, &c->temperature, e);
        /* counts: grpo.c checks them against the batch (group divides B, max_new < T) */
        if (!rc) rc = inum(plan_path, p, "group_size", 4, 0, 1 << 30, &c->group, e);
        if (!rc) rc = inum(plan_path, p, "max_new_tokens", 16, 0, 1 << 30, &c->max_new, e);
        const cJSON *rf = cJSON_GetObjectItemCaseSensitive(p, "reference");
        c->online_ref = cJSON_IsString(rf) && !strcmp(rf->valuestring, "online");
        const cJSON *rc_ = cJSON_GetObjectItemCaseSensitive(p, "reward_chars");
        snprintf(c->reward_chars, sizeof c->reward_chars, "%s", cJSON_IsString(rc_) ? rc_->valuestring : "");
    }
    cJSON_Delete(root);
    return rc;
}
