/* test_graph_sim_v2165.c — v2165 graphs on the sim device (runtime/device/dev_sim.c): a capture
 * records (memset, device copy, GEMM) and runs nothing; a replay runs it in order as one host
 * call, with the values of the capture's arguments, and equals the same work issued eagerly bit
 * for bit; what the CUDA driver refuses during a capture (a synchronize, an allocation, a
 * synchronous or host copy, an event on the capturing stream) is refused and invalidates the
 * capture, and the device stays usable. The stand-in's version of these checks (libcuda's graph
 * API under dev_cuda.c) is in tests/standins/test_standin_driver.c. Never needs a compiler. */
#include <stdio.h>
#include <string.h>

#include "device.h"
#include "hyp_test.h"

/* y[m][n] (column-major m x n) = A (m x k) B (k x n) + beta y: the work captured below */
static void gemm_of(hyp_gemm *g, const float *a, const float *b, float *y, int m, int n, int k, float beta) {
    memset(g, 0, sizeof *g);
    g->m = m, g->n = n, g->k = k;
    g->atype = g->btype = g->dtype = HYP_DT_F32;
    g->compute = HYP_GEMM_F32;
    g->alpha = 1.0f, g->beta = beta;
    g->a = a, g->lda = m, g->b = b, g->ldb = k, g->c = beta != 0 ? y : NULL, g->ldc = m, g->d = y, g->ldd = m;
}

int main(void) {
    hyp_device *d = NULL;
    hyp_err e;
    int rc = hyp_device_open("sim", &d, &e);
    CHECK(!rc, "sim device opens");
    if (rc) return hyp_test_finish();
    enum { M = 24, N = 16, K = 40 };
    float ha[M * K], hb[K * N], back[M * N], eager[M * N];
    for (int i = 0; i < M * K; i++) ha[i] = (float)((i * 37 % 101) - 50) / 7.0f;
    for (int i = 0; i < K * N; i++) hb[i] = (float)((i * 53 % 97) - 48) / 11.0f;
    float *a, *b, *b2, *y;
    rc = d->mem_alloc(d, (void **)&a, sizeof ha, &e) || d->mem_alloc(d, (void **)&b, sizeof hb, &e) ||
         d->mem_alloc(d, (void **)&b2, sizeof hb, &e) || d->mem_alloc(d, (void **)&y, sizeof back, &e) ||
         d->h2d_sync(d, a, ha, sizeof ha, &e) || d->h2d_sync(d, b2, hb, sizeof hb, &e);
    CHECK(!rc, "allocations and uploads (%s)", rc ? e.msg : "");
    if (rc) return hyp_test_finish();
    hyp_gemm g1, g2;
    gemm_of(&g1, a, b, y, M, N, K, 0.0f);
    gemm_of(&g2, a, b, y, M, N, K, 1.0f); /* accumulates: the order of the replay matters */

    /* eager: copy b2 -> b, y = A B, y += A B, then memset b */
    rc = d->d2d(d, b, b2, sizeof hb, NULL, &e) || d->gemm(d, &g1, NULL, &e) || d->gemm(d, &g2, NULL, &e) ||
         d->memset(d, b, 0, sizeof hb, NULL, &e) || d->d2h_sync(d, eager, y, sizeof eager, &e);
    CHECK(!rc, "eager work runs (%s)", rc ? e.msg : "");

    /* the same work captured: nothing runs until the graph is launched */
    hyp_graph *gr = NULL;
    rc = d->memset_sync(d, y, 0, sizeof back, &e) || d->capture_begin(d, NULL, &e) || d->d2d(d, b, b2, sizeof hb, NULL, &e) ||
         d->gemm(d, &g1, NULL, &e) || d->gemm(d, &g2, NULL, &e) || d->memset(d, b, 0, sizeof hb, NULL, &e) ||
         d->capture_end(d, NULL, &gr, &e) || d->synchronize(d, &e) || d->d2h_sync(d, back, y, sizeof back, &e);
    int untouched = 1;
    for (int i = 0; i < M * N; i++) untouched &= back[i] == 0.0f;
    CHECK(!rc && gr && untouched, "v2165 sim: a capture records four commands and runs none (%s)", rc ? e.msg : "");
    if (rc || !gr) return hyp_test_finish();
    unsigned long long c0 = d->calls;
    for (int rep = 0; rep < 2; rep++) {
        rc = d->memset_sync(d, y, 0, sizeof back, &e) || d->graph_launch(d, gr, NULL, &e) || d->d2h_sync(d, back, y, sizeof back, &e);
        CHECK(!rc && !memcmp(back, eager, sizeof back), "v2165 sim: replay %d equals the eager run bit for bit (%s)", rep + 1, rc ? e.msg : "");
    }
    /* per replay: memset_sync, the graph launch, d2h_sync: 3 host calls, not 6 */
    CHECK(d->calls - c0 == 6, "v2165 sim: a graph launch is one host call (%llu calls for 2 x [memset, graph, d2h])", d->calls - c0);

    /* what a capture cannot record: refused, the capture invalidated, the device usable */
    hyp_event *ev = NULL;
    d->event_create(d, &ev, &e);
    static const char *what[] = {"stream_synchronize", "synchronize", "mem_alloc", "d2h_sync", "a host copy", "event_record"};
    for (int i = 0; i < 6; i++) {
        hyp_err ie, ee;
        hyp_graph *g = NULL;
        void *p = NULL;
        rc = d->capture_begin(d, NULL, &ie) || d->gemm(d, &g1, NULL, &ie);
        int brc = rc ? rc
                 : i == 0 ? d->stream_synchronize(d, NULL, &ie)
                 : i == 1 ? d->synchronize(d, &ie)
                 : i == 2 ? d->mem_alloc(d, &p, 64, &ie)
                 : i == 3 ? d->d2h_sync(d, back, y, sizeof back, &ie)
                 : i == 4 ? d->d2h(d, back, y, sizeof back, NULL, &ie)
                          : d->event_record(d, ev, NULL, &ie);
        int erc = d->capture_end(d, NULL, &g, &ee);
        CHECK(!rc && brc == HYP_EINPUT && strstr(ie.msg, "STREAM_CAPTURE_UNSUPPORTED") && erc && !g && strstr(ee.msg, "invalidated"),
              "v2165 sim: %s during a capture is refused and invalidates it (%.70s / %.60s)", what[i], brc ? ie.msg : "accepted",
              erc ? ee.msg : "a graph");
        if (p) d->mem_free(d, p, &ie);
    }
    rc = d->memset_sync(d, y, 0, sizeof back, &e) || d->graph_launch(d, gr, NULL, &e) || d->d2h_sync(d, back, y, sizeof back, &e);
    CHECK(!rc && !memcmp(back, eager, sizeof back), "v2165 sim: after the refusals the graph still replays exactly (%s)", rc ? e.msg : "");
    hyp_graph *none = NULL;
    rc = d->capture_end(d, NULL, &none, &e);
    CHECK(rc == HYP_EINPUT && !none, "v2165 sim: capture_end without a capture is refused (%s)", rc ? e.msg : "accepted");
    d->graph_destroy(d, gr);
    d->event_destroy(d, ev);
    d->mem_free(d, a, &e), d->mem_free(d, b, &e), d->mem_free(d, b2, &e), d->mem_free(d, y, &e);
    d->close(d);
    return hyp_test_finish();
}
