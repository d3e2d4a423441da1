/* grow_lua.c — the weight surgery of `gen grow` (v2151 depth, v2153 function-preserving width):
 * a trained model's Hugging Face safetensors (`gen export` of a checkpoint) turned into the starting
 * weights of a deeper and/or wider model of the same family, for `train --init-from`.
 * - depth "identity": layers 0..L_s-1 are the trained ones; each new layer l >= L_s copies layer
 *   l mod L_s with its two output projections (attention out, MLP down: weights and biases) set to
 *   zero, so it adds exactly 0 to the residual stream: the grown model computes the same function
 *   (pre-norm blocks; bit for bit). depth "stack" (G_stack): layer l is a full copy of layer
 *   l mod L_s (the trained stack repeated; not function-preserving).
 * - width "fpi" (Net2WiderNet / bert2BERT's function-preserving initialization) of the MLP hidden
 *   size H_s -> H_t: unit i < H_s is itself, unit i >= H_s copies a unit g(i) drawn uniformly
 *   (splitmix64 from the seed, per layer); incoming weights and biases are copied, outgoing weights
 *   divided by the number of copies of their source unit, so the sum over copies is the original
 *   outgoing weight (equal up to the rounding of the division and of the longer sum).
 * - width shrink (v2157 structured pruning of MLP channels, H_t < H_s): per layer the H_t hidden
 *   units with the largest ||incoming weights||_2 x ||outgoing weights||_2 (Li et al. 2017's norm
 *   criterion, the product so a unit counts as much as the path through it) are kept, in their
 *   order, their weights copied exactly; the others are removed from the tensors (a smaller model).
 * Everything else (embeddings, norms, head) is copied. F32 tensors only (our exports). Never writes
 * a partial file (hyp_st_write is atomic). */
#include <lauxlib.h>
#include <math.h>
#include <lua.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gen_host.h"
#include "safetensors.h"

static uint64_t splitmix(uint64_t *s) {
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* "transformer.h.3.attn.c_proj.weight" -> prefix "transformer.h.", layer 3, rest "attn.c_proj.weight" */
static int split_layer(const char *name, char *prefix, size_t pcap, int *layer, const char **rest) {
    static const char *const P[] = {"transformer.h.", "model.layers."};
    for (int k = 0; k < 2; k++) {
        size_t n = strlen(P[k]);
        if (strncmp(name, P[k], n)) continue;
        char *end;
        long l = strtol(name + n, &end, 10);
        if (end == name + n || *end != '.' || l < 0 || l > 100000) return 0;
        snprintf(prefix, pcap, "%s", P[k]);
        *layer = (int)l;
        *rest = end + 1;
        return 1;
    }
    return 0;
}

static int is_out_proj(const char *rest) {
    static const char *const O[] = {"attn.c_proj.weight", "attn.c_proj.bias", "mlp.c_proj.weight", "mlp.c_proj.bias",
                                    "self_attn.o_proj.weight", "self_attn.o_proj.bias", "mlp.down_proj.weight",
                                    "mlp.down_proj.bias"};
    for (size_t i = 0; i < sizeof O / sizeof *O; i++)
        if (!strcmp(rest, O[i])) return 1;
    return 0;
}

/* how an MLP tensor's hidden dimension is laid out: 0 none, 1 incoming along the last dim (GPT-2
 * Conv1D c_fc [C, H], its bias [H]), 2 incoming along the first dim (Llama gate/up [H, C]),
 * 3 outgoing along the first dim (GPT-2 c_proj [H, C]), 4 outgoing along the last dim (down [C, H]) */
static int hidden_role(const char *rest) {
    if (!strcmp(rest, "mlp.c_fc.weight") || !strcmp(rest, "mlp.c_fc.bias")) return 1;
    if (!strcmp(rest, "mlp.gate_proj.weight") || !strcmp(rest, "mlp.up_proj.weight") || !strcmp(rest, "mlp.gate_proj.bias") ||
        !strcmp(rest, "mlp.up_proj.bias"))
        return 2;
    if (!strcmp(rest, "mlp.c_proj.weight")) return 3;
    if (!strcmp(rest, "mlp.down_proj.weight")) return 4;
    return 0;
}

/* The kept units of layer ls when the MLP shrinks (v2157): map[0..Ht) = the Ht units of the largest
 * ||in|| x ||out|| (ties: the lower index), ascending. */
static int shrink_map(hyp_st_file *f, const char *src, int ls, int64_t Hs, int64_t Ht, int32_t *map, hyp_err *e) {
    double *in = calloc((size_t)Hs, sizeof(double)), *out = calloc((size_t)Hs, sizeof(double));
    int64_t *ord = malloc(sizeof(int64_t) * (size_t)Hs);
    int rc = in && out && ord ? 0 : hyp_fail(e, HYP_EFAIL, "out of memory");
    for (int i = 0; !rc && i < hyp_st_count(f); i++) {
        const hyp_st_tensor *t = hyp_st_get(f, i);
        char pre[32];
        int l;
        const char *rest;
        if (!split_layer(t->name, pre, sizeof pre, &l, &rest) || l != ls || t->ndim != 2) continue;
        int role = hidden_role(rest);
        if (!role) continue;
        int64_t rows = t->shape[0], cols = t->shape[1];
        if (((role == 1 || role == 4) && cols != Hs) || ((role == 2 || role == 3) && rows != Hs)) {
            rc = hyp_fail(e, HYP_EINPUT, "%s: '%s' has shape [%lld, %lld], not the MLP width %lld — give an export of the source trainer's checkpoint",
                          src, t->name, (long long)rows, (long long)cols, (long long)Hs);
            break;
        }
        float *v = malloc(sizeof(float) * (size_t)(rows * cols));
        if (!v || (rc = hyp_st_to_f32(f, t, v, e))) {
            free(v);
            if (!rc) rc = hyp_fail(e, HYP_EFAIL, "out of memory");
            break;
        }
        double *acc = role <= 2 ? in : out;
        for (int64_t r = 0; r < rows; r++)
            for (int64_t c = 0; c < cols; c++) acc[(role == 1 || role == 4) ? c : r] += (double)v[r * cols + c] * v[r * cols + c];
        free(v);
    }
    for (int64_t u = 0; !rc && u < Hs; u++) in[u] = sqrt(in[u]) * sqrt(out[u]), ord[u] = u;
    /* a selection by (score desc, index asc): an insertion sort of the Ht best would do too; Hs is
     * thousands, so a plain sort */
    for (int64_t a = 1; !rc && a < Hs; a++) {
        int64_t x = ord[a], b = a - 1;
        while (b >= 0 && (in[ord[b]] < in[x] || (in[ord[b]] == in[x] && ord[b] > x))) ord[b + 1] = ord[b], b--;
        ord[b + 1] = x;
    }
    if (!rc) {
        memset(out, 0, sizeof(double) * (size_t)Hs); /* reused as the kept flags */
        for (int64_t u = 0; u < Ht; u++) out[ord[u]] = 1;
        int64_t k = 0;
        for (int64_t u = 0; u < Hs; u++)
            if (out[u] != 0) map[k++] = (int32_t)u;
    }
    free(in), free(out), free(ord);
    return rc;
}

/* hyp.grow(src.safetensors, out.safetensors, {L_s, L_t, H_s, H_t, depth = "identity"|"stack", seed})
 * -> rc, message, {tensors = n, new_layers = n, new_units = n} */
static int l_grow(lua_State *L) {
    const char *src = luaL_checkstring(L, 1), *out = luaL_checkstring(L, 2);
    luaL_checktype(L, 3, LUA_TTABLE);
    lua_getfield(L, 3, "L_s"), lua_getfield(L, 3, "L_t"), lua_getfield(L, 3, "H_s"), lua_getfield(L, 3, "H_t");
    lua_getfield(L, 3, "depth"), lua_getfield(L, 3, "seed");
    int Ls = (int)luaL_checkinteger(L, -6), Lt = (int)luaL_checkinteger(L, -5);
    int64_t Hs = luaL_checkinteger(L, -4), Ht = luaL_checkinteger(L, -3);
    int stack = !strcmp(luaL_checkstring(L, -2), "stack");
    uint64_t seed = (uint64_t)luaL_checkinteger(L, -1);
    lua_pop(L, 6);
    hyp_err e = {{0}};
    int rc = 0;
    if (Ls < 1 || Lt < Ls || Hs < 1 || Ht < 1 || Lt > 100000 || Ht > ((int64_t)1 << 31) || Hs > ((int64_t)1 << 31))
        rc = hyp_fail(&e, HYP_EINPUT, "grow: layers %d -> %d and MLP width %lld -> %lld: layers only grow, the width must stay >= 1", Ls,
                      Lt, (long long)Hs, (long long)Ht);
    hyp_st_file *f = NULL;
    if (!rc) rc = hyp_st_open(src, &f, &e);
    int ns = rc ? 0 : hyp_st_count(f);
    /* every target tensor: the non-layer ones once, the layer ones once per target layer */
    int nlayer_t = 0, nother = 0;
    for (int i = 0; !rc && i < ns; i++) {
        char pre[32];
        int l;
        const char *rest;
        const hyp_st_tensor *t = hyp_st_get(f, i);
        if (t->dtype != HYP_ST_F32) rc = hyp_fail(&e, HYP_EINPUT, "%s: tensor '%s' is %s; gen grow reads F32 exports", src, t->name, hyp_st_dtype_name(t->dtype));
        else if (split_layer(t->name, pre, sizeof pre, &l, &rest)) nlayer_t += l == 0;
        else nother++;
    }
    int nt = nother + nlayer_t * Lt;
    hyp_st_tensor *ts = rc ? NULL : calloc((size_t)nt, sizeof *ts);
    char **names = rc ? NULL : calloc((size_t)nt, sizeof *names);
    float **bufs = rc ? NULL : calloc((size_t)nt, sizeof *bufs);
    int32_t *map = rc ? NULL : malloc(sizeof(int32_t) * (size_t)Ht);
    int32_t *cnt = rc ? NULL : calloc((size_t)Hs, sizeof(int32_t));
    if (!rc && (!ts || !names || !bufs || !map || !cnt)) rc = hyp_fail(&e, HYP_EFAIL, "out of memory");
    int k = 0;
    long long new_units = 0;
    for (int i = 0; !rc && i < ns; i++) { /* non-layer tensors, as they are */
        const hyp_st_tensor *t = hyp_st_get(f, i);
        char pre[32];
        int l;
        const char *rest;
        if (split_layer(t->name, pre, sizeof pre, &l, &rest)) continue;
        ts[k++] = *t;
    }
    for (int lt = 0; !rc && lt < Lt; lt++) {
        int ls = lt % Ls, fresh = lt >= Ls;
        /* this layer's unit map for the MLP width: identity, then uniform draws (per layer) */
        uint64_t st = seed * 0x100000001B3ull + (uint64_t)lt;
        memset(cnt, 0, sizeof(int32_t) * (size_t)Hs);
        if (Ht < Hs && (rc = shrink_map(f, src, ls, Hs, Ht, map, &e))) break; /* v2157: the kept units */
        for (int64_t u = 0; u < Ht; u++) {
            if (Ht >= Hs) map[u] = u < Hs ? (int32_t)u : (int32_t)(splitmix(&st) % (uint64_t)Hs);
            cnt[map[u]]++;
        }
        if (lt == 0) new_units = (long long)(Ht - Hs) * Lt; /* negative: units removed */
        for (int i = 0; !rc && i < ns; i++) {
            const hyp_st_tensor *t = hyp_st_get(f, i);
            char pre[32], nm[512];
            int l;
            const char *rest;
            if (!split_layer(t->name, pre, sizeof pre, &l, &rest) || l != ls) continue;
            snprintf(nm, sizeof nm, "%s%d.%s", pre, lt, rest);
            int role = Ht != Hs ? hidden_role(rest) : 0;
            if (role == 2 && t->ndim == 1) role = 1; /* a gate/up bias [H]: along its only dim */
            hyp_st_tensor o = *t;
            int64_t rows = t->ndim == 2 ? t->shape[0] : 1, cols = t->ndim == 2 ? t->shape[1] : t->shape[0];
            if ((role == 1 || role == 4) && cols != Hs) role = -1;
            if ((role == 2 || role == 3) && t->ndim == 2 && rows != Hs) role = -1;
            if (role < 0) {
                rc = hyp_fail(&e, HYP_EINPUT, "%s: '%s' has shape [%lld, %lld], not the MLP width %lld the plan says — give an export of the source trainer's checkpoint",
                              src, t->name, (long long)rows, (long long)cols, (long long)Hs);
                break;
            }
            int64_t orow = (role == 2 || role == 3) ? Ht : rows, ocol = (role == 1 || role == 4) ? Ht : cols;
            float *b = malloc(sizeof(float) * (size_t)(orow * ocol));
            names[k] = strdup(nm);
            if (!b || !names[k]) {
                free(b);
                rc = hyp_fail(&e, HYP_EFAIL, "out of memory");
                break;
            }
            float *sv = malloc(sizeof(float) * (size_t)(rows * cols));
            if (!sv || (rc = hyp_st_to_f32(f, t, sv, &e))) {
                free(sv), free(b);
                if (!rc) rc = hyp_fail(&e, HYP_EFAIL, "out of memory");
                break;
            }
            for (int64_t r = 0; r < orow; r++)
                for (int64_t c = 0; c < ocol; c++) {
                    int64_t sr = r, sc = c;
                    double div = 1;
                    if (role == 1 || role == 4) sc = map[c];
                    if (role == 2 || role == 3) sr = map[r];
                    if (role == 3) div = cnt[map[r]];
                    if (role == 4) div = cnt[map[c]];
                    float v = sv[sr * cols + sc];
                    b[r * ocol + c] = div == 1 ? v : (float)(v / div);
                }
            free(sv);
            if (fresh && !stack && is_out_proj(rest)) memset(b, 0, sizeof(float) * (size_t)(orow * ocol));
            o.name = names[k];
            if (t->ndim == 2) o.shape[0] = orow, o.shape[1] = ocol;
            else o.shape[0] = ocol;
            o.data = b;
            bufs[k] = b;
            ts[k++] = o;
        }
    }
    if (!rc && k != nt) rc = hyp_fail(&e, HYP_EINPUT, "%s: layer %d lacks tensors layer 0 has — give a complete export", src, Ls - 1);
    if (!rc) rc = hyp_st_write(out, ts, nt, NULL, 0, NULL, &e);
    for (int i = 0; i < nt && bufs; i++) free(bufs[i]);
    for (int i = 0; i < nt && names; i++) free(names[i]);
    free(bufs), free(names), free(ts), free(map), free(cnt);
    hyp_st_close(f);
    lua_pushinteger(L, rc);
    lua_pushstring(L, rc ? e.msg : "ok");
    lua_createtable(L, 0, 3);
    lua_pushinteger(L, nt);
    lua_setfield(L, -2, "tensors");
    lua_pushinteger(L, Lt - Ls);
    lua_setfield(L, -2, "new_layers");
    lua_pushinteger(L, new_units);
    lua_setfield(L, -2, "new_units");
    return 3;
}

void gen_register_grow(lua_State *L, int idx) {
    idx = lua_absindex(L, idx);
    lua_pushcfunction(L, l_grow);
    lua_setfield(L, idx, "grow");
}
