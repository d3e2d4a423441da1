/* gen_host.h — the narrow C↔Lua boundary of `gen`: the `hyp` module's C functions.
 * Tables in, tables out; C does what Lua cannot (YAML parsing, files, JSON, NVRTC, data shards). */
#ifndef GEN_HOST_H
#define GEN_HOST_H
#include <lua.h>

void gen_push_null(lua_State *L);          /* pushes hyp.null */
int gen_lua_load_yaml(lua_State *L);       /* yaml_lua.c */
int gen_yaml_parse_buffer(lua_State *L, const char *file, const unsigned char *buf, unsigned long size);
int gen_lua_json_encode(lua_State *L);     /* json_lua.c */
int gen_lua_json_decode(lua_State *L);     /* json_lua.c */
void gen_register_fs(lua_State *L, int idx);   /* fs_lua.c: adds file functions to table at idx */
void gen_register_extra(lua_State *L, int idx); /* ext_lua.c: data prep, NVRTC, ... */
void gen_register_post(lua_State *L, int idx);  /* post_lua.c: chat / preference data (gen data --chat, --pref) */
void gen_register_tokenizer(lua_State *L, int idx); /* tok_lua.c: gen tokenizer (v2125) */
void gen_register_grow(lua_State *L, int idx);    /* grow_lua.c: gen grow (v2151, v2153) */
void gen_register_progressive(lua_State *L, int idx); /* progressive_lua.c: gen progressive (v2150) */
void gen_register_lottery(lua_State *L, int idx); /* lottery_lua.c: gen lottery (v2155) */
void gen_register_fit(lua_State *L, int idx);   /* fit_lua.c: gen scaling fit (v2146/v2147) */
#endif
