/* test_pack_rows_v2126_v2127.c — the loader's row layouts that are not T-token windows, on a
 * synthetic corpus written by the real `gen data` path (hyp_data_prepare, --doc-sep %: documents of
 * 2..420 byte tokens, T = 64, so some documents are longer than a row):
 *
 *   v2126 best-fit-decreasing packing (hyp_loader_pack_rows):
 *     1. over one epoch every document appears exactly once, whole, inside one row — a document
 *        longer than T+1 as its chunks of T+1 tokens (stride T), each whole in one row — with
 *        positions 0.. restarting at it, targets = its next tokens (-1 at its last token); the
 *        padded tail is token 0 / target -1 / position 0; the padding counted in the rows equals
 *        the loader's layout; max_docs_per_seq bounds the documents of a row;
 *     2. the padding fraction of best-fit rows vs one document per row (a padding trainer) and vs
 *        contiguous windows (0), printed;
 *   v2127 dynamic batching (hyp_loader_dynamic):
 *     3. every batch holds rows of one length bucket (T, T/2, ...), rows x bucket <= token_budget
 *        (or 1 row), rows <= B; every document (chunk) exactly once, one per row, from slot 0; the
 *        padding drops against fixed batches (buckets = 1); each epoch regroups a bucket's documents
 *        into its batches (same shapes, different members);
 *   both: 4. resume: a fresh loader set to the state after k batches gives the same next batches
 *        (tokens, targets, positions, shape), and with prefetch the same batches as direct reads;
 *        5. bad parameters are refused with HYP_EINPUT;
 *   the trainer step on the real plans (gen --enable packing / dynamic-batching, model pack-gpt2):
 *     6. v2126: a packed row with a padded tail read from the loader: its loss = the token-weighted
 *        mean of its documents' losses run alone, its gradients = the sum of theirs;
 *     7. v2127: a dynamic batch read from the loader (exec_reshape to its shape): the gradient and
 *        loss equal those of the same documents run one by one, each as its own 1 x (len-1)
 *        batch, under the same token-weighted loss scale (the step's gradient does not depend on
 *        how its tokens are grouped). Tolerances as test_packing_v2126 (fp32). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "data.h"
#include "exec.h"
#include "plan.h"
#include "rng.h"

#include "hyp_test.h"
#include "hyp_test_trainer.h"

#define T_ 64
#define NDOC 260

static char g_tmp[256];
static int32_t *g_tok;    /* the train stream */
static uint64_t g_ntok;
static uint64_t *g_start; /* document starts (the sidecar) */
static uint64_t g_ndocs;

typedef struct {
    const int32_t *in, *tg; /* a piece's n-1 inputs and n-1 targets */
    int n;                  /* tokens of the piece */
} piece;

static int cmp_piece(const void *a, const void *b) {
    const piece *x = a, *y = b;
    if (x->n != y->n) return x->n < y->n ? -1 : 1;
    for (int i = 0; i < x->n - 1; i++) {
        if (x->in[i] != y->in[i]) return x->in[i] < y->in[i] ? -1 : 1;
        if (x->tg[i] != y->tg[i]) return x->tg[i] < y->tg[i] ? -1 : 1;
    }
    return 0;
}

/* The expected pieces (pack.h's rule, written again here): documents of <= T+1 tokens whole,
 * longer ones as chunks [kT, kT+T] of >= 2 tokens. in/tg point into the stream. */
static piece *expected_pieces(int T, uint64_t *n_out) {
    piece *p = malloc(sizeof *p * (g_ntok + 1));
    uint64_t n = 0;
    for (uint64_t d = 0; d < g_ndocs; d++) {
        uint64_t s = g_start[d], e = d + 1 < g_ndocs ? g_start[d + 1] : g_ntok;
        for (uint64_t c = s; e - c >= 2; c += (uint64_t)T) {
            int len = (int)(e - c < (uint64_t)T + 1 ? e - c : (uint64_t)T + 1);
            p[n++] = (piece){g_tok + c, g_tok + c + 1, len};
            if (c + (uint64_t)len >= e) break;
        }
    }
    *n_out = n;
    return p;
}

static int read_file(const char *path, uint8_t **buf, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return -1;
    fseek(f, 0, SEEK_END);
    *n = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    *buf = malloc(*n);
    size_t r = fread(*buf, 1, *n, f);
    fclose(f);
    return r == *n ? 0 : -1;
}

/* The corpus: NDOC documents of random lowercase text, lengths 1..420 (skewed short), '%' lines
 * between them; then the shard and sidecar read back as the reference stream. */
static int make_data(const char *dir) {
    char txt[512];
    snprintf(txt, sizeof txt, "%s/corpus.txt", g_tmp);
    FILE *f = fopen(txt, "w");
    hyp_rng r;
    hyp_rng_seed2(&r, 7, 3);
    for (int d = 0; d < NDOC; d++) {
        int u = (int)hyp_rng_below(&r, 100), len = u < 70 ? 1 + (int)hyp_rng_below(&r, 60) : u < 90 ? 40 + (int)hyp_rng_below(&r, 100) : 100 + (int)hyp_rng_below(&r, 320);
        for (int i = 0; i < len; i++) fputc('a' + (int)hyp_rng_below(&r, 26), f);
        fputs("\n%\n", f);
    }
    fclose(f);
    hyp_data_opts o;
    hyp_data_opts_default(&o);
    o.val_fraction = 0;
    o.doc_sep = "%";
    hyp_err e;
    const char *in[1] = {txt};
    if (hyp_data_prepare(in, 1, dir, &o, &e) != HYP_OK) {
        printf("gen data: %s\n", e.msg);
        return -1;
    }
    char path[600];
    uint8_t *b;
    size_t n;
    snprintf(path, sizeof path, "%s/train_000000.bin", dir);
    if (read_file(path, &b, &n)) return -1;
    g_ntok = (uint64_t)((const int32_t *)(void *)b)[2];
    g_tok = malloc(sizeof *g_tok * g_ntok);
    for (uint64_t i = 0; i < g_ntok; i++) g_tok[i] = b[1024 + 2 * i] | b[1024 + 2 * i + 1] << 8;
    free(b);
    snprintf(path, sizeof path, "%s/train_000000.docs", dir);
    if (read_file(path, &b, &n)) return -1;
    g_ndocs = (uint64_t)((const int32_t *)(void *)b)[2];
    g_start = malloc(sizeof *g_start * g_ndocs);
    memcpy(g_start, b + 1024, sizeof *g_start * g_ndocs);
    free(b);
    return 0;
}

/* Splits one row (Tr inputs) into its documents (runs of consecutive positions from 0); appends
 * them to *got; returns -1 on a malformed row, else the padded slots; *ndoc = documents. */
static int split_row(const int32_t *in, const int32_t *tg, const int32_t *pos, int Tr, piece *got, uint64_t *ng,
                     int *ndoc, int *from_zero_only) {
    int t = 0, pad = 0;
    *ndoc = 0;
    while (t < Tr) {
        if (pos[t] != 0) return -1;
        int s = t;
        while (t + 1 < Tr && pos[t + 1] == pos[t] + 1) t++;
        int m = t - s + 1; /* inputs of this run */
        t++;
        int preds = 0;
        while (preds < m && tg[s + preds] >= 0) preds++;
        if (preds == 0) { /* padding: token 0, target -1, alone */
            if (m != 1 || in[s] != 0) return -1;
            pad++;
            continue;
        }
        if (pad) return -1; /* padding only at the tail */
        if (preds < m - 1) return -1; /* only the last input may lack a target */
        for (int i = s; i + 1 < s + m; i++)
            if (tg[i] != in[i + 1]) return -1;
        if (s > 0 && *from_zero_only) *from_zero_only = 0;
        got[(*ng)++] = (piece){in + s, tg + s, preds + 1};
        (*ndoc)++;
    }
    return pad;
}

static int same_pieces(piece *got, uint64_t ng, piece *want, uint64_t nw) {
    if (ng != nw) return 0;
    qsort(got, ng, sizeof *got, cmp_piece);
    qsort(want, nw, sizeof *want, cmp_piece);
    for (uint64_t i = 0; i < ng; i++)
        if (cmp_piece(&got[i], &want[i])) return 0;
    return 1;
}

/* ---- 1-2: best-fit rows ---- */
static void bfd_case(const char *dir, int max_docs) {
    hyp_err e;
    const int B = 3;
    hyp_loader *L = hyp_loader_open(dir, "train", B, T_, 1, 0, 1, &e);
    CHECK(L && hyp_loader_pack_rows(L, max_docs, &e) == HYP_OK, "v2126 loader packs rows (max_docs %d)", max_docs);
    if (!L) return;
    uint64_t W = hyp_loader_windows(L), tok, slots, pad;
    hyp_loader_layout(L, &tok, &slots, &pad);
    uint64_t batches = W / B; /* whole batches of epoch 0 */
    int32_t *in = malloc(sizeof(int32_t) * B * T_ * batches), *tg = malloc(sizeof(int32_t) * B * T_ * batches),
            *pos = malloc(sizeof(int32_t) * B * T_ * batches);
    piece *got = malloc(sizeof *got * (g_ntok + 1));
    uint64_t ng = 0, pad_seen = 0, nw;
    int ok = 1, most = 0, fz = 1;
    for (uint64_t b = 0; b < batches && ok; b++) {
        size_t o = (size_t)b * B * T_;
        ok = hyp_loader_next_pos(L, in + o, tg + o, pos + o, &e) == HYP_OK;
        hyp_batch_info bi;
        hyp_loader_last_batch(L, &bi);
        ok = ok && bi.B == B && bi.T == T_;
        for (int r = 0; r < B && ok; r++) {
            int nd, p = split_row(in + o + r * T_, tg + o + r * T_, pos + o + r * T_, T_, got, &ng, &nd, &fz);
            ok = p >= 0;
            pad_seen += (uint64_t)(p > 0 ? p : 0);
            if (nd > most) most = nd;
        }
    }
    /* the rows of the last, partial batch: read them from the next batch's first rows */
    uint64_t rest = W - batches * B;
    int32_t *i2 = malloc(sizeof(int32_t) * B * T_), *t2 = malloc(sizeof(int32_t) * B * T_), *p2 = malloc(sizeof(int32_t) * B * T_);
    if (ok && rest) { /* the batch flows into epoch 1: its first rows end epoch 0 */
        ok = hyp_loader_next_pos(L, i2, t2, p2, &e) == HYP_OK;
        for (uint64_t r = 0; r < rest && ok; r++) {
            int nd, p = split_row(i2 + r * T_, t2 + r * T_, p2 + r * T_, T_, got, &ng, &nd, &fz);
            ok = p >= 0;
            pad_seen += (uint64_t)(p > 0 ? p : 0);
            if (nd > most) most = nd;
        }
    }
    piece *want = expected_pieces(T_, &nw);
    char name[128];
    snprintf(name, sizeof name, "test_v2126_bfd_every_document_whole_in_one_row_max%d", max_docs);
    check(ok && same_pieces(got, ng, want, nw), name,
          "%llu rows, %llu pieces seen, %llu expected (%llu documents; longer than T+1 = %d only as chunks)",
          (unsigned long long)W, (unsigned long long)ng, (unsigned long long)nw, (unsigned long long)g_ndocs, T_ + 1);
    snprintf(name, sizeof name, "test_v2126_bfd_max_docs_per_row_max%d", max_docs);
    check(most <= max_docs && most >= 1, name, "at most %d documents in a row (limit %d)", most, max_docs);
    snprintf(name, sizeof name, "test_v2126_bfd_padding_counted_max%d", max_docs);
    check(pad_seen == pad && slots == W * T_, name, "padded slots seen %llu, layout %llu of %llu (%.2f%%)",
          (unsigned long long)pad_seen, (unsigned long long)pad, (unsigned long long)slots, 100.0 * (double)pad / (double)slots);
    if (max_docs >= 64) {
        /* a padding trainer: one piece per row of T inputs */
        uint64_t pad1 = 0;
        for (uint64_t i = 0; i < nw; i++) pad1 += want[i].n >= T_ ? 0 : (uint64_t)(T_ - want[i].n);
        double f_bfd = (double)pad / (double)slots, f_one = (double)pad1 / ((double)nw * T_);
        check(f_bfd < 0.05 && f_bfd < f_one / 5, "test_v2126_bfd_padding_vs_one_document_per_row",
              "padding: best-fit %.2f%% (%llu rows), one document per row %.2f%% (%llu rows), contiguous windows 0%%",
              100 * f_bfd, (unsigned long long)W, 100 * f_one, (unsigned long long)nw);
    }
    free(in), free(tg), free(pos), free(got), free(want), free(i2), free(t2), free(p2);
    hyp_loader_close(L);
}

/* ---- 3: dynamic batches ---- */
static double dyn_case(const char *dir, int B, int64_t budget, int buckets) {
    hyp_err e;
    hyp_loader *L = hyp_loader_open(dir, "train", B, T_, 1, 0, 1, &e);
    CHECK(L && hyp_loader_dynamic(L, budget, buckets, &e) == HYP_OK, "v2127 loader makes dynamic batches (B %d, budget %lld, buckets %d)",
          B, (long long)budget, buckets);
    if (!L) return -1;
    uint64_t W = hyp_loader_windows(L), tok, slots, pad, nw, ng = 0, slots_seen = 0, pad_seen = 0;
    hyp_loader_layout(L, &tok, &slots, &pad);
    size_t cap = (size_t)B * T_;
    int32_t *in = malloc(sizeof(int32_t) * cap * W), *tg = malloc(sizeof(int32_t) * cap * W), *pos = malloc(sizeof(int32_t) * cap * W);
    piece *got = malloc(sizeof *got * (g_ntok + 1));
    int ok = 1, shapes_ok = 1, fz = 1, minT = T_, maxrows = 0;
    for (uint64_t b = 0; b < W && ok; b++) {
        size_t o = b * cap;
        ok = hyp_loader_next_pos(L, in + o, tg + o, pos + o, &e) == HYP_OK;
        hyp_batch_info bi;
        hyp_loader_last_batch(L, &bi);
        int bucket_ok = 0;
        for (int k = 0; k < buckets; k++) bucket_ok |= bi.T == (T_ >> k);
        shapes_ok &= bucket_ok && bi.B >= 1 && bi.B <= B && (bi.B == 1 || (int64_t)bi.B * bi.T <= budget);
        if (bi.T < minT) minT = bi.T;
        if (bi.B > maxrows) maxrows = bi.B;
        slots_seen += (uint64_t)bi.B * bi.T;
        for (int r = 0; r < bi.B && ok; r++) {
            int nd, p = split_row(in + o + (size_t)r * bi.T, tg + o + (size_t)r * bi.T, pos + o + (size_t)r * bi.T, bi.T, got, &ng, &nd, &fz);
            ok = p >= 0 && nd == 1;
            pad_seen += (uint64_t)(p > 0 ? p : 0);
            /* the bucket is the shortest holding the piece: half of it would not */
            if (ok && bi.T < T_ && got[ng - 1].n - 1 > bi.T) ok = 0;
            if (ok && bi.T / 2 >= 1 && bi.T > (T_ >> (buckets - 1)) && got[ng - 1].n - 1 <= bi.T / 2) ok = 0;
        }
    }
    piece *want = expected_pieces(T_, &nw);
    char name[128];
    snprintf(name, sizeof name, "test_v2127_dynamic_every_document_once_b%d", buckets);
    check(ok && fz && same_pieces(got, ng, want, nw), name, "%llu batches, %llu rows (one document each, from slot 0), %llu expected",
          (unsigned long long)W, (unsigned long long)ng, (unsigned long long)nw);
    snprintf(name, sizeof name, "test_v2127_dynamic_budget_and_buckets_b%d", buckets);
    check(shapes_ok && slots_seen == slots && pad_seen == pad, name,
          "rows x T <= %lld, rows <= %d (max %d), shortest bucket %d; padding %.2f%% of %llu slots", (long long)budget, B,
          maxrows, minT, 100.0 * (double)pad / (double)slots, (unsigned long long)slots);
    free(in), free(tg), free(pos), free(got), free(want);
    hyp_loader_close(L);
    return (double)pad / (double)slots;
}

/* ---- 4: resume and prefetch ---- */
static int batch_eq(hyp_loader *a, hyp_loader *b, int cap) {
    int32_t *x = calloc((size_t)cap * 6, sizeof(int32_t));
    hyp_err e;
    int ok = hyp_loader_next_pos(a, x, x + cap, x + 2 * cap, &e) == HYP_OK &&
             hyp_loader_next_pos(b, x + 3 * cap, x + 4 * cap, x + 5 * cap, &e) == HYP_OK;
    hyp_batch_info ia, ib;
    hyp_loader_last_batch(a, &ia);
    hyp_loader_last_batch(b, &ib);
    ok = ok && ia.B == ib.B && ia.T == ib.T && ia.pad == ib.pad;
    int n = ia.B * ia.T;
    ok = ok && !memcmp(x, x + 3 * cap, sizeof(int32_t) * n) && !memcmp(x + cap, x + 4 * cap, sizeof(int32_t) * n) &&
         !memcmp(x + 2 * cap, x + 5 * cap, sizeof(int32_t) * n);
    free(x);
    return ok;
}

static hyp_loader *open_mode(const char *dir, int dyn, int B) {
    hyp_err e;
    hyp_loader *L = hyp_loader_open(dir, "train", B, T_, 5, 0, 1, &e);
    if (L && (dyn ? hyp_loader_dynamic(L, 4 * T_, 4, &e) : hyp_loader_pack_rows(L, 64, &e)) != HYP_OK) {
        hyp_loader_close(L);
        L = NULL;
    }
    return L;
}

static void resume_case(const char *dir, int dyn) {
    const int B = dyn ? 16 : 2, cap = B * T_;
    hyp_loader *a = open_mode(dir, dyn, B), *b = open_mode(dir, dyn, B), *c = open_mode(dir, dyn, B);
    if (!a || !b || !c) {
        check(0, "open", "loaders");
        return;
    }
    hyp_err e;
    int32_t *x = malloc(sizeof(int32_t) * cap * 3);
    uint64_t k = hyp_loader_windows_per_rank(a) + 3; /* into the second epoch */
    for (uint64_t i = 0; i < k; i++) hyp_loader_next_pos(a, x, x + cap, x + 2 * cap, &e);
    hyp_loader_state st;
    hyp_loader_get_state(a, &st);
    int ok = hyp_loader_set_state(b, &st, &e) == HYP_OK;
    for (int i = 0; i < 40 && ok; i++) ok = batch_eq(a, b, cap);
    /* prefetch: the same batches as direct reads from the start */
    hyp_loader_reset(a);
    int okp = hyp_loader_prefetch(c, 3, &e) == HYP_OK;
    for (uint64_t i = 0; i < k + 20 && okp; i++) okp = batch_eq(a, c, cap);
    char name[96];
    snprintf(name, sizeof name, "test_%s_resume_bit_exact", dyn ? "v2127_dynamic" : "v2126_bfd");
    check(ok, name, "40 batches after a state restored at batch %llu (epoch %llu) identical", (unsigned long long)k,
          (unsigned long long)st.epoch);
    snprintf(name, sizeof name, "test_%s_prefetch_same_batches", dyn ? "v2127_dynamic" : "v2126_bfd");
    check(okp, name, "%llu batches with prefetch 3 identical to direct reads", (unsigned long long)k + 20);
    free(x);
    hyp_loader_close(a), hyp_loader_close(b), hyp_loader_close(c);
}

/* v2127: each epoch regroups the documents of a bucket into batches (same shapes, new members). */
static int cmp_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static void regroup_case(const char *dir) {
    hyp_loader *L = open_mode(dir, 1, 16);
    if (!L) return;
    uint64_t W = hyp_loader_windows(L), *h[2], *shape[2];
    int32_t *x = malloc(sizeof(int32_t) * 16 * T_ * 3);
    hyp_err e;
    for (int ep = 0; ep < 2; ep++) {
        h[ep] = malloc(sizeof(uint64_t) * W);
        shape[ep] = malloc(sizeof(uint64_t) * W);
        for (uint64_t b = 0; b < W; b++) {
            hyp_loader_next_pos(L, x, x + 16 * T_, x + 32 * T_, &e);
            hyp_batch_info bi;
            hyp_loader_last_batch(L, &bi);
            uint64_t sum = 0; /* order-independent: the sum of the rows' FNV hashes */
            for (int r = 0; r < bi.B; r++) {
                uint64_t f = 1469598103934665603ULL;
                for (int t = 0; t < bi.T; t++) f = (f ^ (uint64_t)(uint32_t)x[r * bi.T + t]) * 1099511628211ULL;
                sum += f;
            }
            h[ep][b] = sum;
            shape[ep][b] = (uint64_t)bi.B << 32 | (uint64_t)bi.T;
        }
        qsort(h[ep], W, sizeof(uint64_t), cmp_u64);
        qsort(shape[ep], W, sizeof(uint64_t), cmp_u64);
    }
    uint64_t same = 0;
    for (uint64_t b = 0; b < W; b++) same += h[0][b] == h[1][b];
    check(!memcmp(shape[0], shape[1], sizeof(uint64_t) * W) && same < W / 2, "test_v2127_epochs_regroup_documents",
          "epochs 0 and 1: the same %llu batch shapes; %llu of %llu batches with the same members (one-row batches and tiny buckets can repeat)",
          (unsigned long long)W, (unsigned long long)same, (unsigned long long)W);
    for (int ep = 0; ep < 2; ep++) free(h[ep]), free(shape[ep]);
    free(x);
    hyp_loader_close(L);
}

static void bad_case(const char *dir) {
    hyp_err e;
    hyp_loader *L = hyp_loader_open(dir, "train", 2, T_, 1, 0, 1, &e);
    int r1 = hyp_loader_pack_rows(L, 0, &e), r2 = hyp_loader_dynamic(L, 0, 3, &e), r3 = hyp_loader_dynamic(L, 64, 0, &e);
    int32_t x[3 * 2 * T_];
    hyp_loader_next_pos(L, x, x + 2 * T_, x + 4 * T_, &e);
    int r4 = hyp_loader_pack_rows(L, 8, &e); /* after reading: refused */
    check(r1 == HYP_EINPUT && r2 == HYP_EINPUT && r3 == HYP_EINPUT && r4 == HYP_EINPUT, "test_v2126_v2127_bad_parameters_refused",
          "max_docs 0, token_budget 0, buckets 0, layout after reading: %d %d %d %d (last: %s)", r1, r2, r3, r4, e.msg);
    hyp_loader_close(L);
}

/* ---- 6-7: the trainer step ---- */
static int open_trainer(trainer *tr, const char *sel, int B, const char *tag) {
    char dir[512], cmd[2048];
    snprintf(dir, sizeof dir, "%s/%s", g_tmp, tag);
    memset(tr, 0, sizeof *tr);
    snprintf(cmd, sizeof cmd,
             "cd %s && %s/generator/gen specs/v2500.yaml --enable adamw%s --model tests/fixtures/models/pack-gpt2.yaml "
             "--target cpu --batch %d --seq %d -o %s >/dev/null 2>&1",
             HYP_SOURCE_DIR, HYP_BINARY_DIR, sel, B, T_, dir);
    if (system(cmd) != 0) {
        check(0, "gen", "%s failed", sel);
        return 0;
    }
    return trainer_load(tr, dir);
}

/* The loader's byte tokens folded into the model's 64-token vocabulary (targets -1 stay). */
static void fold(int32_t *v, long n) {
    for (long i = 0; i < n; i++)
        if (v[i] >= 0) v[i] %= 64;
}

static double grad_err(const trainer *tr, const float *a, const float *b, const char **worst_name) {
    double worst = 0;
    int ok = 1;
    for (int i = 0; i < tr->p.n_params_t; i++) {
        const plan_param *pp = &tr->p.params[i];
        double w = 0, m = 0;
        for (long k = 0; k < pp->numel; k++) {
            w = fmax(w, fabs((double)a[pp->offset + k] - b[pp->offset + k]));
            m = fmax(m, fabs((double)b[pp->offset + k]));
        }
        if (w > 2e-5 * m + 1e-9) ok = 0; /* test_packing_v2126.c's derivation */
        if (m > 0 && w / m > worst) worst = w / m, *worst_name = pp->name;
    }
    return ok ? worst : -1;
}

/* Runs the batch in x (shape B x T, already bound) and then each of its documents alone (runs of
 * positions from 0, 1 x inputs), both at dloss = 1 / (the batch's loss tokens). */
static void batch_vs_alone(trainer *tr, const char *what, const char *name) {
    exec_t *x = &tr->x;
    long P = tr->p.param_floats, n = (long)x->B * x->T;
    int Bb = x->B, Tb = x->T;
    int32_t *tok = malloc(sizeof(int32_t) * n), *tgt = malloc(sizeof(int32_t) * n), *pos = malloc(sizeof(int32_t) * n);
    memcpy(tok, x->tokens, sizeof(int32_t) * n);
    memcpy(tgt, x->targets, sizeof(int32_t) * n);
    if (x->positions) memcpy(pos, x->positions, sizeof(int32_t) * n);
    double cnt = (double)exec_count_targets(x);
    memset(x->grads, 0, sizeof(float) * (size_t)P);
    exec_forward(x);
    float mean = exec_backward(x, (float)(1.0 / cnt));
    float *g = malloc(sizeof(float) * (size_t)P);
    memcpy(g, x->grads, sizeof(float) * (size_t)P);
    memset(x->grads, 0, sizeof(float) * (size_t)P);
    hyp_err e;
    double weighted = 0;
    int docs = 0;
    for (int b = 0; b < Bb; b++) {
        const int32_t *rt = tok + (long)b * Tb, *rg = tgt + (long)b * Tb;
        for (int s = 0; s < Tb;) { /* a document: its positions count up from its start */
            int m = 1;
            while (s + m < Tb && (tr->p.positions_buf >= 0 ? pos[(long)b * Tb + s + m] == m : rg[s + m - 1] >= 0)) m++;
            int preds = 0;
            for (int i = 0; i < m; i++) preds += rg[s + i] >= 0;
            if (preds == 0) { s += m; continue; } /* padding */
            exec_bind(x, 1, m, &e); /* positions 0..m-1 */
            memcpy(x->tokens, rt + s, sizeof(int32_t) * m);
            memcpy(x->targets, rg + s, sizeof(int32_t) * m);
            exec_forward(x);
            float lm = exec_backward(x, (float)(1.0 / cnt));
            weighted += (double)lm * preds;
            docs++;
            s += m;
        }
    }
    weighted /= cnt;
    const char *wn = "";
    double ge = grad_err(tr, g, x->grads, &wn);
    check(ge >= 0 && fabs(weighted - mean) <= 2e-6 * fmax(1, fabs(weighted)), name,
          "%s %dx%d, %d documents, %.0f loss tokens: loss %.9g vs alone token-weighted %.9g; gradients worst rel %.3g (%s)",
          what, Bb, Tb, docs, cnt, mean, weighted, ge, wn);
    free(tok), free(tgt), free(pos), free(g);
}

static void step_cases(const char *dir) {
    hyp_err e;
    trainer tr;
    if (open_trainer(&tr, ",packing", 2, "pk")) { /* 6: a packed row with padding, from the loader */
        hyp_loader *L = hyp_loader_open(dir, "train", 2, T_, 1, 0, 1, &e);
        hyp_loader_pack_rows(L, 64, &e);
        int found = 0;
        for (int i = 0; i < 400 && !found; i++) {
            exec_bind(&tr.x, 2, T_, &e);
            hyp_loader_next_pos(L, tr.x.tokens, tr.x.targets, tr.x.positions, &e);
            hyp_batch_info bi;
            hyp_loader_last_batch(L, &bi);
            int docs0 = 0;
            for (int t = 0; t < T_; t++) docs0 += tr.x.positions[t] == 0 && tr.x.targets[t] >= 0;
            found = bi.pad > 0 && docs0 >= 2; /* padding and several documents */
        }
        CHECK(found, "v2126: the loader gave a packed batch with a padded tail and several documents in a row");
        fold(tr.x.tokens, 2L * T_);
        fold(tr.x.targets, 2L * T_);
        batch_vs_alone(&tr, "packed rows (padded tail)", "test_v2126_padded_row_loss_and_grads_equal_documents_alone");
        hyp_loader_close(L);
        exec_free(&tr.x);
        plan_free(&tr.p);
    }
    if (open_trainer(&tr, ",dynamic-batching --set v2127.token_budget=256 --set v2127.buckets=3", 8, "dyn")) { /* 7 */
        hyp_loader *L = hyp_loader_open(dir, "train", 8, T_, 1, 0, 1, &e);
        hyp_loader_dynamic(L, tr.p.token_budget, tr.p.buckets, &e);
        CHECK(tr.p.token_budget == 256 && tr.p.buckets == 3, "v2127: the plan carries token_budget 256, buckets 3");
        int seen_short = 0;
        for (int i = 0; i < 60 && seen_short < 2; i++) {
            exec_bind(&tr.x, 8, T_, &e);
            hyp_loader_next_pos(L, tr.x.tokens, tr.x.targets, tr.x.positions, &e);
            hyp_batch_info bi;
            hyp_loader_last_batch(L, &bi);
            if (bi.T == T_ && !seen_short) continue;
            exec_reshape(&tr.x, bi.B, bi.T, &e);
            fold(tr.x.tokens, (long)bi.B * bi.T);
            fold(tr.x.targets, (long)bi.B * bi.T);
            char name[96];
            snprintf(name, sizeof name, "test_v2127_dynamic_batch_grad_equals_documents_alone_%d", seen_short);
            batch_vs_alone(&tr, "dynamic batch", name);
            seen_short++;
        }
        CHECK(seen_short == 2, "v2127: two dynamic batches of a short bucket checked");
        hyp_loader_close(L);
        exec_free(&tr.x);
        plan_free(&tr.p);
    }
}

int main(void) {
    snprintf(g_tmp, sizeof g_tmp, "/tmp/hyp_test_pack_rows_%d", (int)getpid());
    mkdir(g_tmp, 0755);
    char dir[300];
    snprintf(dir, sizeof dir, "%s/data", g_tmp);
    if (make_data(dir) != 0) {
        check(0, "make_data", "gen data failed");
        rm_rf(g_tmp);
        return 1;
    }
    printf("corpus: %llu tokens, %llu documents\n", (unsigned long long)g_ntok, (unsigned long long)g_ndocs);
    bfd_case(dir, 64);
    bfd_case(dir, 2);
    double fixed = dyn_case(dir, 16, 4 * T_, 1);
    double dyn = dyn_case(dir, 16, 4 * T_, 4);
    check(dyn >= 0 && fixed > 0 && dyn < fixed / 2, "test_v2127_dynamic_padding_below_fixed_batches",
          "padding: fixed batches (buckets 1) %.2f%%, dynamic (buckets 4: 64, 32, 16, 8) %.2f%%", 100 * fixed, 100 * dyn);
    resume_case(dir, 0);
    resume_case(dir, 1);
    regroup_case(dir);
    bad_case(dir);
    step_cases(dir);
    free(g_tok), free(g_start);
    rm_rf(g_tmp);
    printf("%d passed, %d failed\n", g_pass, g_fail);
    return g_fail ? 1 : 0;
}
