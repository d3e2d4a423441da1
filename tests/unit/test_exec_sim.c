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
 * Then v2160 FP8 (fp8_cases below, GPT-2 with delayed and Llama with current scaling): the plan's
 * fp8 GEMMs, the same plan fake-quantized (its weight casts stripped of C: the evaluator's
 * default), and the cpu executor over 8 steps, with the device scales, the fp8 bytes the cast
 * kernels write and every fp8 GEMM checked against host computations.
 * Then ZeRO-3 on the device for one rank (zero3_case): exec_dev_init_z3 over a host mirror
 * without activations (exec_init_mirror) against exec.c's stage 3 on the CPU — logits, and the
 * gradient shard after backward (every group reduced into it as its backward ends), with the
 * tolerances below; stage 3 without a host layout is refused (HYP_EINPUT).
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
 * Derivations (docs/test-tolerances.md): logits and loss are E2 (a chain of ~1,000 fp32 roundings
 * behind a logit of these small models: rms sqrt(2/3) u sqrt(1000) = 1.5e-6 of the scale; 1e-5 is
 * ~7 sigma, and the loss's token mean only averages it down). A gradient sums N*C products per
 * element on top of that chain (scale-normalized per tensor, so cancelling elements are judged
 * against the tensor's scale): ~3x the logits' chain, 1e-4 keeps > 20 sigma. Losses of N steps:
 * E2 + E3 (AdamW sign flips of near-zero coordinates, lr 1e-2 here: <= 2e-5 per step over <= 5
 * steps) <= 1e-4. Parameters: a coordinate whose exact gradient is ~0 moves by lr n/(|n| + eps) of
 * its rounding noise n on either side, 0.1 lr bounds that while n < eps/10 = 1e-9 (E3; n ~ u times
 * the gradient's scale, < 1e-10 here). The device norm: 512 fixed fp32 partials (tree depth <= 8)
 * then double: (K_thread + 8) u <= 1e-6 deterministically. Each bound is >= 100x below what a
 * missing term, token or rank does (a wrong op is off by O(1) of the scale).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "coll.h"
#include "device.h"
#include "exec.h"
#include "exec_dev.h"
#include "op_registry.h"
#include "plan.h"
#include "rng.h"
#include "train.h"

#define STEPS 20

/* the one harness (hyp_test.h) under this file's names */
#include "hyp_test.h"
#define report check
#define passed g_pass
#define failed g_fail

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static const char *g_device = "sim", *g_target = "sim"; /* --device, --target */

static int gen(const char *target, const char *dir, const char *extra, const char *model) {
    char cmd[2048];
    snprintf(cmd, sizeof cmd,
             "cd %s && %s/generator/gen specs/v2500.yaml --enable adamw%s --set v2132.weight_decay=0.1 "
             "--set v2132.beta1=0.9 --set v2132.beta2=0.95 --set v2132.eps=1e-8 "
             "--model tests/fixtures/models/%s.yaml --target %s --batch 2 --seq 16 -o %s >/dev/null",
             HYP_SOURCE_DIR, HYP_BINARY_DIR, extra, model, target, dir);
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
    hyp_optim_step a = {lr, t, 1.0f, 0, 0};
    if (!rc) rc = hyp_optim_find("adamw")->step_device(&dx->p->optim, dx, &a, gbuf + 1, e);
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
    for (int k = 0; k < cx->n_state; k++) memset(cx->state[k], 0, pb), memset(hx->state[k], 0, pb);
    int rc = exec_dev_upload_params(dx, hx->params, &e);
    if (!rc && dev_opt) rc = dx->dev->mem_alloc(dx->dev, (void **)&gbuf, sizeof(float) * (2 + (size_t)exec_dev_norm_parts(dx)), &e);
    for (int k = 0; k < dx->n_state && !rc; k++) rc = dx->dev->memset_sync(dx->dev, dx->state[k], 0, pb, &e);
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
        train_optim_own(cx, hyp_optim_find("adamw"), lr, s, train_clip_scale(&o, train_grad_norm(cx)));
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
            train_optim_own(hx, hyp_optim_find("adamw"), lr, s, scale);
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

/* v2160 on the device executor, for the GPT-2 fixture with delayed scaling and the Llama fixture
 * (RMSNorm, RoPE, QK-norm, GQA, SwiGLU) with current scaling: the plan's fp8 GEMMs (fp8.gemm
 * "fp8": TN GEMMs of fp8 bytes), the same plan fake-quantized (fp8_gemm cleared: fp32 copies of
 * the fp8 values, fp32 GEMMs, and its weight casts stripped of C: the evaluator's default), and
 * the cpu executor (runtime/fp8.c), FP8_STEPS steps with AdamW on the host for all three (the
 * adamw_step kernel differs from train.h in the last bit). Checks and tolerances:
 *   steps 1 and 2 (scales 1, then from the first amax): every fp8_quantize op's device scale and
 *     its q (as stored) and qt (transposed) bytes equal the host's (hyp_fp8_cast of its input with
 *     the slot's delayed scale, or hyp_fp8_scale_current of the input's amax), bit for bit
 *     (needs activation buffers not shared by the memory plan: checked);
 *   step 2: every fp8 GEMM's output (forward y, dgrad dx, wgrad dW) against a double-precision
 *     product of the fake-quantized fp32 copies of its operands: |a-b| <= 1e-5 * sum |terms|
 *     (fp32 rounding of the result and of scale_inv_a * scale_inv_b);
 *   losses over the steps: |a-b| <= 5e-3 |ref|, each pair. Not tighter: a last-bit difference of
 *     a GEMM or kernel (summation orders differ, oneDNN on the cpu) can flip one rounding of a
 *     later fp8 operand, moving that element by up to 1/8 (E4M3) or 1/4 (E5M2) of itself, and with
 *     current scaling it moves the scale of a whole tensor. Bound (docs/test-tolerances.md E5):
 *     an E1 difference of ~1e-6 relative flips a fraction p ~ 1e-6 / 2^-4 = 1.6e-5 of the E4M3
 *     roundings (E5M2: 8e-6), each moving its element by 2^-3; a GEMM output's rms change is
 *     2^-3 sqrt(p) = 5e-4; a chain of ~12 fp8 GEMMs multiplies it by <= sqrt(12), the loss's mean
 *     over >= 64 tokens divides it by >= 8, and 8 steps adding linearly give <= 1.8e-3 < 5e-3 (a scale moved by an amax's last bit shifts the grid by u and
 *     flips the same fraction p). A wrong scale_inv or a transposed operand is off by O(1). */
#define FP8_STEPS 8
typedef struct {
    exec_dev d;
    plan_t p;
    exec_t h; /* host mirror (initialization, downloaded gradients for the clip norm, AdamW) */
} fp8_side;

static float *dl(fp8_side *s, int buf, long n) {
    hyp_err e = {{0}};
    float *h = malloc(sizeof(float) * (size_t)(n > 0 ? n : 1));
    if (h && buf >= 0 && exec_dev_download_buf(&s->d, buf, h, n, &e)) {
        free(h);
        return NULL;
    }
    return h;
}

/* Every fp8_quantize op of list: its device scale and q / qt bytes against the host's. */
static int check_fp8_bytes(fp8_side *s, const plan_op *list, int n, int *checked) {
    hyp_err e = {{0}};
    int bad = 0, N = s->d.B * s->d.T;
    for (int i = 0; i < n && !bad; i++) {
        const plan_op *o = &list[i];
        if (o->op != hyp_op_find("fp8_quantize")) continue;
        long rows = o->n == DIM_N ? N : (long)o->n, cols = o->C ? (long)o->C : 1, cnt = rows * cols;
        float *in = dl(s, o->in[0], cnt), scale = 0;
        uint8_t *q = malloc((size_t)cnt * 3), *qt = q + cnt, *ref = q + 2 * cnt;
        const hyp_fp8_state *st = &s->d.fp8[o->slot];
        if (!in || s->d.dev->d2h_sync(s->d.dev, q, s->d.fp8_q[o->slot], (size_t)cnt, &e) ||
            s->d.dev->d2h_sync(s->d.dev, qt, s->d.fp8_qt[o->slot], (size_t)cnt, &e) ||
            s->d.dev->d2h_sync(s->d.dev, &scale, s->d.fp8_scale + o->slot, sizeof scale, &e)) {
            bad = 1;
        } else {
            float want = s->p.fp8_current ? hyp_fp8_scale_current(hyp_fp8_amax(in, cnt), hyp_fp8_max(st->fmt),
                                                                  (float)s->p.fp8_margin, 0)
                                          : st->scale;
            bad = scale != want;
            hyp_fp8_cast(ref, in, cnt, want, st->fmt, NULL);
            for (long r = 0; r < rows && !bad; r++)
                for (long c = 0; c < cols && !bad; c++)
                    bad = q[r * cols + c] != ref[r * cols + c] || qt[c * rows + r] != ref[r * cols + c];
            (*checked)++;
        }
        free(in);
        free(q);
    }
    return bad;
}

/* out[r][c] vs bias[c] + sum_k a[r*sar + k*sak] * b[c*sbc + k*sbk] (k < K; bias may be NULL):
 * worst |diff| / sum |terms|. */
static double gemm_err(const float *out, long R, long Cn, long K, const float *a, long sar, long sak, const float *b,
                       long sbc, long sbk, const float *bias) {
    double worst = 0;
    for (long r = 0; r < R; r++)
        for (long c = 0; c < Cn; c++) {
            double acc = bias ? bias[c] : 0, mag = 1e-30 + fabs(acc);
            for (long k = 0; k < K; k++) {
                double t = (double)a[r * sar + k * sak] * b[c * sbc + k * sbk];
                acc += t;
                mag += fabs(t);
            }
            double d = fabs(out[r * Cn + c] - acc) / mag;
            if (!(d <= worst)) worst = d;
        }
    return worst;
}

/* After a forward + backward: every GEMM the executor runs in fp8 (its inputs are fp8 slots, the
 * dims multiples of 16) against the product of the fake-quantized fp32 copies of its operands. */
static int check_fp8_gemms(fp8_side *s, double *worst) {
    const plan_t *p = &s->p;
    long N = (long)s->d.B * s->d.T;
    int n = 0;
    for (int pass = 0; pass < 2; pass++)
        for (int i = 0; i < (pass ? p->n_bwd : p->n_fwd); i++) {
            const plan_op *o = pass ? &p->bwd[i] : &p->fwd[i];
            long IC = (long)o->IC, OC = (long)o->OC;
            if (o->op != hyp_op_find(pass ? "matmul_bwd" : "matmul_fwd") || s->d.fp8_slot_of[o->in[0]] < 0 || IC % 16 ||
                OC % 16 || N % 16)
                continue;
            double e1 = 0, e2 = 0;
            if (!pass) { /* y[N][OC] = x[N][IC] W[OC][IC]^T + b */
                float *x = dl(s, o->in[0], N * IC), *w = dl(s, o->in[1], OC * IC), *y = dl(s, o->out[0], N * OC);
                float *b = o->in[2] >= 0 ? dl(s, o->in[2], OC) : NULL;
                e1 = x && w && y && (b || o->in[2] < 0) ? gemm_err(y, N, OC, IC, x, IC, 1, w, IC, 1, b) : 1;
                free(x), free(w), free(y), free(b);
            } else { /* dx[N][IC] = dy[N][OC] W[OC][IC]; dW[OC][IC] = dy^T x */
                float *dy = dl(s, o->in[0], N * OC), *x = dl(s, o->in[1], N * IC), *w = dl(s, o->in[2], OC * IC);
                float *dx = dl(s, o->out[0], N * IC), *dw = malloc(sizeof(float) * (size_t)(OC * IC));
                hyp_err e = {{0}};
                int ok = dy && x && w && dx && dw && o->out[1] >= 0 &&
                         !s->d.dev->d2h_sync(s->d.dev, dw, (float *)s->d.grads + p->bufs[o->out[1]].offset,
                                             sizeof(float) * (size_t)(OC * IC), &e);
                e1 = ok ? gemm_err(dx, N, IC, OC, dy, OC, 1, w, 1, IC, NULL) : 1;
                e2 = ok ? gemm_err(dw, OC, IC, N, dy, 1, OC, x, 1, IC, NULL) : 1;
                free(dy), free(x), free(w), free(dx), free(dw);
            }
            if (e1 > *worst) *worst = e1;
            if (e2 > *worst) *worst = e2;
            n += pass ? 2 : 1;
        }
    return n;
}

static void fp8_cases(hyp_device *dev, const char *model, const char *scaling) {
    char dsim[256], dcpu[256], path[512], kdir[512], extra[128], tag[160], name[256];
    snprintf(tag, sizeof tag, "fp8 (%s, %s scaling)", model, scaling);
    /* under the build tree: the sim cache keys modules by source and path, so reruns compile nothing */
    snprintf(dsim, sizeof dsim, "%s/tests/exec_sim_fp8/%s", HYP_BINARY_DIR, model);
    snprintf(dcpu, sizeof dcpu, "/tmp/hyp-exec-sim-%d/cpu8-%s", (int)getpid(), model);
    snprintf(kdir, sizeof kdir, "%s/kernels", dsim);
    snprintf(extra, sizeof extra, ",fp8 --set v2160.scaling=%s", scaling);
    if (gen(g_target, dsim, extra, model) || gen("cpu", dcpu, extra, model)) {
        report(0, tag, "gen --target sim / cpu failed");
        return;
    }
    hyp_err e = {{0}};
    plan_t pc;
    static fp8_side S[2]; /* [0] fp8 GEMMs as planned, [1] the same plan fake-quantized */
    memset(S, 0, sizeof S);
    snprintf(path, sizeof path, "%s/plan.json", dcpu);
    int rc = plan_load(path, &pc, &e);
    snprintf(path, sizeof path, "%s/plan.json", dsim);
    for (int k = 0; k < 2 && !rc; k++) rc = plan_load(path, &S[k].p, &e);
    if (rc) {
        report(0, tag, "%s", e.msg);
        return;
    }
    snprintf(name, sizeof name, "%s: the sim plan asks for fp8 GEMMs, the cpu plan fake-quantizes", tag);
    report(S[0].p.fp8_gemm && !pc.fp8_gemm && S[0].p.fp8_slots == pc.fp8_slots && S[0].p.act_floats == S[0].p.act_floats_unplanned,
           name, "%d slots each; activation buffers unshared (%lld floats)", pc.fp8_slots, (long long)S[0].p.act_floats);
    S[1].p.fp8_gemm = 0;
    /* and its weight casts without C (n = OC*IC, as plan.c reads an absent C as 1): the executor's
     * expressions ("n*C") must take the same default */
    int noc = 0;
    for (int i = 0; i < S[1].p.n_fwd; i++) {
        plan_op *q = &S[1].p.fwd[i];
        if (q->op == hyp_op_find("fp8_quantize") && q->n > 0) {
            q->n *= q->C;
            q->C = 0;
            noc++;
        }
    }
    exec_t cx;
    rc = exec_init(&cx, &pc, &e);
    for (int k = 0; k < 2 && !rc; k++)
        if (!(rc = exec_init(&S[k].h, &S[k].p, &e))) rc = exec_dev_init(&S[k].d, &S[k].p, kdir, dev, &e);
    if (rc) {
        report(0, tag, "executors: %s", e.msg);
        return;
    }
    train_opts o;
    train_opts_from_plan(&o, &pc);
    o.total_steps = FP8_STEPS;
    o.lr = 1e-2;
    size_t pb = sizeof(float) * (size_t)pc.param_floats;
    exec_init_params(&cx, 99);
    for (int j = 0; j < cx.n_state; j++) memset(cx.state[j], 0, pb);
    for (int k = 0; k < 2 && !rc; k++) {
        memcpy(S[k].h.params, cx.params, pb);
        for (int j = 0; j < S[k].h.n_state; j++) memset(S[k].h.state[j], 0, pb);
        rc = exec_dev_upload_params(&S[k].d, cx.params, &e);
    }
    hyp_rng rng;
    hyp_rng_seed(&rng, 7);
    const int N = pc.B * pc.T;
    double w[3] = {0, 0, 0}, gerr = 0; /* worst relative loss difference: fp8 vs cpu, fake vs cpu, fp8 vs fake */
    float first = 0, last = 0;
    int checked = 0, bytes_bad = 0, ngemm = 0;
    double t0 = now();
    for (int st = 1; st <= FP8_STEPS && !rc; st++) {
        for (int i = 0; i < N; i++) {
            cx.tokens[i] = (int32_t)hyp_rng_below(&rng, (uint64_t)pc.V);
            cx.targets[i] = (cx.tokens[i] * 7 + 3) % pc.V;
        }
        float dloss = 1.0f / (float)exec_count_targets(&cx), l[3];
        double lr = train_lr_at(&o, st);
        memset(cx.grads, 0, pb);
        exec_forward(&cx);
        l[0] = exec_backward(&cx, dloss);
        train_optim_own(&cx, hyp_optim_find("adamw"), lr, st, train_clip_scale(&o, train_grad_norm(&cx)));
        exec_fp8_step(&cx);
        for (int k = 0; k < 2 && !rc; k++) {
            fp8_side *s = &S[k];
            int chk = k == 0 && st <= 2;
            memcpy(s->d.h_tokens, cx.tokens, sizeof(int32_t) * (size_t)N);
            memcpy(s->d.h_targets, cx.targets, sizeof(int32_t) * (size_t)N);
            rc = exec_dev_zero_grads(&s->d, &e);
            if (!rc) rc = exec_dev_forward(&s->d, &e);
            if (!rc && chk) bytes_bad += check_fp8_bytes(s, s->p.fwd, s->p.n_fwd, &checked);
            if (!rc) rc = exec_dev_backward(&s->d, dloss, &l[k + 1], &e);
            if (!rc && chk) bytes_bad += check_fp8_bytes(s, s->p.bwd, s->p.n_bwd, &checked);
            if (!rc && k == 0 && st == 2) ngemm = check_fp8_gemms(s, &gerr);
            if (!rc) rc = exec_dev_download_grads(&s->d, s->h.grads, &e);
            if (!rc) { /* AdamW on the host mirror, as on the cpu side */
                train_optim_own(&s->h, hyp_optim_find("adamw"), lr, st, train_clip_scale(&o, train_grad_norm(&s->h)));
                rc = exec_dev_upload_params(&s->d, s->h.params, &e);
            }
            if (!rc) rc = exec_dev_fp8_step(&s->d, &e);
        }
        if (rc) break;
        const float pair[3][2] = {{l[1], l[0]}, {l[2], l[0]}, {l[1], l[2]}};
        for (int k = 0; k < 3; k++) {
            double r = fabs((double)pair[k][0] - pair[k][1]) / fabs((double)pair[k][1]);
            if (!(r <= w[k])) w[k] = r;
        }
        if (st == 1) first = l[0];
        last = l[0];
        if (st == 1 || st % 4 == 0) printf("     step %2d  loss fp8-gemm %.7f  fake-quant %.7f  cpu %.7f\n", st, l[1], l[2], l[0]);
    }
    snprintf(name, sizeof name, "%s: device scales, q and transposed qt bytes of every quantized operand = host", tag);
    report(!rc && checked > 0 && !bytes_bad, name, "%d operand casts checked (steps 1, 2), %d differ%s%s", checked, bytes_bad,
           rc ? ": " : "", rc ? e.msg : "");
    snprintf(name, sizeof name, "%s: fp8 GEMMs = products of the fake-quantized operands", tag);
    report(!rc && ngemm > 0 && gerr <= 1e-5, name, "%d GEMMs (forward, dgrad, wgrad) at step 2, worst |diff| / sum |terms| %.3g (tolerance 1e-5)",
           ngemm, gerr);
    snprintf(name, sizeof name, "%s: losses, sim fp8 GEMMs / sim fake-quantized (weight casts without C) / cpu", tag);
    report(!rc && w[0] <= 5e-3 && w[1] <= 5e-3 && w[2] <= 5e-3 && noc > 0, name,
           "%d steps, loss %.4f -> %.4f; worst relative differences fp8-gemm vs cpu %.3g, fake vs cpu %.3g, fp8-gemm vs fake %.3g (tolerance 5e-3), %.2f s",
           FP8_STEPS, first, last, w[0], w[1], w[2], now() - t0);
    for (int k = 0; k < 2; k++) {
        exec_dev_free(&S[k].d);
        exec_free(&S[k].h);
        plan_free(&S[k].p);
    }
    exec_free(&cx);
    plan_free(&pc);
}

/* See the header: ZeRO-3 on the device, one rank, against exec.c's stage 3. */
static void zero3_case(hyp_device *dev, const plan_t *ps, const plan_t *pc, const char *kdir, hyp_coll *coll) {
    hyp_err e = {{0}};
    exec_dev dz;
    int rc = exec_dev_init_dp(&dz, ps, kdir, dev, 1, 0, 3, &e);
    report(rc == HYP_EINPUT, "zero3: exec_dev_init_dp at stage 3 without a host layout is refused", "%s", e.msg);
    exec_t hm, cz;
    if ((rc = exec_init_mirror(&hm, ps, coll, 3, &e)) || (rc = exec_init_dp(&cz, pc, coll, 3, &e))) {
        report(0, "zero3: exec_init_mirror / exec_init_dp stage 3", "%s", e.msg);
        return;
    }
    report(!hm.acts && hm.bytes_acts == 0 && cz.acts, "zero3: the host mirror has no activation arena",
           "mirror %zu B, executor %zu B", hm.bytes, cz.bytes);
    exec_init_params(&hm, 1234);
    exec_init_params(&cz, 1234);
    if ((rc = exec_dev_init_z3(&dz, ps, kdir, dev, &hm.z3->L, &e)) ||
        (rc = dev->h2d_sync(dev, dz.params, hm.params, sizeof(float) * (size_t)hm.shard, &e))) {
        report(0, "zero3: exec_dev_init_z3", "%s", e.msg);
        exec_free(&hm), exec_free(&cz);
        return;
    }
    const hyp_z3_layout *L = dz.z3->lay;
    report(dz.shard == hm.shard && dz.bytes_params == 4 * (size_t)(dz.shard + L->n_slots * L->slot_cap) &&
               dz.bytes_grad_workspace == 4 * (size_t)L->slot_cap && dz.bytes_grads == 4 * (size_t)dz.shard,
           "zero3: device params = shard + slots, grads = shard + one-group workspace",
           "params %zu B (%d slots), workspace %zu B, %d groups", dz.bytes_params, L->n_slots, dz.bytes_grad_workspace,
           L->n_groups);
    float one[1];
    rc = exec_dev_upload_params(&dz, one, &e);
    report(rc == HYP_EINPUT, "zero3: whole-arena parameter copies are refused", "%s", e.msg);
    hyp_rng rng;
    hyp_rng_seed(&rng, 7);
    int N = ps->B * ps->T;
    batch(&rng, &cz, &dz, N, ps->V);
    int lb = find_buf(ps, "logits");
    float *got = malloc(sizeof(float) * (size_t)(N * ps->Vp > hm.shard ? N * ps->Vp : hm.shard));
    double worst, refmax;
    exec_forward(&cz);
    if (!(rc = exec_dev_forward(&dz, &e))) rc = exec_dev_download_buf(&dz, lb, got, (int64_t)N * ps->Vp, &e);
    if (!rc) diff(got, exec_buf(&cz, find_buf(pc, "logits")), (long)N * ps->Vp, &worst, &refmax);
    report(!rc && worst <= 1e-5 * (refmax > 1 ? refmax : 1), "zero3: forward through per-group gathers: logits",
           "max err %.3g, max |ref| %.3g%s", rc ? 0 : worst, rc ? 0 : refmax, rc ? e.msg : "");
    float dloss = 1.0f / (float)exec_count_targets(&cz), lsb = 0;
    memset(cz.gshard, 0, sizeof(float) * (size_t)cz.shard);
    exec_forward(&cz);
    float lcb = exec_backward(&cz, dloss);
    if (!rc) rc = exec_dev_zero_grads(&dz, &e);
    if (!rc) rc = exec_dev_forward(&dz, &e);
    if (!rc) rc = exec_dev_backward(&dz, dloss, &lsb, &e);
    if (!rc) rc = dev->d2h_sync(dev, got, dz.gshard, sizeof(float) * (size_t)dz.shard, &e);
    if (!rc) diff(got, cz.gshard, (long)cz.shard, &worst, &refmax);
    report(!rc && fabsf(lsb - lcb) <= 1e-5f * fmaxf(1.0f, fabsf(lcb)) && worst <= 1e-4 * refmax + 1e-7,
           "zero3: backward: the gradient shard", "loss %.7f cpu %.7f, max err %.3g (tolerance %.3g)%s", lsb, lcb,
           rc ? 0 : worst, rc ? 0 : 1e-4 * refmax + 1e-7, rc ? e.msg : "");
    free(got);
    exec_dev_free(&dz);
    exec_free(&hm);
    exec_free(&cz);
}

int main(int argc, char **argv) {
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--device")) g_device = argv[i + 1];
        else if (!strcmp(argv[i], "--target")) g_target = argv[i + 1];
    }
    char cache[1024], dsim[256], dcpu[256], path[512];
    snprintf(cache, sizeof cache, "%s/sim-cache", HYP_BINARY_DIR);
    setenv("HYP_SIM_CACHE", cache, 0);
    snprintf(dsim, sizeof dsim, "/tmp/hyp-exec-sim-%d/sim", (int)getpid());
    snprintf(dcpu, sizeof dcpu, "/tmp/hyp-exec-sim-%d/cpu", (int)getpid());
    if (gen(g_target, dsim, "", "ref-gpt2") || gen("cpu", dcpu, "", "ref-gpt2")) {
        report(0, "gen", "gen --target %s / cpu failed", g_target);
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
    if (!rc) fp8_cases(dev, "ref-gpt2", "delayed");
    if (!rc) fp8_cases(dev, "ref-llama", "current");
    hyp_coll *coll = NULL;
    if (!rc && hyp_coll_init(&argc, &argv, &coll, &e) != HYP_OK) report(0, "zero3: one-rank communicator", "%s", e.msg);
    if (!rc && coll) {
        snprintf(path, sizeof path, "%s/kernels", dsim);
        zero3_case(dev, &ps, &pc, path, coll);
        hyp_coll_finalize(coll);
    }

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
