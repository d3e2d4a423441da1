/* test_dev_bf16_v2102.c — v2102 bf16 storage (and v2100 TF32) on the device executor (runtime/device/exec_dev.c on
 * "sim") against the cpu executor's bf16 storage (runtime/cpu/ops_bf16.c), the reference numerics.
 * For the GPT-2 and Llama fixture models (tests/fixtures/models/ref-gpt2.yaml, ref-llama.yaml)
 * and tiny-llama with flash attention (its kernels need HD % 16 == 0) at batch 2 x seq 16, three plans of the same model: sim with
 * --set v2102.storage=bf16, cpu bf16 (its default storage), cpu fp32. Identical parameters (the
 * cpu initialization, uploaded) and batches. Never: a tolerance taken from what a run printed.
 *
 * Checks:
 *   - the sim plan has the cpu bf16 plan's buffers, dtypes and activation bytes, and the device
 *     executor allocates exactly the plan's activation bytes (half-size bf16 arena) plus a bf16
 *     weight copy of 2 bytes per arena float;
 *   - forward logits, per-token losses, and every parameter gradient of one backward: the sim's
 *     distance to the cpu bf16 trainer is at most `factor` times the cpu bf16 trainer's distance
 *     to the cpu fp32 trainer (per tensor, max |a - b|), plus the fp32 floor of test_exec_sim
 *     (1e-4 max|ref| + 1e-7: fp32 sums in another order). Sim and cpu round to bf16 at the same
 *     points (the plan's buffer dtypes), the same way (round to nearest even), from fp32 values
 *     that differ only by summation order (the sim's GEMM sums in double and rounds once, the
 *     cpu's in fp32: relative <= k 2^-24 for k terms). A stored value comes out different only
 *     when that difference straddles a bf16 rounding boundary, and then by one ulp (2^-7 relative).
 *     Factor 1/4, the fixture models (C 32, 2 layers: k <= 4C = 128): bf16 x bf16 products are
 *     exact in fp32 (16 significant bits) and short sums of them lose at most a few low bits, so
 *     a flip needs a difference of ~2^-17 relative to hit a boundary spaced 2^-8 apart: a fraction
 *     ~2^-9 of the values, while bf16 against fp32 differs at every stored value; an extra or a
 *     missing rounding point (a kernel storing fp32 bits, a GEMM reading unrounded weights, a
 *     bias rounded where the cpu adds it in fp32) moves the sim by a bf16 effect of its own, a
 *     ratio near 1. The biases are 0 at initialization, so the device's bf16 bias (cuBLASLt: the
 *     bias has D's type) is exact here.
 *     Factor 3, tiny-llama (C 128, 4 layers, k up to 384) with flash attention: there a flip
 *     early in the network perturbs everything after it by a bf16 amount, which flips more
 *     roundings downstream, so the two bf16 trainers end up apart by a bf16 effect each; both
 *     deviate from the fp32 trainer by the rounding of the same points, whose size the cpu pair
 *     measures, so by the triangle inequality through the fp32 trainer |sim - cpu16| <= |sim -
 *     fp32| + |fp32 - cpu16| ~ 2 |cpu16 - cpu32|, and 3 leaves room for the two deviations not
 *     being equal tensor by tensor in max norm. Its flash kernels run with bf16x3 mma operands
 *     (~fp32 products) like the cpu's fp32 flash op; the default under the bf16 policy rounds P
 *     and dS to bf16 inside the tensor-core products as FlashAttention-2 does, rounding points
 *     the cpu reference has not.
 *   - the weight copy follows the parameters: new parameters uploaded, the next forward's logits
 *     match the cpu's again (a stale copy would give the old logits).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "device.h"
#include "exec.h"
#include "exec_dev.h"
#include "gemm_bf16.h"
#include "plan.h"
#include "rng.h"

#include "hyp_test.h"

static int gen(const char *target, const char *dir, const char *extra, const char *model) {
    char cmd[2048];
    snprintf(cmd, sizeof cmd,
             "cd %s && %s/generator/gen specs/v2500.yaml --enable adamw%s --model %s "
             "--target %s --batch 2 --seq 16 -o %s >/dev/null 2>&1",
             HYP_SOURCE_DIR, HYP_BINARY_DIR, extra, model, target, dir);
    return system(cmd);
}

/* The plans of the sim, bf16 cpu and fp32 cpu trainers generated into ds, dc, df; stops at the
 * first that fails to load (its error in *e). */
static int load_plans(const char *ds, const char *dc, const char *df, plan_t *ps, plan_t *pc, plan_t *pf, hyp_err *e) {
    char path[512];
    snprintf(path, sizeof path, "%s/plan.json", ds);
    int rc = plan_load(path, ps, e);
    snprintf(path, sizeof path, "%s/plan.json", dc);
    if (!rc) rc = plan_load(path, pc, e);
    snprintf(path, sizeof path, "%s/plan.json", df);
    if (!rc) rc = plan_load(path, pf, e);
    return rc;
}
static int find_buf(const plan_t *p, const char *name) {
    for (int i = 0; i < p->n_bufs; i++)
        if (!strcmp(p->bufs[i].name, name)) return i;
    return -1;
}

/* n values of cpu executor buffer idx as fp32 (a bf16 buffer widened) into out. */
static void host_values(exec_t *x, int idx, float *out, long n) {
    const float *b = exec_buf(x, idx);
    if (x->p->bufs[idx].dtype == HYP_DT_BF16) cpu_bf16_to_f32(out, (const uint16_t *)(const void *)b, n);
    else memcpy(out, b, sizeof(float) * (size_t)n);
}

static double maxdiff(const float *a, const float *b, long n, double *refmax) {
    double w = 0;
    *refmax = 0;
    for (long i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]);
        if (!(d <= w)) w = d; /* NaN counts as the worst */
        if (fabs(b[i]) > *refmax) *refmax = fabs(b[i]);
    }
    return w;
}

/* dev: sim against cpu bf16; ref: cpu bf16 against cpu fp32 — the criteria of the header (factor
 * 1/4 for the fixtures, 3 for tiny-llama). */
static double g_factor;
static int within(double dev, double ref, double refmax) { return dev <= g_factor * ref + 1e-4 * refmax + 1e-7; }

static void one_case(hyp_device *dev, const char *model, const char *extra, const char *tag, double factor) {
    g_factor = factor;
    char root[256], ds[320], dc[320], df[320], path[512], ex[256];
    snprintf(root, sizeof root, "/tmp/hyp-dev-bf16-%d-%s", (int)getpid(), tag);
    snprintf(ds, sizeof ds, "%s/sim", root);
    snprintf(dc, sizeof dc, "%s/cpu16", root);
    snprintf(df, sizeof df, "%s/cpu32", root);
    snprintf(ex, sizeof ex, ",bf16%s --set v2102.storage=bf16", extra);
    char fp32x[256];
    snprintf(fp32x, sizeof fp32x, "%s", extra);
    if (gen("sim", ds, ex, model) || gen("cpu", dc, ex, model) || gen("cpu", df, fp32x, model)) {
        check(0, tag, "gen --target sim / cpu failed");
        return;
    }
    plan_t ps, pc, pf;
    hyp_err e = {{0}};
    int rc = load_plans(ds, dc, df, &ps, &pc, &pf, &e);
    if (rc) {
        check(0, tag, "plan_load: %s", e.msg);
        return;
    }
    int same = ps.n_bufs == pc.n_bufs && ps.act_bytes == pc.act_bytes && ps.param_floats == pc.param_floats, nbf = 0;
    for (int i = 0; same && i < ps.n_bufs; i++) {
        same = ps.bufs[i].dtype == pc.bufs[i].dtype && ps.bufs[i].offset_bytes == pc.bufs[i].offset_bytes;
        nbf += ps.bufs[i].dtype == HYP_DT_BF16;
    }
    char name[200];
    snprintf(name, sizeof name, "%s: sim plan stores the cpu bf16 plan's buffers in its dtypes (v2102)", tag);
    check(same && nbf > 0, name, "%d buffers, %d bf16, activation arena %lld B (fp32 plan: %lld B)", ps.n_bufs, nbf,
          (long long)ps.act_bytes, (long long)pf.act_bytes);

    exec_t cb, cf;
    exec_dev dx;
    if (exec_init(&cb, &pc, &e) || exec_init(&cf, &pf, &e)) {
        check(0, tag, "exec_init: %s", e.msg);
        return;
    }
    snprintf(path, sizeof path, "%s/kernels", ds);
    if ((rc = exec_dev_init(&dx, &ps, path, dev, &e))) {
        check(0, tag, "exec_dev_init: %s", e.msg);
        exec_free(&cb), exec_free(&cf);
        return;
    }
    snprintf(name, sizeof name, "%s: device arena = the plan's activation bytes, + a bf16 weight copy", tag);
    check(dx.bytes_acts == (size_t)ps.act_bytes && dx.bytes_params == 6 * (size_t)dx.arena && dx.wcopy, name,
          "activations %zu B (plan %lld B), params %zu B = 4 + 2 bytes x %lld arena floats", dx.bytes_acts,
          (long long)ps.act_bytes, dx.bytes_params, (long long)dx.arena);

    exec_init_params(&cb, 1234);
    memcpy(cf.params, cb.params, sizeof(float) * (size_t)pc.param_floats);
    exec_params_changed(&cf);
    rc = exec_dev_upload_params(&dx, cb.params, &e);
    const int N = ps.B * ps.T, V = ps.V, Vp = ps.Vp;
    hyp_rng rng;
    hyp_rng_seed(&rng, 42);
    for (int i = 0; i < N; i++) {
        cb.tokens[i] = cf.tokens[i] = dx.h_tokens[i] = (int32_t)hyp_rng_below(&rng, (uint64_t)V);
        cb.targets[i] = cf.targets[i] = dx.h_targets[i] = (cb.tokens[i] * 7 + 3) % V;
    }
    long nl = (long)N * Vp;
    float *ls = malloc(sizeof(float) * (size_t)nl), *lc = malloc(sizeof(float) * (size_t)nl), *lf = malloc(sizeof(float) * (size_t)nl);
    int il = find_buf(&ps, "logits"), ilc = find_buf(&pc, "logits"), ilf = find_buf(&pf, "logits");
    double rm, dsim, dref;
    /* forward logits */
    if (!rc) rc = exec_dev_forward(&dx, &e);
    exec_forward(&cb);
    exec_forward(&cf);
    if (!rc) rc = exec_dev_download_buf(&dx, il, ls, nl, &e);
    host_values(&cb, ilc, lc, nl);
    host_values(&cf, ilf, lf, nl);
    if (!rc) {
        dsim = maxdiff(ls, lc, nl, &rm);
        dref = maxdiff(lc, lf, nl, &rm);
        snprintf(name, sizeof name, "%s: forward logits: sim bf16 vs cpu bf16 within %g x cpu bf16 vs fp32", tag, factor);
        check(within(dsim, dref, rm), name, "max err %.3g, bf16 vs fp32 %.3g (max |ref| %.3g)", dsim, dref, rm);
    }
    /* per-token losses and every gradient of one backward */
    float dloss = 1.0f / (float)exec_count_targets(&cb);
    memset(cb.grads, 0, sizeof(float) * (size_t)pc.param_floats);
    memset(cf.grads, 0, sizeof(float) * (size_t)pf.param_floats);
    exec_forward(&cb);
    exec_forward(&cf);
    exec_backward(&cb, dloss);
    exec_backward(&cf, dloss);
    float lsim = 0;
    if (!rc) rc = exec_dev_zero_grads(&dx, &e);
    if (!rc) rc = exec_dev_forward(&dx, &e);
    if (!rc) rc = exec_dev_backward(&dx, dloss, &lsim, &e);
    float *tl = malloc(sizeof(float) * 3 * (size_t)N);
    if (!rc) {
        rc = exec_dev_download_buf(&dx, ps.losses_buf, tl, N, &e);
        host_values(&cb, pc.losses_buf, tl + N, N);
        host_values(&cf, pf.losses_buf, tl + 2 * N, N);
        dsim = maxdiff(tl, tl + N, N, &rm);
        dref = maxdiff(tl + N, tl + 2 * N, N, &rm);
        snprintf(name, sizeof name, "%s: per-token losses within %g x bf16 vs fp32", tag, factor);
        check(!rc && within(dsim, dref, rm), name, "max err %.3g, bf16 vs fp32 %.3g", dsim, dref);
    }
    float *g = malloc(sizeof(float) * (size_t)ps.param_floats);
    if (!rc) rc = exec_dev_download_grads(&dx, g, &e);
    if (!rc) {
        int bad = 0;
        double worst = 0;
        const char *wn = "";
        for (int i = 0; i < ps.n_params_t; i++) {
            const plan_param *pp = &ps.params[i];
            dsim = maxdiff(g + pp->offset, cb.grads + pp->offset, (long)pp->numel, &rm);
            dref = maxdiff(cb.grads + pp->offset, cf.grads + pp->offset, (long)pp->numel, &rm);
            if (!within(dsim, dref, rm)) {
                bad++;
                printf("     %s: max err %.3g, bf16 vs fp32 %.3g, max |ref| %.3g\n", pp->name, dsim, dref, rm);
            }
            double r = dref > 0 ? dsim / dref : 0;
            if (r > worst) worst = r, wn = pp->name;
        }
        snprintf(name, sizeof name, "%s: every parameter gradient within %g x bf16 vs fp32", tag, factor);
        check(bad == 0, name, "%d tensors, worst ratio %.3g (%s)", ps.n_params_t, worst, wn);
    }
    /* the weight copy follows new parameters */
    for (long i = 0; i < pc.param_floats; i++) cb.params[i] *= 0.5f;
    exec_params_changed(&cb);
    if (!rc) rc = exec_dev_upload_params(&dx, cb.params, &e);
    if (!rc) rc = exec_dev_forward(&dx, &e);
    exec_forward(&cb);
    if (!rc) rc = exec_dev_download_buf(&dx, il, ls, nl, &e);
    host_values(&cb, ilc, lc, nl);
    if (!rc) {
        dsim = maxdiff(ls, lc, nl, &rm);
        double stale = maxdiff(lf, lc, nl, &rm); /* the old parameters' logits against the new */
        snprintf(name, sizeof name, "%s: the bf16 weight copy is cast again after new parameters", tag);
        check(dsim < 0.25 * stale && (factor >= 1 || dsim == 0), name, "max err %.3g; the old parameters' logits differ by %.3g", dsim, stale);
    }
    if (rc) check(0, tag, "%s", e.msg);
    free(ls), free(lc), free(lf), free(tl), free(g);
    exec_dev_free(&dx);
    exec_free(&cb);
    exec_free(&cf);
    plan_free(&ps), plan_free(&pc), plan_free(&pf);
    rm_rf(root);
}

/* v2100 fp32_matmul tf32 on the device (plan train.tf32): the sim's forward logits of the fixture
 * GPT-2 against the cpu fp32 trainer's differ by more than the IEEE floor (1e-5 max|ref|, the
 * executors' fp32 summation orders: test_exec_sim) — TF32 is on — and by at most half the cpu
 * bf16 trainer's distance to fp32: TF32 rounds only the layer GEMMs' inputs, to 10 mantissa bits
 * (relative error 2^-11), where bf16 storage rounds the same inputs and every other stored value
 * to 7 (2^-8): an 8x smaller error at a subset of the points, so 1/2 has margin. */
static void tf32_case(hyp_device *dev) {
    char root[256], ds[320], dc[320], df[320], path[512];
    snprintf(root, sizeof root, "/tmp/hyp-dev-tf32-%d", (int)getpid());
    snprintf(ds, sizeof ds, "%s/sim", root);
    snprintf(dc, sizeof dc, "%s/cpu16", root);
    snprintf(df, sizeof df, "%s/cpu32", root);
    const char *model = "tests/fixtures/models/ref-gpt2.yaml";
    plan_t ps, pc, pf;
    hyp_err e = {{0}};
    if (gen("sim", ds, ",tf32", model) || gen("cpu", dc, ",bf16", model) || gen("cpu", df, "", model)) {
        check(0, "tf32", "gen failed");
        return;
    }
    int rc = load_plans(ds, dc, df, &ps, &pc, &pf, &e);
    if (rc) {
        check(0, "tf32", "plan_load: %s", e.msg);
        return;
    }
    exec_t cb, cf;
    exec_dev dx;
    snprintf(path, sizeof path, "%s/kernels", ds);
    if (exec_init(&cb, &pc, &e) || exec_init(&cf, &pf, &e) || exec_dev_init(&dx, &ps, path, dev, &e)) {
        check(0, "tf32", "init: %s", e.msg);
        return;
    }
    exec_init_params(&cf, 1234);
    memcpy(cb.params, cf.params, sizeof(float) * (size_t)pf.param_floats);
    exec_params_changed(&cb);
    rc = exec_dev_upload_params(&dx, cf.params, &e);
    const int N = ps.B * ps.T, V = ps.V;
    hyp_rng rng;
    hyp_rng_seed(&rng, 42);
    for (int i = 0; i < N; i++) {
        cb.tokens[i] = cf.tokens[i] = dx.h_tokens[i] = (int32_t)hyp_rng_below(&rng, (uint64_t)V);
        cb.targets[i] = cf.targets[i] = dx.h_targets[i] = (cb.tokens[i] * 7 + 3) % V;
    }
    long nl = (long)N * ps.Vp;
    float *lt = malloc(sizeof(float) * 3 * (size_t)nl);
    if (!rc) rc = exec_dev_forward(&dx, &e);
    exec_forward(&cb);
    exec_forward(&cf);
    if (!rc) rc = exec_dev_download_buf(&dx, find_buf(&ps, "logits"), lt, nl, &e);
    host_values(&cb, find_buf(&pc, "logits"), lt + nl, nl);
    host_values(&cf, find_buf(&pf, "logits"), lt + 2 * nl, nl);
    double rm, dt = maxdiff(lt, lt + 2 * nl, nl, &rm), db = maxdiff(lt + nl, lt + 2 * nl, nl, &rm);
    check(!rc && ps.tf32 == 1 && dt > 1e-5 * rm && dt <= 0.5 * db, "v2100 tf32: sim logits off fp32 by TF32 rounding, within half the bf16 effect",
          "max err vs fp32 %.3g (IEEE floor %.3g, bf16 vs fp32 %.3g)%s%s", dt, 1e-5 * rm, db, rc ? ": " : "", rc ? e.msg : "");
    free(lt);
    exec_dev_free(&dx);
    exec_free(&cb), exec_free(&cf);
    plan_free(&ps), plan_free(&pc), plan_free(&pf);
    rm_rf(root);
}

int main(void) {
    char cache[1024];
    snprintf(cache, sizeof cache, "%s/sim-cache", HYP_BINARY_DIR);
    setenv("HYP_SIM_CACHE", cache, 0);
    hyp_device *dev;
    hyp_err e = {{0}};
    if (hyp_device_open("sim", &dev, &e)) {
        check(0, "open sim", "%s", e.msg);
        return 1;
    }
    one_case(dev, "tests/fixtures/models/ref-gpt2.yaml", "", "gpt2", 0.25);
    one_case(dev, "tests/fixtures/models/ref-llama.yaml", "", "llama", 0.25);
    /* flash needs HD a multiple of 16: the tiny-llama model (HD 32). Its mma operands in bf16x3
     * (~fp32 products): the default under the bf16 policy rounds P and dS to bf16 inside the
     * tensor-core products as FlashAttention-2 does, rounding points the cpu's fp32 flash op has
     * not (measured apart: test_sim_bf16_v2102.sh) */
    one_case(dev, "tiny-llama", ",flash --set v2113.precision=bf16x3", "tiny-llama-flash", 3.0);
    tf32_case(dev);
    dev->close(dev);
    printf("%d passed, %d failed\n", g_pass, g_fail);
    return g_fail ? 1 : 0;
}
