/* docs_mix.c — domain mixing (v2121): every input is a domain; the output stream draws each
 * document's domain at random with the target proportions (given weights, or domain sizes
 * flattened by a temperature; shares of documents, or of bytes: then domain i is drawn with
 * probability q_i proportional to p_i / its mean document bytes), then takes that domain's next
 * document (domains are shuffled and,
 * when one runs out, reshuffled and repeated — the report counts repeats). The realized counts
 * are Multinomial(size, p), which is what the tests check. Never: changes a document. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "docs.h"
#include "rng.h"

static void shuffle(uint32_t *v, size_t n, hyp_rng *r) {
    for (size_t i = n; i > 1; i--) {
        size_t j = (size_t)hyp_rng_below(r, i);
        uint32_t t = v[i - 1];
        v[i - 1] = v[j];
        v[j] = t;
    }
}

int hyp_mix_run(const hyp_docs *d, int S, const hyp_mix_opts *o, uint32_t **ids_io, size_t *n,
                cJSON *rep, hyp_err *e) {
    uint32_t *ids = *ids_io;
    int fixed_last = o->fixed_last != 0; /* the last source has a fixed share */
    int S_w = S - fixed_last;            /* sources the weights apply to */
    if (fixed_last && (!(o->last_share >= 0 && o->last_share <= 1) || S < 2))
        return hyp_fail(e, HYP_EINPUT, "mixing: a fixed share %g for added documents needs a "
                        "share <= 1 and at least one other input", o->last_share);
    if (o->n_weights && o->n_weights != S_w)
        return hyp_fail(e, HYP_EINPUT, "mixing: %d weight%s for %d input%s — give one weight per "
                        "input, in the order of the inputs (e.g. --set mixing.weights=0.7,0.3)",
                        o->n_weights, o->n_weights == 1 ? "" : "s", S_w, S_w == 1 ? "" : "s");
    double *p = calloc((size_t)S, sizeof *p), *q = calloc((size_t)S, sizeof *q);
    size_t *cnt = calloc((size_t)S, sizeof *cnt), *pos = calloc((size_t)S, sizeof *pos);
    size_t *drawn = calloc((size_t)S, sizeof *drawn), *rep_n = calloc((size_t)S, sizeof *rep_n);
    uint64_t *bytes = calloc((size_t)S, sizeof *bytes);
    uint32_t **dom = calloc((size_t)S, sizeof *dom);
    uint32_t *out = NULL;
    int rc = HYP_OK;
    uint64_t *avail_bytes = calloc((size_t)S, sizeof *avail_bytes);
    if (!p || !q || !cnt || !pos || !drawn || !rep_n || !bytes || !dom || !avail_bytes) {
        rc = hyp_fail(e, HYP_EFAIL, "mixing: out of memory");
        goto done;
    }
    for (size_t i = 0; i < *n; i++) cnt[d->source[ids[i]]]++;
    for (int s = 0; s < S; s++) {
        dom[s] = malloc((cnt[s] + 1) * sizeof **dom);
        if (!dom[s]) {
            rc = hyp_fail(e, HYP_EFAIL, "mixing: out of memory");
            goto done;
        }
        cnt[s] = 0;
    }
    for (size_t i = 0; i < *n; i++) {
        int s = d->source[ids[i]];
        dom[s][cnt[s]++] = ids[i];
        avail_bytes[s] += d->len[ids[i]];
    }
    double sum = 0;
    for (int s = 0; s < S_w; s++) {
        double w = o->n_weights ? o->weights[s] : pow((double)cnt[s], 1.0 / o->temperature);
        if (!(w >= 0) || !isfinite(w)) {
            rc = hyp_fail(e, HYP_EINPUT, "mixing: weight %d is %g — weights are finite numbers "
                          ">= 0", s + 1, w);
            goto done;
        }
        p[s] = w;
        sum += w;
    }
    if (!(sum > 0)) {
        rc = hyp_fail(e, HYP_EINPUT, "mixing: the weights sum to 0 — give at least one positive "
                      "weight");
        goto done;
    }
    double limit = INFINITY, qsum = 0;
    for (int s = 0; s < S_w; s++) p[s] = p[s] / sum * (fixed_last ? 1 - o->last_share : 1);
    if (fixed_last) p[S - 1] = o->last_share;
    for (int s = 0; s < S; s++) {
        if (p[s] > 0 && cnt[s] == 0) {
            rc = hyp_fail(e, HYP_EINPUT, "mixing: input %d has weight %g but no document left "
                          "(after filter/dedup) — drop it or give it weight 0", s + 1, p[s]);
            goto done;
        }
        /* draw probabilities: the target shares, or (bytes) shares over mean document bytes */
        q[s] = !o->by_bytes || p[s] == 0 ? p[s] : p[s] * (double)cnt[s] / (double)avail_bytes[s];
        qsum += q[s];
    }
    for (int s = 0; s < S; s++) {
        q[s] /= qsum;
        if (q[s] > 0 && (double)cnt[s] / q[s] < limit) limit = (double)cnt[s] / q[s];
    }
    uint64_t size = o->size ? o->size : (uint64_t)floor(limit + 1e-9);
    if (size == 0) size = 1;
    if (size > 0xffffffffull) {
        rc = hyp_fail(e, HYP_EINPUT, "mixing: size %llu is too large — at most 2^32 - 1 "
                      "documents", (unsigned long long)size);
        goto done;
    }
    out = malloc((size_t)size * sizeof *out);
    if (!out) {
        rc = hyp_fail(e, HYP_EFAIL, "mixing: out of memory for %llu documents",
                      (unsigned long long)size);
        goto done;
    }
    hyp_rng r;
    hyp_rng_seed2(&r, o->seed, 0x6d6978); /* "mix" */
    for (int s = 0; s < S; s++) shuffle(dom[s], cnt[s], &r);
    for (uint64_t k = 0; k < size; k++) {
        double u = hyp_rng_uniform_f64(&r), c = 0;
        int s = -1;
        for (int k2 = 0; k2 < S; k2++) {
            if (q[k2] <= 0) continue;
            s = k2;
            c += q[k2];
            if (u < c) break;
        }
        if (pos[s] == cnt[s]) { /* domain exhausted: reshuffle and repeat */
            shuffle(dom[s], cnt[s], &r);
            pos[s] = 0;
        }
        if (drawn[s] >= cnt[s]) rep_n[s]++;
        uint32_t id = dom[s][pos[s]++];
        out[k] = id;
        drawn[s]++;
        bytes[s] += d->len[id];
    }
    cJSON_AddNumberToObject(rep, "documents_in", (double)*n);
    cJSON_AddNumberToObject(rep, "documents_out", (double)size);
    cJSON_AddStringToObject(rep, "proportions", o->n_weights ? "weights" : "sizes^(1/temperature)");
    cJSON_AddStringToObject(rep, "unit", o->by_bytes ? "bytes" : "documents");
    cJSON_AddNumberToObject(rep, "temperature", o->temperature);
    cJSON_AddNumberToObject(rep, "seed", (double)o->seed);
    uint64_t total_bytes = 0;
    for (int s = 0; s < S; s++) total_bytes += bytes[s];
    cJSON *arr = cJSON_AddArrayToObject(rep, "sources");
    for (int s = 0; s < S; s++) {
        cJSON *x = cJSON_CreateObject();
        cJSON_AddNumberToObject(x, "source", s);
        cJSON_AddNumberToObject(x, "documents_available", (double)cnt[s]);
        cJSON_AddNumberToObject(x, "target_share", p[s]);
        cJSON_AddNumberToObject(x, "draw_probability", q[s]);
        cJSON_AddNumberToObject(x, "documents_drawn", (double)drawn[s]);
        cJSON_AddNumberToObject(x, "realized_share", (double)drawn[s] / (double)size);
        cJSON_AddNumberToObject(x, "repeated", (double)rep_n[s]);
        cJSON_AddNumberToObject(x, "bytes", (double)bytes[s]);
        cJSON_AddNumberToObject(x, "byte_share", total_bytes ? (double)bytes[s] / (double)total_bytes : 0);
        cJSON_AddItemToArray(arr, x);
    }
    free(*ids_io);
    *ids_io = out;
    out = NULL;
    *n = (size_t)size;
done:
    free(out);
    if (dom)
        for (int s = 0; s < S; s++) free(dom[s]);
    free(dom);
    free(p);
    free(q);
    free(avail_bytes);
    free(cnt);
    free(pos);
    free(drawn);
    free(rep_n);
    free(bytes);
    return rc;
}
