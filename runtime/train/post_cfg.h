/* post_cfg.h — the plan's "post" section (v2193 SFT, v2194 GRPO, v2195 DPO, v2196 ORPO, v2197
 * SimPO, v2198 KTO): which post-training objective the trainer runs and its settings, read from
 * plan.json on its own so that the preference and GRPO trainers (pref.h, grpo.h) and the reader's
 * fuzz target (tests/fuzz/fuzz_plan.c) need nothing else.
 * Never: trusts a number of the file before checking it is finite and in range. */
#ifndef HYP_POST_CFG_H
#define HYP_POST_CFG_H

#include "hyp_err.h"

typedef enum { POST_NONE = 0, POST_SFT, POST_DPO, POST_ORPO, POST_SIMPO, POST_KTO, POST_GRPO } post_objective;

typedef struct {
    int objective;              /* post_objective: what the plan's post.objective names */
    int sft;                    /* v2193 active (post.template present) */
    int mask_prompt;            /* post.mask_prompt: loss on response tokens only (default 1) */
    char template_name[64];     /* post.template (what gen data --chat should use) */
    double beta, gamma, lambda, label_smoothing, desirable_weight, undesirable_weight;
    int online_ref;             /* post.reference == "online": a frozen copy runs each step (pref_ref.h) */
    int group, max_new;         /* v2194 GRPO (grpo.h): completions per prompt, tokens sampled per completion */
    double temperature;         /* GRPO sampling temperature */
    char reward_chars[256];     /* GRPO reward: the fraction of completion bytes in this set */
} post_cfg;

/* The "post" section of the plan file at plan_path (absent: objective POST_NONE, mask_prompt 1). */
int post_cfg_load(const char *plan_path, post_cfg *c, hyp_err *e);
const char *post_objective_name(int objective);

#endif
