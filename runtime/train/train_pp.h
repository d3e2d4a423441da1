/* train_pp.h — v2107 pipeline parallelism on the cpu backend: this rank is one stage of a
 * pipeline of p->pp ranks (its stage: the rank in its pipeline, train.h dp_t.tp_rank); it runs only its stage's op ranges of the plan
 * (core/plan_pp.c) for the step's K micro-batches in the GPipe or 1F1B order, receiving the
 * boundary activation from the previous stage and its gradient from the next (coll.h
 * point-to-point, counted in bytes), keeps each in-flight micro-batch's activations in a stash
 * slot, sums a parameter two stages share (tied embeddings) between them, and reports the bubble.
 * Never: the optimizer rule, data loading or printing progress (the trainer's); composing with
 * tp or ZeRO (refused at gen time). */
#ifndef HYP_TRAIN_PP_H
#define HYP_TRAIN_PP_H

#include "backend.h"

typedef struct train_pp train_pp;

/* The mesh of a pipeline trainer: world = dp x pp, a pipeline's stages contiguous ranks (coll.h
 * hyp_coll_mesh_split); d keeps the world in d->all, the pipeline in d->pp, the stage in
 * d->tp_rank (world rank 0 logs) and becomes the dp axis. EINPUT when pp does not divide the world
 * or several pipelines run a trainer without dp. */
int train_pp_mesh(const plan_t *p, const char *plan_path, dp_t *d, hyp_err *e);
/* The eval forward of the bound batch through the stages; every stage gets the last's loss. */
int train_pp_eval(train_pp *pp, exec_t *x, float *loss, hyp_err *e);
/* Checks the world against the plan (world == p->pp: one pipeline) and builds the stage driver
 * for K micro-batches per step; EINPUT "plan: what — how to fix" otherwise. */
int train_pp_open(const plan_t *p, const char *plan_path, hyp_coll *world, exec_t *x, int K, train_pp **out, hyp_err *e);
void train_pp_close(train_pp *pp);
/* The step's next micro-batch (its tokens, targets and positions are in x, dloss its loss scale):
 * kept; the last (K-th) runs the whole schedule, after which every stage knows each micro-batch's
 * mean loss (the last stage's, broadcast). EINPUT when the step has another number of them. */
int train_pp_micro_batch(train_pp *pp, exec_t *x, float dloss, int last, hyp_err *e);
/* The step's loss as the objective sums it: sum over k of mean_k * cnt_k / gcnt_k / K in k order
 * (micro-batch k's targets here and over all ranks, given before the schedule runs). */
void train_pp_weight(train_pp *pp, int k, double cnt, double gcnt);
double train_pp_loss(const train_pp *pp);
/* After the schedule: the stage's gradients summed over the dp axis dp (NULL or one rank: none),
 * the shared parameters' gradients summed between their stages, and the squared gradient norm of
 * the whole model (each tensor counted once, summed over the stages). */
int train_pp_reduce(train_pp *pp, exec_t *x, hyp_coll *dp, double *sumsq, hyp_err *e);
/* The optimizer on this stage's parameters only (the others are never read here). */
void train_pp_optim(train_pp *pp, exec_t *x, const hyp_optim_i *o, const hyp_optim_step *a);
void train_pp_describe(const train_pp *pp, const plan_t *p);
void train_pp_report(const train_pp *pp, int steps);

#endif
