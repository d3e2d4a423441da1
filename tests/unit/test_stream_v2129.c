/* test_stream_v2129.c — v2129 streaming dataset (runtime/data/stream.c through the loader of
 * data.c), on a corpus of 400 generated documents "D<i>: words ...":
 *   equivalence: with shuffle_buffer 1 and one rank the stream's rows (inputs, targets,
 *     positions) are exactly the windows 0..W-1 of the token stream `gen data` writes for the
 *     same files (hyp_data_prepare: shard tokens + .docs sidecar), with the byte tokenizer and with
 *     GPT-2's (EOT before each document); row W starts the next pass (= window 0);
 *   the same rows from .txt with a separator, from .jsonl and from .jsonl.gz;
 *   shuffle: each block of K rows is a permutation of the unshuffled block, not the identity;
 *   resume: a fresh loader set to a saved state (mid-block, at a block end, rank 1 of 2, with
 *     prefetch) continues bit-exactly;
 *   ranks: with 2 ranks each rank's token stream holds exactly its documents (i % 2 == rank), in
 *     order, none skipped;
 *   bad input: missing file, pattern without match, empty file, binary file (NUL at open and far
 *     into a file), malformed .jsonl line (file:line), a .jsonl without text, too little text for
 *     one row — HYP_EINPUT with a message naming the file. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "data.h"
#include "stream.h"

#include "hyp_test.h"

#define NDOC 400
#define T 64
#define B 4

static char g_dir[256];
static char *g_doc[NDOC];

static void path(char *out, size_t cap, const char *name) { snprintf(out, cap, "%s/%s", g_dir, name); }

static void make_corpus(void) {
    static const char *W[] = {"and", "the", "light", "was", "good", "upon", "waters", "earth", "said", "God", "day", "night"};
    uint64_t x = 12345;
    for (int i = 0; i < NDOC; i++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        int nw = 3 + (int)((x >> 33) % 60), len = 0;
        char *d = malloc(1024);
        len += snprintf(d + len, 1024 - (size_t)len, "D%d:", i);
        for (int k = 0; k < nw; k++) {
            x = x * 6364136223846793005ull + 1442695040888963407ull;
            len += snprintf(d + len, 1024 - (size_t)len, "%s%s", k % 9 == 8 ? "\n" : " ", W[(x >> 35) % 12]);
        }
        snprintf(d + len, 1024 - (size_t)len, ".\n");
        g_doc[i] = d;
    }
    char p[512];
    path(p, sizeof p, "corpus.txt");
    FILE *f = fopen(p, "w");
    for (int i = 0; i < NDOC; i++) fprintf(f, "%s%s", g_doc[i], i + 1 < NDOC ? "%\n" : "");
    fclose(f);
    path(p, sizeof p, "corpus.jsonl");
    f = fopen(p, "w");
    path(p, sizeof p, "corpus.jsonl.gz");
    gzFile g = gzopen(p, "wb");
    for (int i = 0; i < NDOC; i++) {
        char line[4096];
        int n = snprintf(line, sizeof line, "{\"text\": \"");
        for (const char *c = g_doc[i]; *c; c++) n += *c == '\n' ? snprintf(line + n, sizeof line - (size_t)n, "\\n") : snprintf(line + n, sizeof line - (size_t)n, "%c", *c);
        n += snprintf(line + n, sizeof line - (size_t)n, "\"}\n");
        fputs(line, f);
        if (i == 10) fputs("\n", f); /* a blank line is skipped */
        gzwrite(g, line, (unsigned)n);
    }
    fclose(f);
    gzclose(g);
}

typedef struct {
    int32_t in[B * T], tg[B * T], pos[B * T];
} batch;

static hyp_loader *open_stream(const char *src, const char *sep, const char *tok, int K, int rank, int world, int prefetch, hyp_err *e) {
    char p[1024];
    if (src[0] == '/') snprintf(p, sizeof p, "%s", src);
    else path(p, sizeof p, src);
    hyp_stream *s;
    hyp_loader *L;
    if (hyp_stream_open(p, sep, tok, K, T, 7, rank, world, &s, e)) return NULL;
    if (hyp_loader_open_stream(s, B, T, &L, e)) return NULL;
    if (prefetch && hyp_loader_prefetch(L, prefetch, e)) {
        hyp_loader_close(L);
        return NULL;
    }
    return L;
}

/* rows[n][T+1 inputs.. ] of the first n batches: inputs, last target, positions */
static int read_rows(hyp_loader *L, int nb, batch *out, hyp_err *e) {
    for (int k = 0; k < nb; k++)
        if (hyp_loader_next_pos(L, out[k].in, out[k].tg, out[k].pos, e)) return -1;
    return 0;
}

/* The token stream and document starts of dir's single train shard (gen data). */
static uint32_t *shard_tokens(const char *dir, uint64_t *n, uint64_t **docs, uint64_t *nd) {
    char p[1024];
    snprintf(p, sizeof p, "%s/train_000000.bin", dir);
    FILE *f = fopen(p, "rb");
    if (!f) return NULL;
    int32_t h[256];
    if (fread(h, 4, 256, f) != 256) return NULL;
    *n = (uint64_t)h[2];
    uint32_t *t = malloc(*n * sizeof *t);
    for (uint64_t i = 0; i < *n; i++) {
        if (h[1] == 1) {
            uint16_t v;
            if (fread(&v, 2, 1, f) != 1) return NULL;
            t[i] = v;
        } else if (fread(&t[i], 4, 1, f) != 1) return NULL;
    }
    fclose(f);
    snprintf(p, sizeof p, "%s/train_000000.docs", dir);
    f = fopen(p, "rb");
    if (!f || fread(h, 4, 256, f) != 256) return NULL;
    *nd = (uint64_t)h[2];
    *docs = malloc(*nd * sizeof **docs);
    if (fread(*docs, 8, *nd, f) != *nd) return NULL;
    fclose(f);
    return t;
}

/* Row r of the batches vs window w of the shard stream (tokens and positions). */
static int row_is_window(const batch *bs, int r, const uint32_t *t, const uint64_t *docs, uint64_t nd, uint64_t w) {
    const batch *b = &bs[r / B];
    int row = r % B;
    uint64_t g0 = w * T, cur = g0, j = 0;
    while (j < nd && docs[j] <= g0) j++; /* a document begun before the row counts from its start */
    for (int k = 0; k < T; k++) {
        uint64_t g = g0 + (uint64_t)k;
        while (j < nd && docs[j] <= g) cur = docs[j++];
        if ((uint32_t)b->in[row * T + k] != t[g] || (uint32_t)b->tg[row * T + k] != t[g + 1] || (uint64_t)b->pos[row * T + k] != g - cur) {
            return 0;
        }
    }
    return 1;
}

static int rows_equal(const batch *a, int ra, const batch *b, int rb) {
    const batch *x = &a[ra / B], *y = &b[rb / B];
    return !memcmp(x->in + (ra % B) * T, y->in + (rb % B) * T, T * 4) && !memcmp(x->tg + (ra % B) * T, y->tg + (rb % B) * T, T * 4) &&
           !memcmp(x->pos + (ra % B) * T, y->pos + (rb % B) * T, T * 4);
}

static void equivalence(const char *tok, const char *what) {
    hyp_err e = {0};
    char in[512], out[512];
    path(in, sizeof in, "corpus.txt");
    snprintf(out, sizeof out, "%s/shards_%s", g_dir, what);
    hyp_data_opts o;
    hyp_data_opts_default(&o);
    o.val_fraction = 0, o.doc_sep = "%", o.tokenizer = tok;
    const char *ins[] = {in};
    int rc = hyp_data_prepare(ins, 1, out, &o, &e);
    CHECK(rc == HYP_OK, "%s: gen data of the corpus (%s)", what, e.msg);
    uint64_t n = 0, nd = 0, *docs = NULL;
    uint32_t *t = shard_tokens(out, &n, &docs, &nd);
    CHECK(t && nd == NDOC, "%s: shard of %llu tokens, %llu documents", what, (unsigned long long)n, (unsigned long long)nd);
    if (!t) return;
    uint64_t W = (n - 1) / T;
    int nb = (int)(W / B) + 2;
    batch *bs = calloc((size_t)nb, sizeof *bs);
    hyp_loader *L = open_stream("corpus.txt", "%", tok, 1, 0, 1, 0, &e);
    CHECK(L && read_rows(L, nb, bs, &e) == 0, "%s: stream of corpus.txt read (%s)", what, e.msg);
    int same = 1;
    for (uint64_t w = 0; L && w < W; w++) same &= row_is_window(bs, (int)w, t, docs, nd, w);
    CHECK(L && same, "%s: shuffle_buffer 1, 1 rank: stream rows 0..%llu == gen data's windows 0..%llu (tokens, targets, positions)", what,
          (unsigned long long)W - 1, (unsigned long long)W - 1);
    CHECK(L && row_is_window(bs, (int)W, t, docs, nd, 0), "%s: row W = %llu starts the next pass (window 0; the tail of %llu tokens dropped)", what,
          (unsigned long long)W, (unsigned long long)(n - 1 - W * T));
    hyp_loader_close(L);
    /* the same documents as .jsonl and .jsonl.gz */
    const char *alt[] = {"corpus.jsonl", "corpus.jsonl.gz"};
    for (int a = 0; a < 2; a++) {
        batch *b2 = calloc((size_t)nb, sizeof *b2);
        hyp_loader *J = open_stream(alt[a], NULL, tok, 1, 0, 1, 2, &e);
        int ok = J && read_rows(J, nb, b2, &e) == 0;
        for (int r = 0; ok && r < nb * B; r++) ok = rows_equal(bs, r, b2, r);
        CHECK(ok, "%s: %s gives the same rows as corpus.txt --doc-sep %% (%s)", what, alt[a], ok ? "" : e.msg);
        hyp_loader_close(J);
        free(b2);
    }
    free(bs);
    free(t);
    free(docs);
}

static void shuffle(void) {
    hyp_err e = {0};
    const int K = 8, nb = 10; /* 40 rows = 5 blocks */
    batch a[10], s[10];
    hyp_loader *L1 = open_stream("corpus.txt", "%", NULL, 1, 0, 1, 0, &e), *L8 = open_stream("corpus.txt", "%", NULL, K, 0, 1, 0, &e);
    int ok = L1 && L8 && !read_rows(L1, nb, a, &e) && !read_rows(L8, nb, s, &e), perm = 1, ident = 1;
    for (int blk = 0; ok && blk < nb * B / K; blk++) {
        int used[8] = {0};
        for (int r = 0; r < K; r++) {
            int found = -1;
            for (int q = 0; q < K && found < 0; q++)
                if (!used[q] && rows_equal(s, blk * K + r, a, blk * K + q)) found = q;
            if (found < 0) perm = 0;
            else used[found] = 1, ident &= found == r;
        }
    }
    CHECK(ok && perm, "shuffle_buffer %d: each of %d blocks is a permutation of the unshuffled block", K, nb * B / K);
    CHECK(ok && !ident, "shuffle_buffer %d: the order differs from the file order", K);
    hyp_loader_close(L1);
    hyp_loader_close(L8);
}

static void resume(int K, int rank, int world, int at, int prefetch, const char *src) {
    hyp_err e = {0};
    enum { N = 24 };
    batch a[N], b[N];
    hyp_loader *L = open_stream(src, strstr(src, ".txt") ? "%" : NULL, NULL, K, rank, world, prefetch, &e);
    hyp_loader_state st = {0};
    int ok = L != NULL;
    for (int k = 0; ok && k < N; k++) {
        ok = !hyp_loader_next_pos(L, a[k].in, a[k].tg, a[k].pos, &e);
        if (k + 1 == at) hyp_loader_get_state(L, &st);
    }
    hyp_loader_close(L);
    hyp_loader *R = open_stream(src, strstr(src, ".txt") ? "%" : NULL, NULL, K, rank, world, prefetch, &e);
    ok = ok && R && !hyp_loader_set_state(R, &st, &e) && !read_rows(R, N - at, b, &e);
    for (int k = 0; ok && k < N - at; k++) ok = !memcmp(&a[at + k], &b[k], sizeof b[k]);
    CHECK(ok, "resume %s K=%d rank %d/%d after batch %d (block %llu, row %llu, doc %llu, skip %llu)%s: the next %d batches are bit-identical %s", src, K, rank,
          world, at, (unsigned long long)st.epoch, (unsigned long long)st.position, (unsigned long long)st.stream[3],
          (unsigned long long)st.stream[5], prefetch ? " with prefetch" : "", N - at, ok ? "" : e.msg);
    hyp_loader_close(R);
}

/* Documents whose "D<i>:" marker appears in the rank's token stream (inputs of consecutive rows,
 * K = 1) during its first pass; checks they are exactly rank, rank + 2, ... in order. */
static void ranks(void) {
    hyp_err e = {0};
    int last[2] = {-1, -1}, count[2] = {0, 0}, ok = 1;
    for (int r = 0; r < 2; r++) {
        hyp_stream *s;
        char p[512];
        path(p, sizeof p, "corpus.jsonl.gz");
        if (hyp_stream_open(p, NULL, NULL, 1, T, 7, r, 2, &s, &e)) {
            ok = 0;
            break;
        }
        hyp_loader_state st = {0};
        size_t cap = 1 << 20, len = 0;
        char *txt = malloc(cap);
        int32_t in[T], tg[T];
        while (st.stream[0] == 0 && len + T < cap) { /* pass 0 */
            if (hyp_stream_produce(s, &st, 1, in, tg, NULL, &e)) {
                ok = 0;
                break;
            }
            if (st.stream[0] != 0) break; /* this row began the next pass */
            for (int k = 0; k < T; k++) txt[len++] = (char)in[k];
        }
        txt[len] = 0;
        for (char *q = txt; (q = strchr(q, 'D')); q++) {
            int id;
            if (sscanf(q, "D%d:", &id) != 1 || q[1] < '0' || q[1] > '9') continue;
            if (last[r] >= 0 && id < last[r]) break; /* the row that crossed into the next pass */
            if (id % 2 != r || (last[r] >= 0 && id != last[r] + 2) || (last[r] < 0 && id != r)) ok = 0;
            last[r] = id, count[r]++;
        }
        free(txt);
        hyp_stream_close(s);
    }
    CHECK(ok && count[0] > NDOC / 2 - 3 && count[1] > NDOC / 2 - 3,
          "2 ranks: rank 0's stream holds documents 0,2,..,%d (%d), rank 1's 1,3,..,%d (%d): disjoint, in order, none skipped", last[0], count[0], last[1],
          count[1]);
}

static void write_file(const char *name, const void *p, size_t n) {
    char q[512];
    path(q, sizeof q, name);
    FILE *f = fopen(q, "wb");
    fwrite(p, 1, n, f);
    fclose(f);
}

/* Opening and reading 100 batches of src; the error and its message. */
static void bad(const char *src, const char *sep, const char *want, const char *what) {
    hyp_err e = {0};
    hyp_stream *s = NULL;
    char p[1024];
    if (strchr(src, ',')) snprintf(p, sizeof p, "%s", src);
    else path(p, sizeof p, src);
    int rc = hyp_stream_open(p, sep, NULL, 4, T, 7, 0, 1, &s, &e);
    hyp_loader_state st = {0};
    int32_t in[B * T], tg[B * T];
    for (int k = 0; !rc && k < 100; k++) rc = hyp_stream_produce(s, &st, B, in, tg, NULL, &e);
    hyp_stream_close(s);
    CHECK(rc == HYP_EINPUT && strstr(e.msg, want) && strstr(e.msg, " — "), "bad input, %s: HYP_EINPUT \"%s\"", what, e.msg);
}

static void bad_inputs(void) {
    bad("missing.txt", NULL, "missing.txt: no such file", "missing file");
    bad("nothing*.jsonl", NULL, "matches no file", "a pattern without match");
    write_file("empty.txt", "", 0);
    bad("empty.txt", NULL, "empty.txt: the file is empty", "empty file");
    write_file("bin.dat", "text\0\1\2", 7);
    bad("bin.dat", NULL, "bin.dat: NUL byte at offset 4", "binary file (NUL at open)");
    char *big = malloc(100000);
    for (int i = 0; i < 100000; i++) big[i] = (char)('a' + i % 26);
    for (int i = 80; i < 100000; i += 81) big[i] = '\n';
    big[90000] = 0;
    write_file("late.txt", big, 100000);
    bad("late.txt", NULL, "NUL byte at offset 90000", "a NUL byte 90000 bytes into a file");
    free(big);
    char p[512];
    path(p, sizeof p, "corpus.jsonl");
    FILE *f = fopen(p, "r"), *g;
    path(p, sizeof p, "broken.jsonl");
    g = fopen(p, "w");
    char line[4096];
    for (int i = 0; fgets(line, sizeof line, f); i++) fputs(i == 30 ? "{\"text\": 3}\n" : line, g);
    fclose(f);
    fclose(g);
    bad("broken.jsonl", NULL, "broken.jsonl:31: no \"text\" string", "a .jsonl line without a text string (file:line)");
    write_file("notjson.jsonl", "{\"text\": \"a b c d e f g h i j k l m n o p q r s t u v w x y z\"}\n{oops\n", 66);
    bad("notjson.jsonl", NULL, "notjson.jsonl:2: not valid JSON", "a .jsonl line that is not JSON (file:line)");
    write_file("blank.jsonl", "{\"text\": \"\"}\n\n", 14);
    bad("blank.jsonl", NULL, "blank.jsonl: holds no document", "a .jsonl whose texts are all empty");
    write_file("short.txt", "too short", 9);
    bad("short.txt", NULL, "fewer than T + 1", "too little text for one row");
}

int main(void) {
    snprintf(g_dir, sizeof g_dir, "/tmp/hyp-stream-XXXXXX");
    if (!mkdtemp(g_dir)) return 1;
    make_corpus();
    equivalence(NULL, "byte");
    char gpt2[512];
    snprintf(gpt2, sizeof gpt2, "%s/assets/tokenizers/gpt2.tiktoken.gz", HYP_SOURCE_DIR);
    equivalence(gpt2, "gpt2");
    shuffle();
    resume(8, 0, 1, 5, 0, "corpus.txt");      /* mid-block: 20 rows = 2 blocks + 4 */
    resume(8, 0, 1, 6, 2, "corpus.txt");      /* at a block end (24 rows), prefetch */
    resume(7, 1, 2, 11, 2, "corpus.jsonl.gz"); /* rank 1 of 2, gz */
    resume(1, 0, 1, 13, 0, "corpus.jsonl");
    ranks();
    bad_inputs();
    for (int i = 0; i < NDOC; i++) free(g_doc[i]);
    rm_rf(g_dir);
    printf("%d passed, %d failed\n", g_pass, g_fail);
    return g_fail ? 1 : 0;
}
