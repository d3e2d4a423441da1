/* coll.h — collectives for data parallelism on the CPU backend: all-reduce, reduce-scatter,
 * all-gather and broadcast over MPI (Open MPI), or a single-rank identity when the program was
 * not started by mpirun/srun (or the build has no MPI). One interface, so the step logic in
 * train_main.c is the same for 1 and N ranks; the cuda backend will implement it over NCCL.
 * Reductions are sums in fp32 (MPI_SUM); the order of summation is MPI's and deterministic for a
 * fixed world size. Nothing here exits: errors come back as HYP_EFAIL with MPI's message. */
#ifndef HYP_COLL_H
#define HYP_COLL_H

#include <stddef.h>
#include <stdint.h>

#include "hyp_err.h"

typedef struct hyp_coll hyp_coll;

/* Starts MPI when launched under mpirun/srun (detected from the environment), else one rank. */
int hyp_coll_init(int *argc, char ***argv, hyp_coll **out, hyp_err *e);
void hyp_coll_finalize(hyp_coll *c);
int hyp_coll_rank(const hyp_coll *c);
int hyp_coll_world(const hyp_coll *c);
const char *hyp_coll_backend(const hyp_coll *c); /* "mpi" or "single" */
/* The rank among the processes of this node (MPI_Comm_split_type(MPI_COMM_TYPE_SHARED), so under
 * any MPI, not only the launchers that export a local-rank variable), and their number. */
int hyp_coll_local_rank(const hyp_coll *c);
int hyp_coll_local_world(const hyp_coll *c);
/* The node-local rank the latest hyp_coll_init of this process found; -1 before any. For a device
 * layer opened before it is handed the communicator (it picks its GPU at open). */
int hyp_coll_process_local_rank(void);

/* In place: buf = sum over ranks. */
int hyp_coll_allreduce_f32(hyp_coll *c, float *buf, size_t n, hyp_err *e);
int hyp_coll_allreduce_f64(hyp_coll *c, double *buf, size_t n, hyp_err *e);
/* max over ranks (for amax) */
int hyp_coll_allreduce_max_f32(hyp_coll *c, float *buf, size_t n, hyp_err *e);
/* recv[count] = sum over ranks of send[rank*count .. +count); send has world*count floats. */
int hyp_coll_reduce_scatter_f32(hyp_coll *c, const float *send, float *recv, size_t count, hyp_err *e);
/* recv[world*count] = concatenation of every rank's send[count]. send may alias recv + rank*count. */
int hyp_coll_allgather_f32(hyp_coll *c, const float *send, float *recv, size_t count, hyp_err *e);
/* Non-blocking all-gather (MPI_Iallgather): starts the transfer and returns a request id in *req;
 * recv is complete only after hyp_coll_wait(*req). At most HYP_COLL_MAX_REQS in flight. */
#define HYP_COLL_MAX_REQS 16
int hyp_coll_iallgather_f32(hyp_coll *c, const float *send, float *recv, size_t count, int *req, hyp_err *e);
int hyp_coll_wait(hyp_coll *c, int req, hyp_err *e);
/* Non-blocking in-place sum all-reduce (MPI_Iallreduce; v2174 async data parallelism): starts it
 * and returns a request id in *req; buf holds the sum only after hyp_coll_wait(*req) and must not
 * be touched before. Counted like hyp_coll_allreduce_f32 (ring model) when started. MPI's own
 * algorithm only: EINPUT when a v2171 algorithm is set on c; EFAIL above INT_MAX floats. */
int hyp_coll_iallreduce_f32(hyp_coll *c, float *buf, size_t n, int *req, hyp_err *e);
/* Drives a non-blocking collective (MPI_Test): *done = 1 when it completed (the request is freed,
 * as by hyp_coll_wait), else 0. One thread per request; hyp_coll_mpi_threads says whether another
 * thread may call it while this one runs other collectives (MPI_THREAD_MULTIPLE provided). */
int hyp_coll_test(hyp_coll *c, int req, int *done, hyp_err *e);
int hyp_coll_mpi_threads(const hyp_coll *c);
/* Point-to-point (v2107 pipeline stages): a non-blocking send of buf[n] floats to rank `peer` of c
 * under `tag` (MPI_Isend: buf stays untouched until hyp_coll_wait(*req)), and a blocking receive
 * of exactly n floats from peer under tag. hyp_coll_bytes_sent counts the bytes really sent (4n
 * per send), hyp_coll_calls and hyp_coll_steps one each per send. EFAIL on a single rank (there is
 * no peer) or for a peer outside the communicator. */
int hyp_coll_isend_f32(hyp_coll *c, const float *buf, size_t n, int peer, int tag, int *req, hyp_err *e);
int hyp_coll_recv_f32(hyp_coll *c, float *buf, size_t n, int peer, int tag, hyp_err *e);
/* In place: buf[world*count] is summed over ranks and acc[count] += this rank's block of the sum
 * (buf is scratch afterwards). ZeRO-3 uses it to fold a layer's gradients into the own shard. */
int hyp_coll_reduce_scatter_add_f32(hyp_coll *c, float *buf, float *acc, size_t count, hyp_err *e);
/* In place: buf holds the arena range [start, start + len) of a flat array sharded in `shard`-float
 * blocks (rank r owns [r*shard, (r+1)*shard); world*shard covers the range). The range is summed
 * over ranks and acc[shard] += this rank's part of the sum, at acc[max(start, rank*shard) -
 * rank*shard] (buf is scratch afterwards). ZeRO-2 folds one layer's gradients into the own flat
 * shard with it, as soon as the layer's backward is done (MPI_Reduce_scatter, uneven counts). */
int hyp_coll_reduce_scatter_range_add_f32(hyp_coll *c, float *buf, int64_t start, int64_t len, int64_t shard,
                                          float *acc, hyp_err *e);
/* In place at root: buf[n] of rank root = sum over ranks of every rank's buf[n] (the other ranks'
 * buf is unchanged). */
int hyp_coll_reduce_f32(hyp_coll *c, float *buf, size_t n, int root, hyp_err *e);
/* recv[world*bytes] = concatenation of every rank's send[bytes] (any plain data). */
int hyp_coll_allgather_bytes(hyp_coll *c, const void *send, void *recv, size_t bytes, hyp_err *e);
int hyp_coll_broadcast(hyp_coll *c, void *buf, size_t bytes, int root, hyp_err *e);
int hyp_coll_barrier(hyp_coll *c, hyp_err *e);
/* v2116 ring shift: send n floats to rank (rank + 1) % world and receive n floats from rank
 * (rank - 1 + world) % world into recv (send and recv must not overlap); one MPI_Sendrecv.
 * Counts n*4 bytes sent, one round and one call; one rank: recv = send, nothing counted. */
int hyp_coll_ring_shift_f32(hyp_coll *c, const float *send, float *recv, size_t n, hyp_err *e);
/* v2116 overlapped ring shift: posts the same transfer as hyp_coll_ring_shift_f32 without waiting
 * (MPI_Irecv from rank - 1, MPI_Isend to rank + 1: two request slots, ids in req[0], req[1]);
 * send must stay unmodified and recv untouched until hyp_coll_ring_wait(req). Counted (n*4 bytes,
 * one round, one call) when posted. One rank or no MPI: recv = send at once, req = {-1, -1}. */
int hyp_coll_ring_ishift_f32(hyp_coll *c, const float *send, float *recv, size_t n, int req[2], hyp_err *e);
int hyp_coll_ring_wait(hyp_coll *c, int req[2], hyp_err *e);
/* The non-blocking operations posted on c and not yet waited for (its busy request slots). */
int hyp_coll_in_flight(const hyp_coll *c);
/* 1 when every rank passes ok != 0 (collective "did everyone succeed?") */
int hyp_coll_all_ok(hyp_coll *c, int ok);

/* Mesh axes. hyp_coll_split: a sub-communicator of c (MPI_Comm_split: ranks with the same color,
 * ordered by key); finalize it before its parent (it frees the communicator, never MPI).
 * hyp_coll_mesh_split: world = dp x tp with tp ranks contiguous (tp group = rank / tp, tp rank =
 * rank % tp), so with mpirun's default by-slot placement a tp group stays inside a node, where
 * its per-layer all-reduces belong; dp groups are strided by tp. EINPUT when tp does not divide
 * the world size. hyp_coll_bytes_sent: bytes this rank sent on that communicator by the ring
 * model (all-reduce 2(p-1)/p*n, reduce-scatter and all-gather (p-1)/p*n of the full n bytes),
 * counted for the f32/f64 all-reduce, reduce-scatter and all-gather calls. */
int hyp_coll_split(hyp_coll *c, int color, int key, hyp_coll **out, hyp_err *e);
int hyp_coll_mesh_split(hyp_coll *c, int tp, hyp_coll **tp_out, hyp_coll **dp_out, hyp_err *e);
uint64_t hyp_coll_bytes_sent(const hyp_coll *c);
/* v2109 all-to-all with per-rank sizes (MPI_Alltoallv of bytes): rank q receives send[sdispl[q],
 * + scount[q]) into its recv[rdispl[me], + rcount[me]); every size in bytes, each < 2^31. The
 * bytes this rank sends to the others (its own block is a local copy) are counted in
 * hyp_coll_bytes_sent as they are, one round and one call. One rank: the own block is copied. */
int hyp_coll_alltoallv(hyp_coll *c, const void *send, const size_t *scount, const size_t *sdispl, void *recv,
                       const size_t *rcount, const size_t *rdispl, hyp_err *e);
/* The collectives hyp_coll_bytes_sent counted on that communicator (each one a round of
 * communication, whatever its size). */
uint64_t hyp_coll_calls(const hyp_coll *c);

/* v2171 all-reduce algorithm of a communicator, for its f32 sum all-reduces
 * (hyp_coll_allreduce_f32: the data-parallel gradient reduction). HYP_AR_MPI (the default) is
 * MPI_Allreduce, MPI's own choice; the others are written on MPI point-to-point in coll_algo.c,
 * each summing in a fixed order stated there: ring (reduce-scatter + all-gather, 2(p-1) rounds,
 * 2(p-1)/p·n sent per rank), tree (binomial reduce to rank 0 + binomial broadcast), recursive
 * halving-doubling (Rabenseifner, the ranks above a power of two folded in pairwise), hierarchical
 * (binomial reduce within a node, ring among the nodes' first ranks, binomial broadcast within a
 * node). node_size (hierarchical): ranks per node, the ranks of node g being g*node_size onwards;
 * 0 = the ranks MPI finds sharing this node (MPI_COMM_TYPE_SHARED). With an algorithm set,
 * hyp_coll_bytes_sent counts the bytes this rank really sent in those all-reduces, and
 * hyp_coll_steps the rounds it took part in (a round: one send, one receive or one send-receive
 * pair); for MPI's own collectives both stay the ring model (all-reduce 2(p-1) rounds,
 * reduce-scatter and all-gather p-1). EINPUT for an unknown name or a negative node size. */
enum { HYP_AR_MPI = 0, HYP_AR_RING, HYP_AR_TREE, HYP_AR_HALVING_DOUBLING, HYP_AR_HIERARCHICAL };
int hyp_coll_allreduce_algo_parse(const char *name, int *algo, hyp_err *e); /* "auto" = HYP_AR_MPI */
const char *hyp_coll_allreduce_algo_name(int algo);
int hyp_coll_set_allreduce(hyp_coll *c, int algo, int node_size, hyp_err *e);
int hyp_coll_allreduce_algo(const hyp_coll *c);
uint64_t hyp_coll_steps(const hyp_coll *c);

/* v2168: a duplicate of c (MPI_Comm_dup semantics through MPI_Comm_split: same ranks, its own
 * context, so collectives on it never match those on c), with c's all-reduce algorithm and link
 * model and its own counters; finalize it before c. A communication helper thread owns one, so
 * concurrent collectives of several threads never share a communicator (MPI_THREAD_MULTIPLE). */
int hyp_coll_dup(hyp_coll *c, hyp_coll **out, hyp_err *e);
/* Moves from's counters (bytes sent, rounds, calls) into into's and zeroes from's: the calling
 * thread must be the only one using either. */
void hyp_coll_take_counts(hyp_coll *into, hyp_coll *from);
/* The emulated link of HYP_COLL_LINK_GBPS (Gbit/s, read at hyp_coll_init and copied to
 * duplicates; a test knob that makes communication slow enough to see overlap on one machine,
 * not a model of a network): every f32 sum all-reduce (hyp_coll_allreduce_f32) returns no
 * earlier than its counted bytes (hyp_coll_bytes_sent) / the link's bytes per second after it
 * started, the rest slept. hyp_coll_link_delay is that wait for a transfer of `bytes` started at
 * t0_s (CLOCK_MONOTONIC seconds), for a caller completing a non-blocking all-reduce itself;
 * nothing without the variable or on one rank. */
void hyp_coll_link_delay(const hyp_coll *c, uint64_t bytes, double t0_s);

#endif
