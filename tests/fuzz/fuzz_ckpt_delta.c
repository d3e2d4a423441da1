/* fuzz_ckpt_delta.c — libFuzzer target for v2180 incremental checkpoints (runtime/ckpt/
 * ckpt_delta.c, reached through the loader as a resume does): one input cut at FZ_SEP into the
 * delta step's state.json, model.safetensors.zdelta, optimizer.safetensors.zdelta, and its full
 * base's model.safetensors, optimizer.safetensors, state.json. The delta records' checksums are
 * fixed up (fuzz_ckpt_fixup.h) so mutated headers and zstd frames reach the decoder. Any input
 * loads or is refused with "where: what — how to fix". Seeds: hyp_ckpt_save_inc's deltas. */
#include "fuzz_util.h"

#include "ckpt.h"
#include "ckpt_delta.h"
#include "fuzz_ckpt_fixup.h"
#include "fuzz_ckpt_model.h"

static const char *const NAMES[] = {"step_00000002/state.json", "step_00000002/model.safetensors.zdelta",
                                    "step_00000002/optimizer.safetensors.zdelta", "step_00000001/model.safetensors",
                                    "step_00000001/optimizer.safetensors", "step_00000001/state.json"};
#define NN ((int)(sizeof NAMES / sizeof *NAMES))
static const char *const DIRS[] = {"ck", "ck/step_00000001", "ck/step_00000002", NULL};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    size_t len[FZ_MAX_PARTS];
    fz_unpack(data, size, DIRS, NAMES, NN, len);
    char dir[600], step[600];
    fz_path(dir, sizeof dir, "ck");
    fz_path(step, sizeof step, "ck/step_00000002");
    fz_fix_state(step, 0);

    fz_ck_model m;
    fz_ck_model_init(&m);
    hyp_ckpt_state st;
    hyp_err e = {{0}};
    fz_check(hyp_ckpt_load(dir, "step_00000002", m.params, m.state_ptr, FZ_CK_STATES, FZ_CK_N, FZ_CK_HASH, &st, &e), &e, 0);
    char out[4096];
    e.msg[0] = 0;
    int rc = hyp_ckpt_delta_restore(step, out, sizeof out, &e);
    fz_check(rc, &e, 0);
    if (!rc) hyp_ckpt_delta_cleanup(out);
    char base[64];
    hyp_ckpt_delta_base(step, base, sizeof base);
    return 0;
}
