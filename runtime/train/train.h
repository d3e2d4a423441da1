/* train.h — the training step policy shared by the trainer program and the tests: learning-rate
 * schedule (warmup + cosine / warmup-stable-decay / linear / constant), global-norm clipping and
 * the AdamW update over the plan's parameter tensors (decoupled decay on 2-D weights only).
 * Pure functions of the plan and the executor state: no I/O. */
#ifndef HYP_TRAIN_H
#define HYP_TRAIN_H

#include "exec.h"

typedef struct {
    double lr, min_lr_ratio, decay_fraction, weight_decay, beta1, beta2, eps, max_norm;
    int warmup_steps, total_steps;
    char schedule[16];
} train_opts;

/* The plan's defaults. */
void train_opts_from_plan(train_opts *o, const plan_t *p);
/* Learning rate for optimizer step `step` (1-based) of total_steps (v2130 warmup, v2131 schedule). */
double train_lr_at(const train_opts *o, int step);
/* Global L2 norm of all gradients (v2133), in double. */
double train_grad_norm(const exec_t *x);
/* Clip factor for a gradient norm: min(1, max_norm / norm); 1 when max_norm == 0. */
float train_clip_scale(const train_opts *o, double norm);
/* One AdamW step (t = step, 1-based) over every parameter tensor with gradient scale `scale`. */
void train_adamw_step(exec_t *x, const train_opts *o, double lr, int t, float scale);
/* The same restricted to the parameter-arena range [lo, hi) (a ZeRO shard): g, m, v point at the
 * gradient / moment values of that range (g[0] is the gradient of params[lo]). Each tensor keeps
 * its own decay flag where it intersects the range. */
void train_adamw_range(exec_t *x, const train_opts *o, double lr, int t, float scale, int64_t lo,
                       int64_t hi, const float *g, float *m, float *v);
/* ZeRO-3: AdamW over this rank's shards (x->params, x->gshard, x->m, x->v in the group layout). */
void train_adamw_zero3(exec_t *x, const train_opts *o, double lr, int t, float scale);

#endif
