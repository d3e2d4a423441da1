/* test_packing_v2126.c — v2126 sequence packing with document masking, measured on the whole cpu
 * trainer step (plans from the real `gen --enable packing`, the executor of runtime/cpu):
 *
 *   1. ops: the flash op's mask hook against the naive op's (forward out, backward dqkv) on
 *      random rows of several documents (B=2, T=200 over four 64-key tiles, GQA 4:2, hd 16 and
 *      hd 8), and both against plain causal attention run on each document alone.
 *   2. a packed row's loss = the token-weighted losses of its documents run alone: each document
 *      of a 160-token row (lengths 37, 70, 53: three flash tiles, the last query tile skips key
 *      tile 0) run as its own batch of its own length; per-token losses compared, and the mean.
 *   3. backward: the packed row's parameter gradients = the sum of the documents' gradients run
 *      alone (same loss scale) — every tensor, wpe and RoPE positions included.
 *   4. no gradient crosses a document: with only document k's targets counted, the gradient of
 *      the loss with respect to the embedding output of every other document's tokens is exactly
 *      0 (and non-zero inside k); the same trainer without packing is checked to leak (so the
 *      check can fail).
 * For gpt2 (learned positions) and llama (RoPE, GQA, QK-norm), naive and flash attention.
 *   5. the same 2-4 on the "sim" device (gen --target sim: the CUDA templates' mask hook in
 *      flash_attention and attention_naive, positions in rope and embedding, run by the
 *      simulator), and the sim packed row's per-token losses against the cpu trainer's.
 *
 * Tolerances (fp32; the packed and the alone runs do the same arithmetic per token except the
 * GEMMs' blocking over a different number of rows and the masked terms added as exact zeros):
 *   per-token losses, mean loss     |a-b| <= 2e-6 * max(1, |ref|)
 *   gradients                       max|a-b| <= 2e-5 * max|ref| + 1e-9 per tensor
 * Derivation (docs/test-tolerances.md E1, E2), for orders that differ entirely (oneDNN may pick
 * another kernel for another row count): a logit of these models (C 32, 2 layers, V 64) sits behind
 * ~700 fp32 roundings, rms difference sqrt(2/3) u sqrt(700) = 1.3e-6 of |z| (~0.5), i.e. 1.6e-7 of
 * a token's loss of ~4.2: 2e-6 is 12 sigma. A gradient element adds the backward's chain and a sum
 * over T tokens (~3x the roundings: 2.4e-6 of the scale), and a tensor's max over ~10^4 elements
 * needs > 4.5 sigma: 6 sigma = 1.5e-5 <= 2e-5. A leak across documents or a position that does
 * not restart moves losses by >= 1e-2 (printed below: 0.07 .. 0.8 of the gradient).
 *   flash vs naive op               max|a-b| <= 2e-5 * max(1, max|ref|)
 *   cross-document gradient         exactly 0
 *   sim (flash: bf16x3 mma, ~2^-16 per product; naive: fp32 SIMT): per-token losses 2e-5
 *   relative (alone and vs cpu), gradients 1e-4 * max|ref| + 1e-8 per tensor
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "device.h"
#include "exec.h"
#include "exec_dev.h"
#include "ops_cpu.h"
#include "ops_flash.h"
#include "plan.h"
#include "rng.h"

#include "hyp_test.h"
#include "hyp_test_trainer.h"

#define T_ROW 160
static const int DOC_LEN[] = {37, 70, 53};
#define N_DOCS 3

static char g_tmp[256];

static int gen(const char *dir, const char *model, const char *sel) {
    char cmd[2048];
    snprintf(cmd, sizeof cmd,
             "cd %s && %s/generator/gen specs/v2500.yaml --enable adamw%s --model tests/fixtures/models/%s.yaml "
             "--target cpu --batch 1 --seq %d -o %s >/dev/null 2>&1",
             HYP_SOURCE_DIR, HYP_BINARY_DIR, sel, model, T_ROW, dir);
    return system(cmd);
}

static double max_abs_diff(const float *a, const float *b, long n, double *refmax) {
    double w = 0, m = 0;
    for (long i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]);
        if (d > w) w = d;
        if (fabs(b[i]) > m) m = fabs(b[i]);
    }
    if (refmax) *refmax = m;
    return w;
}

/* ---- 1. the ops ------------------------------------------------------------------------- */

static void op_case(int hd, int NH, int NKV) {
    const int B = 2, T = 200;
    const int starts[2][5] = {{0, 30, 95, 96, 150}, {0, 130, -1, -1, -1}}; /* row 1: 2 docs */
    int R = (NH + 2 * NKV) * hd, OC = NH * hd;
    long nq = (long)B * T * R, no = (long)B * T * OC;
    float *qkv = malloc(sizeof(float) * nq), *dout = malloc(sizeof(float) * no);
    float *out_n = malloc(sizeof(float) * no), *out_f = malloc(sizeof(float) * no);
    float *att = malloc(sizeof(float) * (size_t)B * NH * T * T), *datt = malloc(sizeof(float) * (size_t)B * NH * T * T);
    float *lse = malloc(sizeof(float) * B * NH * T), *scr = malloc(sizeof(float) * B * NH * T);
    float *dq_n = calloc((size_t)nq, sizeof(float)), *dq_f = calloc((size_t)nq, sizeof(float));
    int32_t *pos = malloc(sizeof(int32_t) * B * T);
    hyp_rng r;
    hyp_rng_seed2(&r, 7, (uint64_t)hd);
    for (long i = 0; i < nq; i++) qkv[i] = (float)(hyp_rng_uniform(&r) * 2 - 1);
    for (long i = 0; i < no; i++) dout[i] = (float)(hyp_rng_uniform(&r) * 2 - 1);
    for (int b = 0; b < B; b++) {
        int cur = 0;
        for (int t = 0; t < T; t++) {
            for (int k = 0; k < 5; k++)
                if (starts[b][k] == t) cur = t;
            pos[b * T + t] = t - cur;
        }
    }
    op_attention_fwd_doc(out_n, att, qkv, pos, B, T, NH, NKV, hd, 0.0f);
    op_attention_bwd_doc(dq_n, datt, dout, qkv, att, pos, B, T, NH, NKV, hd, 0.0f);
    op_flash_attention_fwd_doc(out_f, lse, qkv, pos, B, T, NH, NKV, hd, 0.0f);
    op_flash_attention_bwd_doc(dq_f, scr, dout, qkv, out_f, lse, pos, B, T, NH, NKV, hd, 0.0f);
    double rm, w = max_abs_diff(out_f, out_n, no, &rm);
    check(w <= 2e-5 * fmax(1, rm), "test_v2126_flash_doc_fwd_vs_naive_doc", "hd %d NH %d NKV %d: max err %.3g", hd, NH, NKV, w);
    w = max_abs_diff(dq_f, dq_n, nq, &rm);
    check(w <= 2e-5 * fmax(1, rm), "test_v2126_flash_doc_bwd_vs_naive_doc", "hd %d: max err %.3g (max |ref| %.3g)", hd, w, rm);
    /* each document alone through the plain causal op: the reference of both */
    double wf = 0, wb = 0;
    for (int b = 0; b < B; b++)
        for (int k = 0; k < 5 && starts[b][k] >= 0; k++) {
            int s = starts[b][k], e = k + 1 < 5 && starts[b][k + 1] >= 0 ? starts[b][k + 1] : T, L = e - s;
            float *q1 = malloc(sizeof(float) * L * R), *o1 = malloc(sizeof(float) * L * OC), *d1 = malloc(sizeof(float) * L * OC);
            float *a1 = malloc(sizeof(float) * NH * L * L), *da1 = malloc(sizeof(float) * NH * L * L);
            float *g1 = calloc((size_t)L * R, sizeof(float));
            memcpy(q1, qkv + ((long)b * T + s) * R, sizeof(float) * L * R);
            memcpy(d1, dout + ((long)b * T + s) * OC, sizeof(float) * L * OC);
            op_attention_fwd(o1, a1, q1, 1, L, NH, NKV, hd);
            op_attention_bwd(g1, da1, d1, q1, a1, 1, L, NH, NKV, hd);
            wf = fmax(wf, max_abs_diff(out_f + ((long)b * T + s) * OC, o1, (long)L * OC, NULL));
            wb = fmax(wb, max_abs_diff(dq_f + ((long)b * T + s) * R, g1, (long)L * R, NULL));
            free(q1), free(o1), free(d1), free(a1), free(da1), free(g1);
        }
    check(wf <= 2e-5 && wb <= 2e-5, "test_v2126_flash_doc_equals_documents_alone", "hd %d: out %.3g, dqkv %.3g", hd, wf, wb);
    free(qkv), free(dout), free(out_n), free(out_f), free(att), free(datt), free(lse), free(scr), free(dq_n), free(dq_f), free(pos);
}

/* ---- 2-4. the trainer step ----------------------------------------------------------------- */

static int open_trainer(trainer *tr, const char *model, const char *sel, const char *tag) {
    char dir[512];
    snprintf(dir, sizeof dir, "%s/%s", g_tmp, tag);
    memset(tr, 0, sizeof *tr);
    if (gen(dir, model, sel) != 0) {
        check(0, "gen", "%s %s failed", model, sel);
        return 0;
    }
    return trainer_load(tr, dir);
}

/* The packed row: documents of DOC_LEN, tokens random < V, target = the next token of the
 * stream (the last token's target is a fresh one, as a window's T+1-th token). */
static void make_row(int32_t *tok, int32_t *tgt, int32_t *pos, int V) {
    hyp_rng r;
    hyp_rng_seed2(&r, 99, 1);
    int32_t stream[T_ROW + 1];
    for (int t = 0; t <= T_ROW; t++) stream[t] = (int32_t)hyp_rng_below(&r, (uint64_t)V);
    int t = 0;
    for (int d = 0; d < N_DOCS; d++)
        for (int i = 0; i < DOC_LEN[d]; i++, t++) pos[t] = i;
    for (t = 0; t < T_ROW; t++) {
        tok[t] = stream[t];
        tgt[t] = stream[t + 1];
    }
}

static void step_case(const char *model, const char *sel, const char *tag) {
    trainer tr;
    if (!open_trainer(&tr, model, sel, tag)) return;
    exec_t *x = &tr.x;
    const plan_t *p = &tr.p;
    hyp_err e;
    char name[160];
    int32_t tok[T_ROW], tgt[T_ROW], pos[T_ROW];
    make_row(tok, tgt, pos, p->V);
    long P = p->param_floats;
    int lbuf = p->losses_buf;
    CHECK(p->positions_buf >= 0, "%s: the plan of gen --enable packing has the positions array", tag);
    if (p->positions_buf < 0) {
        close_trainer(&tr);
        return;
    }
    /* packed: one row of T_ROW, dloss = 1 / T_ROW */
    exec_bind(x, 1, T_ROW, &e);
    memcpy(x->tokens, tok, sizeof tok);
    memcpy(x->targets, tgt, sizeof tgt);
    memcpy(x->positions, pos, sizeof pos);
    memset(x->grads, 0, sizeof(float) * (size_t)P);
    exec_forward(x);
    float packed_mean = exec_backward(x, 1.0f / T_ROW);
    float *packed_losses = malloc(sizeof(float) * T_ROW), *packed_grads = malloc(sizeof(float) * (size_t)P);
    memcpy(packed_losses, exec_buf(x, lbuf), sizeof(float) * T_ROW);
    memcpy(packed_grads, x->grads, sizeof(float) * (size_t)P);
    /* alone: each document as its own batch (1 x len), the same loss scale */
    memset(x->grads, 0, sizeof(float) * (size_t)P);
    double wl = 0, weighted = 0;
    int s = 0;
    for (int d = 0; d < N_DOCS; d++) {
        int L = DOC_LEN[d];
        exec_bind(x, 1, L, &e); /* positions 0..L-1 */
        memcpy(x->tokens, tok + s, sizeof(int32_t) * L);
        memcpy(x->targets, tgt + s, sizeof(int32_t) * L);
        exec_forward(x);
        float m = exec_backward(x, 1.0f / T_ROW);
        weighted += (double)m * L;
        const float *l = exec_buf(x, lbuf);
        for (int i = 0; i < L; i++) wl = fmax(wl, fabs((double)l[i] - packed_losses[s + i]) / fmax(1, fabs(l[i])));
        s += L;
    }
    weighted /= T_ROW;
    snprintf(name, sizeof name, "test_v2126_packed_row_loss_equals_documents_alone_%s", tag);
    check(wl <= 2e-6 && fabs(weighted - packed_mean) <= 2e-6 * fmax(1, fabs(weighted)), name,
          "per-token max rel err %.3g; packed mean %.9g vs token-weighted %.9g", wl, packed_mean, weighted);
    double worst = 0;
    const char *worst_name = "";
    int grads_ok = 1;
    for (int i = 0; i < p->n_params_t; i++) {
        const plan_param *pp = &p->params[i];
        long off = pp->offset, n = pp->numel;
        double rm, w = max_abs_diff(packed_grads + off, x->grads + off, n, &rm);
        if (w > 2e-5 * rm + 1e-9) grads_ok = 0;
        if (rm > 0 && w / rm > worst) worst = w / rm, worst_name = pp->name;
    }
    snprintf(name, sizeof name, "test_v2126_packed_row_gradients_equal_documents_alone_%s", tag);
    check(grads_ok, name, "%d tensors, worst relative err %.3g (%s)", p->n_params_t, worst, worst_name);
    free(packed_losses), free(packed_grads);
    close_trainer(&tr);
}

/* Gradient of document k's loss w.r.t. the embedding output (d:x0) of the row's tokens;
 * returns the largest |grad| outside document k and inside it. */
static void cross_grad(exec_t *x, const plan_t *p, int k, const int32_t *tok, const int32_t *tgt, const int32_t *pos,
                       double *outside, double *inside) {
    hyp_err e;
    exec_bind(x, 1, T_ROW, &e);
    memcpy(x->tokens, tok, sizeof(int32_t) * T_ROW);
    if (x->positions) memcpy(x->positions, pos, sizeof(int32_t) * T_ROW);
    int s = 0;
    for (int d = 0; d < k; d++) s += DOC_LEN[d];
    for (int t = 0; t < T_ROW; t++) x->targets[t] = (t >= s && t < s + DOC_LEN[k]) ? tgt[t] : -1;
    memset(x->grads, 0, sizeof(float) * (size_t)p->param_floats);
    exec_forward(x);
    exec_backward(x, 1.0f);
    const float *dx = exec_buf(x, find_buf(p, "d:x0"));
    *outside = *inside = 0;
    for (int t = 0; t < T_ROW; t++)
        for (int c = 0; c < p->C; c++) {
            double v = fabs(dx[(long)t * p->C + c]);
            if (t >= s && t < s + DOC_LEN[k]) *inside = fmax(*inside, v);
            else *outside = fmax(*outside, v);
        }
}

static void isolation_case(const char *model, const char *sel, const char *tag) {
    trainer tr, base;
    char tagb[96], name[160];
    snprintf(tagb, sizeof tagb, "%s_nopack", tag);
    char selb[256];
    snprintf(selb, sizeof selb, "%s", sel);
    char *pk = strstr(selb, ",packing");
    if (pk) memmove(pk, pk + 8, strlen(pk + 8) + 1);
    if (!open_trainer(&tr, model, sel, tag)) return;
    if (!open_trainer(&base, model, selb, tagb)) {
        close_trainer(&tr);
        return;
    }
    CHECK(find_buf(&tr.p, "d:x0") >= 0, "%s: the plan has the embedding output gradient d:x0", tag);
    int32_t tok[T_ROW], tgt[T_ROW], pos[T_ROW];
    make_row(tok, tgt, pos, tr.p.V);
    double worst_out = 0, min_in = 1e30, leak = 0;
    for (int k = 0; k < N_DOCS; k++) {
        double out, in;
        cross_grad(&tr.x, &tr.p, k, tok, tgt, pos, &out, &in);
        worst_out = fmax(worst_out, out);
        min_in = fmin(min_in, in);
        cross_grad(&base.x, &base.p, k, tok, tgt, pos, &out, &in);
        if (k > 0) leak = fmax(leak, out); /* document 0 sees nothing earlier; later ones do */
    }
    snprintf(name, sizeof name, "test_v2126_no_gradient_across_documents_%s", tag);
    check(worst_out == 0.0 && min_in > 0, name,
          "max |d loss_k / d x0| outside document k = %g (inside: >= %.3g); without packing: %.3g", worst_out, min_in, leak);
    snprintf(name, sizeof name, "test_v2126_unmasked_trainer_leaks_%s", tag);
    check(leak > 0, name, "without packing the gradient crosses documents (%.3g): the check above can fail", leak);
    close_trainer(&tr);
    close_trainer(&base);
}

/* ---- 5. on the sim device ------------------------------------------------------------ */

typedef struct {
    plan_t p;
    exec_t host; /* initializes the parameters (the cpu's rule and seed) */
    exec_dev x;
    hyp_device *dev;
    int ok;
} dev_trainer;

static int open_dev(dev_trainer *t, const char *model, const char *sel, const char *tag) {
    char dir[512], path[600];
    snprintf(dir, sizeof dir, "%s/%s", g_tmp, tag);
    memset(t, 0, sizeof *t);
    char cmd[2048];
    snprintf(cmd, sizeof cmd,
             "cd %s && %s/generator/gen specs/v2500.yaml --enable adamw%s --model tests/fixtures/models/%s.yaml "
             "--target sim --batch 1 --seq %d -o %s >/dev/null 2>&1",
             HYP_SOURCE_DIR, HYP_BINARY_DIR, sel, model, T_ROW, dir);
    hyp_err e;
    if (system(cmd) != 0) {
        check(0, "gen --target sim", "%s %s failed", model, sel);
        return 0;
    }
    snprintf(path, sizeof path, "%s/plan.json", dir);
    if (plan_load(path, &t->p, &e) || exec_init(&t->host, &t->p, &e) || hyp_device_open("sim", &t->dev, &e)) {
        check(0, "sim trainer", "%s", e.msg);
        return 0;
    }
    snprintf(path, sizeof path, "%s/kernels", dir);
    if (exec_dev_init(&t->x, &t->p, path, t->dev, &e)) {
        check(0, "exec_dev_init", "%s", e.msg);
        return 0;
    }
    exec_init_params(&t->host, 1234);
    if (exec_dev_upload_params(&t->x, t->host.params, &e)) {
        check(0, "upload", "%s", e.msg);
        return 0;
    }
    t->ok = 1;
    return 1;
}

static void close_dev(dev_trainer *t) {
    if (!t->ok) return;
    exec_dev_free(&t->x);
    t->dev->close(t->dev);
    exec_free(&t->host);
    plan_free(&t->p);
}

/* forward + backward of the bound batch on the device; returns the mean loss (NAN on error) */
static float dev_fwd_bwd(dev_trainer *t, float dloss) {
    hyp_err e;
    float loss = NAN;
    if (exec_dev_forward(&t->x, &e) || exec_dev_backward(&t->x, dloss, &loss, &e)) {
        check(0, "device step", "%s", e.msg);
        return NAN;
    }
    return loss;
}

static void sim_case(const char *model, const char *sel, const char *tag) {
    dev_trainer t;
    char name[160];
    if (!open_dev(&t, model, sel, tag)) return;
    exec_dev *x = &t.x;
    const plan_t *p = &t.p;
    hyp_err e;
    long P = p->param_floats;
    int32_t tok[T_ROW], tgt[T_ROW], pos[T_ROW];
    make_row(tok, tgt, pos, p->V);
    float *lp = malloc(sizeof(float) * T_ROW), *la = malloc(sizeof(float) * T_ROW);
    float *gp = malloc(sizeof(float) * (size_t)P), *ga = malloc(sizeof(float) * (size_t)P);
    /* packed */
    exec_dev_bind(x, 1, T_ROW, &e);
    memcpy(x->h_tokens, tok, sizeof tok);
    memcpy(x->h_targets, tgt, sizeof tgt);
    memcpy(x->h_positions, pos, sizeof pos);
    exec_dev_zero_grads(x, &e);
    float packed_mean = dev_fwd_bwd(&t, 1.0f / T_ROW);
    exec_dev_download_buf(x, p->losses_buf, lp, T_ROW, &e);
    exec_dev_download_grads(x, gp, &e);
    /* alone, gradients accumulated over the documents */
    exec_dev_zero_grads(x, &e);
    double weighted = 0;
    int s = 0;
    for (int d = 0; d < N_DOCS; d++) {
        int L = DOC_LEN[d];
        exec_dev_bind(x, 1, L, &e);
        memcpy(x->h_tokens, tok + s, sizeof(int32_t) * L);
        memcpy(x->h_targets, tgt + s, sizeof(int32_t) * L);
        weighted += (double)dev_fwd_bwd(&t, 1.0f / T_ROW) * L;
        exec_dev_download_buf(x, p->losses_buf, la + s, L, &e);
        s += L;
    }
    weighted /= T_ROW;
    exec_dev_download_grads(x, ga, &e);
    double wl = 0;
    for (int i = 0; i < T_ROW; i++) wl = fmax(wl, fabs((double)lp[i] - la[i]) / fmax(1, fabs(la[i])));
    snprintf(name, sizeof name, "test_v2126_sim_packed_row_loss_equals_documents_alone_%s", tag);
    check(wl <= 2e-5 && fabs(weighted - packed_mean) <= 2e-5 * fmax(1, fabs(weighted)), name,
          "per-token max rel err %.3g; packed mean %.9g vs token-weighted %.9g", wl, packed_mean, weighted);
    int ok = 1;
    double worst = 0;
    for (int i = 0; i < p->n_params_t; i++) {
        double rm, w = max_abs_diff(gp + p->params[i].offset, ga + p->params[i].offset, p->params[i].numel, &rm);
        if (w > 1e-4 * rm + 1e-8) ok = 0;
        if (rm > 0) worst = fmax(worst, w / rm);
    }
    snprintf(name, sizeof name, "test_v2126_sim_packed_row_gradients_equal_documents_alone_%s", tag);
    check(ok, name, "%d tensors, worst relative err %.3g", p->n_params_t, worst);
    /* the same packed row on the cpu trainer (same parameters) */
    exec_t *c = &t.host;
    if (exec_alloc_acts(c, &e) == HYP_OK && exec_bind(c, 1, T_ROW, &e) == HYP_OK) {
        memcpy(c->tokens, tok, sizeof tok);
        memcpy(c->targets, tgt, sizeof tgt);
        memcpy(c->positions, pos, sizeof pos);
        exec_eval_loss(c);
        const float *lc = exec_buf(c, p->losses_buf);
        double wc = 0;
        for (int i = 0; i < T_ROW; i++) wc = fmax(wc, fabs((double)lp[i] - lc[i]) / fmax(1, fabs(lc[i])));
        snprintf(name, sizeof name, "test_v2126_sim_packed_row_matches_cpu_%s", tag);
        check(wc <= 2e-5, name, "per-token losses, max rel err %.3g", wc);
    }
    /* no gradient across documents */
    int dx0 = find_buf(p, "d:x0");
    float *dx = malloc(sizeof(float) * T_ROW * p->C);
    double outside = 0, inside = 1e30;
    s = 0;
    for (int k = 0; k < N_DOCS; k++) {
        exec_dev_bind(x, 1, T_ROW, &e);
        memcpy(x->h_tokens, tok, sizeof tok);
        memcpy(x->h_positions, pos, sizeof pos);
        for (int i = 0; i < T_ROW; i++) x->h_targets[i] = (i >= s && i < s + DOC_LEN[k]) ? tgt[i] : -1;
        exec_dev_zero_grads(x, &e);
        dev_fwd_bwd(&t, 1.0f);
        exec_dev_download_buf(x, dx0, dx, (int64_t)T_ROW * p->C, &e);
        double in = 0;
        for (int i = 0; i < T_ROW; i++)
            for (int ch = 0; ch < p->C; ch++) {
                double v = fabs(dx[(long)i * p->C + ch]);
                if (i >= s && i < s + DOC_LEN[k]) in = fmax(in, v);
                else outside = fmax(outside, v);
            }
        inside = fmin(inside, in);
        s += DOC_LEN[k];
    }
    snprintf(name, sizeof name, "test_v2126_sim_no_gradient_across_documents_%s", tag);
    check(outside == 0.0 && inside > 0, name, "max |d loss_k / d x0| outside document k = %g (inside: >= %.3g)", outside, inside);
    free(dx), free(lp), free(la), free(gp), free(ga);
    close_dev(&t);
}

int main(void) {
    snprintf(g_tmp, sizeof g_tmp, "/tmp/hyp_test_packing_%d", (int)getpid());
    mkdir(g_tmp, 0755);
    op_case(16, 4, 2);
    op_case(8, 2, 2);
    static const struct {
        const char *model, *sel, *tag;
    } C[] = {
        {"pack-gpt2", ",packing", "gpt2_naive"},
        {"pack-gpt2", ",packing,flash", "gpt2_flash"},
        {"pack-llama", ",packing", "llama_naive"},
        {"pack-llama", ",packing,flash", "llama_flash"},
    };
    for (size_t i = 0; i < sizeof C / sizeof *C; i++) step_case(C[i].model, C[i].sel, C[i].tag);
    for (size_t i = 0; i < sizeof C / sizeof *C; i++) {
        char tag[64];
        snprintf(tag, sizeof tag, "%s_iso", C[i].tag);
        isolation_case(C[i].model, C[i].sel, tag);
    }
    char cache[1024];
    snprintf(cache, sizeof cache, "%s/sim-cache", HYP_BINARY_DIR);
    setenv("HYP_SIM_CACHE", cache, 0);
    sim_case("pack-gpt2", ",packing,flash", "sim_gpt2_flash");
    sim_case("pack-llama", ",packing,flash", "sim_llama_flash");
    sim_case("pack-gpt2", ",packing", "sim_gpt2_naive");
    rm_rf(g_tmp);
    printf("%d passed, %d failed\n", g_pass, g_fail);
    return g_fail ? 1 : 0;
}
