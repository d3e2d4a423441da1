/* test_sr_v2161.c — v2161 stochastic rounding to bf16 (kernels/hyp/sr.h, the body the cpu trainer
 * and the adamw kernel share), measured on its own:
 *  (1) unbiased: over 20000 keys (steps) the mean of SR(x) is x within 5 sigma of the binomial
 *      spread, for 200 values across magnitudes and signs; every result is one of the two bf16
 *      neighbours; inf and NaN round to nearest;
 *  (2) reproducible: the same (seed, step, element) gives the same bits, another seed others;
 *  (3) stall: 2000 AdamW steps of lr 1e-5 on weights near 1 (each update ~1/400 of a bf16 ulp):
 *      round-to-nearest without a master never moves a weight, SR moves it by the fp32 master's
 *      distance within 5%.
 * Never: a tolerance that the rounding mode under test cannot miss. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "hyp/sr.h"
#include "hyp_test.h"

static float bf(unsigned short h) { return hyp_sr_bf16_to_f32(h); }

static uint32_t rng_state = 12345u;
static float urand(void) { /* [0, 1) */
    rng_state = rng_state * 1664525u + 1013904223u;
    return (float)(rng_state >> 8) / 16777216.0f;
}

static void test_unbiased(void) {
    const int N = 20000, X = 200;
    int bad_mean = 0, bad_set = 0;
    double worst = 0;
    for (int k = 0; k < X; k++) {
        /* magnitudes 2^-20 .. 2^20, both signs, arbitrary low bits */
        float x = ldexpf(1.0f + urand(), (int)(urand() * 40) - 20) * (k % 2 ? -1.0f : 1.0f);
        uint32_t b = hyp_sr_f32_bits(x);
        float lo = bf((unsigned short)(b >> 16)), hi = bf((unsigned short)((b >> 16) + 1));
        double sum = 0;
        for (int s = 0; s < N; s++) {
            float y = bf(hyp_sr_bf16_bits(b, hyp_sr_hash(7u, (unsigned)s, (unsigned long long)k, 0u), 0));
            bad_set += y != lo && y != hi;
            sum += y;
        }
        double f = (double)(b & 0xffffu) / 65536.0, ulp = fabs((double)hi - lo);
        double sigma = ulp * sqrt(f * (1 - f) / N) + 1e-300, z = fabs(sum / N - x) / (sigma > 0 ? sigma : 1);
        if (f > 0 && z > worst) worst = z;
        bad_mean += f > 0 && z > 5;
        bad_mean += f == 0 && sum / N != x; /* exactly representable: never moves */
    }
    check(bad_mean == 0 && bad_set == 0, "test_v2161_sr_unbiased (200 values x 20000 draws: |mean - x| < 5 sigma)",
          "worst %.2f sigma; %d means off, %d results outside {down, up}", worst, bad_mean, bad_set);
    uint32_t inf = 0x7f800000u, nan = 0x7fc00001u;
    check(hyp_sr_bf16_bits(inf, 0xffffu, 0) == 0x7f80 && (hyp_sr_bf16_bits(nan, 0, 0) & 0x7fc0) == 0x7fc0 &&
              hyp_sr_bf16_bits(hyp_sr_f32_bits(1.0f), 0x1234u, 0) == 0x3f80,
          "test_v2161_sr_specials (inf stays inf, NaN stays a quiet NaN, exact values stay)", NULL);
}

static void test_reproducible(void) {
    int same = 1, differ = 0;
    for (unsigned long long e = 0; e < 4096; e++) {
        unsigned a = hyp_sr_hash(3u, 17u, e, 0u), b = hyp_sr_hash(3u, 17u, e, 0u), c = hyp_sr_hash(4u, 17u, e, 0u);
        same &= a == b;
        differ += (a & 0xffffu) != (c & 0xffffu);
    }
    check(same && differ > 4000, "test_v2161_sr_keys (same key same bits; another seed changes > 4000 of 4096)",
          "%d of 4096 differ", differ);
}

/* AdamW with a constant gradient direction: m/sqrt(v) ~ 1, so each step moves a weight by ~lr. */
static void test_stall(void) {
    enum { W = 512, STEPS = 2000 };
    const float lr = 1e-5f, b1 = 0.9f, b2 = 0.95f, eps = 1e-8f;
    unsigned short psr[W], prne[W];
    float master[W], m1[W] = {0}, v1[W] = {0}, m2[W] = {0}, v2[W] = {0}, m3[W] = {0}, v3[W] = {0}, g[W], start[W];
    for (int i = 0; i < W; i++) {
        float x = 1.0f + 0.5f * urand();
        psr[i] = prne[i] = hyp_sr_bf16_bits(hyp_sr_f32_bits(x), 0, 1);
        master[i] = start[i] = bf(psr[i]);
        g[i] = 0.5f + urand(); /* positive: every step moves the weight down by ~lr */
    }
    for (int t = 1; t <= STEPS; t++) {
        float ibc1 = 1.0f / (float)(1.0 - pow(b1, t)), ibc2 = 1.0f / (float)(1.0 - pow(b2, t));
        for (int i = 0; i < W; i++) {
            psr[i] = hyp_adamw_bf16_elem(psr[i], g[i], &m1[i], &v1[i], lr, b1, b2, eps, ibc1, ibc2, 0.0f, 11u, (unsigned)t,
                                         (unsigned long long)i, 0);
            prne[i] = hyp_adamw_bf16_elem(prne[i], g[i], &m2[i], &v2[i], lr, b1, b2, eps, ibc1, ibc2, 0.0f, 11u, (unsigned)t,
                                          (unsigned long long)i, 1);
            /* the fp32 master reference: the same update kept in fp32 */
            float mi = fmaf(b1, m3[i], (1.0f - b1) * g[i]), vi = fmaf(b2, v3[i], ((1.0f - b2) * g[i]) * g[i]);
            m3[i] = mi, v3[i] = vi;
            master[i] = fmaf(-lr, (mi * ibc1) / (sqrtf(vi * ibc2) + eps), master[i]);
        }
    }
    double dm = 0, dsr = 0, drne = 0;
    int rne_moved = 0;
    for (int i = 0; i < W; i++) {
        dm += start[i] - master[i];
        dsr += start[i] - bf(psr[i]);
        drne += start[i] - bf(prne[i]);
        rne_moved += bf(prne[i]) != start[i];
    }
    dm /= W, dsr /= W, drne /= W;
    printf("# %d AdamW steps of lr %g on weights in [1, 1.5) (bf16 ulp 2^-7): mean distance moved: fp32 master %.5f, "
           "SR bf16 %.5f, nearest bf16 %.5f\n", STEPS, lr, dm, dsr, drne);
    check(rne_moved == 0, "test_v2161_nearest_without_master_stalls (no weight moves: updates < half an ulp vanish)",
          "%d of %d weights moved", rne_moved, W);
    check(fabs(dsr - dm) < 0.05 * dm, "test_v2161_sr_tracks_fp32_master (mean distance within 5%)",
          "SR %.5f vs master %.5f (%.2f%%)", dsr, dm, 100 * fabs(dsr - dm) / dm);
}

int main(void) {
    test_unbiased();
    test_reproducible();
    test_stall();
    return hyp_test_finish();
}
