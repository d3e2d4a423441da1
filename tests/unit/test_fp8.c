/* test_fp8.c — FP8 numerics (runtime/fp8.h), without CUDA.
 *
 *   1. bit-exact against cuda_fp8.h through the committed table tests/fixtures/fp8_reference.txt
 *      (generated from cuda_fp8.h by tests/gen/test_fp8_cuda_exact.sh, which also re-checks the
 *      table and millions of patterns on machines that have the CUDA headers): all 256 codes of
 *      both formats (fp8 -> fp32, NaN bits included) and ~2,100 fp32 -> fp8 pairs per format
 *      (every fp8 value, every tie +-1 ulp, the saturation threshold, denormals, specials);
 *   2. an independent definition of "round to nearest even with saturation" — nearest value by
 *      binary search in the table's decoded values, ties to the even code, |x| >= max -> max,
 *      NaN -> 0x7F — over a strided sweep of all 2^32 fp32 patterns (~4.3M per format: denormals,
 *      inf, NaN, -0 included) plus every tie and the saturation threshold;
 *   3. round trips of every code, array cast / dequantize / fake-quantize agreement, stats
 *      (amax, saturation and NaN counts) and their independence of the thread count;
 *   4. scaling: delayed (history length, "max" vs "most_recent", margin, TE's roll semantics
 *      checked against a transcription of TE's update kernel), current (incl. power-of-two
 *      scales), edge cases (amax 0 / inf / tiny), the HYBRID recipe (E4M3 for weights and
 *      activations, E5M2 for gradients: scales, saturation, quantization error bounds) and
 *      saturation counts when a tensor outgrows its delayed scale.
 * Prints one line per check and finally "N passed, M failed"; exits 1 if anything failed.
 */
#include "fp8.h"

#include "hyp_test.h"

#include <float.h>
#include <math.h>
#include <omp.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint32_t f2u(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    return u;
}
static float u2f(uint32_t u) {
    float x;
    memcpy(&x, &u, 4);
    return x;
}

static uint64_t g_rng = 0x2545F4914F6CDD1Dull;
static uint64_t rng_u64(void) {
    uint64_t z = (g_rng += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
static float rng_normal(void) { /* Box-Muller */
    double u1 = ((rng_u64() >> 11) + 1.0) * (1.0 / 9007199254740993.0);
    double u2 = (rng_u64() >> 11) * (1.0 / 9007199254740992.0);
    return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}

static const hyp_fp8_fmt FMTS[2] = {HYP_FP8_E4M3, HYP_FP8_E5M2};

/* ---- 1. the committed cuda_fp8.h table ------------------------------------------------------ */

static uint32_t g_dec[2][256]; /* decode table from the fixture (cuda's float bits) */
static int g_have_dec;

static void test_fixture(void) {
    const char *path = HYP_SOURCE_DIR "/tests/fixtures/fp8_reference.txt";
    FILE *fp = fopen(path, "r");
    check(fp != NULL, "fixture tests/fixtures/fp8_reference.txt readable", "%s", path);
    if (!fp) return;
    char line[256];
    long ndec[2] = {0, 0}, nenc[2] = {0, 0}, bad_dec[2] = {0, 0}, bad_enc[2] = {0, 0};
    char first[2][160] = {"", ""};
    int seen[2][256] = {{0}};
    while (fgets(line, sizeof line, fp)) {
        char kind[8], fmt[8];
        unsigned a, b;
        if (line[0] == '#' || sscanf(line, "%7s %7s %x %x", kind, fmt, &a, &b) != 4) continue;
        int fi = !strcmp(fmt, "e5m2");
        if (!strcmp(kind, "dec") && a < 256) {
            ndec[fi]++;
            g_dec[fi][a] = b;
            seen[fi][a] = 1;
            uint32_t got = f2u(hyp_fp8_to_float((uint8_t)a, FMTS[fi]));
            if (got != b) {
                if (!bad_dec[fi]++)
                    snprintf(first[fi], sizeof first[fi], "code %02x: got %08x want %08x", a, got,
                             b);
            }
        } else if (!strcmp(kind, "enc")) {
            nenc[fi]++;
            unsigned got = hyp_fp8_from_float(u2f(a), FMTS[fi]);
            if (got != b) {
                if (!bad_enc[fi]++)
                    snprintf(first[fi], sizeof first[fi], "%08x (%g): got %02x want %02x", a,
                             (double)u2f(a), got, b);
            }
        }
    }
    fclose(fp);
    int complete = 1;
    for (int fi = 0; fi < 2; fi++)
        for (int c = 0; c < 256; c++) complete &= seen[fi][c];
    g_have_dec = complete;
    for (int fi = 0; fi < 2; fi++) {
        char name[96];
        snprintf(name, sizeof name, "%s fp8->fp32 == cuda_fp8.h (all 256 codes)",
                 hyp_fp8_name(FMTS[fi]));
        check(ndec[fi] == 256 && complete && bad_dec[fi] == 0, name, "%ld codes, %ld mismatches %s",
              ndec[fi], bad_dec[fi], bad_dec[fi] ? first[fi] : "");
        snprintf(name, sizeof name, "%s fp32->fp8 == cuda_fp8.h (table)", hyp_fp8_name(FMTS[fi]));
        check(nenc[fi] >= 2000 && bad_enc[fi] == 0, name, "%ld values, %ld mismatches %s", nenc[fi],
              bad_enc[fi], bad_enc[fi] ? first[fi] : "");
    }
}

/* ---- 2. independent reference: nearest value by search ------------------------------------- */

typedef struct {
    double val[128]; /* finite non-negative values, ascending, by code */
    int n;           /* number of finite non-negative codes (0x7F E4M3 -> 127, E5M2 -> 124) */
} value_table;

static void build_table(value_table *t, int fi) {
    t->n = 0;
    for (int c = 0; c < 128; c++) {
        float v = g_have_dec ? u2f(g_dec[fi][c]) : hyp_fp8_to_float((uint8_t)c, FMTS[fi]);
        if (!isfinite(v)) break; /* E4M3: 0x7F NaN; E5M2: 0x7C inf */
        t->val[t->n++] = v;
    }
}

/* round to nearest (ties to the even code), saturating; NaN -> 0x7F */
static uint8_t ref_encode(float x, const value_table *t) {
    if (isnan(x)) return 0x7F;
    uint8_t sign = (f2u(x) >> 31) ? 0x80 : 0;
    double a = fabs((double)x);
    int top = t->n - 1;
    if (a >= t->val[top]) return (uint8_t)(sign | top);
    int lo = 0, hi = top; /* val[lo] <= a < val[hi] */
    while (hi - lo > 1) {
        int mid = (lo + hi) / 2;
        if (t->val[mid] <= a)
            lo = mid;
        else
            hi = mid;
    }
    double dl = a - t->val[lo], dh = t->val[hi] - a; /* exact in double */
    int code = dl < dh ? lo : dh < dl ? hi : (lo % 2 == 0 ? lo : hi);
    return (uint8_t)(sign | code);
}

static void test_reference_sweep(void) {
    for (int fi = 0; fi < 2; fi++) {
        value_table t;
        build_table(&t, fi);
        long n = 0, bad = 0;
        char first[160] = "";
#define TRY(U)                                                                                     \
    do {                                                                                           \
        uint32_t u_ = (U);                                                                         \
        uint8_t g_ = hyp_fp8_from_float(u2f(u_), FMTS[fi]), w_ = ref_encode(u2f(u_), &t);          \
        n++;                                                                                       \
        if (g_ != w_ && !bad++)                                                                    \
            snprintf(first, sizeof first, "(first %08x (%g): got %02x want %02x)", u_,             \
                     (double)u2f(u_), g_, w_);                                                     \
    } while (0)
        for (uint64_t u = (uint64_t)fi; u <= 0xFFFFFFFFull; u += 997) TRY((uint32_t)u);
        for (uint32_t u = 1; u < 0x00800000u; u += 4099) {
            TRY(u);
            TRY(u | 0x80000000u);
        }
        for (int c = 0; c + 1 < t.n; c++) { /* every tie, +-2 ulps, both signs */
            float mid = (float)(0.5 * (t.val[c] + t.val[c + 1]));
            for (int d = -2; d <= 2; d++) {
                if ((int64_t)f2u(mid) + d < 0) continue;
                TRY(f2u(mid) + (uint32_t)d);
                TRY((f2u(mid) + (uint32_t)d) | 0x80000000u);
            }
        }
        float thr = fi ? 61440.0f : 464.0f; /* max + half an ulp */
        for (int d = -40; d <= 40; d++) {
            TRY(f2u(thr) + (uint32_t)d);
            TRY((f2u(thr) + (uint32_t)d) | 0x80000000u);
        }
        const uint32_t sp[] = {0,           0x80000000u, 0x7F800000u, 0xFF800000u,
                               0x7FC00000u, 0xFFC00001u, 0x7F800001u, 0x7F7FFFFFu,
                               0xFF7FFFFFu, 0x00000001u, 0x80000001u};
        for (size_t k = 0; k < sizeof sp / sizeof sp[0]; k++) TRY(sp[k]);
#undef TRY
        char name[96];
        snprintf(name, sizeof name, "%s fp32->fp8 == nearest-even search (sweep)",
                 hyp_fp8_name(FMTS[fi]));
        check(bad == 0, name, "%ld values, %ld mismatches %s", n, bad, first);
    }
    /* specific known values */
    check(hyp_fp8_from_float(448.0f, HYP_FP8_E4M3) == 0x7E &&
              hyp_fp8_from_float(464.0f, HYP_FP8_E4M3) == 0x7E &&
              hyp_fp8_from_float(1e30f, HYP_FP8_E4M3) == 0x7E &&
              hyp_fp8_from_float(-INFINITY, HYP_FP8_E4M3) == 0xFE &&
              hyp_fp8_from_float(NAN, HYP_FP8_E4M3) == 0x7F &&
              hyp_fp8_from_float(-0.0f, HYP_FP8_E4M3) == 0x80 &&
              hyp_fp8_from_float(-0x1p-11f, HYP_FP8_E4M3) == 0x80 &&
              hyp_fp8_from_float(0x1p-10f, HYP_FP8_E4M3) == 0x00 &&
              hyp_fp8_from_float(0x1.000002p-10f, HYP_FP8_E4M3) == 0x01,
          "e4m3 landmarks (max, threshold, inf, NaN, -0, ties)",
          "448/464/inf->7e, NaN->7f, -0->80, 2^-10->00");
    check(hyp_fp8_from_float(57344.0f, HYP_FP8_E5M2) == 0x7B &&
              hyp_fp8_from_float(61440.0f, HYP_FP8_E5M2) == 0x7B &&
              hyp_fp8_from_float(INFINITY, HYP_FP8_E5M2) == 0x7B &&
              hyp_fp8_from_float(-NAN, HYP_FP8_E5M2) == 0x7F &&
              hyp_fp8_from_float(0x1p-17f, HYP_FP8_E5M2) == 0x00 &&
              hyp_fp8_from_float(0x1p-16f, HYP_FP8_E5M2) == 0x01 &&
              isinf(hyp_fp8_to_float(0xFC, HYP_FP8_E5M2)) &&
              hyp_fp8_to_float(0xFC, HYP_FP8_E5M2) < 0 &&
              f2u(hyp_fp8_to_float(0xFF, HYP_FP8_E4M3)) == 0x7FFFFFFFu,
          "e5m2 landmarks (max, threshold, inf, NaN, subnormals)", "57344/61440/inf->7b, fc=-inf");
}

/* ---- 3. round trips, arrays, stats ---------------------------------------------------------- */

static void test_roundtrip_and_arrays(void) {
    for (int fi = 0; fi < 2; fi++) {
        hyp_fp8_fmt f = FMTS[fi];
        int bad = 0, mono = 1;
        for (int c = 0; c < 256; c++) {
            float v = hyp_fp8_to_float((uint8_t)c, f);
            if (isnan(v)) continue;
            if (isinf(v)) { /* E5M2 +-inf saturates to +-max */
                if (hyp_fp8_from_float(v, f) != (c & 0x80 ? 0xFB : 0x7B)) bad++;
                continue;
            }
            if (hyp_fp8_from_float(v, f) != c) bad++;
        }
        for (int c = 1; c < 127; c++) {
            float a = hyp_fp8_to_float((uint8_t)(c - 1), f), b = hyp_fp8_to_float((uint8_t)c, f);
            if (!isnan(b) && !(a < b)) mono = 0;
        }
        char name[96];
        snprintf(name, sizeof name, "%s encode(decode(code)) == code, monotonic", hyp_fp8_name(f));
        check(bad == 0 && mono, name, "%d mismatches", bad);

        /* arrays: cast + dequantize == fake_quantize, bitwise; with a non-power-of-two scale */
        const long n = 200000;
        float *x = malloc(sizeof(float) * n), *y = malloc(sizeof(float) * n),
              *z = malloc(sizeof(float) * n);
        uint8_t *q = malloc((size_t)n);
        for (long i = 0; i < n; i++) x[i] = rng_normal() * (i % 7 == 0 ? 300.0f : 1.0f);
        x[3] = NAN;
        x[4] = INFINITY;
        x[5] = -INFINITY;
        x[6] = -0.0f;
        x[8] = 1e-30f;
        const float scale = fi ? 3.7f : 1.9f, scale_inv = 1.0f / scale;
        hyp_fp8_stats sc, sf;
        hyp_fp8_cast(q, x, n, scale, f, &sc);
        hyp_fp8_dequantize(y, q, n, scale_inv, f);
        memcpy(z, x, sizeof(float) * n);
        hyp_fp8_fake_quantize(z, n, scale, scale_inv, f, &sf);
        long mism = 0, qbad = 0, nsat = 0, nnan = 0;
        float amax = 0.0f;
        for (long i = 0; i < n; i++) {
            if (!(f2u(y[i]) == f2u(z[i]) || (isnan(y[i]) && isnan(z[i])))) mism++;
            if (q[i] != hyp_fp8_from_float(x[i] * scale, f)) qbad++;
            float v = x[i] * scale;
            nsat += fabsf(v) > hyp_fp8_max(f);
            nnan += isnan(v);
            if (fabsf(x[i]) > amax) amax = fabsf(x[i]);
        }
        snprintf(name, sizeof name, "%s cast+dequantize == fake_quantize (bitwise)",
                 hyp_fp8_name(f));
        check(mism == 0 && qbad == 0, name, "%ld elements, %ld value / %ld code mismatches", n,
              mism, qbad);
        snprintf(name, sizeof name, "%s stats: amax, saturation and NaN counts", hyp_fp8_name(f));
        check(sc.amax == amax && sf.amax == amax && sc.nsat == nsat && sf.nsat == nsat &&
                  sc.nnan == nnan && sf.nnan == nnan && hyp_fp8_amax(x, n) == amax,
              name, "amax %g (inf present), nsat %ld, nnan %ld", (double)sc.amax, sc.nsat, sc.nnan);

        /* thread-count independence */
        x[4] = 7.0f;
        x[5] = -9.0f;
        hyp_fp8_stats s1, s2;
        memcpy(z, x, sizeof(float) * n);
        memcpy(y, x, sizeof(float) * n);
        int saved = omp_get_max_threads();
        omp_set_num_threads(1);
        hyp_fp8_fake_quantize(z, n, scale, scale_inv, f, &s1);
        omp_set_num_threads(saved > 1 ? saved : 2);
        hyp_fp8_fake_quantize(y, n, scale, scale_inv, f, &s2);
        omp_set_num_threads(saved);
        int same = s1.amax == s2.amax && s1.nsat == s2.nsat && s1.nnan == s2.nnan;
        for (long i = 0; i < n && same; i++)
            same = f2u(y[i]) == f2u(z[i]) || (isnan(y[i]) && isnan(z[i]));
        snprintf(name, sizeof name, "%s results independent of the thread count", hyp_fp8_name(f));
        check(same, name, "1 vs %d threads", saved > 1 ? saved : 2);
        free(x);
        free(y);
        free(z);
        free(q);
    }
    /* crafted saturation count */
    float v[8] = {1.0f, -2.0f, 500.0f, -1000.0f, INFINITY, NAN, 448.0f, 449.0f};
    uint8_t q[8];
    hyp_fp8_stats s;
    hyp_fp8_cast(q, v, 8, 1.0f, HYP_FP8_E4M3, &s);
    check(s.nsat == 4 && s.nnan == 1 && isinf(s.amax) && q[2] == 0x7E && q[3] == 0xFE &&
              q[4] == 0x7E && q[5] == 0x7F && q[6] == 0x7E && q[7] == 0x7E,
          "e4m3 crafted: 500, -1000, inf, 449 saturate; NaN kept", "nsat %ld nnan %ld", s.nsat,
          s.nnan);
}

/* ---- 4. scaling ------------------------------------------------------------------------------ */

/* TE's update (transformer_engine/common/recipe/delayed_scaling.cu, kernel_bulk), transcribed:
 * history[0] is the current step; roll so that history[0] = 0 and the old [0] goes last. */
typedef struct {
    float h[64];
    int len;
    float scale;
} te_state;
static void te_update(te_state *t, int most_recent, float fp8_max, float margin) {
    float last = t->h[0], amax = 0.0f;
    if (last != 0.0f) {
        float a[64];
        for (int i = 0; i < t->len; i++) {
            a[i] = i < t->len - 1 ? t->h[i + 1] : last;
            amax = fmaxf(amax, a[i]);
        }
        for (int i = 0; i < t->len; i++) t->h[i] = i > 0 ? a[i] : 0.0f;
    }
    if (most_recent) amax = last;
    float scaled_max = fp8_max * powf(2.0f, -margin);
    float scale = (isfinite(amax) && amax > 0.0f) ? scaled_max / amax : t->scale;
    if (isinf(scale)) scale = FLT_MAX;
    t->scale = scale;
}

static void test_scaling(void) {
    hyp_err e;
    hyp_fp8_recipe r = hyp_fp8_recipe_default();
    check(r.scaling == HYP_FP8_DELAYED && r.history_len == 1024 && r.margin == 0.0f &&
              r.algo == HYP_FP8_AMAX_MAX,
          "default recipe = TE DelayedScaling()", "delayed, history 1024, margin 0, max");
    check(hyp_fp8_hybrid_format(HYP_FP8_WEIGHT) == HYP_FP8_E4M3 &&
              hyp_fp8_hybrid_format(HYP_FP8_ACTIVATION) == HYP_FP8_E4M3 &&
              hyp_fp8_hybrid_format(HYP_FP8_GRADIENT) == HYP_FP8_E5M2,
          "HYBRID: E4M3 weights/activations, E5M2 gradients", NULL);

    /* bad recipes */
    hyp_fp8_state st;
    r.history_len = 0;
    int rc0 = hyp_fp8_state_init(&st, HYP_FP8_E4M3, &r, &e);
    r.history_len = 5000;
    int rc1 = hyp_fp8_state_init(&st, HYP_FP8_E4M3, &r, &e);
    check(rc0 == HYP_EINPUT && rc1 == HYP_EINPUT && strstr(e.msg, "history length 5000"),
          "bad history length rejected", "%s", e.msg);

    /* delayed, history length 4, "max": a spike is remembered for exactly 4 updates */
    r = hyp_fp8_recipe_default();
    r.history_len = 4;
    hyp_fp8_state_init(&st, HYP_FP8_E4M3, &r, &e);
    const float amaxes[9] = {1, 1, 100, 1, 1, 1, 1, 1, 1};
    float scales[9];
    for (int k = 0; k < 9; k++) {
        hyp_fp8_state_record(&st, amaxes[k]);
        hyp_fp8_state_update(&st);
        scales[k] = st.scale;
    }
    int ok = scales[0] == 448.0f && scales[1] == 448.0f;
    for (int k = 2; k <= 5; k++) ok &= scales[k] == 4.48f;
    ok &= scales[6] == 448.0f && st.scale_inv == 1.0f / 448.0f;
    check(ok, "delayed len 4: spike of 100 kept 4 updates, then 448/1", "scales %g %g %g .. %g %g",
          (double)scales[1], (double)scales[2], (double)scales[5], (double)scales[6],
          (double)scales[8]);

    /* history length 1 == most recent; "most_recent" with a long history too */
    r.history_len = 1;
    hyp_fp8_state a1;
    hyp_fp8_state_init(&a1, HYP_FP8_E4M3, &r, &e);
    r.history_len = 16;
    r.algo = HYP_FP8_AMAX_MOST_RECENT;
    hyp_fp8_state a2;
    hyp_fp8_state_init(&a2, HYP_FP8_E4M3, &r, &e);
    ok = 1;
    for (int k = 0; k < 9; k++) {
        hyp_fp8_state_record(&a1, amaxes[k]);
        hyp_fp8_state_record(&a2, amaxes[k]);
        hyp_fp8_state_update(&a1);
        hyp_fp8_state_update(&a2);
        ok &= a1.scale == 448.0f / amaxes[k] && a2.scale == a1.scale;
    }
    check(ok, "history 1 and most_recent: scale = 448 / last amax", NULL);

    /* margin */
    r = hyp_fp8_recipe_default();
    r.margin = 2.0f;
    hyp_fp8_state_init(&st, HYP_FP8_E5M2, &r, &e);
    hyp_fp8_state_record(&st, 7.0f);
    hyp_fp8_state_update(&st);
    check(st.scale == 57344.0f / 4.0f / 7.0f, "margin 2: scale = 57344 / 7 / 2^2", "%g",
          (double)st.scale);

    /* edge cases: no cast this step, inf, NaN (ignored by the max), tiny amax */
    r = hyp_fp8_recipe_default();
    r.history_len = 3;
    hyp_fp8_state_init(&st, HYP_FP8_E4M3, &r, &e);
    hyp_fp8_state_record(&st, 2.0f);
    hyp_fp8_state_update(&st);
    float s0 = st.scale;
    int pos0 = st.pos;
    hyp_fp8_state_update(&st); /* nothing recorded this step */
    int noop = st.scale == s0 && st.pos == pos0;
    hyp_fp8_state_record(&st, INFINITY);
    hyp_fp8_state_update(&st); /* amax inf -> scale kept */
    int keep_inf = st.scale == s0;
    hyp_fp8_state_init(&st, HYP_FP8_E4M3, &r, &e);
    hyp_fp8_state_record(&st, NAN); /* fmaxf ignores NaN: slot stays 0 -> no-op */
    hyp_fp8_state_update(&st);
    int nan_ign = st.scale == 1.0f && st.steps == 0;
    hyp_fp8_state_record(&st, 1e-45f);
    hyp_fp8_state_update(&st);
    int tiny = st.scale == FLT_MAX;
    check(noop && keep_inf && nan_ign && tiny, "delayed edge cases: idle step, inf, NaN, tiny amax",
          "idle no-op %d, inf keeps %d, NaN ignored %d, tiny -> FLT_MAX %d", noop, keep_inf,
          nan_ign, tiny);

    /* TE roll semantics: random amax streams (with idle steps) vs the transcribed TE kernel */
    int te_ok = 1;
    for (int trial = 0; trial < 200 && te_ok; trial++) {
        r = hyp_fp8_recipe_default();
        r.history_len = 1 + (int)(rng_u64() % 12);
        r.algo = (rng_u64() & 1) ? HYP_FP8_AMAX_MOST_RECENT : HYP_FP8_AMAX_MAX;
        r.margin = (float)(rng_u64() % 3);
        hyp_fp8_fmt f = (rng_u64() & 1) ? HYP_FP8_E5M2 : HYP_FP8_E4M3;
        hyp_fp8_state_init(&st, f, &r, &e);
        te_state t;
        memset(&t, 0, sizeof t);
        t.len = r.history_len;
        t.scale = 1.0f;
        for (int k = 0; k < 60; k++) {
            int casts = (int)(rng_u64() % 3); /* 0: idle step; 2: two casts in one step */
            for (int c = 0; c < casts; c++) {
                float amax = fabsf(rng_normal()) * powf(2.0f, (float)(int)(rng_u64() % 20) - 10.0f);
                hyp_fp8_state_record(&st, amax);
                t.h[0] = fmaxf(t.h[0], amax);
            }
            hyp_fp8_state_update(&st);
            te_update(&t, r.algo == HYP_FP8_AMAX_MOST_RECENT, hyp_fp8_max(f), r.margin);
            if (st.scale != t.scale || st.scale_inv != 1.0f / t.scale) te_ok = 0;
        }
    }
    check(te_ok, "delayed == TE's update kernel (200 random streams)",
          "lengths 1..12, max/most_recent, margins 0..2");

    /* current scaling */
    check(hyp_fp8_scale_current(10.0f, 448.0f, 0.0f, 0) == 44.8f &&
              hyp_fp8_scale_current(0.0f, 448.0f, 0.0f, 0) == 1.0f &&
              hyp_fp8_scale_current(INFINITY, 448.0f, 0.0f, 0) == 1.0f &&
              hyp_fp8_scale_current(NAN, 448.0f, 0.0f, 0) == 1.0f &&
              hyp_fp8_scale_current(3.0f, 448.0f, 0.0f, 1) == 128.0f &&
              hyp_fp8_scale_current(1e-45f, 448.0f, 0.0f, 0) == FLT_MAX,
          "current scale: 448/amax; 1 for 0/inf/NaN; pow2; FLT_MAX", NULL);

    /* delayed vs current on a growing tensor: delayed lags one step and saturates, current not */
    r = hyp_fp8_recipe_default();
    r.history_len = 1;
    hyp_fp8_state dl, cu;
    hyp_fp8_state_init(&dl, HYP_FP8_E4M3, &r, &e);
    r.scaling = HYP_FP8_CURRENT;
    hyp_fp8_state_init(&cu, HYP_FP8_E4M3, &r, &e);
    const long n = 4096;
    float *x = malloc(sizeof(float) * n), *w = malloc(sizeof(float) * n);
    uint8_t *q = malloc((size_t)n);
    long sat_dl[4], sat_cu[4], expect_sat[4];
    float sc_dl[4], sc_cu[4];
    for (int k = 0; k < 4; k++) {
        float growth = powf(4.0f, (float)k); /* amax 1, 4, 16, 64 (the last element) */
        for (long i = 0; i < n; i++) x[i] = growth * (float)(i + 1) / (float)n;
        /* what delayed will saturate: |x| * scale_prev > 448, scale_prev = 448 / (growth / 4) */
        expect_sat[k] = 0;
        for (long i = 0; i < n; i++) expect_sat[k] += x[i] * dl.scale > 448.0f;
        sat_dl[k] = hyp_fp8_state_cast(&dl, q, x, n).nsat;
        sc_dl[k] = dl.scale;
        hyp_fp8_state_update(&dl);
        memcpy(w, x, sizeof(float) * n);
        sat_cu[k] = hyp_fp8_state_fake_quantize(&cu, w, n).nsat;
        sc_cu[k] = cu.scale;
        hyp_fp8_state_update(&cu); /* no-op for current */
    }
    ok = 1;
    for (int k = 0; k < 4; k++)
        ok &= sat_cu[k] == 0 && sc_cu[k] == 448.0f / powf(4.0f, (float)k) &&
              sat_dl[k] == expect_sat[k];
    ok &= sat_dl[0] == 0 && sat_dl[1] == 3 * n / 4 && sc_dl[1] == 448.0f && sc_dl[2] == 112.0f;
    check(ok, "delayed vs current on a growing tensor: saturation counts",
          "delayed nsat %ld %ld %ld %ld, current 0 0 0 0", sat_dl[0], sat_dl[1], sat_dl[2],
          sat_dl[3]);

    /* HYBRID: weights/activations in E4M3, gradients in E5M2, current scaling (amax -> fp8 max) */
    r = hyp_fp8_recipe_default();
    r.scaling = HYP_FP8_CURRENT;
    hyp_fp8_state sw, sa, sg;
    hyp_fp8_state_init_role(&sw, HYP_FP8_WEIGHT, &r, &e);
    hyp_fp8_state_init_role(&sa, HYP_FP8_ACTIVATION, &r, &e);
    hyp_fp8_state_init_role(&sg, HYP_FP8_GRADIENT, &r, &e);
    float amaxv[3] = {0.25f, 12.0f, 3e-4f}; /* typical magnitudes: weights, activations, grads */
    hyp_fp8_state *sts[3] = {&sw, &sa, &sg};
    const char *names[3] = {"weight", "activation", "gradient"};
    double relmax[3];
    int hy_ok = 1;
    for (int k = 0; k < 3; k++) {
        for (long i = 0; i < n; i++) x[i] = amaxv[k] * rng_normal() / 4.0f;
        x[17] = amaxv[k]; /* the amax element */
        x[18] = -amaxv[k];
        for (long i = 0; i < n; i++)
            if (fabsf(x[i]) > amaxv[k]) x[i] = copysignf(amaxv[k], x[i]);
        memcpy(w, x, sizeof(float) * n);
        hyp_fp8_stats s2 = hyp_fp8_state_cast(sts[k], q, x, n);
        hyp_fp8_state_fake_quantize(sts[k], w, n);
        float fmax = hyp_fp8_max(sts[k]->fmt);
        /* only the +-amax elements can land a rounding above fmax (fmax/amax is rounded) */
        long want_sat = 0;
        for (long i = 0; i < n; i++) want_sat += fabsf(x[i] * sts[k]->scale) > fmax;
        hy_ok &= sts[k]->scale == fmax / amaxv[k] && s2.amax == amaxv[k] && s2.nsat == want_sat &&
                 want_sat <= 2;
        hy_ok &= hyp_fp8_to_float(q[17], sts[k]->fmt) == fmax && q[18] == (uint8_t)(0x80 | q[17]);
        /* relative error of the quantized values in the normal range: <= half an ulp = 2^-(m+1) */
        float minnorm = sts[k]->fmt == HYP_FP8_E4M3 ? 0x1p-6f : 0x1p-14f;
        relmax[k] = 0.0;
        for (long i = 0; i < n; i++) {
            if (fabsf(x[i]) * sts[k]->scale < minnorm) continue;
            double rel = fabs((double)w[i] - x[i]) / fabs((double)x[i]);
            if (rel > relmax[k]) relmax[k] = rel;
        }
        hy_ok &= relmax[k] <= (sts[k]->fmt == HYP_FP8_E4M3 ? 1.0 / 16 : 1.0 / 8) * (1 + 1e-6);
    }
    check(hy_ok && sw.fmt == HYP_FP8_E4M3 && sa.fmt == HYP_FP8_E4M3 && sg.fmt == HYP_FP8_E5M2,
          "HYBRID: amax -> 448 (E4M3) / 57344 (E5M2), rel err <= 2^-(m+1)",
          "%s scale %g err %.3g, %s scale %g err %.3g, %s scale %g err %.3g", names[0],
          (double)sw.scale, relmax[0], names[1], (double)sa.scale, relmax[1], names[2],
          (double)sg.scale, relmax[2]);
    free(x);
    free(w);
    free(q);
}

int main(void) {
    test_fixture();
    test_reference_sweep();
    test_roundtrip_and_arrays();
    test_scaling();
    return hyp_test_finish();
}
