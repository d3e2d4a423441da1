/* test_sim_paths.c — the simulator's (runtime/sim.c) less travelled paths, on sources this test
 * writes into BUILD/tests/sim_paths:
 *   the extern __shared__ rewrite: block comments, raw strings and continued directives that hold
 *     the words `extern __shared__` stay verbatim and keep the line count (a kernel stores
 *     __LINE__, which must name its line in the original file), __attribute__((aligned(N))) (its
 *     alignment reaches the prelude) and a template type in the declaration; the refused forms
 *     (inside a directive, unparsable, no end);
 *   compile errors: a missing source, a missing prelude (HYP_KERNELS_DIR), a compiler that cannot
 *     run (CXX), an unwritable rewrite;
 *   loading: a shared object that is no sim module, one built for another sim ABI;
 *   launching: a bad grid, an over-long kernel name, HYP_SIM_THREADS and HYP_SIM_STACK_KIB (a
 *     kernel with 96 KiB of locals overflows the default 64 KiB fiber stack and runs with 256);
 *   __activemask() in a partial warp.
 * Each check names the message or the value it expects. Prints "N passed, M failed". */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sim.h"

#include "hyp_test.h"

static char g_dir[256];

static const char *path_of(char *buf, size_t n, const char *name) {
    snprintf(buf, n, "%s/%s", g_dir, name);
    return buf;
}

static int write_text(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    if (!f) return -1;
    fputs(text, f);
    return fclose(f);
}

/* 1-based line of the first line of `text` that contains `needle`, or -1. */
static int line_of(const char *text, const char *needle) {
    const char *p = strstr(text, needle);
    if (!p) return -1;
    int line = 1;
    for (const char *q = text; q < p; q++) line += *q == '\n';
    return line;
}

/* Compiles `src` (written to NAME.cu) into NAME.so and loads it; NULL (with a FAIL) on error. */
static hyp_sim_module *build(const char *name, const char *src) {
    char cu[512], so[512], nm[128];
    snprintf(nm, sizeof nm, "%s.cu", name);
    path_of(cu, sizeof cu, nm);
    snprintf(nm, sizeof nm, "%s.so", name);
    path_of(so, sizeof so, nm);
    hyp_err e = {{0}};
    hyp_sim_module *m = NULL;
    int rc = write_text(cu, src) != 0 ? HYP_EFAIL : hyp_sim_compile(cu, so, NULL, &e);
    if (rc == HYP_OK) rc = hyp_sim_load(so, &m, &e);
    CHECK(rc == HYP_OK, "%s compiles and loads%s%s", name, rc ? ": " : "", rc ? e.msg : "");
    return rc == HYP_OK ? m : NULL;
}

/* ------------------------------------------------------------------------------------------ */
/* The extern __shared__ rewrite */

static const char REWRITE_SRC[] =
    "// rewrite.cu (written by test_sim_paths.c)\n"
    "/* a block comment that says extern __shared__ float fake[];\n"
    "   over three lines */\n"
    "#define TWICE(x) \\\n"
    "    ((x) * 2)\n"
    "static const char raw_text[] = R\"delim(extern __shared__ int nope[];\n"
    "still the raw string)delim\";\n"
    "template <typename T, int N> struct vec { T v[N]; };\n"
    "extern \"C\" __global__ void rewritten(int* out) {\n"
    "    extern __shared__ __attribute__((aligned(32))) vec<int, 2> pairs[];\n"
    "    pairs[threadIdx.x].v[0] = TWICE((int)threadIdx.x);\n"
    "    pairs[threadIdx.x].v[1] = (int)sizeof raw_text;\n"
    "    __syncthreads();\n"
    "    out[threadIdx.x] = pairs[blockDim.x - 1 - threadIdx.x].v[0];\n"
    "    if (threadIdx.x == 0) { out[blockDim.x] = __LINE__; out[blockDim.x + 1] = pairs[0].v[1]; }\n"
    "}\n"
    "extern \"C\" void hyp_sim_entry_rewritten(void** args) { rewritten(*(int**)args[0]); }\n";

static void test_rewrite(void) {
    hyp_sim_module *m = build("rewrite", REWRITE_SRC);
    if (!m) return;
    enum { T = 40 };
    int out[T + 2];
    memset(out, 0xff, sizeof out);
    int *po = out;
    void *args[] = {&po};
    hyp_err e = {{0}};
    int rc = hyp_sim_launch(m, "rewritten", hyp_dim3_of(1, 1, 1), hyp_dim3_of(T, 1, 1), T * 8, args, NULL, &e);
    int rev = 1;
    for (int t = 0; t < T; t++) rev &= out[t] == 2 * (T - 1 - t);
    CHECK(rc == HYP_OK && rev, "the rewritten dynamic array (template type, aligned(32)) reverses through shared memory%s%s",
          rc ? ": " : "", rc ? e.msg : "");
    int want_line = line_of(REWRITE_SRC, "out[blockDim.x] = __LINE__");
    CHECK(out[T] == want_line, "__LINE__ after a 3-line comment, a continued #define and a 2-line raw string: %d (want %d)",
          out[T], want_line);
    int want_raw = (int)sizeof "extern __shared__ int nope[];\nstill the raw string";
    CHECK(out[T + 1] == want_raw, "the raw string holding `extern __shared__` is kept verbatim: %d bytes (want %d)",
          out[T + 1], want_raw);
    /* the parsed alignment reaches the prelude: 328 bytes can only be aligned to 8 */
    rc = hyp_sim_launch(m, "rewritten", hyp_dim3_of(1, 1, 1), hyp_dim3_of(T, 1, 1), T * 8 + 8, args, NULL, &e);
    CHECK(rc == HYP_EFAIL && strstr(e.msg, "__align__(32)"),
          "__attribute__((aligned(32))) is kept: %d bytes of dynamic shared memory are refused: %s", T * 8 + 8,
          rc ? e.msg : "ran");
    hyp_sim_unload(m);
}

/* A source the rewrite must refuse: HYP_EINPUT naming the file, the line and `needle`. */
static void refused(const char *name, const char *src, int line, const char *needle) {
    char cu[512], so[512], nm[128], at[600];
    snprintf(nm, sizeof nm, "%s.cu", name);
    path_of(cu, sizeof cu, nm);
    snprintf(nm, sizeof nm, "%s.so", name);
    path_of(so, sizeof so, nm);
    snprintf(at, sizeof at, "%s:%d:", cu, line);
    hyp_err e = {{0}};
    int rc = write_text(cu, src) != 0 ? -1 : hyp_sim_compile(cu, so, NULL, &e);
    CHECK(rc == HYP_EINPUT && strstr(e.msg, at) && strstr(e.msg, needle) && access(so, F_OK) != 0,
          "%s is refused at line %d (\"%s\"), no module written: %s", name, line, needle, rc ? e.msg : "accepted");
}

static void test_rewrite_refused(void) {
    refused("in_directive",
            "// x\n#define DYN \\\n  extern __shared__ float dyn[]\n"
            "extern \"C\" __global__ void k(float* o) { DYN; o[0] = dyn[0]; }\n",
            3, "inside a preprocessor directive"); /* the line that holds the words */
    refused("paren_decl",
            "/* a comment\n */\nextern \"C\" __global__ void k(float* o) {\n"
            "    extern __shared__ float (dyn)[];\n    o[0] = dyn[0];\n}\n",
            4, "cannot parse this extern __shared__ declaration");
    refused("sized",
            "extern \"C\" __global__ void k(float* o) {\n    extern __shared__ float dyn[4];\n}\n",
            2, "cannot parse this extern __shared__ declaration");
    refused("no_end", "extern \"C\" __global__ void k(float* o) {\n    extern __shared__ float dyn[]\n}\n", 2,
            "cannot find the end of this extern __shared__ declaration");
}

/* ------------------------------------------------------------------------------------------ */
/* Compile and load errors */

static void test_compile_errors(void) {
    char cu[512], so[512], miss[512];
    hyp_err e = {{0}};
    path_of(cu, sizeof cu, "ok.cu");
    path_of(so, sizeof so, "ok.so");
    write_text(cu, "extern \"C\" __global__ void k(int* o) { o[threadIdx.x] = 1; }\n"
                   "extern \"C\" void hyp_sim_entry_k(void** a) { k(*(int**)a[0]); }\n");
    int rc = hyp_sim_compile(path_of(miss, sizeof miss, "missing.cu"), so, NULL, &e);
    CHECK(rc == HYP_EINPUT && strstr(e.msg, "cannot read the kernel source"), "a missing source: %s", e.msg);

    setenv("HYP_KERNELS_DIR", "/nonexistent-kernels", 1);
    rc = hyp_sim_compile(cu, so, NULL, &e);
    unsetenv("HYP_KERNELS_DIR");
    CHECK(rc == HYP_EFAIL && strstr(e.msg, "/nonexistent-kernels/sim/prelude.h") && strstr(e.msg, "HYP_KERNELS_DIR"),
          "HYP_KERNELS_DIR without the prelude: %s", e.msg);

    const char *cxx = getenv("CXX");
    char saved[256] = "";
    if (cxx) snprintf(saved, sizeof saved, "%s", cxx);
    setenv("CXX", "/nonexistent/g++", 1);
    rc = hyp_sim_compile(cu, so, NULL, &e);
    if (cxx) setenv("CXX", saved, 1);
    else unsetenv("CXX");
    CHECK(rc == HYP_EFAIL && strstr(e.msg, "cannot run the compiler '/nonexistent/g++'") && access(so, F_OK) != 0,
          "a compiler that cannot run: %s", e.msg);

    char dyn[512];
    path_of(dyn, sizeof dyn, "dyn.cu");
    write_text(dyn, "extern \"C\" __global__ void k(float* o) { extern __shared__ float d[]; o[0] = d[0]; }\n");
    rc = hyp_sim_compile(dyn, "/nonexistent-dir/dyn.so", NULL, &e);
    CHECK(rc == HYP_EFAIL && strstr(e.msg, "cannot write") && strstr(e.msg, "/nonexistent-dir/"),
          "the rewrite cannot be written beside the module: %s", e.msg);
}

/* A plain shared object (cc -shared) from C source: no sim module, or one for another ABI. */
static void test_load_errors(void) {
    char c[512], so[512], cmd[1600];
    const char *cc = getenv("CC") && *getenv("CC") ? getenv("CC") : "cc";
    struct {
        const char *name, *src, *needle;
    } cases[] = {
        {"plain", "int not_a_sim_module(void) { return 1; }\n", "not a sim module"},
        {"other_abi",
         "unsigned hyp_sim_module_abi(void) { return 0x7fff; }\n"
         "void hyp_sim_module_bind(const void *api) { (void)api; }\n"
         "void hyp_sim_module_run_thread(void) {}\n",
         "built for sim ABI 32767"},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        char nm[64];
        snprintf(nm, sizeof nm, "%s.c", cases[k].name);
        path_of(c, sizeof c, nm);
        snprintf(nm, sizeof nm, "%s.so", cases[k].name);
        path_of(so, sizeof so, nm);
        snprintf(cmd, sizeof cmd, "%s -shared -fPIC -o '%s' '%s'", cc, so, c);
        if (write_text(c, cases[k].src) != 0 || system(cmd) != 0) {
            CHECK(0, "building %s with %s", so, cc);
            continue;
        }
        hyp_sim_module *m = NULL;
        hyp_err e = {{0}};
        int rc = hyp_sim_load(so, &m, &e);
        CHECK(rc == HYP_EINPUT && m == NULL && strstr(e.msg, cases[k].needle), "loading %s.so: %s", cases[k].name,
              e.msg);
    }
}

/* ------------------------------------------------------------------------------------------ */
/* Launch arguments and environment */

static const char LAUNCH_SRC[] =
    "extern \"C\" __global__ void deep_locals(int* out, int n) {\n"
    "    volatile int big[24576]; // 96 KiB of locals\n"
    "    for (int i = 0; i < n; i++) big[i] = i;\n"
    "    out[threadIdx.x] = big[n - 1];\n"
    "}\n"
    "extern \"C\" __global__ void active(unsigned* out) {\n"
    "    __syncthreads();\n"
    "    unsigned m = __activemask(); // every lane asks before any exits\n"
    "    __syncthreads();\n"
    "    out[threadIdx.x] = m;\n"
    "}\n"
    "extern \"C\" void hyp_sim_entry_deep_locals(void** a) { deep_locals(*(int**)a[0], *(int*)a[1]); }\n"
    "extern \"C\" void hyp_sim_entry_active(void** a) { active(*(unsigned**)a[0]); }\n";

static void test_launch(void) {
    hyp_sim_module *m = build("launch", LAUNCH_SRC);
    if (!m) return;
    int out[2] = {0, 0}, n = 24576;
    int *po = out;
    void *args[] = {&po, &n};
    hyp_err e = {{0}};
    const hyp_dim3 one = hyp_dim3_of(1, 1, 1);
    int rc = hyp_sim_launch(m, "deep_locals", hyp_dim3_of(0, 1, 1), one, 0, args, NULL, &e);
    CHECK(rc == HYP_EINPUT && strstr(e.msg, "grid (0,1,1) is not a valid CUDA grid"), "grid.x = 0: %s", e.msg);
    rc = hyp_sim_launch(m, "deep_locals", hyp_dim3_of(1, 70000, 1), one, 0, args, NULL, &e);
    CHECK(rc == HYP_EINPUT && strstr(e.msg, "not a valid CUDA grid"), "grid.y = 70000: %s", e.msg);
    char longname[300];
    memset(longname, 'k', sizeof longname - 1);
    longname[sizeof longname - 1] = 0;
    rc = hyp_sim_launch(m, longname, one, one, 0, args, NULL, &e);
    CHECK(rc == HYP_EINPUT && strstr(e.msg, "is too long"), "a 299-character kernel name: %s", e.msg);

    /* a malformed HYP_SIM_STACK_KIB falls back to 64 KiB: the 96 KiB of locals overflow it */
    setenv("HYP_SIM_THREADS", "1", 1);
    setenv("HYP_SIM_STACK_KIB", "lots", 1);
    rc = hyp_sim_launch(m, "deep_locals", one, hyp_dim3_of(2, 1, 1), 0, args, NULL, &e);
    CHECK(rc == HYP_EFAIL && strstr(e.msg, "fiber stack overflow (its stack is 64 KiB)"),
          "HYP_SIM_STACK_KIB=lots: the default 64 KiB stack overflows: %s", rc ? e.msg : "ran");
    setenv("HYP_SIM_STACK_KIB", "256", 1);
    rc = hyp_sim_launch(m, "deep_locals", one, hyp_dim3_of(2, 1, 1), 0, args, NULL, &e);
    CHECK(rc == HYP_OK && out[0] == n - 1 && out[1] == n - 1, "HYP_SIM_STACK_KIB=256: 96 KiB of locals fit (%d %d)%s%s",
          out[0], out[1], rc ? ": " : "", rc ? e.msg : "");
    unsetenv("HYP_SIM_STACK_KIB");
    unsetenv("HYP_SIM_THREADS");

    /* a 20-thread block: one partial warp whose lanes 0-19 exist. Between two barriers, as the
     * kernel asks, no lane has exited; without them the fibers run one after the other and a lane
     * sees the earlier ones as exited (sim's mask is the lanes that exist and have not exited). */
    unsigned act[20];
    unsigned *pa = act;
    void *a2[] = {&pa};
    rc = hyp_sim_launch(m, "active", one, hyp_dim3_of(20, 1, 1), 0, a2, NULL, &e);
    int all = rc == HYP_OK;
    int bad = -1;
    for (int t = 0; t < 20 && all; t++)
        if (act[t] != 0x000fffffu) bad = t, all = 0;
    CHECK(all, "__activemask() in a 20-thread block is 0x000fffff on every lane (lane %d: 0x%08x)", bad < 0 ? 0 : bad,
          act[bad < 0 ? 0 : bad]);
    hyp_sim_unload(m);
}

int main(void) {
    snprintf(g_dir, sizeof g_dir, "%s/tests/sim_paths", HYP_BINARY_DIR);
    rm_rf(g_dir);
    char mk[500];
    snprintf(mk, sizeof mk, "mkdir -p '%s'", g_dir);
    if (system(mk) != 0) {
        fprintf(stderr, "cannot create %s\n", g_dir);
        return 1;
    }
    test_rewrite();
    test_rewrite_refused();
    test_compile_errors();
    test_load_errors();
    test_launch();
    return hyp_test_finish();
}
