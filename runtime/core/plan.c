/* plan.c — loads and validates the plan written by `gen` (see plan.h for the guarantees).
 * Every check failure is a message naming the plan file, what is wrong and what to do
 * (regenerate with gen); nothing here aborts, and a failed load frees everything. */
#include "plan.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#define PLAN_FORMAT "hyperion-plan"
#define PLAN_VERSION 1

typedef struct {
    const char *name;
    int nin, nout;
    int in_optional, out_optional; /* bitmasks of arguments that may be "" */
} op_info;

static const op_info OPS[OP__COUNT] = {
    [OP_EMBEDDING_FWD] = {"embedding_fwd", 3, 1, 1 << 2, 0},
    [OP_EMBEDDING_BWD] = {"embedding_bwd", 2, 2, 0, 1 << 1},
    [OP_LAYERNORM_FWD] = {"layernorm_fwd", 3, 3, 1 << 2, 0},
    [OP_LAYERNORM_BWD] = {"layernorm_bwd", 5, 3, 0, 1 << 2},
    [OP_RMSNORM_FWD] = {"rmsnorm_fwd", 2, 2, 0, 0},
    [OP_RMSNORM_BWD] = {"rmsnorm_bwd", 4, 2, 0, 0},
    [OP_MATMUL_FWD] = {"matmul_fwd", 3, 1, 1 << 2, 0},
    [OP_MATMUL_BWD] = {"matmul_bwd", 3, 3, 0, (1 << 0) | (1 << 2)},
    [OP_QKNORM_FWD] = {"qknorm_fwd", 3, 2, 0, 0},
    [OP_QKNORM_BWD] = {"qknorm_bwd", 5, 3, 0, 0},
    [OP_ROPE_FWD] = {"rope_fwd", 1, 1, 0, 0},
    [OP_ROPE_BWD] = {"rope_bwd", 1, 1, 0, 0},
    [OP_ATTENTION_FWD] = {"attention_fwd", 1, 2, 0, 0},
    [OP_ATTENTION_BWD] = {"attention_bwd", 3, 2, 0, 0},
    [OP_GELU_FWD] = {"gelu_fwd", 1, 1, 0, 0},
    [OP_GELU_BWD] = {"gelu_bwd", 2, 1, 0, 0},
    [OP_SWIGLU_FWD] = {"swiglu_fwd", 1, 1, 0, 0},
    [OP_SWIGLU_BWD] = {"swiglu_bwd", 2, 1, 0, 0},
    [OP_ADD_FWD] = {"add_fwd", 2, 1, 0, 0},
    [OP_ACCUMULATE] = {"accumulate", 1, 1, 0, 0},
    [OP_ZERO] = {"zero", 0, 1, 0, 0},
    [OP_CROSSENTROPY] = {"crossentropy", 2, 1, 0, 0},
    [OP_CROSSENTROPY_FUSED] = {"crossentropy_fused", 1, 2, 0, 0},
    [OP_FLASH_ATTENTION_FWD] = {"flash_attention_fwd", 1, 2, 0, 0},
    [OP_FLASH_ATTENTION_BWD] = {"flash_attention_bwd", 4, 2, 0, 0},
    [OP_FP8_QUANTIZE] = {"fp8_quantize", 1, 1, 0, 0},
    [OP_ROUND_BF16] = {"round_bf16", 1, 1, 0, 0},
};

const char *plan_op_name(op_kind k) { return k < OP__COUNT ? OPS[k].name : "?"; }

typedef struct {
    const char *path;
    hyp_err *e;
    plan_t *p;
} ld;

static int bad(ld *c, const char *what) {
    return hyp_fail(c->e, HYP_EINPUT, "%s: %s — the plan is damaged or from another version; regenerate it with gen",
                    c->path, what);
}

static const cJSON *need(ld *c, const cJSON *obj, const char *key, int type_mask, int *rc) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!v || !(v->type & type_mask)) {
        char what[256];
        snprintf(what, sizeof what, "missing or mistyped field '%s'", key);
        *rc = bad(c, what);
        return NULL;
    }
    return v;
}

static int get_int(ld *c, const cJSON *obj, const char *key, int64_t lo, int64_t hi, int64_t *out) {
    int rc = 0;
    const cJSON *v = need(c, obj, key, cJSON_Number, &rc);
    if (!v) return rc;
    double d = v->valuedouble;
    if (d != (double)(int64_t)d || d < (double)lo || d > (double)hi) {
        char what[256];
        snprintf(what, sizeof what, "field '%s' = %g is out of range [%lld, %lld]", key, d, (long long)lo,
                 (long long)hi);
        return bad(c, what);
    }
    *out = (int64_t)d;
    return 0;
}

static int get_num(ld *c, const cJSON *obj, const char *key, double lo, double hi, double *out) {
    int rc = 0;
    const cJSON *v = need(c, obj, key, cJSON_Number, &rc);
    if (!v) return rc;
    if (!(v->valuedouble >= lo && v->valuedouble <= hi)) {
        char what[256];
        snprintf(what, sizeof what, "field '%s' = %g is out of range", key, v->valuedouble);
        return bad(c, what);
    }
    *out = v->valuedouble;
    return 0;
}

static int get_str(ld *c, const cJSON *obj, const char *key, char *out, size_t n) {
    int rc = 0;
    const cJSON *v = need(c, obj, key, cJSON_String, &rc);
    if (!v) return rc;
    if (strlen(v->valuestring) >= n) return bad(c, "a string field is too long");
    strcpy(out, v->valuestring);
    return 0;
}

#define TRY(x)                                                                                     \
    do {                                                                                           \
        int rc_ = (x);                                                                             \
        if (rc_) return rc_;                                                                       \
    } while (0)

static int find_buf(const plan_t *p, const char *name) {
    /* buffers are few (thousands at most) and loaded once: a linear scan keeps this simple */
    for (int i = 0; i < p->n_bufs; i++)
        if (!strcmp(p->bufs[i].name, name)) return i;
    return -1;
}

static int load_buffers(ld *c, const cJSON *root) {
    plan_t *p = c->p;
    int rc = 0;
    const cJSON *arr = need(c, root, "buffers", cJSON_Array, &rc);
    if (!arr) return rc;
    int n = cJSON_GetArraySize(arr);
    if (n < 1 || n > 1000000) return bad(c, "bad number of buffers");
    p->bufs = calloc((size_t)n, sizeof *p->bufs);
    if (!p->bufs) return hyp_fail(c->e, HYP_EFAIL, "%s: out of memory", c->path);
    const cJSON *b;
    cJSON_ArrayForEach(b, arr) {
        plan_buf *pb = &p->bufs[p->n_bufs];
        char name[512], kind[16];
        TRY(get_str(c, b, "name", name, sizeof name));
        TRY(get_str(c, b, "kind", kind, sizeof kind));
        pb->name = strdup(name);
        p->n_bufs++;
        if (!strcmp(kind, "param")) pb->kind = BUF_PARAM;
        else if (!strcmp(kind, "grad")) pb->kind = BUF_GRAD;
        else if (!strcmp(kind, "act")) pb->kind = BUF_ACT;
        else if (!strcmp(kind, "tokens")) pb->kind = BUF_TOKENS;
        else return bad(c, "unknown buffer kind");
        TRY(get_int(c, b, "numel", 1, (int64_t)1 << 40, &pb->numel));
        TRY(get_int(c, b, "offset", 0, (int64_t)1 << 40, &pb->offset));
        int64_t limit = pb->kind == BUF_ACT ? p->act_floats
                        : pb->kind == BUF_TOKENS ? (int64_t)p->B * p->T
                                                 : p->param_floats;
        if (pb->kind == BUF_TOKENS && pb->offset != 0) return bad(c, "token buffer with an offset");
        if (pb->offset + pb->numel > limit) {
            char what[700];
            snprintf(what, sizeof what, "buffer '%s' [%lld, %lld) lies outside its arena of %lld elements",
                     pb->name, (long long)pb->offset, (long long)(pb->offset + pb->numel), (long long)limit);
            return bad(c, what);
        }
        if (find_buf(p, name) != p->n_bufs - 1) {
            char what[600];
            snprintf(what, sizeof what, "duplicate buffer '%s'", name);
            return bad(c, what);
        }
    }
    p->tokens_buf = find_buf(p, "tokens");
    p->targets_buf = find_buf(p, "targets");
    p->losses_buf = find_buf(p, "losses");
    if (p->tokens_buf < 0 || p->targets_buf < 0 || p->losses_buf < 0)
        return bad(c, "the tokens, targets or losses buffer is missing");
    if (p->bufs[p->tokens_buf].kind != BUF_TOKENS || p->bufs[p->targets_buf].kind != BUF_TOKENS ||
        p->bufs[p->losses_buf].kind != BUF_ACT)
        return bad(c, "tokens/targets/losses buffers have the wrong kind");
    return 0;
}

/* Reads an attribute that may be an integer or one of the symbols "B", "T", "N". */
static int get_dim(ld *c, const cJSON *attrs, const char *key, int64_t *out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(attrs, key);
    *out = 0;
    if (!v) return 0;
    if (cJSON_IsString(v)) {
        if (!strcmp(v->valuestring, "B")) *out = DIM_B;
        else if (!strcmp(v->valuestring, "T")) *out = DIM_T;
        else if (!strcmp(v->valuestring, "N")) *out = DIM_N;
        else return bad(c, "unknown symbolic dimension");
        return 0;
    }
    if (!cJSON_IsNumber(v) || v->valuedouble < 1 || v->valuedouble > (double)((int64_t)1 << 40) ||
        v->valuedouble != (double)(int64_t)v->valuedouble)
        return bad(c, "an op attribute is not a positive integer");
    *out = (int64_t)v->valuedouble;
    return 0;
}

static int64_t bind(int64_t v, int64_t B, int64_t T) {
    return v == DIM_B ? B : v == DIM_T ? T : v == DIM_N ? B * T : v;
}

/* The element count op argument `arg` (inputs 0.., outputs 100..) needs, at batch B, T. */
static int64_t arg_need(const plan_t *p, const plan_op *o, int arg, int64_t B, int64_t T) {
    int64_t N = bind(o->N, B, T), n = bind(o->n, B, T), C = o->C ? o->C : 1;
    int64_t qkv = (o->NH + 2 * o->NKV) * o->hd;
    int64_t Bb = bind(o->B, B, T), Tb = bind(o->T, B, T);
    switch (o->kind) {
    case OP_EMBEDDING_FWD:
        return arg == 0 ? Bb * Tb : arg == 1 ? (int64_t)p->V * C : arg == 2 ? Tb * C : Bb * Tb * C;
    case OP_EMBEDDING_BWD:
        return arg == 0 ? Bb * Tb * C : arg == 1 ? Bb * Tb : arg == 100 ? o->V * C : Tb * C;
    case OP_LAYERNORM_FWD:
        return (arg == 0 || arg == 100) ? N * C : (arg == 1 || arg == 2) ? C : N;
    case OP_LAYERNORM_BWD:
        return (arg <= 1 || arg == 100) ? N * C : (arg == 2 || arg >= 101) ? C : N;
    case OP_RMSNORM_FWD: return (arg == 0 || arg == 100) ? N * C : arg == 1 ? C : N;
    case OP_RMSNORM_BWD: return (arg <= 1 || arg == 100) ? N * C : (arg == 2 || arg == 101) ? C : N;
    case OP_MATMUL_FWD:
        return arg == 0 ? N * o->IC : arg == 1 ? o->OC * o->IC : arg == 2 ? o->OC : N * o->OC;
    case OP_MATMUL_BWD:
        return arg == 0 ? N * o->OC : arg == 1 || arg == 100 ? N * o->IC : arg == 2 || arg == 101 ? o->OC * o->IC : o->OC;
    case OP_QKNORM_FWD:
        return (arg == 0 || arg == 100) ? N * qkv : (arg == 1 || arg == 2) ? o->hd : N * (o->NH + o->NKV);
    case OP_QKNORM_BWD:
        return (arg <= 1 || arg == 100) ? N * qkv : (arg == 2 || arg == 3 || arg >= 101) ? o->hd : N * (o->NH + o->NKV);
    case OP_ROPE_FWD:
    case OP_ROPE_BWD: return Bb * Tb * qkv;
    case OP_ATTENTION_FWD:
        return arg == 0 ? Bb * Tb * qkv : arg == 100 ? Bb * Tb * o->NH * o->hd : Bb * o->NH * Tb * Tb;
    case OP_ATTENTION_BWD:
        return arg == 0 ? Bb * Tb * o->NH * o->hd : (arg == 1 || arg == 100) ? Bb * Tb * qkv : Bb * o->NH * Tb * Tb;
    case OP_FLASH_ATTENTION_FWD: /* qkv -> out, lse [B,NH,T] */
        return arg == 0 ? Bb * Tb * qkv : arg == 100 ? Bb * Tb * o->NH * o->hd : Bb * o->NH * Tb;
    case OP_FLASH_ATTENTION_BWD: /* dout, qkv, out, lse -> dqkv, dscratch [B,NH,T] */
        return (arg == 0 || arg == 2) ? Bb * Tb * o->NH * o->hd : (arg == 1 || arg == 100) ? Bb * Tb * qkv : Bb * o->NH * Tb;
    case OP_GELU_FWD:
    case OP_GELU_BWD:
    case OP_ADD_FWD:
    case OP_ACCUMULATE: return n * C;
    case OP_ZERO:
    case OP_FP8_QUANTIZE:
    case OP_ROUND_BF16: return n * (o->C ? o->C : 1);
    case OP_SWIGLU_FWD: return arg == 0 ? N * 2 * o->H : N * o->H;
    case OP_SWIGLU_BWD: return arg == 0 ? N * o->H : N * 2 * o->H;
    case OP_CROSSENTROPY: return arg == 0 ? N * o->Vp : N;
    case OP_CROSSENTROPY_FUSED: return arg == 101 ? N * o->Vp : N;
    default: return 0;
    }
}

static int parse_op(ld *c, const cJSON *j, plan_op *o) {
    plan_t *p = c->p;
    char name[64];
    TRY(get_str(c, j, "op", name, sizeof name));
    int k;
    for (k = 0; k < OP__COUNT; k++)
        if (!strcmp(OPS[k].name, name)) break;
    if (k == OP__COUNT) {
        char what[128];
        snprintf(what, sizeof what, "unknown op '%s'", name);
        return bad(c, what);
    }
    o->kind = (op_kind)k;
    int rc = 0;
    const cJSON *ins = need(c, j, "ins", cJSON_Array, &rc);
    if (!ins) return rc;
    const cJSON *outs = need(c, j, "outs", cJSON_Array, &rc);
    if (!outs) return rc;
    const cJSON *attrs = need(c, j, "attrs", cJSON_Object, &rc);
    if (!attrs) return rc;
    o->nin = cJSON_GetArraySize(ins);
    o->nout = cJSON_GetArraySize(outs);
    if (o->nin != OPS[k].nin || o->nout != OPS[k].nout) {
        char what[160];
        snprintf(what, sizeof what, "op '%s' has %d inputs and %d outputs; it takes %d and %d", name, o->nin,
                 o->nout, OPS[k].nin, OPS[k].nout);
        return bad(c, what);
    }
    for (int side = 0; side < 2; side++) {
        const cJSON *arr = side ? outs : ins;
        int i = 0;
        const cJSON *a;
        cJSON_ArrayForEach(a, arr) {
            if (!cJSON_IsString(a)) return bad(c, "an op argument is not a buffer name");
            int idx = -1;
            if (a->valuestring[0] == 0) {
                int opt = side ? OPS[k].out_optional : OPS[k].in_optional;
                if (!(opt & (1 << i))) return bad(c, "a required op argument is empty");
            } else {
                idx = find_buf(p, a->valuestring);
                if (idx < 0) {
                    char what[600];
                    snprintf(what, sizeof what, "op '%s' names unknown buffer '%s'", name, a->valuestring);
                    return bad(c, what);
                }
            }
            if (side) o->out[i] = idx;
            else o->in[i] = idx;
            i++;
        }
    }
    int64_t *dims[] = {&o->B, &o->T, &o->N, &o->C, &o->IC, &o->OC, &o->NH, &o->NKV, &o->hd, &o->H, &o->V, &o->Vp, &o->n};
    const char *keys[] = {"B", "T", "N", "C", "IC", "OC", "NH", "NKV", "hd", "H", "V", "Vp", "n"};
    for (size_t i = 0; i < sizeof dims / sizeof *dims; i++) TRY(get_dim(c, attrs, keys[i], dims[i]));
    const cJSON *eps = cJSON_GetObjectItemCaseSensitive(attrs, "eps");
    const cJSON *theta = cJSON_GetObjectItemCaseSensitive(attrs, "theta");
    o->eps = cJSON_IsNumber(eps) ? (float)eps->valuedouble : 1e-5f;
    o->theta = cJSON_IsNumber(theta) ? (float)theta->valuedouble : 10000.0f;
    if (o->NKV && o->NH % o->NKV) return bad(c, "an op's NH is not a multiple of NKV");
    if (o->kind == OP_FP8_QUANTIZE) {
        const cJSON *slot = cJSON_GetObjectItemCaseSensitive(attrs, "slot");
        if (!cJSON_IsNumber(slot) || slot->valuedouble < 0 || slot->valuedouble >= p->fp8_slots)
            return bad(c, "an fp8_quantize op names a scaling slot the plan does not declare");
        o->slot = (int)slot->valuedouble;
    }
    /* every argument big enough at the planned maximum batch */
    for (int side = 0; side < 2; side++) {
        int cnt = side ? o->nout : o->nin;
        for (int i = 0; i < cnt; i++) {
            int idx = side ? o->out[i] : o->in[i];
            if (idx < 0) continue;
            int64_t needn = arg_need(p, o, side * 100 + i, p->B, p->T);
            if (needn <= 0 || p->bufs[idx].numel < needn) {
                char what[700];
                snprintf(what, sizeof what, "op '%s' needs %lld elements in '%s', which has %lld", name,
                         (long long)needn, p->bufs[idx].name, (long long)p->bufs[idx].numel);
                return bad(c, what);
            }
        }
    }
    return 0;
}

static int load_ops(ld *c, const cJSON *root, const char *key, plan_op **out, int *n) {
    int rc = 0;
    const cJSON *arr = need(c, root, key, cJSON_Array, &rc);
    if (!arr) return rc;
    int cnt = cJSON_GetArraySize(arr);
    *out = calloc((size_t)cnt + 1, sizeof **out);
    if (!*out) return hyp_fail(c->e, HYP_EFAIL, "%s: out of memory", c->path);
    const cJSON *j;
    cJSON_ArrayForEach(j, arr) {
        TRY(parse_op(c, j, &(*out)[*n]));
        (*n)++;
    }
    return 0;
}

static int load_params(ld *c, const cJSON *root) {
    plan_t *p = c->p;
    int rc = 0;
    const cJSON *arr = need(c, root, "params", cJSON_Array, &rc);
    if (!arr) return rc;
    int n = cJSON_GetArraySize(arr);
    p->params = calloc((size_t)n + 1, sizeof *p->params);
    if (!p->params) return hyp_fail(c->e, HYP_EFAIL, "%s: out of memory", c->path);
    const cJSON *j;
    cJSON_ArrayForEach(j, arr) {
        plan_param *pp = &p->params[p->n_params_t];
        char name[256];
        TRY(get_str(c, j, "name", name, sizeof name));
        pp->name = strdup(name);
        p->n_params_t++;
        TRY(get_int(c, j, "offset", 0, p->param_floats, &pp->offset));
        TRY(get_int(c, j, "numel", 1, p->param_floats, &pp->numel));
        if (pp->offset + pp->numel > p->param_floats) return bad(c, "a parameter lies outside the parameter arena");
        const cJSON *shape = need(c, j, "shape", cJSON_Array, &rc);
        if (!shape) return rc;
        int64_t prod = 1;
        const cJSON *s;
        cJSON_ArrayForEach(s, shape) {
            if (pp->ndim >= 4 || !cJSON_IsNumber(s) || s->valuedouble < 1) return bad(c, "a parameter has a bad shape");
            pp->shape[pp->ndim++] = (int64_t)s->valuedouble;
            prod *= (int64_t)s->valuedouble;
        }
        if (prod != pp->numel) return bad(c, "a parameter's shape does not match its numel");
        const cJSON *decay = cJSON_GetObjectItemCaseSensitive(j, "decay");
        pp->decay = cJSON_IsTrue(decay);
        const cJSON *init = need(c, j, "init", cJSON_Object, &rc);
        if (!init) return rc;
        char kind[16];
        TRY(get_str(c, init, "kind", kind, sizeof kind));
        if (!strcmp(kind, "normal")) {
            double std;
            TRY(get_num(c, init, "std", 0, 10, &std));
            pp->init = PINIT_NORMAL;
            pp->init_std = (float)std;
        } else if (!strcmp(kind, "ones")) pp->init = PINIT_ONES;
        else if (!strcmp(kind, "zeros")) pp->init = PINIT_ZEROS;
        else return bad(c, "unknown parameter init");
    }
    /* parameters must not overlap (each gets its own optimizer state) */
    for (int i = 1; i < p->n_params_t; i++)
        if (p->params[i].offset < p->params[i - 1].offset + p->params[i - 1].numel)
            return bad(c, "parameters overlap in the arena");
    return 0;
}

/* p->state_hash: xxh3-128 of the plan without train.zero_stage / zero_prefetch / comm_overlap (consumed: root
 * loses them), so a checkpoint resumes under another ZeRO stage of the same plan (v2175). */
static int state_hash(ld *c, cJSON *root) {
    cJSON *t = cJSON_GetObjectItemCaseSensitive(root, "train");
    cJSON_DeleteItemFromObjectCaseSensitive(t, "zero_stage");
    cJSON_DeleteItemFromObjectCaseSensitive(t, "zero_prefetch");
    cJSON_DeleteItemFromObjectCaseSensitive(t, "comm_overlap");
    char *txt = cJSON_PrintUnformatted(root);
    if (!txt) return hyp_fail(c->e, HYP_EFAIL, "%s: out of memory", c->path);
    XXH128_hash_t h = XXH3_128bits(txt, strlen(txt));
    free(txt);
    snprintf(c->p->state_hash, sizeof c->p->state_hash, "%016llx%016llx", (unsigned long long)h.high64,
             (unsigned long long)h.low64);
    return HYP_OK;
}

int plan_load(const char *path, plan_t *p, hyp_err *e) {
    memset(p, 0, sizeof *p);
    FILE *f = fopen(path, "rb");
    if (!f)
        return hyp_fail(e, HYP_EINPUT, "%s: cannot open the plan — run the trainer that gen wrote (out/NAME/train) or pass --plan FILE",
                        path);
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fseek(f, 0, SEEK_SET);
    if (size <= 0 || size > (256L << 20)) {
        fclose(f);
        return hyp_fail(e, HYP_EINPUT, "%s: the plan is empty or implausibly large — regenerate it with gen", path);
    }
    char *buf = malloc((size_t)size);
    size_t got = buf ? fread(buf, 1, (size_t)size, f) : 0;
    fclose(f);
    if (!buf || got != (size_t)size) {
        free(buf);
        return hyp_fail(e, HYP_EFAIL, "%s: cannot read the plan", path);
    }
    XXH128_hash_t h = XXH3_128bits(buf, (size_t)size);
    snprintf(p->hash, sizeof p->hash, "%016llx%016llx", (unsigned long long)h.high64, (unsigned long long)h.low64);
    cJSON *root = cJSON_ParseWithLength(buf, (size_t)size);
    free(buf);
    ld c = {path, e, p};
    if (!root) return hyp_fail(e, HYP_EINPUT, "%s: not valid JSON (truncated or edited?) — regenerate it with gen", path);
    int rc = 0;
    char fmt[32];
    int64_t v;
    if ((rc = get_str(&c, root, "format", fmt, sizeof fmt)) || strcmp(fmt, PLAN_FORMAT)) {
        if (!rc) rc = bad(&c, "not a Hyperion plan");
        goto done;
    }
    if ((rc = get_int(&c, root, "version", 0, 1 << 20, &v))) goto done;
    if (v != PLAN_VERSION) {
        rc = hyp_fail(e, HYP_EINPUT, "%s: plan version %lld, this runtime reads version %d — regenerate the trainer with this gen",
                      path, (long long)v, PLAN_VERSION);
        goto done;
    }
    const cJSON *m = need(&c, root, "model", cJSON_Object, &rc);
    const cJSON *t = m ? need(&c, root, "train", cJSON_Object, &rc) : NULL;
    if (!t) goto done;
    int64_t x;
#define GI(obj, key, lo, hi, dst)                                                                  \
    do {                                                                                           \
        if ((rc = get_int(&c, obj, key, lo, hi, &x))) goto done;                                   \
        dst = x;                                                                                   \
    } while (0)
#define GN(obj, key, lo, hi, dst)                                                                  \
    do {                                                                                           \
        if ((rc = get_num(&c, obj, key, lo, hi, &dst))) goto done;                                 \
    } while (0)
    GI(m, "V", 2, 1 << 24, p->V);
    GI(m, "Vp", p->V, 1 << 24, p->Vp);
    GI(m, "C", 1, 1 << 20, p->C);
    GI(m, "L", 1, 10000, p->L);
    GI(m, "NH", 1, 4096, p->NH);
    GI(m, "NKV", 1, 4096, p->NKV);
    GI(m, "hd", 1, 1 << 16, p->hd);
    GI(m, "H", 1, 1 << 22, p->H);
    GI(m, "maxT", 1, 1 << 22, p->maxT);
    GI(m, "params", 1, (int64_t)1 << 50, p->n_params);
    if ((rc = get_str(&c, m, "name", p->model_name, sizeof p->model_name)) ||
        (rc = get_str(&c, m, "arch", p->arch, sizeof p->arch)) ||
        (rc = get_str(&c, m, "norm", p->norm, sizeof p->norm)) ||
        (rc = get_str(&c, m, "activation", p->activation, sizeof p->activation)) ||
        (rc = get_str(&c, m, "position", p->position, sizeof p->position)) ||
        (rc = get_str(&c, m, "tokenizer", p->tokenizer, sizeof p->tokenizer)) ||
        (rc = get_str(&c, root, "target", p->target, sizeof p->target)) ||
        (rc = get_str(&c, root, "backend", p->backend, sizeof p->backend)))
        goto done;
    p->qk_norm = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(m, "qk_norm"));
    p->tied = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(m, "tied"));
    p->bias = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(m, "bias"));
    GI(t, "B", 1, 65536, p->B);
    GI(t, "T", 1, p->maxT, p->T);
    GI(t, "grad_accum", 1, 1 << 20, p->grad_accum);
    GI(t, "warmup_steps", 0, 1 << 30, p->warmup_steps);
    GI(t, "steps", 1, 1 << 30, p->steps);
    GI(t, "eval_every", 0, 1 << 30, p->eval_every);
    GI(t, "eval_batches", 0, 1 << 20, p->eval_batches);
    GI(t, "zero_stage", 0, 3, p->zero_stage);
    GI(t, "zero_prefetch", 0, 8, p->zero_prefetch);
    GI(t, "comm_overlap", 0, 1, p->comm_overlap);
    GI(t, "seed", 0, (int64_t)1 << 52, p->seed);
    if ((rc = get_str(&c, t, "schedule", p->schedule, sizeof p->schedule))) goto done;
    if (strcmp(p->schedule, "cosine") && strcmp(p->schedule, "wsd") && strcmp(p->schedule, "constant") &&
        strcmp(p->schedule, "linear")) {
        rc = bad(&c, "unknown LR schedule");
        goto done;
    }
    GN(t, "lr", 0, 10, p->lr);
    GN(t, "min_lr_ratio", 0, 1, p->min_lr_ratio);
    GN(t, "decay_fraction", 0, 1, p->decay_fraction);
    GN(t, "weight_decay", 0, 10, p->weight_decay);
    GN(t, "beta1", 0, 1, p->beta1);
    GN(t, "beta2", 0, 1, p->beta2);
    GN(t, "eps", 0, 1, p->eps);
    GN(t, "max_norm", 0, 1e9, p->max_norm);
    GI(root, "param_floats", 1, (int64_t)1 << 40, p->param_floats);
    GI(root, "act_floats", 1, (int64_t)1 << 40, p->act_floats);
    GI(root, "act_floats_unplanned", 1, (int64_t)1 << 42, p->act_floats_unplanned);
    {
        double fpt = 0;
        GN(root, "flops_per_token", 0, 1e30, fpt);
        p->flops_per_token = fpt;
        GN(root, "flops_attn_coef", 0, 1e30, fpt);
        p->flops_attn_coef = fpt;
        const cJSON *hw = cJSON_GetObjectItemCaseSensitive(root, "hardware");
        const cJSON *pk = hw ? cJSON_GetObjectItemCaseSensitive(hw, "peak_flops") : NULL;
        const cJSON *hn = hw ? cJSON_GetObjectItemCaseSensitive(hw, "name") : NULL;
        p->peak_flops = cJSON_IsNumber(pk) ? pk->valuedouble : 0;
        snprintf(p->hardware, sizeof p->hardware, "%s", cJSON_IsString(hn) ? hn->valuestring : "unknown");
    }
    {
        const cJSON *f8 = cJSON_GetObjectItemCaseSensitive(root, "fp8");
        if (f8 && cJSON_IsObject(f8)) {
            char recipe[16], scaling[16];
            int64_t hist, margin;
            if ((rc = get_str(&c, f8, "recipe", recipe, sizeof recipe)) ||
                (rc = get_str(&c, f8, "scaling", scaling, sizeof scaling)) ||
                (rc = get_int(&c, f8, "history", 1, 1024, &hist)) || (rc = get_int(&c, f8, "margin", 0, 64, &margin)))
                goto done;
            p->fp8_e4m3_only = !strcmp(recipe, "e4m3");
            p->fp8_current = !strcmp(scaling, "current");
            p->fp8_history = (int)hist;
            p->fp8_margin = (int)margin;
            const cJSON *gm = cJSON_GetObjectItemCaseSensitive(f8, "gemm");
            if (gm && (!cJSON_IsString(gm) || (strcmp(gm->valuestring, "fp8") && strcmp(gm->valuestring, "fake")))) {
                rc = bad(&c, "fp8.gemm is neither \"fp8\" nor \"fake\"");
                goto done;
            }
            p->fp8_gemm = gm && !strcmp(gm->valuestring, "fp8");
            const cJSON *slots = cJSON_GetObjectItemCaseSensitive(f8, "slots");
            int n = cJSON_IsArray(slots) ? cJSON_GetArraySize(slots) : 0;
            p->fp8_roles = calloc((size_t)n + 1, sizeof(int));
            if (!p->fp8_roles) {
                rc = hyp_fail(e, HYP_EFAIL, "%s: out of memory", path);
                goto done;
            }
            const cJSON *r;
            cJSON_ArrayForEach(r, slots) {
                const char *role = cJSON_IsString(r) ? r->valuestring : "";
                p->fp8_roles[p->fp8_slots++] = !strcmp(role, "weight") ? 0 : !strcmp(role, "activation") ? 1 : 2;
            }
        }
    }
    if ((rc = load_params(&c, root)) || (rc = load_buffers(&c, root)) ||
        (rc = load_ops(&c, root, "forward", &p->fwd, &p->n_fwd)) ||
        (rc = load_ops(&c, root, "backward", &p->bwd, &p->n_bwd)))
        goto done;
    {
        const cJSON *lo = need(&c, root, "loss", cJSON_Object, &rc);
        if (!lo) goto done;
        if ((rc = parse_op(&c, lo, &p->loss))) goto done;
        if (p->loss.kind != OP_CROSSENTROPY) {
            rc = bad(&c, "the loss op must be crossentropy");
            goto done;
        }
    }
#undef GI
#undef GN
done:
    if (!rc) rc = state_hash(&c, root);
    cJSON_Delete(root);
    if (rc) plan_free(p);
    return rc;
}

void plan_free(plan_t *p) {
    for (int i = 0; i < p->n_bufs; i++) free(p->bufs[i].name);
    for (int i = 0; i < p->n_params_t; i++) free(p->params[i].name);
    free(p->bufs);
    free(p->params);
    free(p->fwd);
    free(p->bwd);
    free(p->fp8_roles);
    memset(p, 0, sizeof *p);
}
