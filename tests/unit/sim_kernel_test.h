/* sim_kernel_test.h — helpers the simulator kernel tests share (test_kernels_sim.c,
 * test_flex_sim_v2117.c, test_mea_sim_v2118.c): seeded data, tracked allocations, the tolerance
 * check, rendering a template family with `gen render` into g_tmp and opening it in the
 * simulator, launches.
 * Static functions in a header: each test is one translation unit; this is not a library.
 * Never: holds a tolerance of its own (each caller passes its own, with its error source). */
#ifndef HYP_SIM_KERNEL_TEST_H
#define HYP_SIM_KERNEL_TEST_H
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sim.h"

#include "hyp_test.h"

static char g_tmp[320];

static uint64_t g_rng = 0x9E3779B97F4A7C15ull;
static inline float frand(void) { /* uniform in [-1, 1) */
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return (float)((g_rng >> 40) * (1.0 / 8388608.0)) - 1.0f;
}
static inline int irand(int n) { return (int)((frand() + 1.0f) * 0.5f * n) % n; }

/* 64-byte aligned (the runtime's arena alignment), zeroed, counted for cleanup */
static void *g_allocs[4096];
static int g_nallocs;
static inline void *zalloc(size_t bytes) {
    size_t sz = (bytes + 63) & ~(size_t)63;
    void *p = aligned_alloc(64, sz ? sz : 64);
    if (!p) {
        fprintf(stderr, "out of memory\n");
        exit(1);
    }
    memset(p, 0, sz ? sz : 64);
    if (g_nallocs < 4096) g_allocs[g_nallocs++] = p;
    return p;
}
static inline float *fbuf(long n) { return zalloc((size_t)n * sizeof(float)); }
static inline float *frandbuf(long n, float scale) {
    float *p = fbuf(n);
    for (long i = 0; i < n; i++) p[i] = scale * frand();
    return p;
}
static inline float *fcopy(const float *x, long n) {
    float *p = fbuf(n);
    memcpy(p, x, (size_t)n * sizeof(float));
    return p;
}
static inline void free_all(void) {
    for (int i = 0; i < g_nallocs; i++) free(g_allocs[i]);
    g_nallocs = 0;
}

/* fp32 comparison: |got - want| <= atol_rel * max|want| + rtol * |want|; NaN matches NaN. */
static inline void check_f32(const char *name, const float *got, const float *want, long n, double rtol,
                      double atol_rel) {
    double maxw = 0.0;
    for (long i = 0; i < n; i++)
        if (isfinite(want[i]) && fabs(want[i]) > maxw) maxw = fabs(want[i]);
    double atol = atol_rel * maxw;
    long bad = 0, first_bad = -1;
    double worst = 0.0;
    for (long i = 0; i < n; i++) {
        if (isnan(want[i]) && isnan(got[i])) continue;
        double d = fabs((double)got[i] - (double)want[i]);
        if (!(d <= atol + rtol * fabs(want[i]))) {
            if (first_bad < 0) first_bad = i;
            bad++;
        } else if (d > worst) {
            worst = d;
        }
    }
    if (bad)
        check(0, name, "%ld of %ld values beyond tolerance; first [%ld]: got %.9g want %.9g", bad, n,
               first_bad, got[first_bad], want[first_bad]);
    else
        check(1, name, "max |err| %.3g (scale %.3g)", worst, maxw);
}
#define TOL_F32 1e-5, 1e-5


/* ------------------------------------------------------------------------------------------ */
/* Rendering, compiling, launching */

typedef struct {
    hyp_sim_module *m;
    char what[160];
} mod_t;

static inline int open_family(mod_t *md, const char *family, const char *consts, const char *tag) {
    char cu[512], cmd[1536];
    snprintf(md->what, sizeof md->what, "%s[%s]", family, tag);
    snprintf(cu, sizeof cu, "%s/%s_%s.cu", g_tmp, family, tag);
    snprintf(cmd, sizeof cmd, "'%s/generator/gen' render %s %s -o '%s'", HYP_BINARY_DIR, family, consts, cu);
    if (system(cmd) != 0) {
        check(0, md->what, "gen render failed: %s", cmd);
        md->m = NULL;
        return -1;
    }
    hyp_err e = {{0}};
    if (hyp_sim_open(cu, NULL, &md->m, &e)) {
        check(0, md->what, "hyp_sim_open: %s", e.msg);
        md->m = NULL;
        return -1;
    }
    return 0;
}

/* A compile-time constant of a file open_family rendered (derived tile sizes), or -1. */
static inline long rendered_const(const char *family, const char *tag, const char *name) {
    char path[512], line[512], pat[128];
    snprintf(path, sizeof path, "%s/%s_%s.cu", g_tmp, family, tag);
    snprintf(pat, sizeof pat, "static constexpr int %s = %%ld;", name);
    FILE *f = fopen(path, "r");
    long v = -1;
    while (f && v < 0 && fgets(line, sizeof line, f)) {
        const char *p = strstr(line, "static constexpr int ");
        if (p && sscanf(p, pat, &v) != 1) v = -1;
    }
    if (f) fclose(f);
    return v;
}

static inline void close_family(mod_t *md) {
    if (md->m) hyp_sim_unload(md->m);
    md->m = NULL;
}

/* A launch with `smem` bytes of dynamic shared memory. */
static inline void launch_smem(mod_t *md, const char *kernel, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                        size_t smem, void **args) {
    hyp_err e = {{0}};
    if (hyp_sim_launch(md->m, kernel, hyp_dim3_of(gx, gy, gz), hyp_dim3_of(bx, 1, 1), smem, args, NULL, &e)) {
        char name[256];
        snprintf(name, sizeof name, "%s %s launch", md->what, kernel);
        check(0, name, "%s", e.msg);
    }
}

static inline void launch(mod_t *md, const char *kernel, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                   void **args) {
    launch_smem(md, kernel, gx, gy, gz, bx, 0, args);
}

static inline unsigned cdiv(long a, long b) { return (unsigned)((a + b - 1) / b); }

#define NAME(buf, ...) (snprintf(buf, sizeof buf, __VA_ARGS__), buf)

#endif
