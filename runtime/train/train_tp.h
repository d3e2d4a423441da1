/* train_tp.h — the trainer's side of v2106 tensor parallelism: the dp x tp mesh built at start from
 * the plan's tp degree and the world size (tp ranks contiguous, coll.h hyp_coll_mesh_split), the
 * options a tp run cannot honour yet (refused with what to do), and the tp traffic report.
 * Never: run an op or touch the weights (cpu/exec_tp.c does), nor print anything but the report. */
#ifndef HYP_TRAIN_TP_H
#define HYP_TRAIN_TP_H

#include "train.h"

/* d holds the world (coll, rank, world as one data-parallel group); with p->tp >= 2 it becomes
 * the dp axis, d->tp the rank's tp group and d->all the world. EINPUT ("plan: what — how to fix")
 * when tp does not divide the world size. */
int train_tp_mesh(const plan_t *p, const char *plan_path, dp_t *d, hyp_err *e);
/* Frees the sub-communicators (d->coll becomes d->all again). */
void train_tp_close(dp_t *d);
/* EINPUT naming `what` (an option or plan feature) as not yet run with tensor parallelism. */
int train_tp_refuse(const plan_t *p, const char *plan_path, const char *what, hyp_err *e);
/* One banner line: the mesh and what this rank's plan holds of the full model. */
void train_tp_describe(const dp_t *d, const plan_t *p);
/* The bytes this rank sent on its tp group so far (ring model, coll.h), over `steps` steps. */
void train_tp_report(const dp_t *d, int steps);

#endif
