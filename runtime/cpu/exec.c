/* exec.c — runs plan op lists on the CPU backend (see exec.h). */
#include "exec.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "gemm_bf16.h"
#include "moe_stats.h"
#include "ops_bf16.h"
#include "ops_cpu.h"
#include "prof.h"
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

static int64_t round16(int64_t n) { return (n + 15) / 16 * 16; }

static int z3_init(exec_t *x, hyp_coll *coll, hyp_err *e) {
    const plan_t *p = x->p;
    if (!coll) return hyp_fail(e, HYP_EINPUT, "ZeRO stage 3 needs a communicator (hyp_coll_init), even for one rank");
    exec_z3 *z = x->z3 = calloc(1, sizeof *x->z3);
    if (!z) return hyp_fail(e, HYP_EFAIL, "out of memory");
    z->coll = coll;
    int rc = hyp_z3_layout_init(&z->L, p, x->world, x->rank, e);
    if (rc) return rc;
    z->ptr = calloc((size_t)p->n_bufs, sizeof(float *));
    if (!z->ptr) return hyp_fail(e, HYP_EFAIL, "out of memory");
    int64_t shard = z->L.shard;
    x->shard = shard;
    size_t before = x->bytes;
    int ok = (x->params = alloc_floats(shard, &x->bytes)) != NULL;
    for (int s = 0; s < z->L.n_slots; s++) ok &= (z->slot[s] = alloc_floats(z->L.slot_cap, &x->bytes)) != NULL;
    x->bytes_params = x->bytes - before, before = x->bytes;
    x->grads = alloc_floats(z->L.slot_cap, &x->bytes);
    x->bytes_grad_workspace = x->bytes - before, before = x->bytes;
    x->gshard = alloc_floats(shard, &x->bytes);
    x->bytes_grads = x->bytes - before;
    if (!ok || !x->grads || !x->gshard) return hyp_fail(e, HYP_EFAIL, "out of memory");
    return HYP_OK;
}

/* Stage 2 with activations (a training executor): ZeRO-3's layout for its layer groups and op
 * segments, a gradient workspace of one group. 0 = the plan cannot be cut into groups (then the
 * full-arena workspace of before); the reason is not an error at stage 2. */
static int64_t z2_init(exec_t *x, hyp_coll *coll) {
    exec_z3 *z = calloc(1, sizeof *z);
    hyp_err ignore;
    if (!z) return 0;
    z->coll = coll;
    if (!coll || hyp_z3_layout_init(&z->L, x->p, x->world, x->rank, &ignore) ||
        !(z->ptr = calloc((size_t)x->p->n_bufs, sizeof(float *)))) {
        hyp_z3_layout_free(&z->L);
        free(z->ptr);
        free(z);
        return 0;
    }
    int64_t ws = 0;
    for (int g = 0; g < z->L.n_groups; g++)
        if (z->L.len[g] > ws) ws = z->L.len[g];
    x->zg = z;
    return ws;
}

/* Stages 0-2: one full parameter arena; its gradient twin (stages 0-1), or at stage 2 a one-group
 * gradient workspace (exec_z3 zg) and the reduced shard. */
static void alloc_replicated(exec_t *x, hyp_coll *coll, int acts) {
    int64_t arena = x->shard * x->world, ws = x->stage == 2 && acts ? z2_init(x, coll) : 0;
    size_t before = x->bytes;
    /* v2161: a bf16 arena (2 bytes per element at the same element offsets), no fp32 master */
    x->params = alloc_floats(x->p->param_bf16 ? (arena + 1) / 2 : arena, &x->bytes);
    x->bytes_params = x->bytes - before, before = x->bytes;
    x->grads = alloc_floats(ws ? ws : arena, &x->bytes);
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

/* Resolves the cpu function of every registered op; with check, every op of the plan must have one. */
static int bind_ops(exec_t *x, int check, hyp_err *e) {
    const plan_t *p = x->p;
    for (int id = 0; id < hyp_op_count() && id < HYP_OP_MAX; id++) {
        x->op_fn[id] = exec_cpu_op(hyp_op_name(id));
        x->lowp_fn[id] = exec_lowp_op(hyp_op_name(id));
    }
    for (int pass = 0; check && pass < 3; pass++) {
        const plan_op *list = pass == 0 ? p->fwd : pass == 1 ? p->bwd : &p->loss;
        int n = pass == 0 ? p->n_fwd : pass == 1 ? p->n_bwd : 1;
        for (int i = 0; i < n; i++)
            if (exec_op_is_lowp(x, &list[i]) ? !x->lowp_fn[list[i].op] : !x->op_fn[list[i].op])
                return hyp_fail(e, HYP_EINPUT, "plan op '%s' has no cpu implementation in this runtime — generate the trainer for a device target, or without the technique that adds it",
                                hyp_op_name(list[i].op));
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
    int rc = bind_ops(x, acts, e);
    if (rc) {
        memset(x, 0, sizeof *x);
        return rc;
    }
    /* stages 1-2: a whole-matrix optimizer with matrix hooks runs distributed (train_optim_own_matrix;
     * the trainer refuses one without them) */
    if (p->param_bf16 && stage >= 1) /* gen refuses this selection; a hand-edited plan gets this */
        rc = hyp_fail(e, HYP_EINPUT, "exec: bf16 parameters (param_storage, v2161) need ZeRO stage 0, the plan asks for stage %d — generate the trainer without zero1/zero2/zero3",
                      stage);
    else if (stage >= 3 && p->optim.shard_matrix)
        rc = hyp_fail(e, HYP_EINPUT, "exec: optimizer '%s' updates whole matrices, and ZeRO stage %d shards the parameters by floats — use zero1 or zero2, or generate the trainer without ZeRO",
                      p->optim.kind, stage);
    else if (stage >= 3) rc = z3_init(x, coll, e);
    else alloc_replicated(x, coll, acts);
    if (!rc && (!p->optim.kind[0] || p->optim.n_state < 0 || p->optim.n_state > HYP_OPT_MAX_STATE))
        rc = hyp_fail(e, HYP_EINPUT, "exec: the plan has no optimizer section — regenerate it with gen");
    for (int k = 0; !rc && stage >= 1 && k < p->optim.n_state; k++)
        if (p->optim.state_compact[k])
            rc = hyp_fail(e, HYP_EINPUT, "exec: optimizer '%s' packs state '%s' per tensor, and ZeRO stage %d shards the parameter arena's layout — generate the trainer without zero1/zero2/zero3",
                          p->optim.kind, p->optim.state_name[k], stage);
    if (rc) {
        exec_free(x);
        return rc;
    }
    int64_t optim = stage >= 1 ? x->shard : x->shard * x->world;
    size_t before = x->bytes;
    int states_ok = 1;
    x->n_state = p->optim.n_state;
    for (int k = 0; k < x->n_state; k++) /* a packed state (stage 0 only): its own layout */
        states_ok &= (x->state[k] = alloc_floats(p->optim.state_compact[k] ? p->optim.state_floats[k] : optim, &x->bytes)) != NULL;
    x->bytes_optim = x->bytes - before, before = x->bytes;
    if (acts) x->acts = alloc_floats(p->act_floats, &x->bytes);
    x->bytes_acts = x->bytes - before;
    x->tokens = calloc((size_t)p->B * p->T, sizeof(int32_t));
    x->targets = calloc((size_t)p->B * p->T, sizeof(int32_t));
    if (p->positions_buf >= 0) x->positions = calloc((size_t)p->B * p->T, sizeof(int32_t));
    if ((p->fp8_slots && (rc = init_fp8(x, e))) || (acts && x->acts && (rc = exec_lowp_init(x, e))) ||
        (acts && (rc = exec_moe_init(x, e)))) {
        exec_free(x);
        return rc;
    }
    if (!x->params || !x->grads || !states_ok || (acts && !x->acts) || !x->tokens || !x->targets || (p->positions_buf >= 0 && !x->positions) ||
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
    int rc = bind_ops(x, 1, e);
    if (rc) return rc;
    size_t before = x->bytes;
    if (!(x->acts = alloc_floats(x->p->act_floats, &x->bytes)))
        return hyp_fail(e, HYP_EFAIL, "out of memory: %.1f MiB of host activations for sampling — use a smaller --batch/--seq at gen time",
                        4.0 * x->p->act_floats / 1048576.0);
    x->bytes_acts = x->bytes - before;
    return exec_lowp_init(x, e);
}

static void z3_free(exec_z3 *z) {
    if (!z) return;
    hyp_z3_layout_free(&z->L);
    free(z->ptr);
    for (int s = 0; s < HYP_Z3_MAX_SLOTS; s++) free(z->slot[s]);
    free(z->full);
    free(z);
}

void exec_free(exec_t *x) {
    z3_free(x->z3);
    z3_free(x->zg);
    free(x->fp8);
    free(x->gshard);
    free(x->params);
    free(x->grads);
    for (int k = 0; k < x->n_state; k++) free(x->state[k]);
    free(x->acts);
    exec_lowp_free(x);
    exec_moe_free(x);
    free(x->tokens);
    free(x->targets);
    free(x->positions);
    memset(x, 0, sizeof *x);
}

int exec_bind(exec_t *x, int B, int T, hyp_err *e) {
    int rc = exec_reshape(x, B, T, e);
    if (rc != HYP_OK) return rc;
    /* one document per row until the loader says otherwise (sampling, evaluation without one) */
    if (x->positions)
        for (long n = 0; n < (long)B * T; n++) x->positions[n] = (int32_t)(n % T);
    return HYP_OK;
}

int exec_reshape(exec_t *x, int B, int T, hyp_err *e) {
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
    if (x->z3 && x->z3->L.buf_group[idx] >= 0) return x->z3->ptr[idx];
    if (x->zg && b->kind == BUF_GRAD && x->zg->L.buf_group[idx] >= 0) return x->zg->ptr[idx];
    switch (b->kind) {
    case BUF_PARAM: /* v2161 bf16 parameters: the element offset in the bf16 arena */
        return x->p->param_bf16 ? (float *)(void *)((uint16_t *)(void *)x->params + b->offset) : x->params + b->offset;
    case BUF_GRAD: return x->grads + b->offset;
    case BUF_ACT: return (float *)(void *)((char *)x->acts + b->offset_bytes);
    default: return NULL;
    }
}

int64_t exec_z3_own(const exec_t *x, int64_t off, int64_t n, int64_t *first, int64_t *pos) {
    return hyp_z3_own(&x->z3->L, off, n, first, pos);
}

/* Stage 3: the own shard's part of the arena range [off, off+n) of src (src[0] = arena[off]) into
 * the shard array dst. */
static void z3_keep_own(const exec_t *x, const float *src, int64_t off, int64_t n, float *dst) {
    int64_t first, pos, cnt = exec_z3_own(x, off, n, &first, &pos);
    if (cnt > 0) memcpy(dst + pos, src + (first - off), sizeof(float) * (size_t)cnt);
}

void exec_params_changed(exec_t *x) { exec_lowp_weights_changed(x); }

void exec_init_params(exec_t *x, uint64_t seed) {
    const plan_t *p = x->p;
    exec_params_changed(x);
    hyp_rng rng;
    hyp_rng_seed(&rng, seed);
    /* stage 3: each tensor is drawn whole (the same random stream on every rank) into a working
     * slot (it holds any group, so any tensor) and only the own shard's part is kept */
    float *tmp = x->z3 ? x->z3->slot[0] : NULL;
    if (p->param_bf16) { /* v2161: drawn in fp32 per tensor (in the gradient arena, zeroed after),
                          * stored rounded to nearest bf16 */
        tmp = x->grads;
        memset(x->params, 0, 2 * (size_t)p->param_floats);
    } else if (!x->z3) memset(x->params, 0, sizeof(float) * (size_t)p->param_floats);
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
        if (p->param_bf16) cpu_f32_to_bf16((uint16_t *)(void *)x->params + pp->offset, tmp, (long)pp->numel);
        else if (tmp) z3_keep_own(x, tmp, pp->offset, pp->numel, x->params);
    }
    if (p->param_bf16) memset(x->grads, 0, sizeof(float) * (size_t)p->param_floats);
}

int exec_z3_gather_full(exec_t *x, const float *src, float *full, hyp_err *e) {
    exec_z3 *z = x->z3;
    for (int g = 0; g < z->L.n_groups; g++) {
        int req, rc;
        if ((rc = hyp_coll_iallgather_f32(z->coll, src + z->L.sb[g], z->slot[0], (size_t)z->L.gs[g], &req, e)) ||
            (rc = hyp_coll_wait(z->coll, req, e)))
            return rc;
        memcpy(full + z->L.start[g], z->slot[0], sizeof(float) * (size_t)z->L.len[g]);
    }
    return HYP_OK;
}

void exec_z3_scatter_full(const exec_t *x, const float *full, float *dst) {
    const exec_z3 *z = x->z3;
    for (int g = 0; g < z->L.n_groups; g++)
        z3_keep_own(x, full + z->L.start[g], z->L.start[g], z->L.len[g], dst);
}

void exec_z3_adopt_full(exec_t *x, float *full) {
    exec_z3 *z = x->z3;
    free(z->full);
    z->full = full;
    exec_params_changed(x);
    for (int b = 0; b < x->p->n_bufs; b++)
        if (z->L.buf_group[b] >= 0 && x->p->bufs[b].kind == BUF_PARAM) z->ptr[b] = full + x->p->bufs[b].offset;
}

int exec_z3_status(const exec_t *x, hyp_err *e) {
    const exec_z3 *z = x->z3 ? x->z3 : x->zg;
    if (!z || !z->rc) return HYP_OK;
    *e = z->err;
    return z->rc;
}

static int64_t bind_dim(const exec_t *x, int64_t v) {
    return v == DIM_B ? x->B : v == DIM_T ? x->T : v == DIM_N ? (int64_t)x->B * x->T : v;
}

static void run_op(exec_t *x, const plan_op *o, float dloss) {
    float *I[HYP_OP_MAX_IN], *O[HYP_OP_MAX_OUT];
    for (int i = 0; i < o->nin; i++) I[i] = exec_buf(x, o->in[i]);
    for (int i = 0; i < o->nout; i++) O[i] = exec_buf(x, o->out[i]);
    exec_dims d = {(int)bind_dim(x, o->B), (int)bind_dim(x, o->T), (int)bind_dim(x, o->N),
                   (long)bind_dim(x, o->n) * (o->C ? o->C : 1)};
    double t0 = hyp_prof_t(); /* v2184: 0 outside the profiled window */
    (x->lowp && exec_op_is_lowp(x, o) ? x->lowp_fn : x->op_fn)[o->op](x, o, I, O, &d, dloss);
    if (t0 > 0) hyp_prof_op(x->p, o, x->B, x->T, t0);
}

/* Whether op o's outputs include the step's per-token losses (then the mean loss is readable). */
static int writes_losses(const plan_op *o) { return (hyp_op_get(o->op)->flags & HYP_OPF_WRITES_LOSSES) != 0; }

static float mean_loss(exec_t *x);

/* Points group g's param buffers at base (its gathered copy), or its grad buffers. */
static void z3_bind(exec_z3 *z, const plan_t *p, int g, int kind, float *base) {
    for (int b = 0; b < p->n_bufs; b++)
        if (z->L.buf_group[b] == g && p->bufs[b].kind == kind) z->ptr[b] = base + (p->bufs[b].offset - z->L.start[g]);
}

/* One pass of the ZeRO-3 schedule (core/zero3.h) on the cpu: nonblocking all-gathers of the
 * shards into the slots, the gradient workspace reduce-scattered and added into gshard. */
typedef struct {
    exec_t *x;
    const plan_op *ops;
    float dloss, *loss;
    int req[HYP_Z3_MAX_SLOTS];      /* each slot's pending gather */
} z3_pass;

static int z3_gather(void *ctx, int j, int g, int slot, hyp_err *e) {
    (void)j;
    z3_pass *c = ctx;
    exec_z3 *z = c->x->z3;
    return hyp_coll_iallgather_f32(z->coll, c->x->params + z->L.sb[g], z->slot[slot], (size_t)z->L.gs[g], &c->req[slot], e);
}

static int z3_acquire(void *ctx, int g, int slot, hyp_err *e) {
    z3_pass *c = ctx;
    exec_z3 *z = c->x->z3;
    int rc = c->req[slot] >= 0 ? hyp_coll_wait(z->coll, c->req[slot], e) : HYP_OK;
    if (!rc) z3_bind(z, c->x->p, g, BUF_PARAM, z->slot[slot]);
    return rc;
}

static int z3_grads_begin(void *ctx, int g, hyp_err *e) {
    (void)e;
    z3_pass *c = ctx;
    exec_t *x = c->x;
    memset(x->grads, 0, sizeof(float) * (size_t)(x->world * x->z3->L.gs[g]));
    z3_bind(x->z3, x->p, g, BUF_GRAD, x->grads);
    return HYP_OK;
}

static int z3_run_op(void *ctx, int i, hyp_err *e) {
    (void)e;
    z3_pass *c = ctx;
    run_op(c->x, &c->ops[i], c->dloss);
    if (c->loss && writes_losses(&c->ops[i])) *c->loss = mean_loss(c->x);
    return HYP_OK;
}

static int z3_reduce(void *ctx, int g, int slot, hyp_err *e) {
    (void)slot;
    z3_pass *c = ctx;
    exec_t *x = c->x;
    exec_z3 *z = x->z3;
    return hyp_coll_reduce_scatter_add_f32(z->coll, x->grads, x->gshard + z->L.sb[g], (size_t)z->L.gs[g], e);
}

static const hyp_z3_hooks Z3_CPU = {z3_gather, z3_acquire, z3_grads_begin, z3_run_op, NULL, z3_reduce};

/* Stage 2: group g's gradient buffers point into the zeroed one-group workspace (arena offsets
 * relative to the group's start), reduce-scattered after the group's backward into the flat
 * shard layout of stages 1-2 (the optimizer and checkpoints see the layout they always did). */
static int z2_grads_begin(void *ctx, int g, hyp_err *e) {
    (void)e;
    z3_pass *c = ctx;
    exec_t *x = c->x;
    memset(x->grads, 0, sizeof(float) * (size_t)x->zg->L.len[g]);
    z3_bind(x->zg, x->p, g, BUF_GRAD, x->grads);
    return HYP_OK;
}

static int z2_reduce(void *ctx, int g, int slot, hyp_err *e) {
    (void)slot;
    z3_pass *c = ctx;
    exec_t *x = c->x;
    exec_z3 *z = x->zg;
    return hyp_coll_reduce_scatter_range_add_f32(z->coll, x->grads, z->L.start[g], z->L.len[g], x->shard, x->gshard, e);
}

static const hyp_z3_hooks Z2_CPU = {NULL, NULL, z2_grads_begin, z3_run_op, NULL, z2_reduce};

/* Runs ops[0..n) segment by segment (the gathers skipped once the full weights are adopted); the
 * first collective failure is kept in z->rc / z->err and stops every later pass. */
static void z3_run(exec_t *x, const plan_op *ops, int n, const hyp_z3_seg *seg, int ns, int grads, float dloss, float *loss) {
    exec_z3 *z = x->z3;
    if (z->rc) return;
    z3_pass c = {x, ops, dloss, loss, {0}};
    for (int k = 0; k < HYP_Z3_MAX_SLOTS; k++) c.req[k] = -1;
    z->rc = hyp_z3_schedule(&z->L, seg, ns, n, grads, !z->full, &Z3_CPU, &c, &z->err);
}

void exec_forward(exec_t *x) {
    if (x->z3) z3_run(x, x->p->fwd, x->p->n_fwd, x->z3->L.fwd, x->z3->L.n_fwd, 0, 0, NULL);
    else
        for (int i = 0; i < x->p->n_fwd; i++) run_op(x, &x->p->fwd[i], 0);
}

int64_t exec_count_targets(const exec_t *x) {
    int64_t cnt = 0, n = (int64_t)x->B * x->T;
    for (int64_t i = 0; i < n; i++) cnt += x->targets[i] >= 0;
    return cnt;
}

static float mean_loss(exec_t *x) {
    return op_mean_loss(exec_buf(x, x->p->losses_buf), x->targets, (long)x->B * x->T);
}

float exec_eval_loss(exec_t *x) {
    exec_forward(x);
    run_op(x, &x->p->loss, 0);
    return mean_loss(x);
}

float exec_backward(exec_t *x, float dloss) {
    float loss = 0;
    if (x->zg) {
        exec_z3 *z = x->zg;
        if (z->rc) return 0;
        z3_pass c = {x, x->p->bwd, dloss, &loss, {0}};
        z->rc = hyp_z3_schedule(&z->L, z->L.bwd, z->L.n_bwd, x->p->n_bwd, 1, 0, &Z2_CPU, &c, &z->err);
        return loss;
    }
    if (x->z3) {
        z3_run(x, x->p->bwd, x->p->n_bwd, x->z3->L.bwd, x->z3->L.n_bwd, 1, dloss, &loss);
        return loss;
    }
    for (int i = 0; i < x->p->n_bwd; i++) {
        run_op(x, &x->p->bwd[i], dloss);
        if (writes_losses(&x->p->bwd[i])) loss = mean_loss(x);
    }
    return loss;
}

float exec_run_range(exec_t *x, const plan_op *ops, int from, int to, float dloss) {
    float loss = 0;
    for (int i = from; i < to; i++) {
        run_op(x, &ops[i], dloss);
        if (writes_losses(&ops[i])) loss = mean_loss(x);
    }
    return loss;
}

void exec_fp8_step(exec_t *x) {
    for (int i = 0; i < x->p->fp8_slots; i++) hyp_fp8_state_update(&x->fp8[i]);
}
