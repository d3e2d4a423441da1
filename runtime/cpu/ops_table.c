/* ops_table.c — the cpu backend's half of the op registry: one small adapter per registered op
 * (core/op_registry.h), binding a plan op's buffers and attributes to the kernel that computes it
 * (ops_cpu.c, ops_flash.c, ops_moe.c, fp8.c), and the table that names them. exec.c resolves the table
 * against the registry once per executor and dispatches through it.
 *
 * An adapter only unpacks arguments: no allocation, no checks (plan.c validated every argument,
 * attribute and size at load), no training policy. */
#include <string.h>

#include "exec.h"
#include "ops_cpu.h"
#include "attn_mod.h"
#include "ops_flash.h"
#include "ops_ring.h"
#include "moe_layout.h"
#include "moe_ep.h"
#include "moe_stats.h"
#include "ops_moe.h"
#include "quant.h"

/* The token array an i32 argument names: the targets or the inputs. */
static const int32_t *tok(const exec_t *x, int idx) {
    return idx < 0 ? NULL : idx == x->p->targets_buf ? x->targets : idx == x->p->positions_buf ? x->positions : x->tokens;
}

#define ADAPTER(fn) static void fn(exec_t *x, const plan_op *o, float *const *I, float *const *O, const exec_dims *d, float dloss)
#define UNUSED_ARGS (void)x, (void)o, (void)I, (void)O, (void)d, (void)dloss

ADAPTER(cpu_embedding_fwd) {
    UNUSED_ARGS;
    op_embedding_fwd_pos(O[0], tok(x, o->in[0]), I[1], I[2], tok(x, o->in[3]), d->B, d->T, (int)o->C);
}
ADAPTER(cpu_embedding_bwd) {
    UNUSED_ARGS;
    op_embedding_bwd_pos(O[0], O[1], I[0], tok(x, o->in[1]), tok(x, o->in[2]), d->B, d->T, (int)o->C, (int)o->V);
}
ADAPTER(cpu_layernorm_fwd) {
    UNUSED_ARGS;
    op_layernorm_fwd(O[0], O[1], O[2], I[0], I[1], I[2], d->N, (int)o->C, o->eps);
}
ADAPTER(cpu_layernorm_bwd) {
    UNUSED_ARGS;
    op_layernorm_bwd(O[0], O[1], O[2], I[0], I[1], I[2], I[3], I[4], d->N, (int)o->C);
}
ADAPTER(cpu_rmsnorm_fwd) {
    UNUSED_ARGS;
    op_rmsnorm_fwd(O[0], O[1], I[0], I[1], d->N, (int)o->C, o->eps);
}
ADAPTER(cpu_rmsnorm_bwd) {
    UNUSED_ARGS;
    op_rmsnorm_bwd(O[0], O[1], I[0], I[1], I[2], I[3], d->N, (int)o->C);
}
ADAPTER(cpu_matmul_fwd) {
    UNUSED_ARGS;
    op_matmul_fwd(O[0], I[0], I[1], I[2], d->N, (int)o->IC, (int)o->OC);
}
ADAPTER(cpu_matmul_bwd) {
    UNUSED_ARGS;
    op_matmul_bwd(O[0], O[1], O[2], I[0], I[1], I[2], d->N, (int)o->IC, (int)o->OC);
}
ADAPTER(cpu_qknorm_fwd) {
    UNUSED_ARGS;
    op_qknorm_fwd(O[0], O[1], I[0], I[1], I[2], d->N, (int)o->NH, (int)o->NKV, (int)o->hd, o->eps);
}
ADAPTER(cpu_qknorm_bwd) {
    UNUSED_ARGS;
    op_qknorm_bwd(O[0], O[1], O[2], I[0], I[1], I[2], I[3], I[4], d->N, (int)o->NH, (int)o->NKV, (int)o->hd);
}
ADAPTER(cpu_rope_fwd) {
    UNUSED_ARGS;
    op_rope_fwd_pos(O[0], I[0], tok(x, o->in[1]), d->B, d->T, (int)o->NH, (int)o->NKV, (int)o->hd, o->theta);
}
ADAPTER(cpu_rope_bwd) {
    UNUSED_ARGS;
    op_rope_bwd_pos(O[0], I[0], tok(x, o->in[1]), d->B, d->T, (int)o->NH, (int)o->NKV, (int)o->hd, o->theta);
}
ADAPTER(cpu_attention_fwd) {
    UNUSED_ARGS;
    hyp_attn_mod md = HYP_ATTN_MOD_OF(o);
    op_attention_fwd_mod(O[0], O[1], I[0], tok(x, o->in[1]), d->B, d->T, (int)o->NH, (int)o->NKV, (int)o->hd, o->scale, &md);
}
ADAPTER(cpu_attention_bwd) {
    UNUSED_ARGS;
    hyp_attn_mod md = HYP_ATTN_MOD_OF(o);
    op_attention_bwd_mod(O[0], O[1], I[0], I[1], I[2], tok(x, o->in[3]), d->B, d->T, (int)o->NH, (int)o->NKV, (int)o->hd, o->scale, &md);
}
ADAPTER(cpu_flash_attention_fwd) {
    UNUSED_ARGS;
    hyp_attn_mod md = HYP_ATTN_MOD_OF(o);
    op_flash_attention_fwd_mod(O[0], O[1], I[0], tok(x, o->in[1]), d->B, d->T, (int)o->NH, (int)o->NKV, (int)o->hd, o->scale, &md, NULL);
}
ADAPTER(cpu_flash_attention_bwd) {
    UNUSED_ARGS;
    hyp_attn_mod md = HYP_ATTN_MOD_OF(o);
    op_flash_attention_bwd_mod(O[0], O[1], I[0], I[1], I[2], I[3], tok(x, o->in[4]), d->B, d->T, (int)o->NH, (int)o->NKV, (int)o->hd, o->scale, &md);
}
ADAPTER(cpu_gelu_fwd) {
    UNUSED_ARGS;
    op_gelu_fwd(O[0], I[0], d->n);
}
ADAPTER(cpu_gelu_bwd) {
    UNUSED_ARGS;
    op_gelu_bwd(O[0], I[1], I[0], d->n);
}
ADAPTER(cpu_swiglu_fwd) {
    UNUSED_ARGS;
    op_swiglu_fwd(O[0], I[0], d->N, (int)o->H);
}
ADAPTER(cpu_swiglu_bwd) {
    UNUSED_ARGS;
    op_swiglu_bwd(O[0], I[0], I[1], d->N, (int)o->H);
}
ADAPTER(cpu_add_fwd) {
    UNUSED_ARGS;
    if (o->alpha > 0.0f) op_add_scaled_fwd(O[0], I[0], I[1], o->alpha, d->n);
    else op_add_fwd(O[0], I[0], I[1], d->n);
}
ADAPTER(cpu_accumulate) {
    UNUSED_ARGS;
    if (o->alpha > 0.0f) op_accumulate_scaled(O[0], I[0], o->alpha, d->n);
    else op_accumulate(O[0], I[0], d->n);
}
ADAPTER(cpu_zero) {
    UNUSED_ARGS;
    op_zero(O[0], d->n);
}
ADAPTER(cpu_crossentropy) {
    UNUSED_ARGS;
    op_crossentropy_fwd(O[0], I[0], tok(x, o->in[1]), d->N, (int)o->V, (int)o->Vp);
}
ADAPTER(cpu_crossentropy_fused) {
    UNUSED_ARGS;
    if (x->loss_fused) x->loss_fused(x, O[0], O[1], tok(x, o->in[0]), dloss, d->N, (int)o->V, (int)o->Vp);
    else op_crossentropy_fused(O[0], O[1], tok(x, o->in[0]), dloss, d->N, (int)o->V, (int)o->Vp);
    if (x->row_scale) /* per-token loss weights (preference objectives, train/pref.c) */
        for (int n = 0; n < d->N; n++)
            for (int i = 0; i < (int)o->Vp; i++) O[1][(long)n * o->Vp + i] *= x->row_scale[n];
}
/* v2160: a fake-quantized copy (exact fp8 values in fp32) under the op's scaling slot */
ADAPTER(cpu_fp8_quantize) {
    UNUSED_ARGS;
    memcpy(O[0], I[0], sizeof(float) * (size_t)d->n);
    hyp_fp8_state_fake_quantize(&x->fp8[o->slot], O[0], d->n);
}
ADAPTER(cpu_round_bf16) {
    UNUSED_ARGS;
    op_round_bf16(O[0], I[0], d->n);
}
ADAPTER(cpu_round_fp16) {
    UNUSED_ARGS;
    op_round_fp16(O[0], I[0], d->n, &x->fp16_flushed, &x->fp16_nonzero);
}
/* v2158 QAT: the fake-quantized copy of a weight (or an input) */
ADAPTER(cpu_fake_quant) {
    UNUSED_ARGS;
    op_fake_quant(O[0], I[0], d->n / (long)o->C, (int)o->C, (int)o->bits, (int)o->group);
}
/* v2159 int8 training: the forward and input-gradient GEMMs in int8 */
ADAPTER(cpu_int8_matmul_fwd) {
    UNUSED_ARGS;
    op_int8_matmul_fwd(O[0], I[0], I[1], I[2], d->N, (int)o->IC, (int)o->OC, o->rowwise == 1);
}
ADAPTER(cpu_int8_matmul_dgrad) {
    UNUSED_ARGS;
    op_int8_matmul_dgrad(O[0], I[0], I[1], d->N, (int)o->IC, (int)o->OC, o->rowwise == 1);
}
/* v2108: the ring over x->cp; T of the full sequence = the rank's T x cp. A failure is kept for
 * exec_tp_status (the step's collective check); later calls do nothing. */
ADAPTER(cpu_ring_attention_fwd) {
    UNUSED_ARGS;
    if (x->cp_rc) return;
    if (!x->cp) x->cp_rc = hyp_fail(&x->cp_err, HYP_EINPUT, "a context-parallel plan (v2108, cp=%d) run without its cp group — start it under mpirun with a multiple of %d ranks", x->p->cp, x->p->cp);
    else x->cp_rc = (x->p->cp_comm ? op_ring_attention_fwd : op_cp_allgather_attention_fwd)(x->cp, x->p->cp_layout, O[0], O[1], I[0], d->B, d->T * x->p->cp, (int)o->NH, (int)o->NKV, (int)o->hd, NULL, &x->cp_err);
}
ADAPTER(cpu_ring_attention_bwd) {
    UNUSED_ARGS;
    if (x->cp_rc) return;
    if (!x->cp) x->cp_rc = hyp_fail(&x->cp_err, HYP_EINPUT, "a context-parallel plan (v2108, cp=%d) run without its cp group — start it under mpirun with a multiple of %d ranks", x->p->cp, x->p->cp);
    else x->cp_rc = (x->p->cp_comm ? op_ring_attention_bwd(x->cp, x->p->cp_layout, O[0], I[0], I[1], I[2], I[3], d->B, d->T * x->p->cp, (int)o->NH, (int)o->NKV, (int)o->hd, NULL, &x->cp_err) : op_cp_allgather_attention_bwd(x->cp, x->p->cp_layout, O[0], I[0], I[1], I[2], I[3], d->B, d->T * x->p->cp, (int)o->NH, (int)o->NKV, (int)o->hd, &x->cp_err));
}
ADAPTER(cpu_allreduce_tp) {
    UNUSED_ARGS;
    exec_allreduce_tp(x, O[0], I[1], d->n, (int)o->C);
}

/* The mixture-of-experts MLP (ops_moe.h): state and scratch laid out by core/moe_layout.h */
static moe_shape moe_shape_of(const plan_op *o, int N) {
    moe_shape s = {N, (int)o->C, (int)o->E, (int)o->K, (int)o->H, o->norm_topk == 1, o->aux_coef, o->capacity, (int)o->Hs, o->sigmoid == 1, NULL};
    return s;
}
ADAPTER(cpu_moe_fwd) {
    UNUSED_ARGS;
    moe_shape s = moe_shape_of(o, d->N);
    s.bias = I[3]; /* NULL without the aux-loss-free bias */
    moe_state_view v = moe_state_at(O[1], d->N, o->E, o->K);
    float *ws = O[2];
    int32_t *rows = (int32_t *)(void *)(ws + moe_ws_floats_sh(d->N, o->C, o->H, o->E, o->K, o->Hs));
    if (x->moe_ep) { /* v2109: the experts over the ep group */
        exec_moe_ep_fwd(x, O[0], &v, I[0], I[1], I[2], I[2] + o->E * 2 * o->H * o->C, &s);
        return;
    }
    op_moe_fwd(O[0], v.probs, v.topi, v.topw, v.loads, v.aux, I[0], I[1], I[2], I[2] + o->E * 2 * o->H * o->C, &s, ws, rows);
}
/* The load-balancing loss enters the training loss with the weight of this micro-batch's tokens
 * (dloss per counted target x their count, as the cross-entropy's mean over them), so the step
 * minimises the global mean cross-entropy + the token-weighted mean aux loss. */
ADAPTER(cpu_moe_bwd) {
    UNUSED_ARGS;
    moe_shape s = moe_shape_of(o, d->N);
    moe_state_view v = moe_state_at(I[4], d->N, o->E, o->K);
    float *ws = O[3];
    int32_t *rows = (int32_t *)(void *)(ws + moe_ws_floats_sh(d->N, o->C, o->H, o->E, o->K, o->Hs));
    float daux = s.aux_coef > 0 ? dloss * (float)exec_count_targets(x) : 0.0f;
    long eo = (long)o->E * 2 * o->H * o->C;
    if (x->moe_ep) /* v2109: the experts over the ep group */
        exec_moe_ep_bwd(x, O[0], O[1], O[2], O[2] + eo, I[0], daux, I[1], I[2], I[3], I[3] + eo, &v, &s);
    else
        op_moe_bwd(O[0], O[1], O[2], O[2] + eo, I[0], daux, I[1], I[2], I[3], I[3] + eo, v.probs, v.topi, v.topw, &s, ws,
                   rows);
    exec_moe_add(x, o->in[4], I[4], d->N, (int)o->K);
}

static const struct {
    const char *name; /* the op registry's name */
    exec_op_fn fn;
} CPU_OPS[] = {
    {"embedding_fwd", cpu_embedding_fwd},
    {"embedding_bwd", cpu_embedding_bwd},
    {"layernorm_fwd", cpu_layernorm_fwd},
    {"layernorm_bwd", cpu_layernorm_bwd},
    {"rmsnorm_fwd", cpu_rmsnorm_fwd},
    {"rmsnorm_bwd", cpu_rmsnorm_bwd},
    {"matmul_fwd", cpu_matmul_fwd},
    {"matmul_bwd", cpu_matmul_bwd},
    {"qknorm_fwd", cpu_qknorm_fwd},
    {"qknorm_bwd", cpu_qknorm_bwd},
    {"rope_fwd", cpu_rope_fwd},
    {"rope_bwd", cpu_rope_bwd},
    {"attention_fwd", cpu_attention_fwd},
    {"attention_bwd", cpu_attention_bwd},
    {"flash_attention_fwd", cpu_flash_attention_fwd},
    {"flash_attention_bwd", cpu_flash_attention_bwd},
    {"gelu_fwd", cpu_gelu_fwd},
    {"gelu_bwd", cpu_gelu_bwd},
    {"swiglu_fwd", cpu_swiglu_fwd},
    {"swiglu_bwd", cpu_swiglu_bwd},
    {"add_fwd", cpu_add_fwd},
    {"accumulate", cpu_accumulate},
    {"zero", cpu_zero},
    {"crossentropy", cpu_crossentropy},
    {"crossentropy_fused", cpu_crossentropy_fused},
    {"fp8_quantize", cpu_fp8_quantize},
    {"round_bf16", cpu_round_bf16},
    {"round_fp16", cpu_round_fp16},
    {"fake_quant", cpu_fake_quant},
    {"int8_matmul_fwd", cpu_int8_matmul_fwd},
    {"int8_matmul_dgrad", cpu_int8_matmul_dgrad},
    {"moe_fwd", cpu_moe_fwd},
    {"moe_bwd", cpu_moe_bwd},
    {"allreduce_tp", cpu_allreduce_tp},
    {"ring_attention_fwd", cpu_ring_attention_fwd},
    {"ring_attention_bwd", cpu_ring_attention_bwd},
};

exec_op_fn exec_cpu_op(const char *name) {
    for (size_t i = 0; i < sizeof CPU_OPS / sizeof *CPU_OPS; i++)
        if (!strcmp(CPU_OPS[i].name, name)) return CPU_OPS[i].fn;
    return NULL;
}
