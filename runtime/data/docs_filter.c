/* docs_filter.c — the quality filter (v2123): heuristic rules of the Gopher family (Rae et al.
 * 2021, appendix A: word count, mean word length, symbol-to-word ratio, ellipsis lines,
 * duplicate lines, top 2-gram and duplicate 5-gram character shares, stop words) plus a digit
 * ratio (C4/FineWeb-style). Every threshold is an option; a document is dropped when any rule
 * fails; the report counts, per rule, the documents that fail it and those it removed first.
 * Never: changes a document's bytes or depends on anything but the document and the options.
 * Words are maximal runs of non-whitespace bytes; lines are split at '\n', blank lines ignored. */
#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "docs.h"

const char *const hyp_filter_rule_names[HYP_RULE_COUNT] = {
    "min_words", "max_words", "symbol_ratio", "digit_ratio", "ellipsis_lines",
    "dup_lines", "top_2gram", "dup_5gram", "stop_words", "mean_word_length"};

void hyp_filter_opts_default(hyp_filter_opts *o) {
    o->min_words = 50;
    o->max_words = 100000;
    o->max_symbol_ratio = 0.1;
    o->max_digit_ratio = 0.2;
    o->max_ellipsis_lines = 0.3;
    o->max_dup_lines = 0.3;
    o->max_top_ngram = 0.2;
    o->max_dup_ngram = 0.15;
    o->min_stop_words = 2;
    o->min_mean_word = 3.0;
    o->max_mean_word = 10.0;
}

static int is_space(uint8_t c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

/* Open-addressing set/multiset of 64-bit keys (0 is reserved: keys are forced non-zero). */
typedef struct {
    uint64_t *key;
    uint32_t *count;
    size_t cap;
} hset;

static int hset_init(hset *h, size_t n) {
    h->cap = 16;
    while (h->cap < 2 * n + 2) h->cap *= 2;
    h->key = calloc(h->cap, sizeof *h->key);
    h->count = calloc(h->cap, sizeof *h->count);
    return h->key && h->count ? 0 : -1;
}
static void hset_free(hset *h) {
    free(h->key);
    free(h->count);
}
/* Adds key; returns its count after adding. */
static uint32_t hset_add(hset *h, uint64_t k) {
    if (!k) k = 1;
    size_t i = (size_t)(k * 0x9E3779B97F4A7C15ull) & (h->cap - 1);
    while (h->key[i] && h->key[i] != k) i = (i + 1) & (h->cap - 1);
    h->key[i] = k;
    return ++h->count[i];
}
static uint32_t hset_get(const hset *h, uint64_t k) {
    if (!k) k = 1;
    size_t i = (size_t)(k * 0x9E3779B97F4A7C15ull) & (h->cap - 1);
    while (h->key[i] && h->key[i] != k) i = (i + 1) & (h->cap - 1);
    return h->key[i] ? h->count[i] : 0;
}

static const char *const STOP_WORDS[] = {"the", "be", "to", "of", "and", "that", "have", "with"};
enum { N_STOP = sizeof STOP_WORDS / sizeof STOP_WORDS[0] };

/* Index of a stop word equal to the word (lowercased, leading/trailing punctuation removed), or
 * -1. */
static int stop_word(const uint8_t *w, size_t n) {
    while (n && !((w[0] | 32) >= 'a' && (w[0] | 32) <= 'z')) w++, n--;
    while (n && !((w[n - 1] | 32) >= 'a' && (w[n - 1] | 32) <= 'z')) n--;
    if (n == 0 || n > 4) return -1;
    char low[5];
    for (size_t i = 0; i < n; i++) low[i] = (char)(w[i] >= 'A' && w[i] <= 'Z' ? w[i] | 32 : w[i]);
    low[n] = '\0';
    for (int s = 0; s < N_STOP; s++)
        if (!strcmp(low, STOP_WORDS[s])) return s;
    return -1;
}

/* Share of word characters covered by n-grams: top = the most frequent n-gram's occurrences x
 * its characters; dup = characters of words inside any n-gram that occurs more than once (each
 * word counted once). Both over the total word characters. */
static int ngram_shares(const uint64_t *wh, const uint32_t *wl, size_t nw, int n, double *top,
                        double *dup) {
    *top = *dup = 0;
    if (nw < (size_t)n) return 0;
    uint64_t total = 0;
    for (size_t i = 0; i < nw; i++) total += wl[i];
    if (total == 0) return 0;
    size_t ng = nw - (size_t)n + 1;
    hset h = {0};
    uint64_t *gh = malloc(ng * sizeof *gh);
    uint8_t *covered = calloc(nw, 1);
    if (!gh || !covered || hset_init(&h, ng) != 0) {
        free(gh);
        free(covered);
        hset_free(&h);
        return -1;
    }
    uint32_t best = 0;
    size_t best_i = 0;
    for (size_t i = 0; i < ng; i++) {
        uint64_t k = 0xcbf29ce484222325ull;
        for (int j = 0; j < n; j++) k = (k ^ wh[i + (size_t)j]) * 0x100000001b3ull + (uint64_t)j;
        gh[i] = k;
        uint32_t c = hset_add(&h, k);
        if (c > best) best = c, best_i = i;
    }
    if (best > 1) {
        uint64_t chars = 0;
        for (int j = 0; j < n; j++) chars += wl[best_i + (size_t)j];
        *top = (double)best * (double)chars / (double)total;
    }
    for (size_t i = 0; i < ng; i++)
        if (hset_get(&h, gh[i]) > 1)
            for (int j = 0; j < n; j++) covered[i + (size_t)j] = 1;
    uint64_t dup_chars = 0;
    for (size_t i = 0; i < nw; i++)
        if (covered[i]) dup_chars += wl[i];
    *dup = (double)dup_chars / (double)total;
    free(gh);
    free(covered);
    hset_free(&h);
    return 0;
}

uint32_t hyp_filter_check(const uint8_t *t, size_t len, const hyp_filter_opts *o) {
    uint32_t fail = 0;
    /* words: count, characters, hashes (lowercased) */
    size_t nw = 0, cap = 0;
    uint64_t *wh = NULL;
    uint32_t *wl = NULL;
    uint64_t word_chars = 0, digits = 0, nonspace = 0, symbols = 0;
    unsigned stop_seen = 0;
    for (size_t i = 0; i < len;) {
        while (i < len && is_space(t[i])) i++;
        if (i >= len) break;
        size_t s = i;
        uint64_t h = 0xcbf29ce484222325ull;
        while (i < len && !is_space(t[i])) {
            uint8_t c = t[i];
            if (c >= '0' && c <= '9') digits++;
            if (c == '#') symbols++;
            h = (h ^ (uint64_t)(c >= 'A' && c <= 'Z' ? c | 32 : c)) * 0x100000001b3ull;
            i++;
        }
        nonspace += i - s;
        if (nw == cap) {
            cap = cap ? cap * 2 : 256;
            uint64_t *a = realloc(wh, cap * sizeof *wh);
            if (a) wh = a;
            uint32_t *b = realloc(wl, cap * sizeof *wl);
            if (b) wl = b;
            if (!a || !b) {
                free(wh);
                free(wl);
                return ~0u; /* out of memory: fail every rule, the caller reports it */
            }
        }
        wh[nw] = h;
        wl[nw] = (uint32_t)(i - s);
        word_chars += i - s;
        nw++;
        int sw = stop_word(t + s, i - s);
        if (sw >= 0) stop_seen |= 1u << sw;
    }
    /* "..." and U+2026 count as symbols, as in Gopher */
    for (size_t i = 0; i + 2 < len; i++) {
        if (t[i] == '.' && t[i + 1] == '.' && t[i + 2] == '.') symbols++, i += 2;
        else if (t[i] == 0xE2 && t[i + 1] == 0x80 && t[i + 2] == 0xA6) symbols++, i += 2;
    }
    if (nw < (size_t)o->min_words) fail |= 1u << HYP_RULE_MIN_WORDS;
    if (nw > (size_t)o->max_words) fail |= 1u << HYP_RULE_MAX_WORDS;
    if (nw > 0 && (double)symbols / (double)nw > o->max_symbol_ratio)
        fail |= 1u << HYP_RULE_SYMBOLS;
    if (nonspace > 0 && (double)digits / (double)nonspace > o->max_digit_ratio)
        fail |= 1u << HYP_RULE_DIGITS;
    int stops = 0;
    for (int s = 0; s < N_STOP; s++) stops += (stop_seen >> s) & 1;
    if (stops < o->min_stop_words) fail |= 1u << HYP_RULE_STOP_WORDS;
    double mean = nw ? (double)word_chars / (double)nw : 0.0;
    if (nw > 0 && (mean < o->min_mean_word || mean > o->max_mean_word))
        fail |= 1u << HYP_RULE_MEAN_WORD;

    /* lines: ellipsis endings, duplicates */
    size_t nlines = 0, ell = 0, dups = 0, maxl = 1;
    for (size_t i = 0; i < len; i++) maxl += t[i] == '\n';
    hset lines = {0};
    if (hset_init(&lines, maxl) == 0) {
        for (size_t i = 0; i < len;) {
            const uint8_t *nl = memchr(t + i, '\n', len - i);
            size_t e = nl ? (size_t)(nl - t) : len, s = i;
            i = e + 1;
            size_t b = s, f = e;
            while (b < f && is_space(t[b])) b++;
            while (f > b && is_space(t[f - 1])) f--;
            if (b == f) continue;
            nlines++;
            if ((f - b >= 3 && !memcmp(t + f - 3, "...", 3)) ||
                (f - b >= 3 && t[f - 3] == 0xE2 && t[f - 2] == 0x80 && t[f - 1] == 0xA6))
                ell++;
            if (hset_add(&lines, XXH3_64bits(t + b, f - b)) > 1) dups++;
        }
    } else {
        fail = ~0u;
    }
    hset_free(&lines);
    if (nlines > 0 && (double)ell / (double)nlines > o->max_ellipsis_lines)
        fail |= 1u << HYP_RULE_ELLIPSIS;
    if (nlines > 0 && (double)dups / (double)nlines > o->max_dup_lines)
        fail |= 1u << HYP_RULE_DUP_LINES;

    double top2 = 0, dup2 = 0, top5 = 0, dup5 = 0;
    if (ngram_shares(wh, wl, nw, 2, &top2, &dup2) != 0 ||
        ngram_shares(wh, wl, nw, 5, &top5, &dup5) != 0)
        fail = ~0u;
    if (top2 > o->max_top_ngram) fail |= 1u << HYP_RULE_TOP_NGRAM;
    if (dup5 > o->max_dup_ngram) fail |= 1u << HYP_RULE_DUP_NGRAM;
    free(wh);
    free(wl);
    return fail;
}

int hyp_filter_run(const hyp_docs *d, const hyp_filter_opts *o, uint32_t *ids, size_t *n,
                   cJSON *rep, hyp_err *e) {
    uint64_t fails[HYP_RULE_COUNT] = {0}, first[HYP_RULE_COUNT] = {0};
    uint64_t bytes_in = 0, bytes_out = 0;
    size_t kept = 0, n_in = *n;
    for (size_t i = 0; i < n_in; i++) {
        uint32_t id = ids[i];
        uint32_t f = hyp_filter_check(d->text + d->off[id], d->len[id], o);
        if (f == ~0u) return hyp_fail(e, HYP_EFAIL, "filter: out of memory");
        bytes_in += d->len[id];
        if (!f) {
            ids[kept++] = id;
            bytes_out += d->len[id];
            continue;
        }
        int firstr = -1;
        for (int r = 0; r < HYP_RULE_COUNT; r++)
            if (f >> r & 1) {
                fails[r]++;
                if (firstr < 0) firstr = r;
            }
        first[firstr]++;
    }
    *n = kept;
    cJSON_AddNumberToObject(rep, "documents_in", (double)n_in);
    cJSON_AddNumberToObject(rep, "documents_out", (double)kept);
    cJSON_AddNumberToObject(rep, "bytes_in", (double)bytes_in);
    cJSON_AddNumberToObject(rep, "bytes_out", (double)bytes_out);
    cJSON *th = cJSON_AddObjectToObject(rep, "thresholds");
    cJSON_AddNumberToObject(th, "min_words", o->min_words);
    cJSON_AddNumberToObject(th, "max_words", o->max_words);
    cJSON_AddNumberToObject(th, "max_symbol_ratio", o->max_symbol_ratio);
    cJSON_AddNumberToObject(th, "max_digit_ratio", o->max_digit_ratio);
    cJSON_AddNumberToObject(th, "max_ellipsis_lines", o->max_ellipsis_lines);
    cJSON_AddNumberToObject(th, "max_dup_lines", o->max_dup_lines);
    cJSON_AddNumberToObject(th, "max_top_2gram", o->max_top_ngram);
    cJSON_AddNumberToObject(th, "max_dup_5gram", o->max_dup_ngram);
    cJSON_AddNumberToObject(th, "min_stop_words", o->min_stop_words);
    cJSON_AddNumberToObject(th, "min_mean_word", o->min_mean_word);
    cJSON_AddNumberToObject(th, "max_mean_word", o->max_mean_word);
    cJSON *fr = cJSON_AddObjectToObject(rep, "failed_by_rule");
    cJSON *rr = cJSON_AddObjectToObject(rep, "removed_by_rule");
    for (int r = 0; r < HYP_RULE_COUNT; r++) {
        cJSON_AddNumberToObject(fr, hyp_filter_rule_names[r], (double)fails[r]);
        cJSON_AddNumberToObject(rr, hyp_filter_rule_names[r], (double)first[r]);
    }
    return HYP_OK;
}
