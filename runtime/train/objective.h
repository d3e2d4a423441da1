/* objective.h — what a training step minimizes, as a table of slots that the one step driver
 * (backend.c train_step) and the one training loop (train_main.c) run: the next-token loss of
 * pretraining and SFT over the data loader (obj_tokens.c; v2149 distillation is this objective
 * with the teacher inside the backend's fused loss, distill.h), the preference losses v2195 DPO,
 * v2196 ORPO, v2197 SimPO, v2198 KTO (pref.c) and v2194 GRPO (grpo.c). As a backend is a
 * `static const train_backend_i` (backend.h, after ggml's ggml_backend_i), an objective is a
 * `static const train_objective_i` with one commented slot per entry, NULL where it has nothing
 * to do. The driver owns everything around the slots — zeroing and reducing the gradients, the
 * v2162 loss scale, the v2176 guard, the optimizer, v2184 profiling, v2177 preemption, the
 * checkpoints, the progress line, the metrics JSONL and TensorBoard — so that every objective
 * gets them the same way.
 * Never: an objective touches the optimizer, the gradient reduction, checkpoints' weights, stop
 * signals or the log's common fields; its backward goes through the backend (micro_batch, or
 * token_losses + weighted_backward), never a backend's executor directly.
 */
#ifndef HYP_OBJECTIVE_H
#define HYP_OBJECTIVE_H

#include <stdio.h>

#include "backend.h"
#include "ckpt.h"
#include "metrics.h"

typedef struct train_objective_i {
    /* before the step's micro-batches, after nothing was computed yet (GRPO: the backend's
     * current weights to the host executor it samples with); NULL: nothing */
    int (*step_begin)(train_objective *o, train_backend *b, int step, hyp_err *e);
    /* micro-batch k of K of step `step`: its forward, loss and backward on b — the backend's
     * micro_batch, or token_losses then weighted_backward — accumulating gradients, the loss
     * gradient multiplied by dscale (the v2162 loss scale S, 1 without); *loss += its part of the
     * step's mean loss (the driver zeroes it first); *tm: the waits and batch shape it adds */
    int (*micro_batch)(train_objective *o, train_backend *b, int k, int K, int step, double dscale, double *loss,
                       train_step_times *tm, hyp_err *e);
    /* after the micro-batches, before the gradient reduction: *loss made the global mean loss,
     * the same on every rank, and what the micro-batches changed for themselves undone (a
     * rebound batch shape); NULL: every rank computed the global loss already */
    int (*step_end)(train_objective *o, train_backend *b, double *loss, train_step_times *tm, hyp_err *e);
    /* the named scalars of the last step and, NAN when it did not run then, of its evaluation,
     * for the metrics JSONL and TensorBoard: at most cap into kv; returns how many */
    int (*metrics)(const train_objective *o, hyp_metric_kv *kv, int cap);
    /* the progress line's words after the loss for the last step ("" or " | name value ...");
     * NULL: none */
    void (*line)(const train_objective *o, char *buf, size_t cap);
    /* evaluation after step `step` (0: the starting weights), on b; *val_loss the held-out loss
     * for the log (NAN: the objective has none; it prints its own "eval step" line then);
     * NULL: none */
    int (*eval)(train_objective *o, train_backend *b, int step, float *val_loss, hyp_err *e);
    /* the banner's lines on what it trains on (rank 0's stdout) */
    void (*describe)(const train_objective *o, FILE *out);
    /* a checkpoint of the last step is being written: its data position into st (loader_epoch,
     * loader_position counted over the whole data-parallel group, stream state) and the files
     * it keeps beside the checkpoints into dir (collective: every rank calls it, rank 0 writes) */
    int (*ckpt_save)(train_objective *o, train_backend *b, hyp_ckpt_state *st, const char *dir, hyp_err *e);
    /* back to a checkpoint's data position (v2176 rollback; a resume hands it to the open) */
    int (*ckpt_restore)(train_objective *o, const hyp_ckpt_state *st, int world, hyp_err *e);
    /* frees what the open allocated */
    void (*close)(train_objective *o);
} train_objective_i;

struct train_objective {
    const train_objective_i *i;
    void *impl;
    /* how the lines name the loss: "" for the next-token loss ("loss", "done: N steps"), else
     * the objective ("dpo loss", "done: N dpo steps") */
    const char *label;
    int has_eval;      /* eval runs every eval_every steps and after the last */
    int eval_at_start; /* and once before the first step (the starting weights) */
};

/* For an objective's open: o cleared, then its table i, label and a zeroed impl of impl_bytes
 * (returned; NULL: out of memory, in e). From then on train_objective_close frees what the open
 * made, even half of it. */
void *train_objective_alloc(train_objective *o, const train_objective_i *i, size_t impl_bytes, const char *label, hyp_err *e);
/* Calls o's close (when open) and clears it. */
void train_objective_close(train_objective *o);

/* The next-token loss over the loader (obj_tokens.c): pretraining, SFT (the loader's loss
 * masks), distillation (the backend's fused loss); val (NULL: no evaluation) scored over
 * eval_batches batches; stream: the loader reads raw text (v2129, its state into checkpoints). */
int train_objective_tokens(train_objective *o, hyp_loader *train, hyp_loader *val, int eval_batches, int stream,
                           const dp_t *d, hyp_err *e);

#endif
