/* pref.c — the preference losses and the preference trainer (pref.h).
 *
 * Per-token gradient. A sequence's log-probability is logp = sum over its scored completion
 * tokens t of log softmax(z_t)[y_t] = -sum_t CE_t. For a loss L(logp_1..logp_n) the logits of
 * token t of sequence s get dL/dz_t = (dL/dlogp_s) * (onehot - softmax) = -(dL/dlogp_s) *
 * dCE_t/dz_t: the fused cross-entropy's gradient (dloss = 1) with its row scaled by
 * -(dL/dlogp_s): the backend's weighted_backward (backend.h; the cpu executor's row_scale, the device's
 * crossentropy_fused_ext). Prompt and padding positions have target -1: zero gradient.
 */
#include "pref.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <xxhash.h>

#include "fsio.h"
#include "pref_ref.h"
#include "rng.h"

/* ---- losses on per-sequence log-probabilities ---- */
static double sigmoid(double z) { return z >= 0 ? 1 / (1 + exp(-z)) : exp(z) / (1 + exp(z)); }
static double log_sigmoid(double z) { return z >= 0 ? -log1p(exp(-z)) : z - log1p(exp(z)); }

double pref_pair_loss(const post_cfg *c, int n, const double *pc, const double *pr, const double *rc, const double *rr,
                      const int *lc, const int *lr, double *gc, double *gr, pref_stats *st) {
    memset(st, 0, sizeof *st);
    double loss = 0, b = c->beta, ls = c->label_smoothing, nll_tokens = 0, nll = 0;
    for (int i = 0; i < n; i++) nll_tokens += lc[i] > 0 ? lc[i] : 1;
    for (int i = 0; i < n; i++) {
        double nc = lc[i] > 0 ? lc[i] : 1, nr = lr[i] > 0 ? lr[i] : 1;
        double ac = pc[i] / nc, ar = pr[i] / nr, z, dz_c, dz_r, cw, rw;
        if (c->objective == POST_ORPO) {
            /* log odds(y) = log p - log(1 - p) with p = exp(avg logp): TRL ORPOTrainer.odds_ratio_loss */
            double lo = (ac - ar) - (log(-expm1(ac)) - log(-expm1(ar)));
            loss -= c->lambda * log_sigmoid(lo) / n;
            double dlo = -c->lambda * sigmoid(-lo) / n;
            gc[i] = dlo / -expm1(ac) / nc;  /* d lo / d ac = 1 / (1 - exp(ac)) */
            gr[i] = -dlo / -expm1(ar) / nr;
            nll -= pc[i] / nll_tokens;      /* the SFT term: mean NLL of the chosen tokens */
            gc[i] -= 1 / nll_tokens;
            cw = c->lambda * ac, rw = c->lambda * ar; /* TRL: rewards = beta * avg logp, its beta = our lambda */
        } else {
            if (c->objective == POST_SIMPO) { /* CPOTrainer loss_type="simpo", cpo_alpha = 0 */
                z = b * (ac - ar) - c->gamma;
                dz_c = b / nc, dz_r = -b / nr;
                cw = b * ac, rw = b * ar;
            } else { /* DPO, sigmoid loss with label smoothing (DPOTrainer loss_type="sigmoid") */
                z = b * ((pc[i] - pr[i]) - (rc[i] - rr[i]));
                dz_c = b, dz_r = -b;
                cw = b * (pc[i] - rc[i]), rw = b * (pr[i] - rr[i]);
            }
            loss += (-(1 - ls) * log_sigmoid(z) - ls * log_sigmoid(-z)) / n;
            double dz = (-(1 - ls) * sigmoid(-z) + ls * sigmoid(z)) / n;
            gc[i] = dz * dz_c, gr[i] = dz * dz_r;
        }
        st->accuracy += (cw > rw) / (double)n;
        st->margin += (cw - rw) / n;
        st->chosen_reward += cw / n, st->rejected_reward += rw / n;
        st->logp_chosen += pc[i] / n, st->logp_rejected += pr[i] / n;
        if (rc && rr) st->kl += ((pc[i] - rc[i]) + (pr[i] - rr[i])) / (2.0 * n);
    }
    st->loss = loss + nll;
    return st->loss;
}

double pref_kto_loss(const post_cfg *c, int n, const double *p, const double *r, const int *label, int nk, const double *pk,
                     const double *rk, double *g, pref_stats *st) {
    memset(st, 0, sizeof *st);
    double kl = 0, b = c->beta, loss = 0;
    for (int i = 0; i < nk; i++) kl += (pk[i] - rk[i]) / nk;
    if (kl < 0) kl = 0; /* TRL: .mean().clamp(min=0), detached */
    int nd = 0, nu = 0;
    for (int i = 0; i < n; i++) {
        double lr = p[i] - r[i];
        if (label[i]) {
            double s = sigmoid(b * (lr - kl));
            loss += c->desirable_weight * (1 - s) / n;
            g[i] = -c->desirable_weight * b * s * (1 - s) / n;
            st->chosen_reward += b * lr, st->logp_chosen += p[i], nd++;
            st->accuracy += lr > 0;
        } else {
            double s = sigmoid(b * (kl - lr));
            loss += c->undesirable_weight * (1 - s) / n;
            g[i] = c->undesirable_weight * b * s * (1 - s) / n;
            st->rejected_reward += b * lr, st->logp_rejected += p[i], nu++;
            st->accuracy += lr < 0;
        }
    }
    st->accuracy /= n > 0 ? n : 1;
    if (nd) st->chosen_reward /= nd, st->logp_chosen /= nd;
    if (nu) st->rejected_reward /= nu, st->logp_rejected /= nu;
    st->margin = st->chosen_reward - st->rejected_reward;
    st->kl = kl;
    st->loss = loss;
    return loss;
}

/* ---- rows ---- */
enum { PART_CHOSEN, PART_REJECTED, PART_KL };
typedef struct {
    int ex, part;
} rowspec;

/* Row b of x->tokens/targets: prompt + completion, at most T + 1 tokens (the completion cut to T on
 * the right, then the prompt to what is left from the left); targets -1 except the completion's.
 * Returns the number of scored completion tokens. */
static int fill_row(exec_t *x, int b, const int32_t *pr, int lp, const int32_t *cp, int lc) {
    int T = x->T;
    int32_t *in = x->tokens + (size_t)b * T, *tg = x->targets + (size_t)b * T;
    if (lc > T) lc = T;
    int keep = lp < T + 1 - lc ? lp : T + 1 - lc, len = keep + lc, n = 0;
    for (int t = 0; t < T; t++) {
        in[t] = t < len ? (t < keep ? pr[lp - keep + t] : cp[t - keep]) : 0;
        int nx = t + 1;
        tg[t] = nx < len && nx >= keep ? cp[nx - keep] : -1;
        n += tg[t] >= 0;
    }
    return n;
}

static int row_of(const hyp_pref_set *s, rowspec r, exec_t *x, int b) {
    const int32_t *base = s->tok + s->off[r.ex];
    int lp = s->len[r.ex][0];
    if (r.part == PART_KL) { /* this prompt with the next example's completion: a mismatched pair */
        int o = (r.ex + 1) % s->n;
        return fill_row(x, b, base, lp, s->tok + s->off[o] + s->len[o][0], s->len[o][1]);
    }
    const int32_t *cp = base + lp + (r.part == PART_REJECTED ? s->len[r.ex][1] : 0);
    return fill_row(x, b, base, lp, cp, s->len[r.ex][1 + r.part]);
}

/* Forward (no gradients) over m <= B rows on the backend b (its per-token losses, token_losses)
 * or, with b NULL, on the cpu executor rx (the online reference's frozen copy, pref_ref.h):
 * logp[k], n[k] the summed log-prob and scored tokens of row k. Rows m..B-1 are padding (no
 * targets). */
static int forward_rows(train_backend *b, exec_t *rx, const hyp_pref_set *s, const rowspec *rows, int m, double *logp,
                        int *n, hyp_err *e) {
    exec_t *x = b ? b->x : rx;
    int T = x->T;
    for (int k = 0; k < x->B; k++) {
        if (k < m) n[k] = row_of(s, rows[k], x, k);
        else
            for (int t = 0; t < T; t++) x->tokens[(size_t)k * T + t] = 0, x->targets[(size_t)k * T + t] = -1;
    }
    float *L = malloc(sizeof(float) * (size_t)x->B * T);
    if (!L) return hyp_fail(e, HYP_EFAIL, "out of memory");
    int rc = HYP_OK;
    if (b) rc = b->i->token_losses(b, L, e);
    else {
        exec_eval_loss(x);
        memcpy(L, exec_buf(x, x->p->losses_buf), sizeof(float) * (size_t)x->B * T);
    }
    for (int k = 0; k < m && !rc; k++) {
        double sum = 0;
        for (int t = 0; t < T; t++)
            if (x->targets[(size_t)k * T + t] >= 0) sum -= L[(size_t)k * T + t];
        logp[k] = sum;
    }
    free(L);
    return rc;
}

/* Log-probs of every row of a set (part by part), batch by batch: out[ex * parts + part]. */
static int set_logps(train_backend *b, exec_t *rx, const hyp_pref_set *s, int parts, const int *part_of, double *out,
                     int *nout, hyp_err *e) {
    int B = (b ? b->x : rx)->B, total = s->n * parts, rc = HYP_OK;
    rowspec *rows = malloc(sizeof *rows * (size_t)B);
    double *lp = malloc(sizeof *lp * (size_t)B);
    int *n = malloc(sizeof *n * (size_t)B);
    if (!rows || !lp || !n) {
        free(rows), free(lp), free(n);
        return hyp_fail(e, HYP_EFAIL, "out of memory");
    }
    for (int at = 0; at < total && !rc; at += B) {
        int m = total - at < B ? total - at : B;
        for (int k = 0; k < m; k++) rows[k] = (rowspec){(at + k) / parts, part_of[(at + k) % parts]};
        if ((rc = forward_rows(b, rx, s, rows, m, lp, n, e))) break;
        for (int k = 0; k < m; k++) {
            out[at + k] = lp[k];
            if (nout) nout[at + k] = n[k];
        }
    }
    free(rows), free(lp), free(n);
    return rc;
}

/* The reference's log-probs of rows[0..m): the frozen copy's forward (online), or the precomputed
 * ref[2 * example + (part != chosen)]. */
static int ref_rows(const pref_run *r, const hyp_pref_set *s, const double *ref, const rowspec *rows, int m, double *out,
                    hyp_err *e) {
    if (r->ref) {
        int B = r->be->x->B, cnt[B];
        return forward_rows(NULL, pref_ref_exec(r->ref), s, rows, m, out, cnt, e);
    }
    for (int k = 0; k < m; k++) out[k] = ref[2 * rows[k].ex + (rows[k].part != PART_CHOSEN)];
    return HYP_OK;
}

/* The val set's reference log-probs with the backend b (the starting weights) or the frozen
 * copy's executor rx (b NULL): pairs 2 per example, KTO 1. */
static int val_logps(train_backend *b, exec_t *rx, const hyp_pref_set *v, double *out, hyp_err *e) {
    static const int PAIR[2] = {PART_CHOSEN, PART_REJECTED}, ONE[1] = {PART_CHOSEN};
    return v->kind == HYP_PREF_PAIRS ? set_logps(b, rx, v, 2, PAIR, out, NULL, e) : set_logps(b, rx, v, 1, ONE, out, NULL, e);
}

/* ---- evaluation ---- */
typedef struct {
    double loss, accuracy, margin, kl, logratio_accuracy, avg_logp_accuracy;
} pref_eval;

static void eval_set(const pref_run *r, const hyp_pref_set *v, const double *ref, pref_eval *out, hyp_err *e, int *rc) {
    memset(out, 0, sizeof *out);
    int pairs = v->kind == HYP_PREF_PAIRS, parts = pairs ? 2 : 1, n = v->n;
    static const int P2[2] = {PART_CHOSEN, PART_REJECTED}, P1[1] = {PART_CHOSEN};
    double *lp = malloc(sizeof *lp * (size_t)n * parts + 8), *g = malloc(sizeof *g * (size_t)n * 2 + 16);
    int *cnt = malloc(sizeof *cnt * (size_t)n * parts + 8), *lab = malloc(sizeof *lab * (size_t)n + 8);
    if (!lp || !g || !cnt || !lab || (*rc = set_logps(r->be, NULL, v, parts, pairs ? P2 : P1, lp, cnt, e))) {
        if (!*rc) *rc = hyp_fail(e, HYP_EFAIL, "out of memory");
        free(lp), free(g), free(cnt), free(lab);
        return;
    }
    pref_stats st;
    post_cfg c = *r->cfg;
    if (pairs) {
        double *pc = malloc(sizeof *pc * (size_t)n * 4);
        int *lc = malloc(sizeof *lc * (size_t)n * 2);
        if (!pc || !lc) *rc = hyp_fail(e, HYP_EFAIL, "out of memory");
        for (int i = 0; i < n && !*rc; i++) {
            pc[i] = lp[2 * i], pc[n + i] = lp[2 * i + 1], pc[2 * n + i] = ref[2 * i], pc[3 * n + i] = ref[2 * i + 1];
            lc[i] = cnt[2 * i], lc[n + i] = cnt[2 * i + 1];
            out->logratio_accuracy += ((pc[i] - pc[2 * n + i]) > (pc[n + i] - pc[3 * n + i])) / (double)n;
            out->avg_logp_accuracy += (pc[i] / (lc[i] ? lc[i] : 1) > pc[n + i] / (lc[n + i] ? lc[n + i] : 1)) / (double)n;
        }
        if (!*rc) {
            if (c.objective == POST_KTO) c.objective = POST_DPO; /* KTO's implied reward: beta * log ratio */
            pref_pair_loss(&c, n, pc, pc + n, pc + 2 * n, pc + 3 * n, lc, lc + n, g, g + n, &st);
            out->loss = st.loss, out->accuracy = st.accuracy, out->margin = st.margin, out->kl = st.kl;
        }
        free(pc), free(lc);
    } else {
        for (int i = 0; i < n; i++) lab[i] = v->len[i][2];
        c.objective = POST_KTO;
        double *rr = malloc(sizeof *rr * (size_t)n + 8);
        if (!rr) *rc = hyp_fail(e, HYP_EFAIL, "out of memory");
        for (int i = 0; i < n && !*rc; i++) rr[i] = ref[i];
        if (!*rc) {
            pref_kto_loss(&c, n, lp, rr, lab, 0, NULL, NULL, g, &st);
            out->loss = st.loss, out->accuracy = st.accuracy, out->margin = st.margin;
            for (int i = 0; i < n; i++) out->kl += (lp[i] - rr[i]) / n;
            out->logratio_accuracy = st.accuracy, out->avg_logp_accuracy = NAN;
        }
        free(rr);
    }
    free(lp), free(g), free(cnt), free(lab);
}

static void print_eval(const pref_run *r, int step, const pref_eval *v) {
    printf("eval step %d | val pref_accuracy %.4f | reward_margin %.4f | kl %.4f | logratio_accuracy %.4f | avg_logp_accuracy %.4f | val %s loss %.4f\n",
           step, v->accuracy, v->margin, v->kl, v->logratio_accuracy, v->avg_logp_accuracy,
           post_objective_name(r->cfg->objective), v->loss);
    fflush(stdout);
}

/* ---- training ---- */
static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* ---- the reference log-probs beside the checkpoints: "HYPREF01", n_train, n_val (uint64), the
 * xxh3-64 of both example sets' token arrays, then 2 * n_train + 2 * n_val doubles ---- */
typedef struct {
    char magic[8];
    uint64_t n_train, n_val, sum;
} ref_header;

static uint64_t sets_sum(const hyp_pref_set *a, const hyp_pref_set *b) {
    uint64_t h = XXH3_64bits(a->tok, sizeof(int32_t) * (size_t)(a->n ? a->off[a->n - 1] + a->len[a->n - 1][0] + a->len[a->n - 1][1] + (a->kind == HYP_PREF_PAIRS ? a->len[a->n - 1][2] : 0) : 0));
    if (b->n) h ^= XXH3_64bits(b->tok, sizeof(int32_t) * (size_t)(b->off[b->n - 1] + b->len[b->n - 1][0] + b->len[b->n - 1][1] + (b->kind == HYP_PREF_PAIRS ? b->len[b->n - 1][2] : 0))) * 31;
    return h;
}

static int ref_path(const pref_run *r, char *path, size_t cap) { return snprintf(path, cap, "%s/reference_logps.bin", r->ckpt_dir) >= (int)cap; }

static int ref_save(const pref_run *r, const hyp_pref_set *tr, const hyp_pref_set *va, const double *rt, const double *rv, hyp_err *e) {
    char path[4200];
    ref_path(r, path, sizeof path);
    size_t nt = 2 * (size_t)tr->n, nv = 2 * (size_t)va->n, sz = sizeof(ref_header) + sizeof(double) * (nt + nv);
    char *buf = malloc(sz);
    if (!buf) return hyp_fail(e, HYP_EFAIL, "out of memory");
    ref_header h = {"HYPREF01", (uint64_t)tr->n, (uint64_t)va->n, sets_sum(tr, va)};
    memcpy(buf, &h, sizeof h);
    memcpy(buf + sizeof h, rt, sizeof(double) * nt);
    if (nv) memcpy(buf + sizeof h + sizeof(double) * nt, rv, sizeof(double) * nv);
    int rc = hyp_fs_mkdirs(r->ckpt_dir, e);
    if (!rc) rc = hyp_fs_write_atomic(path, buf, sz, e);
    free(buf);
    return rc;
}

static int ref_load(const pref_run *r, const hyp_pref_set *tr, const hyp_pref_set *va, double *rt, double *rv, hyp_err *e) {
    char path[4200], *buf = NULL;
    size_t n = 0;
    ref_path(r, path, sizeof path);
    size_t nt = 2 * (size_t)tr->n, nv = 2 * (size_t)va->n;
    if (!hyp_fs_exists(path) || hyp_fs_read_small(path, (size_t)1 << 31, &buf, &n, e))
        return hyp_fail(e, HYP_EINPUT, "%s: a resumed preference run needs the reference log-probs its first checkpoint wrote here — resume with the --ckpt-dir of that run, or start anew with --init-from",
                        path);
    ref_header h;
    int rc = HYP_OK;
    if (n != sizeof h + sizeof(double) * (nt + nv)) rc = 1;
    else {
        memcpy(&h, buf, sizeof h);
        rc = memcmp(h.magic, "HYPREF01", 8) || h.n_train != (uint64_t)tr->n || h.n_val != (uint64_t)va->n || h.sum != sets_sum(tr, va);
    }
    if (!rc) {
        memcpy(rt, buf + sizeof h, sizeof(double) * nt);
        if (nv) memcpy(rv, buf + sizeof h + sizeof(double) * nt, sizeof(double) * nv);
    }
    free(buf);
    return rc ? hyp_fail(e, HYP_EINPUT, "%s: the reference log-probs belong to other examples than %s holds — resume with the data of that run",
                         path, r->data)
              : HYP_OK;
}

/* Data parallelism: every rank's per-example numbers (nv doubles each, `per` examples) to every
 * rank, rank-major: all[(w * per + j) * nv + v] (the global micro-batch in the np=1 order). */
static int gather_rows(const pref_run *r, const double *mine, int per, int nv, double *all, hyp_err *e) {
    const dp_t *d = &r->be->dp;
    size_t bytes = sizeof(double) * (size_t)per * nv;
    if (d->world <= 1) {
        memcpy(all, mine, bytes);
        return HYP_OK;
    }
    return hyp_coll_allgather_bytes(d->coll, mine, all, bytes, e);
}

/* One micro-batch of pairs: the global micro-batch ex[0..world * P), this rank's share
 * ex[rank * P .. +P) as its rows (chosen 2j, rejected 2j+1). The ranks' log-probs are gathered
 * and every rank computes the loss of the whole global micro-batch (the np=1 numbers: mean over
 * all world * P pairs, so the summed gradients equal np=1's); its own rows' gradients are
 * accumulated with weight 1/K. Returns the global stats in *st (the same on every rank). */
static int pairs_micro(const pref_run *r, const hyp_pref_set *s, const double *ref, const int *ex, int P, double dscale,
                       float *scale, pref_stats *st, hyp_err *e) {
    exec_t *x = r->be->x;
    int T = x->T, B = x->B, W = r->be->dp.world, R = r->be->dp.rank, G = W * P, cnt[B], lc[G], lr[G];
    double pc[G], pr[G], rc[G], rr[G], gc[G], gr[G], lp[B], mine[6 * P + 1], all[6 * G + 1];
    rowspec rows[B];
    const int *own = ex + (size_t)R * P;
    for (int j = 0; j < P; j++) rows[2 * j] = (rowspec){own[j], PART_CHOSEN}, rows[2 * j + 1] = (rowspec){own[j], PART_REJECTED};
    int err = forward_rows(r->be, NULL, s, rows, 2 * P, lp, cnt, e);
    double lref[B];
    if (!err) err = ref_rows(r, s, ref, rows, 2 * P, lref, e);
    if (err) return err;
    for (int j = 0; j < P; j++) {
        double *m = mine + 6 * j;
        m[0] = lp[2 * j], m[1] = lp[2 * j + 1], m[2] = lref[2 * j], m[3] = lref[2 * j + 1], m[4] = cnt[2 * j], m[5] = cnt[2 * j + 1];
    }
    if ((err = gather_rows(r, mine, P, 6, all, e))) return err;
    for (int g = 0; g < G; g++) {
        const double *m = all + 6 * g;
        pc[g] = m[0], pr[g] = m[1], rc[g] = m[2], rr[g] = m[3], lc[g] = (int)m[4], lr[g] = (int)m[5];
    }
    pref_pair_loss(r->cfg, G, pc, pr, rc, rr, lc, lr, gc, gr, st);
    for (int k = 0; k < B; k++) {
        float w = k < 2 * P ? (float)(-(k % 2 ? gr[R * P + k / 2] : gc[R * P + k / 2]) / r->K * dscale) : 0.0f;
        for (int t = 0; t < T; t++) scale[(size_t)k * T + t] = w;
    }
    return r->be->i->weighted_backward(r->be, scale, e);
}

/* One micro-batch of KTO examples: the global micro-batch ex[0..world * n), this rank's share
 * ex[rank * n .. +n) as its rows; the KL rows (mismatched, no gradient) first. As pairs_micro:
 * the ranks' log-probs gathered, the loss (and its KL estimate) of the whole global micro-batch. */
static int kto_micro(const pref_run *r, const hyp_pref_set *s, const double *ref, const int *gex, int n, double dscale,
                     float *scale, pref_stats *st, hyp_err *e) {
    exec_t *x = r->be->x;
    int T = x->T, B = x->B, W = r->be->dp.world, R = r->be->dp.rank, G = W * n, cnt[B], lab[G];
    double p[B], rf[B], pk[B], rk[B], g[G], mine[4 * n + 1], all[4 * G + 1], ap[G], arf[G], apk[G], ark[G];
    rowspec rows[B];
    memset(rows, 0, sizeof rows); /* rows n..B-1 are padding, never read */
    const int *ex = gex + (size_t)R * n;
    for (int j = 0; j < n; j++) rows[j] = (rowspec){ex[j], PART_KL};
    int rc = forward_rows(r->be, NULL, s, rows, n, pk, cnt, e);
    if (!rc) rc = ref_rows(r, s, ref, rows, n, rk, e);
    for (int j = 0; j < n; j++) rows[j].part = PART_CHOSEN;
    if (!rc) rc = forward_rows(r->be, NULL, s, rows, n, p, cnt, e);
    if (!rc) rc = ref_rows(r, s, ref, rows, n, rf, e);
    if (rc) return rc;
    for (int j = 0; j < n; j++) mine[4 * j] = p[j], mine[4 * j + 1] = rf[j], mine[4 * j + 2] = pk[j], mine[4 * j + 3] = rk[j];
    if ((rc = gather_rows(r, mine, n, 4, all, e))) return rc;
    for (int j = 0; j < G; j++) {
        ap[j] = all[4 * j], arf[j] = all[4 * j + 1], apk[j] = all[4 * j + 2], ark[j] = all[4 * j + 3];
        lab[j] = s->len[gex[j]][2];
    }
    pref_kto_loss(r->cfg, G, ap, arf, lab, G, apk, ark, g, st);
    for (int k = 0; k < B; k++) {
        float w = k < n ? (float)(-g[R * n + k] / r->K * dscale) : 0.0f;
        for (int t = 0; t < T; t++) scale[(size_t)k * T + t] = w;
    }
    return r->be->i->weighted_backward(r->be, scale, e);
}

/* The order of epoch `epoch`: Fisher-Yates driven by hyp_rng(seed, epoch). */
static void build_perm(int *perm, int n, uint64_t seed, uint64_t epoch) {
    hyp_rng rng;
    for (int i = 0; i < n; i++) perm[i] = i;
    hyp_rng_seed2(&rng, seed ^ 0x9e3779b97f4a7c15ULL, epoch);
    for (int i = n - 1; i > 0; i--) {
        int j = (int)hyp_rng_below(&rng, (uint64_t)i + 1), t = perm[i];
        perm[i] = perm[j], perm[j] = t;
    }
}

int pref_examples_open(const pref_run *r, hyp_pref_set *tr, hyp_pref_set *va, int *have_val, hyp_err *e) {
    const exec_t *x = r->be->x;
    const char *who = post_objective_name(r->cfg->objective);
    memset(va, 0, sizeof *va);
    if (!r->be->i->token_losses || !r->be->i->weighted_backward)
        return hyp_fail(e, HYP_EINPUT, "%s: the %s backend has no per-token losses to weight — generate the trainer with --target cpu or sim", who, r->be->name);
    int fused = 0;
    for (int i = 0; i < x->p->n_bwd; i++) fused |= !strcmp(hyp_op_name(x->p->bwd[i].op), "crossentropy_fused");
    if (!fused) return hyp_fail(e, HYP_EINPUT, "%s: the plan's backward has no crossentropy_fused op to weight per token — generate the trainer without the technique that replaces it", who);
    char vpath[4200];
    snprintf(vpath, sizeof vpath, "%s/val.pref", r->data);
    *have_val = hyp_fs_exists(vpath);
    int rc = hyp_pref_load(r->data, "train", tr, e);
    if (!rc && *have_val) rc = hyp_pref_load(r->data, "val", va, e);
    for (int k = 0; k < 1 + *have_val && !rc; k++) {
        const hyp_pref_set *s = k ? va : tr;
        if (s->vocab > x->p->V)
            rc = hyp_fail(e, HYP_EINPUT, "%s/%s.pref: vocabulary %d is larger than the model's %d — prepare the data with the model's tokenizer", r->data,
                          k ? "val" : "train", s->vocab, x->p->V);
    }
    return rc;
}

static int check_setup(const pref_run *r, const hyp_pref_set *s, hyp_err *e) {
    const exec_t *x = r->be->x;
    int obj = r->cfg->objective, want = obj == POST_KTO ? HYP_PREF_KTO : HYP_PREF_PAIRS;
    if (r->be->dp.world > 1 && !r->be->i->caps.multi_rank_pref)
        return hyp_fail(e, HYP_EINPUT, "%s: data parallelism of the preference objectives runs on the cpu backend only (on the %s backend np=2 does not yet reproduce np=1) — run one process, or generate with --target cpu",
                        post_objective_name(obj), r->be->name);
    if (s->kind != want)
        return hyp_fail(e, HYP_EINPUT, "%s/train.pref holds %s examples, and %s trains on %s — prepare the data with gen data --pref from %s JSONL",
                        r->data, s->kind == HYP_PREF_KTO ? "KTO (prompt, completion, label)" : "pair (prompt, chosen, rejected)",
                        post_objective_name(obj), want == HYP_PREF_KTO ? "KTO examples" : "pairs", want == HYP_PREF_KTO ? "{prompt, completion, label}" : "{prompt, chosen, rejected}");
    if (want == HYP_PREF_PAIRS && (x->B < 2 || x->B % 2))
        return hyp_fail(e, HYP_EINPUT, "%s: --batch %d is not an even number of rows (each pair takes two) — give an even --batch", post_objective_name(obj), x->B);
    return HYP_OK;
}

/* ---- the preference objective (objective.h) ---- */
typedef struct {
    pref_run r;
    hyp_pref_set tr, va;
    int have_val, per, perm_ok, ref_saved, evaluated;
    double *ref_tr, *ref_va; /* the precomputed reference log-probs, 2 per example */
    float *scale;            /* B*T per-token weights of a micro-batch */
    int *perm, *ex;          /* the epoch's order; the global micro-batch's examples */
    uint64_t epoch;
    int pos;                 /* examples of the epoch the whole group consumed */
    pref_stats sum;          /* the step's statistics (means over its micro-batches) */
    pref_eval ev;            /* the last evaluation */
} pref_obj;

static int po_step_begin(train_objective *o, train_backend *b, int step, hyp_err *e) {
    (void)b, (void)step, (void)e;
    pref_obj *po = o->impl;
    memset(&po->sum, 0, sizeof po->sum);
    po->evaluated = 0;
    return HYP_OK;
}

static int po_micro_batch(train_objective *o, train_backend *b, int k, int K, int step, double dscale, double *loss,
                          train_step_times *tm, hyp_err *e) {
    (void)b, (void)k, (void)step;
    pref_obj *po = o->impl;
    pref_run *r = &po->r;
    int W = r->be->dp.world > 0 ? r->be->dp.world : 1;
    double t0 = now_s();
    for (int j = 0; j < po->per * W; j++) { /* the global micro-batch: every rank the same order */
        if (!po->perm_ok || po->pos >= po->tr.n) { /* the epoch's permutation; the next epoch's once it is used up */
            if (po->pos >= po->tr.n) po->epoch++, po->pos = 0;
            build_perm(po->perm, po->tr.n, r->seed, po->epoch);
            po->perm_ok = 1;
        }
        po->ex[j] = po->perm[po->pos++];
    }
    tm->data_s += now_s() - t0;
    exec_t *x = r->be->x;
    tm->slots += (double)x->B * x->T, tm->rows += x->B;
    r->K = K;
    pref_stats st;
    int rc = po->tr.kind == HYP_PREF_PAIRS ? pairs_micro(r, &po->tr, po->ref_tr, po->ex, po->per, dscale, po->scale, &st, e)
                                           : kto_micro(r, &po->tr, po->ref_tr, po->ex, po->per, dscale, po->scale, &st, e);
    if (rc) return rc;
    double *a = &po->sum.loss, *s = &st.loss;
    for (size_t i = 0; i < sizeof po->sum / sizeof(double); i++) a[i] += s[i] / K;
    *loss += st.loss / K;
    return HYP_OK;
}

static int po_metrics(const train_objective *o, hyp_metric_kv *kv, int cap) {
    const pref_obj *po = o->impl;
    const pref_stats *s = &po->sum;
    const pref_eval *v = &po->ev;
    int ev = po->evaluated;
    hyp_metric_kv all[] = {{"pref_accuracy", s->accuracy},           {"reward_margin", s->margin},
                           {"kl", s->kl},                            {"logps_chosen", s->logp_chosen},
                           {"logps_rejected", s->logp_rejected},     {"rewards_chosen", s->chosen_reward},
                           {"rewards_rejected", s->rejected_reward}, {"val_pref_accuracy", ev ? v->accuracy : NAN},
                           {"val_reward_margin", ev ? v->margin : NAN}, {"val_kl", ev ? v->kl : NAN},
                           {"val_logratio_accuracy", ev ? v->logratio_accuracy : NAN}};
    int n = (int)(sizeof all / sizeof *all);
    if (n > cap) n = cap;
    memcpy(kv, all, sizeof *kv * (size_t)n);
    return n;
}

static void po_line(const train_objective *o, char *buf, size_t cap) {
    const pref_obj *po = o->impl;
    const pref_stats *s = &po->sum;
    snprintf(buf, cap, " | pref_accuracy %.3f | reward_margin %.4f | kl %.4f | logp chosen %.2f rejected %.2f", s->accuracy, s->margin,
             s->kl, s->logp_chosen, s->logp_rejected);
}

static int po_eval(train_objective *o, train_backend *b, int step, float *val_loss, hyp_err *e) {
    (void)b;
    pref_obj *po = o->impl;
    pref_run *r = &po->r;
    int rc = HYP_OK;
    if (r->ref) rc = val_logps(NULL, pref_ref_exec(r->ref), &po->va, po->ref_va, e); /* the frozen copy, online */
    if (!rc) eval_set(r, &po->va, po->ref_va, &po->ev, e, &rc);
    if (rc) return rc;
    print_eval(r, step, &po->ev);
    po->evaluated = 1;
    *val_loss = (float)po->ev.loss;
    return HYP_OK;
}

static void po_describe(const train_objective *o, FILE *out) {
    const pref_obj *po = o->impl;
    fprintf(out, "data: %d train %s, %d val (%s) | %s\n", po->tr.n, po->tr.kind == HYP_PREF_PAIRS ? "pairs" : "KTO examples", po->va.n,
            po->r.data, po->r.ref ? "reference online" : "reference log-probs precomputed");
}

/* The position (the group's count of examples consumed in the epoch) and, with the first
 * checkpoint, the reference log-probs beside the checkpoints (rank 0 writes; every rank computed
 * the same). */
static int po_ckpt_save(train_objective *o, train_backend *b, hyp_ckpt_state *st, const char *dir, hyp_err *e) {
    (void)dir;
    pref_obj *po = o->impl;
    int rc = HYP_OK;
    st->loader_epoch = po->epoch, st->loader_position = (uint64_t)po->pos;
    if (!po->ref_saved) {
        if (b->dp.rank == 0) rc = ref_save(&po->r, &po->tr, &po->va, po->ref_tr, po->ref_va, e);
        if (b->dp.world > 1 && !hyp_coll_all_ok(b->dp.coll, rc == 0) && !rc) rc = hyp_fail(e, HYP_EFAIL, "rank 0 could not write the reference log-probs");
        po->ref_saved = !rc;
    }
    return rc;
}

static int po_ckpt_restore(train_objective *o, const hyp_ckpt_state *st, int world, hyp_err *e) {
    (void)world, (void)e;
    pref_obj *po = o->impl;
    po->epoch = st->loader_epoch, po->pos = (int)st->loader_position, po->perm_ok = 0;
    return HYP_OK;
}

static void po_close(train_objective *o) {
    pref_obj *po = o->impl;
    if (!po) return;
    free(po->ref_tr), free(po->ref_va), free(po->scale), free(po->perm), free(po->ex);
    pref_ref_close(po->r.ref);
    hyp_pref_free(&po->tr), hyp_pref_free(&po->va);
    free(po);
}

static const train_objective_i PREF = {
    .step_begin = po_step_begin,
    .micro_batch = po_micro_batch,
    .step_end = NULL, /* every rank computed the loss of the global micro-batch */
    .metrics = po_metrics,
    .line = po_line,
    .eval = po_eval,
    .describe = po_describe,
    .ckpt_save = po_ckpt_save,
    .ckpt_restore = po_ckpt_restore,
    .close = po_close,
};

int pref_objective_open(train_objective *o, const pref_run *args, hyp_err *e) {
    pref_obj *po = train_objective_alloc(o, &PREF, sizeof *po, post_objective_name(args->cfg->objective), e);
    if (!po) return HYP_EFAIL;
    po->r = *args;
    pref_run *r = &po->r;
    r->ref = NULL;
    exec_t *x = r->be->x;
    const post_cfg *c = r->cfg;
    hyp_pref_set *tr = &po->tr, *va = &po->va;
    int rc = pref_examples_open(r, tr, va, &po->have_val, e);
    if (rc || (rc = check_setup(r, tr, e))) return rc;
    int B = x->B, T = x->T, W = r->be->dp.world > 0 ? r->be->dp.world : 1, rank0 = r->be->dp.rank == 0;
    po->per = tr->kind == HYP_PREF_PAIRS ? B / 2 : B;
    /* the reference: the starting weights' log-probs of every row, one forward pass (precomputed) */
    static const int PAIR[2] = {PART_CHOSEN, PART_REJECTED}, KTO[2] = {PART_CHOSEN, PART_KL};
    po->ref_tr = malloc(sizeof(double) * 2 * (size_t)tr->n), po->ref_va = malloc(sizeof(double) * 2 * ((size_t)va->n + 1));
    po->scale = malloc(sizeof(float) * (size_t)B * T);
    po->perm = malloc(sizeof(int) * (size_t)tr->n), po->ex = malloc(sizeof(int) * (size_t)po->per * W);
    if (!po->ref_tr || !po->ref_va || !po->scale || !po->perm || !po->ex) return hyp_fail(e, HYP_EFAIL, "out of memory");
    double t0 = now_s();
    if (c->online_ref) {
        /* online: a frozen copy of the starting weights runs forward on each step's rows; a
         * resumed run reads the frozen weights its start wrote beside the checkpoints, not the
         * resumed ones; a fresh run with a --ckpt-dir writes them there once (rank 0) */
        char mpath[4200] = "";
        if (r->ckpt_dir) snprintf(mpath, sizeof mpath, "%s/reference_model.bin", r->ckpt_dir);
        if (!(rc = pref_ref_open(&r->ref, x, e))) {
            if (r->start_step > 0) rc = pref_ref_load(r->ref, mpath, e);
            else if (r->ckpt_dir) {
                if (rank0 && !(rc = hyp_fs_mkdirs(r->ckpt_dir, e))) rc = pref_ref_save(r->ref, mpath, e);
                if (W > 1 && !hyp_coll_all_ok(r->be->dp.coll, rc == 0) && !rc)
                    rc = hyp_fail(e, HYP_EFAIL, "rank 0 could not write %s (its message is above)", mpath);
            }
        }
        if (!rc)
            printf("%s: %d train %s, %d val; reference online: a frozen copy of the starting weights (%.2f MiB%s) runs forward on every step's rows\n",
                   o->label, tr->n, tr->kind == HYP_PREF_PAIRS ? "pairs" : "KTO examples", va->n, pref_ref_bytes(r->ref) / (1 << 20),
                   r->start_step > 0 ? ", read from reference_model.bin" : r->ckpt_dir ? ", saved to reference_model.bin" : "");
    } else if (r->start_step > 0) {
        if (!(rc = ref_load(r, tr, va, po->ref_tr, po->ref_va, e)))
            printf("%s: reference log-probs of the starting weights read from %s/reference_logps.bin\n", o->label, r->ckpt_dir);
    } else {
        rc = set_logps(r->be, NULL, tr, 2, tr->kind == HYP_PREF_PAIRS ? PAIR : KTO, po->ref_tr, NULL, e);
        if (!rc && po->have_val) rc = val_logps(r->be, NULL, va, po->ref_va, e);
        if (!rc)
            printf("%s: %d train %s, %d val; reference log-probs precomputed with the starting weights in %.2f s (%d forward rows)\n",
                   o->label, tr->n, tr->kind == HYP_PREF_PAIRS ? "pairs" : "KTO examples", va->n, now_s() - t0, 2 * (tr->n + va->n));
    }
    fflush(stdout);
    if (rc) return rc;
    /* the checkpoint counts the examples the whole group consumed in the epoch; the trainer's
     * resume hands each rank its share of them (position / world): the global count is back */
    po->epoch = r->epoch;
    po->pos = (int)r->position * W;
    po->ref_saved = r->start_step > 0 || r->ref;
    if (po->pos > tr->n)
        return hyp_fail(e, HYP_EINPUT, "%s: the checkpoint consumed %d examples of an epoch of %d — resume with the data of that run", r->ckpt_dir, po->pos, tr->n);
    o->has_eval = po->have_val;
    o->eval_at_start = po->have_val;
    return HYP_OK;
}
