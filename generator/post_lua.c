/* post_lua.c — host functions for post-training data (`gen data --chat` / `--pref`): the chat
 * template renderer and the preference-example writer live in runtime/data/chat.c. Never: logic of
 * its own beyond moving arguments across the Lua boundary. */
#include <lauxlib.h>
#include <lua.h>

#include "chat.h"
#include "gen_host.h"

/* hyp.chat_prepare(jsonl, template|nil, outdir, val_fraction, overwrite, tokenizer|nil) -> rc, message */
static int l_chat_prepare(lua_State *L) {
    const char *in = luaL_checkstring(L, 1), *tpl = luaL_optstring(L, 2, NULL), *out = luaL_checkstring(L, 3);
    hyp_err e = {{0}};
    int rc = hyp_chat_prepare(in, tpl, luaL_optstring(L, 6, NULL), out, luaL_optnumber(L, 4, 0.1), lua_toboolean(L, 5), &e);
    lua_pushinteger(L, rc);
    if (rc) lua_pushstring(L, e.msg);
    else lua_pushfstring(L, "gen: wrote chat shards with loss masks to %s", out);
    return 2;
}

/* hyp.pref_prepare(jsonl, template|nil, outdir, val_fraction, overwrite, tokenizer|nil) -> rc, message */
static int l_pref_prepare(lua_State *L) {
    const char *in = luaL_checkstring(L, 1), *tpl = luaL_optstring(L, 2, NULL), *out = luaL_checkstring(L, 3);
    hyp_err e = {{0}};
    int rc = hyp_pref_prepare(in, tpl, luaL_optstring(L, 6, NULL), out, luaL_optnumber(L, 4, 0.1), lua_toboolean(L, 5), &e);
    lua_pushinteger(L, rc);
    if (rc) lua_pushstring(L, e.msg);
    else lua_pushfstring(L, "gen: wrote preference examples to %s", out);
    return 2;
}

void gen_register_post(lua_State *L, int idx) {
    idx = lua_absindex(L, idx);
    lua_pushcfunction(L, l_chat_prepare);
    lua_setfield(L, idx, "chat_prepare");
    lua_pushcfunction(L, l_pref_prepare);
    lua_setfield(L, idx, "pref_prepare");
}
