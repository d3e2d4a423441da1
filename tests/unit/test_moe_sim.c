/* test_moe_sim.c — the mixture-of-experts op on a device (runtime/device/exec_dev_moe.h: the
 * kernels of templates/moe.cu.lua between the device layer's GEMMs) under `sim`, against the cpu
 * op (runtime/cpu/ops_moe.h) on the same inputs: forward output, routing state (probabilities,
 * chosen experts, gate weights, loads, aux loss), and every gradient (input, router, w1, w2) of
 * <R, out> + daux * aux, accumulated onto prefilled gradient buffers. Issue 23 (docs/moe.md).
 *
 * Shapes (rendered by `gen render moe`, one module each): odd N 11 C 13 E 6 top-3 H 5 with
 * renormalisation; odd N 7 C 9 E 8 top-2 H 7 without, 3 of 8 experts idle (their router rows pushed
 * down by a constant input column); tiny-moe's layer N 64 C 64 E 4 top-2 H 128; many tokens N 1500
 * C 8 E 5 top-2 H 4 (3000 routed rows: the dispatch's parallel counting sort over 12 blocks of 256
 * slots, the last partial). The dispatch lists (rows, src, dest) equal the serial stable sort's.
 *
 * Two inputs per shape:
 *  - dyadic: x in {k/4}, router weights in {k/8} (|k| <= 4), so every router logit is an exact
 *    fp32 sum whatever the GEMM's order; the softmax, top-k (ties included: equal logits happen,
 *    and both sides give them to the lower expert), gate weights, loads and aux loss are then the
 *    same operations in the same order on both sides (the kernels replay ops_moe.c's loops, glibc
 *    expf on both): the routing state must be bit-identical.
 *  - random: uniform floats; the router weights are redrawn until every token's top_k-th and
 *    (top_k+1)-th probabilities differ by more than 1e-4 (the logits' order difference is ~1e-7,
 *    so no choice can flip); the chosen experts and loads must be equal.
 * Tolerance of everything else: |got - want| <= 1e-5 |want| + 1e-5 max|want| per tensor (test_kernels_sim's
 * TOL_F32 and derivation, docs/test-tolerances.md E1/E6): the GEMMs (moe.cu's grouped kernels, or
 * on the loop path sim's hyp_gemm_cpu, vs the cpu backend's BLAS) sum in different orders over at
 * most 600 terms (many tokens' weight gradients: rms difference sqrt(2/3) u sqrt(600) = 1.2e-6 of
 * the scale, 1e-5 is 8 sigmas), and the SwiGLU's sigmoid is
 * glibc expf here and the cpu's polynomial hyp_expv there (a few ulp each); the router backward's
 * cancellations p (dp - <dp, p>) are judged against the tensor's largest value. A wrong row, slot,
 * order or a missing term is off by O(max|want|).
 * Paths: the grouped expert GEMMs (the trainer's) on both inputs, the loop of device-layer GEMMs
 * sized by the loads read back (shape.grouped = 0) on the random one.
 * Determinism: two device forwards and two device backwards are bit-identical.
 * Prints one line per check and "N passed, M failed"; exits 1 on failure.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "device.h"
#include "exec_dev_moe.h"
#include "moe_layout.h"
#include "ops_moe.h"

#include "hyp_test.h"

static uint64_t g_rng = 0x2545F4914F6CDD1Dull;
static float frand(void) { /* uniform in [-1, 1) */
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return (float)((g_rng >> 40) * (1.0 / 8388608.0)) - 1.0f;
}
/* k / den with k uniform in [-4, 4] */
static float dyadic(float den) { return (float)((int)((frand() + 1.0f) * 4.5f) - 4) / den; }

static void fill(float *p, long n, int dy, float den, float scale) {
    for (long i = 0; i < n; i++) p[i] = dy ? dyadic(den) : scale * frand();
}

static void check_f32(const char *name, const float *got, const float *want, long n) {
    double maxw = 0, worst = 0;
    for (long i = 0; i < n; i++) maxw = fabs(want[i]) > maxw ? fabs(want[i]) : maxw;
    long bad = 0, first = -1;
    for (long i = 0; i < n; i++) {
        double d = fabs((double)got[i] - want[i]);
        if (!(d <= 1e-5 * fabs(want[i]) + 1e-5 * maxw)) { /* the bound of the header */
            if (first < 0) first = i;
            bad++;
        } else if (d > worst)
            worst = d;
    }
    if (bad) check(0, name, "%ld of %ld beyond tolerance; first [%ld] got %.9g want %.9g", bad, n, first, got[first], want[first]);
    else check(1, name, "max |err| %.3g (scale %.3g)", worst, maxw);
}

typedef struct {
    hyp_device *d;
    hyp_err e;
} dev_t_;
static dev_t_ g;

static void *dput(const void *h, size_t bytes) {
    void *p = NULL;
    if (g.d->mem_alloc(g.d, &p, bytes ? bytes : 4, &g.e) || (h && g.d->h2d_sync(g.d, p, h, bytes, &g.e))) {
        fprintf(stderr, "device: %s\n", g.e.msg);
        exit(1);
    }
    return p;
}
static void dget(void *h, const void *p, size_t bytes) {
    if (g.d->d2h_sync(g.d, h, p, bytes, &g.e)) {
        fprintf(stderr, "device: %s\n", g.e.msg);
        exit(1);
    }
}

/* The top_k-th minus the (top_k+1)-th probability of each token, the smallest (1 when K = E). */
static double min_gap(const float *probs, const moe_shape *s) {
    double gap = 1;
    for (int n = 0; n < s->N && s->K < s->E; n++) {
        float v[64];
        memcpy(v, probs + (long)n * s->E, sizeof(float) * (size_t)s->E);
        for (int i = 0; i < s->E; i++) /* sort descending */
            for (int j = i + 1; j < s->E; j++)
                if (v[j] > v[i]) {
                    float t = v[i];
                    v[i] = v[j], v[j] = t;
                }
        if (v[s->K - 1] - v[s->K] < gap) gap = v[s->K - 1] - v[s->K];
    }
    return gap;
}

static void run_case(const char *tag, hyp_module *mod, const moe_shape *s, int dy, int idle, int grouped) {
    int N = s->N, C = s->C, E = s->E, K = s->K, H = s->H;
    long nx = (long)N * C, nr = (long)E * C, n1 = (long)E * 2 * H * C, n2 = (long)E * C * H, ns = moe_state_floats(N, E, K);
    float *x = malloc(sizeof(float) * nx), *wr = malloc(sizeof(float) * nr), *w = malloc(sizeof(float) * (n1 + n2));
    float *R = malloc(sizeof(float) * nx), *out = malloc(sizeof(float) * nx), *st = calloc((size_t)ns, sizeof(float));
    float *ws = malloc(sizeof(float) * (size_t)op_moe_ws_floats(s));
    int *rows = malloc(sizeof(int) * 2 * (size_t)N);
    char nm[160];
    fill(x, nx, dy, 4, 1.0f);
    fill(w, n1 + n2, 0, 1, 0.3f);
    fill(R, nx, 0, 1, 1.0f);
    for (int n = 0; idle && n < N; n++) x[(long)n * C] = 1.0f; /* a constant input column ... */
    double gap = 0;
    for (int tries = 0; tries < 100; tries++) {
        fill(wr, nr, dy, 8, 0.5f);
        for (int k = 0; idle && k < idle; k++) wr[(long)(E - 1 - k) * C] = -8.0f; /* ... that keeps the last experts idle */
        moe_state_view v = moe_state_at(st, N, E, K);
        op_moe_route(v.probs, v.topi, v.topw, v.loads, v.aux, x, wr, s);
        if (dy || (gap = min_gap(v.probs, s)) > 1e-4) break;
    }
    if (!dy) check(gap > 1e-4, "moe_sim random router: top-k choices away from rounding", "smallest gap %.3g (> 1e-4)", gap);
    /* cpu reference */
    moe_state_view v = moe_state_at(st, N, E, K);
    op_moe_fwd(out, v.probs, v.topi, v.topw, v.loads, v.aux, x, wr, w, w + n1, s, ws, rows);
    float daux = 3.0f;
    float *gx = malloc(sizeof(float) * nx), *gr = malloc(sizeof(float) * nr), *gw = malloc(sizeof(float) * (n1 + n2));
    fill(gx, nx, 0, 1, 1.0f), fill(gr, nr, 0, 1, 1.0f), fill(gw, n1 + n2, 0, 1, 1.0f); /* accumulated onto */
    float *dgx = dput(gx, sizeof(float) * nx), *dgr = dput(gr, sizeof(float) * nr), *dgw = dput(gw, sizeof(float) * (n1 + n2));
    float *dgx2 = dput(gx, sizeof(float) * nx), *dgr2 = dput(gr, sizeof(float) * nr), *dgw2 = dput(gw, sizeof(float) * (n1 + n2));
    op_moe_bwd(gx, gr, gw, gw + n1, R, daux, x, wr, w, w + n1, v.probs, v.topi, v.topw, s, ws, rows);
    /* device */
    dev_moe_shape ds = {g.d, mod, 256, N, C, E, K, H, s->norm_topk, s->aux_coef, 0, grouped, 0};
    float *dx = dput(x, sizeof(float) * nx), *dwr = dput(wr, sizeof(float) * nr), *dw = dput(w, sizeof(float) * (n1 + n2));
    float *dR = dput(R, sizeof(float) * nx), *dout = dput(NULL, sizeof(float) * nx), *dst = dput(NULL, sizeof(float) * ns);
    void *dws = dput(NULL, (size_t)dev_moe_ws_bytes(&ds));
    int32_t loads[64];
    float *got = malloc(sizeof(float) * nx), *gst = malloc(sizeof(float) * ns), *again = malloc(sizeof(float) * (size_t)(n1 + n2 > nx ? n1 + n2 : nx));
    if (dev_moe_fwd(&ds, dout, dst, dx, dwr, dw, dw + n1, dws, loads, &g.e)) {
        check(0, tag, "dev_moe_fwd: %s", g.e.msg);
        return;
    }
    dget(got, dout, sizeof(float) * nx);
    dget(gst, dst, sizeof(float) * ns);
    moe_state_view gv = moe_state_at(gst, N, E, K);
    snprintf(nm, sizeof nm, "moe_sim[%s] forward out", tag);
    check_f32(nm, got, out, nx);
    long sum = 0;
    int same_loads = 1, idle_ok = 1;
    for (int k = 0; k < E; k++) {
        sum += gv.loads[k];
        same_loads &= gv.loads[k] == v.loads[k] && (grouped || loads[k] == v.loads[k]); /* grouped: nothing read back */
        if (k >= E - idle) idle_ok &= gv.loads[k] == 0;
    }
    snprintf(nm, sizeof nm, "moe_sim[%s] loads = cpu's, sum N*k", tag);
    check(same_loads && sum == (long)N * K && idle_ok, nm, "sum %ld (N*k %d)%s", sum, N * K, idle ? ", idle experts 0" : "");
    { /* the dispatch: the parallel counting sort's lists = the serial walk "each expert, every slot in token order" */
        long Rr = (long)N * K;
        int32_t *got_l = malloc(sizeof(int32_t) * 3 * (size_t)Rr), *want_l = malloc(sizeof(int32_t) * 3 * (size_t)Rr);
        dget(got_l, (char *)dws + dev_moe_ws_rows_offset(&ds), sizeof(int32_t) * 3 * (size_t)Rr);
        long r = 0;
        for (int x2 = 0; x2 < E; x2++)
            for (long i = 0; i < Rr; i++)
                if (gv.topi[i] == x2) want_l[r] = (int32_t)(i / K), want_l[Rr + r] = (int32_t)i, want_l[2 * Rr + i] = (int32_t)r, r++;
        snprintf(nm, sizeof nm, "moe_sim[%s] dispatch rows, src, dest = the serial stable sort", tag);
        check(r == Rr && !memcmp(got_l, want_l, sizeof(int32_t) * 3 * (size_t)Rr), nm, "%ld routed rows, %ld blocks of 256", Rr, (Rr + 255) / 256);
        free(got_l), free(want_l);
    }
    snprintf(nm, sizeof nm, "moe_sim[%s] chosen experts = cpu's", tag);
    check(!memcmp(gv.topi, v.topi, sizeof(int32_t) * (size_t)N * K), nm, NULL);
    if (dy) {
        snprintf(nm, sizeof nm, "moe_sim[%s] routing state bit-identical", tag);
        check(!memcmp(gst, st, sizeof(float) * (size_t)ns), nm, "probs, topw, topi, loads, aux (%ld floats); aux %.9g", ns, (double)*gv.aux);
    } else {
        snprintf(nm, sizeof nm, "moe_sim[%s] probs", tag);
        check_f32(nm, gv.probs, v.probs, (long)N * E);
        snprintf(nm, sizeof nm, "moe_sim[%s] gate weights", tag);
        check_f32(nm, gv.topw, v.topw, (long)N * K);
        snprintf(nm, sizeof nm, "moe_sim[%s] aux loss", tag);
        check_f32(nm, gv.aux, v.aux, 1);
    }
    /* a second forward: bit-identical */
    float *dout2 = dput(NULL, sizeof(float) * nx), *got2 = malloc(sizeof(float) * nx);
    dev_moe_fwd(&ds, dout2, dst, dx, dwr, dw, dw + n1, dws, loads, &g.e);
    dget(got2, dout2, sizeof(float) * nx);
    snprintf(nm, sizeof nm, "moe_sim[%s] forward deterministic", tag);
    check(!memcmp(got, got2, sizeof(float) * nx), nm, "two runs bit-identical");
    /* backward, twice */
    int rc = dev_moe_bwd(&ds, dgx, dgr, dgw, dgw + n1, dR, daux, dx, dwr, dw, dw + n1, dst, dws, loads, &g.e);
    if (!rc) rc = dev_moe_bwd(&ds, dgx2, dgr2, dgw2, dgw2 + n1, dR, daux, dx, dwr, dw, dw + n1, dst, dws, loads, &g.e);
    snprintf(nm, sizeof nm, "moe_sim[%s] backward runs", tag);
    check(!rc, nm, "%s", rc ? g.e.msg : "");
    float *hx = malloc(sizeof(float) * nx), *hr = malloc(sizeof(float) * nr), *hw = malloc(sizeof(float) * (n1 + n2));
    dget(hx, dgx, sizeof(float) * nx), dget(hr, dgr, sizeof(float) * nr), dget(hw, dgw, sizeof(float) * (n1 + n2));
    snprintf(nm, sizeof nm, "moe_sim[%s] dinp (accumulated)", tag);
    check_f32(nm, hx, gx, nx);
    snprintf(nm, sizeof nm, "moe_sim[%s] drouter (accumulated)", tag);
    check_f32(nm, hr, gr, nr);
    snprintf(nm, sizeof nm, "moe_sim[%s] dw1 (accumulated)", tag);
    check_f32(nm, hw, gw, n1);
    snprintf(nm, sizeof nm, "moe_sim[%s] dw2 (accumulated)", tag);
    check_f32(nm, hw + n1, gw + n1, n2);
    int det = 1;
    dget(again, dgw2, sizeof(float) * (n1 + n2));
    det &= !memcmp(again, hw, sizeof(float) * (n1 + n2));
    dget(again, dgx2, sizeof(float) * nx);
    det &= !memcmp(again, hx, sizeof(float) * nx);
    dget(again, dgr2, sizeof(float) * nr);
    det &= !memcmp(again, hr, sizeof(float) * nr);
    snprintf(nm, sizeof nm, "moe_sim[%s] backward deterministic", tag);
    check(det, nm, "two runs bit-identical (dinp, drouter, dw1, dw2)");
    void *dev_bufs[] = {dgx, dgr, dgw, dgx2, dgr2, dgw2, dx, dwr, dw, dR, dout, dst, dws, dout2};
    for (size_t i = 0; i < sizeof dev_bufs / sizeof *dev_bufs; i++) g.d->mem_free(g.d, dev_bufs[i], &g.e);
    free(x), free(wr), free(w), free(R), free(out), free(st), free(ws), free(rows), free(gx), free(gr), free(gw);
    free(got), free(gst), free(again), free(got2), free(hx), free(hr), free(hw);
}

static void run_shape(const char *tag, int N, int C, int E, int K, int H, int norm, int idle) {
    char cu[512], cmd[1200];
    snprintf(cu, sizeof cu, "%s/tests/moe_sim/moe_%s.cu", HYP_BINARY_DIR, tag);
    snprintf(cmd, sizeof cmd, "mkdir -p '%s/tests/moe_sim' && '%s/generator/gen' render moe C=%d H=%d NE=%d TOPK=%d NORM=%d -o '%s'",
             HYP_BINARY_DIR, HYP_BINARY_DIR, C, H, E, K, norm, cu);
    hyp_module *mod = NULL;
    if (system(cmd) != 0 || g.d->module_load(g.d, cu, &mod, &g.e)) {
        check(0, tag, "render/load failed: %s", g.e.msg);
        return;
    }
    moe_shape s = {N, C, E, K, H, norm, 0.02f, 0, 0, 0, NULL}; /* dropless, no shared experts, softmax */
    char t[96];
    snprintf(t, sizeof t, "%s,dyadic", tag);
    run_case(t, mod, &s, 1, idle, 1);
    snprintf(t, sizeof t, "%s,random", tag);
    run_case(t, mod, &s, 0, idle, 1);
    snprintf(t, sizeof t, "%s,random,loop", tag);
    run_case(t, mod, &s, 0, idle, 0);
    g.d->module_unload(g.d, mod);
}

int main(void) {
    if (hyp_device_open("sim", &g.d, &g.e)) {
        fprintf(stderr, "%s\n", g.e.msg);
        return 1;
    }
    run_shape("odd_norm", 11, 13, 6, 3, 5, 1, 0);
    run_shape("odd_raw_idle", 7, 9, 8, 2, 7, 0, 3);
    run_shape("tiny_moe", 64, 64, 4, 2, 128, 1, 0);
    run_shape("many_tokens", 1500, 8, 5, 2, 4, 1, 0); /* 3000 routed rows: 12 dispatch blocks, the last partial */
    g.d->close(g.d);
    return hyp_test_finish();
}
