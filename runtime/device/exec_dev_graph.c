/* exec_dev_graph.c — v2165 graphs for the device executor: a region of a step (exec_dev.h
 * EXD_G_*) runs eagerly the first time with a given key, is captured the second time
 * (dev->capture_begin .. capture_end on the default stream) and is replayed by one graph launch
 * from then on; a new key drops the graph and starts over. The key is every host value the
 * region's kernel arguments are built from (batch shape, dloss, max_norm ...): a replay passes
 * the capture's argument values, so a region whose values change gets a new graph, never stale
 * arguments. Never: a region that synchronizes, reads back to the host or decides on device
 * values (those points are where regions end, exec_dev.c), or touches another stream: the callers
 * form no region around collectives (ZeRO-3's passes, ZeRO-2's gradient schedule, the v2110
 * overlap hooks, the sharded norm's all-reduce), which then run eagerly. */
#include <string.h>
#include <time.h>

#include "exec_dev.h"
#include "prof.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

int exec_dev_set_graphs(exec_dev *x, int on, hyp_err *e) {
    (void)e;
    if (!on) exec_dev_free_graphs(x);
    x->graphs = on;
    return HYP_OK;
}

void exec_dev_free_graphs(exec_dev *x) {
    for (int i = 0; i < EXD_G_MAX; i++) {
        if (x->gr[i].g) x->dev->graph_destroy(x->dev, x->gr[i].g);
        memset(&x->gr[i], 0, sizeof x->gr[i]);
    }
}

static int same_key(const exec_dev_graph *G, const double *key, int nkey) {
    for (int i = 0; i < EXD_G_KEYS; i++)
        if (G->key[i] != (i < nkey ? key[i] : 0)) return 0;
    return 1;
}

int exec_dev_region(exec_dev *x, int slot, const double *key, int nkey, int (*body)(exec_dev *x, void *ctx, hyp_err *e),
                    void *ctx, hyp_err *e) {
    hyp_device *d = x->dev;
    double t0 = now_s();
    int rc;
    if (!x->graphs || hyp_prof_cur || slot < 0 || slot >= EXD_G_MAX || nkey > EXD_G_KEYS) {
        rc = body(x, ctx, e);
        x->g_issue_s += now_s() - t0;
        return rc;
    }
    exec_dev_graph *G = &x->gr[slot];
    if (!same_key(G, key, nkey)) { /* new values: the old graph would replay the old arguments */
        if (G->g) d->graph_destroy(d, G->g);
        memset(G, 0, sizeof *G);
        for (int i = 0; i < nkey; i++) G->key[i] = key[i];
    }
    if (!G->g && !G->seen) { /* the warm-up, eager */
        G->seen = 1;
        rc = body(x, ctx, e);
        x->g_issue_s += now_s() - t0;
        return rc;
    }
    if (!G->g) { /* the capture */
        unsigned long long c0 = d->calls;
        if ((rc = d->capture_begin(d, NULL, e))) return rc;
        int brc = body(x, ctx, e);
        hyp_err ee;
        hyp_graph *g = NULL;
        int erc = d->capture_end(d, NULL, &g, brc ? &ee : e);
        if (brc || erc) {
            if (g) d->graph_destroy(d, g);
            return brc ? brc : erc;
        }
        G->g = g;
        G->nodes = d->calls - c0;
        x->g_captures++;
        x->g_nodes_captured += G->nodes; /* host calls of the capture: counted, not run */
    }
    rc = d->graph_launch(d, G->g, NULL, e);
    x->g_replays++;
    x->g_nodes_replayed += G->nodes;
    x->g_issue_s += now_s() - t0;
    return rc;
}
