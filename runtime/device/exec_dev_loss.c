/* exec_dev_loss.c — the device executor's fused-loss extension (exec_dev.h): per-token gradient
 * weights (the preference objectives, train/pref.c) and a distillation teacher's logits (v2149,
 * train/distill.c) uploaded (or, for a teacher running on the device, pointed at) for the following backward passes, and the choice of launches for the
 * backward's crossentropy_fused op (templates/classifier.cu.lua's crossentropy_fused_ext while
 * either is set). Never: computing a loss on the host, or anything under ZeRO-3 (whose grouped
 * backward keeps the plain launches: refused here). */
#include "exec_dev_int.h"

#include <string.h>

int exec_dev_has_loss_ext(const exec_dev *x) { return x->loss_ext_op >= 0 && x->loss_ext.how == EXD_KERNELS; }

const exec_dev_op *exec_dev_bwd_op(const exec_dev *x, int i) {
    return (x->row_scale || x->teacher) && i == x->loss_ext_op && x->loss_ext.how == EXD_KERNELS ? &x->loss_ext : &x->bwd[i];
}

static int usable(const exec_dev *x, const char *what, hyp_err *e) {
    if (!exec_dev_has_loss_ext(x))
        return hyp_fail(e, HYP_EINPUT, "kernels.json has no crossentropy_fused_ext launch for %s — regenerate the trainer with gen (a plan with a preference objective or distillation renders it)", what);
    if (x->z3) return hyp_fail(e, HYP_EINPUT, "%s on the device needs ZeRO stage <= 2 — generate without zero3", what);
    return HYP_OK;
}

int exec_dev_set_row_scale(exec_dev *x, const float *host, hyp_err *e) {
    if (!host) {
        x->row_scale = NULL;
        return HYP_OK;
    }
    int rc = usable(x, "per-token loss weights", e);
    int64_t maxN = (int64_t)x->p->B * x->p->T;
    if (!rc && !x->row_scale_buf) rc = exec_dev_alloc(x, (void **)&x->row_scale_buf, maxN, sizeof(float), e);
    if (!rc) rc = x->dev->h2d_sync(x->dev, x->row_scale_buf, host, sizeof(float) * (size_t)x->B * x->T, e);
    if (!rc) x->row_scale = x->row_scale_buf;
    return rc;
}

int exec_dev_set_teacher(exec_dev *x, const float *host, int vp, float temperature, float alpha, hyp_err *e) {
    if (!host) {
        x->teacher = NULL;
        return HYP_OK;
    }
    int rc = usable(x, "a distillation teacher", e);
    if (!rc && (vp < x->p->V || !(temperature > 0)))
        rc = hyp_fail(e, HYP_EINPUT, "exec_dev_set_teacher: rows of %d floats (the vocabulary is %d), temperature %g — give the teacher's padded rows and a positive temperature",
                      vp, (int)x->p->V, (double)temperature);
    int64_t need = (int64_t)x->p->B * x->p->T * vp;
    if (!rc && need > x->teacher_cap) {
        if (x->teacher_buf) {
            x->dev->mem_free(x->dev, x->teacher_buf, e);
            x->bytes -= sizeof(float) * (size_t)x->teacher_cap;
            x->teacher_buf = NULL, x->teacher_cap = 0;
        }
        if (!(rc = exec_dev_alloc(x, (void **)&x->teacher_buf, need, sizeof(float), e))) x->teacher_cap = need;
    }
    if (!rc) rc = x->dev->h2d_sync(x->dev, x->teacher_buf, host, sizeof(float) * (size_t)x->B * x->T * (size_t)vp, e);
    if (!rc) x->teacher = x->teacher_buf, x->teacher_vp = vp, x->temperature = temperature, x->alpha = alpha;
    return rc;
}

int exec_dev_use_teacher(exec_dev *x, const float *dev, int vp, float temperature, float alpha, hyp_err *e) {
    if (!dev) {
        x->teacher = NULL;
        return HYP_OK;
    }
    int rc = usable(x, "a distillation teacher", e);
    if (!rc && (vp < x->p->V || !(temperature > 0)))
        rc = hyp_fail(e, HYP_EINPUT, "exec_dev_use_teacher: rows of %d floats (the vocabulary is %d), temperature %g — give the teacher's padded rows and a positive temperature",
                      vp, (int)x->p->V, (double)temperature);
    if (!rc) x->teacher = (float *)dev, x->teacher_vp = vp, x->temperature = temperature, x->alpha = alpha;
    return rc;
}
