/* rng.c — xoshiro256** with splitmix64 seeding; see rng.h for why this generator.
 * Reference: https://prng.di.unimi.it/xoshiro256starstar.c (public domain). */
#include "rng.h"

#include <math.h>

uint64_t hyp_splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static void seed_from(hyp_rng *r, uint64_t x) {
    for (int i = 0; i < 4; i++) r->s[i] = hyp_splitmix64(&x);
    /* splitmix64 is a bijection on its counter, so four consecutive outputs are never all zero;
     * keep the guard anyway so the invariant is local. */
    if ((r->s[0] | r->s[1] | r->s[2] | r->s[3]) == 0) r->s[0] = 1;
}

void hyp_rng_seed(hyp_rng *r, uint64_t seed) { seed_from(r, seed); }

void hyp_rng_seed2(hyp_rng *r, uint64_t seed, uint64_t stream) {
    uint64_t x = seed;
    uint64_t a = hyp_splitmix64(&x);
    uint64_t y = stream ^ 0x6a09e667f3bcc909ULL; /* sqrt(2) bits: streams != plain seeds */
    uint64_t b = hyp_splitmix64(&y);
    seed_from(r, a ^ (b * 0xff51afd7ed558ccdULL + 0x2545f4914f6cdd1dULL));
}

static inline uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

uint64_t hyp_rng_u64(hyp_rng *r) {
    uint64_t *s = r->s;
    const uint64_t result = rotl(s[1] * 5, 7) * 9;
    const uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
}

uint32_t hyp_rng_u32(hyp_rng *r) { return (uint32_t)(hyp_rng_u64(r) >> 32); }

uint64_t hyp_rng_below(hyp_rng *r, uint64_t n) {
    if (n == 0) return 0;
    /* Lemire, "Fast random integer generation in an interval" (2019), 64-bit version. */
    uint64_t x = hyp_rng_u64(r);
    unsigned __int128 m = (unsigned __int128)x * n;
    uint64_t lo = (uint64_t)m;
    if (lo < n) {
        uint64_t threshold = (0 - n) % n;
        while (lo < threshold) {
            x = hyp_rng_u64(r);
            m = (unsigned __int128)x * n;
            lo = (uint64_t)m;
        }
    }
    return (uint64_t)(m >> 64);
}

float hyp_rng_uniform(hyp_rng *r) {
    return (float)(hyp_rng_u64(r) >> 40) * (1.0f / 16777216.0f);
}

double hyp_rng_uniform_f64(hyp_rng *r) {
    return (double)(hyp_rng_u64(r) >> 11) * (1.0 / 9007199254740992.0);
}

/* One Box–Muller pair from two draws. u1 is in (0, 1] so log() is finite. */
static void box_muller(hyp_rng *r, double *z0, double *z1) {
    double u1 = 1.0 - hyp_rng_uniform_f64(r);
    double u2 = hyp_rng_uniform_f64(r);
    double rad = sqrt(-2.0 * log(u1));
    double th = 6.283185307179586476925286766559 * u2;
    *z0 = rad * cos(th);
    *z1 = rad * sin(th);
}

float hyp_rng_normal(hyp_rng *r) {
    double z0, z1;
    box_muller(r, &z0, &z1);
    return (float)z0;
}

void hyp_rng_fill_normal(hyp_rng *r, float *out, size_t n, float mean, float std) {
    size_t i = 0;
    for (; i + 1 < n; i += 2) {
        double z0, z1;
        box_muller(r, &z0, &z1);
        out[i] = (float)(mean + std * z0);
        out[i + 1] = (float)(mean + std * z1);
    }
    if (i < n) {
        double z0, z1;
        box_muller(r, &z0, &z1);
        out[i] = (float)(mean + std * z0);
    }
}

void hyp_rng_fill_uniform(hyp_rng *r, float *out, size_t n, float lo, float hi) {
    for (size_t i = 0; i < n; i++) {
        double u = hyp_rng_uniform_f64(r);
        float v = (float)(lo + (hi - lo) * u);
        out[i] = v < hi ? v : lo; /* rounding could give hi; keep the interval half-open */
    }
}

void hyp_rng_get_state(const hyp_rng *r, uint64_t out[4]) {
    for (int i = 0; i < 4; i++) out[i] = r->s[i];
}

int hyp_rng_set_state(hyp_rng *r, const uint64_t in[4]) {
    if ((in[0] | in[1] | in[2] | in[3]) == 0) return -1;
    for (int i = 0; i < 4; i++) r->s[i] = in[i];
    return 0;
}

void hyp_rng_jump(hyp_rng *r) {
    static const uint64_t JUMP[] = {0x180ec6d33cfd0abaULL, 0xd5a61266f0c9392cULL,
                                    0xa9582618e03fc9aaULL, 0x39abdc4529b1661cULL};
    uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    for (int i = 0; i < 4; i++)
        for (int b = 0; b < 64; b++) {
            if (JUMP[i] & ((uint64_t)1 << b)) {
                s0 ^= r->s[0];
                s1 ^= r->s[1];
                s2 ^= r->s[2];
                s3 ^= r->s[3];
            }
            hyp_rng_u64(r);
        }
    r->s[0] = s0;
    r->s[1] = s1;
    r->s[2] = s2;
    r->s[3] = s3;
}
