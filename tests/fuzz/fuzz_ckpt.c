/* fuzz_ckpt.c — libFuzzer target for the checkpoint loader (runtime/ckpt/ckpt.c): a checkpoint
 * directory's files as one input cut at FZ_SEP (fuzz_util.h) — state.json, model.safetensors,
 * optimizer.safetensors, train_state.safetensors, shard_00000.safetensors,
 * shard_00001.safetensors, latest — loaded into the model of fuzz_ckpt_model.h with and without
 * optimizer state. Checksums are fixed up (fuzz_ckpt_fixup.h) so mutations reach the parsers. Any
 * input loads or is refused with "where: what — how to fix"; a failed load leaves the caller's
 * buffers untouched. Seeds: checkpoints hyp_ckpt_save_aux and the sharded writer made. */
#include "fuzz_util.h"

#include "ckpt.h"
#include "fuzz_ckpt_fixup.h"
#include "fuzz_ckpt_model.h"
#include "tokenizer.h"

static const char *const NAMES[] = {"step_00000007/state.json",
                                    "step_00000007/model.safetensors",
                                    "step_00000007/optimizer.safetensors",
                                    "step_00000007/train_state.safetensors",
                                    "step_00000007/shard_00000.safetensors",
                                    "step_00000007/shard_00001.safetensors",
                                    "latest"};
static const char *const DIRS[] = {"ck", "ck/step_00000007", NULL};
#define NN ((int)(sizeof NAMES / sizeof *NAMES))

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    size_t len[FZ_MAX_PARTS];
    int np = fz_unpack(data, size, DIRS, NAMES, NN, len);
    char dir[600], step[600];
    if (np < NN || !len[NN - 1]) fz_write("ck/latest", "step_00000007\n", 14);
    fz_path(dir, sizeof dir, "ck");
    fz_path(step, sizeof step, "ck/step_00000007");
    fz_fix_state(step, 1);

    fz_ck_model m, ref;
    fz_ck_model_init(&m);
    fz_ck_model_init(&ref);
    hyp_ckpt_state st;
    hyp_err e = {{0}};
    for (int mode = 0; mode < 3; mode++) {
        e.msg[0] = 0;
        int rc = mode == 0   ? hyp_ckpt_load_aux(dir, NULL, m.params, m.state_ptr, FZ_CK_STATES, FZ_CK_N, m.aux, FZ_CK_AUX,
                                                 FZ_CK_HASH, &st, &e)
                 : mode == 1 ? hyp_ckpt_load(dir, "step_00000007", m.params, NULL, 0, FZ_CK_N, NULL, &st, &e)
                             : hyp_ckpt_load(step, NULL, m.params, m.state_ptr, FZ_CK_STATES, FZ_CK_N, FZ_CK_HASH, &st, &e);
        fz_check(rc, &e, HYP_ENOCKPT);
        if (rc && memcmp(&m, &ref, offsetof(fz_ck_model, params))) {
            fprintf(stderr, "fuzz: a failed load (%s) changed the caller's tensors\n", e.msg);
            abort();
        }
        fz_ck_model_init(&m);
    }
    char out[4096];
    e.msg[0] = 0;
    fz_check(hyp_ckpt_latest(dir, out, sizeof out, &e), &e, 0);
    hyp_data_tok t = {.kind = "byte", .vocab = 256, .eot = -1};
    e.msg[0] = 0;
    fz_check(hyp_data_tok_check_init(step, &t, &e), &e, 0);
    return 0;
}
