/* test_comm_overlap_v2168.c — v2168's gradient buckets and the cpu trainer's helper threads on one
 * rank (the multi-rank sums are tests/gen/test_overlap_v2168.sh).
 *
 * The plan: `gen --enable adamw,dp,overlap --model tiny --target cpu --batch 2 --seq 32`.
 * - grad_buckets_make: the buckets tile the gradient arena [0, param_floats) without gaps, every
 *   parameter lies in exactly one, and no backward op touches a bucket's gradients after the op
 *   named as its ready point (a later write would be all-reduced stale). The measure of what can
 *   overlap: the share of gradient floats whose bucket is ready before the last backward op (tiny:
 *   all but the tied embeddings and position embeddings, which the last op writes) — asserted > 80%.
 * - train_overlap_backward on one rank (the all-reduce is the identity) with 1 and 3 helpers: the
 *   same gradients and loss as exec_backward bit for bit (the ops run in the same order, cut at
 *   the ready points), and train_overlap_wait / close leave no thread or request behind (ASan/TSan
 *   builds run this program too). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "coll.h"
#include "comm_overlap.h"
#include "exec.h"
#include "grad_buckets.h"
#include "plan.h"

#include "hyp_test.h"

int main(void) {
    char dir[256], cmd[1024], path[400];
    snprintf(dir, sizeof dir, "/tmp/hyp-v2168-%d", (int)getpid());
    snprintf(cmd, sizeof cmd,
             "cd %s && %s/generator/gen specs/v2500.yaml --enable adamw,dp,overlap --model tiny --target cpu --batch 2 --seq 32 -o %s >/dev/null 2>&1",
             HYP_SOURCE_DIR, HYP_BINARY_DIR, dir);
    if (system(cmd) != 0) {
        check(0, "test_v2168_gen", "gen failed: %s", cmd);
        return hyp_test_finish();
    }
    snprintf(path, sizeof path, "%s/plan.json", dir);
    plan_t p;
    hyp_err e;
    exec_t x;
    if (plan_load(path, &p, &e) || exec_init(&x, &p, &e) || exec_bind(&x, p.B, p.T, &e)) {
        check(0, "test_v2168_plan", "%s", e.msg);
        rm_rf(dir);
        return hyp_test_finish();
    }
    CHECK(p.comm_streams == 1, "test_v2168_plan_has_comm_streams (%d)", p.comm_streams);
    int64_t arena = p.param_floats;

    grad_bucket *bk = NULL;
    int nb = 0;
    CHECK(grad_buckets_make(&p, arena, &bk, &nb, &e) == HYP_OK && nb > 1, "test_v2168_buckets_made (%d buckets)", nb);
    int tiles = bk[0].lo == 0 && bk[nb - 1].hi == arena;
    for (int i = 1; i < nb; i++) tiles &= bk[i].lo == bk[i - 1].hi && bk[i].hi > bk[i].lo;
    CHECK(tiles, "test_v2168_buckets_tile_the_arena");
    int inside = 1;
    for (int k = 0; k < p.n_params_t; k++) {
        int n = 0;
        for (int i = 0; i < nb; i++) n += p.params[k].offset >= bk[i].lo && p.params[k].offset + p.params[k].numel <= bk[i].hi;
        inside &= n == 1;
    }
    CHECK(inside, "test_v2168_each_parameter_in_one_bucket");
    int late = 0;
    for (int i = 0; i < nb; i++)
        for (int o = bk[i].ready + 1; o < p.n_bwd; o++)
            for (int j = 0; j < p.bwd[o].nin + p.bwd[o].nout; j++) {
                int b = j < p.bwd[o].nin ? p.bwd[o].in[j] : p.bwd[o].out[j - p.bwd[o].nin];
                if (b >= 0 && p.bufs[b].kind == BUF_GRAD && p.bufs[b].offset < bk[i].hi && p.bufs[b].offset + p.bufs[b].numel > bk[i].lo)
                    late++;
            }
    CHECK(late == 0, "test_v2168_no_gradient_touched_after_its_ready_op (%d)", late);
    int64_t early = 0;
    for (int i = 0; i < nb; i++) early += bk[i].ready < p.n_bwd - 1 ? bk[i].hi - bk[i].lo : 0;
    printf("# %d buckets; %.1f%% of the %lld gradient floats ready before the last backward op\n", nb,
           100.0 * (double)early / (double)arena, (long long)arena);
    CHECK((double)early > 0.8 * (double)arena, "test_v2168_most_gradients_ready_before_backward_ends");
    free(bk);

    /* one rank: overlapped backward == exec_backward, bit for bit */
    exec_init_params(&x, 1);
    int64_t NT = (int64_t)p.B * p.T;
    for (int64_t i = 0; i < NT; i++) x.tokens[i] = (int32_t)((i * 7 + 3) % p.V), x.targets[i] = (int32_t)((i * 5 + 1) % p.V);
    float dl = 1.0f / (float)NT;
    float *ref = malloc(sizeof(float) * (size_t)arena);
    memset(x.grads, 0, sizeof(float) * (size_t)arena);
    exec_forward(&x);
    float lref = exec_backward(&x, dl);
    memcpy(ref, x.grads, sizeof(float) * (size_t)arena);
    hyp_coll *c = NULL;
    int argc = 0;
    char **argv = NULL;
    CHECK(hyp_coll_init(&argc, &argv, &c, &e) == HYP_OK && hyp_coll_world(c) == 1, "test_v2168_single_rank");
    static const int streams[] = {1, 3};
    for (int s = 0; s < 2 && c; s++) {
        train_comm_overlap *o = NULL;
        int rc = train_overlap_open(&o, &p, c, streams[s], arena, &e);
        CHECK(rc == HYP_OK, "test_v2168_open_%d_helpers %s", streams[s], rc ? e.msg : "");
        if (rc) continue;
        memset(x.grads, 0, sizeof(float) * (size_t)arena);
        exec_forward(&x);
        float l = -1;
        rc = train_overlap_backward(o, &x, dl, 0, &l, &e);
        CHECK(rc == HYP_OK && train_overlap_posted(o), "test_v2168_backward_hands_over_%d", streams[s]);
        rc = train_overlap_wait(o, &e);
        CHECK(rc == HYP_OK && !train_overlap_posted(o), "test_v2168_wait_%d", streams[s]);
        CHECK(l == lref, "test_v2168_loss_equals_exec_backward_%d (%.9g vs %.9g)", streams[s], (double)l, (double)lref);
        CHECK(!memcmp(ref, x.grads, sizeof(float) * (size_t)arena), "test_v2168_gradients_bit_identical_%d", streams[s]);
        double tot = -1, ex = -1;
        train_overlap_last(o, &tot, &ex);
        CHECK(tot >= 0 && ex >= 0, "test_v2168_figures_recorded_%d (%.3g s in flight, %.3g s exposed)", streams[s], tot, ex);
        CHECK(train_overlap_buckets(o) == nb && train_overlap_streams(o) == streams[s], "test_v2168_counts_%d", streams[s]);
        /* the serial path: the same buckets on this thread */
        CHECK(train_overlap_reduce_serial(o, x.grads, &e) == HYP_OK && !memcmp(ref, x.grads, sizeof(float) * (size_t)arena),
              "test_v2168_serial_path_%d", streams[s]);
        train_overlap_close(o);
    }
    train_comm_overlap *bad = NULL;
    CHECK(c && train_overlap_open(&bad, &p, c, 5, arena, &e) == HYP_EINPUT && !bad && strstr(e.msg, "comm_streams = 5"),
          "test_v2168_refuses_5_streams (%s)", e.msg);
    hyp_coll_finalize(c);
    free(ref);
    exec_free(&x);
    plan_free(&p);
    rm_rf(dir);
    return hyp_test_finish();
}
