/* lottery_lua.c — the weight surgery of `gen lottery` (v2155, Frankle & Carbin 2019 with late
 * rewinding, Frankle et al. 2020): from the final weights of a round, prune `rate` of each prunable
 * matrix's remaining weights by magnitude (weights already zero stay pruned; ties by index), and
 * write the rewind point's weights under that mask as the next round's starting model. Both files
 * are Hugging Face safetensors of one model (`gen export` of two checkpoints), so tensor names and
 * shapes agree. Prunable: the 2-D weights inside the transformer layers (".h." or "model.layers."
 * in the name), as runtime/train/prune.c decides. Never writes a partial file (hyp_st_write is
 * atomic); reads only F32 tensors for the mask (others are copied as they are). */
#include <lauxlib.h>
#include <lua.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "gen_host.h"
#include "safetensors.h"

static int prunable(const hyp_st_tensor *t) {
    return t->ndim == 2 && t->dtype == HYP_ST_F32 && (strstr(t->name, ".h.") || strstr(t->name, "model.layers.")) &&
           !strstr(t->name, "embed");
}

static int cmp_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

static uint32_t mag_key(float w) {
    uint32_t u;
    memcpy(&u, &w, sizeof u);
    return u & 0x7fffffffu;
}

/* hyp.lottery_rewind(rewind.safetensors, final.safetensors, rate, out.safetensors)
 * -> rc, message, {prunable = n, pruned = n} */
static int l_lottery_rewind(lua_State *L) {
    const char *rw = luaL_checkstring(L, 1), *fin = luaL_checkstring(L, 2), *out = luaL_checkstring(L, 4);
    double rate = luaL_checknumber(L, 3);
    hyp_err e = {{0}};
    hyp_st_file *a = NULL, *b = NULL;
    hyp_st_tensor *ts = NULL;
    float **bufs = NULL;
    uint64_t *order = NULL;
    long long nprun = 0, npruned = 0;
    int rc = !(rate >= 0 && rate < 1) ? hyp_fail(&e, HYP_EINPUT, "the pruning rate %g is not in [0, 1)", rate) : 0;
    if (!rc) rc = hyp_st_open(rw, &a, &e);
    if (!rc) rc = hyp_st_open(fin, &b, &e);
    int n = rc ? 0 : hyp_st_count(a);
    if (!rc && hyp_st_count(b) != n)
        rc = hyp_fail(&e, HYP_EINPUT, "%s has %d tensors, %s %d — give two exports of one trainer's checkpoints", rw, n, fin,
                      hyp_st_count(b));
    if (!rc && (!(ts = calloc((size_t)n, sizeof *ts)) || !(bufs = calloc((size_t)n, sizeof *bufs))))
        rc = hyp_fail(&e, HYP_EFAIL, "out of memory");
    for (int i = 0; !rc && i < n; i++) {
        const hyp_st_tensor *t = hyp_st_get(a, i), *u = hyp_st_find(b, t->name);
        ts[i] = *t;
        if (!u || u->dtype != t->dtype || u->ndim != t->ndim || memcmp(u->shape, t->shape, sizeof t->shape)) {
            rc = hyp_fail(&e, HYP_EINPUT, "%s: tensor '%s' is missing or has another dtype or shape in %s — give two exports of one trainer's checkpoints",
                          rw, t->name, fin);
            break;
        }
        if (!prunable(t)) continue;
        int64_t m = hyp_st_numel(t->ndim, t->shape);
        if (m <= 0 || m > (int64_t)1 << 32) {
            rc = hyp_fail(&e, HYP_EINPUT, "%s: tensor '%s' has %lld elements — more than the 2^32 a mask index holds", rw, t->name, (long long)m);
            break;
        }
        float *w = malloc(sizeof(float) * (size_t)m), *f = malloc(sizeof(float) * (size_t)m);
        uint64_t *o = realloc(order, sizeof(uint64_t) * (size_t)m);
        if (o) order = o;
        if (!w || !f || !o) {
            free(w), free(f);
            rc = hyp_fail(&e, HYP_EFAIL, "out of memory");
            break;
        }
        bufs[i] = w;
        if ((rc = hyp_st_to_f32(a, t, w, &e)) || (rc = hyp_st_to_f32(b, u, f, &e))) {
            free(f);
            break;
        }
        /* the final weights' zeros stay pruned; of the rest, floor(rate * remaining) smallest |w| */
        int64_t zeros = 0;
        for (int64_t k = 0; k < m; k++) {
            zeros += f[k] == 0.0f;
            o[k] = (f[k] == 0.0f ? 0 : (uint64_t)mag_key(f[k]) + 1) << 32 | (uint64_t)k; /* zeros sort first */
        }
        qsort(o, (size_t)m, sizeof *o, cmp_u64);
        int64_t cut = zeros + (int64_t)((double)(m - zeros) * rate);
        for (int64_t k = 0; k < cut; k++) w[o[k] & 0xffffffffu] = 0.0f;
        free(f);
        ts[i].data = w;
        nprun += m, npruned += cut;
    }
    if (!rc) rc = hyp_st_write(out, ts, n, NULL, 0, NULL, &e);
    for (int i = 0; bufs && i < n; i++) free(bufs[i]);
    free(bufs);
    free(ts);
    free(order);
    hyp_st_close(a);
    hyp_st_close(b);
    lua_pushinteger(L, rc);
    lua_pushstring(L, rc ? e.msg : "ok");
    lua_createtable(L, 0, 2);
    lua_pushinteger(L, nprun);
    lua_setfield(L, -2, "prunable");
    lua_pushinteger(L, npruned);
    lua_setfield(L, -2, "pruned");
    return 3;
}

void gen_register_lottery(lua_State *L, int idx) {
    idx = lua_absindex(L, idx);
    lua_pushcfunction(L, l_lottery_rewind);
    lua_setfield(L, idx, "lottery_rewind");
}
