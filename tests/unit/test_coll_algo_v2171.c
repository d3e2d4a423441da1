/* test_coll_algo_v2171.c — the v2171 all-reduce algorithms of runtime/coll (coll_algo.c): ring,
 * tree, recursive halving-doubling and hierarchical each give the sum over ranks, every rank the
 * same bits, the same bits on a second call, and send exactly the bytes and take exactly the
 * rounds their formulas say, per rank. Run alone it checks the single-rank identities and names,
 * then starts itself under `mpirun -np 2`, `-np 3` (not a power of two: halving-doubling folds a
 * rank in, hierarchical has a short last node) and `-np 4`, --oversubscribe; it must never pass
 * without having checked those worlds when mpirun exists (sanitizer builds skip the mpirun half:
 * Open MPI's own allocations are not ours to audit).
 *
 * Tolerances: integer-valued floats (|sum| < 2^24) are summed exactly in any order, so those
 * results must equal the reference bit for bit. Random floats (a 24-bit mantissa times 2^-8..2^8)
 * are summed exactly in double (p <= 4 terms spanning < 53 bits), and a p-term float sum in any
 * order is within gamma_(p-1) * sum|x_i| of it (Higham, Accuracy and Stability, eq. 4.4:
 * gamma_k = k*u / (1 - k*u), u = 2^-24). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coll.h"
#include "hyp_test.h"

#if defined(__SANITIZE_ADDRESS__)
#define HYP_TEST_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define HYP_TEST_SANITIZED 1
#endif
#endif

/* n of 840*k floats: 840 = lcm(1..8), so every block split of these worlds is even and the
 * formulas hold exactly; the odd lengths check the uneven cuts and tiny buffers for correctness. */
static const size_t N_EVEN = 840 * 7, N_ODD[] = {1001, 3, 1, 0};

static uint64_t mix(uint64_t x) {
    x ^= x >> 33, x *= 0xff51afd7ed558ccdULL, x ^= x >> 33, x *= 0xc4ceb9fe1a85ec53ULL;
    return x ^ (x >> 33);
}

/* rank r's element j: integer-valued (exact sums) or a random float of 24 bits times 2^-8..2^8 */
static float value(int r, size_t j, int random) {
    uint64_t h = mix((uint64_t)r * 0x9E3779B97F4A7C15ULL + j * 7919 + (random ? 12345 : 0));
    if (!random) return (float)((int)(h % 2001) - 1000); /* |sum| <= 4000 << 2^24 */
    float m = (float)(int32_t)(h >> 40) / 8388608.0f;     /* 24-bit signed mantissa in [-1, 1) */
    return ldexpf(m, (int)((h >> 8) % 17) - 8);
}

static uint64_t hash_bytes(const void *p, size_t n) {
    const unsigned char *b = p;
    uint64_t h = 1469598103934665603ULL;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 1099511628211ULL;
    return h;
}

static int log2_ceil(int p) {
    int k = 0;
    while ((1 << k) < p) k++;
    return k;
}

/* Children of member i in the binomial tree of m members rooted at 0 (written from the
 * definition: i + 2^k < m for 2^k below i's lowest set bit, any 2^k for the root). */
static int tree_children(int i, int m) {
    int c = 0;
    for (int k = 1; k < (i ? (i & -i) : (1 << 30)) && i + k < m; k <<= 1) c++;
    return c;
}

/* The formulas: bytes rank r sends and rounds it takes for one all-reduce of n floats (n a
 * multiple of 840: even blocks). */
static void expected(int algo, int r, int p, int node, size_t n, double *bytes, double *steps) {
    double N = 4.0 * (double)n;
    *bytes = *steps = 0;
    if (p == 1) return;
    if (algo == HYP_AR_RING) {
        *bytes = 2.0 * (p - 1) / p * N, *steps = 2.0 * (p - 1);
    } else if (algo == HYP_AR_TREE) {
        int c = tree_children(r, p) + (r != 0);
        *bytes = c * N, *steps = 2.0 * c;
    } else if (algo == HYP_AR_HALVING_DOUBLING) {
        int pp = 1 << (log2_ceil(p + 1) - 1), rem = p - pp, lg = log2_ceil(pp);
        if (r < 2 * rem && r % 2 == 0) *bytes = N, *steps = 2;
        else {
            *bytes = 2.0 * (pp - 1) / pp * N, *steps = 2.0 * lg;
            if (r < 2 * rem) *bytes += N, *steps += 2;
        }
    } else if (algo == HYP_AR_HIERARCHICAL) {
        int g = r / node, nodes = (p + node - 1) / node, m = p - g * node < node ? p - g * node : node, i = r % node;
        int c = tree_children(i, m) + (i != 0);
        *bytes = c * N, *steps = 2.0 * c;
        if (i == 0 && nodes > 1) *bytes += 2.0 * (nodes - 1) / nodes * N, *steps += 2.0 * (nodes - 1);
    }
}

static const char *NAMES[] = {"auto", "ring", "tree", "halving_doubling", "hierarchical"};

/* One algorithm on one communicator: correctness on every length, determinism, formulas. */
static void check_algo(hyp_coll *w, int algo, int node) {
    hyp_err e = {{0}};
    int r = hyp_coll_rank(w), p = hyp_coll_world(w);
    hyp_coll *c = NULL;
    char name[48];
    snprintf(name, sizeof name, algo == HYP_AR_HIERARCHICAL ? "%s(node %d)" : "%s", NAMES[algo], node);
    CHECK(hyp_coll_split(w, 0, r, &c, &e) == HYP_OK && hyp_coll_set_allreduce(c, algo, node, &e) == HYP_OK &&
              hyp_coll_allreduce_algo(c) == algo,
          "rank %d/%d %s: a communicator with the algorithm set", r, p, name);
    if (!c) return;
    size_t lens[5] = {N_EVEN, N_ODD[0], N_ODD[1], N_ODD[2], N_ODD[3]};
    float *buf = malloc(sizeof(float) * N_EVEN), *again = malloc(sizeof(float) * N_EVEN);
    for (int li = 0; li < 5; li++) {
        size_t n = lens[li];
        /* integer-valued: exact */
        for (size_t j = 0; j < n; j++) buf[j] = value(r, j, 0);
        uint64_t b0 = hyp_coll_bytes_sent(c), s0 = hyp_coll_steps(c);
        int rc = hyp_coll_allreduce_f32(c, buf, n, &e);
        double db = (double)(hyp_coll_bytes_sent(c) - b0), ds = (double)(hyp_coll_steps(c) - s0);
        size_t bad = 0;
        for (size_t j = 0; j < n; j++) {
            float want = 0;
            for (int q = 0; q < p; q++) want += value(q, j, 0);
            if (buf[j] != want) bad++;
        }
        CHECK(rc == HYP_OK && bad == 0, "rank %d/%d %s n=%zu integer-valued: equals the reference sum exactly (%zu differ) %s",
              r, p, name, n, bad, rc ? e.msg : "");
        if (n == N_EVEN) {
            double wb, ws;
            expected(algo, r, p, node, n, &wb, &ws);
            CHECK(db == wb && ds == ws, "rank %d/%d %s n=%zu: sent %.0f B in %.0f rounds, formula %.0f B in %.0f rounds",
                  r, p, name, n, db, ds, wb, ws);
        }
        /* random floats: within the p-term bound, the same bits on every rank and on a rerun */
        for (size_t j = 0; j < n; j++) buf[j] = again[j] = value(r, j, 1);
        rc = hyp_coll_allreduce_f32(c, buf, n, &e) || hyp_coll_allreduce_f32(c, again, n, &e);
        double u = ldexp(1.0, -24), gamma = (p - 1) * u / (1 - (p - 1) * u), worst = 0;
        bad = 0;
        for (size_t j = 0; j < n; j++) {
            double exact = 0, mag = 0;
            for (int q = 0; q < p; q++) exact += value(q, j, 1), mag += fabs(value(q, j, 1));
            double err = fabs((double)buf[j] - exact);
            if (err > gamma * mag) bad++;
            if (mag > 0 && err / mag > worst) worst = err / mag;
        }
        CHECK(rc == HYP_OK && bad == 0, "rank %d/%d %s n=%zu random: within gamma_%d*sum|x| of the exact sum (%zu outside; worst %.2g u)",
              r, p, name, n, p - 1, bad, worst / u);
        CHECK(!memcmp(buf, again, n * sizeof(float)), "rank %d/%d %s n=%zu random: a second call gives the same bits", r, p,
              name, n);
        uint64_t h = hash_bytes(buf, n * sizeof(float)), all[8] = {0};
        int same = hyp_coll_allgather_bytes(w, &h, all, sizeof h, &e) == HYP_OK;
        for (int q = 0; q < p && q < 8; q++) same = same && all[q] == h;
        CHECK(same, "rank %d/%d %s n=%zu random: every rank holds the same bits", r, p, name, n);
    }
    free(buf);
    free(again);
    hyp_coll_finalize(c);
}

int main(int argc, char **argv) {
    hyp_coll *w = NULL;
    hyp_err e = {{0}};
    if (hyp_coll_init(&argc, &argv, &w, &e)) {
        printf("FAIL coll init: %s\n", e.msg);
        return 1;
    }
    if (hyp_coll_world(w) > 1) {
        int p = hyp_coll_world(w);
        /* the default stays MPI_Allreduce, counted by the ring model */
        float v[840];
        for (int j = 0; j < 840; j++) v[j] = 1;
        uint64_t b0 = hyp_coll_bytes_sent(w), s0 = hyp_coll_steps(w);
        CHECK(hyp_coll_allreduce_algo(w) == HYP_AR_MPI && hyp_coll_allreduce_f32(w, v, 840, &e) == HYP_OK && v[0] == p &&
                  hyp_coll_bytes_sent(w) - b0 == (uint64_t)(2 * (p - 1) * 840 * 4 / p) &&
                  hyp_coll_steps(w) - s0 == (uint64_t)(2 * (p - 1)),
              "rank %d/%d: the default (MPI_Allreduce) counts the ring model", hyp_coll_rank(w), p);
        for (int a = HYP_AR_RING; a <= HYP_AR_HIERARCHICAL; a++) check_algo(w, a, 2);
        check_algo(w, HYP_AR_HIERARCHICAL, 3); /* np 4: nodes of 3 and 1; np 3: one node */
        int ok = hyp_coll_all_ok(w, g_fail == 0);
        hyp_coll_finalize(w);
        return ok ? 0 : 1;
    }
    int a = -1;
    CHECK(hyp_coll_allreduce_algo_parse("ring", &a, &e) == HYP_OK && a == HYP_AR_RING &&
              hyp_coll_allreduce_algo_parse("auto", &a, &e) == HYP_OK && a == HYP_AR_MPI &&
              !strcmp(hyp_coll_allreduce_algo_name(HYP_AR_HALVING_DOUBLING), "halving_doubling"),
          "names parse both ways; auto is MPI's own all-reduce");
    CHECK(hyp_coll_allreduce_algo_parse("butterfly", &a, &e) == HYP_EINPUT && strstr(e.msg, "none of auto, ring"),
          "an unknown name is refused with the choices: %s", e.msg);
    CHECK(hyp_coll_set_allreduce(w, HYP_AR_RING, -1, &e) == HYP_EINPUT && strstr(e.msg, "negative"),
          "a negative node size is refused: %s", e.msg);
    float v[3] = {1, 2, 3};
    CHECK(hyp_coll_set_allreduce(w, HYP_AR_RING, 0, &e) == HYP_OK && hyp_coll_allreduce_f32(w, v, 3, &e) == HYP_OK &&
              v[2] == 3 && hyp_coll_bytes_sent(w) == 0 && hyp_coll_steps(w) == 0,
          "one rank: ring all-reduce is the identity, sends nothing, takes no round");
    hyp_coll_finalize(w);
#if defined(HYP_HAVE_MPI) && !defined(HYP_TEST_SANITIZED)
    if (system("command -v mpirun >/dev/null 2>&1") == 0) {
        for (int np = 2; np <= 4; np++) {
            char cmd[4096];
            snprintf(cmd, sizeof cmd,
                     "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_mpi_yield_when_idle=1 "
                     "mpirun -np %d --oversubscribe %s",
                     np, argv[0]);
            CHECK(system(cmd) == 0, "np=%d: every algorithm's checks on every rank", np);
        }
    } else
        printf("note: no mpirun; the multi-rank half did not run\n");
#endif
    return hyp_test_finish();
}
