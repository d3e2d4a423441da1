/* zero3.h — the ZeRO-3 layout of a plan (v2104 stage 3), one piece for the cpu executor (exec.c)
 * and the device executor (exec_dev.c), so that both shard, gather and checkpoint alike.
 *
 * The parameters are cut into layer groups — the contiguous arena runs of one transformer layer
 * ("h.3." / "layers.3."), of the tensors before the first layer (embeddings) and of those after
 * the last one (final norm, untied head). Each group is padded and sharded evenly: rank r
 * persistently holds floats [r*gs, (r+1)*gs) of every group, at sb in its shard arrays. The op
 * lists are cut into segments that each use one group; an executor gathers a segment's group into
 * one of n_slots working slots before it runs (prefetching the next n_slots - 1) and, in backward,
 * reduce-scatters the group's gradients after it.
 *
 * Pure arithmetic over the plan: no memory of parameters, no collectives, no I/O.
 */
#ifndef HYP_ZERO3_H
#define HYP_ZERO3_H

#include <stdint.h>

#include "hyp_err.h"
#include "plan.h"

#define HYP_Z3_MAX_SLOTS 9          /* prefetch of up to 8 groups + the one computing */

typedef struct {
    int start, group;               /* first op index; the group its params/grads belong to (-1: none) */
} hyp_z3_seg;

typedef struct {
    int world, rank;
    int n_groups;
    int64_t *start, *len, *gs, *sb; /* per group: arena start, floats, shard floats per rank, own
                                       shard's offset in the rank's shard arrays */
    int *buf_group;                 /* per plan buffer: group of a param/grad buffer, else -1 */
    hyp_z3_seg *fwd, *bwd;
    int n_fwd, n_bwd;
    int n_slots;                    /* the plan's zero_prefetch + 1 */
    int64_t slot_cap;               /* max over groups of world * gs: one gathered group */
    int64_t shard;                  /* floats of a rank's shard arrays (sum of gs) */
} hyp_z3_layout;

/* What an executor does at each point of the schedule (ctx: its state). Hooks return HYP_OK or an
 * error code with e filled; the first error stops the schedule. */
typedef struct {
    /* starts the gather of group g (segment j's) into slot `slot` */
    int (*gather)(void *ctx, int j, int g, int slot, hyp_err *e);
    /* waits for slot `slot` to hold group g and points g's parameter buffers at it */
    int (*acquire)(void *ctx, int g, int slot, hyp_err *e);
    /* backward: zeroes the one-group gradient workspace and points g's gradient buffers at it */
    int (*grads_begin)(void *ctx, int g, hyp_err *e);
    /* runs op i of the list */
    int (*run_op)(void *ctx, int i, hyp_err *e);
    /* the ops using slot `slot` have been issued (NULL: nothing to record) */
    int (*release)(void *ctx, int slot, hyp_err *e);
    /* backward: group g's gradients (workspace) reduce-scattered into the own gradient shard */
    int (*reduce)(void *ctx, int g, int slot, hyp_err *e);
} hyp_z3_hooks;

/* Runs an op list of n_ops ops cut into segments seg[ns], one executor's hooks at each step: the
 * gathers started up to n_slots - 1 segments ahead (into the slots of finished segments), the
 * segment's slot acquired, its ops run, and with grads its gradients reduced. gathers = 0: the
 * parameters are all present (no gathers, no acquires). */
int hyp_z3_schedule(const hyp_z3_layout *L, const hyp_z3_seg *seg, int ns, int n_ops, int grads, int gathers,
                    const hyp_z3_hooks *h, void *ctx, hyp_err *e);

/* The layout of p for rank of world. HYP_EINPUT (naming the parameter or op) when the plan cannot
 * run under ZeRO-3: parameters out of arena order, an op using two layers, a loss reading one. */
int hyp_z3_layout_init(hyp_z3_layout *L, const plan_t *p, int world, int rank, hyp_err *e);
void hyp_z3_layout_free(hyp_z3_layout *L);
/* The group holding arena offset `offset`, or -1. */
int hyp_z3_group_at(const hyp_z3_layout *L, int64_t offset);
/* The part of the arena range [off, off+n) this rank owns: its length (0: none), its arena offset
 * in *first and its index in the shard arrays in *pos. A tensor lies inside one group, so its
 * own part is one contiguous range. */
int64_t hyp_z3_own(const hyp_z3_layout *L, int64_t off, int64_t n, int64_t *first, int64_t *pos);

#endif
