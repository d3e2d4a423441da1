/* ext_lua.c — host functions that reach into the runtime library or the CUDA toolkit:
 * data preparation (`gen data`) and, when built with it, NVRTC. */
#include <lauxlib.h>
#include <lua.h>

#include "gen_host.h"

void gen_register_extra(lua_State *L, int idx) { (void)L; (void)idx; }
