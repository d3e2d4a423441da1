/* test_exec_sim.c — the device executor (runtime/exec_dev.c) on the "sim" device against the CPU
 * executor (runtime/exec.c), issue #5: `gen --target sim` and `gen --target cpu` for the tiny
 * GPT-2-style fixture model (tests/fixtures/models/ref-gpt2.yaml: 2 layers, C 32, V 64) at batch
 * 2 x seq 16; identical parameters (the CPU initialization, uploaded) and identical random batches
 * (tokens < 64, made in memory; targets a fixed function of the token, so the loss falls).
 * Checks: logits and loss of the forward pass, every parameter gradient of one backward pass, then
 * twice N AdamW steps comparing the losses of every step and the parameters at the end: first with
 * the optimizer on the host for the sim side too (download gradients, train.h, upload
 * parameters), then all on the device as the trainer's step does (runtime/train_dev.c): the
 * gradient norm by the global_norm kernels, the clip factor they write read by adamw_step from
 * device memory (exec_dev_norm_partial/finish, exec_dev_adamw_own; max_norm 1 so that steps clip).
 *
 * `test_exec_sim --device cuda --target sm_XX` runs the same checks with the cubins on a GPU
 * (tests/gpu/test_gpu_train.c does, where there is one).
 *
 * Tolerances (fp32 kernels and GEMMs vs the CPU ops, which use oneDNN sgemm and their own
 * summation orders):
 *   logits, loss        max |a-b| <= 1e-5 * max(1, max|ref|)
 *   gradients           max |a-b| <= 1e-4 * max|ref| + 1e-7    per tensor (sums of N*C products)
 *   losses of N steps   |a-b| <= 1e-4 * |ref|                   AdamW amplifies rounding a little
 *   parameters after    max |a-b| <= 0.1 * lr                     AdamW normalizes updates: ~0
 *                                                                 gradients move by ~lr on noise
 *   device gradient norm |a-b| <= 1e-5 * ref                      fp32 sums per thread and block vs
 *                                                                 the host's double sum
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "device.h"
#include "exec.h"
#include "exec_dev.h"
#include "plan.h"
#include "rng.h"
#include "train.h"

#define STEPS 20

static int passed, failed;

static void report(int ok, const char *name, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
#include <stdarg.h>
static void report(int ok, const char *name, const char *fmt, ...) {
    char detail[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(detail, sizeof detail, fmt, ap);
    va_end(ap);
    printf("%s %s%s%s\n", ok ? "ok  " : "FAIL", name, detail[0] ? ": " : "", detail);
    fflush(stdout);
    if (ok) passed++;
    else failed++;
}

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static const char *g_device = "sim"; /* --device */

static int gen(const char *target, const char *dir) {
    char cmd[2048];
    snprintf(cmd, sizeof cmd,
             "cd %s && %s/generator/gen specs/v2500.yaml --enable adamw --set v2132.weight_decay=0.1 "
             "--set v2132.beta1=0.9 --set v2132.beta2=0.95 --set v2132.eps=1e-8 "
             "--model tests/fixtures/models/ref-gpt2.yaml --target %s --batch 2 --seq 16 -o %s >/dev/null",
             HYP_SOURCE_DIR, HYP_BINARY_DIR, target, dir);
    return system(cmd);
}

/* max |a-b| and max |ref| */
static void diff(const float *a, const float *ref, long n, double *worst, double *refmax) {
    *worst = 0;
    *refmax = 0;
    for (long i = 0; i < n; i++) {
        double d = fabs((double)a[i] - ref[i]);
        if (!(d <= *worst)) *worst = d; /* NaN counts as the worst */
        if (fabs(ref[i]) > *refmax) *refmax = fabs(ref[i]);
    }
}

static int find_buf(const plan_t *p, const char *name) {
    for (int i = 0; i < p->n_bufs; i++)
        if (!strcmp(p->bufs[i].name, name)) return i;
    return -1;
}

static void batch(hyp_rng *r, exec_t *c, exec_dev *d, int n, int V) {
    for (int i = 0; i < n; i++) {
        c->tokens[i] = d->h_tokens[i] = (int32_t)hyp_rng_below(r, (uint64_t)V);
        c->targets[i] = d->h_targets[i] = (c->tokens[i] * 7 + 3) % V; /* learnable: a function of the token */
    }
    c->targets[3] = d->h_targets[3] = -1; /* an ignored target */
}

/* The device step after backward (train_dev.c's, one rank): norm and clip factor by the
 * global_norm kernels into gnorm[2], AdamW scaled by gnorm[1]; the norm comes back in *norm. */
static int device_step(exec_dev *dx, const train_opts *o, double lr, int t, float *gbuf, double *norm, hyp_err *e) {
    hyp_device *d = dx->dev;
    float *partial = gbuf + 2, h[2] = {0, 0};
    int rc = exec_dev_norm_partial(dx, dx->grads, dx->p->param_floats, partial, e);
    if (!rc) rc = exec_dev_norm_finish(dx, partial, (float)o->max_norm, gbuf, e);
    if (!rc) rc = exec_dev_adamw_own(dx, lr, o->beta1, o->beta2, o->eps, o->weight_decay, t, gbuf + 1, e);
    if (!rc) rc = d->d2h(d, h, gbuf, sizeof h, NULL, e);
    if (!rc) rc = d->stream_synchronize(d, NULL, e);
    *norm = h[0];
    return rc;
}

/* STEPS AdamW steps on both sides from the same initialization and batches; dev_opt: the device
 * side steps on the device (device_step; the norm checked against the host's norm of the
 * downloaded gradients), else on the host with train.h (download gradients, step, upload). */
static int train_steps(exec_t *cx, exec_t *hx, exec_dev *dx, hyp_rng *rng, int dev_opt) {
    const plan_t *pc = cx->p, *ps = hx->p;
    const char *tag = dev_opt ? "norm + AdamW on the device (global_norm, adamw_step)" : "AdamW on the host";
    hyp_err e = {{0}};
    train_opts o;
    train_opts_from_plan(&o, pc);
    o.total_steps = STEPS;
    o.warmup_steps = 2;
    o.lr = 1e-2; /* large enough that the losses move */
    o.max_norm = 1.0; /* the first steps clip */
    float *gbuf = NULL; /* device: norm, clip factor, PARTS partial sums */
    double nrel = 0;
    int clipped = 0;
    size_t pb = sizeof(float) * (size_t)pc->param_floats;
    exec_init_params(cx, 1234);
    memcpy(hx->params, cx->params, pb);
    memset(cx->m, 0, pb);
    memset(cx->v, 0, pb);
    memset(hx->m, 0, pb);
    memset(hx->v, 0, pb);
    int rc = exec_dev_upload_params(dx, hx->params, &e);
    if (!rc && dev_opt) rc = dx->dev->mem_alloc(dx->dev, (void **)&gbuf, sizeof(float) * (2 + (size_t)exec_dev_norm_parts(dx)), &e);
    if (!rc) rc = dx->dev->memset_sync(dx->dev, dx->m, 0, pb, &e);
    if (!rc) rc = dx->dev->memset_sync(dx->dev, dx->v, 0, pb, &e);
    double wrel = 0, t0 = now();
    int wstep = 0, N = ps->B * ps->T;
    float first_c = 0, last_c = 0, last_s = 0;
    for (int s = 1; s <= STEPS && !rc; s++) {
        batch(rng, cx, dx, N, ps->V);
        float dloss = 1.0f / (float)exec_count_targets(cx);
        double lr = train_lr_at(&o, s);
        memset(cx->grads, 0, pb);
        exec_forward(cx);
        float lc = exec_backward(cx, dloss);
        train_adamw_step(cx, &o, lr, s, train_clip_scale(&o, train_grad_norm(cx)));
        float ls = 0;
        rc = exec_dev_zero_grads(dx, &e);
        if (!rc) rc = exec_dev_forward(dx, &e);
        if (!rc) rc = exec_dev_backward(dx, dloss, &ls, &e);
        if (!rc) rc = exec_dev_download_grads(dx, hx->grads, &e);
        if (rc) break;
        double hnorm = train_grad_norm(hx), dnorm = 0;
        float scale = train_clip_scale(&o, hnorm);
        clipped += scale < 1;
        if (dev_opt) {
            rc = device_step(dx, &o, lr, s, gbuf, &dnorm, &e);
            if (!(fabs(dnorm - hnorm) <= nrel * hnorm)) nrel = fabs(dnorm - hnorm) / hnorm;
        } else {
            train_adamw_step(hx, &o, lr, s, scale);
            rc = exec_dev_upload_params(dx, hx->params, &e);
        }
        double rel = fabs((double)ls - lc) / fabs((double)lc);
        if (!(rel <= wrel)) {
            wrel = rel;
            wstep = s;
        }
        if (s == 1) first_c = lc;
        last_c = lc;
        last_s = ls;
        if (s == 1 || s % 5 == 0) printf("     step %2d  loss %s %.7f  cpu %.7f  rel %.2g\n", s, g_device, ls, lc, rel);
    }
    if (dev_opt)
        report(!rc && nrel <= 1e-5 && clipped > 0, "device gradient norm (global_norm kernels) vs the host's",
               "worst relative difference %.3g over %d steps (tolerance 1e-5), %d steps clipped", nrel, STEPS, clipped);
    if (gbuf) dx->dev->mem_free(dx->dev, gbuf, &e);
    char name[128];
    snprintf(name, sizeof name, "%s: losses of %s vs cpu", tag, g_device);
    report(!rc && wrel <= 1e-4, name,
           "%d steps, worst relative difference %.3g at step %d (tolerance 1e-4); loss %.4f -> %.4f (%s %.4f), %.2f s%s%s",
           STEPS, wrel, wstep, first_c, last_c, g_device, last_s, now() - t0, rc ? ": " : "", rc ? e.msg : "");
    if (!rc && dev_opt) rc = exec_dev_download_params(dx, hx->params, &e);
    if (!rc) {
        /* AdamW normalizes each update: an element whose gradient is ~0 on both sides can move by up
         * to lr per step on rounding noise alone, so parameters are compared against 0.1 * lr */
        double worst, refmax;
        diff(hx->params, cx->params, (long)pc->param_floats, &worst, &refmax);
        snprintf(name, sizeof name, "%s: parameters after the steps", tag);
        report(worst <= 0.1 * o.lr, name, "max err %.3g (tolerance 0.1 * lr = %.3g, max |ref| %.3g)", worst, 0.1 * o.lr, refmax);
    }
    return rc;
}

int main(int argc, char **argv) {
    const char *target = "sim";
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--device")) g_device = argv[i + 1];
        else if (!strcmp(argv[i], "--target")) target = argv[i + 1];
    }
    char cache[1024], dsim[256], dcpu[256], path[512];
    snprintf(cache, sizeof cache, "%s/sim-cache", HYP_BINARY_DIR);
    setenv("HYP_SIM_CACHE", cache, 0);
    snprintf(dsim, sizeof dsim, "/tmp/hyp-exec-sim-%d/sim", (int)getpid());
    snprintf(dcpu, sizeof dcpu, "/tmp/hyp-exec-sim-%d/cpu", (int)getpid());
    if (gen(target, dsim) || gen("cpu", dcpu)) {
        report(0, "gen", "gen --target %s / cpu failed", target);
        printf("%d passed, %d failed\n", passed, failed);
        return 1;
    }
    plan_t ps, pc;
    hyp_err e = {{0}};
    snprintf(path, sizeof path, "%s/plan.json", dsim);
    if (plan_load(path, &ps, &e)) {
        report(0, "plan (device)", "%s", e.msg);
        return 1;
    }
    snprintf(path, sizeof path, "%s/plan.json", dcpu);
    if (plan_load(path, &pc, &e)) {
        report(0, "plan (cpu)", "%s", e.msg);
        return 1;
    }
    report(ps.param_floats == pc.param_floats && ps.act_floats == pc.act_floats && ps.n_fwd == pc.n_fwd &&
               ps.n_bwd == pc.n_bwd,
           "plans for sim and cpu have the same layout", "%lld parameter floats, %lld activation floats, %d+%d ops",
           (long long)ps.param_floats, (long long)ps.act_floats, ps.n_fwd, ps.n_bwd);

    hyp_device *dev;
    if (hyp_device_open(g_device, &dev, &e)) {
        report(0, "open the device", "%s", e.msg);
        return 1;
    }
    exec_t cx, hx; /* the CPU executor, and the host mirror of the sim side (init + AdamW) */
    if (exec_init(&cx, &pc, &e) || exec_init(&hx, &ps, &e)) {
        report(0, "exec_init", "%s", e.msg);
        return 1;
    }
    exec_dev dx;
    snprintf(path, sizeof path, "%s/kernels", dsim);
    double t0 = now();
    int rc = exec_dev_init(&dx, &ps, path, dev, &e);
    report(rc == HYP_OK, "exec_dev_init (kernels.json parsed, modules compiled/loaded)", "%s%.2f s, %d launches, %.1f KiB scratch",
           rc ? e.msg : "", now() - t0, rc ? 0 : dx.n_launches, rc ? 0.0 : dx.n_scratch * 4 / 1024.0);
    if (rc) {
        printf("%d passed, %d failed\n", passed, failed);
        return 1;
    }
    exec_init_params(&cx, 1234);
    memcpy(hx.params, cx.params, sizeof(float) * (size_t)pc.param_floats);
    rc = exec_dev_upload_params(&dx, hx.params, &e);
    report(rc == HYP_OK, "upload parameters", "%s", rc ? e.msg : "");

    const int N = ps.B * ps.T, V = ps.V, Vp = ps.Vp;
    hyp_rng rng;
    hyp_rng_seed(&rng, 42);
    batch(&rng, &cx, &dx, N, V);

    /* forward: logits */
    int lb = find_buf(&ps, "logits");
    float *logits = malloc(sizeof(float) * (size_t)N * Vp);
    t0 = now();
    rc = exec_dev_forward(&dx, &e);
    double tf = now() - t0;
    exec_forward(&cx);
    if (!rc) rc = exec_dev_download_buf(&dx, lb, logits, (int64_t)N * Vp, &e);
    double worst, refmax;
    if (!rc) {
        diff(logits, exec_buf(&cx, find_buf(&pc, "logits")), (long)N * Vp, &worst, &refmax);
        double tol = 1e-5 * (refmax > 1 ? refmax : 1);
        report(worst <= tol, "forward: logits", "max err %.3g (tolerance %.3g, max |ref| %.3g), %.2f s on %s", worst, tol,
               refmax, tf, g_device);
    } else {
        report(0, "forward", "%s", e.msg);
    }
    /* loss */
    float ls = 0, lc = exec_eval_loss(&cx);
    if (!rc) rc = exec_dev_eval_loss(&dx, &ls, &e);
    report(!rc && fabsf(ls - lc) <= 1e-5f * fmaxf(1.0f, fabsf(lc)), "eval loss", "%s %.7f cpu %.7f%s%s", g_device, ls, lc,
           rc ? ": " : "", rc ? e.msg : "");

    /* backward: every parameter gradient */
    if (!rc) {
        float dloss = 1.0f / (float)exec_count_targets(&cx);
        memset(cx.grads, 0, sizeof(float) * (size_t)pc.param_floats);
        rc = exec_dev_zero_grads(&dx, &e);
        exec_forward(&cx);
        float lcb = exec_backward(&cx, dloss), lsb = 0;
        t0 = now();
        if (!rc) rc = exec_dev_forward(&dx, &e);
        if (!rc) rc = exec_dev_backward(&dx, dloss, &lsb, &e);
        double tb = now() - t0;
        if (!rc) rc = exec_dev_download_grads(&dx, hx.grads, &e);
        report(!rc && fabsf(lsb - lcb) <= 1e-5f * fmaxf(1.0f, fabsf(lcb)), "backward: fused loss",
               "%s %.7f cpu %.7f, forward+backward %.2f s%s%s", g_device, lsb, lcb, tb, rc ? ": " : "", rc ? e.msg : "");
        if (!rc) {
            int bad = 0;
            double wrel = 0;
            const char *wname = "";
            for (int i = 0; i < ps.n_params_t; i++) {
                const plan_param *pp = &ps.params[i];
                diff(hx.grads + pp->offset, cx.grads + pp->offset, (long)pp->numel, &worst, &refmax);
                double tol = 1e-4 * refmax + 1e-7;
                if (!(worst <= tol)) {
                    bad++;
                    report(0, "gradient", "%s: max err %.3g (tolerance %.3g, max |ref| %.3g)", pp->name, worst, tol, refmax);
                }
                double rel = worst / (refmax > 0 ? refmax : 1);
                if (!(rel <= wrel)) {
                    wrel = rel;
                    wname = pp->name;
                }
            }
            report(bad == 0, "backward: every parameter gradient", "%d tensors, worst max err / max |ref| %.3g (%s)",
                   ps.n_params_t, wrel, wname);
        }
    }

    /* N AdamW steps: first with the optimizer on the host for both sides, then with the device's
     * adamw_step kernel on the sim side */
    if (!rc) rc = train_steps(&cx, &hx, &dx, &rng, 0);
    if (!rc) rc = train_steps(&cx, &hx, &dx, &rng, 1);

    exec_dev_free(&dx);
    exec_free(&cx);
    exec_free(&hx);
    dev->close(dev);
    plan_free(&ps);
    plan_free(&pc);
    free(logits);
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf /tmp/hyp-exec-sim-%d", (int)getpid());
    if (system(cmd)) {}
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
