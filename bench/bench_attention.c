/* bench_attention.c — naive causal attention (ops_cpu.h: op_attention_fwd/bwd, which materializes
 * att and datt [B,NH,T,T]) vs flash attention (ops_flash.h: op_flash_attention_fwd/bwd, which
 * saves only lse [B,NH,T] and uses D [B,NH,T] + per-thread tile scratch) on the CPU.
 *
 * Shapes (B, NH, T, hd), NKV = NH: (4,12,64,64) (4,12,256,64) (1,12,1024,64) (1,12,2048,64).
 * For each shape: one warm-up fwd+bwd of each implementation, then --reps rounds in which naive
 * and flash alternate (so that both see the same load on a shared machine), each round timing
 * one forward and one backward call (the gradient buffer is zeroed outside the timed region); we
 * print the median (p50) of each, their sum, and the minimum of each.
 * Memory:
 *   extra_bytes   what the implementation needs beyond qkv/out/dout/dqkv: naive att + datt
 *                 (2 B NH T^2 floats); flash lse + D (2 B NH T floats) + tile scratch per thread
 *                 x threads (op_flash_attention_scratch_bytes);
 *   rss_delta_kb  MEASURED: in a child process (fork + exec of this program) that allocates and
 *                 touches the inputs, runs an OpenMP warm-up, reads its peak RSS (VmHWM = the
 *                 process's own ru_maxrss), then allocates the implementation's own buffers and
 *                 runs fwd + bwd once: the increase of the peak RSS (kB). Page granularity and
 *                 allocator slack make it approximate for the small shapes.
 * Output: CSV on stdout, one line per (impl, shape):
 *   impl,B,NH,NKV,T,hd,threads,fwd_p50_ms,bwd_p50_ms,total_p50_ms,fwd_min_ms,bwd_min_ms,
 *   extra_bytes,rss_delta_kb
 * and after each shape a comment line "# ... speedup" (starts with '#').
 *
 * --masks (v2117): instead, the flash op under mask rules at B=1 NH=12 hd=64, T 1024 and 2048:
 * causal, sliding_window 128 / 512, prefix_lm T/4, causal + softcap 50; the rules alternate rep by
 * rep like the implementations above. CSV, one line per (T, rule):
 *   mask,T,window,threads,fwd_p50_ms,bwd_p50_ms,total_p50_ms,tiles_visited,tiles_skipped,
 *   density,vs_causal
 * (tiles per call over all heads; density = the visited fraction of the tile grid; vs_causal =
 * causal's total p50 / this rule's). Memory is the flash op's whatever the rule (lse + D +
 * scratch, as above).
 *
 * Usage: bench_attention [--reps R] [--quick] [--masks]   (--quick: only the two small shapes)
 * Threads: OMP_NUM_THREADS.
 */
#include "attn_mod.h"
#include "ops_cpu.h"
#include "ops_flash.h"

#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof(double), cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static uint64_t g_rng = 0x1234567ull;
static float frand(void) {
    uint64_t z = (g_rng += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return (float)((z >> 40) * (1.0 / 16777216.0)) * 2.0f - 1.0f;
}

static float *alloc_f(long n) {
    float *p = malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
    if (!p) {
        fprintf(stderr, "bench_attention: out of memory (%ld floats)\n", n);
        exit(2);
    }
    return p;
}

typedef struct {
    int B, NH, NKV, T, hd;
} shape;

enum { NAIVE = 0, FLASH = 1 };

static void run_fwd(int impl, float *out, float *att, float *lse, const float *qkv, shape s) {
    if (impl == NAIVE)
        op_attention_fwd(out, att, qkv, s.B, s.T, s.NH, s.NKV, s.hd);
    else
        op_flash_attention_fwd(out, lse, qkv, s.B, s.T, s.NH, s.NKV, s.hd);
}
static void run_bwd(int impl, float *dqkv, float *datt, float *dsc, const float *dout,
                    const float *qkv, const float *out, const float *att, const float *lse,
                    shape s) {
    if (impl == NAIVE)
        op_attention_bwd(dqkv, datt, dout, qkv, att, s.B, s.T, s.NH, s.NKV, s.hd);
    else
        op_flash_attention_bwd(dqkv, dsc, dout, qkv, out, lse, s.B, s.T, s.NH, s.NKV, s.hd);
}

/* Peak resident set of this process image (kB): VmHWM from /proc/self/status, else ru_maxrss.
 * Both are the kernel's RSS high-water mark, but ru_maxrss also carries over, through fork + exec,
 * the RSS the parent had at fork time (Linux keeps the pre-exec mm's high-water in
 * signal->maxrss), which can hide a child's growth; VmHWM belongs to the exec'ed image alone. */
static long max_rss_kb(void) {
    FILE *f = fopen("/proc/self/status", "r");
    if (f) {
        char line[256];
        long kb = -1;
        while (fgets(line, sizeof line, f))
            if (!strncmp(line, "VmHWM:", 6)) {
                kb = atol(line + 6);
                break;
            }
        fclose(f);
        if (kb >= 0) return kb;
    }
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_maxrss;
}

/* Sizes of the common buffers. */
static long n_qkv(shape s) { return (long)s.B * s.T * (s.NH + 2 * s.NKV) * s.hd; }
static long n_out(shape s) { return (long)s.B * s.T * s.NH * s.hd; }
static long n_att(shape s) { return (long)s.B * s.NH * s.T * s.T; }
static long n_lse(shape s) { return (long)s.B * s.NH * s.T; }

static float *filled(long n) {
    float *p = alloc_f(n);
    for (long i = 0; i < n; i++) p[i] = frand();
    return p;
}

/* The memory measurement runs in a fresh process (fork + exec of this program with
 * "--rss-child IMPL B NH NKV T hd": libgomp's thread pool does not survive a plain fork). It
 * prints the peak-RSS increase of one fwd+bwd (kB). */
static int rss_child(int impl, shape s) {
    float *qkv = filled(n_qkv(s)), *dout = filled(n_out(s));
    float *out = filled(n_out(s)), *dqkv = filled(n_qkv(s));
#pragma omp parallel
    {
        volatile float x = 0.0f;
        (void)x;
    } /* the thread pool exists before the baseline */
    long before = max_rss_kb();
    float *att = NULL, *datt = NULL, *lse = NULL, *dsc = NULL;
    if (impl == NAIVE) {
        att = alloc_f(n_att(s));
        datt = alloc_f(n_att(s));
    } else {
        lse = alloc_f(n_lse(s));
        dsc = alloc_f(n_lse(s));
    }
    run_fwd(impl, out, att, lse, qkv, s);
    run_bwd(impl, dqkv, datt, dsc, dout, qkv, out, att, lse, s);
    printf("%ld\n", max_rss_kb() - before);
    return 0;
}

static long rss_delta(int impl, shape s) {
    int fd[2];
    if (pipe(fd) != 0) return -1;
    fflush(stdout);
    pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
        char a[5][16];
        int v[5] = {s.B, s.NH, s.NKV, s.T, s.hd};
        for (int i = 0; i < 5; i++) snprintf(a[i], sizeof a[i], "%d", v[i]);
        close(fd[0]);
        dup2(fd[1], 1);
        execl("/proc/self/exe", "bench_attention", "--rss-child", impl == NAIVE ? "naive" : "flash",
              a[0], a[1], a[2], a[3], a[4], (char *)NULL);
        _exit(127);
    }
    close(fd[1]);
    char buf[64] = "";
    ssize_t n = read(fd[0], buf, sizeof buf - 1);
    close(fd[0]);
    int st = 0;
    waitpid(pid, &st, 0);
    if (n <= 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0) return -1;
    buf[n] = 0;
    return atol(buf);
}

/* v2117: the flash op under mask rules (see the header). */
static int bench_masks(int reps) {
    enum { NRULE = 5 };
    const char *names[NRULE] = {"causal", "sliding_window", "sliding_window", "prefix_lm", "causal+softcap"};
    int threads = omp_get_max_threads();
    printf("mask,T,window,threads,fwd_p50_ms,bwd_p50_ms,total_p50_ms,tiles_visited,tiles_skipped,density,vs_causal\n");
    const int Ts[2] = {1024, 2048};
    for (int ti = 0; ti < 2; ti++) {
        shape s = {1, 12, 12, Ts[ti], 64};
        hyp_attn_mod rules[NRULE] = {{HYP_MASK_CAUSAL, 0, 0, HYP_MOD_NONE, 0.0f},
                                     {HYP_MASK_SLIDING_WINDOW, 128, 0, HYP_MOD_NONE, 0.0f},
                                     {HYP_MASK_SLIDING_WINDOW, 512, 0, HYP_MOD_NONE, 0.0f},
                                     {HYP_MASK_PREFIX_LM, 0, s.T / 4, HYP_MOD_NONE, 0.0f},
                                     {HYP_MASK_CAUSAL, 0, 0, HYP_MOD_SOFTCAP, 50.0f}};
        int R = reps > 0 ? reps : 5;
        float *qkv = filled(n_qkv(s)), *dout = filled(n_out(s)), *out = alloc_f(n_out(s)), *dqkv = alloc_f(n_qkv(s));
        float *lse = alloc_f(n_lse(s)), *dsc = alloc_f(n_lse(s));
        double *t[NRULE][2];
        hyp_attn_tiles tiles[NRULE];
        for (int r = 0; r < NRULE; r++) {
            for (int k = 0; k < 2; k++)
                if (!(t[r][k] = malloc(sizeof(double) * (size_t)R))) return 2;
            op_flash_attention_fwd_mod(out, lse, qkv, NULL, s.B, s.T, s.NH, s.NKV, s.hd, 0.0f, &rules[r], &tiles[r]);
        }
        for (int i = 0; i < R; i++)
            for (int r = 0; r < NRULE; r++) {
                double t0 = now_s();
                op_flash_attention_fwd_mod(out, lse, qkv, NULL, s.B, s.T, s.NH, s.NKV, s.hd, 0.0f, &rules[r], NULL);
                t[r][0][i] = now_s() - t0;
                memset(dqkv, 0, sizeof(float) * (size_t)n_qkv(s));
                t0 = now_s();
                op_flash_attention_bwd_mod(dqkv, dsc, dout, qkv, out, lse, NULL, s.B, s.T, s.NH, s.NKV, s.hd, 0.0f, &rules[r]);
                t[r][1][i] = now_s() - t0;
            }
        double causal = 0.0;
        for (int r = 0; r < NRULE; r++) {
            double f = 1e3 * median(t[r][0], R), b = 1e3 * median(t[r][1], R);
            if (r == 0) causal = f + b;
            printf("%s,%d,%d,%d,%.3f,%.3f,%.3f,%ld,%ld,%.3f,%.2f\n", names[r], s.T,
                   rules[r].mask == HYP_MASK_SLIDING_WINDOW ? rules[r].window : rules[r].mask == HYP_MASK_PREFIX_LM ? rules[r].prefix : 0,
                   threads, f, b, f + b, tiles[r].visited, tiles[r].skipped,
                   (double)tiles[r].visited / (double)(tiles[r].visited + tiles[r].skipped), causal / (f + b));
            fflush(stdout);
            free(t[r][0]);
            free(t[r][1]);
        }
        free(qkv); free(dout); free(out); free(dqkv); free(lse); free(dsc);
    }
    return 0;
}

int main(int argc, char **argv) {
    if (argc == 8 && !strcmp(argv[1], "--rss-child")) {
        shape s = {atoi(argv[3]), atoi(argv[4]), atoi(argv[5]), atoi(argv[6]), atoi(argv[7])};
        return rss_child(strcmp(argv[2], "naive") ? FLASH : NAIVE, s);
    }
    int reps = 0, quick = 0, masks = 0;
    for (int a = 1; a < argc; a++) {
        if (!strcmp(argv[a], "--reps") && a + 1 < argc)
            reps = atoi(argv[++a]);
        else if (!strcmp(argv[a], "--quick"))
            quick = 1;
        else if (!strcmp(argv[a], "--masks"))
            masks = 1;
        else {
            fprintf(stderr, "usage: bench_attention [--reps R] [--quick] [--masks]\n");
            return 2;
        }
    }
    if (masks) return bench_masks(reps);
    shape shapes[] = {
        {4, 12, 12, 64, 64}, {4, 12, 12, 256, 64}, {1, 12, 12, 1024, 64}, {1, 12, 12, 2048, 64}};
    int nshapes = quick ? 2 : 4;
    int threads = omp_get_max_threads();
    printf("impl,B,NH,NKV,T,hd,threads,fwd_p50_ms,bwd_p50_ms,total_p50_ms,fwd_min_ms,bwd_min_ms,"
           "extra_bytes,rss_delta_kb\n");
    fflush(stdout);
    for (int si = 0; si < nshapes; si++) {
        shape s = shapes[si];
        int R = reps > 0 ? reps : (s.T <= 256 ? 21 : 7);
        float *qkv = filled(n_qkv(s)), *dout = filled(n_out(s));
        float *out = alloc_f(n_out(s)), *dqkv = alloc_f(n_qkv(s));
        float *att = alloc_f(n_att(s)), *datt = alloc_f(n_att(s));
        float *lse = alloc_f(n_lse(s)), *dsc = alloc_f(n_lse(s));
        double *t[2][2]; /* [impl][fwd/bwd][rep] */
        for (int impl = 0; impl < 2; impl++)
            for (int k = 0; k < 2; k++) {
                t[impl][k] = malloc(sizeof(double) * (size_t)R);
                if (!t[impl][k]) { fprintf(stderr, "out of memory\n"); return 2; }
            }
        for (int impl = 0; impl < 2; impl++) { /* warm-up */
            memset(dqkv, 0, sizeof(float) * (size_t)n_qkv(s));
            run_fwd(impl, out, att, lse, qkv, s);
            run_bwd(impl, dqkv, datt, dsc, dout, qkv, out, att, lse, s);
        }
        /* the two implementations alternate rep by rep, so both see the same machine load */
        for (int r = 0; r < R; r++)
            for (int impl = 0; impl < 2; impl++) {
                double t0 = now_s();
                run_fwd(impl, out, att, lse, qkv, s);
                t[impl][0][r] = now_s() - t0;
                memset(dqkv, 0, sizeof(float) * (size_t)n_qkv(s));
                t0 = now_s();
                run_bwd(impl, dqkv, datt, dsc, dout, qkv, out, att, lse, s);
                t[impl][1][r] = now_s() - t0;
            }
        double tot[2];
        for (int impl = 0; impl < 2; impl++) {
            double f = 1e3 * median(t[impl][0], R), b = 1e3 * median(t[impl][1], R);
            double fmin = 1e3 * t[impl][0][0], bmin = 1e3 * t[impl][1][0]; /* sorted by median() */
            tot[impl] = f + b;
            long extra = impl == NAIVE
                             ? 2 * n_att(s) * (long)sizeof(float)
                             : 2 * n_lse(s) * (long)sizeof(float) +
                                   (long)threads * (long)op_flash_attention_scratch_bytes(s.hd, 1);
            long rss = rss_delta(impl, s);
            printf("%s,%d,%d,%d,%d,%d,%d,%.3f,%.3f,%.3f,%.3f,%.3f,%ld,%ld\n",
                   impl == NAIVE ? "naive" : "flash", s.B, s.NH, s.NKV, s.T, s.hd, threads, f, b,
                   f + b, fmin, bmin, extra, rss);
            fflush(stdout);
            free(t[impl][0]);
            free(t[impl][1]);
        }
        printf("# B=%d NH=%d T=%d hd=%d: flash fwd+bwd speedup over naive %.2fx (p50)\n", s.B, s.NH,
               s.T, s.hd, tot[NAIVE] / tot[FLASH]);
        fflush(stdout);
        free(att);
        free(datt);
        free(lse);
        free(dsc);
        free(qkv);
        free(dout);
        free(out);
        free(dqkv);
    }
    return 0;
}
