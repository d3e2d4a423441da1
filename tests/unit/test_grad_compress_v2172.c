/* test_grad_compress_v2172.c — v2172's pieces on one rank against references written here:
 * - train_topk_select against a full sort by (|v| descending, index ascending) on vectors with
 *   ties, zeros, a NaN (counted as infinite) and k = 1, n - 1 and n; an error here picks another
 *   set, so the comparison is exact.
 * - error feedback: after each of 3 top-k steps the residual equals (g + old residual) - sent and
 *   the reduced gradient equals sent, exactly (an entry is either sent whole or kept whole; the one
 *   rounding, g + residual, is recomputed here in the same fp32 order), with k entries sent.
 * - random-k: the k indices change between steps, scaled (no error feedback) by n/k exactly as
 *   the fp32 product g x (float)(n/k), and with error feedback residual + sent == g + old residual.
 * Never: collectives (one rank; the np=2 exchange is tests/gen/test_grad_compress_np2_v2172.sh). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "grad_compress.h"
#include "hyp_test.h"

#define N 1031 /* odd, prime: no vector-width multiple */

static float frand(unsigned *s) {
    *s = *s * 1664525u + 1013904223u;
    return ((float)((*s >> 8) & 0xffff) + 0.5f) / 65536.0f * 2.0f - 1.0f; /* (-1, 1), never 0 */
}

static const float *g_ref_v;
static float mag(float v) { return isnan(v) ? INFINITY : fabsf(v); }
static int by_mag_then_index(const void *a, const void *b) {
    int i = *(const int *)a, j = *(const int *)b;
    float x = mag(g_ref_v[i]), y = mag(g_ref_v[j]);
    if (x != y) return x > y ? -1 : 1;
    return (i > j) - (i < j);
}
static int ascending(const void *a, const void *b) {
    int i = *(const int *)a, j = *(const int *)b;
    return (i > j) - (i < j);
}

static void test_topk_select(void) {
    static float v[N], scratch[N];
    static int32_t idx[N];
    static int order[N];
    unsigned s = 5;
    int bad = 0;
    for (int round = 0; round < 4; round++) {
        for (int i = 0; i < N; i++) v[i] = frand(&s);
        for (int i = 0; i < N; i += 7) v[i] = round & 1 ? 0.25f : -0.25f; /* many ties */
        for (int i = 3; i < N; i += 11) v[i] = 0.0f;
        if (round == 2) v[500] = NAN;
        const int64_t ks[] = {1, 2, 17, N / 10, 300, N - 1, N};
        for (size_t q = 0; q < sizeof ks / sizeof ks[0]; q++) {
            int64_t k = ks[q];
            train_topk_select(v, N, k, scratch, idx);
            for (int i = 0; i < N; i++) order[i] = i;
            g_ref_v = v;
            qsort(order, N, sizeof(int), by_mag_then_index);
            qsort(order, (size_t)k, sizeof(int), ascending);
            for (int64_t j = 0; j < k; j++) bad += idx[j] != order[j];
        }
    }
    CHECK(bad == 0, "top-k selection equals the sorted reference (|v| desc, index asc; NaN first) for k in 1..n: %d mismatches", bad);
}

static void ef_case(int randk, int ef) {
    plan_t p;
    memset(&p, 0, sizeof p);
    p.gc_on = 1, p.gc_randk = randk, p.gc_error_feedback = ef, p.gc_ratio = 0.05;
    static float grads[N], g0[N], owed[N], oldr[N];
    exec_t x;
    memset(&x, 0, sizeof x);
    x.p = &p, x.grads = grads, x.shard = N, x.world = 1;
    dp_t d = {.coll = NULL, .rank = 0, .world = 1, .stage = 0, .opt = NULL};
    train_grad_compress *gc = NULL;
    hyp_err e = {{0}};
    int rc = train_grad_compress_open(&gc, &p, &x, &d, &e);
    CHECK(rc == HYP_OK && gc, "%s ef=%d: opens (%s)", randk ? "randk" : "topk", ef, e.msg);
    if (rc) return;
    const int64_t k = train_grad_compress_k(gc);
    CHECK(k == 52, "k = round(0.05 x %d) = 52: %lld", N, (long long)k);
    unsigned s = 9;
    int exact = 1, count_ok = 1, largest = 1, moved = 0;
    static unsigned char was_sent[N];
    const float scale = (float)((double)N / (double)k);
    for (int step = 0; step < 3; step++) {
        for (int i = 0; i < N; i++) grads[i] = g0[i] = frand(&s);
        const float *r = train_grad_compress_residual(gc);
        CHECK(!r == !ef, "a residual exactly with error feedback");
        for (int i = 0; i < N; i++) oldr[i] = r ? r[i] : 0.0f, owed[i] = r ? g0[i] + oldr[i] : g0[i];
        rc = train_grad_compress_reduce(gc, &x, &d, &e);
        CHECK(rc == HYP_OK, "reduce (%s)", e.msg);
        int sent = 0;
        float min_sent = INFINITY, max_kept = 0;
        for (int i = 0; i < N; i++) {
            const int is_sent = grads[i] != 0.0f; /* a sent 0 (owed = g + r == 0; none with these seeds) fails the count of k */
            if (is_sent) {
                sent++;
                min_sent = fminf(min_sent, fabsf(owed[i]));
                exact &= grads[i] == (!ef && randk ? owed[i] * scale : owed[i]);
            } else {
                max_kept = fmaxf(max_kept, fabsf(owed[i]));
            }
            if (step == 1) moved |= is_sent != was_sent[i];
            was_sent[i] = (unsigned char)is_sent;
            if (r) exact &= r[i] == (is_sent ? 0.0f : owed[i]) && r[i] + (is_sent ? owed[i] : 0.0f) == owed[i];
        }
        count_ok &= sent == k;
        if (!randk) largest &= min_sent >= max_kept;
    }
    CHECK(exact, "%s ef=%d: sent = owed %s, residual = owed - sent, exactly, over 3 steps", randk ? "randk" : "topk", ef,
          !ef && randk ? "x n/k" : "");
    CHECK(count_ok, "%s ef=%d: k entries sent every step", randk ? "randk" : "topk", ef);
    if (randk) CHECK(moved, "randk: the indices change between steps");
    else CHECK(largest, "topk: every sent |g + residual| >= every kept one");
    train_grad_compress_close(gc);
    p.gc_ratio = 1.0;
    d.stage = 2;
    rc = train_grad_compress_open(&gc, &p, &x, &d, &e);
    CHECK(rc == HYP_EINPUT && !gc, "ZeRO stage 2 refused: %s", e.msg);
}

int main(void) {
    test_topk_select();
    ef_case(0, 1);
    ef_case(0, 0);
    ef_case(1, 1);
    ef_case(1, 0);
    return hyp_test_finish();
}
