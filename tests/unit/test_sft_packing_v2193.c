/* test_sft_packing_v2193.c — v2193 SFT with v2126 packing: conversations from the real
 * `gen data --chat` (S.docs + S.mask sidecars) read by the real loader (hyp_loader_next_pos) into
 * one packed row of a trainer from `gen --enable adamw,sft,packing`, measured on the cpu executor:
 *
 *   1. the loader: positions restart at 0 at every conversation start (the .docs offsets) and
 *      count up inside it; a target is -1 exactly where the .mask sidecar says 0 (the mask stays
 *      aligned with the shifted targets), else the next token.
 *   2. the packed row's per-token losses equal those of each conversation run alone (its own batch
 *      of its own length, its assistant targets only), and the packed mean (normalized by the
 *      row's assistant tokens, as the trainer's dloss) equals the assistant-token-weighted mean of
 *      the conversations alone; the packed row's parameter gradients equal the sum of the
 *      conversations' gradients alone (the same loss scale).
 *   3. prompt targets carry nothing: the per-token loss at every prompt (mask 0) target is exactly
 *      0 and the loss gradient w.r.t. the logits of those rows is exactly 0.
 *   4. no gradient crosses a conversation: with only conversation k's assistant targets, the
 *      gradient w.r.t. the embedding output of every other conversation's tokens is exactly 0; the
 *      same SFT trainer without packing is checked to leak (so the check can fail).
 * For tiny (gpt2, learned positions, naive attention) and tiny-llama (RoPE, flash attention).
 * Tolerances derived as in test_packing_v2126.c, for tiny and tiny-llama (a logit behind ~6,000
 * fp32 roundings, 2.9x the roundings' square root of the pack models): per-token losses and mean
 * 5e-6 relative (rms 4.6e-7 of a token's loss: 11 sigma), gradients 3e-5 * max|ref| + 1e-9 per
 * tensor (rms 6.6e-6 of the scale, a max over ~10^5 elements: 4.5 sigma), isolation exactly 0.
 * A masked token counted, or a position that does not restart, moves them by >= 1e-3.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "data.h"
#include "exec.h"
#include "plan.h"

#include "hyp_test.h"
#include "hyp_test_trainer.h"

static char g_tmp[256];

/* the split's tokens, conversation starts and mask, read from the files gen data --chat wrote */
static int32_t *g_tok;
static uint8_t *g_mask;
static uint64_t g_n, g_doc[16];
static int g_ndoc;

static long file_bytes(const char *path, unsigned char **out) {
    FILE *f = fopen(path, "rb");
    if (!f) return -1;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    *out = malloc((size_t)n + 1);
    if (!*out || fread(*out, 1, (size_t)n, f) != (size_t)n) n = -1;
    fclose(f);
    return n;
}

static int32_t rd32(const unsigned char *p) { return (int32_t)((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24); }

static int read_split(const char *dir) {
    char path[1024];
    unsigned char *b = NULL, *d = NULL, *m = NULL;
    snprintf(path, sizeof path, "%s/train_000000.bin", dir);
    long nb = file_bytes(path, &b);
    snprintf(path, sizeof path, "%s/train_000000.docs", dir);
    long nd = file_bytes(path, &d);
    snprintf(path, sizeof path, "%s/train_000000.mask", dir);
    long nm = file_bytes(path, &m);
    int ok = nb > 1024 && nd > 1024 && nm > 1024;
    if (ok) {
        int ver = rd32(b + 4);
        g_n = (uint64_t)rd32(b + 8);
        g_tok = malloc(sizeof(int32_t) * g_n);
        for (uint64_t i = 0; i < g_n; i++)
            g_tok[i] = ver == 1 ? (int32_t)(b[1024 + 2 * i] | b[1024 + 2 * i + 1] << 8) : rd32(b + 1024 + 4 * i);
        g_ndoc = rd32(d + 8);
        ok = g_ndoc >= 2 && g_ndoc <= 16 && (uint64_t)rd32(m + 8) == g_n;
        for (int i = 0; ok && i < g_ndoc; i++) memcpy(&g_doc[i], d + 1024 + 8 * i, 8);
        g_mask = malloc(g_n);
        if (ok) memcpy(g_mask, m + 1024, g_n);
    }
    free(b), free(d), free(m);
    return ok;
}

static int open_trainer(trainer *tr, const char *model, const char *sel, const char *tag, int T) {
    char dir[512], cmd[2048];
    snprintf(dir, sizeof dir, "%s/%s", g_tmp, tag);
    memset(tr, 0, sizeof *tr);
    snprintf(cmd, sizeof cmd,
             "cd %s && %s/generator/gen specs/v2500.yaml --enable adamw,sft%s --model %s --target cpu --batch 1 --seq %d -o %s >/dev/null 2>&1",
             HYP_SOURCE_DIR, HYP_BINARY_DIR, sel, model, T, dir);
    if (system(cmd) != 0) {
        check(0, "gen", "%s %s failed", model, sel);
        return 0;
    }
    return trainer_load(tr, dir);
}

static double max_abs_diff(const float *a, const float *b, long n, double *refmax) {
    double w = 0, m = 0;
    for (long i = 0; i < n; i++) {
        w = fmax(w, fabs((double)a[i] - b[i]));
        m = fmax(m, fabs((double)b[i]));
    }
    *refmax = m;
    return w;
}

/* the conversation holding token t */
static int conv_of(uint64_t t) {
    int k = 0;
    while (k + 1 < g_ndoc && g_doc[k + 1] <= t) k++;
    return k;
}

static void row_case(const char *model, const char *sel, const char *tag, const int32_t *tok, const int32_t *tgt,
                     const int32_t *pos, int T) {
    trainer tr;
    char name[200];
    if (!open_trainer(&tr, model, sel, tag, T)) return;
    exec_t *x = &tr.x;
    const plan_t *p = &tr.p;
    hyp_err e;
    long P = p->param_floats;
    CHECK(p->positions_buf >= 0, "%s: the plan of gen --enable sft,packing has the positions array", tag);
    int cnt = 0;
    for (int t = 0; t < T; t++) cnt += tgt[t] >= 0;
    /* packed: one row, dloss = 1 / (its assistant targets), as the next-token objective (train/obj_tokens.c) */
    exec_bind(x, 1, T, &e);
    memcpy(x->tokens, tok, sizeof(int32_t) * T);
    memcpy(x->targets, tgt, sizeof(int32_t) * T);
    memcpy(x->positions, pos, sizeof(int32_t) * T);
    memset(x->grads, 0, sizeof(float) * (size_t)P);
    exec_forward(x);
    float packed_mean = exec_backward(x, 1.0f / cnt);
    float *pl = malloc(sizeof(float) * T), *pg = malloc(sizeof(float) * (size_t)P);
    memcpy(pl, exec_buf(x, p->losses_buf), sizeof(float) * T);
    memcpy(pg, x->grads, sizeof(float) * (size_t)P);
    /* 3. prompt targets: zero loss, zero logits gradient (the fused op leaves d logits in logits) */
    int lg = find_buf(p, "logits");
    double prompt_loss = 0, prompt_grad = 0, asst_grad = 0;
    int Vp = (int)p->Vp;
    if (lg >= 0) {
        const float *dz = exec_buf(x, lg);
        for (int t = 0; t < T; t++) {
            double m = 0;
            for (int v = 0; v < Vp; v++) m = fmax(m, fabs(dz[(size_t)t * Vp + v]));
            if (tgt[t] < 0) prompt_grad = fmax(prompt_grad, m), prompt_loss = fmax(prompt_loss, fabs(pl[t]));
            else asst_grad = fmax(asst_grad, m);
        }
    }
    snprintf(name, sizeof name, "test_v2193_prompt_targets_have_zero_loss_and_gradient_%s", tag);
    check(lg >= 0 && prompt_loss == 0.0 && prompt_grad == 0.0 && asst_grad > 0, name,
          "%d prompt targets: max |loss| %g, max |d loss / d logits| %g (assistant rows: %.3g)", T - cnt, prompt_loss,
          prompt_grad, asst_grad);
    /* 2. alone: each conversation as its own batch (1 x its length - 1) */
    memset(x->grads, 0, sizeof(float) * (size_t)P);
    double wl = 0, weighted = 0;
    for (int k = 0; k < g_ndoc; k++) {
        int s = (int)g_doc[k], L = (int)((k + 1 < g_ndoc ? g_doc[k + 1] : g_n) - g_doc[k]) - 1;
        exec_bind(x, 1, L, &e); /* positions 0..L-1 */
        int n = 0;
        for (int i = 0; i < L; i++) {
            x->tokens[i] = g_tok[s + i];
            x->targets[i] = g_mask[s + i + 1] ? g_tok[s + i + 1] : -1;
            n += x->targets[i] >= 0;
        }
        exec_forward(x);
        float m = exec_backward(x, 1.0f / cnt);
        weighted += (double)m * n;
        const float *l = exec_buf(x, p->losses_buf);
        for (int i = 0; i < L; i++) wl = fmax(wl, fabs((double)l[i] - pl[s + i]) / fmax(1, fabs(l[i])));
    }
    weighted /= cnt;
    snprintf(name, sizeof name, "test_v2193_packed_row_loss_equals_conversations_alone_%s", tag);
    check(wl <= 5e-6 && fabs(weighted - packed_mean) <= 5e-6 * fmax(1, fabs(weighted)), name,
          "%d conversations, %d assistant targets of %d: per-token max rel err %.3g; packed mean %.9g vs token-weighted %.9g",
          g_ndoc, cnt, T, wl, packed_mean, weighted);
    int ok = 1;
    double worst = 0;
    for (int i = 0; i < p->n_params_t; i++) {
        double rm, w = max_abs_diff(pg + p->params[i].offset, x->grads + p->params[i].offset, p->params[i].numel, &rm);
        if (w > 3e-5 * rm + 1e-9) ok = 0;
        if (rm > 0) worst = fmax(worst, w / rm);
    }
    snprintf(name, sizeof name, "test_v2193_packed_row_gradients_equal_conversations_alone_%s", tag);
    check(ok, name, "%d tensors, worst relative err %.3g", p->n_params_t, worst);
    free(pl), free(pg);
    close_trainer(&tr);
}

/* largest |d loss_k / d x0| outside and inside conversation k (only k's assistant targets) */
static void cross_grad(trainer *tr, int k, const int32_t *tok, const int32_t *tgt, const int32_t *pos, int T, double *out,
                       double *in) {
    exec_t *x = &tr->x;
    hyp_err e;
    exec_bind(x, 1, T, &e);
    memcpy(x->tokens, tok, sizeof(int32_t) * T);
    if (x->positions) memcpy(x->positions, pos, sizeof(int32_t) * T);
    for (int t = 0; t < T; t++) x->targets[t] = conv_of((uint64_t)t) == k ? tgt[t] : -1;
    memset(x->grads, 0, sizeof(float) * (size_t)tr->p.param_floats);
    exec_forward(x);
    exec_backward(x, 1.0f);
    const float *dx = exec_buf(x, find_buf(&tr->p, "d:x0"));
    *out = *in = 0;
    for (int t = 0; t < T; t++)
        for (int c = 0; c < tr->p.C; c++) {
            double v = fabs(dx[(long)t * tr->p.C + c]);
            if (conv_of((uint64_t)t) == k) *in = fmax(*in, v);
            else *out = fmax(*out, v);
        }
}

static void isolation_case(const char *model, const char *sel, const char *tag, const int32_t *tok, const int32_t *tgt,
                           const int32_t *pos, int T) {
    trainer tr, base;
    char tb[96], name[200];
    snprintf(tb, sizeof tb, "%s_nopack", tag);
    if (!open_trainer(&tr, model, sel, tag, T)) return;
    if (!open_trainer(&base, model, "", tb, T)) {
        close_trainer(&tr);
        return;
    }
    CHECK(find_buf(&tr.p, "d:x0") >= 0 && find_buf(&base.p, "d:x0") >= 0, "%s: the plans have d:x0", tag);
    double worst = 0, min_in = 1e30, leak = 0;
    for (int k = 0; k < g_ndoc; k++) {
        double o, i;
        cross_grad(&tr, k, tok, tgt, pos, T, &o, &i);
        worst = fmax(worst, o), min_in = fmin(min_in, i);
        cross_grad(&base, k, tok, tgt, pos, T, &o, &i);
        if (k > 0) leak = fmax(leak, o);
    }
    snprintf(name, sizeof name, "test_v2193_no_gradient_across_conversations_%s", tag);
    check(worst == 0.0 && min_in > 0, name, "max |d loss_k / d x0| outside conversation k = %g (inside >= %.3g)", worst, min_in);
    snprintf(name, sizeof name, "test_v2193_unpacked_sft_trainer_leaks_%s", tag);
    check(leak > 0, name, "without packing the gradient crosses conversations (%.3g): the check above can fail", leak);
    close_trainer(&tr);
    close_trainer(&base);
}

int main(void) {
    snprintf(g_tmp, sizeof g_tmp, "/tmp/hyp_test_sftpack_%d", (int)getpid());
    mkdir(g_tmp, 0755);
    char path[600], cmd[2048], dir[600];
    /* three conversations (one with a system turn, one multi-turn), byte tokenizer, the plain template (ChatML markers would not fit three in the 256-token context) */
    snprintf(path, sizeof path, "%s/chat.jsonl", g_tmp);
    FILE *f = fopen(path, "w");
    if (!f) return 1;
    fputs("{\"messages\": [{\"role\": \"user\", \"content\": \"Name a colour.\"}, {\"role\": \"assistant\", \"content\": \"Blue, like the sky.\"}]}\n", f);
    fputs("{\"messages\": [{\"role\": \"system\", \"content\": \"Be brief.\"}, {\"role\": \"user\", \"content\": \"2+2?\"}, {\"role\": \"assistant\", \"content\": \"4\"}]}\n", f);
    fputs("{\"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}, {\"role\": \"assistant\", \"content\": \"Hello there!\"}, {\"role\": \"user\", \"content\": \"Bye\"}, {\"role\": \"assistant\", \"content\": \"Bye.\"}]}\n", f);
    fclose(f);
    snprintf(dir, sizeof dir, "%s/data", g_tmp);
    snprintf(cmd, sizeof cmd, "cd %s && %s/generator/gen data --chat %s --template plain --val-fraction 0 -o %s >/dev/null 2>&1", HYP_SOURCE_DIR,
             HYP_BINARY_DIR, path, dir);
    CHECK(system(cmd) == 0, "gen data --chat wrote the conversations");
    CHECK(read_split(dir), "read the shard, its .docs and .mask sidecars (%llu tokens, %d conversations)", (unsigned long long)g_n,
          g_ndoc);
    if (!g_tok || g_ndoc != 3 || g_n > 257) {
        printf("%d passed, %d failed\n", g_pass, g_fail + 1);
        return 1;
    }
    /* 1. the loader: one window of T = n - 1 tokens is the whole split */
    int T = (int)g_n - 1;
    int32_t *tok = malloc(sizeof(int32_t) * T), *tgt = malloc(sizeof(int32_t) * T), *pos = malloc(sizeof(int32_t) * T);
    hyp_err e;
    hyp_loader *L = hyp_loader_open(dir, "train", 1, T, 7, 0, 1, &e);
    CHECK(L != NULL, "loader opens the chat split: %s", L ? "ok" : e.msg);
    if (!L || hyp_loader_next_pos(L, tok, tgt, pos, &e) != HYP_OK) {
        printf("%d passed, %d failed\n", g_pass, g_fail + 1);
        return 1;
    }
    CHECK(hyp_loader_masked(L) && hyp_loader_has_docs(L), "the loader sees the loss masks and the conversation starts");
    hyp_loader_close(L);
    int pos_ok = 1, mask_ok = 1, nmask = 0;
    for (int t = 0; t < T; t++) {
        pos_ok &= tok[t] == g_tok[t] && pos[t] == (int32_t)((uint64_t)t - g_doc[conv_of((uint64_t)t)]);
        mask_ok &= tgt[t] == (g_mask[t + 1] ? g_tok[t + 1] : -1);
        nmask += !g_mask[t + 1];
    }
    check(pos_ok, "test_v2193_loader_positions_restart_per_conversation", "starts %llu, %llu, %llu of %d tokens",
          (unsigned long long)g_doc[0], (unsigned long long)g_doc[1], (unsigned long long)g_doc[2], T);
    check(mask_ok && nmask > 0 && nmask < T, "test_v2193_loader_targets_follow_the_mask",
          "%d prompt targets are -1, %d assistant targets are the next token", nmask, T - nmask);
    /* the target of a conversation's last token is the next conversation's first: always prompt */
    CHECK(tgt[g_doc[1] - 1] == -1 && tgt[g_doc[2] - 1] == -1, "no target crosses into the next conversation");
    row_case("tiny", ",packing", "gpt2_naive", tok, tgt, pos, T);
    row_case("tiny-llama", ",packing,flash", "llama_flash", tok, tgt, pos, T);
    isolation_case("tiny", ",packing", "gpt2_iso", tok, tgt, pos, T);
    isolation_case("tiny-llama", ",packing,flash", "llama_iso", tok, tgt, pos, T);
    free(tok), free(tgt), free(pos), free(g_tok), free(g_mask);
    rm_rf(g_tmp);
    return hyp_test_finish();
}
