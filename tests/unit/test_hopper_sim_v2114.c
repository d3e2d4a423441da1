/* test_hopper_sim_v2114.c — the simulator's emulation of the Hopper wrappers (kernels/hyp/hopper.cuh,
 * kernels/sim/hopper_sim.h) against plain C references written from the PTX ISA / CUDA driver text,
 * for v2114 (FA3 builds on them):
 *   TMA: a box copied into shared memory byte for byte equal to the reference for every swizzle
 *     (none, 32B, 64B, 128B: the 16-byte chunk j of 128-byte segment s lands at j ^ (s mod 2/4/8)),
 *     boxes reaching out of the tensor on every side (zero fill), rank 2 bf16 and rank 3 fp32;
 *     several loads on one barrier (one arrive.expect_tx; or expect_tx after the loads, the
 *     tx-count going negative first); the encoder's refusals; planted: reading before the wait
 *     (sees the poison, not the data), a tx-count never reached (deadlock reported, not hung).
 *   TMA store: the box from shared memory (un-swizzled) to the tensor, nothing written outside it;
 *     planted: the source overwritten before cp.async.bulk.wait_group.read (wrong data), no wait
 *     (reported at the thread's exit).
 *   mbarrier: six phases of 64 and 96 threads with parity waits (the counter each thread sees is
 *     exactly what the phase guarantees), also shuffled; planted: a count never reached
 *     (deadlock), an arrival beyond the count, use before init.
 *   named barriers (ping-pong of two warpgroups), setmaxnreg (uniformity), with planted misuse.
 *   wgmma: m64nNk16 for N = 8, 16, 24, 64, 128, 256, every transpose flag, A from registers, every
 *     swizzle and LBO/SBO variants, descriptors starting inside a swizzle atom, accumulate and
 *     scale-d = 0 (NaN inputs ignored); integer data (exact in any order) compared bit for bit
 *     through the per-thread fragment layout; random bf16 within the fp32 summation bound;
 *     planted: wrong SBO, wrong swizzle (wrong numbers), accumulators read before wait_group
 *     (NaN), no wgmma.fence, a thread missing (deadlock), wait_group 1 vs 0, an operand written or
 *     a TMA load into an operand while the wgmma is in flight.
 *   the demonstration GEMM (tests/hopper/gemm_tma_wgmma.cu: producer warpgroup with TMA and a
 *     2-stage mbarrier ring, consumer warpgroup with wgmma) equals a double-precision reference
 *     within the fp32 summation bound on a regular (128x256x128) and an odd (100x136x72) shape. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../kernels/sim/sim_tmap.h"
#include "sim.h"

#include "hyp_test.h"

static hyp_sim_module *g_hop, *g_gemm;

static int fails_with(int rc, const hyp_err *e, const char *n1, const char *n2) {
    if (rc != HYP_EFAIL) {
        printf("    (launch returned %d, not HYP_EFAIL)\n", rc);
        return 0;
    }
    printf("    message: %s\n", e->msg);
    return strstr(e->msg, n1) && (!n2 || strstr(e->msg, n2));
}

static uint64_t g_seed = 0x2114;
static uint32_t rnd(void) {
    g_seed = g_seed * 6364136223846793005ULL + 1442695040888963407ULL;
    return (uint32_t)(g_seed >> 33);
}
static uint16_t f2bf(float f) { /* round to nearest even */
    uint32_t u;
    memcpy(&u, &f, 4);
    u += 0x7FFFu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}
static float bf2f(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* ------------------------------------------------------------------------------------------ */
/* TMA */

/* The swizzle as the CUDA driver / PTX ISA state it: 16-byte chunk j of the 128-byte segment s of
 * the shared-memory destination is stored at chunk j ^ (s mod R), R = 2, 4, 8 for 32B, 64B, 128B. */
static size_t ref_swizzle(size_t o, int swz) {
    if (swz == 0) return o;
    size_t R = (size_t)1 << swz, s = o / 128, j = (o / 16) % 8;
    return (o / 128) * 128 + ((j ^ (s % R)) * 16) + o % 16;
}

/* The box at coordinates c, packed row-major in shared memory (dimension 0 fastest), elements
 * outside the tensor zero, then swizzled. */
static void ref_box(uint8_t *img, const uint8_t *g, int es, int rank, const uint64_t *dims, const uint64_t *strides,
                    const uint32_t *box, const int *c, int swz) {
    size_t n = 1;
    for (int d = 0; d < rank; d++) n *= box[d];
    for (size_t e = 0; e < n; e++) {
        size_t rest = e, src = 0;
        int in = 1;
        for (int d = 0; d < rank; d++) {
            long long x = c[d] + (long long)(rest % box[d]);
            rest /= box[d];
            if (x < 0 || x >= (long long)dims[d]) in = 0;
            else src += (size_t)x * (d == 0 ? (size_t)es : strides[d - 1]);
        }
        uint8_t *p = img + ref_swizzle(e * es, swz);
        if (in) memcpy(p, g + src, es);
        else memset(p, 0, es);
    }
}

static size_t round1k(size_t b) { return b < 1024 ? 1024 : (b + 1023) / 1024 * 1024; }

static void test_tma_box(void) {
    /* rank 2, bf16, 100 x 37 with rows padded to 208 bytes */
    static uint16_t T2[37 * 104] __attribute__((aligned(64)));
    for (int i = 0; i < 37 * 104; i++) T2[i] = (uint16_t)(rnd() & 0xFFFF);
    /* rank 3, fp32, 12 x 5 x 3 */
    static float T3[12 * 5 * 3] __attribute__((aligned(64)));
    for (int i = 0; i < 180; i++) T3[i] = (float)i + 0.25f;
    struct {
        const char *what;
        int rank, dtype, swz;
        uint32_t box[3];
        int c[3];
    } cases[] = {
        {"bf16 128B swizzle, 64x16 box at the origin", 2, HYP_TMAP_BF16, 3, {64, 16, 1}, {0, 0, 0}},
        {"bf16 128B swizzle, box past the right and bottom edges", 2, HYP_TMAP_BF16, 3, {64, 16, 1}, {64, 32, 0}},
        {"bf16 128B swizzle, box before the left and top edges", 2, HYP_TMAP_BF16, 3, {64, 16, 1}, {-8, -3, 0}},
        {"bf16 no swizzle, 8x8 box", 2, HYP_TMAP_BF16, 0, {8, 8, 1}, {96, 30, 0}},
        {"bf16 32B swizzle, 16x8 box", 2, HYP_TMAP_BF16, 1, {16, 8, 1}, {88, 3, 0}},
        {"bf16 64B swizzle, 32x12 box", 2, HYP_TMAP_BF16, 2, {32, 12, 1}, {72, 29, 0}},
        {"bf16 128B swizzle, 32-byte rows (16x12 box)", 2, HYP_TMAP_BF16, 3, {16, 12, 1}, {16, 5, 0}},
        {"fp32 rank 3, 32B swizzle, 8x4x2 box inside", 3, HYP_TMAP_F32, 1, {8, 4, 2}, {0, 0, 0}},
        {"fp32 rank 3, 32B swizzle, 8x4x2 box out on all three dimensions", 3, HYP_TMAP_F32, 1, {8, 4, 2}, {8, 3, 2}},
        {"fp32 rank 3, no swizzle, 4x5x3 box at (-2,-1,-1)", 3, HYP_TMAP_F32, 0, {4, 5, 3}, {-2, -1, -1}},
    };
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        int r = cases[ci].rank;
        uint64_t dims2[2] = {100, 37}, str2[1] = {208}, dims3[3] = {12, 5, 3}, str3[2] = {48, 240};
        const uint64_t *dims = r == 2 ? dims2 : dims3, *str = r == 2 ? str2 : str3;
        const void *g = r == 2 ? (const void *)T2 : (const void *)T3;
        int es = r == 2 ? 2 : 4;
        uint32_t es1[3] = {1, 1, 1};
        unsigned char map[128] __attribute__((aligned(64)));
        char why[200];
        int erc = hyp_sim_tmap_encode_tiled(map, cases[ci].dtype, (unsigned)r, g, dims, str, cases[ci].box, es1, 0,
                                            cases[ci].swz, 0, 0, why, sizeof why);
        if (erc) {
            CHECK(0, "encode %s: %s", cases[ci].what, why);
            continue;
        }
        unsigned bytes = (unsigned)es;
        for (int d = 0; d < r; d++) bytes *= cases[ci].box[d];
        uint8_t *want = calloc(bytes, 1), *got = calloc(bytes, 1);
        ref_box(want, g, es, r, dims, str, cases[ci].box, cases[ci].c, cases[ci].swz);
        for (int mode = 0; mode < (ci == 1 ? 2 : 1); mode++) {
            memset(got, 0x5A, bytes);
            unsigned char *pout = got;
            void *args[] = {&pout, map, &r, &cases[ci].c[0], &cases[ci].c[1], &cases[ci].c[2], &bytes, &mode};
            hyp_err e;
            int rc = hyp_sim_launch(g_hop, "tma_box", hyp_dim3_of(1, 1, 1), hyp_dim3_of(64, 1, 1), round1k(bytes),
                                    args, NULL, &e);
            if (mode == 0)
                CHECK(rc == HYP_OK && memcmp(got, want, bytes) == 0, "test_v2114_tma %s: %u bytes equal the reference%s%s",
                      cases[ci].what, bytes, rc ? ": " : "", rc ? e.msg : "");
            else {
                int poisoned = rc == HYP_OK;
                for (unsigned i = 0; i < bytes && poisoned; i++) poisoned = got[i] == 0xFF;
                CHECK(poisoned, "test_v2114_tma planted: reading the box before the mbarrier wait sees the poison "
                      "(0xFF), not the data");
            }
        }
        free(want);
        free(got);
    }
}

/* TMA store: the box image in shared memory (swizzled as a load writes it) goes to the tensor;
 * elements outside the tensor are not written. */
static void test_tma_store(void) {
    enum { ROWS = 37, COLS = 100, PITCH = 104 }; /* bf16, rows padded to 208 bytes */
    static uint16_t T[ROWS * PITCH] __attribute__((aligned(64))), W[ROWS * PITCH];
    static uint8_t img[2048];
    struct {
        const char *what;
        int swz;
        uint32_t box[2];
        int c[2];
    } cases[] = {
        {"bf16 128B swizzle, 64x16 box past the right and bottom edges", 3, {64, 16}, {64, 32}},
        {"bf16 64B swizzle, 32x12 box before the left and top edges", 2, {32, 12}, {-5, -7}},
        {"bf16 no swizzle, 8x8 box inside", 0, {8, 8}, {40, 9}},
    };
    uint64_t dims[2] = {COLS, ROWS}, str[1] = {PITCH * 2};
    uint32_t es1[2] = {1, 1};
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        unsigned bytes = cases[ci].box[0] * cases[ci].box[1] * 2;
        for (unsigned i = 0; i < bytes; i++) img[i] = (uint8_t)(rnd() & 0xFF);
        /* the reference: element (x, y) of the box, found in the image where a load would have put it */
        for (int i = 0; i < ROWS * PITCH; i++) W[i] = 0xEEEE;
        for (uint32_t y = 0; y < cases[ci].box[1]; y++)
            for (uint32_t x = 0; x < cases[ci].box[0]; x++) {
                long gx = cases[ci].c[0] + (long)x, gy = cases[ci].c[1] + (long)y;
                if (gx < 0 || gx >= COLS || gy < 0 || gy >= ROWS) continue;
                memcpy(&W[gy * PITCH + gx], img + ref_swizzle((y * cases[ci].box[0] + x) * 2, cases[ci].swz), 2);
            }
        unsigned char map[128] __attribute__((aligned(64)));
        char why[200];
        if (hyp_sim_tmap_encode_tiled(map, HYP_TMAP_BF16, 2, T, dims, str, cases[ci].box, es1, 0, cases[ci].swz, 0, 0, why,
                                      sizeof why)) {
            CHECK(0, "encode %s: %s", cases[ci].what, why);
            continue;
        }
        for (int mode = 0; mode < (ci == 0 ? 3 : 1); mode++) {
            for (int i = 0; i < ROWS * PITCH; i++) T[i] = 0xEEEE;
            int r = 2, c2 = 0;
            uint8_t *pi = img;
            void *args[] = {map, &r, &cases[ci].c[0], &cases[ci].c[1], &c2, &pi, &bytes, &mode};
            hyp_err e;
            int rc = hyp_sim_launch(g_hop, "tma_store_box", hyp_dim3_of(1, 1, 1), hyp_dim3_of(64, 1, 1), 2048, args, NULL, &e);
            int same = memcmp(T, W, sizeof T) == 0;
            if (mode == 0)
                CHECK(rc == HYP_OK && same, "test_v2114_tma_store %s: the tensor equals the reference, nothing written "
                      "outside it%s%s", cases[ci].what, rc ? ": " : "", rc ? e.msg : "");
            else if (mode == 1)
                CHECK(rc == HYP_OK && !same, "test_v2114_tma_store planted: shared memory overwritten before "
                      "cp.async.bulk.wait_group.read reaches the tensor (wrong data)");
            else
                CHECK(fails_with(rc, &e, "TMA store not waited for", NULL), "test_v2114_tma_store planted: a thread "
                      "exiting with its store not waited for is reported");
        }
    }
}

static void test_tma_multi(void) {
    static uint16_t T[64 * 64] __attribute__((aligned(64)));
    for (int i = 0; i < 64 * 64; i++) T[i] = (uint16_t)(rnd() & 0xFFFF);
    uint64_t dims[2] = {64, 40}, str[1] = {128};
    uint32_t box[2] = {64, 8}, es1[2] = {1, 1};
    unsigned char map[128] __attribute__((aligned(64)));
    char why[200];
    CHECK(hyp_sim_tmap_encode_tiled(map, HYP_TMAP_BF16, 2, T, dims, str, box, es1, 0, HYP_TMAP_SWIZZLE_128B, 0, 0, why,
                                    sizeof why) == 0, "encode the 64x40 bf16 map");
    unsigned bytes = 64 * 8 * 2;
    int n = 3, c0 = 0, c1 = 21, box1 = 8; /* rows 21..44: the third box reaches past row 39 */
    uint8_t want[3 * 1024], got[3 * 1024];
    for (int i = 0; i < n; i++) {
        int c[2] = {c0, c1 + i * box1};
        ref_box(want + i * bytes, (const uint8_t *)T, 2, 2, dims, str, box, c, 3);
    }
    const char *names[] = {"one arrive.expect_tx for three loads", "expect_tx per load after the loads, then arrive",
                           "planted: expects 16 bytes more than the loads bring"};
    for (int mode = 0; mode < 3; mode++) {
        memset(got, 0x5A, sizeof got);
        unsigned char *pout = got;
        void *args[] = {&pout, map, &c0, &c1, &box1, &n, &bytes, &mode};
        hyp_err e;
        int rc = hyp_sim_launch(g_hop, "tma_multi", hyp_dim3_of(1, 1, 1), hyp_dim3_of(32, 1, 1), 3 * 1024, args, NULL, &e);
        if (mode < 2)
            CHECK(rc == HYP_OK && memcmp(got, want, 3 * bytes) == 0, "test_v2114_tma_tx %s: the barrier completes and "
                  "the three boxes equal the reference%s%s", names[mode], rc ? ": " : "", rc ? e.msg : "");
        else
            CHECK(fails_with(rc, &e, "deadlock", "mbarrier.try_wait.parity"), "test_v2114_tma_tx %s: reported as a "
                  "deadlock of the wait, not hung", names[mode]);
    }
}

static void test_tmap_encode(void) {
    static uint16_t T[64 * 64] __attribute__((aligned(64)));
    unsigned char map[128] __attribute__((aligned(64)));
    char why[200];
    uint64_t dims[2] = {64, 64}, str[1] = {128}, bad_str[1] = {120};
    uint32_t box[2] = {64, 8}, box_big[2] = {257, 8}, box_wide[2] = {128, 8}, box_odd[2] = {4, 8}, es1[2] = {1, 1};
    struct {
        const char *what, *needle;
        const void *g;
        const uint64_t *str;
        const uint32_t *box;
        int swz;
        unsigned rank;
    } bad[] = {
        {"a box dimension of 257", "boxDim[0] = 257", T, str, box_big, 0, 2},
        {"a stride of 120 bytes", "globalStrides[0] = 120", T, bad_str, box, 0, 2},
        {"a 256-byte box row under the 128B swizzle", "exceeds the 128-byte swizzle span", T, str, box_wide, 3, 2},
        {"an 8-byte box row", "not a multiple of 16", T, str, box_odd, 0, 2},
        {"a global address 8 bytes off", "not 16-byte aligned", (const char *)T + 8, str, box, 0, 2},
        {"rank 6", "tensorRank 6", T, str, box, 0, 6},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int rc = hyp_sim_tmap_encode_tiled(map, HYP_TMAP_BF16, bad[i].rank, bad[i].g, dims, bad[i].str, bad[i].box, es1, 0,
                                           bad[i].swz, 0, 0, why, sizeof why);
        CHECK(rc == -1 && strstr(why, bad[i].needle), "test_v2114_tmap_encode refuses %s (%s)", bad[i].what,
              rc ? why : "accepted");
    }
}

/* ------------------------------------------------------------------------------------------ */
/* mbarrier, named barriers, setmaxnreg */

static void test_mbar(void) {
    for (unsigned n = 64; n <= 96; n += 32)
        for (int shuffle = 0; shuffle < 2; shuffle++) {
            int out[7 * 96];
            memset(out, 0, sizeof out);
            int *po = out, mode = 0;
            void *args[] = {&po, &mode};
            hyp_sim_opts o = {1, shuffle ? HYP_SIM_ORDER_SHUFFLE : HYP_SIM_ORDER_FIXED, 7, 0};
            hyp_err e;
            int rc = hyp_sim_launch(g_hop, "mbar_phases", hyp_dim3_of(2, 1, 1), hyp_dim3_of(n, 1, 1), 0, args, &o, &e);
            int ok = rc == HYP_OK;
            for (unsigned p = 0; p < 6 && ok; p++)
                for (unsigned t = 0; t < n && ok; t++) ok = out[p * n + t] == (int)(n * (p + 1));
            for (unsigned t = 0; t < n && ok; t++) ok = out[6 * n + t] == 1;
            CHECK(ok, "test_v2114_mbarrier six phases of %u threads (%s order): each wait returns exactly when its "
                  "phase's %u arrivals are in, parity alternating; a parity-1 wait on a fresh barrier passes%s%s",
                  n, shuffle ? "shuffled" : "fixed", n, rc ? ": " : "", rc ? e.msg : "");
        }
    struct {
        int mode;
        const char *what, *n1, *n2;
    } planted[] = {
        {1, "a count one above the threads", "deadlock", "mbarrier.try_wait.parity 0"},
        {2, "an arrival with no pending arrival left", "no pending arrival left", NULL},
        {3, "an mbarrier used without init", "no hyp_mbar_init", NULL},
    };
    for (size_t i = 0; i < sizeof planted / sizeof planted[0]; i++) {
        int out[7 * 64];
        int *po = out, mode = planted[i].mode;
        void *args[] = {&po, &mode};
        hyp_err e;
        int rc = hyp_sim_launch(g_hop, "mbar_phases", hyp_dim3_of(1, 1, 1), hyp_dim3_of(64, 1, 1), 0, args, NULL, &e);
        CHECK(fails_with(rc, &e, planted[i].n1, planted[i].n2), "test_v2114_mbarrier planted: %s is reported",
              planted[i].what);
    }
}

static void test_named_and_regs(void) {
    int out[3 * 256];
    int *po = out, mode = 0;
    void *args[] = {&po, &mode};
    hyp_err e;
    for (int shuffle = 0; shuffle < 2; shuffle++) {
        memset(out, 0, sizeof out);
        hyp_sim_opts o = {1, shuffle ? HYP_SIM_ORDER_SHUFFLE : HYP_SIM_ORDER_FIXED, 3, 0};
        int rc = hyp_sim_launch(g_hop, "named_bars", hyp_dim3_of(1, 1, 1), hyp_dim3_of(256, 1, 1), 0, args, &o, &e);
        int ok = rc == HYP_OK;
        for (int r = 0; r < 3 && ok; r++)
            for (int t = 0; t < 256 && ok; t++) ok = out[r * 256 + t] == (t < 128 ? 200 + r : 100 + r);
        CHECK(ok, "test_v2114_named_barriers ping-pong of two warpgroups over bar.arrive/bar.sync 1 and 2, three "
              "rounds (%s order)%s%s", shuffle ? "shuffled" : "fixed", rc ? ": " : "", rc ? e.msg : "");
    }
    const char *n1[] = {NULL, "passes the same count", "deadlock", "ids are 1..15"};
    for (mode = 1; mode <= 3; mode++) {
        int rc = hyp_sim_launch(g_hop, "named_bars", hyp_dim3_of(1, 1, 1), hyp_dim3_of(256, 1, 1), 0, args, NULL, &e);
        CHECK(fails_with(rc, &e, n1[mode], NULL), "test_v2114_named_barriers planted misuse %d is reported", mode);
    }
    mode = 0;
    memset(out, 0, sizeof out);
    int rc = hyp_sim_launch(g_hop, "regs", hyp_dim3_of(1, 1, 1), hyp_dim3_of(256, 1, 1), 0, args, NULL, &e);
    int ok = rc == HYP_OK;
    for (int t = 0; t < 256 && ok; t++) ok = out[t] == 1;
    CHECK(ok, "test_v2114_setmaxnreg dec 40 / inc 232 per warpgroup runs%s%s", rc ? ": " : "", rc ? e.msg : "");
    mode = 1;
    rc = hyp_sim_launch(g_hop, "regs", hyp_dim3_of(1, 1, 1), hyp_dim3_of(256, 1, 1), 0, args, NULL, &e);
    CHECK(fails_with(rc, &e, "warpgroup-uniform", NULL), "test_v2114_setmaxnreg planted: a non-uniform count is reported");
    rc = hyp_sim_launch(g_hop, "regs", hyp_dim3_of(1, 1, 1), hyp_dim3_of(192, 1, 1), 0, args, NULL, &e);
    CHECK(fails_with(rc, &e, "multiple of 128", NULL), "test_v2114_setmaxnreg planted: a partial warpgroup is reported");
}

/* ------------------------------------------------------------------------------------------ */
/* wgmma */

/* An operand in shared memory, as the PTX ISA's "Shared Memory Matrix Layout" for wgmma describes
 * it, for 16-bit elements. MN is the row index of A (m) or the column index of B (n), k the
 * reduction index. K-major: without swizzle, 8x8 "core matrices" of 8 rows x 16 contiguous bytes,
 * core matrices LBO apart along K and SBO apart along MN; with a swizzle of S = 32/64/128 bytes,
 * rows of S bytes (K contiguous), 8-row groups SBO apart. MN-major: the same with MN contiguous
 * (without swizzle: core matrices of 8 k-rows x 8 mn, SBO apart along MN and LBO along K; with a
 * swizzle: k-rows of S bytes holding S/2 mn, blocks of S/2 mn LBO apart, 8-row groups SBO apart).
 * `kofs` is the operand's first k inside a wider K-major row (a descriptor starting inside a
 * swizzle atom). */
typedef struct {
    int kmajor, swz_bytes; /* 0, 32, 64, 128 */
    unsigned lbo, sbo, kofs;
} layout;
static size_t lay_addr(layout L, unsigned mn, unsigned k) {
    unsigned S = (unsigned)L.swz_bytes;
    if (L.kmajor) {
        if (!S) return (mn % 8) * 16 + (mn / 8) * L.sbo + (k / 8) * L.lbo + (k % 8) * 2;
        return (mn / 8) * L.sbo + (mn % 8) * S + (L.kofs + k) * 2;
    }
    if (!S) return (mn / 8) * L.sbo + (mn % 8) * 2 + (k / 8) * L.lbo + (k % 8) * 16;
    return (mn / (S / 2)) * L.lbo + (mn % (S / 2)) * 2 + (k / 8) * L.sbo + (k % 8) * S;
}
static int swz_code(int bytes) { return bytes == 0 ? 0 : bytes == 32 ? 1 : bytes == 64 ? 2 : 3; } /* TMA enum */
static int desc_code(int bytes) { return bytes == 0 ? 0 : bytes == 128 ? 1 : bytes == 64 ? 2 : 3; } /* wgmma */

typedef struct {
    unsigned offA, lboA, sboA, offB, lboB, sboB;
    int swA, swB, n, ta, tb, rs, accumulate, mode;
} wgmma_args; /* tests/hopper/hopper_sim.cu's */

enum { IMG = 65536 };

typedef struct {
    const char *what;
    int n, ta, tb, rs;
    layout A, B;
    int accumulate;
} wcase;

/* Runs one wgmma case; data: 0 small integers (exact in any order: bit-for-bit), 1 random bf16
 * (within the bound of an fp32 sum of 17 terms in any order: 17 * 2^-24 * (|c| + sum |a b|)).
 * bug: 0, or a planted descriptor error (1 SBO halved, 2 another swizzle mode) that must give
 * wrong numbers. mode: the kernel's mode. Returns 1 if it matched. */
static int run_wgmma(const wcase *c, int data, int bug, int mode, int quiet) {
    static uint8_t img[IMG];
    static float A[64][16], B[16][256], C0[128 * 128], out[128 * 128], out2[128 * 128], out3[128 * 128];
    static unsigned afrag[128 * 4];
    memset(img, 0, sizeof img);
    const unsigned N = (unsigned)c->n, nv = N / 2, offA = 0, offB = 32768;
    for (unsigned m = 0; m < 64; m++)
        for (unsigned k = 0; k < 16; k++) {
            float v = data ? (float)((int)(rnd() % 2001) - 1000) / 1000.0f : (float)((int)(rnd() % 7) - 3);
            uint16_t h = f2bf(v);
            A[m][k] = bf2f(h);
            if (!c->rs) {
                size_t a = ref_swizzle(offA + lay_addr(c->A, m, k), swz_code(c->A.swz_bytes));
                memcpy(img + a, &h, 2);
            }
        }
    for (unsigned k = 0; k < 16; k++)
        for (unsigned n = 0; n < N; n++) {
            float v = data ? (float)((int)(rnd() % 2001) - 1000) / 1000.0f : (float)((int)(rnd() % 5) - 2);
            uint16_t h = f2bf(v);
            B[k][n] = bf2f(h);
            size_t a = ref_swizzle(offB + lay_addr(c->B, n, k), swz_code(c->B.swz_bytes));
            memcpy(img + a, &h, 2);
        }
    /* A fragments (RS form): warp w holds rows 16w..16w+15 in the mma.m16n8k16 A layout */
    for (unsigned t = 0; t < 128; t++) {
        unsigned w = t / 32, g = (t % 32) / 4, q = t % 4;
        for (unsigned j = 0; j < 4; j++) {
            unsigned row = 16 * w + g + 8 * (j & 1), col = 2 * q + 8 * (j >> 1);
            afrag[t * 4 + j] = f2bf(A[row][col]) | ((unsigned)f2bf(A[row][col + 1]) << 16);
        }
    }
    for (unsigned i = 0; i < 128 * nv; i++)
        C0[i] = c->accumulate ? (data ? (float)((int)(rnd() % 2001) - 1000) / 100.0f : (float)((int)(rnd() % 9) - 4))
                              : NAN; /* scale-d = 0 must ignore the accumulators' old values */
    wgmma_args p = {offA + (c->A.swz_bytes && c->A.kmajor ? c->A.kofs * 2 : 0), c->A.lbo, c->A.sbo,
                    offB + (c->B.swz_bytes && c->B.kmajor ? c->B.kofs * 2 : 0), c->B.lbo, c->B.sbo,
                    desc_code(c->A.swz_bytes), desc_code(c->B.swz_bytes), c->n, c->ta, c->tb, c->rs,
                    c->accumulate, mode};
    if (bug == 1) p.sboB /= 2;
    if (bug == 2) p.swB = p.swB == 1 ? 2 : 1;
    /* a K-major swizzled operand's descriptor starts kofs elements into its rows (lay_addr adds
     * kofs, so the image holds the whole row) */
    float *po = out, *po2 = out2, *po3 = out3, *pc = C0;
    uint8_t *pi = img;
    unsigned *pa = afrag, img_bytes = IMG;
    static uint16_t tensor[64 * 8] __attribute__((aligned(64)));
    static unsigned char map[128] __attribute__((aligned(64)));
    uint64_t tdims[2] = {64, 8}, tstr[1] = {128};
    uint32_t tbox[2] = {64, 8}, tes[2] = {1, 1};
    char why[200];
    if (hyp_sim_tmap_encode_tiled(map, HYP_TMAP_BF16, 2, tensor, tdims, tstr, tbox, tes, 0, 0, 0, 0, why, sizeof why))
        printf("    (map: %s)\n", why);
    void *args[] = {&po, &po2, &po3, &pi, &img_bytes, &pc, &pa, &p, map};
    hyp_err e;
    int rc = hyp_sim_launch(g_hop, "wgmma_tile", hyp_dim3_of(1, 1, 1), hyp_dim3_of(128, 1, 1), IMG, args, NULL, &e);
    if (mode == 2 || mode == 3 || mode == 5 || mode == 6) {
        static const char *needle[] = {0, 0, "before any wgmma.fence", "deadlock", 0, "changed before this wait",
                                       "still reads"};
        static const char *what[] = {0, 0, "a wgmma without wgmma.fence", "a thread missing from the warpgroup", 0,
                                     "an operand written while the wgmma is in flight",
                                     "a TMA load into an operand of a wgmma in flight"};
        CHECK(fails_with(rc, &e, needle[mode], mode == 3 ? "wgmma" : NULL), "test_v2114_wgmma planted: %s is reported",
              what[mode]);
        return 1;
    }
    if (rc != HYP_OK) {
        CHECK(0, "test_v2114_wgmma %s: %s", c->what, e.msg);
        return 0;
    }
    double worst = 0;
    int exact = 1, within = 1, nan_seen = 0, out2_nan = 1;
    for (unsigned t = 0; t < 128; t++) {
        unsigned w = t / 32, g = (t % 32) / 4, q = t % 4;
        for (unsigned v = 0; v < nv; v++) {
            /* the accumulator fragment (PTX ISA, wgmma .m64nNk16 D): d[4i + {0,1,2,3}] =
             * D[16w + g (+8 for 2,3)][8i + 2q (+1 for 1,3)] */
            unsigned row = 16 * w + g + 8 * ((v >> 1) & 1), col = 8 * (v >> 2) + 2 * q + (v & 1);
            float ref = c->accumulate ? C0[t * nv + v] : 0.0f;
            double dref = ref, mag = fabs(ref);
            for (unsigned k = 0; k < 16; k++) {
                ref += A[row][k] * B[k][col];
                dref += (double)A[row][k] * B[k][col];
                mag += fabs((double)A[row][k] * B[k][col]);
            }
            float got = out[t * nv + v];
            if (isnan(got)) nan_seen = 1;
            if (got != ref) exact = 0;
            double err = fabs((double)got - dref);
            if (!(err <= 17.0 * ldexp(1.0, -24) * mag)) within = 0;
            if (err > worst || isnan(err)) worst = isnan(err) ? INFINITY : err;
            if (mode == 4) {
                if (!isnan(out2[t * nv + v])) out2_nan = 0;
                if (out3[t * nv + v] != got) exact = 0;
            }
        }
    }
    if (mode == 1) {
        CHECK(nan_seen, "test_v2114_wgmma planted: accumulators read before wgmma.wait_group are NaN (%s)", c->what);
        return 1;
    }
    if (mode == 4) {
        CHECK(out2_nan && exact, "test_v2114_wgmma_groups: after wait_group 1 the newer group's accumulators are "
              "not yet readable (NaN) and the older ones are; wait_group 0 completes both (%s)", c->what);
        return 1;
    }
    if (bug) {
        CHECK(!exact && worst > 0.5, "test_v2114_wgmma planted descriptor bug (%s) gives wrong numbers (max |diff| %g): %s",
              bug == 1 ? "B's SBO halved" : "B's swizzle mode changed", worst, c->what);
        return 1;
    }
    if (!quiet) {
        if (data == 0)
            CHECK(exact, "test_v2114_wgmma %s, integer data: bit-for-bit equal to the reference (max |diff| %g)", c->what,
                  worst);
        else
            CHECK(within, "test_v2114_wgmma %s, random bf16: within 17 * 2^-24 * sum|terms| of the exact sum "
                  "(max |diff| %g)", c->what, worst);
    }
    return data == 0 ? exact : within;
}

static void test_wgmma(void) {
    /*                      what                                              N   ta tb rs  A layout                       B layout                          acc */
    const wcase cases[] = {
        {"m64n64k16 A,B K-major 128B swizzle, starts 32 and 64 bytes into the atom", 64, 0, 0, 0,
         {1, 128, 16, 1024, 16}, {1, 128, 16, 1024, 32}, 1},
        {"m64n128k16 A M-major 128B, B N-major 128B (LBO 2048: two 64-column blocks)", 128, 1, 1, 0,
         {0, 128, 16, 1024, 0}, {0, 128, 2048, 1024, 0}, 1},
        {"m64n16k16 A K-major no swizzle (LBO 128, SBO 256), B N-major no swizzle (LBO 128, SBO 256)", 16, 0, 1, 0,
         {1, 0, 128, 256, 0}, {0, 0, 128, 256, 0}, 0},
        {"m64n8k16 A M-major 64B (LBO 1024, SBO 512), B K-major 32B (SBO 256)", 8, 1, 0, 0,
         {0, 64, 1024, 512, 0}, {1, 32, 16, 256, 0}, 1},
        {"m64n24k16 A K-major no swizzle (LBO 1024, SBO 128), B K-major 64B (SBO 1024, spaced row groups)", 24, 0, 0, 0,
         {1, 0, 1024, 128, 0}, {1, 64, 16, 1024, 0}, 1},
        {"m64n128k16 A M-major 32B (LBO 512, SBO 256), B K-major 128B", 128, 1, 0, 0,
         {0, 32, 512, 256, 0}, {1, 128, 16, 1024, 0}, 0},
        {"m64n256k16 A from registers, B N-major 128B (four 64-column blocks)", 256, 0, 1, 1,
         {1, 0, 0, 0, 0}, {0, 128, 2048, 1024, 0}, 1},
        {"m64n64k16 A from registers, B K-major 32B", 64, 0, 0, 1, {1, 0, 0, 0, 0}, {1, 32, 16, 256, 0}, 1},
        {"m64n16k16 A from registers, B N-major 64B (LBO 1024, SBO 512)", 16, 0, 1, 1,
         {1, 0, 0, 0, 0}, {0, 64, 1024, 512, 0}, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) run_wgmma(&cases[i], 0, 0, 0, 0);
    run_wgmma(&cases[0], 1, 0, 0, 0);
    run_wgmma(&cases[6], 1, 0, 0, 0);
    run_wgmma(&cases[1], 0, 1, 0, 0);
    run_wgmma(&cases[0], 0, 2, 0, 0);
    run_wgmma(&cases[0], 0, 0, 1, 0);
    run_wgmma(&cases[0], 0, 0, 2, 0);
    run_wgmma(&cases[0], 0, 0, 3, 0);
    run_wgmma(&cases[3], 0, 0, 4, 0);
    run_wgmma(&cases[0], 0, 0, 5, 0);
    run_wgmma(&cases[1], 0, 0, 6, 0);
}

/* ------------------------------------------------------------------------------------------ */
/* the demonstration GEMM */

static void test_gemm(void) {
    const int shapes[2][3] = {{128, 256, 128}, {100, 136, 72}};
    for (int si = 0; si < 2; si++) {
        int M = shapes[si][0], N = shapes[si][1], K = shapes[si][2];
        uint16_t *A = aligned_alloc(64, (size_t)M * K * 2 + 64), *B = aligned_alloc(64, (size_t)K * N * 2 + 64);
        float *C = malloc((size_t)M * N * 4);
        for (int i = 0; i < M * K; i++) A[i] = f2bf((float)((int)(rnd() % 2001) - 1000) / 1000.0f);
        for (int i = 0; i < K * N; i++) B[i] = f2bf((float)((int)(rnd() % 2001) - 1000) / 1000.0f);
        for (int i = 0; i < M * N; i++) C[i] = NAN;
        unsigned char mapA[128] __attribute__((aligned(64))), mapB[128] __attribute__((aligned(64)));
        uint64_t dA[2] = {(uint64_t)K, (uint64_t)M}, sA[1] = {(uint64_t)K * 2}, dB[2] = {(uint64_t)N, (uint64_t)K},
                 sB[1] = {(uint64_t)N * 2};
        uint32_t box[2] = {64, 64}, es1[2] = {1, 1};
        char why[200];
        int erc = hyp_sim_tmap_encode_tiled(mapA, HYP_TMAP_BF16, 2, A, dA, sA, box, es1, 0, HYP_TMAP_SWIZZLE_128B, 0, 0,
                                            why, sizeof why) |
                  hyp_sim_tmap_encode_tiled(mapB, HYP_TMAP_BF16, 2, B, dB, sB, box, es1, 0, HYP_TMAP_SWIZZLE_128B, 0, 0,
                                            why, sizeof why);
        CHECK(erc == 0, "gemm %dx%dx%d: tensor maps encode", M, N, K);
        float *pc = C;
        void *args[] = {&pc, mapA, mapB, &M, &N, &K};
        for (int shuffle = 0; shuffle < 2; shuffle++) {
            hyp_sim_opts o = {0, shuffle ? HYP_SIM_ORDER_SHUFFLE : HYP_SIM_ORDER_FIXED, 11, 0};
            hyp_err e;
            int rc = hyp_sim_launch(g_gemm, "gemm_tma_wgmma", hyp_dim3_of((unsigned)(N + 127) / 128, (unsigned)(M + 63) / 64, 1),
                                    hyp_dim3_of(256, 1, 1), 2 * (64 * 64 * 2 + 64 * 128 * 2), args, &o, &e);
            double worst = 0;
            int ok = rc == HYP_OK;
            for (int i = 0; i < M && ok; i++)
                for (int j = 0; j < N; j++) {
                    double s = 0, mag = 0;
                    for (int k = 0; k < K; k++) {
                        double t = (double)bf2f(A[i * K + k]) * bf2f(B[k * N + j]);
                        s += t;
                        mag += fabs(t);
                    }
                    double err = fabs((double)C[i * N + j] - s);
                    /* fp32 accumulation of K exact bf16 products in k order: |err| <= K * 2^-24 * sum|terms| */
                    if (!(err <= K * ldexp(1.0, -24) * mag)) ok = 0;
                    if (err > worst || isnan(err)) worst = isnan(err) ? INFINITY : err;
                }
            CHECK(ok, "test_v2114_gemm_tma_wgmma %dx%dx%d (%s, %s order): producer TMA + 2-stage mbarrier ring, consumer "
                  "wgmma m64n128k16, equals the reference within K * 2^-24 * sum|terms| (max |diff| %.3g)%s%s",
                  M, N, K, si ? "odd shape" : "regular shape", shuffle ? "shuffled" : "fixed", worst, rc ? ": " : "",
                  rc ? e.msg : "");
        }
        free(A);
        free(B);
        free(C);
    }
}

int main(void) {
    char cache[1024], path[1024];
    snprintf(cache, sizeof cache, "%s/sim-cache", HYP_BINARY_DIR);
    setenv("HYP_SIM_CACHE", cache, 0);
    unsetenv("HYP_SIM_SHUFFLE");
    hyp_err e;
    snprintf(path, sizeof path, "%s/tests/hopper/hopper_sim.cu", HYP_SOURCE_DIR);
    int rc1 = hyp_sim_open(path, NULL, &g_hop, &e);
    CHECK(rc1 == HYP_OK, "tests/hopper/hopper_sim.cu compiles for sim%s%s", rc1 ? ": " : "", rc1 ? e.msg : "");
    snprintf(path, sizeof path, "%s/tests/hopper/gemm_tma_wgmma.cu", HYP_SOURCE_DIR);
    int rc2 = hyp_sim_open(path, NULL, &g_gemm, &e);
    CHECK(rc2 == HYP_OK, "tests/hopper/gemm_tma_wgmma.cu compiles for sim%s%s", rc2 ? ": " : "", rc2 ? e.msg : "");
    if (rc1 == HYP_OK) {
        test_tmap_encode();
        test_tma_box();
        test_tma_multi();
        test_tma_store();
        test_mbar();
        test_named_and_regs();
        test_wgmma();
    }
    if (rc2 == HYP_OK) test_gemm();
    hyp_sim_unload(g_hop);
    hyp_sim_unload(g_gemm);
    hyp_sim_trim();
    printf("%d passed, %d failed\n", g_pass, g_fail);
    return g_fail ? 1 : 0;
}
