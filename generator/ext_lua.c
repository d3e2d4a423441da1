/* ext_lua.c — host functions that reach into the runtime library: data preparation for
 * `gen data` (the shard writer lives in runtime/data.c, shared with the trainer's loader) and
 * `gen export` (Hugging Face model directories, runtime/ckpt/hf.c) and `gen consolidate` (sharded
 * checkpoints merged into one file set, runtime/ckpt/ckpt_consolidate.c). */
#include <lauxlib.h>
#include <lua.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt_consolidate.h"
#include "data.h"
#include "data_lua.h"
#include "hf.h"
#include "plan.h"
#include "gen_host.h"
#include "nvrtc.h" /* hyp.nvrtc_compile (issue #4) */

/* hyp.data_prepare({inputs...}, outdir, val_fraction, overwrite, tokenizer[, pipe]) -> rc, message;
 * pipe: the stage settings of data_cli.lua (data_lua.h) */
static int l_data_prepare(lua_State *L) {
    luaL_checktype(L, 1, LUA_TTABLE);
    const char *outdir = luaL_checkstring(L, 2);
    int n = (int)luaL_len(L, 1);
    const char **inputs = calloc((size_t)n + 1, sizeof *inputs);
    if (!inputs) return luaL_error(L, "out of memory");
    for (int i = 0; i < n; i++) {
        lua_rawgeti(L, 1, i + 1);
        inputs[i] = lua_tostring(L, -1); /* kept alive by the table */
        lua_pop(L, 1);
    }
    hyp_data_opts o;
    hyp_data_opts_default(&o);
    o.val_fraction = luaL_optnumber(L, 3, 0.05);
    o.overwrite = lua_toboolean(L, 4);
    o.tokenizer = luaL_optstring(L, 5, NULL); /* v2125: byte | tokenizer.json | tiktoken ranks */
    hyp_stages stages;
    double *weights = NULL;
    const char **names = NULL;
    char perr[256];
    if (lua_istable(L, 6) &&
        gen_data_pipe(L, 6, &o, &stages, &weights, &names, n, perr, sizeof perr) != 0) {
        free(inputs);
        free(weights);
        free(names);
        return luaL_error(L, "gen data: %s", perr);
    }
    hyp_err e = {{0}};
    int rc = hyp_data_prepare(inputs, n, outdir, &o, &e);
    free(inputs);
    free(weights);
    free(names);
    lua_pushinteger(L, rc);
    if (rc) lua_pushstring(L, e.msg);
    else lua_pushfstring(L, "gen: wrote shards to %s", outdir);
    return 2;
}

/* hyp.hf_export(ckpt, plan_path, outdir) -> rc, message: `gen export` (runtime/ckpt/hf.c) */
static int l_hf_export(lua_State *L) {
    const char *ckpt = luaL_checkstring(L, 1), *plan_path = luaL_checkstring(L, 2), *out = luaL_checkstring(L, 3);
    hyp_err e = {{0}};
    plan_t p;
    memset(&p, 0, sizeof p);
    int rc = plan_load(plan_path, &p, &e);
    if (!rc) rc = hyp_hf_export(ckpt, &p, out, &e);
    lua_pushinteger(L, rc);
    if (rc) lua_pushfstring(L, "gen export: %s", e.msg);
    else lua_pushfstring(L, "gen: exported %s (%s) to %s", ckpt, p.model_name, out);
    plan_free(&p);
    return 2;
}

/* hyp.ckpt_consolidate(ckpt, plan_path, outdir) -> rc, message: `gen consolidate` (v2181) */
static int l_ckpt_consolidate(lua_State *L) {
    const char *ckpt = luaL_checkstring(L, 1), *plan_path = luaL_checkstring(L, 2), *out = luaL_checkstring(L, 3);
    hyp_err e = {{0}};
    plan_t p;
    memset(&p, 0, sizeof p);
    char what[512] = "";
    int rc = plan_load(plan_path, &p, &e);
    if (!rc) rc = hyp_ckpt_consolidate(ckpt, &p, out, what, sizeof what, &e);
    lua_pushinteger(L, rc);
    if (rc) lua_pushfstring(L, "gen consolidate: %s", e.msg);
    else lua_pushfstring(L, "gen: consolidated %s (%s) into %s", ckpt, what, out);
    plan_free(&p);
    return 2;
}

void gen_register_extra(lua_State *L, int idx) {
    idx = lua_absindex(L, idx);
    lua_pushcfunction(L, l_data_prepare);
    lua_setfield(L, idx, "data_prepare");
    lua_pushcfunction(L, l_hf_export);
    lua_setfield(L, idx, "hf_export");
    lua_pushcfunction(L, l_ckpt_consolidate);
    lua_setfield(L, idx, "ckpt_consolidate");
    gen_register_nvrtc(L, idx); /* NVRTC compile + cache (nvrtc.c); no-op without NVRTC */
    gen_register_tokenizer(L, idx); /* gen tokenizer (tok_lua.c) */
}
