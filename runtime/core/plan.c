/* plan.c — loads and validates the plan written by `gen` (see plan.h for the guarantees).
 * Every check failure is a message naming the plan file, what is wrong and what to do
 * (regenerate with gen); nothing here aborts, and a failed load frees everything. */
#include "plan.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "op_registry.h"

#define PLAN_FORMAT "hyperion-plan"
#define PLAN_VERSION 2

typedef struct {
    const char *path;
    hyp_err *e;
    plan_t *p;
    char at[640]; /* the object being read, "optimizer.groups[1]" ("" at the root): prefixes field names */
} ld;

static int bad(ld *c, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
static int bad(ld *c, const char *fmt, ...) {
    char what[900];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    return hyp_fail(c->e, HYP_EINPUT, "%s: %s — the plan is damaged or from another version; regenerate it with gen",
                    c->path, what);
}

/* c->at + "." + key, the field's full name */
static const char *field(const ld *c, const char *key, char *buf, size_t n) {
    snprintf(buf, n, "%s%s%s", c->at, c->at[0] ? "." : "", key);
    return buf;
}

static void enter(ld *c, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
static void enter(ld *c, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->at, sizeof c->at, fmt, ap);
    va_end(ap);
}

static const cJSON *need(ld *c, const cJSON *obj, const char *key, int type_mask, int *rc) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!v || !(v->type & type_mask)) {
        char f[700];
        *rc = bad(c, "%s field '%s'", v ? "mistyped" : "missing", field(c, key, f, sizeof f));
        return NULL;
    }
    return v;
}

/* v as a whole number in [lo, hi] into *out: 1, or 0 (not a number, not finite, not whole, out of
 * range). The range is checked on the double before any conversion: casting a double outside
 * int64's range (a JSON 1e999 is inf) is undefined. lo, hi within +-2^53 (exact as doubles). */
static int json_whole(const cJSON *v, int64_t lo, int64_t hi, int64_t *out) {
    if (!cJSON_IsNumber(v)) return 0;
    double d = v->valuedouble;
    if (!(d >= (double)lo && d <= (double)hi) || d != floor(d)) return 0; /* NaN fails the first test */
    *out = (int64_t)d;
    return 1;
}

static int get_int(ld *c, const cJSON *obj, const char *key, int64_t lo, int64_t hi, int64_t *out) {
    int rc = 0;
    const cJSON *v = need(c, obj, key, cJSON_Number, &rc);
    if (!v) return rc;
    if (!json_whole(v, lo, hi, out)) {
        char f[700];
        return bad(c, "field '%s' = %g is out of range [%lld, %lld] or not a whole number", field(c, key, f, sizeof f), v->valuedouble,
                   (long long)lo, (long long)hi);
    }
    return 0;
}

static int get_num(ld *c, const cJSON *obj, const char *key, double lo, double hi, double *out) {
    int rc = 0;
    const cJSON *v = need(c, obj, key, cJSON_Number, &rc);
    if (!v) return rc;
    if (!(v->valuedouble >= lo && v->valuedouble <= hi)) {
        char f[700];
        return bad(c, "field '%s' = %g is out of range [%g, %g]", field(c, key, f, sizeof f), v->valuedouble, lo, hi);
    }
    *out = v->valuedouble;
    return 0;
}

static int get_str(ld *c, const cJSON *obj, const char *key, char *out, size_t n) {
    int rc = 0;
    const cJSON *v = need(c, obj, key, cJSON_String, &rc);
    if (!v) return rc;
    if (strlen(v->valuestring) >= n) {
        char f[700];
        return bad(c, "field '%s' is longer than %zu characters", field(c, key, f, sizeof f), n - 1);
    }
    strcpy(out, v->valuestring);
    return 0;
}

/* A "dtype" field: one of core/dtype.h's names. */
static int get_dtype(ld *c, const cJSON *obj, hyp_dtype *out) {
    char name[16], f[700];
    int rc = get_str(c, obj, "dtype", name, sizeof name);
    if (rc) return rc;
    int dt = hyp_dtype_parse(name);
    if (dt < 0) return bad(c, "field '%s' = \"%s\" is no dtype (f32, bf16, f16, e4m3, e5m2, i8, i32)", field(c, "dtype", f, sizeof f), name);
    *out = (hyp_dtype)dt;
    return 0;
}

/* offset and bytes (in bytes) of an object of numel elements of dtype dt inside an arena of
 * `arena` bytes: bytes = numel * size, offset a multiple of the size, [offset, offset+bytes) inside. */
static int get_placement(ld *c, const cJSON *obj, hyp_dtype dt, int64_t numel, int64_t arena, const char *arena_name,
                         int64_t *offset, int64_t *bytes) {
    char f[700];
    int64_t size = (int64_t)hyp_dtype_size(dt);
    int rc;
    if ((rc = get_int(c, obj, "offset", 0, (int64_t)1 << 50, offset)) || (rc = get_int(c, obj, "bytes", 1, (int64_t)1 << 50, bytes)))
        return rc;
    if (*bytes != numel * size)
        return bad(c, "field '%s' = %lld, but %lld elements of %s take %lld bytes", field(c, "bytes", f, sizeof f),
                   (long long)*bytes, (long long)numel, hyp_dtype_name(dt), (long long)(numel * size));
    if (*offset % size)
        return bad(c, "field '%s' = %lld is not a multiple of the %s size (%lld bytes)", field(c, "offset", f, sizeof f),
                   (long long)*offset, hyp_dtype_name(dt), (long long)size);
    if (*offset + *bytes > arena)
        return bad(c, "field '%s': bytes [%lld, %lld) lie outside the %s of %lld bytes", field(c, "offset", f, sizeof f),
                   (long long)*offset, (long long)(*offset + *bytes), arena_name, (long long)arena);
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

static int find_param(const plan_t *p, const char *name) {
    for (int i = 0; i < p->n_params_t; i++)
        if (!strcmp(p->params[i].name, name)) return i;
    return -1;
}

/* A buffer's "shape": 1 to 4 sizes, each a positive integer or "B", "T", "N" (DIM_*), whose product
 * at the planned batch and sequence length is its numel. */
static int get_buf_shape(ld *c, const cJSON *b, plan_buf *pb) {
    int rc = 0;
    const cJSON *shape = need(c, b, "shape", cJSON_Array, &rc);
    if (!shape) return rc;
    int64_t prod = 1;
    const cJSON *s;
    cJSON_ArrayForEach(s, shape) {
        int64_t d = 0, v = 0;
        if (cJSON_IsString(s))
            d = !strcmp(s->valuestring, "B") ? DIM_B : !strcmp(s->valuestring, "T") ? DIM_T : !strcmp(s->valuestring, "N") ? DIM_N : 0;
        else if (!json_whole(s, 1, (int64_t)1 << 40, &d))
            d = 0;
        if (!d || pb->ndim >= 4) return bad(c, "field '%s.shape' is not a list of 1 to 4 positive sizes or B, T, N", c->at);
        v = d == DIM_B ? c->p->B : d == DIM_T ? c->p->T : d == DIM_N ? (int64_t)c->p->B * c->p->T : d;
        if (prod > ((int64_t)1 << 40) / v) return bad(c, "field '%s.shape' is implausibly large", c->at);
        prod *= v;
        pb->shape[pb->ndim++] = d;
    }
    if (!pb->ndim || prod != pb->numel)
        return bad(c, "field '%s.shape' holds %lld elements at B=%d, T=%d; numel says %lld", c->at, (long long)prod, c->p->B,
                   c->p->T, (long long)pb->numel);
    return 0;
}

static int load_buffers(ld *c, const cJSON *root) {
    plan_t *p = c->p;
    int rc = 0;
    enter(c, "%s", "");
    const cJSON *arr = need(c, root, "buffers", cJSON_Array, &rc);
    if (!arr) return rc;
    int n = cJSON_GetArraySize(arr);
    if (n < 1 || n > 1000000) return bad(c, "field 'buffers' has %d entries", n);
    p->bufs = calloc((size_t)n, sizeof *p->bufs);
    if (!p->bufs) return hyp_fail(c->e, HYP_EFAIL, "%s: out of memory", c->path);
    const cJSON *b;
    cJSON_ArrayForEach(b, arr) {
        plan_buf *pb = &p->bufs[p->n_bufs];
        char name[512], kind[16];
        enter(c, "buffers[%d]", p->n_bufs);
        TRY(get_str(c, b, "name", name, sizeof name));
        enter(c, "buffers[%d] ('%s')", p->n_bufs, name);
        TRY(get_str(c, b, "kind", kind, sizeof kind));
        pb->name = strdup(name);
        if (!pb->name) return hyp_fail(c->e, HYP_EFAIL, "%s: out of memory", c->path);
        p->n_bufs++;
        if (!strcmp(kind, "param")) pb->kind = BUF_PARAM;
        else if (!strcmp(kind, "grad")) pb->kind = BUF_GRAD;
        else if (!strcmp(kind, "act")) pb->kind = BUF_ACT;
        else if (!strcmp(kind, "tokens")) pb->kind = BUF_TOKENS;
        else return bad(c, "field '%s.kind' = \"%s\" is none of param, grad, act, tokens", c->at, kind);
        TRY(get_dtype(c, b, &pb->dtype));
        TRY(get_int(c, b, "numel", 1, (int64_t)1 << 40, &pb->numel));
        TRY(get_buf_shape(c, b, pb));
        /* the executors hold token ids as their own i32 arrays and everything else as f32 arenas */
        if ((pb->kind == BUF_TOKENS) != (pb->dtype == HYP_DT_I32))
            return bad(c, "field '%s.dtype' = %s: token buffers are i32 and this runtime holds no other integer buffer",
                       c->at, hyp_dtype_name(pb->dtype));
        if ((pb->kind == BUF_PARAM || pb->kind == BUF_GRAD) && pb->dtype != HYP_DT_F32)
            return bad(c, "field '%s.dtype' = %s: parameters and gradients are f32 in this runtime", c->at,
                       hyp_dtype_name(pb->dtype));
        int64_t arena = pb->kind == BUF_ACT ? p->act_bytes
                        : pb->kind == BUF_TOKENS ? (int64_t)p->B * p->T * 4
                                                 : p->param_bytes;
        const char *aname = pb->kind == BUF_ACT ? "activation arena (act_bytes)"
                            : pb->kind == BUF_TOKENS ? "token array (B*T i32)"
                                                     : "parameter arena (param_bytes)";
        TRY(get_placement(c, b, pb->dtype, pb->numel, arena, aname, &pb->offset_bytes, &pb->bytes));
        if (pb->kind == BUF_TOKENS && pb->offset_bytes != 0) return bad(c, "field '%s.offset': a token buffer has no offset", c->at);
        pb->offset = pb->offset_bytes / (int64_t)hyp_dtype_size(pb->dtype);
        if (find_buf(p, name) != p->n_bufs - 1) return bad(c, "field '%s.name': duplicate buffer '%s'", c->at, name);
    }
    enter(c, "%s", "");
    p->tokens_buf = find_buf(p, "tokens");
    p->targets_buf = find_buf(p, "targets");
    p->losses_buf = find_buf(p, "losses");
    if (p->tokens_buf < 0 || p->targets_buf < 0 || p->losses_buf < 0)
        return bad(c, "field 'buffers': the tokens, targets or losses buffer is missing");
    if (p->bufs[p->tokens_buf].kind != BUF_TOKENS || p->bufs[p->targets_buf].kind != BUF_TOKENS ||
        p->bufs[p->losses_buf].kind != BUF_ACT)
        return bad(c, "field 'buffers': tokens/targets/losses buffers have the wrong kind");
    /* optional (v2126): each input token's position in its document, filled by the loader */
    p->positions_buf = find_buf(p, "positions");
    if (p->positions_buf >= 0 && (p->bufs[p->positions_buf].kind != BUF_TOKENS || p->bufs[p->positions_buf].dtype != HYP_DT_I32))
        return bad(c, "field 'buffers': the positions buffer must be a token array (kind tokens, i32)");
    return 0;
}

/* The attributes an op may carry and where they land in plan_op. */
enum { A_DIM, A_NUM, A_SLOT, A_EPI, A_MASK, A_MOD };
static const struct {
    const char *key;
    int type;
    size_t off;
} ATTRS[] = {
    {"B", A_DIM, offsetof(plan_op, B)},     {"T", A_DIM, offsetof(plan_op, T)},
    {"N", A_DIM, offsetof(plan_op, N)},     {"C", A_DIM, offsetof(plan_op, C)},
    {"IC", A_DIM, offsetof(plan_op, IC)},   {"OC", A_DIM, offsetof(plan_op, OC)},
    {"NH", A_DIM, offsetof(plan_op, NH)},   {"NKV", A_DIM, offsetof(plan_op, NKV)},
    {"hd", A_DIM, offsetof(plan_op, hd)},   {"H", A_DIM, offsetof(plan_op, H)},
    {"V", A_DIM, offsetof(plan_op, V)},     {"Vp", A_DIM, offsetof(plan_op, Vp)},
    {"n", A_DIM, offsetof(plan_op, n)},     {"eps", A_NUM, offsetof(plan_op, eps)},
    {"theta", A_NUM, offsetof(plan_op, theta)}, {"slot", A_SLOT, offsetof(plan_op, slot)},
    {"scale", A_NUM, offsetof(plan_op, scale)}, {"alpha", A_NUM, offsetof(plan_op, alpha)},
    {"bits", A_DIM, offsetof(plan_op, bits)}, {"group", A_DIM, offsetof(plan_op, group)},
    {"rowwise", A_DIM, offsetof(plan_op, rowwise)}, {"epilogue", A_EPI, offsetof(plan_op, epi)},
    {"mask", A_MASK, offsetof(plan_op, mask)}, {"window", A_DIM, offsetof(plan_op, window)},
    {"prefix", A_DIM, offsetof(plan_op, prefix)}, {"score_mod", A_MOD, offsetof(plan_op, score_mod)},
    {"softcap", A_NUM, offsetof(plan_op, softcap)},
    {"E", A_DIM, offsetof(plan_op, E)},     {"K", A_DIM, offsetof(plan_op, K)},
    {"norm_topk", A_DIM, offsetof(plan_op, norm_topk)}, {"aux_coef", A_NUM, offsetof(plan_op, aux_coef)},
    {"capacity", A_NUM, offsetof(plan_op, capacity)}, {"Hs", A_DIM, offsetof(plan_op, Hs)},
    {"sigmoid", A_DIM, offsetof(plan_op, sigmoid)}, {"bias_rate", A_NUM, offsetof(plan_op, bias_rate)},
};

/* v2117's names of the attention mask rules and score modifiers, by code (core/attn_mod.h) */
static const char *const MASK_NAMES[] = {"causal", "sliding_window", "prefix_lm", NULL};
static const char *const MOD_NAMES[] = {"none", "softcap", "alibi", NULL};

/* Reads attribute v (key) of op o: a dim is a positive integer or one of "B", "T", "N". */
static int read_attr(ld *c, const cJSON *v, const char *key, plan_op *o) {
    size_t k;
    for (k = 0; k < sizeof ATTRS / sizeof *ATTRS; k++)
        if (!strcmp(ATTRS[k].key, key)) break;
    char *dst = (char *)o + ATTRS[k].off;
    if (ATTRS[k].type == A_DIM) {
        int64_t d = 0;
        if (cJSON_IsString(v)) {
            if (!strcmp(v->valuestring, "B")) d = DIM_B;
            else if (!strcmp(v->valuestring, "T")) d = DIM_T;
            else if (!strcmp(v->valuestring, "N")) d = DIM_N;
            else return bad(c, "field '%s.attrs.%s' = \"%s\" is no symbolic dimension (B, T, N)", c->at, key, v->valuestring);
        } else if (!json_whole(v, 1, (int64_t)1 << 40, &d)) {
            return bad(c, "field '%s.attrs.%s' is not a positive integer or B, T, N", c->at, key);
        }
        memcpy(dst, &d, sizeof d);
    } else if (ATTRS[k].type == A_MASK || ATTRS[k].type == A_MOD) {
        const char *const *names = ATTRS[k].type == A_MASK ? MASK_NAMES : MOD_NAMES;
        int64_t code = -1;
        for (int i = 0; cJSON_IsString(v) && names[i]; i++)
            if (!strcmp(v->valuestring, names[i])) code = i;
        if (code < 0)
            return bad(c, "field '%s.attrs.%s' is not one of %s, %s, %s", c->at, key, names[0], names[1], names[2]);
        memcpy(dst, &code, sizeof code);
    } else if (ATTRS[k].type == A_NUM) {
        if (!cJSON_IsNumber(v) || !(v->valuedouble > 0 && v->valuedouble < 1e30))
            return bad(c, "field '%s.attrs.%s' is not a positive number", c->at, key);
        float f = (float)v->valuedouble;
        memcpy(dst, &f, sizeof f);
    } else if (ATTRS[k].type == A_EPI) { /* "gelu" on matmul_fwd, "dgelu" on matmul_bwd */
        int fwd = hyp_op_get(o->op)->device == HYP_OPDEV_GEMM_FWD;
        const char *want = fwd ? "gelu" : "dgelu";
        if (fwd && cJSON_IsString(v) && !strcmp(v->valuestring, "swiglu")) {
            o->epi = PLAN_EPI_SWIGLU;
        } else {
            if (!cJSON_IsString(v) || strcmp(v->valuestring, want))
                return bad(c, "field '%s.attrs.epilogue' must be \"%s\"%s on %s", c->at, want, fwd ? " or \"swiglu\"" : "", hyp_op_name(o->op));
            o->epi = fwd ? PLAN_EPI_GELU : PLAN_EPI_DGELU;
        }
    } else {
        int64_t slot = 0;
        if (!json_whole(v, 0, (int64_t)c->p->fp8_slots - 1, &slot))
            return bad(c, "field '%s.attrs.slot' names an fp8 scaling slot the plan does not declare (fp8.slots has %d)", c->at,
                       c->p->fp8_slots);
        int s = (int)slot;
        memcpy(dst, &s, sizeof s);
    }
    return 0;
}

static int parse_op(ld *c, const cJSON *j, plan_op *o) {
    plan_t *p = c->p;
    char name[64];
    TRY(get_str(c, j, "op", name, sizeof name));
    int k = hyp_op_find(name);
    if (k < 0) return bad(c, "field '%s.op' = \"%s\" is no op of this runtime's op registry", c->at, name);
    o->op = k;
    int rc = 0;
    const cJSON *ins = need(c, j, "ins", cJSON_Array, &rc);
    if (!ins) return rc;
    const cJSON *outs = need(c, j, "outs", cJSON_Array, &rc);
    if (!outs) return rc;
    const cJSON *attrs = need(c, j, "attrs", cJSON_Object, &rc);
    if (!attrs) return rc;
    int nin, nout;
    hyp_op_arity(k, &nin, &nout);
    o->nin = cJSON_GetArraySize(ins);
    o->nout = cJSON_GetArraySize(outs);
    if (o->nin != nin || o->nout != nout) {
        int in = o->nin != nin;
        return bad(c, "field '%s.%s': op '%s' has %d %s; it takes %d (%s)", c->at, in ? "ins" : "outs", name,
                   in ? o->nin : o->nout, in ? "inputs" : "outputs", in ? nin : nout, hyp_op_get(k)->sig);
    }
    for (int side = 0; side < 2; side++) {
        const cJSON *arr = side ? outs : ins;
        int i = 0;
        const cJSON *a;
        cJSON_ArrayForEach(a, arr) {
            hyp_op_arg spec;
            hyp_op_arg_of(k, side, i, &spec);
            const char *sname = side ? "outs" : "ins";
            if (!cJSON_IsString(a)) return bad(c, "field '%s.%s[%d]' is not a buffer name", c->at, sname, i);
            int idx = -1;
            if (a->valuestring[0] == 0) {
                if (!spec.optional)
                    return bad(c, "field '%s.%s[%d]': op '%s' argument '%s' is required but empty", c->at, sname, i, name,
                               spec.name);
            } else {
                idx = find_buf(p, a->valuestring);
                if (idx < 0)
                    return bad(c, "field '%s.%s[%d]': op '%s' names unknown buffer '%s'", c->at, sname, i, name, a->valuestring);
                if (!(spec.dtypes & (1u << p->bufs[idx].dtype)))
                    return bad(c, "field '%s.%s[%d]': op '%s' argument '%s' does not take buffer '%s' of dtype %s (%s)", c->at,
                               sname, i, name, spec.name, a->valuestring, hyp_dtype_name(p->bufs[idx].dtype),
                               hyp_op_get(k)->sig);
            }
            if (side) o->out[i] = idx;
            else o->in[i] = idx;
            i++;
        }
    }
    /* attributes: each one the op takes, none it does not */
    const cJSON *av;
    cJSON_ArrayForEach(av, attrs) {
        if (!hyp_op_takes_attr(k, av->string, NULL))
            return bad(c, "field '%s.attrs.%s': op '%s' takes no attribute '%s' (it takes %s)", c->at, av->string, name,
                       av->string, hyp_op_get(k)->attrs);
        TRY(read_attr(c, av, av->string, o));
    }
    for (size_t a = 0; a < sizeof ATTRS / sizeof *ATTRS; a++) {
        int opt = 0;
        if (hyp_op_takes_attr(k, ATTRS[a].key, &opt) && !opt && !cJSON_GetObjectItemCaseSensitive(attrs, ATTRS[a].key))
            return bad(c, "missing field '%s.attrs.%s' (op '%s' takes %s)", c->at, ATTRS[a].key, name, hyp_op_get(k)->attrs);
    }
    if (o->NKV && o->NH % o->NKV) return bad(c, "field '%s.attrs': NH is not a multiple of NKV", c->at);
    if (o->E < 0 || o->K < 0 || o->K > o->E || o->norm_topk > 1)
        return bad(c, "field '%s.attrs': op '%s' needs K <= E (top_k of the experts) and norm_topk 1 or absent", c->at, name);
    if (o->capacity < 0) return bad(c, "field '%s.attrs.capacity': op '%s' needs a capacity factor >= 0 (0: dropless)", c->at, name);
    if (o->sigmoid > 1 || (o->sigmoid && o->aux_coef > 0) || o->bias_rate < 0)
        return bad(c, "field '%s.attrs': op '%s' needs sigmoid 1 or absent, no aux_coef with it, and bias_rate >= 0", c->at, name);
    /* every argument big enough at the planned maximum batch */
    for (int side = 0; side < 2; side++) {
        int cnt = side ? o->nout : o->nin;
        for (int i = 0; i < cnt; i++) {
            int idx = side ? o->out[i] : o->in[i];
            if (idx < 0) continue;
            int64_t needn = hyp_op_get(k)->need(o, side * 100 + i, p->B, p->T, p->V);
            if (needn <= 0 || p->bufs[idx].numel < needn)
                return bad(c, "field '%s.%s[%d]': op '%s' needs %lld elements in '%s', which has %lld", c->at,
                           side ? "outs" : "ins", i, name, (long long)needn, p->bufs[idx].name,
                           (long long)p->bufs[idx].numel);
        }
    }
    return 0;
}

static int load_ops(ld *c, const cJSON *root, const char *key, plan_op **out, int *n) {
    int rc = 0;
    enter(c, "%s", "");
    const cJSON *arr = need(c, root, key, cJSON_Array, &rc);
    if (!arr) return rc;
    int cnt = cJSON_GetArraySize(arr);
    *out = calloc((size_t)cnt + 1, sizeof **out);
    if (!*out) return hyp_fail(c->e, HYP_EFAIL, "%s: out of memory", c->path);
    const cJSON *j;
    cJSON_ArrayForEach(j, arr) {
        enter(c, "%s[%d]", key, *n);
        TRY(parse_op(c, j, &(*out)[*n]));
        (*n)++;
    }
    return 0;
}

static int load_params(ld *c, const cJSON *root) {
    plan_t *p = c->p;
    int rc = 0;
    enter(c, "%s", "");
    const cJSON *arr = need(c, root, "params", cJSON_Array, &rc);
    if (!arr) return rc;
    int n = cJSON_GetArraySize(arr);
    p->params = calloc((size_t)n + 1, sizeof *p->params);
    if (!p->params) return hyp_fail(c->e, HYP_EFAIL, "%s: out of memory", c->path);
    const cJSON *j;
    cJSON_ArrayForEach(j, arr) {
        plan_param *pp = &p->params[p->n_params_t];
        char name[256];
        enter(c, "params[%d]", p->n_params_t);
        TRY(get_str(c, j, "name", name, sizeof name));
        enter(c, "params[%d] ('%s')", p->n_params_t, name);
        pp->name = strdup(name);
        if (!pp->name) return hyp_fail(c->e, HYP_EFAIL, "%s: out of memory", c->path);
        p->n_params_t++;
        if (find_param(p, name) != p->n_params_t - 1) return bad(c, "field '%s.name': duplicate parameter", c->at);
        TRY(get_dtype(c, j, &pp->dtype));
        if (pp->dtype != HYP_DT_F32)
            return bad(c, "field '%s.dtype' = %s: this runtime keeps f32 parameters", c->at, hyp_dtype_name(pp->dtype));
        TRY(get_int(c, j, "numel", 1, (int64_t)1 << 40, &pp->numel));
        TRY(get_placement(c, j, pp->dtype, pp->numel, p->param_bytes, "parameter arena (param_bytes)", &pp->offset_bytes,
                          &pp->bytes));
        pp->offset = pp->offset_bytes / 4;
        const cJSON *shape = need(c, j, "shape", cJSON_Array, &rc);
        if (!shape) return rc;
        int64_t prod = 1;
        const cJSON *s;
        cJSON_ArrayForEach(s, shape) {
            int64_t d = 0;
            if (pp->ndim >= 4 || !json_whole(s, 1, (int64_t)1 << 40, &d))
                return bad(c, "field '%s.shape' is not a list of 1 to 4 positive sizes", c->at);
            if (prod > ((int64_t)1 << 40) / d) return bad(c, "field '%s.shape' is implausibly large (over 2^40 elements)", c->at);
            pp->shape[pp->ndim++] = d;
            prod *= d;
        }
        if (prod != pp->numel) return bad(c, "field '%s.shape' does not match its numel", c->at);
        const cJSON *init = need(c, j, "init", cJSON_Object, &rc);
        if (!init) return rc;
        char kind[16];
        enter(c, "params[%d] ('%s').init", p->n_params_t - 1, name);
        TRY(get_str(c, init, "kind", kind, sizeof kind));
        if (!strcmp(kind, "normal")) {
            double std;
            TRY(get_num(c, init, "std", 0, 10, &std));
            pp->init = PINIT_NORMAL;
            pp->init_std = (float)std;
        } else if (!strcmp(kind, "ones")) pp->init = PINIT_ONES;
        else if (!strcmp(kind, "zeros")) pp->init = PINIT_ZEROS;
        else return bad(c, "field '%s.kind' = \"%s\" is none of normal, ones, zeros", c->at, kind);
    }
    /* parameters must not overlap (each gets its own optimizer state) */
    for (int i = 1; i < p->n_params_t; i++)
        if (p->params[i].offset < p->params[i - 1].offset + p->params[i - 1].numel) {
            enter(c, "params[%d] ('%s')", i, p->params[i].name);
            return bad(c, "field '%s.offset': it overlaps the previous parameter in the arena", c->at);
        }
    return 0;
}

static int load_optimizer(ld *c, const cJSON *root) {
    plan_t *p = c->p;
    hyp_optim_cfg *o = &p->optim;
    int rc = 0;
    enter(c, "%s", "");
    const cJSON *opt = need(c, root, "optimizer", cJSON_Object, &rc);
    if (!opt) return rc;
    enter(c, "optimizer");
    TRY(get_str(c, opt, "kind", o->kind, sizeof o->kind));
    /* hyper and state: read as written; whether they are what the kind takes is the optimizer's
     * own check (runtime/optim/optim.h: hyp_optim_open), the one place that knows each kind */
    const cJSON *hy = need(c, opt, "hyper", cJSON_Object, &rc);
    if (!hy) return rc;
    enter(c, "optimizer.hyper");
    const cJSON *h;
    cJSON_ArrayForEach(h, hy) {
        if (o->n_hyper == HYP_OPT_MAX_HYPER) return bad(c, "field 'optimizer.hyper' has more than %d entries", HYP_OPT_MAX_HYPER);
        if (strlen(h->string) >= sizeof o->hyper_name[0]) return bad(c, "field 'optimizer.hyper.%.40s': name too long", h->string);
        TRY(get_num(c, hy, h->string, -1e30, 1e30, &o->hyper[o->n_hyper]));
        snprintf(o->hyper_name[o->n_hyper], sizeof o->hyper_name[0], "%s", h->string);
        o->n_hyper++;
    }
    enter(c, "optimizer");
    const cJSON *st = need(c, opt, "state", cJSON_Array, &rc);
    if (!st) return rc;
    if (cJSON_GetArraySize(st) > HYP_OPT_MAX_STATE)
        return bad(c, "field 'optimizer.state' lists %d tensors (at most %d)", cJSON_GetArraySize(st), HYP_OPT_MAX_STATE);
    const cJSON *sj;
    cJSON_ArrayForEach(sj, st) {
        int i = o->n_state;
        enter(c, "optimizer.state[%d]", i);
        TRY(get_str(c, sj, "name", o->state_name[i], sizeof o->state_name[i]));
        TRY(get_dtype(c, sj, &o->state_dtype[i]));
        o->n_state++;
        o->state_off[i] = malloc(sizeof(int64_t) * (size_t)(p->n_params_t + 1));
        o->state_n[i] = malloc(sizeof(int64_t) * (size_t)(p->n_params_t + 1));
        if (!o->state_off[i] || !o->state_n[i]) return hyp_fail(c->e, HYP_EFAIL, "%s: out of memory", c->path);
        const cJSON *nl = cJSON_GetObjectItemCaseSensitive(sj, "numel");
        if (nl && (!cJSON_IsArray(nl) || cJSON_GetArraySize(nl) != p->n_params_t))
            return bad(c, "field 'optimizer.state[%d].numel' must list one count per parameter (%d)", i, p->n_params_t);
        o->state_compact[i] = nl != NULL;
        int64_t off = 0;
        const cJSON *v = nl ? nl->child : NULL;
        for (int q = 0; q < p->n_params_t; q++, v = v ? v->next : NULL) {
            if (!nl) {
                o->state_off[i][q] = p->params[q].offset, o->state_n[i][q] = p->params[q].numel;
                continue;
            }
            /* a packed state may hold more floats than its parameter (Shampoo's blocked factors:
             * br^2 + bc^2 per block), never more than 2^40 */
            int64_t sn = 0;
            if (!json_whole(v, 0, (int64_t)1 << 40, &sn))
                return bad(c, "field 'optimizer.state[%d].numel[%d]' (parameter '%s') must be a whole number from 0 to 2^40",
                           i, q, p->params[q].name);
            o->state_off[i][q] = off, o->state_n[i][q] = sn;
            off += (o->state_n[i][q] + 15) / 16 * 16;
            if (off > (int64_t)1 << 50) /* the arena limit of get_placement; keeps the sum far from overflow */
                return bad(c, "field 'optimizer.state[%d].numel' adds up to more than 2^50 floats", i);
        }
        o->state_floats[i] = nl ? off : p->param_floats;
    }
    enter(c, "optimizer");
    char shard[16];
    TRY(get_str(c, opt, "shard", shard, sizeof shard));
    if (strcmp(shard, "elementwise") && strcmp(shard, "matrix"))
        return bad(c, "field 'optimizer.shard' = \"%s\" is neither elementwise nor matrix", shard);
    o->shard_matrix = !strcmp(shard, "matrix");
    /* groups: every parameter in exactly one */
    const cJSON *gs = need(c, opt, "groups", cJSON_Array, &rc);
    if (!gs) return rc;
    int ng = cJSON_GetArraySize(gs);
    if (ng < 1 || ng > 1024) return bad(c, "field 'optimizer.groups' has %d groups (1 to 1024)", ng);
    o->groups = calloc((size_t)ng, sizeof *o->groups);
    int *owner = malloc(sizeof(int) * (size_t)(p->n_params_t + 1));
    if (!o->groups || !owner) {
        free(owner);
        return hyp_fail(c->e, HYP_EFAIL, "%s: out of memory", c->path);
    }
    for (int i = 0; i < p->n_params_t; i++) owner[i] = -1;
    const cJSON *gj;
    cJSON_ArrayForEach(gj, gs) {
        hyp_optim_group *g = &o->groups[o->n_groups];
        enter(c, "optimizer.groups[%d]", o->n_groups);
        o->n_groups++;
        const cJSON *pl = NULL;
        if ((rc = get_str(c, gj, "name", g->name, sizeof g->name)) || (rc = get_num(c, gj, "lr_mult", 0, 1e6, &g->lr_mult)) ||
            (rc = get_num(c, gj, "weight_decay", 0, 10, &g->weight_decay)) || !(pl = need(c, gj, "params", cJSON_Array, &rc)))
            break;
        const cJSON *rj = cJSON_GetObjectItemCaseSensitive(gj, "rule");
        if (rj && (rc = get_str(c, gj, "rule", g->rule, sizeof g->rule))) break;
        for (int q = 0; q < o->n_groups - 1; q++)
            if (!strcmp(o->groups[q].name, g->name)) {
                rc = bad(c, "field '%s.name': a second group named '%s'", c->at, g->name);
                break;
            }
        if (rc) break;
        g->params = malloc(sizeof(int) * (size_t)(cJSON_GetArraySize(pl) + 1));
        if (!g->params) {
            rc = hyp_fail(c->e, HYP_EFAIL, "%s: out of memory", c->path);
            break;
        }
        const cJSON *pn;
        cJSON_ArrayForEach(pn, pl) {
            int pi = cJSON_IsString(pn) ? find_param(p, pn->valuestring) : -1;
            if (pi < 0) {
                rc = bad(c, "field '%s.params[%d]' names no parameter of the plan", c->at, g->n_params);
                break;
            }
            if (owner[pi] >= 0) {
                rc = bad(c, "field '%s.params[%d]': parameter '%s' is already in group '%s'; each parameter belongs to one group",
                         c->at, g->n_params, pn->valuestring, o->groups[owner[pi]].name);
                break;
            }
            owner[pi] = o->n_groups - 1;
            g->params[g->n_params++] = pi;
        }
        if (rc) break;
    }
    for (int i = 0; !rc && i < p->n_params_t; i++)
        if (owner[i] < 0)
            rc = bad(c, "field 'optimizer.groups': parameter '%s' is in no group; each parameter belongs to one group",
                     p->params[i].name);
    /* each parameter's "group" names the group that lists it */
    const cJSON *pj = cJSON_GetObjectItemCaseSensitive(root, "params");
    for (int i = 0; !rc && i < p->n_params_t; i++) {
        char gname[32];
        enter(c, "params[%d] ('%s')", i, p->params[i].name);
        if ((rc = get_str(c, cJSON_GetArrayItem(pj, i), "group", gname, sizeof gname))) break;
        if (strcmp(gname, o->groups[owner[i]].name))
            rc = bad(c, "field '%s.group' = \"%s\", but optimizer group '%s' lists it", c->at, gname, o->groups[owner[i]].name);
        p->params[i].group = owner[i];
    }
    free(owner);
    if (rc) return rc;
    for (int i = 0; i < p->n_params_t; i++) p->params[i].decay = o->groups[p->params[i].group].weight_decay > 0;
    enter(c, "%s", "");
    return 0;
}

/* p->state_hash: xxh3-128 of the plan without train.zero_stage / zero_prefetch / comm_overlap and
 * the preempt, tensorboard, loss_prediction, profile, memory_profile and guard sections and
 * checkpoint.every/keep/dir/async/full_every (consumed: root loses them), so a checkpoint resumes
 * under another ZeRO stage of the same plan (v2175). */
static int state_hash(ld *c, cJSON *root) {
    cJSON *t = cJSON_GetObjectItemCaseSensitive(root, "train");
    cJSON_DeleteItemFromObjectCaseSensitive(t, "zero_stage");
    cJSON_DeleteItemFromObjectCaseSensitive(t, "zero_prefetch");
    cJSON_DeleteItemFromObjectCaseSensitive(t, "comm_overlap");
    cJSON_DeleteItemFromObjectCaseSensitive(t, "comm_streams"); /* v2168: when gradients are summed, not what */
    cJSON_DeleteItemFromObjectCaseSensitive(t, "allreduce"); /* v2171: the order gradients are summed in, not the state */
    cJSON_DeleteItemFromObjectCaseSensitive(t, "prefetch"); /* how batches are read, not which */
    cJSON_DeleteItemFromObjectCaseSensitive(t, "cuda_graphs"); /* v2165: how work is issued, not what */
    cJSON_DeleteItemFromObjectCaseSensitive(root, "preempt"); /* how a run stops, not its state */
    cJSON_DeleteItemFromObjectCaseSensitive(root, "tensorboard"); /* what it logs, not its state */
    cJSON_DeleteItemFromObjectCaseSensitive(root, "loss_prediction"); /* v2148: what it predicts, when it stops */
    cJSON_DeleteItemFromObjectCaseSensitive(root, "profile");        /* v2184/v2185: what it measures */
    cJSON_DeleteItemFromObjectCaseSensitive(root, "memory_profile");
    cJSON_DeleteItemFromObjectCaseSensitive(root, "guard"); /* v2176: when it skips, not the state */
    cJSON *ck = cJSON_GetObjectItemCaseSensitive(root, "checkpoint"); /* where and how often it saves */
    static const char *ckio[] = {"every", "keep", "dir", "async", "full_every"};
    for (size_t i = 0; ck && i < sizeof ckio / sizeof *ckio; i++) cJSON_DeleteItemFromObjectCaseSensitive(ck, ckio[i]);
    if (ck && !ck->child) cJSON_DeleteItemFromObjectCaseSensitive(root, "checkpoint"); /* nothing else in it */
    char *txt = cJSON_PrintUnformatted(root);
    if (!txt) return hyp_fail(c->e, HYP_EFAIL, "%s: out of memory", c->path);
    XXH128_hash_t h = XXH3_128bits(txt, strlen(txt));
    free(txt);
    snprintf(c->p->state_hash, sizeof c->p->state_hash, "%016llx%016llx", (unsigned long long)h.high64,
             (unsigned long long)h.low64);
    return HYP_OK;
}

/* Reads an integer / a number field into dst, returning from the loader on a failure. */
#define GI(obj, key, lo, hi, dst)                                                                  \
    do {                                                                                           \
        int64_t x_;                                                                                \
        if ((rc = get_int(c, obj, key, lo, hi, &x_))) return rc;                                   \
        dst = x_;                                                                                  \
    } while (0)
#define GN(obj, key, lo, hi, dst)                                                                  \
    do {                                                                                           \
        if ((rc = get_num(c, obj, key, lo, hi, &dst))) return rc;                                 \
    } while (0)

/* model: the architecture's dimensions and names; the target and backend */
static int load_model(ld *c, const cJSON *root) {
    plan_t *p = c->p;
    int rc = 0;
    const cJSON *m = need(c, root, "model", cJSON_Object, &rc);
    if (!m) return rc;
    enter(c, "model");
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
    if ((rc = get_str(c, m, "name", p->model_name, sizeof p->model_name)) ||
        (rc = get_str(c, m, "arch", p->arch, sizeof p->arch)) ||
        (rc = get_str(c, m, "norm", p->norm, sizeof p->norm)) ||
        (rc = get_str(c, m, "activation", p->activation, sizeof p->activation)) ||
        (rc = get_str(c, m, "position", p->position, sizeof p->position)) ||
        (rc = get_str(c, m, "tokenizer", p->tokenizer, sizeof p->tokenizer)))
        return rc;
    enter(c, "%s", "");
    if ((rc = get_str(c, root, "target", p->target, sizeof p->target)) ||
        (rc = get_str(c, root, "backend", p->backend, sizeof p->backend)))
        return rc;
    p->qk_norm = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(m, "qk_norm"));
    p->tied = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(m, "tied"));
    p->bias = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(m, "bias"));
    enter(c, "%s", "");
    return rc;
}

/* train: batch, steps, data-parallel and data-loader settings, the schedule */
static int load_train(ld *c, const cJSON *root) {
    plan_t *p = c->p;
    int rc = 0;
    const cJSON *t = need(c, root, "train", cJSON_Object, &rc);
    if (!t) return rc;
    enter(c, "train");
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
    GI(t, "data_parallel", 0, 1, p->data_parallel);
    if (cJSON_GetObjectItemCaseSensitive(t, "comm_streams")) /* optional (v2168; absent: 0 = none) */
        GI(t, "comm_streams", 1, 4, p->comm_streams);
    if (cJSON_GetObjectItemCaseSensitive(t, "tp")) /* optional (v2106; absent: 0 = no tensor parallelism) */
        GI(t, "tp", 2, 64, p->tp);
    if (cJSON_GetObjectItemCaseSensitive(t, "pp")) /* optional (v2107; absent: 0 = no pipeline) */
        GI(t, "pp", 2, PLAN_PP_MAX_STAGES, p->pp);
    if (cJSON_GetObjectItemCaseSensitive(t, "cp")) { /* optional (v2108; absent: 0 = no context parallelism) */
        char lay[16];
        GI(t, "cp", 2, 1024, p->cp);
        if ((rc = get_str(c, t, "cp_layout", lay, sizeof lay))) return rc;
        if (strcmp(lay, "contiguous") && strcmp(lay, "zigzag")) {
            char f[700];
            return bad(c, "field '%s' = \"%s\" is neither contiguous nor zigzag", field(c, "cp_layout", f, sizeof f), lay);
        }
        p->cp_layout = !strcmp(lay, "zigzag");
        if ((rc = get_str(c, t, "cp_comm", lay, sizeof lay))) return rc;
        if (strcmp(lay, "allgather") && strcmp(lay, "ring")) {
            char f[700];
            return bad(c, "field '%s' = \"%s\" is neither allgather nor ring", field(c, "cp_comm", f, sizeof f), lay);
        }
        p->cp_comm = !strcmp(lay, "ring");
    }
    if (cJSON_GetObjectItemCaseSensitive(t, "ep")) /* optional (v2109; absent: 0 = no expert parallelism) */
        GI(t, "ep", 2, 256, p->ep);
    if (cJSON_GetObjectItemCaseSensitive(t, "tf32")) /* optional (v2100 fp32_matmul tf32; absent: 0 = IEEE) */
        GI(t, "tf32", 0, 1, p->tf32);
    if (cJSON_GetObjectItemCaseSensitive(t, "cuda_graphs")) /* optional (v2165; absent: 0 = eager) */
        GI(t, "cuda_graphs", 0, 1, p->cuda_graphs);
    if (cJSON_GetObjectItemCaseSensitive(t, "allreduce")) { /* optional (v2171; absent: the library's own) */
        const cJSON *ar = need(c, t, "allreduce", cJSON_Object, &rc);
        if (!ar) return rc;
        enter(c, "train.allreduce");
        if ((rc = get_str(c, ar, "algorithm", p->allreduce_algo, sizeof p->allreduce_algo))) return rc;
        if (strcmp(p->allreduce_algo, "ring") && strcmp(p->allreduce_algo, "tree") &&
            strcmp(p->allreduce_algo, "halving_doubling") && strcmp(p->allreduce_algo, "hierarchical"))
            return bad(c, "field 'train.allreduce.algorithm' = \"%s\" is none of ring, tree, halving_doubling, hierarchical", p->allreduce_algo);
        GI(ar, "node_size", 0, 1 << 20, p->allreduce_node_size);
        enter(c, "train");
    }
    if (cJSON_GetObjectItemCaseSensitive(t, "prefetch")) /* optional (v2128; absent: 0 = none) */
        GI(t, "prefetch", 0, 64, p->prefetch);
    if (cJSON_GetObjectItemCaseSensitive(t, "stream_buffer")) /* optional (v2129; absent: 0 = shards) */
        GI(t, "stream_buffer", 0, 10000000, p->stream_buffer);
    if (cJSON_GetObjectItemCaseSensitive(t, "pack_max_docs")) /* optional (v2126; absent: 0 = windows) */
        GI(t, "pack_max_docs", 0, 1 << 20, p->pack_max_docs);
    if (cJSON_GetObjectItemCaseSensitive(t, "token_budget")) { /* optional (v2127; absent: 0 = fixed) */
        GI(t, "token_budget", 0, (int64_t)1 << 40, p->token_budget);
        GI(t, "buckets", 1, 16, p->buckets);
    }
    GI(t, "seed", 0, (int64_t)1 << 52, p->seed);
    if ((rc = get_str(c, t, "schedule", p->schedule, sizeof p->schedule))) return rc;
    if (strcmp(p->schedule, "cosine") && strcmp(p->schedule, "wsd") && strcmp(p->schedule, "constant") &&
        strcmp(p->schedule, "linear")) {
        rc = bad(c, "field 'train.schedule' = \"%s\" is none of cosine, wsd, constant, linear", p->schedule);
        return rc;
    }
    GN(t, "lr", 0, 10, p->lr);
    GN(t, "min_lr_ratio", 0, 1, p->min_lr_ratio);
    GN(t, "decay_fraction", 0, 1, p->decay_fraction);
    GN(t, "max_norm", 0, 1e9, p->max_norm);
    enter(c, "%s", "");
    enter(c, "%s", "");
    return rc;
}

/* the arenas' sizes */
static int load_sizes(ld *c, const cJSON *root) {
    plan_t *p = c->p;
    int rc = 0;
    GI(root, "param_bytes", 4, (int64_t)1 << 42, p->param_bytes);
    GI(root, "act_bytes", 4, (int64_t)1 << 42, p->act_bytes);
    GI(root, "act_bytes_unplanned", 4, (int64_t)1 << 44, p->act_bytes_unplanned);
    GI(root, "act_bytes_peak_live", 0, (int64_t)1 << 44, p->act_bytes_peak_live);
    if (p->param_bytes % 4) {
        rc = bad(c, "field 'param_bytes' = %lld is not a whole number of f32 parameters", (long long)p->param_bytes);
        return rc;
    }
    p->param_floats = p->param_bytes / 4;
    p->act_floats = (p->act_bytes + 3) / 4;
    p->act_floats_unplanned = (p->act_bytes_unplanned + 3) / 4;
    enter(c, "%s", "");
    return rc;
}

/* FLOP accounting and the hardware the MFU is reported against (v2186's window) */
static int load_hardware(ld *c, const cJSON *root) {
    plan_t *p = c->p;
    int rc = 0;
    double fpt = 0;
    GN(root, "flops_per_token", 0, 1e30, fpt);
    p->flops_per_token = fpt;
    GN(root, "flops_attn_coef", 0, 1e30, fpt);
    p->flops_attn_coef = fpt;
    const cJSON *hw = cJSON_GetObjectItemCaseSensitive(root, "hardware");
    const cJSON *pk = hw ? cJSON_GetObjectItemCaseSensitive(hw, "peak_flops") : NULL;
    const cJSON *hn = hw ? cJSON_GetObjectItemCaseSensitive(hw, "name") : NULL;
    p->peak_flops = cJSON_IsNumber(pk) && pk->valuedouble >= 0 && pk->valuedouble < 1e30 ? pk->valuedouble : 0;
    snprintf(p->hardware, sizeof p->hardware, "%s", cJSON_IsString(hn) ? hn->valuestring : "unknown");
    const cJSON *pd = hw ? cJSON_GetObjectItemCaseSensitive(hw, "peak_dtype") : NULL;
    const cJSON *pm = hw ? cJSON_GetObjectItemCaseSensitive(hw, "peak_source") : NULL;
    snprintf(p->peak_dtype, sizeof p->peak_dtype, "%s", cJSON_IsString(pd) ? pd->valuestring : "");
    p->peak_measure = cJSON_IsString(pm) && !strcmp(pm->valuestring, "measured");
    const cJSON *fc = cJSON_GetObjectItemCaseSensitive(root, "flops_convention");
    snprintf(p->flops_convention, sizeof p->flops_convention, "%s",
             cJSON_IsString(fc) ? fc->valuestring : "palm");
    /* optional: v2186's window (absent: 50 steps, the first 1 left out) */
    const cJSON *tm = cJSON_GetObjectItemCaseSensitive(root, "throughput");
    const cJSON *w = tm ? cJSON_GetObjectItemCaseSensitive(tm, "window") : NULL;
    const cJSON *sk = tm ? cJSON_GetObjectItemCaseSensitive(tm, "skip_steps") : NULL;
    p->metrics_window = cJSON_IsNumber(w) && w->valueint >= 1 && w->valueint <= 100000 ? w->valueint : 50;
    p->metrics_skip = cJSON_IsNumber(sk) && sk->valueint >= 0 && sk->valueint <= 1000 ? sk->valueint : 1;
    enter(c, "%s", "");
    return rc;
}

/* optional: what the checkpoint techniques recorded (absent: neither) */
static int load_checkpoint(ld *c, const cJSON *root) {
    plan_t *p = c->p;
    int rc = 0;
    const cJSON *ck = cJSON_GetObjectItemCaseSensitive(root, "checkpoint");
    enter(c, "checkpoint");
    if (ck && !cJSON_IsObject(ck)) {
        rc = bad(c, "field 'checkpoint' is not an object");
        return rc;
    }
    const char *flags[2] = {"elastic", "sharded"};
    int *dst[2] = {&p->ckpt_elastic, &p->ckpt_sharded};
    for (int i = 0; ck && i < 2; i++) {
        const cJSON *f = cJSON_GetObjectItemCaseSensitive(ck, flags[i]);
        if (f && !cJSON_IsBool(f)) {
            rc = bad(c, "field 'checkpoint.%s' is not true or false", flags[i]);
            return rc;
        }
        *dst[i] = cJSON_IsTrue(f);
    }
    /* v2178 settings (every, keep, dir), v2179 async, v2180 incremental: each optional */
    if (ck && cJSON_HasObjectItem(ck, "every")) GI(ck, "every", 1, 1 << 30, p->ckpt_every);
    if (ck && cJSON_HasObjectItem(ck, "keep")) GI(ck, "keep", 1, 1000000, p->ckpt_keep);
    if (ck && cJSON_HasObjectItem(ck, "async")) GI(ck, "async", 0, 16, p->ckpt_async);
    if (ck && cJSON_HasObjectItem(ck, "full_every")) GI(ck, "full_every", 1, 1000000, p->ckpt_full_every);
    if (ck && cJSON_HasObjectItem(ck, "dir")) {
        if ((rc = get_str(c, ck, "dir", p->ckpt_dir, sizeof p->ckpt_dir))) return rc;
        if (!p->ckpt_dir[0]) {
            rc = bad(c, "field 'checkpoint.dir' is empty");
            return rc;
        }
    }
    enter(c, "%s", "");
    enter(c, "%s", "");
    return rc;
}

/* optional: the v2176 loss / gradient-norm guard (absent: a non-finite loss stops the run) */
static int load_guard(ld *c, const cJSON *root) {
    plan_t *p = c->p;
    int rc = 0;
    const cJSON *gd = cJSON_GetObjectItemCaseSensitive(root, "guard");
    enter(c, "guard");
    if (gd && !cJSON_IsObject(gd)) {
        rc = bad(c, "field 'guard' is not an object");
        return rc;
    }
    if (gd) {
        p->guard = 1;
        GN(gd, "z_threshold", 1, 1e6, p->guard_z);
        GN(gd, "ema", 0.5, 0.99999, p->guard_ema);
        GI(gd, "warmup_steps", 0, 1 << 30, p->guard_warmup);
        GN(gd, "loss_ceiling", 0, 1e6, p->guard_loss_ceiling);
        GI(gd, "max_bad_steps", 1, 1 << 20, p->guard_max_bad);
        GN(gd, "lr_factor", 1e-6, 1, p->guard_lr_factor);
        GI(gd, "max_rollbacks", 0, 1 << 20, p->guard_max_rollbacks);
    }
    enter(c, "%s", "");
    enter(c, "%s", "");
    return rc;
}

/* optional: v2173 local SGD / DiLoCo (absent: the gradients are all-reduced every step) */
static int load_local_sgd(ld *c, const cJSON *root) {
    plan_t *p = c->p;
    int rc = 0;
    const cJSON *ls = cJSON_GetObjectItemCaseSensitive(root, "local_sgd");
    enter(c, "local_sgd");
    if (ls && !cJSON_IsObject(ls)) {
        rc = bad(c, "field 'local_sgd' is not an object");
        return rc;
    }
    if (ls) {
        char outer[16];
        GI(ls, "sync_every", 1, 100000, p->lsgd_every);
        if ((rc = get_str(c, ls, "outer", outer, sizeof outer))) return rc;
        if (strcmp(outer, "average") && strcmp(outer, "nesterov")) {
            rc = bad(c, "field 'local_sgd.outer' = \"%s\" is none of average, nesterov", outer);
            return rc;
        }
        p->lsgd_nesterov = !strcmp(outer, "nesterov");
        GN(ls, "outer_lr", 0, 10, p->lsgd_outer_lr);
        GN(ls, "outer_momentum", 0, 1, p->lsgd_outer_momentum);
    }
    enter(c, "%s", "");
    enter(c, "%s", "");
    return rc;
}

/* optional: v2174 async data parallelism (absent: the gradient all-reduce blocks every step) */
static int load_async_dp(ld *c, const cJSON *root) {
    plan_t *p = c->p;
    int rc = 0;
    const cJSON *ad = cJSON_GetObjectItemCaseSensitive(root, "async_dp");
    enter(c, "async_dp");
    if (ad && !cJSON_IsObject(ad)) {
        rc = bad(c, "field 'async_dp' is not an object");
        return rc;
    }
    if (ad) {
        GI(ad, "staleness", 0, 8, p->adp_staleness);
        p->adp_on = 1;
        if (p->lsgd_every > 0) {
            rc = bad(c, "sections 'async_dp' (v2174) and 'local_sgd' (v2173) both replace the per-step gradient all-reduce — keep one");
            return rc;
        }
    }
    enter(c, "%s", "");
    enter(c, "%s", "");
    return rc;
}

/* optional: v2172 gradient compression (absent: the gradients are all-reduced whole) */
static int load_grad_compress(ld *c, const cJSON *root) {
    plan_t *p = c->p;
    int rc = 0;
    const cJSON *g = cJSON_GetObjectItemCaseSensitive(root, "grad_compress");
    enter(c, "grad_compress");
    if (g && !cJSON_IsObject(g)) return bad(c, "field 'grad_compress' is not an object");
    if (g) {
        char method[16];
        if ((rc = get_str(c, g, "method", method, sizeof method))) return rc;
        if (strcmp(method, "topk") && strcmp(method, "randk") && strcmp(method, "powersgd"))
            return bad(c, "field 'grad_compress.method' = \"%s\" is none of topk, randk, powersgd", method);
        p->gc_on = 1, p->gc_randk = !strcmp(method, "randk"), p->gc_power = !strcmp(method, "powersgd");
        GI(g, "rank", 1, 1024, p->gc_rank);
        GN(g, "ratio", 1e-6, 1, p->gc_ratio);
        GI(g, "error_feedback", 0, 1, p->gc_error_feedback);
    }
    enter(c, "%s", "");
    enter(c, "%s", "");
    return rc;
}

/* optional: v2162 dynamic loss scaling (absent: no scaling) */
static int load_loss_scale(ld *c, const cJSON *root) {
    plan_t *p = c->p;
    int rc = 0;
    const cJSON *ls = cJSON_GetObjectItemCaseSensitive(root, "loss_scale");
    enter(c, "loss_scale");
    if (ls && !cJSON_IsObject(ls)) {
        rc = bad(c, "field 'loss_scale' is not an object");
        return rc;
    }
    if (ls) {
        p->loss_scale = 1;
        GN(ls, "init_scale", 1, 1e30, p->ls_init);
        GN(ls, "growth", 1, 16, p->ls_growth);
        GN(ls, "backoff", 0.01, 1, p->ls_backoff);
        GI(ls, "growth_interval", 1, 1 << 30, p->ls_interval);
    }
    enter(c, "%s", "");
    enter(c, "%s", "");
    return rc;
}

/* optional: v2161 bf16 parameters without an fp32 master (absent: f32 parameters) */
static int load_param_storage(ld *c, const cJSON *root) {
    plan_t *p = c->p;
    int rc = 0;
    const cJSON *ps = cJSON_GetObjectItemCaseSensitive(root, "param_storage");
    enter(c, "param_storage");
    if (ps && !cJSON_IsObject(ps)) {
        rc = bad(c, "field 'param_storage' is not an object");
        return rc;
    }
    if (ps) {
        char dt[16], rnd[16];
        int64_t seed = 0;
        if ((rc = get_str(c, ps, "dtype", dt, sizeof dt)) || (rc = get_str(c, ps, "rounding", rnd, sizeof rnd))) return rc;
        if (strcmp(dt, "bf16") || (strcmp(rnd, "stochastic") && strcmp(rnd, "nearest"))) {
            rc = bad(c, "field 'param_storage' = {dtype %s, rounding %s}: this runtime keeps bf16 parameters rounded \"stochastic\" or \"nearest\"", dt, rnd);
            return rc;
        }
        if ((rc = get_int(c, ps, "seed", 0, 0xffffffffLL, &seed))) return rc;
        p->param_bf16 = 1;
        p->param_nearest = !strcmp(rnd, "nearest");
        p->param_seed = (unsigned)seed;
    }
    enter(c, "%s", "");
    enter(c, "%s", "");
    return rc;
}

/* optional: v2163 the dtype of the gradient-accumulation buffer (absent: f32) */
static int load_grad_accum(ld *c, const cJSON *root) {
    plan_t *p = c->p;
    int rc = 0;
    const cJSON *ga = cJSON_GetObjectItemCaseSensitive(root, "grad_accum");
    enter(c, "grad_accum");
    if (ga && !cJSON_IsObject(ga)) {
        rc = bad(c, "field 'grad_accum' is not an object");
        return rc;
    }
    if (ga) {
        char dt[16];
        if ((rc = get_str(c, ga, "dtype", dt, sizeof dt))) return rc;
        if (strcmp(dt, "bf16") && strcmp(dt, "f32")) {
            rc = bad(c, "field 'grad_accum.dtype' = %s: gradient accumulation buffers are f32 or bf16", dt);
            return rc;
        }
        p->grad_bf16 = !strcmp(dt, "bf16");
    }
    enter(c, "%s", "");
    enter(c, "%s", "");
    return rc;
}

/* optional: a preemptible run (absent: every trainer still stops cleanly on a signal) */
static int load_preempt(ld *c, const cJSON *root) {
    plan_t *p = c->p;
    int rc = 0;
    const cJSON *pe = cJSON_GetObjectItemCaseSensitive(root, "preempt");
    enter(c, "preempt");
    if (pe && !cJSON_IsObject(pe)) {
        rc = bad(c, "field 'preempt' is not an object");
        return rc;
    }
    if (pe) {
        const cJSON *rq = cJSON_GetObjectItemCaseSensitive(pe, "require_ckpt_dir");
        if (!cJSON_IsTrue(rq)) {
            rc = bad(c, "field 'preempt.require_ckpt_dir' is not true");
            return rc;
        }
        p->preempt = 1;
        GN(pe, "grace_seconds", 1, 86400, p->preempt_grace_s);
    }
    enter(c, "%s", "");
    enter(c, "%s", "");
    return rc;
}

/* optional: TensorBoard event files by default (v2183; absent: only with --tensorboard DIR) */
static int load_tensorboard(ld *c, const cJSON *root) {
    plan_t *p = c->p;
    int rc = 0;
p->tb_every = 1;
    const cJSON *tb = cJSON_GetObjectItemCaseSensitive(root, "tensorboard");
    enter(c, "tensorboard");
    if (tb && !cJSON_IsObject(tb)) {
        rc = bad(c, "field 'tensorboard' is not an object");
        return rc;
    }
    if (tb) {
        const cJSON *ld = cJSON_GetObjectItemCaseSensitive(tb, "logdir");
        if (!cJSON_IsString(ld) || !ld->valuestring[0] || strlen(ld->valuestring) >= sizeof p->tb_logdir) {
            rc = bad(c, "field 'tensorboard.logdir' is not a non-empty string (< 256 bytes)");
            return rc;
        }
        snprintf(p->tb_logdir, sizeof p->tb_logdir, "%s", ld->valuestring);
        GI(tb, "every", 1, 1 << 30, p->tb_every);
    }
    enter(c, "%s", "");
    enter(c, "%s", "");
    return rc;
}

/* optional: v2148 loss prediction {fit_every, min_delta, patience, stop} (absent: no fits) */
static int load_loss_prediction(ld *c, const cJSON *root) {
    plan_t *p = c->p;
    int rc = 0;
    const cJSON *lp = cJSON_GetObjectItemCaseSensitive(root, "loss_prediction");
    enter(c, "loss_prediction");
    if (lp && !cJSON_IsObject(lp)) return bad(c, "field 'loss_prediction' is not an object");
    if (lp) {
        GI(lp, "fit_every", 10, 1 << 30, p->lp_every);
        GI(lp, "patience", 1, 100, p->lp_patience);
        GN(lp, "min_delta", 0, 1e6, p->lp_min_delta);
        const cJSON *st = cJSON_GetObjectItemCaseSensitive(lp, "stop");
        if (!cJSON_IsBool(st)) return bad(c, "field 'loss_prediction.stop' is not true or false");
        p->lp_stop = cJSON_IsTrue(st);
        const cJSON *lw = cJSON_GetObjectItemCaseSensitive(lp, "law");
        if (!cJSON_IsString(lw) || (strcmp(lw->valuestring, "power") && strcmp(lw->valuestring, "lr_annealing")))
            return bad(c, "field 'loss_prediction.law' is not \"power\" or \"lr_annealing\"");
        p->lp_law = !strcmp(lw->valuestring, "lr_annealing");
    }
    enter(c, "%s", "");
    return rc;
}

/* optional: v2154/v2156 pruning {pattern, target_sparsity, schedule, start, end, every}; part of
 * the state hash (it changes the weights) */
static int load_pruning(ld *c, const cJSON *root) {
    plan_t *p = c->p;
    int rc = 0;
    const cJSON *pr = cJSON_GetObjectItemCaseSensitive(root, "pruning");
    enter(c, "pruning");
    if (pr && !cJSON_IsObject(pr)) return bad(c, "field 'pruning' is not an object");
    if (pr) {
        p->pr_on = 1;
        const cJSON *pat = cJSON_GetObjectItemCaseSensitive(pr, "pattern"), *sch = cJSON_GetObjectItemCaseSensitive(pr, "schedule");
        if (!cJSON_IsString(pat) || (strcmp(pat->valuestring, "unstructured") && strcmp(pat->valuestring, "2:4")))
            return bad(c, "field 'pruning.pattern' is not \"unstructured\" or \"2:4\"");
        p->pr_pattern = !strcmp(pat->valuestring, "2:4");
        if (!cJSON_IsString(sch) ||
            (strcmp(sch->valuestring, "oneshot") && strcmp(sch->valuestring, "gradual") && strcmp(sch->valuestring, "fixed")))
            return bad(c, "field 'pruning.schedule' is not \"oneshot\", \"gradual\" or \"fixed\"");
        p->pr_gradual = !strcmp(sch->valuestring, "gradual") ? 1 : !strcmp(sch->valuestring, "fixed") ? 2 : 0;
        GN(pr, "target_sparsity", 0, 0.99, p->pr_target);
        p->pr_start = 0, p->pr_end = 1, p->pr_every = 1;
        if (p->pr_gradual == 1) {
            GN(pr, "start", 0, 1, p->pr_start);
            GN(pr, "end", 0, 1, p->pr_end);
            GI(pr, "every", 1, 1 << 30, p->pr_every);
            if (p->pr_end <= p->pr_start) return bad(c, "field 'pruning.end' (%g) is not after 'pruning.start' (%g)", p->pr_end, p->pr_start);
        }
    }
    enter(c, "%s", "");
    return rc;
}

/* optional: v2184 profiling / v2185 memory profile by default (absent: only with the flags) */
static int load_profiles(ld *c, const cJSON *root) {
    plan_t *p = c->p;
    int rc = 0;
    const char *secs[2] = {"profile", "memory_profile"}, *keys[2] = {"trace", "svg"};
    char *dst[2] = {p->prof_trace, p->memprof_svg};
    for (int i = 0; i < 2 && !rc; i++) {
        const cJSON *sec = cJSON_GetObjectItemCaseSensitive(root, secs[i]);
        enter(c, "%s", secs[i]);
        if (sec && !cJSON_IsObject(sec)) {
            rc = bad(c, "field '%s' is not an object", secs[i]);
            return rc;
        }
        if (!sec) continue;
        if ((rc = get_str(c, sec, keys[i], dst[i], sizeof p->prof_trace))) return rc;
        if (!dst[i][0]) {
            rc = bad(c, "field '%s.%s' is empty", secs[i], keys[i]);
            return rc;
        }
        if (i == 0) {
            GI(sec, "start_step", 0, 1 << 30, p->prof_start);
            GI(sec, "num_steps", 1, 1000, p->prof_steps);
        }
    }
    enter(c, "%s", "");
    enter(c, "%s", "");
    return rc;
}

/* optional: v2160 FP8 (recipe, scaling, the slots' roles) */
static int load_fp8(ld *c, const cJSON *root) {
    plan_t *p = c->p;
    int rc = 0;
    const cJSON *f8 = cJSON_GetObjectItemCaseSensitive(root, "fp8");
    enter(c, "fp8");
    if (f8 && cJSON_IsObject(f8)) {
        char recipe[16], scaling[16];
        int64_t hist, margin;
        if ((rc = get_str(c, f8, "recipe", recipe, sizeof recipe)) ||
            (rc = get_str(c, f8, "scaling", scaling, sizeof scaling)) ||
            (rc = get_int(c, f8, "history", 1, 1024, &hist)) || (rc = get_int(c, f8, "margin", 0, 64, &margin)))
            return rc;
        p->fp8_e4m3_only = !strcmp(recipe, "e4m3");
        p->fp8_current = !strcmp(scaling, "current");
        p->fp8_history = (int)hist;
        p->fp8_margin = (int)margin;
        const cJSON *gm = cJSON_GetObjectItemCaseSensitive(f8, "gemm");
        if (gm && (!cJSON_IsString(gm) || (strcmp(gm->valuestring, "fp8") && strcmp(gm->valuestring, "fake")))) {
            rc = bad(c, "field 'fp8.gemm' is neither \"fp8\" nor \"fake\"");
            return rc;
        }
        p->fp8_gemm = gm && !strcmp(gm->valuestring, "fp8");
        const cJSON *slots = cJSON_GetObjectItemCaseSensitive(f8, "slots");
        int n = cJSON_IsArray(slots) ? cJSON_GetArraySize(slots) : 0;
        p->fp8_roles = calloc((size_t)n + 1, sizeof(int));
        if (!p->fp8_roles) {
            rc = hyp_fail(c->e, HYP_EFAIL, "%s: out of memory", c->path);
            return rc;
        }
        const cJSON *r;
        cJSON_ArrayForEach(r, slots) {
            const char *role = cJSON_IsString(r) ? r->valuestring : "";
            int k = !strcmp(role, "weight") ? 0 : !strcmp(role, "activation") ? 1 : !strcmp(role, "gradient") ? 2 : -1;
            if (k < 0) {
                rc = bad(c, "field 'fp8.slots[%d]' is none of weight, activation, gradient", p->fp8_slots);
                return rc;
            }
            p->fp8_roles[p->fp8_slots++] = k;
        }
    }
    enter(c, "%s", "");
    return rc;
}

/* the loss op */
static int load_loss(ld *c, const cJSON *root) {
    plan_t *p = c->p;
    int rc = 0;
    enter(c, "%s", "");
    const cJSON *lo = need(c, root, "loss", cJSON_Object, &rc);
    if (!lo) return rc;
    enter(c, "loss");
    if ((rc = parse_op(c, lo, &p->loss))) return rc;
    if (!(hyp_op_get(p->loss.op)->flags & HYP_OPF_LOSS)) {
        rc = bad(c, "field 'loss.op' = \"%s\" is no loss op (crossentropy)", hyp_op_name(p->loss.op));
        return rc;
    }
    enter(c, "%s", "");
    return rc;
}

/* Does op o take buffer b as an input (out = 0) or an output (out = 1)? */
static int op_uses(const plan_op *o, int b, int out) {
    for (int k = 0; k < (out ? o->nout : o->nin); k++)
        if ((out ? o->out[k] : o->in[k]) == b) return 1;
    return 0;
}

/* v2166 attrs.epilogue: the ops a marked GEMM folds in are where the executors look for them.
 * gelu (matmul_fwd at i): ops[i+1] is the gelu_fwd of its output, both outputs of one dtype
 * (cuBLASLt's aux has D's type). dgelu (matmul_bwd at i, input gradient dA): ops[i+1] zeroes dP,
 * ops[i+2] is gelu_bwd(dA, P) -> dP, of one dtype, and no other op reads dA or writes it (the
 * GEMM then writes dP itself, in its own place, and dA is never formed). */
static int check_epilogues(ld *c, const char *key, const plan_op *ops, int n) {
    for (int i = 0; i < n; i++) {
        const plan_op *o = &ops[i];
        if (!o->epi) continue;
        const plan_t *p = c->p;
        enter(c, "%s[%d]", key, i);
        if (o->epi == PLAN_EPI_GELU) {
            const plan_op *g = i + 1 < n ? &ops[i + 1] : NULL;
            if (!g || strcmp(hyp_op_name(g->op), "gelu_fwd") || g->in[0] != o->out[0] ||
                p->bufs[g->out[0]].dtype != p->bufs[o->out[0]].dtype)
                return bad(c, "field '%s.attrs.epilogue' = \"gelu\": the next op is not a gelu_fwd of this GEMM's output in its dtype — regenerate the trainer with gen", c->at);
            continue;
        }
        if (o->epi == PLAN_EPI_SWIGLU) {
            const plan_op *g = i + 1 < n ? &ops[i + 1] : NULL;
            if (!g || strcmp(hyp_op_name(g->op), "swiglu_fwd") || g->in[0] != o->out[0] ||
                p->bufs[g->out[0]].dtype != p->bufs[o->out[0]].dtype)
                return bad(c, "field '%s.attrs.epilogue' = \"swiglu\": the next op is not a swiglu_fwd of this GEMM's output in its dtype — regenerate the trainer with gen", c->at);
            continue;
        }
        const int dA = o->out[0];
        const plan_op *z = i + 2 < n ? &ops[i + 1] : NULL, *g = z ? &ops[i + 2] : NULL;
        int ok = dA >= 0 && g && !strcmp(hyp_op_name(z->op), "zero") && !strcmp(hyp_op_name(g->op), "gelu_bwd") &&
                 g->in[0] == dA && z->out[0] == g->out[0] && p->bufs[g->out[0]].dtype == p->bufs[g->in[1]].dtype;
        for (int j = 0; ok && j < n; j++) {
            if (j == i || j == i + 2) continue;
            ok = !op_uses(&ops[j], dA, 0) && (!op_uses(&ops[j], dA, 1) || !strcmp(hyp_op_name(ops[j].op), "zero"));
        }
        if (!ok)
            return bad(c, "field '%s.attrs.epilogue' = \"dgelu\": the ops after this GEMM are not zero(dP), gelu_bwd(dx, P) -> dP with dx used by no other op — regenerate the trainer with gen", c->at);
    }
    return 0;
}

static int load_forward(ld *c, const cJSON *root) {
    int rc = load_ops(c, root, "forward", &c->p->fwd, &c->p->n_fwd);
    return rc ? rc : check_epilogues(c, "forward", c->p->fwd, c->p->n_fwd);
}
static int load_backward(ld *c, const cJSON *root) {
    int rc = load_ops(c, root, "backward", &c->p->bwd, &c->p->n_bwd);
    return rc ? rc : check_epilogues(c, "backward", c->p->bwd, c->p->n_bwd);
}
#undef GI
#undef GN

/* v2106: the tensor-parallel section (core/plan_tp.c), once the params are known */
static int load_tp(ld *c, const cJSON *root) { return plan_tp_load(root, c->p, c->path, c->e); }
/* v2107: the pipeline section (core/plan_pp.c), once the op lists are known */
static int load_pp(ld *c, const cJSON *root) { return plan_pp_load(root, c->p, c->path, c->e); }

/* The plan's sections in the order they are read, one loader each: a loader validates its part of
 * the JSON into plan_t and answers HYP_OK for an optional section that is absent. A technique with
 * settings of its own adds one loader here, next to the others, never a branch in plan_load. */
static const struct {
    const char *name;
    int (*load)(ld *c, const cJSON *root);
} SECTIONS[] = {
    {"model", load_model},           {"train", load_train},         {"sizes", load_sizes},
    {"hardware", load_hardware},     {"checkpoint", load_checkpoint}, {"guard", load_guard},
    {"loss_scale", load_loss_scale}, {"local_sgd", load_local_sgd}, {"async_dp", load_async_dp}, {"grad_compress", load_grad_compress}, {"param_storage", load_param_storage}, {"grad_accum", load_grad_accum},
    {"preempt", load_preempt},       {"tensorboard", load_tensorboard}, {"loss_prediction", load_loss_prediction}, {"pruning", load_pruning}, {"profile", load_profiles},
    {"fp8", load_fp8},               {"params", load_params},       {"tp", load_tp},       {"optimizer", load_optimizer},
    {"buffers", load_buffers},       {"forward", load_forward},     {"backward", load_backward},
    {"loss", load_loss},             {"pp", load_pp},
};

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
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(buf, (size_t)size, &end, 0);
    long at = end ? (long)(end - buf) : -1;
    p->text = buf, p->text_len = (size_t)size; /* checkpoints carry a copy (ckpt.h) */
    ld c = {path, e, p, ""};
    if (!root) {
        free(buf);
        p->text = NULL;
        return hyp_fail(e, HYP_EINPUT, "%s: not valid JSON at byte %ld of %ld (truncated or edited?) — regenerate it with gen",
                        path, at, size);
    }
    int rc = 0;
    char fmt[32];
    int64_t v;
    if ((rc = get_str(&c, root, "format", fmt, sizeof fmt)) || strcmp(fmt, PLAN_FORMAT)) {
        if (!rc) rc = bad(&c, "field 'format' = \"%s\": not a Hyperion plan (\"%s\")", fmt, PLAN_FORMAT);
        goto done;
    }
    if ((rc = get_int(&c, root, "version", 0, 1 << 20, &v))) goto done;
    if (v != PLAN_VERSION) {
        rc = hyp_fail(e, HYP_EINPUT, "%s: field 'version' = %lld: this runtime reads plan format version %d — regenerate the trainer with this gen",
                      path, (long long)v, PLAN_VERSION);
        goto done;
    }
    for (size_t i = 0; i < sizeof SECTIONS / sizeof SECTIONS[0] && !rc; i++) {
        enter(&c, "%s", "");
        rc = SECTIONS[i].load(&c, root);
    }
    /* v2161: once the ops are checked, the param buffers read as bf16 (ops_bf16.c takes them as it
     * takes bf16 activations); their element offsets stay those of the f32 layout */
    for (int b = 0; !rc && p->param_bf16 && b < p->n_bufs; b++)
        if (p->bufs[b].kind == BUF_PARAM) p->bufs[b].dtype = HYP_DT_BF16;
done:
    if (!rc) rc = state_hash(&c, root);
    cJSON_Delete(root);
    if (rc) plan_free(p);
    return rc;
}

void plan_free(plan_t *p) {
    free(p->text);
    for (int i = 0; i < p->n_bufs; i++) free(p->bufs[i].name);
    for (int i = 0; i < p->n_params_t; i++) free(p->params[i].name);
    free(p->bufs);
    free(p->params);
    free(p->fwd);
    free(p->bwd);
    free(p->fp8_roles);
    for (int g = 0; g < p->optim.n_groups; g++) free(p->optim.groups[g].params);
    for (int k = 0; k < HYP_OPT_MAX_STATE; k++) free(p->optim.state_off[k]), free(p->optim.state_n[k]);
    free(p->optim.groups);
    memset(p, 0, sizeof *p);
}
