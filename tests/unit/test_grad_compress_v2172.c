/* test_grad_compress_v2172.c — v2172's pieces on one rank against references written here:
 * - train_topk_select against a full sort by (|v| descending, index ascending) on vectors with
 *   ties, zeros, a NaN (counted as infinite) and k = 1, n - 1 and n; an error here picks another
 *   set, so the comparison is exact.
 * - error feedback: after each of 3 top-k steps the residual equals (g + old residual) - sent and
 *   the reduced gradient equals sent, exactly (an entry is either sent whole or kept whole; the one
 *   rounding, g + residual, is recomputed here in the same fp32 order), with k entries sent.
 * - random-k: the k indices change between steps, scaled (no error feedback) by n/k exactly as
 *   the fp32 product g x (float)(n/k), and with error feedback residual + sent == g + old residual.
 * - PowerSGD's orthogonalization: 50 x 4 random columns become orthonormal; and PowerSGD at
 *   rank 2 on one rank reproduces a rank-2 matrix (its 1-D neighbour sent whole, bit for bit)
 *   with residual + approximation == M (tolerances at the checks).
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

static void test_orthogonalize(void) {
    enum { R = 50, C = 4 };
    static float a[R * C];
    unsigned s = 3;
    for (int i = 0; i < R * C; i++) a[i] = frand(&s);
    train_orthogonalize(a, R, C);
    double err = 0;
    for (int i = 0; i < C; i++)
        for (int j = 0; j < C; j++) {
            double dot = 0;
            for (int k = 0; k < R; k++) dot += (double)a[k * C + i] * a[k * C + j];
            err = fmax(err, fabs(dot - (i == j)));
        }
    /* Error sources: each stored entry rounds to fp32 (relative 2^-24), so a dot product of two
     * unit columns of 50 entries is off by <= 2 x 2^-24 per pass of the (double-summed) projections,
     * and modified Gram-Schmidt loses orthogonality by ~ 2^-24 x cond(a) (Bjorck 1967), cond < 10
     * for 4 random columns of 50 entries: 1e-5 is above both, a missing normalization or
     * projection is off by O(0.1). */
    CHECK(err < 1e-5, "orthogonalize: P^T P = I within 1e-5 (max |dev| %.2g)", err);
    static float z[6 * 2] = {0};
    for (int k = 0; k < 6; k++) z[k * 2] = (float)(k + 1);
    train_orthogonalize(z, 6, 2);
    int finite = 1;
    for (int i = 0; i < 12; i++) finite &= z[i] == z[i] && (i % 2 == 0 || z[i] == 0.0f);
    CHECK(finite, "orthogonalize: a zero column stays zero (epsilon 1e-8, no division by 0)");
}

static void test_powersgd(void) {
    enum { ROWS = 13, COLS = 9, RK = 2 };
    plan_t p;
    memset(&p, 0, sizeof p);
    plan_param pp[2];
    memset(pp, 0, sizeof pp);
    pp[0].offset = 0, pp[0].numel = ROWS * COLS, pp[0].ndim = 2, pp[0].shape[0] = ROWS, pp[0].shape[1] = COLS;
    pp[1].offset = ROWS * COLS, pp[1].numel = 7, pp[1].ndim = 1, pp[1].shape[0] = 7;
    p.params = pp, p.n_params_t = 2;
    p.gc_on = 1, p.gc_power = 1, p.gc_rank = RK, p.gc_error_feedback = 1, p.gc_ratio = 0.01;
    enum { NN = ROWS * COLS + 7 };
    static float grads[NN], m0[NN];
    exec_t x;
    memset(&x, 0, sizeof x);
    x.p = &p, x.grads = grads, x.shard = NN, x.world = 1;
    dp_t d = {.coll = NULL, .rank = 0, .world = 1, .stage = 0, .opt = NULL};
    train_grad_compress *gc = NULL;
    hyp_err e = {{0}};
    int rc = train_grad_compress_open(&gc, &p, &x, &d, &e);
    CHECK(rc == HYP_OK && gc, "powersgd: opens (%s)", e.msg);
    if (rc) return;
    CHECK(train_grad_compress_k(gc) == RK * (ROWS + COLS) + 7, "powersgd: sends r(rows + cols) + 7 = %d floats: %lld", RK * (ROWS + COLS) + 7,
          (long long)train_grad_compress_k(gc));
    unsigned s = 21;
    float u[2][ROWS], v[2][COLS], mx = 0;
    for (int q = 0; q < 2; q++) {
        for (int a = 0; a < ROWS; a++) u[q][a] = frand(&s);
        for (int b = 0; b < COLS; b++) v[q][b] = frand(&s);
    }
    for (int a = 0; a < ROWS; a++)
        for (int b = 0; b < COLS; b++) m0[a * COLS + b] = u[0][a] * v[0][b] + u[1][a] * v[1][b], mx = fmaxf(mx, fabsf(m0[a * COLS + b]));
    for (int i = ROWS * COLS; i < NN; i++) m0[i] = frand(&s);
    memcpy(grads, m0, sizeof grads);
    rc = train_grad_compress_reduce(gc, &x, &d, &e);
    CHECK(rc == HYP_OK, "powersgd: reduce (%s)", e.msg);
    const float *r = train_grad_compress_residual(gc);
    double err = 0, sum_err = 0;
    int vec_exact = 1;
    for (int i = 0; i < ROWS * COLS; i++) err = fmax(err, fabs(grads[i] - m0[i])), sum_err = fmax(sum_err, fabs(grads[i] + r[i] - m0[i]));
    for (int i = ROWS * COLS; i < NN; i++) vec_exact &= grads[i] == m0[i] && r[i] == 0.0f;
    /* Error sources: a rank-2 M lies in the span of P = M Q, so P P^T M = M up to fp32 rounding:
     * P and Q are dot products of <= 13 terms of magnitude <= max|M| (relative <= 13 x 2^-24
     * each), orthogonalization adds ~ 2^-24 x cond(P) with cond < 100 for two random directions,
     * and P Q^T sums 2 products: well under 1e-4 x max|M|; a missing step is off by O(max|M|). */
    CHECK(err < 1e-4 * mx, "powersgd: a rank-2 gradient is reproduced at rank 2 within 1e-4 x max|M| (%.2g, max|M| %.2g)", err, (double)mx);
    /* residual = M - P Q^T rounds once (the subtraction, exact by Sterbenz when they are close) */
    CHECK(sum_err <= 2e-7 * mx, "powersgd: residual + approximation = M within one rounding (%.2g)", sum_err);
    CHECK(vec_exact, "powersgd: the 1-D gradient is sent whole, bit for bit, residual 0");
    train_grad_compress_close(gc);
}

int main(void) {
    test_orthogonalize();
    test_powersgd();
    test_topk_select();
    ef_case(0, 1);
    ef_case(0, 0);
    ef_case(1, 1);
    ef_case(1, 0);
    return hyp_test_finish();
}
