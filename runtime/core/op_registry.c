/* op_registry.c — the descriptors of the plan's ops (op_registry.h): for each, its signature,
 * attributes, flags, device family and the shape rule plan.c checks every buffer against (how many
 * elements each argument needs at the planned maximum batch). Pure data and arithmetic: nothing
 * here allocates, runs an op or knows a backend. */
#include "op_registry.h"
#include "moe_layout.h"

#include <stdio.h>
#include <string.h>

/* A dim attribute bound at batch B, sequence T (symbols DIM_B, DIM_T, DIM_N = B*T). */
static int64_t bd(int64_t v, int64_t B, int64_t T) {
    return v == DIM_B ? B : v == DIM_T ? T : v == DIM_N ? B * T : v;
}

static int64_t qkv_width(const plan_op *o) { return (o->NH + 2 * o->NKV) * o->hd; }

/* Shape rules, one per op family; arg: inputs 0.., outputs 100.. (the signature's order). */

static int64_t need_embedding_fwd(const plan_op *o, int arg, int64_t B, int64_t T, int64_t V) {
    int64_t b = bd(o->B, B, T), t = bd(o->T, B, T);
    return (arg == 0 || arg == 3) ? b * t : arg == 1 ? V * o->C : arg == 2 ? t * o->C : b * t * o->C;
}

static int64_t need_embedding_bwd(const plan_op *o, int arg, int64_t B, int64_t T, int64_t V) {
    (void)V;
    int64_t b = bd(o->B, B, T), t = bd(o->T, B, T);
    return arg == 0 ? b * t * o->C : (arg == 1 || arg == 2) ? b * t : arg == 100 ? o->V * o->C : t * o->C;
}

static int64_t need_layernorm_fwd(const plan_op *o, int arg, int64_t B, int64_t T, int64_t V) {
    (void)V;
    int64_t N = bd(o->N, B, T);
    return (arg == 0 || arg == 100) ? N * o->C : (arg == 1 || arg == 2) ? o->C : N;
}

static int64_t need_layernorm_bwd(const plan_op *o, int arg, int64_t B, int64_t T, int64_t V) {
    (void)V;
    int64_t N = bd(o->N, B, T);
    return (arg <= 1 || arg == 100) ? N * o->C : (arg == 2 || arg >= 101) ? o->C : N;
}

static int64_t need_rmsnorm_fwd(const plan_op *o, int arg, int64_t B, int64_t T, int64_t V) {
    (void)V;
    int64_t N = bd(o->N, B, T);
    return (arg == 0 || arg == 100) ? N * o->C : arg == 1 ? o->C : N;
}

static int64_t need_rmsnorm_bwd(const plan_op *o, int arg, int64_t B, int64_t T, int64_t V) {
    (void)V;
    int64_t N = bd(o->N, B, T);
    return (arg <= 1 || arg == 100) ? N * o->C : (arg == 2 || arg == 101) ? o->C : N;
}

static int64_t need_matmul_fwd(const plan_op *o, int arg, int64_t B, int64_t T, int64_t V) {
    (void)V;
    int64_t N = bd(o->N, B, T);
    return arg == 0 ? N * o->IC : arg == 1 ? o->OC * o->IC : arg == 2 ? o->OC : N * o->OC;
}

static int64_t need_matmul_bwd(const plan_op *o, int arg, int64_t B, int64_t T, int64_t V) {
    (void)V;
    int64_t N = bd(o->N, B, T);
    return arg == 0 ? N * o->OC
           : arg == 1 || arg == 100 ? N * o->IC
           : arg == 2 || arg == 101 ? o->OC * o->IC
                                    : o->OC;
}

static int64_t need_qknorm_fwd(const plan_op *o, int arg, int64_t B, int64_t T, int64_t V) {
    (void)V;
    int64_t N = bd(o->N, B, T);
    return (arg == 0 || arg == 100) ? N * qkv_width(o) : (arg == 1 || arg == 2) ? o->hd : N * (o->NH + o->NKV);
}

static int64_t need_qknorm_bwd(const plan_op *o, int arg, int64_t B, int64_t T, int64_t V) {
    (void)V;
    int64_t N = bd(o->N, B, T);
    return (arg <= 1 || arg == 100) ? N * qkv_width(o)
           : (arg == 2 || arg == 3 || arg >= 101) ? o->hd
                                                   : N * (o->NH + o->NKV);
}

static int64_t need_rope(const plan_op *o, int arg, int64_t B, int64_t T, int64_t V) {
    (void)V;
    return bd(o->B, B, T) * bd(o->T, B, T) * (arg == 1 ? 1 : qkv_width(o));
}

static int64_t need_attention_fwd(const plan_op *o, int arg, int64_t B, int64_t T, int64_t V) {
    (void)V;
    int64_t b = bd(o->B, B, T), t = bd(o->T, B, T);
    return arg == 0 ? b * t * qkv_width(o) : arg == 1 ? b * t : arg == 100 ? b * t * o->NH * o->hd : b * o->NH * t * t;
}

static int64_t need_attention_bwd(const plan_op *o, int arg, int64_t B, int64_t T, int64_t V) {
    (void)V;
    int64_t b = bd(o->B, B, T), t = bd(o->T, B, T);
    return arg == 0 ? b * t * o->NH * o->hd : (arg == 1 || arg == 100) ? b * t * qkv_width(o) : arg == 3 ? b * t : b * o->NH * t * t;
}

/* qkv -> out, lse [B,NH,T] */
static int64_t need_flash_fwd(const plan_op *o, int arg, int64_t B, int64_t T, int64_t V) {
    (void)V;
    int64_t b = bd(o->B, B, T), t = bd(o->T, B, T);
    return arg == 0 ? b * t * qkv_width(o) : arg == 1 ? b * t : arg == 100 ? b * t * o->NH * o->hd : b * o->NH * t;
}

/* dout, qkv, out, lse -> dqkv, scratch [B,NH,T] */
static int64_t need_flash_bwd(const plan_op *o, int arg, int64_t B, int64_t T, int64_t V) {
    (void)V;
    int64_t b = bd(o->B, B, T), t = bd(o->T, B, T);
    return (arg == 0 || arg == 2) ? b * t * o->NH * o->hd : (arg == 1 || arg == 100) ? b * t * qkv_width(o) : arg == 4 ? b * t : b * o->NH * t;
}

/* n rows of C (C absent: 1) */
static int64_t need_rows(const plan_op *o, int arg, int64_t B, int64_t T, int64_t V) {
    (void)arg, (void)V;
    return bd(o->n, B, T) * (o->C ? o->C : 1);
}

/* v2106 allreduce_tp: x and out are the same [n, C] rows (in place), b the bias row added after the sum */
static int64_t need_allreduce_tp(const plan_op *o, int arg, int64_t B, int64_t T, int64_t V) {
    (void)V;
    return arg == 1 ? o->C : bd(o->n, B, T) * o->C;
}

static int64_t need_swiglu_fwd(const plan_op *o, int arg, int64_t B, int64_t T, int64_t V) {
    (void)V;
    int64_t N = bd(o->N, B, T);
    return arg == 0 ? N * 2 * o->H : N * o->H;
}

static int64_t need_swiglu_bwd(const plan_op *o, int arg, int64_t B, int64_t T, int64_t V) {
    (void)V;
    int64_t N = bd(o->N, B, T);
    return arg == 0 ? N * o->H : N * 2 * o->H;
}

static int64_t need_crossentropy(const plan_op *o, int arg, int64_t B, int64_t T, int64_t V) {
    (void)V;
    int64_t N = bd(o->N, B, T);
    return arg == 0 ? N * o->Vp : N;
}

static int64_t need_crossentropy_fused(const plan_op *o, int arg, int64_t B, int64_t T, int64_t V) {
    (void)V;
    int64_t N = bd(o->N, B, T);
    return arg == 101 ? N * o->Vp : N;
}

/* dout [N,OC], w [OC,IC] -> dx [N,IC] (int8 input-gradient GEMM) */
static int64_t need_matmul_dgrad(const plan_op *o, int arg, int64_t B, int64_t T, int64_t V) {
    (void)V;
    int64_t N = bd(o->N, B, T);
    return arg == 0 ? N * o->OC : arg == 1 ? o->OC * o->IC : N * o->IC;
}

/* moe_fwd: x [N,C], router [E,C], experts [E x 2H x C | E x C x H | 2Hs x C | C x Hs] -> out [N,C], state, scratch
 * (core/moe_layout.h) */
static int64_t need_moe_fwd(const plan_op *o, int arg, int64_t B, int64_t T, int64_t V) {
    (void)V;
    int64_t N = bd(o->N, B, T);
    return (arg == 0 || arg == 100) ? N * o->C
           : arg == 1              ? o->E * o->C
           : arg == 2              ? (o->E * 3 * o->H + 3 * o->Hs) * o->C
           : arg == 3              ? o->E /* the aux-loss-free selection bias */
           : arg == 101            ? moe_state_floats(N, o->E, o->K)
                                   : moe_scratch_floats_sh(N, o->C, o->H, o->E, o->K, o->Hs);
}

/* moe_bwd: dout, x, router, experts, state -> dx, drouter, dexperts, scratch */
static int64_t need_moe_bwd(const plan_op *o, int arg, int64_t B, int64_t T, int64_t V) {
    (void)V;
    int64_t N = bd(o->N, B, T);
    return (arg <= 1 || arg == 100) ? N * o->C
           : (arg == 2 || arg == 101) ? o->E * o->C
           : (arg == 3 || arg == 102) ? (o->E * 3 * o->H + 3 * o->Hs) * o->C
           : arg == 4                 ? moe_state_floats(N, o->E, o->K)
                                      : moe_scratch_floats_sh(N, o->C, o->H, o->E, o->K, o->Hs);
}

/* Activation arguments take f32 or bf16 buffers (v2102 bf16 storage: the cpu executor converts
 * at the op's boundary, cpu/ops_bf16.c); parameters, their gradients, norm statistics, the
 * attention log-sum-exp, the per-token losses and fp8 operands are f32 only. */
static const hyp_op_desc OPS[] = {
    {"embedding_fwd", "tokens:i32 wte wpe? positions:i32? -> out:f32|bf16", "B T C", need_embedding_fwd, 0, HYP_OPDEV_KERNELS},
    {"embedding_bwd", "dout:f32|bf16 tokens:i32 positions:i32? -> dwte dwpe?", "B T C V", need_embedding_bwd, 0, HYP_OPDEV_KERNELS},
    {"layernorm_fwd", "x:f32|bf16 w b? -> out:f32|bf16 mean rstd", "N C eps", need_layernorm_fwd, 0, HYP_OPDEV_KERNELS},
    {"layernorm_bwd", "dout:f32|bf16 x:f32|bf16 w mean rstd -> dx:f32|bf16 dw db?", "N C", need_layernorm_bwd, 0, HYP_OPDEV_KERNELS},
    {"rmsnorm_fwd", "x:f32|bf16 w -> out:f32|bf16 rstd", "N C eps", need_rmsnorm_fwd, 0, HYP_OPDEV_KERNELS},
    {"rmsnorm_bwd", "dout:f32|bf16 x:f32|bf16 w rstd -> dx:f32|bf16 dw", "N C", need_rmsnorm_bwd, 0, HYP_OPDEV_KERNELS},
    {"matmul_fwd", "x:f32|bf16 w b? -> out:f32|bf16", "N IC OC epilogue?", need_matmul_fwd, 0, HYP_OPDEV_GEMM_FWD},
    {"matmul_bwd", "dout:f32|bf16 x:f32|bf16 w -> dx:f32|bf16? dw db?", "N IC OC epilogue?", need_matmul_bwd, 0, HYP_OPDEV_GEMM_BWD},
    {"qknorm_fwd", "qkv:f32|bf16 qw kw -> out:f32|bf16 rstd", "N NH NKV hd eps", need_qknorm_fwd, 0, HYP_OPDEV_KERNELS},
    {"qknorm_bwd", "dout:f32|bf16 qkv:f32|bf16 qw kw rstd -> dqkv:f32|bf16 dqw dkw", "N NH NKV hd", need_qknorm_bwd, 0, HYP_OPDEV_KERNELS},
    {"rope_fwd", "qkv:f32|bf16 positions:i32? -> out:f32|bf16", "B T NH NKV hd theta", need_rope, 0, HYP_OPDEV_KERNELS},
    {"rope_bwd", "dout:f32|bf16 positions:i32? -> dqkv:f32|bf16", "B T NH NKV hd theta", need_rope, 0, HYP_OPDEV_KERNELS},
    {"attention_fwd", "qkv:f32|bf16 positions:i32? -> out:f32|bf16 att:f32|bf16", "B T NH NKV hd scale? mask? window? prefix? score_mod? softcap?", need_attention_fwd, 0, HYP_OPDEV_KERNELS},
    {"attention_bwd", "dout:f32|bf16 qkv:f32|bf16 att:f32|bf16 positions:i32? -> dqkv:f32|bf16 datt:f32|bf16", "B T NH NKV hd scale? mask? window? prefix? score_mod? softcap?", need_attention_bwd, 0, HYP_OPDEV_KERNELS},
    /* v2108 ring attention (cpu/ops_ring.c): flash attention's arguments over the rank's T/cp
     * tokens; the cp degree and layout are the plan's train.cp */
    {"ring_attention_fwd", "qkv positions:i32? -> out lse", "B T NH NKV hd scale? mask? window? prefix? score_mod? softcap?", need_flash_fwd, 0, HYP_OPDEV_KERNELS},
    {"ring_attention_bwd", "dout qkv out lse positions:i32? -> dqkv scratch", "B T NH NKV hd scale? mask? window? prefix? score_mod? softcap?", need_flash_bwd, 0, HYP_OPDEV_KERNELS},
    {"flash_attention_fwd", "qkv:f32|bf16 positions:i32? -> out:f32|bf16 lse", "B T NH NKV hd scale? mask? window? prefix? score_mod? softcap?", need_flash_fwd, 0, HYP_OPDEV_KERNELS},
    {"flash_attention_bwd", "dout:f32|bf16 qkv:f32|bf16 out:f32|bf16 lse positions:i32? -> dqkv:f32|bf16 scratch", "B T NH NKV hd scale? mask? window? prefix? score_mod? softcap?", need_flash_bwd, 0, HYP_OPDEV_KERNELS},
    {"gelu_fwd", "x:f32|bf16 -> out:f32|bf16", "n C", need_rows, 0, HYP_OPDEV_KERNELS},
    {"gelu_bwd", "dout:f32|bf16 x:f32|bf16 -> dx:f32|bf16", "n C", need_rows, 0, HYP_OPDEV_KERNELS},
    {"swiglu_fwd", "x:f32|bf16 -> out:f32|bf16", "N H", need_swiglu_fwd, 0, HYP_OPDEV_KERNELS},
    {"swiglu_bwd", "dout:f32|bf16 x:f32|bf16 -> dx:f32|bf16", "N H", need_swiglu_bwd, 0, HYP_OPDEV_KERNELS},
    {"add_fwd", "a:f32|bf16 b:f32|bf16 -> out:f32|bf16", "n C alpha?", need_rows, 0, HYP_OPDEV_KERNELS},
    {"accumulate", "x:f32|bf16 -> acc:f32|bf16", "n C alpha?", need_rows, 0, HYP_OPDEV_KERNELS},
    {"zero", "-> out:f32|bf16", "n C?", need_rows, 0, HYP_OPDEV_ZERO},
    {"crossentropy", "logits:f32|bf16 targets:i32 -> losses", "N V Vp", need_crossentropy, HYP_OPF_LOSS, HYP_OPDEV_KERNELS},
    {"crossentropy_fused", "targets:i32 -> losses logits:f32|bf16", "N V Vp", need_crossentropy_fused, HYP_OPF_WRITES_LOSSES,
     HYP_OPDEV_KERNELS},
    {"fp8_quantize", "x -> q", "n C? slot", need_rows, HYP_OPF_FP8_SLOT, HYP_OPDEV_KERNELS},
    {"round_bf16", "x:f32|bf16 -> out:f32|bf16", "n C?", need_rows, 0, HYP_OPDEV_KERNELS},
    {"round_fp16", "x -> out", "n C?", need_rows, 0, HYP_OPDEV_KERNELS},
    {"fake_quant", "x -> q", "n C bits group", need_rows, 0, HYP_OPDEV_KERNELS},
    {"int8_matmul_fwd", "x w b? -> out", "N IC OC rowwise?", need_matmul_fwd, 0, HYP_OPDEV_KERNELS},
    {"int8_matmul_dgrad", "dout w -> dx", "N IC OC rowwise?", need_matmul_dgrad, 0, HYP_OPDEV_KERNELS},
    {"moe_fwd", "x w_router experts bias? -> out state scratch", "N C H E K norm_topk? aux_coef? capacity? Hs? sigmoid? bias_rate?", need_moe_fwd, 0, HYP_OPDEV_KERNELS},
    {"moe_bwd", "dout x w_router experts state -> dx dw_router dexperts scratch", "N C H E K norm_topk? aux_coef? capacity? Hs? sigmoid?", need_moe_bwd, 0,
     HYP_OPDEV_KERNELS},
    {"allreduce_tp", "x b? -> out", "n C", need_allreduce_tp, 0, HYP_OPDEV_KERNELS},
};

#define N_OPS ((int)(sizeof OPS / sizeof *OPS))
_Static_assert(sizeof OPS / sizeof *OPS <= HYP_OP_MAX, "more ops than HYP_OP_MAX: raise it in op_registry.h");

int hyp_op_count(void) { return N_OPS; }

const hyp_op_desc *hyp_op_get(int id) { return id >= 0 && id < N_OPS ? &OPS[id] : NULL; }

const char *hyp_op_name(int id) { return id >= 0 && id < N_OPS ? OPS[id].name : "?"; }

int hyp_op_find(const char *name) {
    for (int i = 0; name && i < N_OPS; i++)
        if (!strcmp(OPS[i].name, name)) return i;
    return -1;
}

/* Copies the next space-separated word of *s into w (at most n-1 chars); 0 at the end. */
static int next_word(const char **s, char *w, size_t n) {
    const char *p = *s;
    while (*p == ' ') p++;
    if (!*p) return 0;
    size_t k = 0;
    for (; *p && *p != ' '; p++)
        if (k + 1 < n) w[k++] = *p;
    w[k] = 0;
    *s = p;
    return 1;
}

/* Parses one signature word "name[:dt|dt][?]"; -1 if a dtype is unknown or the name is empty. */
static int parse_arg(const char *word, hyp_op_arg *a) {
    memset(a, 0, sizeof *a);
    char w[64];
    snprintf(w, sizeof w, "%s", word);
    size_t len = strlen(w);
    if (len && w[len - 1] == '?') a->optional = 1, w[--len] = 0;
    char *colon = strchr(w, ':');
    if (colon) {
        *colon = 0;
        for (char *t = colon + 1; *t;) {
            char *bar = strchr(t, '|');
            if (bar) *bar = 0;
            int dt = hyp_dtype_parse(t);
            if (dt < 0) return -1;
            a->dtypes |= 1u << dt;
            t = bar ? bar + 1 : t + strlen(t);
        }
    } else {
        a->dtypes = 1u << HYP_DT_F32;
    }
    size_t n = strlen(w);
    if (!n || n >= sizeof a->name) return -1;
    memcpy(a->name, w, n + 1);
    return 0;
}

/* Walks the signature of op id: counts the arguments of each side and, when want_side >= 0,
 * parses argument want_i of want_side into a. Returns -1 on a malformed signature or when the
 * wanted argument does not exist. */
static int walk_sig(int id, int *nin, int *nout, int want_side, int want_i, hyp_op_arg *a) {
    const hyp_op_desc *d = hyp_op_get(id);
    int n[2] = {0, 0}, side = 0, found = want_side < 0;
    if (!d) return -1;
    const char *s = d->sig;
    char w[64];
    while (next_word(&s, w, sizeof w)) {
        if (!strcmp(w, "->")) {
            if (side) return -1;
            side = 1;
            continue;
        }
        if (side == want_side && n[side] == want_i) {
            if (parse_arg(w, a)) return -1;
            found = 1;
        }
        n[side]++;
    }
    if (!side) return -1;
    if (nin) *nin = n[0];
    if (nout) *nout = n[1];
    return found ? 0 : -1;
}

void hyp_op_arity(int id, int *nin, int *nout) {
    *nin = *nout = 0;
    walk_sig(id, nin, nout, -1, 0, NULL);
}

int hyp_op_arg_of(int id, int side, int i, hyp_op_arg *out) { return walk_sig(id, NULL, NULL, side, i, out); }

int hyp_op_takes_attr(int id, const char *key, int *optional) {
    const hyp_op_desc *d = hyp_op_get(id);
    if (!d) return 0;
    const char *s = d->attrs;
    char w[32];
    while (next_word(&s, w, sizeof w)) {
        size_t len = strlen(w);
        int opt = len && w[len - 1] == '?';
        if (opt) w[len - 1] = 0;
        if (!strcmp(w, key)) {
            if (optional) *optional = opt;
            return 1;
        }
    }
    return 0;
}

int hyp_op_registry_check(hyp_err *e) {
    for (int i = 0; i < N_OPS; i++) {
        int nin = 0, nout = 0;
        if (walk_sig(i, &nin, &nout, -1, 0, NULL) || nin > HYP_OP_MAX_IN || nout > HYP_OP_MAX_OUT || nout < 1)
            return hyp_fail(e, HYP_EFAIL, "op registry: op '%s' has a malformed signature '%s' — fix op_registry.c",
                            OPS[i].name, OPS[i].sig);
        for (int side = 0; side < 2; side++)
            for (int k = 0; k < (side ? nout : nin); k++) {
                hyp_op_arg a;
                if (hyp_op_arg_of(i, side, k, &a))
                    return hyp_fail(e, HYP_EFAIL, "op registry: op '%s': argument %d of '%s' names an unknown dtype — fix op_registry.c",
                                    OPS[i].name, k + 1, OPS[i].sig);
            }
        if (!OPS[i].need || !OPS[i].attrs)
            return hyp_fail(e, HYP_EFAIL, "op registry: op '%s' lacks a shape rule or attribute list — fix op_registry.c", OPS[i].name);
        for (int j = 0; j < i; j++)
            if (!strcmp(OPS[i].name, OPS[j].name))
                return hyp_fail(e, HYP_EFAIL, "op registry: op '%s' is registered twice — fix op_registry.c", OPS[i].name);
    }
    return HYP_OK;
}
