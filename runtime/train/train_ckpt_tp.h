/* train_ckpt_tp.h — checkpoints of a v2106 tensor-parallel run (train_ckpt.c hands them here when
 * d->tp is set): consolidated in the np=1 layout, whole tensors under their own names and full
 * shapes, written by rank 0 of the world, read by every rank keeping its slice. Collective over the
 * tp group (and the world for the all-ok). Never: the step, sharded (ZeRO) or FP8 states. */
#ifndef HYP_TRAIN_CKPT_TP_H
#define HYP_TRAIN_CKPT_TP_H

#include "ckpt.h"
#include "exec.h"
#include "train.h"

int train_ckpt_tp_save(dp_t *d, exec_t *x, const char *dir, int keep, const hyp_ckpt_state *st, const char *delta_base,
                       hyp_err *e);
/* HYP_ENOCKPT when dir has none yet (as train_ckpt_load). */
int train_ckpt_tp_load(dp_t *d, exec_t *x, const char *dir, const char *plan_hash, hyp_ckpt_state *st, hyp_err *e);
/* --init-from a Hyperion checkpoint of any plan of this model (np=1, tp, dp: whole tensors): the
 * weights, this rank's slices kept; optimizer and step fresh. HF directories are refused. */
int train_ckpt_tp_init_from(dp_t *d, exec_t *x, const char *path, char *what, size_t what_cap, hyp_err *e);

#endif
