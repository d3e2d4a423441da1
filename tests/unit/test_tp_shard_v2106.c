/* test_tp_shard_v2106.c — v2106 tensor parallelism below the trainer: the plan's tp section (core/plan_tp.c)
 * loads onto the parameters (degree, split dim, blocks) and each damaged variant of it is refused
 * with HYP_EINPUT naming the field; exec_tp_slice takes a rank's rows of each q/k/v block of a fused
 * QKV weight and its input-dimension columns of a row-parallel weight (checked against an index
 * formula written independently); exec_init_params_tp gives each tp rank exactly (bit for bit, E0:
 * the same random stream and copies) the slice of the weights the np=1 trainer draws; allreduce_tp
 * adds the bias once after the sum (a world of one rank: the sum is the identity) and, run without
 * a tp group, fails with a message instead of training half a model; the tp gradient norm counts
 * every tensor once on one rank. The np=2 / np=4 training runs: tests/gen/test_tp_train_v2106.sh. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coll.h"
#include "exec.h"
#include "ops_cpu.h"
#include "plan.h"

#include "hyp_test.h"

static char g_tmp[512];

static char *slurp(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = malloc((size_t)n + 1);
    if (s && fread(s, 1, (size_t)n, f) != (size_t)n) {
        free(s);
        s = NULL;
    }
    if (s) s[n] = 0;
    fclose(f);
    return s;
}

static int gen(const char *sel, const char *dir) {
    char cmd[2048];
    snprintf(cmd, sizeof cmd,
             "cd %s && %s/generator/gen specs/v2500.yaml --enable %s --model tiny --target cpu --batch 2 --seq 16 -o %s/%s >/dev/null 2>&1",
             HYP_SOURCE_DIR, HYP_BINARY_DIR, sel, g_tmp, dir);
    return system(cmd);
}

static const plan_param *param(const plan_t *p, const char *name) {
    for (int i = 0; i < p->n_params_t; i++)
        if (!strcmp(p->params[i].name, name)) return &p->params[i];
    return NULL;
}

/* The tp plan's text with one edit of tp.params[0] (or of the root with edit_root), loaded. */
typedef void (*edit_fn)(cJSON *root, cJSON *p0);
static void expect_refusal(const char *text, const char *name, edit_fn edit, const char *want) {
    cJSON *r = cJSON_Parse(text);
    cJSON *p0 = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(r, "tp"), "params"), 0);
    edit(r, p0);
    char path[700];
    snprintf(path, sizeof path, "%s/bad.json", g_tmp);
    char *s = cJSON_Print(r);
    FILE *f = fopen(path, "wb");
    if (f) fwrite(s, 1, strlen(s), f), fclose(f);
    free(s);
    cJSON_Delete(r);
    plan_t p;
    hyp_err e = {{0}};
    int rc = plan_load(path, &p, &e);
    if (!rc) plan_free(&p);
    check(rc == HYP_EINPUT && strstr(e.msg, want) != NULL, name, "rc %d: %s", rc, e.msg);
}

static void ed_degree(cJSON *r, cJSON *p0) {
    (void)p0;
    cJSON_ReplaceItemInObjectCaseSensitive(cJSON_GetObjectItemCaseSensitive(r, "tp"), "degree", cJSON_CreateNumber(4));
}
static void ed_name(cJSON *r, cJSON *p0) {
    (void)r;
    cJSON_ReplaceItemInObjectCaseSensitive(p0, "name", cJSON_CreateString("transformer.h.0.attn.nope"));
}
static void ed_odd_block(cJSON *r, cJSON *p0) { /* a block length the degree does not divide */
    (void)r;
    cJSON *b = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(p0, "blocks"), 0);
    cJSON_ReplaceItemInArray(b, 1, cJSON_CreateNumber(127));
}
static void ed_overlap(cJSON *r, cJSON *p0) { /* the second block starts inside the first */
    (void)r;
    cJSON *b = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(p0, "blocks"), 1);
    cJSON_ReplaceItemInArray(b, 0, cJSON_CreateNumber(64));
}
static void ed_full_other_dim(cJSON *r, cJSON *p0) { /* the unsplit dimension differs from the local one */
    (void)r;
    cJSON_ReplaceItemInArray(cJSON_GetObjectItemCaseSensitive(p0, "full_shape"), 1, cJSON_CreateNumber(256));
}
static void ed_one_block(cJSON *r, cJSON *p0) { /* blocks whose 1/degree is not the local rows */
    (void)r;
    cJSON *bl = cJSON_GetObjectItemCaseSensitive(p0, "blocks");
    cJSON_DeleteItemFromArray(bl, 2);
}
static void ed_no_section(cJSON *r, cJSON *p0) {
    (void)p0;
    cJSON_DeleteItemFromObjectCaseSensitive(r, "tp");
}
static void ed_no_train_tp(cJSON *r, cJSON *p0) {
    (void)p0;
    cJSON_DeleteItemFromObjectCaseSensitive(cJSON_GetObjectItemCaseSensitive(r, "train"), "tp");
}

static void test_slices(const plan_t *p) {
    /* c_attn.weight: full [3*128, 128], blocks q, k, v of 128 rows; rank r takes rows 64r.. of each */
    const plan_param *qkv = param(p, "transformer.h.0.attn.c_attn.weight"), *proj = param(p, "transformer.h.0.attn.c_proj.weight");
    check(qkv && qkv->tp_nblk == 3 && qkv->tp_dim == 0 && qkv->tp_full[0] == 384 && qkv->shape[0] == 192, "v2106_plan_qkv_three_row_blocks", NULL);
    check(proj && proj->tp_nblk == 1 && proj->tp_dim == 1 && proj->tp_full[1] == 128 && proj->shape[1] == 64, "v2106_plan_proj_input_columns", NULL);
    check(param(p, "transformer.h.0.ln_1.weight")->tp_nblk == 0 && param(p, "transformer.wte.weight")->tp_nblk == 0, "v2106_plan_norms_and_embedding_replicated", NULL);
    if (!qkv || !proj || qkv->tp_nblk != 3 || proj->tp_nblk != 1) return;
    float *full = malloc(sizeof(float) * 384 * 128), *loc = malloc(sizeof(float) * 192 * 128);
    for (int i = 0; i < 384 * 128; i++) full[i] = (float)i;
    int ok = 1;
    for (int r = 0; r < 2; r++) {
        exec_tp_slice(qkv, 2, r, full, loc);
        for (int i = 0; i < 192; i++)
            for (int j = 0; j < 128; j++) ok &= loc[i * 128 + j] == full[(128 * (i / 64) + 64 * r + i % 64) * 128 + j];
    }
    check(ok, "v2106_slice_column_parallel_qkv_rows_of_each_block", NULL);
    ok = 1;
    for (int r = 0; r < 2; r++) {
        exec_tp_slice(proj, 2, r, full, loc); /* full [128, 128] */
        for (int i = 0; i < 128; i++)
            for (int j = 0; j < 64; j++) ok &= loc[i * 64 + j] == full[i * 128 + 64 * r + j];
    }
    check(ok, "v2106_slice_row_parallel_input_columns", NULL);
    free(full), free(loc);
}

static void test_init(const plan_t *one, const plan_t *tp) {
    exec_t x1, x2;
    hyp_err e = {{0}};
    memset(&x1, 0, sizeof x1), memset(&x2, 0, sizeof x2);
    int rc = exec_init(&x1, one, &e);
    if (!rc) rc = exec_init(&x2, tp, &e);
    check(rc == HYP_OK, "v2106_executors", "%s", e.msg);
    if (rc) return;
    exec_init_params(&x1, 1234);
    int same = 1, sharded = 0;
    float *loc = malloc(sizeof(float) * (size_t)tp->param_floats);
    for (int r = 0; r < 2; r++) {
        exec_init_params_tp(&x2, 1234, r);
        for (int i = 0; i < tp->n_params_t; i++) {
            const plan_param *a = &tp->params[i], *b = param(one, a->name);
            if (!b) {
                same = 0;
                continue;
            }
            const float *want = x1.params + b->offset;
            if (a->tp_nblk) exec_tp_slice(a, 2, r, want, loc), want = loc, sharded += r == 0;
            same &= !memcmp(x2.params + a->offset, want, sizeof(float) * (size_t)a->numel);
        }
    }
    check(same && sharded == 24, "v2106_init_each_rank_holds_its_slice_of_the_np1_weights", "%d sharded", sharded);

    /* allreduce_tp without a tp group: refused through the executor, nothing summed */
    float buf[4] = {1, 2, 3, 4}, bias[2] = {10, 20};
    exec_allreduce_tp(&x2, buf, bias, 4, 2);
    hyp_err te = {{0}};
    rc = exec_tp_status(&x2, &te);
    check(rc == HYP_EINPUT && strstr(te.msg, "without its tp group") && buf[0] == 1, "v2106_allreduce_tp_without_group_fails", "%s", te.msg);
    /* a one-rank group: the sum is the identity, the bias added once per row */
    hyp_coll *c = NULL;
    int argc = 0;
    char **argv = NULL;
    x2.tp_rc = 0;
    if (hyp_coll_init(&argc, &argv, &c, &e) == HYP_OK) {
        x2.tp = c;
        exec_allreduce_tp(&x2, buf, bias, 4, 2);
        check(exec_tp_status(&x2, &te) == HYP_OK && buf[0] == 11 && buf[1] == 22 && buf[2] == 13 && buf[3] == 24,
              "v2106_allreduce_tp_adds_bias_once", "%g %g %g %g", buf[0], buf[1], buf[2], buf[3]);
        for (int64_t i = 0; i < tp->param_floats; i++) x2.grads[i] = (float)((i % 7) - 3) * 0.5f;
        double ss = -1, want = 0;
        for (int i = 0; i < tp->n_params_t; i++) want += op_sumsq(x2.grads + tp->params[i].offset, tp->params[i].numel);
        rc = exec_tp_grad_sumsq(&x2, &ss, &e);
        check(rc == HYP_OK && ss == want, "v2106_grad_sumsq_one_rank_counts_each_tensor_once", "%g vs %g", ss, want);
        x2.tp = NULL;
        hyp_coll_finalize(c);
    }
    free(loc);
    exec_free(&x1), exec_free(&x2);
}

int main(void) {
    snprintf(g_tmp, sizeof g_tmp, "/tmp/hyp_test_tp_%d", (int)getpid());
    rm_rf(g_tmp);
    int rc = gen("adamw,clip,tp", "tp") | gen("adamw,clip", "one");
    check(rc == 0, "gen_tiny_tp_and_np1_plans", NULL);
    char path[700];
    plan_t tp, one;
    hyp_err e = {{0}};
    snprintf(path, sizeof path, "%s/tp/plan.json", g_tmp);
    char *text = slurp(path);
    int ok = !rc && text && plan_load(path, &tp, &e) == HYP_OK;
    check(ok && tp.tp == 2, "v2106_tp_plan_loads", "%s", e.msg);
    snprintf(path, sizeof path, "%s/one/plan.json", g_tmp);
    if (ok && (ok = plan_load(path, &one, &e) == HYP_OK)) {
        test_slices(&tp);
        test_init(&one, &tp);
        plan_free(&one);
    }
    if (ok) plan_free(&tp);
    if (text) {
        expect_refusal(text, "v2106_refuses_degree_mismatch", ed_degree, "has another degree");
        expect_refusal(text, "v2106_refuses_unknown_param", ed_name, "is no parameter of the plan");
        expect_refusal(text, "v2106_refuses_block_not_divisible", ed_odd_block, "tp.params[0].blocks[0]");
        expect_refusal(text, "v2106_refuses_overlapping_blocks", ed_overlap, "tp.params[0].blocks[1]");
        expect_refusal(text, "v2106_refuses_full_shape_unsplit_dim", ed_full_other_dim, "tp.params[0].full_shape[1]");
        expect_refusal(text, "v2106_refuses_blocks_not_local_shape", ed_one_block, "its local shape's dimension 0 is 192");
        expect_refusal(text, "v2106_refuses_train_tp_without_section", ed_no_section, "the 'tp' section is missing");
        expect_refusal(text, "v2106_refuses_section_without_train_tp", ed_no_train_tp, "a 'tp' section without train.tp");
    }
    free(text);
    rm_rf(g_tmp);
    return hyp_test_finish();
}
