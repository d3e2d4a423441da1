/* docs_order.c — the curriculum (v2120): a difficulty score per document (its length in bytes, or
 * its zlib compression ratio: compressed / raw bytes, less compressible = harder) and a pacing
 * function c(t) (competence-based curriculum, Platanios et al. 2019): at stream position t
 * (documents written / documents, in [0, 1)) the next document is drawn uniformly, without
 * replacement, among the not yet written documents whose difficulty rank is below c(t) * n; once
 * none is left there, the next easiest one is taken. So the document at position k always has
 * rank < max(ceil(c(k/n) * n), k + 1). Pacing: linear c = c0 + (1 - c0) t / T, root
 * c = sqrt(c0^2 + (1 - c0^2) t / T), step c = c0 + (1 - c0) floor(K t / T) / K; c = 1 for t >= T.
 * Never: drops or duplicates a piece (the result is a permutation). */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <zlib.h>

#include "docs.h"
#include "rng.h"

double hyp_curriculum_competence(const hyp_curriculum_opts *o, double t) {
    double c0 = o->start < 0 ? 0 : o->start > 1 ? 1 : o->start;
    double T = o->warmup > 0 ? o->warmup : 1e-12;
    if (t >= T) return 1.0;
    double x = t / T, c;
    switch (o->pacing) {
    case HYP_PACE_ROOT: c = sqrt(c0 * c0 + (1 - c0 * c0) * x); break;
    case HYP_PACE_STEP: {
        int K = o->steps > 0 ? o->steps : 1;
        c = c0 + (1 - c0) * floor(K * x) / K;
        break;
    }
    default: c = c0 + (1 - c0) * x; break;
    }
    return c < c0 ? c0 : c > 1 ? 1 : c;
}

int hyp_curriculum_score(const uint8_t *text, size_t len, int metric, double *score, hyp_err *e) {
    if (metric == HYP_METRIC_LENGTH || len == 0) {
        *score = (double)len;
        return HYP_OK;
    }
    uLongf cap = compressBound((uLong)len);
    Bytef *buf = malloc(cap);
    if (!buf) return hyp_fail(e, HYP_EFAIL, "curriculum: out of memory");
    int zr = compress2(buf, &cap, text, (uLong)len, 6);
    free(buf);
    if (zr != Z_OK) return hyp_fail(e, HYP_EFAIL, "curriculum: zlib compress2 failed (%d)", zr);
    *score = (double)cap / (double)len;
    return HYP_OK;
}

typedef struct {
    double score;
    uint32_t idx;
} scored;

static int by_score(const void *a, const void *b) {
    const scored *x = a, *y = b;
    if (x->score != y->score) return x->score < y->score ? -1 : 1;
    return x->idx < y->idx ? -1 : x->idx > y->idx;
}

int hyp_curriculum_run(const hyp_docs *d, const hyp_curriculum_opts *o, const uint32_t *piece_doc,
                       size_t n, uint32_t *perm, cJSON *rep, hyp_err *e) {
    scored *s = malloc((n + 1) * sizeof *s);
    uint32_t *pool = malloc((n + 1) * sizeof *pool);
    double *rank_score = malloc((n + 1) * sizeof *rank_score);
    if (!s || !pool || !rank_score) {
        free(s);
        free(pool);
        free(rank_score);
        return hyp_fail(e, HYP_EFAIL, "curriculum: out of memory");
    }
    int rc = HYP_OK;
    for (size_t i = 0; i < n && rc == HYP_OK; i++) {
        uint32_t id = piece_doc[i];
        s[i].idx = (uint32_t)i;
        rc = hyp_curriculum_score(d->text + d->off[id], d->len[id], o->metric, &s[i].score, e);
    }
    if (rc != HYP_OK) goto done;
    qsort(s, n, sizeof *s, by_score);
    hyp_rng r;
    hyp_rng_seed2(&r, o->seed, 0x637572); /* "cur" */
    size_t added = 0, np = 0;
    for (size_t k = 0; k < n; k++) {
        double c = hyp_curriculum_competence(o, (double)k / (double)n);
        size_t limit = (size_t)ceil(c * (double)n - 1e-9);
        if (limit > n) limit = n;
        while (added < limit) pool[np++] = (uint32_t)added++;
        if (np == 0) pool[np++] = (uint32_t)added++;
        size_t j = (size_t)hyp_rng_below(&r, np);
        uint32_t rank = pool[j];
        pool[j] = pool[--np];
        perm[k] = s[rank].idx;
        rank_score[k] = s[rank].score;
    }
    cJSON_AddNumberToObject(rep, "documents_in", (double)n);
    cJSON_AddNumberToObject(rep, "documents_out", (double)n);
    cJSON_AddStringToObject(rep, "metric", o->metric == HYP_METRIC_LENGTH ? "length" : "compression");
    cJSON_AddStringToObject(rep, "pacing", o->pacing == HYP_PACE_ROOT ? "root"
                                           : o->pacing == HYP_PACE_STEP ? "step" : "linear");
    cJSON_AddNumberToObject(rep, "start", o->start);
    cJSON_AddNumberToObject(rep, "warmup", o->warmup);
    cJSON_AddNumberToObject(rep, "steps", o->steps);
    cJSON_AddNumberToObject(rep, "seed", (double)o->seed);
    if (n > 0) {
        cJSON_AddNumberToObject(rep, "score_min", s[0].score);
        cJSON_AddNumberToObject(rep, "score_max", s[n - 1].score);
    }
    /* mean difficulty of each tenth of the written stream */
    cJSON *dec = cJSON_AddArrayToObject(rep, "mean_score_by_tenth");
    for (int q = 0; q < 10 && n >= 10; q++) {
        size_t a = n * (size_t)q / 10, b = n * (size_t)(q + 1) / 10;
        double m = 0;
        for (size_t k = a; k < b; k++) m += rank_score[k];
        cJSON_AddItemToArray(dec, cJSON_CreateNumber(b > a ? m / (double)(b - a) : 0));
    }
done:
    free(s);
    free(pool);
    free(rank_score);
    return rc;
}
