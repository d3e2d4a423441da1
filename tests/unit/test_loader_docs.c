/* test_loader_docs.c — the loader side of the document contract (docs_contract: S.docs sidecars)
 * and the v2128 prefetch thread (runtime/data/data.c), on shards written here:
 *   v2126 positions: every window's positions against a brute force over the document starts
 *     (documents cut by the window start at 0 in the row; a document that starts at a shard's
 *     first token; shards of the split with and without sidecars); without any sidecar exactly
 *     t (today's one stream), and the tokens are the same with or without sidecars;
 *   bad sidecars (magic, version, size, first offset, order, past the shard, meta.json's docs
 *     count and xxh3) are refused with HYP_EINPUT naming the .docs file;
 *   v2128: with a depth-3 prefetch, 3 epochs of batches (tokens, targets, positions) and the
 *     state after each are identical to direct reads; set_state in the middle restarts the
 *     thread there; an error (a token outside the model's vocabulary) comes back at its batch
 *     with the state unchanged; with HYP_DATA_SLOW_READ_MS=20 and 50 ms of "compute" between
 *     batches the mean wait for a batch drops from >= 20 ms (direct) to under a fifth of it (~0.02
 *     ms unloaded; the margin is for a loaded machine, where the thread waits to be scheduled).
 */
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "data.h"

#include "hyp_test.h"

static char g_dir[256];

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static void put32(FILE *f, uint32_t v) {
    unsigned char b[4] = {(unsigned char)v, (unsigned char)(v >> 8), (unsigned char)(v >> 16), (unsigned char)(v >> 24)};
    fwrite(b, 1, 4, f);
}

/* A uint16 shard of n tokens: token i = (i * 7 + seed) % 251. */
static void write_shard(const char *name, int n, int seed) {
    char p[512];
    snprintf(p, sizeof p, "%s/%s", g_dir, name);
    FILE *f = fopen(p, "wb");
    put32(f, HYP_SHARD_MAGIC);
    put32(f, 1);
    put32(f, (uint32_t)n);
    for (int i = 3; i < HYP_SHARD_HEADER_INTS; i++) put32(f, 0);
    for (int i = 0; i < n; i++) {
        uint16_t t = (uint16_t)((i * 7 + seed) % 251);
        fwrite(&t, 2, 1, f);
    }
    fclose(f);
}

/* A sidecar with header fields (magic, version, count) and the given offsets. */
static void write_docs_raw(const char *name, uint32_t magic, uint32_t version, uint32_t count, const uint64_t *off, int n) {
    char p[512];
    snprintf(p, sizeof p, "%s/%s", g_dir, name);
    FILE *f = fopen(p, "wb");
    put32(f, magic);
    put32(f, version);
    put32(f, count);
    for (int i = 3; i < HYP_SHARD_HEADER_INTS; i++) put32(f, 0);
    for (int i = 0; i < n; i++) {
        put32(f, (uint32_t)off[i]);
        put32(f, (uint32_t)(off[i] >> 32));
    }
    fclose(f);
}

static void write_docs(const char *name, const uint64_t *off, int n) {
    write_docs_raw(name, HYP_DOCS_MAGIC, 1, (uint32_t)n, off, n);
}

static void rm(const char *name) {
    char p[512];
    snprintf(p, sizeof p, "%s/%s", g_dir, name);
    unlink(p);
}

/* Two val shards: 300 tokens with documents at 0 37 38 100 250, 200 tokens without a sidecar
 * (one stream, continuing the previous document) — or with {0, 120} when second_docs. */
static const uint64_t DOCS_A[] = {0, 37, 38, 100, 250};
static const uint64_t DOCS_B[] = {0, 120};

static void make_val(int with_docs, int second_docs) {
    write_shard("val_000000.bin", 300, 1);
    write_shard("val_000001.bin", 200, 2);
    rm("val_000000.docs");
    rm("val_000001.docs");
    if (with_docs) write_docs("val_000000.docs", DOCS_A, 5);
    if (with_docs && second_docs) write_docs("val_000001.docs", DOCS_B, 2);
}

/* The brute-force position of global token g in a window starting at g0. */
static int32_t brute_pos(uint64_t g0, uint64_t g, int second_docs) {
    uint64_t starts[8];
    int n = 0;
    for (int i = 0; i < 5; i++) starts[n++] = DOCS_A[i];
    if (second_docs)
        for (int i = 0; i < 2; i++) starts[n++] = 300 + DOCS_B[i];
    uint64_t cur = g0;
    for (int i = 0; i < n; i++)
        if (starts[i] <= g && starts[i] > cur) cur = starts[i];
    return (int32_t)(g - cur);
}

static void positions_cases(void) {
    const int B = 3, T = 16;
    for (int second = 0; second < 2; second++) {
        make_val(1, second);
        hyp_err e;
        hyp_loader *L = hyp_loader_open(g_dir, "val", B, T, 1, 0, 1, &e);
        CHECK(L != NULL, "open with sidecars (%s)", L ? "ok" : e.msg);
        if (!L) return;
        CHECK(hyp_loader_has_docs(L) && hyp_loader_num_docs(L) == (uint64_t)(5 + 2 * second),
              "sidecars read: %llu documents", (unsigned long long)hyp_loader_num_docs(L));
        uint64_t W = hyp_loader_windows(L);
        int bad = 0, batches = (int)(W / B);
        int32_t in[48], tg[48], pos[48];
        for (int k = 0; k < batches; k++) {
            if (hyp_loader_next_pos(L, in, tg, pos, &e) != HYP_OK) {
                bad++;
                break;
            }
            for (int b = 0; b < B; b++) {
                uint64_t g0 = (uint64_t)(k * B + b) * T; /* val: windows in order */
                for (int t = 0; t < T; t++)
                    if (pos[b * T + t] != brute_pos(g0, g0 + t, second)) bad++;
            }
        }
        check(bad == 0, "test_v2126_loader_positions_restart_at_document_starts", "%d windows, second shard %s sidecar, %d mismatches",
              batches * B, second ? "with" : "without", bad);
        hyp_loader_close(L);
    }
    /* no sidecars: positions are t, and tokens equal those read with sidecars */
    make_val(1, 1);
    hyp_err e;
    hyp_loader *A = hyp_loader_open(g_dir, "val", B, T, 1, 0, 1, &e);
    int32_t ia[48], ta[48], pa[48], ib[48], tb[48], pb[48];
    hyp_loader_next_pos(A, ia, ta, pa, &e);
    hyp_loader_close(A);
    make_val(0, 0);
    hyp_loader *N = hyp_loader_open(g_dir, "val", B, T, 1, 0, 1, &e);
    CHECK(N && !hyp_loader_has_docs(N), "no sidecar: no documents");
    if (!N) return;
    hyp_loader_next_pos(N, ib, tb, pb, &e);
    int same = !memcmp(ia, ib, sizeof ia) && !memcmp(ta, tb, sizeof ta), plain = 1;
    for (int i = 0; i < B * T; i++) plain &= pb[i] == i % T;
    check(same && plain, "test_v2126_loader_without_sidecars_is_one_stream", "positions = t: %s; same tokens: %s", plain ? "yes" : "no",
          same ? "yes" : "no");
    hyp_loader_close(N);
}

static void expect_refused(const char *what, const char *needle) {
    hyp_err e;
    e.msg[0] = 0;
    hyp_loader *L = NULL;
    int rc = hyp_loader_open_rc(g_dir, "val", 2, 8, 1, 0, 1, &L, &e);
    char name[160];
    snprintf(name, sizeof name, "test_v2126_bad_sidecar_%s", what);
    check(rc == HYP_EINPUT && !L && strstr(e.msg, needle) != NULL, name, "%s", e.msg);
    hyp_loader_close(L);
}

static void bad_sidecar_cases(void) {
    make_val(1, 0);
    write_docs_raw("val_000000.docs", 12345, 1, 5, DOCS_A, 5);
    expect_refused("magic", "val_000000.docs: not a document sidecar");
    write_docs_raw("val_000000.docs", HYP_DOCS_MAGIC, 2, 5, DOCS_A, 5);
    expect_refused("version", "val_000000.docs: not a document sidecar");
    write_docs_raw("val_000000.docs", HYP_DOCS_MAGIC, 1, 6, DOCS_A, 5);
    expect_refused("truncated", "header says 6 documents");
    const uint64_t first[] = {3, 40};
    write_docs("val_000000.docs", first, 2);
    expect_refused("first_not_0", "starts at token 3");
    const uint64_t order[] = {0, 40, 40};
    write_docs("val_000000.docs", order, 3);
    expect_refused("not_ascending", "after the previous one");
    const uint64_t past[] = {0, 300};
    write_docs("val_000000.docs", past, 2);
    expect_refused("past_the_shard", "inside the shard");
    /* meta.json's docs count and hash (the writer's side of the contract) */
    make_val(1, 0);
    char p[512];
    snprintf(p, sizeof p, "%s/meta.json", g_dir);
    FILE *f = fopen(p, "w");
    fprintf(f, "{\"vocab_size\": 256, \"shards\": [{\"file\": \"val_000000.bin\", \"split\": \"val\", \"tokens\": 300, "
               "\"docs\": 4}]}\n");
    fclose(f);
    expect_refused("meta_count", "val_000000.docs: lists 5 documents but meta.json says 4");
    f = fopen(p, "w");
    fprintf(f, "{\"vocab_size\": 256, \"shards\": [{\"file\": \"val_000000.bin\", \"split\": \"val\", \"tokens\": 300, "
               "\"docs\": 5, \"docs_xxh3_64\": \"0123456789abcdef\"}]}\n");
    fclose(f);
    expect_refused("meta_hash", "val_000000.docs: xxh3_64 is");
    f = fopen(p, "w");
    fprintf(f, "{\"vocab_size\": 256, \"shards\": [{\"file\": \"val_000001.bin\", \"split\": \"val\", \"tokens\": 200, "
               "\"docs\": 2}]}\n");
    fclose(f);
    expect_refused("meta_lists_missing_sidecar", "val_000001.docs: missing, but meta.json lists 2");
    unlink(p);
}

/* ---- v2128 ---- */

static void train_shards(void) {
    write_shard("train_000000.bin", 1000, 3);
    write_shard("train_000001.bin", 777, 4);
    const uint64_t d0[] = {0, 10, 200, 201, 640}, d1[] = {0, 5, 300};
    write_docs("train_000000.docs", d0, 5);
    write_docs("train_000001.docs", d1, 3);
}

static void prefetch_cases(void) {
    train_shards();
    const int B = 4, T = 32;
    hyp_err e;
    hyp_loader *A = hyp_loader_open(g_dir, "train", B, T, 42, 0, 1, &e);
    hyp_loader *P = hyp_loader_open(g_dir, "train", B, T, 42, 0, 1, &e);
    if (!A || !P) {
        CHECK(0, "open train: %s", e.msg);
        return;
    }
    CHECK(hyp_loader_prefetch(P, 3, &e) == HYP_OK, "prefetch depth 3 starts");
    int n = (int)(3 * hyp_loader_windows(A) / B) + 1, diff = 0, sdiff = 0;
    int32_t ia[128], ta[128], pa[128], ib[128], tb[128], pb[128];
    hyp_loader_state sa, sb, mid = {.epoch = 0};
    for (int k = 0; k < n; k++) {
        hyp_loader_next_pos(A, ia, ta, pa, &e);
        hyp_loader_next_pos(P, ib, tb, pb, &e);
        diff += memcmp(ia, ib, sizeof ia) != 0 || memcmp(ta, tb, sizeof ta) != 0 || memcmp(pa, pb, sizeof pa) != 0;
        hyp_loader_get_state(A, &sa);
        hyp_loader_get_state(P, &sb);
        sdiff += sa.epoch != sb.epoch || sa.position != sb.position;
        if (k == n / 2) mid = sa;
    }
    check(diff == 0 && sdiff == 0 && sa.epoch >= 2, "test_v2128_prefetch_batches_and_state_identical", "%d batches over %llu epochs: %d differ, %d states differ",
          n, (unsigned long long)sa.epoch + 1, diff, sdiff);
    /* resume in the middle (a checkpoint's state) on both */
    hyp_loader_set_state(A, &mid, &e);
    hyp_loader_set_state(P, &mid, &e);
    diff = 0;
    for (int k = 0; k < 20; k++) {
        hyp_loader_next_pos(A, ia, ta, pa, &e);
        hyp_loader_next_pos(P, ib, tb, pb, &e);
        diff += memcmp(ia, ib, sizeof ia) != 0 || memcmp(pa, pb, sizeof pa) != 0;
    }
    check(diff == 0, "test_v2128_prefetch_set_state_restarts_there", "20 batches after set_state: %d differ", diff);
    /* an error at its batch, the state unchanged */
    hyp_loader *V = hyp_loader_open(g_dir, "train", B, T, 42, 0, 1, &e);
    hyp_loader_require_vocab(V, 100, &e); /* tokens go up to 250 */
    hyp_loader_prefetch(V, 2, &e);
    hyp_loader_state before, after;
    hyp_loader_get_state(V, &before);
    e.msg[0] = 0;
    int rc = hyp_loader_next_pos(V, ib, tb, pb, &e);
    hyp_loader_get_state(V, &after);
    int rc2 = hyp_loader_next_pos(V, ib, tb, pb, &e);
    check(rc == HYP_EINPUT && rc2 == HYP_EINPUT && strstr(e.msg, "outside the vocabulary") && after.position == before.position,
          "test_v2128_prefetch_error_at_its_batch", "%s", e.msg);
    hyp_loader_close(V);
    hyp_loader_close(A);
    hyp_loader_close(P);

    /* a slow read (20 ms per batch) under 50 ms of compute per step */
    setenv("HYP_DATA_SLOW_READ_MS", "20", 1);
    double wait[2];
    for (int pf = 0; pf < 2; pf++) {
        hyp_loader *S = hyp_loader_open(g_dir, "train", B, T, 42, 0, 1, &e);
        if (pf) hyp_loader_prefetch(S, 2, &e);
        struct timespec c = {0, 50 * 1000000L};
        nanosleep(&c, NULL); /* the trainer's start-up */
        double w = 0;
        for (int k = 0; k < 10; k++) {
            double t0 = now();
            hyp_loader_next_pos(S, ib, tb, pb, &e);
            w += now() - t0;
            nanosleep(&c, NULL); /* the step's compute */
        }
        wait[pf] = w / 10;
        hyp_loader_close(S);
    }
    unsetenv("HYP_DATA_SLOW_READ_MS");
    check(wait[0] >= 0.019 && wait[1] < 0.2 * wait[0], "test_v2128_prefetch_hides_a_slow_read", "mean wait per batch: direct %.2f ms, prefetch %.3f ms",
          1e3 * wait[0], 1e3 * wait[1]);
}

int main(void) {
    snprintf(g_dir, sizeof g_dir, "/tmp/hyp_test_loader_docs_%d", (int)getpid());
    mkdir(g_dir, 0755);
    positions_cases();
    bad_sidecar_cases();
    prefetch_cases();
    rm_rf(g_dir);
    printf("%d passed, %d failed\n", g_pass, g_fail);
    return g_fail ? 1 : 0;
}
