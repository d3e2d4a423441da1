/* yaml_lua.c — libyaml → Lua tables that remember where every node came from.
 *
 * The only YAML parser of the project: Lua never parses YAML. A mapping or sequence becomes a
 * plain Lua table whose metatable carries source positions:
 *     __file  the path,      __pos  the node's position,
 *     __kpos  {key = position} for a mapping's values, __ipos {i = position} for a sequence's,
 * a position being the integer line * 2^20 + column (1-based).
 * Scalars: plain true/false → boolean, plain integers → integer, plain floats (and .inf/.nan) →
 * number, plain null/~/empty → hyp.null (a light userdata), everything else (and every quoted
 * scalar) → string.
 *
 * Hostile input never crashes and never recurses without bound: anchors, aliases and tags are
 * refused (there is no legitimate use for them in specs, and aliases are the "billion laughs"
 * vector), nesting is capped, file size is capped, duplicate keys are errors, and libyaml's own
 * errors (invalid UTF-8, bad indentation, binary garbage) come back as "file:line:col: what — fix".
 * This module must never raise a Lua error while libyaml objects are live: failures are returned
 * as (nil, message).
 */
#include <errno.h>
#include <lauxlib.h>
#include <lua.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

#include "fsio.h"
#include "gen_host.h"

#define YL_MAX_DEPTH 64
#define YL_MAX_BYTES (4u << 20)
#define YL_MAX_NODES 200000

typedef struct {
    lua_State *L;
    yaml_parser_t parser;
    const char *file;
    int nodes;
    char err[768];
} yl_ctx;

static int yl_errorf(yl_ctx *c, const yaml_mark_t *m, const char *what, const char *fix) {
    snprintf(c->err, sizeof c->err, "%s:%zu:%zu: %s — %s", c->file, m ? m->line + 1 : 1,
             m ? m->column + 1 : 1, what, fix);
    return -1;
}

static int yl_next(yl_ctx *c, yaml_event_t *ev) {
    if (!yaml_parser_parse(&c->parser, ev)) {
        char what[400];
        const char *prob = c->parser.problem ? c->parser.problem : "unreadable YAML";
        if (c->parser.context)
            snprintf(what, sizeof what, "invalid YAML: %s %s", c->parser.context, prob);
        else
            snprintf(what, sizeof what, "invalid YAML: %s", prob);
        return yl_errorf(c, &c->parser.problem_mark, what,
                         "fix the syntax at this position (files must be UTF-8 YAML)");
    }
    return 0;
}

/* Pushes a position as one integer, line * 2^20 + col (a table per value would double the
 * parse time); util.lua's U.where decodes it. */
static void yl_push_mark(lua_State *L, const yaml_mark_t *m) {
    lua_pushinteger(L, ((lua_Integer)m->line + 1) * 1048576 + (lua_Integer)m->column + 1);
}

static int yl_match_int(const char *s, long long *out) {
    const char *p = s;
    if (*p == '+' || *p == '-') p++;
    if (!*p) return 0;
    for (const char *q = p; *q; q++)
        if (*q < '0' || *q > '9') return 0;
    errno = 0;
    char *end;
    long long v = strtoll(s, &end, 10);
    if (errno || *end) return 0;
    *out = v;
    return 1;
}

static int yl_match_float(const char *s, double *out) {
    if (!strcmp(s, ".inf") || !strcmp(s, "+.inf") || !strcmp(s, ".Inf")) return *out = INFINITY, 1;
    if (!strcmp(s, "-.inf") || !strcmp(s, "-.Inf")) return *out = -INFINITY, 1;
    if (!strcmp(s, ".nan") || !strcmp(s, ".NaN")) return *out = NAN, 1;
    const char *p = s;
    int digits = 0, dot = 0, exp = 0;
    if (*p == '+' || *p == '-') p++;
    for (; *p; p++) {
        if (*p >= '0' && *p <= '9') digits++;
        else if (*p == '.' && !dot && !exp) dot = 1;
        else if ((*p == 'e' || *p == 'E') && digits && !exp) {
            exp = 1;
            if (p[1] == '+' || p[1] == '-') p++;
            if (!(p[1] >= '0' && p[1] <= '9')) return 0;
        } else return 0;
    }
    if (!digits || (!dot && !exp)) return 0;
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (*end) return 0;
    *out = v;
    return 1;
}

static int yl_push_scalar(yl_ctx *c, const yaml_event_t *ev) {
    lua_State *L = c->L;
    const char *s = (const char *)ev->data.scalar.value;
    size_t n = ev->data.scalar.length;
    if (strlen(s) != n)
        return yl_errorf(c, &ev->start_mark, "scalar contains a NUL byte",
                         "remove the binary data from this value");
    if (ev->data.scalar.style != YAML_PLAIN_SCALAR_STYLE) {
        lua_pushlstring(L, s, n);
        return 0;
    }
    long long iv;
    double dv;
    if (!strcmp(s, "true")) lua_pushboolean(L, 1);
    else if (!strcmp(s, "false")) lua_pushboolean(L, 0);
    else if (n == 0 || !strcmp(s, "null") || !strcmp(s, "~")) gen_push_null(L);
    else if (yl_match_int(s, &iv)) lua_pushinteger(L, (lua_Integer)iv);
    else if (yl_match_float(s, &dv)) lua_pushnumber(L, dv);
    else lua_pushlstring(L, s, n);
    return 0;
}

static int yl_parse_node(yl_ctx *c, yaml_event_t *ev, int depth);

/* Creates the node table and its metatable; leaves [table, meta] on the stack. */
static void yl_new_container(yl_ctx *c, const yaml_mark_t *m, const char *posfield) {
    lua_State *L = c->L;
    lua_newtable(L);
    lua_createtable(L, 0, 3);
    lua_pushstring(L, c->file);
    lua_setfield(L, -2, "__file");
    yl_push_mark(L, m);
    lua_setfield(L, -2, "__pos");
    lua_newtable(L);
    lua_setfield(L, -2, posfield);
}

static int yl_parse_sequence(yl_ctx *c, const yaml_event_t *start, int depth) {
    lua_State *L = c->L;
    yl_new_container(c, &start->start_mark, "__ipos");
    lua_Integer i = 0;
    for (;;) {
        yaml_event_t ev;
        if (yl_next(c, &ev)) return -1;
        if (ev.type == YAML_SEQUENCE_END_EVENT) {
            yaml_event_delete(&ev);
            break;
        }
        yaml_mark_t m = ev.start_mark;
        if (yl_parse_node(c, &ev, depth + 1)) return -1; /* consumes ev */
        i++;
        lua_rawseti(L, -3, i);
        lua_getfield(L, -1, "__ipos");
        yl_push_mark(L, &m);
        lua_rawseti(L, -2, i);
        lua_pop(L, 1);
    }
    lua_setmetatable(L, -2);
    return 0;
}

static int yl_parse_mapping(yl_ctx *c, const yaml_event_t *start, int depth) {
    lua_State *L = c->L;
    yl_new_container(c, &start->start_mark, "__kpos");
    for (;;) {
        yaml_event_t kev;
        if (yl_next(c, &kev)) return -1;
        if (kev.type == YAML_MAPPING_END_EVENT) {
            yaml_event_delete(&kev);
            break;
        }
        if (kev.type != YAML_SCALAR_EVENT) {
            yaml_mark_t m = kev.start_mark;
            yaml_event_delete(&kev);
            return yl_errorf(c, &m, "mapping key is not a plain string",
                             "use a simple `name: value` key");
        }
        yaml_mark_t kmark = kev.start_mark;
        if (kev.data.scalar.anchor || kev.data.scalar.tag) {
            yaml_event_delete(&kev);
            return yl_errorf(c, &kmark, "anchors and tags are not allowed",
                             "write the value out in full");
        }
        lua_pushlstring(L, (const char *)kev.data.scalar.value, kev.data.scalar.length);
        yaml_event_delete(&kev);
        /* duplicate key? */
        lua_pushvalue(L, -1);
        lua_rawget(L, -4);
        int dup = !lua_isnil(L, -1);
        lua_pop(L, 1);
        if (dup) {
            char what[300];
            snprintf(what, sizeof what, "duplicate key '%s'", lua_tostring(L, -1));
            lua_pop(L, 1);
            return yl_errorf(c, &kmark, what, "keep one of the two entries");
        }
        yaml_event_t vev;
        if (yl_next(c, &vev)) return -1;
        yaml_mark_t vmark = vev.start_mark;
        if (yl_parse_node(c, &vev, depth + 1)) return -1;
        /* stack: table meta key value */
        lua_pushvalue(L, -2);
        lua_insert(L, -2);
        lua_rawset(L, -5);
        /* stack: table meta key */
        lua_getfield(L, -2, "__kpos");
        lua_insert(L, -2);
        yl_push_mark(L, &vmark);
        lua_rawset(L, -3);
        lua_pop(L, 1);
    }
    lua_setmetatable(L, -2);
    return 0;
}

/* Consumes *ev (deletes it) and pushes the node's value. */
static int yl_parse_node(yl_ctx *c, yaml_event_t *ev, int depth) {
    yaml_event_t e = *ev;
    int rc = 0;
    if (++c->nodes > YL_MAX_NODES) {
        rc = yl_errorf(c, &e.start_mark, "too many YAML nodes", "split or shrink the file");
    } else if (depth > YL_MAX_DEPTH) {
        rc = yl_errorf(c, &e.start_mark, "nesting deeper than 64 levels",
                       "flatten the structure; spec files need only a few levels");
    } else if (!lua_checkstack(c->L, 8)) {
        rc = yl_errorf(c, &e.start_mark, "out of Lua stack", "flatten the structure");
    } else if (e.type == YAML_ALIAS_EVENT) {
        rc = yl_errorf(c, &e.start_mark, "YAML aliases (*name) are not allowed",
                       "write the value out in full");
    } else if (e.type == YAML_SCALAR_EVENT) {
        if (e.data.scalar.anchor || e.data.scalar.tag)
            rc = yl_errorf(c, &e.start_mark, "YAML anchors (&name) and tags (!tag) are not allowed",
                           "write the value out in full, without & or !");
        else rc = yl_push_scalar(c, &e);
    } else if (e.type == YAML_SEQUENCE_START_EVENT) {
        if (e.data.sequence_start.anchor || e.data.sequence_start.tag)
            rc = yl_errorf(c, &e.start_mark, "YAML anchors (&name) and tags (!tag) are not allowed",
                           "write the value out in full, without & or !");
        else rc = yl_parse_sequence(c, &e, depth);
    } else if (e.type == YAML_MAPPING_START_EVENT) {
        if (e.data.mapping_start.anchor || e.data.mapping_start.tag)
            rc = yl_errorf(c, &e.start_mark, "YAML anchors (&name) and tags (!tag) are not allowed",
                           "write the value out in full, without & or !");
        else rc = yl_parse_mapping(c, &e, depth);
    } else {
        rc = yl_errorf(c, &e.start_mark, "unexpected YAML event", "check the file's structure");
    }
    yaml_event_delete(ev);
    return rc;
}

static int yl_parse_document(yl_ctx *c) {
    yaml_event_t ev;
    if (yl_next(c, &ev)) return -1;
    if (ev.type != YAML_STREAM_START_EVENT) {
        yaml_event_delete(&ev);
        return yl_errorf(c, NULL, "not a YAML stream", "check the file");
    }
    yaml_event_delete(&ev);
    if (yl_next(c, &ev)) return -1;
    if (ev.type == YAML_STREAM_END_EVENT) {
        yaml_event_delete(&ev);
        return yl_errorf(c, NULL, "empty file",
                         "write the YAML content (see specs/SCHEMA.md), or remove the file");
    }
    yaml_event_delete(&ev); /* DOCUMENT_START */
    if (yl_next(c, &ev)) return -1;
    if (yl_parse_node(c, &ev, 0)) return -1;
    if (yl_next(c, &ev)) return -1; /* DOCUMENT_END */
    yaml_event_delete(&ev);
    if (yl_next(c, &ev)) return -1;
    int more = ev.type == YAML_DOCUMENT_START_EVENT;
    yaml_mark_t m = ev.start_mark;
    yaml_event_delete(&ev);
    if (more)
        return yl_errorf(c, &m, "more than one YAML document in the file",
                         "remove the `---` separator and keep one document");
    return 0;
}

/* hyp.load_yaml(path) -> value | nil, "file:line:col: what — fix" */
int gen_lua_load_yaml(lua_State *L) {
    const char *path = luaL_checkstring(L, 1);
    char *buf;
    size_t size;
    hyp_err e;
    if (hyp_fs_read_small(path, YL_MAX_BYTES, &buf, &size, &e) != HYP_OK) {
        /* e.msg is "PATH: what — fix"; the loader's errors say "PATH:1:1: what — fix" */
        size_t n = strlen(path);
        const char *what = !strncmp(e.msg, path, n) && e.msg[n] == ':' ? e.msg + n + 1 : e.msg;
        while (*what == ' ') what++;
        lua_pushnil(L);
        lua_pushfstring(L, "%s:1:1: %s", path, what);
        return 2;
    }
    int n = gen_yaml_parse_buffer(L, path, (const unsigned char *)buf, size);
    free(buf);
    return n;
}

/* Parses buf as the YAML file `file`; pushes the value (returns 1) or nil + message (returns 2).
 * The entry point of the fuzz target (tests/fuzz/fuzz_yaml.c). */
int gen_yaml_parse_buffer(lua_State *L, const char *file, const unsigned char *buf, unsigned long size) {
    yl_ctx c;
    memset(&c, 0, sizeof c);
    c.L = L;
    c.file = file;
    int top = lua_gettop(L);
    yaml_parser_initialize(&c.parser);
    yaml_parser_set_input_string(&c.parser, buf, size);
    int rc = yl_parse_document(&c);
    yaml_parser_delete(&c.parser);
    if (rc) {
        lua_settop(L, top);
        lua_pushnil(L);
        lua_pushstring(L, c.err);
        return 2;
    }
    return 1;
}
