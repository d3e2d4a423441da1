/* fuzz_ckpt_model.h — the small model whose checkpoints the checkpoint fuzz targets load and the
 * seed writer (fuzz_seeds.c) saves: two parameters, two optimizer states each, two auxiliary
 * tensors, and the files of a step directory in the order a fuzz input lists them (FZ_SEP).
 * Never: anything but the shapes and names both sides must agree on. */
#ifndef HYP_FUZZ_CKPT_MODEL_H
#define HYP_FUZZ_CKPT_MODEL_H

#include "ckpt.h"
#include "safetensors.h"

#define FZ_CK_N 2
#define FZ_CK_STATES 2
#define FZ_CK_AUX 2
#define FZ_CK_HASH "fuzzplan0123456789abcdef"

typedef struct {
    float w[6], b[3], sw[FZ_CK_STATES][6], sb[FZ_CK_STATES][3], amax[4];
    int64_t pos[1];
    hyp_ckpt_tensor params[FZ_CK_N], states[FZ_CK_STATES][FZ_CK_N];
    hyp_ckpt_tensor *state_ptr[FZ_CK_STATES];
    hyp_ckpt_aux aux[FZ_CK_AUX];
} fz_ck_model;

static void fz_ck_model_init(fz_ck_model *m) {
    static const char *const sname[FZ_CK_STATES][FZ_CK_N] = {{"w.exp_avg", "b.exp_avg"}, {"w.exp_avg_sq", "b.exp_avg_sq"}};
    memset(m, 0, sizeof *m);
    for (int i = 0; i < 6; i++) m->w[i] = 0.25f * (float)i - 0.5f;
    for (int i = 0; i < 3; i++) m->b[i] = 0.125f * (float)i;
    for (int i = 0; i < 4; i++) m->amax[i] = 1.0f + (float)i;
    m->pos[0] = 3;
    m->params[0] = (hyp_ckpt_tensor){"w", m->w, 2, {2, 3}};
    m->params[1] = (hyp_ckpt_tensor){"b", m->b, 1, {3}};
    for (int k = 0; k < FZ_CK_STATES; k++) {
        for (int i = 0; i < 6; i++) m->sw[k][i] = 0.01f * (float)(i + k);
        m->states[k][0] = (hyp_ckpt_tensor){sname[k][0], m->sw[k], 2, {2, 3}};
        m->states[k][1] = (hyp_ckpt_tensor){sname[k][1], m->sb[k], 1, {3}};
        m->state_ptr[k] = m->states[k];
    }
    m->aux[0] = (hyp_ckpt_aux){"fp8.amax", HYP_ST_F32, m->amax, 1, {4}};
    m->aux[1] = (hyp_ckpt_aux){"fp8.pos", HYP_ST_I64, m->pos, 1, {1}};
}

#endif
