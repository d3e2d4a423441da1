/* test_ops_gradcheck.c — correctness of every CPU kernel in runtime/ops_cpu.c.
 *
 * For each op we write an independent reference forward in double precision (straightforward
 * loops, following the textbook/torch formula rather than the kernel's rewrite of it) and check:
 *   1. forward: the float kernel against the double reference, on odd shapes;
 *   2. backward: the float kernel's gradients against central finite differences of the double
 *      reference. With a fixed random R the scalar loss is L = sum(out * R), so dL/dout = R is
 *      what we feed the backward; dL/dx_i ~ (L(x + h e_i) - L(x - h e_i)) / 2h with h = 1e-5 in
 *      double has truncation error ~h^2 and round-off ~1e-16 |L| / h, both ~1e-10, so the
 *      comparison measures only the float kernel's own rounding.
 *   Gradient buffers are pre-filled with random values and the prefill subtracted afterwards:
 *   this checks the contract that backward ACCUMULATES (+=).
 * Shapes are small and odd (N=7, C=13, T=5, hd=6, V=11 with Vp=16, H=9, NH=3/NKV=1 and
 * NH=4/NKV=2, ...) so every coordinate is checked, plus larger ones that cross the kernels'
 * block sizes and their 32K-element threshold for going multi-threaded (a sample of coordinates).
 * Plus behaviour checks: ignored targets, padding columns, stability for huge logits, NULL
 * gradients, the embedding backward bit-identical with 1, 2 and 3 threads, every kernel
 * bit-identical with 1 and 2 threads, AdamW against torch's update formula.
 *
 * Prints one line per check and finally "N passed, M failed"; exits 1 if anything failed.
 */
#include "ops_cpu.h"
#include "optim_kernels_cpu.h"

#include <math.h>
#include <omp.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------------------------------ */
/* Bookkeeping */

#include "hyp_test.h"

/* Deterministic RNG (splitmix64): the test must not depend on the platform's rand(). */
static uint64_t g_rng = 0x9E3779B97F4A7C15ull;
static uint64_t rng_u64(void) {
    uint64_t z = (g_rng += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
static float rng_uniform(float lo, float hi) { /* [lo, hi) */
    return lo + (hi - lo) * (float)((rng_u64() >> 40) * (1.0 / 16777216.0));
}
static int rng_int(int n) { return (int)(rng_u64() % (uint64_t)n); }

static float *falloc(long n) {
    float *p = malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
    if (!p) { fprintf(stderr, "out of memory\n"); exit(2); }
    return p;
}
static double *dalloc(long n) {
    double *p = calloc((size_t)(n > 0 ? n : 1), sizeof(double));
    if (!p) { fprintf(stderr, "out of memory\n"); exit(2); }
    return p;
}
static float *frand(long n, float lo, float hi) {
    float *p = falloc(n);
    for (long i = 0; i < n; i++) p[i] = rng_uniform(lo, hi);
    return p;
}
static float *fcopy(const float *src, long n) {
    float *p = falloc(n);
    memcpy(p, src, (size_t)n * sizeof(float));
    return p;
}
static double *to_double(const float *src, long n) {
    double *p = dalloc(n);
    for (long i = 0; i < n; i++) p[i] = src[i];
    return p;
}
/* analytic gradient = (buffer after backward) - (random prefill before it) */
static double *grad_minus(const float *after, const float *prefill, long n) {
    double *p = dalloc(n);
    for (long i = 0; i < n; i++) p[i] = (double)after[i] - (double)prefill[i];
    return p;
}

/* got (float kernel) vs want (double reference): |got - want| <= atol + rtol |want|. */
typedef struct { double max_abs, max_rel; long bad, worst; } cmp_t;
static cmp_t compare(const float *got, const double *want, long n, double atol, double rtol) {
    cmp_t r = {0, 0, 0, -1};
    for (long i = 0; i < n; i++) {
        double d = fabs((double)got[i] - want[i]);
        double rel = d / (fabs(want[i]) + 1e-30);
        if (!(d <= atol + rtol * fabs(want[i]))) { r.bad++; if (r.worst < 0) r.worst = i; }
        if (d > r.max_abs || isnan(d)) r.max_abs = isnan(d) ? INFINITY : d;
        if (fabs(want[i]) > atol && rel > r.max_rel) r.max_rel = rel;
    }
    return r;
}
static void check_close(const char *name, const float *got, const double *want, long n,
                        double atol, double rtol) {
    cmp_t c = compare(got, want, n, atol, rtol);
    check(c.bad == 0, name, "n=%ld max_abs=%.2e max_rel=%.2e%s", n, c.max_abs, c.max_rel,
          c.bad ? " (mismatches)" : "");
    if (c.bad) printf("     first mismatch at %ld: got %.9g want %.9g\n", c.worst,
                      (double)got[c.worst], want[c.worst]);
}

/* ------------------------------------------------------------------------------------------ */
/* Finite-difference harness. A problem is: double inputs in[k] (copies of the float inputs the
 * kernel saw), a reference forward out = f(in), the fixed weights R (dL/dout), and the analytic
 * gradients from the float backward (NULL = that input is not checked). */

#define MAXIN 6
typedef void (*ref_fwd_fn)(const void *ctx, double *const *in, double *out);
typedef struct {
    int nin;
    const char *in_name[MAXIN];
    long in_len[MAXIN];
    double *in[MAXIN];
    const double *grad[MAXIN]; /* analytic, or NULL */
    long nout;
    const double *R;
    ref_fwd_fn fwd;
    const void *ctx;
} gc_t;

static double gc_loss(const gc_t *p, double *scratch) {
    p->fwd(p->ctx, (double *const *)p->in, scratch);
    double L = 0.0;
    for (long j = 0; j < p->nout; j++) L += scratch[j] * p->R[j];
    return L;
}

/* Gradient tolerance: the float kernels round every intermediate to ~6e-8 relative; sums over
 * up to a few dozen terms, the exp() approximation (1e-7) and the float division in the
 * normalizations put the expected error at ~1e-6 of the gradient's scale (observed: <= 1e-6).
 * We allow |analytic - numeric| <= 1e-4 * scale + 1e-4 * |numeric|, where scale is the largest
 * |numeric| of that input (at least 1e-3, so an input whose gradient is ~0 everywhere still
 * needs analytic ~0): ample headroom, yet a wrong sign, a missing term or a factor off by 0.1%
 * (C vs C-1, eps in the wrong place, a 0.999 on a term) fails. */
#define GC_ATOL 1e-4
#define GC_RTOL 1e-4
#define GC_H 1e-5
/* Coordinates checked per input: all of them when fewer than this, else a strided sample. The
 * small odd shapes check every coordinate; the large shapes (which exercise the multi-threaded
 * paths: the kernels stay on one thread below 32K elements) check a few dozen. */
static long g_max_coords = 400;

static void gradcheck(const char *name, gc_t *p) {
    double *scratch = dalloc(p->nout);
    double worst_abs = 0, worst_rel = 0;
    long nchecked = 0, nbad = 0;
    char where[256] = "";
    for (int k = 0; k < p->nin; k++) {
        if (!p->grad[k]) continue;
        long n = p->in_len[k];
        long stride = n > g_max_coords ? n / g_max_coords : 1;
        long m = (n + stride - 1) / stride;
        double *num = dalloc(m), scale = 1e-3;
        for (long j = 0; j < m; j++) {
            long i = j * stride;
            double x0 = p->in[k][i];
            p->in[k][i] = x0 + GC_H;
            double lp = gc_loss(p, scratch);
            p->in[k][i] = x0 - GC_H;
            double lm = gc_loss(p, scratch);
            p->in[k][i] = x0;
            num[j] = (lp - lm) / (2 * GC_H);
            if (fabs(num[j]) > scale) scale = fabs(num[j]);
        }
        for (long j = 0; j < m; j++) {
            long i = j * stride;
            double ana = p->grad[k][i];
            double d = fabs(num[j] - ana);
            nchecked++;
            if (!(d <= GC_ATOL * scale + GC_RTOL * fabs(num[j]))) {
                if (nbad == 0)
                    snprintf(where, sizeof where, " first bad: d%s[%ld] analytic %.9g numeric %.9g",
                             p->in_name[k], i, ana, num[j]);
                nbad++;
            }
            if (d / scale > worst_abs || isnan(d)) worst_abs = isnan(d) ? INFINITY : d / scale;
            if (fabs(num[j]) > 1e-2 * scale && d / fabs(num[j]) > worst_rel)
                worst_rel = d / fabs(num[j]);
        }
        free(num);
    }
    /* err/scale: the largest |analytic - numeric| divided by that input's gradient scale */
    check(nbad == 0 && nchecked > 0, name, "coords=%ld max_err/scale=%.2e max_rel=%.2e%s",
          nchecked, worst_abs, worst_rel, where);
    free(scratch);
}

static double *make_R(long n) { /* dL/dout weights in [-1, 1) */
    double *R = dalloc(n);
    for (long i = 0; i < n; i++) R[i] = rng_uniform(-1.0f, 1.0f);
    return R;
}
static float *R_to_float(const double *R, long n) {
    float *f = falloc(n);
    for (long i = 0; i < n; i++) f[i] = (float)R[i]; /* exact: R came from floats */
    return f;
}

/* ------------------------------------------------------------------------------------------ */
/* Matmul */

typedef struct { int N, IC, OC, has_bias; } mm_ctx;
static void ref_matmul(const void *vc, double *const *in, double *out) {
    const mm_ctx *c = vc;
    const double *x = in[0], *w = in[1], *b = c->has_bias ? in[2] : NULL;
    for (int n = 0; n < c->N; n++)
        for (int o = 0; o < c->OC; o++) {
            double s = b ? b[o] : 0.0;
            for (int i = 0; i < c->IC; i++) s += x[n * c->IC + i] * w[o * c->IC + i];
            out[n * c->OC + o] = s;
        }
}

static void test_matmul_fwd(const char *name, int N, int IC, int OC, int has_bias) {
    mm_ctx c = {N, IC, OC, has_bias};
    float *x = frand((long)N * IC, -1, 1), *w = frand((long)OC * IC, -1, 1), *b = frand(OC, -1, 1);
    float *out = frand((long)N * OC, -5, 5); /* garbage: the forward overwrites */
    op_matmul_fwd(out, x, w, has_bias ? b : NULL, N, IC, OC);
    double *in[3] = {to_double(x, (long)N * IC), to_double(w, (long)OC * IC), to_double(b, OC)};
    double *want = dalloc((long)N * OC);
    ref_matmul(&c, in, want);
    /* IC-term dot products of O(1) values: float error ~ sqrt(IC) * 6e-8 * |terms| */
    check_close(name, out, want, (long)N * OC, 1e-5 * sqrt(IC), 1e-5);
    for (int k = 0; k < 3; k++) free(in[k]);
    free(x); free(w); free(b); free(out); free(want);
}

static void test_matmul_grad(const char *name, int N, int IC, int OC, int null_dinp) {
    mm_ctx c = {N, IC, OC, 1};
    long nx = (long)N * IC, nw = (long)OC * IC, no = (long)N * OC;
    float *x = frand(nx, -1, 1), *w = frand(nw, -1, 1), *b = frand(OC, -1, 1);
    double *R = make_R(no);
    float *dout = R_to_float(R, no);
    float *dx0 = frand(nx, -1, 1), *dw0 = frand(nw, -1, 1), *db0 = frand(OC, -1, 1);
    float *dx = fcopy(dx0, nx), *dw = fcopy(dw0, nw), *db = fcopy(db0, OC);
    op_matmul_bwd(null_dinp ? NULL : dx, dw, db, dout, x, w, N, IC, OC);
    gc_t p = {.nin = 3, .in_name = {"inp", "w", "bias"}, .in_len = {nx, nw, OC},
              .in = {to_double(x, nx), to_double(w, nw), to_double(b, OC)},
              .grad = {null_dinp ? NULL : grad_minus(dx, dx0, nx), grad_minus(dw, dw0, nw),
                       grad_minus(db, db0, OC)},
              .nout = no, .R = R, .fwd = ref_matmul, .ctx = &c};
    gradcheck(name, &p);
    if (null_dinp) {
        int same = memcmp(dx, dx0, (size_t)nx * sizeof(float)) == 0;
        check(same, "matmul_bwd_null_dinp_untouched", NULL);
    }
    for (int k = 0; k < 3; k++) { free(p.in[k]); free((void *)p.grad[k]); }
    free(x); free(w); free(b); free(R); free(dout); free(dx0); free(dw0); free(db0);
    free(dx); free(dw); free(db);
}

/* ------------------------------------------------------------------------------------------ */
/* LayerNorm / RMSNorm */

typedef struct { int N, C, has_bias; double eps; } norm_ctx;
static void ref_layernorm(const void *vc, double *const *in, double *out) {
    const norm_ctx *c = vc;
    const double *x = in[0], *w = in[1], *b = c->has_bias ? in[2] : NULL;
    for (int n = 0; n < c->N; n++) {
        const double *xr = x + (long)n * c->C;
        double m = 0, v = 0;
        for (int i = 0; i < c->C; i++) m += xr[i];
        m /= c->C;
        for (int i = 0; i < c->C; i++) v += (xr[i] - m) * (xr[i] - m);
        v /= c->C; /* biased variance, like torch.nn.LayerNorm */
        for (int i = 0; i < c->C; i++)
            out[(long)n * c->C + i] = (xr[i] - m) / sqrt(v + c->eps) * w[i] + (b ? b[i] : 0.0);
    }
}
static void ref_rmsnorm(const void *vc, double *const *in, double *out) {
    const norm_ctx *c = vc;
    const double *x = in[0], *w = in[1];
    for (int n = 0; n < c->N; n++) {
        const double *xr = x + (long)n * c->C;
        double ss = 0;
        for (int i = 0; i < c->C; i++) ss += xr[i] * xr[i];
        double r = 1.0 / sqrt(ss / c->C + c->eps);
        for (int i = 0; i < c->C; i++) out[(long)n * c->C + i] = xr[i] * r * w[i];
    }
}

static void test_layernorm(int N, int C, int has_bias) {
    norm_ctx c = {N, C, has_bias, 1e-5};
    long nx = (long)N * C;
    /* an offset mean and unequal scales per row, so mean and rstd both matter */
    float *x = falloc(nx);
    for (int n = 0; n < N; n++) {
        float off = rng_uniform(-2, 2), sc = rng_uniform(0.5f, 2);
        for (int i = 0; i < C; i++) x[(long)n * C + i] = off + sc * rng_uniform(-1, 1);
    }
    float *w = frand(C, 0.5f, 1.5f), *b = frand(C, -0.5f, 0.5f);
    float *out = falloc(nx), *mean = falloc(N), *rstd = falloc(N);
    op_layernorm_fwd(out, mean, rstd, x, w, has_bias ? b : NULL, N, C, 1e-5f);
    double *in[3] = {to_double(x, nx), to_double(w, C), to_double(b, C)};
    double *want = dalloc(nx);
    ref_layernorm(&c, in, want);
    char name[96];
    snprintf(name, sizeof name, "fwd_layernorm_N%d_C%d%s", N, C, has_bias ? "" : "_nobias");
    check_close(name, out, want, nx, 2e-6, 2e-6);

    double *R = make_R(nx);
    float *dout = R_to_float(R, nx);
    float *dx0 = frand(nx, -1, 1), *dw0 = frand(C, -1, 1), *db0 = frand(C, -1, 1);
    float *dx = fcopy(dx0, nx), *dw = fcopy(dw0, C), *db = fcopy(db0, C);
    op_layernorm_bwd(dx, dw, has_bias ? db : NULL, dout, x, w, mean, rstd, N, C);
    gc_t p = {.nin = has_bias ? 3 : 2, .in_name = {"inp", "w", "b"}, .in_len = {nx, C, C},
              .in = {in[0], in[1], in[2]},
              .grad = {grad_minus(dx, dx0, nx), grad_minus(dw, dw0, C),
                       has_bias ? grad_minus(db, db0, C) : NULL},
              .nout = nx, .R = R, .fwd = ref_layernorm, .ctx = &c};
    snprintf(name, sizeof name, "gradcheck_layernorm_N%d_C%d%s", N, C, has_bias ? "" : "_nobias");
    gradcheck(name, &p);
    if (!has_bias) check(memcmp(db, db0, C * sizeof(float)) == 0, "layernorm_bwd_null_db_skipped",
                         NULL);
    for (int k = 0; k < 3; k++) { free(in[k]); free((void *)p.grad[k]); }
    free(x); free(w); free(b); free(out); free(mean); free(rstd); free(want); free(R); free(dout);
    free(dx0); free(dw0); free(db0); free(dx); free(dw); free(db);
}

static void test_rmsnorm(int N, int C) {
    norm_ctx c = {N, C, 0, 1e-5};
    long nx = (long)N * C;
    float *x = frand(nx, -2, 2), *w = frand(C, 0.5f, 1.5f);
    float *out = falloc(nx), *rstd = falloc(N);
    op_rmsnorm_fwd(out, rstd, x, w, N, C, 1e-5f);
    double *in[2] = {to_double(x, nx), to_double(w, C)};
    double *want = dalloc(nx);
    ref_rmsnorm(&c, in, want);
    char name[96];
    snprintf(name, sizeof name, "fwd_rmsnorm_N%d_C%d", N, C);
    check_close(name, out, want, nx, 2e-6, 2e-6);

    double *R = make_R(nx);
    float *dout = R_to_float(R, nx);
    float *dx0 = frand(nx, -1, 1), *dw0 = frand(C, -1, 1);
    float *dx = fcopy(dx0, nx), *dw = fcopy(dw0, C);
    op_rmsnorm_bwd(dx, dw, dout, x, w, rstd, N, C);
    gc_t p = {.nin = 2, .in_name = {"inp", "w"}, .in_len = {nx, C}, .in = {in[0], in[1]},
              .grad = {grad_minus(dx, dx0, nx), grad_minus(dw, dw0, C)},
              .nout = nx, .R = R, .fwd = ref_rmsnorm, .ctx = &c};
    snprintf(name, sizeof name, "gradcheck_rmsnorm_N%d_C%d", N, C);
    gradcheck(name, &p);
    for (int k = 0; k < 2; k++) { free(in[k]); free((void *)p.grad[k]); }
    free(x); free(w); free(out); free(rstd); free(want); free(R); free(dout); free(dx0);
    free(dw0); free(dx); free(dw);
}

/* ------------------------------------------------------------------------------------------ */
/* QK-norm */

typedef struct { int N, NH, NKV, hd; double eps; } qk_ctx;
static void ref_qknorm(const void *vc, double *const *in, double *out) {
    const qk_ctx *c = vc;
    int R = (c->NH + 2 * c->NKV) * c->hd;
    for (int n = 0; n < c->N; n++)
        for (int j = 0; j < c->NH + 2 * c->NKV; j++) {
            const double *x = in[0] + (long)n * R + j * c->hd;
            double *o = out + (long)n * R + j * c->hd;
            if (j >= c->NH + c->NKV) { /* v: identity */
                for (int i = 0; i < c->hd; i++) o[i] = x[i];
                continue;
            }
            const double *w = j < c->NH ? in[1] : in[2];
            double ss = 0;
            for (int i = 0; i < c->hd; i++) ss += x[i] * x[i];
            double r = 1.0 / sqrt(ss / c->hd + c->eps);
            for (int i = 0; i < c->hd; i++) o[i] = x[i] * r * w[i];
        }
}

static void test_qknorm(int N, int NH, int NKV, int hd) {
    qk_ctx c = {N, NH, NKV, hd, 1e-5};
    long n = (long)N * (NH + 2 * NKV) * hd;
    float *x = frand(n, -2, 2), *qw = frand(hd, 0.5f, 1.5f), *kw = frand(hd, 0.5f, 1.5f);
    float *out = falloc(n), *rstd = falloc((long)N * (NH + NKV));
    op_qknorm_fwd(out, rstd, x, qw, kw, N, NH, NKV, hd, 1e-5f);
    double *in[3] = {to_double(x, n), to_double(qw, hd), to_double(kw, hd)};
    double *want = dalloc(n);
    ref_qknorm(&c, in, want);
    char name[96];
    snprintf(name, sizeof name, "fwd_qknorm_NH%d_NKV%d_hd%d", NH, NKV, hd);
    check_close(name, out, want, n, 2e-6, 2e-6);

    double *R = make_R(n);
    float *dout = R_to_float(R, n);
    float *dx0 = frand(n, -1, 1), *dq0 = frand(hd, -1, 1), *dk0 = frand(hd, -1, 1);
    float *dx = fcopy(dx0, n), *dq = fcopy(dq0, hd), *dk = fcopy(dk0, hd);
    op_qknorm_bwd(dx, dq, dk, dout, x, qw, kw, rstd, N, NH, NKV, hd);
    gc_t p = {.nin = 3, .in_name = {"inp", "q_norm", "k_norm"}, .in_len = {n, hd, hd},
              .in = {in[0], in[1], in[2]},
              .grad = {grad_minus(dx, dx0, n), grad_minus(dq, dq0, hd), grad_minus(dk, dk0, hd)},
              .nout = n, .R = R, .fwd = ref_qknorm, .ctx = &c};
    snprintf(name, sizeof name, "gradcheck_qknorm_NH%d_NKV%d_hd%d", NH, NKV, hd);
    gradcheck(name, &p);
    for (int k = 0; k < 3; k++) { free(in[k]); free((void *)p.grad[k]); }
    free(x); free(qw); free(kw); free(out); free(rstd); free(want); free(R); free(dout);
    free(dx0); free(dq0); free(dk0); free(dx); free(dq); free(dk);
}

/* ------------------------------------------------------------------------------------------ */
/* RoPE. The reference is Hugging Face's formula literally:
 *   inv_freq = theta^(-(0, 2, 4, ..)/hd), emb = cat(t*inv_freq, t*inv_freq),
 *   y = x * cos(emb) + rotate_half(x) * sin(emb),  rotate_half(x) = cat(-x[hd/2:], x[:hd/2]) */

typedef struct { int B, T, NH, NKV, hd; double theta; } rope_ctx;
static void ref_rope(const void *vc, double *const *in, double *out) {
    const rope_ctx *c = vc;
    int hd = c->hd, half = hd / 2, R = (c->NH + 2 * c->NKV) * hd;
    for (int b = 0; b < c->B; b++)
        for (int t = 0; t < c->T; t++)
            for (int j = 0; j < c->NH + 2 * c->NKV; j++) {
                const double *x = in[0] + ((long)b * c->T + t) * R + j * hd;
                double *o = out + ((long)b * c->T + t) * R + j * hd;
                for (int i = 0; i < hd; i++) {
                    if (j >= c->NH + c->NKV) { o[i] = x[i]; continue; }
                    double inv_freq = pow(c->theta, -(double)(2 * (i % half)) / hd);
                    double emb = t * inv_freq;
                    double rot = i < half ? -x[i + half] : x[i - half];
                    o[i] = x[i] * cos(emb) + rot * sin(emb);
                }
            }
}

static void test_rope(int B, int T, int NH, int NKV, int hd, float theta) {
    rope_ctx c = {B, T, NH, NKV, hd, theta};
    long n = (long)B * T * (NH + 2 * NKV) * hd;
    float *x = frand(n, -1, 1), *out = falloc(n);
    op_rope_fwd(out, x, B, T, NH, NKV, hd, theta);
    double *in[1] = {to_double(x, n)};
    double *want = dalloc(n);
    ref_rope(&c, in, want);
    char name[96];
    snprintf(name, sizeof name, "fwd_rope_hf_rotate_half_hd%d_theta%g", hd, (double)theta);
    check_close(name, out, want, n, 1e-6, 1e-6);

    double *R = make_R(n);
    float *dout = R_to_float(R, n);
    float *dx0 = frand(n, -1, 1), *dx = fcopy(dx0, n);
    op_rope_bwd(dx, dout, B, T, NH, NKV, hd, theta);
    gc_t p = {.nin = 1, .in_name = {"inp"}, .in_len = {n}, .in = {in[0]},
              .grad = {grad_minus(dx, dx0, n)}, .nout = n, .R = R, .fwd = ref_rope, .ctx = &c};
    snprintf(name, sizeof name, "gradcheck_rope_odd_hd%d_theta%g", hd, (double)theta);
    gradcheck(name, &p);
    free(in[0]); free((void *)p.grad[0]);
    free(x); free(out); free(want); free(R); free(dout); free(dx0); free(dx);
}

/* ------------------------------------------------------------------------------------------ */
/* Attention */

typedef struct { int B, T, NH, NKV, hd; } att_ctx;
/* out [B,T,NH*hd]; when att_out != NULL also the probabilities [B,NH,T,T] */
static void ref_attention_full(const att_ctx *c, const double *qkv, double *out, double *att_out) {
    int hd = c->hd, R = (c->NH + 2 * c->NKV) * hd, G = c->NH / c->NKV;
    double scale = 1.0 / sqrt((double)hd);
    double *p = dalloc(c->T);
    for (int b = 0; b < c->B; b++)
        for (int h = 0; h < c->NH; h++) {
            int g = h / G;
            for (int t = 0; t < c->T; t++) {
                const double *q = qkv + ((long)b * c->T + t) * R + h * hd;
                double mx = -INFINITY, sum = 0;
                for (int t2 = 0; t2 <= t; t2++) {
                    const double *k = qkv + ((long)b * c->T + t2) * R + (c->NH + g) * hd;
                    double s = 0;
                    for (int i = 0; i < hd; i++) s += q[i] * k[i];
                    p[t2] = s * scale;
                    if (p[t2] > mx) mx = p[t2];
                }
                for (int t2 = 0; t2 <= t; t2++) { p[t2] = exp(p[t2] - mx); sum += p[t2]; }
                for (int t2 = 0; t2 < c->T; t2++) {
                    double a = t2 <= t ? p[t2] / sum : 0.0;
                    if (att_out) att_out[(((long)b * c->NH + h) * c->T + t) * c->T + t2] = a;
                    p[t2] = a;
                }
                double *o = out + ((long)b * c->T + t) * c->NH * hd + h * hd;
                for (int i = 0; i < hd; i++) {
                    double s = 0;
                    for (int t2 = 0; t2 <= t; t2++)
                        s += p[t2] * qkv[((long)b * c->T + t2) * R + (c->NH + c->NKV + g) * hd + i];
                    o[i] = s;
                }
            }
        }
    free(p);
}
static void ref_attention(const void *vc, double *const *in, double *out) {
    ref_attention_full(vc, in[0], out, NULL);
}

static void test_attention(int B, int T, int NH, int NKV, int hd) {
    att_ctx c = {B, T, NH, NKV, hd};
    long nqkv = (long)B * T * (NH + 2 * NKV) * hd, nout = (long)B * T * NH * hd;
    long natt = (long)B * NH * T * T;
    /* q, k of magnitude ~2 so the softmax is far from uniform */
    float *qkv = frand(nqkv, -2, 2), *out = falloc(nout), *att = falloc(natt);
    for (long i = 0; i < natt; i++) att[i] = NAN; /* the forward must write every entry */
    op_attention_fwd(out, att, qkv, B, T, NH, NKV, hd);
    double *in[1] = {to_double(qkv, nqkv)};
    double *want = dalloc(nout), *want_att = dalloc(natt);
    ref_attention_full(&c, in[0], want, want_att);
    char name[96];
    snprintf(name, sizeof name, "fwd_attention_B%d_T%d_NH%d_NKV%d_hd%d", B, T, NH, NKV, hd);
    check_close(name, out, want, nout, 2e-6, 2e-6);
    snprintf(name, sizeof name, "fwd_attention_probs_causal_T%d_NH%d_NKV%d_hd%d", T, NH, NKV, hd);
    /* checks the probabilities and that entries above the diagonal are exactly 0 */
    cmp_t ca = compare(att, want_att, natt, 1e-6, 1e-6);
    long upper_nonzero = 0;
    for (int bh = 0; bh < B * NH; bh++)
        for (int t = 0; t < T; t++)
            for (int t2 = t + 1; t2 < T; t2++)
                if (att[((long)bh * T + t) * T + t2] != 0.0f) upper_nonzero++;
    check(ca.bad == 0 && upper_nonzero == 0, name, "max_abs=%.2e upper_nonzero=%ld", ca.max_abs,
          upper_nonzero);

    double *R = make_R(nout);
    float *dout = R_to_float(R, nout);
    float *d0 = frand(nqkv, -1, 1), *dqkv = fcopy(d0, nqkv), *datt = falloc(natt);
    for (long i = 0; i < natt; i++) datt[i] = NAN; /* scratch: must not be read before written */
    op_attention_bwd(dqkv, datt, dout, qkv, att, B, T, NH, NKV, hd);
    gc_t p = {.nin = 1, .in_name = {"qkv"}, .in_len = {nqkv}, .in = {in[0]},
              .grad = {grad_minus(dqkv, d0, nqkv)}, .nout = nout, .R = R, .fwd = ref_attention,
              .ctx = &c};
    snprintf(name, sizeof name, "gradcheck_attention_T%d_NH%d_NKV%d_hd%d", T, NH, NKV, hd);
    gradcheck(name, &p);
    free(in[0]); free((void *)p.grad[0]);
    free(qkv); free(out); free(att); free(want); free(want_att); free(R); free(dout); free(d0);
    free(dqkv); free(datt);
}

/* ------------------------------------------------------------------------------------------ */
/* GELU (tanh form, as GPT-2 and torch gelu(approximate='tanh')), SwiGLU */

typedef struct { long n; } ew_ctx;
static void ref_gelu(const void *vc, double *const *in, double *out) {
    const ew_ctx *c = vc;
    for (long i = 0; i < c->n; i++) {
        double x = in[0][i];
        out[i] = 0.5 * x * (1.0 + tanh(sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
    }
}

static void test_gelu(long n) {
    ew_ctx c = {n};
    float *x = frand(n, -5, 5), *out = falloc(n);
    x[0] = 0.0f; x[1] = -12.0f; x[2] = 12.0f; /* 0 and the saturated tails */
    op_gelu_fwd(out, x, n);
    double *in[1] = {to_double(x, n)};
    double *want = dalloc(n);
    ref_gelu(&c, in, want);
    char name[96];
    snprintf(name, sizeof name, "fwd_gelu_tanh_vs_reference_n%ld", n);
    check_close(name, out, want, n, 1e-6, 1e-6);
    double *R = make_R(n);
    float *dout = R_to_float(R, n);
    float *dx0 = frand(n, -1, 1), *dx = fcopy(dx0, n);
    op_gelu_bwd(dx, x, dout, n);
    gc_t p = {.nin = 1, .in_name = {"inp"}, .in_len = {n}, .in = {in[0]},
              .grad = {grad_minus(dx, dx0, n)}, .nout = n, .R = R, .fwd = ref_gelu, .ctx = &c};
    snprintf(name, sizeof name, "gradcheck_gelu_tanh_n%ld", n);
    gradcheck(name, &p);
    free(in[0]); free((void *)p.grad[0]);
    free(x); free(out); free(want); free(R); free(dout); free(dx0); free(dx);
}

typedef struct { int N, H; } sw_ctx;
static void ref_swiglu(const void *vc, double *const *in, double *out) {
    const sw_ctx *c = vc;
    for (int n = 0; n < c->N; n++)
        for (int i = 0; i < c->H; i++) {
            double g = in[0][(long)n * 2 * c->H + i], u = in[0][(long)n * 2 * c->H + c->H + i];
            out[(long)n * c->H + i] = g / (1.0 + exp(-g)) * u;
        }
}

static void test_swiglu(int N, int H) {
    sw_ctx c = {N, H};
    long ni = (long)N * 2 * H, no = (long)N * H;
    float *x = frand(ni, -4, 4), *out = falloc(no);
    op_swiglu_fwd(out, x, N, H);
    double *in[1] = {to_double(x, ni)};
    double *want = dalloc(no);
    ref_swiglu(&c, in, want);
    char name[96];
    snprintf(name, sizeof name, "fwd_swiglu_N%d_H%d", N, H);
    check_close(name, out, want, no, 1e-6, 1e-6);
    double *R = make_R(no);
    float *dout = R_to_float(R, no);
    float *dx0 = frand(ni, -1, 1), *dx = fcopy(dx0, ni);
    op_swiglu_bwd(dx, dout, x, N, H);
    gc_t p = {.nin = 1, .in_name = {"inp"}, .in_len = {ni}, .in = {in[0]},
              .grad = {grad_minus(dx, dx0, ni)}, .nout = no, .R = R, .fwd = ref_swiglu, .ctx = &c};
    snprintf(name, sizeof name, "gradcheck_swiglu_N%d_H%d", N, H);
    gradcheck(name, &p);
    free(in[0]); free((void *)p.grad[0]);
    free(x); free(out); free(want); free(R); free(dout); free(dx0); free(dx);
}

/* ------------------------------------------------------------------------------------------ */
/* Embedding */

typedef struct { int B, T, C, with_wpe; const int32_t *tok; } emb_ctx;
static void ref_embedding(const void *vc, double *const *in, double *out) {
    const emb_ctx *c = vc;
    for (int b = 0; b < c->B; b++)
        for (int t = 0; t < c->T; t++) {
            long n = (long)b * c->T + t;
            for (int i = 0; i < c->C; i++)
                out[n * c->C + i] = in[0][(long)c->tok[n] * c->C + i] +
                                    (c->with_wpe ? in[1][(long)t * c->C + i] : 0.0);
        }
}

static void test_embedding(int B, int T, int C, int V, int with_wpe) {
    long N = (long)B * T;
    int32_t *tok = malloc(N * sizeof(int32_t));
    for (long n = 0; n < N; n++) tok[n] = rng_int(V); /* N > V: tokens repeat */
    tok[0] = tok[N - 1];
    emb_ctx c = {B, T, C, with_wpe, tok};
    float *wte = frand((long)V * C, -1, 1), *wpe = frand((long)T * C, -1, 1);
    float *out = falloc(N * C);
    op_embedding_fwd(out, tok, wte, with_wpe ? wpe : NULL, B, T, C);
    double *in[2] = {to_double(wte, (long)V * C), to_double(wpe, (long)T * C)};
    double *want = dalloc(N * C);
    ref_embedding(&c, in, want);
    char name[96];
    snprintf(name, sizeof name, "fwd_embedding_V%d_C%d%s", V, C, with_wpe ? "" : "_no_wpe");
    check_close(name, out, want, N * C, 0, 0); /* a copy (+ one add): exact */

    double *R = make_R(N * C);
    float *dout = R_to_float(R, N * C);
    float *dte0 = frand((long)V * C, -1, 1), *dpe0 = frand((long)T * C, -1, 1);
    float *dte = fcopy(dte0, (long)V * C), *dpe = fcopy(dpe0, (long)T * C);
    op_embedding_bwd(dte, with_wpe ? dpe : NULL, dout, tok, B, T, C, V);
    gc_t p = {.nin = 2, .in_name = {"wte", "wpe"}, .in_len = {(long)V * C, (long)T * C},
              .in = {in[0], in[1]},
              .grad = {grad_minus(dte, dte0, (long)V * C),
                       with_wpe ? grad_minus(dpe, dpe0, (long)T * C) : NULL},
              .nout = N * C, .R = R, .fwd = ref_embedding, .ctx = &c};
    snprintf(name, sizeof name, "gradcheck_embedding_repeated_tokens_V%d_C%d%s", V, C,
             with_wpe ? "" : "_no_wpe");
    gradcheck(name, &p);
    for (int k = 0; k < 2; k++) { free(in[k]); free((void *)p.grad[k]); }
    free(tok); free(wte); free(wpe); free(out); free(want); free(R); free(dout); free(dte0);
    free(dpe0); free(dte); free(dpe);
}

static void test_embedding_bwd_deterministic(void) {
    /* many repeats of few tokens: the order of the float additions into each dwte row matters */
    int B = 4, T = 64, C = 300, V = 11;
    long N = (long)B * T;
    int32_t *tok = malloc(N * sizeof(int32_t));
    for (long n = 0; n < N; n++) tok[n] = rng_int(V);
    float *dout = frand(N * C, -1, 1);
    float *base = frand((long)V * C, -1, 1), *basep = frand((long)T * C, -1, 1);
    int threads[3] = {1, 2, 3};
    float *res[3], *resp[3];
    int saved = omp_get_max_threads();
    for (int k = 0; k < 3; k++) {
        omp_set_num_threads(threads[k]);
        res[k] = fcopy(base, (long)V * C);
        resp[k] = fcopy(basep, (long)T * C);
        op_embedding_bwd(res[k], resp[k], dout, tok, B, T, C, V);
    }
    omp_set_num_threads(saved);
    int same = 1;
    for (int k = 1; k < 3; k++) {
        same &= memcmp(res[0], res[k], (size_t)V * C * sizeof(float)) == 0;
        same &= memcmp(resp[0], resp[k], (size_t)T * C * sizeof(float)) == 0;
    }
    check(same, "embedding_bwd_bitwise_same_1_2_3_threads", "N=%ld C=%d V=%d", N, C, V);
    for (int k = 0; k < 3; k++) { free(res[k]); free(resp[k]); }
    free(tok); free(dout); free(base); free(basep);
}

/* ------------------------------------------------------------------------------------------ */
/* Cross-entropy */

typedef struct { int N, V, Vp; const int32_t *tg; double dloss; } ce_ctx;
/* the two-pass textbook version: explicit softmax probabilities, loss = -log p[target] */
static void ref_ce_losses(const ce_ctx *c, const double *z, double *losses, double *dlogits) {
    double *p = dalloc(c->V);
    for (int n = 0; n < c->N; n++) {
        const double *zr = z + (long)n * c->V; /* the reference stores only the V valid columns */
        double mx = -INFINITY, sum = 0;
        for (int i = 0; i < c->V; i++) if (zr[i] > mx) mx = zr[i];
        for (int i = 0; i < c->V; i++) { p[i] = exp(zr[i] - mx); sum += p[i]; }
        for (int i = 0; i < c->V; i++) p[i] /= sum;
        int tg = c->tg[n];
        losses[n] = tg < 0 ? 0.0 : -log(p[tg]);
        if (dlogits)
            for (int i = 0; i < c->V; i++)
                dlogits[(long)n * c->V + i] = tg < 0 ? 0.0 : c->dloss * (p[i] - (i == tg));
    }
    free(p);
}
static void ref_ce_loss_sum(const void *vc, double *const *in, double *out) {
    /* out[0] = dloss * sum_n loss_n (with R = {1}: the scalar the fused kernel differentiates) */
    const ce_ctx *c = vc;
    double *losses = dalloc(c->N);
    ref_ce_losses(c, in[0], losses, NULL);
    out[0] = 0;
    for (int n = 0; n < c->N; n++) out[0] += c->dloss * losses[n];
    free(losses);
}

static void test_crossentropy(int N, int V, int Vp) {
    int32_t *tg = malloc(N * sizeof(int32_t));
    for (int n = 0; n < N; n++) tg[n] = rng_int(V);
    tg[2] = -1; /* ignored */
    tg[N - 1] = V - 1; /* the last valid column */
    int nvalid = 0;
    for (int n = 0; n < N; n++) nvalid += tg[n] >= 0;
    ce_ctx c = {N, V, Vp, tg, 1.0 / nvalid};
    long nl = (long)N * Vp;
    float *logits = frand(nl, -3, 3);
    for (int n = 0; n < N; n++)
        for (int i = V; i < Vp; i++) logits[(long)n * Vp + i] = NAN; /* padding: must not be read */
    double *z = dalloc((long)N * V);
    for (int n = 0; n < N; n++)
        for (int i = 0; i < V; i++) z[(long)n * V + i] = logits[(long)n * Vp + i];
    double *want_l = dalloc(N), *want_d = dalloc((long)N * V);
    ref_ce_losses(&c, z, want_l, want_d);

    float *losses = falloc(N);
    op_crossentropy_fwd(losses, logits, tg, N, V, Vp);
    char name[96];
    snprintf(name, sizeof name, "fwd_crossentropy_vs_explicit_softmax_V%d_Vp%d", V, Vp);
    check_close(name, losses, want_l, N, 2e-6, 2e-6);

    float *dl = fcopy(logits, nl), *losses2 = falloc(N);
    op_crossentropy_fused(losses2, dl, tg, (float)c.dloss, N, V, Vp);
    snprintf(name, sizeof name, "fused_crossentropy_losses_vs_explicit_softmax_V%d", V);
    check_close(name, losses2, want_l, N, 2e-6, 2e-6);
    float *dvalid = falloc((long)N * V);
    for (int n = 0; n < N; n++)
        for (int i = 0; i < V; i++) dvalid[(long)n * V + i] = dl[(long)n * Vp + i];
    snprintf(name, sizeof name, "fused_crossentropy_dlogits_vs_softmax_minus_onehot_V%d", V);
    check_close(name, dvalid, want_d, (long)N * V, 1e-7, 1e-5);
    long pad_nonzero = 0;
    for (int n = 0; n < N; n++)
        for (int i = V; i < Vp; i++) pad_nonzero += dl[(long)n * Vp + i] != 0.0f;
    snprintf(name, sizeof name, "fused_crossentropy_padding_columns_zeroed_V%d_Vp%d", V, Vp);
    check(pad_nonzero == 0, name, NULL);
    long ign_nonzero = 0;
    for (int i = 0; i < Vp; i++) ign_nonzero += dl[2L * Vp + i] != 0.0f;
    check(losses[2] == 0.0f && losses2[2] == 0.0f && ign_nonzero == 0,
          "crossentropy_ignored_target_zero_loss_zero_grad", "V=%d", V);

    /* gradcheck of the fused kernel: d(dloss * sum losses)/dz */
    double R1 = 1.0;
    gc_t p = {.nin = 1, .in_name = {"logits"}, .in_len = {(long)N * V}, .in = {z},
              .grad = {NULL}, .nout = 1, .R = &R1, .fwd = ref_ce_loss_sum, .ctx = &c};
    double *ana = to_double(dvalid, (long)N * V);
    p.grad[0] = ana;
    snprintf(name, sizeof name, "gradcheck_crossentropy_fused_V%d_Vp%d", V, Vp);
    gradcheck(name, &p);
    free(ana);

    /* stability: logits ~ +-1000 overflow exp() unless the max is subtracted */
    float *big = falloc(nl);
    double *zb = dalloc((long)N * V);
    for (int n = 0; n < N; n++)
        for (int i = 0; i < Vp; i++) {
            float v = i < V ? 1000.0f + 10.0f * rng_uniform(-1, 1) : 0.0f;
            if (n == 1 && i < V) v = -1000.0f + 10.0f * rng_uniform(-1, 1);
            big[(long)n * Vp + i] = v;
            if (i < V) zb[(long)n * V + i] = v;
        }
    ref_ce_losses(&c, zb, want_l, want_d);
    op_crossentropy_fwd(losses, big, tg, N, V, Vp);
    op_crossentropy_fused(losses2, big, tg, (float)c.dloss, N, V, Vp);
    int finite = 1;
    for (long i = 0; i < nl; i++) finite &= isfinite(big[i]) != 0;
    for (int n = 0; n < N; n++) finite &= isfinite(losses[n]) && isfinite(losses2[n]);
    /* |logit| ~ 1000 has float spacing 6e-5: the losses are exact to ~1e-4 */
    cmp_t cb = compare(losses, want_l, N, 3e-4, 1e-5), cb2 = compare(losses2, want_l, N, 3e-4, 1e-5);
    snprintf(name, sizeof name, "crossentropy_stable_for_logits_1e3_V%d", V);
    check(finite && cb.bad == 0 && cb2.bad == 0, name, "max_abs=%.2e", cb.max_abs > cb2.max_abs ? cb.max_abs : cb2.max_abs);

    /* a target >= V is a data error: NaN loss, zero gradient */
    int32_t bad_tg[2] = {V, 0};
    float bl[2], *bz = falloc(2L * Vp);
    for (int i = 0; i < 2 * Vp; i++) bz[i] = 0.5f;
    op_crossentropy_fused(bl, bz, bad_tg, 1.0f, 2, V, Vp);
    int zero_row = 1;
    for (int i = 0; i < Vp; i++) zero_row &= bz[i] == 0.0f;
    snprintf(name, sizeof name, "crossentropy_target_out_of_range_is_nan_V%d", V);
    check(isnan(bl[0]) && isfinite(bl[1]) && zero_row, name, NULL);

    free(tg); free(logits); free(z); free(want_l); free(want_d); free(losses); free(dl);
    free(losses2); free(dvalid); free(big); free(zb); free(bz);
}

/* ------------------------------------------------------------------------------------------ */
/* Elementwise, reductions, optimizer */

static void test_elementwise(void) {
    long n = 100003; /* over the single-thread threshold, and odd */
    float *a = frand(n, -1, 1), *b = frand(n, -1, 1), *o = falloc(n);
    op_add_fwd(o, a, b, n);
    long bad = 0;
    for (long i = 0; i < n; i++) bad += o[i] != a[i] + b[i];
    check(bad == 0, "add_fwd_exact", "n=%ld", n);
    float *d = fcopy(a, n);
    op_accumulate(d, b, n);
    bad = 0;
    for (long i = 0; i < n; i++) bad += d[i] != a[i] + b[i];
    check(bad == 0, "accumulate_exact", "n=%ld", n);
    op_scale(d, 0.5f, n);
    bad = 0;
    for (long i = 0; i < n; i++) bad += d[i] != (a[i] + b[i]) * 0.5f;
    check(bad == 0, "scale_exact", "n=%ld", n);
    op_zero(d, n);
    bad = 0;
    for (long i = 0; i < n; i++) bad += d[i] != 0.0f;
    check(bad == 0, "zero_exact", "n=%ld", n);

    double ref = 0;
    for (long i = 0; i < n; i++) ref += (double)a[i] * a[i];
    int saved = omp_get_max_threads();
    omp_set_num_threads(1);
    double s1 = op_sumsq(a, n);
    omp_set_num_threads(2);
    double s2 = op_sumsq(a, n);
    omp_set_num_threads(saved);
    check(fabs(s1 - ref) <= 1e-12 * ref && s1 == s2, "sumsq_double_and_thread_independent",
          "rel_err=%.2e", fabs(s1 - ref) / ref);
    double r7 = 0;
    for (int i = 0; i < 7; i++) r7 += (double)a[i] * a[i];
    check(fabs(op_sumsq(a, 7) - r7) <= 1e-15 * r7 && op_sumsq(a, 0) == 0.0,
          "sumsq_short_and_empty_vectors", NULL);
    free(a); free(b); free(o); free(d);
}

static void test_adamw(void) {
    /* three steps against torch.optim.AdamW's update written in double */
    long n = 1001;
    float *p = frand(n, -1, 1), *m = falloc(n), *v = falloc(n);
    double *pr = to_double(p, n), *mr = dalloc(n), *vr = dalloc(n);
    memset(m, 0, n * sizeof(float));
    memset(v, 0, n * sizeof(float));
    double lr = 1e-3, b1 = 0.9, b2 = 0.95, eps = 1e-8, wd = 0.1, gs = 0.7;
    for (int t = 1; t <= 3; t++) {
        float *g = frand(n, -1, 1);
        op_adamw(p, g, m, v, n, (float)lr, (float)b1, (float)b2, (float)eps, (float)wd, t,
                 (float)gs);
        for (long i = 0; i < n; i++) {
            double gi = (double)g[i] * (double)(float)gs;
            mr[i] = (double)(float)b1 * mr[i] + (1 - (double)(float)b1) * gi;
            vr[i] = (double)(float)b2 * vr[i] + (1 - (double)(float)b2) * gi * gi;
            double mh = mr[i] / (1 - pow((float)b1, t)), vh = vr[i] / (1 - pow((float)b2, t));
            pr[i] = pr[i] * (1 - (double)(float)lr * (double)(float)wd) -
                    (double)(float)lr * mh / (sqrt(vh) + (double)(float)eps);
        }
        free(g);
    }
    /* each step moves p by ~lr = 1e-3; float rounding of p itself is ~6e-8 */
    check_close("adamw_3_steps_vs_torch_formula", p, pr, n, 2e-7, 1e-6);
    check_close("adamw_first_moment", m, mr, n, 1e-7, 1e-5);
    free(p); free(m); free(v); free(pr); free(mr); free(vr);
}

/* ------------------------------------------------------------------------------------------ */
/* Thread-count invariance. Every kernel here computes each output with a fixed summation order
 * whatever the number of threads (row-parallel ops, column-block reductions, fixed chunks in
 * sumsq), so a run is bitwise reproducible on machines of any size. Shapes are above the 32K
 * elements where the kernels go parallel. The same buffers are reused for both runs, so memory
 * alignment (which may change how a vectorized reduction is split) is the same too. */

typedef struct {
    const char *name;
    float *buf;
    long n;
} seg_t;

enum { INV_N = 64, INV_C = 770, INV_OC = 600, INV_B = 2, INV_T = 160, INV_TA = 160, INV_NH = 4,
       INV_NKV = 2, INV_HD = 16, INV_H = 600, INV_V = 5000, INV_VP = 5056, INV_NCE = 8,
       INV_NEL = 50001 };
#define INV_R ((INV_NH + 2 * INV_NKV) * INV_HD)

typedef struct {
    /* inputs */
    float *x, *w, *b, *dout, *qkv_rope, *qkv_att, *dout_att, *sw_in, *sw_dout, *logits, *el,
        *el2, *adam_g, *wte, *wpe;
    int32_t *tg, *tok;
    /* outputs */
    seg_t seg[32];
    int nseg;
} inv_t;

static float *inv_out(inv_t *t, const char *name, long n) {
    float *p = falloc(n);
    t->seg[t->nseg++] = (seg_t){name, p, n};
    return p;
}

static void inv_run(inv_t *t) {
    /* outputs in the order they were registered by inv_setup */
    float **o = malloc(sizeof(float *) * t->nseg);
    for (int i = 0; i < t->nseg; i++) {
        o[i] = t->seg[i].buf;
        memset(o[i], 0, t->seg[i].n * sizeof(float)); /* accumulated gradients start at 0 */
    }
    long nx = (long)INV_N * INV_C;
    op_layernorm_fwd(o[0], o[1], o[2], t->x, t->w, t->b, INV_N, INV_C, 1e-5f);
    op_layernorm_bwd(o[3], o[4], o[5], t->dout, t->x, t->w, o[1], o[2], INV_N, INV_C);
    op_rmsnorm_fwd(o[6], o[7], t->x, t->w, INV_N, INV_C, 1e-5f);
    op_rmsnorm_bwd(o[8], o[9], t->dout, t->x, t->w, o[7], INV_N, INV_C);
    op_matmul_bwd(NULL, NULL, o[10], t->dout, t->x, t->w, nx / INV_OC, 1, INV_OC);
    long nq = (long)INV_B * INV_T;
    op_qknorm_fwd(o[11], o[12], t->qkv_rope, t->w, t->b, (int)nq, INV_NH, INV_NKV, INV_HD, 1e-5f);
    op_qknorm_bwd(o[13], o[14], o[15], t->qkv_rope, t->qkv_rope, t->w, t->b, o[12], (int)nq,
                  INV_NH, INV_NKV, INV_HD);
    op_rope_fwd(o[16], t->qkv_rope, INV_B, INV_T, INV_NH, INV_NKV, INV_HD, 10000.0f);
    op_rope_bwd(o[17], t->qkv_rope, INV_B, INV_T, INV_NH, INV_NKV, INV_HD, 10000.0f);
    op_attention_fwd(o[18], o[19], t->qkv_att, INV_B, INV_TA, INV_NH, INV_NKV, INV_HD);
    op_attention_bwd(o[20], o[21], t->dout_att, t->qkv_att, o[19], INV_B, INV_TA, INV_NH,
                     INV_NKV, INV_HD);
    op_gelu_fwd(o[22], t->el, INV_NEL);
    op_gelu_bwd(o[23], t->el, t->el2, INV_NEL);
    op_swiglu_fwd(o[24], t->sw_in, INV_N, INV_H);
    op_swiglu_bwd(o[25], t->sw_dout, t->sw_in, INV_N, INV_H);
    memcpy(o[27], t->logits, (size_t)INV_NCE * INV_VP * sizeof(float));
    op_crossentropy_fused(o[26], o[27], t->tg, 0.125f, INV_NCE, INV_V, INV_VP);
    double ss = op_sumsq(t->el, INV_NEL);
    memcpy(o[28], &ss, sizeof ss); /* 8 bytes = 2 floats, compared bitwise */
    memcpy(o[29], t->el, INV_NEL * sizeof(float)); /* p */
    op_adamw(o[29], t->el2, o[30], o[31], INV_NEL, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 1, 0.5f);
    free(o);
}

static void test_thread_invariance(void) {
    inv_t t = {0};
    long nx = (long)INV_N * INV_C, nq = (long)INV_B * INV_T;
    t.x = frand(nx, -2, 2); t.w = frand(INV_C, 0.5f, 1.5f); t.b = frand(INV_C, -1, 1);
    t.dout = frand(nx, -1, 1);
    t.qkv_rope = frand(nq * INV_R, -2, 2);
    t.qkv_att = frand((long)INV_B * INV_TA * INV_R, -2, 2);
    t.dout_att = frand((long)INV_B * INV_TA * INV_NH * INV_HD, -1, 1);
    t.sw_in = frand((long)INV_N * 2 * INV_H, -4, 4);
    t.sw_dout = frand((long)INV_N * INV_H, -1, 1);
    t.logits = frand((long)INV_NCE * INV_VP, -5, 5);
    t.el = frand(INV_NEL, -5, 5); t.el2 = frand(INV_NEL, -1, 1);
    t.tg = malloc(INV_NCE * sizeof(int32_t));
    for (int n = 0; n < INV_NCE; n++) t.tg[n] = rng_int(INV_V);
    t.tg[3] = -1;
    inv_out(&t, "layernorm_fwd_out", nx); inv_out(&t, "layernorm_fwd_mean", INV_N);
    inv_out(&t, "layernorm_fwd_rstd", INV_N); inv_out(&t, "layernorm_bwd_dinp", nx);
    inv_out(&t, "layernorm_bwd_dw", INV_C); inv_out(&t, "layernorm_bwd_db", INV_C);
    inv_out(&t, "rmsnorm_fwd_out", nx); inv_out(&t, "rmsnorm_fwd_rstd", INV_N);
    inv_out(&t, "rmsnorm_bwd_dinp", nx); inv_out(&t, "rmsnorm_bwd_dw", INV_C);
    inv_out(&t, "matmul_bwd_dbias", INV_OC);
    inv_out(&t, "qknorm_fwd_out", nq * INV_R);
    inv_out(&t, "qknorm_fwd_rstd", nq * (INV_NH + INV_NKV));
    inv_out(&t, "qknorm_bwd_dinp", nq * INV_R); inv_out(&t, "qknorm_bwd_dqw", INV_HD);
    inv_out(&t, "qknorm_bwd_dkw", INV_HD);
    inv_out(&t, "rope_fwd", nq * INV_R); inv_out(&t, "rope_bwd", nq * INV_R);
    inv_out(&t, "attention_fwd_out", (long)INV_B * INV_TA * INV_NH * INV_HD);
    inv_out(&t, "attention_fwd_att", (long)INV_B * INV_NH * INV_TA * INV_TA);
    inv_out(&t, "attention_bwd_dqkv", (long)INV_B * INV_TA * INV_R);
    inv_out(&t, "attention_bwd_datt", (long)INV_B * INV_NH * INV_TA * INV_TA);
    inv_out(&t, "gelu_fwd", INV_NEL); inv_out(&t, "gelu_bwd", INV_NEL);
    inv_out(&t, "swiglu_fwd", (long)INV_N * INV_H); inv_out(&t, "swiglu_bwd", (long)INV_N * 2 * INV_H);
    inv_out(&t, "crossentropy_fused_losses", INV_NCE);
    inv_out(&t, "crossentropy_fused_dlogits", (long)INV_NCE * INV_VP);
    inv_out(&t, "sumsq", 2);
    inv_out(&t, "adamw_p", INV_NEL); inv_out(&t, "adamw_m", INV_NEL); inv_out(&t, "adamw_v", INV_NEL);

    int saved = omp_get_max_threads();
    omp_set_num_threads(1);
    inv_run(&t);
    float *snap[32];
    for (int i = 0; i < t.nseg; i++) snap[i] = fcopy(t.seg[i].buf, t.seg[i].n);
    omp_set_num_threads(2);
    inv_run(&t);
    omp_set_num_threads(saved);
    int differing = 0;
    char which[256] = "";
    for (int i = 0; i < t.nseg; i++) {
        /* datt is scratch whose upper triangle is never written: compare only the lower part */
        int is_datt = strcmp(t.seg[i].name, "attention_bwd_datt") == 0;
        long bad = 0;
        for (long j = 0; j < t.seg[i].n; j++) {
            if (is_datt && (j % INV_TA) > (j / INV_TA) % INV_TA) continue;
            bad += memcmp(&snap[i][j], &t.seg[i].buf[j], sizeof(float)) != 0;
        }
        if (bad) {
            differing++;
            size_t len = strlen(which);
            snprintf(which + len, sizeof which - len, " %s", t.seg[i].name);
        }
        free(snap[i]);
        free(t.seg[i].buf);
    }
    check(differing == 0, "all_ops_bitwise_same_1_vs_2_threads", "%d outputs compared%s%s",
          t.nseg, differing ? ", differ:" : "", which);
    free(t.x); free(t.w); free(t.b); free(t.dout); free(t.qkv_rope); free(t.qkv_att);
    free(t.dout_att); free(t.sw_in); free(t.sw_dout); free(t.logits); free(t.el); free(t.el2);
    free(t.tg);
}

static void test_op_cpu_check(void) {
    hyp_err e = {{0}};
    check(op_cpu_check(&e) == HYP_OK, "op_cpu_check_ok_after_valid_matmuls", NULL);
}

/* ------------------------------------------------------------------------------------------ */

int main(void) {
    printf("test_ops_gradcheck: %d OpenMP threads\n", omp_get_max_threads());

    test_matmul_fwd("fwd_matmul_vs_triple_loop_7x13x9", 7, 13, 9, 1);
    test_matmul_fwd("fwd_matmul_vs_triple_loop_67x129x71_nobias", 67, 129, 71, 0);
    test_matmul_fwd("fwd_matmul_vs_triple_loop_1x5x3", 1, 5, 3, 1);
    test_matmul_grad("gradcheck_matmul_N7_IC13_OC9", 7, 13, 9, 0);
    test_matmul_grad("gradcheck_matmul_N33_IC17_OC40_dw_db_only", 33, 17, 40, 1);

    test_layernorm(7, 13, 1);
    test_layernorm(5, 70, 1); /* C > 64: more than one column block in dw/db */
    test_layernorm(7, 13, 0);
    test_rmsnorm(7, 13);
    test_rmsnorm(6, 131);

    test_qknorm(10, 4, 2, 6);
    test_qknorm(10, 3, 1, 6);

    test_rope(2, 5, 4, 2, 6, 10000.0f);
    test_rope(2, 5, 3, 1, 6, 10.0f); /* small theta: large angles on every pair */
    test_rope(1, 3, 2, 1, 300, 10000.0f); /* hd/2 = 150 > the kernel's 128-pair chunk */

    test_attention(2, 5, 3, 1, 6);
    test_attention(2, 5, 4, 2, 6);
    test_attention(2, 5, 2, 2, 6); /* plain multi-head */
    test_attention(1, 9, 4, 1, 8);
    /* the kernels' column paths: 64-wide and 16-wide vector chunks, then a scalar tail */
    test_attention(1, 19, 2, 2, 12); /* hd < 16: scalar tail only */
    test_attention(1, 70, 2, 1, 40); /* T crosses the 64-key chunk; hd = 16 + 16 + 8 */
    test_attention(1, 21, 2, 1, 64); /* gpt2's hd: one 64-wide chunk */
    test_attention(1, 17, 3, 1, 88); /* hd = 64 + 16 + 8 */
    test_attention(1, 9, 2, 1, 136); /* hd > the 128-dim slice: 64 + 64, then 8 */

    test_gelu(97);
    test_swiglu(7, 9);

    test_embedding(3, 5, 13, 11, 1);
    test_embedding(3, 5, 70, 11, 0);
    test_embedding_bwd_deterministic();

    test_crossentropy(7, 11, 16);
    test_crossentropy(5, 300, 320);

    /* the same checks on shapes big enough for the kernels' multi-threaded paths */
    g_max_coords = 48;
    test_matmul_grad("gradcheck_matmul_N128_IC70_OC300_parallel", 128, 70, 300, 0);
    test_layernorm(48, 769, 1);
    test_rmsnorm(40, 1000);
    test_qknorm(320, 4, 2, 16);
    test_rope(2, 80, 4, 2, 32, 10000.0f);
    test_attention(2, 40, 4, 2, 16);
    test_attention(1, 140, 2, 1, 16); /* more than one 128-row block per head */
    test_gelu(50001);
    test_swiglu(64, 600);
    test_embedding(4, 64, 200, 50, 1);
    test_crossentropy(8, 5000, 5056);
    g_max_coords = 400;
    test_thread_invariance();

    test_elementwise();
    test_adamw();
    test_op_cpu_check();

    printf("%d passed, %d failed\n", g_pass, g_fail);
    return g_fail ? 1 : 0;
}
