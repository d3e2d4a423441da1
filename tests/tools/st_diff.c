/* st_diff.c — compares two safetensors files tensor by tensor (names, shapes, values as fp32);
 * prints the largest absolute difference and exits 0 when it is <= the tolerance argument.
 * Used by the shell tests (e.g. np=2 vs np=1 weights). Usage: st_diff A B [TOL].
 * B may also be a sharded checkpoint's step directory (v2181): each tensor of A is then the
 * concatenation of its slices in shard_00000.safetensors, shard_00001, ... (ranks own increasing
 * element ranges of every tensor; the checkpoint loader verifies that against the layout). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "safetensors.h"

#define MAX_SHARDS 256

typedef struct {
    hyp_st_file *f[MAX_SHARDS];
    int n;
} source;

static int open_source(const char *path, source *s, hyp_err *e) {
    struct stat st;
    s->n = 0;
    if (stat(path, &st) != 0 || !S_ISDIR(st.st_mode)) {
        s->n = 1;
        return hyp_st_open(path, &s->f[0], e);
    }
    char p[4096];
    for (; s->n < MAX_SHARDS; s->n++) {
        snprintf(p, sizeof p, "%s/shard_%05d.safetensors", path, s->n);
        if (stat(p, &st) != 0) break;
        if (hyp_st_open(p, &s->f[s->n], e)) return 1;
    }
    if (!s->n) snprintf(e->msg, sizeof e->msg, "%s: no shard_00000.safetensors", path);
    return s->n == 0;
}

/* The tensor `name` as fp32 (concatenated over shards); NULL if missing or not n floats. */
static float *read_tensor(const source *s, const char *name, size_t n, hyp_err *e) {
    float *out = malloc(n * 4 + 4);
    size_t at = 0;
    for (int k = 0; out && k < s->n; k++) {
        const hyp_st_tensor *t = hyp_st_find(s->f[k], name);
        if (!t) continue;
        if (at + t->nbytes / 4 > n || hyp_st_to_f32(s->f[k], t, out + at, e)) break;
        at += t->nbytes / 4;
    }
    if (at != n) free(out), out = NULL;
    return out;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: st_diff A.safetensors B.safetensors|STEP_DIR [TOL]\n");
        return 2;
    }
    double tol = argc > 3 ? atof(argv[3]) : 0;
    source a, b;
    hyp_err e;
    if (open_source(argv[1], &a, &e) || open_source(argv[2], &b, &e)) {
        fprintf(stderr, "%s\n", e.msg);
        return 2;
    }
    if (b.n == 1 && hyp_st_count(a.f[0]) != hyp_st_count(b.f[0])) {
        printf("different tensor counts: %d vs %d\n", hyp_st_count(a.f[0]), hyp_st_count(b.f[0]));
        return 1;
    }
    double worst = 0;
    const char *where = "";
    for (int i = 0; i < hyp_st_count(a.f[0]); i++) {
        const hyp_st_tensor *ta = hyp_st_get(a.f[0], i);
        size_t n = ta->nbytes / 4;
        float *fa = read_tensor(&a, ta->name, n, &e), *fb = read_tensor(&b, ta->name, n, &e);
        if (!fa || !fb) {
            printf("tensor %s missing or of another size in %s\n", ta->name, argv[2]);
            return 1;
        }
        for (size_t j = 0; j < n; j++) {
            double d = fabs((double)fa[j] - fb[j]);
            if (d > worst || d != d) worst = d, where = ta->name;
        }
        free(fa), free(fb);
    }
    printf("max |a-b| = %.3g (%s), tolerance %.3g\n", worst, where, tol);
    for (int k = 0; k < a.n; k++) hyp_st_close(a.f[k]);
    for (int k = 0; k < b.n; k++) hyp_st_close(b.f[k]);
    return worst <= tol ? 0 : 1;
}
