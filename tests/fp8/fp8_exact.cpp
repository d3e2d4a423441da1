// fp8_exact.cpp — runtime/fp8.c against CUDA's own cuda_fp8.h (its host code path), bit for bit.
//
// Built and run by tests/gen/test_fp8_cuda_exact.sh on a machine with the CUDA toolkit headers
// (no GPU needed): runtime/fp8.c is compiled as C and linked into this C++ program.
//
//   fp8_exact check [STRIDE]   compares, for E4M3 and E5M2:
//       fp8 -> fp32   all 256 codes: hyp_fp8_to_float vs float(__nv_fp8_e4m3 / __nv_fp8_e5m2);
//       fp32 -> fp8   hyp_fp8_from_float vs __nv_cvt_float_to_fp8(x, __NV_SATFINITE, fmt) on
//                     every fp32 bit pattern u = k * STRIDE (default 997: ~4.3M patterns, all
//                     signs/exponents, denormals, inf and NaN included), every fp32 denormal
//                     pattern in steps of 97, every fp8 value (+-4 fp32 ulps) and every
//                     midpoint between neighbouring fp8 values (the ties, +-8 ulps), +-64 ulps
//                     around the saturation threshold, and specials (+-0, +-inf, NaNs);
//       arrays        hyp_fp8_cast (scale 1) and hyp_fp8_fake_quantize on the same patterns vs
//                     the reference encode / decode(encode).
//     Prints per-check counts and "N passed, M failed"; exits 1 on any mismatch.
//   fp8_exact exhaustive        fp32 -> fp8 on ALL 2^32 patterns, both formats (~2 min on one
//                     core; run by the shell test only with HYP_FP8_EXHAUSTIVE=1).
//   fp8_exact gen FILE          writes tests/fixtures/fp8_reference.txt: both 256-code tables and
//                     ~2,100 fp32 -> fp8 pairs per format (every fp8 value, every tie +-1 ulp,
//                     the saturation threshold +-8 ulps, denormals, specials, 1,000 strided
//                     patterns), for tests/unit/test_fp8.c to check without CUDA.
#include <cuda_fp8.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "fp8.h"

static uint32_t f2u(float x) {
    uint32_t u;
    std::memcpy(&u, &x, 4);
    return u;
}
static float u2f(uint32_t u) {
    float x;
    std::memcpy(&x, &u, 4);
    return x;
}

static __nv_fp8_interpretation_t interp(hyp_fp8_fmt f) {
    return f == HYP_FP8_E5M2 ? __NV_E5M2 : __NV_E4M3;
}

static uint8_t ref_enc(float x, hyp_fp8_fmt f) {
    return (uint8_t)__nv_cvt_float_to_fp8(x, __NV_SATFINITE, interp(f));
}
static float ref_dec(uint8_t q, hyp_fp8_fmt f) {
    if (f == HYP_FP8_E5M2) {
        __nv_fp8_e5m2 v;
        v.__x = q;
        return float(v);
    }
    __nv_fp8_e4m3 v;
    v.__x = q;
    return float(v);
}

// The interesting fp32 inputs of a format (besides the strided sweep).
static std::vector<uint32_t> special_inputs(hyp_fp8_fmt f, int ulps, int window) {
    std::vector<uint32_t> v;
    const uint32_t sp[] = {0x00000000u, 0x80000000u, 0x7F800000u, 0xFF800000u, 0x7FC00000u,
                           0xFFC00000u, 0x7F800001u, 0xFF800001u, 0x7FFFFFFFu, 0xFFFFFFFFu,
                           0x7F7FFFFFu, 0xFF7FFFFFu, 0x00800000u, 0x80800000u, 0x00000001u,
                           0x80000001u, 0x007FFFFFu, 0x807FFFFFu, 0x3F800000u, 0xBF800000u};
    for (uint32_t u : sp) v.push_back(u);
    // every finite positive fp8 value, and the midpoint to the next one (ties), +-ulps fp32 ulps
    std::vector<float> vals;
    for (int c = 0; c < 128; c++) {
        float x = ref_dec((uint8_t)c, f);
        if (std::isfinite(x)) vals.push_back(x);
    }
    const float fmax = hyp_fp8_max(f);
    vals.push_back(2.0f * fmax); // "next value" above max: the midpoint is the saturation threshold
    for (size_t i = 0; i + 1 < vals.size(); i++) {
        float mid = 0.5f * (vals[i] + vals[i + 1]); // exact: both are short binary fractions
        float pts[2] = {vals[i], mid};
        for (int k = 0; k < 2; k++)
            for (int d = k ? -ulps : -ulps / 2; d <= (k ? ulps : ulps / 2); d++) {
                float p = pts[k];
                int64_t u = (int64_t)f2u(p) + d;
                if (u < 0) continue;
                v.push_back((uint32_t)u);
                v.push_back((uint32_t)u | 0x80000000u);
            }
    }
    // above max: the E4M3 threshold max + half an ulp (464) / E5M2 61440, then beyond
    float thr = f == HYP_FP8_E5M2 ? 61440.0f : 464.0f;
    for (int d = -window; d <= window; d++) {
        v.push_back(f2u(thr) + d);
        v.push_back((f2u(thr) + d) | 0x80000000u);
    }
    return v;
}

static int g_pass, g_fail;
static void report(bool ok, const char *name, long n, long bad, const char *detail) {
    std::printf("%s %-44s %ld values, %ld mismatches %s\n", ok ? "PASS" : "FAIL", name, n, bad,
                detail);
    if (ok)
        g_pass++;
    else
        g_fail++;
}

static bool same_float(float a, float b) {
    return f2u(a) == f2u(b) || (std::isnan(a) && std::isnan(b));
}

static int check(uint32_t stride) {
    for (int fi = 0; fi < 2; fi++) {
        hyp_fp8_fmt f = fi ? HYP_FP8_E5M2 : HYP_FP8_E4M3;
        const char *nm = hyp_fp8_name(f);
        char name[96], detail[160] = "";
        // fp8 -> fp32, all codes, bit-exact (NaN payload and sign included)
        long bad = 0;
        for (int c = 0; c < 256; c++) {
            uint32_t a = f2u(hyp_fp8_to_float((uint8_t)c, f)), b = f2u(ref_dec((uint8_t)c, f));
            if (a != b) {
                if (!bad)
                    std::snprintf(detail, sizeof detail,
                                  "(first: code 0x%02x -> 0x%08x, cuda 0x%08x)", c, a, b);
                bad++;
            }
        }
        std::snprintf(name, sizeof name, "%s fp8->fp32 all 256 codes", nm);
        report(bad == 0, name, 256, bad, detail);

        // fp32 -> fp8
        std::vector<uint32_t> in;
        for (uint64_t u = fi; u <= 0xFFFFFFFFull; u += stride) in.push_back((uint32_t)u);
        for (uint32_t u = 1; u < 0x00800000u; u += 97) {
            in.push_back(u);
            in.push_back(u | 0x80000000u);
        }
        std::vector<uint32_t> sp = special_inputs(f, 8, 64);
        in.insert(in.end(), sp.begin(), sp.end());
        bad = 0;
        detail[0] = 0;
        for (uint32_t u : in) {
            uint8_t a = hyp_fp8_from_float(u2f(u), f), b = ref_enc(u2f(u), f);
            if (a != b) {
                if (!bad)
                    std::snprintf(detail, sizeof detail,
                                  "(first: 0x%08x (%g) -> 0x%02x, cuda 0x%02x)", u, (double)u2f(u),
                                  a, b);
                bad++;
            }
        }
        std::snprintf(name, sizeof name, "%s fp32->fp8 satfinite RNE", nm);
        report(bad == 0, name, (long)in.size(), bad, detail);

        // array paths: hyp_fp8_cast and hyp_fp8_fake_quantize (scale 1)
        std::vector<float> x(in.size()), y(in.size());
        std::vector<uint8_t> q(in.size());
        for (size_t i = 0; i < in.size(); i++) x[i] = y[i] = u2f(in[i]);
        hyp_fp8_stats st;
        hyp_fp8_cast(q.data(), x.data(), (long)x.size(), 1.0f, f, &st);
        hyp_fp8_fake_quantize(y.data(), (long)y.size(), 1.0f, 1.0f, f, NULL);
        long badc = 0, badq = 0;
        for (size_t i = 0; i < in.size(); i++) {
            uint8_t b = ref_enc(x[i], f);
            if (q[i] != b) badc++;
            if (!same_float(y[i], ref_dec(b, f))) badq++;
        }
        std::snprintf(name, sizeof name, "%s hyp_fp8_cast == cuda", nm);
        report(badc == 0, name, (long)in.size(), badc, "");
        std::snprintf(name, sizeof name, "%s fake_quantize == cuda decode(encode)", nm);
        report(badq == 0, name, (long)in.size(), badq, "");
    }
    std::printf("%d passed, %d failed\n", g_pass, g_fail);
    return g_fail ? 1 : 0;
}

static int exhaustive(void) {
    for (int fi = 0; fi < 2; fi++) {
        hyp_fp8_fmt f = fi ? HYP_FP8_E5M2 : HYP_FP8_E4M3;
        long bad = 0;
#pragma omp parallel for reduction(+ : bad) schedule(static)
        for (long long u = 0; u <= 0xFFFFFFFFll; u++) {
            float x = u2f((uint32_t)u);
            if (hyp_fp8_from_float(x, f) != ref_enc(x, f)) bad++;
        }
        char name[96];
        std::snprintf(name, sizeof name, "%s fp32->fp8 all 2^32 patterns", hyp_fp8_name(f));
        report(bad == 0, name, 4294967296L, bad, "");
    }
    std::printf("%d passed, %d failed\n", g_pass, g_fail);
    return g_fail ? 1 : 0;
}

static int gen(const char *path) {
    FILE *fp = std::fopen(path, "w");
    if (!fp) {
        std::perror(path);
        return 1;
    }
    std::fprintf(
        fp,
        "# fp8_reference.txt — FP8 conversions as computed by CUDA's cuda_fp8.h (host path),\n"
        "# generated by tests/fp8/fp8_exact.cpp (gen) via tests/gen/test_fp8_cuda_exact.sh; "
        "checked\n"
        "# without CUDA by tests/unit/test_fp8.c. Do not edit: regenerate.\n"
        "#   dec FMT CODE FLOATBITS   float(__nv_fp8_FMT with storage CODE)        (hex)\n"
        "#   enc FMT FLOATBITS CODE   __nv_cvt_float_to_fp8(float, __NV_SATFINITE, FMT) (hex)\n");
    for (int fi = 0; fi < 2; fi++) {
        hyp_fp8_fmt f = fi ? HYP_FP8_E5M2 : HYP_FP8_E4M3;
        for (int c = 0; c < 256; c++)
            std::fprintf(fp, "dec %s %02x %08x\n", hyp_fp8_name(f), c, f2u(ref_dec((uint8_t)c, f)));
    }
    for (int fi = 0; fi < 2; fi++) {
        hyp_fp8_fmt f = fi ? HYP_FP8_E5M2 : HYP_FP8_E4M3;
        std::vector<uint32_t> in = special_inputs(f, 1, 8);
        for (uint32_t u = 1; u < 0x00800000u; u += 0x00800000u / 40) in.push_back(u);
        for (uint64_t u = 12345 + fi; u <= 0xFFFFFFFFull; u += 4294967291ull / 1000)
            in.push_back((uint32_t)u);
        for (uint32_t u : in)
            std::fprintf(fp, "enc %s %08x %02x\n", hyp_fp8_name(f), u, ref_enc(u2f(u), f));
    }
    std::fclose(fp);
    return 0;
}

int main(int argc, char **argv) {
    if (argc >= 2 && !std::strcmp(argv[1], "check"))
        return check(argc >= 3 ? (uint32_t)std::strtoul(argv[2], NULL, 0) : 997u);
    if (argc == 3 && !std::strcmp(argv[1], "gen")) return gen(argv[2]);
    if (argc == 2 && !std::strcmp(argv[1], "exhaustive")) return exhaustive();
    std::fprintf(stderr,
                 "usage: fp8_exact check [STRIDE] | fp8_exact gen FILE | fp8_exact exhaustive\n");
    return 2;
}
