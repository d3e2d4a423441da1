/* ops_bf16.c — the cpu executor's ops on bf16 activation buffers (ops_bf16.h).
 *
 * Non-GEMM ops: each argument of an op is either split in units (rows for ops over N rows,
 * sequences for ops over B,T: a unit's element count is the growth of the registry's shape rule
 * from one unit to two) or taken whole (parameters, their gradients). The op runs over blocks of
 * units: an f32 argument is passed in place at the block's offset, a bf16 one through the fp32
 * scratch (loaded for inputs and for outputs the kernel accumulates into, stored back rounded).
 * Ops that write no whole (unsplit) output run their blocks in parallel, one scratch slice per
 * thread (the fp32 kernel then runs on one thread inside); the others run block after block with
 * the kernel's own threads (parameter gradients are summed in a fixed order either way). */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("O3")
#endif

#include "ops_bf16.h"

#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "attn_mod.h"
#include "gemm_bf16.h"
#include "ops_cpu.h"
#include "ops_flash.h"

#define MAXA (HYP_OP_MAX_IN + HYP_OP_MAX_OUT)
/* Floats of bf16 arguments one block holds: parallel blocks stay in the L2 cache; serial blocks
 * are larger (the kernel parallelizes inside). At least one unit. */
#define BLOCK_PAR 65536L
#define BLOCK_SER 1048576L

struct exec_lowp {
    uint16_t *wcopy;       /* [param_floats] bf16 copy of the parameter arena (stages 0-2), or NULL */
    unsigned char *wok;    /* [n_bufs] 1: wcopy holds parameter buffer b's current values */
    float *scratch;        /* [scratch_floats] fp32 blocks (all threads) */
    size_t scratch_floats;
    uint16_t *cvt[2];      /* [cvt_n] bf16 copies of f32 GEMM operands (stage 3 weights, f32 acts) */
    size_t cvt_n;
    int nthreads;
};

/* ---- per-op descriptions ------------------------------------------------------------------ */
typedef struct {
    int n;                      /* arguments: inputs then outputs */
    int nin;
    void *base[MAXA];           /* the executor's pointer (NULL: absent) */
    int dt[MAXA];               /* hyp_dtype of its buffer */
    long per[MAXA];             /* elements per unit; 0: whole */
    long whole[MAXA];           /* elements of a whole argument (bf16 ones go through scratch) */
    int load[MAXA];             /* 1: its values are read (inputs, accumulated outputs) */
    float *p[MAXA];             /* this block's fp32 view */
    const int32_t *tok[MAXA];   /* this block's token ids (i32 arguments) */
    const float *row_scale;     /* the executor's per-row loss weights (exec_t.row_scale), or NULL */
    long u0;                    /* this block's first unit */
} lp_args;

typedef void (*lp_call)(const plan_op *o, const exec_dims *d, lp_args *a, int units, float dloss);

typedef struct {
    const char *name;
    lp_call call;
    int seq;          /* units are sequences (ops over B, T), else rows */
    unsigned keep;    /* outputs (bit i = output i) the kernel overwrites without reading */
} lp_op;

static int64_t bind(const exec_t *x, int64_t v) {
    return v == DIM_B ? x->B : v == DIM_T ? x->T : v == DIM_N ? (int64_t)x->B * x->T : v;
}

/* ---- the kernels on a block ------------------------------------------------------------- */
#define IN(i) (a->p[i])
#define OUT(i) (a->p[a->nin + (i)])
#define TOK(i) (a->tok[i])
#define CALL(fn) static void fn(const plan_op *o, const exec_dims *d, lp_args *a, int u, float dloss)
#define UNUSED (void)o, (void)d, (void)a, (void)u, (void)dloss
#define ROWC ((long)u * (o->C ? o->C : 1))

CALL(k_embedding_fwd) { UNUSED; op_embedding_fwd_pos(OUT(0), TOK(0), IN(1), IN(2), TOK(3), u, d->T, (int)o->C); }
CALL(k_embedding_bwd) { UNUSED; op_embedding_bwd_pos(OUT(0), OUT(1), IN(0), TOK(1), TOK(2), u, d->T, (int)o->C, (int)o->V); }
CALL(k_layernorm_fwd) { UNUSED; op_layernorm_fwd(OUT(0), OUT(1), OUT(2), IN(0), IN(1), IN(2), u, (int)o->C, o->eps); }
CALL(k_layernorm_bwd) {
    UNUSED;
    op_layernorm_bwd(OUT(0), OUT(1), OUT(2), IN(0), IN(1), IN(2), IN(3), IN(4), u, (int)o->C);
}
CALL(k_rmsnorm_fwd) { UNUSED; op_rmsnorm_fwd(OUT(0), OUT(1), IN(0), IN(1), u, (int)o->C, o->eps); }
CALL(k_rmsnorm_bwd) { UNUSED; op_rmsnorm_bwd(OUT(0), OUT(1), IN(0), IN(1), IN(2), IN(3), u, (int)o->C); }
CALL(k_qknorm_fwd) {
    UNUSED;
    op_qknorm_fwd(OUT(0), OUT(1), IN(0), IN(1), IN(2), u, (int)o->NH, (int)o->NKV, (int)o->hd, o->eps);
}
CALL(k_qknorm_bwd) {
    UNUSED;
    op_qknorm_bwd(OUT(0), OUT(1), OUT(2), IN(0), IN(1), IN(2), IN(3), IN(4), u, (int)o->NH, (int)o->NKV, (int)o->hd);
}
CALL(k_rope_fwd) { UNUSED; op_rope_fwd_pos(OUT(0), IN(0), TOK(1), u, d->T, (int)o->NH, (int)o->NKV, (int)o->hd, o->theta); }
CALL(k_rope_bwd) { UNUSED; op_rope_bwd_pos(OUT(0), IN(0), TOK(1), u, d->T, (int)o->NH, (int)o->NKV, (int)o->hd, o->theta); }
CALL(k_attention_fwd) {
    UNUSED;
    hyp_attn_mod md = HYP_ATTN_MOD_OF(o);
    op_attention_fwd_mod(OUT(0), OUT(1), IN(0), TOK(1), u, d->T, (int)o->NH, (int)o->NKV, (int)o->hd, o->scale, &md);
}
CALL(k_attention_bwd) {
    UNUSED;
    hyp_attn_mod md = HYP_ATTN_MOD_OF(o);
    op_attention_bwd_mod(OUT(0), OUT(1), IN(0), IN(1), IN(2), TOK(3), u, d->T, (int)o->NH, (int)o->NKV, (int)o->hd, o->scale, &md);
}
CALL(k_flash_fwd) {
    UNUSED;
    hyp_attn_mod md = HYP_ATTN_MOD_OF(o);
    op_flash_attention_fwd_mod(OUT(0), OUT(1), IN(0), TOK(1), u, d->T, (int)o->NH, (int)o->NKV, (int)o->hd, o->scale, &md, NULL);
}
CALL(k_flash_bwd) {
    UNUSED;
    hyp_attn_mod md = HYP_ATTN_MOD_OF(o);
    op_flash_attention_bwd_mod(OUT(0), OUT(1), IN(0), IN(1), IN(2), IN(3), TOK(4), u, d->T, (int)o->NH, (int)o->NKV, (int)o->hd, o->scale, &md);
}
CALL(k_gelu_fwd) { UNUSED; op_gelu_fwd(OUT(0), IN(0), ROWC); }
CALL(k_gelu_bwd) { UNUSED; op_gelu_bwd(OUT(0), IN(1), IN(0), ROWC); }
CALL(k_swiglu_fwd) { UNUSED; op_swiglu_fwd(OUT(0), IN(0), u, (int)o->H); }
CALL(k_swiglu_bwd) { UNUSED; op_swiglu_bwd(OUT(0), IN(0), IN(1), u, (int)o->H); }
CALL(k_add_fwd) {
    UNUSED;
    if (o->alpha > 0.0f) op_add_scaled_fwd(OUT(0), IN(0), IN(1), o->alpha, ROWC);
    else op_add_fwd(OUT(0), IN(0), IN(1), ROWC);
}
CALL(k_accumulate) {
    UNUSED;
    if (o->alpha > 0.0f) op_accumulate_scaled(OUT(0), IN(0), o->alpha, ROWC);
    else op_accumulate(OUT(0), IN(0), ROWC);
}
CALL(k_crossentropy) { UNUSED; op_crossentropy_fwd(OUT(0), IN(0), TOK(1), u, (int)o->V, (int)o->Vp); }
CALL(k_crossentropy_fused) {
    UNUSED;
    op_crossentropy_fused(OUT(0), OUT(1), TOK(0), dloss, u, (int)o->V, (int)o->Vp);
    if (a->row_scale) /* per-token loss weights (preference objectives, GRPO), as the fp32 adapter: rows are units */
        for (int n = 0; n < u; n++)
            for (int i = 0; i < (int)o->Vp; i++) OUT(1)[(long)n * o->Vp + i] *= a->row_scale[a->u0 + n];
}
CALL(k_round_bf16) { UNUSED; op_round_bf16(OUT(0), IN(0), ROWC); }

static const lp_op LP_OPS[] = {
    {"embedding_fwd", k_embedding_fwd, 1, 1u},
    {"embedding_bwd", k_embedding_bwd, 1, 0},
    {"layernorm_fwd", k_layernorm_fwd, 0, 7u},
    {"layernorm_bwd", k_layernorm_bwd, 0, 0},
    {"rmsnorm_fwd", k_rmsnorm_fwd, 0, 3u},
    {"rmsnorm_bwd", k_rmsnorm_bwd, 0, 0},
    {"qknorm_fwd", k_qknorm_fwd, 0, 3u},
    {"qknorm_bwd", k_qknorm_bwd, 0, 0},
    {"rope_fwd", k_rope_fwd, 1, 1u},
    {"rope_bwd", k_rope_bwd, 1, 0},
    {"attention_fwd", k_attention_fwd, 1, 3u},
    {"attention_bwd", k_attention_bwd, 1, 2u},   /* datt: scratch, overwritten */
    {"flash_attention_fwd", k_flash_fwd, 1, 3u},
    {"flash_attention_bwd", k_flash_bwd, 1, 2u}, /* scratch, overwritten */
    {"gelu_fwd", k_gelu_fwd, 0, 1u},
    {"gelu_bwd", k_gelu_bwd, 0, 0},
    {"swiglu_fwd", k_swiglu_fwd, 0, 1u},
    {"swiglu_bwd", k_swiglu_bwd, 0, 0},
    {"add_fwd", k_add_fwd, 0, 1u},
    {"accumulate", k_accumulate, 0, 0},
    {"crossentropy", k_crossentropy, 0, 1u},
    {"crossentropy_fused", k_crossentropy_fused, 0, 1u}, /* losses overwritten; logits read and rewritten */
    {"round_bf16", k_round_bf16, 0, 1u},
};
#define N_LP (int)(sizeof LP_OPS / sizeof *LP_OPS)

static const lp_op *lp_find(int op) {
    const char *name = hyp_op_name(op);
    for (int i = 0; i < N_LP; i++)
        if (!strcmp(LP_OPS[i].name, name)) return &LP_OPS[i];
    return NULL;
}

/* The units of op o at the bound batch, and each argument's split (a->per, a->whole). */
static long describe(const exec_t *x, const plan_op *o, const lp_op *L, float *const *I, float *const *O, lp_args *a) {
    const plan_t *p = x->p;
    const hyp_op_desc *D = hyp_op_get(o->op);
    int64_t T = x->T, B = x->B;
    memset(a, 0, sizeof *a);
    a->nin = o->nin, a->n = o->nin + o->nout;
    long units = L->seq ? B : B * T;
    for (int k = 0; k < a->n; k++) {
        int out = k >= o->nin, i = out ? k - o->nin : k, idx = out ? o->out[i] : o->in[i];
        a->base[k] = idx < 0 ? NULL : out ? (void *)O[i] : (void *)I[i];
        a->dt[k] = idx < 0 ? HYP_DT_F32 : (int)p->bufs[idx].dtype;
        if (idx >= 0 && p->bufs[idx].kind == BUF_TOKENS) /* the executor's token arrays */
            a->base[k] = idx == p->targets_buf ? (void *)x->targets : idx == p->positions_buf ? (void *)x->positions : (void *)x->tokens;
        int arg = out ? 100 + i : i;
        int64_t n1 = L->seq ? D->need(o, arg, 1, T, p->V) : D->need(o, arg, 1, 1, p->V);
        int64_t n2 = L->seq ? D->need(o, arg, 2, T, p->V) : D->need(o, arg, 1, 2, p->V);
        a->per[k] = (long)(n2 - n1);
        a->whole[k] = (long)D->need(o, arg, B, T, p->V);
        a->load[k] = !out || !((L->keep >> i) & 1u);
    }
    /* an op whose rows or sequences are no symbol (a literal n): one unit, every argument whole */
    {
        int64_t cnt = 0;
        for (int k = 0; k < a->n; k++)
            if (a->per[k] > 0 && a->base[k]) cnt = a->whole[k] / a->per[k];
        if (cnt != units) {
            for (int k = 0; k < a->n; k++) a->per[k] = 0;
            units = 1;
        }
    }
    return units;
}

/* fp32 floats of one block of bu units (split bf16 arguments), and of the whole bf16 ones. */
static long block_floats(const lp_args *a, long bu, long *whole) {
    long f = 0;
    *whole = 0;
    for (int k = 0; k < a->n; k++) {
        if (!a->base[k] || a->dt[k] != HYP_DT_BF16) continue;
        if (a->per[k] > 0) f += a->per[k] * bu;
        else *whole += a->whole[k];
    }
    return f;
}

/* Whether the op writes an output that is not split (a parameter gradient, a whole buffer):
 * then its blocks run one after the other. */
static int serial(const lp_args *a) {
    for (int k = a->nin; k < a->n; k++)
        if (a->base[k] && a->per[k] == 0) return 1;
    return 0;
}

/* Units per block, and the scratch floats the op needs with nthreads threads. */
static long plan_blocks(const lp_args *a, long units, int nthreads, long *need) {
    long w, per = block_floats(a, 1, &w);
    int ser = serial(a);
    long cap = ser ? BLOCK_SER : BLOCK_PAR;
    long bu = per > 0 ? cap / per : units;
    if (bu < 1) bu = 1;
    if (bu > units) bu = units;
    if (!ser && nthreads > 1 && bu * nthreads > units) { /* every thread gets blocks */
        bu = (units + nthreads - 1) / nthreads;
        if (bu < 1) bu = 1;
    }
    *need = (ser ? 1 : nthreads) * block_floats(a, bu, &w) + w;
    return bu;
}

static void load_bf16(float *dst, const uint16_t *src, long n) {
    uint32_t *d = (uint32_t *)(void *)dst;
#pragma omp simd
    for (long i = 0; i < n; i++) d[i] = (uint32_t)src[i] << 16;
}

static void store_bf16(uint16_t *dst, const float *src, long n) {
    const uint32_t *s = (const uint32_t *)(const void *)src;
#pragma omp simd
    for (long i = 0; i < n; i++) {
        uint32_t u = s[i];
        uint32_t r = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
        dst[i] = (uint16_t)(((u & 0x7f800000u) == 0x7f800000u && (u & 0x007fffffu)) ? ((u | 0x00400000u) >> 16) : r);
    }
}

/* Runs units [u0, u0+n) with fp32 scratch sc (the block's bf16 split arguments). */
static void run_block(const plan_op *o, const exec_dims *d, const lp_op *L, lp_args a, long u0, long n, float *sc,
                      float dloss) {
    float *s = sc;
    a.u0 = u0;
    for (int k = 0; k < a.n; k++) {
        if (!a.base[k] || a.per[k] == 0) continue; /* whole ones are set by the caller */
        long off = u0 * a.per[k], cnt = n * a.per[k];
        if (a.dt[k] == HYP_DT_I32) a.tok[k] = (const int32_t *)a.base[k] + off;
        else if (a.dt[k] == HYP_DT_F32) a.p[k] = (float *)a.base[k] + off;
        else {
            a.p[k] = s;
            if (a.load[k]) load_bf16(s, (const uint16_t *)a.base[k] + off, cnt);
            s += cnt;
        }
    }
    exec_dims db = *d;
    db.B = L->seq ? (int)n : d->B;
    db.N = L->seq ? (int)n * d->T : (int)n;
    L->call(o, &db, &a, (int)n, dloss);
    for (int k = a.nin; k < a.n; k++)
        if (a.base[k] && a.per[k] > 0 && a.dt[k] == HYP_DT_BF16)
            store_bf16((uint16_t *)a.base[k] + u0 * a.per[k], a.p[k], n * a.per[k]);
}

static void lp_generic(exec_t *x, const plan_op *o, float *const *I, float *const *O, const exec_dims *d, float dloss) {
    const lp_op *L = lp_find(o->op);
    lp_args a;
    long units = describe(x, o, L, I, O, &a), need;
    a.row_scale = x->row_scale;
    int nt = x->lowp->nthreads;
    long bu = plan_blocks(&a, units, nt, &need);
    if ((size_t)need > x->lowp->scratch_floats) return; /* exec_lowp_init sized it for the maximum batch */
    /* whole arguments: f32 in place, bf16 through the scratch's tail */
    long w;
    block_floats(&a, bu, &w);
    float *tail = x->lowp->scratch + (need - w);
    for (int k = 0; k < a.n; k++) {
        if (!a.base[k] || a.per[k] > 0) continue;
        if (a.dt[k] == HYP_DT_I32) a.tok[k] = a.base[k];
        else if (a.dt[k] == HYP_DT_F32) a.p[k] = a.base[k];
        else {
            a.p[k] = tail;
            if (a.load[k]) cpu_bf16_to_f32(tail, a.base[k], a.whole[k]);
            tail += a.whole[k];
        }
    }
    long nblk = (units + bu - 1) / bu;
    if (serial(&a)) {
        for (long b = 0; b < nblk; b++)
            run_block(o, d, L, a, b * bu, units - b * bu < bu ? units - b * bu : bu, x->lowp->scratch, dloss);
    } else {
        long slice = block_floats(&a, bu, &w);
#pragma omp parallel for schedule(dynamic, 1) num_threads(nt) if (nblk > 1)
        for (long b = 0; b < nblk; b++)
            run_block(o, d, L, a, b * bu, units - b * bu < bu ? units - b * bu : bu,
                      x->lowp->scratch + slice * omp_get_thread_num(), dloss);
    }
    for (int k = a.nin; k < a.n; k++)
        if (a.base[k] && a.per[k] == 0 && a.dt[k] == HYP_DT_BF16) cpu_f32_to_bf16(a.base[k], a.p[k], a.whole[k]);
}

/* zero: a memset of the buffer's bytes (bf16 0 is all-zero bits too). */
static void lp_zero(exec_t *x, const plan_op *o, float *const *I, float *const *O, const exec_dims *d, float dloss) {
    (void)I, (void)dloss;
    memset(O[0], 0, (size_t)d->n * hyp_dtype_size(x->p->bufs[o->out[0]].dtype));
}

/* ---- GEMMs ---------------------------------------------------------------------------- */

/* A bf16 view of GEMM operand buffer idx (its executor pointer ptr, n elements): the buffer
 * itself when bf16; a parameter's slice of the weight copy (converted on first use per step);
 * else converted into cvt slot `slot`. */
static const uint16_t *operand(exec_t *x, int idx, const float *ptr, long n, int slot) {
    const plan_buf *b = &x->p->bufs[idx];
    struct exec_lowp *l = x->lowp;
    if (b->dtype == HYP_DT_BF16) return (const uint16_t *)(const void *)ptr;
    if (b->kind == BUF_PARAM && l->wcopy && !(x->z3 && x->z3->L.buf_group[idx] >= 0)) {
        uint16_t *w = l->wcopy + b->offset;
        if (!l->wok[idx]) {
            cpu_f32_to_bf16(w, ptr, n);
            l->wok[idx] = 1;
        }
        return w;
    }
    if ((size_t)n > l->cvt_n) return NULL;
    cpu_f32_to_bf16(l->cvt[slot], ptr, n);
    return l->cvt[slot];
}

static hyp_dtype dt_of(const exec_t *x, int idx) { return x->p->bufs[idx].dtype; }

static void lp_matmul_fwd(exec_t *x, const plan_op *o, float *const *I, float *const *O, const exec_dims *d, float dloss) {
    (void)dloss;
    int N = d->N, IC = (int)o->IC, OC = (int)o->OC;
    const uint16_t *A = operand(x, o->in[0], I[0], (long)N * IC, 0), *W = operand(x, o->in[1], I[1], (long)OC * IC, 1);
    if (!A || !W) return;
    /* out[N,OC] = inp[N,IC] @ w[OC,IC]^T (+ bias); a bf16 bias (v2161 bf16 parameters) is read
     * through the scratch, which GEMMs leave unused (exec_lowp_init sized it for OC) */
    const float *bias = I[2];
    if (bias && dt_of(x, o->in[2]) == HYP_DT_BF16) {
        if ((size_t)OC > x->lowp->scratch_floats) return;
        cpu_bf16_to_f32(x->lowp->scratch, (const uint16_t *)(const void *)I[2], OC);
        bias = x->lowp->scratch;
    }
    gemm_bf16("matmul_fwd", 0, 1, N, OC, IC, A, IC, W, IC, O[0], dt_of(x, o->out[0]), OC, 0, bias);
}

/* db[OC] += column sums of dout[N,OC] (bf16 or f32), fp32, rows in order per column block. */
static void colsum(float *db, const void *dout, int bf, int N, int OC) {
    enum { CB = 64 };
    int nblk = (OC + CB - 1) / CB;
#pragma omp parallel for schedule(static) if ((long)N * OC >= 32768L)
    for (int blk = 0; blk < nblk; blk++) {
        int o0 = blk * CB, len = OC - o0 < CB ? OC - o0 : CB;
        float acc[CB] = {0};
        for (int n = 0; n < N; n++) {
            if (bf) {
                const uint16_t *r = (const uint16_t *)dout + (long)n * OC + o0;
                for (int j = 0; j < len; j++) acc[j] += cpu_bf16_val(r[j]);
            } else {
                const float *r = (const float *)dout + (long)n * OC + o0;
                for (int j = 0; j < len; j++) acc[j] += r[j];
            }
        }
        for (int j = 0; j < len; j++) db[o0 + j] += acc[j];
    }
}

static void lp_matmul_bwd(exec_t *x, const plan_op *o, float *const *I, float *const *O, const exec_dims *d, float dloss) {
    (void)dloss;
    int N = d->N, IC = (int)o->IC, OC = (int)o->OC;
    const uint16_t *G = operand(x, o->in[0], I[0], (long)N * OC, 0);
    if (!G) return;
    if (O[0]) { /* dinp[N,IC] += dout[N,OC] @ w[OC,IC] */
        const uint16_t *W = operand(x, o->in[2], I[2], (long)OC * IC, 1);
        if (W) gemm_bf16("matmul_bwd (dinp)", 0, 0, N, IC, OC, G, OC, W, IC, O[0], dt_of(x, o->out[0]), IC, 1, NULL);
    }
    if (O[1]) { /* dw[OC,IC] += dout[N,OC]^T @ inp[N,IC] */
        const uint16_t *A = operand(x, o->in[1], I[1], (long)N * IC, 1);
        if (A) gemm_bf16("matmul_bwd (dweight)", 1, 0, OC, IC, N, G, OC, A, IC, O[1], dt_of(x, o->out[1]), IC, 1, NULL);
    }
    if (O[2]) colsum(O[2], I[0], dt_of(x, o->in[0]) == HYP_DT_BF16, N, OC);
}

exec_op_fn exec_lowp_op(const char *name) {
    if (!strcmp(name, "matmul_fwd")) return lp_matmul_fwd;
    if (!strcmp(name, "matmul_bwd")) return lp_matmul_bwd;
    if (!strcmp(name, "zero")) return lp_zero;
    for (int i = 0; i < N_LP; i++)
        if (!strcmp(LP_OPS[i].name, name)) return lp_generic;
    return NULL;
}

int exec_op_is_lowp(const exec_t *x, const plan_op *o) {
    for (int i = 0; i < o->nin; i++)
        if (o->in[i] >= 0 && x->p->bufs[o->in[i]].dtype == HYP_DT_BF16) return 1;
    for (int i = 0; i < o->nout; i++)
        if (o->out[i] >= 0 && x->p->bufs[o->out[i]].dtype == HYP_DT_BF16) return 1;
    return 0;
}

/* ---- setup ------------------------------------------------------------------------------ */

void exec_lowp_weights_changed(exec_t *x) {
    if (x->lowp && x->lowp->wok) memset(x->lowp->wok, 0, (size_t)x->p->n_bufs);
}

/* Scratch needs of one op at the plan's maximum batch (floats), and the GEMM conversion needs. */
static void op_needs(exec_t *x, const plan_op *o, long *floats, long *cvt) {
    *floats = 0;
    const char *name = hyp_op_name(o->op);
    const plan_t *p = x->p;
    if (!exec_op_is_lowp(x, o)) return;
    if (!strcmp(name, "matmul_fwd") || !strcmp(name, "matmul_bwd")) {
        /* operands that are neither bf16 buffers nor weights in the copy go through cvt */
        long N = (long)bind(x, o->N);
        int fwd = !strcmp(name, "matmul_fwd");
        long sizes[3] = {fwd ? N * o->IC : N * o->OC, fwd ? o->OC * o->IC : N * o->IC, o->OC * o->IC};
        for (int i = 0; i < (fwd ? 2 : 3); i++) {
            const plan_buf *b = &p->bufs[o->in[i]];
            int copied = b->kind == BUF_PARAM && !x->z3;
            if (b->dtype != HYP_DT_BF16 && !copied && sizes[i] > *cvt) *cvt = sizes[i];
        }
        if (fwd && o->nin > 2 && o->in[2] >= 0 && p->bufs[o->in[2]].dtype == HYP_DT_BF16) *floats = o->OC; /* bf16 bias */
        return;
    }
    const lp_op *L = lp_find(o->op);
    if (!L) return;
    float *I[HYP_OP_MAX_IN] = {0}, *O[HYP_OP_MAX_OUT] = {0};
    static float present; /* describe() needs to know which arguments exist, not where they are */
    for (int i = 0; i < o->nin; i++) I[i] = o->in[i] >= 0 ? &present : NULL;
    for (int i = 0; i < o->nout; i++) O[i] = o->out[i] >= 0 ? &present : NULL;
    lp_args a;
    long units = describe(x, o, L, I, O, &a);
    plan_blocks(&a, units, x->lowp->nthreads, floats);
}

int exec_lowp_init(exec_t *x, hyp_err *e) {
    const plan_t *p = x->p;
    int any = 0;
    for (int b = 0; b < p->n_bufs; b++) any |= (p->bufs[b].kind == BUF_ACT || p->bufs[b].kind == BUF_PARAM) && p->bufs[b].dtype != HYP_DT_F32;
    if (!any || x->lowp) return HYP_OK;
    struct exec_lowp *l = x->lowp = calloc(1, sizeof *l);
    if (!l) return hyp_fail(e, HYP_EFAIL, "out of memory");
    l->nthreads = omp_get_max_threads();
    int B = x->B, T = x->T;
    x->B = p->B, x->T = p->T; /* size for the maximum batch */
    long need = 0, cvt = 0;
    for (int pass = 0; pass < 3; pass++) {
        const plan_op *list = pass == 0 ? p->fwd : pass == 1 ? p->bwd : &p->loss;
        int n = pass == 0 ? p->n_fwd : pass == 1 ? p->n_bwd : 1;
        for (int i = 0; i < n; i++) {
            long f = 0;
            op_needs(x, &list[i], &f, &cvt);
            if (f > need) need = f;
        }
    }
    x->B = B, x->T = T;
    /* GEMM operands that are not bf16 buffers: f32 activations (mixed plans) and stage-3 weights;
     * with a weight copy only activations can need it, so size for whatever the ops asked */
    l->scratch_floats = (size_t)need;
    l->cvt_n = (size_t)cvt;
    size_t bytes = 0;
    int ok = 1;
    if (need > 0) ok &= (l->scratch = aligned_alloc(64, ((size_t)need * 4 + 63) & ~(size_t)63)) != NULL, bytes += (size_t)need * 4;
    for (int s = 0; s < 2 && cvt > 0; s++)
        ok &= (l->cvt[s] = aligned_alloc(64, ((size_t)cvt * 2 + 63) & ~(size_t)63)) != NULL, bytes += (size_t)cvt * 2;
    if (!x->z3 && !p->param_bf16) { /* v2161 bf16 parameters are read in place: no copy */
        ok &= (l->wcopy = aligned_alloc(64, ((size_t)p->param_floats * 2 + 63) & ~(size_t)63)) != NULL;
        ok &= (l->wok = calloc((size_t)p->n_bufs, 1)) != NULL;
        bytes += (size_t)p->param_floats * 2;
    }
    if (!ok) {
        exec_lowp_free(x);
        return hyp_fail(e, HYP_EFAIL, "out of memory for the bf16 weight copy and conversion scratch (%.1f MiB)", bytes / 1048576.0);
    }
    x->bytes += bytes;
    return HYP_OK;
}

size_t exec_lowp_weight_bytes(const exec_t *x) {
    return x->lowp && x->lowp->wcopy ? (size_t)x->p->param_floats * 2 : 0;
}

size_t exec_lowp_scratch_bytes(const exec_t *x) {
    return x->lowp ? x->lowp->scratch_floats * 4 + (x->lowp->cvt[0] ? 2 * x->lowp->cvt_n * 2 : 0) : 0;
}

void exec_lowp_free(exec_t *x) {
    struct exec_lowp *l = x->lowp;
    if (!l) return;
    free(l->wcopy), free(l->wok), free(l->scratch), free(l->cvt[0]), free(l->cvt[1]);
    free(l);
    x->lowp = NULL;
}
