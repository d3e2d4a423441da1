/* coll_algo.h — internal to runtime/coll: the v2171 all-reduce algorithms written on MPI
 * point-to-point (coll_algo.c), which coll.c runs in place of MPI_Allreduce when a communicator
 * was given an algorithm (hyp_coll_set_allreduce). Never included outside runtime/coll. */
#ifndef HYP_COLL_ALGO_H
#define HYP_COLL_ALGO_H

#include <stddef.h>
#include <stdint.h>

#include "hyp_err.h"

#ifdef HYP_HAVE_MPI
#include <mpi.h>

/* What one rank did in one all-reduce: bytes it sent, communication rounds it took part in (a
 * round = one send, one receive, or one paired send-receive, waited for before the next). */
typedef struct {
    uint64_t bytes, steps;
} coll_tally;

/* In place, buf[n] = the sum over the ranks of comm (rank, world its own). node_size: ranks
 * [g*node_size, (g+1)*node_size) form node g (hierarchical only; >= 1). Every rank of comm calls
 * it with the same algo, n and node_size. */
int coll_algo_allreduce_f32(int algo, MPI_Comm comm, int rank, int world, int node_size, float *buf, size_t n,
                            coll_tally *t, hyp_err *e);
#endif

#endif
