/* train_dev.h — the training step of the device backends (sim and cuda) for the generated trainer
 * (train_main.c dispatches here when the plan's backend is "sim" or "cuda").
 *
 * One step: zero the gradients, K micro-batches of forward/backward by the rendered kernels
 * (runtime/exec_dev.h), data parallelism over the device collectives (ZeRO stage 0: all-reduce
 * the gradients; 1: all-reduce, the optimizer on the own shard, all-gather the parameters; 2:
 * reduce-scatter, the optimizer on the shard, all-gather; 3: per-layer gathers and reduce-scatters inside
 * forward/backward (exec_dev_z3), the optimizer on the shards), the global gradient norm on the device with the global_norm kernels
 * (partial sums of squares, all-reduced across ranks when the gradients are sharded, finish) and
 * the clip factor read by the optimizer's kernel from device memory: no gradient leaves the device.
 *
 * With more than one rank and stage 0/1, the all-reduce of the last micro-batch's gradients
 * overlaps the backward pass: the arena is cut into buckets (contiguous parameter tensors of one
 * layer); after the last backward op that touches a bucket's gradients, an event on the default
 * (compute) stream orders that bucket's all-reduce on a communication stream; the host waits for
 * the communication stream's last event before the norm. HYP_COMM_OVERLAP=0 turns this off (one
 * all-reduce of the whole arena after backward).
 */
#ifndef HYP_TRAIN_DEV_H
#define HYP_TRAIN_DEV_H

#include "coll.h"
#include "data.h"
#include "device.h"
#include "exec.h"
#include "exec_dev.h"
#include "optim.h"
#include "train.h"

typedef struct {
    int64_t lo, hi;   /* arena range [lo, hi) */
    int ready;        /* its all-reduce starts after this backward op */
    hyp_event *ev;
} train_dev_bucket;

typedef struct {
    int on;
    hyp_device *dev;
    const hyp_optim_i *opt;  /* the plan's optimizer: its device step */
    exec_dev xd;
    hyp_coll *coll;
    int rank, world, stage;
    float *partial;   /* device: [PARTS] partial sums of squares */
    float *gnorm;     /* device: [2] norm, clip factor */
    float h_gnorm[2];
    hyp_stream *comm; /* the communication stream (world > 1) */
    hyp_event *comm_done;
    train_dev_bucket *buckets;
    int n_buckets, overlap, comm_k; /* comm_k: 1 while the micro-batch whose backward reduces runs */
} train_dev;

/* Opens the device ("sim" or "cuda", from the plan's backend), the executor over the kernels/
 * directory next to plan_path with this rank's ZeRO layout (stage 3: x's groups), and uploads the host state of x
 * (parameters; optimizer states, the shard for stage >= 1). Collective over the ranks of coll. */
int train_dev_open(train_dev *t, const plan_t *p, const char *plan_path, exec_t *x, hyp_coll *coll, int stage,
                   int B, int T, hyp_err *e);
void train_dev_close(train_dev *t);
/* One optimizer step t over K micro-batches of the loader: *loss the global mean loss, *norm the
 * global gradient norm, *scale the clip factor applied. */
int train_dev_step(train_dev *t, exec_t *x, hyp_loader *train, const train_opts *o, int K, int step, double lr,
                   double *loss, double *norm, float *scale, hyp_err *e);
/* Mean validation loss of this rank over `batches` batches of val (the caller averages ranks). */
float train_dev_eval(train_dev *t, exec_t *x, hyp_loader *val, int batches, hyp_err *e, int *rc);
/* Device parameters and this rank's optimizer states into the host arrays of x (checkpoints, sampling). */
int train_dev_download(train_dev *t, exec_t *x, hyp_err *e);
/* Prints every rank's device memory by role (rank 0 prints; collective). */
void train_dev_print_memory(train_dev *t, hyp_err *e);

#endif
