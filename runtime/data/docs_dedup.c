/* docs_dedup.c — deduplication (v2122): exact duplicates by a 64-bit hash of the normalized text,
 * near duplicates by MinHash signatures over word n-gram shingles, bucketed by LSH (bands x
 * rows). Documents are visited in stream order; a document is removed when its normalized hash
 * equals a kept document's (exact), or when a kept document shares an LSH bucket with it and
 * their estimated Jaccard similarity (share of equal signature values) is >= threshold (near);
 * its cluster representative (the report's "kept") is that kept document (for near: the
 * candidate of highest estimate, the earliest on ties). Removed documents never represent.
 * The permutation family is datasketch's legacy scheme (docs.h), so datasketch.MinHash(
 * scheme="legacy", hashfunc=low 32 bits of XXH3_64, permutations=(a, b)) reproduces every
 * signature bit for bit (tests/reference/make_dedup_fixture.py). Never: changes bytes or order of kept documents. */
#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "docs.h"

#define MERSENNE61 ((1ull << 61) - 1)
#define REPORT_MAX_LISTED 10000

void hyp_dedup_opts_default(hyp_dedup_opts *o) {
    o->exact = 1;
    o->near = 1;
    o->ngram = 5;
    o->num_perm = 128;
    o->bands = 16;
    o->threshold = 0.8;
    o->seed = 1;
}

static uint64_t splitmix64(uint64_t *s) {
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

void hyp_minhash_perms(uint64_t seed, int num_perm, uint64_t *a, uint64_t *b) {
    uint64_t s = seed;
    for (int i = 0; i < num_perm; i++) {
        a[i] = 1 + splitmix64(&s) % (MERSENNE61 - 1);
        b[i] = splitmix64(&s) % MERSENNE61;
    }
}

static int is_space(uint8_t c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }
static uint8_t lower(uint8_t c) { return c >= 'A' && c <= 'Z' ? (uint8_t)(c | 32) : c; }

/* The normalized text (lowercase ASCII, one space between words) into out (>= len bytes);
 * word starts into ws (>= len/2 + 1 entries). Returns its length; *nw = words. */
static size_t normalize(const uint8_t *t, size_t len, uint8_t *out, size_t *ws, size_t *nw) {
    size_t o = 0, w = 0;
    for (size_t i = 0; i < len;) {
        while (i < len && is_space(t[i])) i++;
        if (i >= len) break;
        if (o) out[o++] = ' ';
        ws[w++] = o;
        while (i < len && !is_space(t[i])) out[o++] = lower(t[i++]);
    }
    *nw = w;
    return o;
}

uint64_t hyp_text_hash(const uint8_t *t, size_t len) {
    XXH3_state_t *s = XXH3_createState();
    if (!s) return 0;
    XXH3_64bits_reset(s);
    int first = 1;
    uint8_t buf[256];
    size_t nb = 0;
    for (size_t i = 0; i < len;) {
        while (i < len && is_space(t[i])) i++;
        if (i >= len) break;
        if (!first) buf[nb++] = ' ';
        first = 0;
        while (i < len && !is_space(t[i])) {
            buf[nb++] = lower(t[i++]);
            if (nb >= sizeof buf - 1) {
                XXH3_64bits_update(s, buf, nb);
                nb = 0;
            }
        }
        if (nb >= sizeof buf - 1) {
            XXH3_64bits_update(s, buf, nb);
            nb = 0;
        }
    }
    XXH3_64bits_update(s, buf, nb);
    uint64_t h = XXH3_64bits_digest(s);
    XXH3_freeState(s);
    return h;
}

static void minhash_norm(const uint8_t *norm, size_t nlen, const size_t *ws, size_t nw, int ngram,
                         int num_perm, const uint64_t *a, const uint64_t *b, uint32_t *sig) {
    for (int i = 0; i < num_perm; i++) sig[i] = 0xffffffffu;
    if (nw == 0) return;
    size_t nsh = nw >= (size_t)ngram ? nw - (size_t)ngram + 1 : 1;
    for (size_t s = 0; s < nsh; s++) {
        size_t start = ws[s];
        size_t lastw = s + (size_t)ngram < nw ? s + (size_t)ngram : nw; /* first word after */
        size_t end = lastw < nw ? ws[lastw] - 1 : nlen;                 /* drop the space */
        uint64_t x = XXH3_64bits(norm + start, end - start) & 0xffffffffull;
        for (int i = 0; i < num_perm; i++) {
            /* (a x + b) mod 2^64, then mod 2^61 - 1 without a division: y = hi 2^61 + lo gives
             * y = hi + lo (mod 2^61 - 1), and hi + lo < 2 (2^61 - 1) */
            uint64_t y = a[i] * x + b[i];
            uint64_t v = (y & MERSENNE61) + (y >> 61);
            v = v >= MERSENNE61 ? v - MERSENNE61 : v;
            v &= 0xffffffffull;
            sig[i] = v < sig[i] ? (uint32_t)v : sig[i];
        }
    }
}

void hyp_minhash(const uint8_t *text, size_t len, int ngram, int num_perm, const uint64_t *a,
                 const uint64_t *b, uint32_t *sig) {
    uint8_t *norm = malloc(len + 1);
    size_t *ws = malloc((len / 2 + 2) * sizeof *ws);
    if (!norm || !ws) {
        for (int i = 0; i < num_perm; i++) sig[i] = 0; /* callers check allocation first */
        free(norm);
        free(ws);
        return;
    }
    size_t nw, nlen = normalize(text, len, norm, ws, &nw);
    minhash_norm(norm, nlen, ws, nw, ngram, num_perm, a, b, sig);
    free(norm);
    free(ws);
}

/* Map from a 64-bit key to the head of a chain of entries (doc ids). */
typedef struct {
    uint64_t *key;
    int64_t *head;   /* -1 = empty slot */
    size_t cap;
} bucket_map;

static int bm_init(bucket_map *m, size_t n) {
    m->cap = 16;
    while (m->cap < 2 * n + 2) m->cap *= 2;
    m->key = malloc(m->cap * sizeof *m->key);
    m->head = malloc(m->cap * sizeof *m->head);
    if (!m->key || !m->head) return -1;
    for (size_t i = 0; i < m->cap; i++) m->head[i] = -1;
    return 0;
}
static void bm_free(bucket_map *m) {
    free(m->key);
    free(m->head);
}
static int64_t *bm_slot(bucket_map *m, uint64_t k) {
    size_t i = (size_t)(k * 0x9E3779B97F4A7C15ull >> 7) & (m->cap - 1);
    while (m->head[i] != -1 && m->key[i] != k) i = (i + 1) & (m->cap - 1);
    m->key[i] = k;
    return &m->head[i];
}

typedef struct {
    uint32_t doc, kind, rep; /* kind 1 exact, 2 near */
    float sim;
} removal;

int hyp_dedup_run(const hyp_docs *d, const hyp_dedup_opts *o, uint32_t *ids, size_t *n,
                  cJSON *rep, hyp_err *e) {
    size_t n_in = *n;
    if (o->near && (o->bands < 1 || o->bands > 1024 || o->num_perm % o->bands != 0))
        return hyp_fail(e, HYP_EINPUT, "dedup: bands %d does not divide num_perm %d — choose "
                        "bands so that num_perm = bands x rows", o->bands, o->num_perm);
    int P = o->num_perm, B = o->bands, R = P / (B ? B : 1);
    size_t maxlen = 0;
    for (size_t i = 0; i < n_in; i++)
        if (d->len[ids[i]] > maxlen) maxlen = d->len[ids[i]];
    uint64_t *a = malloc((size_t)P * sizeof *a), *b = malloc((size_t)P * sizeof *b);
    uint32_t *sig = o->near ? malloc(n_in * (size_t)P * sizeof *sig) : NULL;
    uint8_t *norm = malloc(maxlen + 1);
    size_t *ws = malloc((maxlen / 2 + 2) * sizeof *ws);
    removal *rm = malloc((n_in + 1) * sizeof *rm);
    int64_t *next = o->near ? malloc(n_in * (size_t)B * sizeof *next) : NULL;
    uint32_t *entry_doc = o->near ? malloc(n_in * (size_t)B * sizeof *entry_doc) : NULL;
    uint32_t *seen_mark = o->near ? calloc(n_in, sizeof *seen_mark) : NULL;
    uint32_t *orig = malloc((n_in + 1) * sizeof *orig); /* ids before compaction */
    bucket_map exact = {0}, bands = {0};
    int rc = HYP_OK;
    if (!a || !b || !norm || !ws || !rm || !orig || (o->near && (!sig || !next || !entry_doc || !seen_mark)) ||
        bm_init(&exact, n_in) != 0 || (o->near && bm_init(&bands, n_in * (size_t)B) != 0)) {
        rc = hyp_fail(e, HYP_EFAIL, "dedup: out of memory");
        goto done;
    }
    hyp_minhash_perms(o->seed, P, a, b);
    memcpy(orig, ids, n_in * sizeof *orig);
    size_t kept = 0, n_rm = 0, n_exact = 0, n_near = 0, n_entries = 0, candidates = 0;
    uint64_t bytes_removed = 0;
    for (size_t i = 0; i < n_in; i++) {
        uint32_t id = ids[i];
        const uint8_t *t = d->text + d->off[id];
        size_t nw, nlen = normalize(t, d->len[id], norm, ws, &nw);
        if (o->exact) {
            uint64_t h = XXH3_64bits(norm, nlen);
            int64_t *slot = bm_slot(&exact, h);
            if (*slot >= 0) {
                rm[n_rm++] = (removal){id, 1, (uint32_t)*slot, 1.0f};
                n_exact++;
                bytes_removed += d->len[id];
                continue;
            }
            *slot = id;
        }
        if (o->near) {
            uint32_t *s = sig + i * (size_t)P;
            minhash_norm(norm, nlen, ws, nw, o->ngram, P, a, b, s);
            /* candidates: kept documents in any of this document's band buckets */
            double best = -1;
            int64_t best_i = -1;
            uint64_t bkeys[1024];
            for (int j = 0; j < B; j++) {
                uint64_t k = XXH3_64bits_withSeed(s + (size_t)j * (size_t)R, (size_t)R * 4, (uint64_t)j);
                bkeys[j] = k;
                for (int64_t en = *bm_slot(&bands, k); en >= 0; en = next[en]) {
                    uint32_t ci = entry_doc[en]; /* position in ids */
                    if (seen_mark[ci] == i + 1) continue;
                    seen_mark[ci] = (uint32_t)(i + 1);
                    candidates++;
                    const uint32_t *cs = sig + (size_t)ci * (size_t)P;
                    int eq = 0;
                    for (int p = 0; p < P; p++) eq += cs[p] == s[p];
                    double est = (double)eq / P;
                    if (est > best || (est == best && ci < (uint32_t)best_i)) best = est, best_i = ci;
                }
            }
            if (best_i >= 0 && best >= o->threshold) {
                rm[n_rm++] = (removal){id, 2, orig[best_i], (float)best};
                n_near++;
                bytes_removed += d->len[id];
                continue;
            }
            for (int j = 0; j < B; j++) {
                int64_t *slot = bm_slot(&bands, bkeys[j]);
                entry_doc[n_entries] = (uint32_t)i;
                next[n_entries] = *slot;
                *slot = (int64_t)n_entries++;
            }
        }
        ids[kept++] = id;
    }
    *n = kept;
    cJSON_AddNumberToObject(rep, "documents_in", (double)n_in);
    cJSON_AddNumberToObject(rep, "documents_out", (double)kept);
    cJSON_AddNumberToObject(rep, "exact_removed", (double)n_exact);
    cJSON_AddNumberToObject(rep, "near_removed", (double)n_near);
    cJSON_AddNumberToObject(rep, "bytes_removed", (double)bytes_removed);
    cJSON_AddNumberToObject(rep, "lsh_candidate_pairs", (double)candidates);
    cJSON *pp = cJSON_AddObjectToObject(rep, "params");
    cJSON_AddBoolToObject(pp, "exact", o->exact);
    cJSON_AddBoolToObject(pp, "near", o->near);
    cJSON_AddNumberToObject(pp, "ngram", o->ngram);
    cJSON_AddNumberToObject(pp, "num_perm", P);
    cJSON_AddNumberToObject(pp, "bands", B);
    cJSON_AddNumberToObject(pp, "rows", R);
    cJSON_AddNumberToObject(pp, "threshold", o->threshold);
    cJSON_AddNumberToObject(pp, "seed", (double)o->seed);
    /* clusters: representatives with at least one removed document */
    size_t clusters = 0;
    if (n_rm) {
        uint32_t *reps = malloc(n_rm * sizeof *reps);
        if (reps) {
            for (size_t i = 0; i < n_rm; i++) reps[i] = rm[i].rep;
            /* count distinct (small insertion into a bucket map) */
            bucket_map cm;
            if (bm_init(&cm, n_rm) == 0) {
                for (size_t i = 0; i < n_rm; i++) {
                    int64_t *slot = bm_slot(&cm, (uint64_t)reps[i] + 1);
                    if (*slot < 0) *slot = 0, clusters++;
                }
                bm_free(&cm);
            }
            free(reps);
        }
    }
    cJSON_AddNumberToObject(rep, "clusters", (double)clusters);
    cJSON *list = cJSON_AddArrayToObject(rep, "removed");
    for (size_t i = 0; i < n_rm && i < REPORT_MAX_LISTED; i++) {
        cJSON *r = cJSON_CreateObject();
        cJSON_AddNumberToObject(r, "doc", rm[i].doc);
        cJSON_AddNumberToObject(r, "source", d->source[rm[i].doc]);
        cJSON_AddStringToObject(r, "why", rm[i].kind == 1 ? "exact" : "near");
        cJSON_AddNumberToObject(r, "kept", rm[i].rep);
        cJSON_AddNumberToObject(r, "similarity", (double)(int)(rm[i].sim * 10000 + 0.5) / 10000);
        cJSON_AddItemToArray(list, r);
    }
    cJSON_AddNumberToObject(rep, "removed_listed", (double)(n_rm < REPORT_MAX_LISTED ? n_rm : REPORT_MAX_LISTED));
done:
    free(a);
    free(b);
    free(sig);
    free(norm);
    free(ws);
    free(rm);
    free(next);
    free(entry_doc);
    free(seen_mark);
    free(orig);
    bm_free(&exact);
    bm_free(&bands);
    return rc;
}
