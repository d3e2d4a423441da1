/* test_post_training.c — post-training objectives against references.
 *   v2195 DPO, v2196 ORPO, v2197 SimPO, v2198 KTO: pref_pair_loss / pref_kto_loss against
 *     tests/fixtures/pref_losses.json (TRL's formulas in torch float64, make_pref_fixture.py):
 *     loss, d loss / d per-sequence log-prob, accuracy and margin, to 1e-6.
 *   v2193 SFT: a tiny model's loss with masked targets (-1, what the loader writes where S.mask is
 *     0) equals the mean cross-entropy over the unmasked tokens computed by hand from its logits,
 *     and the gradient at every masked position's logits is exactly zero.
 *   v2149 distillation: distill_row's loss and logits gradient against torch (F.kl_div on
 *     temperature-scaled log-softmaxes + cross-entropy), same fixture.
 *   v2195: the per-token path — after the fused loss with row_scale, each scored position's logits
 *     gradient equals -(d loss / d logp of its sequence) * (softmax - onehot), by hand, to 1e-6.
 * Never: training runs (tests/gen/test_post_train.sh). */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>

#include "distill.h"
#include "exec.h"
#include "fsio.h"
#include "hyp_test.h"
#include "plan.h"
#include "pref.h"

/* relative to max(1, |reference|): pref_pair_loss / pref_kto_loss compute in double from the
 * fixture's float64 inputs (a few dozen operations: < 1e-14), and the fixture prints >= 12
 * digits; the per-token path rounds to fp32 once per step (<= a few u = 2e-7). 1e-6 still
 * catches a wrong beta, a sign or a missing reference term (>= 1e-3). */
#define TOL 1e-6

static double rel(double a, double b) { return fabs(a - b) / fmax(1.0, fabs(b)); }

static int arr(const cJSON *c, const char *k, double *out, int n) {
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(c, k);
    if (cJSON_GetArraySize(a) != n) return -1;
    for (int i = 0; i < n; i++) out[i] = cJSON_GetArrayItem(a, i)->valuedouble;
    return 0;
}

static double num(const cJSON *o, const char *k, double d) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsNumber(v) ? v->valuedouble : d;
}

static void test_fixture(void) {
    char path[1024], *txt = NULL;
    snprintf(path, sizeof path, "%s/tests/fixtures/pref_losses.json", HYP_SOURCE_DIR);
    hyp_err e;
    if (hyp_fs_read_small(path, 1 << 22, &txt, NULL, &e)) {
        check(0, "pref_fixture_read", "%s", e.msg);
        return;
    }
    cJSON *root = cJSON_Parse(txt);
    free(txt);
    const cJSON *c;
    int k = 0;
    cJSON_ArrayForEach(c, cJSON_GetObjectItemCaseSensitive(root, "cases")) {
        const char *obj = cJSON_GetObjectItemCaseSensitive(c, "objective")->valuestring;
        const cJSON *pa = cJSON_GetObjectItemCaseSensitive(c, "params");
        int n = (int)num(c, "n", 0);
        if (!strcmp(obj, "distill")) { /* v2149: one row's loss and logits gradient */
            double z[128], zt[128], g[128];
            float zf[128], ztf[128];
            int bad = n > 128 || arr(c, "z", z, n) | arr(c, "zt", zt, n) | arr(c, "g", g, n);
            for (int i = 0; i < n && !bad; i++) zf[i] = (float)z[i], ztf[i] = (float)zt[i];
            float loss = bad ? NAN : distill_row(zf, ztf, (int)num(c, "y", 0), n, num(pa, "temperature", 1), num(pa, "alpha", 0), 1.0f);
            double worst = 0;
            for (int i = 0; i < n && !bad; i++) worst = fmax(worst, rel(zf[i], g[i]));
            char name[96];
            snprintf(name, sizeof name, "v2149_distill_case%d_loss_and_grad_match_torch", k);
            /* inputs rounded to f32 (2^-24 relative each) and a log-softmax over V <= 128 in
             * fp32 (E1: a sum of V positive terms, <= V u = 7.6e-6 worst case): 1e-5 relative */
            check(!bad && rel(loss, num(c, "loss", NAN)) <= 1e-5 && worst <= 1e-5, name,
                  "T %g alpha %g: loss %.7f (torch %.7f), max relative gradient error %.3g over V = %d", num(pa, "temperature", 1),
                  num(pa, "alpha", 0), loss, num(c, "loss", NAN), worst, n);
            k++;
            continue;
        }
        post_cfg cfg = {0};
        cfg.objective = !strcmp(obj, "dpo") ? POST_DPO : !strcmp(obj, "orpo") ? POST_ORPO : !strcmp(obj, "simpo") ? POST_SIMPO : POST_KTO;
        cfg.beta = num(pa, "beta", 0.1), cfg.gamma = num(pa, "gamma", 0), cfg.lambda = num(pa, "lambda", 0.1);
        cfg.label_smoothing = num(pa, "label_smoothing", 0);
        cfg.desirable_weight = num(pa, "desirable_weight", 1), cfg.undesirable_weight = num(pa, "undesirable_weight", 1);
        double a[6][16], g[2][16], want_g[2][16], loss;
        int lc[16], lr[16], lab[16], bad = 0;
        pref_stats st;
        double worst = 0;
        char name[96];
        if (cfg.objective != POST_KTO) {
            bad |= arr(c, "pc", a[0], n) | arr(c, "pr", a[1], n) | arr(c, "rc", a[2], n) | arr(c, "rr", a[3], n);
            bad |= arr(c, "lc", a[4], n) | arr(c, "lr", a[5], n) | arr(c, "gc", want_g[0], n) | arr(c, "gr", want_g[1], n);
            for (int i = 0; i < n; i++) lc[i] = (int)a[4][i], lr[i] = (int)a[5][i];
            loss = pref_pair_loss(&cfg, n, a[0], a[1], a[2], a[3], lc, lr, g[0], g[1], &st);
            for (int i = 0; i < n; i++) worst = fmax(worst, fmax(rel(g[0][i], want_g[0][i]), rel(g[1][i], want_g[1][i])));
            snprintf(name, sizeof name, "v2195-v2197_%s_case%d_accuracy_margin", obj, k);
            check(!bad && rel(st.accuracy, num(c, "accuracy", NAN)) <= TOL && rel(st.margin, num(c, "margin", NAN)) <= TOL, name,
                  "accuracy %.6f (TRL %.6f), margin %.9f (TRL %.9f)", st.accuracy, num(c, "accuracy", NAN), st.margin,
                  num(c, "margin", NAN));
        } else {
            bad |= arr(c, "p", a[0], n) | arr(c, "r", a[1], n) | arr(c, "pk", a[2], n) | arr(c, "rk", a[3], n) | arr(c, "label", a[4], n);
            bad |= arr(c, "g", want_g[0], n);
            for (int i = 0; i < n; i++) lab[i] = (int)a[4][i];
            loss = pref_kto_loss(&cfg, n, a[0], a[1], lab, n, a[2], a[3], g[0], &st);
            for (int i = 0; i < n; i++) worst = fmax(worst, rel(g[0][i], want_g[0][i]));
            snprintf(name, sizeof name, "v2198_kto_case%d_kl_margin", k);
            check(!bad && rel(st.kl, num(c, "kl", NAN)) <= TOL && rel(st.margin, num(c, "margin", NAN)) <= TOL, name,
                  "kl %.9f (TRL %.9f), margin %.9f (TRL %.9f)", st.kl, num(c, "kl", NAN), st.margin, num(c, "margin", NAN));
        }
        snprintf(name, sizeof name, "%s_case%d_loss_matches_trl", obj, k);
        check(!bad && rel(loss, num(c, "loss", NAN)) <= TOL, name, "loss %.12f, TRL formula %.12f", loss, num(c, "loss", NAN));
        snprintf(name, sizeof name, "%s_case%d_grad_matches_torch", obj, k);
        check(!bad && worst <= TOL, name, "max relative error of d loss / d logp %.3g over %d sequences", worst, n);
        k++;
    }
    check(k == 11, "pref_fixture_cases", "%d cases", k);
    cJSON_Delete(root);
}

/* ---- a tiny model ---- */
static char g_tmp[256];

static int load_tiny(plan_t *p, exec_t *x, int B, int T) {
    char cmd[2048], path[512];
    snprintf(cmd, sizeof cmd,
             "cd %s && %s/generator/gen specs/v2500.yaml --enable adamw --model tiny --target cpu --batch %d --seq %d -o %s/tiny >/dev/null 2>&1",
             HYP_SOURCE_DIR, HYP_BINARY_DIR, B, T, g_tmp);
    if (system(cmd)) return -1;
    snprintf(path, sizeof path, "%s/tiny/plan.json", g_tmp);
    hyp_err e;
    if (plan_load(path, p, &e) || exec_init(x, p, &e) || exec_bind(x, B, T, &e)) return -1;
    exec_init_params(x, 7);
    return 0;
}

static int buf_index(const plan_t *p, const char *name) {
    for (int i = 0; i < p->n_bufs; i++)
        if (!strcmp(p->bufs[i].name, name)) return i;
    return -1;
}

/* log-softmax of row z[0..V) at y, and the softmax into s */
static double row_logp(const float *z, int V, int y, double *s) {
    double m = z[0], sum = 0;
    for (int i = 1; i < V; i++) m = fmax(m, z[i]);
    for (int i = 0; i < V; i++) sum += exp((double)z[i] - m);
    for (int i = 0; s && i < V; i++) s[i] = exp((double)z[i] - m) / sum;
    return (double)z[y] - m - log(sum);
}

static void test_sft_and_token_grads(void) {
    const int B = 4, T = 16;
    plan_t p;
    exec_t x;
    if (load_tiny(&p, &x, B, T)) {
        check(0, "v2193_tiny_plan", "gen or plan_load failed");
        return;
    }
    int V = p.V, Vp = p.Vp, lg = buf_index(&p, "logits");
    float *logits0 = malloc(sizeof(float) * (size_t)B * T * Vp);
    double *s = malloc(sizeof(double) * (size_t)V);
    /* v2193: targets masked like the loader does for S.mask = 0 (a "prompt" of 5..8 tokens per row) */
    for (int i = 0; i < B * T; i++) x.tokens[i] = (i * 37 + 11) % V, x.targets[i] = (i * 53 + 5) % V;
    for (int b = 0; b < B; b++)
        for (int t = 0; t < 5 + b; t++) x.targets[b * T + t] = -1;
    exec_forward(&x);
    memcpy(logits0, exec_buf(&x, lg), sizeof(float) * (size_t)B * T * Vp);
    double ref = 0;
    int cnt = 0;
    for (int i = 0; i < B * T; i++)
        if (x.targets[i] >= 0) ref -= row_logp(logits0 + (size_t)i * Vp, V, x.targets[i], NULL), cnt++;
    ref /= cnt;
    memset(x.grads, 0, sizeof(float) * (size_t)p.param_floats);
    float loss = exec_backward(&x, 1.0f / cnt);
    check(fabs(loss - ref) <= 1e-5 * fmax(1, ref), "v2193_sft_loss_is_mean_over_assistant_tokens",
          "loss %.7f, by hand over the %d unmasked targets %.7f (of %d)", loss, cnt, ref, B * T);
    const float *dl = exec_buf(&x, lg);
    int nonzero = 0;
    double live = 0;
    for (int i = 0; i < B * T; i++)
        for (int v = 0; v < Vp; v++) {
            if (x.targets[i] < 0) nonzero += dl[(size_t)i * Vp + v] != 0.0f;
            else live += fabs(dl[(size_t)i * Vp + v]);
        }
    check(nonzero == 0 && live > 0, "v2193_sft_prompt_token_gradient_exactly_zero",
          "%d nonzero logit-gradient entries at the %d masked positions (sum |grad| elsewhere %.3g)", nonzero, B * T - cnt, live);

    /* v2195: DPO through row_scale on two pairs (rows 0/1, 2/3), completions = unmasked targets */
    post_cfg cfg = {0};
    cfg.objective = POST_DPO, cfg.beta = 0.5;
    exec_eval_loss(&x);
    memcpy(logits0, exec_buf(&x, lg), sizeof(float) * (size_t)B * T * Vp);
    double lp[4] = {0}, rf[4] = {-40, -41, -38, -37}, gc[2], gr[2];
    int n[4] = {0};
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++)
            if (x.targets[b * T + t] >= 0) lp[b] += row_logp(logits0 + (size_t)(b * T + t) * Vp, V, x.targets[b * T + t], NULL), n[b]++;
    double pc[2] = {lp[0], lp[2]}, pr[2] = {lp[1], lp[3]}, rc[2] = {rf[0], rf[2]}, rr[2] = {rf[1], rf[3]};
    int lc[2] = {n[0], n[2]}, lr[2] = {n[1], n[3]};
    pref_stats st;
    pref_pair_loss(&cfg, 2, pc, pr, rc, rr, lc, lr, gc, gr, &st);
    double gs[4] = {gc[0], gr[0], gc[1], gr[1]};
    float *scale = malloc(sizeof(float) * (size_t)B * T);
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) scale[b * T + t] = (float)-gs[b];
    x.row_scale = scale;
    exec_backward(&x, 1.0f);
    x.row_scale = NULL;
    double worst = 0, mx = 0;
    for (int i = 0; i < B * T; i++) {
        if (x.targets[i] < 0) continue;
        row_logp(logits0 + (size_t)i * Vp, V, x.targets[i], s);
        for (int v = 0; v < V; v++) {
            double want = gs[i / T] * ((v == x.targets[i]) - s[v]); /* d L / d z = g * (onehot - softmax) */
            worst = fmax(worst, fabs(dl[(size_t)i * Vp + v] - want));
            mx = fmax(mx, fabs(want));
        }
    }
    check(worst <= 1e-6 * fmax(1, mx) && mx > 0, "v2195_dpo_per_token_logit_gradient_matches_hand",
          "max |ours - hand| %.3g (max |grad| %.3g); loss %.6f", worst, mx, st.loss);
    free(scale), free(logits0), free(s);
    exec_free(&x);
    plan_free(&p);
}

int main(void) {
    snprintf(g_tmp, sizeof g_tmp, "/tmp/hyp_post_XXXXXX");
    if (!mkdtemp(g_tmp)) return 1;
    test_fixture();
    test_sft_and_token_grads();
    rm_rf(g_tmp);
    return hyp_test_finish();
}
