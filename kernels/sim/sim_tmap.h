/* sim_tmap.h — the simulator's tensor map (the 128-byte CUtensorMap that TMA reads): the host-side
 * encoder with cuTensorMapEncodeTiled's arguments and rules (CUDA 13 cuda.h), and the layout the
 * sim's TMA emulation (kernels/sim/hopper_sim.h) decodes. C and C++ (the runtime, the stand-in
 * libcuda and the tests include it; so does a sim module).
 *
 * The real driver's bit layout is undocumented (the map is opaque); this one carries the same
 * fields. A map encoded here is only meaningful to the sim, and a map from the real driver only
 * to a GPU. Never: reads or dereferences the global address (a map may describe device memory).
 *
 *   uint64_t dims[2] = {cols, rows}, strides[1] = {cols * 2};   // bytes, dims 1..rank-1
 *   uint32_t box[2] = {64, 64}, es[2] = {1, 1};
 *   char why[200];
 *   if (hyp_sim_tmap_encode_tiled(&map, HYP_TMAP_BF16, 2, ptr, dims, strides, box, es, 0,
 *                                 HYP_TMAP_SWIZZLE_128B, 0, 0, why, sizeof why)) ... why
 */
#ifndef HYP_SIM_TMAP_H
#define HYP_SIM_TMAP_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

/* CUtensorMapDataType values (the ones the sim emulates; others are refused) */
enum { HYP_TMAP_U8 = 0, HYP_TMAP_U16 = 1, HYP_TMAP_U32 = 2, HYP_TMAP_I32 = 3, HYP_TMAP_U64 = 4,
       HYP_TMAP_I64 = 5, HYP_TMAP_F16 = 6, HYP_TMAP_F32 = 7, HYP_TMAP_F64 = 8, HYP_TMAP_BF16 = 9 };
/* CUtensorMapSwizzle values */
enum { HYP_TMAP_SWIZZLE_NONE = 0, HYP_TMAP_SWIZZLE_32B = 1, HYP_TMAP_SWIZZLE_64B = 2,
       HYP_TMAP_SWIZZLE_128B = 3 };

#define HYP_SIM_TMAP_MAGIC 0x314d5448u /* "HTM1" */

typedef struct hyp_sim_tmap_fields {
    uint32_t magic;
    uint8_t dtype, rank, esize, swizzle, interleave, l2promo, oobfill, pad;
    uint64_t addr;
    uint64_t dims[5];
    uint64_t strides[5]; /* bytes; strides[0] is the element size, strides[d] for d >= 1 given */
    uint16_t box[5];
    uint8_t estrides[5];
} hyp_sim_tmap_fields; /* 120 bytes with padding, within CUtensorMap's 128 */
typedef char hyp_sim_tmap_fits[sizeof(hyp_sim_tmap_fields) <= 128 ? 1 : -1];

static inline unsigned hyp_sim_tmap_esize(int dtype) {
    switch (dtype) {
    case HYP_TMAP_U8: return 1;
    case HYP_TMAP_U16: case HYP_TMAP_F16: case HYP_TMAP_BF16: return 2;
    case HYP_TMAP_U32: case HYP_TMAP_I32: case HYP_TMAP_F32: return 4;
    case HYP_TMAP_U64: case HYP_TMAP_I64: case HYP_TMAP_F64: return 8;
    default: return 0;
    }
}

/* cuTensorMapEncodeTiled's checks; 0 and the 128 bytes written, or -1 with `why` (one line) and
 * the map untouched. The sim emulates interleave NONE, elementStrides 1 and OOB fill NONE
 * (zeros); the other values are accepted here as the driver accepts them, and refused by the TMA
 * emulation when a copy uses them. */
static inline int hyp_sim_tmap_encode_tiled(void *map, int dtype, unsigned rank, const void *gaddr,
                                            const uint64_t *dims, const uint64_t *strides,
                                            const uint32_t *box, const uint32_t *estrides,
                                            int interleave, int swizzle, int l2promo, int oobfill,
                                            char *why, size_t whylen) {
    unsigned es = hyp_sim_tmap_esize(dtype);
#define HYP_TMAP_BAD(...) do { if (why && whylen) snprintf(why, whylen, __VA_ARGS__); return -1; } while (0)
    if (!map || ((uintptr_t)map & 63)) HYP_TMAP_BAD("tensorMap %p is not 64-byte aligned", map);
    if (!es) HYP_TMAP_BAD("tensorDataType %d is not one the sim emulates (integers, f16, bf16, f32, f64)", dtype);
    if (rank < 1 || rank > 5) HYP_TMAP_BAD("tensorRank %u is not in 1..5", rank);
    if (interleave < 0 || interleave > 2) HYP_TMAP_BAD("interleave %d is not a CUtensorMapInterleave", interleave);
    if (interleave != 0 && rank < 3) HYP_TMAP_BAD("an interleaved layout needs tensorRank >= 3, not %u", rank);
    if (swizzle < 0 || swizzle > 3) HYP_TMAP_BAD("swizzle %d is not NONE, 32B, 64B or 128B", swizzle);
    if (interleave == 2 && swizzle != HYP_TMAP_SWIZZLE_32B) HYP_TMAP_BAD("INTERLEAVE_32B needs SWIZZLE_32B");
    if (l2promo < 0 || l2promo > 3) HYP_TMAP_BAD("l2Promotion %d is not a CUtensorMapL2promotion", l2promo);
    if (oobfill < 0 || oobfill > 1) HYP_TMAP_BAD("oobFill %d is not a CUtensorMapFloatOOBfill", oobfill);
    if (oobfill == 1 && !(dtype == HYP_TMAP_F16 || dtype == HYP_TMAP_BF16 || dtype == HYP_TMAP_F32 || dtype == HYP_TMAP_F64))
        HYP_TMAP_BAD("oobFill NAN_REQUEST_ZERO_FMA needs a floating-point tensorDataType");
    if ((uintptr_t)gaddr & (interleave == 2 ? 31 : 15))
        HYP_TMAP_BAD("globalAddress %p is not %d-byte aligned", gaddr, interleave == 2 ? 32 : 16);
    for (unsigned d = 0; d < rank; d++) {
        if (dims[d] == 0 || dims[d] > (1ull << 32)) HYP_TMAP_BAD("globalDim[%u] = %llu is not in 1..2^32", d, (unsigned long long)dims[d]);
        if (box[d] == 0 || box[d] > 256) HYP_TMAP_BAD("boxDim[%u] = %u is not in 1..256", d, box[d]);
        if (estrides[d] == 0 || estrides[d] > 8) HYP_TMAP_BAD("elementStrides[%u] = %u is not in 1..8", d, estrides[d]);
    }
    for (unsigned d = 0; d + 1 < rank; d++) {
        uint64_t s = strides[d];
        if (s % (interleave == 2 ? 32 : 16) || s >= (1ull << 40))
            HYP_TMAP_BAD("globalStrides[%u] = %llu is not a multiple of %d below 2^40", d, (unsigned long long)s, interleave == 2 ? 32 : 16);
    }
    if (interleave == 0 && (box[0] * es) % 16)
        HYP_TMAP_BAD("boxDim[0] * element size = %u bytes is not a multiple of 16", box[0] * es);
    if (interleave == 0 && swizzle != 0 && box[0] * es > (16u << swizzle))
        HYP_TMAP_BAD("the box's inner dimension (%u bytes) exceeds the %u-byte swizzle span", box[0] * es, 16u << swizzle);
#undef HYP_TMAP_BAD
    hyp_sim_tmap_fields f;
    memset(&f, 0, sizeof f);
    f.magic = HYP_SIM_TMAP_MAGIC;
    f.dtype = (uint8_t)dtype;
    f.rank = (uint8_t)rank;
    f.esize = (uint8_t)es;
    f.swizzle = (uint8_t)swizzle;
    f.interleave = (uint8_t)interleave;
    f.l2promo = (uint8_t)l2promo;
    f.oobfill = (uint8_t)oobfill;
    f.addr = (uint64_t)(uintptr_t)gaddr;
    f.strides[0] = es;
    for (unsigned d = 0; d < rank; d++) {
        f.dims[d] = dims[d];
        if (d > 0) f.strides[d] = strides[d - 1];
        f.box[d] = (uint16_t)box[d];
        f.estrides[d] = (uint8_t)estrides[d];
    }
    memset(map, 0, 128);
    memcpy(map, &f, sizeof f);
    return 0;
}

#endif
