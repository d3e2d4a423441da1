/* pref.h — post-training objectives (the plan's "post" section is post_cfg.h) (v2193 SFT, v2195 DPO, v2196 ORPO,
 * v2197 SimPO, v2198 KTO), the preference losses on per-sequence log-probabilities with their
 * gradients (written after TRL's DPOTrainer / ORPOTrainer / CPOTrainer(loss_type="simpo") / KTOTrainer
 * loss functions; tests/reference/make_pref_fixture.py checks them to 1e-6), and the preference
 * trainer: examples from gen data --pref (data/chat.h) as rows of B x T, the reference model's
 * log-probabilities from one precomputed forward pass of the starting weights (held in memory, 16
 * bytes per example) or, with post.reference = online, from a frozen copy of those weights run on
 * each step's rows (pref_ref.h, a cpu executor), the per-token loss gradient weighted per row by
 * the backend (backend.h token_losses / weighted_backward: the cpu executor's row_scale, exec.h, or
 * the device's crossentropy_fused_ext), as an objective of the one training loop (objective.h).
 * Data parallelism (backends with multi_rank_pref: the cpu, ZeRO stages 0-3): each rank
 * takes a disjoint share of every micro-batch's examples, the shares' log-probs are gathered and
 * every rank computes the loss of the whole global micro-batch (np=1's numbers).
 * Never: the SFT data path (that is the loader's loss mask, data/data.h), backend-specific code, a
 * training loop, checkpoints' weights or progress policy beyond its own words on the step line
 * and its evaluation line.
 */
#ifndef HYP_PREF_H
#define HYP_PREF_H

#include "backend.h"
#include "chat.h"
#include "metrics.h"
#include "objective.h"
#include "post_cfg.h"

/* What a batch of preference losses reports (means over its pairs / examples). */
typedef struct {
    double loss, accuracy, margin, chosen_reward, rejected_reward, kl, logp_chosen, logp_rejected;
} pref_stats;

/* Pairs (DPO, ORPO, SimPO): n pairs; pc, pr the policy's summed log-probs of the chosen and
 * rejected completions, rc, rr the reference's (DPO; may be NULL otherwise), lc, lr the completion
 * token counts. The loss is the mean over pairs (ORPO adds the NLL of the chosen tokens, mean over
 * all of them). gc[i], gr[i] receive d loss / d pc[i], d pr[i]. Returns the loss. */
double pref_pair_loss(const post_cfg *c, int n, const double *pc, const double *pr, const double *rc, const double *rr,
                      const int *lc, const int *lr, double *gc, double *gr, pref_stats *st);

/* KTO: n examples; p, r the policy's and reference's summed log-probs of each completion, label[i]
 * 1 desirable / 0 undesirable; pk, rk the policy's and reference's log-probs of the mismatched
 * (KL) completions, nk of them. g[i] receives d loss / d p[i] (the KL estimate is detached). */
double pref_kto_loss(const post_cfg *c, int n, const double *p, const double *r, const int *label, int nk, const double *pk,
                     const double *rk, double *g, pref_stats *st);

/* What the preference objective and GRPO open with: the opened backend over x and the run. */
typedef struct {
    train_backend *be;
    const post_cfg *cfg;
    const char *data, *ckpt_dir; /* ckpt_dir may be NULL */
    int K;                      /* micro-batches per step (the driver passes it again each step) */
    uint64_t seed;
    int start_step;             /* > 0: resumed (weights and optimizer already loaded into x) */
    uint64_t epoch, position;   /* resumed: the example order's epoch and this rank's share of the
                                   examples the group consumed in it */
    struct pref_ref *ref;       /* the online reference (cfg->online_ref), else NULL: the open's */
} pref_run;

/* The plan's preference objective (objective.h; v2195-v2198) from the weights in r->be->x (the
 * reference = those starting weights), its examples read from r->data (train.pref, val.pref).
 * With cfg->online_ref the reference is a frozen copy of the starting weights run forward on each
 * micro-batch's rows (pref_ref.h; nothing precomputed; its weights written once to
 * ckpt_dir/reference_model.bin, which a resumed run reads back). Otherwise the reference
 * log-probs are computed now and go to ckpt_dir/reference_logps.bin with the first checkpoint
 * (with a checksum of the examples they belong to); a resumed run (start_step > 0) reads them
 * back instead of recomputing them from the resumed weights, and continues the example order at
 * (epoch, position). Evaluation (the val examples, before the first step too) prints its own
 * line. HYP_EINPUT with a one-line reason for data of the wrong kind, B odd for pairs, a backend
 * without per-token losses, several ranks on a backend without multi_rank_pref, or a resume
 * without its reference file (or with a corrupt one). With several ranks --batch is per rank. */
int pref_objective_open(train_objective *o, const pref_run *r, hyp_err *e);
/* What pref_objective_open and GRPO's open check and read first: the backend's per-token losses,
 * the plan's crossentropy_fused, r->data's train.pref (and val.pref when present: *have_val)
 * within the model's vocabulary. HYP_EINPUT with a one-line reason. */
int pref_examples_open(const pref_run *r, hyp_pref_set *tr, hyp_pref_set *va, int *have_val, hyp_err *e);

#endif
