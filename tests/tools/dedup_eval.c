/* dedup_eval.c — measures v2122's dedup stage (runtime/data/docs_dedup.c), for
 * tests/gen/test_data_stages.sh and bench/bench_data_stages.sh. Prints one JSON object.
 *
 *   dedup_eval planted BASE_DOCS SEED [NGRAM NUM_PERM BANDS THRESHOLD]
 *       generates a corpus of BASE_DOCS random-word documents plus 0-3 copies of each with
 *       1-50% of the words substituted (planted near duplicates), computes every pair's true
 *       Jaccard similarity of the shingle sets by brute force, and scores the stage's removals
 *       against the truth: a document is a true duplicate when an earlier document that the
 *       truth keeps has true Jaccard >= THRESHOLD (the stage's greedy rule with exact values).
 *       Reports precision, recall (also per true-similarity band) and the stage's docs/s.
 *   dedup_eval file PATH [SEP [NGRAM NUM_PERM BANDS THRESHOLD]]
 *       reads PATH as gen data does (SEP: --doc-sep, "" for none) and times the stage.
 * Never: part of the product; exits 2 on a usage error. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <xxhash.h>

#include "docs.h"
#include "rng.h"

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int cmp_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* The shingle set of a document (sorted, unique 64-bit hashes), as the stage shingles it. */
static size_t shingle_set(const uint8_t *t, size_t len, int ngram, uint64_t **out) {
    char *norm = malloc(len + 1);
    size_t *ws = malloc((len / 2 + 2) * sizeof *ws), nw = 0, o = 0;
    for (size_t i = 0; i < len;) {
        while (i < len && (t[i] == ' ' || t[i] == '\n' || t[i] == '\t' || t[i] == '\r' || t[i] == '\f' || t[i] == '\v')) i++;
        if (i >= len) break;
        if (o) norm[o++] = ' ';
        ws[nw++] = o;
        while (i < len && !(t[i] == ' ' || t[i] == '\n' || t[i] == '\t' || t[i] == '\r' || t[i] == '\f' || t[i] == '\v'))
            norm[o++] = (char)(t[i] >= 'A' && t[i] <= 'Z' ? t[i] | 32 : t[i]), i++;
    }
    size_t ns = nw == 0 ? 0 : nw >= (size_t)ngram ? nw - (size_t)ngram + 1 : 1;
    uint64_t *s = malloc((ns + 1) * sizeof *s);
    for (size_t k = 0; k < ns; k++) {
        size_t last = k + (size_t)ngram < nw ? k + (size_t)ngram : nw;
        size_t end = last < nw ? ws[last] - 1 : o;
        s[k] = XXH3_64bits(norm + ws[k], end - ws[k]);
    }
    qsort(s, ns, sizeof *s, cmp_u64);
    size_t u = 0;
    for (size_t k = 0; k < ns; k++)
        if (u == 0 || s[u - 1] != s[k]) s[u++] = s[k];
    free(norm);
    free(ws);
    *out = s;
    return u;
}

static double jaccard(const uint64_t *a, size_t na, const uint64_t *b, size_t nb) {
    if (na == 0 && nb == 0) return 1.0;
    size_t i = 0, j = 0, inter = 0;
    while (i < na && j < nb) {
        if (a[i] == b[j]) inter++, i++, j++;
        else if (a[i] < b[j]) i++;
        else j++;
    }
    return (double)inter / (double)(na + nb - inter);
}

static void add_doc(hyp_docs *d, const char *text, size_t len) {
    if (d->n == d->cap) {
        d->cap = d->cap ? d->cap * 2 : 1024;
        d->off = realloc(d->off, d->cap * sizeof *d->off);
        d->len = realloc(d->len, d->cap * sizeof *d->len);
        d->source = realloc(d->source, d->cap * sizeof *d->source);
    }
    if (d->text_len + len > d->text_cap) {
        d->text_cap = (d->text_len + len) * 2 + 4096;
        d->text = realloc(d->text, d->text_cap);
    }
    memcpy(d->text + d->text_len, text, len);
    d->off[d->n] = d->text_len;
    d->len[d->n] = len;
    d->source[d->n] = 0;
    d->text_len += len;
    d->n++;
}

static void parse_params(int argc, char **argv, int at, hyp_dedup_opts *o) {
    if (argc > at + 3) {
        o->ngram = atoi(argv[at]);
        o->num_perm = atoi(argv[at + 1]);
        o->bands = atoi(argv[at + 2]);
        o->threshold = atof(argv[at + 3]);
    }
}

/* Times the stage on d (all documents in order); fills kept flags. */
static int run_stage(const hyp_docs *d, const hyp_dedup_opts *o, char *kept, double *secs,
                     cJSON **rep_out) {
    uint32_t *ids = malloc(sizeof *ids * (d->n + 1));
    for (size_t i = 0; i < d->n; i++) ids[i] = (uint32_t)i;
    size_t n = d->n;
    cJSON *rep = cJSON_CreateObject();
    hyp_err e = {{0}};
    double t0 = now();
    int rc = hyp_dedup_run(d, o, ids, &n, rep, &e);
    *secs = now() - t0;
    if (rc != HYP_OK) fprintf(stderr, "dedup_eval: %s\n", e.msg);
    memset(kept, 0, d->n);
    for (size_t i = 0; i < n; i++) kept[ids[i]] = 1;
    free(ids);
    *rep_out = rep;
    return rc;
}

static int planted(int base_docs, uint64_t seed, hyp_dedup_opts *o) {
    hyp_rng r;
    hyp_rng_seed(&r, seed);
    enum { VOCAB = 5000 };
    char (*vocab)[12] = malloc(sizeof *vocab * VOCAB);
    for (int v = 0; v < VOCAB; v++) {
        int len = 2 + (int)hyp_rng_below(&r, 9);
        for (int k = 0; k < len; k++) vocab[v][k] = (char)('a' + hyp_rng_below(&r, 26));
        vocab[v][len] = '\0';
    }
    static const double rates[] = {0.01, 0.02, 0.04, 0.07, 0.1, 0.15, 0.2, 0.3, 0.5};
    hyp_docs d = {0};
    char *buf = malloc(400 * 12);
    int *words = malloc(sizeof(int) * 400), *w2 = malloc(sizeof(int) * 400);
    for (int b = 0; b < base_docs; b++) {
        int nw = 50 + (int)hyp_rng_below(&r, 250);
        for (int k = 0; k < nw; k++) words[k] = (int)hyp_rng_below(&r, VOCAB);
        int copies = (int)hyp_rng_below(&r, 4);
        for (int c = 0; c <= copies; c++) {
            double rate = c == 0 ? 0 : rates[hyp_rng_below(&r, sizeof rates / sizeof rates[0])];
            size_t at = 0;
            for (int k = 0; k < nw; k++) {
                w2[k] = hyp_rng_uniform_f64(&r) < rate ? (int)hyp_rng_below(&r, VOCAB) : words[k];
                at += (size_t)sprintf(buf + at, "%s%s", k ? " " : "", vocab[w2[k]]);
            }
            add_doc(&d, buf, at);
        }
    }
    /* shuffle the document order (copies are not next to their originals) */
    for (size_t i = d.n; i > 1; i--) {
        size_t j = (size_t)hyp_rng_below(&r, i);
        uint64_t t = d.off[i - 1];
        d.off[i - 1] = d.off[j], d.off[j] = t;
        t = d.len[i - 1];
        d.len[i - 1] = d.len[j], d.len[j] = t;
    }
    /* truth by brute force */
    uint64_t **sets = malloc(sizeof *sets * d.n);
    size_t *ns = malloc(sizeof *ns * d.n);
    for (size_t i = 0; i < d.n; i++) ns[i] = shingle_set(d.text + d.off[i], d.len[i], o->ngram, &sets[i]);
    char *truth_kept = calloc(d.n, 1), *true_dup = calloc(d.n, 1);
    double *best_j = calloc(d.n, sizeof *best_j);
    size_t pairs_above = 0;
    double t0 = now();
    for (size_t i = 0; i < d.n; i++) {
        double best = 0, best_any = 0;
        for (size_t j = 0; j < i; j++) {
            double jj = jaccard(sets[i], ns[i], sets[j], ns[j]);
            if (jj >= o->threshold) pairs_above++;
            if (jj > best_any) best_any = jj;
            if (truth_kept[j] && jj > best) best = jj;
        }
        best_j[i] = best_any;
        if (best >= o->threshold) true_dup[i] = 1;
        else truth_kept[i] = 1;
    }
    double brute = now() - t0;
    char *kept = malloc(d.n);
    double secs;
    cJSON *rep;
    int rc = run_stage(&d, o, kept, &secs, &rep);
    size_t tp = 0, fp = 0, fn = 0, n_true = 0;
    /* recall by the best true similarity to any earlier document: [t, t+.05), ..., >= .95 */
    size_t band_n[4] = {0}, band_hit[4] = {0};
    size_t near_miss = 0, near_miss_removed = 0; /* true J in [t - 0.15, t): should stay */
    size_t far_removed = 0;                       /* removed with true J < t - 0.15 */
    for (size_t i = 0; i < d.n; i++) {
        int removed = !kept[i];
        n_true += true_dup[i];
        if (removed && true_dup[i]) tp++;
        else if (removed) fp++;
        if (removed && best_j[i] < o->threshold - 0.15) far_removed++;
        else if (true_dup[i]) fn++;
        if (true_dup[i]) {
            int bnd = best_j[i] >= 0.95 ? 3 : best_j[i] >= 0.9 ? 2 : best_j[i] >= 0.85 ? 1 : 0;
            band_n[bnd]++;
            band_hit[bnd] += (size_t)removed;
        } else if (best_j[i] >= o->threshold - 0.15 && best_j[i] < o->threshold) {
            near_miss++;
            near_miss_removed += (size_t)removed;
        }
    }
    cJSON *out = cJSON_CreateObject();
    cJSON_AddStringToObject(out, "corpus", "planted");
    cJSON_AddNumberToObject(out, "documents", (double)d.n);
    cJSON_AddNumberToObject(out, "ngram", o->ngram);
    cJSON_AddNumberToObject(out, "num_perm", o->num_perm);
    cJSON_AddNumberToObject(out, "bands", o->bands);
    cJSON_AddNumberToObject(out, "threshold", o->threshold);
    cJSON_AddNumberToObject(out, "pairs_above_threshold", (double)pairs_above);
    cJSON_AddNumberToObject(out, "true_duplicates", (double)n_true);
    cJSON_AddNumberToObject(out, "removed", (double)(tp + fp));
    cJSON_AddNumberToObject(out, "precision", tp + fp ? (double)tp / (double)(tp + fp) : 1.0);
    cJSON_AddNumberToObject(out, "recall", n_true ? (double)tp / (double)n_true : 1.0);
    cJSON *rb = cJSON_AddObjectToObject(out, "recall_by_true_jaccard");
    const char *bn[4] = {"[t,0.85)", "[0.85,0.9)", "[0.9,0.95)", "[0.95,1]"};
    for (int b = 0; b < 4; b++) {
        cJSON *x = cJSON_AddObjectToObject(rb, bn[b]);
        cJSON_AddNumberToObject(x, "documents", (double)band_n[b]);
        cJSON_AddNumberToObject(x, "recall", band_n[b] ? (double)band_hit[b] / (double)band_n[b] : 1.0);
    }
    cJSON_AddNumberToObject(out, "below_threshold_by_0.15", (double)near_miss);
    cJSON_AddNumberToObject(out, "below_threshold_removed", (double)near_miss_removed);
    cJSON_AddNumberToObject(out, "removed_below_threshold_minus_0.15", (double)far_removed);
    cJSON_AddNumberToObject(out, "seconds", secs);
    cJSON_AddNumberToObject(out, "docs_per_s", (double)d.n / secs);
    cJSON_AddNumberToObject(out, "brute_force_seconds", brute);
    char *txt = cJSON_PrintUnformatted(out);
    printf("%s\n", txt);
    free(txt);
    cJSON_Delete(out);
    cJSON_Delete(rep);
    for (size_t i = 0; i < d.n; i++) free(sets[i]);
    free(sets);
    free(ns);
    free(truth_kept);
    free(true_dup);
    free(best_j);
    free(kept);
    free(buf);
    free(words);
    free(w2);
    free(vocab);
    hyp_docs_free(&d);
    return rc == HYP_OK ? 0 : 1;
}

static int file_mode(const char *path, const char *sep, hyp_dedup_opts *o) {
    hyp_docs d = {0};
    hyp_err e = {{0}};
    size_t n;
    uint64_t bytes;
    if (hyp_docs_read(&d, path, path, 0, sep && sep[0] ? sep : NULL, &n, &bytes, &e) != HYP_OK) {
        fprintf(stderr, "%s\n", e.msg);
        return 2;
    }
    char *kept = malloc(d.n);
    double secs;
    cJSON *rep;
    int rc = run_stage(&d, o, kept, &secs, &rep);
    cJSON *out = cJSON_CreateObject();
    cJSON_AddStringToObject(out, "corpus", path);
    cJSON_AddNumberToObject(out, "documents", (double)d.n);
    cJSON_AddNumberToObject(out, "bytes", (double)bytes);
    cJSON_AddNumberToObject(out, "exact_removed", cJSON_GetObjectItem(rep, "exact_removed")->valuedouble);
    cJSON_AddNumberToObject(out, "near_removed", cJSON_GetObjectItem(rep, "near_removed")->valuedouble);
    cJSON_AddNumberToObject(out, "seconds", secs);
    cJSON_AddNumberToObject(out, "docs_per_s", (double)d.n / secs);
    cJSON_AddNumberToObject(out, "MB_per_s", (double)bytes / secs / 1e6);
    char *txt = cJSON_PrintUnformatted(out);
    printf("%s\n", txt);
    free(txt);
    cJSON_Delete(out);
    cJSON_Delete(rep);
    free(kept);
    hyp_docs_free(&d);
    return rc == HYP_OK ? 0 : 1;
}

int main(int argc, char **argv) {
    hyp_dedup_opts o;
    hyp_dedup_opts_default(&o);
    if (argc >= 4 && !strcmp(argv[1], "planted")) {
        parse_params(argc, argv, 4, &o);
        return planted(atoi(argv[2]), (uint64_t)strtoull(argv[3], NULL, 10), &o);
    }
    if (argc >= 3 && !strcmp(argv[1], "file")) {
        parse_params(argc, argv, 4, &o);
        return file_mode(argv[2], argc > 3 ? argv[3] : NULL, &o);
    }
    fprintf(stderr, "usage: dedup_eval planted BASE_DOCS SEED [NGRAM NUM_PERM BANDS THRESHOLD]\n"
                    "       dedup_eval file PATH [SEP [NGRAM NUM_PERM BANDS THRESHOLD]]\n");
    return 2;
}
