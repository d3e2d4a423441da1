/* train_cp.c — v2108 context parallelism in the trainer (see train_cp.h). */
#include "train_cp.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops_ring.h"

int train_cp_open(const plan_t *p, const char *plan_path, hyp_coll *world, const char *what, hyp_coll **cp, hyp_err *e) {
    *cp = NULL;
    if (p->cp < 2) return HYP_OK;
    int n = hyp_coll_world(world), r = hyp_coll_rank(world);
    if (what)
        return hyp_fail(e, HYP_EINPUT, "%s: %s with context parallelism (v2108 cp=%d) is not implemented — drop it, or regenerate the trainer without sp",
                        plan_path, what, p->cp);
    if (n % p->cp)
        return hyp_fail(e, HYP_EINPUT, "%s: this trainer is context-parallel over cp=%d ranks (v2108) and %d rank%s started: the world size must be a multiple of %d — start it with mpirun -np %d (or a multiple of %d for cp x dp), or regenerate with another --set v2108.degree",
                        plan_path, p->cp, n, n == 1 ? " was" : "s were", p->cp, p->cp, p->cp);
    return hyp_coll_split(world, r / p->cp, r % p->cp, cp, e);
}

void train_cp_loader_shape(const plan_t *p, const dp_t *d, int T, int *rank, int *world, int *Tl) {
    int cp = p->cp >= 2 ? p->cp : 1;
    *rank = d->rank / cp, *world = d->world / cp, *Tl = T * cp;
}

int train_cp_next(hyp_loader *L, exec_t *x, hyp_err *e) {
    const plan_t *p = x->p;
    if (p->cp < 2 || !x->cp) return hyp_loader_next_pos(L, x->tokens, x->targets, x->positions, e);
    const int cp = p->cp, B = x->B, T = x->T, TF = T * cp;
    int32_t *buf = malloc(sizeof(int32_t) * (size_t)B * (size_t)(2 * TF + T));
    if (!buf) return hyp_fail(e, HYP_EFAIL, "context parallel: out of memory for a batch of %d x %d tokens", B, TF);
    int32_t *tok = buf, *tgt = buf + (size_t)B * TF, *pos = tgt + (size_t)B * TF;
    int rc = hyp_loader_next_pos(L, tok, tgt, NULL, e);
    if (!rc) {
        hyp_cp_positions(pos, p->cp_layout, cp, hyp_coll_rank(x->cp), B, TF);
        for (int b = 0; b < B; b++)
            for (int t = 0; t < T; t++) {
                long l = (long)b * T + t, g = (long)b * TF + pos[l];
                x->tokens[l] = tok[g], x->targets[l] = tgt[g];
                if (x->positions) x->positions[l] = pos[l];
            }
    }
    free(buf);
    return rc;
}

void train_cp_describe(const plan_t *p, const hyp_coll *cp, int dp) {
    if (!cp) return;
    printf("context parallel (v2108): cp %d x dp %d = %d ranks (cp ranks contiguous), %s split: each rank holds %d of every %d tokens, %s\n",
           p->cp, dp, p->cp * dp, p->cp_layout ? "zigzag" : "contiguous", p->T, p->T * p->cp,
           p->cp_comm ? "K/V passed around the cp group's ring, each shift overlapped with the block compute (v2116)"
                      : "K/V all-gathered per layer, their gradients reduce-scattered (no v2116)");
}

void train_cp_report(const plan_t *p, const hyp_coll *cp, int steps) {
    if (!cp || steps < 1) return;
    unsigned long long b = (unsigned long long)hyp_coll_bytes_sent(cp);
    printf("cp traffic (v2108): %llu B sent by this rank on its cp group of %d in %d steps, %.0f B/step (%s; evaluation passes included)\n",
           b, hyp_coll_world(cp), steps, (double)b / steps,
           p->cp_comm ? "K/V blocks around the ring and their gradient accumulators, v2116" : "K/V all-gathers and gradient reduce-scatters");
}
