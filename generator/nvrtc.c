/* nvrtc.c — compiles rendered CUDA kernels to cubin + PTX with NVRTC, in parallel, through a
 * content-addressed on-disk cache. Works without a GPU (NVRTC only needs the toolkit).
 *
 * Lua API (installed by gen_register_nvrtc):
 *   hyp.nvrtc_version() -> "13.0"
 *   hyp.nvrtc_compile(jobs, opts) -> results
 *     jobs    {{name = "layernorm", source = "..."}, ...}
 *     opts    {arch = "sm_90", options = {...}, include_dirs = {...}, cache_dir = path | nil,
 *              workers = n | nil (default: the CPUs this process may run on), version = "0.1.0"}
 *     results[i] = {ok, cached, corrupt, cubin, ptx, log, key, seconds, options = {...}, error}
 *   `log` is NVRTC's program log: with --ptxas-options=-v it holds ptxas's resource report
 *   (registers, spills, shared memory) that render.lua parses.
 *
 * Parallelism: NVRTC 13 serializes nvrtcCompileProgram across the threads of one process
 * (measured on this project's 2-core machine: 8 compiles take 1.14 s on one thread, 1.06 s on
 * two threads, 0.51 s in two processes), so each compile runs in a forked worker process, at
 * most `workers` at a time; a worker writes its result to a private file that the parent reads
 * back and checks. A worker never touches Lua.
 *
 * Cache key: the compile caches' one rule (runtime/core/ckey.h) over the tag "hyperion nvrtc
 * cache 1", the generator version, the NVRTC version, the arch, every option except
 * --include-path (paths do not change the output; the headers' contents are keyed instead), and
 * the source with its include closure. Includes found nowhere are NVRTC built-ins, covered by
 * the NVRTC version.
 *
 * Entries: CACHE/nvrtc-1/KK/KEY.bin, written to a temp file in the same directory, fsync'ed and
 * renamed into place, so a reader sees a whole entry or none; two processes writing one key race
 * harmlessly (same content, the last rename wins). Every entry ends with an XXH3-128 checksum of
 * all bytes before it; an entry that fails it (truncated, flipped bits) is reported, removed and
 * rebuilt. There are no lock files: a killed gen leaves at most an unreferenced temp file.
 */
#define _GNU_SOURCE /* sched_getaffinity / CPU_COUNT */
#include "nvrtc.h"
#include "ckey.h"
#include "fsio.h"

#include <lauxlib.h>
#include <lua.h>

#if HYP_HAVE_NVRTC

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <nvrtc.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#ifdef __linux__
#include <sys/prctl.h>
#endif
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>
#include <dlfcn.h>

/* NVRTC is loaded with dlopen on first use, not linked: its shared library costs ~11 ms of
 * start-up, which every `gen` run (list, audit, cpu targets) would otherwise pay. */
static struct {
    void *lib;
    nvrtcResult (*CreateProgram)(nvrtcProgram *, const char *, const char *, int, const char *const *,
                                 const char *const *);
    nvrtcResult (*CompileProgram)(nvrtcProgram, int, const char *const *);
    nvrtcResult (*DestroyProgram)(nvrtcProgram *);
    nvrtcResult (*GetProgramLogSize)(nvrtcProgram, size_t *);
    nvrtcResult (*GetProgramLog)(nvrtcProgram, char *);
    nvrtcResult (*GetCUBINSize)(nvrtcProgram, size_t *);
    nvrtcResult (*GetCUBIN)(nvrtcProgram, char *);
    nvrtcResult (*GetPTXSize)(nvrtcProgram, size_t *);
    nvrtcResult (*GetPTX)(nvrtcProgram, char *);
    const char *(*GetErrorString)(nvrtcResult);
    nvrtcResult (*Version)(int *, int *);
} NV;

/* Loads NVRTC once; returns NULL or a message saying what is missing. */
static const char *nvrtc_load(void) {
    if (NV.lib) return NULL;
    void *h = dlopen(HYP_NVRTC_LIB, RTLD_NOW | RTLD_LOCAL);
    if (!h) h = dlopen("libnvrtc.so." HYP_NVRTC_MAJOR, RTLD_NOW | RTLD_LOCAL);
    if (!h) return "NVRTC (" HYP_NVRTC_LIB ") cannot be loaded — install the CUDA toolkit (or set CUDAToolkit_ROOT and rebuild), or generate for --target cpu or sim";
#define NV_SYM(field, name)                                                                        \
    if (!(*(void **)&NV.field = dlsym(h, name))) {                                                 \
        dlclose(h);                                                                                \
        return "NVRTC lacks " name " — use the CUDA toolkit gen was built with";                    \
    }
    NV_SYM(CreateProgram, "nvrtcCreateProgram") NV_SYM(CompileProgram, "nvrtcCompileProgram")
    NV_SYM(DestroyProgram, "nvrtcDestroyProgram") NV_SYM(GetProgramLogSize, "nvrtcGetProgramLogSize")
    NV_SYM(GetProgramLog, "nvrtcGetProgramLog") NV_SYM(GetCUBINSize, "nvrtcGetCUBINSize")
    NV_SYM(GetCUBIN, "nvrtcGetCUBIN") NV_SYM(GetPTXSize, "nvrtcGetPTXSize") NV_SYM(GetPTX, "nvrtcGetPTX")
    NV_SYM(GetErrorString, "nvrtcGetErrorString") NV_SYM(Version, "nvrtcVersion")
#undef NV_SYM
    NV.lib = h;
    return NULL;
}
#define nvrtcCreateProgram NV.CreateProgram
#define nvrtcCompileProgram NV.CompileProgram
#define nvrtcDestroyProgram NV.DestroyProgram
#define nvrtcGetProgramLogSize NV.GetProgramLogSize
#define nvrtcGetProgramLog NV.GetProgramLog
#define nvrtcGetCUBINSize NV.GetCUBINSize
#define nvrtcGetCUBIN NV.GetCUBIN
#define nvrtcGetPTXSize NV.GetPTXSize
#define nvrtcGetPTX NV.GetPTX
#define nvrtcGetErrorString NV.GetErrorString
#define nvrtcVersion NV.Version

#define ENTRY_MAGIC "HYPNVRC1"
#define ENTRY_NSEC 4 /* cubin, ptx, log, meta */
#define ENTRY_HEAD (8 + 4 + 4 + 8 * ENTRY_NSEC)
#define ENTRY_SUM 16
#define CACHE_SUBDIR "nvrtc-1"
#define MAX_OPTS 64
#define MAX_INCDIRS 16

/* ------------------------------------------------------------------------------------------ */
/* Small helpers */

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}



/* ------------------------------------------------------------------------------------------ */
/* Entries: the cache's files, and the files workers hand their results back in. */

typedef struct {
    int status; /* 0 compiled, 1 compile error */
    char *sec[ENTRY_NSEC];
    size_t len[ENTRY_NSEC];
} entry_t;
enum { SEC_CUBIN, SEC_PTX, SEC_LOG, SEC_META };

static void entry_free(entry_t *e) {
    for (int i = 0; i < ENTRY_NSEC; i++) {
        free(e->sec[i]);
        e->sec[i] = NULL;
        e->len[i] = 0;
    }
}

static void put_u32(unsigned char *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (unsigned char)(v >> (8 * i));
}
static void put_u64(unsigned char *p, uint64_t v) {
    for (int i = 0; i < 8; i++) p[i] = (unsigned char)(v >> (8 * i));
}
static uint32_t get_u32(const unsigned char *p) {
    uint32_t v = 0;
    for (int i = 3; i >= 0; i--) v = v << 8 | p[i];
    return v;
}
static uint64_t get_u64(const unsigned char *p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = v << 8 | p[i];
    return v;
}

/* Writes an entry to `path` atomically (temp in the same directory, fsync, rename). */
static int entry_write(const char *path, const entry_t *e) {
    static unsigned counter;
    char tmp[PATH_MAX];
    if (snprintf(tmp, sizeof tmp, "%s.tmp-%d-%u", path, (int)getpid(), counter++) >= (int)sizeof tmp) {
        errno = ENAMETOOLONG;
        return -1;
    }
    unsigned char head[ENTRY_HEAD];
    memcpy(head, ENTRY_MAGIC, 8);
    put_u32(head + 8, (uint32_t)e->status);
    put_u32(head + 12, ENTRY_NSEC);
    for (int i = 0; i < ENTRY_NSEC; i++) put_u64(head + 16 + 8 * i, e->len[i]);
    XXH3_state_t *st = XXH3_createState();
    if (!st) return -1;
    XXH3_128bits_reset(st);
    XXH3_128bits_update(st, head, sizeof head);
    for (int i = 0; i < ENTRY_NSEC; i++)
        if (e->len[i]) XXH3_128bits_update(st, e->sec[i], e->len[i]);
    XXH128_canonical_t sum;
    XXH128_canonicalFromHash(&sum, XXH3_128bits_digest(st));
    XXH3_freeState(st);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) return -1;
    int bad = hyp_fs_write_all(fd, head, sizeof head);
    for (int i = 0; i < ENTRY_NSEC && !bad; i++)
        if (e->len[i]) bad = hyp_fs_write_all(fd, e->sec[i], e->len[i]);
    if (!bad) bad = hyp_fs_write_all(fd, sum.digest, sizeof sum.digest);
    if (!bad) bad = fsync(fd);
    if (close(fd)) bad = -1;
    if (!bad) bad = rename(tmp, path);
    if (bad) {
        int err = errno;
        unlink(tmp);
        errno = err;
    }
    return bad ? -1 : 0;
}

/* Reads and verifies an entry. 0 ok; -1 absent (ENOENT); -2 present but corrupt (why set). */
static int entry_read(const char *path, entry_t *e, const char **why) {
    memset(e, 0, sizeof *e);
    size_t n;
    char *raw;
    if (!hyp_fs_exists(path)) return -1;
    if (hyp_fs_read_small(path, SIZE_MAX, &raw, &n, NULL) != HYP_OK) return (*why = "unreadable", -2);
    unsigned char *p = (unsigned char *)raw;
    int rc = -2;
    *why = "too short";
    if (n < ENTRY_HEAD + ENTRY_SUM) goto out;
    *why = "bad magic";
    if (memcmp(p, ENTRY_MAGIC, 8) || get_u32(p + 12) != ENTRY_NSEC) goto out;
    uint64_t total = ENTRY_HEAD + ENTRY_SUM;
    for (int i = 0; i < ENTRY_NSEC; i++) {
        e->len[i] = (size_t)get_u64(p + 16 + 8 * i);
        total += e->len[i];
        if (e->len[i] > n) break;
    }
    *why = "size does not match its header (truncated?)";
    if (total != n) goto out;
    XXH128_canonical_t sum;
    XXH128_canonicalFromHash(&sum, XXH3_128bits(p, n - ENTRY_SUM));
    *why = "checksum mismatch";
    if (memcmp(sum.digest, p + n - ENTRY_SUM, ENTRY_SUM)) goto out;
    e->status = (int)get_u32(p + 8);
    size_t off = ENTRY_HEAD;
    for (int i = 0; i < ENTRY_NSEC; i++) {
        e->sec[i] = malloc(e->len[i] + 1);
        if (!e->sec[i]) {
            *why = "out of memory";
            entry_free(e);
            goto out;
        }
        memcpy(e->sec[i], p + off, e->len[i]);
        e->sec[i][e->len[i]] = 0;
        off += e->len[i];
    }
    rc = 0;
out:
    free(p);
    if (rc) {
        for (int i = 0; i < ENTRY_NSEC; i++) e->len[i] = 0;
    }
    return rc;
}

/* ------------------------------------------------------------------------------------------ */
/* One compile (in a worker process, or in-process when there is one worker). */

typedef struct {
    const char *name, *source;
    char key[33];
    char entry_path[PATH_MAX];
    entry_t res;
    int have;       /* res filled */
    int cached;     /* came from the cache */
    int corrupt;    /* a corrupt cache entry was found (and is being rebuilt) */
    char corrupt_why[96];
    char error[512]; /* internal failure (worker crashed, out of memory) */
    double seconds;
    pid_t pid;
    char result_path[PATH_MAX];
} job_t;

static char *dup_n(const char *p, size_t n) {
    char *q = malloc(n + 1);
    if (!q) return NULL;
    memcpy(q, p, n);
    q[n] = 0;
    return q;
}

static void compile_one(job_t *j, const char **opts, int nopts) {
    double t0 = now_s();
    entry_t *e = &j->res;
    memset(e, 0, sizeof *e);
    nvrtcProgram prog;
    char file[256];
    snprintf(file, sizeof file, "%s.cu", j->name);
    nvrtcResult r = nvrtcCreateProgram(&prog, j->source, file, 0, NULL, NULL);
    if (r != NVRTC_SUCCESS) {
        const char *m = nvrtcGetErrorString(r);
        e->status = 1;
        e->sec[SEC_LOG] = dup_n(m, strlen(m));
        e->len[SEC_LOG] = strlen(m);
    } else {
        r = nvrtcCompileProgram(prog, nopts, opts);
        size_t ln = 0;
        nvrtcGetProgramLogSize(prog, &ln);
        e->sec[SEC_LOG] = calloc(ln + 1, 1);
        if (e->sec[SEC_LOG] && ln) {
            nvrtcGetProgramLog(prog, e->sec[SEC_LOG]);
            e->len[SEC_LOG] = strlen(e->sec[SEC_LOG]);
        }
        if (r != NVRTC_SUCCESS) {
            e->status = 1;
            if (!e->len[SEC_LOG]) {
                const char *m = nvrtcGetErrorString(r);
                free(e->sec[SEC_LOG]);
                e->sec[SEC_LOG] = dup_n(m, strlen(m));
                e->len[SEC_LOG] = strlen(m);
            }
        } else {
            size_t cn = 0, pn = 0;
            if (nvrtcGetCUBINSize(prog, &cn) == NVRTC_SUCCESS && cn) {
                e->sec[SEC_CUBIN] = malloc(cn);
                if (e->sec[SEC_CUBIN] && nvrtcGetCUBIN(prog, e->sec[SEC_CUBIN]) == NVRTC_SUCCESS)
                    e->len[SEC_CUBIN] = cn;
            }
            if (nvrtcGetPTXSize(prog, &pn) == NVRTC_SUCCESS && pn) {
                e->sec[SEC_PTX] = malloc(pn);
                if (e->sec[SEC_PTX] && nvrtcGetPTX(prog, e->sec[SEC_PTX]) == NVRTC_SUCCESS)
                    e->len[SEC_PTX] = pn ? pn - 1 : 0; /* drop the terminating NUL */
            }
            e->status = 0;
            if (!e->len[SEC_CUBIN]) {
                e->status = 1;
                const char *m = "NVRTC produced no cubin (is the arch a real sm_XX, not compute_XX?)";
                free(e->sec[SEC_LOG]);
                e->sec[SEC_LOG] = dup_n(m, strlen(m));
                e->len[SEC_LOG] = strlen(m);
            }
        }
        nvrtcDestroyProgram(&prog);
    }
    j->seconds = now_s() - t0;
    char meta[64];
    int mn = snprintf(meta, sizeof meta, "seconds=%.6f\n", j->seconds);
    e->sec[SEC_META] = dup_n(meta, (size_t)mn);
    e->len[SEC_META] = (size_t)mn;
    j->have = 1;
}

static double meta_seconds(const entry_t *e) {
    const char *m = e->sec[SEC_META];
    const char *p = m ? strstr(m, "seconds=") : NULL;
    return p ? strtod(p + 8, NULL) : 0.0;
}

static int available_cpus(void) {
    cpu_set_t set;
    if (!sched_getaffinity(0, sizeof set, &set)) {
        int n = CPU_COUNT(&set);
        if (n > 0) return n;
    }
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

/* ------------------------------------------------------------------------------------------ */
/* Lua glue */

static int l_nvrtc_version(lua_State *L) {
    const char *why = nvrtc_load();
    if (why) return luaL_error(L, "%s", why);
    int maj = 0, min = 0;
    nvrtcVersion(&maj, &min);
    lua_pushfstring(L, "%d.%d", maj, min);
    return 1;
}

static const char *opt_string(lua_State *L, int t, const char *k) {
    lua_getfield(L, t, k);
    const char *s = lua_tostring(L, -1); /* kept alive by the opts table */
    lua_pop(L, 1);
    return s;
}

static int string_list(lua_State *L, int t, const char *k, const char **out, int max) {
    lua_getfield(L, t, k);
    int n = 0;
    if (lua_istable(L, -1)) {
        int len = (int)luaL_len(L, -1);
        for (int i = 1; i <= len && n < max; i++) {
            lua_rawgeti(L, -1, i);
            const char *s = lua_tostring(L, -1);
            lua_pop(L, 1);
            if (s) out[n++] = s;
        }
    }
    lua_pop(L, 1);
    return n;
}

static void set_lstr(lua_State *L, const char *k, const char *p, size_t n) {
    lua_pushlstring(L, p ? p : "", p ? n : 0);
    lua_setfield(L, -2, k);
}

/* Runs the jobs that need compiling, `workers` at a time (forked processes, or in-process). */
static void run_compiles(job_t **todo, int ntodo, int workers, const char **opts, int nopts,
                         const char *tmpdir) {
    if (workers <= 1 || ntodo <= 1 || !tmpdir) {
        for (int i = 0; i < ntodo; i++) compile_one(todo[i], opts, nopts);
        return;
    }
    fflush(NULL); /* nothing buffered may be written twice */
    int next = 0, running = 0;
    while (next < ntodo || running > 0) {
        while (running < workers && next < ntodo) {
            job_t *j = todo[next++];
            if (snprintf(j->result_path, sizeof j->result_path, "%s/%d.res", tmpdir, next) >=
                (int)sizeof j->result_path) { /* no room for the result's path: compile here */
                compile_one(j, opts, nopts);
                continue;
            }
            pid_t pid = fork();
            if (pid == 0) {
#ifdef __linux__
                prctl(PR_SET_PDEATHSIG, SIGKILL); /* a killed gen takes its workers along */
                if (getppid() == 1) _exit(4);
#endif
                compile_one(j, opts, nopts);
                _exit(entry_write(j->result_path, &j->res) ? 3 : 0);
            }
            if (pid < 0) { /* cannot fork: compile here instead */
                compile_one(j, opts, nopts);
                continue;
            }
            j->pid = pid;
            running++;
        }
        if (!running) break;
        int st;
        pid_t pid = waitpid(-1, &st, 0);
        if (pid < 0) {
            if (errno == EINTR) continue;
            break;
        }
        for (int i = 0; i < ntodo; i++) {
            job_t *j = todo[i];
            if (j->pid != pid) continue;
            j->pid = 0;
            running--;
            const char *why = "";
            if (WIFEXITED(st) && WEXITSTATUS(st) == 0 && entry_read(j->result_path, &j->res, &why) == 0) {
                j->have = 1;
                j->seconds = meta_seconds(&j->res);
            } else if (WIFSIGNALED(st)) {
                snprintf(j->error, sizeof j->error, "the NVRTC worker for %s was killed by signal %d",
                         j->name, WTERMSIG(st));
            } else {
                snprintf(j->error, sizeof j->error,
                         "the NVRTC worker for %.64s failed (exit %d%s%.40s) — check free disk space in %.256s",
                         j->name, WIFEXITED(st) ? WEXITSTATUS(st) : -1, *why ? ", result " : "", why,
                         tmpdir);
            }
            unlink(j->result_path);
            break;
        }
    }
}

static int longer_first(const void *a, const void *b) {
    size_t la = strlen((*(job_t *const *)a)->source), lb = strlen((*(job_t *const *)b)->source);
    return la < lb ? 1 : la > lb ? -1 : 0;
}

static int l_nvrtc_compile(lua_State *L) {
    luaL_checktype(L, 1, LUA_TTABLE);
    luaL_checktype(L, 2, LUA_TTABLE);
    const char *arch = opt_string(L, 2, "arch");
    if (!arch) return luaL_error(L, "nvrtc_compile: opts.arch is required");
    const char *version = opt_string(L, 2, "version");
    const char *cache_dir = opt_string(L, 2, "cache_dir");
    lua_getfield(L, 2, "workers");
    int workers = lua_isinteger(L, -1) ? (int)lua_tointeger(L, -1) : 0;
    lua_pop(L, 1);
    if (workers <= 0) workers = available_cpus();

    /* the full option list: arch, the caller's options, then the include paths */
    const char *user[MAX_OPTS], *dirs[MAX_INCDIRS];
    int nuser = string_list(L, 2, "options", user, MAX_OPTS - MAX_INCDIRS - 1);
    int ndirs = string_list(L, 2, "include_dirs", dirs, MAX_INCDIRS);
    char archopt[64];
    snprintf(archopt, sizeof archopt, "--gpu-architecture=%s", arch);
    char incopt[MAX_INCDIRS][PATH_MAX + 16];
    const char *opts[MAX_OPTS];
    int nopts = 0;
    opts[nopts++] = archopt;
    for (int i = 0; i < nuser; i++) opts[nopts++] = user[i];
    for (int i = 0; i < ndirs; i++) {
        snprintf(incopt[i], sizeof incopt[i], "--include-path=%s", dirs[i]);
        opts[nopts++] = incopt[i];
    }

    const char *why = nvrtc_load();
    if (why) return luaL_error(L, "%s", why);
    int nvmaj = 0, nvmin = 0;
    nvrtcVersion(&nvmaj, &nvmin);
    char nvver[32];
    snprintf(nvver, sizeof nvver, "%d.%d", nvmaj, nvmin);

    int njobs = (int)luaL_len(L, 1);
    for (int i = 1; i <= njobs; i++) { /* validate before allocating: luaL_error does not return */
        lua_rawgeti(L, 1, i);
        if (!lua_istable(L, -1)) return luaL_error(L, "nvrtc_compile: job %d is not a table", i);
        lua_getfield(L, -1, "name");
        lua_getfield(L, -2, "source");
        if (!lua_isstring(L, -1) || !lua_isstring(L, -2))
            return luaL_error(L, "nvrtc_compile: job %d needs a name and a source", i);
        lua_pop(L, 3);
    }
    job_t *jobs = calloc((size_t)(njobs > 0 ? njobs : 1), sizeof *jobs);
    job_t **todo = calloc((size_t)(njobs > 0 ? njobs : 1), sizeof *todo);
    if (!jobs || !todo) {
        free(jobs);
        free(todo);
        return luaL_error(L, "nvrtc_compile: out of memory");
    }
    hyp_ckey_headers *hdrs = hyp_ckey_headers_new(dirs, ndirs);
    if (!hdrs) {
        free(jobs);
        free(todo);
        return luaL_error(L, "nvrtc_compile: out of memory");
    }

    /* cache directory: CACHE/nvrtc-1; if it cannot be created, compile without a cache */
    char cache_root[PATH_MAX] = "";
    const char *cache_note = NULL;
    hyp_err cache_err = {"a cache path too long"}; /* cache_note may point into it */
    if (cache_dir && *cache_dir) {
        snprintf(cache_root, sizeof cache_root, "%s/%s", cache_dir, CACHE_SUBDIR);
        if (hyp_fs_mkdirs(cache_root, &cache_err) != HYP_OK) {
            cache_note = cache_err.msg;
            cache_root[0] = 0;
        }
    }

    /* keys and cache lookups (this process) */
    int ntodo = 0;
    for (int i = 0; i < njobs; i++) {
        job_t *j = &jobs[i];
        lua_rawgeti(L, 1, i + 1);
        lua_getfield(L, -1, "name");
        j->name = lua_tostring(L, -1);
        lua_pop(L, 1);
        lua_getfield(L, -1, "source");
        j->source = lua_tostring(L, -1);
        lua_pop(L, 2); /* the strings stay alive in the jobs table */
        hyp_ckey *key = hyp_ckey_begin(hdrs, "hyperion nvrtc cache 1");
        if (!key) {
            snprintf(j->error, sizeof j->error, "out of memory computing the cache key");
            continue;
        }
        hyp_ckey_str(key, version ? version : "?");
        hyp_ckey_str(key, nvver);
        hyp_ckey_str(key, arch);
        for (int k = 0; k < nuser; k++)
            if (strncmp(user[k], "--include-path=", 15) && strncmp(user[k], "-I", 2)) hyp_ckey_str(key, user[k]);
        hyp_ckey_source(key, j->source, strlen(j->source), NULL);
        hyp_ckey_finish(key, j->key);

        if (cache_root[0]) {
            char dir[PATH_MAX];
            if (snprintf(dir, sizeof dir, "%s/%.2s", cache_root, j->key) >= (int)sizeof dir ||
                snprintf(j->entry_path, sizeof j->entry_path, "%s/%s.bin", dir, j->key) >=
                    (int)sizeof j->entry_path) {
                j->entry_path[0] = 0; /* path too long for the cache: just compile */
                todo[ntodo++] = j;
                continue;
            }
            const char *why = NULL;
            int rc = entry_read(j->entry_path, &j->res, &why);
            if (rc == 0 && j->res.status == 0) {
                j->have = j->cached = 1;
                j->seconds = meta_seconds(&j->res);
                continue;
            }
            if (rc == 0) entry_free(&j->res); /* cached failures are not trusted: recompile */
            if (rc == -2) {
                j->corrupt = 1;
                snprintf(j->corrupt_why, sizeof j->corrupt_why, "%s", why);
                unlink(j->entry_path);
            }
        }
        todo[ntodo++] = j;
    }
    hyp_ckey_headers_free(hdrs);

    /* compile the misses, in parallel; results come back through a private temp directory */
    char tmpdir[PATH_MAX] = "";
    if (ntodo > 1 && workers > 1) {
        const char *base = getenv("TMPDIR");
        snprintf(tmpdir, sizeof tmpdir, "%s/hyp-nvrtc-XXXXXX", base && *base ? base : "/tmp");
        if (!mkdtemp(tmpdir)) tmpdir[0] = 0;
    }
    if (workers > ntodo) workers = ntodo;
    /* longest first (source length as the cost estimate): the big files do not start last */
    qsort(todo, (size_t)ntodo, sizeof *todo, longer_first);
    run_compiles(todo, ntodo, workers, opts, nopts, tmpdir[0] ? tmpdir : NULL);
    if (tmpdir[0]) rmdir(tmpdir);

    /* store successful compiles */
    for (int i = 0; i < ntodo; i++) {
        job_t *j = todo[i];
        if (j->have && j->res.status == 0 && cache_root[0] && j->entry_path[0]) {
            char dir[PATH_MAX]; /* shorter than entry_path, which fitted */
            if (snprintf(dir, sizeof dir, "%s/%.2s", cache_root, j->key) >= (int)sizeof dir ||
                hyp_fs_mkdirs(dir, &cache_err) != HYP_OK) {
                if (!cache_note) cache_note = cache_err.msg;
            } else if (entry_write(j->entry_path, &j->res)) {
                if (!cache_note) cache_note = strerror(errno);
            }
        }
    }

    /* results */
    lua_createtable(L, njobs, 0);
    for (int i = 0; i < njobs; i++) {
        job_t *j = &jobs[i];
        lua_createtable(L, 0, 12);
        lua_pushstring(L, j->name);
        lua_setfield(L, -2, "name");
        lua_pushboolean(L, j->have && j->res.status == 0);
        lua_setfield(L, -2, "ok");
        lua_pushboolean(L, j->cached);
        lua_setfield(L, -2, "cached");
        if (j->corrupt) {
            lua_pushstring(L, j->corrupt_why);
            lua_setfield(L, -2, "corrupt");
            lua_pushstring(L, j->entry_path);
            lua_setfield(L, -2, "entry");
        }
        lua_pushstring(L, j->key);
        lua_setfield(L, -2, "key");
        lua_pushnumber(L, j->seconds);
        lua_setfield(L, -2, "seconds");
        if (j->have) {
            set_lstr(L, "cubin", j->res.sec[SEC_CUBIN], j->res.len[SEC_CUBIN]);
            set_lstr(L, "ptx", j->res.sec[SEC_PTX], j->res.len[SEC_PTX]);
            set_lstr(L, "log", j->res.sec[SEC_LOG], j->res.len[SEC_LOG]);
        } else {
            lua_pushstring(L, j->error[0] ? j->error : "the kernel was not compiled (internal error)");
            lua_setfield(L, -2, "error");
        }
        lua_createtable(L, nopts, 0);
        for (int k = 0; k < nopts; k++) {
            lua_pushstring(L, opts[k]);
            lua_rawseti(L, -2, k + 1);
        }
        lua_setfield(L, -2, "options");
        lua_rawseti(L, -2, i + 1);
        entry_free(&j->res);
    }
    free(jobs);
    free(todo);
    /* second value: facts about the run */
    lua_createtable(L, 0, 4);
    lua_pushstring(L, nvver);
    lua_setfield(L, -2, "nvrtc");
    lua_pushinteger(L, ntodo > 0 ? workers : 0); /* processes that compiled (0: all cached) */
    lua_setfield(L, -2, "workers");
    if (cache_root[0]) {
        lua_pushstring(L, cache_root);
        lua_setfield(L, -2, "cache");
    }
    if (cache_note) {
        lua_pushstring(L, cache_note);
        lua_setfield(L, -2, "cache_problem");
    }
    return 2;
}

void gen_register_nvrtc(lua_State *L, int idx) {
    idx = lua_absindex(L, idx);
    lua_pushcfunction(L, l_nvrtc_version);
    lua_setfield(L, idx, "nvrtc_version");
    lua_pushcfunction(L, l_nvrtc_compile);
    lua_setfield(L, idx, "nvrtc_compile");
#ifdef HYP_NVRTC_INCLUDE
    lua_pushstring(L, HYP_NVRTC_INCLUDE); /* the toolkit's include dir (cuda_bf16.h, cuda_fp8.h) */
    lua_setfield(L, idx, "cuda_include");
#endif
}

#else /* !HYP_HAVE_NVRTC: nothing to install; Lua sees hyp.have_nvrtc == false */

void gen_register_nvrtc(lua_State *L, int idx) {
    (void)L;
    (void)idx;
}

#endif
