/* train.h — the training step policy shared by the trainer program and the tests: learning-rate
 * schedule (warmup + cosine / warmup-stable-decay / linear / constant), global-norm clipping and
 * the plan's optimizer (optim.h) on what this rank owns of the host executor.
 * Pure functions of the plan and the executor state: no I/O, no collectives. */
#ifndef HYP_TRAIN_H
#define HYP_TRAIN_H

#include "exec.h"
#include "optim.h"

/* The data-parallel group a trainer runs in: its ranks, the ZeRO stage, the plan's optimizer. */
typedef struct {
    hyp_coll *coll;
    int rank, world, stage;
    const hyp_optim_i *opt;     /* hyp_optim_open */
    /* v2106 tensor parallelism (train_tp.h): coll, rank and world are then the dp axis of the
     * mesh, tp the rank's tp group (tp_rank in it) and all the whole world; NULL, 0 without tp */
    hyp_coll *tp, *all;
    int tp_rank;
    /* v2107 pipeline (train_pp.h): the rank's pipeline (its stage = tp_rank), coll the dp axis */
    hyp_coll *pp;
    /* v2109 expert parallelism (train_ep.h): the rank's ep group and its experts' replicas (the
     * same ep rank in the other groups); coll stays the whole world. NULL without ep */
    hyp_coll *ep, *ep_rep;
} dp_t;

typedef struct {
    double lr, min_lr_ratio, decay_fraction, max_norm;
    int warmup_steps, total_steps;
    char schedule[16];
    uint64_t seed;              /* the run's seed (sampled labels of the GNB pass, gnb.h) */
} train_opts;

/* The plan's defaults. */
void train_opts_from_plan(train_opts *o, const plan_t *p);
/* Learning rate for optimizer step `step` (1-based) of total_steps (v2130 warmup, v2131 schedule). */
double train_lr_at(const train_opts *o, int step);
/* Global L2 norm of all gradients (v2133), in double. */
double train_grad_norm(const exec_t *x);
/* Clip factor for a gradient norm: min(1, max_norm / norm); 1 when max_norm == 0. */
float train_clip_scale(const train_opts *o, double norm);
/* The optimizer step t (1-based) with gradient scale `scale` on what this rank owns: the whole
 * arena (stage 0), its shard [rank*shard, +shard) (stages 1-2; gradients from gshard at stage 2)
 * or each tensor's own part in the ZeRO-3 group layout. */
void train_optim_own(exec_t *x, const hyp_optim_i *o, double lr, int t, float scale);
/* The same with every field of the step given (avg_weight for schedule-free kinds). */
void train_optim_own_a(exec_t *x, const hyp_optim_i *o, const hyp_optim_step *a);
/* The step of a whole-matrix kind with matrix hooks (optim.h matrix_rule: distributed Muon) under
 * ZeRO stage 1-2 on coll's ranks (collective): its matrices' pre_span on the own shard, u
 * all-gathered, matrix_solve on the matrices assigned to this rank (largest first to the least
 * loaded rank, the same on every rank), the results all-reduced (zeros elsewhere), post_span on
 * the own shard; every other tensor's own spans through step_span. The caller all-gathers the
 * parameters as for any stage 1-2 step. */
int train_optim_own_matrix(exec_t *x, const hyp_optim_i *o, const hyp_optim_step *a, hyp_coll *coll, hyp_err *e);
/* The optimizer's hess_span (nothing when it has none) on what this rank owns, as train_optim_own_a:
 * x->grads (gshard at stages 2-3) hold the reduced gradients of the sampled-label loss (gnb.h). */
void train_hess_own(exec_t *x, const hyp_optim_i *o, const hyp_optim_step *a);
/* The schedule-free averaging weight of step t under the schedule o (the reference's ckp1 with
 * r = 0, weight_lr_power = 2): lr_max_t^2 / sum_{i<=t} lr_max_i^2, lr_max_i the largest LR of
 * steps 1..i. O(t); 1/t under a constant LR. */
double train_avg_weight(const train_opts *o, int t);
/* The same, O(1) per step when called for t = 1, 2, 3, ... (or resumed at any t: one O(t) pass
 * then): st carries the sums between calls (zero it before the first), adding the same terms in
 * the same order as train_avg_weight, so both return the same bits. */
typedef struct { int t; double lr_max, sum; } train_avg_state;
double train_avg_weight_next(const train_opts *o, int t, train_avg_state *st);
/* Stage 0 only: the optimizer's eval_point over the whole arena (nothing when it has none). */
void train_eval_point(exec_t *x, const hyp_optim_i *o, int to_eval);
/* The same on coll's ranks (collective): stage 0 as train_eval_point; stages 1-2 move the own
 * shard (the states are sharded) and all-gather the replicated parameters. */
int train_eval_point_dp(exec_t *x, const hyp_optim_i *o, hyp_coll *coll, int to_eval, hyp_err *e);

#endif
