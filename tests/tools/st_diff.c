/* st_diff.c — compares two safetensors files tensor by tensor (names, shapes, values as fp32);
 * prints the largest absolute difference and exits 0 when it is <= the tolerance argument.
 * Used by the shell tests (e.g. np=2 vs np=1 weights). Usage: st_diff A B [TOL]. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "safetensors.h"

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: st_diff A.safetensors B.safetensors [TOL]\n");
        return 2;
    }
    double tol = argc > 3 ? atof(argv[3]) : 0;
    hyp_st_file *a, *b;
    hyp_err e;
    if (hyp_st_open(argv[1], &a, &e) || hyp_st_open(argv[2], &b, &e)) {
        fprintf(stderr, "%s\n", e.msg);
        return 2;
    }
    if (hyp_st_count(a) != hyp_st_count(b)) {
        printf("different tensor counts: %d vs %d\n", hyp_st_count(a), hyp_st_count(b));
        return 1;
    }
    double worst = 0;
    const char *where = "";
    for (int i = 0; i < hyp_st_count(a); i++) {
        const hyp_st_tensor *ta = hyp_st_get(a, i), *tb = hyp_st_find(b, ta->name);
        if (!tb || tb->nbytes != ta->nbytes) {
            printf("tensor %s missing or of another size in %s\n", ta->name, argv[2]);
            return 1;
        }
        size_t n = ta->nbytes / 4;
        float *fa = malloc(n * 4), *fb = malloc(n * 4);
        if (!fa || !fb || hyp_st_to_f32(a, ta, fa, &e) || hyp_st_to_f32(b, tb, fb, &e)) return 2;
        for (size_t j = 0; j < n; j++) {
            double d = fabs((double)fa[j] - fb[j]);
            if (d > worst || d != d) worst = d, where = ta->name;
        }
        free(fa), free(fb);
    }
    printf("max |a-b| = %.3g (%s), tolerance %.3g\n", worst, where, tol);
    hyp_st_close(a), hyp_st_close(b);
    return worst <= tol ? 0 : 1;
}
