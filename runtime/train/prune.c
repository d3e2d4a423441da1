/* prune.c — masks, magnitude criteria and the schedules of v2154/v2156 (see prune.h). */
#include "prune.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    int param;        /* index into plan_t.params */
    int64_t off, n;   /* floats in the parameter arena */
    int64_t cols;     /* the row length (2:4 groups run along it) */
} pmat;

struct train_prune {
    const plan_t *p;
    int n_mat;
    pmat *mat;
    uint8_t *mask;    /* [sum n]: 1 kept, 0 masked, matrices back to back */
    long long total, masked;
    int total_steps, start, end;
    int last_update;  /* the step of the latest mask update (0: none yet) */
    uint64_t *order;  /* scratch for the per-matrix ranking: (|w| bits << 32 | index) */
};

/* the prunable matrices: 2-D weights inside the transformer layers */
static int prunable(const plan_param *q) {
    return q->ndim == 2 && (strstr(q->name, ".h.") || strstr(q->name, "model.layers.")) && !strstr(q->name, "embed");
}

int train_prune_open(train_prune **out, const plan_t *p, exec_t *x, int total_steps, int resumed, hyp_err *e) {
    *out = NULL;
    if (!p->pr_on) return HYP_OK;
    train_prune *pr = calloc(1, sizeof *pr);
    if (!pr) return hyp_fail(e, HYP_EFAIL, "out of memory for the pruning masks");
    pr->p = p;
    pr->total_steps = total_steps;
    pr->start = (int)floor(p->pr_start * total_steps);
    pr->end = (int)ceil(p->pr_end * total_steps);
    if (pr->end <= pr->start) pr->end = pr->start + 1;
    pr->mat = calloc((size_t)p->n_params_t, sizeof *pr->mat);
    int64_t maxn = 0;
    for (int i = 0; pr->mat && i < p->n_params_t; i++) {
        const plan_param *q = &p->params[i];
        if (!prunable(q)) continue;
        if (p->pr_pattern == 1 && q->shape[1] % 4)
            return train_prune_close(pr), hyp_fail(e, HYP_EINPUT, "%s: rows of %lld weights cannot be cut into the groups of 4 of the 2:4 pattern — use --set v2154.pattern=unstructured",
                                                  q->name, (long long)q->shape[1]);
        pr->mat[pr->n_mat++] = (pmat){i, q->offset, q->numel, q->shape[1]};
        pr->total += q->numel;
        if (q->numel > maxn) maxn = q->numel;
    }
    if (!pr->mat || pr->n_mat == 0) {
        train_prune_close(pr);
        return hyp_fail(e, HYP_EINPUT, "pruning (v2154): the model has no prunable matrix — disable v2154");
    }
    pr->mask = malloc((size_t)pr->total);
    pr->order = malloc(sizeof(uint64_t) * (size_t)maxn);
    if (!pr->mask || !pr->order) {
        long long n = pr->total;
        train_prune_close(pr);
        return hyp_fail(e, HYP_EFAIL, "out of memory for the pruning masks (%lld weights)", n);
    }
    /* a fresh run keeps every weight; a resumed one (and v2155's fixed masks: the rewound weights
     * of `gen lottery`) takes the mask from the zeros */
    int64_t at = 0;
    pr->masked = 0;
    for (int m = 0; m < pr->n_mat; m++)
        for (int64_t i = 0; i < pr->mat[m].n; i++, at++) {
            pr->mask[at] = !(resumed || p->pr_gradual == 2) || x->params[pr->mat[m].off + i] != 0.0f;
            pr->masked += !pr->mask[at];
        }
    *out = pr;
    return HYP_OK;
}

void train_prune_close(train_prune *pr) {
    if (!pr) return;
    free(pr->mat);
    free(pr->mask);
    free(pr->order);
    free(pr);
}

void train_prune_grads(train_prune *pr, exec_t *x) {
    if (!pr) return;
    const uint8_t *mk = pr->mask;
    for (int m = 0; m < pr->n_mat; m++) {
        float *g = x->grads + pr->mat[m].off;
        for (int64_t i = 0; i < pr->mat[m].n; i++) g[i] = mk[i] ? g[i] : 0.0f;
        mk += pr->mat[m].n;
    }
}

double train_prune_target(const train_prune *pr, int step) {
    const plan_t *p = pr->p;
    if (p->pr_gradual == 2) return train_prune_sparsity(pr); /* fixed: whatever the zeros were */
    if (p->pr_pattern == 1) return 0.5;
    if (!p->pr_gradual) return p->pr_target;
    if (step <= pr->start) return 0;
    double prog = (double)(step - pr->start) / (double)(pr->end - pr->start);
    if (prog > 1) prog = 1;
    return p->pr_target * (1 - (1 - prog) * (1 - prog) * (1 - prog));
}

/* is `step` a mask update of the schedule? oneshot and 2:4 without v2156: the first step; gradual:
 * every `every` steps from start, and the first step at or after end */
static int due(const train_prune *pr, int step) {
    const plan_t *p = pr->p;
    if (p->pr_gradual == 2) return 0;
    if (!p->pr_gradual) return pr->last_update == 0;
    if (step <= pr->start) return 0;
    if (step >= pr->end) return pr->last_update < pr->end;
    return (step - pr->start) % p->pr_every == 0;
}

static int cmp_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

/* |w| of a float as an integer key that sorts like the magnitude (sign bit cleared) */
static uint32_t mag_key(float w) {
    uint32_t u;
    memcpy(&u, &w, sizeof u);
    return u & 0x7fffffffu;
}

static void update_masks(train_prune *pr, exec_t *x, int step) {
    uint8_t *mk = pr->mask;
    double s = train_prune_target(pr, step);
    pr->masked = 0;
    for (int m = 0; m < pr->n_mat; m++) {
        const pmat *q = &pr->mat[m];
        const float *w = x->params + q->off;
        if (pr->p->pr_pattern == 1) { /* 2:4: the two smallest of each group of 4 (ties: lower index first) */
            for (int64_t g = 0; g < q->n; g += 4) {
                int lo[2] = {-1, -1};
                for (int k = 0; k < 4; k++) {
                    uint32_t key = mag_key(w[g + k]);
                    if (lo[0] < 0 || key < mag_key(w[g + lo[0]])) lo[1] = lo[0], lo[0] = k;
                    else if (lo[1] < 0 || key < mag_key(w[g + lo[1]])) lo[1] = k;
                }
                for (int k = 0; k < 4; k++) mk[g + k] = k != lo[0] && k != lo[1];
            }
            pr->masked += q->n / 2;
        } else {
            int64_t k = (int64_t)floor(s * (double)q->n);
            for (int64_t i = 0; i < q->n; i++) pr->order[i] = (uint64_t)mag_key(w[i]) << 32 | (uint64_t)i;
            qsort(pr->order, (size_t)q->n, sizeof *pr->order, cmp_u64);
            memset(mk, 1, (size_t)q->n);
            for (int64_t i = 0; i < k; i++) mk[pr->order[i] & 0xffffffffu] = 0;
            pr->masked += k;
        }
        mk += q->n;
    }
    pr->last_update = step;
}

int train_prune_after_update(train_prune *pr, exec_t *x, int step) {
    if (!pr) return 0;
    int changed = due(pr, step);
    if (changed) update_masks(pr, x, step);
    const uint8_t *mk = pr->mask;
    for (int m = 0; m < pr->n_mat; m++) {
        float *w = x->params + pr->mat[m].off;
        for (int64_t i = 0; i < pr->mat[m].n; i++) w[i] = mk[i] ? w[i] : 0.0f;
        mk += pr->mat[m].n;
    }
    return changed;
}

int train_prune_last_update(const train_prune *pr) { return pr ? pr->last_update : 0; }
double train_prune_sparsity(const train_prune *pr) { return pr && pr->total ? (double)pr->masked / (double)pr->total : 0; }
long long train_prune_weights(const train_prune *pr) { return pr ? pr->total : 0; }
int train_prune_matrices(const train_prune *pr) { return pr ? pr->n_mat : 0; }

const char *train_prune_describe(const train_prune *pr, char *buf, size_t cap) {
    const plan_t *p = pr->p;
    if (p->pr_gradual == 2)
        snprintf(buf, cap, "pruning (v2155): masks fixed to the initial weights' zeros: %lld of %lld weights in %d matrices (sparsity %.4f), held through training",
                 pr->masked, pr->total, pr->n_mat, train_prune_sparsity(pr));
    else if (p->pr_pattern == 1)
        snprintf(buf, cap, "pruning (v2154): 2:4 pattern on %d matrices (%lld weights), 2 of every 4 masked by magnitude %s",
                 pr->n_mat, pr->total, p->pr_gradual ? "at every update of the v2156 schedule" : "at the first step");
    else if (p->pr_gradual)
        snprintf(buf, cap, "pruning (v2156): %d matrices (%lld weights) to sparsity %.3g by magnitude, cubic schedule over steps %d-%d, masks updated every %d steps",
                 pr->n_mat, pr->total, p->pr_target, pr->start, pr->end, p->pr_every);
    else
        snprintf(buf, cap, "pruning (v2154): %d matrices (%lld weights) to sparsity %.3g by magnitude at the first step, held through training",
                 pr->n_mat, pr->total, p->pr_target);
    return buf;
}
