/* bench_ckpt.c — v2179: how long a checkpoint holds up training, blocking vs async, for a
 * gpt2-124m-shaped state (124.4M fp32 parameters + two AdamW moments = 1.49 GB), side by side in
 * one process.
 *
 * Blocking: the trainer's step waits for hyp_ckpt_save_aux (serialize, xxh3, write, fsync,
 * rename). Async (runtime/ckpt/ckpt_async.c): the step waits only for the snapshot into the
 * writer's host buffers; the files are written by the writer thread meanwhile. Each round does one
 * blocking save, then one async save (its call time = the stall) and then waits for the write
 * (how long the background write took, which a training step would overlap). The async files are
 * compared with the blocking ones byte for byte (model.safetensors and optimizer.safetensors).
 *
 * Usage: bench_ckpt [--dir D] [--rounds R]   (D default /tmp; writes D/bench_ckpt_{block,async}/,
 * removed at the end; ~3 GB of memory, ~3 GB on disk at a time). Output: one line per round and a
 * summary with the median stall ratio. Never run by ctest. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ckpt_async.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

enum { L = 12, C = 768, V = 50257, TCTX = 1024, MAXT = 4 + 12 * L };

static int add(hyp_ckpt_tensor *t, int n, char names[][96], const char *name, int64_t a, int64_t b) {
    snprintf(names[n], 96, "%s", name);
    t[n] = (hyp_ckpt_tensor){names[n], NULL, b ? 2 : 1, {a, b, 0, 0}};
    return n + 1;
}

static int cmp_dbl(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static int same_file(const char *a, const char *b) {
    FILE *fa = fopen(a, "rb"), *fb = fopen(b, "rb");
    int same = fa && fb;
    static char ba[1 << 16], bb[1 << 16];
    while (same) {
        size_t na = fread(ba, 1, sizeof ba, fa), nb = fread(bb, 1, sizeof bb, fb);
        if (na != nb || memcmp(ba, bb, na)) same = 0;
        if (na < sizeof ba) break;
    }
    if (fa) fclose(fa);
    if (fb) fclose(fb);
    return same;
}

int main(int argc, char **argv) {
    const char *dir = "/tmp";
    int rounds = 3;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--dir")) dir = argv[i + 1];
        else if (!strcmp(argv[i], "--rounds")) rounds = atoi(argv[i + 1]);
    }
    if (rounds < 1 || rounds > 50) rounds = 3;
    static char names[3][MAXT][96];
    static hyp_ckpt_tensor t[3][MAXT];
    int n = 0;
    char nm[96];
    n = add(t[0], n, names[0], "transformer.wte.weight", V, C);
    n = add(t[0], n, names[0], "transformer.wpe.weight", TCTX, C);
    for (int l = 0; l < L; l++) {
        static const char *suf[12] = {"ln_1.weight", "ln_1.bias", "attn.c_attn.weight", "attn.c_attn.bias",
                                      "attn.c_proj.weight", "attn.c_proj.bias", "ln_2.weight", "ln_2.bias",
                                      "mlp.c_fc.weight", "mlp.c_fc.bias", "mlp.c_proj.weight", "mlp.c_proj.bias"};
        const int64_t sh[12][2] = {{C, 0}, {C, 0}, {3 * C, C}, {3 * C, 0}, {C, C}, {C, 0},
                                   {C, 0}, {C, 0}, {4 * C, C}, {4 * C, 0}, {C, 4 * C}, {C, 0}};
        for (int k = 0; k < 12; k++) {
            snprintf(nm, sizeof nm, "transformer.h.%d.%s", l, suf[k]);
            n = add(t[0], n, names[0], nm, sh[k][0], sh[k][1]);
        }
    }
    n = add(t[0], n, names[0], "transformer.ln_f.weight", C, 0);
    n = add(t[0], n, names[0], "transformer.ln_f.bias", C, 0);
    size_t total = 0;
    for (int i = 0; i < n; i++) total += (size_t)t[0][i].shape[0] * (size_t)(t[0][i].ndim == 2 ? t[0][i].shape[1] : 1);
    for (int s = 0; s < 3; s++) {
        float *buf = malloc(total * sizeof(float));
        if (!buf) {
            fprintf(stderr, "bench_ckpt: out of memory (%.2f GB)\n", 3.0 * total * 4 / 1e9);
            return 1;
        }
        uint32_t x = 12345u + (uint32_t)s;
        for (size_t i = 0; i < total; i++) { /* incompressible-ish values, like trained weights */
            x = x * 1664525u + 1013904223u;
            buf[i] = (float)((int32_t)x) * 1e-10f;
        }
        size_t off = 0;
        for (int i = 0; i < n; i++) {
            if (s) {
                char nm[96]; /* names[s] and names[0] are rows of one array: format apart, then copy */
                snprintf(nm, sizeof nm, "%.80s.%s", names[0][i], s == 1 ? "exp_avg" : "exp_avg_sq");
                memcpy(names[s][i], nm, sizeof nm);
                t[s][i] = t[0][i];
                t[s][i].name = names[s][i];
            }
            t[s][i].data = buf + off;
            off += (size_t)t[0][i].shape[0] * (size_t)(t[0][i].ndim == 2 ? t[0][i].shape[1] : 1);
        }
    }
    hyp_ckpt_tensor *states[2] = {t[1], t[2]};
    char db[1024], da[1024];
    snprintf(db, sizeof db, "%s/bench_ckpt_block", dir);
    snprintf(da, sizeof da, "%s/bench_ckpt_async", dir);
    printf("gpt2-124m checkpoint: %d tensors, %.1fM params, %.2f GB with two AdamW moments, dir %s\n", n,
           total / 1e6, 3.0 * total * 4 / 1e9, dir);
    hyp_ckpt_async *a;
    hyp_err e = {{0}};
    if (hyp_ckpt_async_open(&a, 1, &e)) {
        fprintf(stderr, "bench_ckpt: %s\n", e.msg);
        return 1;
    }
    double *ratio = calloc((size_t)rounds, sizeof *ratio);
    int identical = 1;
    for (int r = 0; r < rounds; r++) {
        hyp_ckpt_state st = {.step = (uint64_t)r + 1};
        snprintf(st.config_hash, sizeof st.config_hash, "bench");
        double t0 = now_s();
        if (hyp_ckpt_save_aux(db, t[0], states, 2, n, NULL, 0, &st, 1, &e)) break;
        double blocking = now_s() - t0;
        t0 = now_s();
        if (hyp_ckpt_async_save(a, da, t[0], states, 2, n, NULL, 0, &st, 1, NULL, &e)) break;
        double stall = now_s() - t0;
        if (hyp_ckpt_async_wait(a, &e)) break;
        double bg = now_s() - t0 - stall;
        ratio[r] = blocking / stall;
        for (int f = 0; f < 2; f++) {
            char fa[1200], fb[1200];
            const char *file = f ? "optimizer.safetensors" : "model.safetensors";
            snprintf(fa, sizeof fa, "%s/step_%08d/%s", da, r + 1, file);
            snprintf(fb, sizeof fb, "%s/step_%08d/%s", db, r + 1, file);
            identical &= same_file(fa, fb);
        }
        printf("round %d: blocking save %.3f s | async: step stall %.3f s (snapshot), background write %.3f s | stall ratio %.1fx\n",
               r + 1, blocking, stall, bg, ratio[r]);
        fflush(stdout);
    }
    int rc = e.msg[0] ? 1 : 0;
    if (rc) fprintf(stderr, "bench_ckpt: %s\n", e.msg);
    else {
        qsort(ratio, (size_t)rounds, sizeof *ratio, cmp_dbl);
        printf("median: async stalls the step %.1fx less than a blocking save; files byte-identical: %s\n",
               ratio[rounds / 2], identical ? "yes" : "NO");
    }
    hyp_ckpt_async_close(a);
    char cmd[2200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s' '%s'", db, da);
    if (system(cmd)) rc = rc ? rc : 0;
    return rc || !identical;
}
