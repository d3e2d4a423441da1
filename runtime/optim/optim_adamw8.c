/* optim_adamw8.c — AdamW with 8-bit block-wise dynamically quantized states m and v (Dettmers,
 * Lewis, Shleifer, Zettlemoyer 2022, "8-bit Optimizers via Block-wise Quantization"; bitsandbytes'
 * AdamW8bit: kOptimizerStatic8bit2StateBlockwise, BLOCKSIZE_2STATE 256) as an optimizer of optim.h.
 * Per block of 256 elements: dequantize (map[code] * absmax; m on the signed dynamic map, v on the
 * unsigned one), the fp32 AdamW update with op_adamw's expressions (the parameter moves with the
 * unquantized new m and v, as in bitsandbytes' kernel), new absmax = max |state| over the block,
 * requantize to the nearest code, a code of m that lost its sign moved one step back (bitsandbytes).
 * Where this differs from bitsandbytes (docs/optimizer-8bit.md): the update arithmetic is
 * op_adamw's (decay from the pre-update parameter, eps added to sqrt(v_hat)), the nearest code is
 * exact (bitsandbytes' quantize_2D walks a binary search with approximate division), and a block
 * whose state is all zero keeps the zero code (bitsandbytes divides 0 by 0).
 * States, packed per tensor (state_numel): ceil(n/256) absmax floats, then n uint8 codes; whole
 * tensors only (shard_matrix 1), so ZeRO is refused. Tensors of group rule "f32" (the plan puts
 * there those under v2132's q8_min_size and the embeddings, as bitsandbytes' min_8bit_size and
 * StableEmbedding) keep plain fp32 m and v. On a device: one launch per tensor of
 * templates/adamw8.cu.lua's adamw8_block_step (one CUDA block per 256-element block, the two maps
 * uploaded into the optimizer workspace). This file is compiled with -ffp-contract=off:
 * no fused multiply-adds, so the step is the same bits on every x86 (with or without AVX-512) and
 * equals the Python reference bit for bit. Never: scheduling, clipping or ZeRO. */
#include "optim_adamw8.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ops_cpu.h"
#include "optim.h"

/* torch.linspace(start, end, steps) in float32 as ATen's cpu kernel computes it: from the start
 * below the halfway index, from the end above it */
static void linspace_f32(float start, float end, int steps, float *out) {
    float step = (end - start) / (float)(steps - 1);
    int half = steps / 2;
    for (int i = 0; i < steps; i++) out[i] = i < half ? start + step * (float)i : end - step * (float)(steps - i - 1);
}

static int cmp_float(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

void hyp_q8_dynamic_map(int is_signed, float out[256]) {
    /* create_dynamic_map(signed, max_exponent_bits = 7, total_bits = 8): for exponent i the
     * midpoints of linspace(0.1, 1, 2^i + 1) (signed, both signs) or of linspace(0.1, 1,
     * 2^(i+1) + 1) (unsigned) times 10^(i - 6); then 0 and 1; sorted. 254 + 2 = 256 codes. */
    float b[130];
    int n = 0;
    for (int i = 0; i < 7; i++) {
        int items = is_signed ? (1 << i) + 1 : (1 << (i + 1)) + 1;
        linspace_f32(0.1f, 1.0f, items, b);
        float scale = (float)pow(10.0, (double)(i - 6)); /* torch multiplies by the scalar cast to float */
        for (int j = 0; j + 1 < items; j++) {
            float mean = (b[j] + b[j + 1]) / 2.0f;
            out[n++] = scale * mean;
            if (is_signed) out[n++] = -scale * mean;
        }
    }
    out[n++] = 0.0f;
    out[n++] = 1.0f;
    qsort(out, (size_t)n, sizeof *out, cmp_float);
}

int64_t hyp_q8_state_floats(int64_t n) {
    return (n + HYP_Q8_BLOCK - 1) / HYP_Q8_BLOCK + (n + 3) / 4;
}

/* the index of the code nearest x in the sorted map (ties: the lower code) */
static int nearest(const float *map, float x) {
    if (!(x > map[0])) return 0;
    if (x >= map[255]) return 255;
    int lo = 0, hi = 255; /* map[lo] < x < map[hi] or x == map[lo] */
    while (hi - lo > 1) {
        int mid = (lo + hi) / 2;
        if (map[mid] <= x) lo = mid;
        else hi = mid;
    }
    return (map[hi] - x) < (x - map[lo]) ? hi : lo;
}

/* The same index found fast: lut[key(x)] is the largest code <= the smallest float whose key is
 * key(x) (key: the top 16 bits of x's bits in an order-preserving unsigned form), and the walk up
 * from there ends where the binary search does (map[lo] <= x < map[lo + 1]); ties as nearest(). */
static uint32_t ordered(float x) {
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return (u & 0x80000000u) ? ~u : u | 0x80000000u;
}

static void lut_init(const float *map, uint8_t *lut) {
    for (uint32_t k = 0; k < 65536; k++) {
        uint32_t u = k << 16, b = (u & 0x80000000u) ? u & 0x7fffffffu : ~u;
        float x0;
        memcpy(&x0, &b, sizeof x0);
        int lo = 0;
        if (x0 == x0)
            while (lo < 255 && map[lo + 1] <= x0) lo++;
        lut[k] = (uint8_t)lo;
    }
}

static inline int nearest_fast(const float *map, const uint8_t *lut, float x) {
    if (!(x > map[0])) return 0;
    if (x >= map[255]) return 255;
    int lo = lut[ordered(x) >> 16];
    while (map[lo + 1] <= x) lo++;
    return (map[lo + 1] - x) < (x - map[lo]) ? lo + 1 : lo;
}

static float MAP_S[256], MAP_U[256];
static uint8_t LUT_S[65536], LUT_U[65536];
static int ZERO_S, ZERO_U;
static int maps_ready;

static void maps_init(void) {
    if (maps_ready) return;
#pragma omp critical(hyp_q8_maps)
    if (!maps_ready) {
        hyp_q8_dynamic_map(1, MAP_S);
        hyp_q8_dynamic_map(0, MAP_U);
        lut_init(MAP_S, LUT_S);
        lut_init(MAP_U, LUT_U);
        ZERO_S = nearest(MAP_S, 0.0f);
        ZERO_U = nearest(MAP_U, 0.0f);
        maps_ready = 1;
    }
}

int hyp_q8_nearest(int is_signed, float x, int fast) {
    maps_init();
    const float *map = is_signed ? MAP_S : MAP_U;
    return fast ? nearest_fast(map, is_signed ? LUT_S : LUT_U, x) : nearest(map, x);
}

static void block_step(float *p, const float *g, float *am, float *av, uint8_t *cm, uint8_t *cv, int64_t n, float lr,
                       float beta1, float beta2, float eps, float wd, float ibc1, float ibc2, float gscale) {
    float ms[HYP_Q8_BLOCK], vs[HYP_Q8_BLOCK];
    float nm = 0.0f, nv = 0.0f;
    const float a1 = *am, a2 = *av;
    for (int64_t i = 0; i < n; i++) {
        float gi = g[i] * gscale;
        float mi = beta1 * (MAP_S[cm[i]] * a1) + (1.0f - beta1) * gi;
        float vi = beta2 * (MAP_U[cv[i]] * a2) + (1.0f - beta2) * gi * gi;
        ms[i] = mi, vs[i] = vi;
        nm = fmaxf(nm, fabsf(mi));
        nv = fmaxf(nv, fabsf(vi));
        float mhat = mi * ibc1, vhat = vi * ibc2;
        p[i] -= lr * (mhat / (sqrtf(vhat) + eps) + wd * p[i]);
    }
    *am = nm, *av = nv;
    for (int64_t i = 0; i < n; i++) {
        int c = ZERO_S;
        if (nm > 0.0f) {
            c = nearest_fast(MAP_S, LUT_S, ms[i] / nm);
            if (signbit(MAP_S[c]) != signbit(ms[i])) c += ms[i] > 0.0f ? 1 : -1; /* bitsandbytes: m keeps its sign */
        }
        cm[i] = (uint8_t)c;
        cv[i] = (uint8_t)(nv > 0.0f ? nearest_fast(MAP_U, LUT_U, vs[i] / nv) : ZERO_U);
    }
}

void hyp_adamw8_tensor(float *p, const float *g, float *sm, float *sv, int64_t n, float lr, float beta1, float beta2,
                       float eps, float wd, int t, float gscale) {
    maps_init();
    /* as op_adamw: the bias corrections in double, rounded to float, inverted in float */
    float ibc1 = 1.0f / (float)(1.0 - pow((double)beta1, (double)t));
    float ibc2 = 1.0f / (float)(1.0 - pow((double)beta2, (double)t));
    const int64_t nb = (n + HYP_Q8_BLOCK - 1) / HYP_Q8_BLOCK;
    uint8_t *cm = (uint8_t *)(sm + nb), *cv = (uint8_t *)(sv + nb);
#pragma omp parallel for schedule(static) if (nb >= 128)
    for (int64_t b = 0; b < nb; b++) {
        int64_t lo = b * HYP_Q8_BLOCK, len = n - lo < HYP_Q8_BLOCK ? n - lo : HYP_Q8_BLOCK;
        block_step(p + lo, g + lo, sm + b, sv + b, cm + lo, cv + lo, len, lr, beta1, beta2, eps, wd, ibc1, ibc2, gscale);
    }
}

/* A tensor of group rule "f32" (under v2132's q8_min_size elements, or an embedding: the plan puts
 * it there, as bitsandbytes keeps such tensors in 32-bit states) keeps plain float m[n] and v[n]:
 * op_adamw's update in block_step's expressions, uncontracted like them (the device's
 * adamw8_f32_step is the same bits). */
static void f32_step(float *p, const float *g, float *m, float *v, int64_t n, float lr, float beta1, float beta2,
                     float eps, float wd, float ibc1, float ibc2, float gscale) {
    for (int64_t i = 0; i < n; i++) {
        float gi = g[i] * gscale;
        float mi = beta1 * m[i] + (1.0f - beta1) * gi;
        float vi = beta2 * v[i] + (1.0f - beta2) * gi * gi;
        m[i] = mi, v[i] = vi;
        float mhat = mi * ibc1, vhat = vi * ibc2;
        p[i] -= lr * (mhat / (sqrtf(vhat) + eps) + wd * p[i]);
    }
}

void hyp_adamw8_f32_tensor(float *p, const float *g, float *m, float *v, int64_t n, float lr, float beta1, float beta2,
                           float eps, float wd, int t, float gscale) {
    float ibc1 = 1.0f / (float)(1.0 - pow((double)beta1, (double)t));
    float ibc2 = 1.0f / (float)(1.0 - pow((double)beta2, (double)t));
    f32_step(p, g, m, v, n, lr, beta1, beta2, eps, wd, ibc1, ibc2, gscale);
}

static int is_f32(const hyp_optim_group *g) { return !strcmp(g->rule, "f32"); }

static int check(const hyp_optim_cfg *c, hyp_err *e) {
    static const hyp_optim_hyper_range H[] = {{"beta1", 0, 1, 1}, {"beta2", 0, 1, 1}, {"eps", 0, 1, 1}};
    int rc = hyp_optim_check_hypers(c, "AdamW (8-bit states)", H, (int)(sizeof H / sizeof *H), e);
    return rc ? rc : hyp_optim_check_groups(c, e);
}

static void step_span(const hyp_optim_cfg *c, const hyp_optim_span *s, const hyp_optim_step *a) {
    if (is_f32(s->group)) {
        hyp_adamw8_f32_tensor(s->param, s->grad, s->state[0], s->state[1], s->n, (float)(a->lr * s->group->lr_mult),
                              (float)hyp_optim_hyper(c, "beta1"), (float)hyp_optim_hyper(c, "beta2"),
                              (float)hyp_optim_hyper(c, "eps"), (float)s->group->weight_decay, a->t, a->grad_scale);
        return;
    }
    if (!s->tensor || s->first != 0 || s->n != s->tensor->numel) {
        op_cpu_fail("adamw8bit: the packed 8-bit states need whole tensors (a sharded span reached them)");
        return;
    }
    hyp_adamw8_tensor(s->param, s->grad, s->state[0], s->state[1], s->n, (float)(a->lr * s->group->lr_mult),
                      (float)hyp_optim_hyper(c, "beta1"), (float)hyp_optim_hyper(c, "beta2"),
                      (float)hyp_optim_hyper(c, "eps"), (float)s->group->weight_decay, a->t, a->grad_scale);
}

/* adamw8_block_step(p, sm, sv, g, maps, n, lr, beta1, beta2, eps, wd, ibc1, ibc2, gscale): 14
 * parameters; one launch per tensor, one CUDA block per 256-element block (templates/adamw8.cu.lua),
 * the two maps uploaded into the optimizer workspace */
static int step_device(const hyp_optim_cfg *c, exec_dev *x, const hyp_optim_step *a, const float *d_grad_scale,
                       hyp_err *e) {
    exec_dev_own o;
    int rc = exec_dev_optim_own(x, "adamw8_block_step", "float*", 14, &o, e);
    if (rc) return rc;
    if (x->stage != 0)
        return hyp_fail(e, HYP_EINPUT, "adamw8bit: ZeRO stage %d shards by floats and the 8-bit states are packed per tensor — generate the trainer without zero1/zero2/zero3", x->stage);
    double block = 0;
    if ((rc = exec_dev_optim_const(x, "BLOCK", &block, e))) return rc;
    if ((int)block != HYP_Q8_BLOCK)
        return hyp_fail(e, HYP_EINPUT, "kernels.json: adamw8 BLOCK is %g, the 8-bit states need %d — regenerate with gen", block, HYP_Q8_BLOCK);
    maps_init();
    static float maps[512];
    memcpy(maps, MAP_S, sizeof MAP_S);
    memcpy(maps + 256, MAP_U, sizeof MAP_U);
    float *d_maps;
    if ((rc = exec_dev_optim_work(x, 512, &d_maps, e))) return rc;
    if ((rc = x->dev->h2d(x->dev, d_maps, maps, sizeof maps, NULL, e))) return rc;
    const plan_t *p = x->p;
    const float beta1 = (float)hyp_optim_hyper(c, "beta1"), beta2 = (float)hyp_optim_hyper(c, "beta2");
    const float eps = (float)hyp_optim_hyper(c, "eps");
    /* as op_adamw: the bias corrections in double, rounded to float, inverted in float */
    const float ibc1 = 1.0f / (float)(1.0 - pow((double)beta1, (double)a->t));
    const float ibc2 = 1.0f / (float)(1.0 - pow((double)beta2, (double)a->t));
    for (int i = 0; i < p->n_params_t && !rc; i++) {
        const plan_param *t = &p->params[i];
        const hyp_optim_group *gr = &c->groups[t->group];
        hyp_kargs k;
        memset(&k, 0, sizeof k);
        hyp_kargs_ptr(&k, o.param + t->offset);
        hyp_kargs_ptr(&k, o.state[0] + plan_state_off(c, 0, i, t));
        hyp_kargs_ptr(&k, o.state[1] + plan_state_off(c, 1, i, t));
        hyp_kargs_ptr(&k, o.grad + t->offset);
        const int f32 = is_f32(gr);
        if (!f32) hyp_kargs_ptr(&k, d_maps);
        hyp_kargs_i64(&k, t->numel);
        hyp_kargs_f32(&k, (float)(a->lr * gr->lr_mult));
        hyp_kargs_f32(&k, beta1);
        hyp_kargs_f32(&k, beta2);
        hyp_kargs_f32(&k, eps);
        hyp_kargs_f32(&k, (float)gr->weight_decay);
        hyp_kargs_f32(&k, ibc1);
        hyp_kargs_f32(&k, ibc2);
        hyp_kargs_ptr(&k, d_grad_scale);
        rc = exec_dev_optim_launch_grid(x, f32 ? "adamw8_f32_step" : "adamw8_block_step",
                                        (unsigned)((t->numel + HYP_Q8_BLOCK - 1) / HYP_Q8_BLOCK), &k, e);
    }
    return rc;
}

static int64_t state_numel(const hyp_optim_cfg *c, const plan_param *t, int k) {
    (void)k;
    return is_f32(&c->groups[t->group]) ? t->numel : hyp_q8_state_floats(t->numel);
}

const hyp_optim_i hyp_optim_adamw8 = {
    .kind = "adamw8bit",
    .n_state = 2,
    .state_name = {"m", "v"},
    .state_dtype = {HYP_DT_F32, HYP_DT_F32}, /* float containers of the packed absmax + uint8 codes */
    /* bitsandbytes keeps state1/state2 (codes) and absmax1/absmax2; one packed tensor each here */
    .ckpt_suffix = {".state1_q8", ".state2_q8"},
    .shard_matrix = 1,
    .rules = {"f32", NULL},
    .state_numel = state_numel,
    .check = check,
    .step_span = step_span,
    .step_device = step_device,
};
