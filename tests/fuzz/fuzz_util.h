/* fuzz_util.h — what every libFuzzer target of the runtime's readers shares: a private scratch
 * directory per process, a split of one input into several files, and the check that a reader
 * answered bad bytes with an error value shaped "where: what — how to fix" (hyp_err.h).
 *
 * Readers take paths, so a target writes its input into files under the scratch directory and
 * calls the reader on them, as the trainer would. An input that stands for several files (a
 * checkpoint directory, a data directory) is cut at FZ_SEP; part i becomes file i of the
 * target's list, an empty part means "file absent".
 * Never: a reader's error turned into a crash here unless it breaks the error contract (an
 * out-of-range code, an empty or multi-line message) — that is a finding, so abort() reports it. */
#ifndef HYP_FUZZ_UTIL_H
#define HYP_FUZZ_UTIL_H

#define _GNU_SOURCE 1
#include <fcntl.h>
#include <ftw.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "hyp_err.h"

#define FZ_SEP "\n@@FILE@@\n"
#define FZ_SEP_LEN 10
#define FZ_MAX_PARTS 8

static char fz_root[256];

static int fz_rm_one(const char *p, const struct stat *st, int flag, struct FTW *ftw) {
    (void)st, (void)flag, (void)ftw;
    return remove(p);
}

/* Removes everything under the scratch directory (the directory itself stays). */
static inline void fz_clean(void) {
    if (!fz_root[0]) return;
    char p[300];
    snprintf(p, sizeof p, "%s/in", fz_root);
    (void)nftw(p, fz_rm_one, 16, FTW_DEPTH | FTW_PHYS);
    mkdir(p, 0755);
}

static void fz_atexit(void) {
    if (fz_root[0]) (void)nftw(fz_root, fz_rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

/* The per-process input directory ("<tmp>/hyp-fuzz-PID/in"), made on first use. */
static inline const char *fz_dir(void) {
    static char in[300];
    if (!fz_root[0]) {
        const char *t = getenv("TMPDIR");
        snprintf(fz_root, sizeof fz_root, "%s/hyp-fuzz-%d", t && t[0] ? t : "/tmp", (int)getpid());
        mkdir(fz_root, 0755);
        snprintf(in, sizeof in, "%s/in", fz_root);
        mkdir(in, 0755);
        atexit(fz_atexit);
    }
    return in;
}

/* fz_dir()/rel into out[cap]. */
static inline void fz_path(char *out, size_t cap, const char *rel) { snprintf(out, cap, "%s/%s", fz_dir(), rel); }

/* Writes n bytes to fz_dir()/rel (its parent must exist). Aborts when the scratch disk fails:
 * that is the harness's problem, not a finding. */
static inline void fz_write(const char *rel, const void *p, size_t n) {
    char path[600];
    fz_path(path, sizeof path, rel);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) { perror(path); abort(); }
    const char *b = p;
    while (n) {
        ssize_t w = write(fd, b, n);
        if (w <= 0) { perror(path); abort(); }
        b += w, n -= (size_t)w;
    }
    close(fd);
}

static inline void fz_mkdir(const char *rel) {
    char path[600];
    fz_path(path, sizeof path, rel);
    mkdir(path, 0755);
}

/* Cuts data at FZ_SEP into at most max parts (the last part keeps any further separators).
 * Returns the number of parts (>= 1). */
static inline int fz_split(const uint8_t *data, size_t size, const uint8_t **part, size_t *len, int max) {
    int k = 0;
    size_t start = 0;
    for (size_t i = 0; k < max - 1 && i + FZ_SEP_LEN <= size;) {
        if (!memcmp(data + i, FZ_SEP, FZ_SEP_LEN)) {
            part[k] = data + start, len[k] = i - start, k++;
            i += FZ_SEP_LEN, start = i;
        } else i++;
    }
    part[k] = data + start, len[k] = size - start, k++;
    return k;
}

/* Writes one input as the files of a directory: cuts data at FZ_SEP into at most nn parts, empties
 * the scratch directory, makes fz_dir()/dirs[0], dirs[1], ... (NULL-terminated, parents first) and
 * writes part i to dirs[0]/names[i] unless it is empty (that file is absent). len[] (FZ_MAX_PARTS
 * entries) receives each part's length. Returns the number of parts. */
static inline int fz_unpack(const uint8_t *data, size_t size, const char *const *dirs, const char *const *names, int nn,
                            size_t *len) {
    const uint8_t *part[FZ_MAX_PARTS];
    int np = fz_split(data, size, part, len, nn);
    fz_clean();
    for (int i = 0; dirs[i]; i++) fz_mkdir(dirs[i]);
    char rel[400];
    for (int i = 0; i < np; i++) {
        if (!len[i]) continue;
        snprintf(rel, sizeof rel, "%s/%s", dirs[0], names[i]);
        fz_write(rel, part[i], len[i]);
    }
    return np;
}

/* The error contract of hyp_err.h: a code in {OK, EFAIL, EINPUT} (or extra codes a reader
 * documents, passed as `extra`), and on error one non-empty line. A bad input must be EINPUT
 * with "where: what — how to fix". */
static inline void fz_check(int rc, const hyp_err *e, int extra) {
    static int verbose = -1; /* HYP_FUZZ_VERBOSE=1: print every answer (to see what seeds reach) */
    if (verbose < 0) verbose = getenv("HYP_FUZZ_VERBOSE") != NULL;
    if (verbose) fprintf(stderr, "fuzz: rc %d%s%s\n", rc, rc ? ": " : "", rc ? e->msg : "");
    if (rc == 0 || (extra && rc == extra)) return;
    if (rc != HYP_EINPUT && rc != HYP_EFAIL) {
        fprintf(stderr, "fuzz: reader returned %d (not a hyp_err code): %s\n", rc, e->msg);
        abort();
    }
    if (!e->msg[0] || strchr(e->msg, '\n')) {
        fprintf(stderr, "fuzz: error message empty or not one line: '%s'\n", e->msg);
        abort();
    }
    if (rc == HYP_EINPUT && (!strstr(e->msg, ": ") || !strstr(e->msg, " \xe2\x80\x94 "))) {
        fprintf(stderr, "fuzz: bad-input message is not 'where: what — how to fix': '%s'\n", e->msg);
        abort();
    }
}

#endif
