/* distill.c — v2149 knowledge distillation (distill.h): the teacher's forward and, on the cpu
 * backend, the mixed KL + cross-entropy loss with its gradient, row by row (a device backend
 * runs the teacher on its device where kernels fit, train/backend_dev.c, else gets its host
 * logits per micro-batch, and computes the loss in its fused-loss kernel,
 * templates/classifier.cu.lua crossentropy_fused_ext). */
#include "distill.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt.h"
#include "fsio.h"
#include "hf.h"

struct distill {
    plan_t tp;          /* the teacher's plan */
    exec_t tx;          /* its executor (forward only) */
    int logits;         /* its logits buffer */
    double temperature, alpha;
    char desc[1200];
    train_teacher dev;  /* the device backends' hook (backend.h) */
    char tplan[4200];   /* the teacher's plan.json */
};

float distill_row(float *z, const float *zt, int y, int V, double temperature, double alpha, float dloss) {
    if (y < 0 || y >= V) {
        for (int i = 0; i < V; i++) z[i] = 0.0f;
        return y < 0 ? 0.0f : NAN;
    }
    double m = z[0], mt = zt[0], T = temperature;
    for (int i = 1; i < V; i++) m = fmax(m, z[i]), mt = fmax(mt, zt[i]);
    double s1 = 0, s2 = 0, s3 = 0;
    for (int i = 0; i < V; i++) {
        s1 += exp(z[i] - m);
        s2 += exp((z[i] - m) / T);
        s3 += exp((zt[i] - mt) / T);
    }
    /* log softmax(z)_i = z_i - lz; log softmax(z/T)_i = (z_i - m)/T - la; teacher: (zt_i - mt)/T - lb */
    double lz = m + log(s1), la = log(s2), lb = log(s3), kl = 0, ce = lz - z[y];
    for (int i = 0; i < V; i++) {
        double lps = (z[i] - m) / T - la, lpt = (zt[i] - mt) / T - lb, pt = exp(lpt);
        kl += pt * (lpt - lps);
        double g = (1 - alpha) * (exp(z[i] - lz) - (i == y)) + alpha * T * (exp(lps) - pt);
        z[i] = (float)(dloss * g);
    }
    return (float)((1 - alpha) * ce + alpha * T * T * kl);
}

static void loss_fused(exec_t *x, float *losses, float *logits, const int32_t *targets, float dloss, int N, int V, int Vp) {
    distill *d = x->loss_ctx;
    (void)exec_bind(&d->tx, x->B, x->T, NULL); /* checked against the student's plan at open */
    memcpy(d->tx.tokens, x->tokens, sizeof(int32_t) * (size_t)N);
    exec_forward(&d->tx);
    const float *zt = exec_buf(&d->tx, d->logits);
    int tVp = (int)d->tp.Vp;
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        float *z = logits + (size_t)n * Vp;
        losses[n] = distill_row(z, zt + (size_t)n * tVp, targets[n], V, d->temperature, d->alpha, dloss);
        for (int i = V; i < Vp; i++) z[i] = 0.0f;
    }
}

/* train_teacher.logits: the teacher's forward over the batch's tokens on the host executor. */
static int teacher_logits(void *ctx, const int32_t *tokens, int B, int T, const float **out, int *stride, hyp_err *e) {
    distill *d = ctx;
    int rc = exec_bind(&d->tx, B, T, e);
    if (rc) return rc;
    memcpy(d->tx.tokens, tokens, sizeof(int32_t) * (size_t)B * T);
    exec_forward(&d->tx);
    *out = exec_buf(&d->tx, d->logits);
    *stride = (int)d->tp.Vp;
    return HYP_OK;
}

int distill_attach(distill *d, train_backend *b, hyp_err *e) {
    if (!d || !d->dev.logits) return HYP_OK;
    char how[600];
    int on = 0, rc = train_backend_dev_teacher(b, &d->dev, &on, how, sizeof how, e);
    if (rc) return rc;
    b->teacher = &d->dev;
    if (b->dp.rank == 0)
        printf("distillation (v2149): the teacher's forward runs %s%s\n", how,
               on ? "; its logits feed the fused loss on the device" : "; its logits are uploaded per micro-batch");
    return HYP_OK;
}

/* The trainer's plan.json in dir or the three directories above it (its kernels/ and batch limits
 * sit beside it), else the checkpoint's own plan copy (ckpt.h: a teacher checkpoint copied away
 * from its trainer). A step directory's plan.json is that copy, so the search passes over it. */
static int find_plan(const char *dir, char *out, size_t cap) {
    char cur[4096], st[4200];
    snprintf(cur, sizeof cur, "%s", dir);
    for (int k = 0; k < 4; k++) {
        size_t L = strlen(cur);
        while (L > 1 && cur[L - 1] == '/') cur[--L] = 0;
        snprintf(out, cap, "%s/plan.json", cur);
        snprintf(st, sizeof st, "%s/state.json", cur);
        if (hyp_fs_exists(out) && !hyp_fs_exists(st)) return 0;
        char *slash = strrchr(cur, '/');
        if (!slash) {
            if (!strcmp(cur, ".")) return -1;
            snprintf(cur, sizeof cur, ".");
        } else if (slash == cur) cur[1] = 0;
        else *slash = 0;
    }
    hyp_err e;
    return hyp_ckpt_plan(dir, out, cap, &e) == HYP_OK && out[0] ? 0 : -1;
}

const char *distill_describe(const distill *d) { return d->desc; }

void distill_close(distill *d, exec_t *x) {
    if (!d) return;
    if (x && x->loss_ctx == d) x->loss_fused = NULL, x->loss_ctx = NULL;
    exec_free(&d->tx);
    plan_free(&d->tp);
    free(d);
}

int distill_open(distill **out, const char *plan_path, exec_t *x, const train_backend_caps *caps, hyp_err *e) {
    *out = NULL;
    char *txt = NULL;
    int rc = hyp_fs_read_small(plan_path, (size_t)256 << 20, &txt, NULL, e);
    if (rc) return rc;
    cJSON *root = cJSON_Parse(txt);
    free(txt);
    const cJSON *s = cJSON_GetObjectItemCaseSensitive(root, "distill");
    if (!s) {
        cJSON_Delete(root);
        return HYP_OK;
    }
    const cJSON *te = cJSON_GetObjectItemCaseSensitive(s, "teacher"), *tt = cJSON_GetObjectItemCaseSensitive(s, "temperature"),
                *al = cJSON_GetObjectItemCaseSensitive(s, "alpha"), *tpl = cJSON_GetObjectItemCaseSensitive(s, "teacher_plan");
    char teacher[4096] = "", tplan[4200] = "";
    if (cJSON_IsString(tpl)) snprintf(tplan, sizeof tplan, "%s", tpl->valuestring);
    if (!cJSON_IsString(te) || !te->valuestring[0] || !cJSON_IsNumber(tt) || !cJSON_IsNumber(al))
        rc = hyp_fail(e, HYP_EINPUT, "%s: the distill section needs teacher, temperature and alpha — regenerate with gen --set v2149.teacher=CKPT", plan_path);
    else snprintf(teacher, sizeof teacher, "%s", te->valuestring);
    double T = cJSON_IsNumber(tt) ? tt->valuedouble : 1, alpha = cJSON_IsNumber(al) ? al->valuedouble : 0;
    cJSON_Delete(root);
    if (rc) return rc;
    /* data parallel: every rank's teacher runs on the rank's own batch (the loss is per token) */
    int fused = 0;
    for (int i = 0; i < x->p->n_bwd; i++) fused |= !strcmp(hyp_op_name(x->p->bwd[i].op), "crossentropy_fused");
    if (!fused) return hyp_fail(e, HYP_EINPUT, "%s: the plan's backward has no crossentropy_fused op for the distillation loss — generate the trainer without the technique that replaces it", plan_path);
    if (caps->host_buffers && x->lowp) /* the bf16-storage ops run the loss per block of rows, without the hook */
        return hyp_fail(e, HYP_EINPUT, "%s: distillation's loss runs on fp32 activations in the cpu trainer, and this plan stores them in bf16 (v2102 storage) — regenerate with --set v2102.storage=fp32", plan_path);
    distill *d = calloc(1, sizeof *d);
    if (!d) return hyp_fail(e, HYP_EFAIL, "out of memory");
    d->temperature = T, d->alpha = alpha;
    char what[4400] = "", cfg[4200];
    snprintf(cfg, sizeof cfg, "%s/config.json", teacher);
    /* the teacher's plan: teacher_plan, else the plan.json beside (or above) the teacher, else for
     * a Hugging Face directory the student's own plan (a teacher of the student's shape) */
    int hf_own = 0;
    if (tplan[0] && !hyp_fs_exists(tplan))
        rc = hyp_fail(e, HYP_EINPUT, "%s: the teacher's plan does not exist — give --set v2149.teacher_plan=out/TEACHER/plan.json of a trainer gen wrote for the teacher's model", tplan);
    else if (!tplan[0] && find_plan(teacher, tplan, sizeof tplan)) {
        if (!hyp_hf_is_our_ckpt(teacher) && hyp_fs_exists(cfg)) hf_own = 1, snprintf(tplan, sizeof tplan, "%s", plan_path);
        else
            rc = hyp_fail(e, HYP_EINPUT, "%s: neither a Hugging Face model directory (config.json) nor a checkpoint with a plan.json in it or the three directories above — give a checkpoint of a trainer gen wrote (out/NAME/ckpt/step_N), an HF directory, or --set v2149.teacher_plan=PLAN", teacher);
    }
    if (!rc) rc = plan_load(tplan, &d->tp, e);
    if (!rc && d->tp.V != x->p->V)
        rc = hyp_fail(e, HYP_EINPUT, "%s: the teacher's vocabulary is %d, the student's %d — distill from a teacher with the student's tokenizer", teacher, (int)d->tp.V, (int)x->p->V);
    if (!rc && (d->tp.B < x->B || d->tp.T < x->T))
        rc = hyp_fail(e, HYP_EINPUT, "%s: the teacher's plan (%s) takes batches up to %d x %d, the student runs %d x %d — regenerate the teacher's plan with gen --batch %d --seq %d",
                      teacher, tplan, (int)d->tp.B, (int)d->tp.T, x->B, x->T, x->B, x->T);
    if (!rc) rc = exec_init(&d->tx, &d->tp, e);
    if (!rc) rc = exec_bind(&d->tx, x->B, x->T, e);
    if (!rc && (rc = hyp_hf_init_from(teacher, &d->tp, d->tx.params, what, sizeof what, e)) && hf_own) {
        char msg[sizeof e->msg];
        snprintf(msg, sizeof msg, "%s", e->msg);
        rc = hyp_fail(e, rc, "%.700s (the Hugging Face teacher was read with the student's plan: for a teacher of another shape generate a trainer for its model and give --set v2149.teacher_plan=out/TEACHER/plan.json)", msg);
    }
    d->logits = -1;
    for (int i = 0; !rc && i < d->tp.n_bufs; i++)
        if (!strcmp(d->tp.bufs[i].name, "logits")) d->logits = i;
    if (!rc && d->logits < 0) rc = hyp_fail(e, HYP_EINPUT, "%s: the teacher's plan has no logits buffer — regenerate it with gen", tplan);
    if (rc) {
        distill_close(d, NULL);
        return rc;
    }
    snprintf(d->desc, sizeof d->desc, "distillation (v2149): teacher %.900s (%s, %.3g M params%s), temperature %g, alpha %g",
             what, d->tp.model_name, d->tp.param_floats / 1e6, hf_own ? ", the student's plan" : "", T, alpha);
    if (caps->host_buffers) x->loss_fused = loss_fused, x->loss_ctx = d; /* the loss in x's fused-loss op */
    else { /* the device computes the loss; its forward on the device where kernels fit (distill_attach) */
        snprintf(d->tplan, sizeof d->tplan, "%s", tplan);
        d->dev = (train_teacher){teacher_logits, d, (float)T, (float)alpha, &d->tp, d->tplan, d->tx.params};
    }
    *out = d;
    return HYP_OK;
}
