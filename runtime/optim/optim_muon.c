/* optim_muon.c — Muon (Keller Jordan et al. 2024, "Muon: An optimizer for hidden layers in neural
 * networks"; the update of github.com/KellerJordan/Muon, MuonWithAuxAdam) as an optimizer of
 * optim.h. Two rules, named by the plan's groups: "muon" on the hidden 2-D weight matrices,
 * "adamw" on everything else (embeddings, output head, norm gains, biases). States m and v (fp32,
 * packed per tensor): on a Muon matrix m is the momentum buffer and there is no v (0 floats); on
 * an AdamW tensor they are Adam's moments. A Muon matrix W [R, K] with gradient g (times the clip factor):
 *     m  = beta*m + (1-beta)*g                          (momentum.lerp_(grad, 1 - beta))
 *     u  = nesterov ? beta*m + (1-beta)*g : m           (grad.lerp_(momentum, beta))
 *     O  = NewtonSchulz5(u)                             (quintic, a,b,c = 3.4445, -4.7750, 2.0315)
 *     O *= max(1, R/K)^0.5        (the reference's shape scaling; "match_adamw": 0.2*sqrt(max(R,K)))
 *     W *= 1 - lr*wd;  W -= lr*O
 * The Newton-Schulz GEMMs run in fp32 through oneDNN's sgemm (ops_cpu.c op_newton_schulz5); the
 * reference runs them in bf16 because tensor cores make bf16 fast on a GPU — on the cpu backend
 * fp32 sgemm is the fast path, and fp32 keeps the iteration within rounding of the float64
 * fixture (tests/reference/make_fixtures.py).
 * On a device (sim, cuda) the same steps run per Muon matrix: the muon_momentum kernel (m, the
 * Nesterov look-ahead u and block partial sums of u^2), muon_normalize (u / (||u||_F + 1e-7)),
 * ns_steps x three fp32 device GEMMs (hyp_gemm, cuBLASLt semantics: A = X X^T, B = b A + c A A,
 * X = a X + B X, the transpose of a tall matrix folded into the GEMMs' op flags) and muon_apply;
 * the AdamW tensors take muon_adamw_step, one launch per tensor (templates/muon.cu.lua). fp32,
 * not the reference's bf16: the sim's GEMM accumulates in double and rounds once, oneDNN's in
 * fp32, so cpu and sim agree within rounding (tests/gen/test_muon_dev.sh), not bit for bit.
 * The update needs whole matrices (shard_matrix = 1). Under ZeRO stages 1-2 on the cpu backend
 * (train_optim_own_matrix) it runs as distributed Muon: m stays sharded by floats (pre_span
 * updates the own floats and writes u), u is all-gathered, each matrix's Newton-Schulz and scale
 * run on the one rank it is assigned to (matrix_solve), the results are summed over ranks (zeros
 * elsewhere), and post_span updates the own floats of the parameters. The same float expressions
 * as step_muon, so ZeRO-1 equals plain data parallelism bit for bit given the same gradients.
 * Never: scheduling, clipping or ZeRO (the callers do those). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ops_cpu.h"
#include "optim_kernels_cpu.h"
#include "optim.h"

static const hyp_optim_hyper_range H[] = {
    {"momentum", 0, 1, 0}, {"nesterov", 0, 1, 0}, {"ns_steps", 1, 10, 0}, {"match_adamw", 0, 1, 0},
    {"beta1", 0, 0.999999, 0}, {"beta2", 0, 0.999999, 0}, {"eps", 0, 1, 0},
};
#define NH ((int)(sizeof H / sizeof *H))

static int check(const hyp_optim_cfg *c, hyp_err *e) {
    int rc = hyp_optim_check_hypers(c, "Muon", H, NH, e);
    if (rc) return rc;
    int muon = 0;
    for (int g = 0; g < c->n_groups; g++) {
        if (strcmp(c->groups[g].rule, "muon") && strcmp(c->groups[g].rule, "adamw"))
            return hyp_fail(e, HYP_EINPUT, "plan: optimizer group '%s' names no rule; Muon's groups say \"muon\" or \"adamw\" — regenerate the trainer with gen",
                            c->groups[g].name);
        muon += !strcmp(c->groups[g].rule, "muon");
    }
    if (!muon) return hyp_fail(e, HYP_EINPUT, "plan: no optimizer group has rule \"muon\" — regenerate the trainer with gen");
    return HYP_OK;
}

static void step_muon(const hyp_optim_cfg *c, const hyp_optim_span *s, const hyp_optim_step *a) {
    const plan_param *t = s->tensor;
    if (!t || t->ndim != 2 || s->first != 0 || s->n != t->numel) {
        op_cpu_fail("muon: a Muon tensor must be a whole 2-D matrix (a sharded or 1-D span reached it)");
        return;
    }
    const long R = (long)t->shape[0], K = (long)t->shape[1], r = R < K ? R : K;
    const float beta = (float)hyp_optim_hyper(c, "momentum"), gs = a->grad_scale;
    const int nesterov = hyp_optim_hyper(c, "nesterov") != 0, steps = (int)hyp_optim_hyper(c, "ns_steps");
    const float lr = (float)(a->lr * s->group->lr_mult), decay = 1.0f - lr * (float)s->group->weight_decay;
    float scale = hyp_optim_hyper(c, "match_adamw") != 0 ? 0.2f * sqrtf((float)(R > K ? R : K))
                                                          : sqrtf(R > K ? (float)R / (float)K : 1.0f);
    float *u = malloc(sizeof(float) * (size_t)(4 * R * K + 2 * r * r));
    if (!u) {
        op_cpu_fail("muon: out of memory for the Newton-Schulz workspace");
        return;
    }
    float *o = u + R * K, *work = o + R * K;
    float *m = s->state[0], *p = s->param;
    const float *g = s->grad;
    for (long i = 0; i < R * K; i++) {
        float gi = g[i] * gs;
        m[i] = beta * m[i] + (1.0f - beta) * gi;
        u[i] = nesterov ? beta * m[i] + (1.0f - beta) * gi : m[i];
    }
    op_newton_schulz5(o, u, R, K, steps, 3.4445f, -4.7750f, 2.0315f, work);
    for (long i = 0; i < R * K; i++) p[i] = p[i] * decay - lr * (scale * o[i]);
    free(u);
}

/* ---- ZeRO stages 1-2 (train_optim_own_matrix): the step above in three parts, so the momentum
 * stays sharded by floats and each matrix's Newton-Schulz runs on one rank ---------------------- */

static void pre_span(const hyp_optim_cfg *c, const hyp_optim_span *s, const hyp_optim_step *a, float *u) {
    const float beta = (float)hyp_optim_hyper(c, "momentum"), gs = a->grad_scale;
    const int nesterov = hyp_optim_hyper(c, "nesterov") != 0;
    float *m = s->state[0];
    const float *g = s->grad;
    for (int64_t i = 0; i < s->n; i++) {
        float gi = g[i] * gs;
        m[i] = beta * m[i] + (1.0f - beta) * gi;
        u[i] = nesterov ? beta * m[i] + (1.0f - beta) * gi : m[i];
    }
}

static void matrix_solve(const hyp_optim_cfg *c, const plan_param *t, const float *u, float *o) {
    if (t->ndim != 2) {
        op_cpu_fail("muon: a Muon tensor must be a 2-D matrix");
        return;
    }
    const long R = (long)t->shape[0], K = (long)t->shape[1], r = R < K ? R : K;
    const float scale = hyp_optim_hyper(c, "match_adamw") != 0 ? 0.2f * sqrtf((float)(R > K ? R : K))
                                                                : sqrtf(R > K ? (float)R / (float)K : 1.0f);
    float *work = malloc(sizeof(float) * (size_t)(2 * R * K + 2 * r * r));
    if (!work) {
        op_cpu_fail("muon: out of memory for the Newton-Schulz workspace");
        return;
    }
    op_newton_schulz5(o, u, R, K, (int)hyp_optim_hyper(c, "ns_steps"), 3.4445f, -4.7750f, 2.0315f, work);
    for (long i = 0; i < R * K; i++) o[i] = scale * o[i];
    free(work);
}

static void post_span(const hyp_optim_cfg *c, const hyp_optim_span *s, const hyp_optim_step *a, const float *o) {
    (void)c;
    const float lr = (float)(a->lr * s->group->lr_mult), decay = 1.0f - lr * (float)s->group->weight_decay;
    float *p = s->param;
    for (int64_t i = 0; i < s->n; i++) p[i] = p[i] * decay - lr * o[i];
}

static void step_span(const hyp_optim_cfg *c, const hyp_optim_span *s, const hyp_optim_step *a) {
    if (!strcmp(s->group->rule, "muon")) {
        step_muon(c, s, a);
        return;
    }
    op_adamw(s->param, s->grad, s->state[0], s->state[1], (long)s->n, (float)(a->lr * s->group->lr_mult),
             (float)hyp_optim_hyper(c, "beta1"), (float)hyp_optim_hyper(c, "beta2"), (float)hyp_optim_hyper(c, "eps"),
             (float)s->group->weight_decay, a->t, a->grad_scale);
}

/* ---- the device step ---------------------------------------------------------------------------- */

static int dgemm(exec_dev *x, int ta, int tb, int64_t m, int64_t n, int64_t k, float alpha, const float *a, int64_t lda,
                 const float *b, int64_t ldb, float beta, const float *c, float *d, int64_t ldd, hyp_err *e) {
    hyp_gemm g;
    memset(&g, 0, sizeof g);
    g.transa = ta, g.transb = tb, g.m = m, g.n = n, g.k = k;
    g.atype = g.btype = g.dtype = HYP_DT_F32;
    g.compute = HYP_GEMM_F32;
    g.alpha = alpha, g.beta = beta;
    g.a = a, g.lda = lda, g.b = b, g.ldb = ldb;
    g.c = beta != 0.0f ? c : NULL, g.ldc = ldd;
    g.d = d, g.ldd = ldd;
    return x->dev->gemm(x->dev, &g, NULL, e);
}

/* One Muon matrix W [R][K] (row-major) on the device. op_newton_schulz5 iterates on X [r][k]
 * (row-major, r = min(R, K); X = G^T when R > K). In the GEMMs' column-major terms the buffer
 * holding G row-major is X^T (k x r, ld k) when R <= K and X itself (r x k, ld r) when R > K, so
 * no transpose is ever copied: A = X X^T, B = c A A + b A (A, B symmetric), Y = a X + B X with the
 * flags chosen per case, and the result lies in G's own row-major layout. */
static int muon_matrix(const hyp_optim_cfg *c, exec_dev *x, const hyp_optim_step *a, const float *d_grad_scale,
                       const plan_param *t, float *p, const float *g, float *m, float *work, int parts, hyp_err *e) {
    const int64_t R = t->shape[0], K = t->shape[1], n = R * K;
    const int tr = R > K;
    const int64_t r = tr ? K : R, k = tr ? R : K;
    const float beta = (float)hyp_optim_hyper(c, "momentum");
    const int nesterov = hyp_optim_hyper(c, "nesterov") != 0, steps = (int)hyp_optim_hyper(c, "ns_steps");
    const hyp_optim_group *gr = &c->groups[t->group];
    const float lr = (float)(a->lr * gr->lr_mult), decay = 1.0f - lr * (float)gr->weight_decay;
    const float scale = hyp_optim_hyper(c, "match_adamw") != 0 ? 0.2f * sqrtf((float)(R > K ? R : K))
                                                                : sqrtf(R > K ? (float)R / (float)K : 1.0f);
    const float qa = 3.4445f, qb = -4.7750f, qc = 2.0315f;
    float *X = work, *Y = X + n, *A = Y + n, *Bm = A + r * r, *partial = Bm + r * r;
    double block = 256;
    int rc = exec_dev_optim_const(x, "BLOCK", &block, e);
    if (rc) return rc;
    unsigned grid = (unsigned)((n + (int64_t)block - 1) / (int64_t)block);
    hyp_kargs ka;
    memset(&ka, 0, sizeof ka);
    hyp_kargs_ptr(&ka, m);
    hyp_kargs_ptr(&ka, X);
    hyp_kargs_ptr(&ka, g);
    hyp_kargs_i64(&ka, n);
    hyp_kargs_f32(&ka, beta);
    hyp_kargs_i32(&ka, nesterov);
    hyp_kargs_ptr(&ka, d_grad_scale);
    hyp_kargs_ptr(&ka, partial);
    if ((rc = exec_dev_optim_launch_grid(x, "muon_momentum", (unsigned)parts, &ka, e))) return rc;
    memset(&ka, 0, sizeof ka);
    hyp_kargs_ptr(&ka, X);
    hyp_kargs_i64(&ka, n);
    hyp_kargs_ptr(&ka, partial);
    if ((rc = exec_dev_optim_launch_grid(x, "muon_normalize", grid, &ka, e))) return rc;
    const int64_t ld = tr ? r : k; /* the leading dimension of X and Y */
    for (int s = 0; s < steps && !rc; s++) {
        rc = tr ? dgemm(x, 0, 1, r, r, k, 1.0f, X, ld, X, ld, 0.0f, NULL, A, r, e)
                : dgemm(x, 1, 0, r, r, k, 1.0f, X, ld, X, ld, 0.0f, NULL, A, r, e);
        if (!rc) rc = dgemm(x, 0, 0, r, r, r, qc, A, r, A, r, qb, A, Bm, r, e);
        if (!rc) rc = tr ? dgemm(x, 1, 0, r, k, r, 1.0f, Bm, r, X, ld, qa, X, Y, ld, e)
                         : dgemm(x, 0, 0, k, r, r, 1.0f, X, ld, Bm, r, qa, X, Y, ld, e);
        float *tmp = X;
        X = Y, Y = tmp;
    }
    if (rc) return rc;
    memset(&ka, 0, sizeof ka);
    hyp_kargs_ptr(&ka, p);
    hyp_kargs_ptr(&ka, X);
    hyp_kargs_i64(&ka, n);
    hyp_kargs_f32(&ka, decay);
    hyp_kargs_f32(&ka, lr);
    hyp_kargs_f32(&ka, scale);
    return exec_dev_optim_launch_grid(x, "muon_apply", grid, &ka, e);
}

/* The whole model on this rank (stage 0: every rank holds every matrix and its momentum): each
 * Muon matrix through muon_matrix, each other tensor through muon_adamw_step. */
static int step_device(const hyp_optim_cfg *c, exec_dev *x, const hyp_optim_step *a, const float *d_grad_scale,
                       hyp_err *e) {
    exec_dev_own o;
    int rc = exec_dev_optim_own(x, "muon_adamw_step", "float*", 13, &o, e);
    if (rc) return rc;
    if (x->stage != 0)
        return hyp_fail(e, HYP_EINPUT, "muon: ZeRO stage %d shards by floats and Muon needs whole matrices — generate the trainer without zero1/zero2/zero3", x->stage);
    const plan_t *p = x->p;
    double parts_d = 0;
    if ((rc = exec_dev_optim_const(x, "PARTS", &parts_d, e))) return rc;
    const int parts = (int)parts_d;
    int64_t need = 0;
    for (int i = 0; i < p->n_params_t; i++) {
        const plan_param *t = &p->params[i];
        if (strcmp(c->groups[t->group].rule, "muon")) continue;
        if (t->ndim != 2) return hyp_fail(e, HYP_EINPUT, "plan: Muon tensor '%s' is not a 2-D matrix — regenerate the trainer with gen", t->name);
        int64_t r = t->shape[0] < t->shape[1] ? t->shape[0] : t->shape[1];
        int64_t w = 2 * t->numel + 2 * r * r + parts;
        if (w > need) need = w;
    }
    float *work = NULL;
    if ((rc = exec_dev_optim_work(x, need, &work, e))) return rc;
    const float b1 = (float)hyp_optim_hyper(c, "beta1"), b2 = (float)hyp_optim_hyper(c, "beta2");
    /* as op_adamw: the bias corrections in double, rounded to float, inverted in float */
    const float ibc1 = 1.0f / (float)(1.0 - pow((double)b1, (double)a->t)), ibc2 = 1.0f / (float)(1.0 - pow((double)b2, (double)a->t));
    double block = 256;
    if ((rc = exec_dev_optim_const(x, "BLOCK", &block, e))) return rc;
    for (int i = 0; i < p->n_params_t && !rc; i++) {
        const plan_param *t = &p->params[i];
        const hyp_optim_group *gr = &c->groups[t->group];
        float *pp = o.param + t->offset, *m = o.state[0] + plan_state_off(c, 0, i, t);
        const float *g = o.grad + t->offset;
        if (!strcmp(gr->rule, "muon")) {
            rc = muon_matrix(c, x, a, d_grad_scale, t, pp, g, m, work, parts, e);
            continue;
        }
        hyp_kargs k;
        memset(&k, 0, sizeof k);
        hyp_kargs_ptr(&k, pp);
        hyp_kargs_ptr(&k, m);
        hyp_kargs_ptr(&k, o.state[1] + plan_state_off(c, 1, i, t));
        hyp_kargs_ptr(&k, g);
        hyp_kargs_i64(&k, t->numel);
        hyp_kargs_f32(&k, (float)(a->lr * gr->lr_mult));
        hyp_kargs_f32(&k, b1);
        hyp_kargs_f32(&k, b2);
        hyp_kargs_f32(&k, (float)hyp_optim_hyper(c, "eps"));
        hyp_kargs_f32(&k, (float)gr->weight_decay);
        hyp_kargs_f32(&k, ibc1);
        hyp_kargs_f32(&k, ibc2);
        hyp_kargs_ptr(&k, d_grad_scale);
        rc = exec_dev_optim_launch_grid(x, "muon_adamw_step", (unsigned)((t->numel + (int64_t)block - 1) / (int64_t)block), &k, e);
    }
    return rc;
}

/* m everywhere; v only where the AdamW rule runs (a Muon matrix keeps no second moment) when v is
 * packed; under ZeRO v has the arena's layout (sharded by floats: a Muon matrix's part unused) */
static int64_t state_numel(const hyp_optim_cfg *c, const plan_param *t, int k) {
    return k == 1 && c->state_compact[1] && !strcmp(c->groups[t->group].rule, "muon") ? 0 : t->numel;
}

const hyp_optim_i hyp_optim_muon = {
    .kind = "muon",
    .n_state = 2,
    .state_name = {"m", "v"},
    .state_dtype = {HYP_DT_F32, HYP_DT_F32},
    /* MuonWithAuxAdam's names for the Adam tensors; a Muon matrix's momentum_buffer is saved as
     * its exp_avg (and its exp_avg_sq stays 0) */
    .ckpt_suffix = {".exp_avg", ".exp_avg_sq"},
    .shard_matrix = 1,
    .rules = {"muon", "adamw", NULL},
    .state_numel = state_numel,
    .check = check,
    .step_span = step_span,
    .step_device = step_device,
    .matrix_rule = "muon",
    .pre_span = pre_span,
    .matrix_solve = matrix_solve,
    .post_span = post_span,
};
