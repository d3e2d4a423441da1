/* progressive_lua.c — the stage boundary of `gen progressive` (v2150): the checkpoint the next
 * stage's trainer resumes from, built from the previous stage's final checkpoint and the grown
 * weights (`gen grow`'s Hugging Face directory). hyp.prog_handoff(src_step, src_plan, grown_dir,
 * tgt_plan, dst_dir) writes dst_dir/step_N (and `latest`) with:
 * - the weights: grown_dir read into the target plan's layout (hyp_hf_init_from, as --init-from);
 * - the training state of src_step unchanged: step, tokens seen, RNG, data-loader position (so the
 *   global step, the LR schedule spanning the whole run and the data continue);
 * - the optimizer state: a parameter whose name and shape are the same in both plans keeps its
 *   state tensors (old layers under depth growth, embeddings, norms); every other one (new layers,
 *   widened tensors) starts at zero, as a fresh optimizer would;
 * - the target plan's config hash and a copy of the target plan, so the trainer accepts it.
 * Refuses optimizers with packed (compact) states and checkpoints with auxiliary training state
 * (FP8 scales), whose layout depends on the shapes. Never: writes a partial checkpoint
 * (hyp_ckpt_save is atomic) or touches src_step. */
#include <lauxlib.h>
#include <lua.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt.h"
#include "gen_host.h"
#include "hf.h"
#include "plan.h"
#include "safetensors.h"

typedef struct {
    plan_t p;
    int loaded;
    float *w, *s[HYP_CKPT_MAX_STATES];
    hyp_ckpt_tensor *tw, *ts[HYP_CKPT_MAX_STATES];
    char (*names[HYP_CKPT_MAX_STATES + 1])[256]; /* [0] the weights', [1 + k] state k's */
} side;

static void side_free(side *d) {
    free(d->w), free(d->tw);
    for (int k = 0; k < HYP_CKPT_MAX_STATES; k++) free(d->s[k]), free(d->ts[k]);
    for (int k = 0; k <= HYP_CKPT_MAX_STATES; k++) free(d->names[k]);
    if (d->loaded) plan_free(&d->p);
}

/* the plan's tensors "<name><suffix>" at base's arena layout, named in names[] */
static hyp_ckpt_tensor *tensors(const plan_t *p, float *base, const char *suffix, char (*names)[256]) {
    hyp_ckpt_tensor *t = calloc((size_t)p->n_params_t, sizeof *t);
    for (int i = 0; t && i < p->n_params_t; i++) {
        const plan_param *pp = &p->params[i];
        snprintf(names[i], 256, "%s%s", pp->name, suffix);
        t[i].name = names[i];
        t[i].data = base + pp->offset;
        t[i].ndim = pp->ndim;
        for (int d = 0; d < pp->ndim; d++) t[i].shape[d] = pp->shape[d];
    }
    return t;
}

/* loads the plan and allocates its weights and ns zeroed states named with suffix[k] */
static int side_open(side *d, const char *plan_path, int ns, char (*suffix)[64], hyp_err *e) {
    int rc = plan_load(plan_path, &d->p, e);
    if (rc) return rc;
    d->loaded = 1;
    const hyp_optim_cfg *o = &d->p.optim;
    for (int k = 0; k < o->n_state; k++)
        if (o->state_compact[k])
            return hyp_fail(e, HYP_EINPUT, "%s: the %s optimizer keeps packed states whose layout depends on the shapes — use adamw, sgd or lion for progressive training",
                            plan_path, o->kind);
    if (o->n_state != ns)
        return hyp_fail(e, HYP_EINPUT, "%s: the %s optimizer keeps %d state tensors per parameter, the previous stage's checkpoint %d — give every stage the same optimizer",
                        plan_path, o->kind, o->n_state, ns);
    size_t n = (size_t)d->p.n_params_t, f = (size_t)d->p.param_floats;
    int ok = (d->w = calloc(f, sizeof(float))) && (d->names[0] = calloc(n, 256)) && (d->tw = tensors(&d->p, d->w, "", d->names[0]));
    for (int k = 0; ok && k < ns; k++)
        ok = (d->s[k] = calloc(f, sizeof(float))) && (d->names[1 + k] = calloc(n, 256)) && (d->ts[k] = tensors(&d->p, d->s[k], suffix[k], d->names[1 + k]));
    return ok ? HYP_OK : hyp_fail(e, HYP_EFAIL, "out of memory");
}

static int l_prog_handoff(lua_State *L) {
    const char *src = luaL_checkstring(L, 1), *src_plan = luaL_checkstring(L, 2), *grown = luaL_checkstring(L, 3);
    const char *tgt_plan = luaL_checkstring(L, 4), *dst = luaL_checkstring(L, 5);
    hyp_err e = {{0}};
    side a, b;
    memset(&a, 0, sizeof a), memset(&b, 0, sizeof b);
    char suffix[HYP_CKPT_MAX_STATES][64] = {{0}};
    int ns = 0, rc = HYP_OK, carried = 0, fresh = 0;
    char *plan_text = NULL;
    hyp_ckpt_state st;
    memset(&st, 0, sizeof st);

    char path[HYP_CKPT_PATH_MAX];
    snprintf(path, sizeof path, "%s/train_state.safetensors", src);
    FILE *aux = fopen(path, "rb");
    if (aux) {
        fclose(aux);
        rc = hyp_fail(&e, HYP_EINPUT, "%s: the checkpoint holds auxiliary training state (FP8 scales) — progressive training runs without FP8", src);
        goto done;
    }
    /* the optimizer's state suffixes, from the source's optimizer file: "<param 0><suffix>" */
    plan_t sp;
    if ((rc = plan_load(src_plan, &sp, &e))) goto done;
    if (sp.n_params_t > 0 && sp.optim.n_state > 0) {
        hyp_st_file *of = NULL;
        snprintf(path, sizeof path, "%s/optimizer.safetensors", src);
        if (!(rc = hyp_st_open(path, &of, &e))) {
            const char *p0 = sp.params[0].name;
            size_t l0 = strlen(p0);
            for (int i = 0; i < hyp_st_count(of) && ns < HYP_CKPT_MAX_STATES; i++) {
                const char *nm = hyp_st_get(of, i)->name;
                if (!strncmp(nm, p0, l0) && nm[l0] == '.' && strlen(nm + l0) < sizeof suffix[0]) snprintf(suffix[ns++], sizeof suffix[0], "%s", nm + l0);
            }
            hyp_st_close(of);
        }
    }
    plan_free(&sp);
    if (rc || (rc = side_open(&a, src_plan, ns, suffix, &e)) || (rc = side_open(&b, tgt_plan, ns, suffix, &e))) goto done;
    if ((rc = hyp_ckpt_load(src, NULL, a.tw, a.ts, ns, a.p.n_params_t, NULL, &st, &e))) goto done;
    char what[256];
    if ((rc = hyp_hf_init_from(grown, &b.p, b.w, what, sizeof what, &e))) goto done;
    for (int i = 0; i < b.p.n_params_t; i++) {
        const plan_param *q = &b.p.params[i];
        int j = 0;
        while (j < a.p.n_params_t && strcmp(a.p.params[j].name, q->name)) j++;
        int same = j < a.p.n_params_t && a.p.params[j].ndim == q->ndim;
        for (int d = 0; same && d < q->ndim; d++) same = a.p.params[j].shape[d] == q->shape[d];
        for (int k = 0; same && k < ns; k++) memcpy(b.s[k] + q->offset, a.s[k] + a.p.params[j].offset, sizeof(float) * (size_t)q->numel);
        if (same) carried++;
        else fresh++;
    }
    /* the target plan's text and hash, so its trainer accepts the checkpoint */
    FILE *f = fopen(tgt_plan, "rb");
    long len = -1;
    if (f && !fseek(f, 0, SEEK_END)) len = ftell(f);
    if (f && len >= 0 && !fseek(f, 0, SEEK_SET) && (plan_text = malloc((size_t)len + 1)) && fread(plan_text, 1, (size_t)len, f) == (size_t)len) {
        st.plan_text = plan_text;
        st.plan_len = (size_t)len;
    } else rc = hyp_fail(&e, HYP_EINPUT, "%s: cannot read the plan", tgt_plan);
    if (f) fclose(f);
    if (rc) goto done;
    snprintf(st.config_hash, sizeof st.config_hash, "%s", b.p.state_hash);
    st.path[0] = 0;
    rc = hyp_ckpt_save(dst, b.tw, b.ts, ns, b.p.n_params_t, &st, 0, &e);
done:
    side_free(&a), side_free(&b);
    free(plan_text);
    lua_pushinteger(L, rc);
    lua_pushstring(L, rc ? e.msg : "ok");
    lua_createtable(L, 0, 4);
    lua_pushinteger(L, carried);
    lua_setfield(L, -2, "carried");
    lua_pushinteger(L, fresh);
    lua_setfield(L, -2, "fresh");
    lua_pushinteger(L, ns);
    lua_setfield(L, -2, "states");
    lua_pushinteger(L, (lua_Integer)st.step);
    lua_setfield(L, -2, "step");
    return 3;
}

void gen_register_progressive(lua_State *L, int idx) {
    idx = lua_absindex(L, idx);
    lua_pushcfunction(L, l_prog_handoff);
    lua_setfield(L, idx, "prog_handoff");
}
