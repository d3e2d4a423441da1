/* fuzz_yaml.c — libFuzzer target for the YAML loader (generator/yaml_lua.c): any byte string
 * must give either a Lua value or a clean "file:line:col: what — fix" message, never a crash,
 * a hang, a leak or unbounded recursion. Built and run by tests/gen/test_fuzz_yaml.sh. */
#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "gen_host.h"

void gen_push_null(lua_State *L) { lua_pushlightuserdata(L, NULL); }

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    lua_State *L = luaL_newstate();
    if (!L) return 0;
    int n = gen_yaml_parse_buffer(L, "fuzz.yaml", data, size);
    if (n == 2) {
        const char *msg = lua_tostring(L, -1);
        /* every error names the file and a position */
        if (!msg || strncmp(msg, "fuzz.yaml:", 10) != 0) abort();
    }
    lua_close(L);
    return 0;
}
