/* test_fp16_v2162.c — v2102's fp16 policy for v2162 loss scaling: op_round_fp16 (runtime/cpu)
 * rounds exactly like an IEEE binary16 conversion, checked bit for bit against the compiler's
 * _Float16 (GCC's float -> half conversion: round to nearest even) on random values over the
 * whole fp16 range and beyond (normals, subnormals, overflow to inf, ties, NaN kept a NaN), and
 * its underflow counter: values below half the smallest fp16 subnormal (2^-25) flush to zero and
 * are counted, the same values times a loss scale of 65536 survive. Never: a tolerance.
 * Prints one line per check and "N passed, M failed"; exits 1 if anything failed. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hyp_test.h"
#include "ops_cpu.h"

static uint64_t g_rng = 0x243F6A8885A308D3ull;
static uint64_t next(void) {
    uint64_t z = (g_rng += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static uint32_t bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static float ref16(float f) { return (float)(_Float16)f; }

int main(void) {
    enum { NV = 1 << 20 };
    float *x = malloc(sizeof(float) * NV), *r = malloc(sizeof(float) * NV);
    if (!x || !r) return 1;
    /* random magnitudes 2^-30 .. 2^17 (both signs), then the special values */
    for (int i = 0; i < NV; i++) {
        uint64_t z = next();
        float m = ldexpf(1.0f + (float)(z >> 40) / 16777216.0f, (int)(z % 48) - 30);
        x[i] = (z >> 39) & 1 ? -m : m;
    }
    const float sp[] = {0.0f, -0.0f, INFINITY, -INFINITY, NAN, 65504.0f, 65519.99f, 65520.0f, -65520.0f, 65536.0f,
                        ldexpf(1, -14), ldexpf(1, -24), ldexpf(1, -25), ldexpf(3, -26), ldexpf(1, -26), 1e-30f,
                        1.0f + ldexpf(1, -11), 1.0f + 3 * ldexpf(1, -11), 2049.0f, 2051.0f, ldexpf(1, -149)};
    int ns = (int)(sizeof sp / sizeof sp[0]);
    memcpy(x, sp, sizeof sp);
    long long fl = 0, nz = 0;
    op_round_fp16(r, x, NV, &fl, &nz);
    long bad = 0, first = -1;
    for (int i = 0; i < NV; i++) {
        float w = ref16(x[i]);
        int same = isnan(w) ? isnan(r[i]) : bits(w) == bits(r[i]);
        if (!same && first < 0) first = i;
        bad += !same;
    }
    CHECK(bad == 0, "op_round_fp16 equals (float)(_Float16)x bit for bit on %d values (%d special: 65504, 65520 -> inf, 2^-24, 2^-25 tie -> 0, 3*2^-26 -> 2^-24, RNE ties, NaN)%s",
          NV, ns, bad ? " — first mismatch below" : "");
    if (first >= 0) printf("  x=%a got %a want %a\n", x[first], r[first], ref16(x[first]));
    CHECK(isinf(r[7]) && r[6] == 65504.0f && r[11] == ldexpf(1, -24) && r[12] == 0.0f && r[13] == ldexpf(1, -24),
          "overflow from 65520 to inf, 65519.99 -> 65504, subnormal 2^-24 kept, 2^-25 (a tie) -> 0, 3*2^-26 -> 2^-24");
    /* underflow: a gradient-like block of values 2^-28 .. 2^-20 at scale 1 and at scale 65536 */
    enum { NG = 4096 };
    float g[NG], gs[NG], o[NG];
    for (int i = 0; i < NG; i++) {
        uint64_t z = next();
        g[i] = ldexpf(1.0f + (float)(z >> 40) / 16777216.0f, -28 + (int)(z % 8));
        gs[i] = g[i] * 65536.0f;
    }
    long long f1 = 0, n1 = 0, f2 = 0, n2 = 0;
    op_round_fp16(o, g, NG, &f1, &n1);
    op_round_fp16(o, gs, NG, &f2, &n2);
    printf("  underflow of values 2^-28..2^-20: %lld of %lld flushed to 0 at scale 1, %lld of %lld at scale 65536\n", f1,
           n1, f2, n2);
    CHECK(n1 == NG && f1 > NG / 5 && f2 == 0, "fp16 underflow counted: %.1f%% flushed without scaling, 0 with a loss scale of 65536",
          100.0 * (double)f1 / (double)n1);
    CHECK(nz > 0 && fl > 0, "the counter of the first pass saw the subnormal-range values (%lld flushed of %lld nonzero)", fl, nz);
    free(x);
    free(r);
    return hyp_test_finish();
}
