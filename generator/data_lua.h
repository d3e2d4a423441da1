/* data_lua.h — reads the data-preparation settings table of `gen data` (data_cli.lua's `pipe`:
 * doc_sep, filter, dedup, mix, curriculum) into the C options of runtime/data/docs.h. */
#ifndef GEN_DATA_LUA_H
#define GEN_DATA_LUA_H

#include <lua.h>

#include "data.h"
#include "docs.h"

/* Fills s (and o->doc_sep, o->stages, o->input_names from the array `names`) from the table at
 * idx; *weights and *names are malloc'd (the caller frees them). Strings stay owned by the Lua
 * table, which must stay on the stack while o is used. Returns 0, or -1 with a message in err (a
 * bug in data_cli.lua, not user input). */
int gen_data_pipe(lua_State *L, int idx, hyp_data_opts *o, hyp_stages *s, double **weights,
                  const char ***names, int n_inputs, char *err, size_t cap);

#endif
