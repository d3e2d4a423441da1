/* grpo.c — v2194 GRPO at small scale on the cpu backend (grpo.h). */
#include "grpo.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "pref_ref.h"
#include "rng.h"
#include "train_ckpt.h"

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

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
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

/* Per-token log-probs of the targets of x's rows (0 where the target is -1). */
static void token_logps(exec_t *x, double *lp) {
    exec_eval_loss(x);
    const float *L = exec_buf(x, x->p->losses_buf);
    for (size_t i = 0; i < (size_t)x->B * x->T; i++) lp[i] = x->targets[i] >= 0 ? -(double)L[i] : 0;
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
    if (strcmp(r->be->i->name, "cpu"))
        return hyp_fail(e, HYP_EINPUT, "grpo: runs on the cpu backend only (the %s path is missing) — generate the trainer with --target cpu", r->be->i->name);
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
    if (s->vocab > x->p->V)
        return hyp_fail(e, HYP_EINPUT, "%s/train.pref: vocabulary %d is larger than the model's %d — prepare the data with the model's tokenizer", r->data, s->vocab, x->p->V);
    if (logits_buf(x->p) < 0)
        return hyp_fail(e, HYP_EINPUT, "grpo: the plan has no logits buffer to sample from — regenerate it with gen");
    int fused = 0;
    for (int i = 0; i < x->p->n_bwd; i++) fused |= !strcmp(hyp_op_name(x->p->bwd[i].op), "crossentropy_fused");
    if (!fused) return hyp_fail(e, HYP_EINPUT, "grpo: the plan's backward has no crossentropy_fused op to weight per token — generate the trainer without the technique that replaces it");
    return HYP_OK;
}

int grpo_train(pref_run *r, hyp_err *e) {
    exec_t *x = r->be->x;
    const post_cfg *c = r->cfg;
    hyp_pref_set tr, va;
    memset(&va, 0, sizeof va);
    int rc = hyp_pref_load(r->data, "train", &tr, e);
    if (rc) return rc;
    char vpath[4200];
    snprintf(vpath, sizeof vpath, "%s/val.pref", r->data);
    FILE *vf = fopen(vpath, "rb");
    int have_val = vf != NULL;
    if (vf) fclose(vf);
    if (!(rc = check_setup(r, &tr, e)) && have_val) rc = hyp_pref_load(r->data, "val", &va, e);
    int B = x->B, T = x->T, G = c->group, P = B / G, N = c->max_new, lbuf = logits_buf(x->p);
    size_t BT = (size_t)B * T;
    int32_t *comp = malloc(sizeof(int32_t) * (size_t)B * N);
    int *plen = malloc(sizeof(int) * (size_t)B), *ex = malloc(sizeof(int) * (size_t)B), *perm = malloc(sizeof(int) * (size_t)tr.n);
    float *probs = malloc(sizeof(float) * (size_t)x->p->V), *scale = malloc(sizeof(float) * BT);
    double *lp = malloc(sizeof(double) * BT), *lref = malloc(sizeof(double) * BT), *rew = malloc(sizeof(double) * (size_t)B),
           *adv = malloc(sizeof(double) * (size_t)B);
    if (!rc && (!comp || !plen || !ex || !perm || !probs || !scale || !lp || !lref || !rew || !adv))
        rc = hyp_fail(e, HYP_EFAIL, "out of memory");
    r->ref = NULL;
    if (!rc && c->beta > 0) rc = pref_ref_open(&r->ref, x, e);
    if (!rc) {
        printf("grpo: %d train prompts, %d val; groups of %d, %d new tokens at temperature %g; reward: fraction of bytes in \"%s\"; beta %g%s\n",
               tr.n, va.n, G, N, c->temperature, c->reward_chars, c->beta, r->ref ? " (KL to a frozen copy of the starting weights)" : " (no KL term)");
        if (have_val) printf("eval step 0 | val reward %.4f\n", eval_reward(r, &va, lbuf, comp, plen, probs, ex));
        fflush(stdout);
    }
    uint64_t epoch = 0;
    int pos = tr.n;
    for (int step = 1; step <= r->opt->total_steps && !rc; step++) {
        double ts = now_s(), lr = train_lr_at(r->opt, step), norm = 0, loss = 0, mr = 0, kl = 0;
        float clip = 1;
        rc = r->be->i->zero_grads(r->be, e);
        for (int k = 0; k < r->K && !rc; k++) {
            for (int j = 0; j < P; j++) {
                if (pos >= tr.n) { /* the next epoch's order */
                    hyp_rng pr;
                    hyp_rng_seed2(&pr, r->seed ^ 0x9e3779b97f4a7c15ULL, ++epoch);
                    for (int i = 0; i < tr.n; i++) perm[i] = i;
                    for (int i = tr.n - 1; i > 0; i--) {
                        int q = (int)hyp_rng_below(&pr, (uint64_t)i + 1), t = perm[i];
                        perm[i] = perm[q], perm[q] = t;
                    }
                    pos = 0;
                }
                for (int g = 0; g < G; g++) ex[j * G + g] = perm[pos];
                pos++;
            }
            sample_rows(x, &tr, ex, B, N, c->temperature, r->seed, ((uint64_t)step << 8) + (uint64_t)k, lbuf, comp, plen, probs);
            for (int b = 0; b < B; b++) rew[b] = grpo_reward(comp + b * N, N, c->reward_chars), mr += rew[b] / B / r->K;
            grpo_advantages(rew, B, G, adv);
            if (r->ref) {
                exec_t *rx = pref_ref_exec(r->ref);
                memcpy(rx->tokens, x->tokens, sizeof(int32_t) * BT);
                memcpy(rx->targets, x->targets, sizeof(int32_t) * BT);
                token_logps(rx, lref);
            }
            token_logps(x, lp); /* the policy's forward, kept for the backward below */
            double kk;
            loss += grpo_token_weights(x->targets, lp, r->ref ? lref : NULL, adv, B, T, N, r->K, c->beta, scale, &kk);
            kl += kk;
            x->row_scale = scale;
            exec_backward(x, 1.0f);
            x->row_scale = NULL;
        }
        if (!rc) rc = r->be->i->reduce_grads(r->be, r->opt, e);
        if (!rc) rc = r->be->i->optim_step(r->be, r->opt, lr, step, e);
        if (!rc) rc = r->be->i->finish_step(r->be, &norm, &clip, e);
        if (rc) break;
        if (!isfinite(loss)) {
            rc = hyp_fail(e, HYP_EFAIL, "step %d: the grpo loss is %f — lower --lr", step, loss);
            break;
        }
        int do_eval = have_val && r->eval_every > 0 && (step % r->eval_every == 0 || step == r->opt->total_steps);
        double vr = do_eval ? eval_reward(r, &va, lbuf, comp, plen, probs, ex) : NAN;
        printf("step %5d/%d | grpo loss %.4f | reward %.4f | kl %.5f | lr %.2e | norm %.3f | %.2f s\n", step, r->opt->total_steps, loss, mr, kl,
               lr, norm, now_s() - ts);
        if (do_eval) printf("eval step %d | val reward %.4f\n", step, vr);
        fflush(stdout);
        if (r->mlog) {
            hyp_metric_kv kv[] = {{"reward", mr}, {"kl", kl}, {"val_reward", vr}};
            hyp_metrics_row row = {.step = (uint64_t)step, .loss = loss, .lr = lr, .grad_norm = norm, .tokens_per_s = (double)r->K * B * T / (now_s() - ts),
                                   .val_loss = NAN, .extra = kv, .n_extra = 3};
            rc = hyp_metrics_write(r->mlog, &row, e);
        }
        if (!rc && r->ckpt_dir && ((r->ckpt_every && step % r->ckpt_every == 0) || step == r->opt->total_steps)) {
            hyp_ckpt_state st;
            memset(&st, 0, sizeof st);
            st.step = (uint64_t)step, st.world = 1;
            snprintf(st.config_hash, sizeof st.config_hash, "%s", r->plan_hash);
            snprintf(st.plan, sizeof st.plan, "%s", r->plan_desc);
            rc = train_ckpt_save(&r->be->dp, x, r->ckpt_dir, r->keep, &st, e);
        }
    }
    if (!rc) printf("done: %d grpo steps\n", r->opt->total_steps);
    pref_ref_close(r->ref);
    r->ref = NULL;
    free(comp), free(plen), free(ex), free(perm), free(probs), free(scale), free(lp), free(lref), free(rew), free(adv);
    hyp_pref_free(&tr), hyp_pref_free(&va);
    return rc;
}
