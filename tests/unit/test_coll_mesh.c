/* test_coll_mesh.c — the mesh's sub-communicators in runtime/coll (issue 22, v2106 groundwork):
 * hyp_coll_mesh_split gives dp x tp groups with tp ranks contiguous, each axis all-reduces only
 * within its group, and hyp_coll_bytes_sent counts the ring-model bytes per axis. Run alone it
 * checks the single-rank identities and then starts itself under `mpirun -np 4 --oversubscribe`
 * (tp=2 x dp=2); it must never pass without having checked the 4-rank mesh when mpirun exists
 * (sanitizer builds skip the mpirun half: Open MPI's own allocations are not ours to audit). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coll.h"
#include "hyp_test.h"

#if defined(__SANITIZE_ADDRESS__)
#define HYP_TEST_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define HYP_TEST_SANITIZED 1
#endif
#endif

static int ranks_check(hyp_coll *w) {
    hyp_err e = {0};
    int r = hyp_coll_rank(w), n = hyp_coll_world(w);
    hyp_coll *tp = NULL, *dp = NULL;
    CHECK(hyp_coll_mesh_split(w, 3, &tp, &dp, &e) == HYP_EINPUT && strstr(e.msg, "does not divide"),
          "rank %d: tp=3 on a world of %d refused: %s", r, n, e.msg);
    e = (hyp_err){0};
    CHECK(hyp_coll_mesh_split(w, 2, &tp, &dp, &e) == HYP_OK, "rank %d: mesh tp=2 x dp=%d", r, n / 2);
    CHECK(hyp_coll_world(tp) == 2 && hyp_coll_rank(tp) == r % 2, "rank %d: tp rank %d of %d (contiguous)", r,
          hyp_coll_rank(tp), hyp_coll_world(tp));
    CHECK(hyp_coll_world(dp) == n / 2 && hyp_coll_rank(dp) == r / 2, "rank %d: dp rank %d of %d", r,
          hyp_coll_rank(dp), hyp_coll_world(dp));
    /* tp axis: sum of world ranks in the group {2g, 2g+1} = 4g+1; integers, exact in fp32 */
    float v[1000];
    for (int i = 0; i < 1000; i++) v[i] = (float)r;
    CHECK(hyp_coll_allreduce_f32(tp, v, 1000, &e) == HYP_OK && v[0] == (float)(4 * (r / 2) + 1) &&
              v[999] == v[0], "rank %d: tp all-reduce stays in the tp group (%g)", r, v[0]);
    /* dp axis: ranks {t, t+2}: 2t+2 */
    for (int i = 0; i < 1000; i++) v[i] = (float)r;
    CHECK(hyp_coll_allreduce_f32(dp, v, 1000, &e) == HYP_OK && v[0] == (float)(2 * (r % 2) + 2),
          "rank %d: dp all-reduce stays in the dp group (%g)", r, v[0]);
    /* ring model: 2(p-1)/p * 4000 bytes = 4000 on each axis of size 2; the world saw nothing */
    CHECK(hyp_coll_bytes_sent(tp) == 4000 && hyp_coll_bytes_sent(dp) == 4000 && hyp_coll_bytes_sent(w) == 0,
          "rank %d: bytes per axis tp %llu dp %llu world %llu (ring 2(p-1)/p*n)", r,
          (unsigned long long)hyp_coll_bytes_sent(tp), (unsigned long long)hyp_coll_bytes_sent(dp),
          (unsigned long long)hyp_coll_bytes_sent(w));
    float g[2] = {(float)r, 0}, all[4];
    CHECK(hyp_coll_allgather_f32(tp, g, all, 1, &e) == HYP_OK && all[0] == (float)(r / 2 * 2) &&
              all[1] == (float)(r / 2 * 2 + 1) && hyp_coll_bytes_sent(tp) == 4000 + 4,
          "rank %d: tp all-gather in rank order, (p-1)/p*n bytes", r);
    hyp_coll_finalize(tp);
    hyp_coll_finalize(dp);
    return 0;
}

int main(int argc, char **argv) {
    hyp_err e = {0};
    hyp_coll *w = NULL;
    if (hyp_coll_init(&argc, &argv, &w, &e)) {
        printf("FAIL coll init: %s\n", e.msg);
        return 1;
    }
    if (hyp_coll_world(w) > 1) {
        if (hyp_coll_world(w) == 4) ranks_check(w);
        else CHECK(0, "the mesh half runs at np=4, not %d", hyp_coll_world(w));
        int ok = hyp_coll_all_ok(w, g_fail == 0);
        hyp_coll_finalize(w);
        return ok ? 0 : 1;
    }
    hyp_coll *tp = NULL, *dp = NULL;
    CHECK(hyp_coll_mesh_split(w, 2, &tp, &dp, &e) == HYP_EINPUT && strstr(e.msg, "mpirun"),
          "one rank: tp=2 refused with how to fix: %s", e.msg);
    e = (hyp_err){0};
    CHECK(hyp_coll_mesh_split(w, 1, &tp, &dp, &e) == HYP_OK && hyp_coll_world(tp) == 1 && hyp_coll_world(dp) == 1,
          "one rank: tp=1 mesh is 1 x 1");
    float v[4] = {1, 2, 3, 4};
    CHECK(hyp_coll_allreduce_f32(tp, v, 4, &e) == HYP_OK && v[3] == 4 && hyp_coll_bytes_sent(tp) == 0,
          "one rank: all-reduce is the identity and sends nothing");
    hyp_coll_finalize(tp);
    hyp_coll_finalize(dp);
    hyp_coll_finalize(w);
#if defined(HYP_HAVE_MPI) && !defined(HYP_TEST_SANITIZED)
    if (system("command -v mpirun >/dev/null 2>&1") == 0) {
        char cmd[4096];
        snprintf(cmd, sizeof cmd,
                 "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 mpirun -np 4 --oversubscribe %s", argv[0]);
        CHECK(system(cmd) == 0, "np=4: tp=2 x dp=2 mesh checks on every rank");
    } else
        printf("note: no mpirun; the 4-rank half did not run\n");
#endif
    return hyp_test_finish();
}
