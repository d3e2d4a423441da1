/* nccl_standin.c — the NCCL stand-in, libnccl.so.2 (docs/cuda-standins.md): the functions
 * runtime/device/dev_cuda.c calls, over MPI (each rank is an MPI process; MPI must be initialized
 * with MPI_THREAD_MULTIPLE, as runtime/coll does, because collectives run on the driver
 * stand-in's stream workers), on device memory of the driver stand-in.
 *
 * Strict, as NCCL documents (docs.nvidia.com/deeplearning/nccl/user-guide/, sections named per
 * rule): a unique id only from ncclGetUniqueId, ranks in range and distinct GPUs, buffers in
 * device memory, in-place only in the documented form, data types and ops that exist, roots in
 * range, collectives in the same order on every rank (they run in the order enqueued: one
 * sequence per communicator). Injectable asynchronous errors: HYP_STANDIN_NCCL_FAULT=OP:N makes
 * the N-th collective OP (allreduce, reducescatter, allgather, broadcast, reduce; 1-based) on
 * every rank hang as with a dead peer and report ncclRemoteError through ncclCommGetAsyncError
 * until ncclCommAbort. Reductions add in rank order (fp32; bf16 rounded after each add), so
 * results do not depend on timing. It must never accept a call NCCL refuses, nor move data other
 * than the collective defines. Every rank of MPI_COMM_WORLD takes part in ncclCommInitRank (the
 * stand-in splits the world by the id): sub-communicators of the world are not implemented. */
#define _GNU_SOURCE
#include <cuda.h>
#include <mpi.h>
#include <nccl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "standin.h"

#define EXPORT __attribute__((visibility("default")))
#define ID_MAGIC "hypsi-nccl-id"
#define COMM_MAGIC 0x6e63636cu

#define STANDIN_WHO "hyp nccl stand-in: "
typedef ncclResult_t standin_status;
#include "standin_util.h"

struct ncclComm {
    uint32_t magic;
    MPI_Comm mpi;
    int rank, nranks;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    uint64_t issued, ran; /* collectives enqueued / finished: they run in this order */
    ncclResult_t async;   /* the asynchronous error (ncclCommGetAsyncError) */
    int aborted;
    int counts[5];        /* collectives issued per kind (fault injection) */
    int fault_kind, fault_n;
};

enum { K_ALLREDUCE, K_REDUCESCATTER, K_ALLGATHER, K_BROADCAST, K_REDUCE };
static const char *KIND[5] = {"allreduce", "reducescatter", "allgather", "broadcast", "reduce"};

EXPORT const char *ncclGetErrorString(ncclResult_t r) {
    switch (r) {
    case ncclSuccess: return "no error";
    case ncclUnhandledCudaError: return "unhandled cuda error";
    case ncclSystemError: return "unhandled system error";
    case ncclInternalError: return "internal error";
    case ncclInvalidArgument: return "invalid argument";
    case ncclInvalidUsage: return "invalid usage";
    case ncclRemoteError: return "remote process exited or there was a network error";
    case ncclInProgress: return "NCCL operation in progress";
    default: return "unknown result code";
    }
}

/* Rule "unique id": API "ncclGetUniqueId": the id is made once (rank 0) and given to the others;
 * an id not made by ncclGetUniqueId is refused at init. */
EXPORT ncclResult_t ncclGetUniqueId(ncclUniqueId *id) {
    if (!id) return refuse(ncclInvalidArgument, "ncclGetUniqueId: NULL id");
    memset(id, 0, sizeof *id);
    memcpy(id->internal, ID_MAGIC, sizeof ID_MAGIC);
    uint64_t tag = (uint64_t)getpid() << 32 ^ (uint64_t)time(NULL);
    FILE *f = fopen("/dev/urandom", "rb");
    if (f) {
        if (fread(&tag, sizeof tag, 1, f) != 1) tag ^= (uint64_t)clock();
        fclose(f);
    }
    memcpy(id->internal + 32, &tag, sizeof tag);
    return ncclSuccess;
}

static ncclComm_t comm_of(ncclComm_t c) { return c && c->magic == COMM_MAGIC ? c : NULL; }

EXPORT ncclResult_t ncclCommInitRank(ncclComm_t *out, int nranks, ncclUniqueId id, int rank) {
    static const char who[] = "ncclCommInitRank";
    if (!out) return refuse(ncclInvalidArgument, "%s: NULL comm", who);
    *out = NULL;
    if (memcmp(id.internal, ID_MAGIC, sizeof ID_MAGIC))
        return refuse(ncclInvalidArgument, "%s: the unique id was not made by ncclGetUniqueId (broadcast rank 0's id to every rank)", who);
    if (nranks < 1 || rank < 0 || rank >= nranks) return refuse(ncclInvalidArgument, "%s: rank %d of %d", who, rank, nranks);
    int init = 0, level = 0;
    MPI_Initialized(&init);
    if (!init) return refuse(ncclSystemError, "%s: MPI is not initialized (the stand-in runs over MPI: launch with mpirun)", who);
    MPI_Query_thread(&level);
    if (level < MPI_THREAD_MULTIPLE)
        return refuse(ncclSystemError, "%s: MPI was initialized without MPI_THREAD_MULTIPLE (collectives run on stream workers)", who);
    uint64_t tag;
    memcpy(&tag, id.internal + 32, sizeof tag);
    MPI_Comm mc;
    if (MPI_Comm_split(MPI_COMM_WORLD, (int)(tag & 0x3fffffff), rank, &mc) != MPI_SUCCESS)
        return refuse(ncclSystemError, "%s: MPI_Comm_split failed", who);
    int size = 0, me = 0;
    MPI_Comm_size(mc, &size), MPI_Comm_rank(mc, &me);
    /* ranks that joined with this id must be nranks of them, each rank once */
    int bad = size != nranks || me != rank, any = 0;
    /* Rule "one GPU per rank": NCCL refuses two ranks of one communicator on one GPU of a node
     * ("Duplicate GPU detected"; user guide "Troubleshooting"). */
    MPI_Comm node;
    MPI_Comm_split_type(mc, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node);
    int nn = 0, dev = hypsi_current_device(), dup = 0;
    MPI_Comm_size(node, &nn);
    int *devs = calloc((size_t)nn, sizeof *devs);
    MPI_Allgather(&dev, 1, MPI_INT, devs, 1, MPI_INT, node);
    for (int i = 0; i < nn; i++)
        for (int j = i + 1; j < nn; j++) dup |= devs[i] == devs[j];
    free(devs);
    MPI_Comm_free(&node);
    int mine = bad | dup << 1;
    MPI_Allreduce(&mine, &any, 1, MPI_INT, MPI_BOR, mc);
    if (any) {
        MPI_Comm_free(&mc);
        if (any & 2) return refuse(ncclInvalidUsage, "%s: Duplicate GPU detected: two ranks of the communicator use GPU %d of one node", who, dev);
        return refuse(ncclInvalidUsage, "%s: %d ranks joined with this id, rank %d of %d expected", who, size, rank, nranks);
    }
    ncclComm_t c = calloc(1, sizeof *c);
    if (!c) return ncclSystemError;
    c->magic = COMM_MAGIC, c->mpi = mc, c->rank = rank, c->nranks = nranks, c->fault_kind = -1;
    pthread_mutex_init(&c->mu, NULL), pthread_cond_init(&c->cv, NULL);
    const char *f = getenv("HYP_STANDIN_NCCL_FAULT");
    if (f && *f) {
        char kind[32] = "";
        int n = 0;
        if (sscanf(f, "%31[a-z]:%d", kind, &n) == 2 && n >= 1)
            for (int k = 0; k < 5; k++)
                if (!strcmp(kind, KIND[k])) c->fault_kind = k, c->fault_n = n;
        if (c->fault_kind < 0) note("HYP_STANDIN_NCCL_FAULT=%s ignored — use OP:N, OP one of allreduce reducescatter allgather broadcast reduce", f);
    }
    *out = c;
    return ncclSuccess;
}

/* the worker of every queued collective waits for those issued before it, then gives way */
static void wait_turn(ncclComm_t c, uint64_t seq) {
    pthread_mutex_lock(&c->mu);
    while (c->ran != seq && !c->aborted) pthread_cond_wait(&c->cv, &c->mu);
    pthread_mutex_unlock(&c->mu);
}
static void done_turn(ncclComm_t c) {
    pthread_mutex_lock(&c->mu);
    c->ran++;
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
}

EXPORT ncclResult_t ncclCommGetAsyncError(ncclComm_t c, ncclResult_t *err) {
    if (!comm_of(c) || !err) return refuse(ncclInvalidArgument, "ncclCommGetAsyncError: not a live communicator or NULL result");
    pthread_mutex_lock(&c->mu);
    *err = c->async;
    pthread_mutex_unlock(&c->mu);
    return ncclSuccess;
}

/* API "ncclCommAbort": frees the communicator, interrupting its uncompleted operations (their
 * stream work ends). */
EXPORT ncclResult_t ncclCommAbort(ncclComm_t c) {
    if (!c) return ncclSuccess;
    if (!comm_of(c)) return refuse(ncclInvalidArgument, "ncclCommAbort: not a live communicator");
    pthread_mutex_lock(&c->mu);
    c->aborted = 1;
    pthread_cond_broadcast(&c->cv);
    while (c->ran < c->issued) pthread_cond_wait(&c->cv, &c->mu); /* the interrupted work leaves */
    pthread_mutex_unlock(&c->mu);
    c->magic = 0;
    /* not MPI_Comm_free: collective, and a dead peer would never take part */
    return ncclSuccess;
}
/* API "ncclCommDestroy": waits for the communicator's uncompleted operations, then frees it. */
EXPORT ncclResult_t ncclCommDestroy(ncclComm_t c) {
    if (!c) return ncclSuccess;
    if (!comm_of(c)) return refuse(ncclInvalidArgument, "ncclCommDestroy: not a live communicator");
    pthread_mutex_lock(&c->mu);
    while (c->ran < c->issued && !c->aborted && !c->async) pthread_cond_wait(&c->cv, &c->mu);
    int clean = !c->async;
    pthread_mutex_unlock(&c->mu);
    if (!clean) return ncclCommAbort(c);
    c->magic = 0;
    MPI_Comm_free(&c->mpi);
    pthread_cond_destroy(&c->cv), pthread_mutex_destroy(&c->mu);
    free(c);
    return ncclSuccess;
}

EXPORT ncclResult_t ncclGroupStart(void) { return ncclSuccess; }
EXPORT ncclResult_t ncclGroupEnd(void) { return ncclSuccess; }

/* ---- collectives ---------------------------------------------------------------------------- */

static size_t type_size(ncclDataType_t t) {
    switch (t) {
    case ncclInt8: case ncclUint8: case ncclFloat8e4m3: case ncclFloat8e5m2: return 1;
    case ncclFloat16: case ncclBfloat16: return 2;
    case ncclInt32: case ncclUint32: case ncclFloat32: return 4;
    case ncclInt64: case ncclUint64: case ncclFloat64: return 8;
    default: return 0;
    }
}
static float bf2f(uint16_t b) {
    uint32_t u = (uint32_t)b << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}
static uint16_t f2bf(float f) { /* round to nearest even (NaN kept a NaN) */
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)(u >> 16 | 0x40);
    return (uint16_t)((u + 0x7fff + (u >> 16 & 1)) >> 16);
}
/* acc[i] = acc[i] op x[i] for n elements of t (fp32, bf16) */
static void combine(void *acc, const void *x, size_t n, ncclDataType_t t, ncclRedOp_t op) {
    for (size_t i = 0; i < n; i++) {
        float a = t == ncclFloat32 ? ((float *)acc)[i] : bf2f(((uint16_t *)acc)[i]);
        float b = t == ncclFloat32 ? ((const float *)x)[i] : bf2f(((const uint16_t *)x)[i]);
        float r = op == ncclSum ? a + b : (b > a || a != a ? b : a);
        if (t == ncclFloat32) ((float *)acc)[i] = r;
        else ((uint16_t *)acc)[i] = f2bf(r);
    }
}

typedef struct {
    ncclComm_t c;
    int kind, root, fault;
    uint64_t seq;
    CUdeviceptr send, recv;
    size_t count, es, sbytes, rbytes;
    ncclDataType_t t;
    ncclRedOp_t op;
    CUstream s;
} coll_job;

static void run_coll(void *arg) {
    coll_job *j = arg;
    ncclComm_t c = j->c;
    wait_turn(c, j->seq);
    if (j->fault) { /* a dead peer: nothing arrives; the error is reported, the work hangs until abort */
        pthread_mutex_lock(&c->mu);
        c->async = ncclRemoteError;
        pthread_cond_broadcast(&c->cv);
        while (!c->aborted) pthread_cond_wait(&c->cv, &c->mu);
        c->ran++;
        pthread_cond_broadcast(&c->cv);
        pthread_mutex_unlock(&c->mu);
        return;
    }
    int aborted;
    pthread_mutex_lock(&c->mu);
    aborted = c->aborted || c->async;
    pthread_mutex_unlock(&c->mu);
    if (aborted) return done_turn(c);
    char *sv = j->sbytes ? hypsi_host_view(j->send, j->sbytes, "nccl sendbuff") : NULL;
    char *rv = j->rbytes ? hypsi_host_view(j->recv, j->rbytes, "nccl recvbuff") : NULL;
    if ((j->sbytes && !sv) || (j->rbytes && !rv)) {
        hypsi_stream_fault(j->s, CUDA_ERROR_ILLEGAL_ADDRESS, "nccl: a buffer was freed before the collective ran");
        pthread_mutex_lock(&c->mu);
        c->async = ncclUnhandledCudaError;
        pthread_mutex_unlock(&c->mu);
        return done_turn(c);
    }
    const int n = c->nranks, me = c->rank;
    const size_t bytes = j->count * j->es;
    int rc = MPI_SUCCESS;
    switch (j->kind) {
    case K_ALLREDUCE:
    case K_REDUCE: { /* everyone's buffer to everyone (reduce: to the root), summed in rank order */
        char *all = malloc(bytes * (size_t)n);
        if (j->kind == K_ALLREDUCE) rc = MPI_Allgather(sv, (int)bytes, MPI_BYTE, all, (int)bytes, MPI_BYTE, c->mpi);
        else rc = MPI_Gather(sv, (int)bytes, MPI_BYTE, all, (int)bytes, MPI_BYTE, j->root, c->mpi);
        if (rc == MPI_SUCCESS && (j->kind == K_ALLREDUCE || me == j->root)) {
            memmove(rv, all, bytes);
            for (int r = 1; r < n; r++) combine(rv, all + (size_t)r * bytes, j->count, j->t, j->op);
        }
        free(all);
        break;
    }
    case K_REDUCESCATTER: { /* block r of every rank to rank r, summed in rank order */
        char *mine = malloc(bytes * (size_t)n);
        rc = MPI_Alltoall(sv, (int)bytes, MPI_BYTE, mine, (int)bytes, MPI_BYTE, c->mpi);
        if (rc == MPI_SUCCESS) {
            memmove(rv, mine, bytes);
            for (int r = 1; r < n; r++) combine(rv, mine + (size_t)r * bytes, j->count, j->t, j->op);
        }
        free(mine);
        break;
    }
    case K_ALLGATHER:
        if (sv == rv + (size_t)me * bytes) rc = MPI_Allgather(MPI_IN_PLACE, 0, MPI_BYTE, rv, (int)bytes, MPI_BYTE, c->mpi);
        else rc = MPI_Allgather(sv, (int)bytes, MPI_BYTE, rv, (int)bytes, MPI_BYTE, c->mpi);
        break;
    case K_BROADCAST:
        if (me == j->root && sv != rv) memmove(rv, sv, bytes);
        rc = MPI_Bcast(rv, (int)bytes, MPI_BYTE, j->root, c->mpi);
        break;
    }
    if (rc != MPI_SUCCESS) {
        pthread_mutex_lock(&c->mu);
        c->async = ncclSystemError;
        pthread_mutex_unlock(&c->mu);
        note("%s: MPI failed (code %d)", KIND[j->kind], rc);
    }
    done_turn(c);
}

static int overlap(CUdeviceptr a, size_t na, CUdeviceptr b, size_t nb) { return na && nb && a < b + nb && b < a + na; }

static ncclResult_t enqueue(int kind, const void *send, void *recv, size_t count, ncclDataType_t t, ncclRedOp_t op, int root, ncclComm_t c,
                            cudaStream_t stream) {
    const char *who = KIND[kind];
    if (!comm_of(c)) return refuse(ncclInvalidArgument, "%s: not a live communicator", who);
    size_t es = type_size(t);
    if (!es) return refuse(ncclInvalidArgument, "%s: invalid datatype %d", who, (int)t);
    if ((kind == K_ALLREDUCE || kind == K_REDUCESCATTER || kind == K_REDUCE) && (op != ncclSum && op != ncclMax))
        return refuse(op < ncclNumOps ? ncclInvalidUsage : ncclInvalidArgument, "%s: op %d (the stand-in implements sum and max)", who, (int)op);
    if ((kind == K_ALLREDUCE || kind == K_REDUCESCATTER || kind == K_REDUCE) && t != ncclFloat32 && t != ncclBfloat16)
        return refuse(ncclInvalidUsage, "%s: reductions of datatype %d are not implemented by the stand-in (float32, bfloat16)", who, (int)t);
    if ((kind == K_BROADCAST || kind == K_REDUCE) && (root < 0 || root >= c->nranks))
        return refuse(ncclInvalidArgument, "%s: root %d outside 0..%d", who, root, c->nranks - 1);
    pthread_mutex_lock(&c->mu);
    ncclResult_t async = c->async;
    pthread_mutex_unlock(&c->mu);
    if (async) return refuse(async, "%s: the communicator has an asynchronous error (%s) — abort it", who, ncclGetErrorString(async));
    const int n = c->nranks, me = c->rank;
    const size_t b = count * es;
    CUdeviceptr s = (CUdeviceptr)(uintptr_t)send, r = (CUdeviceptr)(uintptr_t)recv;
    size_t sb = b, rb = b;
    if (kind == K_REDUCESCATTER) sb = b * (size_t)n;
    if (kind == K_ALLGATHER) rb = b * (size_t)n;
    if (kind == K_REDUCE && me != root) rb = 0;      /* recvbuff used only on the root */
    if (kind == K_BROADCAST && me != root) sb = 0;   /* sendbuff used only on the root */
    /* Rule "in place": user guide "In-place Operations": in place means sendbuff == recvbuff for
     * AllReduce, Broadcast and Reduce, recvbuff == sendbuff + rank * recvcount for ReduceScatter,
     * sendbuff == recvbuff + rank * sendcount for AllGather; any other overlap is refused. */
    int inplace = kind == K_REDUCESCATTER ? r == s + (CUdeviceptr)(me * b) : kind == K_ALLGATHER ? s == r + (CUdeviceptr)(me * b) : s == r;
    if (!inplace && overlap(s, sb, r, rb))
        return refuse(ncclInvalidUsage, "%s: sendbuff %#llx and recvbuff %#llx overlap but are not the in-place form%s", who, (unsigned long long)s,
                      (unsigned long long)r,
                      kind == K_REDUCESCATTER ? " (recvbuff == sendbuff + rank*recvcount)" : kind == K_ALLGATHER ? " (sendbuff == recvbuff + rank*sendcount)" : " (sendbuff == recvbuff)");
    /* Rule "device memory": buffers are device memory of this rank's GPU (user guide "Data
     * Pointers": host memory is not accepted). */
    if ((sb && (!send || !hypsi_host_view(s, sb, who))) || (rb && (!recv || !hypsi_host_view(r, rb, who))))
        return refuse(ncclInvalidArgument, "%s: sendbuff/recvbuff (%p, %p; %zu/%zu bytes) is not device memory of this GPU", who, send, recv, sb, rb);
    coll_job *j = calloc(1, sizeof *j);
    if (!j) return ncclSystemError;
    *j = (coll_job){c, kind, root, 0, 0, s, r, count, es, sb, rb, t, op, (CUstream)stream};
    pthread_mutex_lock(&c->mu);
    int nth = ++c->counts[kind];
    j->fault = c->fault_kind == kind && c->fault_n == nth;
    j->seq = c->issued++;
    pthread_mutex_unlock(&c->mu);
    CUresult cr = hypsi_enqueue((CUstream)stream, run_coll, j, free);
    if (cr != CUDA_SUCCESS) {
        pthread_mutex_lock(&c->mu);
        c->issued--, c->counts[kind]--;
        pthread_mutex_unlock(&c->mu);
        free(j);
        return refuse(ncclUnhandledCudaError, "%s: the stream refused the work (CUresult %d)", who, (int)cr);
    }
    return ncclSuccess;
}

EXPORT ncclResult_t ncclAllReduce(const void *send, void *recv, size_t count, ncclDataType_t t, ncclRedOp_t op, ncclComm_t c, cudaStream_t s) {
    return enqueue(K_ALLREDUCE, send, recv, count, t, op, 0, c, s);
}
EXPORT ncclResult_t ncclReduceScatter(const void *send, void *recv, size_t recvcount, ncclDataType_t t, ncclRedOp_t op, ncclComm_t c, cudaStream_t s) {
    return enqueue(K_REDUCESCATTER, send, recv, recvcount, t, op, 0, c, s);
}
EXPORT ncclResult_t ncclAllGather(const void *send, void *recv, size_t sendcount, ncclDataType_t t, ncclComm_t c, cudaStream_t s) {
    return enqueue(K_ALLGATHER, send, recv, sendcount, t, ncclSum, 0, c, s);
}
EXPORT ncclResult_t ncclBroadcast(const void *send, void *recv, size_t count, ncclDataType_t t, int root, ncclComm_t c, cudaStream_t s) {
    return enqueue(K_BROADCAST, send, recv, count, t, ncclSum, root, c, s);
}
EXPORT ncclResult_t ncclReduce(const void *send, void *recv, size_t count, ncclDataType_t t, ncclRedOp_t op, int root, ncclComm_t c, cudaStream_t s) {
    return enqueue(K_REDUCE, send, recv, count, t, op, root, c, s);
}
