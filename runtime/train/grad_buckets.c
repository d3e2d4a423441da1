/* grad_buckets.c — per-layer gradient buckets (see grad_buckets.h). */
#include "grad_buckets.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The layer a parameter belongs to: its name up to the first all-digit component, else the name. */
static void layer_key(const char *name, char *key, size_t n) {
    snprintf(key, n, "%s", name);
    for (char *c = key; *c;) {
        char *dot = strchr(c, '.');
        size_t len = dot ? (size_t)(dot - c) : strlen(c);
        if (len && strspn(c, "0123456789") == len) {
            c[len] = 0;
            return;
        }
        if (!dot) return;
        c = dot + 1;
    }
}

/* The last backward op that reads or writes a gradient buffer overlapping arena[lo, hi). */
static int last_grad_op(const plan_t *p, int64_t lo, int64_t hi) {
    int last = -1;
    for (int i = 0; i < p->n_bwd; i++) {
        const plan_op *o = &p->bwd[i];
        for (int j = 0; j < o->nin + o->nout; j++) {
            int b = j < o->nin ? o->in[j] : o->out[j - o->nin];
            if (b < 0 || p->bufs[b].kind != BUF_GRAD) continue;
            if (p->bufs[b].offset < hi && p->bufs[b].offset + p->bufs[b].numel > lo) last = i;
        }
    }
    return last;
}

static int cmp_offset(const void *a, const void *b) {
    int64_t x = (*(const plan_param *const *)a)->offset, y = (*(const plan_param *const *)b)->offset;
    return x < y ? -1 : x > y;
}

int grad_buckets_make(const plan_t *p, int64_t arena, grad_bucket **out, int *nout, hyp_err *e) {
    int n = p->n_params_t, nb = 0;
    const plan_param **ord = malloc(sizeof *ord * (size_t)(n + 1));
    grad_bucket *bk = calloc((size_t)n + 1, sizeof *bk);
    if (!ord || !bk) {
        free(ord), free(bk);
        return hyp_fail(e, HYP_EFAIL, "out of memory");
    }
    for (int i = 0; i < n; i++) ord[i] = &p->params[i];
    qsort(ord, (size_t)n, sizeof *ord, cmp_offset);
    char key[256], prev[256] = "";
    for (int i = 0; i < n; i++) {
        layer_key(ord[i]->name, key, sizeof key);
        if (nb == 0 || strcmp(key, prev)) {
            bk[nb].lo = nb == 0 ? 0 : bk[nb - 1].hi;
            nb++;
            snprintf(prev, sizeof prev, "%s", key);
        }
        bk[nb - 1].hi = ord[i]->offset + ord[i]->numel;
    }
    free(ord);
    if (nb == 0) nb = 1;
    bk[nb - 1].hi = arena; /* the padding joins the last bucket */
    for (int i = 0; i < nb; i++) {
        bk[i].ready = last_grad_op(p, bk[i].lo, bk[i].hi);
        if (bk[i].ready < 0) bk[i].ready = p->n_bwd - 1;
    }
    *out = bk, *nout = nb;
    return HYP_OK;
}
