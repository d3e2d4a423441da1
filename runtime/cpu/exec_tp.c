/* exec_tp.c — v2106 Megatron tensor parallelism in the cpu executor: the allreduce_tp op (sum of
 * the tp group's partial results in place, then the row-parallel GEMM's bias once), the slicing of
 * a full tensor into a rank's shard (column-parallel: rows of each output block; row-parallel: the
 * input-dimension columns), the parameter init that draws every tensor whole so a tp group starts
 * from the np=1 weights, and the gradient norm over sharded and replicated tensors.
 * Never: decide the mesh or the ranks (the trainer does, train/train_tp.c), nor exit — a collective
 * failure is kept in the executor and reported by exec_tp_status. */
#include <stdlib.h>
#include <string.h>

#include "exec.h"
#include "ops_cpu.h"
#include "rng.h"

void exec_allreduce_tp(exec_t *x, float *buf, const float *bias, long n, int C) {
    if (x->tp_rc) return;
    if (!x->tp) {
        x->tp_rc = hyp_fail(&x->tp_err, HYP_EINPUT, "a tensor-parallel plan (v2106, tp=%d) run without its tp group — start it under mpirun with a multiple of %d ranks",
                            x->p->tp, x->p->tp);
        return;
    }
    if ((x->tp_rc = hyp_coll_allreduce_f32(x->tp, buf, (size_t)n, &x->tp_err))) return;
    if (bias)
        for (long r = 0; r < n / C; r++)
            for (int c = 0; c < C; c++) buf[r * C + c] += bias[c];
}

int exec_tp_status(const exec_t *x, hyp_err *e) {
    if (x->cp_rc) { /* v2108: a ring_attention op failed (same slot of the step's checks) */
        *e = x->cp_err;
        return x->cp_rc;
    }
    if (!x->tp_rc) return HYP_OK;
    *e = x->tp_err;
    return x->tp_rc;
}

void exec_tp_slice(const plan_param *pp, int tp, int rank, const float *full, float *local) {
    int64_t rows = pp->tp_full[0], cols = pp->ndim == 2 ? pp->tp_full[1] : 1;
    if (pp->tp_dim == 0) { /* whole rows: rank's share of each block, in block order */
        for (int b = 0; b < pp->tp_nblk; b++) {
            int64_t part = pp->tp_blk[b][1] / tp, first = pp->tp_blk[b][0] + rank * part;
            memcpy(local, full + first * cols, sizeof(float) * (size_t)(part * cols));
            local += part * cols;
        }
        return;
    }
    for (int64_t r = 0; r < rows; r++) /* columns: per row, rank's share of each block */
        for (int b = 0; b < pp->tp_nblk; b++) {
            int64_t part = pp->tp_blk[b][1] / tp, first = pp->tp_blk[b][0] + rank * part;
            memcpy(local, full + r * cols + first, sizeof(float) * (size_t)part);
            local += part;
        }
}

void exec_tp_unslice(const plan_param *pp, int tp, int rank, const float *local, float *full) {
    int64_t rows = pp->tp_full[0], cols = pp->ndim == 2 ? pp->tp_full[1] : 1;
    if (pp->tp_dim == 0) {
        for (int b = 0; b < pp->tp_nblk; b++) {
            int64_t part = pp->tp_blk[b][1] / tp, first = pp->tp_blk[b][0] + rank * part;
            memcpy(full + first * cols, local, sizeof(float) * (size_t)(part * cols));
            local += part * cols;
        }
        return;
    }
    for (int64_t r = 0; r < rows; r++)
        for (int b = 0; b < pp->tp_nblk; b++) {
            int64_t part = pp->tp_blk[b][1] / tp, first = pp->tp_blk[b][0] + rank * part;
            memcpy(full + r * cols + first, local, sizeof(float) * (size_t)part);
            local += part;
        }
}

/* The element count of the full tensor pp is (a slice of). */
static int64_t full_numel(const plan_param *pp) {
    return pp->tp_nblk ? pp->tp_full[0] * (pp->ndim == 2 ? pp->tp_full[1] : 1) : pp->numel;
}

void exec_init_params_tp(exec_t *x, uint64_t seed, int rank) {
    const plan_t *p = x->p;
    exec_params_changed(x);
    hyp_rng rng;
    hyp_rng_seed(&rng, seed);
    int64_t most = 0;
    for (int i = 0; i < p->n_params_t; i++)
        if (p->params[i].tp_nblk && full_numel(&p->params[i]) > most) most = full_numel(&p->params[i]);
    /* the full tensors are drawn in the gradient arena's place when it holds the largest (it is
     * zeroed afterwards, before any backward): no allocation that could fail here */
    float *tmp = most <= x->shard * x->world ? x->grads : NULL;
    float *own = tmp ? NULL : malloc(sizeof(float) * (size_t)most);
    if (!tmp) tmp = own;
    memset(x->params, 0, sizeof(float) * (size_t)p->param_floats);
    for (int i = 0; i < p->n_params_t; i++) {
        const plan_param *pp = &p->params[i];
        int64_t n = full_numel(pp);
        float *w = pp->tp_nblk ? tmp : x->params + pp->offset;
        if (!w) { /* out of memory for the largest full tensor: fail loudly through the first allreduce_tp */
            x->tp_rc = hyp_fail(&x->tp_err, HYP_EFAIL, "out of memory for a full %lld-float tensor to slice (v2106 init)", (long long)most);
            break;
        }
        if (pp->init == PINIT_ONES)
            for (int64_t j = 0; j < n; j++) w[j] = 1.0f;
        else if (pp->init == PINIT_NORMAL)
            hyp_rng_fill_normal(&rng, w, (size_t)n, 0.0f, pp->init_std);
        else
            memset(w, 0, sizeof(float) * (size_t)n);
        /* padded vocabulary rows stay zero (as exec_init_params: the embedding is replicated) */
        if (!pp->tp_nblk && pp->ndim == 2 && pp->shape[0] == p->Vp && pp->shape[1] == p->C && p->Vp > p->V)
            memset(w + (int64_t)p->V * p->C, 0, sizeof(float) * (size_t)(p->Vp - p->V) * p->C);
        if (pp->tp_nblk) exec_tp_slice(pp, p->tp, rank, w, x->params + pp->offset);
    }
    free(own);
    if (x->grads) memset(x->grads, 0, sizeof(float) * (size_t)(x->shard * x->world));
}

int exec_tp_grad_sumsq(const exec_t *x, double *ss, hyp_err *e) {
    const plan_t *p = x->p;
    double v[2] = {0, 0}; /* sharded, replicated */
    for (int i = 0; i < p->n_params_t; i++)
        v[p->params[i].tp_nblk ? 0 : 1] += op_sumsq(x->grads + p->params[i].offset, p->params[i].numel);
    int rc = x->tp ? hyp_coll_allreduce_f64(x->tp, v, 1, e) : HYP_OK;
    *ss = v[0] + v[1];
    return rc;
}
