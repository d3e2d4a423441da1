/* hyp/sr.h — v2161 stochastic rounding to bf16 and the AdamW element update of a bf16 parameter,
 * one body for the C runtime (runtime/train/optim_adamw.c includes it) and the rendered CUDA
 * kernel (templates/adamw.cu.lua, PARAM=bf16; NVRTC and the simulator), so cpu and device steps
 * give the same bits for the same (seed, step, element).
 *
 * The random bits are a counter hash of (seed, step, element, stream): no generator state, so a
 * step is reproducible after a resume and independent of the launch geometry or thread count.
 * SR(x) rounds the fp32 bit pattern's magnitude up to the next bf16 with probability (low 16
 * bits) / 65536, so E[SR(x)] = x; infinities and NaN round to nearest (NaN stays quiet).
 *
 * Never: host headers in device code, floating-point expressions a compiler may contract
 * differently on the two sides (every multiply-add is an explicit fmaf), state of any kind. */
#ifndef HYP_SR_H
#define HYP_SR_H

#if defined(__CUDACC__) || defined(__CUDACC_RTC__) || defined(HYP_SIM)
#define HYP_SR_FN __device__ __forceinline__
#else
#include <math.h>
#include <string.h>
#define HYP_SR_FN static inline
#endif

/* 32 random bits for (seed, step, element idx, stream): a lowbias32 finalizer over a mix of the
 * four keys (stream 0: the parameter; 1, 2: optimizer states kept in bf16). */
HYP_SR_FN unsigned hyp_sr_hash(unsigned seed, unsigned step, unsigned long long idx, unsigned stream) {
    unsigned x = (unsigned)idx * 0x9E3779B1u ^ (unsigned)(idx >> 32) * 0x85EBCA77u ^ seed * 0xC2B2AE3Du ^
                 step * 0x27D4EB2Fu ^ stream * 0x165667B1u;
    x ^= x >> 16;
    x *= 0x7feb352du;
    x ^= x >> 15;
    x *= 0x846ca68bu;
    x ^= x >> 16;
    return x;
}

/* bf16 bits of the fp32 bit pattern b: stochastically rounded with the random r (its low 16
 * bits), or to nearest even when r_nearest is nonzero. */
HYP_SR_FN unsigned short hyp_sr_bf16_bits(unsigned b, unsigned r, int r_nearest) {
    if ((b & 0x7f800000u) == 0x7f800000u) /* inf, NaN: nearest (a NaN stays a quiet NaN) */
        return (unsigned short)((b & 0x007fffffu) ? ((b | 0x00400000u) >> 16) : (b >> 16));
    if (r_nearest) return (unsigned short)((b + 0x7fffu + ((b >> 16) & 1u)) >> 16);
    unsigned down = b & 0xffff0000u;
    /* magnitude up when the dropped bits exceed r: probability (b & 0xffff) / 65536; a carry into
     * the exponent is the next binade (or inf from the largest finite: correct rounding up) */
    return (unsigned short)(((b & 0xffffu) > (r & 0xffffu) ? down + 0x10000u : down) >> 16);
}

HYP_SR_FN unsigned hyp_sr_f32_bits(float x) {
#if defined(__CUDACC__) || defined(__CUDACC_RTC__) || defined(HYP_SIM)
    return (unsigned)__float_as_int(x);
#else
    unsigned u;
    memcpy(&u, &x, sizeof u);
    return u;
#endif
}

HYP_SR_FN float hyp_sr_bf16_to_f32(unsigned short h) {
#if defined(__CUDACC__) || defined(__CUDACC_RTC__) || defined(HYP_SIM)
    return __int_as_float((int)((unsigned)h << 16));
#else
    unsigned u = (unsigned)h << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
#endif
}

/* One AdamW element with a bf16 parameter and no fp32 master (v2161): the update in fp32 from
 * the bf16 value, the fp32 states m, v updated in place, the result written back as bf16 with
 * stochastic rounding keyed by (seed, step, element idx) (or round to nearest: the ablation). g
 * is the gradient already scaled (clip / loss scale). ibc1, ibc2: 1 / (1 - beta^t) in float. */
HYP_SR_FN unsigned short hyp_adamw_bf16_elem(unsigned short p, float g, float *m, float *v, float lr, float beta1,
                                            float beta2, float eps, float ibc1, float ibc2, float wd, unsigned seed,
                                            unsigned step, unsigned long long idx, int nearest) {
    float pf = hyp_sr_bf16_to_f32(p);
    float mi = fmaf(beta1, *m, (1.0f - beta1) * g);
    float vi = fmaf(beta2, *v, ((1.0f - beta2) * g) * g);
    *m = mi;
    *v = vi;
    float mhat = mi * ibc1, vhat = vi * ibc2;
    float u = fmaf(wd, pf, mhat / (sqrtf(vhat) + eps));
    float out = fmaf(-lr, u, pf);
    return hyp_sr_bf16_bits(hyp_sr_f32_bits(out), nearest ? 0u : hyp_sr_hash(seed, step, idx, 0u), nearest);
}

#endif
