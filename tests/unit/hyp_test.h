/* hyp_test.h — what the C test programs share: CHECK (prints "ok   what" or "FAIL what (file:line)"
 * and counts), the closing "N passed, M failed" line ctest's readers look for, and rm_rf for the
 * temporary directories tests make. Header-only: each test is one program. */
#ifndef HYP_TEST_H
#define HYP_TEST_H

#include <dirent.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* CMake passes both; a test compiled by hand runs from the source root with ./build */
#ifndef HYP_SOURCE_DIR
#define HYP_SOURCE_DIR "."
#endif
#ifndef HYP_BINARY_DIR
#define HYP_BINARY_DIR "build"
#endif

static int g_pass, g_fail;

/* Evaluates cond once; prints "ok   <what>" or "FAIL <what>  (file:line)". */
#define CHECK(cond, ...)                                                                         \
    do {                                                                                         \
        int ok_ = (cond) ? 1 : 0;                                                                \
        printf(ok_ ? "ok   " : "FAIL ");                                                         \
        printf(__VA_ARGS__);                                                                     \
        if (ok_) {                                                                               \
            g_pass++;                                                                            \
            printf("\n");                                                                        \
        } else {                                                                                 \
            g_fail++;                                                                            \
            printf("  (%s:%d)\n", __FILE__, __LINE__);                                           \
        }                                                                                        \
    } while (0)

/* The function form: check(ok, name, printf-style detail or NULL), "PASS|FAIL name detail". */
static inline void check(int ok, const char *name, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
static inline void check(int ok, const char *name, const char *fmt, ...) {
    char detail[512] = "";
    if (fmt) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(detail, sizeof detail, fmt, ap);
        va_end(ap);
    }
    printf("%s %-52s %s\n", ok ? "PASS" : "FAIL", name, detail);
    fflush(stdout);
    if (ok) g_pass++;
    else g_fail++;
}

/* Prints the closing tally and returns the exit status. */
static inline int hyp_test_finish(void) {
    printf("%d passed, %d failed\n", g_pass, g_fail);
    return g_fail ? 1 : 0;
}

static inline void rm_rf(const char *path) {
    struct stat st;
    if (lstat(path, &st) != 0) return;
    if (S_ISDIR(st.st_mode)) {
        DIR *d = opendir(path);
        struct dirent *de;
        while (d && (de = readdir(d))) {
            if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..")) continue;
            char p[4096];
            int n = snprintf(p, sizeof p, "%s/%s", path, de->d_name);
            if (n > 0 && (size_t)n < sizeof p) rm_rf(p);
        }
        if (d) closedir(d);
        rmdir(path);
    } else {
        unlink(path);
    }
}

#endif
