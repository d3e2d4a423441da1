/* test_ops_vs_reference.c — the CPU kernels composed into whole models, against PyTorch.
 *
 * tests/fixtures/ref_{gpt2,llama}_tiny.safetensors (written by tests/reference/make_fixtures.py,
 * where the model conventions are documented) hold seeded weights, a batch, and PyTorch's
 * logits, loss, every parameter gradient, and 10 AdamW steps. Here the same two models are
 * written directly with the op_* kernels, llm.c style (explicit activations, explicit backward),
 * independent of the plan executor, and every one of those numbers is compared:
 *   - logits, loss and all gradients of one forward/backward;
 *   - the losses and global gradient norms of 10 AdamW steps (lr 1e-3, betas 0.9/0.95, eps 1e-8,
 *     weight decay 0.1 on 2-D tensors), and the final weights when the fixture has them.
 * This checks the kernels in the combinations a trainer uses them (GQA + QK-norm + RoPE,
 * tied embeddings, residual gradient fan-in, fused QKV and gate|up weights) and, the other way
 * round, that the fixtures follow the conventions the kernels implement.
 *
 * Tolerance (docs/test-tolerances.md): the reference is float64 rounded to float32, so only our
 * fp32 roundings count (E1 with one side exact): an element behind a chain of K <= ~2000 fp32
 * roundings (the fixtures' widths x depth) is off by rms u sqrt(K) = 2.7e-6 of the scale of its
 * terms, <= 1.6e-5 at lambda = 6. Per tensor we require max|ours - ref| <= 1e-4 * max|ref|
 * (scale-normalized, so elements that cancel to ~0 do not blow a relative bound up); a wrong
 * convention (RoPE pairing, GQA head map, a missing residual or bias term) is off by O(max|ref|).
 * AdamW losses: |diff| <= 1e-4 absolute (losses ~5: 2e-5 relative, E2 + E3 over 10 steps); a
 * wrong bias correction or weight decay moves them by >= 1e-3. Final weights: 1e-3 * max|ref|:
 * a coordinate whose exact gradient is ~0 gets our rounding noise n and Adam moves it by
 * lr n/(|n| + eps) (E3), while the float64 side stays put; n << eps = 1e-8 keeps that to a small
 * fraction of lr = 1e-3 per step (printed); a wrong update rule is off by ~lr * steps = 1e-2.
 *
 * Prints one line per check and "N passed, M failed"; exits 1 if anything failed.
 */
#include "ops_cpu.h"
#include "optim_kernels_cpu.h"

#include "hyp_test.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void *xcalloc(size_t n, size_t sz) {
    void *p = calloc(n ? n : 1, sz);
    if (!p) { fprintf(stderr, "out of memory\n"); exit(2); }
    return p;
}
static float *fz(long n) { return xcalloc((size_t)n, sizeof(float)); }

/* ------------------------------------------------------------------------------------------ */
/* A minimal safetensors reader (F32 / I32 only, little-endian host). */

typedef struct {
    char name[128];
    int ndim;
    long shape[4], n;
    void *data; /* float* or int32_t*, n elements */
} tensor_t;

typedef struct {
    tensor_t *t;
    int count;
} st_file;

static int st_load(const char *path, st_file *f) {
    memset(f, 0, sizeof *f);
    FILE *fp = fopen(path, "rb");
    if (!fp) return -1;
    unsigned char len8[8];
    uint64_t hlen = 0;
    int rc = -1;
    char *hdr = NULL, *data = NULL;
    cJSON *j = NULL;
    if (fread(len8, 1, 8, fp) != 8) goto done;
    for (int i = 7; i >= 0; i--) hlen = hlen << 8 | len8[i];
    if (hlen > (1u << 24)) goto done;
    hdr = xcalloc(hlen + 1, 1);
    if (fread(hdr, 1, hlen, fp) != hlen) goto done;
    long start = ftell(fp);
    fseek(fp, 0, SEEK_END);
    long size = ftell(fp) - start;
    fseek(fp, start, SEEK_SET);
    data = xcalloc((size_t)size, 1);
    if (fread(data, 1, (size_t)size, fp) != (size_t)size) goto done;
    j = cJSON_Parse(hdr);
    if (!j) goto done;
    f->t = xcalloc((size_t)cJSON_GetArraySize(j), sizeof(tensor_t));
    const cJSON *it;
    cJSON_ArrayForEach(it, j) {
        if (!strcmp(it->string, "__metadata__")) continue;
        tensor_t *t = &f->t[f->count];
        snprintf(t->name, sizeof t->name, "%s", it->string);
        const cJSON *dt = cJSON_GetObjectItemCaseSensitive(it, "dtype");
        const cJSON *sh = cJSON_GetObjectItemCaseSensitive(it, "shape");
        const cJSON *off = cJSON_GetObjectItemCaseSensitive(it, "data_offsets");
        if (!cJSON_IsString(dt) || !cJSON_IsArray(sh) || !cJSON_IsArray(off)) goto done;
        if (strcmp(dt->valuestring, "F32") && strcmp(dt->valuestring, "I32")) goto done;
        t->n = 1;
        const cJSON *x;
        cJSON_ArrayForEach(x, sh) {
            if (t->ndim == 4) goto done;
            t->shape[t->ndim++] = (long)x->valuedouble;
            t->n *= (long)x->valuedouble;
        }
        long b = (long)cJSON_GetArrayItem(off, 0)->valuedouble;
        long e = (long)cJSON_GetArrayItem(off, 1)->valuedouble;
        if (e - b != t->n * 4 || e > size) goto done;
        t->data = xcalloc((size_t)t->n, 4);
        memcpy(t->data, data + b, (size_t)(e - b));
        f->count++;
    }
    rc = 0;
done:
    cJSON_Delete(j);
    free(hdr);
    free(data);
    fclose(fp);
    return rc;
}

static const tensor_t *st_find(const st_file *f, const char *name) {
    for (int i = 0; i < f->count; i++)
        if (!strcmp(f->t[i].name, name)) return &f->t[i];
    return NULL;
}

static void st_free(st_file *f) {
    for (int i = 0; i < f->count; i++) free(f->t[i].data);
    free(f->t);
}

/* ------------------------------------------------------------------------------------------ */
/* Parameters: a copy of every weight tensor of the fixture, with gradient and AdamW moments. */

typedef struct {
    char name[128];
    long n;
    int ndim;
    float *p, *g, *m, *v;
} param_t;

typedef struct {
    param_t *ps;
    int count;
    int missing; /* lookups of a name that is not in the fixture */
} params_t;

static int is_param_name(const char *n) {
    return strncmp(n, "grad.", 5) && strncmp(n, "final.", 6) && strncmp(n, "adamw_", 6) &&
           strcmp(n, "inputs") && strcmp(n, "targets") && strcmp(n, "logits") && strcmp(n, "loss");
}

static void params_init(params_t *P, const st_file *f) {
    P->ps = xcalloc((size_t)f->count, sizeof(param_t));
    P->count = P->missing = 0;
    for (int i = 0; i < f->count; i++) {
        const tensor_t *t = &f->t[i];
        if (!is_param_name(t->name)) continue;
        param_t *q = &P->ps[P->count++];
        snprintf(q->name, sizeof q->name, "%s", t->name);
        q->n = t->n;
        q->ndim = t->ndim;
        q->p = fz(t->n);
        memcpy(q->p, t->data, (size_t)t->n * sizeof(float));
        q->g = fz(t->n);
        q->m = fz(t->n);
        q->v = fz(t->n);
    }
}

static param_t *P_get(params_t *P, const char *fmt, ...) {
    char name[128];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(name, sizeof name, fmt, ap);
    va_end(ap);
    for (int i = 0; i < P->count; i++)
        if (!strcmp(P->ps[i].name, name)) return &P->ps[i];
    P->missing++;
    fprintf(stderr, "fixture has no parameter %s\n", name);
    static float dummy[1 << 16]; /* keeps the run going; the test fails on P->missing */
    static param_t none = {"", 0, 0, dummy, dummy, dummy, dummy};
    return &none;
}

static void params_free(params_t *P) {
    for (int i = 0; i < P->count; i++) {
        free(P->ps[i].p);
        free(P->ps[i].g);
        free(P->ps[i].m);
        free(P->ps[i].v);
    }
    free(P->ps);
}

/* ------------------------------------------------------------------------------------------ */
/* The two models. Shapes are the fixtures' (see make_fixtures.py). A step = forward, fused
 * cross-entropy (dloss = 1/number of non-ignored targets: the mean), backward into P.g. */

enum { B = 2, T = 8, N = B * T, C = 32, V = 64, L = 2, NH = 4, HD = 8 };
enum { LNKV = 2, LH = 48, QKV_W = (NH + 2 * LNKV) * HD }; /* Llama */

typedef struct {
    params_t *P;
    const int32_t *inputs, *targets;
    float logits[N * V]; /* of the last forward */
} model_t;

static int count_valid(const int32_t *targets) {
    int n = 0;
    for (int i = 0; i < N; i++) n += targets[i] >= 0;
    return n;
}

static float gpt2_step(model_t *M) {
    params_t *P = M->P;
    // activations, per layer where the backward needs them
    static float enc[N * C], ln1[L][N * C], m1[L][N], r1[L][N], qkv[L][N * 3 * C],
        atty[L][N * C], att[L][B * NH * T * T], res2[L][N * C], ln2[L][N * C], m2[L][N], r2[L][N],
        fch[L][N * 4 * C], fchg[L][N * 4 * C], res3[L][N * C], tmp[N * C], lnf[N * C], mf[N],
        rf[N], logits[N * V], losses[N];
    static float dres[N * C], dln[N * C], dfchg[N * 4 * C], dfch[N * 4 * C], datty[N * C],
        dqkv[N * 3 * C], datt[B * NH * T * T];
    param_t *wte = P_get(P, "transformer.wte.weight"), *wpe = P_get(P, "transformer.wpe.weight");
    op_embedding_fwd(enc, M->inputs, wte->p, wpe->p, B, T, C);
    float *x = enc;
    for (int l = 0; l < L; l++) {
#define W(s) P_get(P, "transformer.h.%d." s, l)
        op_layernorm_fwd(ln1[l], m1[l], r1[l], x, W("ln_1.weight")->p, W("ln_1.bias")->p, N, C,
                         1e-5f);
        op_matmul_fwd(qkv[l], ln1[l], W("attn.c_attn.weight")->p, W("attn.c_attn.bias")->p, N, C,
                      3 * C);
        op_attention_fwd(atty[l], att[l], qkv[l], B, T, NH, NH, HD);
        op_matmul_fwd(tmp, atty[l], W("attn.c_proj.weight")->p, W("attn.c_proj.bias")->p, N, C,
                      C);
        op_add_fwd(res2[l], x, tmp, N * C);
        op_layernorm_fwd(ln2[l], m2[l], r2[l], res2[l], W("ln_2.weight")->p, W("ln_2.bias")->p, N,
                         C, 1e-5f);
        op_matmul_fwd(fch[l], ln2[l], W("mlp.c_fc.weight")->p, W("mlp.c_fc.bias")->p, N, C,
                      4 * C);
        op_gelu_fwd(fchg[l], fch[l], N * 4 * C);
        op_matmul_fwd(tmp, fchg[l], W("mlp.c_proj.weight")->p, W("mlp.c_proj.bias")->p, N, 4 * C,
                      C);
        op_add_fwd(res3[l], res2[l], tmp, N * C);
        x = res3[l];
#undef W
    }
    param_t *lnfw = P_get(P, "transformer.ln_f.weight"), *lnfb = P_get(P, "transformer.ln_f.bias");
    op_layernorm_fwd(lnf, mf, rf, x, lnfw->p, lnfb->p, N, C, 1e-5f);
    op_matmul_fwd(logits, lnf, wte->p, NULL, N, C, V); // tied lm head
    memcpy(M->logits, logits, sizeof logits);
    int nvalid = count_valid(M->targets);
    op_crossentropy_fused(losses, logits, M->targets, 1.0f / nvalid, N, V, V);
    double loss = 0;
    for (int i = 0; i < N; i++) loss += losses[i];
    loss /= nvalid;

    // backward: dres holds d loss / d (residual stream) as we walk down the layers
    for (int i = 0; i < P->count; i++) op_zero(P->ps[i].g, P->ps[i].n);
    op_zero(dln, N * C);
    op_matmul_bwd(dln, wte->g, NULL, logits, lnf, wte->p, N, C, V);
    op_zero(dres, N * C);
    op_layernorm_bwd(dres, lnfw->g, lnfb->g, dln, x, lnfw->p, mf, rf, N, C);
    for (int l = L - 1; l >= 0; l--) {
#define W(s) P_get(P, "transformer.h.%d." s, l)
        float *xin = l == 0 ? enc : res3[l - 1];
        op_zero(dfchg, N * 4 * C);
        op_zero(dfch, N * 4 * C);
        op_zero(dln, N * C);
        op_zero(datty, N * C);
        op_zero(dqkv, N * 3 * C);
        // MLP branch; the residual passes dres through unchanged and the branch adds to it
        op_matmul_bwd(dfchg, W("mlp.c_proj.weight")->g, W("mlp.c_proj.bias")->g, dres, fchg[l],
                      W("mlp.c_proj.weight")->p, N, 4 * C, C);
        op_gelu_bwd(dfch, fch[l], dfchg, N * 4 * C);
        op_matmul_bwd(dln, W("mlp.c_fc.weight")->g, W("mlp.c_fc.bias")->g, dfch, ln2[l],
                      W("mlp.c_fc.weight")->p, N, C, 4 * C);
        op_layernorm_bwd(dres, W("ln_2.weight")->g, W("ln_2.bias")->g, dln, res2[l],
                         W("ln_2.weight")->p, m2[l], r2[l], N, C);
        // attention branch
        op_matmul_bwd(datty, W("attn.c_proj.weight")->g, W("attn.c_proj.bias")->g, dres, atty[l],
                      W("attn.c_proj.weight")->p, N, C, C);
        op_attention_bwd(dqkv, datt, datty, qkv[l], att[l], B, T, NH, NH, HD);
        op_zero(dln, N * C);
        op_matmul_bwd(dln, W("attn.c_attn.weight")->g, W("attn.c_attn.bias")->g, dqkv, ln1[l],
                      W("attn.c_attn.weight")->p, N, C, 3 * C);
        op_layernorm_bwd(dres, W("ln_1.weight")->g, W("ln_1.bias")->g, dln, xin,
                         W("ln_1.weight")->p, m1[l], r1[l], N, C);
#undef W
    }
    op_embedding_bwd(wte->g, wpe->g, dres, M->inputs, B, T, C, V); // adds to the lm-head part
    return (float)loss;
}

static float llama_step(model_t *M) {
    params_t *P = M->P;
    static float enc[N * C], ln1[L][N * C], r1[L][N], qkv[L][N * QKV_W], qkn[L][N * QKV_W],
        rq[L][N * (NH + LNKV)], qkr[L][N * QKV_W], atty[L][N * NH * HD], att[L][B * NH * T * T],
        res2[L][N * C], ln2[L][N * C], r2[L][N], gu[L][N * 2 * LH], sw[L][N * LH],
        res3[L][N * C], tmp[N * C], lnf[N * C], rf[N], logits[N * V], losses[N];
    static float dres[N * C], dln[N * C], dsw[N * LH], dgu[N * 2 * LH], datty[N * NH * HD],
        dqkr[N * QKV_W], dqkn[N * QKV_W], dqkv[N * QKV_W], datt[B * NH * T * T];
    // the fused weights the kernels expect: qkv = [q_proj; k_proj; v_proj] rows, [gate; up] rows
    static float wqkv[L][QKV_W * C], wgu[L][2 * LH * C], dwqkv[L][QKV_W * C], dwgu[L][2 * LH * C];
    for (int l = 0; l < L; l++) {
#define W(s) P_get(P, "model.layers.%d." s, l)
        memcpy(wqkv[l], W("self_attn.q_proj.weight")->p, sizeof(float) * NH * HD * C);
        memcpy(wqkv[l] + NH * HD * C, W("self_attn.k_proj.weight")->p,
               sizeof(float) * LNKV * HD * C);
        memcpy(wqkv[l] + (NH + LNKV) * HD * C, W("self_attn.v_proj.weight")->p,
               sizeof(float) * LNKV * HD * C);
        memcpy(wgu[l], W("mlp.gate_proj.weight")->p, sizeof(float) * LH * C);
        memcpy(wgu[l] + LH * C, W("mlp.up_proj.weight")->p, sizeof(float) * LH * C);
#undef W
    }
    param_t *emb = P_get(P, "model.embed_tokens.weight");
    op_embedding_fwd(enc, M->inputs, emb->p, NULL, B, T, C);
    float *x = enc;
    for (int l = 0; l < L; l++) {
#define W(s) P_get(P, "model.layers.%d." s, l)
        op_rmsnorm_fwd(ln1[l], r1[l], x, W("input_layernorm.weight")->p, N, C, 1e-5f);
        op_matmul_fwd(qkv[l], ln1[l], wqkv[l], NULL, N, C, QKV_W);
        op_qknorm_fwd(qkn[l], rq[l], qkv[l], W("self_attn.q_norm.weight")->p,
                      W("self_attn.k_norm.weight")->p, N, NH, LNKV, HD, 1e-5f);
        op_rope_fwd(qkr[l], qkn[l], B, T, NH, LNKV, HD, 10000.0f);
        op_attention_fwd(atty[l], att[l], qkr[l], B, T, NH, LNKV, HD);
        op_matmul_fwd(tmp, atty[l], W("self_attn.o_proj.weight")->p, NULL, N, NH * HD, C);
        op_add_fwd(res2[l], x, tmp, N * C);
        op_rmsnorm_fwd(ln2[l], r2[l], res2[l], W("post_attention_layernorm.weight")->p, N, C,
                       1e-5f);
        op_matmul_fwd(gu[l], ln2[l], wgu[l], NULL, N, C, 2 * LH);
        op_swiglu_fwd(sw[l], gu[l], N, LH);
        op_matmul_fwd(tmp, sw[l], W("mlp.down_proj.weight")->p, NULL, N, LH, C);
        op_add_fwd(res3[l], res2[l], tmp, N * C);
        x = res3[l];
#undef W
    }
    param_t *nw = P_get(P, "model.norm.weight"), *head = P_get(P, "lm_head.weight");
    op_rmsnorm_fwd(lnf, rf, x, nw->p, N, C, 1e-5f);
    op_matmul_fwd(logits, lnf, head->p, NULL, N, C, V);
    memcpy(M->logits, logits, sizeof logits);
    int nvalid = count_valid(M->targets);
    op_crossentropy_fused(losses, logits, M->targets, 1.0f / nvalid, N, V, V);
    double loss = 0;
    for (int i = 0; i < N; i++) loss += losses[i];
    loss /= nvalid;

    for (int i = 0; i < P->count; i++) op_zero(P->ps[i].g, P->ps[i].n);
    op_zero(&dwqkv[0][0], L * QKV_W * C);
    op_zero(&dwgu[0][0], L * 2 * LH * C);
    op_zero(dln, N * C);
    op_matmul_bwd(dln, head->g, NULL, logits, lnf, head->p, N, C, V);
    op_zero(dres, N * C);
    op_rmsnorm_bwd(dres, nw->g, dln, x, nw->p, rf, N, C);
    for (int l = L - 1; l >= 0; l--) {
#define W(s) P_get(P, "model.layers.%d." s, l)
        float *xin = l == 0 ? enc : res3[l - 1];
        op_zero(dsw, N * LH);
        op_zero(dgu, N * 2 * LH);
        op_zero(dln, N * C);
        op_zero(datty, N * NH * HD);
        op_zero(dqkr, N * QKV_W);
        op_zero(dqkn, N * QKV_W);
        op_zero(dqkv, N * QKV_W);
        op_matmul_bwd(dsw, W("mlp.down_proj.weight")->g, NULL, dres, sw[l],
                      W("mlp.down_proj.weight")->p, N, LH, C);
        op_swiglu_bwd(dgu, dsw, gu[l], N, LH);
        op_matmul_bwd(dln, dwgu[l], NULL, dgu, ln2[l], wgu[l], N, C, 2 * LH);
        op_rmsnorm_bwd(dres, W("post_attention_layernorm.weight")->g, dln, res2[l],
                       W("post_attention_layernorm.weight")->p, r2[l], N, C);
        op_matmul_bwd(datty, W("self_attn.o_proj.weight")->g, NULL, dres, atty[l],
                      W("self_attn.o_proj.weight")->p, N, NH * HD, C);
        op_attention_bwd(dqkr, datt, datty, qkr[l], att[l], B, T, NH, LNKV, HD);
        op_rope_bwd(dqkn, dqkr, B, T, NH, LNKV, HD, 10000.0f);
        op_qknorm_bwd(dqkv, W("self_attn.q_norm.weight")->g, W("self_attn.k_norm.weight")->g,
                      dqkn, qkv[l], W("self_attn.q_norm.weight")->p,
                      W("self_attn.k_norm.weight")->p, rq[l], N, NH, LNKV, HD);
        op_zero(dln, N * C);
        op_matmul_bwd(dln, dwqkv[l], NULL, dqkv, ln1[l], wqkv[l], N, C, QKV_W);
        op_rmsnorm_bwd(dres, W("input_layernorm.weight")->g, dln, xin,
                       W("input_layernorm.weight")->p, r1[l], N, C);
        // split the fused weights' gradients back onto the named parameters
        op_accumulate(W("self_attn.q_proj.weight")->g, dwqkv[l], NH * HD * C);
        op_accumulate(W("self_attn.k_proj.weight")->g, dwqkv[l] + NH * HD * C, LNKV * HD * C);
        op_accumulate(W("self_attn.v_proj.weight")->g, dwqkv[l] + (NH + LNKV) * HD * C,
                      LNKV * HD * C);
        op_accumulate(W("mlp.gate_proj.weight")->g, dwgu[l], LH * C);
        op_accumulate(W("mlp.up_proj.weight")->g, dwgu[l] + LH * C, LH * C);
#undef W
    }
    op_embedding_bwd(emb->g, NULL, dres, M->inputs, B, T, C, V);
    return (float)loss;
}

/* ------------------------------------------------------------------------------------------ */

/* max|got - want| / max|want| */
static double rel_err(const float *got, const float *want, long n) {
    double md = 0, mw = 0;
    for (long i = 0; i < n; i++) {
        double d = fabs((double)got[i] - want[i]);
        if (d > md || isnan(d)) md = isnan(d) ? INFINITY : d;
        if (fabs(want[i]) > mw) mw = fabs(want[i]);
    }
    return md / (mw > 0 ? mw : 1.0);
}

static void run_model(const char *tag, const char *file, float (*step)(model_t *)) {
    char path[1024], name[160];
    snprintf(path, sizeof path, "%s/tests/fixtures/%s", HYP_SOURCE_DIR, file);
    st_file f;
    if (st_load(path, &f) != 0) {
        snprintf(name, sizeof name, "%s_fixture_loads", tag);
        check(0, name, "cannot read %s — run tests/reference/make_fixtures.py", path);
        return;
    }
    params_t P;
    params_init(&P, &f);
    const tensor_t *tin = st_find(&f, "inputs"), *ttg = st_find(&f, "targets");
    const tensor_t *tlog = st_find(&f, "logits"), *tloss = st_find(&f, "loss");
    const tensor_t *tal = st_find(&f, "adamw_losses"), *tan = st_find(&f, "adamw_grad_norms");
    if (!tin || !ttg || !tlog || !tloss || !tal || !tan || tin->n != N || tlog->n != N * V) {
        snprintf(name, sizeof name, "%s_fixture_shapes", tag);
        check(0, name, "%s lacks a tensor or has other shapes than this test's", path);
        params_free(&P);
        st_free(&f);
        return;
    }
    model_t *M = xcalloc(1, sizeof *M);
    M->P = &P;
    M->inputs = tin->data;
    M->targets = ttg->data;

    float loss = step(M);
    float ref_loss = *(const float *)tloss->data;
    snprintf(name, sizeof name, "%s_loss_vs_torch", tag);
    check(fabs(loss - ref_loss) <= 1e-5 * fabs(ref_loss) && P.missing == 0, name,
          "ours %.7f torch %.7f", loss, ref_loss);
    double e = rel_err(M->logits, tlog->data, N * V);
    snprintf(name, sizeof name, "%s_logits_vs_torch", tag);
    check(e <= 1e-4, name, "max_err/max|ref|=%.2e", e);
    double worst = 0;
    int nmissing = 0;
    char worst_name[160] = "";
    for (int i = 0; i < P.count; i++) {
        char gname[160];
        snprintf(gname, sizeof gname, "grad.%s", P.ps[i].name);
        const tensor_t *tg = st_find(&f, gname);
        if (!tg || tg->n != P.ps[i].n) { nmissing++; continue; }
        double ei = rel_err(P.ps[i].g, tg->data, P.ps[i].n);
        if (ei > worst) { worst = ei; snprintf(worst_name, sizeof worst_name, "%s", gname); }
    }
    snprintf(name, sizeof name, "%s_all_grads_vs_torch", tag);
    check(worst <= 1e-4 && nmissing == 0, name, "%d tensors, worst %.2e (%s)%s", P.count, worst,
          worst_name, nmissing ? ", some grad.* missing" : "");

    // 10 AdamW steps on the same batch, as the fixture's adamw_losses
    const float *rl = tal->data, *rn = tan->data;
    double wl = 0, wn = 0;
    for (int t = 1; t <= 10; t++) {
        float l = step(M);
        double ss = 0;
        for (int i = 0; i < P.count; i++) ss += op_sumsq(P.ps[i].g, P.ps[i].n);
        double gn = sqrt(ss);
        if (fabs(l - rl[t - 1]) > wl) wl = fabs(l - rl[t - 1]);
        if (fabs(gn - rn[t - 1]) / rn[t - 1] > wn) wn = fabs(gn - rn[t - 1]) / rn[t - 1];
        for (int i = 0; i < P.count; i++)
            op_adamw(P.ps[i].p, P.ps[i].g, P.ps[i].m, P.ps[i].v, P.ps[i].n, 1e-3f, 0.9f, 0.95f,
                     1e-8f, P.ps[i].ndim == 2 ? 0.1f : 0.0f, t, 1.0f);
    }
    snprintf(name, sizeof name, "%s_adamw_10_steps_losses_vs_torch", tag);
    check(wl <= 1e-4, name, "max|diff|=%.2e, torch loss %.5f -> %.5f", wl, rl[0], rl[9]);
    snprintf(name, sizeof name, "%s_adamw_10_steps_grad_norms_vs_torch", tag);
    check(wn <= 1e-4, name, "max rel diff=%.2e", wn);
    double wf = 0;
    int nfinal = 0;
    for (int i = 0; i < P.count; i++) {
        char fname[160];
        snprintf(fname, sizeof fname, "final.%s", P.ps[i].name);
        const tensor_t *tf = st_find(&f, fname);
        if (!tf || tf->n != P.ps[i].n) continue;
        nfinal++;
        double ei = rel_err(P.ps[i].p, tf->data, P.ps[i].n);
        if (ei > wf) wf = ei;
    }
    if (nfinal) {
        snprintf(name, sizeof name, "%s_adamw_final_weights_vs_torch", tag);
        check(wf <= 1e-3 && nfinal == P.count, name, "%d tensors, worst %.2e", nfinal, wf);
    }
    hyp_err err = {{0}};
    snprintf(name, sizeof name, "%s_no_onednn_errors", tag);
    check(op_cpu_check(&err) == HYP_OK, name, "%s", err.msg);
    free(M);
    params_free(&P);
    st_free(&f);
}

int main(void) {
    run_model("gpt2_tiny", "ref_gpt2_tiny.safetensors", gpt2_step);
    run_model("llama_tiny", "ref_llama_tiny.safetensors", llama_step);
    return hyp_test_finish();
}
