/* grow_lua.c — the weight surgery of `gen grow` (v2151 depth, v2152/v2153 function-preserving
 * width): a trained model's Hugging Face safetensors (`gen export` of a checkpoint) turned into the
 * starting weights of a deeper and/or wider model of the same family, for `train --init-from`.
 * - depth "identity": layers 0..L_s-1 are the trained ones; each new layer l >= L_s copies layer
 *   l mod L_s with its two output projections (attention out, MLP down: weights and biases) set to
 *   zero, so it adds exactly 0 to the residual stream: the grown model computes the same function
 *   (pre-norm blocks; bit for bit). depth "stack" (G_stack): layer l is a full copy of layer
 *   l mod L_s (the trained stack repeated; not function-preserving).
 * - MLP width (Net2WiderNet / bert2BERT's function-preserving initialization) H_s -> H_t: unit
 *   i < H_s is itself, unit i >= H_s copies a unit g(i) drawn uniformly (splitmix64 from the seed,
 *   per layer); incoming weights and biases are copied, outgoing weights divided by the number of
 *   copies of their source unit, so the sum over copies is the original outgoing weight (equal up
 *   to the rounding of the division and of the longer sum).
 * - d_model and heads (v2152) C_s -> C_t, NH_s -> NH_t with the head size and the query heads per
 *   kv head unchanged: residual unit i copies i mod C_s (producers — embeddings, norms, output
 *   projections — copied; consumers — q/k/v, MLP in, and the final norm, so that a tied head sums
 *   the copies back — divided by the copy count); head h copies head h mod NH_s (q/k/v rows copied,
 *   the output projection's inputs divided). When C_t is a multiple of C_s every unit has the same
 *   number of copies, so a LayerNorm or RMSNorm sees the same mean and variance and the function is
 *   preserved; otherwise the norms' statistics change (as in bert2BERT) and it is approximate.
 * - noise (Net2Net, off by default): a relative Gaussian perturbation of the new units' producing
 *   weights, so copies do not stay identical under training (their gradients are equal otherwise).
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

/* What one dimension of a tensor (HF layout) indexes, for widening: kept as is, the residual
 * stream C (as a producer: copies; as the input of a matmul: copies divided by the copy count;
 * the final norm: divided too, so a tied or untied head sums the copies back to one), the MLP
 * hidden H (likewise), the attention heads' inner dims (q heads, kv heads, GPT-2's packed
 * [q | k | v], and the output projection's input). */
enum { D_KEEP, D_C, D_C_IN, D_C_FINAL, D_H, D_H_IN, D_Q, D_Q_IN, D_KV, D_QKV };
typedef struct {
    const char *name; /* the layer rest ("attn.c_attn.weight") or the end of a non-layer name */
    int layer, nd, k[2];
} widen_rule;
static const widen_rule RULES[] = {
    /* GPT-2 (Conv1D weights [in, out]) */
    {"wte.weight", 0, 2, {D_KEEP, D_C}}, {"wpe.weight", 0, 2, {D_KEEP, D_C}}, {"lm_head.weight", 0, 2, {D_KEEP, D_C}},
    {"ln_f.weight", 0, 1, {D_C_FINAL}}, {"ln_f.bias", 0, 1, {D_C_FINAL}},
    {"ln_1.weight", 1, 1, {D_C}}, {"ln_1.bias", 1, 1, {D_C}}, {"ln_2.weight", 1, 1, {D_C}}, {"ln_2.bias", 1, 1, {D_C}},
    {"attn.c_attn.weight", 1, 2, {D_C_IN, D_QKV}}, {"attn.c_attn.bias", 1, 1, {D_QKV}},
    {"attn.c_proj.weight", 1, 2, {D_Q_IN, D_C}}, {"attn.c_proj.bias", 1, 1, {D_C}},
    {"mlp.c_fc.weight", 1, 2, {D_C_IN, D_H}}, {"mlp.c_fc.bias", 1, 1, {D_H}},
    {"mlp.c_proj.weight", 1, 2, {D_H_IN, D_C}}, {"mlp.c_proj.bias", 1, 1, {D_C}},
    /* Llama / Qwen3 (Linear weights [out, in]) */
    {"embed_tokens.weight", 0, 2, {D_KEEP, D_C}}, {"model.norm.weight", 0, 1, {D_C_FINAL}},
    {"input_layernorm.weight", 1, 1, {D_C}}, {"post_attention_layernorm.weight", 1, 1, {D_C}},
    {"self_attn.q_proj.weight", 1, 2, {D_Q, D_C_IN}}, {"self_attn.q_proj.bias", 1, 1, {D_Q}},
    {"self_attn.k_proj.weight", 1, 2, {D_KV, D_C_IN}}, {"self_attn.k_proj.bias", 1, 1, {D_KV}},
    {"self_attn.v_proj.weight", 1, 2, {D_KV, D_C_IN}}, {"self_attn.v_proj.bias", 1, 1, {D_KV}},
    {"self_attn.o_proj.weight", 1, 2, {D_C, D_Q_IN}}, {"self_attn.o_proj.bias", 1, 1, {D_C}},
    {"self_attn.q_norm.weight", 1, 1, {D_KEEP}}, {"self_attn.k_norm.weight", 1, 1, {D_KEEP}},
    {"mlp.gate_proj.weight", 1, 2, {D_H, D_C_IN}}, {"mlp.up_proj.weight", 1, 2, {D_H, D_C_IN}},
    {"mlp.gate_proj.bias", 1, 1, {D_H}}, {"mlp.up_proj.bias", 1, 1, {D_H}},
    {"mlp.down_proj.weight", 1, 2, {D_C, D_H_IN}}, {"mlp.down_proj.bias", 1, 1, {D_C}},
};

static int ends_with(const char *s, const char *suf) {
    size_t n = strlen(s), k = strlen(suf);
    return n >= k && !strcmp(s + n - k, suf);
}

static const widen_rule *rule_of(const char *name, const char *rest) {
    for (size_t i = 0; i < sizeof RULES / sizeof *RULES; i++) {
        const widen_rule *r = &RULES[i];
        if (r->layer ? (rest && !strcmp(rest, r->name)) : (!rest && ends_with(name, r->name))) return r;
    }
    return NULL;
}

/* The sizes and unit maps of one grow: source and target of every widened dimension. map*[i] is
 * the source unit of target unit i; cnt*[s] how many target units copy source unit s. */
typedef struct {
    int64_t Cs, Ct, Hs, Ht, hd, NHs, NHt, NKVs, NKVt;
    int32_t *mapC, *cntC, *mapH, *cntH, *mapQ, *cntQ, *mapKV; /* mapQ/cntQ/mapKV: heads */
    double noise;
} widen;

static int64_t dim_size(const widen *w, int kind, int target) {
    switch (kind) {
    case D_C: case D_C_IN: case D_C_FINAL: return target ? w->Ct : w->Cs;
    case D_H: case D_H_IN: return target ? w->Ht : w->Hs;
    case D_Q: case D_Q_IN: return (target ? w->NHt : w->NHs) * w->hd;
    case D_KV: return (target ? w->NKVt : w->NKVs) * w->hd;
    case D_QKV: return 3 * (target ? w->NHt : w->NHs) * w->hd;
    }
    return -1;
}

/* target index i of a dimension of this kind -> source index; *div *= the copy count an input dim divides by */
static int64_t dim_src(const widen *w, int kind, int64_t i, double *div) {
    int64_t s;
    switch (kind) {
    case D_C: return w->mapC[i];
    case D_C_IN: case D_C_FINAL: s = w->mapC[i]; *div *= w->cntC[s]; return s;
    case D_H: return w->mapH[i];
    case D_H_IN: s = w->mapH[i]; *div *= w->cntH[s]; return s;
    case D_Q: return (int64_t)w->mapQ[i / w->hd] * w->hd + i % w->hd;
    case D_Q_IN: s = w->mapQ[i / w->hd]; *div *= w->cntQ[s]; return s * w->hd + i % w->hd;
    case D_KV: return (int64_t)w->mapKV[i / w->hd] * w->hd + i % w->hd;
    case D_QKV: {
        int64_t qt = w->NHt * w->hd, part = i / qt, a = i % qt;
        return part * w->NHs * w->hd + (int64_t)w->mapQ[a / w->hd] * w->hd + a % w->hd;
    }
    }
    return i;
}

/* a standard normal draw (Box-Muller over two splitmix uniforms in (0, 1]) */
static double gauss(uint64_t *s) {
    double u1 = ((double)(splitmix(s) >> 11) + 1.0) / 9007199254740992.0, u2 = (double)(splitmix(s) >> 11) / 9007199254740992.0;
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

static int producing(int kind) { return kind != D_KEEP && kind != D_C_IN && kind != D_H_IN && kind != D_Q_IN && kind != D_C_FINAL; }

/* One target tensor [orow, ocol] from source values sv [rows, cols] (HF layout; a vector is one
 * row, k0 = D_KEEP): every element copies its source element, divided by the copy count along an
 * input dimension; with noise, the weights of a new unit of a matrix (a target index past the
 * source size along a producing dimension) get a relative Gaussian perturbation (Net2Net's
 * symmetry breaking; not function-preserving). */
static void widen_tensor(const widen *w, int k0, int k1, const float *sv, int64_t rows, int64_t cols, float *b, int64_t orow,
                         int64_t ocol, uint64_t *rng) {
    int matrix = k0 != D_KEEP || rows > 1;
    for (int64_t i = 0; i < orow; i++) {
        double d0 = 1;
        int64_t si = dim_src(w, k0, i, &d0);
        int new0 = matrix && producing(k0) && i >= rows;
        for (int64_t j = 0; j < ocol; j++) {
            double div = d0;
            int64_t sj = dim_src(w, k1, j, &div);
            int new1 = matrix && producing(k1) && (k1 == D_QKV ? j % (w->NHt * w->hd) >= w->NHs * w->hd : j >= cols);
            float v = sv[si * cols + sj];
            v = div == 1 ? v : (float)(v / div);
            if (w->noise > 0 && (new0 || new1)) v = (float)(v * (1.0 + w->noise * gauss(rng)));
            b[i * ocol + j] = v;
        }
    }
}

/* hyp.grow(src.safetensors, out.safetensors, {L_s, L_t, H_s, H_t, depth = "identity"|"stack", seed,
 *   [C_s, C_t, NH_s, NH_t, NKV_s, NKV_t, noise]}) -> rc, message, {tensors = n, new_layers = n, new_units = n} */
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
    lua_getfield(L, 3, "C_s"), lua_getfield(L, 3, "C_t"), lua_getfield(L, 3, "NH_s"), lua_getfield(L, 3, "NH_t");
    lua_getfield(L, 3, "NKV_s"), lua_getfield(L, 3, "NKV_t"), lua_getfield(L, 3, "noise");
    widen w = {.Cs = luaL_optinteger(L, -7, 0), .Ct = luaL_optinteger(L, -6, 0), .NHs = luaL_optinteger(L, -5, 1),
               .NHt = luaL_optinteger(L, -4, 1), .NKVs = luaL_optinteger(L, -3, 1), .NKVt = luaL_optinteger(L, -2, 1),
               .noise = luaL_optnumber(L, -1, 0.0), .Hs = Hs, .Ht = Ht};
    lua_pop(L, 7);
    hyp_err e = {{0}};
    int rc = 0;
    if (Ls < 1 || Lt < Ls || Hs < 1 || Ht < 1 || Lt > 100000 || Ht > ((int64_t)1 << 31) || Hs > ((int64_t)1 << 31))
        rc = hyp_fail(&e, HYP_EINPUT, "grow: layers %d -> %d and MLP width %lld -> %lld: layers only grow, the width must stay >= 1", Ls,
                      Lt, (long long)Hs, (long long)Ht);
    /* d_model and heads (0 = the caller did not say: kept) */
    int wide = w.Ct != w.Cs;
    if (!rc && (w.Cs < 0 || w.Ct < w.Cs || w.Ct > ((int64_t)1 << 24) || w.NHs < 1 || w.NHt < w.NHs || w.NKVs < 1 || w.NKVt < w.NKVs ||
                (w.Cs > 0 && (w.Cs % w.NHs || w.Ct % w.NHt || w.Cs / w.NHs != w.Ct / w.NHt || w.NHs % w.NKVs || w.NHt % w.NKVt ||
                              w.NHs / w.NKVs != w.NHt / w.NKVt)) ||
                (wide && Ht < Hs) || !(w.noise >= 0 && w.noise <= 1)))
        rc = hyp_fail(&e, HYP_EINPUT, "grow: d_model %lld -> %lld, heads %lld -> %lld, kv heads %lld -> %lld, MLP %lld -> %lld, noise %g: "
                      "d_model and heads only grow, with the head size and the query heads per kv head unchanged, and no MLP pruning with it",
                      (long long)w.Cs, (long long)w.Ct, (long long)w.NHs, (long long)w.NHt, (long long)w.NKVs, (long long)w.NKVt,
                      (long long)Hs, (long long)Ht, w.noise);
    w.hd = w.Cs > 0 ? w.Cs / w.NHs : 1;
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
    int64_t nC = w.Cs > 0 ? w.Ct : 1, nCs = w.Cs > 0 ? w.Cs : 1;
    w.mapC = rc ? NULL : malloc(sizeof(int32_t) * (size_t)nC), w.cntC = rc ? NULL : calloc((size_t)nCs, sizeof(int32_t));
    w.mapQ = rc ? NULL : malloc(sizeof(int32_t) * (size_t)w.NHt), w.cntQ = rc ? NULL : calloc((size_t)w.NHs, sizeof(int32_t));
    w.mapKV = rc ? NULL : malloc(sizeof(int32_t) * (size_t)w.NKVt);
    if (!rc && (!ts || !names || !bufs || !map || !cnt || !w.mapC || !w.cntC || !w.mapQ || !w.cntQ || !w.mapKV))
        rc = hyp_fail(&e, HYP_EFAIL, "out of memory");
    /* d_model and heads: target unit i copies i mod source (every unit the same number of times
     * when the target is a multiple: a LayerNorm/RMSNorm then sees the same mean and variance);
     * kv head j copies j mod NKV_s, which is the kv head of its query heads' sources */
    for (int64_t i = 0; !rc && i < nC; i++) w.mapC[i] = (int32_t)(i % nCs), w.cntC[i % nCs]++;
    for (int64_t h = 0; !rc && h < w.NHt; h++) w.mapQ[h] = (int32_t)(h % w.NHs), w.cntQ[h % w.NHs]++;
    for (int64_t h = 0; !rc && h < w.NKVt; h++) w.mapKV[h] = (int32_t)(h % w.NKVs);
    w.mapH = map, w.cntH = cnt;
    int k = 0;
    long long new_units = 0;
    for (int i = 0; !rc && i < ns; i++) { /* non-layer tensors: as they are, or widened along d_model */
        const hyp_st_tensor *t = hyp_st_get(f, i);
        char pre[32];
        int l;
        const char *rest;
        if (split_layer(t->name, pre, sizeof pre, &l, &rest)) continue;
        const widen_rule *r = wide ? rule_of(t->name, NULL) : NULL;
        if (wide && (!r || r->nd != t->ndim)) {
            rc = hyp_fail(&e, HYP_EINPUT, "%s: gen grow does not know how to widen tensor '%s' — widen d_model of GPT-2 or Llama exports only", src, t->name);
            break;
        }
        if (!r) {
            ts[k++] = *t;
            continue;
        }
        int64_t rows = t->ndim == 2 ? t->shape[0] : 1, cols = t->ndim == 2 ? t->shape[1] : t->shape[0];
        int k0 = r->nd == 2 ? r->k[0] : D_KEEP, k1 = r->nd == 2 ? r->k[1] : r->k[0];
        if ((k0 != D_KEEP && rows != dim_size(&w, k0, 0)) || (k1 != D_KEEP && cols != dim_size(&w, k1, 0))) {
            rc = hyp_fail(&e, HYP_EINPUT, "%s: '%s' has shape [%lld, %lld], not the d_model %lld the plan says — give an export of the source trainer's checkpoint",
                          src, t->name, (long long)rows, (long long)cols, (long long)w.Cs);
            break;
        }
        int64_t orow = k0 == D_KEEP ? rows : dim_size(&w, k0, 1), ocol = k1 == D_KEEP ? cols : dim_size(&w, k1, 1);
        float *sv = malloc(sizeof(float) * (size_t)(rows * cols)), *b = malloc(sizeof(float) * (size_t)(orow * ocol));
        if (!sv || !b || (rc = hyp_st_to_f32(f, t, sv, &e))) {
            free(sv), free(b);
            if (!rc) rc = hyp_fail(&e, HYP_EFAIL, "out of memory");
            break;
        }
        uint64_t st = seed * 0x100000001B3ull + 0x5bd1e995ull * (uint64_t)(i + 1);
        widen_tensor(&w, k0, k1, sv, rows, cols, b, orow, ocol, &st);
        free(sv);
        hyp_st_tensor o = *t;
        if (t->ndim == 2) o.shape[0] = orow, o.shape[1] = ocol;
        else o.shape[0] = ocol;
        o.data = b;
        bufs[k] = b;
        ts[k++] = o;
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
            const widen_rule *r = rule_of(t->name, rest);
            if (wide && (!r || r->nd != t->ndim)) {
                rc = hyp_fail(&e, HYP_EINPUT, "%s: gen grow does not know how to widen tensor '%s' — widen d_model of GPT-2 or Llama exports only", src, t->name);
                break;
            }
            if (r && ((!wide && Ht == Hs) || r->nd != t->ndim)) r = NULL; /* nothing widens: a plain copy */
            hyp_st_tensor o = *t;
            int64_t rows = t->ndim == 2 ? t->shape[0] : 1, cols = t->ndim == 2 ? t->shape[1] : t->shape[0];
            int k0 = r && r->nd == 2 ? r->k[0] : D_KEEP, k1 = !r ? D_KEEP : r->nd == 2 ? r->k[1] : r->k[0];
            if (!wide) { /* the MLP width only: every other dimension is kept */
                if (k0 != D_H && k0 != D_H_IN) k0 = D_KEEP;
                if (k1 != D_H && k1 != D_H_IN) k1 = D_KEEP;
            }
            if ((k0 != D_KEEP && rows != dim_size(&w, k0, 0)) || (k1 != D_KEEP && cols != dim_size(&w, k1, 0))) {
                rc = hyp_fail(&e, HYP_EINPUT, "%s: '%s' has shape [%lld, %lld], not the widths (MLP %lld, d_model %lld, %lld heads) the plan says — give an export of the source trainer's checkpoint",
                              src, t->name, (long long)rows, (long long)cols, (long long)Hs, (long long)w.Cs, (long long)w.NHs);
                break;
            }
            int64_t orow = k0 == D_KEEP ? rows : dim_size(&w, k0, 1), ocol = k1 == D_KEEP ? cols : dim_size(&w, k1, 1);
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
            uint64_t nst = seed * 0x100000001B3ull + 0x5bd1e995ull * (uint64_t)(lt * ns + i + 1) + 0x9E37ull;
            widen_tensor(&w, k0, k1, sv, rows, cols, b, orow, ocol, &nst);
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
    free(w.mapC), free(w.cntC), free(w.mapQ), free(w.cntQ), free(w.mapKV);
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
