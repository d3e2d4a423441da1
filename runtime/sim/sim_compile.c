/* sim_compile.c — the simulator's toolchain: turns a rendered CUDA .cu into a module the fiber
 * engine (sim.c) can load. Rewrites `extern __shared__` declarations for the block's dynamic
 * shared memory, runs $CXX (g++) with the prelude kernels/sim/prelude.h force-included, and keeps
 * the compiled modules in a content-addressed cache (hyp_sim_open).
 *
 * It never runs kernels and never loads a module except through hyp_sim_load; it never writes a
 * module in place (temp file + rename), so a concurrent reader sees a whole .so or none. */
#define _GNU_SOURCE
#include "sim.h"
#include "ckey.h"
#include "fsio.h"
#include "sbuf.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../../kernels/sim/sim_abi.h"

extern char **environ;

/* ------------------------------------------------------------------------------------------ */
/* Compiling */

static int is_ident(int c) { return c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9'); }

static void sb_line_directive(hyp_sbuf *o, unsigned line, const char *path) {
    hyp_sbuf_printf(o, "\n#line %u \"", line);
    for (const char *p = path; *p; p++) {
        if (*p == '"' || *p == '\\') hyp_sbuf_put(o, "\\", 1);
        hyp_sbuf_put(o, p, 1);
    }
    hyp_sbuf_put(o, "\"\n", 2);
}

/* Rewrites every `extern __shared__ T name[];` into a macro for the block's dynamic shared memory
 * (the prelude's hyp_sim::dynamic_shared), #undef'd where the declaring scope closes: C++ cannot
 * give an extern array per-block storage. Returns 1 and *out when something was rewritten, 0 when
 * nothing needed it, -1 with `why` on a declaration it cannot parse. Messages name path, the #line
 * directives line_name. */
static int rewrite_extern_shared(const char *src, size_t len, const char *path, const char *line_name, hyp_sbuf *o,
                                 char *why, size_t whylen) {
    struct {
        unsigned depth;
        char name[128];
    } pend[32];
    unsigned npend = 0, depth = 0, line = 1;
    int bol = 1, changed = 0;
    size_t i = 0;
    sb_line_directive(o, 1, line_name);
    while (i < len) {
        char c = src[i];
        if (c == '\n') {
            hyp_sbuf_put(o, "\n", 1);
            line++;
            bol = 1;
            i++;
            continue;
        }
        if (c == ' ' || c == '\t' || c == '\r' || c == '\f' || c == '\v') {
            hyp_sbuf_put(o, &c, 1);
            i++;
            continue;
        }
        if (bol && c == '#') { /* a directive, with its continuation lines, verbatim */
            size_t j = i;
            while (j < len && src[j] != '\n') {
                if (src[j] == '\\' && j + 1 < len && src[j + 1] == '\n') {
                    j += 2;
                    line++;
                    continue;
                }
                j++;
            }
            if (memmem(src + i, j - i, "__shared__", 10) && memmem(src + i, j - i, "extern", 6)) {
                snprintf(why, whylen,
                         "%s:%u: `extern __shared__` inside a preprocessor directive — sim cannot "
                         "rewrite it; declare the dynamic shared array outside a macro",
                         path, line);
                return -1;
            }
            hyp_sbuf_put(o, src + i, j - i);
            i = j;
            continue;
        }
        bol = 0;
        if (c == '/' && i + 1 < len && src[i + 1] == '/') {
            size_t j = i;
            while (j < len && src[j] != '\n') j++;
            hyp_sbuf_put(o, src + i, j - i);
            i = j;
            continue;
        }
        if (c == '/' && i + 1 < len && src[i + 1] == '*') {
            size_t j = i + 2;
            while (j + 1 < len && !(src[j] == '*' && src[j + 1] == '/')) {
                if (src[j] == '\n') line++;
                j++;
            }
            j = j + 2 <= len ? j + 2 : len;
            hyp_sbuf_put(o, src + i, j - i);
            i = j;
            continue;
        }
        if (c == '"' || c == '\'') {
            size_t j = i + 1;
            while (j < len && src[j] != c && src[j] != '\n') j += src[j] == '\\' ? 2 : 1;
            if (j < len && src[j] == c) j++;
            if (j > len) j = len;
            hyp_sbuf_put(o, src + i, j - i);
            i = j;
            continue;
        }
        if (is_ident((unsigned char)c)) {
            size_t j = i;
            while (j < len && is_ident((unsigned char)src[j])) j++;
            size_t idlen = j - i;
            if (c == 'R' && idlen == 1 && j < len && src[j] == '"') { /* raw string R"d(...)d" */
                size_t k = j + 1;
                while (k < len && src[k] != '(' && k - j < 20) k++;
                char close[24];
                int cl = snprintf(close, sizeof close, ")%.*s\"", (int)(k - j - 1), src + j + 1);
                const char *end = memmem(src + k, len - k, close, (size_t)cl);
                size_t stop = end ? (size_t)(end - src) + (size_t)cl : len;
                for (size_t q = i; q < stop; q++) line += src[q] == '\n';
                hyp_sbuf_put(o, src + i, stop - i);
                i = stop;
                continue;
            }
            if (idlen == 6 && memcmp(src + i, "extern", 6) == 0) {
                size_t k = j;
                while (k < len && (src[k] == ' ' || src[k] == '\t' || src[k] == '\n' || src[k] == '\r')) k++;
                if (k + 10 <= len && memcmp(src + k, "__shared__", 10) == 0 &&
                    (k + 10 == len || !is_ident((unsigned char)src[k + 10]))) {
                    /* the declaration, up to its ';' */
                    size_t d = k + 10, semi = d;
                    int paren = 0;
                    while (semi < len && !(src[semi] == ';' && paren == 0)) {
                        if (src[semi] == '(') paren++;
                        if (src[semi] == ')') paren--;
                        if (src[semi] == '{' || src[semi] == '}') break;
                        semi++;
                    }
                    if (semi >= len || src[semi] != ';') {
                        snprintf(why, whylen, "%s:%u: cannot find the end of this extern __shared__ declaration", path, line);
                        return -1;
                    }
                    /* tokens: drop __align__(..), alignas(..), __attribute__((..)) noting any
                     * alignment; the rest must be TYPE... NAME [ ] */
                    char type[256] = "", name[128] = "";
                    size_t tl = 0;
                    unsigned align = 16;
                    size_t q = d;
                    int ok = 1, brackets = 0;
                    while (q < semi && ok) {
                        char ch = src[q];
                        if (ch == ' ' || ch == '\t' || ch == '\n' || ch == '\r') {
                            q++;
                            continue;
                        }
                        if (is_ident((unsigned char)ch)) {
                            size_t s0 = q;
                            while (q < semi && is_ident((unsigned char)src[q])) q++;
                            size_t wl = q - s0;
                            if ((wl == 9 && memcmp(src + s0, "__align__", 9) == 0) ||
                                (wl == 7 && memcmp(src + s0, "alignas", 7) == 0) ||
                                (wl == 13 && memcmp(src + s0, "__attribute__", 13) == 0)) {
                                while (q < semi && src[q] != '(') q++;
                                int pd = 0;
                                size_t a0 = q;
                                do {
                                    if (src[q] == '(') pd++;
                                    if (src[q] == ')') pd--;
                                    q++;
                                } while (q < semi && pd > 0);
                                for (size_t z = a0; z < q; z++)
                                    if (src[z] >= '0' && src[z] <= '9') {
                                        unsigned long v = strtoul(src + z, NULL, 0);
                                        if (v > align && v <= 4096) align = (unsigned)v;
                                        break;
                                    }
                                continue;
                            }
                            if (brackets) {
                                ok = 0;
                                break;
                            }
                            /* the previous identifier (if any) joins the type; this one may be the name */
                            if (name[0]) {
                                size_t nl = strlen(name);
                                if (tl + nl + 2 >= sizeof type) {
                                    ok = 0;
                                    break;
                                }
                                if (tl) type[tl++] = ' ';
                                memcpy(type + tl, name, nl);
                                tl += nl;
                                type[tl] = 0;
                            }
                            if (wl >= sizeof name) {
                                ok = 0;
                                break;
                            }
                            memcpy(name, src + s0, wl);
                            name[wl] = 0;
                            continue;
                        }
                        if (ch == '[' && name[0] && brackets == 0) {
                            brackets = 1;
                            q++;
                            continue;
                        }
                        if (ch == ']' && brackets == 1) {
                            brackets = 2;
                            q++;
                            continue;
                        }
                        if ((ch == ':' || ch == '<' || ch == '>' || ch == ',' || ch == '*') && !brackets) {
                            /* qualified or template types: keep the punctuation in the type */
                            if (name[0]) {
                                size_t nl = strlen(name);
                                if (tl + nl + 2 >= sizeof type) {
                                    ok = 0;
                                    break;
                                }
                                if (tl) type[tl++] = ' ';
                                memcpy(type + tl, name, nl);
                                tl += nl;
                                name[0] = 0;
                            }
                            if (tl + 2 >= sizeof type) {
                                ok = 0;
                                break;
                            }
                            type[tl++] = ch;
                            type[tl] = 0;
                            q++;
                            continue;
                        }
                        ok = 0;
                    }
                    if (!ok || brackets != 2 || !name[0] || !tl) {
                        snprintf(why, whylen,
                                 "%s:%u: cannot parse this extern __shared__ declaration — sim "
                                 "supports `extern __shared__ [__align__(N)] TYPE NAME[];`",
                                 path, line);
                        return -1;
                    }
                    for (size_t z = i; z < semi; z++) line += src[z] == '\n';
                    hyp_sbuf_printf(o,
                              "\n#undef %s\n#define %s (reinterpret_cast<%s *>(::hyp_sim::dynamic_shared(%u)))",
                              name, name, type, align);
                    sb_line_directive(o, line, line_name);
                    if (depth > 0 && npend < 32) {
                        pend[npend].depth = depth;
                        snprintf(pend[npend].name, sizeof pend[npend].name, "%s", name);
                        npend++;
                    }
                    changed = 1;
                    i = semi + 1;
                    continue;
                }
            }
            hyp_sbuf_put(o, src + i, idlen);
            i = j;
            continue;
        }
        if (c == '{') depth++;
        if (c == '}') {
            int any = 0;
            while (npend > 0 && pend[npend - 1].depth == depth) {
                hyp_sbuf_printf(o, "\n#undef %s", pend[npend - 1].name);
                npend--;
                any = 1;
            }
            if (any) sb_line_directive(o, line, line_name);
            if (depth > 0) depth--;
        }
        hyp_sbuf_put(o, &c, 1);
        i++;
    }
    if (o->oom) {
        snprintf(why, whylen, "%s: out of memory rewriting the source", path);
        return -1;
    }
    return changed;
}

static void kernels_dir(char *buf, size_t n) {
    const char *env = getenv("HYP_KERNELS_DIR");
    if (env && *env) {
        snprintf(buf, n, "%s", env);
        return;
    }
    /* the source tree's kernels/, fixed at build time (runtime/sim/CMakeLists.txt) */
#ifdef HYP_SOURCE_KERNELS_DIR
    snprintf(buf, n, "%s", HYP_SOURCE_KERNELS_DIR);
#else
    snprintf(buf, n, "kernels");
#endif
}

static void cuda_include_dir(char *buf, size_t n) {
    const char *env = getenv("CUDA_HOME");
    if (!env || !*env) env = getenv("CUDA_PATH");
    snprintf(buf, n, "%s/include", env && *env ? env : "/usr/local/cuda");
}

/* Where one compile looks: KERNELS, CUDA/include, the prelude, and the source's directory. */
typedef struct {
    char kdir[PATH_MAX], cuda_inc[PATH_MAX], prelude[PATH_MAX + 32], prelude_dir[PATH_MAX + 8];
    char cu_dir[PATH_MAX];
} toolchain_paths;

static void toolchain_paths_of(const char *cu_path, toolchain_paths *tp) {
    kernels_dir(tp->kdir, sizeof tp->kdir);
    cuda_include_dir(tp->cuda_inc, sizeof tp->cuda_inc);
    snprintf(tp->prelude, sizeof tp->prelude, "%s/sim/prelude.h", tp->kdir);
    snprintf(tp->prelude_dir, sizeof tp->prelude_dir, "%s/sim", tp->kdir);
    snprintf(tp->cu_dir, sizeof tp->cu_dir, "%s", cu_path);
    char *sl = strrchr(tp->cu_dir, '/');
    if (sl) *sl = 0;
    else snprintf(tp->cu_dir, sizeof tp->cu_dir, ".");
}

/* Splits s on blanks into argv (pointers into a strdup'ed copy appended to *owned). */
static int split_args(const char *s, char **argv, int argc, int max, char **owned) {
    if (!s || !*s) return argc;
    char *copy = strdup(s);
    if (!copy) return argc;
    *owned = copy;
    for (char *tok = strtok(copy, " \t\n"); tok && argc < max - 1; tok = strtok(NULL, " \t\n"))
        argv[argc++] = tok;
    return argc;
}

/* Runs argv, collecting stdout+stderr into out; returns the exit status, or -1 (errno) when the
 * program cannot be started. */
static int run_capture(char **argv, hyp_sbuf *out) {
    int fds[2];
    if (pipe(fds) != 0) return -1;
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, fds[1], 1);
    posix_spawn_file_actions_adddup2(&fa, fds[1], 2);
    posix_spawn_file_actions_addclose(&fa, fds[0]);
    posix_spawn_file_actions_addclose(&fa, fds[1]);
    pid_t pid;
    int rc = posix_spawnp(&pid, argv[0], &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    close(fds[1]);
    if (rc != 0) {
        close(fds[0]);
        errno = rc;
        return -1;
    }
    char chunk[4096];
    ssize_t k;
    while ((k = read(fds[0], chunk, sizeof chunk)) != 0) {
        if (k < 0) {
            if (errno == EINTR) continue;
            break;
        }
        hyp_sbuf_put(out, chunk, (size_t)k);
    }
    close(fds[0]);
    int st;
    while (waitpid(pid, &st, 0) < 0)
        if (errno != EINTR) return -1;
    if (WIFEXITED(st)) return WEXITSTATUS(st);
    return 128 + (WIFSIGNALED(st) ? WTERMSIG(st) : 0);
}

/* The compiler's first error with what follows it, squeezed onto one line. */
static void first_errors(const char *log, char *buf, size_t n) {
    const char *p = log ? strstr(log, "error:") : NULL;
    if (!p) p = log ? log : "";
    while (log && p > log && p[-1] != '\n') p--;
    size_t k = 0;
    while (*p && k + 1 < n) {
        buf[k++] = (*p == '\n' || *p == '\t') ? ' ' : *p;
        p++;
    }
    buf[k] = 0;
    if (*p && k > 3) memcpy(buf + k - 3, "...", 3);
}

static unsigned g_tmp_counter;

/* The kernel source, whole; errors name it as the kernel source. */
static int read_source(const char *cu_path, char **src, size_t *len, hyp_err *e) {
    hyp_err sub;
    int rc = hyp_fs_read_small(cu_path, SIZE_MAX, src, len, &sub);
    return rc ? hyp_fail(e, rc, "cannot read the kernel source %s", sub.msg) : HYP_OK;
}

/* The prelude precompiled (a g++ precompiled header) in the cache directory `dir`, for the
 * compiles of that cache: each module compile otherwise parses the prelude and the CUDA fp16/bf16/
 * fp8 headers again (~0.8 s of a ~1.4 s compile; test_kernels_sim cold: 76 -> 34 s of CPU).
 * argv[0..argc) are the module compile's program and options, with "-include PRELUDE" at argv[inc]
 * and argv[inc + 1]. The header is DIR/prelude-KEY.h, one line that includes the prelude as
 * spelled in those options (so __FILE__ in the prelude is the same), and its DIR/prelude-KEY.h.gch;
 * KEY covers the prelude's include closure, the compiler and every option but the source's own
 * directory, so an edit of the prelude or another flag set never meets a stale one (g++ itself
 * does not check the headers' contents). g++ uses the .gch only where it is valid for the compile
 * (same compiler build and options) and otherwise reads the one-line header: the module's code is
 * the same either way. Any failure here leaves `out` empty and the compile force-includes the
 * prelude itself; so does HYP_SIM_PCH=0 (to time or compare a compile without it). */
static void prelude_pch(const toolchain_paths *tp, const char *dir, char **argv, int argc, int inc,
                        char *out, size_t n) {
    out[0] = 0;
    if (tp->prelude[0] != '/') return; /* the header's #include must name it from anywhere */
    size_t pre_len;
    char *pre;
    if (hyp_fs_read_small(tp->prelude, SIZE_MAX, &pre, &pre_len, NULL) != HYP_OK) return;
    const char *dirs[] = {tp->kdir, tp->cuda_inc};
    hyp_ckey_headers *hdrs = hyp_ckey_headers_new(dirs, 2);
    hyp_ckey *k = hdrs ? hyp_ckey_begin(hdrs, "hyperion sim pch 1") : NULL;
    if (!k) {
        hyp_ckey_headers_free(hdrs);
        free(pre);
        return;
    }
    for (int i = 0; i < argc; i++) /* the source's directory (-iquote) is not the prelude's */
        if (strncmp(argv[i], "-iquote", 7) != 0) hyp_ckey_str(k, argv[i]);
    hyp_ckey_source(k, pre, pre_len, tp->prelude_dir);
    free(pre);
    char key[33];
    hyp_ckey_finish(k, key);
    hyp_ckey_headers_free(hdrs);
    char h[PATH_MAX], gch[PATH_MAX + 8];
    if (snprintf(h, sizeof h, "%s/prelude-%s.h", dir, key) >= (int)sizeof h) return;
    snprintf(gch, sizeof gch, "%s.gch", h);
    if (access(gch, R_OK) == 0 && access(h, R_OK) == 0) {
        snprintf(out, n, "%s", h);
        return;
    }
    char line[PATH_MAX + 64];
    int ln = snprintf(line, sizeof line, "#include \"%s\"\n", tp->prelude);
    if (ln >= (int)sizeof line || hyp_fs_write_atomic(h, line, (size_t)ln, NULL) != 0) return;
    char tmp[PATH_MAX + 64];
    unsigned serial = __atomic_fetch_add(&g_tmp_counter, 1, __ATOMIC_RELAXED);
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld.%u", gch, (long)getpid(), serial);
    char *pargv[170];
    int pc = 0;
    for (int i = 0; i < argc && pc < 160; i++)
        if (i != inc && i != inc + 1 && strncmp(argv[i], "-iquote", 7) != 0) pargv[pc++] = argv[i];
    pargv[pc++] = "-x";
    pargv[pc++] = "c++-header";
    pargv[pc++] = h;
    pargv[pc++] = "-o";
    pargv[pc++] = tmp;
    pargv[pc] = NULL;
    hyp_sbuf log = {0};
    int st = run_capture(pargv, &log);
    free(log.p);
    if (st == 0 && rename(tmp, gch) == 0) snprintf(out, n, "%s", h);
    else unlink(tmp);
}

static int sim_compile(const char *cu_path, const char *so_path, const char *extra_flags,
                       const char *pch_dir, hyp_err *e);

int hyp_sim_compile(const char *cu_path, const char *so_path, const char *extra_flags, hyp_err *e) {
    return sim_compile(cu_path, so_path, extra_flags, NULL, e);
}

/* pch_dir: where the precompiled prelude lives (prelude_pch), NULL for none. */
static int sim_compile(const char *cu_path, const char *so_path, const char *extra_flags,
                       const char *pch_dir, hyp_err *e) {
    size_t len;
    char *src;
    int rrc = read_source(cu_path, &src, &len, e);
    if (rrc) return rrc;
    toolchain_paths tp;
    toolchain_paths_of(cu_path, &tp);
    const char *kdir = tp.kdir, *cuda_inc = tp.cuda_inc, *cu_dir = tp.cu_dir;
    char *prelude = tp.prelude; /* an argv entry below */
    if (access(prelude, R_OK) != 0) {
        free(src);
        return hyp_fail(e, HYP_EFAIL,
                        "%s: the simulator prelude is missing — set HYP_KERNELS_DIR to the "
                        "project's kernels/ directory",
                        prelude);
    }
    /* Every file of this attempt has a private temp name, renamed into place at the end, so
     * concurrent compiles of one target (two users of one cache) never mix their files. */
    char tmp[PATH_MAX + 64], obj[PATH_MAX + 72], sim_tmp[PATH_MAX + 80], sim_src[PATH_MAX + 16];
    unsigned serial = __atomic_fetch_add(&g_tmp_counter, 1, __ATOMIC_RELAXED);
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld.%u", so_path, (long)getpid(), serial);
    snprintf(obj, sizeof obj, "%s.o", tmp);
    snprintf(sim_tmp, sizeof sim_tmp, "%s.sim.cu", tmp);
    snprintf(sim_src, sizeof sim_src, "%s.sim.cu", so_path);
    /* What g++ compiles is a copy (extern __shared__ rewritten) whose #line directives name the
     * file by its base name, so the module holds no trace of the trainer's directory (__FILE__,
     * the bounds checker's locations): the cache key leaves the directory out (hyp_sim_open). */
    char why[512] = "";
    const char *compile_src = sim_tmp, *base = strrchr(cu_path, '/');
    base = base ? base + 1 : cu_path;
    hyp_sbuf rw = {0};
    int r = rewrite_extern_shared(src, len, cu_path, base, &rw, why, sizeof why);
    free(src);
    if (r < 0) {
        free(rw.p);
        return hyp_fail(e, HYP_EINPUT, "%s", why);
    }
    if (hyp_fs_write_atomic(sim_tmp, rw.p, rw.n, NULL) != 0) {
        free(rw.p);
        unlink(sim_tmp);
        return hyp_fail(e, HYP_EFAIL, "%s: cannot write: %s — check the output directory",
                        sim_tmp, strerror(errno));
    }
    free(rw.p);

    /* Compile and link in two steps: the link must not see -fsanitize=bounds, or g++ would make
     * the module depend on libubsan although the prelude defines the only handler it calls. */
    const char *cxx = getenv("CXX") && *getenv("CXX") ? getenv("CXX") : "g++";
    char *argv[160], *largv[160];
    char *owned[6] = {0};
    int argc = split_args(cxx, argv, 0, 8, &owned[0]);
    int largc = split_args(cxx, largv, 0, 8, &owned[3]);
    char inc_k[PATH_MAX + 4], inc_c[PATH_MAX + 4], inc_q[PATH_MAX + 12];
    snprintf(inc_k, sizeof inc_k, "-I%s", kdir);
    snprintf(inc_c, sizeof inc_c, "-I%s", cuda_inc);
    snprintf(inc_q, sizeof inc_q, "-iquote%s", cu_dir);
    char *fixed[] = {"-std=c++17", "-O2", "-fPIC", "-DHYP_SIM", "-include", prelude, inc_q, inc_k,
                     inc_c, "-fsanitize=bounds", "-fstack-clash-protection",
                     "-fno-omit-frame-pointer", "-fno-gnu-unique", "-Wno-unknown-pragmas"};
    for (size_t k = 0; k < sizeof fixed / sizeof fixed[0]; k++) argv[argc++] = fixed[k];
    argc = split_args(getenv("HYP_SIM_CXXFLAGS"), argv, argc, 140, &owned[1]);
    argc = split_args(extra_flags, argv, argc, 150, &owned[2]);
    char pch[PATH_MAX];
    if (pch_dir && !(getenv("HYP_SIM_PCH") && !strcmp(getenv("HYP_SIM_PCH"), "0"))) { /* 0: none */
        int inc = 0;
        while (inc + 1 < argc && argv[inc + 1] != prelude) inc++;
        pch[0] = 0;
        if (inc + 1 < argc) prelude_pch(&tp, pch_dir, argv, argc, inc, pch, sizeof pch);
        if (pch[0]) argv[inc + 1] = pch;
    }
    argv[argc++] = "-c";
    argv[argc++] = "-o";
    argv[argc++] = obj;
    argv[argc++] = "-x"; /* .cu is no suffix g++ knows */
    argv[argc++] = "c++";
    argv[argc++] = (char *)compile_src;
    argv[argc] = NULL;
    largv[largc++] = "-shared";
    largc = split_args(getenv("HYP_SIM_CXXFLAGS"), largv, largc, 140, &owned[4]);
    largc = split_args(extra_flags, largv, largc, 150, &owned[5]);
    largv[largc++] = "-o";
    largv[largc++] = tmp;
    largv[largc++] = obj;
    largv[largc] = NULL;

    hyp_sbuf log = {0};
    int st = run_capture(argv, &log);
    int saved = errno;
    if (st == 0) {
        st = run_capture(largv, &log);
        saved = errno;
    }
    unlink(obj);
    char logpath[PATH_MAX + 8], logtmp[PATH_MAX + 72];
    snprintf(logpath, sizeof logpath, "%s.log", so_path);
    snprintf(logtmp, sizeof logtmp, "%s.log", tmp);
    if (log.n) hyp_fs_write_atomic(logpath, log.p, log.n, NULL);
    else {
        unlink(logtmp);
        unlink(logpath);
    }
    if (compile_src == sim_tmp && rename(sim_tmp, sim_src) != 0) unlink(sim_tmp); /* kept to inspect */
    int rc = HYP_OK;
    if (st < 0) {
        rc = hyp_fail(e, HYP_EFAIL, "%s: cannot run the compiler '%s': %s — install g++ or set CXX",
                      cu_path, argv[0], strerror(saved));
    } else if (st != 0) {
        char first[600];
        first_errors(log.p, first, sizeof first);
        rc = hyp_fail(e, HYP_EFAIL,
                      "%s: the sim compile failed (%s exit %d) — fix the kernel; full log in %s: %s",
                      cu_path, argv[0], st, logpath, first);
    } else if (rename(tmp, so_path) != 0) {
        rc = hyp_fail(e, HYP_EFAIL, "%s: cannot rename into place: %s — check the directory",
                      so_path, strerror(errno));
    }
    if (rc != HYP_OK) unlink(tmp);
    free(log.p);
    for (int k = 0; k < 6; k++) free(owned[k]);
    return rc;
}

/* ------------------------------------------------------------------------------------------ */
/* Compile cache */

int hyp_sim_open(const char *cu_path, const char *extra_flags, hyp_sim_module **m, hyp_err *e) {
    *m = NULL;
    size_t len;
    char *src;
    int rrc = read_source(cu_path, &src, &len, e);
    if (rrc) return rrc;
    /* The key: the compile caches' one rule (ckey.h) over what hyp_sim_compile's output depends
     * on; the prelude is keyed as a source, being force-included. */
    toolchain_paths tp;
    toolchain_paths_of(cu_path, &tp);
    const char *dirs[] = {tp.cu_dir, tp.kdir, tp.cuda_inc}; /* -iquote, then -I, as compiled */
    hyp_ckey_headers *hdrs = hyp_ckey_headers_new(dirs, 3);
    hyp_ckey *k = hdrs ? hyp_ckey_begin(hdrs, "hyperion sim cache 2") : NULL;
    if (!k) {
        hyp_ckey_headers_free(hdrs);
        free(src);
        return hyp_fail(e, HYP_EFAIL, "hyp_sim_open: out of memory");
    }
    unsigned abi = HYP_SIM_ABI_VERSION;
    hyp_ckey_bytes(k, &abi, sizeof abi);
    hyp_ckey_str(k, getenv("CXX"));
    hyp_ckey_str(k, getenv("HYP_SIM_CXXFLAGS"));
    hyp_ckey_str(k, extra_flags);
    const char *base_name = strrchr(cu_path, '/');
    hyp_ckey_str(k, base_name ? base_name + 1 : cu_path); /* the #line directives name it; not its directory */
    char *pre;
    size_t pre_len;
    if (hyp_fs_read_small(tp.prelude, SIZE_MAX, &pre, &pre_len, NULL) == HYP_OK) {
        hyp_ckey_source(k, pre, pre_len, tp.prelude_dir);
        free(pre);
    } /* else hyp_sim_compile reports the missing prelude */
    hyp_ckey_source(k, src, len, tp.cu_dir);
    free(src);
    char key[33];
    hyp_ckey_finish(k, key);
    hyp_ckey_headers_free(hdrs);

    char dir[PATH_MAX];
    const char *env = getenv("HYP_SIM_CACHE"), *root = getenv("HYPERION_CACHE");
    if (env && *env) snprintf(dir, sizeof dir, "%s", env);
    else if (root && *root) snprintf(dir, sizeof dir, "%s/sim", root);
    else if (getenv("XDG_CACHE_HOME") && *getenv("XDG_CACHE_HOME"))
        snprintf(dir, sizeof dir, "%s/hyperion/sim", getenv("XDG_CACHE_HOME"));
    else if (getenv("HOME") && *getenv("HOME"))
        snprintf(dir, sizeof dir, "%s/.cache/hyperion/sim", getenv("HOME"));
    else snprintf(dir, sizeof dir, "/tmp/hyperion-sim-%ld", (long)getuid());
    hyp_err mk;
    if (hyp_fs_mkdirs(dir, &mk) != HYP_OK)
        return hyp_fail(e, HYP_EFAIL, "cannot create the sim cache: %s; or set HYP_SIM_CACHE",
                        mk.msg);
    const char *base = strrchr(cu_path, '/');
    base = base ? base + 1 : cu_path;
    char so[PATH_MAX + 200];
    snprintf(so, sizeof so, "%s/%.60s-%s.so", dir, base, key);
    if (access(so, R_OK) == 0 && hyp_sim_load(so, m, NULL) == HYP_OK) return HYP_OK;
    int rc = sim_compile(cu_path, so, extra_flags, dir, e);
    if (rc != HYP_OK) return rc;
    return hyp_sim_load(so, m, e);
}
