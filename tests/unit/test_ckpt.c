/* test_ckpt.c — checkpoints: bit-exact round trip of weights, AdamW moments and state; corrupt,
 * truncated and mismatched checkpoints refused before the caller's buffers change; `latest`
 * semantics; keep-last-K; and crashes (leftover temp dirs, a step dir without a `latest`
 * update) that must not break the next save or load. Auxiliary tensors (FP8 scaling state,
 * F32 + I64) and sharded checkpoints (v2181: two ranks' slices assembled on load; a corrupt
 * shard or ranges that do not tile a tensor refused). */
#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckpt.h"
#include "rng.h"
#include "safetensors.h"

#include "hyp_test.h"

static char g_dir[256];


static int exists(const char *fmt, const char *a, const char *b) {
    char p[2048];
    snprintf(p, sizeof p, fmt, a, b);
    struct stat st;
    return stat(p, &st) == 0;
}

static char *read_text(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    static char buf[4096];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = 0;
    fclose(f);
    return buf;
}

/* A small model: three parameters with their AdamW moments. */
enum { NT = 3 };
typedef struct {
    float *p[NT], *m[NT], *v[NT];
    hyp_ckpt_tensor t[NT], tm[NT], tv[NT]; /* params, exp_avg, exp_avg_sq */
    char names[2][NT][64];
    hyp_ckpt_tensor *st[2];                /* the optimizer states: tm, tv */
    int ns;                                /* 2, or 0 for weights only */
} model;

static const char *const NAMES[NT] = {"transformer.wte.weight",
                                      "transformer.h.0.attn.c_attn.weight",
                                      "transformer.ln_f.bias"};
static const int64_t SHAPES[NT][2] = {{16, 8}, {24, 8}, {8, 0}};
static const int NDIM[NT] = {2, 2, 1};

static size_t numel(int i) {
    return (size_t)SHAPES[i][0] * (NDIM[i] == 2 ? (size_t)SHAPES[i][1] : 1);
}

static void model_init(model *M, uint64_t seed, int with_opt) {
    hyp_rng r;
    hyp_rng_seed(&r, seed);
    for (int i = 0; i < NT; i++) {
        size_t n = numel(i);
        M->p[i] = malloc(n * 4);
        M->m[i] = malloc(n * 4);
        M->v[i] = malloc(n * 4);
        hyp_rng_fill_normal(&r, M->p[i], n, 0, 0.02f);
        hyp_rng_fill_normal(&r, M->m[i], n, 0, 1e-3f);
        hyp_rng_fill_uniform(&r, M->v[i], n, 0, 1e-6f);
        snprintf(M->names[0][i], 64, "%s.exp_avg", NAMES[i]);
        snprintf(M->names[1][i], 64, "%s.exp_avg_sq", NAMES[i]);
        M->t[i] = (hyp_ckpt_tensor){.name = NAMES[i], .ndim = NDIM[i], .data = M->p[i]};
        M->tm[i] = (hyp_ckpt_tensor){.name = M->names[0][i], .ndim = NDIM[i], .data = M->m[i]};
        M->tv[i] = (hyp_ckpt_tensor){.name = M->names[1][i], .ndim = NDIM[i], .data = M->v[i]};
        for (int d = 0; d < 2; d++)
            M->t[i].shape[d] = M->tm[i].shape[d] = M->tv[i].shape[d] = SHAPES[i][d];
    }
    M->st[0] = M->tm, M->st[1] = M->tv;
    M->ns = with_opt ? 2 : 0;
}

/* save / load with the model's three tensor lists */
static int save(const char *dir, model *M, const hyp_ckpt_state *st, int keep, hyp_err *e) {
    return hyp_ckpt_save(dir, M->t, M->st, M->ns, NT, st, keep, e);
}
static int load(const char *dir, const char *step, model *M, const char *hash,
                hyp_ckpt_state *st, hyp_err *e) {
    return hyp_ckpt_load(dir, step, M->t, M->st, M->ns, NT, hash, st, e);
}

static void model_fill(model *M, float value) {
    for (int i = 0; i < NT; i++)
        for (size_t k = 0; k < numel(i); k++) M->p[i][k] = M->m[i][k] = M->v[i][k] = value;
}

static int model_equal(const model *a, const model *b) {
    for (int i = 0; i < NT; i++)
        if (memcmp(a->p[i], b->p[i], numel(i) * 4) || memcmp(a->m[i], b->m[i], numel(i) * 4) ||
            memcmp(a->v[i], b->v[i], numel(i) * 4))
            return 0;
    return 1;
}

static int model_all(const model *M, float value) {
    for (int i = 0; i < NT; i++)
        for (size_t k = 0; k < numel(i); k++)
            if (M->p[i][k] != value || M->m[i][k] != value || M->v[i][k] != value) return 0;
    return 1;
}

static void model_free(model *M) {
    for (int i = 0; i < NT; i++) {
        free(M->p[i]);
        free(M->m[i]);
        free(M->v[i]);
    }
}

static hyp_ckpt_state make_state(uint64_t step) {
    hyp_ckpt_state st;
    memset(&st, 0, sizeof st);
    st.step = step;
    st.tokens_seen = step * 4096;
    hyp_rng r;
    hyp_rng_seed(&r, 77 + step);
    hyp_rng_get_state(&r, st.rng);
    st.loader_epoch = 2;
    st.loader_position = 17 + step;
    snprintf(st.config_hash, sizeof st.config_hash, "sha256:abc123");
    snprintf(st.plan, sizeof st.plan, "tiny+adamw");
    return st;
}

static void flip_byte(const char *path, long offset_from_end) {
    int fd = open(path, O_RDWR);
    struct stat st;
    fstat(fd, &st);
    off_t off = st.st_size - offset_from_end;
    unsigned char c;
    if (pread(fd, &c, 1, off) == 1) {
        c ^= 0x40;
        if (pwrite(fd, &c, 1, off) != 1) perror("pwrite");
    }
    close(fd);
}

/* ---------------------------------------------------------------------------------------- */

static void test_round_trip(void) {
    char dir[512];
    snprintf(dir, sizeof dir, "%s/run1/ckpt", g_dir); /* parents do not exist yet */
    model A, B;
    model_init(&A, 1, 1);
    model_init(&B, 2, 1);
    hyp_ckpt_state st = make_state(123), got;
    memset(&got, 0, sizeof got);
    hyp_err e = {{0}};
    int rc = save(dir, &A, &st, 0, &e);
    CHECK(rc == HYP_OK, "saves a checkpoint, creating the directory (%s)", e.msg);
    CHECK(exists("%s/%s", dir, "step_00000123/model.safetensors") &&
              exists("%s/%s", dir, "step_00000123/optimizer.safetensors") &&
              exists("%s/%s", dir, "step_00000123/state.json"),
          "step_00000123/ holds model.safetensors, optimizer.safetensors, state.json");
    char p[1024];
    snprintf(p, sizeof p, "%s/latest", dir);
    const char *latest = read_text(p);
    CHECK(latest && !strcmp(latest, "step_00000123\n"), "latest says step_00000123");

    model_fill(&B, 0);
    rc = load(dir, NULL, &B, "sha256:abc123", &got, &e);
    CHECK(rc == HYP_OK, "loads it back through latest (%s)", e.msg);
    CHECK(model_equal(&A, &B), "weights, exp_avg and exp_avg_sq are bit-exact");
    char sd[1024];
    snprintf(sd, sizeof sd, "%s/step_00000123", dir);
    CHECK(got.step == 123 && got.tokens_seen == 123 * 4096 &&
              !memcmp(got.rng, st.rng, sizeof st.rng) && got.loader_epoch == 2 &&
              got.loader_position == 140 && !strcmp(got.config_hash, "sha256:abc123") &&
              !strcmp(got.plan, "tiny+adamw") && !strcmp(got.path, sd),
          "step, tokens_seen, RNG words, loader state, hash, plan round-trip; path = %s",
          got.path);
    model_fill(&B, 0);
    rc = load(dir, "step_00000123", &B, "sha256:abc123", &got, &e);
    CHECK(rc == HYP_OK && model_equal(&A, &B), "loads a step named explicitly (%s)", e.msg);
    rc = load(dir, "step_00000999", &B, "sha256:abc123", &got, &e);
    CHECK(rc == HYP_EINPUT && strstr(e.msg, "step_00000999"),
          "an explicit step that does not exist is refused (%s)", e.msg);
    rc = load(dir, "../x", &B, "sha256:abc123", &got, &e);
    CHECK(rc == HYP_EINPUT && strstr(e.msg, "not a step directory name"),
          "a step argument that is not a step name is refused (%s)", e.msg);

    snprintf(p, sizeof p, "%s/step_00000123", dir);
    model_fill(&B, 0);
    rc = load(p, NULL, &B, "sha256:abc123", &got, &e);
    CHECK(rc == HYP_OK && model_equal(&A, &B), "loads an explicit step directory (%s)", e.msg);
    rc = load(dir, NULL, &B, NULL, &got, &e);
    CHECK(rc == HYP_OK, "a NULL expected hash skips the plan check");

    /* model.safetensors is a plain HF-style file */
    snprintf(p, sizeof p, "%s/step_00000123/model.safetensors", dir);
    hyp_st_file *f = NULL;
    rc = hyp_st_open(p, &f, &e);
    const hyp_st_tensor *t = f ? hyp_st_find(f, "transformer.h.0.attn.c_attn.weight") : NULL;
    CHECK(rc == HYP_OK && hyp_st_count(f) == NT && t && t->dtype == HYP_ST_F32 &&
              t->shape[0] == 24 && t->shape[1] == 8 &&
              !strcmp(hyp_st_meta_find(f, "format"), "pt"),
          "model.safetensors: F32 tensors under the caller's names, metadata format=pt");
    hyp_st_close(f);
    snprintf(p, sizeof p, "%s/step_00000123/optimizer.safetensors", dir);
    rc = hyp_st_open(p, &f, &e);
    CHECK(rc == HYP_OK && hyp_st_count(f) == 2 * NT &&
              hyp_st_find(f, "transformer.wte.weight.exp_avg") &&
              hyp_st_find(f, "transformer.wte.weight.exp_avg_sq"),
          "optimizer.safetensors: <name>.exp_avg and <name>.exp_avg_sq");
    hyp_st_close(f);

    /* weights-only */
    char dir2[512];
    snprintf(dir2, sizeof dir2, "%s/weights-only", g_dir);
    model W;
    model_init(&W, 3, 0);
    rc = save(dir2, &W, &st, 0, &e);
    CHECK(rc == HYP_OK && !exists("%s/%s", dir2, "step_00000123/optimizer.safetensors"),
          "exp_avg = NULL saves weights only (no optimizer.safetensors)");
    model_fill(&B, 0);
    rc = load(dir2, NULL, &B, "sha256:abc123", &got, &e);
    CHECK(rc == HYP_EINPUT && strstr(e.msg, "no optimizer state") && model_all(&B, 0),
          "resuming optimizer state from a weights-only checkpoint is refused (%s)", e.msg);
    model_fill(&W, 0);
    rc = load(dir, NULL, &W, "sha256:abc123", &got, &e);
    CHECK(rc == HYP_OK && !memcmp(W.p[1], A.p[1], numel(1) * 4),
          "weights-only load from a full checkpoint reads just the weights");
    model_free(&W);

    /* caller bugs */
    hyp_ckpt_tensor *half[2] = {B.tm, NULL};
    rc = hyp_ckpt_save(dir2, B.t, half, 2, NT, &st, 0, &e);
    CHECK(rc == HYP_EINPUT && strstr(e.msg, "optimizer state 1 of 2 not given"),
          "m without v is refused (%s)", e.msg);
    B.tv[2].shape[0] = 9;
    rc = save(dir2, &B, &st, 0, &e);
    CHECK(rc == HYP_EINPUT && strstr(e.msg, "transformer.ln_f.bias.exp_avg_sq"),
          "a moment whose shape differs from its parameter is refused (%s)", e.msg);
    B.tv[2].shape[0] = 8;
    model_free(&A);
    model_free(&B);
}

/* Copies checkpoint DIR/step_00000123 of run1 into a fresh dir for damage tests. */
static void fresh_ckpt(const char *dir, model *A) {
    hyp_ckpt_state st = make_state(123);
    hyp_err e = {{0}};
    rm_rf(dir);
    if (save(dir, A, &st, 0, &e) != HYP_OK) printf("setup failed: %s\n", e.msg);
}

static void test_damage(void) {
    char dir[512], p[1024];
    snprintf(dir, sizeof dir, "%s/damage", g_dir);
    model A, B;
    model_init(&A, 10, 1);
    model_init(&B, 11, 1);
    hyp_ckpt_state got;
    hyp_err e = {{0}};

    fresh_ckpt(dir, &A);
    snprintf(p, sizeof p, "%s/step_00000123/model.safetensors", dir);
    flip_byte(p, 100); /* inside the data */
    model_fill(&B, 7);
    int rc = load(dir, NULL, &B, "sha256:abc123", &got, &e);
    CHECK(rc == HYP_EINPUT && strstr(e.msg, p) &&
              strstr(e.msg, "checksum mismatch — the file is corrupt; delete this checkpoint or "
                            "resume from an earlier one"),
          "a flipped data byte: checksum mismatch naming the file (%s)", e.msg);
    CHECK(model_all(&B, 7), "...and the caller's buffers are untouched");

    fresh_ckpt(dir, &A);
    flip_byte(p, 0 + (long)(16 * 8 + 24 * 8 + 8) * 4 + 20); /* inside the JSON header */
    rc = load(dir, NULL, &B, "sha256:abc123", &got, &e);
    CHECK(rc == HYP_EINPUT && strstr(e.msg, "checksum mismatch"),
          "a flipped header byte is also reported as a checksum mismatch (%s)", e.msg);

    fresh_ckpt(dir, &A);
    snprintf(p, sizeof p, "%s/step_00000123/optimizer.safetensors", dir);
    if (truncate(p, 1000) != 0) perror("truncate");
    rc = load(dir, NULL, &B, "sha256:abc123", &got, &e);
    CHECK(rc == HYP_EINPUT && strstr(e.msg, p) && strstr(e.msg, "truncated") &&
              model_all(&B, 7),
          "a truncated optimizer file is refused, buffers untouched (%s)", e.msg);

    fresh_ckpt(dir, &A);
    snprintf(p, sizeof p, "%s/step_00000123/model.safetensors", dir);
    unlink(p);
    rc = load(dir, NULL, &B, "sha256:abc123", &got, &e);
    CHECK(rc == HYP_EINPUT && strstr(e.msg, p), "a missing model file is refused (%s)", e.msg);

    fresh_ckpt(dir, &A);
    snprintf(p, sizeof p, "%s/step_00000123/state.json", dir);
    FILE *f = fopen(p, "w");
    fputs("{\"format\": \"hyperion-checkpoint\", \"format_ver", f);
    fclose(f);
    rc = load(dir, NULL, &B, "sha256:abc123", &got, &e);
    CHECK(rc == HYP_EINPUT && strstr(e.msg, p) && strstr(e.msg, "not valid JSON"),
          "a torn state.json is refused (%s)", e.msg);

    /* mismatches against the caller's model */
    fresh_ckpt(dir, &A);
    B.t[1].shape[0] = B.tm[1].shape[0] = B.tv[1].shape[0] = 12;
    B.t[1].shape[1] = B.tm[1].shape[1] = B.tv[1].shape[1] = 16;
    rc = load(dir, NULL, &B, "sha256:abc123", &got, &e);
    CHECK(rc == HYP_EINPUT && strstr(e.msg, "'transformer.h.0.attn.c_attn.weight'") &&
              strstr(e.msg, "[24, 8]") && strstr(e.msg, "[12, 16]") && model_all(&B, 7),
          "a shape mismatch names the tensor and both shapes (%s)", e.msg);
    B.t[1].shape[0] = B.tm[1].shape[0] = B.tv[1].shape[0] = 24;
    B.t[1].shape[1] = B.tm[1].shape[1] = B.tv[1].shape[1] = 8;

    rc = load(dir, NULL, &B, "sha256:def456", &got, &e);
    CHECK(rc == HYP_EINPUT && strstr(e.msg, "sha256:abc123") && strstr(e.msg, "tiny+adamw") &&
              strstr(e.msg, "sha256:def456") && model_all(&B, 7),
          "a config_hash mismatch says which plan wrote it (%s)", e.msg);

    B.t[2].name = "transformer.h.1.mlp.c_fc.bias";
    rc = load(dir, NULL, &B, "sha256:abc123", &got, &e);
    CHECK(rc == HYP_EINPUT && strstr(e.msg, "'transformer.h.1.mlp.c_fc.bias' is missing") &&
              model_all(&B, 7),
          "a tensor the model has but the checkpoint lacks is refused (%s)", e.msg);
    B.t[2].name = NAMES[2];

    rc = hyp_ckpt_load(dir, NULL, B.t, B.st, B.ns, NT - 1, "sha256:abc123", &got, &e);
    CHECK(rc == HYP_EINPUT && strstr(e.msg, "transformer.ln_f.bias") &&
              strstr(e.msg, "does not have"),
          "a tensor the checkpoint has but the model lacks is refused (%s)", e.msg);

    rc = load(dir, NULL, &B, "sha256:abc123", &got, &e);
    CHECK(rc == HYP_OK && model_equal(&A, &B), "the undamaged checkpoint still loads");
    model_free(&A);
    model_free(&B);
}

static void test_latest_and_keep(void) {
    char dir[512], p[1024];
    snprintf(dir, sizeof dir, "%s/latest", g_dir);
    model A, B;
    model_init(&A, 20, 1);
    model_init(&B, 21, 1);
    hyp_ckpt_state st, got;
    hyp_err e = {{0}};
    char out[2048];

    int rc = hyp_ckpt_latest(dir, out, sizeof out, &e);
    CHECK(rc == HYP_OK && out[0] == 0, "no checkpoint dir yet: latest is \"\" (a fresh run)");
    rc = load(dir, NULL, &B, "sha256:abc123", &got, &e);
    CHECK(rc == HYP_ENOCKPT && strstr(e.msg, dir) && strstr(e.msg, "no checkpoint yet"),
          "loading from a missing dir: HYP_ENOCKPT (%s)", e.msg);
    mkdir(dir, 0755);
    rc = load(dir, NULL, &B, "sha256:abc123", &got, &e);
    CHECK(rc == HYP_ENOCKPT, "loading from an empty dir: HYP_ENOCKPT");

    for (uint64_t s = 10; s <= 40; s += 10) {
        st = make_state(s);
        A.p[0][0] = (float)s; /* so each checkpoint is distinguishable */
        rc = save(dir, &A, &st, 2, &e);
        if (rc != HYP_OK) printf("save %llu failed: %s\n", (unsigned long long)s, e.msg);
    }
    rc = hyp_ckpt_latest(dir, out, sizeof out, &e);
    snprintf(p, sizeof p, "%s/step_00000040", dir);
    CHECK(rc == HYP_OK && !strcmp(out, p), "latest names the newest save (%s)", out);
    rc = load(dir, NULL, &B, "sha256:abc123", &got, &e);
    CHECK(rc == HYP_OK && got.step == 40 && B.p[0][0] == 40.0f, "load(DIR) loads step 40");
    CHECK(!exists("%s/%s", dir, "step_00000010") && !exists("%s/%s", dir, "step_00000020") &&
              exists("%s/%s", dir, "step_00000030") && exists("%s/%s", dir, "step_00000040"),
          "keep=2 leaves only the last two checkpoints (30, 40)");

    /* keep never deletes what latest names, even when an older step is saved last */
    st = make_state(5);
    rc = save(dir, &A, &st, 2, &e);
    CHECK(rc == HYP_OK && exists("%s/%s", dir, "step_00000005") &&
              hyp_ckpt_latest(dir, out, sizeof out, &e) == HYP_OK && strstr(out, "step_00000005"),
          "saving an older step (a resumed-from-earlier run) keeps it and points latest at it");

    /* keep counts recency: after resuming from step 5, the new run's saves are what stays */
    st = make_state(6);
    rc = save(dir, &A, &st, 2, &e);
    CHECK(rc == HYP_OK && exists("%s/%s", dir, "step_00000005") &&
              exists("%s/%s", dir, "step_00000006") && !exists("%s/%s", dir, "step_00000030") &&
              !exists("%s/%s", dir, "step_00000040"),
          "keep=2 keeps the two most recent saves (5, 6), not the highest steps (30, 40)");

    /* re-saving an existing step replaces it */
    st = make_state(6);
    A.p[0][0] = 606.0f;
    rc = save(dir, &A, &st, 0, &e);
    rc = rc == HYP_OK ? load(dir, NULL, &B, "sha256:abc123", &got, &e) : rc;
    CHECK(rc == HYP_OK && got.step == 6 && B.p[0][0] == 606.0f,
          "re-saving step 6 replaces the existing step_00000006 (%s)", e.msg);
    DIR *dd = opendir(dir);
    struct dirent *de;
    int stray = 0;
    while (dd && (de = readdir(dd)))
        if (de->d_name[0] == '.' && strcmp(de->d_name, ".") && strcmp(de->d_name, "..")) stray++;
    if (dd) closedir(dd);
    CHECK(stray == 0, "...leaving no temp or old directory behind");

    /* a latest that names a missing dir, or garbage */
    snprintf(p, sizeof p, "%s/latest", dir);
    FILE *f = fopen(p, "w");
    fputs("step_00000099\n", f);
    fclose(f);
    rc = load(dir, NULL, &B, "sha256:abc123", &got, &e);
    CHECK(rc == HYP_EINPUT && strstr(e.msg, "step_00000099") && strstr(e.msg, "does not exist"),
          "latest naming a missing step dir is refused (%s)", e.msg);
    f = fopen(p, "w");
    fputs("../../etc\n", f);
    fclose(f);
    rc = hyp_ckpt_latest(dir, out, sizeof out, &e);
    CHECK(rc == HYP_EINPUT && strstr(e.msg, "does not name a step directory"),
          "a malformed latest is refused (%s)", e.msg);
    model_free(&A);
    model_free(&B);
}

static void test_crash(void) {
    char dir[512], p[1024];
    snprintf(dir, sizeof dir, "%s/crash", g_dir);
    model A, B;
    model_init(&A, 30, 1);
    model_init(&B, 31, 1);
    hyp_ckpt_state st = make_state(50), got;
    hyp_err e = {{0}};
    int rc = save(dir, &A, &st, 0, &e);

    /* a save killed mid-way: a temp dir with a half-written file, and a half-written latest */
    snprintf(p, sizeof p, "%s/.tmp-step_00000060-Ab12Cd", dir);
    mkdir(p, 0755);
    snprintf(p, sizeof p, "%s/.tmp-step_00000060-Ab12Cd/model.safetensors.tmp-XyZ123", dir);
    FILE *f = fopen(p, "w");
    fputs("\x40\x00\x00\x00\x00\x00\x00\x00{\"a\":", f);
    fclose(f);
    snprintf(p, sizeof p, "%s/latest.tmp-QwErTy", dir);
    f = fopen(p, "w");
    fputs("step_0000", f);
    fclose(f);
    rc = load(dir, NULL, &B, "sha256:abc123", &got, &e);
    CHECK(rc == HYP_OK && got.step == 50 && model_equal(&A, &B),
          "after a crash mid-save, load still gets the last complete checkpoint (%s)", e.msg);

    /* a save killed after the rename but before latest moved: latest still names step 50 */
    snprintf(p, sizeof p, "%s/step_00000055", dir);
    mkdir(p, 0755);
    rc = load(dir, NULL, &B, "sha256:abc123", &got, &e);
    CHECK(rc == HYP_OK && got.step == 50, "a step dir that latest does not name is ignored");

    st = make_state(60);
    A.p[2][3] = 60.0f;
    rc = save(dir, &A, &st, 0, &e);
    CHECK(rc == HYP_OK && !exists("%s/%s", dir, ".tmp-step_00000060-Ab12Cd"),
          "the next save succeeds and removes the stale temp dir (%s)", e.msg);
    rc = load(dir, NULL, &B, "sha256:abc123", &got, &e);
    CHECK(rc == HYP_OK && got.step == 60 && B.p[2][3] == 60.0f, "...and loads as step 60");

    /* a directory we did not write is never deleted by pruning */
    snprintf(p, sizeof p, "%s/step_00000001", dir);
    mkdir(p, 0755);
    snprintf(p, sizeof p, "%s/step_00000001/notes.txt", dir);
    f = fopen(p, "w");
    fputs("mine", f);
    fclose(f);
    st = make_state(70);
    rc = save(dir, &A, &st, 1, &e);
    CHECK(rc == HYP_OK && exists("%s/%s", dir, "step_00000001/notes.txt") &&
              !exists("%s/%s", dir, "step_00000060") && !exists("%s/%s", dir, "step_00000055"),
          "keep=1 prunes old checkpoints but not a directory holding foreign files");

    /* unwritable checkpoint dir */
    snprintf(p, sizeof p, "%s/step_00000070/state.json/sub", dir);
    rc = save(p, &A, &st, 0, &e);
    CHECK(rc == HYP_EINPUT && strstr(e.msg, "state.json"),
          "a checkpoint dir under a regular file is refused (%s)", e.msg);
    model_free(&A);
    model_free(&B);
}

/* Two "ranks": rank 0 owns the first 50 elements of tensor 0 and all of tensor 2, rank 1 the
 * rest of tensor 0 and all of tensor 1 (uneven, one rank without a slice of some tensors). */
static void make_slices(model *M, hyp_ckpt_slice sl[2][NT], int64_t rg[2][NT][2]) {
    int64_t cut[NT] = {50, 0, (int64_t)numel(2)};
    for (int i = 0; i < NT; i++) {
        int64_t n = (int64_t)numel(i);
        int64_t b[3] = {0, cut[i], n};
        for (int r = 0; r < 2; r++) {
            sl[r][i] = (hyp_ckpt_slice){b[r], b[r + 1], M->p[i] + b[r], {M->m[i] + b[r], M->v[i] + b[r]}};
            rg[r][i][0] = b[r], rg[r][i][1] = b[r + 1];
        }
    }
}

static int save_sharded(const char *dir, model *M, const hyp_ckpt_state *st, const hyp_ckpt_aux *aux, int n_aux,
                        int64_t rg[2][NT][2], hyp_err *e) {
    hyp_ckpt_slice sl[2][NT];
    int64_t own[2][NT][2];
    make_slices(M, sl, own);
    if (!rg) rg = own;
    char tmp[HYP_CKPT_PATH_MAX];
    hyp_ckpt_shard_sum sums[2];
    int rc = hyp_ckpt_shard_begin(dir, st, tmp, sizeof tmp, e);
    for (int r = 0; r < 2 && !rc; r++) rc = hyp_ckpt_shard_write(tmp, r, M->t, M->st, 2, NT, sl[r], st, &sums[r], e);
    if (rc) return rc;
    return hyp_ckpt_shard_commit(dir, tmp, M->t, NT, 2, 3, &rg[0][0][0], sums, aux, n_aux, st, 0, e);
}

static void test_shards_and_aux(void) {
    char dir[512], p[1024];
    snprintf(dir, sizeof dir, "%s/shards", g_dir);
    model A, B;
    model_init(&A, 11, 1);
    model_init(&B, 12, 1);
    float hist[2][3] = {{1.5f, 2.25f, 0}, {3, 4, 5}}, hist2[2][3] = {{0}};
    int64_t cnt[2][3] = {{7, 1LL << 40, -3}, {0, 1, 2}}, cnt2[2][3] = {{0}};
    hyp_ckpt_aux aux[2] = {{"fp8.amax_history", HYP_ST_F32, hist, 2, {2, 3, 0, 0}},
                           {"fp8.counters", HYP_ST_I64, cnt, 2, {2, 3, 0, 0}}};
    hyp_ckpt_aux aux2[2] = {aux[0], aux[1]};
    aux2[0].data = hist2, aux2[1].data = cnt2;
    hyp_ckpt_state st = make_state(40), got;
    hyp_err e = {{0}};
    int rc = save_sharded(dir, &A, &st, aux, 2, NULL, &e);
    CHECK(rc == HYP_OK && exists("%s/%s", dir, "step_00000040/shard_00001.safetensors") &&
              !exists("%s/%s", dir, "step_00000040/model.safetensors"),
          "two ranks write a sharded checkpoint (%s)", e.msg);
    rc = hyp_ckpt_load_aux(dir, NULL, B.t, B.st, 2, NT, aux2, 2, "sha256:abc123", &got, &e);
    CHECK(rc == HYP_OK && model_equal(&A, &B) && got.step == 40,
          "the loader assembles the full tensors from the shards, bit-exact (%s)", e.msg);
    CHECK(!memcmp(hist, hist2, sizeof hist) && !memcmp(cnt, cnt2, sizeof cnt),
          "auxiliary F32 and I64 tensors round-trip exactly (2^40 included)");

    /* a corrupt shard: refused, nothing written */
    model_fill(&B, 9.0f);
    snprintf(p, sizeof p, "%s/step_00000040/shard_00001.safetensors", dir);
    flip_byte(p, 5);
    rc = hyp_ckpt_load_aux(dir, NULL, B.t, B.st, 2, NT, aux2, 2, "sha256:abc123", &got, &e);
    CHECK(rc == HYP_EINPUT && strstr(e.msg, "shard_00001.safetensors: checksum mismatch") && model_all(&B, 9.0f),
          "a corrupt shard is refused before the caller's buffers change (%s)", e.msg);
    flip_byte(p, 5);
    unlink(p);
    rc = hyp_ckpt_load_aux(dir, NULL, B.t, B.st, 2, NT, aux2, 2, "sha256:abc123", &got, &e);
    CHECK(rc == HYP_EINPUT && strstr(e.msg, "shard_00001") && model_all(&B, 9.0f), "a missing shard is refused (%s)", e.msg);

    /* ranges that overlap do not tile the tensor */
    int64_t bad[2][NT][2];
    hyp_ckpt_slice sl[2][NT];
    make_slices(&A, sl, bad);
    bad[1][0][0] = 40;
    st = make_state(41);
    rc = save_sharded(dir, &A, &st, aux, 2, bad, &e);
    rc = rc ? rc : hyp_ckpt_load_aux(dir, NULL, B.t, B.st, 2, NT, aux2, 2, "sha256:abc123", &got, &e);
    CHECK(rc == HYP_EINPUT && strstr(e.msg, "do not tile") && model_all(&B, 9.0f), "overlapping shard ranges are refused (%s)", e.msg);

    /* a single-file checkpoint without train_state.safetensors when the trainer wants FP8 state */
    st = make_state(42);
    rc = save(dir, &A, &st, 0, &e);
    rc = rc ? rc : hyp_ckpt_load_aux(dir, NULL, B.t, B.st, 2, NT, aux2, 2, "sha256:abc123", &got, &e);
    CHECK(rc == HYP_EINPUT && strstr(e.msg, "train_state.safetensors") && model_all(&B, 9.0f),
          "FP8 state requested from a checkpoint without it is refused (%s)", e.msg);
    aux2[1].shape[1] = 4;
    st = make_state(43);
    rc = hyp_ckpt_save_aux(dir, A.t, A.st, 2, NT, aux, 2, &st, 0, &e);
    rc = rc ? rc : hyp_ckpt_load_aux(dir, NULL, B.t, B.st, 2, NT, aux2, 2, "sha256:abc123", &got, &e);
    CHECK(rc == HYP_EINPUT && strstr(e.msg, "fp8.counters") && model_all(&B, 9.0f),
          "an auxiliary tensor of another shape is refused (%s)", e.msg);

    /* an aborted sharded save leaves no temp dir and does not move latest */
    char tmp[HYP_CKPT_PATH_MAX];
    st = make_state(44);
    rc = hyp_ckpt_shard_begin(dir, &st, tmp, sizeof tmp, &e);
    hyp_ckpt_shard_abort(tmp);
    char out[HYP_CKPT_PATH_MAX];
    hyp_ckpt_latest(dir, out, sizeof out, &e);
    CHECK(rc == HYP_OK && access(tmp, F_OK) != 0 && strstr(out, "step_00000043"),
          "an aborted sharded save leaves nothing and latest unchanged");
    model_free(&A);
    model_free(&B);
}

int main(void) {
    snprintf(g_dir, sizeof g_dir, "/tmp/hyp_test_ckpt_XXXXXX");
    if (!mkdtemp(g_dir)) {
        perror("mkdtemp");
        return 1;
    }
    test_round_trip();
    test_damage();
    test_latest_and_keep();
    test_crash();
    test_shards_and_aux();
    rm_rf(g_dir);
    printf("%d passed, %d failed\n", g_pass, g_fail);
    return g_fail ? 1 : 0;
}
