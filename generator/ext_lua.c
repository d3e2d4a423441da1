/* ext_lua.c — host functions that reach into the runtime library: data preparation for
 * `gen data` (the shard writer lives in runtime/data.c, shared with the trainer's loader). */
#include <lauxlib.h>
#include <lua.h>
#include <stdlib.h>

#include "data.h"
#include "gen_host.h"
#include "nvrtc.h" /* hyp.nvrtc_compile (issue #4) */

/* hyp.data_prepare({inputs...}, outdir, val_fraction, overwrite) -> rc, message */
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
    hyp_err e = {{0}};
    int rc = hyp_data_prepare(inputs, n, outdir, &o, &e);
    free(inputs);
    lua_pushinteger(L, rc);
    if (rc) lua_pushstring(L, e.msg);
    else lua_pushfstring(L, "gen: wrote shards to %s", outdir);
    return 2;
}

void gen_register_extra(lua_State *L, int idx) {
    idx = lua_absindex(L, idx);
    lua_pushcfunction(L, l_data_prepare);
    lua_setfield(L, idx, "data_prepare");
    gen_register_nvrtc(L, idx); /* NVRTC compile + cache (nvrtc.c); no-op without NVRTC */
}
