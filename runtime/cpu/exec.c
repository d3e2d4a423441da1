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

int exec_init(exec_t *x, const plan_t *p, hyp_err *e) { return exec_init_dp(x, p, NULL, 0, e); }

/* ".3." in a parameter name: its transformer layer (else -1). */
static int layer_of(const char *name) {
    for (const char *s = strchr(name, '.'); s; s = strchr(s + 1, '.')) {
        char *end;
        long v = strtol(s + 1, &end, 10);
        if (end > s + 1 && *end == '.') return (int)v;
    }
    return -1;
}

static int64_t round16(int64_t n) { return (n + 15) / 16 * 16; }

/* Groups: runs of consecutive parameters (arena order) of the same layer; before the first layer
 * "pre" (-1), after it "post" (-2). A group spans its first to its last tensor, alignment gaps
 * included (they stay zero). */
static int z3_groups(exec_z3 *z, const plan_t *p, int world, hyp_err *e) {
    int key_prev = -3, seen_layer = 0;
    z->start = calloc((size_t)p->n_params_t, sizeof(int64_t));
    z->len = calloc((size_t)p->n_params_t, sizeof(int64_t));
    z->gs = calloc((size_t)p->n_params_t, sizeof(int64_t));
    z->sb = calloc((size_t)p->n_params_t, sizeof(int64_t));
    if (!z->start || !z->len || !z->gs || !z->sb) return hyp_fail(e, HYP_EFAIL, "out of memory");
    for (int i = 0; i < p->n_params_t; i++) {
        const plan_param *pp = &p->params[i];
        int l = layer_of(pp->name), key = l >= 0 ? l : seen_layer ? -2 : -1;
        seen_layer |= l >= 0;
        if (i && pp->offset < p->params[i - 1].offset + p->params[i - 1].numel)
            return hyp_fail(e, HYP_EINPUT, "plan: parameter %s does not follow the previous one in the arena — ZeRO-3 needs the plan's arena order; regenerate the plan", pp->name);
        if (key != key_prev) z->start[z->n_groups++] = pp->offset;
        z->len[z->n_groups - 1] = pp->offset + pp->numel - z->start[z->n_groups - 1]; /* alignment gaps included */
        key_prev = key;
    }
    if (!z->n_groups) return hyp_fail(e, HYP_EINPUT, "plan: no parameters — nothing for ZeRO-3 to shard");
    int64_t sb = 0;
    for (int g = 0; g < z->n_groups; g++) {
        z->gs[g] = round16((z->len[g] + world - 1) / world);
        z->sb[g] = sb;
        sb += z->gs[g];
        if (world * z->gs[g] > z->slot_cap) z->slot_cap = world * z->gs[g];
    }
    return HYP_OK;
}

static int z3_group_at(const exec_z3 *z, int64_t offset) {
    for (int g = 0; g < z->n_groups; g++)
        if (offset >= z->start[g] && offset < z->start[g] + z->len[g]) return g;
    return -1;
}

/* Cuts an op list into segments of one group each; an op must not mix groups. */
static int z3_segments(const exec_z3 *z, const plan_op *ops, int n, exec_seg **out, int *nout, hyp_err *e) {
    exec_seg *s = calloc((size_t)(n ? n : 1), sizeof *s);
    if (!s) return hyp_fail(e, HYP_EFAIL, "out of memory");
    int ns = 0, cur = -1;
    for (int i = 0; i < n; i++) {
        const plan_op *o = &ops[i];
        int g = -1;
        for (int k = 0; k < o->nin + o->nout; k++) {
            int b = k < o->nin ? o->in[k] : o->out[k - o->nin];
            int bg = b >= 0 ? z->buf_group[b] : -1;
            if (bg < 0) continue;
            if (g >= 0 && bg != g) {
                free(s);
                return hyp_fail(e, HYP_EINPUT, "plan: op %d (%s) uses parameters of two layers — ZeRO-3 gathers one layer at a time; use zero2 for this plan",
                                i, plan_op_name(o->kind));
            }
            g = bg;
        }
        if (g >= 0 && g != cur) {
            if (ns && s[ns - 1].group < 0) s[ns - 1].group = g; /* leading param-free ops join */
            else s[ns++] = (exec_seg){i, g};
            cur = g;
        } else if (!ns) {
            s[ns++] = (exec_seg){i, -1};
        }
    }
    *out = s;
    *nout = ns;
    return HYP_OK;
}

static int z3_init(exec_t *x, hyp_coll *coll, hyp_err *e) {
    const plan_t *p = x->p;
    if (!coll) return hyp_fail(e, HYP_EINPUT, "ZeRO stage 3 needs a communicator (hyp_coll_init), even for one rank");
    exec_z3 *z = x->z3 = calloc(1, sizeof *x->z3);
    if (!z) return hyp_fail(e, HYP_EFAIL, "out of memory");
    z->coll = coll;
    int rc = z3_groups(z, p, x->world, e);
    if (rc) return rc;
    z->buf_group = malloc(sizeof(int) * (size_t)p->n_bufs);
    z->ptr = calloc((size_t)p->n_bufs, sizeof(float *));
    if (!z->buf_group || !z->ptr) return hyp_fail(e, HYP_EFAIL, "out of memory");
    for (int b = 0; b < p->n_bufs; b++) {
        int k = p->bufs[b].kind;
        z->buf_group[b] = k == BUF_PARAM || k == BUF_GRAD ? z3_group_at(z, p->bufs[b].offset) : -1;
    }
    if ((rc = z3_segments(z, p->fwd, p->n_fwd, &z->fwd, &z->n_fwd, e)) ||
        (rc = z3_segments(z, p->bwd, p->n_bwd, &z->bwd, &z->n_bwd, e)))
        return rc;
    for (int k = 0; k < p->loss.nin; k++)
        if (p->loss.in[k] >= 0 && z->buf_group[p->loss.in[k]] >= 0)
            return hyp_fail(e, HYP_EINPUT, "plan: the loss op reads a parameter — ZeRO-3 cannot run this plan; use zero2");
    int64_t shard = z->sb[z->n_groups - 1] + z->gs[z->n_groups - 1];
    x->shard = shard;
    size_t before = x->bytes;
    int ok = (x->params = alloc_floats(shard, &x->bytes)) != NULL;
    z->n_slots = p->zero_prefetch + 1;
    for (int s = 0; s < z->n_slots; s++) ok &= (z->slot[s] = alloc_floats(z->slot_cap, &x->bytes)) != NULL;
    x->bytes_params = x->bytes - before, before = x->bytes;
    x->grads = alloc_floats(z->slot_cap, &x->bytes);
    x->bytes_grad_workspace = x->bytes - before, before = x->bytes;
    x->gshard = alloc_floats(shard, &x->bytes);
    x->bytes_grads = x->bytes - before;
    if (!ok || !x->grads || !x->gshard) return hyp_fail(e, HYP_EFAIL, "out of memory");
    return HYP_OK;
}

/* Stages 0-2: one full parameter arena (and its gradient twin, the workspace at stage 2). */
static void alloc_replicated(exec_t *x) {
    int64_t arena = x->shard * x->world;
    size_t before = x->bytes;
    x->params = alloc_floats(arena, &x->bytes);
    x->bytes_params = x->bytes - before, before = x->bytes;
    x->grads = alloc_floats(arena, &x->bytes);
    if (x->stage >= 2) {
        x->bytes_grad_workspace = x->bytes - before, before = x->bytes;
        x->gshard = alloc_floats(x->shard, &x->bytes);
    }
    x->bytes_grads = x->bytes - before;
}

static int init_fp8(exec_t *x, hyp_err *e) {
    const plan_t *p = x->p;
    x->fp8 = calloc((size_t)p->fp8_slots, sizeof *x->fp8);
    if (!x->fp8) return hyp_fail(e, HYP_EFAIL, "out of memory");
    hyp_fp8_recipe r = hyp_fp8_recipe_default();
    r.scaling = p->fp8_current ? HYP_FP8_CURRENT : HYP_FP8_DELAYED;
    r.history_len = p->fp8_history;
    r.margin = (float)p->fp8_margin;
    for (int i = 0; i < p->fp8_slots; i++) {
        int rc = p->fp8_e4m3_only ? hyp_fp8_state_init(&x->fp8[i], HYP_FP8_E4M3, &r, e)
                                  : hyp_fp8_state_init_role(&x->fp8[i], (hyp_fp8_role)p->fp8_roles[i], &r, e);
        if (rc) return rc;
    }
    return HYP_OK;
}

/* exec_init_dp, with the activation arena (acts) or without it (exec_init_mirror). */
static int init_dp(exec_t *x, const plan_t *p, hyp_coll *coll, int stage, int acts, hyp_err *e) {
    memset(x, 0, sizeof *x);
    x->p = p;
    x->world = coll ? hyp_coll_world(coll) : 1;
    x->rank = coll ? hyp_coll_rank(coll) : 0;
    x->stage = stage;
    x->shard = round16((p->param_floats + x->world - 1) / x->world);
    int rc = HYP_OK;
    if (stage >= 3) rc = z3_init(x, coll, e);
    else alloc_replicated(x);
    if (!rc && (!p->optim.kind[0] || p->optim.n_state < 0 || p->optim.n_state > HYP_OPT_MAX_STATE))
        rc = hyp_fail(e, HYP_EINPUT, "exec: the plan has no optimizer section — regenerate it with gen");
    if (!rc && stage >= 1 && p->optim.shard_matrix)
        rc = hyp_fail(e, HYP_EINPUT, "exec: optimizer '%s' updates whole matrices, and ZeRO stage %d shards by floats — generate the trainer without zero1/zero2/zero3",
                      p->optim.kind, stage);
    if (rc) {
        exec_free(x);
        return rc;
    }
    int64_t optim = stage >= 1 ? x->shard : x->shard * x->world;
    size_t before = x->bytes;
    int states_ok = 1;
    x->n_state = p->optim.n_state;
    for (int k = 0; k < x->n_state; k++) states_ok &= (x->state[k] = alloc_floats(optim, &x->bytes)) != NULL;
    x->bytes_optim = x->bytes - before, before = x->bytes;
    if (acts) x->acts = alloc_floats(p->act_floats, &x->bytes);
    x->bytes_acts = x->bytes - before;
    x->tokens = calloc((size_t)p->B * p->T, sizeof(int32_t));
    x->targets = calloc((size_t)p->B * p->T, sizeof(int32_t));
    if (p->fp8_slots && (rc = init_fp8(x, e))) {
        exec_free(x);
        return rc;
    }
    if (!x->params || !x->grads || !states_ok || (acts && !x->acts) || !x->tokens || !x->targets ||
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

int exec_init_dp(exec_t *x, const plan_t *p, hyp_coll *coll, int stage, hyp_err *e) {
    return init_dp(x, p, coll, stage, 1, e);
}

int exec_init_mirror(exec_t *x, const plan_t *p, hyp_coll *coll, int stage, hyp_err *e) {
    return init_dp(x, p, coll, stage, 0, e);
}

int exec_alloc_acts(exec_t *x, hyp_err *e) {
    if (x->acts) return HYP_OK;
    size_t before = x->bytes;
    if (!(x->acts = alloc_floats(x->p->act_floats, &x->bytes)))
        return hyp_fail(e, HYP_EFAIL, "out of memory: %.1f MiB of host activations for sampling — use a smaller --batch/--seq at gen time",
                        4.0 * x->p->act_floats / 1048576.0);
    x->bytes_acts = x->bytes - before;
    return HYP_OK;
}

static void z3_free(exec_z3 *z) {
    if (!z) return;
    free(z->start), free(z->len), free(z->gs), free(z->sb);
    free(z->buf_group), free(z->ptr), free(z->fwd), free(z->bwd);
    for (int s = 0; s < EXEC_Z3_MAX_SLOTS; s++) free(z->slot[s]);
    free(z->full);
    free(z);
}

void exec_free(exec_t *x) {
    z3_free(x->z3);
    free(x->fp8);
    free(x->gshard);
    free(x->params);
    free(x->grads);
    for (int k = 0; k < x->n_state; k++) free(x->state[k]);
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
    if (x->z3 && x->z3->buf_group[idx] >= 0) return x->z3->ptr[idx];
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

int64_t exec_z3_own(const exec_t *x, int64_t off, int64_t n, int64_t *first, int64_t *pos) {
    const exec_z3 *z = x->z3;
    int g = z3_group_at(z, off);
    if (g < 0) return 0;
    int64_t lo = z->start[g] + x->rank * z->gs[g], hi = lo + z->gs[g];
    int64_t a = off > lo ? off : lo, b = off + n < hi ? off + n : hi;
    *first = a;
    *pos = z->sb[g] + (a - lo);
    return b > a ? b - a : 0;
}

/* Stage 3: the own shard's part of the arena range [off, off+n) of src (src[0] = arena[off]) into
 * the shard array dst. */
static void z3_keep_own(const exec_t *x, const float *src, int64_t off, int64_t n, float *dst) {
    int64_t first, pos, cnt = exec_z3_own(x, off, n, &first, &pos);
    if (cnt > 0) memcpy(dst + pos, src + (first - off), sizeof(float) * (size_t)cnt);
}

void exec_init_params(exec_t *x, uint64_t seed) {
    const plan_t *p = x->p;
    hyp_rng rng;
    hyp_rng_seed(&rng, seed);
    /* stage 3: each tensor is drawn whole (the same random stream on every rank) into a working
     * slot (it holds any group, so any tensor) and only the own shard's part is kept */
    float *tmp = x->z3 ? x->z3->slot[0] : NULL;
    if (!x->z3) memset(x->params, 0, sizeof(float) * (size_t)p->param_floats);
    for (int i = 0; i < p->n_params_t; i++) {
        const plan_param *pp = &p->params[i];
        float *w = tmp ? tmp : x->params + pp->offset;
        if (pp->init == PINIT_ONES)
            for (int64_t j = 0; j < pp->numel; j++) w[j] = 1.0f;
        else if (pp->init == PINIT_NORMAL)
            hyp_rng_fill_normal(&rng, w, (size_t)pp->numel, 0.0f, pp->init_std);
        else
            memset(w, 0, sizeof(float) * (size_t)pp->numel);
        /* padded vocabulary rows stay zero: they are never a target and never an input */
        if (pp->ndim == 2 && pp->shape[0] == p->Vp && pp->shape[1] == p->C && p->Vp > p->V)
            memset(w + (int64_t)p->V * p->C, 0, sizeof(float) * (size_t)(p->Vp - p->V) * p->C);
        if (tmp) z3_keep_own(x, tmp, pp->offset, pp->numel, x->params);
    }
}

int exec_z3_gather_full(exec_t *x, const float *src, float *full, hyp_err *e) {
    exec_z3 *z = x->z3;
    for (int g = 0; g < z->n_groups; g++) {
        int req, rc;
        if ((rc = hyp_coll_iallgather_f32(z->coll, src + z->sb[g], z->slot[0], (size_t)z->gs[g], &req, e)) ||
            (rc = hyp_coll_wait(z->coll, req, e)))
            return rc;
        memcpy(full + z->start[g], z->slot[0], sizeof(float) * (size_t)z->len[g]);
    }
    return HYP_OK;
}

void exec_z3_scatter_full(const exec_t *x, const float *full, float *dst) {
    const exec_z3 *z = x->z3;
    for (int g = 0; g < z->n_groups; g++)
        z3_keep_own(x, full + z->start[g], z->start[g], z->len[g], dst);
}

void exec_z3_adopt_full(exec_t *x, float *full) {
    exec_z3 *z = x->z3;
    free(z->full);
    z->full = full;
    for (int b = 0; b < x->p->n_bufs; b++)
        if (z->buf_group[b] >= 0 && x->p->bufs[b].kind == BUF_PARAM) z->ptr[b] = full + x->p->bufs[b].offset;
}

int exec_z3_status(const exec_t *x, hyp_err *e) {
    if (!x->z3 || !x->z3->rc) return HYP_OK;
    *e = x->z3->err;
    return x->z3->rc;
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

static float mean_loss(exec_t *x);

/* Points group g's param buffers at base (its gathered copy), or its grad buffers. */
static void z3_bind(exec_z3 *z, const plan_t *p, int g, int kind, float *base) {
    for (int b = 0; b < p->n_bufs; b++)
        if (z->buf_group[b] == g && p->bufs[b].kind == kind) z->ptr[b] = base + (p->bufs[b].offset - z->start[g]);
}

static int z3_fail(exec_z3 *z, int rc) {
    if (!z->rc) z->rc = rc;
    return rc;
}

/* Starts the gather of segment s's group into slot s % n_slots. */
static int z3_prefetch(exec_z3 *z, const exec_seg *seg, int s, const float *shard, int *req) {
    *req = -1;
    int g = seg[s].group;
    if (g < 0) return HYP_OK;
    return hyp_coll_iallgather_f32(z->coll, shard + z->sb[g], z->slot[s % z->n_slots], (size_t)z->gs[g], req, &z->err);
}

/* Runs ops[0..n) segment by segment: start the gathers up to zero_prefetch segments ahead (into
 * the slots of finished segments), wait for this segment's, compute; in backward (grads) the
 * segment's gradients are then reduce-scattered into gshard. */
static void z3_run(exec_t *x, const plan_op *ops, int n, const exec_seg *seg, int ns, int grads, float dloss, float *loss) {
    exec_z3 *z = x->z3;
    const plan_t *p = x->p;
    if (z->rc) return;
    int req[EXEC_Z3_MAX_SLOTS], started = 0;
    for (int s = 0; s < ns; s++) {
        int g = seg[s].group, end = s + 1 < ns ? seg[s + 1].start : n, k = s % z->n_slots;
        for (; !z->full && started < ns && started < s + z->n_slots; started++)
            if (z3_fail(z, z3_prefetch(z, seg, started, x->params, &req[started % z->n_slots]))) return;
        if (!z->full) {
            if (req[k] >= 0 && z3_fail(z, hyp_coll_wait(z->coll, req[k], &z->err))) return;
            if (g >= 0) z3_bind(z, p, g, BUF_PARAM, z->slot[k]);
        }
        if (grads && g >= 0) {
            memset(x->grads, 0, sizeof(float) * (size_t)(x->world * z->gs[g]));
            z3_bind(z, p, g, BUF_GRAD, x->grads);
        }
        for (int i = seg[s].start; i < end; i++) {
            run_op(x, &ops[i], dloss);
            if (loss && ops[i].kind == OP_CROSSENTROPY_FUSED) *loss = mean_loss(x);
        }
        if (grads && g >= 0 &&
            z3_fail(z, hyp_coll_reduce_scatter_add_f32(z->coll, x->grads, x->gshard + z->sb[g], (size_t)z->gs[g], &z->err)))
            return;
    }
}

void exec_forward(exec_t *x) {
    if (x->z3) z3_run(x, x->p->fwd, x->p->n_fwd, x->z3->fwd, x->z3->n_fwd, 0, 0, NULL);
    else
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
    if (x->z3) {
        z3_run(x, x->p->bwd, x->p->n_bwd, x->z3->bwd, x->z3->n_bwd, 1, dloss, &loss);
        return loss;
    }
    for (int i = 0; i < x->p->n_bwd; i++) {
        run_op(x, &x->p->bwd[i], dloss);
        if (x->p->bwd[i].kind == OP_CROSSENTROPY_FUSED) loss = mean_loss(x);
    }
    return loss;
}

void exec_fp8_step(exec_t *x) {
    for (int i = 0; i < x->p->fp8_slots; i++) hyp_fp8_state_update(&x->fp8[i]);
}
