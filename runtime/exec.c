/* exec.c — runs plan op lists on the CPU backend (see exec.h). */
#include "exec.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ops_cpu.h"
#include "ops_flash.h"
#include "rng.h"

static void *alloc_floats(int64_t n, size_t *bytes) {
    size_t sz = (size_t)n * sizeof(float);
    sz = (sz + 63) & ~(size_t)63;
    void *ptr = aligned_alloc(64, sz ? sz : 64);
    if (ptr) {
        memset(ptr, 0, sz);
        *bytes += sz;
    }
    return ptr;
}

int exec_init(exec_t *x, const plan_t *p, hyp_err *e) { return exec_init_dp(x, p, 1, 0, 0, e); }

int exec_init_dp(exec_t *x, const plan_t *p, int world, int rank, int stage, hyp_err *e) {
    memset(x, 0, sizeof *x);
    x->p = p;
    x->world = world;
    x->rank = rank;
    x->stage = stage;
    x->shard = ((p->param_floats + world - 1) / world + 15) / 16 * 16;
    int64_t arena = x->shard * world;
    int64_t optim = stage >= 1 ? x->shard : arena;
    size_t before = 0;
    x->params = alloc_floats(arena, &x->bytes);
    x->bytes_params = x->bytes - before, before = x->bytes;
    x->grads = alloc_floats(arena, &x->bytes);
    if (stage >= 2) {
        x->bytes_grad_workspace = x->bytes - before, before = x->bytes;
        x->gshard = alloc_floats(x->shard, &x->bytes);
    }
    x->bytes_grads = x->bytes - before, before = x->bytes;
    x->m = alloc_floats(optim, &x->bytes);
    x->v = alloc_floats(optim, &x->bytes);
    x->bytes_optim = x->bytes - before, before = x->bytes;
    x->acts = alloc_floats(p->act_floats, &x->bytes);
    x->bytes_acts = x->bytes - before;
    x->tokens = calloc((size_t)p->B * p->T, sizeof(int32_t));
    x->targets = calloc((size_t)p->B * p->T, sizeof(int32_t));
    if (p->fp8_slots) {
        x->fp8 = calloc((size_t)p->fp8_slots, sizeof *x->fp8);
        if (!x->fp8) {
            exec_free(x);
            return hyp_fail(e, HYP_EFAIL, "out of memory");
        }
        hyp_fp8_recipe r = hyp_fp8_recipe_default();
        r.scaling = p->fp8_current ? HYP_FP8_CURRENT : HYP_FP8_DELAYED;
        r.history_len = p->fp8_history;
        r.margin = (float)p->fp8_margin;
        for (int i = 0; i < p->fp8_slots; i++) {
            int rc = p->fp8_e4m3_only ? hyp_fp8_state_init(&x->fp8[i], HYP_FP8_E4M3, &r, e)
                                      : hyp_fp8_state_init_role(&x->fp8[i], (hyp_fp8_role)p->fp8_roles[i], &r, e);
            if (rc) {
                exec_free(x);
                return rc;
            }
        }
    }
    if (!x->params || !x->grads || !x->m || !x->v || !x->acts || !x->tokens || !x->targets ||
        (stage >= 2 && !x->gshard)) {
        exec_free(x);
        return hyp_fail(e, HYP_EFAIL, "out of memory: the plan needs %.1f MiB of parameters/optimizer state and %.1f MiB of activations — use a smaller --batch/--seq at gen time",
                        4.0 * 4 * p->param_floats / 1048576.0, 4.0 * p->act_floats / 1048576.0);
    }
    x->bytes += 2 * sizeof(int32_t) * (size_t)p->B * p->T;
    x->B = p->B;
    x->T = p->T;
    return HYP_OK;
}

void exec_free(exec_t *x) {
    free(x->fp8);
    free(x->gshard);
    free(x->params);
    free(x->grads);
    free(x->m);
    free(x->v);
    free(x->acts);
    free(x->tokens);
    free(x->targets);
    memset(x, 0, sizeof *x);
}

int exec_bind(exec_t *x, int B, int T, hyp_err *e) {
    if (B < 1 || B > x->p->B)
        return hyp_fail(e, HYP_EINPUT, "--batch %d: this trainer was planned for batch <= %d — use a smaller --batch or regenerate with gen --batch %d",
                        B, x->p->B, B);
    if (T < 1 || T > x->p->T)
        return hyp_fail(e, HYP_EINPUT, "--seq %d: this trainer was planned for sequences <= %d — use a smaller --seq or regenerate with gen --seq %d",
                        T, x->p->T, T);
    x->B = B;
    x->T = T;
    return HYP_OK;
}

float *exec_buf(exec_t *x, int idx) {
    if (idx < 0) return NULL;
    const plan_buf *b = &x->p->bufs[idx];
    switch (b->kind) {
    case BUF_PARAM: return x->params + b->offset;
    case BUF_GRAD: return x->grads + b->offset;
    case BUF_ACT: return x->acts + b->offset;
    default: return NULL;
    }
}

static const int32_t *tok(exec_t *x, int idx) {
    return idx == x->p->targets_buf ? x->targets : x->tokens;
}

void exec_init_params(exec_t *x, uint64_t seed) {
    const plan_t *p = x->p;
    hyp_rng rng;
    hyp_rng_seed(&rng, seed);
    memset(x->params, 0, sizeof(float) * (size_t)p->param_floats);
    for (int i = 0; i < p->n_params_t; i++) {
        const plan_param *pp = &p->params[i];
        float *w = x->params + pp->offset;
        if (pp->init == PINIT_ONES)
            for (int64_t j = 0; j < pp->numel; j++) w[j] = 1.0f;
        else if (pp->init == PINIT_NORMAL)
            hyp_rng_fill_normal(&rng, w, (size_t)pp->numel, 0.0f, pp->init_std);
    }
    /* padded vocabulary rows stay zero: they are never a target and never an input */
    for (int i = 0; i < p->n_params_t; i++) {
        const plan_param *pp = &p->params[i];
        if (pp->ndim == 2 && pp->shape[0] == p->Vp && pp->shape[1] == p->C && p->Vp > p->V)
            memset(x->params + pp->offset + (int64_t)p->V * p->C, 0, sizeof(float) * (size_t)(p->Vp - p->V) * p->C);
    }
}

static int64_t bind_dim(const exec_t *x, int64_t v) {
    return v == DIM_B ? x->B : v == DIM_T ? x->T : v == DIM_N ? (int64_t)x->B * x->T : v;
}

static void run_op(exec_t *x, const plan_op *o, float dloss) {
    float *I[6], *O[4];
    for (int i = 0; i < o->nin; i++) I[i] = exec_buf(x, o->in[i]);
    for (int i = 0; i < o->nout; i++) O[i] = exec_buf(x, o->out[i]);
    int B = (int)bind_dim(x, o->B), T = (int)bind_dim(x, o->T), N = (int)bind_dim(x, o->N);
    long n = (long)bind_dim(x, o->n) * (o->C ? o->C : 1);
    int C = (int)o->C;
    switch (o->kind) {
    case OP_EMBEDDING_FWD: op_embedding_fwd(O[0], tok(x, o->in[0]), I[1], I[2], B, T, C); break;
    case OP_EMBEDDING_BWD: op_embedding_bwd(O[0], O[1], I[0], tok(x, o->in[1]), B, T, C, (int)o->V); break;
    case OP_LAYERNORM_FWD: op_layernorm_fwd(O[0], O[1], O[2], I[0], I[1], I[2], N, C, o->eps); break;
    case OP_LAYERNORM_BWD: op_layernorm_bwd(O[0], O[1], O[2], I[0], I[1], I[2], I[3], I[4], N, C); break;
    case OP_RMSNORM_FWD: op_rmsnorm_fwd(O[0], O[1], I[0], I[1], N, C, o->eps); break;
    case OP_RMSNORM_BWD: op_rmsnorm_bwd(O[0], O[1], I[0], I[1], I[2], I[3], N, C); break;
    case OP_MATMUL_FWD: op_matmul_fwd(O[0], I[0], I[1], I[2], N, (int)o->IC, (int)o->OC); break;
    case OP_MATMUL_BWD: op_matmul_bwd(O[0], O[1], O[2], I[0], I[1], I[2], N, (int)o->IC, (int)o->OC); break;
    case OP_QKNORM_FWD:
        op_qknorm_fwd(O[0], O[1], I[0], I[1], I[2], N, (int)o->NH, (int)o->NKV, (int)o->hd, o->eps);
        break;
    case OP_QKNORM_BWD:
        op_qknorm_bwd(O[0], O[1], O[2], I[0], I[1], I[2], I[3], I[4], N, (int)o->NH, (int)o->NKV, (int)o->hd);
        break;
    case OP_ROPE_FWD: op_rope_fwd(O[0], I[0], B, T, (int)o->NH, (int)o->NKV, (int)o->hd, o->theta); break;
    case OP_ROPE_BWD: op_rope_bwd(O[0], I[0], B, T, (int)o->NH, (int)o->NKV, (int)o->hd, o->theta); break;
    case OP_ATTENTION_FWD: op_attention_fwd(O[0], O[1], I[0], B, T, (int)o->NH, (int)o->NKV, (int)o->hd); break;
    case OP_ATTENTION_BWD:
        op_attention_bwd(O[0], O[1], I[0], I[1], I[2], B, T, (int)o->NH, (int)o->NKV, (int)o->hd);
        break;
    case OP_FLASH_ATTENTION_FWD:
        op_flash_attention_fwd(O[0], O[1], I[0], B, T, (int)o->NH, (int)o->NKV, (int)o->hd);
        break;
    case OP_FLASH_ATTENTION_BWD:
        op_flash_attention_bwd(O[0], O[1], I[0], I[1], I[2], I[3], B, T, (int)o->NH, (int)o->NKV, (int)o->hd);
        break;
    case OP_FP8_QUANTIZE:
        memcpy(O[0], I[0], sizeof(float) * (size_t)n);
        hyp_fp8_state_fake_quantize(&x->fp8[o->slot], O[0], n);
        break;
    case OP_ROUND_BF16: { /* v2102: round to bf16 (nearest even), kept in fp32 storage */
        const uint32_t *src = (const uint32_t *)(const void *)I[0];
        uint32_t *dst = (uint32_t *)(void *)O[0];
#pragma omp parallel for schedule(static)
        for (long i = 0; i < n; i++) {
            uint32_t u = src[i];
            if ((u & 0x7f800000u) == 0x7f800000u && (u & 0x007fffffu)) dst[i] = u | 0x00400000u; /* quiet NaN */
            else dst[i] = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
        }
        break;
    }
    case OP_GELU_FWD: op_gelu_fwd(O[0], I[0], n); break;
    case OP_GELU_BWD: op_gelu_bwd(O[0], I[1], I[0], n); break;
    case OP_SWIGLU_FWD: op_swiglu_fwd(O[0], I[0], N, (int)o->H); break;
    case OP_SWIGLU_BWD: op_swiglu_bwd(O[0], I[0], I[1], N, (int)o->H); break;
    case OP_ADD_FWD: op_add_fwd(O[0], I[0], I[1], n); break;
    case OP_ACCUMULATE: op_accumulate(O[0], I[0], n); break;
    case OP_ZERO: op_zero(O[0], n); break;
    case OP_CROSSENTROPY: op_crossentropy_fwd(O[0], I[0], x->targets, N, (int)o->V, (int)o->Vp); break;
    case OP_CROSSENTROPY_FUSED:
        op_crossentropy_fused(O[0], O[1], x->targets, dloss, N, (int)o->V, (int)o->Vp);
        break;
    default: break;
    }
}

void exec_forward(exec_t *x) {
    for (int i = 0; i < x->p->n_fwd; i++) run_op(x, &x->p->fwd[i], 0);
}

int64_t exec_count_targets(const exec_t *x) {
    int64_t cnt = 0, n = (int64_t)x->B * x->T;
    for (int64_t i = 0; i < n; i++) cnt += x->targets[i] >= 0;
    return cnt;
}

static float mean_loss(exec_t *x) {
    const float *losses = exec_buf(x, x->p->losses_buf);
    int64_t n = (int64_t)x->B * x->T, cnt = exec_count_targets(x);
    double s = 0;
    for (int64_t i = 0; i < n; i++) s += losses[i];
    return cnt ? (float)(s / (double)cnt) : 0.0f;
}

float exec_eval_loss(exec_t *x) {
    exec_forward(x);
    run_op(x, &x->p->loss, 0);
    return mean_loss(x);
}

float exec_backward(exec_t *x, float dloss) {
    float loss = 0;
    for (int i = 0; i < x->p->n_bwd; i++) {
        run_op(x, &x->p->bwd[i], dloss);
        if (x->p->bwd[i].kind == OP_CROSSENTROPY_FUSED) loss = mean_loss(x);
    }
    return loss;
}

void exec_fp8_step(exec_t *x) {
    for (int i = 0; i < x->p->fp8_slots; i++) hyp_fp8_state_update(&x->fp8[i]);
}
