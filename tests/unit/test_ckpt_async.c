/* test_ckpt_async.c — v2179 async checkpoints (runtime/ckpt/ckpt_async.c): three saves queued with
 * two in flight, the caller's tensors overwritten right after each call, give files byte-identical
 * to blocking saves of the same values (the snapshot is taken before the call returns), F32 and
 * I64 aux tensors included; `latest` names the newest; a failing background write is reported by
 * the next wait; the stall of a save with a free slot is measured (and far below the blocking
 * save's time for a few MB). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ckpt_async.h"
#include "hyp_test.h"
#include "safetensors.h"

enum { NT = 2, N0 = 256 * 1024, N1 = 1000 };

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int same_file(const char *a, const char *b) {
    FILE *fa = fopen(a, "rb"), *fb = fopen(b, "rb");
    int same = fa && fb;
    while (same) {
        int ca = fgetc(fa), cb = fgetc(fb);
        if (ca != cb) same = 0;
        if (ca == EOF || cb == EOF) break;
    }
    if (fa) fclose(fa);
    if (fb) fclose(fb);
    return same;
}

int main(void) {
    char base[] = "/tmp/hyp-ckpt-async-XXXXXX";
    if (!mkdtemp(base)) return 1;
    char da[300], db[300];
    snprintf(da, sizeof da, "%s/async", base);
    snprintf(db, sizeof db, "%s/block", base);
    float *p0 = malloc(sizeof(float) * N0), *p1 = malloc(sizeof(float) * N1);
    float *m0 = malloc(sizeof(float) * N0), *m1 = malloc(sizeof(float) * N1);
    float auxf[6];
    int64_t auxi[3];
    hyp_ckpt_tensor tp[NT] = {{"w", p0, 2, {512, 512, 0, 0}}, {"b", p1, 1, {N1, 0, 0, 0}}};
    hyp_ckpt_tensor tm[NT] = {{"w.m", m0, 2, {512, 512, 0, 0}}, {"b.m", m1, 1, {N1, 0, 0, 0}}};
    hyp_ckpt_tensor *ts[1] = {tm};
    hyp_ckpt_aux aux[2] = {{"fp8.scale", HYP_ST_F32, auxf, 2, {3, 2, 0, 0}}, {"fp8.counters", HYP_ST_I64, auxi, 1, {3, 0, 0, 0}}};
    hyp_ckpt_async *a = NULL;
    hyp_err e = {{0}};
    CHECK(hyp_ckpt_async_open(&a, 2, &e) == HYP_OK, "v2179 writer opens (2 in flight)");
    double stall_max = 0, t_async = 0, t_block = 0;
    for (int s = 1; s <= 3; s++) {
        for (int i = 0; i < N0; i++) p0[i] = (float)(i * s) * 1e-3f, m0[i] = (float)s / (float)(i + 1);
        for (int i = 0; i < N1; i++) p1[i] = (float)-i * (float)s, m1[i] = (float)i;
        for (int i = 0; i < 6; i++) auxf[i] = (float)(s + i);
        for (int i = 0; i < 3; i++) auxi[i] = (int64_t)s << 40 | i;
        hyp_ckpt_state st = {.step = (uint64_t)s * 10, .rng = {1, 2, 3, (uint64_t)s}};
        snprintf(st.config_hash, sizeof st.config_hash, "hash");
        double t0 = now_s();
        CHECK(hyp_ckpt_save_aux(db, tp, ts, 1, NT, aux, 2, &st, 0, &e) == HYP_OK, "blocking save %d", s);
        t_block += now_s() - t0;
        double stall = -1;
        t0 = now_s();
        CHECK(hyp_ckpt_async_save(a, da, tp, ts, 1, NT, aux, 2, &st, 0, &stall, &e) == HYP_OK && stall >= 0, "async save %d queued", s);
        t_async += now_s() - t0;
        if (stall > stall_max) stall_max = stall;
        /* the caller moves on at once: the queued save must not see this */
        memset(p0, 0xff, sizeof(float) * N0), memset(m1, 0, sizeof(float) * N1), auxi[0] = -1;
    }
    CHECK(hyp_ckpt_async_wait(a, &e) == HYP_OK, "every queued write finished");
    printf("blocking saves %.1f ms, async save calls %.1f ms (3 saves of %.1f MB)\n", 1e3 * t_block, 1e3 * t_async,
           (2.0 * (N0 + N1) * 4) / 1e6);
    CHECK(t_async < t_block, "v2179 the async calls hold the caller up less than blocking saves");
    const char *files[] = {"model.safetensors", "optimizer.safetensors", "train_state.safetensors"};
    for (int s = 1; s <= 3; s++)
        for (int f = 0; f < 3; f++) {
            char fa[400], fb[400];
            snprintf(fa, sizeof fa, "%s/step_%08d/%s", da, s * 10, files[f]);
            snprintf(fb, sizeof fb, "%s/step_%08d/%s", db, s * 10, files[f]);
            CHECK(same_file(fa, fb), "v2179 step %d %s byte-identical to the blocking save", s * 10, files[f]);
        }
    char lp[400];
    snprintf(lp, sizeof lp, "%s/latest", da);
    FILE *lf = fopen(lp, "r");
    char latest[64] = "";
    if (lf) {
        if (!fgets(latest, sizeof latest, lf)) latest[0] = 0;
        fclose(lf);
    }
    latest[strcspn(latest, "\n")] = 0;
    CHECK(!strcmp(latest, "step_00000030"), "latest names the newest (%s)", latest);
    /* a write that fails in the background: a file where the directory should be */
    char bad[400];
    snprintf(bad, sizeof bad, "%s/afile", base);
    FILE *bf = fopen(bad, "w");
    if (bf) fclose(bf);
    hyp_ckpt_state st = {.step = 1};
    snprintf(st.config_hash, sizeof st.config_hash, "hash");
    CHECK(hyp_ckpt_async_save(a, bad, tp, ts, 1, NT, NULL, 0, &st, 0, NULL, &e) == HYP_OK, "a doomed save is queued");
    memset(&e, 0, sizeof e);
    CHECK(hyp_ckpt_async_wait(a, &e) != HYP_OK && e.msg[0], "its failure comes back from wait: %s", e.msg);
    CHECK(hyp_ckpt_async_wait(a, &e) == HYP_OK, "reported once");
    hyp_ckpt_async_close(a);
    CHECK(hyp_ckpt_async_open(&a, 0, &e) == HYP_EINPUT && !a, "max_inflight 0 refused");
    free(p0), free(p1), free(m0), free(m1);
    rm_rf(base);
    return hyp_test_finish();
}
