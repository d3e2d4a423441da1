/* gen_main.c — entry point of `gen`: starts Lua 5.4, installs the `hyp` host module, and hands
 * the command line to generator/lua/cli.lua, whose return value is the exit status.
 * Exit status: 0 success, 1 internal/environment failure, 2 bad input (with a clear message).
 * Lua code is found under $HYPERION_HOME (the source tree) or the tree this binary was built
 * from; templates, kernels and specs are found the same way. */
#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gen_host.h"

void gen_push_null(lua_State *L) { lua_pushlightuserdata(L, NULL); }

static int traceback(lua_State *L) {
    const char *msg = lua_tostring(L, 1);
    if (!msg) msg = "(error object is not a string)";
    luaL_traceback(L, L, msg, 1);
    return 1;
}

int main(int argc, char **argv) {
    const char *home = getenv("HYPERION_HOME");
    if (!home || !*home) home = HYP_SOURCE_DIR;
    lua_State *L = luaL_newstate();
    if (!L) {
        fprintf(stderr, "gen: cannot start Lua (out of memory)\n");
        return 1;
    }
    luaL_openlibs(L);

    lua_newtable(L);
    lua_pushcfunction(L, gen_lua_load_yaml);
    lua_setfield(L, -2, "load_yaml");
    lua_pushcfunction(L, gen_lua_json_encode);
    lua_setfield(L, -2, "json_encode");
    lua_pushcfunction(L, gen_lua_json_decode);
    lua_setfield(L, -2, "json_decode");
    gen_push_null(L);
    lua_setfield(L, -2, "null");
    gen_register_fs(L, -1);
    gen_register_extra(L, -1);
    gen_register_post(L, -1);
    gen_register_fit(L, -1);
    gen_register_lottery(L, -1);
    gen_register_grow(L, -1);
    gen_register_progressive(L, -1);
    lua_pushstring(L, home);
    lua_setfield(L, -2, "home");
    lua_pushstring(L, HYP_VERSION);
    lua_setfield(L, -2, "version");
    lua_pushstring(L, HYP_TRAIN_BIN);
    lua_setfield(L, -2, "train_bin");
    lua_pushboolean(L, HYP_HAVE_NVRTC);
    lua_setfield(L, -2, "have_nvrtc");
    lua_setglobal(L, "hyp");

    /* package.path = HOME/generator/lua/?.lua */
    lua_getglobal(L, "package");
    lua_pushfstring(L, "%s/generator/lua/?.lua", home);
    lua_setfield(L, -2, "path");
    lua_pushstring(L, "");
    lua_setfield(L, -2, "cpath");
    lua_pop(L, 1);

    lua_pushcfunction(L, traceback);
    int tb = lua_gettop(L);
    char script[4096];
    snprintf(script, sizeof script, "%s/generator/lua/cli.lua", home);
    if (luaL_loadfile(L, script) != LUA_OK) {
        fprintf(stderr, "gen: cannot load %s: %s — set HYPERION_HOME to the Hyperion source tree\n",
                script, lua_tostring(L, -1));
        lua_close(L);
        return 1;
    }
    lua_createtable(L, argc, 0);
    for (int i = 1; i < argc; i++) {
        lua_pushstring(L, argv[i]);
        lua_rawseti(L, -2, i);
    }
    int status = 1;
    if (lua_pcall(L, 1, 1, tb) != LUA_OK) {
        fprintf(stderr, "gen: internal error: %s\n", lua_tostring(L, -1));
        status = 1;
    } else {
        status = lua_isinteger(L, -1) ? (int)lua_tointeger(L, -1) : 0;
    }
    fflush(stdout);
    lua_close(L);
    return status;
}
