/* tok_lua.c — host functions behind `gen tokenizer train|encode|decode|info` (v2125): thin
 * wrappers over runtime/tok/tokenizer.h. They return (rc, message) like the other host functions
 * and never exit; ids go straight to stdout from C (a corpus has millions of them). */
#include <lauxlib.h>
#include <lua.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gen_host.h"
#include "tokenizer.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* hyp.tok_train({files...}, vocab, outdir) -> rc, message */
static int l_tok_train(lua_State *L) {
    luaL_checktype(L, 1, LUA_TTABLE);
    int vocab = (int)luaL_checkinteger(L, 2);
    const char *outdir = luaL_checkstring(L, 3);
    int n = (int)luaL_len(L, 1);
    const char **files = calloc((size_t)n + 1, sizeof *files);
    if (!files) return luaL_error(L, "out of memory");
    for (int i = 0; i < n; i++) {
        lua_rawgeti(L, 1, i + 1);
        files[i] = lua_tostring(L, -1);
        lua_pop(L, 1);
    }
    hyp_err e = {{0}};
    int merges = 0;
    double t0 = now_s();
    int rc = hyp_tok_train(files, n, vocab, outdir, &merges, &e);
    free(files);
    lua_pushinteger(L, rc);
    if (rc) lua_pushstring(L, e.msg);
    else lua_pushfstring(L, "gen: wrote %s/tokenizer.json (%d merges) in %f s", outdir, merges,
                         now_s() - t0);
    return 2;
}

/* hyp.tok_encode(tokenizer, file_or_nil) -> rc, message: ids one per line on stdout */
static int l_tok_encode(lua_State *L) {
    const char *spec = luaL_checkstring(L, 1);
    const char *file = luaL_optstring(L, 2, NULL);
    hyp_err e = {{0}};
    hyp_tok *t = hyp_tok_open(spec, &e);
    if (!t) {
        lua_pushinteger(L, HYP_EINPUT);
        lua_pushstring(L, e.msg);
        return 2;
    }
    uint8_t *buf = NULL;
    size_t n = 0;
    int rc = HYP_OK;
    if (file) rc = hyp_tok_read_file(file, &buf, &n, &e);
    else {
        size_t cap = 1 << 16;
        buf = malloc(cap);
        size_t r;
        while (buf && (r = fread(buf + n, 1, cap - n, stdin)) > 0) {
            n += r;
            if (n == cap) {
                uint8_t *nb = realloc(buf, cap *= 2);
                if (!nb) free(buf);
                buf = nb;
            }
        }
        if (!buf) rc = hyp_fail(&e, HYP_EFAIL, "<stdin>: out of memory");
    }
    int32_t *ids = NULL;
    size_t len = 0, cap = 0;
    if (!rc) rc = hyp_tok_encode(t, buf, n, &ids, &len, &cap, &e);
    if (!rc) {
        char line[16];
        for (size_t i = 0; i < len; i++) {
            int k = snprintf(line, sizeof line, "%d\n", ids[i]);
            fwrite(line, 1, (size_t)k, stdout);
        }
        fflush(stdout);
    }
    free(ids), free(buf);
    hyp_tok_free(t);
    lua_pushinteger(L, rc);
    if (rc) lua_pushstring(L, e.msg);
    else lua_pushnil(L);
    return 2;
}

/* hyp.tok_decode(tokenizer, file_or_nil) -> rc, message: ids (whitespace-separated) -> text */
static int l_tok_decode(lua_State *L) {
    const char *spec = luaL_checkstring(L, 1);
    const char *file = luaL_optstring(L, 2, NULL);
    hyp_err e = {{0}};
    hyp_tok *t = hyp_tok_open(spec, &e);
    if (!t) {
        lua_pushinteger(L, HYP_EINPUT);
        lua_pushstring(L, e.msg);
        return 2;
    }
    FILE *f = file ? fopen(file, "rb") : stdin;
    int rc = HYP_OK;
    int32_t *ids = NULL;
    size_t n = 0, cap = 0;
    if (!f) rc = hyp_fail(&e, HYP_EINPUT, "%s: cannot open — check the path", file);
    long v;
    while (!rc && fscanf(f, "%ld", &v) == 1) {
        if (n == cap) {
            cap = cap ? cap * 2 : 4096;
            int32_t *p = realloc(ids, cap * sizeof *p);
            if (!p) { rc = hyp_fail(&e, HYP_EFAIL, "out of memory"); break; }
            ids = p;
        }
        if (v < 0 || v >= hyp_tok_vocab_size(t)) {
            rc = hyp_fail(&e, HYP_EINPUT, "%s: id %ld at position %zu is outside the vocabulary 0..%d — decode with the tokenizer that made the ids",
                          file ? file : "<stdin>", v, n, hyp_tok_vocab_size(t) - 1);
            break;
        }
        ids[n++] = (int32_t)v;
    }
    if (!rc && f && !feof(f)) rc = hyp_fail(&e, HYP_EINPUT, "%s: not a list of integer ids at id %zu — give ids one per line (as gen tokenizer encode prints)",
                                       file ? file : "<stdin>", n);
    if (f && file) fclose(f);
    char *txt = NULL;
    size_t tn = 0;
    if (!rc) rc = hyp_tok_decode(t, ids, n, &txt, &tn, &e);
    if (!rc) fwrite(txt, 1, tn, stdout), fflush(stdout);
    free(txt), free(ids);
    hyp_tok_free(t);
    lua_pushinteger(L, rc);
    if (rc) lua_pushstring(L, e.msg);
    else lua_pushnil(L);
    return 2;
}

/* hyp.tok_info(tokenizer) -> rc, {kind, vocab, eot, hash} | message */
static int l_tok_info(lua_State *L) {
    hyp_err e = {{0}};
    hyp_tok *t = hyp_tok_open(luaL_checkstring(L, 1), &e);
    if (!t) {
        lua_pushinteger(L, HYP_EINPUT);
        lua_pushstring(L, e.msg);
        return 2;
    }
    lua_pushinteger(L, 0);
    lua_newtable(L);
    lua_pushstring(L, hyp_tok_kind(t));
    lua_setfield(L, -2, "kind");
    lua_pushinteger(L, hyp_tok_vocab_size(t));
    lua_setfield(L, -2, "vocab");
    lua_pushinteger(L, hyp_tok_eot(t));
    lua_setfield(L, -2, "eot");
    lua_pushstring(L, hyp_tok_hash(t));
    lua_setfield(L, -2, "hash");
    hyp_tok_free(t);
    return 2;
}

void gen_register_tokenizer(lua_State *L, int idx) {
    idx = lua_absindex(L, idx);
    lua_pushcfunction(L, l_tok_train);
    lua_setfield(L, idx, "tok_train");
    lua_pushcfunction(L, l_tok_encode);
    lua_setfield(L, idx, "tok_encode");
    lua_pushcfunction(L, l_tok_decode);
    lua_setfield(L, idx, "tok_decode");
    lua_pushcfunction(L, l_tok_info);
    lua_setfield(L, idx, "tok_info");
}
