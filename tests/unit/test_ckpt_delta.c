/* test_ckpt_delta.c — v2180 incremental checkpoints (runtime/ckpt/ckpt_delta.c): a delta against a
 * full checkpoint restores bit-exactly (weights and optimizer states), is smaller when few values
 * changed, is verified (a flipped byte or a missing base is refused with the caller's buffers
 * untouched), leaves no temp directory behind, and pruning keeps the base a kept delta needs. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "ckpt_delta.h"
#include "hyp_test.h"

enum { N0 = 64 * 1024, N1 = 300 };

static float w0[N0], w1[N1], m0[N0], m1[N1];
static hyp_ckpt_tensor tp[2] = {{"w", w0, 2, {256, 256, 0, 0}}, {"b", w1, 1, {N1, 0, 0, 0}}};
static hyp_ckpt_tensor tm[2] = {{"w.m", m0, 2, {256, 256, 0, 0}}, {"b.m", m1, 1, {N1, 0, 0, 0}}};

static int exists(const char *base, const char *rel) {
    char p[600];
    snprintf(p, sizeof p, "%s/%s", base, rel);
    struct stat st;
    return stat(p, &st) == 0;
}

static int count_tmp(const char *dir) {
    DIR *d = opendir(dir);
    int n = 0;
    struct dirent *de;
    while (d && (de = readdir(d))) n += !strncmp(de->d_name, ".tmp-", 5);
    if (d) closedir(d);
    return n;
}

static hyp_ckpt_state state(uint64_t step) {
    hyp_ckpt_state st = {.step = step};
    snprintf(st.config_hash, sizeof st.config_hash, "h");
    return st;
}

int main(void) {
    char dir[] = "/tmp/hyp-ckpt-delta-XXXXXX";
    if (!mkdtemp(dir)) return 1;
    hyp_ckpt_tensor *ts[1] = {tm};
    hyp_err e = {{0}};
    for (int i = 0; i < N0; i++) w0[i] = 0.02f * (float)((i * 7919) % 1000 - 500) / 500.0f, m0[i] = 1e-3f * (float)(i % 97);
    for (int i = 0; i < N1; i++) w1[i] = (float)i, m1[i] = -(float)i;
    hyp_ckpt_state st1 = state(1), st2 = state(2), st3 = state(3), st4 = state(4);
    CHECK(hyp_ckpt_save_inc(dir, tp, ts, 1, 2, NULL, 0, &st1, 0, NULL, NULL, &e) == HYP_OK, "full step 1");
    /* a small step: 10% of the weights move a little, every moment changes */
    for (int i = 0; i < N0; i += 10) w0[i] *= 1.0001f;
    for (int i = 0; i < N0; i++) m0[i] *= 0.999f;
    w1[5] = 42;
    float want0[N0], want1[N1], wantm[N0];
    memcpy(want0, w0, sizeof w0), memcpy(want1, w1, sizeof w1), memcpy(wantm, m0, sizeof m0);
    hyp_ckpt_delta_stats ds;
    CHECK(hyp_ckpt_save_inc(dir, tp, ts, 1, 2, NULL, 0, &st2, 0, "step_00000001", &ds, &e) == HYP_OK, "v2180 delta step 2: %s", e.msg);
    printf("delta of step 2: %llu bytes for %llu full (ratio %.3f)\n", (unsigned long long)ds.delta_bytes,
           (unsigned long long)ds.full_bytes, (double)ds.delta_bytes / (double)ds.full_bytes);
    CHECK(ds.delta_bytes > 0 && ds.delta_bytes < ds.full_bytes / 2, "v2180 the delta is less than half the full files");
    CHECK(exists(dir, "step_00000002/model.safetensors.zdelta") && !exists(dir, "step_00000002/model.safetensors") &&
              exists(dir, "step_00000002/optimizer.safetensors.zdelta"), "step 2 holds deltas, not full files");
    memset(w0, 0, sizeof w0), memset(w1, 0, sizeof w1), memset(m0, 0, sizeof m0);
    hyp_ckpt_state got;
    CHECK(hyp_ckpt_load(dir, NULL, tp, ts, 1, 2, "h", &got, &e) == HYP_OK, "load latest (the delta): %s", e.msg);
    CHECK(!memcmp(w0, want0, sizeof w0) && !memcmp(w1, want1, sizeof w1) && !memcmp(m0, wantm, sizeof m0),
          "v2180 restore is bit-exact");
    CHECK(got.step == 2 && strstr(got.path, "step_00000002"), "state and path of the delta step (%s)", got.path);
    CHECK(count_tmp(dir) == 0, "no restore temp dir left");
    /* corruption: a flipped byte in the delta */
    char p[600];
    snprintf(p, sizeof p, "%s/step_00000002/model.safetensors.zdelta", dir);
    FILE *f = fopen(p, "r+b");
    if (f) {
        fseek(f, 40, SEEK_SET);
        int c = fgetc(f);
        fseek(f, 40, SEEK_SET);
        fputc(c ^ 0x55, f);
        fclose(f);
    }
    w0[0] = 123;
    CHECK(hyp_ckpt_load(dir, NULL, tp, ts, 1, 2, "h", NULL, &e) == HYP_EINPUT && strstr(e.msg, "corrupt") && w0[0] == 123,
          "a flipped byte refused, buffers untouched: %s", e.msg);
    CHECK(count_tmp(dir) == 0, "no temp dir left after a refused restore");
    /* pruning keeps the base of a kept delta: full 3, delta 4 on it, keep 1 */
    CHECK(hyp_ckpt_save_inc(dir, tp, ts, 1, 2, NULL, 0, &st3, 0, NULL, NULL, &e) == HYP_OK, "full step 3");
    CHECK(hyp_ckpt_save_inc(dir, tp, ts, 1, 2, NULL, 0, &st4, 1, "step_00000003", NULL, &e) == HYP_OK, "delta step 4, keep 1");
    CHECK(exists(dir, "step_00000004") && exists(dir, "step_00000003") && !exists(dir, "step_00000002") &&
              !exists(dir, "step_00000001"), "keep 1: step 4 and its base 3 stay, 1 and 2 go");
    /* a missing base */
    snprintf(p, sizeof p, "%s/step_00000003/model.safetensors", dir);
    remove(p);
    snprintf(p, sizeof p, "%s/step_00000003/optimizer.safetensors", dir);
    remove(p);
    snprintf(p, sizeof p, "%s/step_00000003/state.json", dir);
    remove(p);
    snprintf(p, sizeof p, "%s/step_00000003", dir);
    rmdir(p);
    CHECK(hyp_ckpt_load(dir, NULL, tp, ts, 1, 2, "h", NULL, &e) == HYP_EINPUT && strstr(e.msg, "base"), "missing base refused: %s", e.msg);
    CHECK(hyp_ckpt_delta_make(dir, "step_00000004", "step_00000004", 3, NULL, &e) == HYP_EINPUT, "no delta against itself");
    rm_rf(dir);
    return hyp_test_finish();
}
