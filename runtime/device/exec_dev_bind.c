/* exec_dev_bind.c — binds a trainer's kernel manifest (kernels/kernels.json) to its plan: each
 * op's launches with their arguments (plan buffers, scratch blocks, fp8 scaling state, manifest
 * expressions), the fusion sites that replace op pairs, and the optimizer's launch and tensor
 * table. Never launches anything: exec_dev.c runs what this prepares. */
#include "exec_dev_int.h"

#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

char *exec_dev_strdup(const char *s) {
    size_t n = strlen(s) + 1;
    char *d = malloc(n);
    if (d) memcpy(d, s, n);
    return d;
}

static int ptype_of(const char *t) {
    if (strchr(t, '*')) return PT_PTR;
    if (strstr(t, "hyp_tmap")) return PT_TMAP; /* a TMA tensor map (hyp/hopper.cuh), bound by "tmap:" */
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
    dev_env_set(v, "B", (double)B);
    dev_env_set(v, "T", (double)T);
    dev_env_set(v, "N", (double)N);
    if (o) {
        if (o->C) dev_env_set(v, "C", (double)o->C);
        if (o->IC) dev_env_set(v, "IC", (double)o->IC);
        if (o->OC) dev_env_set(v, "OC", (double)o->OC);
        if (o->NH) dev_env_set(v, "NH", (double)o->NH);
        if (o->NKV) dev_env_set(v, "NKV", (double)o->NKV);
        if (o->hd) dev_env_set(v, "hd", (double)o->hd);
        if (o->H) dev_env_set(v, "H", (double)o->H);
        if (o->V) dev_env_set(v, "V", (double)o->V);
        if (o->Vp) dev_env_set(v, "Vp", (double)o->Vp);
        if (o->n) dev_env_set(v, "n", (double)BD(o->n));
        if (o->bits) dev_env_set(v, "bits", (double)o->bits);
        if (o->group) dev_env_set(v, "group", (double)o->group);
        dev_env_set(v, "rowwise", (double)o->rowwise);
    }
#undef BD
}

/* The dims of op a, then of b (a fusion site's second op, or NULL); an attribute neither has is
 * plan.c's default: C = 1 (how it sizes e.g. a weight's fp8_quantize, n = OC*IC). */
void exec_dev_env_ops(env_t *v, const plan_op *a, const plan_op *b, int B, int T) {
    env_op(v, a, B, T);
    if (b) env_op(v, b, B, T);
    dev_env_set(v, "C", 1.0);
}


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

static int cmp_i64(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

/* The optimizer launch of the manifest (kernels.json ops.optimizer: its kernel, file, parameters
 * and grid; which optimizer runs it is the plan's, optim/optim.h) and the tensor table: segments
 * end at every parameter tensor's end (sorted), the last at param_floats, so alignment gaps belong
 * to the following tensor (zero gradients and zero values there). */
int exec_dev_bind_optimizer(exec_dev *x, const cJSON *man, hyp_err *e) {
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
    int rc = exec_dev_alloc(x, (void **)&x->seg_end, n, sizeof(int64_t), e);
    if (!rc) rc = exec_dev_alloc(x, (void **)&x->seg_wd, n, sizeof(float), e);
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
    exec_dev_env_ops(&v, c->a, c->b, x->p->B, x->p->T);
    char tmp[128], what[200];
    snprintf(tmp, sizeof tmp, "%s", a + 8);
    char *close = strrchr(tmp, ')');
    if (close) *close = 0;
    double d;
    if (dev_eval_list(tmp, &v, &d, 1, what, sizeof what) != 1)
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
        L->arg[i] = exec_dev_strdup(v);
        return HYP_OK;
    }
    if (!strncmp(a, "loss.", 5)) { /* the fused loss's extension (exec_dev_loss.c) */
        static const char *const lx[] = {"loss.row_scale", "loss.teacher", "loss.teacher_vp", "loss.temperature", "loss.alpha"};
        for (int k = 0; k < 5; k++)
            if (!strcmp(a, lx[k])) {
                L->bind[i] = AB_LOSS;
                L->bidx[i] = k;
                return HYP_OK;
            }
        return hyp_fail(e, HYP_EINPUT, "kernels.json: %s: unknown loss binding '%s' (loss.row_scale|teacher|teacher_vp|temperature|alpha) — regenerate with gen", L->kernel, a);
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
    if (!strncmp(a, "tmap:", 5)) { /* "tmap:inK:DIMS:BOX:SWIZZLE": a tensor map over an op buffer (v2114) */
        char buf[16];
        const char *r = strchr(a + 5, ':');
        size_t bl = r ? (size_t)(r - (a + 5)) : 0;
        if (!r || bl == 0 || bl >= sizeof buf || L->ptype[i] != PT_TMAP)
            return hyp_fail(e, HYP_EINPUT, "kernels.json: %s: tensor-map binding '%s' (want tmap:inK:DIMS:BOX:SWIZZLE for a hyp_tmap parameter) — regenerate with gen", L->kernel, a);
        memcpy(buf, a + 5, bl);
        buf[bl] = 0;
        int b = op_arg(ao, buf);
        if (b < 0)
            return hyp_fail(e, HYP_EINPUT, "kernels.json: %s: tensor-map binding '%s' names no buffer of op '%s' — regenerate with gen", L->kernel, a, hyp_op_name(ao->op));
        L->bind[i] = AB_TMAP;
        L->bidx[i] = b;
        L->arg[i] = exec_dev_strdup(r + 1);
        return HYP_OK;
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
    L->arg[i] = exec_dev_strdup(a);
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
        L->grid = exec_dev_strdup(cJSON_IsString(grid) ? grid->valuestring : cJSON_IsNumber(grid) ? gbuf : "");
        if (cJSON_IsNumber(smem)) snprintf(gbuf, sizeof gbuf, "%d", smem->valueint);
        else snprintf(gbuf, sizeof gbuf, "0");
        L->smem = exec_dev_strdup(cJSON_IsString(smem) ? smem->valuestring : gbuf);
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
            L->pname[i] = exec_dev_strdup(pn->valuestring);
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
int exec_dev_bind_op(exec_dev *x, const cJSON *man, const plan_op *o, exec_dev_op *eo, scratch_t *sc, int *nsc,
                      hyp_err *e) {
    const char *name = op_key(x->p, o, 0);
    const cJSON *ops = cJSON_GetObjectItemCaseSensitive(man, "ops");
    const cJSON *ls = cJSON_GetObjectItemCaseSensitive(ops, name);
    memset(eo, 0, sizeof *eo);
    if (exec_dev_moe_is(o)) return exec_dev_moe_bind(x, o, eo, e);
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
int exec_dev_bind_fusions(exec_dev *x, const cJSON *man, scratch_t *sc, int *nsc, hyp_err *e) {
    const cJSON *fu;
    cJSON_ArrayForEach(fu, cJSON_GetObjectItemCaseSensitive(man, "fusions")) {
        const cJSON *kind = cJSON_GetObjectItemCaseSensitive(fu, "kind");
        const cJSON *ls = cJSON_GetObjectItemCaseSensitive(fu, "launches");
        size_t kl = cJSON_IsString(kind) ? strlen(kind->valuestring) : 0;
        int bwd = kl > 4 && !strcmp(kind->valuestring + kl - 4, "_bwd");
        if (!kl || (!bwd && strcmp(kind->valuestring + (kl > 4 ? kl - 4 : 0), "_fwd")) || !cJSON_IsArray(ls))
            return hyp_fail(e, HYP_EINPUT, "kernels.json: a fusion entry lacks a kind (..._fwd/_bwd) or launches — regenerate with gen");
        if (bwd && x->fwd_only) continue; /* a frozen forward (exec_dev_init_forward) has no backward */
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

void exec_dev_free_launches(exec_dev *x) {
    for (int i = 0; i < x->n_launches; i++) free_launch(&x->launches[i]);
    free(x->launches);
    x->launches = NULL;
    x->n_launches = 0;
}


int exec_dev_bind_loss_ext(exec_dev *x, const cJSON *man, scratch_t *sc, int *nsc, hyp_err *e) {
    x->loss_ext_op = -1;
    memset(&x->loss_ext, 0, sizeof x->loss_ext);
    const cJSON *ls = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(man, "ops"), "crossentropy_fused_ext");
    if (!ls) return HYP_OK;
    for (int i = 0; i < x->p->n_bwd; i++)
        if (!strcmp(hyp_op_name(x->p->bwd[i].op), "crossentropy_fused")) {
            bind_ctx c = {&x->p->bwd[i], NULL, NULL, "crossentropy_fused_ext"};
            x->loss_ext_op = i;
            return prepare_launches(x, man, ls, &c, &x->loss_ext, sc, nsc, e);
        }
    return HYP_OK;
}
