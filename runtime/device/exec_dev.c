/* exec_dev.c — runs plan op lists on a device through the rendered kernels (see exec_dev.h). */
#include "exec_dev.h"

#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "op_registry.h"
#include "ops_cpu.h"


/* ---- a small evaluator for the manifest's expressions ("cdiv(N*CV, BLOCK)", "N*C", "2*SEGS*C") */

#define ENV_MAX 96
typedef struct {
    int n;
    const char *name[ENV_MAX];
    double val[ENV_MAX];
} env_t;

static void env_set(env_t *v, const char *name, double val) {
    for (int i = 0; i < v->n; i++)
        if (!strcmp(v->name[i], name)) return; /* the first binding wins (priority order) */
    if (v->n < ENV_MAX) {
        v->name[v->n] = name;
        v->val[v->n++] = val;
    }
}

typedef struct {
    const char *s;
    const env_t *env;
    int err;
    char what[96];
} ev_t;

static void ev_skip(ev_t *q) {
    while (isspace((unsigned char)*q->s)) q->s++;
}
static double ev_expr(ev_t *q);

static int integral(double a) { return a == floor(a) && fabs(a) < 9e15; }

static double ev_primary(ev_t *q) {
    ev_skip(q);
    if (*q->s == '(') {
        q->s++;
        double v = ev_expr(q);
        ev_skip(q);
        if (*q->s != ')') q->err = 1;
        else q->s++;
        return v;
    }
    if (isdigit((unsigned char)*q->s) || *q->s == '.') {
        char *end;
        double v = strtod(q->s, &end);
        q->s = end;
        return v;
    }
    if (isalpha((unsigned char)*q->s) || *q->s == '_') {
        const char *b = q->s;
        while (isalnum((unsigned char)*q->s) || *q->s == '_') q->s++;
        size_t len = (size_t)(q->s - b);
        ev_skip(q);
        if (*q->s == '(') { /* function */
            q->s++;
            double a[2] = {0, 0};
            int na = 0;
            for (;;) {
                double v = ev_expr(q);
                if (na < 2) a[na] = v;
                na++;
                ev_skip(q);
                if (*q->s == ',') { q->s++; continue; }
                if (*q->s == ')') { q->s++; break; }
                q->err = 1;
                return 0;
            }
            if (len == 4 && !strncmp(b, "cdiv", 4) && na == 2 && a[1] != 0) return ceil(a[0] / a[1]);
            if (len == 3 && !strncmp(b, "min", 3) && na == 2) return a[0] < a[1] ? a[0] : a[1];
            if (len == 3 && !strncmp(b, "max", 3) && na == 2) return a[0] > a[1] ? a[0] : a[1];
            snprintf(q->what, sizeof q->what, "unknown function %.*s", (int)len, b);
            q->err = 1;
            return 0;
        }
        for (int i = 0; i < q->env->n; i++)
            if (strlen(q->env->name[i]) == len && !strncmp(q->env->name[i], b, len)) return q->env->val[i];
        if (len == 4 && !strncmp(b, "true", 4)) return 1;
        if (len == 5 && !strncmp(b, "false", 5)) return 0;
        snprintf(q->what, sizeof q->what, "unknown name %.*s", (int)len, b);
        q->err = 1;
        return 0;
    }
    q->err = 1;
    return 0;
}

static double ev_unary(ev_t *q) {
    ev_skip(q);
    if (*q->s == '-') {
        q->s++;
        return -ev_unary(q);
    }
    double v = ev_primary(q);
    ev_skip(q);
    if (*q->s == '^') {
        q->s++;
        v = pow(v, ev_unary(q));
    }
    return v;
}

static double ev_term(ev_t *q) {
    double v = ev_unary(q);
    for (;;) {
        ev_skip(q);
        char c = *q->s;
        if (c != '*' && c != '/' && c != '%') return v;
        q->s++;
        double r = ev_unary(q);
        if (c == '*') v *= r;
        else if (r == 0) q->err = 1;
        else if (c == '%') v = fmod(v, r);
        else v = integral(v) && integral(r) ? (double)((long long)v / (long long)r) : v / r;
    }
}

static double ev_expr(ev_t *q) {
    double v = ev_term(q);
    for (;;) {
        ev_skip(q);
        if (*q->s == '+') { q->s++; v += ev_term(q); }
        else if (*q->s == '-') { q->s++; v -= ev_term(q); }
        else return v;
    }
}

/* Evaluates a comma-separated list of up to `max` expressions; returns how many, or -1. */
static int eval_list(const char *s, const env_t *env, double *out, int max, char *what, size_t wn) {
    ev_t q = {s, env, 0, ""};
    int n = 0;
    for (;;) {
        double v = ev_expr(&q);
        if (q.err) break;
        if (n < max) out[n] = v;
        n++;
        ev_skip(&q);
        if (*q.s == ',') { q.s++; continue; }
        if (*q.s) q.err = 1;
        break;
    }
    if (q.err || n > max) {
        snprintf(what, wn, "cannot evaluate '%s'%s%s", s, q.what[0] ? ": " : "", q.what);
        return -1;
    }
    return n;
}

/* ---- the manifest ---------------------------------------------------------------------------- */

enum { PT_PTR, PT_I32, PT_I64, PT_F32, PT_U32 };
enum { AB_EXPR, AB_BUF, AB_SCRATCH, AB_FP8 };

struct exec_dev_file {
    char name[96];
    hyp_module *mod;
    env_t consts;
    char *cnames[ENV_MAX];
};

#define ARGS_MAX 24
struct exec_dev_launch {
    int file;
    char kernel[96];
    int nargs;
    int ptype[ARGS_MAX];
    char *pname[ARGS_MAX];
    int bind[ARGS_MAX];     /* AB_* */
    int bidx[ARGS_MAX];     /* AB_BUF: plan buffer (-1: NULL); AB_FP8: 0 scale, 1 scale_inv, 2 amax, 3 q, 4 qt */
    int64_t soff[ARGS_MAX]; /* AB_SCRATCH: float offset into the scratch block */
    char *arg[ARGS_MAX];    /* AB_EXPR: the expression */
    char *grid, *smem;
    int block;
};

static char *xstrdup(const char *s) {
    size_t n = strlen(s) + 1;
    char *d = malloc(n);
    if (d) memcpy(d, s, n);
    return d;
}

static int ptype_of(const char *t) {
    if (strchr(t, '*')) return PT_PTR;
    if (!strcmp(t, "int") || !strcmp(t, "const int")) return PT_I32;
    if (!strcmp(t, "long") || !strcmp(t, "long long") || !strcmp(t, "const long")) return PT_I64;
    if (!strcmp(t, "float") || !strcmp(t, "const float")) return PT_F32;
    if (!strcmp(t, "unsigned") || !strcmp(t, "unsigned int")) return PT_U32;
    return -1;
}

/* Op dimensions bound at the given shape (priority after kernel params and file constants). */
static void env_op(env_t *v, const plan_op *o, int B, int T) {
    int64_t N = (int64_t)B * T;
#define BD(val) ((val) == DIM_B ? B : (val) == DIM_T ? T : (val) == DIM_N ? N : (val))
    env_set(v, "B", (double)B);
    env_set(v, "T", (double)T);
    env_set(v, "N", (double)N);
    if (o) {
        if (o->C) env_set(v, "C", (double)o->C);
        if (o->IC) env_set(v, "IC", (double)o->IC);
        if (o->OC) env_set(v, "OC", (double)o->OC);
        if (o->NH) env_set(v, "NH", (double)o->NH);
        if (o->NKV) env_set(v, "NKV", (double)o->NKV);
        if (o->hd) env_set(v, "hd", (double)o->hd);
        if (o->H) env_set(v, "H", (double)o->H);
        if (o->V) env_set(v, "V", (double)o->V);
        if (o->Vp) env_set(v, "Vp", (double)o->Vp);
        if (o->n) env_set(v, "n", (double)BD(o->n));
    }
#undef BD
}

/* The dims of op a, then of b (a fusion site's second op, or NULL); an attribute neither has is
 * plan.c's default: C = 1 (how it sizes e.g. a weight's fp8_quantize, n = OC*IC). */
static void env_ops(env_t *v, const plan_op *a, const plan_op *b, int B, int T) {
    env_op(v, a, B, T);
    if (b) env_op(v, b, B, T);
    env_set(v, "C", 1.0);
}

typedef struct {
    char key[128];
    int64_t off, n;
} scratch_t;

static int find_buf_name(const plan_t *p, const char *name) {
    for (int i = 0; i < p->n_bufs; i++)
        if (!strcmp(p->bufs[i].name, name)) return i;
    return -1;
}

static int find_file(exec_dev *x, const char *name) {
    for (int i = 0; i < x->n_files; i++)
        if (!strcmp(x->files[i].name, name)) return i;
    return -1;
}

static const cJSON *find_kernel_decl(const cJSON *files, const char *file, const char *kernel) {
    const cJSON *f;
    cJSON_ArrayForEach(f, files) {
        const cJSON *fn = cJSON_GetObjectItemCaseSensitive(f, "file");
        if (!cJSON_IsString(fn) || strcmp(fn->valuestring, file)) continue;
        const cJSON *k;
        cJSON_ArrayForEach(k, cJSON_GetObjectItemCaseSensitive(f, "kernels")) {
            const cJSON *kn = cJSON_GetObjectItemCaseSensitive(k, "name");
            if (cJSON_IsString(kn) && !strcmp(kn->valuestring, kernel)) return k;
        }
    }
    return NULL;
}

static int dalloc(exec_dev *x, void **ptr, int64_t n, size_t elem, hyp_err *e);

static int cmp_i64(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

/* The optimizer launch of the manifest (kernels.json ops.optimizer: its kernel, file, parameters
 * and grid; which optimizer runs it is the plan's, train/optim.h) and the tensor table: segments
 * end at every parameter tensor's end (sorted), the last at param_floats, so alignment gaps belong
 * to the following tensor (zero gradients and zero values there). */
static int prepare_optimizer(exec_dev *x, const cJSON *man, hyp_err *e) {
    const plan_t *p = x->p;
    const cJSON *ls = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(man, "ops"), "optimizer");
    const cJSON *l = cJSON_GetArrayItem(ls, 0);
    const cJSON *kn = cJSON_GetObjectItemCaseSensitive(l, "kernel"), *fn = cJSON_GetObjectItemCaseSensitive(l, "file");
    if (!cJSON_IsString(kn) || !cJSON_IsString(fn)) return HYP_OK; /* none */
    const cJSON *decl = find_kernel_decl(cJSON_GetObjectItemCaseSensitive(man, "files"), fn->valuestring, kn->valuestring);
    const cJSON *params = cJSON_GetObjectItemCaseSensitive(decl, "params");
    const cJSON *p0 = cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(params, 0), "type");
    int fi = find_file(x, fn->valuestring);
    const cJSON *grid = cJSON_GetObjectItemCaseSensitive(decl, "grid");
    if (fi < 0 || !cJSON_IsString(grid)) return HYP_OK;
    snprintf(x->opt_grid, sizeof x->opt_grid, "%s", grid->valuestring);
    snprintf(x->opt_kernel, sizeof x->opt_kernel, "%s", kn->valuestring);
    snprintf(x->opt_p0, sizeof x->opt_p0, "%s", cJSON_IsString(p0) ? p0->valuestring : "");
    x->opt_nparams = cJSON_GetArraySize(params);
    int n = p->n_params_t;
    int64_t (*ends)[2] = calloc((size_t)n + 1, sizeof *ends);
    int64_t *h_end = calloc((size_t)n + 1, sizeof *h_end);
    x->h_seg_wd = calloc((size_t)n + 1, sizeof *x->h_seg_wd);
    x->seg_group = calloc((size_t)n + 1, sizeof *x->seg_group);
    if (!ends || !h_end || !x->h_seg_wd || !x->seg_group) {
        free(ends);
        free(h_end);
        return hyp_fail(e, HYP_EFAIL, "out of memory");
    }
    for (int i = 0; i < n; i++) {
        ends[i][0] = p->params[i].offset + p->params[i].numel;
        ends[i][1] = p->params[i].group;
    }
    qsort(ends, (size_t)n, sizeof *ends, cmp_i64);
    for (int i = 0; i < n; i++) {
        h_end[i] = ends[i][0];
        x->seg_group[i] = (int)ends[i][1];
    }
    if (n == 0 || h_end[n - 1] < p->param_floats) { /* a tail after the last tensor: padding */
        h_end[n] = p->param_floats;
        x->seg_group[n] = -1;
        n++;
    }
    x->nseg = n;
    int rc = dalloc(x, (void **)&x->seg_end, n, sizeof(int64_t), e);
    if (!rc) rc = dalloc(x, (void **)&x->seg_wd, n, sizeof(float), e);
    if (!rc) rc = x->dev->h2d_sync(x->dev, x->seg_end, h_end, sizeof(int64_t) * (size_t)n, e);
    free(ends);
    free(h_end);
    if (!rc) x->opt_file = fi;
    return rc;
}

static void free_launch(exec_dev_launch *L) {
    for (int j = 0; j < L->nargs; j++) {
        free(L->pname[j]);
        free(L->arg[j]);
    }
    free(L->grid);
    free(L->smem);
}

/* Where a launch's arguments come from: a (the op, or a fusion site's first op), b (the site's
 * second op) and site (the site's JSON object, for "site.NAME" buffer names). */
typedef struct {
    const plan_op *a, *b;
    const cJSON *site;
    const char *what; /* the op or fusion kind, for messages */
} bind_ctx;

/* Whether op o carries an fp8 scaling slot (its launches may bind fp8.*[slot]). */
static int has_fp8_slot(const plan_op *o) { return (hyp_op_get(o->op)->flags & HYP_OPF_FP8_SLOT) != 0; }

/* "inK" / "outK" of op o (K from 1): the plan buffer index (-1: an absent optional argument), or
 * -2 when s is not such a name, -3 when o has no such argument. */
static int op_arg(const plan_op *o, const char *s) {
    int out = !strncmp(s, "out", 3);
    if (!out && strncmp(s, "in", 2)) return -2;
    const char *d = s + (out ? 3 : 2);
    if (!isdigit((unsigned char)d[0]) || d[1]) return -2;
    int k = d[0] - '1';
    if (!o || k < 0 || k >= (out ? o->nout : o->nin)) return -3;
    return out ? o->out[k] : o->in[k];
}

/* Scratch need (floats, at the plan's maximum shape) of binding a: scratch(EXPR) or scratch.NAME. */
static int scratch_need(exec_dev *x, int fi, const bind_ctx *c, const char *a, const char *kernel, int64_t *n,
                        hyp_err *e) {
    if (a[7] == '.') {
        int64_t nh = x->p->NH > x->p->NKV ? x->p->NH : x->p->NKV;
        *n = (int64_t)x->p->B * x->p->T * nh * x->p->hd;
        return HYP_OK;
    }
    if (a[7] != '(') return hyp_fail(e, HYP_EINPUT, "kernels.json: %s: unknown binding '%s' — regenerate with gen", kernel, a);
    env_t v = x->files[fi].consts;
    env_ops(&v, c->a, c->b, x->p->B, x->p->T);
    char tmp[128], what[200];
    snprintf(tmp, sizeof tmp, "%s", a + 8);
    char *close = strrchr(tmp, ')');
    if (close) *close = 0;
    double d;
    if (eval_list(tmp, &v, &d, 1, what, sizeof what) != 1)
        return hyp_fail(e, HYP_EINPUT, "kernels.json: %s: %s — regenerate with gen", kernel, what);
    *n = (int64_t)d;
    return HYP_OK;
}

/* Resolves argument i (manifest binding a) of launch L. */
static int bind_arg(exec_dev *x, exec_dev_launch *L, int i, const char *a, const bind_ctx *c, scratch_t *sc, int *nsc,
                    hyp_err *e) {
    const char *ab = NULL; /* the rest of an "a." / "b." binding */
    const plan_op *ao = c->a;
    if (!strncmp(a, "a.", 2) || !strncmp(a, "b.", 2) || !strncmp(a, "site.", 5)) {
        if (!c->b)
            return hyp_fail(e, HYP_EINPUT, "kernels.json: %s: fused-pair binding '%s' outside a fusion site — regenerate with gen", L->kernel, a);
        if (a[0] == 's') {
            const cJSON *nm = cJSON_GetObjectItemCaseSensitive(c->site, a + 5);
            int idx = cJSON_IsString(nm) ? find_buf_name(x->p, nm->valuestring) : -1;
            if (idx < 0)
                return hyp_fail(e, HYP_EINPUT, "kernels.json: %s (%s): binding '%s' names no plan buffer — regenerate with gen", L->kernel, c->what, a);
            L->bind[i] = AB_BUF;
            L->bidx[i] = idx;
            return HYP_OK;
        }
        ab = a + 2;
        ao = a[0] == 'a' ? c->a : c->b;
    } else if (c->b && op_arg(ao, a) != -2) {
        return hyp_fail(e, HYP_EINPUT, "kernels.json: %s (%s): a fusion site binds '%s' without a./b. — regenerate with gen", L->kernel, c->what, a);
    }
    int idx = op_arg(ao, ab ? ab : a);
    if (idx == -3)
        return hyp_fail(e, HYP_EINPUT, "kernels.json: %s binds '%s' but op '%s' has %d inputs and %d outputs — regenerate with gen", L->kernel, a,
                        hyp_op_name(ao->op), ao->nin, ao->nout);
    if (idx >= -1) {
        L->bind[i] = AB_BUF;
        L->bidx[i] = idx;
        return HYP_OK;
    }
    if (ab) return hyp_fail(e, HYP_EINPUT, "kernels.json: %s: unknown binding '%s' — regenerate with gen", L->kernel, a);
    if (!strcmp(a, "fp8.scaled_max[slot]") && has_fp8_slot(ao)) { /* a constant of the slot */
        char v[32];
        snprintf(v, sizeof v, "%.9g", (double)(hyp_fp8_max(x->fp8[ao->slot].fmt) * powf(2.0f, -(float)x->p->fp8_margin)));
        L->bind[i] = AB_EXPR;
        L->arg[i] = xstrdup(v);
        return HYP_OK;
    }
    if (!strncmp(a, "fp8.", 4)) {
        static const char *const f8[] = {"fp8.scale[slot]", "fp8.scale_inv[slot]", "fp8.amax[slot]", "fp8.q[slot]",
                                         "fp8.qt[slot]"};
        for (int k = 0; k < 5; k++)
            if (!strcmp(a, f8[k]) && has_fp8_slot(ao) && (k < 3 || x->fp8_gemm)) {
                L->bind[i] = AB_FP8;
                L->bidx[i] = k;
                return HYP_OK;
            }
        return hyp_fail(e, HYP_EINPUT, "kernels.json: %s: unknown fp8 binding '%s' (fp8.scale|scale_inv|amax|q|qt[slot] of an fp8_quantize op) — regenerate with gen", L->kernel, a);
    }
    if (!strncmp(a, "scratch", 7)) {
        int64_t n = 0;
        int rc = scratch_need(x, L->file, c, a, L->kernel, &n, e);
        if (rc) return rc;
        int s;
        for (s = 0; s < *nsc; s++)
            if (!strcmp(sc[s].key, a)) break;
        if (s == *nsc) {
            if (*nsc >= 64) return hyp_fail(e, HYP_EINPUT, "kernels.json: too many scratch buffers");
            snprintf(sc[s].key, sizeof sc[s].key, "%s", a);
            sc[s].n = 0;
            (*nsc)++;
        }
        if (n > sc[s].n) sc[s].n = n;
        L->bind[i] = AB_SCRATCH;
        L->bidx[i] = s; /* resolved to an offset once every need is known */
        return HYP_OK;
    }
    L->bind[i] = AB_EXPR;
    L->arg[i] = xstrdup(a);
    return HYP_OK;
}

/* Appends the launches of the manifest list ls (one op's, or one fusion site's) to x->launches;
 * scratch needs are merged into sc (at the maximum shape). */
static int prepare_launches(exec_dev *x, const cJSON *man, const cJSON *ls, const bind_ctx *c, exec_dev_op *eo,
                            scratch_t *sc, int *nsc, hyp_err *e) {
    const char *name = c->what;
    eo->how = EXD_KERNELS;
    eo->first = x->n_launches;
    const cJSON *files = cJSON_GetObjectItemCaseSensitive(man, "files");
    const cJSON *l;
    cJSON_ArrayForEach(l, ls) {
        const cJSON *kn = cJSON_GetObjectItemCaseSensitive(l, "kernel");
        const cJSON *fn = cJSON_GetObjectItemCaseSensitive(l, "file");
        const cJSON *args = cJSON_GetObjectItemCaseSensitive(l, "args");
        if (!cJSON_IsString(kn) || !cJSON_IsString(fn) || !cJSON_IsArray(args))
            return hyp_fail(e, HYP_EINPUT, "kernels.json: op '%s': a launch lacks kernel/file/args — regenerate with gen", name);
        int fi = find_file(x, fn->valuestring);
        const cJSON *decl = find_kernel_decl(files, fn->valuestring, kn->valuestring);
        if (fi < 0 || !decl)
            return hyp_fail(e, HYP_EINPUT, "kernels.json: op '%s' launches %s of %s, which the manifest does not declare — regenerate with gen", name, kn->valuestring, fn->valuestring);
        const cJSON *params = cJSON_GetObjectItemCaseSensitive(decl, "params");
        int np = cJSON_GetArraySize(params);
        if (np != cJSON_GetArraySize(args) || np > ARGS_MAX)
            return hyp_fail(e, HYP_EINPUT, "kernels.json: op '%s': %s takes %d arguments, the launch binds %d", name, kn->valuestring, np, cJSON_GetArraySize(args));
        exec_dev_launch *nl = realloc(x->launches, sizeof *nl * (size_t)(x->n_launches + 1));
        if (!nl) return hyp_fail(e, HYP_EFAIL, "out of memory");
        x->launches = nl;
        exec_dev_launch *L = &x->launches[x->n_launches++];
        memset(L, 0, sizeof *L);
        L->file = fi;
        snprintf(L->kernel, sizeof L->kernel, "%s", kn->valuestring);
        L->nargs = np;
        const cJSON *blk = cJSON_GetObjectItemCaseSensitive(decl, "block");
        const cJSON *grid = cJSON_GetObjectItemCaseSensitive(decl, "grid");
        const cJSON *smem = cJSON_GetObjectItemCaseSensitive(decl, "smem");
        L->block = cJSON_IsNumber(blk) ? blk->valueint : 0;
        char gbuf[32];
        if (cJSON_IsNumber(grid)) snprintf(gbuf, sizeof gbuf, "%d", grid->valueint);
        L->grid = xstrdup(cJSON_IsString(grid) ? grid->valuestring : cJSON_IsNumber(grid) ? gbuf : "");
        if (cJSON_IsNumber(smem)) snprintf(gbuf, sizeof gbuf, "%d", smem->valueint);
        else snprintf(gbuf, sizeof gbuf, "0");
        L->smem = xstrdup(cJSON_IsString(smem) ? smem->valuestring : gbuf);
        if (L->block <= 0 || !L->grid[0])
            return hyp_fail(e, HYP_EINPUT, "kernels.json: %s has no block/grid — regenerate with gen", L->kernel);
        for (int i = 0; i < np; i++) {
            const cJSON *pa = cJSON_GetArrayItem(params, i), *ar = cJSON_GetArrayItem(args, i);
            const cJSON *pt = cJSON_GetObjectItemCaseSensitive(pa, "type");
            const cJSON *pn = cJSON_GetObjectItemCaseSensitive(pa, "name");
            if (!cJSON_IsString(pt) || !cJSON_IsString(pn) || !cJSON_IsString(ar))
                return hyp_fail(e, HYP_EINPUT, "kernels.json: %s: malformed parameter %d", L->kernel, i + 1);
            L->ptype[i] = ptype_of(pt->valuestring);
            if (L->ptype[i] < 0)
                return hyp_fail(e, HYP_EINPUT, "kernels.json: %s: parameter type '%s' is not supported by the executor", L->kernel, pt->valuestring);
            L->pname[i] = xstrdup(pn->valuestring);
            int rc = bind_arg(x, L, i, ar->valuestring, c, sc, nsc, e);
            if (rc) return rc;
        }
        const char *a0 = np > 0 ? cJSON_GetArrayItem(args, 0)->valuestring : "";
        if (L->bind[0] == AB_BUF && L->bidx[0] < 0 && strstr(a0, "out") == a0 + (a0[1] == '.' ? 2 : 0))
            free_launch(&x->launches[--x->n_launches]); /* its output is an absent optional one (a llama's
                                                           embedding_bwd_wpe): nothing to do */
    }
    eo->count = x->n_launches - eo->first;
    return HYP_OK;
}

/* The manifest key of op o: its name, or for an fp8_quantize op "fp8_quantize(current, gradient,
 * hybrid)" and the like (current scaling; an E5M2 slot); with gemm, the key of the fp8 byte casts
 * an fp8_quantize op adds for the FP8 GEMMs. */
static const char *op_key(const plan_t *p, const plan_op *o, int gemm) {
    if (!has_fp8_slot(o)) return hyp_op_name(o->op);
    int e5 = !p->fp8_e4m3_only && p->fp8_roles[o->slot] == HYP_FP8_GRADIENT;
    if (gemm) return e5 ? "fp8_quantize(fp8 gemm, gradient, hybrid)" : "fp8_quantize(fp8 gemm)";
    if (p->fp8_current) return e5 ? "fp8_quantize(current, gradient, hybrid)" : "fp8_quantize(current)";
    return e5 ? "fp8_quantize(gradient, hybrid)" : "fp8_quantize";
}

/* Prepares the launches of one plan op. */
static int prepare_op(exec_dev *x, const cJSON *man, const plan_op *o, exec_dev_op *eo, scratch_t *sc, int *nsc,
                      hyp_err *e) {
    const char *name = op_key(x->p, o, 0);
    const cJSON *ops = cJSON_GetObjectItemCaseSensitive(man, "ops");
    const cJSON *ls = cJSON_GetObjectItemCaseSensitive(ops, name);
    memset(eo, 0, sizeof *eo);
    if (!ls) {
        hyp_op_device dv = hyp_op_get(o->op)->device;
        if (dv == HYP_OPDEV_GEMM_FWD || dv == HYP_OPDEV_GEMM_BWD) eo->how = EXD_GEMM;
        else if (dv == HYP_OPDEV_ZERO) eo->how = EXD_ZERO;
        else return hyp_fail(e, HYP_EINPUT, "kernels.json: plan op '%s' has no kernel launch — this trainer cannot run it on a device yet (use --target cpu)", name);
        return HYP_OK;
    }
    bind_ctx c = {o, NULL, NULL, name};
    int rc = prepare_launches(x, man, ls, &c, eo, sc, nsc, e);
    if (rc || !has_fp8_slot(o) || !x->fp8_gemm) return rc;
    /* the fp8 bytes for the FP8 GEMMs, right after (the op's launches stay contiguous) */
    exec_dev_op more;
    c.what = op_key(x->p, o, 1);
    if (!(ls = cJSON_GetObjectItemCaseSensitive(ops, c.what)))
        return hyp_fail(e, HYP_EINPUT, "kernels.json: no '%s' launches for the plan's fp8 GEMMs — regenerate the trainer with gen", c.what);
    if ((rc = prepare_launches(x, man, ls, &c, &more, sc, nsc, e))) return rc;
    eo->count += more.count;
    return HYP_OK;
}

/* v2166: the manifest's fusion sites. A site names two ops (0-based indices ia < ib into the
 * forward or the backward list, by the kind's _fwd/_bwd suffix) with only zero ops between them
 * that clear none of the first op's outputs; its launches replace both ops' and run at the second
 * (after those zeros: rope_attention_bwd writes the gradient the zero between clears). */
static int prepare_fusions(exec_dev *x, const cJSON *man, scratch_t *sc, int *nsc, hyp_err *e) {
    const cJSON *fu;
    cJSON_ArrayForEach(fu, cJSON_GetObjectItemCaseSensitive(man, "fusions")) {
        const cJSON *kind = cJSON_GetObjectItemCaseSensitive(fu, "kind");
        const cJSON *ls = cJSON_GetObjectItemCaseSensitive(fu, "launches");
        size_t kl = cJSON_IsString(kind) ? strlen(kind->valuestring) : 0;
        int bwd = kl > 4 && !strcmp(kind->valuestring + kl - 4, "_bwd");
        if (!kl || (!bwd && strcmp(kind->valuestring + (kl > 4 ? kl - 4 : 0), "_fwd")) || !cJSON_IsArray(ls))
            return hyp_fail(e, HYP_EINPUT, "kernels.json: a fusion entry lacks a kind (..._fwd/_bwd) or launches — regenerate with gen");
        const plan_op *list = bwd ? x->p->bwd : x->p->fwd;
        exec_dev_op *eol = bwd ? x->bwd : x->fwd;
        int n = bwd ? x->p->n_bwd : x->p->n_fwd;
        const cJSON *site;
        cJSON_ArrayForEach(site, cJSON_GetObjectItemCaseSensitive(fu, "sites")) {
            const cJSON *ops = cJSON_GetObjectItemCaseSensitive(site, "ops");
            const cJSON *ja = cJSON_GetArrayItem(ops, 0), *jb = cJSON_GetArrayItem(ops, 1);
            int ia = cJSON_IsNumber(ja) ? ja->valueint : -1, ib = cJSON_IsNumber(jb) ? jb->valueint : -1;
            int ok = cJSON_GetArraySize(ops) == 2 && ia >= 0 && ia < ib && ib < n && eol[ia].how == EXD_KERNELS &&
                     eol[ib].how == EXD_KERNELS && !eol[ia].pair && !eol[ib].pair;
            for (int k = ia + 1; ok && k < ib; k++) {
                ok = hyp_op_get(list[k].op)->device == HYP_OPDEV_ZERO;
                for (int j = 0; ok && j < list[ia].nout; j++) ok = list[k].out[0] != list[ia].out[j];
            }
            if (!ok)
                return hyp_fail(e, HYP_EINPUT, "kernels.json: fusion %s: a site's ops do not form a fusable pair of this plan — regenerate the trainer with gen", kind->valuestring);
            bind_ctx c = {&list[ia], &list[ib], site, kind->valuestring};
            int rc = prepare_launches(x, man, ls, &c, &eol[ib], sc, nsc, e);
            if (rc) return rc;
            eol[ib].pair = &list[ia];
            eol[ia].how = EXD_SKIP;
        }
    }
    return HYP_OK;
}

static void free_launches(exec_dev *x) {
    for (int i = 0; i < x->n_launches; i++) free_launch(&x->launches[i]);
    free(x->launches);
    x->launches = NULL;
    x->n_launches = 0;
}

static void free_z3(exec_dev *x);

void exec_dev_free(exec_dev *x) {
    if (!x->dev) return;
    hyp_err e;
    hyp_device *d = x->dev;
    free_z3(x);
    d->mem_free(d, x->params, &e);
    d->mem_free(d, x->grads, &e);
    for (int k = 0; k < HYP_OPT_MAX_STATE; k++) d->mem_free(d, x->state[k], &e);
    d->mem_free(d, x->acts, &e);
    d->mem_free(d, x->tokens, &e);
    d->mem_free(d, x->targets, &e);
    d->mem_free(d, x->ones, &e);
    d->mem_free(d, x->scratch, &e);
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
    free_launches(x);
    free(x->fwd);
    free(x->bwd);
    free(x->h_tokens);
    free(x->h_targets);
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

static int dalloc(exec_dev *x, void **ptr, int64_t n, size_t elem, hyp_err *e) {
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
            int rc = dalloc(x, &x->fp8_q[o->slot], n, 1, e);
            if (rc || (rc = dalloc(x, &x->fp8_qt[o->slot], n, 1, e))) return rc;
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
    if ((rc = dalloc(x, (void **)&x->fp8_scale, n, 4, e)) || (rc = dalloc(x, (void **)&x->fp8_scale_inv, n, 4, e)) ||
        (rc = dalloc(x, (void **)&x->fp8_amax, n, 4, e)) || (rc = init_fp8_gemm(x, e)))
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
    int rc = dalloc(x, (void **)&x->params, x->shard, 4, e);
    for (int s = 0; s < lay->n_slots && !rc; s++) rc = dalloc(x, (void **)&z->slot[s], lay->slot_cap, 4, e);
    size_t b1 = x->bytes;
    if (!rc) rc = dalloc(x, (void **)&x->grads, lay->slot_cap, 4, e);
    size_t b2 = x->bytes;
    if (!rc) rc = dalloc(x, (void **)&x->gshard, x->shard, 4, e);
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

/* The optimizer's states (the plan's optimizer.state, fp32), n floats each. */
static int alloc_states(exec_dev *x, int64_t n, hyp_err *e) {
    const hyp_optim_cfg *o = &x->p->optim;
    if (!o->kind[0]) return hyp_fail(e, HYP_EINPUT, "exec_dev: the plan has no optimizer section — regenerate it with gen");
    x->n_state = o->n_state;
    int rc = HYP_OK;
    for (int k = 0; k < o->n_state && !rc; k++) {
        if (o->state_dtype[k] != HYP_DT_F32)
            return hyp_fail(e, HYP_EINPUT, "exec_dev: optimizer state '%s' is %s; the device executor keeps fp32 states — regenerate with f32 optimizer states",
                            o->state_name[k], hyp_dtype_name(o->state_dtype[k]));
        rc = dalloc(x, (void **)&x->state[k], n, 4, e);
    }
    return rc;
}

/* The arenas: exec.c's data-parallel layout (the arena padded to world equal shards of 16-float
 * multiples), or at stage 3 (lay) the layout of the host mirror. */
static int alloc_arenas(exec_dev *x, const hyp_z3_layout *lay, hyp_err *e) {
    const plan_t *p = x->p;
    int64_t maxN = (int64_t)p->B * p->T;
    x->shard = lay ? lay->shard : ((p->param_floats + x->world - 1) / x->world + 15) / 16 * 16;
    x->arena = x->shard * x->world;
    int64_t optim = x->stage >= 1 ? x->shard : x->arena;
    int rc = lay ? alloc_z3(x, lay, e) : HYP_OK;
    if (rc || (!lay && ((rc = dalloc(x, (void **)&x->params, x->arena, 4, e)) ||
                        (rc = dalloc(x, (void **)&x->grads, x->arena, 4, e)) ||
                        (x->stage >= 2 && (rc = dalloc(x, (void **)&x->gshard, x->shard, 4, e))))) ||
        (rc = alloc_states(x, optim, e)) || (rc = dalloc(x, (void **)&x->acts, p->act_floats, 4, e)) || (rc = dalloc(x, (void **)&x->tokens, maxN, 4, e)) ||
        (rc = dalloc(x, (void **)&x->targets, maxN, 4, e)) || (rc = dalloc(x, (void **)&x->ones, maxN, 4, e)))
        return rc;
    if (!lay) {
        x->bytes_params = 4 * (size_t)x->arena;
        x->bytes_grads = 4 * (size_t)(x->arena + (x->stage >= 2 ? x->shard : 0));
    }
    x->bytes_optim = 4 * (size_t)x->n_state * (size_t)optim;
    x->bytes_acts = 4 * (size_t)(p->act_floats > 0 ? p->act_floats : 1);
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

static int init_any(exec_dev *x, const plan_t *p, const char *kernels_dir, hyp_device *dev, int world, int rank,
                    int stage, const hyp_z3_layout *lay, hyp_err *e) {
    memset(x, 0, sizeof *x);
    if (world < 1 || rank < 0 || rank >= world || stage < 0 || stage > 3)
        return hyp_fail(e, HYP_EINPUT, "exec_dev: rank %d of %d ranks, ZeRO stage %d — need 0 <= rank < world, stage 0..3", rank, world, stage);
    if (stage == 3 && !lay)
        return hyp_fail(e, HYP_EINPUT, "exec_dev: ZeRO stage 3 takes its layout from core/zero3.h — use exec_dev_init_z3");
    x->p = p;
    x->dev = dev;
    x->opt_file = -1;
    x->B = p->B;
    x->T = p->T;
    int64_t maxN = (int64_t)p->B * p->T;
    x->world = world, x->rank = rank, x->stage = stage;
    int rc = alloc_arenas(x, stage == 3 ? lay : NULL, e);
    if (rc) {
        exec_dev_free(x);
        return rc;
    }
    x->h_tokens = calloc((size_t)maxN, sizeof(int32_t));
    x->h_targets = calloc((size_t)maxN, sizeof(int32_t));
    x->h_losses = calloc((size_t)maxN, sizeof(float));
    x->fwd = calloc((size_t)p->n_fwd + 1, sizeof *x->fwd);
    x->bwd = calloc((size_t)p->n_bwd + 1, sizeof *x->bwd);
    if (!x->h_tokens || !x->h_targets || !x->h_losses || !x->fwd || !x->bwd) {
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
            F->cnames[F->consts.n] = xstrdup(c->string);
            env_set(&F->consts, F->cnames[F->consts.n], v);
        }
        /* a GPU loads the compiled cubin the manifest names; sim the rendered source */
        const cJSON *cubin = cJSON_GetObjectItemCaseSensitive(fe, "cubin");
        int gpu = !strcmp(dev->name, "cuda");
        if (gpu && !cJSON_IsString(cubin)) {
            rc = hyp_fail(e, HYP_EINPUT, "%s: %s has no cubin — generate the trainer with --target sm_XX to run it on a GPU", path, F->name);
            goto fail;
        }
        char mpath[4200];
        snprintf(mpath, sizeof mpath, "%s/%s", kernels_dir, gpu ? cubin->valuestring : F->name);
        if ((rc = dev->module_load(dev, mpath, &F->mod, e))) goto fail;
    }
    if ((rc = prepare_optimizer(x, man, e)) || (rc = prepare_shard(x, e))) goto fail;
    scratch_t sc[64];
    int nsc = 0;
    for (int i = 0; i < p->n_fwd; i++)
        if ((rc = prepare_op(x, man, &p->fwd[i], &x->fwd[i], sc, &nsc, e))) goto fail;
    if ((rc = prepare_op(x, man, &p->loss, &x->loss, sc, &nsc, e))) goto fail;
    for (int i = 0; i < p->n_bwd; i++)
        if ((rc = prepare_op(x, man, &p->bwd[i], &x->bwd[i], sc, &nsc, e))) goto fail;
    if ((rc = prepare_fusions(x, man, sc, &nsc, e)) || (x->z3 && (rc = z3_check_fusions(x, e)))) goto fail;
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
    if ((rc = dalloc(x, (void **)&x->scratch, off, 4, e))) goto fail;
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
    return HYP_OK;
}

/* Stage 3 holds no whole arena: the shard arrays are copied by their pointers (train/backend_dev.c). */
static int no_arena(const char *what, hyp_err *e) {
    return hyp_fail(e, HYP_EINPUT, "exec_dev: %s at ZeRO stage 3 — the device holds [shard] arrays in the group layout; copy x->params / x->gshard (x->shard floats)", what);
}

int exec_dev_upload_params(exec_dev *x, const float *host, hyp_err *e) {
    if (x->z3) return no_arena("upload_params", e);
    return x->dev->h2d_sync(x->dev, x->params, host, sizeof(float) * (size_t)x->p->param_floats, e);
}
int exec_dev_download_params(exec_dev *x, float *host, hyp_err *e) {
    if (x->z3) return no_arena("download_params", e);
    return x->dev->d2h_sync(x->dev, host, x->params, sizeof(float) * (size_t)x->p->param_floats, e);
}
int exec_dev_download_grads(exec_dev *x, float *host, hyp_err *e) {
    if (x->z3) return no_arena("download_grads", e);
    return x->dev->d2h_sync(x->dev, host, x->grads, sizeof(float) * (size_t)x->p->param_floats, e);
}
int exec_dev_zero_grads(exec_dev *x, hyp_err *e) {
    if (x->z3) return x->dev->memset(x->dev, x->gshard, 0, sizeof(float) * (size_t)x->shard, NULL, e);
    return x->dev->memset(x->dev, x->grads, 0, sizeof(float) * (size_t)x->p->param_floats, NULL, e);
}

static void *dbuf(exec_dev *x, int idx) {
    if (idx < 0) return NULL;
    const plan_buf *b = &x->p->bufs[idx];
    if (x->z3 && x->z3->lay->buf_group[idx] >= 0) return x->z3->ptr[idx]; /* bound by z3_bind */
    switch (b->kind) {
    case BUF_PARAM: return x->params + b->offset;
    case BUF_GRAD: return x->grads + b->offset;
    case BUF_ACT: return x->acts + b->offset;
    case BUF_TOKENS: return idx == x->p->targets_buf ? x->targets : x->tokens;
    default: return NULL;
    }
}

int exec_dev_download_buf(exec_dev *x, int idx, float *host, int64_t n, hyp_err *e) {
    if (x->z3 && idx >= 0 && x->z3->lay->buf_group[idx] >= 0) return no_arena("download of a parameter/gradient buffer", e);
    void *d = dbuf(x, idx);
    if (!d) return hyp_fail(e, HYP_EINPUT, "buffer %d is not a float buffer", idx);
    return x->dev->d2h_sync(x->dev, host, d, sizeof(float) * (size_t)n, e);
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

static int gemm(exec_dev *x, int transa, int transb, int64_t m, int64_t n, int64_t k, const void *a, int64_t lda,
                const void *b, int64_t ldb, float beta, void *d, int64_t ldd, hyp_epilogue ep, void *bias, hyp_err *e) {
    hyp_gemm g;
    gemm_desc(&g, transa, transb, m, n, k, a, lda, b, ldb, beta, d, ldd);
    g.atype = g.btype = HYP_DT_F32;
    g.compute = HYP_GEMM_F32;
    g.epilogue = ep;
    g.bias = bias;
    return x->dev->gemm(x->dev, &g, NULL, e);
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

/* matmul_fwd: y[N][OC] = x[N][IC] W[OC][IC]^T + b; in fp8 when both inputs are fp8 slots and IC
 * is a multiple of 16 (the bias then added by an fp32 rank-1 GEMM: b 1^T, accumulated). */
static int matmul_fwd(exec_dev *x, const plan_op *o, int64_t N, hyp_err *e) {
    int64_t IC = o->IC, OC = o->OC;
    void *bias = o->nin > 2 ? dbuf(x, o->in[2]) : NULL, *y = dbuf(x, o->out[0]);
    int sx = fp8_slot(x, o->in[0]), sw = fp8_slot(x, o->in[1]);
    if (sx < 0 || sw < 0 || IC % 16)
        return gemm(x, 1, 0, OC, N, IC, dbuf(x, o->in[1]), IC, dbuf(x, o->in[0]), IC, 0.0f, y, OC,
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
    int sg = fp8_slot(x, o->in[0]), sx = fp8_slot(x, o->in[1]), sw = fp8_slot(x, o->in[2]);
    int f8 = sg >= 0 && sx >= 0 && sw >= 0, rc = HYP_OK;
    if (dinp && f8 && OC % 16 == 0) rc = gemm8(x, IC, N, OC, sw, x->fp8_qt[sw], sg, x->fp8_q[sg], 1.0f, dinp, e);
    else if (dinp) rc = gemm(x, 0, 0, IC, N, OC, w, IC, dout, OC, 1.0f, dinp, IC, HYP_EPI_NONE, NULL, e);
    if (rc) return rc;
    if (dw && f8 && N % 16 == 0 && IC % 16 == 0 && OC % 16 == 0)
        rc = gemm8(x, IC, OC, N, sx, x->fp8_qt[sx], sg, x->fp8_qt[sg], 1.0f, dw, e);
    else if (dw) rc = gemm(x, 0, 1, IC, OC, N, inp, IC, dout, OC, 1.0f, dw, IC, HYP_EPI_NONE, NULL, e);
    if (rc) return rc;
    /* db[OC] += dout^T 1 (a GEMM with n = 1 accumulates, which the BGRADB epilogue does not) */
    if (db) rc = gemm(x, 0, 0, OC, 1, N, dout, OC, x->ones, N, 1.0f, db, OC, HYP_EPI_NONE, NULL, e);
    return rc;
}

/* One launch of op o (the second op of a fusion site whose first is pair, else pair is NULL). */
static int run_launch(exec_dev *x, const plan_op *o, const plan_op *pair, const exec_dev_launch *L, float dloss,
                      hyp_err *e) {
    const exec_dev_file *F = &x->files[L->file];
    env_t v = {0};
    hyp_kargs ka;
    memset(&ka, 0, sizeof ka);
    char what[256];
    /* scalar arguments first: the grid may name them */
    env_t base = {0};
    env_set(&base, "dloss", dloss);
    for (int j = 0; j < F->consts.n; j++) env_set(&base, F->consts.name[j], F->consts.val[j]);
    env_ops(&base, pair ? pair : o, pair ? o : NULL, x->B, x->T);
    double sval[ARGS_MAX] = {0};
    for (int i = 0; i < L->nargs; i++) {
        if (L->bind[i] != AB_EXPR) continue;
        if (eval_list(L->arg[i], &base, &sval[i], 1, what, sizeof what) != 1)
            return hyp_fail(e, HYP_EINPUT, "%s (%s): %s", L->kernel, hyp_op_name(o->op), what);
        env_set(&v, L->pname[i], sval[i]);
    }
    for (int i = 0; i < L->nargs; i++) {
        void *ptr = NULL;
        switch (L->bind[i]) {
        case AB_BUF: ptr = dbuf(x, L->bidx[i]); break;
        case AB_SCRATCH: ptr = x->scratch + L->soff[i]; break;
        case AB_FP8:
            ptr = L->bidx[i] == 3 ? x->fp8_q[o->slot] : L->bidx[i] == 4 ? x->fp8_qt[o->slot]
                : (L->bidx[i] == 0 ? x->fp8_scale : L->bidx[i] == 1 ? x->fp8_scale_inv : x->fp8_amax) + o->slot;
            break;
        default: break;
        }
        switch (L->ptype[i]) {
        case PT_PTR: hyp_kargs_ptr(&ka, L->bind[i] == AB_EXPR ? NULL : ptr); break;
        case PT_I32: hyp_kargs_i32(&ka, (int32_t)llround(sval[i])); break;
        case PT_I64: hyp_kargs_i64(&ka, (int64_t)llround(sval[i])); break;
        case PT_U32: hyp_kargs_u32(&ka, (uint32_t)llround(sval[i])); break;
        default: hyp_kargs_f32(&ka, (float)sval[i]); break;
        }
    }
    for (int j = 0; j < base.n; j++) env_set(&v, base.name[j], base.val[j]);
    double g[3] = {1, 1, 1}, sm = 0;
    int ng = eval_list(L->grid, &v, g, 3, what, sizeof what);
    if (ng < 1 || eval_list(L->smem, &v, &sm, 1, what, sizeof what) != 1)
        return hyp_fail(e, HYP_EINPUT, "%s (%s): %s", L->kernel, hyp_op_name(o->op), what);
    for (int j = 0; j < 3; j++)
        if (g[j] < 1) return HYP_OK; /* an empty grid: nothing to do */
    return x->dev->launch(x->dev, F->mod, L->kernel, HYP_DIM3((unsigned)g[0], (unsigned)g[1], (unsigned)g[2]),
                          HYP_DIM3((unsigned)L->block, 1, 1), (size_t)sm, &ka, NULL, e);
}

static int run_op(exec_dev *x, const plan_op *o, const exec_dev_op *eo, float dloss, hyp_err *e) {
    int64_t N = (int64_t)x->B * x->T;
    int rc = HYP_OK;
    switch (eo->how) {
    case EXD_KERNELS:
        for (int i = 0; i < eo->count && !rc; i++) rc = run_launch(x, o, eo->pair, &x->launches[eo->first + i], dloss, e);
        return rc;
    case EXD_SKIP: return HYP_OK; /* run by its fusion site's launches at the site's second op */
    case EXD_ZERO: {
        int64_t n = (o->n == DIM_B ? x->B : o->n == DIM_T ? x->T : o->n == DIM_N ? N : o->n) * (o->C ? o->C : 1);
        return x->dev->memset(x->dev, dbuf(x, o->out[0]), 0, sizeof(float) * (size_t)n, NULL, e);
    }
    case EXD_GEMM:
        return hyp_op_get(o->op)->device == HYP_OPDEV_GEMM_FWD ? matmul_fwd(x, o, N, e) : matmul_bwd(x, o, N, e);
    default: return hyp_fail(e, HYP_EINPUT, "plan op '%s' cannot run on the device", hyp_op_name(o->op));
    }
}

static int upload_batch(exec_dev *x, hyp_err *e) {
    size_t n = sizeof(int32_t) * (size_t)x->B * x->T;
    int rc = x->dev->h2d(x->dev, x->tokens, x->h_tokens, n, NULL, e);
    if (!rc) rc = x->dev->h2d(x->dev, x->targets, x->h_targets, n, NULL, e);
    return rc;
}

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

int exec_dev_forward(exec_dev *x, hyp_err *e) {
    int rc = upload_batch(x, e);
    if (!rc && x->z3)
        rc = z3_run(x, x->p->fwd, x->fwd, x->p->n_fwd, x->z3->lay->fwd, x->z3->lay->n_fwd, 0, 0, NULL, e);
    for (int i = 0; i < x->p->n_fwd && !rc && !x->z3; i++) rc = run_op(x, &x->p->fwd[i], &x->fwd[i], 0, e);
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
    return init_any(x, p, kernels_dir, dev, world, rank, stage, NULL, e);
}

int exec_dev_init_z3(exec_dev *x, const plan_t *p, const char *kernels_dir, hyp_device *dev, const hyp_z3_layout *lay,
                     hyp_err *e) {
    return init_any(x, p, kernels_dir, dev, lay->world, lay->rank, 3, lay, e);
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
    if (!rc) rc = dalloc(x, (void **)&x->sh_seg_end, n, sizeof(int64_t), e);
    if (!rc) rc = dalloc(x, (void **)&x->sh_seg_wd, n, sizeof(float), e);
    if (!rc) rc = x->dev->h2d_sync(x->dev, x->sh_seg_end, end, sizeof(int64_t) * (size_t)n, e);
    free(full);
    free(end);
    return rc;
}

int exec_dev_backward_each(exec_dev *x, float dloss, float *loss, int (*after)(void *ctx, int op, hyp_err *e),
                           void *ctx, hyp_err *e) {
    int rc = HYP_OK;
    *loss = 0;
    if (x->z3 && after) return hyp_fail(e, HYP_EINPUT, "exec_dev: ZeRO-3 reduces each group itself — no backward hooks");
    if (x->z3)
        rc = z3_run(x, x->p->bwd, x->bwd, x->p->n_bwd, x->z3->lay->bwd, x->z3->lay->n_bwd, 1, dloss, loss, e);
    for (int i = 0; i < x->p->n_bwd && !rc && !x->z3; i++) {
        rc = run_op(x, &x->p->bwd[i], &x->bwd[i], dloss, e);
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
    env_set(&v, "n", (double)n);
    for (int j = 0; j < F->consts.n; j++) env_set(&v, F->consts.name[j], F->consts.val[j]);
    double g = 0;
    char what[200];
    int block = 256;
    for (int j = 0; j < F->consts.n; j++)
        if (!strcmp(F->consts.name[j], "BLOCK")) block = (int)F->consts.val[j];
    if (eval_list(x->opt_grid, &v, &g, 1, what, sizeof what) != 1)
        return hyp_fail(e, HYP_EINPUT, "%s: %s", x->opt_kernel, what);
    return x->dev->launch(x->dev, F->mod, x->opt_kernel, HYP_DIM3((unsigned)g, 1, 1), HYP_DIM3((unsigned)block, 1, 1), 0,
                          a, NULL, e);
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
