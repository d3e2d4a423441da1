/* test_plan.c — plan format v2 (runtime/core/PLAN_FORMAT.md) through plan_load: a plan generated
 * by gen loads with its dtypes, byte placements and optimizer section as the file says, and every
 * damaged variant of it — a v1 plan, a missing or unknown dtype, a shape that does not multiply to
 * numel, a misaligned or out-of-arena byte
 * offset, an unknown op, a wrong arity, a dtype an op does not take, unknown or missing attributes,
 * optimizer groups that miss or repeat a parameter, an unknown optimizer kind or state dtype, a
 * truncated file — is refused with HYP_EINPUT and a message naming the field. Also checks the op
 * registry's own descriptors and that the cpu backend implements every registered op. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "exec.h"
#include "op_registry.h"
#include "optim.h"
#include "plan.h"

#include "hyp_test.h"

static char g_tmp[512], g_plan[700], g_bad[700];
static char *g_text; /* the generated plan.json */

static char *slurp_file(const char *path) {
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

static void write_file(const char *path, const char *s, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f) return;
    fwrite(s, 1, n, f);
    fclose(f);
}

/* Loads g_bad; checks HYP_EINPUT and that the message contains every one of the NULL-ended words. */
static void expect_refusal(const char *name, ...) {
    plan_t p;
    hyp_err e = {{0}};
    int rc = plan_load(g_bad, &p, &e);
    if (rc == HYP_OK) { /* what the trainer does next: the optimizer kind checks its own section */
        const hyp_optim_i *o;
        rc = hyp_optim_open(&p, &o, &e);
        plan_free(&p);
    }
    int named = 1;
    va_list ap;
    va_start(ap, name);
    for (const char *w; (w = va_arg(ap, const char *));) named &= strstr(e.msg, w) != NULL;
    va_end(ap);
    check(rc == HYP_EINPUT && named, name, "rc %d: %s", rc, e.msg);
}

/* A mutable copy of the generated plan; write_bad() saves it as g_bad and frees it. */
static cJSON *fresh(void) { return cJSON_Parse(g_text); }

static void write_bad(cJSON *root) {
    char *s = cJSON_Print(root);
    write_file(g_bad, s, strlen(s));
    free(s);
    cJSON_Delete(root);
}

/* The plan with field key's number written as the literal text num (cJSON prints inf as null). */
static void write_bad_number(const char *key, const char *num) {
    cJSON *r = fresh();
    cJSON_ReplaceItemInObjectCaseSensitive(r, key, cJSON_CreateNumber(987654321));
    char *s = cJSON_Print(r), *at = strstr(s, "987654321");
    size_t n = strlen(s), k = strlen(num);
    char *t = malloc(n + k + 1);
    memcpy(t, s, (size_t)(at - s));
    memcpy(t + (at - s), num, k);
    memcpy(t + (at - s) + k, at + 9, n - (size_t)(at - s) - 9 + 1);
    write_file(g_bad, t, strlen(t));
    free(s), free(t);
    cJSON_Delete(r);
}

static cJSON *at(cJSON *obj, const char *key) { return cJSON_GetObjectItemCaseSensitive(obj, key); }

/* Index of the buffer named name in root.buffers. */
static int buf_index(cJSON *root, const char *name) {
    int i = 0;
    cJSON *b;
    cJSON_ArrayForEach(b, at(root, "buffers")) {
        if (!strcmp(at(b, "name")->valuestring, name)) return i;
        i++;
    }
    return -1;
}

static void test_loads(void) {
    plan_t p;
    hyp_err e = {{0}};
    int rc = plan_load(g_plan, &p, &e);
    check(rc == HYP_OK, "v2_plan_loads", "%s", e.msg);
    if (rc) return;
    int ok = p.param_floats * 4 == p.param_bytes && p.act_floats * 4 >= p.act_bytes && p.act_bytes_peak_live > 0 &&
             p.act_bytes <= p.act_bytes_unplanned;
    check(ok, "v2_arena_bytes", "param %lld B, act %lld B (unplanned %lld, peak live %lld)", (long long)p.param_bytes,
          (long long)p.act_bytes, (long long)p.act_bytes_unplanned, (long long)p.act_bytes_peak_live);
    int dt_ok = 1;
    for (int i = 0; i < p.n_bufs; i++) {
        const plan_buf *b = &p.bufs[i];
        dt_ok &= b->dtype == (b->kind == BUF_TOKENS ? HYP_DT_I32 : HYP_DT_F32);
        dt_ok &= b->bytes == b->numel * (int64_t)hyp_dtype_size(b->dtype) && b->offset * 4 == b->offset_bytes;
    }
    check(dt_ok, "v2_buffer_dtypes_and_bytes", "%d buffers: tokens i32, the rest f32, offset = offset_bytes / size", p.n_bufs);
    const hyp_optim_cfg *o = &p.optim;
    int covered = 0, decay_ok = 1;
    for (int g = 0; g < o->n_groups; g++) covered += o->groups[g].n_params;
    for (int i = 0; i < p.n_params_t; i++)
        decay_ok &= p.params[i].decay == (o->groups[p.params[i].group].weight_decay > 0) &&
                    p.params[i].dtype == HYP_DT_F32 && p.params[i].offset * 4 == p.params[i].offset_bytes;
    check(!strcmp(o->kind, "adamw") && o->n_state == 2 && !strcmp(o->state_name[0], "m") &&
              !strcmp(o->state_name[1], "v") && o->state_dtype[0] == HYP_DT_F32 && o->state_dtype[1] == HYP_DT_F32 &&
              !o->shard_matrix && o->n_hyper == 3,
          "v2_optimizer_section", "kind %s, %d states, %d hyper, shard %s", o->kind, o->n_state, o->n_hyper,
          o->shard_matrix ? "matrix" : "elementwise");
    double hy[3] = {0};
    const char *hn[3] = {"beta1", "beta2", "eps"};
    for (int i = 0; i < o->n_hyper; i++)
        for (int k = 0; k < 3; k++)
            if (!strcmp(o->hyper_name[i], hn[k])) hy[k] = o->hyper[i];
    check(o->n_groups == 2 && covered == p.n_params_t && decay_ok && hy[0] == 0.9 && hy[1] == 0.95 && hy[2] == 1e-8,
          "v2_optimizer_groups", "%d groups over %d of %d params; beta1 %g beta2 %g eps %g", o->n_groups, covered,
          p.n_params_t, hy[0], hy[1], hy[2]);
    plan_free(&p);
}

static void test_refusals(void) {
    cJSON *r;
    /* a v1 plan */
    r = fresh();
    cJSON_ReplaceItemInObject(r, "version", cJSON_CreateNumber(1));
    write_bad(r);
    expect_refusal("refuses_version_1", "field 'version' = 1", "version 2", NULL);
    /* dtypes */
    r = fresh();
    int ix = buf_index(r, "l0.qkv");
    cJSON_DeleteItemFromObject(cJSON_GetArrayItem(at(r, "buffers"), ix), "dtype");
    write_bad(r);
    expect_refusal("refuses_missing_dtype", "missing field", "buffers[", "('l0.qkv').dtype", NULL);
    r = fresh();
    cJSON_ReplaceItemInObject(cJSON_GetArrayItem(at(r, "buffers"), ix), "dtype", cJSON_CreateString("f64"));
    write_bad(r);
    expect_refusal("refuses_unknown_dtype", "('l0.qkv').dtype", "\"f64\" is no dtype", NULL);
    r = fresh();
    cJSON_ReplaceItemInArray(at(cJSON_GetArrayItem(at(r, "buffers"), ix), "shape"), 0, cJSON_CreateString("T"));
    write_bad(r);
    expect_refusal("refuses_shape_numel_mismatch", "('l0.qkv').shape", "numel says", NULL);
    /* byte offsets */
    r = fresh();
    cJSON *b = cJSON_GetArrayItem(at(r, "buffers"), ix);
    cJSON_ReplaceItemInObject(b, "offset", cJSON_CreateNumber(at(b, "offset")->valuedouble + 2));
    write_bad(r);
    expect_refusal("refuses_misaligned_offset", "('l0.qkv').offset", "not a multiple of the f32 size", NULL);
    r = fresh();
    b = cJSON_GetArrayItem(at(r, "buffers"), ix);
    cJSON_ReplaceItemInObject(b, "offset", cJSON_CreateNumber(at(r, "act_bytes")->valuedouble - 64));
    write_bad(r);
    expect_refusal("refuses_offset_outside_arena", "('l0.qkv').offset", "outside the activation arena", NULL);
    r = fresh();
    b = cJSON_GetArrayItem(at(r, "params"), 3);
    cJSON_ReplaceItemInObject(b, "offset", cJSON_CreateNumber(at(r, "param_bytes")->valuedouble));
    write_bad(r);
    expect_refusal("refuses_param_outside_arena", "params[3]", ".offset", "outside the parameter arena", NULL);
    /* ops */
    r = fresh();
    cJSON_ReplaceItemInObject(cJSON_GetArrayItem(at(r, "forward"), 0), "op", cJSON_CreateString("conv2d"));
    write_bad(r);
    expect_refusal("refuses_unknown_op", "field 'forward[0].op'", "\"conv2d\"", NULL);
    r = fresh();
    int mm = 0;
    cJSON *op;
    cJSON_ArrayForEach(op, at(r, "forward")) {
        if (!strcmp(at(op, "op")->valuestring, "matmul_fwd")) break;
        mm++;
    }
    cJSON_DeleteItemFromArray(at(cJSON_GetArrayItem(at(r, "forward"), mm), "ins"), 2);
    write_bad(r);
    char want[64];
    snprintf(want, sizeof want, "forward[%d].ins", mm);
    expect_refusal("refuses_wrong_arity", want, "op 'matmul_fwd' has 2 inputs", "it takes 3", NULL);
    r = fresh();
    b = cJSON_GetArrayItem(at(r, "buffers"), ix);
    cJSON_ReplaceItemInObject(b, "dtype", cJSON_CreateString("e4m3")); /* activations: f32 or bf16 */
    cJSON_ReplaceItemInObject(b, "bytes", cJSON_CreateNumber(at(b, "numel")->valuedouble));
    write_bad(r);
    expect_refusal("refuses_dtype_the_op_does_not_take", "op 'matmul_fwd'", "'l0.qkv' of dtype e4m3", NULL);
    r = fresh();
    cJSON_AddNumberToObject(at(cJSON_GetArrayItem(at(r, "forward"), mm), "attrs"), "alpha", 2);
    write_bad(r);
    snprintf(want, sizeof want, "forward[%d].attrs.alpha", mm);
    expect_refusal("refuses_unknown_attribute", want, "takes no attribute", NULL);
    r = fresh();
    cJSON_DeleteItemFromObject(at(cJSON_GetArrayItem(at(r, "forward"), mm), "attrs"), "IC");
    write_bad(r);
    snprintf(want, sizeof want, "forward[%d].attrs.IC", mm);
    expect_refusal("refuses_missing_attribute", "missing field", want, NULL);
    /* optimizer */
    r = fresh();
    cJSON_DeleteItemFromObject(r, "optimizer");
    write_bad(r);
    expect_refusal("refuses_missing_optimizer", "missing field 'optimizer'", NULL);
    r = fresh();
    cJSON *groups = at(at(r, "optimizer"), "groups");
    cJSON *first = cJSON_GetArrayItem(at(cJSON_GetArrayItem(groups, 0), "params"), 0);
    char pname[256];
    snprintf(pname, sizeof pname, "'%s' is in no group", first->valuestring);
    cJSON_DeleteItemFromArray(at(cJSON_GetArrayItem(groups, 0), "params"), 0);
    write_bad(r);
    expect_refusal("refuses_param_in_no_group", "field 'optimizer.groups'", pname, NULL);
    r = fresh();
    groups = at(at(r, "optimizer"), "groups");
    first = cJSON_GetArrayItem(at(cJSON_GetArrayItem(groups, 0), "params"), 0);
    cJSON_AddItemToArray(at(cJSON_GetArrayItem(groups, 1), "params"), cJSON_CreateString(first->valuestring));
    write_bad(r);
    expect_refusal("refuses_param_in_two_groups", "optimizer.groups[1].params[", "already in group 'decay'", NULL);
    r = fresh();
    cJSON_ReplaceItemInObject(at(r, "optimizer"), "kind", cJSON_CreateString("sgdx"));
    write_bad(r);
    expect_refusal("refuses_unknown_optimizer_kind", "optimizer.kind 'sgdx' is not an optimizer this runtime has", NULL);
    r = fresh();
    cJSON_ReplaceItemInObject(cJSON_GetArrayItem(at(at(r, "optimizer"), "state"), 1), "dtype", cJSON_CreateString("f33"));
    write_bad(r);
    expect_refusal("refuses_unknown_state_dtype", "field 'optimizer.state[1].dtype'", "\"f33\"", NULL);
    r = fresh();
    cJSON_ReplaceItemInObject(cJSON_GetArrayItem(at(at(r, "optimizer"), "state"), 0), "dtype", cJSON_CreateString("bf16"));
    write_bad(r);
    expect_refusal("refuses_state_dtype_the_kind_does_not_keep", "optimizer.state[0] is 'm' bf16", "'adamw' keeps 'm' f32", NULL);
    r = fresh();
    cJSON_DeleteItemFromObject(at(at(r, "optimizer"), "hyper"), "beta2");
    write_bad(r);
    expect_refusal("refuses_missing_hyper", "AdamW needs optimizer.hyper.beta2", NULL);
    r = fresh();
    cJSON_AddNumberToObject(at(at(r, "optimizer"), "hyper"), "gamma", 0.5);
    write_bad(r);
    expect_refusal("refuses_unknown_hyper", "optimizer.hyper.gamma: AdamW takes no such hyper-parameter", NULL);
    /* v2177 plan.preempt */
    r = fresh();
    cJSON_AddNumberToObject(r, "preempt", 30);
    write_bad(r);
    expect_refusal("refuses_v2177_preempt_not_an_object", "field 'preempt' is not an object", NULL);
    r = fresh();
    cJSON *pe = cJSON_AddObjectToObject(r, "preempt");
    cJSON_AddBoolToObject(pe, "require_ckpt_dir", 1);
    cJSON_AddNumberToObject(pe, "grace_seconds", -1);
    write_bad(r);
    expect_refusal("refuses_v2177_negative_grace_seconds", "preempt", "grace_seconds", NULL);
    r = fresh();
    pe = cJSON_AddObjectToObject(r, "preempt");
    cJSON_AddNumberToObject(pe, "grace_seconds", 30);
    write_bad(r);
    expect_refusal("refuses_v2177_preempt_without_require_ckpt_dir", "field 'preempt.require_ckpt_dir' is not true", NULL);
    r = fresh();
    cJSON_ReplaceItemInObject(cJSON_GetArrayItem(at(r, "params"), 0), "group", cJSON_CreateString("no_decay"));
    write_bad(r);
    expect_refusal("refuses_param_group_mismatch", "params[0]", ".group", "optimizer group 'decay' lists it", NULL);
    /* v2161 plan.param_storage, v2163 plan.grad_accum */
    r = fresh();
    cJSON *ps = cJSON_AddObjectToObject(r, "param_storage");
    cJSON_AddStringToObject(ps, "dtype", "f16");
    cJSON_AddStringToObject(ps, "rounding", "stochastic");
    cJSON_AddNumberToObject(ps, "seed", 0);
    write_bad(r);
    expect_refusal("refuses_v2161_param_storage_f16", "param_storage", "bf16 parameters rounded", NULL);
    r = fresh();
    ps = cJSON_AddObjectToObject(r, "param_storage");
    cJSON_AddStringToObject(ps, "dtype", "bf16");
    cJSON_AddStringToObject(ps, "rounding", "stochastic");
    cJSON_AddNumberToObject(ps, "seed", -3);
    write_bad(r);
    expect_refusal("refuses_v2161_negative_seed", "param_storage.seed", "out of range", NULL);
    /* numbers past int64 (2.6e39) or infinite (1e999 parses to inf) are refused by their range
     * before any conversion (a cast of either to int64 is undefined; fuzz_plan found it) */
    write_bad_number("param_bytes", "2.6e39");
    expect_refusal("refuses_int_field_past_int64", "field 'param_bytes'", "out of range", NULL);
    write_bad_number("param_bytes", "1e999");
    expect_refusal("refuses_int_field_infinite", "field 'param_bytes'", "out of range", NULL);
    write_bad_number("param_bytes", "4096.5");
    expect_refusal("refuses_int_field_fraction", "field 'param_bytes'", "not a whole number", NULL);
    r = fresh();
    cJSON_AddObjectToObject(cJSON_AddObjectToObject(r, "grad_accum"), "dtype");
    write_bad(r);
    expect_refusal("refuses_v2163_grad_accum_dtype_not_a_string", "grad_accum", "dtype", NULL);
    r = fresh();
    cJSON_AddStringToObject(cJSON_AddObjectToObject(r, "grad_accum"), "dtype", "e4m3");
    write_bad(r);
    expect_refusal("refuses_v2163_grad_accum_e4m3", "grad_accum.dtype", "f32 or bf16", NULL);
    /* truncated */
    write_file(g_bad, g_text, strlen(g_text) / 2);
    expect_refusal("refuses_truncated_file", "not valid JSON at byte", "truncated", NULL);
}

int main(void) {
    hyp_err e = {{0}};
    int rc = hyp_op_registry_check(&e);
    check(rc == HYP_OK, "op_registry_descriptors_valid", "%d ops %s", hyp_op_count(), e.msg);
    int missing = 0;
    for (int id = 0; id < hyp_op_count(); id++)
        if (!exec_cpu_op(hyp_op_name(id))) {
            printf("  no cpu adapter: %s\n", hyp_op_name(id));
            missing++;
        }
    check(!missing, "every_registered_op_has_a_cpu_adapter", "%d missing", missing);
    snprintf(g_tmp, sizeof g_tmp, "/tmp/hyp_test_plan_%d", (int)getpid());
    rm_rf(g_tmp);
    snprintf(g_plan, sizeof g_plan, "%s/t/plan.json", g_tmp);
    snprintf(g_bad, sizeof g_bad, "%s/bad.json", g_tmp);
    char cmd[2048];
    snprintf(cmd, sizeof cmd,
             "cd %s && %s/generator/gen specs/v2500.yaml --enable adamw,clip,memory-planning --model tiny "
             "--batch 2 --seq 16 -o %s/t >/dev/null",
             HYP_SOURCE_DIR, HYP_BINARY_DIR, g_tmp);
    rc = system(cmd);
    check(rc == 0, "gen_tiny_plan", "%s", cmd);
    if (rc == 0 && (g_text = slurp_file(g_plan))) {
        test_loads();
        test_refusals();
    }
    free(g_text);
    rm_rf(g_tmp);
    return hyp_test_finish();
}
