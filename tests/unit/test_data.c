/* test_data.c — gen data's shard writer and the trainer's batch loader: shard headers, counts
 * and meta.json; loader determinism, epoch coverage, rank disjointness, shifted targets and
 * bit-exact resume; and every bad input (missing/empty dir, truncated, foreign, wrong-version and
 * out-of-vocab shards, NUL-byte and missing inputs, clobbering) refused with HYP_EINPUT and a
 * message naming the file. */
#include <cjson/cJSON.h>
#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include "data.h"
#include "fsio.h"
#include "rng.h"

#include "hyp_test.h"

static char g_dir[256];
static char *g_corpus; /* the concatenation of both inputs */
static size_t g_n;


static void write_file(const char *path, const void *data, size_t n) {
    FILE *f = fopen(path, "wb");
    fwrite(data, 1, n, f);
    fclose(f);
}

/* The whole file (NUL-terminated, freed by the caller), or NULL. */
static void *read_all(const char *path, size_t *n) {
    char *b;
    return hyp_fs_read_small(path, SIZE_MAX, &b, n, NULL) == HYP_OK ? b : NULL;
}

static void path2(char *out, const char *a, const char *b) {
    snprintf(out, 1024, "%s/%s", a, b);
}

/* Pseudo-text: random words, so every 65-byte window is unique with overwhelming probability. */
static void make_corpus(void) {
    g_n = 20000;
    g_corpus = malloc(g_n);
    hyp_rng r;
    hyp_rng_seed(&r, 42);
    for (size_t i = 0; i < g_n; i++) {
        uint64_t k = hyp_rng_below(&r, 30);
        g_corpus[i] = k < 26 ? (char)('a' + k) : k < 29 ? ' ' : '\n';
    }
    char p[1024];
    path2(p, g_dir, "a.txt");
    write_file(p, g_corpus, 12345);
    path2(p, g_dir, "b.txt");
    write_file(p, g_corpus + 12345, g_n - 12345);
}

static uint32_t rd32(const unsigned char *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* ---------------------------------------------------------------------------------------- */

static void test_prepare(const char *out) {
    char a[1024], b[1024];
    path2(a, g_dir, "a.txt");
    path2(b, g_dir, "b.txt");
    const char *in[2] = {a, b};
    hyp_data_opts o;
    hyp_data_opts_default(&o);
    CHECK(o.val_fraction == 0.05 && o.shard_tokens == 100000000ULL && o.vocab_size == 256 &&
              !o.overwrite,
          "default options: val 0.05, 1e8 tokens per shard, vocab 256, no overwrite");
    o.val_fraction = 0.1;
    o.shard_tokens = 5000;
    hyp_err e = {{0}};
    int rc = hyp_data_prepare(in, 2, out, &o, &e);
    CHECK(rc == HYP_OK, "prepares a 2-file corpus (%s)", e.msg);

    /* 18000 train tokens -> 5000, 5000, 5000, 3000; 2000 val tokens -> one shard */
    const char *names[5] = {"train_000000.bin", "train_000001.bin", "train_000002.bin",
                            "train_000003.bin", "val_000000.bin"};
    const uint32_t counts[5] = {5000, 5000, 5000, 3000, 2000};
    size_t off = 0;
    int headers_ok = 1, tokens_ok = 1;
    for (int i = 0; i < 5; i++) {
        char p[1024];
        path2(p, out, names[i]);
        size_t n = 0;
        unsigned char *s = read_all(p, &n);
        if (!s || n != 1024 + 2 * (size_t)counts[i] || rd32(s) != 20240520 || rd32(s + 4) != 1 ||
            rd32(s + 8) != counts[i]) {
            headers_ok = 0;
        } else {
            for (uint32_t k = 0; k < counts[i]; k++)
                if (s[1024 + 2 * k] != (unsigned char)g_corpus[off + k] || s[1024 + 2 * k + 1])
                    tokens_ok = 0;
        }
        off += counts[i];
        free(s);
    }
    CHECK(headers_ok, "shard headers: magic 20240520, version 1, token counts 5000/5000/5000/3000 "
          "+ val 2000, sizes match");
    CHECK(tokens_ok, "tokens are the corpus bytes in order (uint16 LE), val = the last 10%%");

    char p[1024];
    path2(p, out, "meta.json");
    size_t n;
    char *txt = read_all(p, &n);
    cJSON *m = cJSON_Parse(txt ? txt : "");
    free(txt);
    const cJSON *shards = cJSON_GetObjectItem(m, "shards");
    const cJSON *srcs = cJSON_GetObjectItem(m, "sources");
    CHECK(m && !strcmp(cJSON_GetObjectItem(m, "tokenizer")->valuestring, "byte") &&
              cJSON_GetObjectItem(m, "vocab_size")->valuedouble == 256 &&
              cJSON_GetObjectItem(m, "train_tokens")->valuedouble == 18000 &&
              cJSON_GetObjectItem(m, "val_tokens")->valuedouble == 2000,
          "meta.json: tokenizer byte, vocab_size 256, 18000 train + 2000 val tokens");
    CHECK(cJSON_GetArraySize(srcs) == 2 &&
              !strcmp(cJSON_GetObjectItem(cJSON_GetArrayItem(srcs, 0), "path")->valuestring, a) &&
              cJSON_GetObjectItem(cJSON_GetArrayItem(srcs, 1), "bytes")->valuedouble == 7655,
          "meta.json: source files and byte sizes");
    int sums_ok = cJSON_GetArraySize(shards) == 5;
    for (int i = 0; sums_ok && i < 5; i++) {
        const cJSON *s = cJSON_GetArrayItem(shards, i);
        char sp[1024];
        path2(sp, out, cJSON_GetObjectItem(s, "file")->valuestring);
        unsigned char *bytes = read_all(sp, &n);
        char hex[17];
        snprintf(hex, sizeof hex, "%016llx", (unsigned long long)XXH3_64bits(bytes, n));
        sums_ok = !strcmp(hex, cJSON_GetObjectItem(s, "xxh3_64")->valuestring) &&
                  cJSON_GetObjectItem(s, "tokens")->valuedouble == counts[i];
        free(bytes);
    }
    CHECK(sums_ok, "meta.json: each shard's token count and xxh3_64 checksum are right");
    cJSON_Delete(m);
    CHECK(hyp_data_verify(out, &e) == HYP_OK, "hyp_data_verify accepts the fresh output (%s)",
          e.msg);

    /* nothing left behind next to the output */
    DIR *d = opendir(g_dir);
    struct dirent *de;
    int stray = 0;
    while ((de = readdir(d)))
        if (strstr(de->d_name, ".tmp-")) stray = 1;
    closedir(d);
    CHECK(!stray, "no .tmp- directory is left next to the output");
}

static void test_defaults(void) {
    char a[1024], out[1024];
    path2(a, g_dir, "a.txt");
    path2(out, g_dir, "defaults");
    const char *in[1] = {a};
    hyp_err e = {{0}};
    int rc = hyp_data_prepare(in, 1, out, NULL, &e);
    hyp_loader *L = hyp_loader_open(out, "train", 1, 8, 0, 0, 1, &e);
    hyp_loader *V = hyp_loader_open(out, "val", 1, 8, 0, 0, 1, &e);
    /* 12345 bytes: val = round(617.25) = 617, train 11728, one shard each */
    CHECK(rc == HYP_OK && L && V && hyp_loader_num_shards(L) == 1 &&
              hyp_loader_total_tokens(L) == 11728 && hyp_loader_total_tokens(V) == 617,
          "NULL opts: one train shard of 11728 tokens and a val shard of the last 617 (5%%)");
    hyp_loader_close(L);
    hyp_loader_close(V);

    /* val_fraction 0: no val split */
    hyp_data_opts o;
    hyp_data_opts_default(&o);
    o.val_fraction = 0;
    path2(out, g_dir, "noval");
    rc = hyp_data_prepare(in, 1, out, &o, &e);
    V = hyp_loader_open(out, "val", 1, 8, 0, 0, 1, &e);
    CHECK(rc == HYP_OK && !V && strstr(e.msg, "no val shards"),
          "val_fraction 0 writes no val shard; opening val says so (%s)", e.msg);

    /* vocab above 65536: uint32 tokens, shard version 2 */
    o.vocab_size = 100000;
    path2(out, g_dir, "wide");
    rc = hyp_data_prepare(in, 1, out, &o, &e);
    char p[1100];
    snprintf(p, sizeof p, "%s/train_000000.bin", out);
    size_t n;
    unsigned char *s = read_all(p, &n);
    CHECK(rc == HYP_OK && s && rd32(s + 4) == 2 && n == 1024 + 4 * 12345 &&
              rd32(s + 1024) == (unsigned char)g_corpus[0],
          "vocab_size 100000 writes version-2 (uint32) shards");
    free(s);
    L = hyp_loader_open(out, "train", 2, 16, 0, 0, 1, &e);
    int32_t x[32], y[32];
    CHECK(L && hyp_loader_vocab_size(L) == 100000 && hyp_loader_next(L, x, y, &e) == HYP_OK,
          "the loader reads version-2 shards");
    hyp_loader_close(L);
}

static void test_stdin(void) {
    char a[1024], out[1024];
    path2(a, g_dir, "b.txt");
    path2(out, g_dir, "fromstdin");
    int saved = dup(0);
    int fd = open(a, O_RDONLY);
    dup2(fd, 0);
    close(fd);
    const char *in[1] = {"-"};
    hyp_err e = {{0}};
    int rc = hyp_data_prepare(in, 1, out, NULL, &e);
    dup2(saved, 0);
    close(saved);
    hyp_loader *L = hyp_loader_open(out, "train", 1, 8, 0, 0, 1, &e);
    char p[1100];
    snprintf(p, sizeof p, "%s/.stdin", out);
    CHECK(rc == HYP_OK && L && hyp_loader_total_tokens(L) == (g_n - 12345) - 383 &&
              access(p, F_OK) != 0,
          "\"-\" reads stdin (7655 bytes -> 7272 train tokens), leaving no spool file");
    hyp_loader_close(L);
}

/* Window id of a row (its inputs + final target), by search over the train stream. */
static long window_id(const int32_t *x, const int32_t *y, int T, long W) {
    for (long w = 0; w < W; w++) {
        const char *c = g_corpus + w * T;
        int same = 1;
        for (int t = 0; t < T && same; t++) same = x[t] == (unsigned char)c[t];
        if (same && y[T - 1] == (unsigned char)c[T]) return w;
    }
    return -1;
}

static void test_loader(const char *dir) {
    const int B = 4, T = 64;
    hyp_err e = {{0}};
    hyp_loader *L = hyp_loader_open(dir, "train", B, T, 1234, 0, 1, &e);
    CHECK(L != NULL, "opens the train split (%s)", e.msg);
    if (!L) return;
    const long W = (18000 - 1) / T;
    CHECK(hyp_loader_total_tokens(L) == 18000 && hyp_loader_windows(L) == (uint64_t)W &&
              hyp_loader_windows_per_rank(L) == (uint64_t)W && hyp_loader_num_shards(L) == 4 &&
              hyp_loader_vocab_size(L) == 256,
          "exposes 18000 tokens, %ld windows of T+1 = 65 (stride 64), 4 shards, vocab 256", W);

    int32_t x[4 * 64], y[4 * 64];
    /* epoch 0: the first W windows drawn are a permutation of all W windows */
    char *seen = calloc((size_t)W, 1);
    int shifted = 1, found = 1, once = 1;
    long drawn = 0;
    while (drawn < 2 * W) {
        if (hyp_loader_next(L, x, y, &e) != HYP_OK) break;
        for (int b = 0; b < B && drawn < 2 * W; b++, drawn++) {
            for (int t = 0; t + 1 < T; t++) shifted &= x[b * T + t + 1] == y[b * T + t];
            long w = window_id(x + b * T, y + b * T, T, W);
            if (w < 0) {
                found = 0;
                continue;
            }
            int ep = drawn < W ? 1 : 2;
            if (seen[w] != ep - 1) once = 0;
            seen[w] = (char)ep;
        }
    }
    int all = 1;
    for (long w = 0; w < W; w++) all &= seen[w] == 2;
    CHECK(shifted, "targets are the inputs shifted by one");
    CHECK(found, "every row is a window of the corpus at a multiple of T (incl. windows that "
          "span two shards)");
    CHECK(once && all, "each epoch covers every window exactly once (epochs 0 and 1, batches "
          "spanning the epoch boundary)");
    hyp_loader_state st;
    hyp_loader_get_state(L, &st);
    long batches = (2 * W + B - 1) / B, total = batches * B; /* 141 batches = 564 windows */
    CHECK(st.epoch == (uint64_t)(total / W) && st.position == (uint64_t)(total % W),
          "state after %ld windows: epoch %ld, position %ld (got %llu, %llu)", total, total / W,
          total % W, (unsigned long long)st.epoch, (unsigned long long)st.position);
    hyp_loader_close(L);
    free(seen);

    /* determinism */
    hyp_loader *A = hyp_loader_open(dir, "train", B, T, 7, 0, 1, &e);
    hyp_loader *Bl = hyp_loader_open(dir, "train", B, T, 7, 0, 1, &e);
    hyp_loader *C = hyp_loader_open(dir, "train", B, T, 8, 0, 1, &e);
    int same = 1, differs = 0;
    int32_t x2[4 * 64], y2[4 * 64], x3[4 * 64], y3[4 * 64];
    for (int i = 0; i < 100; i++) {
        hyp_loader_next(A, x, y, &e);
        hyp_loader_next(Bl, x2, y2, &e);
        hyp_loader_next(C, x3, y3, &e);
        same &= !memcmp(x, x2, sizeof x) && !memcmp(y, y2, sizeof y);
        differs |= memcmp(x, x3, sizeof x) != 0;
    }
    CHECK(same, "same seed -> the same 100 batches");
    CHECK(differs, "different seed -> different batches");

    /* resume: state after 37 batches, then 30 more (crossing the epoch end at 70.25 batches) */
    hyp_loader_close(A);
    A = hyp_loader_open(dir, "train", B, T, 7, 0, 1, &e);
    for (int i = 0; i < 60; i++) hyp_loader_next(A, x, y, &e);
    hyp_loader_get_state(A, &st);
    hyp_loader *R = hyp_loader_open(dir, "train", B, T, 7, 0, 1, &e);
    CHECK(hyp_loader_set_state(R, &st, &e) == HYP_OK, "set_state accepts a saved state");
    int resumed = 1;
    for (int i = 0; i < 30; i++) {
        hyp_loader_next(A, x, y, &e);
        hyp_loader_next(R, x2, y2, &e);
        resumed &= !memcmp(x, x2, sizeof x) && !memcmp(y, y2, sizeof y);
    }
    CHECK(resumed, "a loader restored from state(epoch 0, position 240) continues bit-exactly "
          "across the epoch boundary");
    hyp_loader_state bad = {.epoch = 0, .position = (uint64_t)W + 1};
    CHECK(hyp_loader_set_state(R, &bad, &e) == HYP_EINPUT && strstr(e.msg, "past the end"),
          "set_state refuses a position past the epoch (%s)", e.msg);
    hyp_loader_close(A);
    hyp_loader_close(Bl);
    hyp_loader_close(C);
    hyp_loader_close(R);

    /* ranks: disjoint, together all but W % world windows */
    const int world = 3;
    const long Wr = W / world;
    int *owner = malloc(sizeof(int) * (size_t)W);
    for (long w = 0; w < W; w++) owner[w] = -1;
    int disjoint = 1, ok_wr = 1;
    for (int r = 0; r < world; r++) {
        hyp_loader *Rk = hyp_loader_open(dir, "train", 1, T, 99, r, world, &e);
        ok_wr &= Rk && hyp_loader_windows_per_rank(Rk) == (uint64_t)Wr;
        for (long i = 0; Rk && i < Wr; i++) {
            hyp_loader_next(Rk, x, y, &e);
            long w = window_id(x, y, T, W);
            if (w < 0 || owner[w] != -1) disjoint = 0;
            else owner[w] = r;
        }
        hyp_loader_close(Rk);
    }
    long covered = 0;
    for (long w = 0; w < W; w++) covered += owner[w] != -1;
    CHECK(ok_wr, "world 3: each rank gets W / 3 = %ld windows per epoch", Wr);
    CHECK(disjoint && covered == world * Wr, "world 3: ranks' windows are disjoint and cover "
          "%ld of %ld windows", covered, W);
    /* the ranks' union is exactly the world-1 permutation's first world*Wr slots */
    hyp_loader *One = hyp_loader_open(dir, "train", 1, T, 99, 0, 1, &e);
    int interleave = 1;
    for (long i = 0; i < world * Wr; i++) {
        hyp_loader_next(One, x, y, &e);
        long w = window_id(x, y, T, W);
        interleave &= w >= 0 && owner[w] == (int)(i % world);
    }
    CHECK(interleave, "rank r takes permutation slots r, r + world, ... (same permutation as "
          "world 1)");
    hyp_loader_close(One);
    free(owner);

    /* val: sequential windows, reset repeats them */
    hyp_loader *V = hyp_loader_open(dir, "val", 2, T, 5, 0, 1, &e);
    const char *val = g_corpus + 18000;
    int seq = V != NULL;
    for (int i = 0; V && i < 3; i++) {
        hyp_loader_next(V, x, y, &e);
        for (int b = 0; b < 2; b++)
            for (int t = 0; t < T; t++) {
                long w = i * 2 + b;
                seq &= x[b * T + t] == (unsigned char)val[w * T + t] &&
                       y[b * T + t] == (unsigned char)val[w * T + t + 1];
            }
    }
    CHECK(seq, "val batches are the val windows in order (no shuffle)");
    hyp_loader_reset(V);
    hyp_loader_next(V, x2, y2, &e);
    int rs = 1;
    for (int t = 0; t < T; t++) rs &= x2[t] == (unsigned char)val[t];
    CHECK(rs, "hyp_loader_reset starts val over from window 0");
    hyp_loader_close(V);

    /* vocab vs model */
    L = hyp_loader_open(dir, "train", B, T, 1, 0, 1, &e);
    CHECK(hyp_loader_require_vocab(L, 128, &e) == HYP_EINPUT && strstr(e.msg, dir) &&
              strstr(e.msg, "256"),
          "require_vocab(128) refuses data with vocab_size 256 (%s)", e.msg);
    CHECK(hyp_loader_require_vocab(L, 50257, &e) == HYP_OK, "require_vocab(50257) accepts it");
    hyp_loader_close(L);
}

/* ---- bad inputs ---- */

static void expect_open_fails(const char *label, const char *dir, const char *split, int T,
                              const char *name, const char *what) {
    hyp_err e = {{0}};
    hyp_loader *L = (hyp_loader *)1;
    int rc = hyp_loader_open_rc(dir, split, 2, T, 0, 0, 1, &L, &e);
    CHECK(rc == HYP_EINPUT && L == NULL && strstr(e.msg, name) && strstr(e.msg, what),
          "loader refuses %s (%s)", label, e.msg);
}

static void write_shard(const char *path, uint32_t magic, uint32_t version, uint32_t ntok,
                        size_t actual_tokens, uint16_t fill) {
    FILE *f = fopen(path, "wb");
    uint32_t hdr[256] = {0};
    hdr[0] = magic;
    hdr[1] = version;
    hdr[2] = ntok;
    fwrite(hdr, 4, 256, f);
    for (size_t i = 0; i < actual_tokens; i++) fwrite(&fill, 2, 1, f);
    fclose(f);
}

static void test_bad_loader_inputs(const char *good) {
    char d[1024], p[1100];
    path2(d, g_dir, "missing-dir");
    expect_open_fails("a missing directory", d, "train", 8, d, "no such data directory");
    path2(d, g_dir, "empty-dir");
    mkdir(d, 0755);
    expect_open_fails("an empty directory", d, "train", 8, d, "no train shards");
    expect_open_fails("an unknown split", good, "test", 8, good, "unknown split");

    hyp_err e = {{0}};
    hyp_loader *L = NULL;
    CHECK(hyp_loader_open_rc(good, "train", 2, 8, 0, 3, 3, &L, &e) == HYP_EINPUT && !L &&
              strstr(e.msg, "rank 3 of world 3"),
          "loader refuses rank >= world (%s)", e.msg);
    expect_open_fails("T+1 beyond the split", good, "val", 5000, "val split has 2000 tokens",
                      "fewer than T+1");

    path2(d, g_dir, "truncated");
    mkdir(d, 0755);
    snprintf(p, sizeof p, "%s/train_000000.bin", d);
    write_shard(p, 20240520, 1, 1000, 990, 65);
    expect_open_fails("a truncated shard", d, "train", 8, p,
                      "truncated shard: header says 1000 tokens (2000 bytes) but the file has "
                      "1980 bytes after the header — re-run gen data");
    write_shard(p, 20240520, 1, 1000, 1001, 65);
    expect_open_fails("a shard with trailing bytes", d, "train", 8, p, "trailing bytes");
    FILE *f = fopen(p, "wb");
    fwrite("hello", 1, 5, f);
    fclose(f);
    expect_open_fails("a 5-byte shard", d, "train", 8, p, "shorter than the 1024-byte");

    path2(d, g_dir, "foreign");
    mkdir(d, 0755);
    snprintf(p, sizeof p, "%s/train_000000.bin", d);
    write_shard(p, 0x464c457f, 1, 100, 100, 65);
    expect_open_fails("a foreign file (bad magic)", d, "train", 8, p, "not a token shard");

    path2(d, g_dir, "version");
    mkdir(d, 0755);
    snprintf(p, sizeof p, "%s/train_000000.bin", d);
    write_shard(p, 20240520, 7, 100, 100, 65);
    expect_open_fails("an unknown shard version", d, "train", 8, p, "unsupported shard version 7");

    /* out of vocabulary: a token 300 in a shard whose meta.json says vocab 256 */
    path2(d, g_dir, "oov");
    mkdir(d, 0755);
    snprintf(p, sizeof p, "%s/train_000000.bin", d);
    write_shard(p, 20240520, 1, 100, 100, 300);
    char mp[1100];
    snprintf(mp, sizeof mp, "%s/meta.json", d);
    const char *meta = "{\"tokenizer\":\"byte\",\"vocab_size\":256}";
    f = fopen(mp, "w");
    fputs(meta, f);
    fclose(f);
    L = hyp_loader_open(d, "train", 1, 8, 0, 0, 1, &e);
    int32_t x[8], y[8];
    int rc = L ? hyp_loader_next(L, x, y, &e) : -1;
    CHECK(rc == HYP_EINPUT && strstr(e.msg, p) && strstr(e.msg, "token 300") &&
              strstr(e.msg, "outside the vocabulary"),
          "an out-of-vocab token fails the batch with HYP_EINPUT naming the shard (%s)", e.msg);
    hyp_loader_state st;
    if (L) hyp_loader_get_state(L, &st);
    CHECK(L && st.position == 0, "a failed batch does not advance the loader");
    hyp_loader_close(L);
    /* ...and with no meta.json the model's vocabulary bounds tokens */
    unlink(mp);
    L = hyp_loader_open(d, "train", 1, 8, 0, 0, 1, &e);
    CHECK(L && hyp_loader_vocab_size(L) == 0 && hyp_loader_next(L, x, y, &e) == HYP_OK,
          "without meta.json, token 300 is legal for the uint16 format");
    rc = L ? hyp_loader_require_vocab(L, 256, &e) : -1;
    rc = rc == HYP_OK ? hyp_loader_next(L, x, y, &e) : rc;
    CHECK(rc == HYP_EINPUT && strstr(e.msg, "model's vocab_size"),
          "after require_vocab(256) token 300 is refused (%s)", e.msg);
    hyp_loader_close(L);

    /* meta.json disagreeing with a shard header */
    path2(d, g_dir, "mixed");
    mkdir(d, 0755);
    snprintf(p, sizeof p, "%s/train_000000.bin", d);
    write_shard(p, 20240520, 1, 100, 100, 65);
    snprintf(mp, sizeof mp, "%s/meta.json", d);
    f = fopen(mp, "w");
    fputs("{\"vocab_size\":256,\"shards\":[{\"file\":\"train_000000.bin\",\"split\":\"train\","
          "\"tokens\":200},{\"file\":\"train_000001.bin\",\"split\":\"train\",\"tokens\":5}]}",
          f);
    fclose(f);
    expect_open_fails("a shard whose count disagrees with meta.json", d, "train", 8, p,
                      "meta.json says 200");

    /* corruption that keeps the header valid is caught by hyp_data_verify */
    char cp[1100];
    path2(d, g_dir, "corrupt");
    const char *in[1] = {cp};
    snprintf(cp, sizeof cp, "%s/a.txt", g_dir);
    rc = hyp_data_prepare(in, 1, d, NULL, &e);
    snprintf(p, sizeof p, "%s/train_000000.bin", d);
    int fd = open(p, O_RDWR);
    unsigned char c = 'Z';
    rc = pwrite(fd, &c, 1, 1024 + 2 * 50) == 1 ? HYP_OK : -1;
    close(fd);
    rc = hyp_data_verify(d, &e);
    CHECK(rc == HYP_EINPUT && strstr(e.msg, p) && strstr(e.msg, "checksum mismatch"),
          "hyp_data_verify detects a changed token (%s)", e.msg);
}

static void test_bad_prepare_inputs(const char *good) {
    char a[1024], p[1100], out[1024];
    path2(a, g_dir, "a.txt");
    hyp_err e = {{0}};

    /* NUL byte */
    path2(p, g_dir, "binary.txt");
    write_file(p, "some text\0more", 14);
    path2(out, g_dir, "out-nul");
    const char *in1[2] = {a, p};
    int rc = hyp_data_prepare(in1, 2, out, NULL, &e);
    CHECK(rc == HYP_EINPUT && strstr(e.msg, p) && strstr(e.msg, "NUL byte at offset 9") &&
              strstr(e.msg, "not a text file"),
          "a NUL-byte input is refused, naming the file and offset (%s)", e.msg);
    struct stat st;
    CHECK(stat(out, &st) != 0, "a refused prepare leaves no output directory");
    DIR *d = opendir(g_dir);
    struct dirent *de;
    int stray = 0;
    while ((de = readdir(d)))
        if (strstr(de->d_name, ".tmp-")) stray = 1;
    closedir(d);
    CHECK(!stray, "...and no .tmp- directory");

    path2(p, g_dir, "nope.txt");
    const char *in2[1] = {p};
    rc = hyp_data_prepare(in2, 1, out, NULL, &e);
    CHECK(rc == HYP_EINPUT && strstr(e.msg, p) && strstr(e.msg, "no such file"),
          "a missing input is refused (%s)", e.msg);

    path2(p, g_dir, "empty.txt");
    write_file(p, "", 0);
    rc = hyp_data_prepare(in2, 1, out, NULL, &e);
    CHECK(rc == HYP_EINPUT && strstr(e.msg, p) && strstr(e.msg, "empty"),
          "an empty input is refused (%s)", e.msg);

    const char *in3[1] = {g_dir};
    rc = hyp_data_prepare(in3, 1, out, NULL, &e);
    CHECK(rc == HYP_EINPUT && strstr(e.msg, "is a directory"), "a directory input is refused "
          "(%s)", e.msg);

    path2(p, g_dir, "tiny.txt");
    write_file(p, "x", 1);
    rc = hyp_data_prepare(in2, 1, out, NULL, &e);
    CHECK(rc == HYP_EINPUT && strstr(e.msg, "too few"), "a 1-byte corpus cannot be split "
          "(%s)", e.msg);

    const char *ina[1] = {a};
    hyp_data_opts o;
    hyp_data_opts_default(&o);
    o.val_fraction = 1.0;
    rc = hyp_data_prepare(ina, 1, out, &o, &e);
    CHECK(rc == HYP_EINPUT && strstr(e.msg, "val_fraction"), "val_fraction 1 is refused");
    hyp_data_opts_default(&o);
    o.vocab_size = 100;
    rc = hyp_data_prepare(ina, 1, out, &o, &e);
    CHECK(rc == HYP_EINPUT && strstr(e.msg, "vocab_size 100"), "vocab_size < 256 is refused");

    /* unwritable outdir: its parent is a regular file */
    snprintf(out, sizeof out, "%s/a.txt/sub/out", g_dir);
    rc = hyp_data_prepare(ina, 1, out, NULL, &e);
    CHECK(rc == HYP_EINPUT && strstr(e.msg, "a.txt"), "an unwritable outdir is refused (%s)",
          e.msg);

    /* clobbering */
    char meta[1100];
    snprintf(meta, sizeof meta, "%s/meta.json", good);
    size_t n1, n2;
    char *before = read_all(meta, &n1);
    rc = hyp_data_prepare(ina, 1, good, NULL, &e);
    char *after = read_all(meta, &n2);
    CHECK(rc == HYP_EINPUT && strstr(e.msg, good) && strstr(e.msg, "not empty") &&
              n1 == n2 && !memcmp(before, after, n1),
          "refuses to clobber an existing output, leaving it untouched (%s)", e.msg);
    free(after);
    hyp_data_opts_default(&o);
    o.overwrite = 1;
    path2(out, g_dir, "replace-me");
    const char *inb[1] = {a};
    rc = hyp_data_prepare(inb, 1, out, NULL, &e);
    o.val_fraction = 0.5;
    rc = rc == HYP_OK ? hyp_data_prepare(inb, 1, out, &o, &e) : rc;
    hyp_loader *V = hyp_loader_open(out, "val", 1, 8, 0, 0, 1, &e);
    CHECK(rc == HYP_OK && V && hyp_loader_total_tokens(V) == 6173,
          "with overwrite it replaces a previous output (%s)", e.msg);
    hyp_loader_close(V);
    snprintf(p, sizeof p, "%s/notes.txt", out);
    write_file(p, "mine", 4);
    rc = hyp_data_prepare(inb, 1, out, &o, &e);
    CHECK(rc == HYP_EINPUT && strstr(e.msg, "notes.txt"),
          "even with overwrite it refuses a directory holding other files (%s)", e.msg);
    free(before);

    /* an existing empty directory is fine */
    path2(out, g_dir, "empty-out");
    mkdir(out, 0755);
    rc = hyp_data_prepare(inb, 1, out, NULL, &e);
    CHECK(rc == HYP_OK, "an existing empty outdir is used (%s)", e.msg);
}

int main(void) {
    snprintf(g_dir, sizeof g_dir, "/tmp/hyp_test_data_XXXXXX");
    if (!mkdtemp(g_dir)) {
        perror("mkdtemp");
        return 1;
    }
    make_corpus();
    char good[1024];
    path2(good, g_dir, "data/tiny"); /* parent "data" does not exist yet */
    test_prepare(good);
    test_defaults();
    test_stdin();
    test_loader(good);
    test_bad_loader_inputs(good);
    test_bad_prepare_inputs(good);
    rm_rf(g_dir);
    free(g_corpus);
    printf("%d passed, %d failed\n", g_pass, g_fail);
    return g_fail ? 1 : 0;
}
