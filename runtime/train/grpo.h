/* grpo.h — v2194 RLHF at small scale: GRPO (group relative policy optimization, DeepSeekMath) as
 * an objective of the one training loop (objective.h), on any backend with per-token losses (cpu,
 * sim, cuda). For each prompt of gen data --pref (data/chat.h; only the prompts are used) the
 * policy samples a group of G completions (temperature sampling, one full forward of the B x T
 * batch per new token: there is no KV cache), a programmatic reward scores each (the fraction of
 * completion bytes in post.reward_chars), the advantage of a completion is its reward's z-score in
 * its group, and one update per batch minimizes
 *   mean over completions i of 1/|o_i| sum_t [ -A_i * ratio_t + beta * KL_t ],
 * ratio_t = pi(o_t) / pi_old(o_t) = 1 on-policy (one update per batch of samples: the PPO clip
 * never binds; its gradient is -A_i * grad log pi), KL_t = exp(ref_t - logp_t) - (ref_t - logp_t)
 * - 1 (the k3 estimator) against the frozen starting weights (pref_ref.h). Sampling runs forward
 * on the host executor with the backend's current weights (sync_host before each step); the
 * policy's per-token log-probs and the backward with each token's weight go through the backend
 * (token_losses, weighted_backward), as the preference objectives do.
 * Never: a learned reward or value model (PPO), a training loop, or a BPE reward (bytes only).
 */
#ifndef HYP_GRPO_H
#define HYP_GRPO_H

#include "pref.h"

/* The GRPO objective (r->cfg: group, max_new, temperature, beta, reward_chars) from the weights in
 * r->be->x: the step line and metrics carry the mean reward and KL, the evaluation (before the
 * first step too) the val prompts' mean reward ("eval step N | val reward R"). HYP_EINPUT with a
 * one-line reason for bad setup (B not a multiple of the group, max_new >= T, a non-byte
 * tokenizer, a backend without per-token losses, several ranks, a resume). */
int grpo_objective_open(train_objective *o, const pref_run *r, hyp_err *e);

/* The reward of a completion (exposed for the tests): the fraction of its n tokens that are
 * bytes listed in chars (0 for n = 0). */
double grpo_reward(const int32_t *tok, int n, const char *chars);

/* Group-relative advantages of n rewards in groups of g: (r - mean) / (std + 1e-4), std the
 * unbiased standard deviation of the group (TRL's GRPOTrainer). */
void grpo_advantages(const double *reward, int n, int g, double *adv);

/* The per-token weights of one micro-batch (exposed for the tests): rows of T tokens with targets
 * (completion tokens; < 0 elsewhere), lp / lref the policy's / reference's per-token log-probs
 * (lref NULL: beta unused), adv[b] the row's advantage, N tokens per completion, B rows, K
 * micro-batches per step. scale[b*T+t] receives the exec_t.row_scale of each token: -(d J / d
 * logp_t) for J = sum over rows and completion tokens of (-A_b * ratio_t + beta * k3_t) / (N B K)
 * at ratio 1; *kl the k3 part's mean. Returns J. */
double grpo_token_weights(const int32_t *targets, const double *lp, const double *lref, const double *adv, int B, int T, int N,
                          int K, double beta, float *scale, double *kl);

#endif
