/* test_flash.c — flash attention (runtime/ops_flash.h) against the naive attention of ops_cpu.h.
 *
 *   1. equality: forward output and all of dqkv (dq, dk, dv) of op_flash_attention_fwd/bwd match
 *      op_attention_fwd/bwd on regular and odd shapes (T = 1, 7, not a multiple of the tile,
 *      grouped-query NH=6/NKV=2, hd 64 / 128 / 24, hd > 128 which uses the 32-row tile, tiny hd);
 *      lse matches a double-precision log-sum-exp of the scores.
 *      Tolerance (fp32): normwise relative error max|flash - naive| / max|naive| <= 2e-5 for out
 *      and each gradient block, 1e-5 absolute for lse. Both kernels compute the same sums in a
 *      different order/factorization (online softmax with rescaling; P from exp(s - lse) instead
 *      of exp(s - max)/sum; D = dout.out instead of sum P dP), so they differ as two fp32
 *      summation orders (docs/test-tolerances.md E1, E6): out sums T terms, a gradient a chain of
 *      hd + T roundings (dP over hd, then dq/dk/dv over T), plus ~2 ulp per exp; at the largest
 *      shapes here (T 256, hd 200) 2 lambda u sqrt(456) = 1.5e-5 of the scale (lambda = 6), under
 *      2e-5 (printed values are ~1e-7..2e-6); any indexing/masking error is O(1). lse: a sum of
 *      <= 256 positive terms (condition 1) and one log: absolute error lambda u sqrt(256) + 2u =
 *      6e-6 <= 1e-5.
 *      With huge scores (|s| ~ 1e3) the conditioning of exp dominates: the bound becomes
 *      max(2e-5, 8 u max|s|), u = 2^-24 (each kernel's probabilities carry ~u|s| relative error).
 *   2. accumulation: backward adds (+=) into a pre-filled dqkv.
 *   3. causality: changing q/k/v of tokens >= t0 leaves out[t < t0] and lse bit-identical; with
 *      dout zero on rows >= t0, dk/dv of tokens >= t0 are exactly 0.
 *   4. stability: huge scores (qkv x 30) give finite results equal to naive.
 *   5. determinism: results bit-identical with 1 and 2 (and 3) OpenMP threads.
 *   6. memory, MEASURED: in child processes (fork + exec of this program), at B=1 NH=4 T=2048
 *      hd=64, the increase of the peak RSS (VmHWM, i.e. the process's own ru_maxrss) during one
 *      fwd+bwd including the implementation's own buffers (naive: att + datt [B,NH,T,T]; flash:
 *      lse + D [B,NH,T] + stack tile scratch) over a baseline taken after the common buffers are
 *      touched; flash's increase must be < 10% of naive's (and naive's must show its att + datt,
 *      which proves the measurement sees allocations).
 *
 * Prints one line per check and finally "N passed, M failed"; exits 1 if anything failed.
 */
#include "ops_cpu.h"
#include "ops_flash.h"

#include <math.h>
#include <omp.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "hyp_test.h"

static uint64_t g_rng = 0x9E3779B97F4A7C15ull;
static uint64_t rng_u64(void) {
    uint64_t z = (g_rng += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
static float rng_uniform(float lo, float hi) {
    return lo + (hi - lo) * (float)((rng_u64() >> 40) * (1.0 / 16777216.0));
}

static float *falloc(long n) {
    float *p = malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
    if (!p) {
        fprintf(stderr, "out of memory\n");
        exit(2);
    }
    return p;
}
static float *frand(long n, float lo, float hi) {
    float *p = falloc(n);
    for (long i = 0; i < n; i++) p[i] = rng_uniform(lo, hi);
    return p;
}
static float *fcopy(const float *s, long n) {
    float *p = falloc(n);
    memcpy(p, s, (size_t)n * sizeof(float));
    return p;
}

/* max |a - b| / max |b| over a strided block: rows n < N, columns [c0, c0 + w) of row stride ld */
static double rel_err(const float *a, const float *b, long N, long ld, long c0, long w) {
    double emax = 0.0, bmax = 0.0;
    for (long n = 0; n < N; n++)
        for (long c = c0; c < c0 + w; c++) {
            double d = fabs((double)a[n * ld + c] - (double)b[n * ld + c]);
            if (!(d <= emax)) emax = d; /* NaN propagates */
            double m = fabs((double)b[n * ld + c]);
            if (m > bmax) bmax = m;
        }
    return bmax > 0.0 ? emax / bmax : emax;
}

static int all_finite(const float *x, long n) {
    for (long i = 0; i < n; i++)
        if (!isfinite(x[i])) return 0;
    return 1;
}

#define TOL 2e-5
#define LSE_TOL 1e-5

typedef struct {
    int B, T, NH, NKV, hd;
} shape;

/* Checks flash vs naive on one shape; amp scales qkv (score magnitude). */
static void compare_shape(shape s, float amp, const char *tag) {
    const int B = s.B, T = s.T, NH = s.NH, NKV = s.NKV, hd = s.hd;
    const long R = (long)(NH + 2 * NKV) * hd, OC = (long)NH * hd, N = (long)B * T;
    float *qkv = frand(N * R, -amp, amp);
    float *dout = frand(N * OC, -1.0f, 1.0f);
    float *att = falloc((long)B * NH * T * T), *datt = falloc((long)B * NH * T * T);
    float *out_n = falloc(N * OC), *out_f = falloc(N * OC);
    float *lse = falloc((long)B * NH * T), *dsc = falloc((long)B * NH * T);
    float *pre = frand(N * R, -1.0f, 1.0f);
    float *dq_n = fcopy(pre, N * R), *dq_f = fcopy(pre, N * R);
    op_attention_fwd(out_n, att, qkv, B, T, NH, NKV, hd);
    op_flash_attention_fwd(out_f, lse, qkv, B, T, NH, NKV, hd);
    op_attention_bwd(dq_n, datt, dout, qkv, att, B, T, NH, NKV, hd);
    op_flash_attention_bwd(dq_f, dsc, dout, qkv, out_f, lse, B, T, NH, NKV, hd);
    for (long i = 0; i < N * R; i++) {
        dq_n[i] -= pre[i];
        dq_f[i] -= pre[i];
    }

    char name[160];
    double e_out = rel_err(out_f, out_n, N, OC, 0, OC);
    double e_q = rel_err(dq_f, dq_n, N, R, 0, OC);
    double e_k = rel_err(dq_f, dq_n, N, R, OC, (long)NKV * hd);
    double e_v = rel_err(dq_f, dq_n, N, R, OC + (long)NKV * hd, (long)NKV * hd);
    /* lse against a double log-sum-exp of the scaled scores */
    double e_lse = 0.0, smax = 0.0;
    const int G = NH / NKV;
    const double scale = 1.0 / sqrt((double)hd);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int t = 0; t < T; t++) {
                const float *q = qkv + ((long)b * T + t) * R + (long)h * hd;
                double mx = -INFINITY, sum = 0.0;
                double *sc = malloc(sizeof(double) * (size_t)(t + 1));
                for (int t2 = 0; t2 <= t; t2++) {
                    const float *k = qkv + ((long)b * T + t2) * R + (long)(NH + h / G) * hd;
                    double d = 0.0;
                    for (int i = 0; i < hd; i++) d += (double)q[i] * k[i];
                    sc[t2] = d * scale;
                    if (sc[t2] > mx) mx = sc[t2];
                    if (fabs(sc[t2]) > smax) smax = fabs(sc[t2]);
                }
                for (int t2 = 0; t2 <= t; t2++) sum += exp(sc[t2] - mx);
                free(sc);
                double ref = mx + log(sum);
                double e = fabs(ref - lse[((long)b * NH + h) * T + t]) / fmax(1.0, fabs(ref));
                if (!(e <= e_lse)) e_lse = e;
            }
    /* exp(s) amplifies the rounding of a score s (relative ~u |s|, u = 2^-24) into a relative
     * error of u |s| in the probabilities: with huge scores the bound grows with max |s| */
    const double tol = fmax(TOL, 8.0 * 5.96e-8 * smax);
    snprintf(name, sizeof name, "%s B%d T%d NH%d NKV%d hd%d out", tag, B, T, NH, NKV, hd);
    check(e_out <= tol && all_finite(out_f, N * OC), name,
          "rel err %.2e (tol %.1e, max|score| %.3g)", e_out, tol, smax);
    snprintf(name, sizeof name, "%s B%d T%d NH%d NKV%d hd%d lse", tag, B, T, NH, NKV, hd);
    check(e_lse <= LSE_TOL, name, "err vs double %.2e (tol %.0e)", e_lse, LSE_TOL);
    snprintf(name, sizeof name, "%s B%d T%d NH%d NKV%d hd%d dq/dk/dv", tag, B, T, NH, NKV, hd);
    double e_g = fmax(e_q, fmax(e_k, e_v));
    check(e_g <= tol && all_finite(dq_f, N * R), name, "rel err dq %.2e dk %.2e dv %.2e (tol %.1e)",
          e_q, e_k, e_v, tol);
    free(qkv);
    free(dout);
    free(att);
    free(datt);
    free(out_n);
    free(out_f);
    free(lse);
    free(dsc);
    free(pre);
    free(dq_n);
    free(dq_f);
}

/* backward adds into dqkv: bwd(pre) - pre == bwd(0) up to the rounding of the addition */
static void test_accumulates(void) {
    shape s = {2, 70, 4, 2, 32};
    const long R = (long)(s.NH + 2 * s.NKV) * s.hd, OC = (long)s.NH * s.hd, N = (long)s.B * s.T;
    float *qkv = frand(N * R, -1, 1), *dout = frand(N * OC, -1, 1), *out = falloc(N * OC);
    float *lse = falloc((long)s.B * s.NH * s.T), *dsc = falloc((long)s.B * s.NH * s.T);
    float *pre = frand(N * R, -5, 5), *d1 = fcopy(pre, N * R), *d0 = falloc(N * R);
    memset(d0, 0, sizeof(float) * (size_t)(N * R));
    op_flash_attention_fwd(out, lse, qkv, s.B, s.T, s.NH, s.NKV, s.hd);
    op_flash_attention_bwd(d1, dsc, dout, qkv, out, lse, s.B, s.T, s.NH, s.NKV, s.hd);
    op_flash_attention_bwd(d0, dsc, dout, qkv, out, lse, s.B, s.T, s.NH, s.NKV, s.hd);
    double emax = 0.0;
    for (long i = 0; i < N * R; i++) {
        double e = fabs((double)d1[i] - ((double)pre[i] + d0[i]));
        if (!(e <= emax)) emax = e;
    }
    check(emax <= 1e-5, "backward accumulates into dqkv (+=)", "max |bwd(pre) - pre - bwd(0)| %.2e",
          emax);
    free(qkv);
    free(dout);
    free(out);
    free(lse);
    free(dsc);
    free(pre);
    free(d1);
    free(d0);
}

static void test_causality(void) {
    shape s = {2, 150, 6, 2, 64};
    const int t0 = 77;
    const long R = (long)(s.NH + 2 * s.NKV) * s.hd, OC = (long)s.NH * s.hd, N = (long)s.B * s.T;
    const long NL = (long)s.B * s.NH * s.T;
    float *qkv = frand(N * R, -1, 1), *qkv2 = fcopy(qkv, N * R);
    for (int b = 0; b < s.B; b++)
        for (int t = t0; t < s.T; t++)
            for (long i = 0; i < R; i++) qkv2[((long)b * s.T + t) * R + i] = rng_uniform(-3, 3);
    float *o1 = falloc(N * OC), *o2 = falloc(N * OC), *l1 = falloc(NL), *l2 = falloc(NL);
    op_flash_attention_fwd(o1, l1, qkv, s.B, s.T, s.NH, s.NKV, s.hd);
    op_flash_attention_fwd(o2, l2, qkv2, s.B, s.T, s.NH, s.NKV, s.hd);
    int same = 1, changed = 0;
    for (int b = 0; b < s.B; b++) {
        for (int t = 0; t < s.T; t++) {
            int eq = !memcmp(o1 + ((long)b * s.T + t) * OC, o2 + ((long)b * s.T + t) * OC,
                             sizeof(float) * (size_t)OC);
            for (int h = 0; h < s.NH; h++) {
                long li = ((long)b * s.NH + h) * s.T + t;
                if (l1[li] != l2[li]) eq = 0;
            }
            if (t < t0 && !eq) same = 0;
            if (t >= t0 && !eq) changed++;
        }
    }
    check(same && changed > 0, "causal: future tokens do not change earlier out/lse",
          "rows < %d identical, %d later rows changed", t0, changed);

    /* backward: dout only on rows < t0 -> dk, dv of tokens >= t0 are exactly 0 */
    float *dout = frand(N * OC, -1, 1), *dsc = falloc(NL), *dq = falloc(N * R);
    for (int b = 0; b < s.B; b++)
        for (int t = t0; t < s.T; t++)
            for (long i = 0; i < OC; i++) dout[((long)b * s.T + t) * OC + i] = 0.0f;
    memset(dq, 0, sizeof(float) * (size_t)(N * R));
    op_flash_attention_bwd(dq, dsc, dout, qkv, o1, l1, s.B, s.T, s.NH, s.NKV, s.hd);
    int zero = 1, nonzero_before = 0;
    for (int b = 0; b < s.B; b++)
        for (int t = 0; t < s.T; t++)
            for (long i = OC; i < R; i++) {
                float v = dq[((long)b * s.T + t) * R + i];
                if (t >= t0 && v != 0.0f) zero = 0;
                if (t < t0 && v != 0.0f) nonzero_before++;
            }
    check(zero && nonzero_before > 0, "causal: no gradient flows to future k/v",
          "dk/dv of tokens >= %d all zero; %d earlier entries nonzero", t0, nonzero_before);
    free(qkv);
    free(qkv2);
    free(o1);
    free(o2);
    free(l1);
    free(l2);
    free(dout);
    free(dsc);
    free(dq);
}

static void test_determinism(void) {
    shape s = {2, 200, 6, 2, 64};
    const long R = (long)(s.NH + 2 * s.NKV) * s.hd, OC = (long)s.NH * s.hd, N = (long)s.B * s.T;
    const long NL = (long)s.B * s.NH * s.T;
    float *qkv = frand(N * R, -1, 1), *dout = frand(N * OC, -1, 1);
    float *o[3], *l[3], *d[3], *dsc = falloc(NL);
    int nth[3] = {1, 2, 3};
    int saved = omp_get_max_threads();
    for (int k = 0; k < 3; k++) {
        o[k] = falloc(N * OC);
        l[k] = falloc(NL);
        d[k] = falloc(N * R);
        memset(d[k], 0, sizeof(float) * (size_t)(N * R));
        omp_set_num_threads(nth[k]);
        op_flash_attention_fwd(o[k], l[k], qkv, s.B, s.T, s.NH, s.NKV, s.hd);
        op_flash_attention_bwd(d[k], dsc, dout, qkv, o[k], l[k], s.B, s.T, s.NH, s.NKV, s.hd);
    }
    omp_set_num_threads(saved);
    int same = 1;
    for (int k = 1; k < 3; k++) {
        if (memcmp(o[0], o[k], sizeof(float) * (size_t)(N * OC))) same = 0;
        if (memcmp(l[0], l[k], sizeof(float) * (size_t)NL)) same = 0;
        if (memcmp(d[0], d[k], sizeof(float) * (size_t)(N * R))) same = 0;
    }
    check(same, "deterministic: 1, 2, 3 threads bit-identical", "out, lse, dqkv");
    for (int k = 0; k < 3; k++) {
        free(o[k]);
        free(l[k]);
        free(d[k]);
    }
    free(qkv);
    free(dout);
    free(dsc);
}

/* ---- measured memory ---- */

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

/* The measurement runs in a fresh process: fork + exec of this program with "--rss-child IMPL"
 * (libgomp's thread pool does not survive fork(), so the child must be a fresh program).
 * The child touches the common buffers, warms the thread pool, takes its peak RSS, allocates the
 * implementation's own buffers, runs fwd + bwd once and prints the peak RSS increase (kB). */
static const shape MEM_SHAPE = {1, 2048, 4, 4, 64};

static int rss_child(int flash) {
    shape s = MEM_SHAPE;
    const long R = (long)(s.NH + 2 * s.NKV) * s.hd, OC = (long)s.NH * s.hd;
    const long N = (long)s.B * s.T, NL = (long)s.B * s.NH * s.T;
    float *qkv = frand(N * R, -1, 1), *dout = frand(N * OC, -1, 1);
    float *out = frand(N * OC, 0, 0), *dq = frand(N * R, 0, 0);
#pragma omp parallel
    {
        volatile float x = 0.0f;
        (void)x;
    }
    long before = max_rss_kb();
    if (flash) {
        float *lse = falloc(NL), *dsc = falloc(NL);
        op_flash_attention_fwd(out, lse, qkv, s.B, s.T, s.NH, s.NKV, s.hd);
        op_flash_attention_bwd(dq, dsc, dout, qkv, out, lse, s.B, s.T, s.NH, s.NKV, s.hd);
        free(lse);
        free(dsc);
    } else {
        float *att = falloc(NL * s.T), *datt = falloc(NL * s.T);
        op_attention_fwd(out, att, qkv, s.B, s.T, s.NH, s.NKV, s.hd);
        op_attention_bwd(dq, datt, dout, qkv, att, s.B, s.T, s.NH, s.NKV, s.hd);
        free(att);
        free(datt);
    }
    printf("%ld\n", max_rss_kb() - before);
    free(qkv);
    free(dout);
    free(out);
    free(dq);
    return 0;
}

static long rss_delta(int flash) {
    int fd[2];
    if (pipe(fd) != 0) return -1;
    fflush(stdout);
    pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
        close(fd[0]);
        dup2(fd[1], 1);
        execl("/proc/self/exe", "test_flash", "--rss-child", flash ? "flash" : "naive",
              (char *)NULL);
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

static void test_memory(void) {
    shape s = MEM_SHAPE;
    long naive = rss_delta(0), flash = rss_delta(1);
    long att_kb = 2L * s.B * s.NH * s.T * s.T * (long)sizeof(float) / 1024;
    long lse_kb = 2L * s.B * s.NH * s.T * (long)sizeof(float) / 1024;
    printf("     memory B=1 NH=4 T=2048 hd=64: measured peak-RSS increase naive %ld kB "
           "(att+datt = %ld kB), flash %ld kB (lse+D = %ld kB, tile scratch %zu B/thread x %d)\n",
           naive, att_kb, flash, lse_kb, op_flash_attention_scratch_bytes(s.hd, 1),
           omp_get_max_threads());
    check(naive >= att_kb * 9 / 10, "memory (measured): naive shows its att + datt",
          "%ld kB measured, %ld kB allocated", naive, att_kb);
    check(
        naive > 0 && flash >= 0 &&
                (double)
                    flash<0.10 * (double)naive, "memory (measured): flash < 10% of naive at T=2048",
                          "flash %ld kB vs naive %ld kB (%.2f%%)", flash, naive, naive> 0
            ? 100.0 * (double)flash / (double)naive
            : 0.0);
}

int main(int argc, char **argv) {
    if (argc == 3 && !strcmp(argv[1], "--rss-child")) return rss_child(!strcmp(argv[2], "flash"));
    test_memory(); /* first, while this process is small */
    shape shapes[] = {
        {2, 1, 4, 4, 64},    /* T = 1 */
        {1, 7, 2, 2, 64},    /* T = 7 */
        {2, 100, 6, 2, 64},  /* T not a multiple of the tile, GQA */
        {1, 256, 4, 4, 64},  /* regular: 4 full tiles */
        {1, 130, 6, 2, 128}, /* hd 128 */
        {2, 77, 6, 2, 24},   /* odd head dim */
        {1, 70, 3, 1, 200},  /* hd > 128: 32-row tiles, 64+64+64+8 dims */
        {1, 33, 4, 2, 5},    /* tiny head dim */
        {3, 65, 2, 1, 17},
    };
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
        compare_shape(shapes[i], 1.0f, "flash=naive");
    compare_shape((shape){1, 96, 4, 2, 64}, 30.0f, "huge scores");
    test_accumulates();
    test_causality();
    test_determinism();
    printf("%d passed, %d failed\n", g_pass, g_fail);
    return g_fail ? 1 : 0;
}
