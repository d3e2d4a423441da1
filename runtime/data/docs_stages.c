/* docs_stages.c — the order of the data-preparation stages (docs.h): filter, then dedup, then
 * mix, each reported as one object {"stage", "spec", ...} in the report's "stages" array.
 * Never: runs a stage that is off, or reorders the stages (filtering first keeps dedup cheap;
 * dedup before mixing keeps duplicates across domains out of the mixture). */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <string.h>

#include "docs.h"

void hyp_stages_default(hyp_stages *s) {
    memset(s, 0, sizeof *s);
    hyp_filter_opts_default(&s->filter);
    hyp_dedup_opts_default(&s->dedup);
    s->mix.temperature = 1.0;
    s->mix.seed = 1;
    s->curriculum.metric = HYP_METRIC_COMPRESSION;
    s->curriculum.pacing = HYP_PACE_LINEAR;
    s->curriculum.start = 0.1;
    s->curriculum.warmup = 0.5;
    s->curriculum.steps = 4;
    s->curriculum.seed = 1;
}

cJSON *hyp_stage_report(cJSON *stages, const char *stage, const char *spec) {
    cJSON *r = cJSON_CreateObject();
    cJSON_AddStringToObject(r, "stage", stage);
    if (spec) cJSON_AddStringToObject(r, "spec", spec);
    cJSON_AddItemToArray(stages, r);
    return r;
}

int hyp_stages_select(const hyp_docs *d, int n_sources, const hyp_stages *s, uint32_t **ids,
                      size_t *n, cJSON *stages, hyp_err *e) {
    int rc = HYP_OK;
    if (s->filter_on)
        rc = hyp_filter_run(d, &s->filter, *ids, n, hyp_stage_report(stages, "filter", s->filter_spec), e);
    if (rc == HYP_OK && s->dedup_on)
        rc = hyp_dedup_run(d, &s->dedup, *ids, n, hyp_stage_report(stages, "dedup", s->dedup_spec), e);
    if (rc == HYP_OK && s->mix_on)
        rc = hyp_mix_run(d, n_sources, &s->mix, ids, n, hyp_stage_report(stages, "mixing", s->mix_spec), e);
    return rc;
}

void hyp_stages_why_empty(const cJSON *stages, char *out, size_t cap) {
    out[0] = '\0';
    const cJSON *st;
    cJSON_ArrayForEach(st, stages) {
        const cJSON *rr = cJSON_GetObjectItem(st, "removed_by_rule");
        if (!rr) continue;
        const cJSON *best = NULL, *r;
        cJSON_ArrayForEach(r, rr) if (!best || r->valuedouble > best->valuedouble) best = r;
        if (best && best->valuedouble > 0)
            snprintf(out, cap, "; the filter's rule %s removed %.0f", best->string, best->valuedouble);
    }
}
