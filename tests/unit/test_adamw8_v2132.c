/* test_adamw8_v2132.c — v2132 state_dtype q8: AdamW with 8-bit block-wise quantized states
 * (runtime/optim/optim_adamw8.c) against tests/fixtures/ref_adamw8bit.safetensors, written by
 * tests/reference/make_adamw8bit_fixture.py (bitsandbytes' algorithm in plain Python float32):
 * both dynamic maps, then three tensors of sizes that are not multiples of the 256-element block
 * (77, 300, 1000) through 5 steps, through the optimizer interface (kind "adamw8bit", states packed
 * as the plan lays them out), comparing after every step the parameters, both code arrays and both
 * absmax vectors. Tolerance: none — bit-identical. The reference rounds every operation to float32
 * once, and optim_adamw8.c is compiled with -ffp-contract=off (no fused multiply-add), so both
 * compute the same IEEE float32 expressions in the same order; the bias corrections come from
 * pow() in double on both sides (Python's math.pow is the C library's pow). Then the state bytes
 * per parameter (packed floats x 4 / numel) against fp32 AdamW's 8. Never: files beyond the fixture. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "hyp_test.h"
#include "optim.h"
#include "optim_adamw8.h"
#include "safetensors.h"

static hyp_st_file *F;
static void *copies[512]; /* the aligned copies tensor() hands out, freed at exit */
static int n_copies;

/* A copy of fixture tensor `name` in malloc'd (aligned) memory: the file packs u8 code tensors
 * between the f32 ones, so its f32 data need not be 4-byte aligned in the mapping. */
static const void *tensor(const char *name, int64_t n, hyp_st_dtype dt) {
    const hyp_st_tensor *t = hyp_st_find(F, name);
    if (!t || t->dtype != dt || t->ndim != 1 || t->shape[0] != n || n_copies == 512) {
        printf("FAIL fixture tensor %s missing or not [%lld] %s\n", name, (long long)n, hyp_st_dtype_name(dt));
        g_fail++;
        return NULL;
    }
    size_t bytes = (size_t)n * (dt == HYP_ST_U8 ? 1 : 4);
    void *c = malloc(bytes ? bytes : 1);
    if (!c) return NULL;
    memcpy(c, t->data, bytes);
    return copies[n_copies++] = c;
}

static void run_tensor(const char *name, int64_t n, const hyp_optim_i *o) {
    const int steps = 5, nb = (int)((n + HYP_Q8_BLOCK - 1) / HYP_Q8_BLOCK);
    int64_t sf = hyp_q8_state_floats(n);
    float *p = malloc(sizeof(float) * (size_t)n), *sm = calloc((size_t)sf, sizeof(float)),
          *sv = calloc((size_t)sf, sizeof(float));
    char key[64];
    snprintf(key, sizeof key, "%s.p0", name);
    const float *p0 = tensor(key, n, HYP_ST_F32);
    if (!p || !sm || !sv || !p0) goto done;
    memcpy(p, p0, sizeof(float) * (size_t)n);
    /* the fixture's hyper-parameters (its metadata): beta1 0.9, beta2 0.95, eps 1e-8, lr 1e-3, wd 0.1, grad_scale 0.8 */
    hyp_optim_cfg cfg;
    memset(&cfg, 0, sizeof cfg);
    snprintf(cfg.kind, sizeof cfg.kind, "adamw8bit");
    const char *hn[3] = {"beta1", "beta2", "eps"};
    const double hv[3] = {0.9, 0.95, 1e-8};
    for (int i = 0; i < 3; i++) snprintf(cfg.hyper_name[i], sizeof cfg.hyper_name[i], "%s", hn[i]), cfg.hyper[i] = hv[i];
    cfg.n_hyper = 3;
    hyp_optim_group grp = {.name = "decay", .lr_mult = 1.0, .weight_decay = 0.1};
    plan_param t = {.name = (char *)name, .numel = n, .ndim = 1};
    t.shape[0] = n;
    int bad_p = 0, bad_c = 0, bad_a = 0;
    for (int s = 1; s <= steps; s++) {
        snprintf(key, sizeof key, "%s.g%d", name, s);
        const float *g = tensor(key, n, HYP_ST_F32);
        if (!g) goto done;
        hyp_optim_span sp = {.param = p, .grad = g, .state = {sm, sv}, .n = n, .group = &grp, .tensor = &t};
        hyp_optim_step a = {.lr = 1e-3, .t = s, .grad_scale = 0.8f};
        o->step_span(&cfg, &sp, &a);
        snprintf(key, sizeof key, "%s.p%d", name, s);
        const float *rp = tensor(key, n, HYP_ST_F32);
        snprintf(key, sizeof key, "%s.m_codes%d", name, s);
        const uint8_t *rcm = tensor(key, n, HYP_ST_U8);
        snprintf(key, sizeof key, "%s.v_codes%d", name, s);
        const uint8_t *rcv = tensor(key, n, HYP_ST_U8);
        snprintf(key, sizeof key, "%s.m_absmax%d", name, s);
        const float *ram = tensor(key, nb, HYP_ST_F32);
        snprintf(key, sizeof key, "%s.v_absmax%d", name, s);
        const float *rav = tensor(key, nb, HYP_ST_F32);
        if (!rp || !rcm || !rcv || !ram || !rav) goto done;
        const uint8_t *cm = (const uint8_t *)(sm + nb), *cv = (const uint8_t *)(sv + nb);
        for (int64_t i = 0; i < n; i++) {
            bad_p += memcmp(&p[i], &rp[i], sizeof(float)) != 0;
            bad_c += (cm[i] != rcm[i]) + (cv[i] != rcv[i]);
        }
        for (int b = 0; b < nb; b++) bad_a += memcmp(&sm[b], &ram[b], 4) != 0 || memcmp(&sv[b], &rav[b], 4) != 0;
    }
    check(bad_p == 0, "v2132 q8 parameters == reference, 5 steps", "%s [%lld]: %d of %lld differ", name, (long long)n,
          bad_p, (long long)n * steps);
    check(bad_c == 0, "v2132 q8 m/v codes == reference, 5 steps", "%s: %d of %lld differ", name, bad_c,
          (long long)n * steps * 2);
    check(bad_a == 0, "v2132 q8 absmax == reference, 5 steps", "%s: %d of %d blocks differ", name, bad_a, nb * steps * 2);
done:
    free(p), free(sm), free(sv);
}

int main(void) {
    hyp_err e = {0};
    if (hyp_st_open(HYP_SOURCE_DIR "/tests/fixtures/ref_adamw8bit.safetensors", &F, &e)) {
        printf("FAIL open fixture: %s\n", e.msg);
        return 1;
    }
    /* the maps, bit for bit, and their shape: sorted, 0 and 1 present, 256 distinct codes */
    for (int s = 0; s < 2; s++) {
        float map[256];
        hyp_q8_dynamic_map(!s, map);
        const float *ref = tensor(s ? "map_unsigned" : "map_signed", 256, HYP_ST_F32);
        int inc = 1, zero = 0, one = 0;
        for (int i = 0; i < 256; i++) {
            if (i && !(map[i] > map[i - 1])) inc = 0;
            zero += map[i] == 0.0f, one += map[i] == 1.0f;
        }
        check(ref && !memcmp(map, ref, sizeof map) && inc && zero == 1 && one == 1,
              s ? "v2132 q8 unsigned dynamic map == create_dynamic_map(False)" : "v2132 q8 signed dynamic map == create_dynamic_map(True)",
              "min %.9g, max %g, smallest positive %.3g", map[0], map[255], map[s ? 1 : 128]);
    }
    /* the step's table-guided nearest code == the binary search, for every float in [-1, 1] with
     * the low 8 mantissa bits cycling (2^24 of them per map: every table bucket, both sides of
     * every code and every midpoint's neighbourhood within 2^-15 relative), and +-0, +-1, NaN */
    for (int s = 0; s < 2; s++) {
        long bad = 0, tried = 0;
        for (uint32_t hi = 0; hi < (1u << 24); hi++) {
            uint32_t u = (hi << 8) | (hi & 0xffu);
            float x;
            memcpy(&x, &u, sizeof x);
            if (!(fabsf(x) <= 1.0f)) continue;
            tried++;
            bad += hyp_q8_nearest(s, x, 1) != hyp_q8_nearest(s, x, 0);
        }
        const float edge[5] = {0.0f, -0.0f, 1.0f, -1.0f, NAN};
        for (int i = 0; i < 5; i++) bad += hyp_q8_nearest(s, edge[i], 1) != hyp_q8_nearest(s, edge[i], 0);
        check(bad == 0, s ? "v2132 q8 signed nearest code: table == binary search" : "v2132 q8 unsigned nearest code: table == binary search",
              "%ld of %ld floats differ", bad, tried + 5);
    }
    const hyp_optim_i *o = hyp_optim_find("adamw8bit");
    check(o && o->n_state == 2 && o->shard_matrix == 1 && o->state_numel, "v2132 q8 kind adamw8bit registered",
          "2 packed states, whole tensors");
    if (o) {
        run_tensor("a", 77, o);
        run_tensor("b", 300, o);
        run_tensor("c", 1000, o);
    }
    /* state bytes per parameter: fp32 AdamW keeps 2 x 4; q8 keeps 2 x (1 code + 4/256 absmax) */
    const int64_t n = 124439808; /* gpt2-124m's parameters */
    double bpp = 2.0 * 4.0 * (double)hyp_q8_state_floats(n) / (double)n;
    check(fabs(bpp - 2.0 * (1.0 + 4.0 / 256.0)) < 1e-6, "v2132 q8 state bytes per parameter", "%.4f B (fp32 AdamW: 8 B)", bpp);
    hyp_st_close(F);
    for (int i = 0; i < n_copies; i++) free(copies[i]);
    return hyp_test_finish();
}
