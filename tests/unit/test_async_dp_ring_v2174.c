/* test_async_dp_ring_v2174.c — async_dp.c's delay on one rank (the single-rank collective: the
 * all-reduce is the identity, so what reaches the update is exactly what entered): for staleness
 * s = 0..4 over 14 steps, steps 1..s deliver nothing and zeroed gradients, step t > s delivers the
 * gradients of step t - s bit for bit (and so from a resumed run's first step 6 on, s = 2) (each step's are distinct), so a wrong ring slot, an off-by-one
 * delay or a buffer reused before its reduction ends fails. Then the refusals of train_async_open
 * (ZeRO stage 1, a tp mesh, staleness 9), each one line with " — ".
 * Never: MPI ranks (tests/gen/test_async_dp*_v2174.sh run np=2). */
#include <stdlib.h>
#include <string.h>

#include "async_dp.h"
#include "coll.h"
#include "hyp_test.h"

#define N 131 /* odd: no vector-width multiple */

static void fill(float *g, int step) {
    for (int i = 0; i < N; i++) g[i] = (float)step * 1000.0f + (float)i;
}

static void delay_case(hyp_coll *c, int s, int t0) {
    plan_t p;
    memset(&p, 0, sizeof p);
    p.adp_on = 1, p.adp_staleness = s;
    exec_t x;
    memset(&x, 0, sizeof x);
    float g[N], want[N];
    x.p = &p, x.grads = g, x.shard = N, x.world = 1;
    dp_t d = {.coll = c, .rank = 0, .world = 1, .stage = 0, .opt = NULL};
    train_async_dp *a = NULL;
    hyp_err e = {{0}};
    int rc = train_async_open(&a, &p, &x, &d, &e);
    CHECK(rc == HYP_OK && a && train_async_staleness(a) == s, "staleness %d: opens (%s)", s, e.msg);
    if (rc) return;
    int ok = 1;
    for (int t = t0; t < t0 + 14; t++) {
        fill(g, t);
        int ready = -1;
        rc |= train_async_grads(a, &x, &d, t, &ready, &e);
        if (t < t0 + s) {
            ok &= ready == 0;
            for (int i = 0; i < N; i++) ok &= g[i] == 0.0f;
        } else {
            fill(want, t - s);
            ok &= ready == 1 && !memcmp(g, want, sizeof want);
        }
    }
    CHECK(rc == HYP_OK && ok, "staleness %d from step %d: its first %d steps deliver nothing, step t the gradients of step t - %d (%s)", s, t0, s, s, e.msg);
    train_async_close(a, &d);
}

static void test_refusals(hyp_coll *c) {
    plan_t p;
    memset(&p, 0, sizeof p);
    p.adp_on = 1, p.adp_staleness = 1;
    exec_t x;
    memset(&x, 0, sizeof x);
    float g[16] = {0};
    x.p = &p, x.grads = g, x.shard = 16, x.world = 1;
    dp_t d = {.coll = c, .rank = 0, .world = 1, .stage = 1, .opt = NULL};
    train_async_dp *a = NULL;
    hyp_err e = {{0}};
    int rc = train_async_open(&a, &p, &x, &d, &e);
    CHECK(rc == HYP_EINPUT && !a && strstr(e.msg, "ZeRO stage 1") && strstr(e.msg, " — "), "ZeRO stage 1 is refused (%s)", e.msg);
    d.stage = 0, p.adp_staleness = 9;
    rc = train_async_open(&a, &p, &x, &d, &e);
    CHECK(rc == HYP_EINPUT && !a && strstr(e.msg, "staleness 9") && strstr(e.msg, " — "), "staleness 9 is refused (%s)", e.msg);
}

int main(int argc, char **argv) {
    hyp_coll *c = NULL;
    hyp_err e = {{0}};
    if (hyp_coll_init(&argc, &argv, &c, &e)) {
        CHECK(0, "coll init: %s", e.msg);
        return hyp_test_finish();
    }
    for (int s = 0; s <= 4; s++) delay_case(c, s, 1);
    delay_case(c, 2, 6); /* a resumed run: steps 6 and 7 deliver nothing, 8 step 6's */
    test_refusals(c);
    hyp_coll_finalize(c);
    return hyp_test_finish();
}
