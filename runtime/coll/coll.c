/* coll.c — collectives over MPI or a single rank (see coll.h). */
#include "coll.h"
#include "coll_algo.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#ifdef HYP_HAVE_MPI
#include <mpi.h>
#endif

struct hyp_coll {
    int rank, world, mpi;
    int local_rank, local_world;
    int busy[HYP_COLL_MAX_REQS];
    int sub;           /* made by hyp_coll_split: finalize frees the communicator, not MPI */
    uint64_t bytes;    /* ring-model bytes this rank sent (hyp_coll_bytes_sent) */
    uint64_t steps;    /* and rounds (hyp_coll_steps) */
    uint64_t calls;    /* the collectives those bytes went in (hyp_coll_calls) */
    int algo, node_size; /* v2171 f32 all-reduce algorithm (HYP_AR_*) and ranks per node */
    double link_Bps;   /* HYP_COLL_LINK_GBPS: the emulated link's bytes/s (0: none) */
#ifdef HYP_HAVE_MPI
    MPI_Comm comm;     /* MPI_COMM_WORLD, or an axis of the mesh */
    MPI_Comm algo_comm; /* a duplicate of comm for coll_algo.c's messages (algo != HYP_AR_MPI) */
    MPI_Request reqs[HYP_COLL_MAX_REQS];
#endif
};

/* Ring-model bytes one rank sends: all-reduce 2(p-1)/p*n, reduce-scatter/all-gather (p-1)/p*n
 * for n bytes of full buffer (Patarasuk & Yuan; NCCL's busBw). */
static void count_bytes(hyp_coll *c, double factor, size_t nbytes) {
    if (c->world > 1) c->bytes += (uint64_t)(factor * (double)(c->world - 1) / c->world * (double)nbytes + 0.5), c->calls++;
    if (c->world > 1) c->steps += (uint64_t)(factor + 0.5) * (uint64_t)(c->world - 1);
}

static int g_local_rank = -1; /* hyp_coll_process_local_rank */

static double mono_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* The emulated link (HYP_COLL_LINK_GBPS): an f32 all-reduce that sent `bytes` and started at t0
 * returns no earlier than bytes / link_Bps after t0 (the rest of that time slept). */
void hyp_coll_link_delay(const hyp_coll *c, uint64_t bytes, double t0) {
    if (c->link_Bps <= 0 || c->world < 2) return;
    double left = (double)bytes / c->link_Bps - (mono_s() - t0);
    if (left <= 0) return;
    struct timespec ts = {(time_t)left, (long)((left - (double)(time_t)left) * 1e9)};
    while (nanosleep(&ts, &ts) == -1 && errno == EINTR) {}
}

static int launched_by_mpi(void) {
    return getenv("OMPI_COMM_WORLD_SIZE") || getenv("PMI_SIZE") || getenv("PMIX_RANK") ||
           getenv("SLURM_STEP_NUM_TASKS");
}

#ifdef HYP_HAVE_MPI
static int mpi_fail(hyp_err *e, const char *what, int rc) {
    char s[MPI_MAX_ERROR_STRING];
    int n = 0;
    MPI_Error_string(rc, s, &n);
    return hyp_fail(e, HYP_EFAIL, "MPI %s failed: %s — check the mpirun launch and the network", what, s);
}
#endif

int hyp_coll_init(int *argc, char ***argv, hyp_coll **out, hyp_err *e) {
    hyp_coll *c = calloc(1, sizeof *c);
    if (!c) return hyp_fail(e, HYP_EFAIL, "out of memory");
    c->world = 1, c->local_world = 1;
#ifdef HYP_HAVE_MPI
    if (launched_by_mpi()) {
        /* MPI_THREAD_MULTIPLE: the NCCL stand-in (tests/standins) runs collectives on stream threads */
        int provided = 0, rc = MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided);
        if (rc != MPI_SUCCESS) {
            free(c);
            return mpi_fail(e, "init", rc);
        }
        MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
        MPI_Comm_rank(MPI_COMM_WORLD, &c->rank);
        MPI_Comm_size(MPI_COMM_WORLD, &c->world);
        c->mpi = 1;
        c->comm = MPI_COMM_WORLD;
        MPI_Comm node;
        if ((rc = MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, c->rank, MPI_INFO_NULL, &node)) != MPI_SUCCESS) {
            MPI_Finalize();
            free(c);
            return mpi_fail(e, "Comm_split_type(SHARED) (the node-local rank)", rc);
        }
        MPI_Comm_rank(node, &c->local_rank);
        MPI_Comm_size(node, &c->local_world);
        MPI_Comm_free(&node);
    }
#else
    (void)argc, (void)argv;
    if (launched_by_mpi() && getenv("OMPI_COMM_WORLD_SIZE") && atoi(getenv("OMPI_COMM_WORLD_SIZE")) > 1) {
        free(c);
        return hyp_fail(e, HYP_EINPUT, "started by mpirun but this trainer was built without MPI — install libopenmpi-dev and rebuild");
    }
#endif
    const char *lk = getenv("HYP_COLL_LINK_GBPS");
    if (lk && *lk) {
        char *end = NULL;
        double g = strtod(lk, &end);
        if (!(g > 0) || *end) {
            hyp_coll_finalize(c);
            return hyp_fail(e, HYP_EINPUT, "HYP_COLL_LINK_GBPS=%s: not a positive number — give the emulated link's Gbit/s (e.g. 1), or unset it", lk);
        }
        c->link_Bps = g * 1e9 / 8;
    }
    g_local_rank = c->local_rank;
    *out = c;
    return HYP_OK;
}

int hyp_coll_local_rank(const hyp_coll *c) { return c->local_rank; }
int hyp_coll_local_world(const hyp_coll *c) { return c->local_world; }
int hyp_coll_process_local_rank(void) { return g_local_rank; }

void hyp_coll_finalize(hyp_coll *c) {
    if (!c) return;
#ifdef HYP_HAVE_MPI
    if (c->mpi && c->algo != HYP_AR_MPI) MPI_Comm_free(&c->algo_comm);
    if (c->mpi && c->sub) MPI_Comm_free(&c->comm);
    else if (c->mpi) MPI_Finalize();
#endif
    free(c);
}

int hyp_coll_rank(const hyp_coll *c) { return c->rank; }
int hyp_coll_world(const hyp_coll *c) { return c->world; }
const char *hyp_coll_backend(const hyp_coll *c) { return c->mpi ? "mpi" : "single"; }

/* MPI counts are int: move large buffers in chunks. */
#define CHUNK ((size_t)1 << 28)

int hyp_coll_allreduce_f32(hyp_coll *c, float *buf, size_t n, hyp_err *e) {
    double t0 = c->link_Bps > 0 ? mono_s() : 0;
    uint64_t b0 = c->bytes;
#ifdef HYP_HAVE_MPI
    if (c->mpi && c->algo != HYP_AR_MPI) { /* v2171: coll_algo.c, counting what it really sends */
        coll_tally t = {0, 0};
        int k = c->node_size ? c->node_size : c->local_world;
        int rc = coll_algo_allreduce_f32(c->algo, c->algo_comm, c->rank, c->world, k, buf, n, &t, e);
        c->bytes += t.bytes, c->steps += t.steps, c->calls += c->world > 1;
        if (!rc) hyp_coll_link_delay(c, c->bytes - b0, t0);
        return rc;
    }
#endif
    count_bytes(c, 2.0, n * sizeof(float));
#ifdef HYP_HAVE_MPI
    if (c->mpi)
        for (size_t off = 0; off < n; off += CHUNK) {
            int cnt = (int)(n - off < CHUNK ? n - off : CHUNK);
            int rc = MPI_Allreduce(MPI_IN_PLACE, buf + off, cnt, MPI_FLOAT, MPI_SUM, c->comm);
            if (rc != MPI_SUCCESS) return mpi_fail(e, "all-reduce", rc);
        }
#else
    (void)c, (void)buf, (void)n, (void)e;
#endif
    hyp_coll_link_delay(c, c->bytes - b0, t0);
    return HYP_OK;
}

int hyp_coll_allreduce_f64(hyp_coll *c, double *buf, size_t n, hyp_err *e) {
    count_bytes(c, 2.0, n * sizeof(double));
#ifdef HYP_HAVE_MPI
    if (c->mpi) {
        int rc = MPI_Allreduce(MPI_IN_PLACE, buf, (int)n, MPI_DOUBLE, MPI_SUM, c->comm);
        if (rc != MPI_SUCCESS) return mpi_fail(e, "all-reduce", rc);
    }
#else
    (void)c, (void)buf, (void)n, (void)e;
#endif
    return HYP_OK;
}

int hyp_coll_allreduce_max_f32(hyp_coll *c, float *buf, size_t n, hyp_err *e) {
#ifdef HYP_HAVE_MPI
    if (c->mpi) {
        int rc = MPI_Allreduce(MPI_IN_PLACE, buf, (int)n, MPI_FLOAT, MPI_MAX, c->comm);
        if (rc != MPI_SUCCESS) return mpi_fail(e, "all-reduce(max)", rc);
    }
#else
    (void)c, (void)buf, (void)n, (void)e;
#endif
    return HYP_OK;
}

int hyp_coll_reduce_scatter_f32(hyp_coll *c, const float *send, float *recv, size_t count, hyp_err *e) {
    count_bytes(c, 1.0, count * (size_t)c->world * sizeof(float));
#ifdef HYP_HAVE_MPI
    if (c->mpi) {
        if (count > (size_t)1 << 30) return hyp_fail(e, HYP_EFAIL, "reduce-scatter shard too large");
        int rc = MPI_Reduce_scatter_block(send, recv, (int)count, MPI_FLOAT, MPI_SUM, c->comm);
        if (rc != MPI_SUCCESS) return mpi_fail(e, "reduce-scatter", rc);
        return HYP_OK;
    }
#else
    (void)e;
#endif
    if (recv != send) memcpy(recv, send + (size_t)c->rank * count, count * sizeof(float));
    return HYP_OK;
}

int hyp_coll_allgather_f32(hyp_coll *c, const float *send, float *recv, size_t count, hyp_err *e) {
    count_bytes(c, 1.0, count * (size_t)c->world * sizeof(float));
#ifdef HYP_HAVE_MPI
    if (c->mpi) {
        if (count > (size_t)1 << 30) return hyp_fail(e, HYP_EFAIL, "all-gather shard too large");
        const void *src = send == recv + (size_t)c->rank * count ? MPI_IN_PLACE : (const void *)send;
        int rc = MPI_Allgather(src, (int)count, MPI_FLOAT, recv, (int)count, MPI_FLOAT, c->comm);
        if (rc != MPI_SUCCESS) return mpi_fail(e, "all-gather", rc);
        return HYP_OK;
    }
#else
    (void)e;
#endif
    if (recv + (size_t)c->rank * count != send) memcpy(recv + (size_t)c->rank * count, send, count * sizeof(float));
    return HYP_OK;
}

int hyp_coll_iallgather_f32(hyp_coll *c, const float *send, float *recv, size_t count, int *req, hyp_err *e) {
    int r = 0;
    while (r < HYP_COLL_MAX_REQS && c->busy[r]) r++;
    if (r == HYP_COLL_MAX_REQS) return hyp_fail(e, HYP_EFAIL, "too many non-blocking collectives in flight");
#ifdef HYP_HAVE_MPI
    if (c->mpi) {
        if (count > (size_t)1 << 30) return hyp_fail(e, HYP_EFAIL, "all-gather shard too large");
        int rc = MPI_Iallgather(send, (int)count, MPI_FLOAT, recv, (int)count, MPI_FLOAT, c->comm, &c->reqs[r]);
        if (rc != MPI_SUCCESS) return mpi_fail(e, "all-gather (non-blocking)", rc);
        c->busy[r] = 1;
        *req = r;
        return HYP_OK;
    }
#endif
    if (recv + (size_t)c->rank * count != send) memcpy(recv + (size_t)c->rank * count, send, count * sizeof(float));
    c->busy[r] = 1;
    *req = r;
    return HYP_OK;
}

int hyp_coll_iallreduce_f32(hyp_coll *c, float *buf, size_t n, int *req, hyp_err *e) {
    int r = 0;
    while (r < HYP_COLL_MAX_REQS && c->busy[r]) r++;
    if (r == HYP_COLL_MAX_REQS) return hyp_fail(e, HYP_EFAIL, "too many non-blocking collectives in flight");
#ifdef HYP_HAVE_MPI
    if (c->mpi && c->algo != HYP_AR_MPI)
        return hyp_fail(e, HYP_EINPUT, "non-blocking all-reduce: the v2171 algorithm %s has no non-blocking form — use MPI's own (auto)", hyp_coll_allreduce_algo_name(c->algo));
    if (c->mpi) {
        if (n > (size_t)0x7fffffff) return hyp_fail(e, HYP_EFAIL, "non-blocking all-reduce of %zu floats: above MPI's int count", n);
        int rc = MPI_Iallreduce(MPI_IN_PLACE, buf, (int)n, MPI_FLOAT, MPI_SUM, c->comm, &c->reqs[r]);
        if (rc != MPI_SUCCESS) return mpi_fail(e, "all-reduce (non-blocking)", rc);
    }
#else
    (void)buf, (void)n, (void)e;
#endif
    count_bytes(c, 2.0, n * sizeof(float));
    c->busy[r] = 1;
    *req = r;
    return HYP_OK;
}

int hyp_coll_test(hyp_coll *c, int req, int *done, hyp_err *e) {
    *done = 0;
    if (req < 0 || req >= HYP_COLL_MAX_REQS || !c->busy[req]) return hyp_fail(e, HYP_EFAIL, "test of an unknown collective request");
#ifdef HYP_HAVE_MPI
    if (c->mpi) {
        int flag = 0, rc = MPI_Test(&c->reqs[req], &flag, MPI_STATUS_IGNORE);
        if (rc != MPI_SUCCESS) return mpi_fail(e, "test", rc);
        if (!flag) return HYP_OK;
    }
#else
    (void)e;
#endif
    c->busy[req] = 0;
    *done = 1;
    return HYP_OK;
}

int hyp_coll_mpi_threads(const hyp_coll *c) {
#ifdef HYP_HAVE_MPI
    int level = 0;
    return c->mpi && MPI_Query_thread(&level) == MPI_SUCCESS && level == MPI_THREAD_MULTIPLE;
#else
    (void)c;
    return 0;
#endif
}

int hyp_coll_wait(hyp_coll *c, int req, hyp_err *e) {
    if (req < 0 || req >= HYP_COLL_MAX_REQS || !c->busy[req]) return hyp_fail(e, HYP_EFAIL, "wait on an unknown collective request");
    c->busy[req] = 0;
#ifdef HYP_HAVE_MPI
    if (c->mpi) {
        int rc = MPI_Wait(&c->reqs[req], MPI_STATUS_IGNORE);
        if (rc != MPI_SUCCESS) return mpi_fail(e, "wait", rc);
    }
#else
    (void)e;
#endif
    return HYP_OK;
}

int hyp_coll_isend_f32(hyp_coll *c, const float *buf, size_t n, int peer, int tag, int *req, hyp_err *e) {
    int r = 0;
    while (r < HYP_COLL_MAX_REQS && c->busy[r]) r++;
    if (r == HYP_COLL_MAX_REQS) return hyp_fail(e, HYP_EFAIL, "too many non-blocking sends and collectives in flight");
    if (peer < 0 || peer >= c->world || peer == c->rank || n > (size_t)1 << 30)
        return hyp_fail(e, HYP_EFAIL, "send of %zu floats to rank %d of a communicator of %d (rank %d): no such peer", n, peer, c->world, c->rank);
#ifdef HYP_HAVE_MPI
    if (c->mpi) {
        int rc = MPI_Isend(buf, (int)n, MPI_FLOAT, peer, tag, c->comm, &c->reqs[r]);
        if (rc != MPI_SUCCESS) return mpi_fail(e, "send (non-blocking)", rc);
        c->busy[r] = 1;
        *req = r;
        c->bytes += n * sizeof(float), c->calls++, c->steps++;
        return HYP_OK;
    }
#else
    (void)buf, (void)tag, (void)req;
#endif
    return hyp_fail(e, HYP_EFAIL, "point-to-point send without MPI");
}

int hyp_coll_recv_f32(hyp_coll *c, float *buf, size_t n, int peer, int tag, hyp_err *e) {
    if (peer < 0 || peer >= c->world || peer == c->rank || n > (size_t)1 << 30)
        return hyp_fail(e, HYP_EFAIL, "receive of %zu floats from rank %d of a communicator of %d (rank %d): no such peer", n, peer, c->world, c->rank);
#ifdef HYP_HAVE_MPI
    if (c->mpi) {
        MPI_Status st;
        int rc = MPI_Recv(buf, (int)n, MPI_FLOAT, peer, tag, c->comm, &st), got = 0;
        if (rc != MPI_SUCCESS) return mpi_fail(e, "receive", rc);
        MPI_Get_count(&st, MPI_FLOAT, &got);
        if ((size_t)got != n) return hyp_fail(e, HYP_EFAIL, "receive from rank %d: %d floats arrived, %zu expected", peer, got, n);
        return HYP_OK;
    }
#else
    (void)buf, (void)tag;
#endif
    return hyp_fail(e, HYP_EFAIL, "point-to-point receive without MPI");
}

int hyp_coll_reduce_scatter_add_f32(hyp_coll *c, float *buf, float *acc, size_t count, hyp_err *e) {
    const float *mine = buf + (size_t)c->rank * count;
#ifdef HYP_HAVE_MPI
    if (c->mpi) {
        if (count > (size_t)1 << 30) return hyp_fail(e, HYP_EFAIL, "reduce-scatter shard too large");
        int rc = MPI_Reduce_scatter_block(MPI_IN_PLACE, buf, (int)count, MPI_FLOAT, MPI_SUM, c->comm);
        if (rc != MPI_SUCCESS) return mpi_fail(e, "reduce-scatter", rc);
        mine = buf; /* in place: the own block lands at the front */
    }
#else
    (void)e;
#endif
    for (size_t i = 0; i < count; i++) acc[i] += mine[i];
    return HYP_OK;
}

int hyp_coll_reduce_f32(hyp_coll *c, float *buf, size_t n, int root, hyp_err *e) {
    if (root < 0 || root >= c->world) return hyp_fail(e, HYP_EINPUT, "reduce: root %d outside 0..%d", root, c->world - 1);
#ifdef HYP_HAVE_MPI
    if (c->mpi) {
        for (size_t off = 0; off < n; off += CHUNK) {
            size_t k = n - off < CHUNK ? n - off : CHUNK;
            int rc = c->rank == root ? MPI_Reduce(MPI_IN_PLACE, buf + off, (int)k, MPI_FLOAT, MPI_SUM, root, c->comm)
                                     : MPI_Reduce(buf + off, NULL, (int)k, MPI_FLOAT, MPI_SUM, root, c->comm);
            if (rc != MPI_SUCCESS) return mpi_fail(e, "reduce", rc);
        }
    }
#else
    (void)buf, (void)n;
#endif
    return HYP_OK;
}

int hyp_coll_reduce_scatter_range_add_f32(hyp_coll *c, float *buf, int64_t start, int64_t len, int64_t shard,
                                          float *acc, hyp_err *e) {
    int64_t lo = (int64_t)c->rank * shard, a = start > lo ? start : lo, b = start + len < lo + shard ? start + len : lo + shard;
    const float *mine = buf + (a - start);
#ifdef HYP_HAVE_MPI
    if (c->mpi) {
        if (len > (int64_t)1 << 30) return hyp_fail(e, HYP_EFAIL, "reduce-scatter range too large");
        int *counts = malloc(sizeof(int) * (size_t)c->world);
        if (!counts) return hyp_fail(e, HYP_EFAIL, "out of memory");
        for (int r = 0; r < c->world; r++) {
            int64_t rl = (int64_t)r * shard, ra = start > rl ? start : rl, rb = start + len < rl + shard ? start + len : rl + shard;
            counts[r] = rb > ra ? (int)(rb - ra) : 0;
        }
        int rc = MPI_Reduce_scatter(MPI_IN_PLACE, buf, counts, MPI_FLOAT, MPI_SUM, c->comm);
        free(counts);
        if (rc != MPI_SUCCESS) return mpi_fail(e, "reduce-scatter", rc);
        mine = buf; /* in place: the own part lands at the front */
    }
#else
    (void)e;
#endif
    float *dst = acc + (a - lo);
    for (int64_t i = 0; i < b - a; i++) dst[i] += mine[i];
    return HYP_OK;
}

int hyp_coll_allgather_bytes(hyp_coll *c, const void *send, void *recv, size_t bytes, hyp_err *e) {
#ifdef HYP_HAVE_MPI
    if (c->mpi) {
        if (bytes > (size_t)1 << 30) return hyp_fail(e, HYP_EFAIL, "all-gather block too large");
        int rc = MPI_Allgather(send, (int)bytes, MPI_BYTE, recv, (int)bytes, MPI_BYTE, c->comm);
        if (rc != MPI_SUCCESS) return mpi_fail(e, "all-gather", rc);
        return HYP_OK;
    }
#else
    (void)e;
#endif
    memcpy((char *)recv + (size_t)c->rank * bytes, send, bytes);
    return HYP_OK;
}

int hyp_coll_ring_shift_f32(hyp_coll *c, const float *send, float *recv, size_t n, hyp_err *e) {
#ifdef HYP_HAVE_MPI
    if (c->mpi && c->world > 1) {
        int next = (c->rank + 1) % c->world, prev = (c->rank - 1 + c->world) % c->world;
        for (size_t off = 0; off < n; off += CHUNK) {
            size_t k = n - off < CHUNK ? n - off : CHUNK;
            int rc = MPI_Sendrecv(send + off, (int)k, MPI_FLOAT, next, 0x2116, recv + off, (int)k, MPI_FLOAT, prev,
                                  0x2116, c->comm, MPI_STATUS_IGNORE);
            if (rc != MPI_SUCCESS) return mpi_fail(e, "ring send-receive", rc);
        }
        c->bytes += (uint64_t)n * sizeof(float), c->steps++, c->calls++;
        return HYP_OK;
    }
#else
    (void)e;
#endif
    if (n) memcpy(recv, send, n * sizeof(float));
    return HYP_OK;
}

int hyp_coll_ring_ishift_f32(hyp_coll *c, const float *send, float *recv, size_t n, int req[2], hyp_err *e) {
    req[0] = req[1] = -1;
#ifdef HYP_HAVE_MPI
    if (c->mpi && c->world > 1) {
        int a = 0, b;
        while (a < HYP_COLL_MAX_REQS && c->busy[a]) a++;
        b = a + 1;
        while (b < HYP_COLL_MAX_REQS && c->busy[b]) b++;
        if (b >= HYP_COLL_MAX_REQS) return hyp_fail(e, HYP_EFAIL, "ring shift: too many non-blocking operations in flight");
        if (n > (size_t)0x7fffffff) return hyp_fail(e, HYP_EFAIL, "ring shift of %zu floats: above MPI's int count", n);
        int next = (c->rank + 1) % c->world, prev = (c->rank - 1 + c->world) % c->world;
        int rc = MPI_Irecv(recv, (int)n, MPI_FLOAT, prev, 0x2116, c->comm, &c->reqs[a]);
        if (rc != MPI_SUCCESS) return mpi_fail(e, "ring receive (non-blocking)", rc);
        c->busy[a] = 1, req[0] = a;
        rc = MPI_Isend(send, (int)n, MPI_FLOAT, next, 0x2116, c->comm, &c->reqs[b]);
        if (rc != MPI_SUCCESS) return mpi_fail(e, "ring send (non-blocking)", rc);
        c->busy[b] = 1, req[1] = b;
        c->bytes += (uint64_t)n * sizeof(float), c->steps++, c->calls++;
        return HYP_OK;
    }
#else
    (void)e;
#endif
    if (n) memcpy(recv, send, n * sizeof(float));
    return HYP_OK;
}

int hyp_coll_ring_wait(hyp_coll *c, int req[2], hyp_err *e) {
    int rc = HYP_OK;
    for (int i = 0; i < 2; i++)
        if (req[i] >= 0) {
            int r = hyp_coll_wait(c, req[i], e);
            rc = rc ? rc : r;
            req[i] = -1;
        }
    return rc;
}

int hyp_coll_in_flight(const hyp_coll *c) {
    int n = 0;
    for (int i = 0; i < HYP_COLL_MAX_REQS; i++) n += c->busy[i] != 0;
    return n;
}

int hyp_coll_broadcast(hyp_coll *c, void *buf, size_t bytes, int root, hyp_err *e) {
#ifdef HYP_HAVE_MPI
    if (c->mpi) {
        int rc = MPI_Bcast(buf, (int)bytes, MPI_BYTE, root, c->comm);
        if (rc != MPI_SUCCESS) return mpi_fail(e, "broadcast", rc);
    }
#else
    (void)c, (void)buf, (void)bytes, (void)root, (void)e;
#endif
    return HYP_OK;
}

int hyp_coll_barrier(hyp_coll *c, hyp_err *e) {
#ifdef HYP_HAVE_MPI
    if (c->mpi) {
        int rc = MPI_Barrier(c->comm);
        if (rc != MPI_SUCCESS) return mpi_fail(e, "barrier", rc);
    }
#else
    (void)c, (void)e;
#endif
    return HYP_OK;
}

int hyp_coll_all_ok(hyp_coll *c, int ok) {
#ifdef HYP_HAVE_MPI
    if (c->mpi) {
        int mine = ok ? 1 : 0, all = 0;
        if (MPI_Allreduce(&mine, &all, 1, MPI_INT, MPI_MIN, c->comm) != MPI_SUCCESS) return 0;
        return all;
    }
#else
    (void)c;
#endif
    return ok;
}

int hyp_coll_split(hyp_coll *c, int color, int key, hyp_coll **out, hyp_err *e) {
    hyp_coll *s = calloc(1, sizeof *s);
    if (!s) return hyp_fail(e, HYP_EFAIL, "out of memory");
    s->world = 1, s->local_rank = c->local_rank, s->local_world = c->local_world, s->sub = 1;
#ifdef HYP_HAVE_MPI
    if (c->mpi) {
        int rc = MPI_Comm_split(c->comm, color, key, &s->comm);
        if (rc != MPI_SUCCESS) {
            free(s);
            return mpi_fail(e, "Comm_split (a mesh axis)", rc);
        }
        MPI_Comm_set_errhandler(s->comm, MPI_ERRORS_RETURN);
        MPI_Comm_rank(s->comm, &s->rank);
        MPI_Comm_size(s->comm, &s->world);
        s->mpi = 1;
    }
#else
    (void)color, (void)key;
#endif
    *out = s;
    return HYP_OK;
}

int hyp_coll_mesh_split(hyp_coll *c, int tp, hyp_coll **tp_out, hyp_coll **dp_out, hyp_err *e) {
    if (tp < 1 || c->world % tp != 0)
        return hyp_fail(e, HYP_EINPUT, "mesh: tp=%d does not divide the world size %d — start mpirun with -np a multiple of tp, or change parallel.tp", tp, c->world);
    *tp_out = *dp_out = NULL;
    if (hyp_coll_split(c, c->rank / tp, c->rank % tp, tp_out, e)) return HYP_EFAIL;
    if (hyp_coll_split(c, c->rank % tp, c->rank / tp, dp_out, e)) {
        hyp_coll_finalize(*tp_out);
        *tp_out = NULL;
        return HYP_EFAIL;
    }
    return HYP_OK;
}

uint64_t hyp_coll_bytes_sent(const hyp_coll *c) { return c->bytes; }

int hyp_coll_alltoallv(hyp_coll *c, const void *send, const size_t *scount, const size_t *sdispl, void *recv,
                       const size_t *rcount, const size_t *rdispl, hyp_err *e) {
    uint64_t out = 0;
    for (int q = 0; q < c->world; q++) {
        if (scount[q] > (size_t)1 << 30 || rcount[q] > (size_t)1 << 30 || sdispl[q] > (size_t)1 << 30 || rdispl[q] > (size_t)1 << 30)
            return hyp_fail(e, HYP_EFAIL, "all-to-all block too large");
        if (q != c->rank) out += scount[q];
    }
    if (c->world > 1) c->bytes += out, c->steps++, c->calls++;
#ifdef HYP_HAVE_MPI
    if (c->mpi) {
        int *v = malloc(sizeof(int) * 4 * (size_t)c->world);
        if (!v) return hyp_fail(e, HYP_EFAIL, "out of memory");
        for (int q = 0; q < c->world; q++)
            v[q] = (int)scount[q], v[c->world + q] = (int)sdispl[q], v[2 * c->world + q] = (int)rcount[q], v[3 * c->world + q] = (int)rdispl[q];
        int rc = MPI_Alltoallv(send, v, v + c->world, MPI_BYTE, recv, v + 2 * c->world, v + 3 * c->world, MPI_BYTE, c->comm);
        free(v);
        if (rc != MPI_SUCCESS) return mpi_fail(e, "all-to-all", rc);
        return HYP_OK;
    }
#endif
    if (scount[c->rank] != rcount[c->rank]) return hyp_fail(e, HYP_EFAIL, "all-to-all: own block of %zu bytes sent, %zu expected", scount[c->rank], rcount[c->rank]);
    if (scount[c->rank]) memcpy((char *)recv + rdispl[c->rank], (const char *)send + sdispl[c->rank], scount[c->rank]);
    return HYP_OK;
}

uint64_t hyp_coll_steps(const hyp_coll *c) { return c->steps; }

static const char *const algo_names[] = {"auto", "ring", "tree", "halving_doubling", "hierarchical"};

const char *hyp_coll_allreduce_algo_name(int algo) {
    return algo >= 0 && algo < (int)(sizeof algo_names / sizeof *algo_names) ? algo_names[algo] : "?";
}

int hyp_coll_allreduce_algo_parse(const char *name, int *algo, hyp_err *e) {
    for (int a = 0; a < (int)(sizeof algo_names / sizeof *algo_names); a++)
        if (!strcmp(name, algo_names[a])) {
            *algo = a;
            return HYP_OK;
        }
    return hyp_fail(e, HYP_EINPUT, "all-reduce algorithm '%s' is none of auto, ring, tree, halving_doubling, hierarchical — pick one (v2171 all_reduce.algorithm)", name);
}

int hyp_coll_allreduce_algo(const hyp_coll *c) { return c->algo; }

int hyp_coll_set_allreduce(hyp_coll *c, int algo, int node_size, hyp_err *e) {
    if (algo < HYP_AR_MPI || algo > HYP_AR_HIERARCHICAL)
        return hyp_fail(e, HYP_EINPUT, "all-reduce algorithm %d unknown — use one of HYP_AR_*", algo);
    if (node_size < 0)
        return hyp_fail(e, HYP_EINPUT, "all-reduce: node_size %d is negative — give the ranks per node, or 0 for the ranks sharing this node", node_size);
#ifdef HYP_HAVE_MPI
    if (c->mpi && c->algo != HYP_AR_MPI && algo == HYP_AR_MPI) MPI_Comm_free(&c->algo_comm);
    if (c->mpi && c->algo == HYP_AR_MPI && algo != HYP_AR_MPI) {
        /* its own context: point-to-point messages of others on comm can never match ours */
        int rc = MPI_Comm_dup(c->comm, &c->algo_comm);
        if (rc != MPI_SUCCESS) return mpi_fail(e, "Comm_dup (the all-reduce algorithm's channel)", rc);
    }
#endif
    c->algo = algo, c->node_size = node_size;
    return HYP_OK;
}

uint64_t hyp_coll_calls(const hyp_coll *c) { return c->calls; }

int hyp_coll_dup(hyp_coll *c, hyp_coll **out, hyp_err *e) {
    int rc = hyp_coll_split(c, 0, c->rank, out, e);
    if (rc) return rc;
    (*out)->link_Bps = c->link_Bps;
    if (c->algo != HYP_AR_MPI && (rc = hyp_coll_set_allreduce(*out, c->algo, c->node_size, e))) {
        hyp_coll_finalize(*out);
        *out = NULL;
    }
    return rc;
}

void hyp_coll_take_counts(hyp_coll *into, hyp_coll *from) {
    into->bytes += from->bytes, into->steps += from->steps, into->calls += from->calls;
    from->bytes = from->steps = from->calls = 0;
}
