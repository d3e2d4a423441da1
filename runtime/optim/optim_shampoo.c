/* optim_shampoo.c — Shampoo (Gupta, Koren & Singer 2018; the blocked, grafted form of Anil et
 * al. 2020 and of Distributed Shampoo, Shi et al. 2023) as an optimizer of optim.h. Two rules,
 * named by the plan's groups: "shampoo" on 2-D weight matrices, "adam" on everything else (norm
 * gains, biases). States, fp32, packed per tensor (state_numel):
 *     m     [numel]  Adam's first moment (the filtered gradient)      ckpt ".exp_avg"
 *     v     [numel]  Adam's second moment (the grafting statistics)   ckpt ".exp_avg_sq"
 *     stat  per block b of a Shampoo matrix: L_b [br, br] then R_b [bc, bc]; 0 floats on Adam
 *     root  per block: L_b^(-1/p) then R_b^(-1/p), the same layout
 * A Shampoo matrix W [R, K] is cut into blocks of at most block_size rows and block_size columns
 * (row-major block order, the last row/column block smaller). With g the gradient times the clip
 * factor and t the 1-based step:
 *     m = b1*m + (1-b1)*g;  v = b2*v + (1-b2)*g^2;  mh = m/(1-b1^t);  A = mh / (sqrt(v/(1-b2^t)) + eps)
 *     per block:  L = s*L + (1-s)*G G^T,  R = s*R + (1-s)*G^T G      (s = stat_beta2; s == 1: L += G G^T)
 *     when t >= start and (t == start or t % freq == 0), per block, in float64 (LAPACK dsyevd):
 *         root(L) = Q diag((max(lambda, 0) + epsilon)^(-1/p)) Q^T  of  L/(1 - s^t)  (s == 1: L)
 *     t >= start:  P_b = root(L_b) mh_b root(R_b),  D_b = P_b * ||A_b|| / ||P_b||   (Adam grafting;
 *                  SGD grafting takes ||mh_b||; P_b == 0 falls back to D_b = A_b)
 *     t <  start:  D = A (the grafted optimizer alone)
 *     W = W*(1 - lr*wd) - lr*D
 * p is 4 (the inverse 4th root of each factor of a matrix) unless inv_root overrides it. The
 * statistic and preconditioning GEMMs run through oneDNN's sgemm; the eigendecompositions through
 * the system LAPACK's dsyevd (Debian liblapack3: why in README "Dependencies"), in double because
 * the root amplifies the small eigenvalues' rounding by lambda^(-1/4) and it runs once per freq
 * steps. Blocks need whole matrices (shard_matrix = 1): ZeRO, which shards by floats, is refused;
 * there is no device kernel (gen refuses sim/cuda). Never: scheduling, clipping or ZeRO. */
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include <oneapi/dnnl/dnnl.h>

#include "ops_cpu.h"
#include "optim_kernels_cpu.h"
#include "optim.h"

/* LAPACK's symmetric eigensolver (Fortran ABI; the trailing lengths of the two character
 * arguments are gfortran's hidden ones) */
extern void dsyevd_(const char *jobz, const char *uplo, const int *n, double *a, const int *lda, double *w,
                    double *work, const int *lwork, int *iwork, const int *liwork, int *info, size_t ljobz,
                    size_t luplo);

static const hyp_optim_hyper_range H[] = {
    {"beta1", 0, 1, 1},      {"beta2", 0, 1, 1},         {"eps", 0, 1, 0},        {"stat_beta2", 0, 1, 0},
    {"epsilon", 0, 1, 0},    {"freq", 1, 1e6, 0},        {"start", 1, 1e9, 0},    {"block_size", 1, 65536, 0},
    {"inv_root", 1, 64, 0},  {"graft_sgd", 0, 1, 0},
};
#define NH ((int)(sizeof H / sizeof *H))

static int check(const hyp_optim_cfg *c, hyp_err *e) {
    int rc = hyp_optim_check_hypers(c, "Shampoo", H, NH, e);
    if (rc) return rc;
    static const char *const whole[] = {"freq", "start", "block_size", "inv_root", "graft_sgd"};
    for (size_t i = 0; i < sizeof whole / sizeof *whole; i++) {
        double v = hyp_optim_hyper(c, whole[i]);
        if (v != floor(v))
            return hyp_fail(e, HYP_EINPUT, "plan: optimizer.hyper.%s = %g must be a whole number — regenerate the trainer with a valid value",
                            whole[i], v);
    }
    int n = 0;
    for (int g = 0; g < c->n_groups; g++) {
        if (strcmp(c->groups[g].rule, "shampoo") && strcmp(c->groups[g].rule, "adam"))
            return hyp_fail(e, HYP_EINPUT, "plan: optimizer group '%s' names no rule; Shampoo's groups say \"shampoo\" or \"adam\" — regenerate the trainer with gen",
                            c->groups[g].name);
        n += !strcmp(c->groups[g].rule, "shampoo");
    }
    if (!n) return hyp_fail(e, HYP_EINPUT, "plan: no optimizer group has rule \"shampoo\" — regenerate the trainer with gen");
    return HYP_OK;
}

/* a tensor as the matrix Shampoo preconditions: [numel / K, K], K its last dimension */
static void as_matrix(const plan_param *t, long *R, long *K) {
    *K = t->ndim >= 2 ? (long)t->shape[t->ndim - 1] : (long)t->numel;
    if (*K < 1) *K = 1;
    *R = (long)(t->numel / *K);
}

/* the floats of one factor kind over all blocks: sum of br^2 + bc^2 */
static int64_t block_floats(long R, long K, long bs) {
    int64_t n = 0;
    for (long r0 = 0; r0 < R; r0 += bs)
        for (long c0 = 0; c0 < K; c0 += bs) {
            int64_t br = R - r0 < bs ? R - r0 : bs, bc = K - c0 < bs ? K - c0 : bs;
            n += br * br + bc * bc;
        }
    return n;
}

static int64_t state_numel(const hyp_optim_cfg *c, const plan_param *t, int k) {
    if (k < 2) return t->numel;
    if (strcmp(c->groups[t->group].rule, "shampoo")) return 0;
    long bs = (long)hyp_optim_hyper(c, "block_size"), R, K;
    if (bs < 1) return -1; /* no block size: the layout check then names the mismatch */
    as_matrix(t, &R, &K);
    return block_floats(R, K, bs);
}

static int gemm(char ta, char tb, long M, long N, long K, float alpha, const float *A, long lda, const float *B,
                long ldb, float beta, float *C, long ldc) {
    return dnnl_sgemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc) == dnnl_success ? 0 : -1;
}

/* out[n, n] = (S/scale)^(-1/p) with the eigenvalues clamped at 0 and epsilon added, S [n, n]
 * symmetric (its upper triangle is read). work: n*n + n doubles + what dsyevd asks. 0 or -1. */
static int inverse_root(float *out, const float *S, long n, double scale, double epsilon, double p) {
    const int N = (int)n;
    int info = 0, lwork = -1, liwork = -1, iwq = 0;
    double wq = 0;
    double *a = malloc(sizeof(double) * (size_t)(n * n + n)), *w = a ? a + n * n : NULL;
    if (!a) return -1;
    /* column-major upper triangle = row-major lower triangle; S is symmetric up to rounding */
    for (long i = 0; i < n; i++)
        for (long j = 0; j < n; j++) a[i * n + j] = (double)S[i * n + j] / scale;
    dsyevd_("V", "L", &N, a, &N, w, &wq, &lwork, &iwq, &liwork, &info, 1, 1);
    lwork = (int)wq, liwork = iwq;
    double *work = malloc(sizeof(double) * (size_t)(lwork > 1 ? lwork : 1));
    int *iwork = malloc(sizeof(int) * (size_t)(liwork > 1 ? liwork : 1));
    if (!work || !iwork || info) {
        free(a), free(work), free(iwork);
        return -1;
    }
    dsyevd_("V", "L", &N, a, &N, w, work, &lwork, iwork, &liwork, &info, 1, 1);
    free(work), free(iwork);
    if (info) {
        free(a);
        return -1;
    }
    /* eigenvector k is column k: a[k*n + i]; scale it by f(lambda_k)^(1/2) so that
     * out = sum_k f_k q_k q_k^T = W^T W with W's row k = sqrt(f_k) q_k */
    for (long k = 0; k < n; k++) {
        double l = (w[k] > 0 ? w[k] : 0) + epsilon;
        double f = l > 0 ? pow(l, -1.0 / p) : 0.0, sf = sqrt(f);
        for (long i = 0; i < n; i++) a[k * n + i] *= sf;
    }
#pragma omp parallel for schedule(static) if (n >= 256)
    for (long i = 0; i < n; i++) {
        double *row = malloc(sizeof(double) * (size_t)n);
        if (!row) continue; /* out of memory in a worker: that row stays as it was (reported below) */
        memset(row, 0, sizeof(double) * (size_t)n);
        for (long k = 0; k < n; k++) {
            double wi = a[k * n + i];
            const double *wk = a + k * n;
            for (long j = 0; j < n; j++) row[j] += wi * wk[j];
        }
        for (long j = 0; j < n; j++) out[i * n + j] = (float)row[j];
        free(row);
    }
    free(a);
    return 0;
}

static void step_shampoo(const hyp_optim_cfg *c, const hyp_optim_span *s, const hyp_optim_step *a) {
    const plan_param *t = s->tensor;
    if (!t || s->first != 0 || s->n != t->numel) {
        op_cpu_fail("shampoo: a Shampoo tensor must be a whole matrix (a sharded span reached it)");
        return;
    }
    long R, K;
    as_matrix(t, &R, &K);
    const long bs = (long)hyp_optim_hyper(c, "block_size"), n = R * K;
    const float b1 = (float)hyp_optim_hyper(c, "beta1"), b2 = (float)hyp_optim_hyper(c, "beta2");
    const float eps = (float)hyp_optim_hyper(c, "eps"), gs = a->grad_scale;
    const double sb2 = hyp_optim_hyper(c, "stat_beta2"), epsilon = hyp_optim_hyper(c, "epsilon");
    const double p_root = hyp_optim_hyper(c, "inv_root");
    const int freq = (int)hyp_optim_hyper(c, "freq"), start = (int)hyp_optim_hyper(c, "start");
    const int sgd = hyp_optim_hyper(c, "graft_sgd") != 0;
    const float lr = (float)(a->lr * s->group->lr_mult), decay = 1.0f - lr * (float)s->group->weight_decay;
    const float ibc1 = 1.0f / (float)(1.0 - pow((double)b1, (double)a->t));
    const float ibc2 = 1.0f / (float)(1.0 - pow((double)b2, (double)a->t));
    const int precondition = a->t >= start, refresh = precondition && (a->t == start || a->t % freq == 0);
    const double stat_bc = sb2 < 1 ? 1.0 - pow(sb2, (double)a->t) : 1.0;
    const float s_alpha = sb2 < 1 ? (float)(1.0 - sb2) : 1.0f, s_beta = sb2 < 1 ? (float)sb2 : 1.0f;
    /* workspace: g*scale, mh, A (graft direction) [n] each; two block temporaries [bs, bs] */
    const long bmax = bs < R || bs < K ? bs : (R > K ? R : K);
    float *gw = malloc(sizeof(float) * (size_t)(3 * n + 2 * bmax * bmax));
    if (!gw) {
        op_cpu_fail("shampoo: out of memory for the step's workspace");
        return;
    }
    float *mh = gw + n, *ad = mh + n, *tmp = ad + n, *pre = tmp + bmax * bmax;
    float *m = s->state[0], *v = s->state[1], *stat = s->state[2], *root = s->state[3], *w = s->param;
    const float *g = s->grad;
#pragma omp parallel for schedule(static) if (n >= 32768)
    for (long i = 0; i < n; i++) {
        float gi = g[i] * gs;
        float mi = b1 * m[i] + (1.0f - b1) * gi, vi = b2 * v[i] + (1.0f - b2) * gi * gi;
        m[i] = mi, v[i] = vi, gw[i] = gi, mh[i] = mi * ibc1;
        ad[i] = sgd ? mh[i] : mh[i] / (sqrtf(vi * ibc2) + eps);
    }
    int64_t off = 0;
    int failed = 0;
    for (long r0 = 0; r0 < R && !failed; r0 += bs)
        for (long c0 = 0; c0 < K && !failed; c0 += bs) {
            const long br = R - r0 < bs ? R - r0 : bs, bc = K - c0 < bs ? K - c0 : bs;
            float *L = stat + off, *Rf = L + br * br, *Lr = root + off, *Rr = Lr + br * br;
            const long o0 = r0 * K + c0;
            off += br * br + bc * bc;
            /* L = s*L + (1-s) G G^T [br, br];  R = s*R + (1-s) G^T G [bc, bc] */
            failed |= gemm('N', 'T', br, br, bc, s_alpha, gw + o0, K, gw + o0, K, s_beta, L, br);
            failed |= gemm('T', 'N', bc, bc, br, s_alpha, gw + o0, K, gw + o0, K, s_beta, Rf, bc);
            if (failed) break;
            if (refresh && (inverse_root(Lr, L, br, stat_bc, epsilon, p_root) ||
                            inverse_root(Rr, Rf, bc, stat_bc, epsilon, p_root))) {
                failed = 2;
                break;
            }
            if (!precondition) continue;
            /* P = root(L) mh_b root(R): tmp = Lr mh_b [br, bc], pre = tmp Rr [br, bc] */
            failed |= gemm('N', 'N', br, bc, br, 1.0f, Lr, br, mh + o0, K, 0.0f, tmp, bc);
            failed |= gemm('N', 'N', br, bc, bc, 1.0f, tmp, bc, Rr, bc, 0.0f, pre, bc);
            if (failed) break;
            double na = 0, np = 0;
            for (long i = 0; i < br; i++)
                for (long j = 0; j < bc; j++) {
                    double x = ad[o0 + i * K + j], y = pre[i * bc + j];
                    na += x * x, np += y * y;
                }
            if (!(np > 0)) continue; /* no preconditioned direction: the grafted one stands */
            const float scale = (float)(sqrt(na) / sqrt(np));
            for (long i = 0; i < br; i++)
                for (long j = 0; j < bc; j++) ad[o0 + i * K + j] = scale * pre[i * bc + j];
        }
    if (failed == 2) op_cpu_fail("shampoo: LAPACK dsyevd failed on a preconditioner block (out of memory or no convergence)");
    else if (failed) op_cpu_fail("shampoo: a oneDNN sgemm of the statistics or the preconditioning failed");
    else
        for (long i = 0; i < n; i++) w[i] = w[i] * decay - lr * ad[i];
    free(gw);
}

static void step_span(const hyp_optim_cfg *c, const hyp_optim_span *s, const hyp_optim_step *a) {
    if (!strcmp(s->group->rule, "shampoo")) {
        step_shampoo(c, s, a);
        return;
    }
    op_adamw(s->param, s->grad, s->state[0], s->state[1], (long)s->n, (float)(a->lr * s->group->lr_mult),
             (float)hyp_optim_hyper(c, "beta1"), (float)hyp_optim_hyper(c, "beta2"), (float)hyp_optim_hyper(c, "eps"),
             (float)s->group->weight_decay, a->t, a->grad_scale);
}

const hyp_optim_i hyp_optim_shampoo = {
    .kind = "shampoo",
    .n_state = 4,
    .state_name = {"m", "v", "stat", "root"},
    .state_dtype = {HYP_DT_F32, HYP_DT_F32, HYP_DT_F32, HYP_DT_F32},
    /* Adam's names for the moments; Distributed Shampoo's for the factors and their roots */
    .ckpt_suffix = {".exp_avg", ".exp_avg_sq", ".factor_matrices", ".inv_factor_matrices"},
    .shard_matrix = 1,
    .rules = {"shampoo", "adam", NULL},
    .state_numel = state_numel,
    .check = check,
    .step_span = step_span,
    .step_device = NULL,
};
