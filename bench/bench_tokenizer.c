/* bench_tokenizer.c — encode throughput and bytes per token of a tokenizer (v2125) on text files.
 * Each repetition opens a fresh tokenizer (the pre-token cache starts empty, as in `gen data`) and
 * times only hyp_tok_encode over the whole file; prints best and median MB/s (1 MB = 1e6 bytes)
 * and bytes/token. Usage: bench_tokenizer TOKENIZER FILE [REPEATS]. Never used by tests. */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "tokenizer.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: bench_tokenizer TOKENIZER FILE [REPEATS]\n");
        return 2;
    }
    int reps = argc > 3 ? atoi(argv[3]) : 5;
    if (reps < 1) reps = 1;
    hyp_err e;
    uint8_t *text;
    size_t n;
    if (hyp_tok_read_file(argv[2], &text, &n, &e)) {
        fprintf(stderr, "bench_tokenizer: %s\n", e.msg);
        return 2;
    }
    double *mbs = malloc(sizeof(double) * (size_t)reps);
    size_t ntok = 0;
    double open_s = 0;
    for (int r = 0; r < reps; r++) {
        double t0 = now_s();
        hyp_tok *t = hyp_tok_open(argv[1], &e);
        if (!t) {
            fprintf(stderr, "bench_tokenizer: %s\n", e.msg);
            return 2;
        }
        open_s = now_s() - t0;
        int32_t *ids = NULL;
        size_t len = 0, cap = 0;
        t0 = now_s();
        if (hyp_tok_encode(t, text, n, &ids, &len, &cap, &e)) {
            fprintf(stderr, "bench_tokenizer: %s\n", e.msg);
            return 1;
        }
        mbs[r] = (double)n / (now_s() - t0) / 1e6;
        ntok = len;
        free(ids);
        hyp_tok_free(t);
    }
    qsort(mbs, (size_t)reps, sizeof *mbs, cmp_d);
    printf("bytes %zu tokens %zu bytes_per_token %.3f encode_MBps_best %.2f median %.2f (reps %d, load %.3f s)\n", n, ntok,
           (double)n / (double)ntok, mbs[reps - 1], mbs[reps / 2], reps, open_s);
    free(mbs);
    free(text);
    return 0;
}
