/* test_standin_nccl.c — the NCCL stand-in (tests/standins/nccl_standin.c) under mpirun -np 2:
 * each rule seen refusing a planted violation next to the legal call, dev_cuda.c's collectives on
 * the stand-ins giving the values device.h defines (in place included), and an injected
 * asynchronous error (HYP_STANDIN_NCCL_FAULT) turned by dev_cuda.c into the sticky error device.h
 * promises instead of a synchronize that never returns. Never needs a GPU. */
#define _GNU_SOURCE
#include <cuda.h>
#include <dlfcn.h>
#include <nccl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../unit/hyp_test.h"
#include "coll.h"
#include "device.h"

#define STR(x) #x
#define XSTR(x) STR(x)
#define NC_FUNCS(X)                                                                                                  \
    X(ncclGetUniqueId) X(ncclCommInitRank) X(ncclCommDestroy) X(ncclAllReduce) X(ncclReduceScatter) X(ncclAllGather) \
    X(ncclBroadcast) X(ncclReduce)
#define MEMBER(f) static __typeof__(f) *p_##f;
NC_FUNCS(MEMBER)
#define LOAD(f)                                                                                                      \
    if (!(p_##f = (__typeof__(f) *)dlsym(h, XSTR(f)))) {                                                             \
        printf("FAIL the stand-in lacks %s\n", XSTR(f));                                                            \
        return 1;                                                                                                    \
    }

static hyp_device *D;
static hyp_coll *C;
static hyp_err E;
static int R, W;

static void on_alarm(int sig) {
    (void)sig;
    static const char m[] = "FAIL rank timed out: a synchronize blocked (asynchronous NCCL error not polled)\n";
    if (write(1, m, sizeof m - 1) < 0) _exit(3);
    _exit(3);
}

static void rules(void) {
    ncclUniqueId id, zero;
    memset(&zero, 0, sizeof zero);
    if (R == 0) p_ncclGetUniqueId(&id);
    hyp_coll_broadcast(C, &id, sizeof id, 0, &E);
    ncclComm_t c = NULL, bad = NULL;
    check(p_ncclCommInitRank(&bad, W, zero, R) == ncclInvalidArgument, "init: an id not from ncclGetUniqueId -> ncclInvalidArgument", NULL);
    check(p_ncclCommInitRank(&bad, W, id, W) == ncclInvalidArgument, "init: rank == nranks -> ncclInvalidArgument", NULL);
    ncclResult_t r = p_ncclCommInitRank(&c, W, id, R);
    check(r == ncclSuccess, "init: rank 0's id broadcast, one GPU per rank", "%d", (int)r);
    if (r) return;
    const size_t n = 64;
    float *buf;
    hyp_stream *s = NULL;
    D->stream_create(D, &s, &E);
    D->mem_alloc(D, (void **)&buf, 4 * n * 4, &E);
    D->memset_sync(D, buf, 0, 4 * n * 4, &E);
    cudaStream_t cs = (cudaStream_t)s;
    /* in place */
    check(p_ncclReduceScatter(buf, buf + R * n, n, ncclFloat32, ncclSum, c, cs) == ncclSuccess &&
              p_ncclReduceScatter(buf, buf + ((R + 1) % W) * n + 1, n, ncclFloat32, ncclSum, c, cs) == ncclInvalidUsage,
          "in place: ReduceScatter recvbuff != sendbuff + rank*recvcount, overlapping -> ncclInvalidUsage", NULL);
    check(p_ncclAllGather(buf + R * n, buf, n, ncclFloat32, c, cs) == ncclSuccess &&
              p_ncclAllGather(buf + R * n + 2, buf, n, ncclFloat32, c, cs) == ncclInvalidUsage,
          "in place: AllGather sendbuff != recvbuff + rank*sendcount, overlapping -> ncclInvalidUsage", NULL);
    check(p_ncclAllReduce(buf, buf, n, ncclFloat32, ncclSum, c, cs) == ncclSuccess &&
              p_ncclAllReduce(buf, buf + 1, n, ncclFloat32, ncclSum, c, cs) == ncclInvalidUsage,
          "in place: AllReduce partial overlap -> ncclInvalidUsage", NULL);
    static float host[256];
    check(p_ncclAllReduce(host, host, n, ncclFloat32, ncclSum, c, cs) == ncclInvalidArgument, "memory: host buffers -> ncclInvalidArgument", NULL);
    check(p_ncclAllReduce(buf, buf, 4 * n + 1, ncclFloat32, ncclSum, c, cs) == ncclInvalidArgument,
          "memory: count past the allocation's end -> ncclInvalidArgument", NULL);
    check(p_ncclAllReduce(buf, buf, n, (ncclDataType_t)99, ncclSum, c, cs) == ncclInvalidArgument, "types: an invalid datatype -> ncclInvalidArgument",
          NULL);
    check(p_ncclAllReduce(buf, buf, n, ncclFloat32, (ncclRedOp_t)77, c, cs) == ncclInvalidArgument, "ops: an invalid op -> ncclInvalidArgument", NULL);
    check(p_ncclBroadcast(buf, buf, n, ncclFloat32, 0, c, cs) == ncclSuccess && p_ncclBroadcast(buf, buf, n, ncclFloat32, W, c, cs) == ncclInvalidArgument,
          "root: Broadcast root == nranks -> ncclInvalidArgument", NULL);
    check(p_ncclReduce(buf, buf, n, ncclFloat32, ncclSum, -1, c, cs) == ncclInvalidArgument, "root: Reduce root -1 -> ncclInvalidArgument", NULL);
    check(p_ncclAllReduce(buf, buf, n, ncclFloat32, ncclSum, NULL, cs) == ncclInvalidArgument, "comm: NULL communicator -> ncclInvalidArgument", NULL);
    int rc = D->stream_synchronize(D, s, &E);
    check(!rc, "the legal collectives ran", "%s", rc ? E.msg : "");
    check(p_ncclCommDestroy(c) == ncclSuccess, "destroy", NULL);
    D->mem_free(D, buf, &E);
    D->stream_destroy(D, s);
}

static float val(int rank, size_t i) { return (float)(rank + 1) * 0.25f + (float)i; }

static void values(void) {
    const size_t n = 32;
    float *dbuf, h[4 * 32], want[4 * 32];
    hyp_stream *s;
    D->stream_create(D, &s, &E);
    D->mem_alloc(D, (void **)&dbuf, sizeof h, &E);
    int rc;
    /* all_reduce sum (the 1st all-reduce) */
    for (size_t i = 0; i < n; i++) h[i] = val(R, i), want[i] = 0;
    for (int r = 0; r < W; r++)
        for (size_t i = 0; i < n; i++) want[i] += val(r, i);
    D->h2d_sync(D, dbuf, h, n * 4, &E);
    rc = D->all_reduce(D, dbuf, n, HYP_DT_F32, HYP_RED_SUM, s, &E) || D->stream_synchronize(D, s, &E) || D->d2h_sync(D, h, dbuf, n * 4, &E);
    check(!rc && !memcmp(h, want, n * 4), "dev_cuda all_reduce sum f32", "%s", rc ? E.msg : "");
    /* all_reduce max (the 2nd) */
    for (size_t i = 0; i < n; i++) h[i] = (R == 1 && i % 2) ? 100.0f + i : (float)i;
    D->h2d_sync(D, dbuf, h, n * 4, &E);
    rc = D->all_reduce(D, dbuf, n, HYP_DT_F32, HYP_RED_MAX, s, &E) || D->stream_synchronize(D, s, &E) || D->d2h_sync(D, h, dbuf, n * 4, &E);
    int ok = !rc;
    for (size_t i = 0; i < n && ok; i++) ok = h[i] == (i % 2 ? 100.0f + i : (float)i);
    check(ok, "dev_cuda all_reduce max f32", "%s", rc ? E.msg : "");
    /* reduce_scatter in place: recv = send + rank*count */
    for (size_t i = 0; i < n * W; i++) h[i] = val(R, i);
    D->h2d_sync(D, dbuf, h, n * W * 4, &E);
    rc = D->reduce_scatter(D, dbuf, dbuf + R * n, n, HYP_DT_F32, s, &E) || D->stream_synchronize(D, s, &E) || D->d2h_sync(D, h, dbuf + R * n, n * 4, &E);
    ok = !rc;
    for (size_t i = 0; i < n && ok; i++) {
        float w = 0;
        for (int r = 0; r < W; r++) w += val(r, R * n + i);
        ok = h[i] == w;
    }
    check(ok, "dev_cuda reduce_scatter in place", "%s", rc ? E.msg : "");
    /* all_gather in place: send = recv + rank*count */
    for (size_t i = 0; i < n; i++) h[i] = val(R, i);
    D->h2d_sync(D, dbuf + R * n, h, n * 4, &E);
    rc = D->all_gather(D, dbuf + R * n, dbuf, n, HYP_DT_F32, s, &E) || D->stream_synchronize(D, s, &E) || D->d2h_sync(D, h, dbuf, n * W * 4, &E);
    ok = !rc;
    for (int r = 0; r < W && ok; r++)
        for (size_t i = 0; i < n && ok; i++) ok = h[r * n + i] == val(r, i);
    check(ok, "dev_cuda all_gather in place", "%s", rc ? E.msg : "");
    /* broadcast from rank 1, reduce to rank 0 */
    for (size_t i = 0; i < n; i++) h[i] = val(R, i);
    D->h2d_sync(D, dbuf, h, n * 4, &E);
    rc = D->broadcast(D, dbuf, n, HYP_DT_F32, W - 1, s, &E) || D->stream_synchronize(D, s, &E) || D->d2h_sync(D, h, dbuf, n * 4, &E);
    ok = !rc;
    for (size_t i = 0; i < n && ok; i++) ok = h[i] == val(W - 1, i);
    check(ok, "dev_cuda broadcast", "%s", rc ? E.msg : "");
    for (size_t i = 0; i < n; i++) h[i] = val(R, i);
    D->h2d_sync(D, dbuf, h, n * 4, &E);
    rc = D->reduce(D, dbuf, n, HYP_DT_F32, 0, s, &E) || D->stream_synchronize(D, s, &E) || D->d2h_sync(D, h, dbuf, n * 4, &E);
    ok = !rc;
    for (size_t i = 0; i < n && ok; i++) {
        float w = 0;
        for (int r = 0; r < W; r++) w += val(r, i);
        ok = h[i] == (R == 0 ? w : val(R, i));
    }
    check(ok, "dev_cuda reduce to rank 0", "%s", rc ? E.msg : "");
    /* the 3rd all-reduce hangs with an asynchronous error (HYP_STANDIN_NCCL_FAULT=allreduce:3) */
    alarm(60);
    rc = D->all_reduce(D, dbuf, n, HYP_DT_F32, HYP_RED_SUM, s, &E);
    /* HYP_TEST_FAULT_VIA=event (the second ctest): the wait is an event recorded after it */
    const char *via = getenv("HYP_TEST_FAULT_VIA");
    int by_event = via && !strcmp(via, "event");
    hyp_event *ev = NULL;
    int rs = rc ? rc
                : by_event ? (D->event_create(D, &ev, &E) || D->event_record(D, ev, s, &E) ? HYP_EINPUT : D->event_synchronize(D, ev, &E))
                           : D->stream_synchronize(D, s, &E);
    check(!rc && rs == HYP_EFAIL && strstr(E.msg, "asynchronous"), by_event ? "dev_cuda: an asynchronous NCCL error returns from an event synchronize"
                                                                          : "dev_cuda: an asynchronous NCCL error returns from the synchronize", "%s", E.msg);
    if (ev) D->event_destroy(D, ev);
    rc = D->all_reduce(D, dbuf, n, HYP_DT_F32, HYP_RED_SUM, s, &E);
    int rs2 = D->synchronize(D, &E);
    check(rc == HYP_EFAIL && rs2 == HYP_EFAIL && strstr(E.msg, "asynchronous"), "dev_cuda: the error is sticky (next collective, next synchronize)",
          "%s", E.msg);
    alarm(0);
}

int main(int argc, char **argv) {
    setenv("HYP_CUDA_LIBDIR", HYP_STANDIN_DIR, 1);
    setenv("HYP_STANDIN_DEVICES", "2", 0);
    if (hyp_coll_init(&argc, &argv, &C, &E)) {
        printf("FAIL coll init: %s\n", E.msg);
        return 1;
    }
    R = hyp_coll_rank(C), W = hyp_coll_world(C);
    signal(SIGALRM, on_alarm);
    if (W != 2 || hyp_device_open("cuda", &D, &E)) {
        printf("FAIL needs mpirun -np 2 and the stand-ins: %s\n", W != 2 ? "world != 2" : E.msg);
        return 1;
    }
    void *h = dlopen(HYP_STANDIN_DIR "/libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        printf("FAIL dlopen the NCCL stand-in: %s\n", dlerror());
        return 1;
    }
    NC_FUNCS(LOAD)
    rules();
    setenv("HYP_STANDIN_NCCL_FAULT", "allreduce:3", 1);
    int rc = D->comm_init(D, C, &E);
    check(!rc, "dev_cuda comm_init on the stand-in", "%s", rc ? E.msg : "");
    if (!rc) values();
    printf("rank %d/%d: ", R + 1, W);
    int st = hyp_test_finish();
    D->close(D);
    hyp_coll_finalize(C);
    return st;
}
