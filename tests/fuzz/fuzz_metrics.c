/* fuzz_metrics.c — libFuzzer target for the reader of a trainer's metrics JSONL that v2148's loss
 * prediction reads back on resume (runtime/obs/losspred.c hyp_losspred_load_metrics), and the fits
 * over whatever it read: any bytes as the metrics file; rows with a numeric step and loss fill the
 * history (steps outside 1..upto ignored, non-positive or non-finite losses dropped), then both
 * laws are fitted at several steps. Nothing may crash; every prediction is finite or absent
 * (ok = 0), and a band never inverts. Seeds: metrics files of tiny runs with v2148. */
#include "fuzz_util.h"

#include <math.h>

#include "losspred.h"

static void check_out(const hyp_losspred_out *o) {
    if (!o->ok) return;
    if (!isfinite(o->final) || !isfinite(o->lo) || !isfinite(o->hi) || o->lo > o->hi) {
        fprintf(stderr, "fuzz: prediction %g band [%g, %g]\n", o->final, o->lo, o->hi);
        abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    enum { N = 200 };
    fz_write("metrics.jsonl", data, size);
    char path[600];
    fz_path(path, sizeof path, "metrics.jsonl");
    static double lr[N + 1];
    for (int s = 0; s <= N; s++) lr[s] = s <= 10 ? 1e-3 * (s + 1) / 11 : 1e-3 * (0.1 + 0.9 * 0.5 * (1 + cos(M_PI * (s - 10) / (N - 10))));
    for (int law = 0; law < 2; law++) {
        hyp_losspred *lp = hyp_losspred_new(N);
        if (!lp) abort();
        if (law && hyp_losspred_set_lr(lp, lr, N, 10)) abort();
        hyp_losspred_load_metrics(lp, path, N / 2 + (int)(size % (N / 2)));
        for (int now = 20; now <= N; now += 60) {
            hyp_losspred_out o;
            hyp_losspred_fit(lp, now, N, 10, &o);
            check_out(&o);
        }
        hyp_losspred_free(lp);
    }
    return 0;
}
