/* test_rng.c — the runtime RNG: known answers of xoshiro256** and splitmix64 against the
 * reference C code, determinism, state save/restore, stream independence, and the moments of
 * the uniform and normal variates. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "rng.h"

#include "hyp_test.h"

int main(void) {
    hyp_rng r;
    const uint64_t s1234[4] = {1, 2, 3, 4};
    hyp_rng_set_state(&r, s1234);
    uint64_t a = hyp_rng_u64(&r), b = hyp_rng_u64(&r), c = hyp_rng_u64(&r), d = hyp_rng_u64(&r);
    CHECK(a == 11520 && b == 0 && c == 1509978240 && d == 1215971899390074240ULL,
          "xoshiro256** from state {1,2,3,4} matches the reference outputs");

    uint64_t x = 0;
    uint64_t m0 = hyp_splitmix64(&x), m1 = hyp_splitmix64(&x);
    CHECK(m0 == 0xe220a8397b1dcdafULL && m1 == 0x6e789e6aa1b965f4ULL,
          "splitmix64 from 0 matches the reference outputs");
    hyp_rng_seed(&r, 0);
    CHECK(r.s[0] == 0xe220a8397b1dcdafULL && r.s[3] == 0xf88bb8a8724c81ecULL &&
              hyp_rng_u64(&r) == 11091344671253066420ULL,
          "seed(0) = four splitmix64 outputs; first draw matches the reference");

    hyp_rng r1, r2;
    hyp_rng_seed(&r1, 42);
    hyp_rng_seed(&r2, 42);
    int same = 1;
    for (int i = 0; i < 1000; i++) same &= hyp_rng_u64(&r1) == hyp_rng_u64(&r2);
    CHECK(same, "same seed, same 1000 draws");

    uint64_t st[4];
    hyp_rng_get_state(&r1, st);
    uint64_t want[10];
    for (int i = 0; i < 10; i++) want[i] = hyp_rng_u64(&r1);
    hyp_rng r3;
    CHECK(hyp_rng_set_state(&r3, st) == 0, "set_state accepts a saved state");
    same = 1;
    for (int i = 0; i < 10; i++) same &= hyp_rng_u64(&r3) == want[i];
    CHECK(same, "a restored state continues the sequence exactly");
    const uint64_t zero[4] = {0, 0, 0, 0};
    CHECK(hyp_rng_set_state(&r3, zero) == -1, "set_state refuses the all-zero state");

    hyp_rng e0, e1, s0;
    hyp_rng_seed2(&e0, 7, 0);
    hyp_rng_seed2(&e1, 7, 1);
    hyp_rng_seed(&s0, 7);
    uint64_t v0 = hyp_rng_u64(&e0), v1 = hyp_rng_u64(&e1), v2 = hyp_rng_u64(&s0);
    CHECK(v0 != v1 && v0 != v2 && v1 != v2, "streams (7, 0), (7, 1) and plain seed 7 differ");
    hyp_rng_seed2(&e1, 7, 0);
    CHECK(hyp_rng_u64(&e1) == v0, "seed2 is deterministic");

    hyp_rng_seed(&r, 1);
    double sum = 0, sum2 = 0;
    float lo = 1, hi = 0;
    const int N = 200000;
    for (int i = 0; i < N; i++) {
        float u = hyp_rng_uniform(&r);
        sum += u;
        sum2 += (double)u * u;
        lo = u < lo ? u : lo;
        hi = u > hi ? u : hi;
    }
    double mean = sum / N, var = sum2 / N - mean * mean;
    CHECK(lo >= 0 && hi < 1 && fabs(mean - 0.5) < 0.005 && fabs(var - 1.0 / 12) < 0.002,
          "uniform: in [0, 1), mean %.4f, var %.4f", mean, var);

    static float z[200000];
    hyp_rng_fill_normal(&r, z, N, 0, 1);
    sum = sum2 = 0;
    int finite = 1;
    for (int i = 0; i < N; i++) {
        sum += z[i];
        sum2 += (double)z[i] * z[i];
        finite &= isfinite(z[i]);
    }
    mean = sum / N;
    var = sum2 / N - mean * mean;
    CHECK(finite && fabs(mean) < 0.01 && fabs(var - 1) < 0.02,
          "fill_normal: mean %.4f, var %.4f", mean, var);
    hyp_rng_fill_normal(&r, z, 7, 3.0f, 0.0f);
    CHECK(z[0] == 3.0f && z[6] == 3.0f, "fill_normal(mean 3, std 0) with odd n fills all 7");
    sum = 0;
    for (int i = 0; i < 20000; i++) sum += hyp_rng_normal(&r);
    CHECK(fabs(sum / 20000) < 0.03, "normal: mean %.4f", sum / 20000);

    int counts[7] = {0}, inrange = 1;
    for (int i = 0; i < 70000; i++) {
        uint64_t k = hyp_rng_below(&r, 7);
        inrange &= k < 7;
        if (k < 7) counts[k]++;
    }
    int flat = 1;
    for (int k = 0; k < 7; k++) flat &= counts[k] > 9500 && counts[k] < 10500;
    CHECK(inrange && flat, "below(7): in range, flat counts");
    CHECK(hyp_rng_below(&r, 0) == 0 && hyp_rng_below(&r, 1) == 0, "below(0) and below(1) are 0");

    hyp_rng_fill_uniform(&r, z, 1000, -2.0f, 2.0f);
    int ur = 1;
    for (int i = 0; i < 1000; i++) ur &= z[i] >= -2.0f && z[i] < 2.0f;
    CHECK(ur, "fill_uniform stays in [lo, hi)");

    hyp_rng j1, j2;
    hyp_rng_seed(&j1, 5);
    j2 = j1;
    hyp_rng_jump(&j2);
    CHECK(hyp_rng_u64(&j1) != hyp_rng_u64(&j2), "jump moves to another sub-stream");

    printf("%d passed, %d failed\n", g_pass, g_fail);
    return g_fail ? 1 : 0;
}
