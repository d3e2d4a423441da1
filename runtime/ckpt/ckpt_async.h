/* ckpt_async.h — v2179 asynchronous checkpoints: a save splits into a short blocking snapshot
 * (every tensor copied into host buffers owned by this writer, reused from save to save) and the
 * write itself (hyp_ckpt_save_aux: serialize, fsync, rename, `latest`, pruning) on one background
 * thread, so training goes on while the files are written. The files are the ones a blocking
 * hyp_ckpt_save_aux writes, byte for byte (same function, same bytes; only state.json's
 * saved_unix clock differs).
 *
 * At most max_inflight saves are queued or being written; a save that finds them all busy waits
 * (the stall the caller reports). Writes happen in queue order by one thread, so `latest` always
 * names the newest complete one. A failed background write is returned by the next save or by
 * hyp_ckpt_async_wait. Whoever reads the checkpoint directory (a rollback, the end of the run)
 * calls hyp_ckpt_async_wait first.
 *
 * Never: collectives (one process's writes; sharded saves stay blocking), partial files (the
 * writer is hyp_ckpt_save_aux, atomic as ever). */
#ifndef HYP_CKPT_ASYNC_H
#define HYP_CKPT_ASYNC_H

#include "ckpt.h"

typedef struct hyp_ckpt_async hyp_ckpt_async;

/* Starts the writer thread; max_inflight 1..16. */
int hyp_ckpt_async_open(hyp_ckpt_async **a, int max_inflight, hyp_err *e);
/* Snapshots params[n], states[k][n] (k < n_states), aux[n_aux] and *st into the writer's buffers
 * and queues the write of DIR/step_<st->step> (the arguments of hyp_ckpt_save_aux); returns once
 * the snapshot is taken. *stall_s (may be NULL): seconds spent waiting for a free slot. */
int hyp_ckpt_async_save(hyp_ckpt_async *a, const char *dir, const hyp_ckpt_tensor *params,
                        hyp_ckpt_tensor *const *states, int n_states, int n, const hyp_ckpt_aux *aux, int n_aux,
                        const hyp_ckpt_state *st, int keep, double *stall_s, hyp_err *e);
/* The same with v2180: the step is turned into a delta against DIR/delta_base (NULL or "": full),
 * hyp_ckpt_save_inc. */
int hyp_ckpt_async_save_inc(hyp_ckpt_async *a, const char *dir, const hyp_ckpt_tensor *params,
                            hyp_ckpt_tensor *const *states, int n_states, int n, const hyp_ckpt_aux *aux, int n_aux,
                            const hyp_ckpt_state *st, int keep, const char *delta_base, double *stall_s, hyp_err *e);
/* Waits until every queued write is on disk; the first background failure (then cleared). */
int hyp_ckpt_async_wait(hyp_ckpt_async *a, hyp_err *e);
/* Waits, stops the thread, frees the buffers (NULL: nothing). */
void hyp_ckpt_async_close(hyp_ckpt_async *a);

#endif
