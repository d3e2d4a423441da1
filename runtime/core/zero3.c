/* zero3.c — the ZeRO-3 layout of a plan (layer groups, their shards, op segments) and the one
 * schedule both executors run over it through their hooks (see zero3.h). */
#include "zero3.h"
#include "op_registry.h"

#include <stdlib.h>
#include <string.h>

static int64_t round16(int64_t n) { return (n + 15) / 16 * 16; }

/* ".3." in a parameter name: its transformer layer (else -1). */
static int layer_of(const char *name) {
    for (const char *s = strchr(name, '.'); s; s = strchr(s + 1, '.')) {
        char *end;
        long v = strtol(s + 1, &end, 10);
        if (end > s + 1 && *end == '.') return (int)v;
    }
    return -1;
}

/* Groups: runs of consecutive parameters (arena order) of the same layer; before the first layer
 * "pre" (-1), after it "post" (-2). A group spans its first to its last tensor, alignment gaps
 * included (they stay zero). */
static int groups(hyp_z3_layout *z, const plan_t *p, int world, hyp_err *e) {
    int key_prev = -3, seen_layer = 0;
    z->start = calloc((size_t)p->n_params_t, sizeof(int64_t));
    z->len = calloc((size_t)p->n_params_t, sizeof(int64_t));
    z->gs = calloc((size_t)p->n_params_t, sizeof(int64_t));
    z->sb = calloc((size_t)p->n_params_t, sizeof(int64_t));
    if (!z->start || !z->len || !z->gs || !z->sb) return hyp_fail(e, HYP_EFAIL, "out of memory");
    for (int i = 0; i < p->n_params_t; i++) {
        const plan_param *pp = &p->params[i];
        int l = layer_of(pp->name), key = l >= 0 ? l : seen_layer ? -2 : -1;
        seen_layer |= l >= 0;
        if (i && pp->offset < p->params[i - 1].offset + p->params[i - 1].numel)
            return hyp_fail(e, HYP_EINPUT, "plan: parameter %s does not follow the previous one in the arena — ZeRO-3 needs the plan's arena order; regenerate the plan", pp->name);
        if (key != key_prev) z->start[z->n_groups++] = pp->offset;
        z->len[z->n_groups - 1] = pp->offset + pp->numel - z->start[z->n_groups - 1]; /* alignment gaps included */
        key_prev = key;
    }
    if (!z->n_groups) return hyp_fail(e, HYP_EINPUT, "plan: no parameters — nothing for ZeRO-3 to shard");
    int64_t sb = 0;
    for (int g = 0; g < z->n_groups; g++) {
        z->gs[g] = round16((z->len[g] + world - 1) / world);
        z->sb[g] = sb;
        sb += z->gs[g];
        if (world * z->gs[g] > z->slot_cap) z->slot_cap = world * z->gs[g];
    }
    return HYP_OK;
}

int hyp_z3_group_at(const hyp_z3_layout *z, int64_t offset) {
    for (int g = 0; g < z->n_groups; g++)
        if (offset >= z->start[g] && offset < z->start[g] + z->len[g]) return g;
    return -1;
}

/* Cuts an op list into segments of one group each; an op must not mix groups. */
static int segments(const hyp_z3_layout *z, const plan_op *ops, int n, hyp_z3_seg **out, int *nout, hyp_err *e) {
    hyp_z3_seg *s = calloc((size_t)(n ? n : 1), sizeof *s);
    if (!s) return hyp_fail(e, HYP_EFAIL, "out of memory");
    int ns = 0, cur = -1;
    for (int i = 0; i < n; i++) {
        const plan_op *o = &ops[i];
        int g = -1;
        for (int k = 0; k < o->nin + o->nout; k++) {
            int b = k < o->nin ? o->in[k] : o->out[k - o->nin];
            int bg = b >= 0 ? z->buf_group[b] : -1;
            if (bg < 0) continue;
            if (g >= 0 && bg != g) {
                free(s);
                return hyp_fail(e, HYP_EINPUT, "plan: op %d (%s) uses parameters of two layers — ZeRO-3 gathers one layer at a time; use zero2 for this plan",
                                i, hyp_op_name(o->op));
            }
            g = bg;
        }
        if (g >= 0 && g != cur) {
            if (ns && s[ns - 1].group < 0) s[ns - 1].group = g; /* leading param-free ops join */
            else s[ns++] = (hyp_z3_seg){i, g};
            cur = g;
        } else if (!ns) {
            s[ns++] = (hyp_z3_seg){i, -1};
        }
    }
    *out = s;
    *nout = ns;
    return HYP_OK;
}

int hyp_z3_layout_init(hyp_z3_layout *z, const plan_t *p, int world, int rank, hyp_err *e) {
    memset(z, 0, sizeof *z);
    z->world = world, z->rank = rank;
    int rc = groups(z, p, world, e);
    if (rc) return rc;
    z->buf_group = malloc(sizeof(int) * (size_t)(p->n_bufs ? p->n_bufs : 1));
    if (!z->buf_group) return hyp_fail(e, HYP_EFAIL, "out of memory");
    for (int b = 0; b < p->n_bufs; b++) {
        int k = p->bufs[b].kind;
        z->buf_group[b] = k == BUF_PARAM || k == BUF_GRAD ? hyp_z3_group_at(z, p->bufs[b].offset) : -1;
    }
    if ((rc = segments(z, p->fwd, p->n_fwd, &z->fwd, &z->n_fwd, e)) ||
        (rc = segments(z, p->bwd, p->n_bwd, &z->bwd, &z->n_bwd, e)))
        return rc;
    for (int k = 0; k < p->loss.nin; k++)
        if (p->loss.in[k] >= 0 && z->buf_group[p->loss.in[k]] >= 0)
            return hyp_fail(e, HYP_EINPUT, "plan: the loss op reads a parameter — ZeRO-3 cannot run this plan; use zero2");
    z->shard = z->sb[z->n_groups - 1] + z->gs[z->n_groups - 1];
    z->n_slots = p->zero_prefetch + 1;
    return HYP_OK;
}

void hyp_z3_layout_free(hyp_z3_layout *z) {
    free(z->start), free(z->len), free(z->gs), free(z->sb);
    free(z->buf_group), free(z->fwd), free(z->bwd);
    memset(z, 0, sizeof *z);
}

int64_t hyp_z3_own(const hyp_z3_layout *z, int64_t off, int64_t n, int64_t *first, int64_t *pos) {
    int g = hyp_z3_group_at(z, off);
    if (g < 0) return 0;
    int64_t lo = z->start[g] + z->rank * z->gs[g], hi = lo + z->gs[g];
    int64_t a = off > lo ? off : lo, b = off + n < hi ? off + n : hi;
    *first = a;
    *pos = z->sb[g] + (a - lo);
    return b > a ? b - a : 0;
}

int hyp_z3_schedule(const hyp_z3_layout *L, const hyp_z3_seg *seg, int ns, int n_ops, int grads, int gathers,
                    const hyp_z3_hooks *h, void *ctx, hyp_err *e) {
    int started = 0, rc = HYP_OK;
    for (int s = 0; s < ns && !rc; s++) {
        int g = seg[s].group, k = s % L->n_slots, end = s + 1 < ns ? seg[s + 1].start : n_ops;
        for (; gathers && started < ns && started < s + L->n_slots && !rc; started++)
            if (seg[started].group >= 0) rc = h->gather(ctx, started, seg[started].group, started % L->n_slots, e);
        if (!rc && gathers && g >= 0) rc = h->acquire(ctx, g, k, e);
        if (!rc && grads && g >= 0) rc = h->grads_begin(ctx, g, e);
        for (int i = seg[s].start; i < end && !rc; i++) rc = h->run_op(ctx, i, e);
        if (!rc && h->release) rc = h->release(ctx, k, e);
        if (!rc && grads && g >= 0) rc = h->reduce(ctx, g, k, e);
    }
    return rc;
}
