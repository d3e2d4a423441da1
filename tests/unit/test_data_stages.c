/* test_data_stages.c — gen data's documents and data-preparation stages (runtime/data/docs*.c):
 * the reader (.jsonl, separator-split text, .gz) and its refusals; the .docs sidecars and
 * meta.json's document fields written by hyp_data_prepare (docs_contract); v2123 filter rules, one
 * crafted document per rule; v2122 MinHash signatures and LSH decisions against datasketch on the
 * committed fixture (tests/reference/make_dedup_fixture.py) and exact duplicates; v2121 mixing's
 * realized proportions within a binomial confidence interval; v2120 curriculum pacing. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>
#include <zlib.h>

#include "data.h"
#include "docs.h"
#include "fsio.h"
#include "rng.h"

#include "hyp_test.h"

static char g_dir[256];

static void write_file(const char *path, const void *data, size_t n) {
    FILE *f = fopen(path, "wb");
    fwrite(data, 1, n, f);
    fclose(f);
}
static void path2(char *out, const char *a, const char *b) { snprintf(out, 1024, "%s/%s", a, b); }
static void *read_all(const char *path, size_t *n) {
    char *b;
    return hyp_fs_read_small(path, SIZE_MAX, &b, n, NULL) == HYP_OK ? b : NULL;
}
static uint32_t rd32(const unsigned char *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* Appends a document by hand (the reader has its own tests). */
static void add_doc(hyp_docs *d, const char *text, size_t len, int source) {
    if (d->n == d->cap) {
        d->cap = d->cap ? d->cap * 2 : 64;
        d->off = realloc(d->off, d->cap * sizeof *d->off);
        d->len = realloc(d->len, d->cap * sizeof *d->len);
        d->source = realloc(d->source, d->cap * sizeof *d->source);
    }
    if (d->text_len + len > d->text_cap) {
        d->text_cap = (d->text_len + len) * 2 + 64;
        d->text = realloc(d->text, d->text_cap);
    }
    memcpy(d->text + d->text_len, text, len);
    d->off[d->n] = d->text_len;
    d->len[d->n] = len;
    d->source[d->n] = source;
    d->text_len += len;
    d->n++;
}
static int doc_is(const hyp_docs *d, size_t i, const char *s) {
    return i < d->n && d->len[i] == strlen(s) && !memcmp(d->text + d->off[i], s, d->len[i]);
}

/* ---------------------------------------------------------------------------------------- */
static void test_reader(void) {
    char p[1024];
    hyp_err e = {{0}};
    hyp_docs d = {0};
    size_t n;
    uint64_t bytes;

    path2(p, g_dir, "a.jsonl");
    const char *jl = "{\"text\": \"first doc\\nline two\", \"id\": 1}\n\n{\"text\": \"caf\\u00e9\"}\n"
                     "{\"text\": \"\"}\n{\"text\": \"last\"}";
    write_file(p, jl, strlen(jl));
    int rc = hyp_docs_read(&d, p, p, 0, NULL, &n, &bytes, &e);
    CHECK(rc == HYP_OK && n == 3 && doc_is(&d, 0, "first doc\nline two") &&
              doc_is(&d, 1, "caf\xc3\xa9") && doc_is(&d, 2, "last") && bytes == strlen(jl),
          "jsonl: one document per line's \"text\" (blank lines and empty texts skipped) (%s)", e.msg);

    path2(p, g_dir, "f.txt");
    const char *ft = "A day for firm decisions!\n%\nA gift of a flower.\n\nBuy it.\n%\n%\n  \n%\r\nlast one";
    write_file(p, ft, strlen(ft));
    rc = hyp_docs_read(&d, p, p, 1, "%", &n, NULL, &e);
    CHECK(rc == HYP_OK && n == 3 && doc_is(&d, 3, "A day for firm decisions!\n") &&
              doc_is(&d, 4, "A gift of a flower.\n\nBuy it.\n") && doc_is(&d, 5, "last one") &&
              d.source[5] == 1,
          "--doc-sep %%: documents between separator lines, blank ones dropped, CRLF separators (%s)", e.msg);
    rc = hyp_docs_read(&d, p, p, 2, NULL, &n, NULL, &e);
    CHECK(rc == HYP_OK && n == 1 && d.len[6] == strlen(ft), "without --doc-sep a .txt is one document");

    /* .gz through zlib */
    path2(p, g_dir, "g.jsonl.gz");
    gzFile g = gzopen(p, "wb");
    gzputs(g, "{\"text\": \"zipped one\"}\n{\"text\": \"zipped two\"}\n");
    gzclose(g);
    rc = hyp_docs_read(&d, p, p, 3, NULL, &n, &bytes, &e);
    CHECK(rc == HYP_OK && n == 2 && doc_is(&d, 7, "zipped one") && doc_is(&d, 8, "zipped two"),
          ".jsonl.gz is decompressed by zlib (%s)", e.msg);
    path2(p, g_dir, "h.txt.gz");
    g = gzopen(p, "wb");
    gzputs(g, "one\n%\ntwo\n");
    gzclose(g);
    rc = hyp_docs_read(&d, p, p, 4, "%", &n, NULL, &e);
    CHECK(rc == HYP_OK && n == 2 && doc_is(&d, 9, "one\n") && doc_is(&d, 10, "two\n"),
          ".txt.gz with --doc-sep (%s)", e.msg);
    hyp_docs_free(&d);

    /* refusals: each HYP_EINPUT naming the file */
    struct {
        const char *name, *body, *sep, *want;
        size_t len;
    } bad[] = {
        {"bad.jsonl", "{\"text\": \"ok\"}\n{\"text\": 3}\n", NULL, "bad.jsonl:2: no \"text\" string", 0},
        {"bad2.jsonl", "{\"text\": \"ok\"}\nnot json\n", NULL, "bad2.jsonl:2: not valid JSON", 0},
        {"empty.txt", "", NULL, "input is empty", 0},
        {"bin.txt", "abc\0def", NULL, "NUL byte at offset 3", 7},
        {"seps.txt", "%\n%\n\n%\n", "%", "holds no document", 0},
        {"nodocs.jsonl", "{\"text\": \"\"}\n", NULL, "holds no document", 0},
        {"corrupt.txt.gz", "\x1f\x8b\x08\x00garbage that is not deflate data", NULL, "gzip", 36},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        path2(p, g_dir, bad[i].name);
        write_file(p, bad[i].body, bad[i].len ? bad[i].len : strlen(bad[i].body));
        hyp_docs x = {0};
        rc = hyp_docs_read(&x, p, p, 0, bad[i].sep, &n, NULL, &e);
        CHECK(rc == HYP_EINPUT && strstr(e.msg, bad[i].want) && strstr(e.msg, bad[i].name) &&
                  !strchr(e.msg, '\n'),
              "refused: %s (%s)", bad[i].name, e.msg);
        hyp_docs_free(&x);
    }
    path2(p, g_dir, "missing.jsonl");
    hyp_docs x = {0};
    rc = hyp_docs_read(&x, p, p, 0, NULL, &n, NULL, &e);
    CHECK(rc == HYP_EINPUT && strstr(e.msg, "no such file"), "a missing input is refused (%s)", e.msg);
    hyp_docs_free(&x);
}

/* ---------------------------------------------------------------------------------------- */
/* The sidecars: documents cut by shards start again at 0; offsets match the documents. */
static void test_sidecars(void) {
    char p[1024], out[1024];
    path2(p, g_dir, "docs.jsonl");
    FILE *f = fopen(p, "w");
    hyp_rng r;
    hyp_rng_seed(&r, 7);
    size_t lens[60], total = 0;
    for (int i = 0; i < 60; i++) {
        lens[i] = 1 + (size_t)hyp_rng_below(&r, 120);
        fprintf(f, "{\"text\": \"");
        for (size_t k = 0; k < lens[i]; k++) fputc('a' + (int)((i + k) % 26), f);
        fprintf(f, "\"}\n");
        total += lens[i];
    }
    fclose(f);
    path2(out, g_dir, "sidecars");
    hyp_data_opts o;
    hyp_data_opts_default(&o);
    o.shard_tokens = 300;
    o.val_fraction = 0.1;
    hyp_err e = {{0}};
    const char *in[1] = {p};
    int rc = hyp_data_prepare(in, 1, out, &o, &e);
    CHECK(rc == HYP_OK, "prepare 60 documents into 300-token shards (%s)", e.msg);
    /* document starts in stream coordinates: every document start, plus every shard start */
    uint64_t n_val = (uint64_t)llround((double)total * 0.1), n_train = total - n_val;
    char *starts = calloc(total + 1, 1);
    size_t at = 0;
    for (int i = 0; i < 60; i++) {
        starts[at] = 1;
        at += lens[i];
    }
    starts[n_train] = 1;
    char metap[1100];
    snprintf(metap, sizeof metap, "%s/meta.json", out);
    size_t mn;
    char *mt = read_all(metap, &mn);
    cJSON *meta = mt ? cJSON_Parse(mt) : NULL;
    cJSON *shards = cJSON_GetObjectItem(meta, "shards");
    int ok_hdr = 1, ok_off = 1, ok_meta = 1, n_shards = 0;
    uint64_t base = 0, docs_total = 0, expect_total = 0;
    for (uint64_t i = 0; i < total; i++) expect_total += starts[i];
    cJSON *sh;
    cJSON_ArrayForEach(sh, shards) {
        const char *file = cJSON_GetObjectItem(sh, "file")->valuestring;
        uint64_t toks = (uint64_t)cJSON_GetObjectItem(sh, "tokens")->valuedouble;
        char dp[1200];
        snprintf(dp, sizeof dp, "%s/%.*s.docs", out, (int)(strlen(file) - 4), file);
        size_t dn;
        unsigned char *db = read_all(dp, &dn);
        if (!db || dn < 1024 || rd32(db) != HYP_DOCS_MAGIC || rd32(db + 4) != 1 ||
            dn != 1024 + 8 * (size_t)rd32(db + 8)) {
            ok_hdr = 0;
            free(db);
            continue;
        }
        uint32_t nd = rd32(db + 8);
        char hx[17];
        snprintf(hx, sizeof hx, "%016llx", (unsigned long long)XXH3_64bits(db, dn));
        if ((uint32_t)cJSON_GetObjectItem(sh, "docs")->valuedouble != nd ||
            strcmp(cJSON_GetObjectItem(sh, "docs_xxh3_64")->valuestring, hx) != 0)
            ok_meta = 0;
        /* every recorded offset is a start, and every start inside the shard is recorded */
        uint64_t prev = 0;
        size_t seen = 0;
        for (uint32_t k = 0; k < nd; k++) {
            uint64_t off = (uint64_t)rd32(db + 1024 + 8 * k) | (uint64_t)rd32(db + 1028 + 8 * k) << 32;
            if ((k == 0 && off != 0) || (k > 0 && off <= prev) || off >= toks) ok_off = 0;
            if (!(off == 0 || starts[base + off])) ok_off = 0;
            prev = off;
        }
        for (uint64_t t = 0; t < toks; t++) seen += t == 0 || starts[base + t];
        if (seen != nd) ok_off = 0;
        base += toks;
        docs_total += nd;
        n_shards++;
        free(db);
    }
    uint64_t shard_starts = (uint64_t)n_shards;
    (void)shard_starts;
    CHECK(n_shards >= 3 && ok_hdr, "every shard has a .docs sidecar: magic 20240521, version 1, n, "
          "n uint64 offsets (%d shards)", n_shards);
    CHECK(ok_off, "sidecar offsets: ascending, first 0, exactly the document starts within the "
          "shard (a cut document starts again at 0)");
    CHECK(ok_meta && meta && (uint64_t)cJSON_GetObjectItem(meta, "documents")->valuedouble == docs_total,
          "meta.json: documents = %llu = sum of per-shard docs, docs_xxh3_64 of every sidecar",
          (unsigned long long)docs_total);
    CHECK(docs_total >= 60 + (uint64_t)n_shards - 1 && docs_total <= 60 + (uint64_t)n_shards,
          "60 documents give %llu sidecar entries over %d shards (+1 per document cut by a shard)",
          (unsigned long long)docs_total, n_shards);
    rc = hyp_data_verify(out, &e);
    CHECK(rc == HYP_OK, "hyp_data_verify accepts the sidecars (%s)", e.msg);
    {
        char dp[1200];
        snprintf(dp, sizeof dp, "%s/train_000001.docs", out);
        size_t dn;
        unsigned char *db = read_all(dp, &dn);
        if (db && dn > 1024 + 16) {
            db[1024 + 8] ^= 1; /* the second offset */
            write_file(dp, db, dn);
        }
        free(db);
        rc = hyp_data_verify(out, &e);
        CHECK(rc == HYP_EINPUT && strstr(e.msg, "train_000001.docs") && strstr(e.msg, "checksum"),
              "hyp_data_verify detects a changed sidecar (%s)", e.msg);
    }
    /* the loader reads the sidecars (v2126): it refuses the changed one, and reads the documents
     * once it is restored */
    hyp_loader *L = hyp_loader_open(out, "train", 1, 8, 0, 0, 1, &e);
    CHECK(!L && strstr(e.msg, "train_000001.docs") != NULL, "the loader refuses the changed sidecar (%s)",
          L ? "opened" : e.msg);
    hyp_loader_close(L);
    {
        char dp[1200];
        snprintf(dp, sizeof dp, "%s/train_000001.docs", out);
        size_t dn;
        unsigned char *db = read_all(dp, &dn);
        if (db && dn > 1024 + 16) {
            db[1024 + 8] ^= 1; /* back to the original */
            write_file(dp, db, dn);
        }
        free(db);
    }
    L = hyp_loader_open(out, "train", 1, 8, 0, 0, 1, &e);
    CHECK(L && hyp_loader_total_tokens(L) == n_train && hyp_loader_has_docs(L) && hyp_loader_num_docs(L) > 0 &&
              hyp_loader_num_docs(L) <= docs_total,
          "the loader reads the shards and their sidecars (%s)", L ? "" : e.msg);
    hyp_loader_close(L);
    cJSON_Delete(meta);
    free(mt);
    free(starts);
}

/* ---------------------------------------------------------------------------------------- */
/* v2123: one crafted document per rule, each failing exactly that rule. */
static char *word_list(hyp_rng *r, int n, int min_len, int max_len) {
    char *s = calloc((size_t)n * (size_t)(max_len + 1) + 1, 1);
    size_t at = 0;
    for (int i = 0; i < n; i++) {
        int len = min_len + (int)hyp_rng_below(r, (uint64_t)(max_len - min_len + 1));
        for (int k = 0; k < len; k++) s[at++] = (char)('a' + hyp_rng_below(r, 26));
        s[at++] = ' ';
    }
    return s;
}

/* base: 10 lines of 8 random words, 'the', 'and', 'of' starting the first three (83 words) */
static void base_doc(char *out, size_t cap, int lines_with_ellipsis) {
    hyp_rng r;
    hyp_rng_seed(&r, 2123);
    size_t at = 0;
    out[0] = '\0';
    for (int l = 0; l < 10; l++) {
        char *w = word_list(&r, 8, 3, 7);
        size_t wl = strlen(w);
        w[wl - 1] = '\0';
        at += (size_t)snprintf(out + at, cap - at, "%s%s%s\n", l == 0 ? "the " : l == 1 ? "and " : l == 2 ? "of " : "",
                               w, l < lines_with_ellipsis ? "..." : ".");
        free(w);
    }
}

static void test_v2123_filter_rules(void) {
    hyp_filter_opts o;
    hyp_filter_opts_default(&o);
    o.min_words = 50;
    char base[4096], doc[8192];
    base_doc(base, sizeof base, 0);
    uint32_t f = hyp_filter_check((const uint8_t *)base, strlen(base), &o);
    CHECK(f == 0, "v2123: the base document (83 words, 10 lines, stop words) passes every rule "
          "(failed mask 0x%x)", f);
#define ONLY(rule, text, what)                                                                   \
    do {                                                                                         \
        uint32_t m_ = hyp_filter_check((const uint8_t *)(text), strlen(text), &o);               \
        CHECK(m_ == 1u << (rule), "v2123 rule %s: %s fails it and only it (mask 0x%x)",          \
              hyp_filter_rule_names[rule], what, m_);                                            \
    } while (0)

    ONLY(HYP_RULE_MIN_WORDS, "the cat and the dog", "5 words < min_words 50");
    o.max_words = 60;
    ONLY(HYP_RULE_MAX_WORDS, base, "83 words > max_words 60");
    o.max_words = 100000;
    snprintf(doc, sizeof doc, "%s#alpha #bravo #charlie #delta #echo #foxtrot #golf #hotel #india "
             "#juliet #kilo #lima\n", base);
    ONLY(HYP_RULE_SYMBOLS, doc, "12 hashtags in 95 words (0.13 > 0.1)");
    snprintf(doc, sizeof doc, "%s3141592653 2718281828 1414213562 1732050807 2236067977 "
             "1618033988 5772156649 6931471805 1098612288 1202056903 9189385332 5495393129\n", base);
    ONLY(HYP_RULE_DIGITS, doc, "120 digits among ~520 non-space characters");
    base_doc(doc, sizeof doc, 4);
    ONLY(HYP_RULE_ELLIPSIS, doc, "4 of 10 lines ending in '...' (0.4 > 0.3)");
    {
        /* 7 lines "Amen" between the base lines: 6 duplicates of 17 lines */
        char *s = doc;
        size_t at = 0;
        const char *q = base;
        for (int l = 0; l < 10; l++) {
            const char *nl = strchr(q, '\n');
            at += (size_t)snprintf(s + at, sizeof doc - at, "%.*s\n%s", (int)(nl - q), q, l < 7 ? "Amen\n" : "");
            q = nl + 1;
        }
    }
    ONLY(HYP_RULE_DUP_LINES, doc, "6 repeated lines of 17 (0.35 > 0.3)");
    {
        /* "lorem ipsum" after 12 different words */
        size_t at = 0, w = 0;
        for (const char *q = base; *q; q++) {
            doc[at++] = *q;
            if (*q == ' ' && w++ % 6 == 0 && w < 72) at += (size_t)snprintf(doc + at, sizeof doc - at, "lorem ipsum ");
        }
        doc[at] = '\0';
    }
    ONLY(HYP_RULE_TOP_NGRAM, doc, "the 2-gram 'lorem ipsum' 12 times (> 0.2 of word characters)");
    snprintf(doc, sizeof doc, "%s alpha beta gamma delta epsilon x1 alpha beta gamma delta epsilon x2 "
             "alpha beta gamma delta epsilon x3 alpha beta gamma delta epsilon\n", base);
    ONLY(HYP_RULE_DUP_NGRAM, doc, "one 5-gram 4 times (> 0.15 of word characters in repeated 5-grams)");
    {
        hyp_rng r;
        hyp_rng_seed(&r, 5);
        char *w = word_list(&r, 60, 3, 7);
        ONLY(HYP_RULE_STOP_WORDS, w, "60 random words, no stop word");
        o.min_stop_words = 0;
        CHECK(hyp_filter_check((const uint8_t *)w, strlen(w), &o) == 0,
              "v2123: with min_stop_words 0 the same document passes (the threshold is the param)");
        o.min_stop_words = 2;
        free(w);
        hyp_rng_seed(&r, 6);
        w = word_list(&r, 50, 14, 16);
        snprintf(doc, sizeof doc, "the and %s", w);
        free(w);
    }
    ONLY(HYP_RULE_MEAN_WORD, doc, "52 words of mean length ~14.5 > 10");

    /* the stage over a list: counts per rule in the report */
    hyp_docs d = {0};
    add_doc(&d, base, strlen(base), 0);
    add_doc(&d, "the cat and the dog", 19, 0);
    add_doc(&d, doc, strlen(doc), 0);
    add_doc(&d, base, strlen(base), 0);
    uint32_t ids[4] = {0, 1, 2, 3};
    size_t n = 4;
    cJSON *rep = cJSON_CreateObject();
    hyp_err e = {{0}};
    int rc = hyp_filter_run(&d, &o, ids, &n, rep, &e);
    cJSON *rr = cJSON_GetObjectItem(rep, "removed_by_rule");
    CHECK(rc == HYP_OK && n == 2 && ids[0] == 0 && ids[1] == 3 &&
              cJSON_GetObjectItem(rr, "min_words")->valuedouble == 1 &&
              cJSON_GetObjectItem(rr, "mean_word_length")->valuedouble == 1 &&
              cJSON_GetObjectItem(rep, "documents_out")->valuedouble == 2,
          "v2123: the filter stage keeps 2 of 4 and counts one removal each for min_words and "
          "mean_word_length");
    cJSON_Delete(rep);
    hyp_docs_free(&d);
#undef ONLY
}

/* ---------------------------------------------------------------------------------------- */
/* v2122 against datasketch (the committed fixture), and exact duplicates. */
static void test_v2122_datasketch(void) {
    char p[1024];
    snprintf(p, sizeof p, "%s/tests/fixtures/dedup/corpus.jsonl", HYP_SOURCE_DIR);
    hyp_docs d = {0};
    hyp_err e = {{0}};
    size_t n;
    int rc = hyp_docs_read(&d, p, p, 0, NULL, &n, NULL, &e);
    /* the reader drops the fixture's one empty text: map our index -> the fixture's line */
    snprintf(p, sizeof p, "%s/tests/fixtures/dedup/datasketch.json", HYP_SOURCE_DIR);
    size_t jn;
    char *jt = read_all(p, &jn);
    cJSON *fx = jt ? cJSON_Parse(jt) : NULL;
    int n_fix = fx ? (int)cJSON_GetObjectItem(fx, "documents")->valuedouble : 0;
    CHECK(rc == HYP_OK && fx && (int)n == n_fix - 1, "v2122 fixture: %zu documents read (the fixture's "
          "empty one is dropped by the reader) (%s)", n, e.msg);
    if (!fx || rc != HYP_OK) {
        free(jt);
        hyp_docs_free(&d);
        return;
    }
    /* fixture line of each document read: the fixture ends with "" (dropped) and "short doc" */
    int *line = malloc(sizeof(int) * (size_t)n_fix);
    for (int i = 0; i < n_fix; i++) line[i] = i < n_fix - 2 ? i : i + 1;
    cJSON *run;
    cJSON_ArrayForEach(run, cJSON_GetObjectItem(fx, "runs")) {
        hyp_dedup_opts o;
        hyp_dedup_opts_default(&o);
        o.exact = 0;
        o.ngram = (int)cJSON_GetObjectItem(run, "ngram")->valuedouble;
        o.num_perm = (int)cJSON_GetObjectItem(run, "num_perm")->valuedouble;
        o.bands = (int)cJSON_GetObjectItem(run, "bands")->valuedouble;
        o.threshold = cJSON_GetObjectItem(run, "threshold")->valuedouble;
        o.seed = (uint64_t)cJSON_GetObjectItem(run, "seed")->valuedouble;
        uint64_t *a = malloc(8 * (size_t)o.num_perm), *b = malloc(8 * (size_t)o.num_perm);
        uint32_t *sig = malloc(4 * (size_t)o.num_perm);
        hyp_minhash_perms(o.seed, o.num_perm, a, b);
        cJSON *hashes = cJSON_GetObjectItem(run, "signature_xxh3_64");
        int same = 0;
        for (size_t i = 0; i < d.n; i++) {
            hyp_minhash(d.text + d.off[i], d.len[i], o.ngram, o.num_perm, a, b, sig);
            unsigned char le[4096];
            for (int k = 0; k < o.num_perm; k++)
                for (int j = 0; j < 4; j++) le[4 * k + j] = (unsigned char)(sig[k] >> (8 * j));
            char hx[17];
            snprintf(hx, sizeof hx, "%016llx", (unsigned long long)XXH3_64bits(le, 4 * (size_t)o.num_perm));
            same += !strcmp(cJSON_GetArrayItem(hashes, line[i])->valuestring, hx);
        }
        hyp_minhash(d.text + d.off[0], d.len[0], o.ngram, o.num_perm, a, b, sig);
        int doc0 = line[0] == 0;
        cJSON *s0 = cJSON_GetObjectItem(run, "signature_doc0");
        for (int k = 0; k < o.num_perm && doc0; k++)
            doc0 = (double)sig[k] == cJSON_GetArrayItem(s0, k)->valuedouble;
        CHECK(same == (int)d.n && doc0, "v2122 ngram %d num_perm %d: all %zu MinHash signatures equal "
              "datasketch's (legacy scheme, our shingle hash and permutations) bit for bit",
              o.ngram, o.num_perm, d.n);
        /* decisions */
        uint32_t *ids = malloc(sizeof *ids * d.n);
        for (size_t i = 0; i < d.n; i++) ids[i] = (uint32_t)i;
        size_t m = d.n;
        cJSON *rep = cJSON_CreateObject();
        rc = hyp_dedup_run(&d, &o, ids, &m, rep, &e);
        cJSON *want = cJSON_GetObjectItem(run, "removed"), *got = cJSON_GetObjectItem(rep, "removed");
        int nw = cJSON_GetArraySize(want), ng = cJSON_GetArraySize(got), agree = nw == ng;
        for (int k = 0; k < nw && agree; k++) {
            cJSON *x = cJSON_GetArrayItem(want, k), *y = cJSON_GetArrayItem(got, k);
            agree = (int)cJSON_GetObjectItem(x, "doc")->valuedouble ==
                        line[(int)cJSON_GetObjectItem(y, "doc")->valuedouble] &&
                    (int)cJSON_GetObjectItem(x, "kept")->valuedouble ==
                        line[(int)cJSON_GetObjectItem(y, "kept")->valuedouble] &&
                    fabs(cJSON_GetObjectItem(x, "similarity")->valuedouble -
                         cJSON_GetObjectItem(y, "similarity")->valuedouble) < 1e-4;
        }
        double wc = cJSON_GetObjectItem(run, "candidate_pairs")->valuedouble;
        double gc = cJSON_GetObjectItem(rep, "lsh_candidate_pairs")->valuedouble;
        CHECK(rc == HYP_OK && agree && wc == gc,
              "v2122 bands %d x rows %d, threshold %.2f: the same %d removals with the same "
              "representatives and similarities as datasketch's MinHashLSH, and %g = %g candidate pairs",
              o.bands, o.num_perm / o.bands, o.threshold, nw, gc, wc);
        cJSON_Delete(rep);
        free(ids);
        free(a);
        free(b);
        free(sig);
    }
    free(line);
    cJSON_Delete(fx);
    free(jt);
    hyp_docs_free(&d);

    /* exact duplicates after normalization */
    hyp_docs x = {0};
    add_doc(&x, "Hello  World\n", 13, 0);
    add_doc(&x, "hello world", 11, 1);
    add_doc(&x, "hello world!", 12, 1);
    uint32_t ids[3] = {0, 1, 2};
    size_t m = 3;
    hyp_dedup_opts o;
    hyp_dedup_opts_default(&o);
    cJSON *rep = cJSON_CreateObject();
    int rc2 = hyp_dedup_run(&x, &o, ids, &m, rep, &e);
    cJSON *r0 = cJSON_GetArrayItem(cJSON_GetObjectItem(rep, "removed"), 0);
    CHECK(rc2 == HYP_OK && m == 2 && ids[0] == 0 && ids[1] == 2 && r0 &&
              !strcmp(cJSON_GetObjectItem(r0, "why")->valuestring, "exact") &&
              cJSON_GetObjectItem(r0, "doc")->valuedouble == 1 &&
              cJSON_GetObjectItem(r0, "kept")->valuedouble == 0 &&
              hyp_text_hash(x.text, 13) == hyp_text_hash(x.text + 13, 11),
          "v2122 exact: 'hello world' is removed as a duplicate of 'Hello  World\\n' (case and "
          "whitespace normalized), 'hello world!' is kept");
    cJSON_Delete(rep);
    o.bands = 7;
    m = 3;
    rep = cJSON_CreateObject();
    rc2 = hyp_dedup_run(&x, &o, ids, &m, rep, &e);
    CHECK(rc2 == HYP_EINPUT && strstr(e.msg, "does not divide"), "bands that do not divide "
          "num_perm are refused (%s)", e.msg);
    cJSON_Delete(rep);
    hyp_docs_free(&x);
}

/* ---------------------------------------------------------------------------------------- */
/* v2121: realized counts are Multinomial(size, p): each within 3.29 sigma (99.9%). */
static void test_v2121_mixing(void) {
    hyp_docs d = {0};
    size_t sizes[3] = {3000, 2000, 500};
    char buf[64];
    for (int s = 0; s < 3; s++)
        for (size_t i = 0; i < sizes[s]; i++) {
            int k = snprintf(buf, sizeof buf, "source %d document %zu", s, i);
            add_doc(&d, buf, (size_t)k, s);
        }
    double w[3] = {5, 3, 2}; /* normalized to 0.5, 0.3, 0.2 */
    int all_in = 1;
    double worst = 0;
    for (uint64_t seed = 1; seed <= 5; seed++) {
        uint32_t *ids = malloc(sizeof *ids * d.n);
        for (size_t i = 0; i < d.n; i++) ids[i] = (uint32_t)i;
        size_t n = d.n;
        hyp_mix_opts o = {.n_weights = 3, .weights = w, .temperature = 1, .size = 20000, .seed = seed};
        cJSON *rep = cJSON_CreateObject();
        hyp_err e = {{0}};
        int rc = hyp_mix_run(&d, 3, &o, &ids, &n, rep, &e);
        size_t cnt[3] = {0};
        for (size_t i = 0; i < n; i++) cnt[d.source[ids[i]]]++;
        for (int s = 0; s < 3 && rc == HYP_OK; s++) {
            double p = w[s] / 10, mu = 20000 * p, sd = sqrt(20000 * p * (1 - p));
            double z = fabs((double)cnt[s] - mu) / sd;
            if (z > worst) worst = z;
            cJSON *src = cJSON_GetArrayItem(cJSON_GetObjectItem(rep, "sources"), s);
            if (z > 3.29 || cJSON_GetObjectItem(src, "documents_drawn")->valuedouble != (double)cnt[s] ||
                fabs(cJSON_GetObjectItem(src, "realized_share")->valuedouble - (double)cnt[s] / 20000) > 1e-12)
                all_in = 0;
        }
        if (rc != HYP_OK || n != 20000) all_in = 0;
        cJSON_Delete(rep);
        free(ids);
    }
    CHECK(all_in, "v2121: weights 0.5/0.3/0.2, 20000 draws, 5 seeds: every realized count within "
          "the 99.9%% binomial interval (worst |z| = %.2f) and reported as drawn", worst);

    /* size 0: the most that repeats no domain in expectation = min(3000/.5, 2000/.3, 500/.2) */
    uint32_t *ids = malloc(sizeof *ids * d.n);
    for (size_t i = 0; i < d.n; i++) ids[i] = (uint32_t)i;
    size_t n = d.n;
    hyp_mix_opts o = {.n_weights = 3, .weights = w, .temperature = 1, .size = 0, .seed = 1};
    cJSON *rep = cJSON_CreateObject();
    hyp_err e = {{0}};
    int rc = hyp_mix_run(&d, 3, &o, &ids, &n, rep, &e);
    CHECK(rc == HYP_OK && n == 2500, "v2121 size 0: 2500 documents (min_i n_i / p_i) (%zu)", n);
    cJSON_Delete(rep);
    free(ids);

    /* temperature: p proportional to n^(1/T) */
    ids = malloc(sizeof *ids * d.n);
    for (size_t i = 0; i < d.n; i++) ids[i] = (uint32_t)i;
    n = d.n;
    hyp_mix_opts t = {.n_weights = 0, .temperature = 2, .size = 20000, .seed = 3};
    rep = cJSON_CreateObject();
    rc = hyp_mix_run(&d, 3, &t, &ids, &n, rep, &e);
    double z = sqrt(3000) + sqrt(2000) + sqrt(500);
    int ok = rc == HYP_OK;
    size_t cnt[3] = {0};
    for (size_t i = 0; ok && i < n; i++) cnt[d.source[ids[i]]]++;
    for (int s = 0; s < 3 && ok; s++) {
        double p = sqrt((double)sizes[s]) / z;
        cJSON *src = cJSON_GetArrayItem(cJSON_GetObjectItem(rep, "sources"), s);
        ok = fabs(cJSON_GetObjectItem(src, "target_share")->valuedouble - p) < 1e-12 &&
             fabs((double)cnt[s] - 20000 * p) <= 3.29 * sqrt(20000 * p * (1 - p));
    }
    CHECK(ok, "v2121 temperature 2 without weights: target shares sqrt(n_i)/sum, realized within "
          "the 99.9%% interval");
    cJSON_Delete(rep);
    free(ids);

    hyp_docs_free(&d);

    /* unit bytes: documents of 10, 100 and 1000 bytes; byte shares 0.5 / 0.3 / 0.2 */
    memset(&d, 0, sizeof d);
    char big[1000];
    memset(big, 'b', sizeof big);
    size_t blen[3] = {10, 100, 1000};
    for (int s = 0; s < 3; s++)
        for (size_t i = 0; i < 2000; i++) add_doc(&d, big, blen[s], s);
    ids = malloc(sizeof *ids * d.n);
    for (size_t i = 0; i < d.n; i++) ids[i] = (uint32_t)i;
    n = d.n;
    hyp_mix_opts by = {.n_weights = 3, .weights = w, .by_bytes = 1, .temperature = 1, .size = 20000, .seed = 9};
    rep = cJSON_CreateObject();
    rc = hyp_mix_run(&d, 3, &by, &ids, &n, rep, &e);
    /* q_i ~ p_i / len_i */
    double qz = 0.5 / 10 + 0.3 / 100 + 0.2 / 1000, qs[3] = {0.5 / 10 / qz, 0.3 / 100 / qz, 0.2 / 1000 / qz};
    ok = rc == HYP_OK && n == 20000;
    memset(cnt, 0, sizeof cnt);
    for (size_t i = 0; ok && i < n; i++) cnt[d.source[ids[i]]]++;
    double tb = 0, worst_share = 0;
    for (int s = 0; s < 3; s++) tb += (double)cnt[s] * (double)blen[s];
    for (int s = 0; s < 3 && ok; s++) {
        cJSON *src = cJSON_GetArrayItem(cJSON_GetObjectItem(rep, "sources"), s);
        double share = (double)cnt[s] * (double)blen[s] / tb;
        if (fabs(share - w[s] / 10) > worst_share) worst_share = fabs(share - w[s] / 10);
        ok = fabs(cJSON_GetObjectItem(src, "draw_probability")->valuedouble - qs[s]) < 1e-12 &&
             fabs((double)cnt[s] - 20000 * qs[s]) <= 3.29 * sqrt(20000 * qs[s] * (1 - qs[s])) &&
             fabs(cJSON_GetObjectItem(src, "byte_share")->valuedouble - share) < 1e-12;
    }
    /* the expected byte share under q is the target exactly: q_i len_i / sum_j q_j len_j = p_i */
    double eb = qs[0] * 10 + qs[1] * 100 + qs[2] * 1000;
    for (int s = 0; s < 3; s++) ok = ok && fabs(qs[s] * (double)blen[s] / eb - w[s] / 10) < 1e-12;
    CHECK(ok, "v2121 unit bytes: draws with q_i ~ p_i / mean bytes, whose expected byte shares are "
          "0.5/0.3/0.2; counts within the 99.9%% interval (realized byte shares off by at most %.4f)",
          worst_share);
    cJSON_Delete(rep);
    free(ids);

    ids = malloc(sizeof *ids * d.n);
    n = d.n;
    for (size_t i = 0; i < d.n; i++) ids[i] = (uint32_t)i;
    hyp_mix_opts fixed = {.n_weights = 2, .weights = w, .fixed_last = 1, .last_share = 0.25,
                          .temperature = 1, .size = 20000, .seed = 4};
    rep = cJSON_CreateObject();
    rc = hyp_mix_run(&d, 3, &fixed, &ids, &n, rep, &e);
    double want[3] = {0.75 * 5 / 8, 0.75 * 3 / 8, 0.25};
    ok = rc == HYP_OK && n == 20000;
    memset(cnt, 0, sizeof cnt);
    for (size_t i = 0; ok && i < n; i++) cnt[d.source[ids[i]]]++;
    for (int s = 0; s < 3 && ok; s++)
        ok = fabs(cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(rep, "sources"), s),
                                      "target_share")->valuedouble - want[s]) < 1e-12 &&
             fabs((double)cnt[s] - 20000 * want[s]) <= 3.29 * sqrt(20000 * want[s] * (1 - want[s]));
    CHECK(ok, "v2121/v2124 fixed share 0.25 for the last input (added documents), weights 5:3 "
          "splitting the rest: target shares 0.469/0.281/0.25, counts within the 99.9%% interval");
    cJSON_Delete(rep);
    free(ids);
    ids = malloc(sizeof *ids * d.n);
    n = d.n;
    for (size_t i = 0; i < d.n; i++) ids[i] = (uint32_t)i;
    hyp_mix_opts bad = {.n_weights = 2, .weights = w, .temperature = 1, .seed = 1};
    rep = cJSON_CreateObject();
    rc = hyp_mix_run(&d, 3, &bad, &ids, &n, rep, &e);
    CHECK(rc == HYP_EINPUT && strstr(e.msg, "2 weights for 3 inputs"), "v2121: a weight list that "
          "does not match the inputs is refused (%s)", e.msg);
    cJSON_Delete(rep);
    free(ids);
    hyp_docs_free(&d);
}

/* ---------------------------------------------------------------------------------------- */
/* v2120: the order follows the pacing function. */
static void test_v2120_curriculum(void) {
    hyp_curriculum_opts o = {.metric = HYP_METRIC_LENGTH, .pacing = HYP_PACE_LINEAR, .start = 0.1,
                             .warmup = 0.5, .steps = 4, .seed = 1};
    CHECK(fabs(hyp_curriculum_competence(&o, 0) - 0.1) < 1e-12 &&
              fabs(hyp_curriculum_competence(&o, 0.25) - 0.55) < 1e-12 &&
              hyp_curriculum_competence(&o, 0.5) == 1 && hyp_curriculum_competence(&o, 0.9) == 1,
          "v2120 linear: c(0) = 0.1, c(0.25) = 0.55, c(t >= warmup) = 1");
    o.pacing = HYP_PACE_ROOT;
    CHECK(fabs(hyp_curriculum_competence(&o, 0.25) - sqrt(0.01 + 0.99 * 0.5)) < 1e-12,
          "v2120 root: c(0.25) = sqrt(c0^2 + (1 - c0^2) / 2)");
    o.pacing = HYP_PACE_STEP;
    CHECK(fabs(hyp_curriculum_competence(&o, 0.2) - 0.325) < 1e-12 &&
              fabs(hyp_curriculum_competence(&o, 0.12) - 0.1) < 1e-12,
          "v2120 step (K = 4): c = 0.1 until t = 0.125, then 0.325 until 0.25");

    /* 2000 documents of random lengths; scored by length, so rank = position in sorted lengths */
    size_t N = 2000;
    hyp_docs d = {0};
    hyp_rng r;
    hyp_rng_seed(&r, 2120);
    char *buf = malloc(4000);
    memset(buf, 'x', 4000);
    for (size_t i = 0; i < N; i++) add_doc(&d, buf, 1 + (size_t)hyp_rng_below(&r, 3999), 0);
    free(buf);
    uint32_t *piece_doc = malloc(sizeof *piece_doc * N), *perm = malloc(sizeof *perm * N);
    size_t *rank = malloc(sizeof *rank * N);
    for (size_t i = 0; i < N; i++) piece_doc[i] = (uint32_t)i;
    for (size_t i = 0; i < N; i++) { /* rank by (length, index) */
        size_t k = 0;
        for (size_t j = 0; j < N; j++)
            k += d.len[j] < d.len[i] || (d.len[j] == d.len[i] && j < i);
        rank[i] = k;
    }
    const char *names[3] = {"linear", "root", "step"};
    for (int pace = 0; pace < 3; pace++) {
        o.pacing = pace;
        cJSON *rep = cJSON_CreateObject();
        hyp_err e = {{0}};
        int rc = hyp_curriculum_run(&d, &o, piece_doc, N, perm, rep, &e);
        char *seen = calloc(N, 1);
        int perm_ok = rc == HYP_OK, bound_ok = 1, tight = 1;
        size_t max_rank = 0;
        for (size_t k = 0; k < N && perm_ok; k++) {
            if (perm[k] >= N || seen[perm[k]]) perm_ok = 0;
            else seen[perm[k]] = 1;
            size_t limit = (size_t)ceil(hyp_curriculum_competence(&o, (double)k / N) * N - 1e-9);
            size_t rk = rank[perm[k]];
            if (rk >= (limit > k + 1 ? limit : k + 1)) bound_ok = 0;
            if (rk > max_rank) max_rank = rk;
            /* the pool is drawn uniformly: by the time c * N exceeds k by a margin, the hardest
             * available documents are reached (the bound is not loose) */
            if (k == N * 24 / 100 && max_rank + 200 < limit) tight = 0;
        }
        cJSON *dec = cJSON_GetObjectItem(rep, "mean_score_by_tenth");
        double first = cJSON_GetArrayItem(dec, 0)->valuedouble, last = cJSON_GetArrayItem(dec, 9)->valuedouble;
        CHECK(perm_ok && bound_ok && tight && first < 0.5 * last,
              "v2120 %s pacing: a permutation; the document at position k has difficulty rank < "
              "max(ceil(c(k/n) n), k + 1); mean length of the first tenth %.0f < last tenth %.0f",
              names[pace], first, last);
        free(seen);
        cJSON_Delete(rep);
    }
    /* compression metric: repetitive text is easier than random letters */
    double s1, s2;
    hyp_err e = {{0}};
    char rnd[2000];
    for (int i = 0; i < 2000; i++) rnd[i] = (char)('a' + hyp_rng_below(&r, 26));
    char rep_txt[2000];
    for (int i = 0; i < 2000; i++) rep_txt[i] = "abcab"[i % 5];
    hyp_curriculum_score((const uint8_t *)rep_txt, 2000, HYP_METRIC_COMPRESSION, &s1, &e);
    hyp_curriculum_score((const uint8_t *)rnd, 2000, HYP_METRIC_COMPRESSION, &s2, &e);
    CHECK(s1 < 0.05 && s2 > 0.55, "v2120 compression score: periodic text %.3f, random letters %.3f "
          "(zlib compressed / raw)", s1, s2);
    free(piece_doc);
    free(perm);
    free(rank);
    hyp_docs_free(&d);
}

/* v2120 through the pipeline: the shard holds the documents in curriculum order, and the
 * trainer's loader reads that order in the first epoch (meta.json train_order). */
static void test_v2120_prepare_and_loader(void) {
    char p[1024], out[1024];
    path2(p, g_dir, "cur.jsonl");
    FILE *f = fopen(p, "w");
    hyp_rng r;
    hyp_rng_seed(&r, 99);
    size_t lens[50];
    for (int i = 0; i < 50; i++) {
        lens[i] = 10 + (size_t)hyp_rng_below(&r, 490);
        fprintf(f, "{\"text\": \"");
        for (size_t k = 0; k < lens[i]; k++) fputc('a' + (int)hyp_rng_below(&r, 26), f);
        fprintf(f, "\"}\n");
    }
    fclose(f);
    hyp_stages st;
    hyp_stages_default(&st);
    st.curriculum_on = 1;
    st.curriculum.metric = HYP_METRIC_LENGTH;
    st.curriculum_spec = "v2120";
    hyp_data_opts o;
    hyp_data_opts_default(&o);
    o.val_fraction = 0;
    o.stages = &st;
    path2(out, g_dir, "cur-out");
    hyp_err e = {{0}};
    const char *in[1] = {p};
    int rc = hyp_data_prepare(in, 1, out, &o, &e);
    CHECK(rc == HYP_OK, "v2120: gen data with the curriculum stage (%s)", e.msg);
    char sp[1100], dp[1100];
    snprintf(sp, sizeof sp, "%s/train_000000.bin", out);
    snprintf(dp, sizeof dp, "%s/train_000000.docs", out);
    size_t sn, dn;
    unsigned char *sb = read_all(sp, &sn), *db = read_all(dp, &dn);
    /* document lengths in file order, from the sidecar */
    int ok = sb && db && rd32(db + 8) == 50;
    size_t sorted[50], first_len = 0, under = 0;
    for (int i = 0; i < 50; i++) sorted[i] = lens[i];
    for (int i = 0; i < 50; i++)
        for (int j = i + 1; j < 50; j++)
            if (sorted[j] < sorted[i]) {
                size_t t = sorted[i];
                sorted[i] = sorted[j], sorted[j] = t;
            }
    if (ok) {
        uint64_t o0 = rd32(db + 1024), o1 = rd32(db + 1032);
        first_len = (size_t)(o1 - o0);
        for (int k = 0; k < 5; k++) /* c(4/50) = 0.244: the first 5 are among the 13 shortest */
            under += (size_t)(rd32(db + 1024 + 8 * (k + 1)) - rd32(db + 1024 + 8 * k)) <= sorted[12];
    }
    CHECK(ok && first_len <= sorted[4] && under == 5, "v2120: the shard starts with easy documents "
          "(first %zu bytes, 5 shortest <= %zu; the first 5 written all among the 13 shortest)",
          first_len, sorted[4]);
    /* the loader's first epoch follows the file order; the second is shuffled */
    int T = 16;
    hyp_loader *L = hyp_loader_open(out, "train", 1, T, 1, 0, 1, &e);
    int in_order = L != NULL, shuffled = 0;
    int32_t x[16], y[16];
    uint64_t W = L ? hyp_loader_windows(L) : 0;
    for (uint64_t w = 0; L && w < W; w++) {
        hyp_loader_next(L, x, y, &e);
        for (int t = 0; t < T; t++)
            if ((uint32_t)x[t] != (uint32_t)(sb[1024 + 2 * (w * (uint64_t)T + (uint64_t)t)] |
                                             sb[1025 + 2 * (w * (uint64_t)T + (uint64_t)t)] << 8))
                in_order = 0;
    }
    for (uint64_t w = 0; L && w < 8; w++) {
        hyp_loader_next(L, x, y, &e);
        shuffled += x[0] != (int32_t)sb[1024 + 2 * (w * (uint64_t)T)];
    }
    CHECK(in_order && shuffled > 0, "v2120: the trainer's loader reads epoch 0 in the written "
          "(curriculum) order (%llu windows) and shuffles epoch 1", (unsigned long long)W);
    hyp_loader_close(L);
    free(sb);
    free(db);
}

int main(void) {
    snprintf(g_dir, sizeof g_dir, "/tmp/hyp_test_stages_XXXXXX");
    if (!mkdtemp(g_dir)) {
        perror("mkdtemp");
        return 1;
    }
    test_reader();
    test_sidecars();
    test_v2123_filter_rules();
    test_v2122_datasketch();
    test_v2121_mixing();
    test_v2120_curriculum();
    test_v2120_prepare_and_loader();
    rm_rf(g_dir);
    return hyp_test_finish();
}
