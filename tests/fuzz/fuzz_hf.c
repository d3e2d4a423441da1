/* fuzz_hf.c — libFuzzer target for Hugging Face model directories as --init-from reads them
 * (runtime/ckpt/hf.c: config.json, model.safetensors or the sharded index and its shards), for
 * the plan of tests/fuzz/fuzz-tiny.yaml (fuzz-tiny.plan.json). One input cut at FZ_SEP into
 * config.json, model.safetensors, model.safetensors.index.json, model-00001-of-00002.safetensors,
 * model-00002-of-00002.safetensors. Any directory loads (every weight finite or not, but all
 * written) or is refused with "where: what — how to fix", leaving the weights untouched.
 * Seeds: directories hyp_hf_export wrote. */
#include "fuzz_util.h"

#include "hf.h"
#include "plan.h"

static const char *const NAMES[] = {"config.json", "model.safetensors", "model.safetensors.index.json",
                                    "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"};
#define NN ((int)(sizeof NAMES / sizeof *NAMES))

static plan_t g_plan;
static float *g_params, *g_ref;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    hyp_err e = {{0}};
    if (plan_load(HYP_SOURCE_DIR "/tests/fuzz/fuzz-tiny.plan.json", &g_plan, &e)) {
        fprintf(stderr, "fuzz_hf: %s\n", e.msg);
        abort();
    }
    g_params = calloc((size_t)g_plan.param_floats, sizeof(float));
    g_ref = calloc((size_t)g_plan.param_floats, sizeof(float));
    if (!g_params || !g_ref) abort();
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static const char *const DIRS[] = {"hf", NULL};
    size_t len[FZ_MAX_PARTS];
    fz_unpack(data, size, DIRS, NAMES, NN, len);
    char dir[600], what[256];
    fz_path(dir, sizeof dir, "hf");
    hyp_err e = {{0}};
    int rc = hyp_hf_init_from(dir, &g_plan, g_params, what, sizeof what, &e);
    fz_check(rc, &e, 0);
    if (rc && memcmp(g_params, g_ref, sizeof(float) * (size_t)g_plan.param_floats)) {
        fprintf(stderr, "fuzz: a refused directory (%s) changed the weights\n", e.msg);
        abort();
    }
    if (!rc) memset(g_params, 0, sizeof(float) * (size_t)g_plan.param_floats);
    return 0;
}
