/* optim.h — the optimizer interface: one update rule per file (optim_adamw.c, ...), found by the
 * plan's optimizer.kind in the registry (optim_reg.c).
 *
 * An optimizer declares the state tensors it keeps per parameter (names, dtypes, checkpoint
 * names) and whether it shards elementwise or needs whole matrices, and updates a span: a
 * contiguous float range of the parameter arena inside one parameter tensor, with its gradients
 * and states, under the tensor's group (lr multiplier, weight decay). On a device it updates what
 * the rank owns by choosing and launching its rendered kernel through exec_dev. Every caller goes
 * through it: the cpu step (train.c), the device step, ZeRO (the states are allocated and sharded
 * as declared here) and checkpoints (optimizer.safetensors holds the declared states).
 *
 * Never: I/O, collectives, knowledge of ZeRO stages or ranks — the callers cut the spans.
 */
#ifndef HYP_OPTIM_H
#define HYP_OPTIM_H

#include <stdint.h>

#include "exec_dev.h"
#include "hyp_err.h"
#include "plan.h"

/* One contiguous piece of a parameter tensor and everything its update touches. */
typedef struct {
    float *param;                        /* [n] */
    const float *grad;                   /* [n] the summed gradients (before grad_scale) */
    float *state[HYP_OPT_MAX_STATE];     /* the optimizer's states in declared order: [n] each in the
                                            arena layout, or the tensor's packed state (the plan's
                                            state_n floats, span = whole tensor) */
    int64_t n;
    const hyp_optim_group *group;        /* lr_mult, weight_decay of the tensor's group */
    const plan_param *tensor;            /* the tensor the span lies in (name, shape, numel) */
    int64_t first;                       /* the span's first element inside that tensor */
} hyp_optim_span;

/* What changes from step to step. */
typedef struct {
    double lr;                           /* the schedule's learning rate (before lr_mult) */
    int t;                               /* optimizer step, 1-based */
    float grad_scale;                    /* the clip factor (host steps) */
    double avg_weight;                   /* schedule-free averaging weight c_t = lr_max_t^2 / sum over
                                            steps i <= t of lr_max_i^2 (train_avg_weight); only kinds
                                            with an eval_point read it */
    double tokens;                       /* hess_span only: the tokens B the sampled-label loss
                                            averaged over (its gradient is the mean over them) */
} hyp_optim_step;

typedef struct hyp_optim_i {
    /* the registry key: the plan's optimizer.kind */
    const char *kind;
    /* the state tensors kept per parameter, each of the parameter's shape, in this order: their
     * names in the plan ("m", "v"), dtypes, and checkpoint names "<param name><suffix>" */
    int n_state;
    const char *state_name[HYP_OPT_MAX_STATE];
    hyp_dtype state_dtype[HYP_OPT_MAX_STATE];
    const char *ckpt_suffix[HYP_OPT_MAX_STATE];
    /* 0: any contiguous range updates alone (ZeRO shards by floats); 1: whole tensors only (the
     * span is then always a whole tensor: first == 0, n == tensor->numel) */
    int shard_matrix;
    /* the group rules ("rule" of a plan group) this kind takes besides "" (its own rule), NULL
     * ended; hyp_optim_open refuses any other */
    const char *rules[6];
    /* the floats state k keeps for tensor t (in its group c->groups[t->group]); NULL: t's numel.
     * hyp_optim_open checks the plan's state layout against it (a kind that keeps fewer floats
     * than numel needs the plan's packed layout, "numel" lists, which gen writes) */
    int64_t (*state_numel)(const hyp_optim_cfg *c, const plan_param *t, int k);
    /* checks the plan's section for this kind: hyper-parameters present and in range */
    int (*check)(const hyp_optim_cfg *cfg, hyp_err *e);
    /* the host update of one span */
    void (*step_span)(const hyp_optim_cfg *cfg, const hyp_optim_span *s, const hyp_optim_step *a);
    /* NULL for most kinds. A kind whose parameters hold another point during training than the
     * one to evaluate (schedule-free: y while training, the average x for evaluation, sampling
     * and checkpoints) moves one span there (to_eval 1) and back (to_eval 0), in place from its
     * states; the trainer calls it around evaluation and checkpoint saves, and after a resume */
    void (*eval_point)(const hyp_optim_cfg *cfg, const hyp_optim_span *s, int to_eval);
    /* NULL for most kinds. A kind that keeps a curvature estimate refreshed from the gradient of
     * the loss on labels sampled from the model's own softmax (Sophia-G's Gauss-Newton-Bartlett
     * estimator): after every step t with t % hess_every(cfg) == 0 the trainer runs one more
     * forward and backward on the step's last micro-batch with sampled labels (train/gnb.c),
     * reduces those gradients over ranks as a step's, and calls hess_span on each span it owns,
     * s->grad then holding the mean gradient of the sampled loss over a->tokens tokens (no clip:
     * a->grad_scale is 1). Host only: a device backend refuses such a kind. */
    int (*hess_every)(const hyp_optim_cfg *cfg);
    void (*hess_span)(const hyp_optim_cfg *cfg, const hyp_optim_span *s, const hyp_optim_step *a);
    /* the device update of what this rank owns (exec_dev_optim_own), gradients scaled by the
     * device float *d_grad_scale; enqueued on the default stream. NULL: no device kernel */
    int (*step_device)(const hyp_optim_cfg *cfg, exec_dev *x, const hyp_optim_step *a, const float *d_grad_scale,
                       hyp_err *e);
    /* NULL for most kinds: eval_point on the device's parameters (what this rank owns, from its
     * device states), enqueued on the default stream; the device backend calls it around
     * evaluation (checkpoints and sampling move the host mirror with eval_point) */
    int (*eval_device)(const hyp_optim_cfg *cfg, exec_dev *x, int to_eval, hyp_err *e);
    /* NULL for most kinds: hess_span on the device over what this rank owns (its gradients those of
     * the sampled-label pass, a->tokens as for hess_span), enqueued on the default stream */
    int (*hess_device)(const hyp_optim_cfg *cfg, exec_dev *x, const hyp_optim_step *a, hyp_err *e);
    /* NULL for most kinds. A whole-matrix kind (shard_matrix) that can run under ZeRO stages 1-2
     * (train_optim_own_matrix): the tensors of group rule matrix_rule go in three parts —
     * pre_span on each span this rank owns (elementwise: the states, and the per-element input
     * u[n] of the matrix transform), u all-gathered, matrix_solve on the whole matrices assigned
     * to this rank (o[numel] from u[numel]), o summed over ranks, post_span on the own spans
     * (elementwise: the parameters from o); every other tensor's spans take step_span. */
    const char *matrix_rule;
    /* 1: a whole-matrix kind whose step_span, given a span of part of a tensor under ZeRO stage 1,
     * reads the rest of that tensor's gradient around it (s->grad - s->first, the tensor's whole
     * gradient: stage 1 keeps every gradient all-reduced on every rank); stages 2-3 are refused */
    int zero1_full_grad;
    void (*pre_span)(const hyp_optim_cfg *cfg, const hyp_optim_span *s, const hyp_optim_step *a, float *u);
    void (*matrix_solve)(const hyp_optim_cfg *cfg, const plan_param *t, const float *u, float *o);
    void (*post_span)(const hyp_optim_cfg *cfg, const hyp_optim_span *s, const hyp_optim_step *a, const float *o);
} hyp_optim_i;

/* The registry (optim_reg.c): the optimizer of that kind, or NULL. */
const hyp_optim_i *hyp_optim_find(const char *kind);
/* The plan's optimizer, checked: a registered kind, its states as the kind declares them (names,
 * dtypes), its hyper-parameters; ZeRO stage >= 1 needs an elementwise one. */
int hyp_optim_open(const plan_t *p, const hyp_optim_i **out, hyp_err *e);
/* A hyper-parameter of the plan's section by name (the kind's check made sure it is there). */
double hyp_optim_hyper(const hyp_optim_cfg *cfg, const char *name);
/* One hyper-parameter a kind takes and its range [lo, hi] ([lo, hi) when hi_open). */
typedef struct {
    const char *name;
    double lo, hi;
    int hi_open;
} hyp_optim_hyper_range;
/* What every kind's check does first: each of the n hyper-parameters present and in range, no
 * other one in the plan's section; `who` names the kind in the messages ("AdamW"). */
int hyp_optim_check_hypers(const hyp_optim_cfg *cfg, const char *who, const hyp_optim_hyper_range *h, int n, hyp_err *e);
/* Every group's weight decay >= 0 (the kinds whose decay is a group setting, not a hyper). */
int hyp_optim_check_groups(const hyp_optim_cfg *cfg, hyp_err *e);
/* What every device step does before binding its own arguments: finds the rank's part and the
 * manifest's optimizer launch (kernel, nparams: exec_dev_optim_own), refuses groups with different
 * lr multipliers (a device kernel takes one learning rate), uploads each segment's weight decay
 * (o->seg_val) and returns in *lr the step's learning rate times that one multiplier. */
int hyp_optim_device_begin(const hyp_optim_cfg *cfg, exec_dev *x, const char *kernel, int nparams, double base_lr,
                           exec_dev_own *o, double *lr, hyp_err *e);
/* The arguments every elementwise optimizer kernel opens with, in this order: param, the first
 * n_states states, grad, seg_end, seg_val, nseg, n, lr (after memset(k, 0)); the kernel's own
 * scalars follow. */
void hyp_optim_kargs_head(hyp_kargs *k, const exec_dev_own *o, int n_states, double lr);
/* The host update of the arena range [lo, hi), cut at tensor boundaries into spans: param, grad
 * and state[k] point at the range's first float (element lo of the arena). */
void hyp_optim_step_range(const hyp_optim_i *o, const plan_t *p, const hyp_optim_step *a, int64_t lo, int64_t hi,
                          float *param, const float *grad, float *const *state);
/* The same with another per-span function of o (its hess_span). */
typedef void (*hyp_optim_span_fn)(const hyp_optim_cfg *cfg, const hyp_optim_span *s, const hyp_optim_step *a);
void hyp_optim_range_fn(const hyp_optim_i *o, hyp_optim_span_fn fn, const plan_t *p, const hyp_optim_step *a, int64_t lo,
                        int64_t hi, float *param, const float *grad, float *const *state);


/* v2161: one AdamW step (the plan's optimizer must be "adamw", stage 0) over the whole arena of
 * bf16 parameters param[param_floats] with fp32 states m, v, writing each parameter rounded as the
 * plan's param_storage says (stochastic with its seed, the step a->t and the element's arena
 * index; or nearest) — kernels/hyp/sr.h's element update, the device kernel's body. */
/* The elements [first, first + n) of that arena (their arena indices key the rounding) with one
 * learning rate and weight decay: the body of both, exposed for the cpu-vs-kernel tests. */
void hyp_adamw_bf16_span(uint16_t *param, const float *grad, float *m, float *v, long first, long n, float lr,
                         float beta1, float beta2, float eps, float ibc1, float ibc2, float wd, float gscale,
                         unsigned seed, unsigned step, int nearest);
void hyp_adamw_bf16_step(const hyp_optim_cfg *c, const plan_t *p, const hyp_optim_step *a, uint16_t *param,
                         const float *grad, float *m, float *v);

#endif
