/* moe_stats.h — the router statistics of the cpu executor's mixture-of-experts layers: tokens per
 * expert and the load-balancing loss of every MoE layer, summed over the training backward passes
 * (micro-batches) since the trainer last took them. The moe_bwd adapter (ops_table.c) adds one
 * pass from the routing state its forward saved (core/moe_layout.h); the trainer reads and resets
 * them once per step (train/train_moe.c). Layers with a capacity also count the assignments their
 * routing dropped (cpu/ops_moe.h: topi < 0). Evaluation and sampling run no backward and add nothing.
 * Never: a statistic the op did not compute, or any effect on the numerics of a step.
 */
#ifndef HYP_MOE_STATS_H
#define HYP_MOE_STATS_H

#include "exec.h"

typedef struct exec_moe {
    int n;              /* MoE layers: the moe_bwd ops of the backward list, sorted by layer */
    int *state_buf;     /* [n] the state buffer each one reads (moe_bwd in[4]: the forward's, or a
                           recomputation's replayed copy) */
    int *layer;         /* [n] its transformer layer (from the state buffer's name "l<layer>.") */
    int *E;             /* [n] its experts */
    int *first;         /* [n] index of its first expert in loads[] */
    int n_loads;        /* sum of E */
    double *loads;      /* [n_loads] tokens routed per expert (each token counts top_k times) */
    double *aux;        /* [n] load-balancing loss (coefficient included), summed over passes */
    int passes;         /* backward passes summed */
    double ep_remote;   /* v2109: routed rows whose expert is on another ep rank, summed over passes */
    int n_cap;          /* layers with a capacity (moe op attrs.capacity > 0): the first n_cap
                           of a second order, cap_of[] */
    int *cap_of;        /* [n] index into dropped[] of layer j, -1 when it is dropless */
    double *dropped;    /* [n_cap] routed assignments dropped over capacity, summed over passes */
    char (*dkey)[40];   /* [n_cap] "moe_dropped_l<layer>" */
    int n_bias;         /* layers with DeepSeek-V3's aux-loss-free selection bias (moe_fwd in[3]) */
    int *bias_buf, *bias_j; /* [n_bias] the bias parameter buffer and its layer's index j */
    float *bias_u;      /* [n_bias] its update rate (attrs.bias_rate) */
    unsigned long long ep_bytes0; /* the ep group's all-to-all bytes when the trainer last took them */
    char (*key)[40];    /* [n_loads + 1] metric names: "moe_load_l<layer>_e<expert>", "moe_aux_loss" */
} exec_moe;

/* Allocates x->moe when the plan has MoE ops (else leaves it NULL). */
int exec_moe_init(exec_t *x, hyp_err *e);
void exec_moe_free(exec_t *x);
/* One backward pass of the MoE op (top_k K) whose state buffer is state_buf: its loads and aux
 * loss from the state of N rows. */
void exec_moe_add(exec_t *x, int state_buf, const float *state, int N, int K);
/* After a step, with the step's loads summed over micro-batches and every rank (loads [n_loads],
 * the same on every rank): each aux-loss-free bias moves by op_moe_bias_update (cpu/ops_moe.h). */
void exec_moe_bias_step(exec_t *x, const double *loads);
/* Clears the sums (after the trainer took them). */
void exec_moe_reset(exec_t *x);

#endif
