/* exec_dev.c — runs plan op lists on a device through the rendered kernels (see exec_dev.h). */
#include "exec_dev_int.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "op_registry.h"
#include "numerics.h"
#include "prof.h"
#include "prof_dev.h"

static void free_z3(exec_dev *x);

void exec_dev_free(exec_dev *x) {
    if (!x->dev) return;
    hyp_err e;
    hyp_device *d = x->dev;
    exec_dev_free_graphs(x); /* v2165: before the memory its replays use */
    exec_dev_moe_free(x);
    free_z3(x);
    if (x->zg) hyp_z3_layout_free(x->zg);
    free(x->zg);
    free(x->zg_ptr);
    d->mem_free(d, x->params, &e);
    d->mem_free(d, x->grads, &e);
    for (int k = 0; k < HYP_OPT_MAX_STATE; k++) d->mem_free(d, x->state[k], &e);
    d->mem_free(d, x->acts, &e);
    d->mem_free(d, x->tokens, &e);
    d->mem_free(d, x->targets, &e);
    d->mem_free(d, x->positions, &e);
    d->mem_free(d, x->ones, &e);
    d->mem_free(d, x->ones_bf16, &e);
    d->mem_free(d, x->wcopy, &e);
    d->mem_free(d, x->scratch, &e);
    d->mem_free(d, x->opt_work, &e);
    d->mem_free(d, x->seg_end, &e);
    d->mem_free(d, x->seg_wd, &e);
    d->mem_free(d, x->gshard, &e);
    d->mem_free(d, x->sh_seg_end, &e);
    d->mem_free(d, x->sh_seg_wd, &e);
    free(x->sh_h_wd);
    free(x->sh_group);
    d->mem_free(d, x->fp8_scale, &e);
    d->mem_free(d, x->fp8_scale_inv, &e);
    d->mem_free(d, x->fp8_amax, &e);
    for (int i = 0; x->fp8_q && x->fp8_qt && i < x->p->fp8_slots; i++) {
        d->mem_free(d, x->fp8_q[i], &e);
        d->mem_free(d, x->fp8_qt[i], &e);
    }
    d->mem_free(d, x->row_scale_buf, &e);
    d->mem_free(d, x->teacher_buf, &e);
    free(x->fp8_q);
    free(x->fp8_qt);
    free(x->fp8_slot_of);
    free(x->fp8);
    free(x->h_fp8);
    free(x->h_seg_wd);
    free(x->seg_group);
    for (int i = 0; i < x->n_files; i++) {
        if (x->files[i].mod) d->module_unload(d, x->files[i].mod);
        for (int j = 0; j < x->files[i].consts.n; j++) free(x->files[i].cnames[j]);
    }
    free(x->files);
    exec_dev_free_launches(x);
    free(x->fwd);
    free(x->bwd);
    exec_dev_batch_free(x);
    free(x->h_losses);
    memset(x, 0, sizeof *x);
}

/* The host states' scale and scale_inv to the device (synchronously: h_fp8 is reused). */
static int upload_scales(exec_dev *x, hyp_err *e) {
    size_t n = (size_t)x->p->fp8_slots;
    for (size_t i = 0; i < n; i++) x->h_fp8[i] = x->fp8[i].scale;
    int rc = x->dev->h2d_sync(x->dev, x->fp8_scale, x->h_fp8, sizeof(float) * n, e);
    for (size_t i = 0; i < n && !rc; i++) x->h_fp8[i] = x->fp8[i].scale_inv;
    return rc ? rc : x->dev->h2d_sync(x->dev, x->fp8_scale_inv, x->h_fp8, sizeof(float) * n, e);
}

int exec_dev_alloc(exec_dev *x, void **ptr, int64_t n, size_t elem, hyp_err *e) {
    size_t sz = (size_t)(n > 0 ? n : 1) * elem;
    int rc = x->dev->mem_alloc(x->dev, ptr, sz, e);
    if (rc) return rc;
    x->bytes += sz;
    return x->dev->memset_sync(x->dev, *ptr, 0, sz, e);
}

/* Plan fp8.gemm "fp8": every fp8_quantize op's slot gets fp8 byte buffers for its operand as
 * stored and transposed (sized at the plan's maximum shape), and its output buffer maps to it. */
static int init_fp8_gemm(exec_dev *x, hyp_err *e) {
    const plan_t *p = x->p;
    if (!p->fp8_gemm) return HYP_OK;
    x->fp8_gemm = 1;
    x->fp8_q = calloc((size_t)p->fp8_slots, sizeof(void *));
    x->fp8_qt = calloc((size_t)p->fp8_slots, sizeof(void *));
    x->fp8_slot_of = malloc(sizeof(int) * (size_t)p->n_bufs);
    if (!x->fp8_q || !x->fp8_qt || !x->fp8_slot_of) return hyp_fail(e, HYP_EFAIL, "out of memory");
    for (int i = 0; i < p->n_bufs; i++) x->fp8_slot_of[i] = -1;
    for (int pass = 0; pass < 2; pass++)
        for (int i = 0; i < (pass ? p->n_bwd : p->n_fwd); i++) {
            const plan_op *o = pass ? &p->bwd[i] : &p->fwd[i];
            if (!has_fp8_slot(o) || x->fp8_q[o->slot]) continue;
            int64_t n = (o->n == DIM_B ? p->B : o->n == DIM_T ? p->T : o->n == DIM_N ? (int64_t)p->B * p->T : o->n) *
                        (o->C ? o->C : 1);
            int rc = exec_dev_alloc(x, &x->fp8_q[o->slot], n, 1, e);
            if (rc || (rc = exec_dev_alloc(x, &x->fp8_qt[o->slot], n, 1, e))) return rc;
            x->fp8_slot_of[o->out[0]] = o->slot;
        }
    return HYP_OK;
}

/* v2160: the host scaling states (exec.c's recipe) and their device scale/scale_inv/amax. */
static int init_fp8(exec_dev *x, hyp_err *e) {
    const plan_t *p = x->p;
    int n = p->fp8_slots, rc;
    if (!n) return HYP_OK;
    x->fp8 = calloc((size_t)n, sizeof *x->fp8);
    x->h_fp8 = calloc((size_t)n, sizeof *x->h_fp8);
    if (!x->fp8 || !x->h_fp8) return hyp_fail(e, HYP_EFAIL, "out of memory");
    hyp_fp8_recipe r = hyp_fp8_recipe_default();
    r.scaling = p->fp8_current ? HYP_FP8_CURRENT : HYP_FP8_DELAYED;
    r.history_len = p->fp8_history;
    r.margin = (float)p->fp8_margin;
    for (int i = 0; i < n; i++) {
        rc = p->fp8_e4m3_only ? hyp_fp8_state_init(&x->fp8[i], HYP_FP8_E4M3, &r, e)
                              : hyp_fp8_state_init_role(&x->fp8[i], (hyp_fp8_role)p->fp8_roles[i], &r, e);
        if (rc) return rc;
    }
    if ((rc = exec_dev_alloc(x, (void **)&x->fp8_scale, n, 4, e)) || (rc = exec_dev_alloc(x, (void **)&x->fp8_scale_inv, n, 4, e)) ||
        (rc = exec_dev_alloc(x, (void **)&x->fp8_amax, n, 4, e)) || (rc = init_fp8_gemm(x, e)))
        return rc;
    return upload_scales(x, e);
}

static int prepare_shard(exec_dev *x, hyp_err *e);

/* Stage 3: the shards, (prefetch + 1) working slots and the one-group gradient workspace of the
 * host layout lay (bytes by role measured from the allocations), the buffer pointer table, the
 * communication stream and its events. */
static int alloc_z3(exec_dev *x, const hyp_z3_layout *lay, hyp_err *e) {
    hyp_device *d = x->dev;
    exec_dev_z3 *z = x->z3 = calloc(1, sizeof *x->z3);
    if (!z || !(z->ptr = calloc((size_t)x->p->n_bufs, sizeof(void *)))) return hyp_fail(e, HYP_EFAIL, "out of memory");
    z->lay = lay;
    size_t b0 = x->bytes;
    int rc = exec_dev_alloc(x, (void **)&x->params, x->shard, 4, e);
    for (int s = 0; s < lay->n_slots && !rc; s++) rc = exec_dev_alloc(x, (void **)&z->slot[s], lay->slot_cap, 4, e);
    size_t b1 = x->bytes;
    if (!rc) rc = exec_dev_alloc(x, (void **)&x->grads, lay->slot_cap, 4, e);
    size_t b2 = x->bytes;
    if (!rc) rc = exec_dev_alloc(x, (void **)&x->gshard, x->shard, 4, e);
    x->bytes_params = b1 - b0, x->bytes_grad_workspace = b2 - b1, x->bytes_grads = x->bytes - b2;
    if (!rc) rc = d->stream_create(d, &z->comm, e);
    for (int s = 0; s < lay->n_slots && !rc; s++)
        if (!(rc = d->event_create(d, &z->ready[s], e))) rc = d->event_create(d, &z->freed[s], e);
    if (!rc) rc = d->event_create(d, &z->start, e);
    if (!rc) rc = d->event_create(d, &z->gdone, e);
    if (!rc) rc = d->event_create(d, &z->wsfree, e);
    if (!rc) rc = d->event_create(d, &z->done, e);
    return rc;
}

static void free_z3(exec_dev *x) {
    exec_dev_z3 *z = x->z3;
    if (!z) return;
    hyp_device *d = x->dev;
    hyp_err e;
    hyp_event *ev[] = {z->start, z->gdone, z->wsfree, z->done};
    for (int i = 0; i < 4; i++)
        if (ev[i]) d->event_destroy(d, ev[i]);
    for (int s = 0; s < HYP_Z3_MAX_SLOTS; s++) {
        if (z->ready[s]) d->event_destroy(d, z->ready[s]);
        if (z->freed[s]) d->event_destroy(d, z->freed[s]);
        if (z->slot[s]) d->mem_free(d, z->slot[s], &e);
    }
    if (z->comm) d->stream_destroy(d, z->comm);
    free(z->ptr);
    free(z);
    x->z3 = NULL;
}

/* The optimizer's states (the plan's optimizer.state, fp32), n floats each, or a packed state's
 * own state_floats (stage 0 only: exec.c refuses packed states under ZeRO); their bytes. */
static int alloc_states(exec_dev *x, int64_t n, hyp_err *e) {
    const hyp_optim_cfg *o = &x->p->optim;
    if (!o->kind[0]) return hyp_fail(e, HYP_EINPUT, "exec_dev: the plan has no optimizer section — regenerate it with gen");
    x->n_state = o->n_state;
    int rc = HYP_OK;
    for (int k = 0; k < o->n_state && !rc; k++) {
        if (o->state_dtype[k] != HYP_DT_F32)
            return hyp_fail(e, HYP_EINPUT, "exec_dev: optimizer state '%s' is %s; the device executor keeps fp32 states — regenerate with f32 optimizer states",
                            o->state_name[k], hyp_dtype_name(o->state_dtype[k]));
        int64_t nk = o->state_compact[k] ? o->state_floats[k] : n;
        rc = exec_dev_alloc(x, (void **)&x->state[k], nk > 0 ? nk : 1, 4, e);
        x->bytes_optim += 4 * (size_t)nk;
    }
    return rc;
}

/* Stage 2: ZeRO-3's layer groups and backward segments for the gradient schedule; the workspace's
 * floats (the largest group), or 0 when the plan cannot be cut into groups (not an error). */
static int64_t init_zg(exec_dev *x) {
    hyp_err ignore;
    if (!(x->zg = calloc(1, sizeof *x->zg)) || hyp_z3_layout_init(x->zg, x->p, x->world, x->rank, &ignore) ||
        !(x->zg_ptr = calloc((size_t)x->p->n_bufs, sizeof(void *)))) {
        if (x->zg) hyp_z3_layout_free(x->zg);
        free(x->zg), free(x->zg_ptr);
        x->zg = NULL, x->zg_ptr = NULL;
        return 0;
    }
    int64_t ws = 0;
    for (int g = 0; g < x->zg->n_groups; g++)
        if (x->zg->len[g] > ws) ws = x->zg->len[g];
    return ws;
}

/* The arenas: exec.c's data-parallel layout (the arena padded to world equal shards of 16-float
 * multiples), or at stage 3 (lay) the layout of the host mirror. */
static int alloc_arenas(exec_dev *x, const hyp_z3_layout *lay, hyp_err *e) {
    const plan_t *p = x->p;
    int64_t maxN = (int64_t)p->B * p->T;
    x->shard = lay ? lay->shard : ((p->param_floats + x->world - 1) / x->world + 15) / 16 * 16;
    x->arena = x->shard * x->world;
    int64_t optim = x->stage >= 1 ? x->shard : x->arena, ws = !lay && x->stage == 2 ? init_zg(x) : 0;
    int rc = lay ? alloc_z3(x, lay, e) : HYP_OK;
    if (rc || (!lay && ((rc = exec_dev_alloc(x, (void **)&x->params, x->arena, 4, e)) ||
                        (!x->fwd_only && (rc = exec_dev_alloc(x, (void **)&x->grads, ws ? ws : x->arena, 4, e))) ||
                        (x->stage >= 2 && (rc = exec_dev_alloc(x, (void **)&x->gshard, x->shard, 4, e))))) ||
        (!x->fwd_only && (rc = alloc_states(x, optim, e))) || (rc = exec_dev_alloc(x, &x->acts, p->act_bytes, 1, e)) || (rc = exec_dev_alloc(x, (void **)&x->tokens, maxN, 4, e)) ||
        (rc = exec_dev_alloc(x, (void **)&x->targets, maxN, 4, e)) || (rc = exec_dev_alloc(x, (void **)&x->ones, maxN, 4, e)) ||
        (p->positions_buf >= 0 && (rc = exec_dev_alloc(x, (void **)&x->positions, maxN, 4, e))) ||
        (x->act_bf16 && !x->fwd_only && (rc = exec_dev_alloc(x, (void **)&x->ones_bf16, maxN, 2, e))))
        return rc;
    size_t wcopy = 0;
    if (x->act_bf16) { /* the bf16 weight copy (v2102): the whole arena, every rank (stages 0-2) */
        if ((rc = exec_dev_alloc(x, (void **)&x->wcopy, x->arena, 2, e))) return rc;
        wcopy = 2 * (size_t)x->arena;
    }
    if (!lay) {
        x->bytes_params = 4 * (size_t)x->arena + wcopy;
        x->bytes_grads = x->fwd_only ? 0 : 4 * (size_t)(x->stage >= 2 ? x->shard : x->arena);
        x->bytes_grad_workspace = x->stage >= 2 ? 4 * (size_t)(ws ? ws : x->arena) : 0;
    }
    x->bytes_acts = (size_t)(p->act_bytes > 0 ? p->act_bytes : 1);
    return HYP_OK;
}

/* v2166 GEMM epilogues the plan marks (plan.c checked where the folded ops are): a gelu-marked
 * matmul_fwd does the gelu_fwd after it (GELU_AUX(_BIAS): D the GELU's output, aux the
 * pre-activation, which the backward reads); a dgelu-marked matmul_bwd does the gelu_bwd two ops
 * on: its input-gradient GEMM with the DGELU epilogue writes dP (beta 0: the zero of dP between
 * them is skipped, as are the zeros of dA, which is never formed). The plan's memory layout has
 * the folded ops' outputs live from the GEMM on (plan.lua lifetimes), so they alias no input.
 * Not with FP8 GEMMs (the bias would follow the epilogue) — gen marks none there. */
static int fp8_slot(const exec_dev *x, int buf);
static int bind_epilogues(exec_dev *x, hyp_err *e) {
    for (int pass = 0; pass < 2; pass++) {
        const plan_op *list = pass ? x->p->bwd : x->p->fwd;
        exec_dev_op *eo = pass ? x->bwd : x->fwd;
        int n = pass ? (x->fwd_only ? 0 : x->p->n_bwd) : x->p->n_fwd;
        for (int i = 0; i < n; i++) {
            const plan_op *o = &list[i];
            if (!o->epi) continue;
            if (eo[i].how != EXD_GEMM || fp8_slot(x, o->in[0]) >= 0)
                return hyp_fail(e, HYP_EINPUT, "plan: a GEMM epilogue on a %s that does not run as a plain device GEMM (fp8, fused site) — regenerate the trainer with gen",
                                hyp_op_name(o->op));
            if (o->epi == PLAN_EPI_SWIGLU && x->gemm_file < 0)
                return hyp_fail(e, HYP_EINPUT, "kernels.json: a GEMM+SwiGLU site but no gemm.cu (v2119 renders it) — regenerate the trainer with gen");
            if (o->epi == PLAN_EPI_GELU || o->epi == PLAN_EPI_SWIGLU) {
                eo[i + 1].how = EXD_SKIP;
                continue;
            }
            eo[i + 1].how = eo[i + 2].how = EXD_SKIP;
            for (int j = 0; j < n; j++)
                if (list[j].nout && list[j].out[0] == o->out[0] && hyp_op_get(list[j].op)->device == HYP_OPDEV_ZERO) eo[j].how = EXD_SKIP;
        }
    }
    return HYP_OK;
}

/* Stage 3: a fusion site does its first op's work at the second op, in the second's segment —
 * the first must use no parameters of another group. */
static int z3_check_fusions(const exec_dev *x, hyp_err *e) {
    const hyp_z3_layout *L = x->z3->lay;
    for (int pass = 0; pass < 2; pass++) {
        const exec_dev_op *eo = pass ? x->bwd : x->fwd;
        const hyp_z3_seg *seg = pass ? L->bwd : L->fwd;
        int n = pass ? x->p->n_bwd : x->p->n_fwd, ns = pass ? L->n_bwd : L->n_fwd;
        for (int i = 0, s = 0; i < n; i++) {
            while (s + 1 < ns && seg[s + 1].start <= i) s++;
            const plan_op *a = eo[i].pair;
            for (int k = 0; a && k < a->nin + a->nout; k++) {
                int b = k < a->nin ? a->in[k] : a->out[k - a->nin], g = b >= 0 ? L->buf_group[b] : -1;
                if (g >= 0 && g != seg[s].group)
                    return hyp_fail(e, HYP_EINPUT, "kernels.json: a fusion site joins ops of two ZeRO-3 layer groups (%s) — regenerate with zero2, or without that fusion",
                                    hyp_op_name(a->op));
            }
        }
    }
    return HYP_OK;
}

/* Stage 2 (zg): a backward fusion site does its first op's gradient writes at the second op, in
 * the second's segment — after the first's group may have been reduced. When a site joins
 * gradients of two groups, the gradient schedule is dropped: a full-arena workspace instead,
 * reduce-scattered after backward (memory as before, the same numbers). */
static int zg_check_fusions(exec_dev *x, hyp_err *e) {
    const hyp_z3_layout *L = x->zg;
    for (int i = 0, s = 0; i < x->p->n_bwd; i++) {
        while (s + 1 < L->n_bwd && L->bwd[s + 1].start <= i) s++;
        const plan_op *a = x->bwd[i].pair;
        for (int k = 0; a && k < a->nin + a->nout; k++) {
            int b = k < a->nin ? a->in[k] : a->out[k - a->nin], g = b >= 0 && x->p->bufs[b].kind == BUF_GRAD ? L->buf_group[b] : -1;
            if (g < 0 || g == L->bwd[s].group) continue;
            hyp_err ignore;
            x->dev->mem_free(x->dev, x->grads, &ignore);
            x->grads = NULL;
            x->bytes -= x->bytes_grad_workspace;
            hyp_z3_layout_free(x->zg);
            free(x->zg), free(x->zg_ptr);
            x->zg = NULL, x->zg_ptr = NULL;
            int rc = exec_dev_alloc(x, (void **)&x->grads, x->arena, 4, e);
            x->bytes_grad_workspace = 4 * (size_t)x->arena;
            return rc;
        }
    }
    return HYP_OK;
}

static int init_any(exec_dev *x, const plan_t *p, const char *kernels_dir, hyp_device *dev, int world, int rank,
                    int stage, const hyp_z3_layout *lay, int fwd_only, hyp_err *e) {
    memset(x, 0, sizeof *x);
    x->fwd_only = fwd_only;
    if (world < 1 || rank < 0 || rank >= world || stage < 0 || stage > 3)
        return hyp_fail(e, HYP_EINPUT, "exec_dev: rank %d of %d ranks, ZeRO stage %d — need 0 <= rank < world, stage 0..3", rank, world, stage);
    if (stage == 3 && !lay)
        return hyp_fail(e, HYP_EINPUT, "exec_dev: ZeRO stage 3 takes its layout from core/zero3.h — use exec_dev_init_z3");
    int act_bf16 = 0;
    for (int b = 0; b < p->n_bufs; b++) { /* v2102 storage bf16: activations in bf16, the rest f32 */
        const plan_buf *pb = &p->bufs[b];
        if (pb->kind == BUF_ACT && pb->dtype == HYP_DT_BF16) act_bf16 = 1;
        else if ((pb->kind == BUF_ACT || pb->kind == BUF_PARAM || pb->kind == BUF_GRAD) && pb->dtype != HYP_DT_F32)
            return hyp_fail(e, HYP_EINPUT, "exec_dev: buffer '%s' is stored in %s; the device executor holds f32 parameters and gradients and f32 or bf16 activations — regenerate the trainer with gen for a device target",
                            pb->name, hyp_dtype_name(pb->dtype));
    }
    if (act_bf16 && (stage == 3 || p->fp8_gemm))
        return hyp_fail(e, HYP_EINPUT, "exec_dev: bf16 activations (v2102 storage bf16) %s on a device — use --set v2102.storage=fp32, or %s",
                        stage == 3 ? "with ZeRO stage 3 are not supported" : "with FP8 GEMMs are not supported", stage == 3 ? "zero2" : "drop fp8");
    x->p = p;
    x->dev = dev;
    x->opt_file = -1;
    x->cast_file = -1;
    x->gemm_file = -1;
    x->act_bf16 = act_bf16;
    x->wstale = 1;
    x->B = p->B;
    x->T = p->T;
    int64_t maxN = (int64_t)p->B * p->T;
    x->world = world, x->rank = rank, x->stage = stage;
    int rc = alloc_arenas(x, stage == 3 ? lay : NULL, e);
    if (rc) {
        exec_dev_free(x);
        return rc;
    }
    rc = exec_dev_batch_alloc(x, maxN, p->positions_buf >= 0, e);
    if (rc) {
        exec_dev_free(x);
        return rc;
    }
    x->h_losses = calloc((size_t)maxN, sizeof(float));
    x->fwd = calloc((size_t)p->n_fwd + 1, sizeof *x->fwd);
    x->bwd = calloc((size_t)p->n_bwd + 1, sizeof *x->bwd);
    if (!x->h_tokens || !x->h_targets || (p->positions_buf >= 0 && !x->h_positions) || !x->h_losses || !x->fwd || !x->bwd) {
        exec_dev_free(x);
        return hyp_fail(e, HYP_EFAIL, "out of memory");
    }
    {
        float *one = malloc(sizeof(float) * (size_t)maxN);
        if (!one) {
            exec_dev_free(x);
            return hyp_fail(e, HYP_EFAIL, "out of memory");
        }
        for (int64_t i = 0; i < maxN; i++) one[i] = 1.0f;
        rc = dev->h2d_sync(dev, x->ones, one, sizeof(float) * (size_t)maxN, e);
        if (!rc && x->ones_bf16) {
            uint16_t *h = (uint16_t *)(void *)one; /* bf16 1.0 is 0x3F80 (exact) */
            for (int64_t i = 0; i < maxN; i++) h[i] = 0x3F80u;
            rc = dev->h2d_sync(dev, x->ones_bf16, h, 2 * (size_t)maxN, e);
        }
        free(one);
        if (rc) {
            exec_dev_free(x);
            return rc;
        }
    }
    if ((rc = init_fp8(x, e))) {
        exec_dev_free(x);
        return rc;
    }
    /* the manifest */
    char path[4096];
    snprintf(path, sizeof path, "%s/kernels.json", kernels_dir);
    FILE *f = fopen(path, "rb");
    if (!f) {
        exec_dev_free(x);
        return hyp_fail(e, HYP_EINPUT, "%s: cannot open — generate the trainer with gen --target sim (or sm_XX)", path);
    }
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *text = malloc((size_t)len + 1);
    size_t got = text ? fread(text, 1, (size_t)len, f) : 0;
    fclose(f);
    if (!text || got != (size_t)len) {
        free(text);
        exec_dev_free(x);
        return hyp_fail(e, HYP_EINPUT, "%s: cannot read", path);
    }
    text[len] = 0;
    cJSON *man = cJSON_Parse(text);
    free(text);
    if (!man) {
        exec_dev_free(x);
        return hyp_fail(e, HYP_EINPUT, "%s: not valid JSON — regenerate with gen", path);
    }
    const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(man, "format");
    const cJSON *files = cJSON_GetObjectItemCaseSensitive(man, "files");
    if (!cJSON_IsString(fmt) || strcmp(fmt->valuestring, "hyperion-kernels") || !cJSON_IsArray(files)) {
        cJSON_Delete(man);
        exec_dev_free(x);
        return hyp_fail(e, HYP_EINPUT, "%s: not a hyperion kernel manifest — regenerate with gen", path);
    }
    int nf = cJSON_GetArraySize(files);
    x->files = calloc((size_t)nf + 1, sizeof *x->files);
    if (!x->files) {
        cJSON_Delete(man);
        exec_dev_free(x);
        return hyp_fail(e, HYP_EFAIL, "out of memory");
    }
    const cJSON *fe;
    cJSON_ArrayForEach(fe, files) {
        exec_dev_file *F = &x->files[x->n_files++];
        const cJSON *fn = cJSON_GetObjectItemCaseSensitive(fe, "file");
        if (!cJSON_IsString(fn)) {
            rc = hyp_fail(e, HYP_EINPUT, "%s: a file entry has no name", path);
            goto fail;
        }
        snprintf(F->name, sizeof F->name, "%s", fn->valuestring);
        const cJSON *c;
        cJSON_ArrayForEach(c, cJSON_GetObjectItemCaseSensitive(fe, "constants")) {
            if (F->consts.n >= ENV_MAX) break;
            double v;
            if (cJSON_IsNumber(c)) v = c->valuedouble;
            else if (cJSON_IsBool(c)) v = cJSON_IsTrue(c) ? 1 : 0;
            else continue; /* render-time strings */
            F->cnames[F->consts.n] = exec_dev_strdup(c->string);
            dev_env_set(&F->consts, F->cnames[F->consts.n], v);
        }
        /* a GPU loads the compiled cubin the manifest names; sim the rendered source */
        const cJSON *cubin = cJSON_GetObjectItemCaseSensitive(fe, "cubin");
        int gpu = !strcmp(dev->name, "cuda");
        if (gpu && !cJSON_IsString(cubin)) {
            rc = hyp_fail(e, HYP_EINPUT,
                          "%s: %s has no cubin — generate the trainer with --target sm_XX (without --no-compile) to run it on a GPU",
                          path, F->name);
            goto fail;
        }
        char mpath[4200];
        snprintf(mpath, sizeof mpath, "%s/%s", kernels_dir, gpu ? cubin->valuestring : F->name);
        if ((rc = dev->module_load(dev, mpath, &F->mod, e))) goto fail;
    }
    if (x->act_bf16) {
        for (int i = 0; i < x->n_files && x->cast_file < 0; i++)
            if (!strcmp(x->files[i].name, "cast.cu")) x->cast_file = i;
        if (x->cast_file < 0) {
            rc = hyp_fail(e, HYP_EINPUT, "%s: bf16 activations need cast.cu (cast_f32_bf16, the weight copy) — regenerate the trainer with gen", path);
            goto fail;
        }
    }
    for (int i = 0; i < x->n_files; i++)
        if (!strcmp(x->files[i].name, "gemm.cu")) x->gemm_file = i; /* v2119 (gen renders it for the gelu-marked GEMMs) */
    if (!fwd_only && ((rc = exec_dev_bind_optimizer(x, man, e)) || (rc = prepare_shard(x, e)))) goto fail;
    scratch_t sc[64];
    int nsc = 0;
    for (int i = 0; i < p->n_fwd; i++)
        if ((rc = exec_dev_bind_op(x, man, &p->fwd[i], &x->fwd[i], sc, &nsc, e))) goto fail;
    if (!fwd_only && (rc = exec_dev_bind_op(x, man, &p->loss, &x->loss, sc, &nsc, e))) goto fail;
    for (int i = 0; i < p->n_bwd && !fwd_only; i++)
        if ((rc = exec_dev_bind_op(x, man, &p->bwd[i], &x->bwd[i], sc, &nsc, e))) goto fail;
    if ((rc = exec_dev_bind_fusions(x, man, sc, &nsc, e)) || (rc = bind_epilogues(x, e)) ||
        (x->z3 && (rc = z3_check_fusions(x, e))) ||
        (x->zg && (rc = zg_check_fusions(x, e))) || (!fwd_only && (rc = exec_dev_bind_loss_ext(x, man, sc, &nsc, e))))
        goto fail;
    cJSON_Delete(man);
    man = NULL;
    int64_t off = 0;
    for (int s = 0; s < nsc; s++) {
        sc[s].off = off;
        off += (sc[s].n + 63) / 64 * 64;
    }
    x->n_scratch = off;
    for (int i = 0; i < x->n_launches; i++)
        for (int j = 0; j < x->launches[i].nargs; j++)
            if (x->launches[i].bind[j] == AB_SCRATCH) x->launches[i].soff[j] = sc[x->launches[i].bidx[j]].off;
    if ((rc = exec_dev_alloc(x, (void **)&x->scratch, off, 4, e))) goto fail;
    return HYP_OK;
fail:
    cJSON_Delete(man);
    exec_dev_free(x);
    return rc;
}

int exec_dev_bind(exec_dev *x, int B, int T, hyp_err *e) {
    if (B < 1 || B > x->p->B)
        return hyp_fail(e, HYP_EINPUT, "--batch %d: this trainer was planned for batch <= %d — use a smaller --batch or regenerate with gen --batch %d", B, x->p->B, B);
    if (T < 1 || T > x->p->T)
        return hyp_fail(e, HYP_EINPUT, "--seq %d: this trainer was planned for sequences <= %d — use a smaller --seq or regenerate with gen --seq %d", T, x->p->T, T);
    x->B = B;
    x->T = T;
    if (x->h_positions) /* one document per row until the caller says otherwise */
        for (long n = 0; n < (long)B * T; n++) x->h_positions[n] = (int32_t)(n % T);
    return HYP_OK;
}

/* Stage 3 holds no whole arena: the shard arrays are copied by their pointers (train/backend_dev.c). */
static int no_arena(const char *what, hyp_err *e) {
    return hyp_fail(e, HYP_EINPUT, "exec_dev: %s at ZeRO stage 3 — the device holds [shard] arrays in the group layout; copy x->params / x->gshard (x->shard floats)", what);
}

int exec_dev_upload_params(exec_dev *x, const float *host, hyp_err *e) {
    if (x->z3) return no_arena("upload_params", e);
    x->wstale = 1;
    return x->dev->h2d_sync(x->dev, x->params, host, sizeof(float) * (size_t)x->p->param_floats, e);
}
int exec_dev_download_params(exec_dev *x, float *host, hyp_err *e) {
    if (x->z3) return no_arena("download_params", e);
    return x->dev->d2h_sync(x->dev, host, x->params, sizeof(float) * (size_t)x->p->param_floats, e);
}
int exec_dev_download_grads(exec_dev *x, float *host, hyp_err *e) {
    if (x->z3) return no_arena("download_grads", e);
    if (x->zg) return hyp_fail(e, HYP_EINPUT, "exec_dev: download_grads at ZeRO stage 2 — the device holds the reduced [shard] (x->gshard), no gradient arena");
    return x->dev->d2h_sync(x->dev, host, x->grads, sizeof(float) * (size_t)x->p->param_floats, e);
}
int exec_dev_zero_grads(exec_dev *x, hyp_err *e) {
    if (x->z3 || x->zg) return x->dev->memset(x->dev, x->gshard, 0, sizeof(float) * (size_t)x->shard, NULL, e);
    return x->dev->memset(x->dev, x->grads, 0, sizeof(float) * (size_t)x->p->param_floats, NULL, e);
}

static void *dbuf(exec_dev *x, int idx) {
    if (idx < 0) return NULL;
    const plan_buf *b = &x->p->bufs[idx];
    if (x->z3 && x->z3->lay->buf_group[idx] >= 0) return x->z3->ptr[idx]; /* bound by z3_bind */
    if (x->zg && b->kind == BUF_GRAD && x->zg->buf_group[idx] >= 0) return x->zg_ptr[idx]; /* bound by zg_grads_begin */
    switch (b->kind) {
    case BUF_PARAM: return x->params + b->offset;
    case BUF_GRAD: return x->grads + b->offset;
    case BUF_ACT: return (char *)x->acts + b->offset_bytes;
    case BUF_TOKENS: return idx == x->p->targets_buf ? x->targets : idx == x->p->positions_buf ? x->positions : x->tokens;
    default: return NULL;
    }
}

void *exec_dev_buf(exec_dev *x, int idx) { return idx < x->p->n_bufs ? dbuf(x, idx) : NULL; }

int exec_dev_download_buf(exec_dev *x, int idx, float *host, int64_t n, hyp_err *e) {
    if (x->z3 && idx >= 0 && x->z3->lay->buf_group[idx] >= 0) return no_arena("download of a parameter/gradient buffer", e);
    void *d = dbuf(x, idx);
    if (!d) return hyp_fail(e, HYP_EINPUT, "buffer %d is not a float buffer", idx);
    if (x->p->bufs[idx].dtype != HYP_DT_BF16) return x->dev->d2h_sync(x->dev, host, d, sizeof(float) * (size_t)n, e);
    /* bf16: the n values into the upper half of host's bytes, then widened in place, front first */
    uint16_t *h16 = (uint16_t *)(void *)(host + n) - n;
    int rc = x->dev->d2h_sync(x->dev, h16, d, 2 * (size_t)n, e);
    for (int64_t i = 0; i < n && !rc; i++) host[i] = hyp_bf16_to_f32(h16[i]);
    return rc;
}

/* The fields every GEMM of this executor sets: D = alpha op(A) op(B) + beta D (C is D), fp32 out. */
static void gemm_desc(hyp_gemm *g, int transa, int transb, int64_t m, int64_t n, int64_t k, const void *a, int64_t lda,
                      const void *b, int64_t ldb, float beta, void *d, int64_t ldd) {
    memset(g, 0, sizeof *g);
    g->transa = transa;
    g->transb = transb;
    g->m = m;
    g->n = n;
    g->k = k;
    g->dtype = HYP_DT_F32;
    g->alpha = 1.0f;
    g->beta = beta;
    g->a = a;
    g->lda = lda;
    g->b = b;
    g->ldb = ldb;
    g->c = beta != 0 ? d : NULL;
    g->ldc = ldd;
    g->d = d;
    g->ldd = ldd;
}

/* A GEMM with inputs of type in (f32, or bf16 with fp32 compute) and an output of type out (C is D). */
static int gemm_t(exec_dev *x, hyp_dtype in, hyp_dtype out, int transa, int transb, int64_t m, int64_t n, int64_t k,
                  const void *a, int64_t lda, const void *b, int64_t ldb, float beta, void *d, int64_t ldd, hyp_epilogue ep,
                  void *bias, hyp_err *e) {
    hyp_gemm g;
    gemm_desc(&g, transa, transb, m, n, k, a, lda, b, ldb, beta, d, ldd);
    g.atype = g.btype = in;
    g.dtype = out;
    g.compute = HYP_GEMM_F32;
    g.epilogue = ep;
    g.bias = bias;
    return x->dev->gemm(x->dev, &g, NULL, e);
}

static int gemm(exec_dev *x, int transa, int transb, int64_t m, int64_t n, int64_t k, const void *a, int64_t lda,
                const void *b, int64_t ldb, float beta, void *d, int64_t ldd, hyp_epilogue ep, void *bias, hyp_err *e) {
    return gemm_t(x, HYP_DT_F32, HYP_DT_F32, transa, transb, m, n, k, a, lda, b, ldb, beta, d, ldd, ep, bias, e);
}

/* v2102 storage bf16: the bf16 weight copy of the whole parameter arena, cast from the fp32
 * masters by cast.cu's cast_f32_bf16 (round to nearest even) when the parameters changed. */
static int refresh_wcopy(exec_dev *x, hyp_err *e) {
    if (!x->wcopy || !x->wstale) return HYP_OK;
    const exec_dev_file *F = &x->files[x->cast_file];
    int block = 256;
    for (int j = 0; j < F->consts.n; j++)
        if (!strcmp(F->consts.name[j], "BLOCK")) block = (int)F->consts.val[j];
    hyp_kargs a;
    memset(&a, 0, sizeof a);
    hyp_kargs_ptr(&a, x->wcopy);
    hyp_kargs_ptr(&a, x->params);
    hyp_kargs_i64(&a, x->arena);
    int64_t grid = (x->arena + 4 * block - 1) / (4 * block); /* the kernel's grid: cdiv(n, 4*BLOCK) */
    int rc = x->dev->launch(x->dev, F->mod, "cast_f32_bf16", HYP_DIM3((unsigned)grid, 1, 1), HYP_DIM3((unsigned)block, 1, 1),
                            0, &a, NULL, e);
    if (!rc) x->wstale = 0;
    return rc;
}

void exec_dev_params_changed(exec_dev *x) { x->wstale = 1; }

static hyp_dtype dt_of(const exec_dev *x, int idx) { return x->p->bufs[idx].dtype; }

/* A GEMM operand: a bf16 view of parameter buffer idx (its slice of the weight copy) when the
 * GEMM runs on bf16 inputs, else the buffer itself. */
static const void *operand(exec_dev *x, int idx, int bf16) {
    const plan_buf *b = &x->p->bufs[idx];
    if (bf16 && b->kind == BUF_PARAM) return x->wcopy + b->offset;
    return dbuf(x, idx);
}

/* The slot whose fake-quantized copy buffer buf is, when the plan's GEMMs run in fp8; else -1. */
static int fp8_slot(const exec_dev *x, int buf) { return x->fp8_gemm && buf >= 0 ? x->fp8_slot_of[buf] : -1; }

static hyp_dtype fp8_dtype(const exec_dev *x, int slot) {
    return x->fp8[slot].fmt == HYP_FP8_E5M2 ? HYP_DT_E5M2 : HYP_DT_E4M3;
}

/* D (m x n, fp32, ldd m) = beta D + (scale_inv[sa] A)^T (scale_inv[sb] B): the TN fp8 GEMM of
 * cuBLASLt, A stored k x m (fp8 bytes of slot sa), B stored k x n (of slot sb). */
static int gemm8(exec_dev *x, int64_t m, int64_t n, int64_t k, int sa, const void *a, int sb, const void *b, float beta,
                 void *d, hyp_err *e) {
    hyp_gemm g;
    gemm_desc(&g, 1, 0, m, n, k, a, k, b, k, beta, d, m);
    g.atype = fp8_dtype(x, sa);
    g.btype = fp8_dtype(x, sb);
    g.a_scale = x->fp8_scale_inv + sa;
    g.b_scale = x->fp8_scale_inv + sb;
    return x->dev->gemm(x->dev, &g, NULL, e);
}

/* The layer GEMMs (matmul_fwd, the dinp and dW GEMMs of matmul_bwd) on fp32 operands: TF32 when the
 * plan says train.tf32 (v2100), else IEEE fp32. Bias gradients and exact adds stay IEEE. */
static int gemm_layer(exec_dev *x, int transa, int transb, int64_t m, int64_t n, int64_t k, const void *a, int64_t lda,
                      const void *b, int64_t ldb, float beta, void *d, int64_t ldd, hyp_epilogue ep, void *bias, hyp_err *e) {
    hyp_gemm g;
    gemm_desc(&g, transa, transb, m, n, k, a, lda, b, ldb, beta, d, ldd);
    g.atype = g.btype = HYP_DT_F32;
    g.compute = x->p->tf32 ? HYP_GEMM_TF32 : HYP_GEMM_F32;
    g.epilogue = ep;
    g.bias = bias;
    return x->dev->gemm(x->dev, &g, NULL, e);
}

/* matmul_fwd: y[N][OC] = x[N][IC] W[OC][IC]^T + b; in fp8 when both inputs are fp8 slots and IC
 * is a multiple of 16 (the bias then added by an fp32 rank-1 GEMM: b 1^T, accumulated). */
/* A GEMM with a v2166 epilogue that has an aux matrix (GELU_AUX(_BIAS), DGELU): inputs of type
 * in (f32: TF32 under train.tf32, as gemm_layer; bf16: fp32 compute), D and aux of type out. */
static int gemm_aux(exec_dev *x, hyp_dtype in, hyp_dtype out, int transa, int64_t m, int64_t n, int64_t k, const void *a,
                    int64_t lda, const void *b, int64_t ldb, void *d, hyp_epilogue ep, void *bias, void *aux, hyp_err *e) {
    hyp_gemm g;
    gemm_desc(&g, transa, 0, m, n, k, a, lda, b, ldb, 0.0f, d, m);
    g.atype = g.btype = in;
    g.dtype = out;
    g.compute = in == HYP_DT_F32 && x->p->tf32 ? HYP_GEMM_TF32 : HYP_GEMM_F32;
    g.epilogue = ep;
    g.bias = bias;
    g.aux = aux;
    g.ldaux = m;
    return x->dev->gemm(x->dev, &g, NULL, e);
}

/* A constant of a rendered module (its consts), or def. */
static double file_const(const exec_dev_file *F, const char *name, double def) {
    for (int j = 0; j < F->consts.n; j++)
        if (!strcmp(F->consts.name[j], name)) return F->consts.val[j];
    return def;
}

/* v2119: one launch of gemm.cu's gemm_bf16 (its TILE_M/TILE_N/BLOCK/SMEM from kernels.json) for
 * the GEMM op o: D and aux as the rendered epilogue defines them, A = x, B = the weight copy, an
 * optional bias; no prologue (rstd, gain NULL). */
static int gemm_template_launch(exec_dev *x, void *d, void *aux, const plan_op *o, const void *bias, int64_t N, hyp_err *e) {
    const exec_dev_file *F = &x->files[x->gemm_file];
    const double tm = file_const(F, "TILE_M", 0), tn = file_const(F, "TILE_N", 0), block = file_const(F, "BLOCK", 0),
                 smem = file_const(F, "SMEM", -1);
    if (tm < 1 || tn < 1 || block < 1 || smem < 0)
        return hyp_fail(e, HYP_EINPUT, "kernels.json: gemm.cu lacks its TILE_M/TILE_N/BLOCK/SMEM constants — regenerate the trainer with gen");
    hyp_kargs a;
    memset(&a, 0, sizeof a);
    hyp_kargs_ptr(&a, d);
    hyp_kargs_ptr(&a, aux);
    hyp_kargs_ptr(&a, (void *)operand(x, o->in[0], 1));
    hyp_kargs_ptr(&a, (void *)operand(x, o->in[1], 1));
    hyp_kargs_ptr(&a, (void *)bias);
    hyp_kargs_ptr(&a, NULL); /* rstd, gain: no prologue */
    hyp_kargs_ptr(&a, NULL);
    hyp_kargs_i32(&a, (int32_t)N);
    hyp_kargs_i32(&a, (int32_t)o->OC);
    hyp_kargs_i32(&a, (int32_t)o->IC);
    const unsigned gx = (unsigned)((o->OC + (int64_t)tn - 1) / (int64_t)tn), gy = (unsigned)((N + (int64_t)tm - 1) / (int64_t)tm);
    return x->dev->launch(x->dev, F->mod, "gemm_bf16", HYP_DIM3(gx, gy, 1), HYP_DIM3((unsigned)block, 1, 1), (size_t)smem, &a,
                          NULL, e);
}

/* v2119: the gelu-marked GEMM on the templated kernel (gemm.cu's gemm_bf16, rendered EPILOGUE
 * bias_gelu, AUX, OUT bf16): y[N][OC] = x[N][IC] W[OC][IC]^T + b into aux, gelu(y) into D — the
 * kernel's A is x, its B the weight copy's W; the bias is the copy's bf16 b (D's type, as cuBLASLt). */
static int matmul_gelu_fwd_template(exec_dev *x, const plan_op *o, const plan_op *gl, int64_t N, hyp_err *e) {
    if (dt_of(x, o->out[0]) != HYP_DT_BF16 || dt_of(x, gl->out[0]) != HYP_DT_BF16 || o->nin < 3 || o->in[2] < 0)
        return hyp_fail(e, HYP_EINPUT, "kernels.json: gemm.cu serves a GELU site with bf16 output and a bias, but %s has %s — regenerate the trainer with gen",
                        hyp_op_name(o->op), o->nin < 3 || o->in[2] < 0 ? "no bias" : "an fp32 output");
    return gemm_template_launch(x, dbuf(x, gl->out[0]), dbuf(x, o->out[0]), o, operand(x, o->in[2], 1), N, e);
}

/* v2119: the swiglu-marked gate|up GEMM on the templated kernel (gemm.cu rendered EPILOGUE swiglu,
 * AUX, OUT bf16): h[N][2H] = x[N][IC] W_gu[2H][IC]^T into aux (the matmul's output, which
 * swiglu_bwd reads) and a[N][H] = silu(gate) up into D (the swiglu_fwd's output, the next op,
 * skipped). No bias (the plan's gate|up GEMM has none). */
static int matmul_swiglu_fwd(exec_dev *x, const plan_op *o, int64_t N, hyp_err *e) {
    const plan_op *sw = o + 1;
    if (x->gemm_file < 0 || dt_of(x, o->in[0]) != HYP_DT_BF16 || dt_of(x, o->out[0]) != HYP_DT_BF16 ||
        (o->nin > 2 && o->in[2] >= 0) || o->OC % 2)
        return hyp_fail(e, HYP_EINPUT, "kernels.json: a GEMM+SwiGLU site needs gemm.cu, bf16 operands and output, no bias and an even width (%s) — regenerate the trainer with gen",
                        hyp_op_name(o->op));
    return gemm_template_launch(x, dbuf(x, sw->out[0]), dbuf(x, o->out[0]), o, NULL, N, e);
}

/* matmul_fwd marked gelu (v2166): the pre-activation y = x W^T + b is the epilogue's aux and the
 * gelu_fwd's output (the next op, skipped) is D = gelu(y). */
static int matmul_gelu_fwd(exec_dev *x, const plan_op *o, int64_t N, hyp_err *e) {
    const plan_op *gl = o + 1;
    int bf = dt_of(x, o->in[0]) == HYP_DT_BF16;
    if (bf && x->gemm_file >= 0) return matmul_gelu_fwd_template(x, o, gl, N, e);
    hyp_dtype yt = dt_of(x, o->out[0]);
    void *bias = NULL;
    if (o->nin > 2 && o->in[2] >= 0) bias = yt == HYP_DT_BF16 ? (void *)operand(x, o->in[2], 1) : dbuf(x, o->in[2]);
    return gemm_aux(x, bf ? HYP_DT_BF16 : HYP_DT_F32, yt, 1, o->OC, N, o->IC, operand(x, o->in[1], bf), o->IC,
                    operand(x, o->in[0], bf), o->IC, dbuf(x, gl->out[0]), bias ? HYP_EPI_GELU_AUX_BIAS : HYP_EPI_GELU_AUX,
                    bias, dbuf(x, o->out[0]), e);
}

/* The input gradient of a dgelu-marked matmul_bwd o through the gelu_bwd g two ops on (v2166):
 * dP = (dout W) * gelu'(P), P the GELU's saved input (aux), written (beta 0). */
static int matmul_dgelu_bwd(exec_dev *x, const plan_op *o, const plan_op *g, int64_t N, hyp_err *e) {
    int bf = dt_of(x, o->in[0]) == HYP_DT_BF16;
    return gemm_aux(x, bf ? HYP_DT_BF16 : HYP_DT_F32, dt_of(x, g->out[0]), 0, o->IC, N, o->OC, operand(x, o->in[2], bf),
                    o->IC, operand(x, o->in[0], bf), o->OC, dbuf(x, g->out[0]), HYP_EPI_DGELU, NULL, dbuf(x, g->in[1]), e);
}

static int matmul_fwd(exec_dev *x, const plan_op *o, int64_t N, hyp_err *e) {
    int64_t IC = o->IC, OC = o->OC;
    if (o->epi == PLAN_EPI_GELU) return matmul_gelu_fwd(x, o, N, e);
    if (o->epi == PLAN_EPI_SWIGLU) return matmul_swiglu_fwd(x, o, N, e);
    void *bias = o->nin > 2 ? dbuf(x, o->in[2]) : NULL, *y = dbuf(x, o->out[0]);
    if (dt_of(x, o->in[0]) == HYP_DT_BF16) { /* v2102 bf16: y (bf16 or f32) = x W^T + b on the weight copy; a
                                               * bf16 y takes the bias rounded to bf16 (cuBLASLt: D's type) */
        hyp_dtype yt = dt_of(x, o->out[0]);
        void *bb = bias && yt == HYP_DT_BF16 ? (void *)operand(x, o->in[2], 1) : bias;
        return gemm_t(x, HYP_DT_BF16, yt, 1, 0, OC, N, IC, operand(x, o->in[1], 1), IC, operand(x, o->in[0], 1), IC, 0.0f,
                      y, OC, bias ? HYP_EPI_BIAS : HYP_EPI_NONE, bb, e);
    }
    int sx = fp8_slot(x, o->in[0]), sw = fp8_slot(x, o->in[1]);
    if (sx < 0 || sw < 0 || IC % 16)
        return gemm_layer(x, 1, 0, OC, N, IC, dbuf(x, o->in[1]), IC, dbuf(x, o->in[0]), IC, 0.0f, y, OC,
                          bias ? HYP_EPI_BIAS : HYP_EPI_NONE, bias, e);
    int rc = gemm8(x, OC, N, IC, sw, x->fp8_q[sw], sx, x->fp8_q[sx], 0.0f, y, e);
    if (!rc && bias) rc = gemm(x, 0, 0, OC, N, 1, bias, OC, x->ones, 1, 1.0f, y, OC, HYP_EPI_NONE, NULL, e);
    return rc;
}

/* matmul_bwd: ins dout, inp, w; outs dinp, dw, dbias (each may be absent); accumulates. In fp8
 * (slots for all three inputs): dgrad dinp^T += W^T dout^T reads W transposed (OC a multiple of
 * 16), wgrad dW^T += x^T dout reads x and dout transposed (N a multiple of 16, IC and OC too);
 * the bias gradient sums the fake-quantized fp32 dout. */
static int matmul_bwd(exec_dev *x, const plan_op *o, int64_t N, hyp_err *e) {
    int64_t IC = o->IC, OC = o->OC;
    void *dout = dbuf(x, o->in[0]), *inp = dbuf(x, o->in[1]), *w = dbuf(x, o->in[2]);
    void *dinp = dbuf(x, o->out[0]), *dw = o->nout > 1 ? dbuf(x, o->out[1]) : NULL;
    void *db = o->nout > 2 ? dbuf(x, o->out[2]) : NULL;
    if (o->epi == PLAN_EPI_DGELU) { /* dP instead of dinp, through the gelu_bwd two ops on */
        int rc = matmul_dgelu_bwd(x, o, o + 2, N, e);
        if (rc) return rc;
        dinp = NULL;
    }
    if (dt_of(x, o->in[0]) == HYP_DT_BF16) { /* v2102 bf16: bf16 dout, inp and weight copy, fp32 compute;
                                               * dinp in its dtype and dW, db in fp32, all accumulated (beta 1) */
        const void *g = operand(x, o->in[0], 1), *xin = operand(x, o->in[1], 1), *wb = operand(x, o->in[2], 1);
        int rc = HYP_OK;
        if (dinp) rc = gemm_t(x, HYP_DT_BF16, dt_of(x, o->out[0]), 0, 0, IC, N, OC, wb, IC, g, OC, 1.0f, dinp, IC, HYP_EPI_NONE, NULL, e);
        if (!rc && dw) rc = gemm_t(x, HYP_DT_BF16, HYP_DT_F32, 0, 1, IC, OC, N, xin, IC, g, OC, 1.0f, dw, IC, HYP_EPI_NONE, NULL, e);
        if (!rc && db) rc = gemm_t(x, HYP_DT_BF16, HYP_DT_F32, 0, 0, OC, 1, N, g, OC, x->ones_bf16, N, 1.0f, db, OC, HYP_EPI_NONE, NULL, e);
        return rc;
    }
    int sg = fp8_slot(x, o->in[0]), sx = fp8_slot(x, o->in[1]), sw = fp8_slot(x, o->in[2]);
    int f8 = sg >= 0 && sx >= 0 && sw >= 0, rc = HYP_OK;
    if (dinp && f8 && OC % 16 == 0) rc = gemm8(x, IC, N, OC, sw, x->fp8_qt[sw], sg, x->fp8_q[sg], 1.0f, dinp, e);
    else if (dinp) rc = gemm_layer(x, 0, 0, IC, N, OC, w, IC, dout, OC, 1.0f, dinp, IC, HYP_EPI_NONE, NULL, e);
    if (rc) return rc;
    if (dw && f8 && N % 16 == 0 && IC % 16 == 0 && OC % 16 == 0)
        rc = gemm8(x, IC, OC, N, sx, x->fp8_qt[sx], sg, x->fp8_qt[sg], 1.0f, dw, e);
    else if (dw) rc = gemm_layer(x, 0, 1, IC, OC, N, inp, IC, dout, OC, 1.0f, dw, IC, HYP_EPI_NONE, NULL, e);
    if (rc) return rc;
    /* db[OC] += dout^T 1 (a GEMM with n = 1 accumulates, which the BGRADB epilogue does not) */
    if (db) rc = gemm(x, 0, 0, OC, 1, N, dout, OC, x->ones, N, 1.0f, db, OC, HYP_EPI_NONE, NULL, e);
    return rc;
}

/* One launch of op o (the second op of a fusion site whose first is pair, else pair is NULL). */
/* Argument i of L, a TMA tensor map (v2114): "DIMS:BOX:SWIZZLE" over plan buffer bidx, evaluated
 * in env (the file's constants, the op's dims), a row-major tensor of the buffer's dtype, written
 * by the device layer (cuTensorMapEncodeTiled on cuda, the sim's encoder on sim). */
static int tmap_arg(exec_dev *x, const exec_dev_launch *L, int i, env_t *env, hyp_kargs *ka, hyp_err *e) {
    char spec[256], what[256];
    if (L->bind[i] != AB_TMAP || !L->arg[i] || strlen(L->arg[i]) >= sizeof spec)
        return hyp_fail(e, HYP_EINPUT, "%s: parameter %s is a tensor map but its binding is not tmap:... — regenerate with gen", L->kernel, L->pname[i]);
    snprintf(spec, sizeof spec, "%s", L->arg[i]);
    char *b = strchr(spec, ':'), *s = b ? strchr(b + 1, ':') : NULL;
    if (!s) return hyp_fail(e, HYP_EINPUT, "%s: tensor map '%s' is not DIMS:BOX:SWIZZLE — regenerate with gen", L->kernel, L->arg[i]);
    *b++ = 0;
    *s++ = 0;
    double dv[5], bv[5], sw = 0;
    int rank = dev_eval_list(spec, env, dv, 5, what, sizeof what);
    int nb = dev_eval_list(b, env, bv, 5, what, sizeof what);
    if (rank < 1 || nb != rank || dev_eval_list(s, env, &sw, 1, what, sizeof what) != 1)
        return hyp_fail(e, HYP_EINPUT, "%s: tensor map '%s': %s — regenerate with gen", L->kernel, L->arg[i], what);
    hyp_dtype t = dt_of(x, L->bidx[i]);
    uint64_t dims[5], strides[4];
    uint32_t box[5];
    uint64_t stride = hyp_dtype_size(t);
    for (int d = 0; d < rank; d++) {
        dims[d] = (uint64_t)llround(dv[d]);
        box[d] = (uint32_t)llround(bv[d]);
        if (d > 0) strides[d - 1] = stride;
        stride *= dims[d];
    }
    unsigned char map[128] __attribute__((aligned(64)));
    int rc = x->dev->tensor_map(x->dev, map, t, rank, dbuf(x, L->bidx[i]), dims, strides, box, (int)llround(sw), e);
    if (rc) return rc;
    hyp_kargs_tmap(ka, map);
    return HYP_OK;
}

static int run_launch(exec_dev *x, const plan_op *o, const plan_op *pair, const exec_dev_launch *L, float dloss,
                      hyp_err *e) {
    const exec_dev_file *F = &x->files[L->file];
    env_t v = {0};
    hyp_kargs ka;
    memset(&ka, 0, sizeof ka);
    char what[256];
    /* scalar arguments first: the grid may name them */
    env_t base = {0};
    dev_env_set(&base, "dloss", dloss);
    for (int j = 0; j < F->consts.n; j++) dev_env_set(&base, F->consts.name[j], F->consts.val[j]);
    exec_dev_env_ops(&base, pair ? pair : o, pair ? o : NULL, x->B, x->T);
    double sval[ARGS_MAX] = {0};
    for (int i = 0; i < L->nargs; i++) {
        if (L->bind[i] == AB_LOSS && L->bidx[i] >= 2) { /* the loss extension's scalars */
            sval[i] = L->bidx[i] == 2 ? x->teacher_vp : L->bidx[i] == 3 ? x->temperature : x->alpha;
            dev_env_set(&v, L->pname[i], sval[i]);
            continue;
        }
        if (L->bind[i] != AB_EXPR) continue;
        if (dev_eval_list(L->arg[i], &base, &sval[i], 1, what, sizeof what) != 1)
            return hyp_fail(e, HYP_EINPUT, "%s (%s): %s", L->kernel, hyp_op_name(o->op), what);
        dev_env_set(&v, L->pname[i], sval[i]);
    }
    for (int i = 0; i < L->nargs; i++) {
        void *ptr = NULL;
        switch (L->bind[i]) {
        case AB_BUF: ptr = dbuf(x, L->bidx[i]); break;
        case AB_SCRATCH: ptr = x->scratch + L->soff[i]; break;
        case AB_LOSS: ptr = L->bidx[i] == 0 ? (void *)x->row_scale : L->bidx[i] == 1 ? (void *)x->teacher : NULL; break;
        case AB_FP8:
            ptr = L->bidx[i] == 3 ? x->fp8_q[o->slot] : L->bidx[i] == 4 ? x->fp8_qt[o->slot]
                : (L->bidx[i] == 0 ? x->fp8_scale : L->bidx[i] == 1 ? x->fp8_scale_inv : x->fp8_amax) + o->slot;
            break;
        default: break;
        }
        if (L->ptype[i] == PT_TMAP) {
            int rc = tmap_arg(x, L, i, &base, &ka, e);
            if (rc) return rc;
            continue;
        }
        switch (L->ptype[i]) {
        case PT_PTR: hyp_kargs_ptr(&ka, L->bind[i] == AB_EXPR ? NULL : ptr); break;
        case PT_I32: hyp_kargs_i32(&ka, (int32_t)llround(sval[i])); break;
        case PT_I64: hyp_kargs_i64(&ka, (int64_t)llround(sval[i])); break;
        case PT_U32: hyp_kargs_u32(&ka, (uint32_t)llround(sval[i])); break;
        default: hyp_kargs_f32(&ka, (float)sval[i]); break;
        }
    }
    for (int j = 0; j < base.n; j++) dev_env_set(&v, base.name[j], base.val[j]);
    double g[3] = {1, 1, 1}, sm = 0;
    int ng = dev_eval_list(L->grid, &v, g, 3, what, sizeof what);
    if (ng < 1 || dev_eval_list(L->smem, &v, &sm, 1, what, sizeof what) != 1)
        return hyp_fail(e, HYP_EINPUT, "%s (%s): %s", L->kernel, hyp_op_name(o->op), what);
    for (int j = 0; j < 3; j++)
        if (g[j] < 1) return HYP_OK; /* an empty grid: nothing to do */
    return x->dev->launch(x->dev, F->mod, L->kernel, HYP_DIM3((unsigned)g[0], (unsigned)g[1], (unsigned)g[2]),
                          HYP_DIM3((unsigned)L->block, 1, 1), (size_t)sm, &ka, NULL, e);
}

static int run_op_work(exec_dev *x, const plan_op *o, const exec_dev_op *eo, float dloss, hyp_err *e) {
    int64_t N = (int64_t)x->B * x->T;
    int rc = HYP_OK;
    switch (eo->how) {
    case EXD_KERNELS:
        for (int i = 0; i < eo->count && !rc; i++) rc = run_launch(x, o, eo->pair, &x->launches[eo->first + i], dloss, e);
        return rc;
    case EXD_SKIP: return HYP_OK; /* run by its fusion site's launches at the site's second op, or by a GEMM epilogue */
    case EXD_ZERO: {
        int64_t n = (o->n == DIM_B ? x->B : o->n == DIM_T ? x->T : o->n == DIM_N ? N : o->n) * (o->C ? o->C : 1);
        return x->dev->memset(x->dev, dbuf(x, o->out[0]), 0, hyp_dtype_size(dt_of(x, o->out[0])) * (size_t)n, NULL, e);
    }
    case EXD_GEMM:
        return hyp_op_get(o->op)->device == HYP_OPDEV_GEMM_FWD ? matmul_fwd(x, o, N, e) : matmul_bwd(x, o, N, e);
    case EXD_MOE: return exec_dev_moe_run(x, o, dloss, e);
    default: return hyp_fail(e, HYP_EINPUT, "plan op '%s' cannot run on the device", hyp_op_name(o->op));
    }
}

/* Op o; inside the profiled window (v2184) between two events on the compute stream. */
static int run_op(exec_dev *x, const plan_op *o, const exec_dev_op *eo, float dloss, hyp_err *e) {
    if (!hyp_prof_cur) return run_op_work(x, o, eo, dloss, e);
    int h = hyp_prof_dev_begin(x->dev);
    int rc = run_op_work(x, o, eo, dloss, e);
    hyp_prof_dev_end(x->dev, h, x->p, o, x->B, x->T);
    return rc;
}

static int upload_batch(exec_dev *x, hyp_err *e) { return exec_dev_batch_upload(x, e); }

static int mean_loss(exec_dev *x, float *loss, hyp_err *e) {
    int64_t n = (int64_t)x->B * x->T;
    int rc = x->dev->d2h(x->dev, x->h_losses, dbuf(x, x->p->losses_buf), sizeof(float) * (size_t)n, NULL, e);
    if (!rc) rc = x->dev->stream_synchronize(x->dev, NULL, e);
    if (!rc) *loss = op_mean_loss(x->h_losses, x->h_targets, (long)n);
    return rc;
}

/* ---- ZeRO-3 (exec_dev_z3): the schedule of core/zero3.h, gathered ahead on the comm stream ---- */

/* Points group g's buffers of kind (BUF_PARAM or BUF_GRAD) at base, its copy laid out from start[g]. */
static void z3_bind(exec_dev *x, int g, int kind, float *base) {
    const hyp_z3_layout *L = x->z3->lay;
    for (int b = 0; b < x->p->n_bufs; b++)
        if (L->buf_group[b] == g && x->p->bufs[b].kind == (int)kind)
            x->z3->ptr[b] = base + (x->p->bufs[b].offset - L->start[g]);
}

/* One pass of the ZeRO-3 schedule (core/zero3.h) on the device: gathers and gradient reductions
 * on the executor's communication stream, ordered against the compute stream by events. */
typedef struct {
    exec_dev *x;
    const plan_op *ops;
    const exec_dev_op *eo;
    float dloss, *loss;
} z3_pass;

/* On the comm stream: segment j's group g all-gathered into slot k (one rank: copied) once the ops
 * of segment j - n_slots, which used the slot before, have run; then the slot's ready event. */
static int z3_gather(void *ctx, int j, int g, int k, hyp_err *e) {
    exec_dev *x = ((z3_pass *)ctx)->x;
    exec_dev_z3 *z = x->z3;
    const hyp_z3_layout *L = z->lay;
    hyp_device *d = x->dev;
    int rc = HYP_OK;
    if (j >= L->n_slots) rc = d->event_wait(d, z->comm, z->freed[k], e);
    if (!rc)
        rc = x->world > 1 ? d->all_gather(d, x->params + L->sb[g], z->slot[k], (size_t)L->gs[g], HYP_DT_F32, z->comm, e)
                          : d->d2d(d, z->slot[k], x->params + L->sb[g], sizeof(float) * (size_t)L->gs[g], z->comm, e);
    return rc ? rc : d->event_record(d, z->ready[k], z->comm, e);
}

/* The compute stream waits for slot k only. */
static int z3_acquire(void *ctx, int g, int k, hyp_err *e) {
    exec_dev *x = ((z3_pass *)ctx)->x;
    int rc = x->dev->event_wait(x->dev, NULL, x->z3->ready[k], e);
    z3_bind(x, g, BUF_PARAM, x->z3->slot[k]);
    return rc;
}

/* The one-group workspace, free once the previous group's reduction read it, zeroed. */
static int z3_grads_begin(void *ctx, int g, hyp_err *e) {
    exec_dev *x = ((z3_pass *)ctx)->x;
    hyp_device *d = x->dev;
    int rc = d->event_wait(d, NULL, x->z3->wsfree, e);
    if (!rc) rc = d->memset(d, x->grads, 0, sizeof(float) * (size_t)(x->world * x->z3->lay->gs[g]), NULL, e);
    z3_bind(x, g, BUF_GRAD, x->grads);
    return rc;
}

static int z3_run_op(void *ctx, int i, hyp_err *e) {
    z3_pass *c = ctx;
    int rc = run_op(c->x, &c->ops[i], &c->eo[i], c->dloss, e);
    if (!rc && c->loss && (hyp_op_get(c->ops[i].op)->flags & HYP_OPF_WRITES_LOSSES)) rc = mean_loss(c->x, c->loss, e);
    return rc;
}

static int z3_release(void *ctx, int k, hyp_err *e) {
    exec_dev *x = ((z3_pass *)ctx)->x;
    return x->dev->event_record(x->dev, x->z3->freed[k], NULL, e);
}

/* After group g's backward ops (gradients in the workspace), on the comm stream: reduce-scatter
 * the workspace into slot k (its ops ran; the next gather into it follows on this stream), then
 * gshard += it (an exact fp32 add: a k = 1 GEMM with beta 1); one rank adds the workspace. */
static int z3_reduce(void *ctx, int g, int k, hyp_err *e) {
    exec_dev *x = ((z3_pass *)ctx)->x;
    exec_dev_z3 *z = x->z3;
    const hyp_z3_layout *L = z->lay;
    hyp_device *d = x->dev;
    float *part = x->world > 1 ? z->slot[k] : x->grads;
    int rc = d->event_record(d, z->gdone, NULL, e);
    if (!rc) rc = d->event_wait(d, z->comm, z->gdone, e);
    if (!rc && x->world > 1) rc = d->reduce_scatter(d, x->grads, part, (size_t)L->gs[g], HYP_DT_F32, z->comm, e);
    hyp_gemm a;
    memset(&a, 0, sizeof a);
    a.m = L->gs[g], a.n = 1, a.k = 1;
    a.atype = a.btype = a.dtype = HYP_DT_F32;
    a.compute = HYP_GEMM_F32;
    a.alpha = a.beta = 1.0f;
    a.a = part, a.lda = L->gs[g], a.b = x->ones, a.ldb = 1;
    a.c = a.d = x->gshard + L->sb[g], a.ldc = a.ldd = L->gs[g];
    if (!rc) rc = d->gemm(d, &a, z->comm, e);
    return rc ? rc : d->event_record(d, z->wsfree, z->comm, e);
}

static const hyp_z3_hooks Z3_DEVICE = {z3_gather, z3_acquire, z3_grads_begin, z3_run_op, z3_release, z3_reduce};

/* Runs ops[0..n) (their prepared eo) segment by segment: gathers started up to n_slots - 1
 * segments ahead after everything enqueued before (the optimizer, the previous pass), the compute
 * stream waiting for its segment's slot only; with grads (backward) each group's gradients go to
 * the zeroed workspace and are reduced into gshard after its ops. The compute stream then waits
 * for the comm stream. */
static int z3_run(exec_dev *x, const plan_op *ops, const exec_dev_op *eo, int n, const hyp_z3_seg *seg, int ns,
                  int grads, float dloss, float *loss, hyp_err *e) {
    exec_dev_z3 *z = x->z3;
    hyp_device *d = x->dev;
    z3_pass c = {x, ops, eo, dloss, loss};
    int rc = d->event_record(d, z->start, NULL, e);
    if (!rc) rc = d->event_wait(d, z->comm, z->start, e);
    if (!rc) rc = hyp_z3_schedule(z->lay, seg, ns, n, grads, 1, &Z3_DEVICE, &c, e);
    if (!rc) rc = d->event_record(d, z->done, z->comm, e);
    return rc ? rc : d->event_wait(d, NULL, z->done, e);
}

/* ---- ZeRO-2 (x->zg): the gradient half of the schedule, on the compute stream ---------------- */

/* Group g's gradient buffers into the zeroed one-group workspace (offsets relative to its start). */
static int zg_grads_begin(void *ctx, int g, hyp_err *e) {
    exec_dev *x = ((z3_pass *)ctx)->x;
    const hyp_z3_layout *L = x->zg;
    for (int b = 0; b < x->p->n_bufs; b++)
        if (L->buf_group[b] == g && x->p->bufs[b].kind == BUF_GRAD) x->zg_ptr[b] = x->grads + (x->p->bufs[b].offset - L->start[g]);
    return x->dev->memset(x->dev, x->grads, 0, sizeof(float) * (size_t)L->len[g], NULL, e);
}

/* Group g's range [start, start + len) summed into each owner's part: one collective reduce per
 * rank whose flat shard [r*shard, (r+1)*shard) it overlaps (a range meets one or two shards: the
 * bytes of a reduce-scatter), then this rank's part added to gshard (a k = 1 GEMM, beta 1: an
 * exact fp32 add, as z3_reduce). One rank: the add only. */
static int zg_reduce(void *ctx, int g, int slot, hyp_err *e) {
    (void)slot;
    exec_dev *x = ((z3_pass *)ctx)->x;
    const hyp_z3_layout *L = x->zg;
    hyp_device *d = x->dev;
    int64_t start = L->start[g], end = start + L->len[g];
    int rc = HYP_OK;
    for (int r = 0; r < x->world && !rc; r++) {
        int64_t lo = (int64_t)r * x->shard, a = start > lo ? start : lo, b = end < lo + x->shard ? end : lo + x->shard;
        if (b <= a) continue;
        float *part = x->grads + (a - start);
        if (x->world > 1) rc = d->reduce(d, part, (size_t)(b - a), HYP_DT_F32, r, NULL, e);
        if (rc || r != x->rank) continue;
        hyp_gemm m;
        memset(&m, 0, sizeof m);
        m.m = b - a, m.n = 1, m.k = 1;
        m.atype = m.btype = m.dtype = HYP_DT_F32;
        m.compute = HYP_GEMM_F32;
        m.alpha = m.beta = 1.0f;
        m.a = part, m.lda = b - a, m.b = x->ones, m.ldb = 1;
        m.c = m.d = x->gshard + (a - lo), m.ldc = m.ldd = b - a;
        rc = d->gemm(d, &m, NULL, e);
    }
    return rc;
}

static const hyp_z3_hooks ZG_DEVICE = {NULL, NULL, zg_grads_begin, z3_run_op, NULL, zg_reduce};

/* v2165: ops [lo, hi) of a pass as one region (exec_dev_region's body) */
typedef struct {
    const plan_op *ops;
    const exec_dev_op *eo; /* NULL: the backward's (exec_dev_bwd_op) */
    int lo, hi;
    float dloss;
} ops_span;

static int span_body(exec_dev *x, void *ctx, hyp_err *e) {
    const ops_span *s = ctx;
    int rc = HYP_OK;
    for (int i = s->lo; i < s->hi && !rc; i++) rc = run_op(x, &s->ops[i], s->eo ? &s->eo[i] : exec_dev_bwd_op(x, i), s->dloss, e);
    return rc;
}

/* The batch upload (host memory) and the bf16 weight cast (once per optimizer step) stay outside
 * the region; the forward ops are one region (key: the bound batch shape). */
int exec_dev_forward(exec_dev *x, hyp_err *e) {
    int rc = upload_batch(x, e);
    if (!rc) rc = refresh_wcopy(x, e);
    if (!rc && x->z3)
        rc = z3_run(x, x->p->fwd, x->fwd, x->p->n_fwd, x->z3->lay->fwd, x->z3->lay->n_fwd, 0, 0, NULL, e);
    if (!rc && !x->z3) {
        ops_span sp = {x->p->fwd, x->fwd, 0, x->p->n_fwd, 0};
        double key[2] = {x->B, x->T};
        rc = exec_dev_region(x, EXD_G_FWD, key, 2, span_body, &sp, e);
    }
    if (!rc) rc = x->dev->stream_synchronize(x->dev, NULL, e);
    return rc;
}

int exec_dev_eval_loss(exec_dev *x, float *loss, hyp_err *e) {
    int rc = exec_dev_forward(x, e);
    if (!rc) rc = run_op(x, &x->p->loss, &x->loss, 0, e);
    if (!rc) rc = mean_loss(x, loss, e);
    return rc;
}

int exec_dev_backward(exec_dev *x, float dloss, float *loss, hyp_err *e) {
    return exec_dev_backward_each(x, dloss, loss, NULL, NULL, e);
}

/* ---- data parallelism (exec_dev_init_dp) and the device step's pieces ------------------------ */

int exec_dev_init(exec_dev *x, const plan_t *p, const char *kernels_dir, hyp_device *dev, hyp_err *e) {
    return exec_dev_init_dp(x, p, kernels_dir, dev, 1, 0, 0, e);
}

int exec_dev_init_dp(exec_dev *x, const plan_t *p, const char *kernels_dir, hyp_device *dev, int world, int rank,
                     int stage, hyp_err *e) {
    return init_any(x, p, kernels_dir, dev, world, rank, stage, NULL, 0, e);
}

int exec_dev_init_forward(exec_dev *x, const plan_t *p, const char *kernels_dir, hyp_device *dev, hyp_err *e) {
    return init_any(x, p, kernels_dir, dev, 1, 0, 0, NULL, 1, e);
}

int exec_dev_init_z3(exec_dev *x, const plan_t *p, const char *kernels_dir, hyp_device *dev, const hyp_z3_layout *lay,
                     hyp_err *e) {
    return init_any(x, p, kernels_dir, dev, lay->world, lay->rank, 3, lay, 0, e);
}

/* Appends to end/grp the pieces of the full tensor table (ends full[nseg]) inside the arena range
 * [lo, hi), at shard positions pos + (offset - lo); the rest of the range's len floats (padding)
 * joins the last piece, or forms one (group -1): its values, gradients and moments stay zero. */
static void clip_table(const exec_dev *x, const int64_t *full, int64_t lo, int64_t hi, int64_t len, int64_t pos,
                       int64_t *end, int *grp, int *n) {
    int first = *n;
    int64_t start = 0;
    for (int s = 0; s < x->nseg; start = full[s++]) {
        int64_t a = start > lo ? start : lo, b = full[s] < hi ? full[s] : hi;
        if (a >= b) continue;
        end[*n] = pos + (b - lo);
        grp[(*n)++] = x->seg_group[s];
    }
    if (*n == first) grp[(*n)++] = -1;
    end[*n - 1] = pos + len;
}

/* The tensor table of what this rank owns (stage >= 1): its shard [lo, lo + shard) of the arena,
 * offsets relative to lo; at stage 3 every group's own part [start + rank*gs, +gs) at its place sb
 * in the shard (core/zero3.h). */
static int prepare_shard(exec_dev *x, hyp_err *e) {
    if (x->opt_file < 0 || x->stage < 1) return HYP_OK;
    const hyp_z3_layout *L = x->z3 ? x->z3->lay : NULL;
    size_t cap = (size_t)x->nseg + (L ? (size_t)L->n_groups : 0) + 1;
    int64_t *end = calloc(cap, sizeof *end);
    x->sh_group = calloc(cap, sizeof *x->sh_group);
    x->sh_h_wd = calloc(cap, sizeof *x->sh_h_wd);
    int64_t *full = malloc(sizeof(int64_t) * (size_t)x->nseg);
    int rc = end && x->sh_group && x->sh_h_wd && full
                 ? x->dev->d2h_sync(x->dev, full, x->seg_end, sizeof(int64_t) * (size_t)x->nseg, e)
                 : hyp_fail(e, HYP_EFAIL, "out of memory");
    int n = 0;
    for (int g = 0; L && g < L->n_groups && !rc; g++) {
        int64_t lo = L->start[g] + x->rank * L->gs[g], hi = L->start[g] + L->len[g];
        clip_table(x, full, lo, lo + L->gs[g] < hi ? lo + L->gs[g] : hi, L->gs[g], L->sb[g], end, x->sh_group, &n);
    }
    if (!L && !rc) clip_table(x, full, x->shard * x->rank, x->shard * (x->rank + 1), x->shard, 0, end, x->sh_group, &n);
    x->sh_nseg = n;
    if (!rc) rc = exec_dev_alloc(x, (void **)&x->sh_seg_end, n, sizeof(int64_t), e);
    if (!rc) rc = exec_dev_alloc(x, (void **)&x->sh_seg_wd, n, sizeof(float), e);
    if (!rc) rc = x->dev->h2d_sync(x->dev, x->sh_seg_end, end, sizeof(int64_t) * (size_t)n, e);
    free(full);
    free(end);
    return rc;
}

int exec_dev_backward_each(exec_dev *x, float dloss, float *loss, int (*after)(void *ctx, int op, hyp_err *e),
                           void *ctx, hyp_err *e) {
    int rc = HYP_OK;
    *loss = 0;
    if ((x->z3 || x->zg) && after) return hyp_fail(e, HYP_EINPUT, "exec_dev: ZeRO-2/3 reduce each group themselves — no backward hooks");
    if (x->z3)
        rc = z3_run(x, x->p->bwd, x->bwd, x->p->n_bwd, x->z3->lay->bwd, x->z3->lay->n_bwd, 1, dloss, loss, e);
    if (x->zg) {
        z3_pass c = {x, x->p->bwd, x->bwd, dloss, loss};
        rc = hyp_z3_schedule(x->zg, x->zg->bwd, x->zg->n_bwd, x->p->n_bwd, 1, 0, &ZG_DEVICE, &c, e);
    }
    if (!x->z3 && !x->zg && !after && !x->row_scale && !x->teacher) {
        /* v2165: regions cut where the host reads the fused loss's losses (mean_loss waits for
         * them): the ops up to it, then the rest (key: batch shape and dloss, which carries the
         * v2162 loss scale: a new scale is a new graph) */
        double key[4] = {x->B, x->T, dloss, exec_dev_moe_key(x)}; /* + the MoE aux weight's target count */
        for (int i = 0, lo = 0, part = 0; i <= x->p->n_bwd && !rc; i++) {
            int loss_op = i < x->p->n_bwd && (hyp_op_get(x->p->bwd[i].op)->flags & HYP_OPF_WRITES_LOSSES);
            if (!loss_op && i < x->p->n_bwd) continue;
            int hi = loss_op ? i + 1 : i;
            ops_span sp = {x->p->bwd, NULL, lo, hi, dloss};
            if (hi > lo) rc = exec_dev_region(x, part == 0 ? EXD_G_BWD_HEAD : part == 1 ? EXD_G_BWD_TAIL : -1, key, 4, span_body, &sp, e);
            part++;
            if (!rc && loss_op) rc = mean_loss(x, loss, e);
            lo = hi;
        }
        return rc ? rc : x->dev->stream_synchronize(x->dev, NULL, e);
    }
    for (int i = 0; i < x->p->n_bwd && !rc && !x->z3 && !x->zg; i++) {
        rc = run_op(x, &x->p->bwd[i], exec_dev_bwd_op(x, i), dloss, e);
        if (!rc && (hyp_op_get(x->p->bwd[i].op)->flags & HYP_OPF_WRITES_LOSSES)) rc = mean_loss(x, loss, e);
        if (!rc && after) rc = after(ctx, i, e);
    }
    if (!rc && !after) rc = x->dev->stream_synchronize(x->dev, NULL, e);
    return rc;
}

/* The rendered global_norm module (templates/global_norm.cu.lua), -1 when the plan has none. */
static int norm_file(const exec_dev *x, int *parts, int *block) {
    for (int i = 0; i < x->n_files; i++) {
        if (strncmp(x->files[i].name, "global_norm", 11)) continue;
        *parts = 0, *block = 256;
        for (int j = 0; j < x->files[i].consts.n; j++) {
            if (!strcmp(x->files[i].consts.name[j], "PARTS")) *parts = (int)x->files[i].consts.val[j];
            if (!strcmp(x->files[i].consts.name[j], "BLOCK")) *block = (int)x->files[i].consts.val[j];
        }
        return *parts > 0 ? i : -1;
    }
    return -1;
}

int exec_dev_norm_parts(const exec_dev *x) {
    int parts, block;
    return norm_file(x, &parts, &block) < 0 ? 0 : parts;
}

int exec_dev_norm_partial(exec_dev *x, const float *g, int64_t n, float *partial, hyp_err *e) {
    int parts, block, fi = norm_file(x, &parts, &block);
    if (fi < 0) return hyp_fail(e, HYP_EINPUT, "kernels.json has no global_norm module — regenerate with gen --enable clip");
    hyp_kargs a;
    memset(&a, 0, sizeof a);
    hyp_kargs_ptr(&a, partial);
    hyp_kargs_ptr(&a, g);
    hyp_kargs_i64(&a, n);
    return x->dev->launch(x->dev, x->files[fi].mod, "global_norm_partial", HYP_DIM3((unsigned)parts, 1, 1),
                          HYP_DIM3((unsigned)block, 1, 1), 0, &a, NULL, e);
}

int exec_dev_norm_finish(exec_dev *x, const float *partial, float max_norm, float *out, hyp_err *e) {
    int parts, block, fi = norm_file(x, &parts, &block);
    if (fi < 0) return hyp_fail(e, HYP_EINPUT, "kernels.json has no global_norm module — regenerate with gen --enable clip");
    hyp_kargs a;
    memset(&a, 0, sizeof a);
    hyp_kargs_ptr(&a, out);
    hyp_kargs_ptr(&a, partial);
    hyp_kargs_f32(&a, max_norm);
    return x->dev->launch(x->dev, x->files[fi].mod, "global_norm_finish", HYP_DIM3(1, 1, 1), HYP_DIM3(32, 1, 1), 0, &a,
                          NULL, e);
}

int exec_dev_optim_own(exec_dev *x, const char *kernel, const char *p0, int nparams, exec_dev_own *o, hyp_err *e) {
    if (x->opt_file < 0 || strcmp(x->opt_kernel, kernel) || strcmp(x->opt_p0, p0) || x->opt_nparams != nparams)
        return hyp_fail(e, HYP_EINPUT, "kernels.json has no %s %s optimizer launch — regenerate with gen, or step on the host",
                        strcmp(p0, "float*") ? p0 : "f32", kernel);
    int shard = x->stage >= 1;
    int64_t lo = shard && !x->z3 ? x->shard * x->rank : 0; /* stage 3: params is the shard */
    memset(o, 0, sizeof *o);
    o->param = x->params + lo;
    o->grad = shard && x->stage >= 2 ? x->gshard : x->grads + lo;
    for (int k = 0; k < x->n_state; k++) o->state[k] = x->state[k];
    o->n = shard ? x->shard : x->p->param_floats;
    o->nseg = shard ? x->sh_nseg : x->nseg;
    o->seg_end = shard ? x->sh_seg_end : x->seg_end;
    o->seg_group = shard ? x->sh_group : x->seg_group;
    o->seg_val = shard ? x->sh_seg_wd : x->seg_wd;
    o->h_seg_val = shard ? x->sh_h_wd : x->h_seg_wd;
    return HYP_OK;
}

int exec_dev_optim_launch(exec_dev *x, int64_t n, hyp_kargs *a, hyp_err *e) {
    const exec_dev_file *F = &x->files[x->opt_file];
    env_t v = {0};
    dev_env_set(&v, "n", (double)n);
    for (int j = 0; j < F->consts.n; j++) dev_env_set(&v, F->consts.name[j], F->consts.val[j]);
    double g = 0;
    char what[200];
    int block = 256;
    for (int j = 0; j < F->consts.n; j++)
        if (!strcmp(F->consts.name[j], "BLOCK")) block = (int)F->consts.val[j];
    if (dev_eval_list(x->opt_grid, &v, &g, 1, what, sizeof what) != 1)
        return hyp_fail(e, HYP_EINPUT, "%s: %s", x->opt_kernel, what);
    x->wstale = 1; /* the optimizer writes the parameters */
    return x->dev->launch(x->dev, F->mod, x->opt_kernel, HYP_DIM3((unsigned)g, 1, 1), HYP_DIM3((unsigned)block, 1, 1), 0,
                          a, NULL, e);
}

int exec_dev_optim_const(const exec_dev *x, const char *name, double *v, hyp_err *e) {
    if (x->opt_file < 0) return hyp_fail(e, HYP_EINPUT, "kernels.json has no optimizer launch — regenerate with gen");
    const exec_dev_file *F = &x->files[x->opt_file];
    for (int j = 0; j < F->consts.n; j++)
        if (!strcmp(F->consts.name[j], name)) {
            *v = F->consts.val[j];
            return HYP_OK;
        }
    return hyp_fail(e, HYP_EINPUT, "kernels.json: the optimizer module %s has no constant %s — regenerate with gen", F->name, name);
}

int exec_dev_optim_launch_grid(exec_dev *x, const char *kernel, unsigned grid, hyp_kargs *a, hyp_err *e) {
    double block = 256;
    if (exec_dev_optim_const(x, "BLOCK", &block, e)) return HYP_EINPUT;
    x->wstale = 1;
    return x->dev->launch(x->dev, x->files[x->opt_file].mod, kernel, HYP_DIM3(grid ? grid : 1, 1, 1),
                          HYP_DIM3((unsigned)block, 1, 1), 0, a, NULL, e);
}

int exec_dev_optim_work(exec_dev *x, int64_t n, float **out, hyp_err *e) {
    if (n > x->opt_work_n) {
        int rc = x->dev->synchronize(x->dev, e); /* the old workspace may still be read */
        if (!rc) rc = x->dev->mem_free(x->dev, x->opt_work, e);
        x->opt_work = NULL, x->opt_work_n = 0;
        if (!rc) rc = exec_dev_alloc(x, (void **)&x->opt_work, n, 4, e);
        if (rc) return rc;
        x->opt_work_n = n;
    }
    *out = x->opt_work;
    return HYP_OK;
}

int exec_dev_fp8_step(exec_dev *x, hyp_err *e) {
    size_t n = (size_t)x->p->fp8_slots;
    if (!n || x->p->fp8_current) return HYP_OK; /* current: each cast set its scale (and cleared amax) */
    int rc = x->dev->d2h_sync(x->dev, x->h_fp8, x->fp8_amax, sizeof(float) * n, e);
    if (rc) return rc;
    for (size_t i = 0; i < n; i++) {
        hyp_fp8_state_record(&x->fp8[i], x->h_fp8[i]);
        hyp_fp8_state_update(&x->fp8[i]);
    }
    rc = upload_scales(x, e);
    return rc ? rc : x->dev->memset_sync(x->dev, x->fp8_amax, 0, sizeof(float) * n, e);
}

int exec_dev_fp8_set_states(exec_dev *x, const hyp_fp8_state *st, hyp_err *e) {
    int n = x->p->fp8_slots;
    if (!n || !st) return HYP_OK;
    memcpy(x->fp8, st, sizeof *x->fp8 * (size_t)n);
    return upload_scales(x, e);
}
