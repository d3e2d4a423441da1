/* comm_overlap.h — v2168 on the cpu trainer: the data-parallel gradient all-reduce overlapped with
 * the backward pass. The gradient arena is cut into the per-layer buckets of grad_buckets.h (the
 * device trainer's); the last micro-batch's backward runs op by op, and as soon as an op has made a
 * bucket's gradients final (reverse layer order) the bucket is handed to one of `streams`
 * communication helper threads, which all-reduces it (MPI_Iallreduce completed by MPI_Test with
 * short sleeps, so a waiting helper does not spin; a v2171 algorithm blocking; the sum in place)
 * while backward continues. The main thread waits for them only in the gradient reduction, before
 * the norm, the clip factor and the optimizer step.
 *
 * MPI thread safety: the trainer's MPI is initialized with MPI_THREAD_MULTIPLE (coll.c) and
 * train_overlap_open refuses to start without it, because the main thread keeps calling
 * collectives (the step's loss) while helpers run theirs; each helper thread owns a duplicate of
 * the data-parallel communicator (hyp_coll_dup), so no two threads ever share one, and bucket k of
 * the step (in posting order) goes to helper k mod streams, so every rank issues the same
 * collectives in the same order on each duplicate.
 *
 * Determinism: the buckets and their order are fixed by the plan, each bucket is one all-reduce of
 * the same range on every rank, so a run with the buckets reduced serially after backward
 * (train_overlap_reduce_serial, HYP_COMM_OVERLAP=0) gives the same bits; with 2 ranks each element
 * is the one sum g0 + g1 whatever the bucketing, so also the non-v2168 trainer's bits.
 *
 * Measurement (per step, CLOCK_MONOTONIC): total = the time at least one bucket all-reduce was in
 * flight (the union of their intervals), exposed = the time the main thread waited for them,
 * hidden = total - exposed (at least 0). Inside the profiled window every bucket is a span on the
 * track of its helper (HYP_PROF_TID_COMM + helper) and the wait a host "comm_wait_exposed" phase.
 *
 * Never: an MPI call on the data-parallel communicator itself from a helper, a bucket handed over
 * before its last backward op ran, or a gradient read by the main thread before the wait.
 */
#ifndef HYP_COMM_OVERLAP_H
#define HYP_COMM_OVERLAP_H

#include "coll.h"
#include "exec.h"
#include "hyp_err.h"

typedef struct train_comm_overlap train_comm_overlap;

/* Buckets of p over an arena of `arena` floats; `streams` helper threads (1..4), each with a
 * duplicate of dp. HYP_EINPUT when MPI lacks MPI_THREAD_MULTIPLE. Collective over dp. */
int train_overlap_open(train_comm_overlap **out, const plan_t *p, hyp_coll *dp, int streams, int64_t arena, hyp_err *e);
/* Stops the helpers (after their queued buckets) and frees everything, the duplicates included. */
void train_overlap_close(train_comm_overlap *o);
/* The backward pass of x (exec_backward's ops) with the loss gradient dloss, each bucket handed to
 * a helper right after its last op (round_bf16: v2163, the bucket rounded to bf16 first, as the
 * trainer rounds the whole arena after a micro-batch). *loss: the fused loss's mean, as
 * exec_backward returns it. Errors only for a helper that could not be reached. */
int train_overlap_backward(train_comm_overlap *o, exec_t *x, float dloss, int round_bf16, float *loss, hyp_err *e);
/* Whether this step's buckets were handed to the helpers (train_overlap_backward ran since the
 * last wait). */
int train_overlap_posted(const train_comm_overlap *o);
/* Waits for every handed-over bucket (the exposed part), moves the helpers' counters into dp's and
 * records the step's figures. The first helper error, if any. */
int train_overlap_wait(train_comm_overlap *o, hyp_err *e);
/* The same buckets all-reduced in the same order on the calling thread (no overlap), timed as
 * wholly exposed. */
int train_overlap_reduce_serial(train_comm_overlap *o, float *grads, hyp_err *e);
/* The last step's figures (seconds): total communication time, the exposed part. */
void train_overlap_last(const train_comm_overlap *o, double *total_s, double *exposed_s);
int train_overlap_buckets(const train_comm_overlap *o);
int train_overlap_streams(const train_comm_overlap *o);

#endif
