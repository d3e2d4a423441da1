/* losspred.h — the trainer's loss prediction (v2148): the losses of the run so far, a saturating
 * power law L(t) = E + A * t^(-alpha) in the step t fitted to them (lawfit.h: Huber with delta 1e-3
 * on log residuals, L-BFGS from a fixed grid of starts), the predicted loss at the final step and an
 * 80% band from a residual bootstrap. Deterministic: the same losses give the same prediction on
 * every rank and every run. Never exits; never touches the model. */
#ifndef HYP_LOSSPRED_H
#define HYP_LOSSPRED_H

#include <stdint.h>

typedef struct hyp_losspred hyp_losspred;

typedef struct {
    int ok;            /* 1: a fit was made (enough points, a start converged) */
    int points;        /* binned points the fit used */
    int first_step;    /* the first step they cover */
    double E, A, alpha;
    double now;        /* the law at the current step */
    double final;      /* the law at the final step */
    double lo, hi;     /* 10th and 90th percentiles of the final loss over the bootstrap refits */
    double remaining;  /* now - final: the improvement the law still expects */
    int law;           /* HYP_LAW_POWER or HYP_LAW_LR_ANNEALING */
    double C;          /* lr_annealing: the annealing term's coefficient (E is L0 there) */
} hyp_losspred_out;

enum { HYP_LAW_POWER = 0, HYP_LAW_LR_ANNEALING = 1 };

hyp_losspred *hyp_losspred_new(int max_steps);
void hyp_losspred_free(hyp_losspred *lp);
/* records the loss of step (1-based; later steps overwrite after a rollback) */
void hyp_losspred_add(hyp_losspred *lp, int step, double loss);
/* The learning rate of every step 1..n (the planned schedule, known in advance) switches the law
 * to Tissue et al.'s scaling law with LR annealing (arXiv:2408.11029):
 *   L(s) = L0 + A * S1(s)^(-alpha) - C * S2(s),
 *   S1(s) = sum_{i<=s} eta_i / eta_max (forward area),
 *   S2(s) = sum_{i<=s} m_i, m_i = lambda m_{i-1} + (eta_{i-1} - eta_i) / eta_max, lambda = 0.999
 *           (annealing area; m stays 0 through warm-up, where the LR rises),
 * fitted by Huber (delta 1e-3 nats) on the loss itself, L-BFGS from a grid of starts. The final
 * step's S1 and S2 come from the schedule, so the prediction sees the decay still to come. */
int hyp_losspred_set_lr(hyp_losspred *lp, const double *lr, int n, int warmup);
/* A resumed run's history: the (step, loss) rows of the metrics JSONL the run appends to, up to
 * and including step `upto` (later rows belong to the abandoned future). A missing file is no
 * history; lines that are not a JSON object with numeric step and loss are skipped (the file is
 * our own output). Returns the number of steps read. */
int hyp_losspred_load_metrics(hyp_losspred *lp, const char *path, int upto);
/* fits the losses of steps (skip, now] where skip = max(first_valid, now / 10) (the early transient
 * is not a power law), binned into at most 128 bins evenly spaced in log t, and predicts step
 * final. Returns 0 and out->ok = 0 with fewer than 8 bins. */
int hyp_losspred_fit(hyp_losspred *lp, int now, int final, int first_valid, hyp_losspred_out *out);

#endif
