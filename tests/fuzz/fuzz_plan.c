/* fuzz_plan.c — libFuzzer target for the plan loader (runtime/core/plan.c plan_load) and the
 * plan's post section (runtime/train/post_cfg.c): any bytes as plan.json load or are refused with
 * "plan.json: what — how to fix", never a crash, UB, leak or hang. Seeds: plans gen wrote
 * (tests/fuzz/corpus/plan). */
#include "fuzz_util.h"

#include "plan.h"
#include "post_cfg.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char path[600];
    fz_write("plan.json", data, size);
    fz_path(path, sizeof path, "plan.json");
    plan_t p;
    hyp_err e = {{0}};
    memset(&p, 0, sizeof p);
    int rc = plan_load(path, &p, &e);
    fz_check(rc, &e, 0);
    if (!rc) plan_free(&p);
    post_cfg c;
    e.msg[0] = 0;
    fz_check(post_cfg_load(path, &c, &e), &e, 0);
    return 0;
}
