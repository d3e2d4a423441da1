/* fp8.c — FP8 conversions and TE-style per-tensor scaling (contract in fp8.h).
 *
 * Rounding without a table or a loop: for a magnitude a <= max (NaN passes through), let e be its
 * binary exponent clamped below to the format's smallest normal exponent emin (below it the
 * spacing of the subnormals is fixed) — the fp8 values near a are then spaced 2^(e-m) apart (m
 * mantissa bits). With c = 1.5 * 2^(e-m+23), the fp32 sum a + c has an ulp of exactly 2^(e-m), so
 * the hardware's round-to-nearest-even of that addition IS the fp8 rounding (ties to an even fp8
 * mantissa, since c / 2^(e-m) = 3 * 2^22 is even), and (a + c) - c is exact. Clamping a to max
 * first is the saturation: anything above max would round to max or above, then clamp anyway.
 * The whole thing is float/int arithmetic and selects, which gcc vectorizes in `omp simd` loops.
 * The encoder takes the fp8 fields from the rounded fp32 value; tests check it against
 * cuda_fp8.h bit for bit.
 */
#include "fp8.h"

#include <float.h>
#include <math.h>
#include <string.h>

/* (a + c) - c, the NaN tests and the saturation compares need IEEE semantics. */
#if defined(__FAST_MATH__)
#error "runtime/fp8.c must not be compiled with -ffast-math (it relies on exact IEEE rounding)"
#endif

#define FP8_PAR_MIN 32768L /* below this an array op stays on one thread */

typedef struct {
    int m;        /* mantissa bits */
    int bias;     /* exponent bias */
    int emin;     /* exponent of the smallest normal */
    int emax;     /* exponent of the largest finite value */
    float max;    /* largest finite value */
} fp8_info;

static const fp8_info FP8_INFO[2] = {
    {3, 7, -6, 8, HYP_FP8_E4M3_MAX},    /* E4M3: 448 = 1.75 * 2^8 */
    {2, 15, -14, 15, HYP_FP8_E5M2_MAX}, /* E5M2: 57344 = 1.75 * 2^15 */
};

static inline uint32_t f2u(float x) {
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}
static inline float u2f(uint32_t u) {
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

float hyp_fp8_max(hyp_fp8_fmt f) { return FP8_INFO[f == HYP_FP8_E5M2].max; }
const char *hyp_fp8_name(hyp_fp8_fmt f) { return f == HYP_FP8_E5M2 ? "e5m2" : "e4m3"; }

/* |x| rounded to the fp8 grid (RNE) and saturated to max; NaN stays NaN. */
static inline float fp8_round_abs(float a, int m, int emin, int emax, float max) {
    a = a > max ? max : a; /* saturation (+inf too); NaN compares false and passes */
    int e = (int)(f2u(a) >> 23) - 127;
    e = e < emin ? emin : e;
    e = e > emax ? emax : e; /* only NaN gets here with a larger exponent */
    float c = 1.5f * u2f((uint32_t)(e - m + 23 + 127) << 23);
    return (a + c) - c;
}

/* The fp8 code of x: fields from the rounded magnitude, branch-free (vectorizable). */
static inline uint32_t fp8_encode(float x, int m, int bias, int emin, int emax, float max) {
    float a = fabsf(x);
    float r = fp8_round_abs(a, m, emin, emax, max);
    uint32_t rb = f2u(r);
    /* normal: exponent field and the top m mantissa bits of r (garbage for subnormal r or NaN) */
    uint32_t normal = (((rb >> 23) - 127u + (uint32_t)bias) << m) |
                      ((rb >> (23 - m)) & ((1u << m) - 1u));
    /* subnormal or zero: r is a multiple of 2^(emin - m); NaN compares false and converts 0 */
    float minnorm = u2f((uint32_t)(emin + 127) << 23);
    float rs = r < minnorm ? r : 0.0f;
    uint32_t sub = (uint32_t)(int32_t)(rs * u2f((uint32_t)(m - emin + 127) << 23));
    uint32_t code = (r < minnorm ? sub : normal) | ((f2u(x) >> 31) << 7);
    return a != a ? 0x7Fu : (code & 0xFFu); /* NaN: canonical 0x7F, sign dropped (cuda_fp8.h) */
}

uint8_t hyp_fp8_from_float(float x, hyp_fp8_fmt f) {
    const fp8_info *fi = &FP8_INFO[f == HYP_FP8_E5M2];
    return (uint8_t)fp8_encode(x, fi->m, fi->bias, fi->emin, fi->emax, fi->max);
}

float hyp_fp8_to_float(uint8_t q, hyp_fp8_fmt f) {
    const fp8_info *fi = &FP8_INFO[f == HYP_FP8_E5M2];
    const int m = fi->m;
    uint32_t sign = (uint32_t)(q >> 7) << 31;
    uint32_t E = (uint32_t)(q & 0x7F) >> m;
    uint32_t M = (uint32_t)q & ((1u << m) - 1u);
    if (f == HYP_FP8_E4M3) {
        if ((q & 0x7F) == 0x7F) return u2f(0x7FFFFFFFu); /* NaN (canonical, sign dropped) */
    } else if (E == 31) {
        return M ? u2f(0x7FFFFFFFu) : u2f(sign | 0x7F800000u); /* NaN / +-inf */
    }
    float v;
    if (E == 0) v = (float)M * u2f((uint32_t)(fi->emin - m + 127) << 23); /* subnormal, exact */
    else v = u2f(((E - (uint32_t)fi->bias + 127u) << 23) | (M << (23 - m)));
    return u2f(f2u(v) | sign);
}

/* ---- arrays ---------------------------------------------------------------------------------- */

float hyp_fp8_amax(const float *x, long n) {
    float amax = 0.0f;
#pragma omp parallel for simd reduction(max : amax) schedule(static) if (n >= FP8_PAR_MIN)
    for (long i = 0; i < n; i++) {
        float a = fabsf(x[i]);
        amax = a > amax ? a : amax; /* NaN compares false: ignored */
    }
    return amax;
}

void hyp_fp8_cast(uint8_t *q, const float *x, long n, float scale, hyp_fp8_fmt f,
                  hyp_fp8_stats *stats) {
    const fp8_info fi = FP8_INFO[f == HYP_FP8_E5M2];
    float amax = 0.0f;
    long nsat = 0, nnan = 0;
#pragma omp parallel for simd reduction(max : amax) reduction(+ : nsat, nnan) schedule(static) \
    if (n >= FP8_PAR_MIN)
    for (long i = 0; i < n; i++) {
        float a = fabsf(x[i]);
        amax = a > amax ? a : amax;
        float v = x[i] * scale;
        float av = fabsf(v);
        nsat += av > fi.max ? 1 : 0;
        nnan += av != av ? 1 : 0;
        q[i] = (uint8_t)fp8_encode(v, fi.m, fi.bias, fi.emin, fi.emax, fi.max);
    }
    if (stats) { stats->amax = amax; stats->nsat = nsat; stats->nnan = nnan; }
}

void hyp_fp8_dequantize(float *y, const uint8_t *q, long n, float scale_inv, hyp_fp8_fmt f) {
    float lut[256];
    for (int c = 0; c < 256; c++) lut[c] = hyp_fp8_to_float((uint8_t)c, f) * scale_inv;
#pragma omp parallel for schedule(static) if (n >= FP8_PAR_MIN)
    for (long i = 0; i < n; i++) y[i] = lut[q[i]];
}

void hyp_fp8_fake_quantize(float *x, long n, float scale, float scale_inv, hyp_fp8_fmt f,
                           hyp_fp8_stats *stats) {
    const fp8_info fi = FP8_INFO[f == HYP_FP8_E5M2];
    float amax = 0.0f;
    long nsat = 0, nnan = 0;
#pragma omp parallel for simd reduction(max : amax) reduction(+ : nsat, nnan) schedule(static) \
    if (n >= FP8_PAR_MIN)
    for (long i = 0; i < n; i++) {
        float a = fabsf(x[i]);
        amax = a > amax ? a : amax;
        float v = x[i] * scale;
        float av = fabsf(v);
        nsat += av > fi.max ? 1 : 0;
        nnan += av != av ? 1 : 0;
        float r = fp8_round_abs(av, fi.m, fi.emin, fi.emax, fi.max);
        x[i] = copysignf(r, v) * scale_inv;
    }
    if (stats) { stats->amax = amax; stats->nsat = nsat; stats->nnan = nnan; }
}

/* ---- scaling --------------------------------------------------------------------------------- */

hyp_fp8_recipe hyp_fp8_recipe_default(void) {
    hyp_fp8_recipe r = {HYP_FP8_DELAYED, HYP_FP8_HISTORY_MAX, 0.0f, HYP_FP8_AMAX_MAX, 0};
    return r;
}

hyp_fp8_fmt hyp_fp8_hybrid_format(hyp_fp8_role role) {
    return role == HYP_FP8_GRADIENT ? HYP_FP8_E5M2 : HYP_FP8_E4M3;
}

int hyp_fp8_state_init(hyp_fp8_state *st, hyp_fp8_fmt fmt, const hyp_fp8_recipe *recipe,
                       hyp_err *e) {
    hyp_fp8_recipe r = recipe ? *recipe : hyp_fp8_recipe_default();
    if (r.history_len < 1 || r.history_len > HYP_FP8_HISTORY_MAX)
        return hyp_fail(e, HYP_EINPUT,
                        "fp8: amax history length %d is out of range — use 1..%d (TE's default "
                        "is 1024)",
                        r.history_len, HYP_FP8_HISTORY_MAX);
    if (!isfinite(r.margin))
        return hyp_fail(e, HYP_EINPUT,
                        "fp8: scaling margin is not finite — use a number such as 0");
    memset(st, 0, sizeof *st);
    st->fmt = fmt;
    st->recipe = r;
    st->scale = 1.0f;
    st->scale_inv = 1.0f;
    return HYP_OK;
}

int hyp_fp8_state_init_role(hyp_fp8_state *st, hyp_fp8_role role, const hyp_fp8_recipe *recipe,
                            hyp_err *e) {
    return hyp_fp8_state_init(st, hyp_fp8_hybrid_format(role), recipe, e);
}

/* scaled_max exactly as TE: fp8_max * std::pow(2.f, -margin) in fp32 */
static float scaled_max(float fp8_max, float margin) { return fp8_max * powf(2.0f, -margin); }

float hyp_fp8_scale_delayed(float amax, float fp8_max, float margin, float old_scale) {
    float scale = (isfinite(amax) && amax > 0.0f) ? scaled_max(fp8_max, margin) / amax : old_scale;
    if (isinf(scale)) scale = FLT_MAX;
    return scale;
}

float hyp_fp8_scale_current(float amax, float fp8_max, float margin, int pow2) {
    if (isinf(amax) || isnan(amax) || amax == 0.0f) return 1.0f;
    float scale = scaled_max(fp8_max, margin) / amax;
    if (isinf(scale)) scale = FLT_MAX;
    if (pow2) scale = u2f(f2u(scale) & 0xFF800000u);
    return scale;
}

void hyp_fp8_state_record(hyp_fp8_state *st, float amax) {
    float *slot = &st->amax_history[st->pos];
    *slot = fmaxf(*slot, amax);
}

float hyp_fp8_state_history_amax(const hyp_fp8_state *st) {
    if (st->recipe.algo == HYP_FP8_AMAX_MOST_RECENT) return st->amax_history[st->pos];
    float amax = 0.0f;
    for (int i = 0; i < st->recipe.history_len; i++) amax = fmaxf(amax, st->amax_history[i]);
    return amax;
}

void hyp_fp8_state_update(hyp_fp8_state *st) {
    if (st->recipe.scaling != HYP_FP8_DELAYED) return;
    if (st->amax_history[st->pos] == 0.0f) return; /* not cast this step: nothing to learn */
    float amax = hyp_fp8_state_history_amax(st);
    st->scale = hyp_fp8_scale_delayed(amax, hyp_fp8_max(st->fmt), st->recipe.margin, st->scale);
    st->scale_inv = 1.0f / st->scale;
    st->pos = (st->pos + 1) % st->recipe.history_len;
    st->amax_history[st->pos] = 0.0f; /* the slot of the oldest step becomes the new step's */
    st->steps++;
}

static void state_prepare(hyp_fp8_state *st, const float *x, long n) {
    if (st->recipe.scaling == HYP_FP8_CURRENT) {
        float amax = hyp_fp8_amax(x, n);
        st->scale = hyp_fp8_scale_current(amax, hyp_fp8_max(st->fmt), st->recipe.margin,
                                          st->recipe.pow2_scale);
        st->scale_inv = 1.0f / st->scale;
    }
}

hyp_fp8_stats hyp_fp8_state_cast(hyp_fp8_state *st, uint8_t *q, const float *x, long n) {
    hyp_fp8_stats s;
    state_prepare(st, x, n);
    hyp_fp8_cast(q, x, n, st->scale, st->fmt, &s);
    hyp_fp8_state_record(st, s.amax);
    st->nsat_last = s.nsat;
    return s;
}

hyp_fp8_stats hyp_fp8_state_fake_quantize(hyp_fp8_state *st, float *x, long n) {
    hyp_fp8_stats s;
    state_prepare(st, x, n);
    hyp_fp8_fake_quantize(x, n, st->scale, st->scale_inv, st->fmt, &s);
    hyp_fp8_state_record(st, s.amax);
    st->nsat_last = s.nsat;
    return s;
}
