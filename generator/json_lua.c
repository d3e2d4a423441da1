/* json_lua.c — Lua values ⇄ JSON through cJSON (the one JSON library of the project).
 * Encoding is deterministic: object keys are sorted, so goldens and hashes are stable.
 * A table is an array when it is empty with metatable field __json == "array", or when its keys
 * are exactly 1..n; otherwise an object (non-string keys are converted with tostring).
 * hyp.null encodes to null. Integers stay integers; non-finite numbers are refused. */
#include <cjson/cJSON.h>
#include <lauxlib.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "gen_host.h"

static int is_null(lua_State *L, int idx) {
    return lua_islightuserdata(L, idx) && lua_touserdata(L, idx) == NULL;
}

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static cJSON *to_json(lua_State *L, int idx, int depth, const char **err);

static int table_is_array(lua_State *L, int idx, lua_Integer *n_out) {
    lua_Integer n = 0, count = 0;
    lua_pushnil(L);
    while (lua_next(L, idx)) {
        lua_pop(L, 1);
        count++;
        if (lua_type(L, -1) == LUA_TNUMBER && lua_isinteger(L, -1)) {
            lua_Integer k = lua_tointeger(L, -1);
            if (k > n) n = k;
        } else {
            n = -1;
        }
    }
    *n_out = count;
    if (count == 0) {
        int arr = 0;
        if (lua_getmetatable(L, idx)) {
            lua_getfield(L, -1, "__json");
            arr = lua_isstring(L, -1) && !strcmp(lua_tostring(L, -1), "array");
            lua_pop(L, 2);
        }
        return arr;
    }
    return n == count;
}

static cJSON *to_json(lua_State *L, int idx, int depth, const char **err) {
    idx = lua_absindex(L, idx);
    if (depth > 200) {
        *err = "nesting too deep (cycle?)";
        return NULL;
    }
    switch (lua_type(L, idx)) {
    case LUA_TNIL: return cJSON_CreateNull();
    case LUA_TBOOLEAN: return cJSON_CreateBool(lua_toboolean(L, idx));
    case LUA_TNUMBER: {
        if (lua_isinteger(L, idx)) {
            char buf[32];
            snprintf(buf, sizeof buf, "%lld", (long long)lua_tointeger(L, idx));
            return cJSON_CreateRaw(buf);
        }
        double d = lua_tonumber(L, idx);
        if (!isfinite(d)) {
            *err = "non-finite number";
            return NULL;
        }
        char buf[40];
        snprintf(buf, sizeof buf, "%.17g", d);
        /* keep it recognisably a float */
        if (!strpbrk(buf, ".eE")) strcat(buf, ".0");
        return cJSON_CreateRaw(buf);
    }
    case LUA_TSTRING: return cJSON_CreateString(lua_tostring(L, idx));
    case LUA_TLIGHTUSERDATA:
        if (is_null(L, idx)) return cJSON_CreateNull();
        break;
    case LUA_TTABLE: {
        lua_Integer n;
        luaL_checkstack(L, 8, "json");
        if (table_is_array(L, idx, &n)) {
            cJSON *arr = cJSON_CreateArray();
            for (lua_Integer i = 1; i <= n; i++) {
                lua_rawgeti(L, idx, i);
                cJSON *v = to_json(L, -1, depth + 1, err);
                lua_pop(L, 1);
                if (!v) {
                    cJSON_Delete(arr);
                    return NULL;
                }
                cJSON_AddItemToArray(arr, v);
            }
            return arr;
        }
        /* object with sorted keys */
        const char **keys = malloc(sizeof(char *) * (size_t)(n ? n : 1));
        int nk = 0;
        lua_newtable(L); /* anchor for converted key strings */
        int anchor = lua_gettop(L);
        lua_pushnil(L);
        while (lua_next(L, idx)) {
            lua_pop(L, 1);
            lua_pushvalue(L, -1);
            const char *ks = luaL_tolstring(L, -1, NULL);
            lua_rawseti(L, anchor, nk + 1);
            lua_pop(L, 1);
            lua_rawgeti(L, anchor, nk + 1);
            keys[nk++] = lua_tostring(L, -1);
            (void)ks;
            lua_pop(L, 1);
        }
        qsort(keys, (size_t)nk, sizeof *keys, cmp_str);
        cJSON *obj = cJSON_CreateObject();
        for (int i = 0; i < nk; i++) {
            /* look the key up: try string key, then integer key */
            lua_pushstring(L, keys[i]);
            lua_rawget(L, idx);
            if (lua_isnil(L, -1)) {
                lua_pop(L, 1);
                char *end;
                long long k = strtoll(keys[i], &end, 10);
                lua_rawgeti(L, idx, (lua_Integer)k);
            }
            cJSON *v = to_json(L, -1, depth + 1, err);
            lua_pop(L, 1);
            if (!v) {
                cJSON_Delete(obj);
                free(keys);
                lua_pop(L, 1);
                return NULL;
            }
            cJSON_AddItemToObject(obj, keys[i], v);
        }
        free(keys);
        lua_pop(L, 1);
        return obj;
    }
    default: break;
    }
    *err = "value of a type JSON cannot hold";
    return NULL;
}

/* hyp.json_encode(value [, pretty]) -> string | nil, err */
int gen_lua_json_encode(lua_State *L) {
    int pretty = lua_toboolean(L, 2);
    const char *err = NULL;
    lua_settop(L, 1);
    cJSON *j = to_json(L, 1, 0, &err);
    if (!j) {
        lua_pushnil(L);
        lua_pushstring(L, err ? err : "cannot encode");
        return 2;
    }
    char *s = pretty ? cJSON_Print(j) : cJSON_PrintUnformatted(j);
    cJSON_Delete(j);
    if (!s) return luaL_error(L, "out of memory encoding JSON");
    lua_pushstring(L, s);
    free(s);
    return 1;
}

static void from_json(lua_State *L, const cJSON *j) {
    luaL_checkstack(L, 4, "json");
    if (cJSON_IsNull(j)) gen_push_null(L);
    else if (cJSON_IsBool(j)) lua_pushboolean(L, cJSON_IsTrue(j));
    else if (cJSON_IsNumber(j)) {
        double d = j->valuedouble;
        if (d == floor(d) && fabs(d) < 9007199254740992.0) lua_pushinteger(L, (lua_Integer)d);
        else lua_pushnumber(L, d);
    } else if (cJSON_IsString(j)) lua_pushstring(L, j->valuestring);
    else if (cJSON_IsArray(j)) {
        lua_newtable(L);
        int i = 1;
        for (const cJSON *c = j->child; c; c = c->next) {
            from_json(L, c);
            lua_rawseti(L, -2, i++);
        }
    } else {
        lua_newtable(L);
        for (const cJSON *c = j->child; c; c = c->next) {
            from_json(L, c);
            lua_setfield(L, -2, c->string);
        }
    }
}

/* hyp.json_decode(string) -> value | nil, err */
int gen_lua_json_decode(lua_State *L) {
    size_t n;
    const char *s = luaL_checklstring(L, 1, &n);
    cJSON *j = cJSON_ParseWithLength(s, n);
    if (!j) {
        lua_pushnil(L);
        lua_pushstring(L, "invalid JSON");
        return 2;
    }
    from_json(L, j);
    cJSON_Delete(j);
    return 1;
}
