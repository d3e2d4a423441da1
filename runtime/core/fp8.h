/* fp8.h — FP8 numerics for the CPU backend (issue #6, v2160): conversions that are bit-exact with
 * CUDA's cuda_fp8.h, and the per-tensor scaling recipes of Transformer Engine (TE).
 *
 * Formats (OCP FP8):
 *   E4M3  1.4.3, bias 7, finite only: max 448 (0x7E), NaN = S.1111.111 (0x7F / 0xFF), no inf;
 *         smallest subnormal 2^-9, smallest normal 2^-6.
 *   E5M2  1.5.2, bias 15, IEEE-like: max 57344 (0x7B), inf 0x7C, NaN 0x7D..0x7F (and negatives);
 *         smallest subnormal 2^-16, smallest normal 2^-14.
 *
 * fp32 -> fp8 is round-to-nearest-even with SATURATION, exactly
 *   __nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E4M3 / __NV_E5M2):
 *   |x| beyond the largest finite value (after rounding), and +-inf, give +-max; NaN gives 0x7F
 *   (sign dropped, both formats); values that round to zero keep their sign (0x80 for negatives).
 * fp8 -> fp32 is exact, as float(__nv_fp8_e4m3) / float(__nv_fp8_e5m2): NaN codes give the
 *   canonical 0x7FFFFFFF (sign dropped), E5M2 +-inf gives +-inf.
 * Verified over all 256 codes and millions of fp32 patterns against the CUDA header itself
 * (tests/gen/test_fp8_cuda_exact.sh) and, without CUDA, against a committed table
 * (tests/fixtures/fp8_reference.txt, checked by tests/unit/test_fp8.c).
 *
 * Scaling (per tensor, TE conventions): q = fp8(x * scale) with saturation; x ~ fp32(q) * scale_inv
 * with scale_inv = 1 / scale computed once in fp32 (TE's Float8Tensor dequantization). amax is
 * max |x| of the UNSCALED tensor (NaN ignored, like TE's fmaxf-based amax kernels).
 *   delayed  (TE DelayedScaling, the default recipe): the tensor is cast with the scale computed at
 *            the previous update; its amax goes into the current slot of an amax history (ring
 *            of history_len steps); hyp_fp8_state_update(), once per step, reduces the history
 *            ("max" over all slots, or "most_recent"), sets scale = fp8_max * 2^-margin / amax
 *            (kept when amax is 0, inf or NaN; FLT_MAX if that overflows), scale_inv = 1 / scale,
 *            and moves to a fresh (zero) slot. A step in which the tensor was never cast (its slot
 *            is still 0) leaves scale and history untouched (TE's bulk update does the same).
 *   current  (TE Float8CurrentScaling): each cast first takes this tensor's amax and uses
 *            scale = fp8_max * 2^-margin / amax (1 when amax is 0, inf or NaN; FLT_MAX on overflow;
 *            optionally rounded down to a power of two), then casts.
 *   HYBRID format (TE Format.HYBRID): E4M3 for the forward GEMM inputs (weights, activations),
 *            E5M2 for gradients (hyp_fp8_hybrid_format).
 *
 * Array functions run OpenMP-parallel above 32K elements; amax (a max) and the counts (integer
 * sums) are exact, so results do not depend on the thread count. Nothing here allocates.
 */
#ifndef HYP_FP8_H
#define HYP_FP8_H

#include <stddef.h>
#include <stdint.h>

#include "hyp_err.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { HYP_FP8_E4M3 = 0, HYP_FP8_E5M2 = 1 } hyp_fp8_fmt;

#define HYP_FP8_E4M3_MAX 448.0f
#define HYP_FP8_E5M2_MAX 57344.0f

/* Largest finite value of the format (448 or 57344). */
float hyp_fp8_max(hyp_fp8_fmt f);
/* "e4m3" / "e5m2". */
const char *hyp_fp8_name(hyp_fp8_fmt f);

/* One value (bit-exact with cuda_fp8.h, see above). */
uint8_t hyp_fp8_from_float(float x, hyp_fp8_fmt f);
float hyp_fp8_to_float(uint8_t q, hyp_fp8_fmt f);

/* Statistics of one array cast. */
typedef struct {
    float amax; /* max |x| over the unscaled input, NaN ignored (0 for an empty/all-NaN array) */
    long nsat;  /* elements with |x * scale| > fp8 max, +-inf included: clamped to +-max */
    long nnan;  /* NaN elements (encoded as NaN) */
} hyp_fp8_stats;

/* max |x[i]| (NaN ignored). */
float hyp_fp8_amax(const float *x, long n);

/* Fused cast + amax: q[i] = fp8(x[i] * scale). stats may be NULL. */
void hyp_fp8_cast(uint8_t *q, const float *x, long n, float scale, hyp_fp8_fmt f,
                  hyp_fp8_stats *stats);

/* y[i] = fp32(q[i]) * scale_inv. */
void hyp_fp8_dequantize(float *y, const uint8_t *q, long n, float scale_inv, hyp_fp8_fmt f);

/* Fake quantization in place: x[i] = fp32(fp8(x[i] * scale)) * scale_inv, the values an FP8 GEMM
 * sees (identical to hyp_fp8_dequantize(hyp_fp8_cast(x)), without the byte array; NaN stays NaN).
 * stats (amax of the input, saturation and NaN counts) may be NULL. */
void hyp_fp8_fake_quantize(float *x, long n, float scale, float scale_inv, hyp_fp8_fmt f,
                           hyp_fp8_stats *stats);

/* ---- scaling recipes ------------------------------------------------------------------------ */

typedef enum { HYP_FP8_DELAYED = 0, HYP_FP8_CURRENT = 1 } hyp_fp8_scaling;
typedef enum { HYP_FP8_AMAX_MAX = 0, HYP_FP8_AMAX_MOST_RECENT = 1 } hyp_fp8_amax_algo;
typedef enum { HYP_FP8_WEIGHT = 0, HYP_FP8_ACTIVATION = 1, HYP_FP8_GRADIENT = 2 } hyp_fp8_role;

#define HYP_FP8_HISTORY_MAX 1024 /* TE's default amax_history_len */

/* The recipe: TE DelayedScaling(margin=0, fp8_format=HYBRID, amax_history_len=1024,
 * amax_compute_algo="max") is hyp_fp8_recipe_default(). */
typedef struct {
    hyp_fp8_scaling scaling;
    int history_len;        /* 1..HYP_FP8_HISTORY_MAX (delayed) */
    float margin;           /* scale = fp8_max * 2^-margin / amax */
    hyp_fp8_amax_algo algo; /* delayed: reduction over the history */
    int pow2_scale;         /* current: round the scale down to a power of two (TE option) */
} hyp_fp8_recipe;

hyp_fp8_recipe hyp_fp8_recipe_default(void);

/* HYBRID: E4M3 for HYP_FP8_WEIGHT / HYP_FP8_ACTIVATION, E5M2 for HYP_FP8_GRADIENT. */
hyp_fp8_fmt hyp_fp8_hybrid_format(hyp_fp8_role role);

/* One tensor's scaling state. Plain data (4 KB history inline): copy, checkpoint or zero it
 * freely; initialize with hyp_fp8_state_init. */
typedef struct {
    hyp_fp8_fmt fmt;
    hyp_fp8_recipe recipe;
    float scale, scale_inv; /* used by the next cast (delayed) / by the last cast (current) */
    int pos;                /* history slot of the current step */
    long steps;             /* hyp_fp8_state_update calls that changed the state */
    long nsat_last;         /* saturated elements in the last cast */
    float amax_history[HYP_FP8_HISTORY_MAX];
} hyp_fp8_state;

/* scale = 1, scale_inv = 1, history zero. HYP_EINPUT (with a message) for a history length
 * outside 1..HYP_FP8_HISTORY_MAX or a non-finite margin. */
int hyp_fp8_state_init(hyp_fp8_state *st, hyp_fp8_fmt fmt, const hyp_fp8_recipe *recipe,
                       hyp_err *e);
/* The same with the HYBRID format of a role. */
int hyp_fp8_state_init_role(hyp_fp8_state *st, hyp_fp8_role role, const hyp_fp8_recipe *recipe,
                            hyp_err *e);

/* TE's scale formulas (exposed for tests and for the GPU side to share):
 * delayed: scaled_max / amax if amax is finite and > 0, else old_scale; FLT_MAX if infinite.
 * current: 1 if amax is 0, inf or NaN, else scaled_max / amax (FLT_MAX if infinite), optionally
 * rounded down to a power of two. scaled_max = fp8_max * 2^-margin. */
float hyp_fp8_scale_delayed(float amax, float fp8_max, float margin, float old_scale);
float hyp_fp8_scale_current(float amax, float fp8_max, float margin, int pow2);

/* Records an amax into the current history slot (max with what is there: several casts of the
 * tensor in one step, e.g. micro-batches, give the max of them). */
void hyp_fp8_state_record(hyp_fp8_state *st, float amax);
/* Delayed scaling's once-per-step update (see the top of this file); a no-op for current. */
void hyp_fp8_state_update(hyp_fp8_state *st);
/* The amax the next update would use (history reduction). */
float hyp_fp8_state_history_amax(const hyp_fp8_state *st);

/* Cast with the state's recipe: delayed uses st->scale; current first sets st->scale from this
 * tensor's amax. Records the amax, sets st->nsat_last; returns the stats (as hyp_fp8_cast). */
hyp_fp8_stats hyp_fp8_state_cast(hyp_fp8_state *st, uint8_t *q, const float *x, long n);
/* The same as fake quantization in place (what the CPU backend applies to FP8 GEMM inputs). */
hyp_fp8_stats hyp_fp8_state_fake_quantize(hyp_fp8_state *st, float *x, long n);

#ifdef __cplusplus
}
#endif

#endif
