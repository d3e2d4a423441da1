/* fs_lua.c — the file operations `gen` needs, for Lua: read, atomic write, directories, copy.
 * Output is staged and committed with rename(2), so a failed run leaves no partial directory:
 * Lua builds everything in a staging directory and commits it last (see cli.lua). */
#define _GNU_SOURCE /* syncfs */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <lauxlib.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "fsio.h"
#include "gen_host.h"

static int push_err(lua_State *L, const hyp_err *e) {
    lua_pushnil(L);
    lua_pushstring(L, e->msg);
    return 2;
}

static int push_fail(lua_State *L, const char *what, const char *path) {
    lua_pushnil(L);
    lua_pushfstring(L, "%s: %s: %s", path, what, strerror(errno));
    return 2;
}

static int l_read_file(lua_State *L) {
    const char *path = luaL_checkstring(L, 1);
    FILE *f = fopen(path, "rb");
    if (!f) return push_fail(L, "cannot open", path);
    luaL_Buffer b;
    luaL_buffinit(L, &b);
    char tmp[65536];
    size_t n;
    while ((n = fread(tmp, 1, sizeof tmp, f)) > 0) luaL_addlstring(&b, tmp, n);
    int bad = ferror(f);
    fclose(f);
    if (bad) return push_fail(L, "cannot read", path);
    luaL_pushresult(&b);
    return 1;
}

/* hyp.write_file(path, data [, mode [, nosync]]) — temp file + fsync + rename; nosync skips the
 * fsync for files inside a staging directory that hyp.sync_fs flushes once before it is renamed */
static int l_write_file(lua_State *L) {
    const char *path = luaL_checkstring(L, 1);
    size_t n;
    const char *data = luaL_checklstring(L, 2, &n);
    int mode = (int)luaL_optinteger(L, 3, 0644);
    int nosync = lua_toboolean(L, 4);
    char tmp[PATH_MAX];
    snprintf(tmp, sizeof tmp, "%s.tmp-%d", path, (int)getpid());
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, mode);
    if (fd < 0) return push_fail(L, "cannot create", tmp);
    if (hyp_fs_write_all(fd, data, n) || (!nosync && fsync(fd))) {
        close(fd);
        unlink(tmp);
        return push_fail(L, "cannot write", tmp);
    }
    close(fd);
    if (rename(tmp, path)) {
        unlink(tmp);
        return push_fail(L, "cannot rename into place", path);
    }
    lua_pushboolean(L, 1);
    return 1;
}

/* hyp.mkdir_p(path) -> true | nil, message */
static int l_mkdir_p(lua_State *L) {
    const char *path = luaL_checkstring(L, 1);
    hyp_err e;
    if (hyp_fs_mkdirs(path, &e) != HYP_OK) return push_err(L, &e);
    lua_pushboolean(L, 1);
    return 1;
}

/* hyp.mkdtemp(prefix) -> path  (prefix's parent directory is created) */
static int l_mkdtemp(lua_State *L) {
    const char *prefix = luaL_checkstring(L, 1);
    char buf[PATH_MAX];
    snprintf(buf, sizeof buf, "%s", prefix);
    char *slash = strrchr(buf, '/');
    if (slash && slash != buf) {
        *slash = 0;
        hyp_err e;
        if (hyp_fs_mkdirs(buf, &e) != HYP_OK) return push_err(L, &e);
        *slash = '/';
    }
    snprintf(buf, sizeof buf, "%s.tmp-XXXXXX", prefix);
    if (!mkdtemp(buf)) return push_fail(L, "cannot create a staging directory", prefix);
    chmod(buf, 0755);
    lua_pushstring(L, buf);
    return 1;
}

static int rm_rf(const char *path) {
    struct stat st;
    if (lstat(path, &st)) return errno == ENOENT ? 0 : -1;
    if (S_ISDIR(st.st_mode)) {
        DIR *d = opendir(path);
        if (!d) return -1;
        struct dirent *de;
        while ((de = readdir(d))) {
            if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..")) continue;
            char sub[PATH_MAX];
            snprintf(sub, sizeof sub, "%s/%s", path, de->d_name);
            rm_rf(sub);
        }
        closedir(d);
        return rmdir(path);
    }
    return unlink(path);
}

static int l_rm_rf(lua_State *L) {
    const char *path = luaL_checkstring(L, 1);
    if (rm_rf(path)) return push_fail(L, "cannot remove", path);
    lua_pushboolean(L, 1);
    return 1;
}

/* hyp.replace_dir(staged, final): final := staged atomically (an old final is removed after). */
static int l_replace_dir(lua_State *L) {
    const char *staged = luaL_checkstring(L, 1);
    const char *final = luaL_checkstring(L, 2);
    struct stat st;
    char old[PATH_MAX];
    old[0] = 0;
    if (!lstat(final, &st)) {
        snprintf(old, sizeof old, "%s.old-%d", final, (int)getpid());
        if (rename(final, old)) return push_fail(L, "cannot move the previous output aside", final);
    }
    if (rename(staged, final)) {
        if (old[0]) rename(old, final);
        return push_fail(L, "cannot move the new output into place", final);
    }
    if (old[0]) rm_rf(old);
    lua_pushboolean(L, 1);
    return 1;
}

static int l_stat(lua_State *L) {
    const char *path = luaL_checkstring(L, 1);
    struct stat st;
    if (stat(path, &st)) {
        lua_pushnil(L);
        return 1;
    }
    lua_pushstring(L, S_ISDIR(st.st_mode) ? "dir" : S_ISREG(st.st_mode) ? "file" : "other");
    lua_pushinteger(L, (lua_Integer)st.st_size);
    return 2;
}

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* hyp.list_dir(path) -> sorted names (no . and ..) | nil, err */
static int l_list_dir(lua_State *L) {
    const char *path = luaL_checkstring(L, 1);
    DIR *d = opendir(path);
    if (!d) return push_fail(L, "cannot list", path);
    char **names = NULL;
    size_t n = 0, cap = 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..")) continue;
        if (n == cap) {
            cap = cap ? cap * 2 : 64;
            char **nn = realloc(names, cap * sizeof *names);
            if (!nn) break;
            names = nn;
        }
        names[n++] = strdup(de->d_name);
    }
    closedir(d);
    qsort(names, n, sizeof *names, cmp_str);
    lua_createtable(L, (int)n, 0);
    for (size_t i = 0; i < n; i++) {
        lua_pushstring(L, names[i]);
        lua_rawseti(L, -2, (lua_Integer)i + 1);
        free(names[i]);
    }
    free(names);
    return 1;
}

/* hyp.copy_file(src, dst [, mode [, nosync]]) */
static int l_copy_file(lua_State *L) {
    const char *src = luaL_checkstring(L, 1);
    const char *dst = luaL_checkstring(L, 2);
    int mode = (int)luaL_optinteger(L, 3, 0644);
    int nosync = lua_toboolean(L, 4);
    int in = open(src, O_RDONLY);
    if (in < 0) return push_fail(L, "cannot open", src);
    int out = open(dst, O_WRONLY | O_CREAT | O_TRUNC, mode);
    if (out < 0) {
        close(in);
        return push_fail(L, "cannot create", dst);
    }
    char buf[1 << 16];
    ssize_t r;
    int bad = 0;
    while ((r = read(in, buf, sizeof buf)) > 0)
        if (hyp_fs_write_all(out, buf, (size_t)r)) {
            bad = 1;
            break;
        }
    if (r < 0) bad = 1;
    close(in);
    if (!nosync && fsync(out)) bad = 1;
    close(out);
    if (bad) return push_fail(L, "cannot copy to", dst);
    lua_pushboolean(L, 1);
    return 1;
}

/* hyp.sync_fs(path): flushes the filesystem holding path (syncfs), then fsyncs path itself */
static int l_sync_fs(lua_State *L) {
    const char *path = luaL_checkstring(L, 1);
    int fd = open(path, O_RDONLY);
    if (fd < 0) return push_fail(L, "cannot open", path);
    int bad = syncfs(fd) || fsync(fd);
    close(fd);
    if (bad) return push_fail(L, "cannot sync", path);
    lua_pushboolean(L, 1);
    return 1;
}

static int l_clock(lua_State *L) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    lua_pushnumber(L, (double)ts.tv_sec + ts.tv_nsec * 1e-9);
    return 1;
}

static int l_realpath(lua_State *L) {
    char buf[PATH_MAX];
    if (!realpath(luaL_checkstring(L, 1), buf)) return push_fail(L, "cannot resolve", lua_tostring(L, 1));
    lua_pushstring(L, buf);
    return 1;
}

void gen_register_fs(lua_State *L, int idx) {
    static const luaL_Reg fns[] = {
        {"read_file", l_read_file}, {"write_file", l_write_file}, {"mkdir_p", l_mkdir_p},
        {"mkdtemp", l_mkdtemp},     {"rm_rf", l_rm_rf},           {"replace_dir", l_replace_dir},
        {"stat", l_stat},           {"list_dir", l_list_dir},     {"copy_file", l_copy_file},
        {"clock", l_clock},         {"sync_fs", l_sync_fs},         {"realpath", l_realpath},     {NULL, NULL}};
    idx = lua_absindex(L, idx);
    for (const luaL_Reg *r = fns; r->name; r++) {
        lua_pushcfunction(L, r->func);
        lua_setfield(L, idx, r->name);
    }
}
