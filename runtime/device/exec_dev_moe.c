/* exec_dev_moe.c — the mixture-of-experts MLP on a device (exec_dev_moe.h: the op, step by step)
 * and the device executor's moe_fwd / moe_bwd plan ops (exec_dev_moe_bind / exec_dev_moe_run,
 * exec_dev_int.h). The expert GEMMs are moe.cu's grouped kernels (the executor's path: one launch
 * per projection, the segment offsets read on the device, no host synchronisation, so CUDA graphs
 * capture the op), or, with shape.grouped = 0, a loop of device-layer GEMMs over the experts'
 * row segments sized by the loads read back. Never: a result that depends on launch or thread
 * order (no atomics), or a host copy of anything but the E loads of the loop path.
 */
#include "exec_dev_moe.h"

#include <stdlib.h>
#include <string.h>

#include "exec_dev_int.h"
#include "moe_layout.h"

/* The workspace, in this order: xe, ye, dye, dxe [R, C]; he, dhe [R, 2H]; ae, dae [R, H]; dg [R];
 * dlog [N, E]; then the i32 rows, src, dest [R], offs [E + 1] and the dispatch's per-block
 * counts blk [cdiv(R, block), E]. */
typedef struct {
    float *xe, *ye, *dye, *dxe, *he, *dhe, *ae, *dae, *dg, *dlog;
    int32_t *rows, *src, *dest, *offs, *blk;
} moe_ws;

/* The dispatch's blocks: BLOCK routed slots each (moe_count, moe_scatter). */
static int32_t n_blocks(const dev_moe_shape *s) {
    return (int32_t)(((int64_t)s->N * s->K + s->block - 1) / s->block);
}

static int64_t ws_floats(const dev_moe_shape *s, int64_t *fl) {
    int64_t R = (int64_t)s->N * s->K, C = s->C, H = s->H;
    *fl = 4 * R * C + 4 * R * H + 2 * R * H + R + (int64_t)s->N * s->E;
    return *fl + 3 * R + s->E + 1 + (int64_t)n_blocks(s) * s->E;
}

int64_t dev_moe_ws_bytes(const dev_moe_shape *s) {
    int64_t fl;
    return 4 * ws_floats(s, &fl);
}

int64_t dev_moe_ws_rows_offset(const dev_moe_shape *s) {
    int64_t fl;
    ws_floats(s, &fl);
    return 4 * fl;
}

static moe_ws ws_at(const dev_moe_shape *s, void *base) {
    int64_t R = (int64_t)s->N * s->K, C = s->C, H = s->H;
    moe_ws w;
    float *f = base;
    w.xe = f, f += R * C;
    w.ye = f, f += R * C;
    w.dye = f, f += R * C;
    w.dxe = f, f += R * C;
    w.he = f, f += R * 2 * H;
    w.dhe = f, f += R * 2 * H;
    w.ae = f, f += R * H;
    w.dae = f, f += R * H;
    w.dg = f, f += R;
    w.dlog = f, f += (int64_t)s->N * s->E;
    int32_t *i = (int32_t *)(void *)f;
    w.rows = i, i += R;
    w.src = i, i += R;
    w.dest = i, i += R;
    w.offs = i, i += s->E + 1;
    w.blk = i;
    return w;
}

/* A launch of moe.cu's kernel over `threads` threads (cdiv blocks of BLOCK). */
static int run(const dev_moe_shape *s, const char *kernel, int64_t threads, size_t smem, hyp_kargs *a, hyp_err *e) {
    if (threads < 1) return HYP_OK;
    unsigned grid = (unsigned)((threads + s->block - 1) / s->block);
    return s->dev->launch(s->dev, s->mod, kernel, HYP_DIM3(grid, 1, 1), HYP_DIM3((unsigned)s->block, 1, 1), smem, a,
                          NULL, e);
}

/* D = op(A) op(B) + beta D in fp32 (TF32 when the plan says train.tf32), column-major (device.h). */
static int gemm(const dev_moe_shape *s, int ta, int tb, int64_t m, int64_t n, int64_t k, const void *a, int64_t lda,
                const void *b, int64_t ldb, float beta, void *d, int64_t ldd, hyp_err *e) {
    hyp_gemm g;
    memset(&g, 0, sizeof g);
    g.transa = ta, g.transb = tb, g.m = m, g.n = n, g.k = k;
    g.atype = g.btype = g.dtype = HYP_DT_F32;
    g.compute = s->tf32 ? HYP_GEMM_TF32 : HYP_GEMM_F32;
    g.alpha = 1.0f, g.beta = beta;
    g.a = a, g.lda = lda, g.b = b, g.ldb = ldb;
    g.c = beta != 0 ? d : NULL, g.ldc = ldd;
    g.d = d, g.ldd = ldd;
    return s->dev->gemm(s->dev, &g, NULL, e);
}

/* From the routing in state: loads, offsets and aux (moe_stats), the scatter, the gathered rows and
 * the loads on the host. With fresh = 0 (backward) the state's loads and aux are recomputed into
 * themselves from the same topi and probs: the same integers and the same fixed-order sum. */
static int dispatch(const dev_moe_shape *s, moe_state_view *v, const float *inp, const moe_ws *w, int32_t *h_loads,
                    hyp_err *e) {
    int64_t R = (int64_t)s->N * s->K;
    hyp_kargs a;
    memset(&a, 0, sizeof a);
    hyp_kargs_ptr(&a, w->blk), hyp_kargs_ptr(&a, v->topi), hyp_kargs_i32(&a, s->N);
    int rc = run(s, "moe_count", R, 0, &a, e);
    if (rc) return rc;
    memset(&a, 0, sizeof a);
    hyp_kargs_ptr(&a, v->loads), hyp_kargs_ptr(&a, w->offs), hyp_kargs_ptr(&a, v->aux), hyp_kargs_ptr(&a, w->blk);
    hyp_kargs_ptr(&a, v->probs), hyp_kargs_i32(&a, s->N), hyp_kargs_i32(&a, n_blocks(s)), hyp_kargs_f32(&a, s->aux_coef);
    rc = s->dev->launch(s->dev, s->mod, "moe_stats", HYP_DIM3(1, 1, 1), HYP_DIM3((unsigned)s->block, 1, 1),
                        sizeof(double) * (size_t)s->E, &a, NULL, e);
    if (rc) return rc;
    memset(&a, 0, sizeof a);
    hyp_kargs_ptr(&a, w->rows), hyp_kargs_ptr(&a, w->src), hyp_kargs_ptr(&a, w->dest), hyp_kargs_ptr(&a, v->topi);
    hyp_kargs_ptr(&a, w->offs), hyp_kargs_ptr(&a, w->blk), hyp_kargs_i32(&a, s->N);
    if ((rc = run(s, "moe_scatter", R, 0, &a, e))) return rc;
    memset(&a, 0, sizeof a);
    hyp_kargs_ptr(&a, w->xe), hyp_kargs_ptr(&a, inp), hyp_kargs_ptr(&a, w->rows), hyp_kargs_i32(&a, (int32_t)R);
    if ((rc = run(s, "moe_gather", R * s->C, 0, &a, e))) return rc;
    if (s->grouped) return HYP_OK; /* the grouped GEMMs read the offsets on the device */
    rc = s->dev->d2h_sync(s->dev, h_loads, v->loads, sizeof(int32_t) * (size_t)s->E, e);
    int64_t sum = 0;
    for (int k = 0; k < s->E && !rc; k++) {
        if (h_loads[k] < 0 || h_loads[k] > s->N)
            return hyp_fail(e, HYP_EFAIL, "moe: expert %d has %d routed rows of %d tokens — the routing state is corrupt", k,
                            (int)h_loads[k], s->N);
        sum += h_loads[k];
    }
    if (!rc && sum != R)
        return hyp_fail(e, HYP_EFAIL, "moe: the loads sum to %lld, not N x top_k = %lld — the routing state is corrupt",
                        (long long)sum, (long long)R);
    return rc;
}

/* The grouped GEMMs of moe.cu (GT x GT output tiles; the row kernel's grid has the worst case's
 * cdiv(R, GT) + E row tiles, the blocks past the last one exit). out[r, :] = act[r, :] W_e(^T)
 * over every expert's rows; dw_e += a_e^T b_e. */
static int moe_gt(const dev_moe_shape *s) { return s->gt > 0 ? s->gt : 64; }
static int grouped_rows(const dev_moe_shape *s, const moe_ws *w, float *out, const float *act, const float *wts,
                        int nout, int kd, int wt, hyp_err *e) {
    int64_t R = (int64_t)s->N * s->K, gt = moe_gt(s);
    hyp_kargs a;
    memset(&a, 0, sizeof a);
    hyp_kargs_ptr(&a, out), hyp_kargs_ptr(&a, act), hyp_kargs_ptr(&a, wts), hyp_kargs_ptr(&a, w->offs);
    hyp_kargs_i32(&a, nout), hyp_kargs_i32(&a, kd), hyp_kargs_i32(&a, wt);
    return s->dev->launch(s->dev, s->mod, "moe_gemm_rows", HYP_DIM3((unsigned)((R + gt - 1) / gt + s->E), (unsigned)((nout + gt - 1) / gt), 1),
                          HYP_DIM3(256, 1, 1), 0, &a, NULL, e);
}
static int grouped_wgrad(const dev_moe_shape *s, const moe_ws *w, float *dw, const float *am, const float *bn, int m, int n,
                         hyp_err *e) {
    int64_t gt = moe_gt(s);
    hyp_kargs a;
    memset(&a, 0, sizeof a);
    hyp_kargs_ptr(&a, dw), hyp_kargs_ptr(&a, am), hyp_kargs_ptr(&a, bn), hyp_kargs_ptr(&a, w->offs);
    hyp_kargs_i32(&a, m), hyp_kargs_i32(&a, n);
    return s->dev->launch(s->dev, s->mod, "moe_gemm_wgrad", HYP_DIM3((unsigned)((n + gt - 1) / gt), (unsigned)((m + gt - 1) / gt), (unsigned)s->E),
                          HYP_DIM3(256, 1, 1), 0, &a, NULL, e);
}

/* Every expert's SwiGLU MLP on its rows: he = xe w1^T, ae = swiglu(he), ye = ae w2^T. */
static int experts_fwd(const dev_moe_shape *s, const float *w1, const float *w2, const moe_ws *w, const int32_t *h_loads,
                       hyp_err *e) {
    int64_t C = s->C, H = s->H, R = (int64_t)s->N * s->K, o = 0;
    int rc = HYP_OK;
    if (s->grouped) {
        hyp_kargs a;
        memset(&a, 0, sizeof a);
        hyp_kargs_ptr(&a, w->ae), hyp_kargs_ptr(&a, w->he), hyp_kargs_i32(&a, (int32_t)R);
        if (!(rc = grouped_rows(s, w, w->he, w->xe, w1, (int)(2 * H), (int)C, 1, e))) rc = run(s, "moe_swiglu_fwd", R * H, 0, &a, e);
        return rc ? rc : grouped_rows(s, w, w->ye, w->ae, w2, (int)C, (int)H, 1, e);
    }
    for (int x = 0; x < s->E && !rc; o += h_loads[x], x++)
        if (h_loads[x])
            rc = gemm(s, 1, 0, 2 * H, h_loads[x], C, w1 + (int64_t)x * 2 * H * C, C, w->xe + o * C, C, 0.0f,
                      w->he + o * 2 * H, 2 * H, e);
    hyp_kargs a;
    memset(&a, 0, sizeof a);
    hyp_kargs_ptr(&a, w->ae), hyp_kargs_ptr(&a, w->he), hyp_kargs_i32(&a, (int32_t)R);
    if (!rc) rc = run(s, "moe_swiglu_fwd", R * H, 0, &a, e);
    o = 0;
    for (int x = 0; x < s->E && !rc; o += h_loads[x], x++)
        if (h_loads[x])
            rc = gemm(s, 1, 0, C, h_loads[x], H, w2 + (int64_t)x * C * H, H, w->ae + o * H, H, 0.0f, w->ye + o * C, C, e);
    return rc;
}

int dev_moe_fwd(const dev_moe_shape *s, float *out, float *state, const float *inp, const float *wr, const float *w1,
                const float *w2, void *ws, int32_t *h_loads, hyp_err *e) {
    moe_state_view v = moe_state_at(state, s->N, s->E, s->K);
    moe_ws w = ws_at(s, ws);
    /* router logits [N, E] = x wr^T into probs, then softmax / top-k / weights in place */
    int rc = gemm(s, 1, 0, s->E, s->N, s->C, wr, s->C, inp, s->C, 0.0f, v.probs, s->E, e);
    hyp_kargs a;
    memset(&a, 0, sizeof a);
    hyp_kargs_ptr(&a, v.probs), hyp_kargs_ptr(&a, v.topi), hyp_kargs_ptr(&a, v.topw), hyp_kargs_i32(&a, s->N);
    if (!rc) rc = run(s, "moe_route", s->N, 0, &a, e);
    if (!rc) rc = dispatch(s, &v, inp, &w, h_loads, e);
    if (!rc) rc = experts_fwd(s, w1, w2, &w, h_loads, e);
    memset(&a, 0, sizeof a);
    hyp_kargs_ptr(&a, out), hyp_kargs_ptr(&a, w.ye), hyp_kargs_ptr(&a, v.topi), hyp_kargs_ptr(&a, v.topw);
    hyp_kargs_ptr(&a, w.dest), hyp_kargs_i32(&a, s->N);
    if (!rc) rc = run(s, "moe_combine", (int64_t)s->N * s->C, 0, &a, e);
    return rc;
}

int dev_moe_bwd(const dev_moe_shape *s, float *dinp, float *dwr, float *dw1, float *dw2, const float *dout, float daux,
                const float *inp, const float *wr, const float *w1, const float *w2, const float *state, void *ws,
                int32_t *h_loads, hyp_err *e) {
    moe_state_view v = moe_state_at((float *)(uintptr_t)state, s->N, s->E, s->K);
    moe_ws w = ws_at(s, ws);
    int64_t C = s->C, H = s->H, R = (int64_t)s->N * s->K;
    int rc = dispatch(s, &v, inp, &w, h_loads, e);
    if (!rc) rc = experts_fwd(s, w1, w2, &w, h_loads, e);
    hyp_kargs a;
    memset(&a, 0, sizeof a);
    hyp_kargs_ptr(&a, w.dye), hyp_kargs_ptr(&a, w.dg), hyp_kargs_ptr(&a, dout), hyp_kargs_ptr(&a, w.ye);
    hyp_kargs_ptr(&a, w.rows), hyp_kargs_ptr(&a, w.src), hyp_kargs_ptr(&a, v.topw), hyp_kargs_i32(&a, (int32_t)R);
    if (!rc) rc = run(s, "moe_dy", R, 0, &a, e);
    /* dae = dye w2 (written), dw2 += dye^T ae */
    int64_t o = 0;
    if (s->grouped && !rc) {
        rc = grouped_rows(s, &w, w.dae, w.dye, w2, (int)H, (int)C, 0, e);
        if (!rc && dw2) rc = grouped_wgrad(s, &w, dw2, w.dye, w.ae, (int)C, (int)H, e);
    }
    for (int x = 0; x < s->E && !rc && !s->grouped; o += h_loads[x], x++) {
        if (!h_loads[x]) continue;
        const float *w2e = w2 + (int64_t)x * C * H;
        rc = gemm(s, 0, 0, H, h_loads[x], C, w2e, H, w.dye + o * C, C, 0.0f, w.dae + o * H, H, e);
        if (!rc && dw2) rc = gemm(s, 0, 1, H, C, h_loads[x], w.ae + o * H, H, w.dye + o * C, C, 1.0f, dw2 + (int64_t)x * C * H, H, e);
    }
    if (!rc) rc = s->dev->memset(s->dev, w.dhe, 0, sizeof(float) * (size_t)(R * 2 * H), NULL, e);
    memset(&a, 0, sizeof a);
    hyp_kargs_ptr(&a, w.dhe), hyp_kargs_ptr(&a, w.dae), hyp_kargs_ptr(&a, w.he), hyp_kargs_i32(&a, (int32_t)R);
    if (!rc) rc = run(s, "moe_swiglu_bwd", R * H, 0, &a, e);
    /* dxe = dhe w1 (written), dw1 += dhe^T xe */
    o = 0;
    if (s->grouped && !rc) {
        if (dinp) rc = grouped_rows(s, &w, w.dxe, w.dhe, w1, (int)C, (int)(2 * H), 0, e);
        if (!rc && dw1) rc = grouped_wgrad(s, &w, dw1, w.dhe, w.xe, (int)(2 * H), (int)C, e);
    }
    for (int x = 0; x < s->E && !rc && !s->grouped; o += h_loads[x], x++) {
        if (!h_loads[x]) continue;
        const float *w1e = w1 + (int64_t)x * 2 * H * C;
        if (dinp) rc = gemm(s, 0, 0, C, h_loads[x], 2 * H, w1e, C, w.dhe + o * 2 * H, 2 * H, 0.0f, w.dxe + o * C, C, e);
        if (!rc && dw1)
            rc = gemm(s, 0, 1, C, 2 * H, h_loads[x], w.xe + o * C, C, w.dhe + o * 2 * H, 2 * H, 1.0f, dw1 + (int64_t)x * 2 * H * C, C, e);
    }
    if (dinp) {
        memset(&a, 0, sizeof a);
        hyp_kargs_ptr(&a, dinp), hyp_kargs_ptr(&a, w.dxe), hyp_kargs_ptr(&a, v.topi), hyp_kargs_ptr(&a, w.dest);
        hyp_kargs_i32(&a, s->N);
        if (!rc) rc = run(s, "moe_scatter_add", (int64_t)s->N * C, 0, &a, e);
    }
    /* the router: dlog [N, E], then dinp += dlog wr, dwr += dlog^T x */
    memset(&a, 0, sizeof a);
    hyp_kargs_ptr(&a, w.dlog), hyp_kargs_ptr(&a, v.probs), hyp_kargs_ptr(&a, v.topi), hyp_kargs_ptr(&a, v.topw);
    hyp_kargs_ptr(&a, w.dg), hyp_kargs_ptr(&a, v.loads), hyp_kargs_i32(&a, s->N), hyp_kargs_f32(&a, daux);
    hyp_kargs_f32(&a, s->aux_coef);
    if (!rc) rc = run(s, "moe_router_bwd", s->N, 0, &a, e);
    if (!rc && dinp) rc = gemm(s, 0, 0, C, s->N, s->E, wr, C, w.dlog, s->E, 1.0f, dinp, C, e);
    if (!rc && dwr) rc = gemm(s, 0, 1, C, s->E, s->N, inp, C, w.dlog, s->E, 1.0f, dwr, C, e);
    return rc;
}

/* ---- the plan ops (exec_dev_int.h) ---- */

struct exec_dev_moe {
    int file;          /* moe.cu in x->files */
    int block;
    int gt;            /* moe.cu's GT */
    void *ws;          /* device: the workspace of the largest MoE op at the plan's N */
    int64_t ws_bytes;
    int32_t *h_loads;  /* host: [max E] */
};

int exec_dev_moe_is(const plan_op *o) {
    static int fwd = -2, bwd = -2;
    if (fwd == -2) fwd = hyp_op_find("moe_fwd"), bwd = hyp_op_find("moe_bwd");
    return o->op >= 0 && (o->op == fwd || o->op == bwd);
}

static dev_moe_shape shape_of(const exec_dev *x, const plan_op *o, int N) {
    dev_moe_shape s = {x->dev, x->files[x->moe->file].mod, x->moe->block, N, (int)o->C, (int)o->E, (int)o->K, (int)o->H,
                       o->norm_topk == 1, o->aux_coef, x->p->tf32, 1, x->moe->gt};
    return s;
}

int exec_dev_moe_bind(exec_dev *x, const plan_op *o, exec_dev_op *eo, hyp_err *e) {
    memset(eo, 0, sizeof *eo);
    if (x->act_bf16)
        return hyp_fail(e, HYP_EINPUT, "kernels.json: the MoE op on a device has fp32 kernels only and this plan stores activations in bf16 — regenerate with --set v2102.storage=fp32");
    if (!x->moe) {
        int fi = -1;
        for (int i = 0; i < x->n_files; i++)
            if (!strcmp(x->files[i].name, "moe.cu")) fi = i;
        if (fi < 0) return hyp_fail(e, HYP_EINPUT, "kernels.json: plan op '%s' needs moe.cu — regenerate the trainer with gen", hyp_op_name(o->op));
        if (!(x->moe = calloc(1, sizeof *x->moe))) return hyp_fail(e, HYP_EFAIL, "out of memory");
        x->moe->file = fi;
        x->moe->block = 256;
        const exec_dev_file *F = &x->files[fi];
        static const char *want[] = {"C", "H", "NE", "TOPK", "NORM"};
        double have[5] = {-1, -1, -1, -1, -1};
        for (int j = 0; j < F->consts.n; j++) {
            if (!strcmp(F->consts.name[j], "BLOCK")) x->moe->block = (int)F->consts.val[j];
            if (!strcmp(F->consts.name[j], "GT")) x->moe->gt = (int)F->consts.val[j];
            for (int k = 0; k < 5; k++)
                if (!strcmp(F->consts.name[j], want[k])) have[k] = F->consts.val[j];
        }
        if (have[0] != (double)o->C || have[1] != (double)o->H || have[2] != (double)o->E || have[3] != (double)o->K ||
            have[4] != (double)(o->norm_topk == 1))
            return hyp_fail(e, HYP_EINPUT, "kernels.json: moe.cu was rendered for C %g H %g experts %g top_k %g norm %g, the plan's %s has %lld %lld %lld %lld %d — regenerate the trainer with gen",
                            have[0], have[1], have[2], have[3], have[4], hyp_op_name(o->op), (long long)o->C,
                            (long long)o->H, (long long)o->E, (long long)o->K, o->norm_topk == 1);
    }
    dev_moe_shape s = shape_of(x, o, x->p->B * x->p->T);
    int64_t need = dev_moe_ws_bytes(&s);
    if (need > x->moe->ws_bytes) {
        int rc = HYP_OK;
        if (x->moe->ws) {
            x->dev->mem_free(x->dev, x->moe->ws, e);
            x->bytes -= (size_t)x->moe->ws_bytes;
            x->moe->ws = NULL;
        }
        free(x->moe->h_loads);
        if (!(x->moe->h_loads = calloc((size_t)o->E, sizeof(int32_t)))) return hyp_fail(e, HYP_EFAIL, "out of memory");
        if ((rc = exec_dev_alloc(x, &x->moe->ws, need, 1, e))) return rc;
        x->moe->ws_bytes = need;
    }
    eo->how = EXD_MOE;
    return HYP_OK;
}

static int64_t counted_targets(const exec_dev *x) {
    int64_t cnt = 0, N = (int64_t)x->B * x->T;
    for (int64_t i = 0; i < N; i++) cnt += x->h_targets[i] >= 0;
    return cnt;
}

double exec_dev_moe_key(const exec_dev *x) { return x->moe ? (double)counted_targets(x) : 0.0; }

/* The cpu adapter's weighting (cpu/ops_table.c): the aux loss enters with the weight of this
 * micro-batch's counted targets. */
int exec_dev_moe_run(exec_dev *x, const plan_op *o, float dloss, hyp_err *e) {
    int N = x->B * x->T;
    dev_moe_shape s = shape_of(x, o, N);
    if (x->graphs && !s.grouped) /* the loads are read back mid-op: no region with an MoE op can be captured */
        return hyp_fail(e, HYP_EINPUT, "the MoE op on a device reads its expert loads back to size the GEMMs, which a captured graph cannot (v2165) — run with HYP_CUDA_GRAPHS=0 or generate without cuda-graphs");
    void *I[5], *O[4];
    for (int i = 0; i < 5; i++) I[i] = i < o->nin ? exec_dev_buf(x, o->in[i]) : NULL;
    for (int i = 0; i < 4; i++) O[i] = i < o->nout ? exec_dev_buf(x, o->out[i]) : NULL;
    int64_t eo = (int64_t)o->E * 2 * o->H * o->C;
    if (o->op == hyp_op_find("moe_fwd"))
        return dev_moe_fwd(&s, O[0], O[1], I[0], I[1], I[2], (float *)I[2] + eo, x->moe->ws, x->moe->h_loads, e);
    float daux = 0.0f;
    if (s.aux_coef > 0) daux = dloss * (float)counted_targets(x);
    return dev_moe_bwd(&s, O[0], O[1], O[2], O[2] ? (float *)O[2] + eo : NULL, I[0], daux, I[1], I[2], I[3],
                       (float *)I[3] + eo, I[4], x->moe->ws, x->moe->h_loads, e);
}

void exec_dev_moe_free(exec_dev *x) {
    if (!x->moe) return;
    hyp_err e;
    x->dev->mem_free(x->dev, x->moe->ws, &e);
    free(x->moe->h_loads);
    free(x->moe);
    x->moe = NULL;
}
