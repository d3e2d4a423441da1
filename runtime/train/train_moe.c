/* train_moe.c — a step's router statistics as metrics (train_moe.h). */
#include "train_moe.h"

#include <stdlib.h>

#include "moe_stats.h"

int train_moe_take(exec_t *x, hyp_coll *coll, int world, hyp_metric_kv **kv, int *n, hyp_err *e) {
    exec_moe *m = x->moe;
    *kv = NULL, *n = 0;
    if (!m) return HYP_OK;
    int ep = x->ep != NULL, cnt = m->n_loads + 1 + 2 * ep + m->n_cap, dr = m->n_loads + 2 + 2 * ep;
    double *v = malloc(sizeof(double) * (size_t)(cnt + 1));
    hyp_metric_kv *out = malloc(sizeof *out * (size_t)cnt);
    if (!v || !out) {
        free(v), free(out);
        return hyp_fail(e, HYP_EFAIL, "out of memory");
    }
    double aux = 0;
    for (int j = 0; j < m->n; j++) aux += m->aux[j];
    for (int i = 0; i < m->n_loads; i++) v[i] = m->loads[i];
    v[m->n_loads] = aux, v[m->n_loads + 1] = m->passes;
    if (ep) { /* v2109: routed rows sent to another ep rank (from the routing), all-to-all bytes (counted by coll) */
        unsigned long long b = (unsigned long long)hyp_coll_bytes_sent(x->ep);
        v[m->n_loads + 2] = m->ep_remote, v[m->n_loads + 3] = (double)(b - m->ep_bytes0);
        m->ep_bytes0 = b;
    }
    for (int i = 0; i < m->n_cap; i++) v[dr + i] = m->dropped[i]; /* routed assignments dropped over capacity */
    exec_moe_reset(x);
    int rc = coll && world > 1 ? hyp_coll_allreduce_f64(coll, v, (size_t)cnt + 1, e) : HYP_OK;
    if (rc) {
        free(v), free(out);
        return rc;
    }
    exec_moe_bias_step(x, v); /* the aux-loss-free biases, from the step's global loads (v[0..n_loads)) */
    for (int i = 0; i < m->n_loads; i++) out[i] = (hyp_metric_kv){m->key[i], v[i]};
    /* passes: the micro-batches of all ranks (each rank's aux sum is over its own) */
    out[m->n_loads] = (hyp_metric_kv){m->key[m->n_loads], v[m->n_loads + 1] > 0 ? v[m->n_loads] / v[m->n_loads + 1] : 0};
    if (ep) {
        out[m->n_loads + 1] = (hyp_metric_kv){"moe_ep_remote_rows", v[m->n_loads + 2]};
        out[m->n_loads + 2] = (hyp_metric_kv){"moe_ep_a2a_bytes", v[m->n_loads + 3]};
    }
    for (int i = 0; i < m->n_cap; i++) out[dr - 1 + i] = (hyp_metric_kv){m->dkey[i], v[dr + i]};
    free(v);
    *kv = out, *n = cnt;
    return HYP_OK;
}
