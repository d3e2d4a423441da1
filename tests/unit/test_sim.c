/* test_sim.c — the CPU simulator (runtime/sim.c + kernels/sim/prelude.h) on the kernels of
 * tests/sim/: (a) correct kernels give exact results — block reductions (also a partial warp),
 * every shuffle with width < 32 against CUDA's documented semantics, votes, atomics from many
 * blocks on several OS threads, dynamic shared memory; (b) planted bugs are reported, not hung or
 * crashed on — a barrier in divergent code, a thread exiting while others wait, out-of-bounds
 * static and dynamic shared indices, a missing __syncthreads (caught with order shuffling, passes
 * with the barrier), warp-mask misuse, a fiber stack overflow, a wild pointer, __trap; (c) a
 * 16x16x16 bf16 tile with ldmatrix + mma.m16n8k16 matches a plain loop exactly, and transposed
 * or swapped fragment indexing gives wrong numbers; (d) cp.async groups and zero-fill; plus the
 * API's errors and the launch overhead (printed). Modules compile through hyp_sim_open's cache
 * in BUILD/sim-cache. */
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "sim.h"

#include "hyp_test.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Launch expected to fail: returns 1 when rc is HYP_EFAIL and the message holds every needle. */
static int fails_with(int rc, const hyp_err *e, const char *n1, const char *n2) {
    if (rc != HYP_EFAIL) {
        printf("    (launch returned %d, not HYP_EFAIL)\n", rc);
        return 0;
    }
    printf("    message: %s\n", e->msg);
    return strstr(e->msg, n1) && (!n2 || strstr(e->msg, n2));
}

/* ------------------------------------------------------------------------------------------ */
/* Compiling the three test modules (two at a time: the machine has two cores) */

typedef struct {
    const char *name;
    hyp_sim_module *m;
    hyp_err e;
    int rc;
    double seconds;
} open_job;

static void *open_one(void *arg) {
    open_job *j = arg;
    char path[1024];
    snprintf(path, sizeof path, "%s/tests/sim/%s.cu", HYP_SOURCE_DIR, j->name);
    double t0 = now_s();
    j->rc = hyp_sim_open(path, NULL, &j->m, &j->e);
    j->seconds = now_s() - t0;
    return NULL;
}

/* ------------------------------------------------------------------------------------------ */
/* (a) correct kernels */

static void test_block_reduce(hyp_sim_module *m) {
    enum { B = 3, N = 1000 };
    static float in[B * N], sum[B], mx[B];
    for (int i = 0; i < B * N; i++) in[i] = (float)((i * 7919) % 201) - 100.0f; /* exact sums */
    int n = N;
    float *pin = in, *ps = sum, *pm = mx;
    void *args[] = {&pin, &ps, &pm, &n};
    const unsigned sizes[] = {256, 100, 32, 1024, 33};
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        hyp_err e;
        memset(sum, 0, sizeof sum);
        int rc = hyp_sim_launch(m, "block_reduce", hyp_dim3_of(B, 1, 1), hyp_dim3_of(sizes[k], 1, 1), 0,
                                args, NULL, &e);
        int ok = rc == HYP_OK;
        for (int b = 0; b < B && ok; b++) {
            float s = 0, x = -INFINITY;
            for (int i = 0; i < N; i++) {
                s += in[b * N + i];
                x = fmaxf(x, in[b * N + i]);
            }
            ok = sum[b] == s && mx[b] == x;
        }
        CHECK(ok, "block_reduce: hyp_block_sum/max over %u threads%s match exactly%s%s", sizes[k],
              sizes[k] % 32 ? " (a partial warp)" : "", rc ? ": " : "", rc ? e.msg : "");
    }
}

/* CUDA Programming Guide semantics of the shuffles, written out independently of the prelude. */
static void shuffle_expect(const int *in, int lane_base, int lane, int width, int *want) {
    int seg = lane - lane % width, v = in[lane_base + lane];
    int s = 0;
    for (int j = seg; j < seg + width; j++) s += in[lane_base + j];
    want[0] = s;
    want[1] = lane % width >= 1 ? in[lane_base + lane - 1] : v;
    want[2] = lane % width + 3 < width ? in[lane_base + lane + 3] : v;
    want[3] = in[lane_base + seg + 5 % width];
    int x = lane ^ 9; /* later segments are out of reach: own value */
    want[4] = x < seg + width ? in[lane_base + x] : v;
    unsigned ballot = 0;
    int any = 0, all = 1;
    for (int j = 0; j < 32; j++) {
        ballot |= (unsigned)(in[lane_base + j] & 1) << j;
        any |= in[lane_base + j] > 90;
        all &= in[lane_base + j] >= 0;
    }
    want[5] = (int)ballot ^ (any << 1) ^ (all << 2);
}

static void test_shuffles(hyp_sim_module *m) {
    enum { T = 64 };
    int in[T], out[6 * T], want[6];
    for (int i = 0; i < T; i++) in[i] = (i * 37 + 11) % 97;
    const int widths[] = {32, 16, 8, 4, 2, 1};
    for (size_t k = 0; k < sizeof widths / sizeof widths[0]; k++) {
        int width = widths[k];
        int *pin = in, *pout = out;
        void *args[] = {&pin, &pout, &width};
        hyp_err e;
        int rc = hyp_sim_launch(m, "shuffles", hyp_dim3_of(1, 1, 1), hyp_dim3_of(T, 1, 1), 0, args, NULL, &e);
        int bad = rc != HYP_OK, first_bad = -1;
        for (int i = 0; i < T && !bad; i++) {
            shuffle_expect(in, i - i % 32, i % 32, width, want);
            for (int q = 0; q < 6; q++)
                if (out[6 * i + q] != want[q]) {
                    bad = 1;
                    first_bad = 6 * i + q;
                }
        }
        CHECK(!bad, "shuffles width %d: xor-sum, up 1, down 3, idx 5, xor 9, ballot/any/all as documented%s%s",
              width, rc ? ": " : "", rc ? e.msg : "");
        if (first_bad >= 0) printf("    first mismatch at out[%d] = %d\n", first_bad, out[first_bad]);
    }
}

static void test_atomics(hyp_sim_module *m) {
    enum { BLOCKS = 2048, THREADS = 128 };
    int count = 0, cas = 0;
    float fsum = 0;
    unsigned umax = 0;
    unsigned long long u64 = 0;
    static int tid_of_block[BLOCKS];
    int *pc = &count, *pcas = &cas, *ptid = tid_of_block;
    float *pf = &fsum;
    unsigned *pu = &umax;
    unsigned long long *p64 = &u64;
    void *args[] = {&pc, &pf, &pu, &p64, &pcas, &ptid};
    hyp_sim_opts o = {4, HYP_SIM_ORDER_DEFAULT, 0, 0};
    hyp_err e;
    const unsigned long long n = (unsigned long long)BLOCKS * THREADS;
    /* On a loaded machine the caller may run every block before the new OS threads get a CPU:
     * the atomics must be exact on every try, and some try must spread over several threads. */
    int distinct = 0, exact = 1, tries = 0, rc = HYP_OK;
    for (; tries < 5 && !distinct && exact; tries++) {
        count = cas = 0;
        fsum = 0;
        umax = 0;
        u64 = 0;
        rc = hyp_sim_launch(m, "atomics", hyp_dim3_of(BLOCKS, 1, 1), hyp_dim3_of(THREADS, 1, 1), 0, args, &o, &e);
        exact = rc == HYP_OK && count == (int)n && fsum == (float)n && umax == n - 1 && u64 == n * (n - 1) / 2 &&
                cas == (int)n;
        for (int b = 0; b < BLOCKS && !distinct; b++) distinct = tid_of_block[b] != tid_of_block[0];
    }
    CHECK(exact, "atomics from %d blocks x %d threads: add int/float/u64, max, CAS loop all exact (%d, %g, %u, %llu, %d)%s%s",
          BLOCKS, THREADS, count, fsum, umax, u64, cas, rc ? ": " : "", rc ? e.msg : "");
    CHECK(distinct, "the blocks ran on more than one OS thread (%d launch%s)", tries, tries > 1 ? "es" : "");
}

static void test_dynamic_shared(hyp_sim_module *m) {
    enum { B = 5, T = 192 };
    float in[B * T], out[B * T];
    int counts[B];
    for (int i = 0; i < B * T; i++) in[i] = (float)(i % 7) - 3.0f;
    float *pin = in, *pout = out;
    int *pc = counts;
    void *args[] = {&pin, &pout, &pc};
    hyp_err e;
    int rc = hyp_sim_launch(m, "dyn_reverse", hyp_dim3_of(B, 1, 1), hyp_dim3_of(T, 1, 1), T * sizeof(float),
                            args, NULL, &e);
    int ok = rc == HYP_OK;
    for (int b = 0; b < B && ok; b++) {
        int c = 0;
        for (int t = 0; t < T; t++) {
            ok &= out[b * T + t] == in[b * T + T - 1 - t];
            c += in[b * T + t] > 0.0f;
        }
        ok &= counts[b] == c;
    }
    CHECK(ok, "extern __shared__ float[]: per-block dynamic shared memory reverses each block; "
              "__syncthreads_count counts%s%s", rc ? ": " : "", rc ? e.msg : "");
    int alias[64];
    int *pa = alias;
    void *args2[] = {&pa};
    rc = hyp_sim_launch(m, "dyn_alias", hyp_dim3_of(1, 1, 1), hyp_dim3_of(64, 1, 1), 64, args2, NULL, &e);
    ok = rc == HYP_OK;
    for (int t = 0; t < 64 && ok; t++) ok = alias[t] == t % 4 + 1;
    CHECK(ok, "extern __shared__ __align__(16) unsigned char[] viewed as unsigned[]: same bytes%s%s",
          rc ? ": " : "", rc ? e.msg : "");
    float fo[96];
    int io[96];
    float *pfo = fo;
    int *pio = io;
    void *args3[] = {&pfo, &pio};
    rc = hyp_sim_launch(m, "dyn_forms", hyp_dim3_of(2, 1, 1), hyp_dim3_of(96, 1, 1), 96 * 4, args3, NULL, &e);
    ok = rc == HYP_OK;
    for (int t = 0; t < 96 && ok; t++) ok = io[t] == 2 * (95 - t) && fo[t] == 2.0f * (95 - t) + 0.5f * ((t + 1) % 96);
    CHECK(ok, "extern __shared__ at file scope and inside a template (two instantiations) share the block's "
              "dynamic shared memory%s%s", rc ? ": " : "", rc ? e.msg : "");
}

/* ------------------------------------------------------------------------------------------ */
/* (b) planted bugs */

static void test_planted(hyp_sim_module *m, hyp_sim_module *basic) {
    hyp_err e;
    int out[1024];
    int *po = out;
    void *a1[] = {&po};
    int rc = hyp_sim_launch(m, "divergent_barrier", hyp_dim3_of(2, 1, 1), hyp_dim3_of(64, 1, 1), 0, a1, NULL, &e);
    CHECK(fails_with(rc, &e, "barrier reached from divergent code", "planted.cu:"),
          "a __syncthreads in divergent code is reported with both call sites");

    rc = hyp_sim_launch(m, "exit_before_barrier", hyp_dim3_of(1, 1, 1), hyp_dim3_of(64, 1, 1), 0, a1, NULL, &e);
    CHECK(fails_with(rc, &e, "thread (5,0,0) exited while", "__syncthreads"),
          "a thread that exits while others wait at a barrier is reported");

    float fin[128], fout[128];
    for (int i = 0; i < 128; i++) fin[i] = (float)i;
    float *pfi = fin, *pfo = fout;
    int shift = 0;
    void *a2[] = {&pfi, &pfo, &shift};
    rc = hyp_sim_launch(m, "oob_static_shared", hyp_dim3_of(1, 1, 1), hyp_dim3_of(128, 1, 1), 0, a2, NULL, &e);
    CHECK(rc == HYP_OK && fout[127] == 127.0f, "static __shared__ indexed in bounds runs clean%s%s",
          rc ? ": " : "", rc ? e.msg : "");
    shift = 1;
    rc = hyp_sim_launch(m, "oob_static_shared", hyp_dim3_of(1, 1, 1), hyp_dim3_of(128, 1, 1), 0, a2, NULL, &e);
    CHECK(fails_with(rc, &e, "out-of-bounds index 128 into 'float [128]'", "planted.cu:"),
          "an out-of-bounds static __shared__ index is reported with the array type and the line");

    float dout[128];
    float *pd = dout;
    int dshift = 0;
    void *a3[] = {&pd, &dshift};
    rc = hyp_sim_launch(m, "oob_dynamic_shared", hyp_dim3_of(2, 1, 1), hyp_dim3_of(128, 1, 1), 512, a3, NULL, &e);
    CHECK(rc == HYP_OK && dout[0] == 1.0f, "dynamic shared memory indexed in bounds runs clean%s%s",
          rc ? ": " : "", rc ? e.msg : "");
    dshift = 1;
    rc = hyp_sim_launch(m, "oob_dynamic_shared", hyp_dim3_of(2, 1, 1), hyp_dim3_of(128, 1, 1), 512, a3, NULL, &e);
    CHECK(fails_with(rc, &e, "out-of-bounds dynamic shared memory access at byte offset 512 of the 512 bytes",
                     "thread (127,0,0)"),
          "writing one float past the end of dynamic shared memory hits the guard page");
    dshift = 0;
    rc = hyp_sim_launch(m, "oob_dynamic_shared", hyp_dim3_of(1, 1, 1), hyp_dim3_of(128, 1, 1), 510, a3, NULL, &e);
    CHECK(fails_with(rc, &e, "out of bounds of dynamic shared memory, at byte offset 510 of the 510 bytes", NULL),
          "a write into the last 16 bytes past the end is caught by the canary check");
    rc = hyp_sim_launch(m, "oob_dynamic_shared", hyp_dim3_of(1, 1, 1), hyp_dim3_of(32, 1, 1), 0, a3, NULL, &e);
    CHECK(fails_with(rc, &e, "byte offset 0 of the 0 bytes", NULL),
          "using dynamic shared memory with shared_bytes = 0 is reported");

    /* the missing __syncthreads: hidden in thread order, exposed by shuffling, fixed by the barrier */
    enum { T = 256 };
    int in[T], rout[T];
    int *pin = in, *pr = rout, with_barrier = 0;
    void *a4[] = {&pin, &pr, &with_barrier};
    for (int run = 0; run < 10; run++) {
        for (int t = 0; t < T; t++) in[t] = t * 7 + 100000 * (run + 1); /* stale shared data differs */
        hyp_sim_opts o = {1, run == 0 ? HYP_SIM_ORDER_FIXED : HYP_SIM_ORDER_SHUFFLE, (uint64_t)run, 0};
        with_barrier = run >= 5;
        if (run == 9) o.order = HYP_SIM_ORDER_FIXED;
        rc = hyp_sim_launch(m, "missing_barrier", hyp_dim3_of(1, 1, 1), hyp_dim3_of(T, 1, 1), 0, a4, &o, &e);
        int wrong = 0;
        for (int t = 0; t < T; t++) wrong += rout[t] != in[t > 0 ? t - 1 : 0];
        if (run == 0)
            CHECK(rc == HYP_OK && wrong == 0,
                  "missing __syncthreads, fixed order: the race stays hidden (why shuffling exists)");
        else if (run < 5)
            CHECK(rc == HYP_OK && wrong > 0, "missing __syncthreads, shuffled order seed %d: %d of %d reads are wrong",
                  run, wrong, T);
        else
            CHECK(rc == HYP_OK && wrong == 0, "with the __syncthreads, %s order%s: every read is right",
                  o.order == HYP_SIM_ORDER_FIXED ? "fixed" : "shuffled", o.order == HYP_SIM_ORDER_FIXED ? "" : " (seeded)");
    }

    /* shuffling is reproducible (seeded per block) and works with several OS threads */
    {
        enum { NB = 6 };
        static int in2[T], in3[T], r1[NB][T], r2[NB][T];
        int nob = 0, same = 1, wrong1 = 0;
        int *pin2 = in2, *pin3 = in3;
        for (int b = 0; b < NB; b++) {
            /* each run its own input, so a stale read (of the previous run's data) is visibly wrong */
            for (int t = 0; t < T; t++) {
                in2[t] = t + 1000 * (2 * b + 1);
                in3[t] = t + 1000 * (2 * b + 2);
            }
            int *p1 = r1[b], *p2 = r2[b];
            void *x1[] = {&pin2, &p1, &nob}, *x2[] = {&pin3, &p2, &nob};
            hyp_sim_opts o1 = {1, HYP_SIM_ORDER_SHUFFLE, 77 + (uint64_t)b, 0};
            int rc1 = hyp_sim_launch(m, "missing_barrier", hyp_dim3_of(1, 1, 1), hyp_dim3_of(T, 1, 1), 0, x1, &o1, &e);
            int rc2 = hyp_sim_launch(m, "missing_barrier", hyp_dim3_of(1, 1, 1), hyp_dim3_of(T, 1, 1), 0, x2, &o1, &e);
            same &= rc1 == HYP_OK && rc2 == HYP_OK;
            for (int t = 0; t < T; t++) {
                int ok1 = r1[b][t] == in2[t > 0 ? t - 1 : 0], ok2 = r2[b][t] == in3[t > 0 ? t - 1 : 0];
                same &= ok1 == ok2;
                wrong1 += !ok1;
            }
        }
        CHECK(same && wrong1 > 0, "the same shuffle seed gives the same interleaving (the same %d wrong reads twice)", wrong1);
        hyp_sim_opts o2 = {2, HYP_SIM_ORDER_SHUFFLE, 5, 0};
        float bin[8 * 1000], bs[8], bm[8];
        for (int i = 0; i < 8 * 1000; i++) bin[i] = (float)(i % 11);
        float *pb = bin, *pbs = bs, *pbm = bm;
        int bn = 1000;
        void *x3[] = {&pb, &pbs, &pbm, &bn};
        rc = hyp_sim_launch(basic, "block_reduce", hyp_dim3_of(8, 1, 1), hyp_dim3_of(160, 1, 1), 0, x3, &o2, &e);
        int okr = rc == HYP_OK;
        for (int b = 0; b < 8 && okr; b++) {
            float want = 0;
            for (int i = 0; i < 1000; i++) want += bin[b * 1000 + i];
            okr = bs[b] == want && bm[b] == 10.0f;
        }
        CHECK(okr, "correct kernels stay correct shuffled on 2 OS threads (block_reduce, 160 threads)%s%s",
              rc ? ": " : "", rc ? e.msg : "");
    }

    int which = 0;
    void *a5[] = {&po, &which};
    static const char *want[4][2] = {
        {"which does not name the calling lane 1", "__shfl_sync"},
        {"must call the same warp operation with the same mask", "0xffff0000"},
        {"exited", "__shfl_xor_sync"},
        {"waits at __syncthreads", "__shfl_xor_sync"},
    };
    static const char *what[4] = {"a lane outside its own mask", "lanes passing different masks",
                                  "a lane that exits before a shuffle naming it",
                                  "a shuffle and a __syncthreads reached from divergent code"};
    for (which = 0; which < 4; which++) {
        rc = hyp_sim_launch(m, "warp_bugs", hyp_dim3_of(1, 1, 1), hyp_dim3_of(64, 1, 1), 0, a5, NULL, &e);
        CHECK(fails_with(rc, &e, want[which][0], want[which][1]), "warp collective misuse is reported: %s", what[which]);
    }
    which = 4;
    rc = hyp_sim_launch(m, "warp_bugs", hyp_dim3_of(1, 1, 1), hyp_dim3_of(64, 1, 1), 0, a5, NULL, &e);
    CHECK(rc == HYP_OK && out[0] == 1 && out[1] == 0 && out[16] == 16 && out[33] == 32,
          "a half-warp shuffle with the half-warp mask runs clean%s%s", rc ? ": " : "", rc ? e.msg : "");

    int depth = 10;
    void *a6[] = {&po, &depth};
    rc = hyp_sim_launch(m, "stack_hog", hyp_dim3_of(1, 1, 1), hyp_dim3_of(32, 1, 1), 0, a6, NULL, &e);
    CHECK(rc == HYP_OK, "recursion 10 deep fits the fiber stack%s%s", rc ? ": " : "", rc ? e.msg : "");
    depth = 1000;
    rc = hyp_sim_launch(m, "stack_hog", hyp_dim3_of(4, 1, 1), hyp_dim3_of(32, 1, 1), 0, a6, NULL, &e);
    CHECK(fails_with(rc, &e, "fiber stack overflow", "stack_kib"), "a fiber stack overflow is reported, the process lives on");
    hyp_sim_opts big = {0, HYP_SIM_ORDER_DEFAULT, 0, 2048};
    rc = hyp_sim_launch(m, "stack_hog", hyp_dim3_of(2, 1, 1), hyp_dim3_of(32, 1, 1), 0, a6, &big, &e);
    CHECK(rc == HYP_OK, "the same recursion fits 2 MiB stacks (hyp_sim_opts.stack_kib)%s%s", rc ? ": " : "",
          rc ? e.msg : "");

    float *wild = (float *)(uintptr_t)64;
    void *a7[] = {&wild};
    rc = hyp_sim_launch(m, "wild_pointer", hyp_dim3_of(1, 1, 1), hyp_dim3_of(32, 1, 1), 0, a7, NULL, &e);
    CHECK(fails_with(rc, &e, "invalid memory access (SIGSEGV) at address 0x40", "wild_pointer"),
          "a wild pointer write is reported with the kernel function, not a crash");

    rc = hyp_sim_launch(m, "traps", hyp_dim3_of(1, 1, 1), hyp_dim3_of(32, 1, 1), 0, a1, NULL, &e);
    CHECK(fails_with(rc, &e, "__trap()", "thread (7,0,0)"), "__trap() fails the launch");

    /* after all that, a module still runs clean kernels (abandoned fibers left nothing behind) */
    test_block_reduce(basic);
}

/* ------------------------------------------------------------------------------------------ */
/* (c) mma and ldmatrix; (d) cp.async */

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

static void test_mma(hyp_sim_module *m) {
    static uint16_t A[256] __attribute__((aligned(16))), B[256] __attribute__((aligned(16)));
    float C[256], want[256];
    uint64_t seed = 12345;
    for (int pass = 0; pass < 2; pass++) {
        for (int i = 0; i < 256; i++) {
            seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
            float r = (float)((int)(seed >> 33) % 2001 - 1000) / 1000.0f;
            /* pass 0: small integers (every sum exact in any order); pass 1: random bf16 */
            A[i] = f2bf(pass == 0 ? (float)((i * 5 + 3) % 9 - 4) : r);
            seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
            r = (float)((int)(seed >> 33) % 2001 - 1000) / 1000.0f;
            B[i] = f2bf(pass == 0 ? (float)((i * 3 + 1) % 7 - 3) : r);
        }
        float bias = pass == 0 ? 2.0f : 0.25f;
        for (int r = 0; r < 16; r++)
            for (int c = 0; c < 16; c++) {
                float acc = bias;
                for (int k = 0; k < 16; k++) acc += bf2f(A[r * 16 + k]) * bf2f(B[k * 16 + c]);
                want[r * 16 + c] = acc;
            }
        for (int mode = 0; mode < 5; mode++) {
            uint16_t *pa = A, *pb = B;
            float *pc = C;
            void *args[] = {&pa, &pb, &pc, &bias, &mode};
            hyp_err e;
            for (int i = 0; i < 256; i++) C[i] = NAN;
            int rc = hyp_sim_launch(m, "gemm16", hyp_dim3_of(1, 1, 1), hyp_dim3_of(32, 1, 1), 0, args, NULL, &e);
            double maxdiff = 0;
            for (int i = 0; i < 256; i++) {
                double d = fabs((double)C[i] - want[i]);
                if (!(d <= maxdiff)) maxdiff = isnan(d) ? INFINITY : d;
            }
            static const char *names[] = {"ldmatrix.x4 + ldmatrix.x4.trans", "fragments by the PTX formulas",
                                          "A fragment indexed transposed", "A loaded with ldmatrix .trans",
                                          "B fragments of the two n-halves swapped"};
            const char *data = pass == 0 ? "integer" : "random bf16";
            if (rc != HYP_OK) CHECK(0, "gemm16 mode %d: %s", mode, e.msg);
            else if (mode <= 1)
                CHECK(maxdiff == 0, "mma.m16n8k16 16x16x16 tile (%s data, %s) equals the plain fp32 loop exactly (max |diff| %g)",
                      data, names[mode], maxdiff);
            else
                CHECK(maxdiff > 1.0, "planted fragment bug (%s, %s data) gives wrong numbers (max |diff| %g)", names[mode],
                      data, maxdiff);
        }
    }
}

static void test_cp_async(hyp_sim_module *m) {
    enum { T = 64 };
    float src[4 * T] __attribute__((aligned(16))), dst[4 * T];
    for (int i = 0; i < 4 * T; i++) src[i] = (float)i + 0.5f;
    float *ps = src, *pd = dst;
    int tail = 8, wait = 1;
    void *args[] = {&ps, &pd, &tail, &wait};
    hyp_err e;
    int rc = hyp_sim_launch(m, "cp_async_copy", hyp_dim3_of(1, 1, 1), hyp_dim3_of(T, 1, 1), 4 * T * sizeof(float),
                            args, NULL, &e);
    int ok = rc == HYP_OK;
    for (int t = 0; t < T && ok; t++) {
        int u = (t + 1) % T;
        for (int k = 0; k < 4; k++) {
            float w = (u == T - 1 && k >= 2) ? 0.0f : src[4 * u + k]; /* tail: 8 bytes read, 8 zeroed */
            ok &= dst[4 * t + k] == w;
        }
    }
    CHECK(ok, "cp.async 16-byte copies + wait_group<0> + __syncthreads: every neighbour chunk arrives, "
              "zfill zeroes the tail%s%s", rc ? ": " : "", rc ? e.msg : "");
    wait = 0;
    rc = hyp_sim_launch(m, "cp_async_copy", hyp_dim3_of(1, 1, 1), hyp_dim3_of(T, 1, 1), 4 * T * sizeof(float), args,
                        NULL, &e);
    int nan_reads = 0;
    for (int i = 0; i < 4 * T; i++) nan_reads += isnan(dst[i]);
    CHECK(rc == HYP_OK && nan_reads > 0,
          "planted bug: reading cp.async data without a wait gives poison (%d NaN reads)", nan_reads);

    float first[4 * T], early[4 * T], second[4 * T], src2[8 * T] __attribute__((aligned(16)));
    for (int i = 0; i < 8 * T; i++) src2[i] = (float)i;
    float *p2 = src2, *pf = first, *pe = early, *pse = second;
    void *args2[] = {&p2, &pf, &pe, &pse};
    rc = hyp_sim_launch(m, "cp_async_groups", hyp_dim3_of(1, 1, 1), hyp_dim3_of(T, 1, 1), 8 * T * sizeof(float),
                        args2, NULL, &e);
    ok = rc == HYP_OK;
    for (int t = 0; t < T && ok; t++)
        for (int k = 0; k < 4; k++)
            ok &= first[4 * t + k] == src2[8 * t + k] && isnan(early[4 * t + k]) &&
                  second[4 * t + k] == src2[8 * t + 4 + k];
    CHECK(ok, "cp.async groups: wait_group<1> completes the older group only, wait_group<0> the rest%s%s",
          rc ? ": " : "", rc ? e.msg : "");
}

/* ------------------------------------------------------------------------------------------ */
/* API errors and cost */

static void test_api(hyp_sim_module *basic) {
    hyp_err e;
    float dummy[4];
    float *pd = dummy;
    void *args[] = {&pd};
    int rc = hyp_sim_launch(basic, "no_such_kernel", hyp_dim3_of(1, 1, 1), hyp_dim3_of(32, 1, 1), 0, args, NULL, &e);
    CHECK(rc == HYP_EINPUT && strstr(e.msg, "no kernel 'no_such_kernel'"), "an unknown kernel name is HYP_EINPUT: %s",
          rc ? e.msg : "");
    rc = hyp_sim_launch(basic, "two_barriers", hyp_dim3_of(1, 1, 1), hyp_dim3_of(2048, 1, 1), 0, args, NULL, &e);
    CHECK(rc == HYP_EINPUT && strstr(e.msg, "not a valid CUDA block"), "a 2048-thread block is refused: %s",
          rc ? e.msg : "");
    rc = hyp_sim_launch(basic, "two_barriers", hyp_dim3_of(1, 1, 1), hyp_dim3_of(32, 1, 1), 300000, args, NULL, &e);
    CHECK(rc == HYP_EINPUT && strstr(e.msg, "227 KiB"), "300000 bytes of dynamic shared memory are refused");

    char bad[512], so[512];
    snprintf(bad, sizeof bad, "%s/sim-test-bad.cu", HYP_BINARY_DIR);
    snprintf(so, sizeof so, "%s/sim-test-bad.so", HYP_BINARY_DIR);
    FILE *f = fopen(bad, "w");
    if (f) {
        fputs("extern \"C\" __global__ void k(float *p) { p[threadIdx.x] = undeclared_thing; }\n", f);
        fclose(f);
    }
    rc = hyp_sim_compile(bad, so, NULL, &e);
    CHECK(rc == HYP_EFAIL && strstr(e.msg, "undeclared_thing") && strstr(e.msg, ".log"),
          "a compile error returns the compiler's first error and the log path: %s", rc ? e.msg : "");
    hyp_sim_module *m = NULL;
    rc = hyp_sim_load("/nonexistent/x.so", &m, &e);
    CHECK(rc == HYP_EFAIL && m == NULL, "loading a missing module fails cleanly");
}

static void bench(hyp_sim_module *basic) {
    enum { BLOCKS = 400, T = 256 };
    static float out[BLOCKS * T];
    float *po = out;
    void *args[] = {&po};
    hyp_err e;
    for (int threads = 1; threads <= 2; threads++) {
        hyp_sim_opts o = {threads, HYP_SIM_ORDER_FIXED, 0, 0};
        int rc = hyp_sim_launch(basic, "two_barriers", hyp_dim3_of(BLOCKS, 1, 1), hyp_dim3_of(T, 1, 1), 0, args, &o, &e);
        double best = 1e9;
        for (int rep = 0; rep < 5 && rc == HYP_OK; rep++) {
            double t0 = now_s();
            rc = hyp_sim_launch(basic, "two_barriers", hyp_dim3_of(BLOCKS, 1, 1), hyp_dim3_of(T, 1, 1), 0, args, &o, &e);
            double dt = now_s() - t0;
            if (dt < best) best = dt;
        }
        int ok = rc == HYP_OK;
        for (int i = 0; i < BLOCKS * T && ok; i++) ok = out[i] == (float)((i % T + 1) % T);
        printf("info two_barriers: %d blocks x %d threads on %d OS thread%s: %.1f us per block (best of 5)\n", BLOCKS, T,
               threads, threads > 1 ? "s" : "", best / BLOCKS * 1e6);
        CHECK(ok && best / BLOCKS < 2e-3, "launch overhead: a 256-thread block with 2 barriers costs under 2 ms on %d OS thread%s",
              threads, threads > 1 ? "s" : "");
    }
    const unsigned T1 = 1024;
    hyp_sim_opts o1 = {1, HYP_SIM_ORDER_FIXED, 0, 0};
    int rc = hyp_sim_launch(basic, "two_barriers", hyp_dim3_of(4, 1, 1), hyp_dim3_of(T1, 1, 1), 0, args, &o1, &e);
    CHECK(rc == HYP_OK && out[T1 - 1] == 0.0f && out[5] == 6.0f, "1024-thread blocks run (%s)", rc ? e.msg : "ok");
}

int main(void) {
    char cache[1024];
    snprintf(cache, sizeof cache, "%s/sim-cache", HYP_BINARY_DIR);
    setenv("HYP_SIM_CACHE", cache, 0);
    unsetenv("HYP_SIM_SHUFFLE"); /* the fixed-order checks below must not be shuffled from outside */

    open_job jobs[3] = {{.name = "basic"}, {.name = "planted"}, {.name = "mma"}};
    pthread_t th[2];
    pthread_create(&th[0], NULL, open_one, &jobs[0]);
    pthread_create(&th[1], NULL, open_one, &jobs[1]);
    pthread_join(th[0], NULL);
    open_one(&jobs[2]);
    pthread_join(th[1], NULL);
    int all = 1;
    for (int j = 0; j < 3; j++) {
        CHECK(jobs[j].rc == HYP_OK, "tests/sim/%s.cu compiles and loads (%.2f s)%s%s", jobs[j].name, jobs[j].seconds,
              jobs[j].rc ? ": " : "", jobs[j].rc ? jobs[j].e.msg : "");
        all &= jobs[j].rc == HYP_OK;
    }
    if (all) {
        test_block_reduce(jobs[0].m);
        test_shuffles(jobs[0].m);
        test_atomics(jobs[0].m);
        test_dynamic_shared(jobs[0].m);
        test_planted(jobs[1].m, jobs[0].m);
        test_mma(jobs[2].m);
        test_cp_async(jobs[2].m);
        test_api(jobs[0].m);
        bench(jobs[0].m);
    }
    for (int j = 0; j < 3; j++) hyp_sim_unload(jobs[j].m);
    hyp_sim_trim();
    printf("%d passed, %d failed\n", g_pass, g_fail);
    return g_fail ? 1 : 0;
}
