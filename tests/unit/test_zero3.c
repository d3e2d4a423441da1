/* test_zero3.c — the ZeRO-3 executor (v2104 stage 3, runtime/exec.h exec_z3) at one rank against
 * the plain executor on the same plan: layer groups found from the parameter names (embeddings,
 * one per transformer layer, final norm / untied head), the op lists cut into one segment per
 * group use (a tied head gathers the embeddings again), only shards + two working slots
 * allocated, the same initial weights, the same loss, and gradients equal to the stage-0 ones.
 * The multi-rank behaviour (np=2, np=3 against np=1) is measured in tests/gen/test_dp.sh.
 *
 * Tolerances: the forward runs the same ops on the same values, so the loss is bit-identical;
 * gradients are reduce-scattered per segment into the shard, so a tensor used in two segments
 * (the tied embedding: lookup and LM head) sums its two parts in another order than stage 0's
 * in-place accumulation: 1e-6 relative to the largest gradient covers that last-bit rounding. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coll.h"
#include "exec.h"
#include "rng.h"

#include "hyp_test.h"
#include "optim.h"


static int gen_plan(const char *model, const char *dir) {
    char cmd[2048];
    snprintf(cmd, sizeof cmd,
             "cd %s && %s/generator/gen specs/v2500.yaml --enable adamw,dp,zero3 "
             "--model tests/fixtures/models/%s.yaml --target cpu --batch 2 --seq 8 -o %s >/dev/null",
             HYP_SOURCE_DIR, HYP_BINARY_DIR, model, dir);
    return system(cmd);
}

static void fill_batch(exec_t *x, uint64_t seed) {
    hyp_rng r;
    hyp_rng_seed(&r, seed);
    int n = x->B * x->T;
    for (int i = 0; i < n; i++) {
        x->tokens[i] = (int32_t)hyp_rng_below(&r, (uint64_t)x->p->V);
        x->targets[i] = (int32_t)hyp_rng_below(&r, (uint64_t)x->p->V);
    }
}

static void run_model(const char *model, int tied, hyp_coll *coll, const char *tmp) {
    char dir[600], path[700];
    snprintf(dir, sizeof dir, "%s/%s", tmp, model);
    snprintf(path, sizeof path, "%s/plan.json", dir);
    plan_t plan;
    hyp_err e = {{0}};
    if (gen_plan(model, dir) || plan_load(path, &plan, &e)) {
        CHECK(0, "%s: gen and load the zero3 plan (%s)", model, e.msg);
        return;
    }
    exec_t a, b;
    int rc = exec_init(&a, &plan, &e);
    rc = rc ? rc : exec_init_dp(&b, &plan, coll, 3, &e);
    CHECK(rc == HYP_OK, "%s: stage-0 and stage-3 executors (%s)", model, e.msg);
    if (rc) return;
    const hyp_z3_layout *z = &b.z3->L;
    CHECK(z->n_groups == plan.L + 2, "%s: %d layer groups = embeddings + %d layers + final (norm%s)", model,
          z->n_groups, plan.L, tied ? "" : ", head");
    /* forward: embeddings, each layer, final norm (+ untied head); a tied head uses the embeddings again */
    CHECK(z->n_fwd == plan.L + 2 + tied, "%s: forward cut into %d segments (want %d)", model, z->n_fwd, plan.L + 2 + tied);
    CHECK(z->fwd[0].group == 0 && z->fwd[z->n_fwd - 1].group == (tied ? 0 : plan.L + 1),
          "%s: forward starts with the embeddings and ends with %s", model, tied ? "the tied head (embeddings)" : "the final group");
    int tiled = z->start[0] == 0;
    for (int g = 0; g + 1 < z->n_groups; g++) tiled &= z->start[g] + z->len[g] <= z->start[g + 1];
    tiled &= z->start[z->n_groups - 1] + z->len[z->n_groups - 1] <= plan.param_floats;
    CHECK(tiled, "%s: the groups are disjoint arena ranges in order", model);
    CHECK(z->n_slots == 2 && b.bytes_params == 4 * (size_t)(b.shard + 2 * z->slot_cap) && z->slot_cap < plan.param_floats,
          "%s: stage-3 params = own shard + two working slots (prefetch 1) of the largest group (%zu B vs %zu B full)", model,
          b.bytes_params, a.bytes_params);

    exec_init_params(&a, 7);
    exec_init_params(&b, 7);
    float *full = calloc((size_t)plan.param_floats, sizeof(float));
    rc = exec_z3_gather_full(&b, b.params, full, &e);
    CHECK(rc == 0 && !memcmp(full, a.params, sizeof(float) * (size_t)plan.param_floats),
          "%s: the shards hold exactly the stage-0 initial weights", model);
    fill_batch(&a, 3);
    fill_batch(&b, 3);
    memset(a.grads, 0, sizeof(float) * (size_t)plan.param_floats);
    memset(b.gshard, 0, sizeof(float) * (size_t)b.shard);
    exec_forward(&a);
    exec_forward(&b);
    float la = exec_backward(&a, 1.0f / (float)(a.B * a.T)), lb = exec_backward(&b, 1.0f / (float)(b.B * b.T));
    CHECK(exec_z3_status(&b, &e) == HYP_OK && la == lb && isfinite(la), "%s: the same loss bit for bit (%.7f, %.7f)",
          model, la, lb);
    rc = exec_z3_gather_full(&b, b.gshard, full, &e);
    double worst = 0, big = 0;
    for (int64_t i = 0; i < plan.param_floats; i++) {
        double d = fabs((double)full[i] - a.grads[i]);
        if (d > worst || d != d) worst = d;
        if (fabs(a.grads[i]) > big) big = fabs(a.grads[i]);
    }
    CHECK(rc == 0 && big > 0 && worst <= 1e-6 * big, "%s: gradients equal stage 0's (max diff %.3g, max |g| %.3g)", model,
          worst, big);
    free(full);
    exec_free(&a);
    exec_free(&b);
    plan_free(&plan);
}

int main(int argc, char **argv) {
    hyp_coll *coll = NULL;
    hyp_err e = {{0}};
    if (hyp_coll_init(&argc, &argv, &coll, &e)) {
        printf("coll: %s\n", e.msg);
        return 1;
    }
    char tmp[] = "/tmp/hyp_test_zero3_XXXXXX";
    if (!mkdtemp(tmp)) return 1;
    exec_t x;
    plan_t none = {0};
    CHECK(exec_init_dp(&x, &none, NULL, 3, &e) == HYP_EINPUT && strstr(e.msg, "communicator"),
          "stage 3 without a communicator is refused (%s)", e.msg);
    run_model("ref-gpt2", 1, coll, tmp);
    run_model("ref-llama", 0, coll, tmp);
    rm_rf(tmp);
    hyp_coll_finalize(coll);
    return hyp_test_finish();
}
