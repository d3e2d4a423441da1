/* grpo.c — v2194 GRPO at small scale as an objective of the one training loop (grpo.h). */
#include "grpo.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pref_ref.h"
#include "rng.h"

double grpo_reward(const int32_t *tok, int n, const char *chars) {
    int hit = 0;
    for (int i = 0; i < n; i++)
        hit += tok[i] > 0 && tok[i] < 256 && strchr(chars, (int)tok[i]) != NULL;
    return n > 0 ? (double)hit / n : 0.0;
}

void grpo_advantages(const double *reward, int n, int g, double *adv) {
    for (int s = 0; s + g <= n; s += g) {
        double m = 0, v = 0;
        for (int i = 0; i < g; i++) m += reward[s + i] / g;
        for (int i = 0; i < g; i++) v += (reward[s + i] - m) * (reward[s + i] - m);
        double sd = g > 1 ? sqrt(v / (g - 1)) : 0;
        for (int i = 0; i < g; i++) adv[s + i] = (reward[s + i] - m) / (sd + 1e-4);
    }
}

double grpo_token_weights(const int32_t *targets, const double *lp, const double *lref, const double *adv, int B, int T, int N,
                          int K, double beta, float *scale, double *kl) {
    double loss = 0, norm = (double)N * B * K;
    *kl = 0;
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            size_t i = (size_t)b * T + t;
            double w = 0;
            if (targets[i] >= 0) {
                double d = lref ? lref[i] - lp[i] : 0, k3 = lref ? exp(d) - d - 1 : 0;
                /* d/dlogp_t of (-A * ratio + beta * k3) / (N B K), ratio = 1 on-policy */
                w = (-adv[b] + (lref ? beta * (1 - exp(d)) : 0)) / norm;
                loss += (-adv[b] + beta * k3) / norm;
                *kl += k3 / norm;
            }
            scale[i] = (float)-w; /* the fused CE's gradient is -(d logp / d z) */
        }
    return loss;
}

static int logits_buf(const plan_t *p) {
    for (int i = 0; i < p->n_bufs; i++)
        if (!strcmp(p->bufs[i].name, "logits")) return i;
    return -1;
}

/* Rows 0..m-1 of x: prompt ex[b] (cut from the left to T + 1 - max_new tokens) followed by max_new
 * sampled tokens (comp[b * max_new ...]); rows m..B-1 empty. Then x->tokens/targets hold the
 * scored rows (targets: the completion tokens, -1 elsewhere); plen[b] the kept prompt length.
 * rng stream: (seed, salt). */
static void sample_rows(exec_t *x, const hyp_pref_set *s, const int *ex, int m, int max_new, double temperature,
                        uint64_t seed, uint64_t salt, int lbuf, int32_t *comp, int *plen, float *probs) {
    int B = x->B, T = x->T, V = x->p->V, Vp = (int)x->p->Vp;
    for (int b = 0; b < B; b++) {
        int32_t *in = x->tokens + (size_t)b * T, *tg = x->targets + (size_t)b * T;
        for (int t = 0; t < T; t++) in[t] = 0, tg[t] = -1;
        if (b >= m) continue;
        int lp = s->len[ex[b]][0], keep = lp < T + 1 - max_new ? lp : T + 1 - max_new;
        const int32_t *pr = s->tok + s->off[ex[b]] + (lp - keep);
        for (int t = 0; t < keep; t++) in[t] = pr[t];
        plen[b] = keep;
    }
    hyp_rng rng;
    hyp_rng_seed2(&rng, seed ^ 0x6a09e667f3bcc909ULL, salt);
    for (int k = 0; k < max_new; k++) {
        exec_forward(x);
        const float *L = exec_buf(x, lbuf);
        for (int b = 0; b < m; b++) {
            int at = plen[b] + k - 1; /* the last known token: its logits give the next */
            const float *z = L + ((size_t)b * T + at) * Vp;
            double mx = z[0], sum = 0;
            for (int i = 1; i < V; i++) mx = fmax(mx, z[i]);
            for (int i = 0; i < V; i++) sum += probs[i] = (float)exp((z[i] - mx) / temperature);
            double u = hyp_rng_uniform_f64(&rng) * sum, c = 0;
            int next = V - 1;
            for (int i = 0; i < V; i++) {
                c += probs[i];
                if (u < c) {
                    next = i;
                    break;
                }
            }
            comp[b * max_new + k] = next;
            if (at + 1 < T) x->tokens[(size_t)b * T + at + 1] = next;
        }
    }
    for (int b = 0; b < m; b++)
        for (int k = 0; k < max_new; k++) x->targets[(size_t)b * T + plen[b] + k - 1] = comp[b * max_new + k];
}

/* Per-token log-probs of the targets of the batch in x->tokens/targets (0 where the target is -1)
 * on the backend b (token_losses: the forward the following weighted_backward differentiates) or,
 * with b NULL, on the cpu executor rx (the frozen reference copy). L: B*T floats of scratch. */
static int token_logps(train_backend *b, exec_t *rx, float *L, double *lp, hyp_err *e) {
    exec_t *x = b ? b->x : rx;
    size_t n = (size_t)x->B * x->T;
    if (b) {
        int rc = b->i->token_losses(b, L, e);
        if (rc) return rc;
    } else {
        exec_eval_loss(rx);
        memcpy(L, exec_buf(rx, rx->p->losses_buf), sizeof(float) * n);
    }
    for (size_t i = 0; i < n; i++) lp[i] = x->targets[i] >= 0 ? -(double)L[i] : 0;
    return HYP_OK;
}

/* Mean reward of the val prompts, one completion each (fixed rng stream: comparable over steps). */
static double eval_reward(const pref_run *r, const hyp_pref_set *v, int lbuf, int32_t *comp, int *plen, float *probs, int *ex) {
    exec_t *x = r->be->x;
    const post_cfg *c = r->cfg;
    double sum = 0;
    for (int at = 0; at < v->n; at += x->B) {
        int m = v->n - at < x->B ? v->n - at : x->B;
        for (int b = 0; b < m; b++) ex[b] = at + b;
        sample_rows(x, v, ex, m, c->max_new, c->temperature, r->seed, 0xe7a1000000ULL + (uint64_t)at, lbuf, comp, plen, probs);
        for (int b = 0; b < m; b++) sum += grpo_reward(comp + b * c->max_new, c->max_new, c->reward_chars);
    }
    return v->n ? sum / v->n : NAN;
}


static int check_setup(const pref_run *r, const hyp_pref_set *s, hyp_err *e) {
    const exec_t *x = r->be->x;
    const post_cfg *c = r->cfg;
    if (r->be->dp.world > 1 || r->be->dp.stage > 0)
        return hyp_fail(e, HYP_EINPUT, "grpo: runs on one rank without ZeRO — run one process, generate without dp/zero");
    if (r->start_step > 0)
        return hyp_fail(e, HYP_EINPUT, "grpo: a run cannot resume (the frozen reference copy is not checkpointed) — start anew with --init-from the checkpoint");
    if (strcmp(x->p->tokenizer, "byte"))
        return hyp_fail(e, HYP_EINPUT, "grpo: the programmatic reward counts bytes, and this model's tokenizer is %s — generate the trainer for the byte tokenizer", x->p->tokenizer);
    if (c->group < 2 || x->B % c->group)
        return hyp_fail(e, HYP_EINPUT, "grpo: --batch %d is not a multiple of the group size %d (each prompt takes a group of rows) — give --batch k*%d", x->B, c->group, c->group);
    if (c->max_new < 1 || c->max_new >= x->T)
        return hyp_fail(e, HYP_EINPUT, "grpo: max_new_tokens %d does not fit rows of T = %d (a prompt needs at least one token) — lower v2194.max_new_tokens or raise --seq", c->max_new, x->T);
    for (int i = 0; i < s->n; i++)
        if (s->len[i][0] < 1)
            return hyp_fail(e, HYP_EINPUT, "%s/train.pref: example %d has an empty prompt (grpo samples after the prompt) — give every line a prompt", r->data, i + 1);
    if (logits_buf(x->p) < 0)
        return hyp_fail(e, HYP_EINPUT, "grpo: the plan has no logits buffer to sample from — regenerate it with gen");
    return HYP_OK;
}

/* ---- the GRPO objective (objective.h) ---- */
typedef struct {
    pref_run r;
    hyp_pref_set tr, va;
    int have_val, lbuf, pos, evaluated;
    uint64_t epoch;
    int32_t *comp;           /* B x max_new sampled tokens */
    int *plen, *ex, *perm;
    float *probs, *scale, *L;
    double *lp, *lref, *rew, *adv;
    double reward, kl, val_reward; /* the step's mean reward and k3 KL; the last evaluation's */
} grpo_obj;

/* The policy samples on the host executor: the backend's current weights go there first (a
 * no-op where the backend trains in x's buffers). */
static int go_host_weights(train_backend *b, hyp_err *e) {
    int rc = train_sync_host(b, e);
    if (!rc && !b->i->caps.host_buffers) exec_params_changed(b->x);
    return rc;
}

static int go_step_begin(train_objective *o, train_backend *b, int step, hyp_err *e) {
    (void)step;
    grpo_obj *g = o->impl;
    g->reward = g->kl = 0, g->evaluated = 0;
    return go_host_weights(b, e);
}

static int go_micro_batch(train_objective *o, train_backend *b, int k, int K, int step, double dscale, double *loss,
                          train_step_times *tm, hyp_err *e) {
    grpo_obj *g = o->impl;
    pref_run *r = &g->r;
    const post_cfg *c = r->cfg;
    exec_t *x = b->x;
    int B = x->B, T = x->T, G = c->group, P = B / G, N = c->max_new;
    size_t BT = (size_t)B * T;
    for (int j = 0; j < P; j++) {
        if (g->pos >= g->tr.n) { /* the next epoch's order */
            hyp_rng pr;
            hyp_rng_seed2(&pr, r->seed ^ 0x9e3779b97f4a7c15ULL, ++g->epoch);
            for (int i = 0; i < g->tr.n; i++) g->perm[i] = i;
            for (int i = g->tr.n - 1; i > 0; i--) {
                int q = (int)hyp_rng_below(&pr, (uint64_t)i + 1), t = g->perm[i];
                g->perm[i] = g->perm[q], g->perm[q] = t;
            }
            g->pos = 0;
        }
        for (int i = 0; i < G; i++) g->ex[j * G + i] = g->perm[g->pos];
        g->pos++;
    }
    sample_rows(x, &g->tr, g->ex, B, N, c->temperature, r->seed, ((uint64_t)step << 8) + (uint64_t)k, g->lbuf, g->comp, g->plen, g->probs);
    for (int i = 0; i < B; i++) g->rew[i] = grpo_reward(g->comp + i * N, N, c->reward_chars), g->reward += g->rew[i] / B / K;
    grpo_advantages(g->rew, B, G, g->adv);
    int rc = HYP_OK;
    if (r->ref) {
        exec_t *rx = pref_ref_exec(r->ref);
        memcpy(rx->tokens, x->tokens, sizeof(int32_t) * BT);
        memcpy(rx->targets, x->targets, sizeof(int32_t) * BT);
        rc = token_logps(NULL, rx, g->L, g->lref, e);
    }
    if (!rc) rc = token_logps(b, NULL, g->L, g->lp, e); /* the policy's forward on the backend, for the backward below */
    if (rc) return rc;
    double kk;
    *loss += grpo_token_weights(x->targets, g->lp, r->ref ? g->lref : NULL, g->adv, B, T, N, K, c->beta, g->scale, &kk);
    g->kl += kk;
    if (dscale != 1)
        for (size_t i = 0; i < BT; i++) g->scale[i] = (float)(g->scale[i] * dscale); /* v2162: the loss x S */
    tm->slots += (double)BT, tm->rows += B;
    return b->i->weighted_backward(b, g->scale, e);
}

static int go_metrics(const train_objective *o, hyp_metric_kv *kv, int cap) {
    const grpo_obj *g = o->impl;
    hyp_metric_kv all[] = {{"reward", g->reward}, {"kl", g->kl}, {"val_reward", g->evaluated ? g->val_reward : NAN}};
    int n = cap < 3 ? cap : 3;
    memcpy(kv, all, sizeof *kv * (size_t)n);
    return n;
}

static void go_line(const train_objective *o, char *buf, size_t cap) {
    const grpo_obj *g = o->impl;
    snprintf(buf, cap, " | reward %.4f | kl %.5f", g->reward, g->kl);
}

static int go_eval(train_objective *o, train_backend *b, int step, float *val_loss, hyp_err *e) {
    grpo_obj *g = o->impl;
    int rc = go_host_weights(b, e); /* the weights the step just updated */
    if (rc) return rc;
    g->val_reward = eval_reward(&g->r, &g->va, g->lbuf, g->comp, g->plen, g->probs, g->ex);
    g->evaluated = 1;
    printf("eval step %d | val reward %.4f\n", step, g->val_reward);
    *val_loss = NAN; /* no held-out loss: the reward is the measure */
    return HYP_OK;
}

static void go_describe(const train_objective *o, FILE *out) {
    const grpo_obj *g = o->impl;
    fprintf(out, "data: %d train prompts, %d val (%s)\n", g->tr.n, g->va.n, g->r.data);
}

static int go_ckpt_save(train_objective *o, train_backend *b, hyp_ckpt_state *st, const char *dir, hyp_err *e) {
    (void)b, (void)dir, (void)e;
    const grpo_obj *g = o->impl;
    st->loader_epoch = g->epoch, st->loader_position = (uint64_t)g->pos;
    return HYP_OK;
}

static int go_ckpt_restore(train_objective *o, const hyp_ckpt_state *st, int world, hyp_err *e) {
    (void)world, (void)e;
    grpo_obj *g = o->impl;
    g->epoch = st->loader_epoch, g->pos = (int)st->loader_position;
    return HYP_OK;
}

static void go_close(train_objective *o) {
    grpo_obj *g = o->impl;
    if (!g) return;
    pref_ref_close(g->r.ref);
    free(g->comp), free(g->plen), free(g->ex), free(g->perm), free(g->probs), free(g->scale), free(g->L);
    free(g->lp), free(g->lref), free(g->rew), free(g->adv);
    hyp_pref_free(&g->tr), hyp_pref_free(&g->va);
    free(g);
}

static const train_objective_i GRPO = {
    .step_begin = go_step_begin,
    .micro_batch = go_micro_batch,
    .step_end = NULL, /* one rank */
    .metrics = go_metrics,
    .line = go_line,
    .eval = go_eval,
    .describe = go_describe,
    .ckpt_save = go_ckpt_save,
    .ckpt_restore = go_ckpt_restore,
    .close = go_close,
};

int grpo_objective_open(train_objective *o, const pref_run *args, hyp_err *e) {
    grpo_obj *g = train_objective_alloc(o, &GRPO, sizeof *g, "grpo", e);
    if (!g) return HYP_EFAIL;
    g->r = *args;
    pref_run *r = &g->r;
    r->ref = NULL;
    exec_t *x = r->be->x;
    const post_cfg *c = r->cfg;
    int rc = pref_examples_open(r, &g->tr, &g->va, &g->have_val, e);
    if (rc || (rc = check_setup(r, &g->tr, e))) return rc;
    /* sampling runs forward on the host executor: a device backend's mirror gets activations */
    if ((rc = exec_alloc_acts(x, e))) return rc;
    int B = x->B, N = c->max_new;
    size_t BT = (size_t)B * x->T;
    g->lbuf = logits_buf(x->p);
    g->comp = malloc(sizeof(int32_t) * (size_t)B * N);
    g->plen = malloc(sizeof(int) * (size_t)B), g->ex = malloc(sizeof(int) * (size_t)B), g->perm = malloc(sizeof(int) * (size_t)g->tr.n);
    g->probs = malloc(sizeof(float) * (size_t)x->p->V), g->scale = malloc(sizeof(float) * BT), g->L = malloc(sizeof(float) * BT);
    g->lp = malloc(sizeof(double) * BT), g->lref = malloc(sizeof(double) * BT), g->rew = malloc(sizeof(double) * (size_t)B),
    g->adv = malloc(sizeof(double) * (size_t)B);
    if (!g->comp || !g->plen || !g->ex || !g->perm || !g->probs || !g->scale || !g->L || !g->lp || !g->lref || !g->rew || !g->adv)
        return hyp_fail(e, HYP_EFAIL, "out of memory");
    if (c->beta > 0 && (rc = pref_ref_open(&r->ref, x, e))) return rc;
    g->epoch = 0, g->pos = g->tr.n; /* the first micro-batch draws epoch 1's order */
    printf("grpo: %d train prompts, %d val; groups of %d, %d new tokens at temperature %g; reward: fraction of bytes in \"%s\"; beta %g%s; sampled on the host executor with the %s backend's weights, trained through its per-token losses\n",
           g->tr.n, g->va.n, c->group, N, c->temperature, c->reward_chars, c->beta, r->ref ? " (KL to a frozen copy of the starting weights)" : " (no KL term)",
           r->be->name);
    fflush(stdout);
    o->has_eval = o->eval_at_start = g->have_val;
    return HYP_OK;
}
