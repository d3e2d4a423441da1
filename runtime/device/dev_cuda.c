/* dev_cuda.c — the "cuda" device (device.h): the thin layer that needs a real GPU.
 *
 * libcuda.so.1 (the driver API), libcublasLt.so.13 and libnccl.so.2 are opened with dlopen and
 * their functions found with dlsym; the CUDA headers give the types and the versioned symbol
 * names (cuMemAlloc -> cuMemAlloc_v2), nothing is linked. The primary context is used, so
 * cuBLASLt and NCCL (runtime-API libraries) share it. GEMM algorithms come from cuBLASLt's
 * heuristic, cached with their descriptors per (shape, types, epilogue, pointer alignment,
 * workspace size). NCCL is used only with more than one rank; its unique id goes from rank 0
 * to the others over runtime/coll.h. Everything else (rules, host orchestration) is shared code
 * that runs in tests through "sim".
 *
 * Which libraries: HYP_CUDA_LIBDIR=DIR opens DIR/libcuda.so.1, DIR/libcublasLt.so.13 and
 * DIR/libnccl.so.2 and nothing else (the build's stand-ins live in BUILD/standins:
 * docs/cuda-standins.md); HYP_LIBCUDA=PATH names the driver alone (it wins over HYP_CUDA_LIBDIR
 * for libcuda.so.1). Without them: the loader's search path, then $CUDA_HOME/lib64 (default
 * /usr/local/cuda) for cuBLASLt and NCCL. */
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "device.h"

#define NO_DRIVER_MSG "no CUDA driver (libcuda.so.1 not found) — train on this machine with a trainer generated for --target cpu or --target sim"

/* The path a library is opened from (switches: this file's header); "" when the switch names no
 * file, so nothing is opened. */
static const char *lib_path(const char *name, char *buf, size_t n) {
    const char *drv = getenv("HYP_LIBCUDA"), *dir = getenv("HYP_CUDA_LIBDIR");
    if (!strcmp(name, "libcuda.so.1") && drv && *drv) return drv;
    if (dir && *dir) return snprintf(buf, n, "%s/%s", dir, name) < (int)n ? buf : "";
    return name;
}

/* RTLD_NODELETE: a dlclose never unmaps these libraries. The driver (and NCCL) run threads of their
 * own that outlive every handle we free — the real driver's event and watchdog threads, NCCL's
 * proxy threads, the stand-ins' stream workers — and unmapping their code under them crashes the
 * process at exit (found by the stand-ins: SIGSEGV or a hang after "done:" in about 1 run in 10 of
 * the np=2 headline trainer, in a thread of the unloaded libcuda.so.1). Loaded once per process,
 * as every CUDA framework does. */
static void *open_lib(const char *name) { /* the switches; else the loader's path, then the toolkit's */
    char path[4200];
    const char *p = lib_path(name, path, sizeof path);
    void *h = *p ? dlopen(p, RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE) : NULL;
    if (!h && p == name && strcmp(name, "libcuda.so.1")) {
        const char *home = getenv("CUDA_HOME");
        snprintf(path, sizeof path, "%s/lib64/%s", home && *home ? home : "/usr/local/cuda", name);
        h = dlopen(path, RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
    }
    return h;
}

#ifndef HYP_HAVE_CUDA_HEADERS
int hyp_dev_cuda_open(hyp_device **out, hyp_err *e) {
    *out = NULL;
    void *h = open_lib("libcuda.so.1");
    if (!h) return hyp_fail(e, HYP_EINPUT, NO_DRIVER_MSG);
    dlclose(h);
    return hyp_fail(e, HYP_EINPUT, "this build has no CUDA support (the CUDA toolkit headers were not found when it was configured) — rebuild with CUDAToolkit_ROOT set, or use --target cpu or --target sim");
}
int hyp_dev_cuda_check_libs(char *report, size_t n) {
    snprintf(report, n, "built without the CUDA headers: no cuda device layer\n");
    return 3;
}
#else
#include <cublasLt.h>
#include <cuda.h>
#include <nccl.h>

#define STR(x) #x
#define XSTR(x) STR(x)

#define CU_FUNCS(X)                                                                                                  \
    X(cuInit) X(cuDeviceGetCount) X(cuDeviceGet) X(cuDeviceGetName) X(cuDeviceGetAttribute) X(cuDeviceTotalMem)      \
    X(cuDevicePrimaryCtxRetain) X(cuDevicePrimaryCtxRelease) X(cuCtxSetCurrent) X(cuCtxSynchronize) X(cuMemAlloc)    \
    X(cuMemFree) X(cuMemAllocHost) X(cuMemFreeHost) X(cuMemGetInfo) X(cuMemcpyHtoDAsync) X(cuMemcpyDtoHAsync)        \
    X(cuMemcpyDtoDAsync) X(cuMemsetD8Async) X(cuModuleLoad) X(cuModuleUnload) X(cuModuleGetFunction)                 \
    X(cuFuncSetAttribute) X(cuLaunchKernel) X(cuStreamCreate) X(cuStreamDestroy) X(cuStreamSynchronize) X(cuStreamQuery)              \
    X(cuStreamWaitEvent) X(cuEventCreate) X(cuEventDestroy) X(cuEventRecord) X(cuEventSynchronize) X(cuEventQuery)                   \
    X(cuEventElapsedTime) X(cuGetErrorString) X(cuGetErrorName) X(cuStreamBeginCapture) X(cuStreamEndCapture)                   \
    X(cuGraphInstantiate) X(cuGraphLaunch) X(cuGraphExecDestroy) X(cuGraphDestroy) X(cuTensorMapEncodeTiled)
#define LT_FUNCS(X)                                                                                                  \
    X(cublasLtCreate) X(cublasLtDestroy) X(cublasLtMatmulDescCreate) X(cublasLtMatmulDescDestroy)                    \
    X(cublasLtMatmulDescSetAttribute) X(cublasLtMatrixLayoutCreate) X(cublasLtMatrixLayoutDestroy)                   \
    X(cublasLtMatrixLayoutSetAttribute) X(cublasLtMatmulPreferenceCreate) X(cublasLtMatmulPreferenceDestroy)         \
    X(cublasLtMatmulPreferenceSetAttribute) X(cublasLtMatmulAlgoGetHeuristic) X(cublasLtMatmul)                      \
    X(cublasLtGetStatusString)
#define NCCL_FUNCS(X)                                                                                                \
    X(ncclGetUniqueId) X(ncclCommInitRank) X(ncclCommDestroy) X(ncclAllReduce) X(ncclReduceScatter)                  \
    X(ncclAllGather) X(ncclBroadcast) X(ncclReduce) X(ncclGetErrorString) X(ncclCommGetAsyncError) X(ncclCommAbort)
#define MEMBER(f) __typeof__(f) *f;
/* the name the header maps f to (cuMemAlloc -> "cuMemAlloc_v2"): the ABI these types describe */
#define LOAD(f)                                                                                                      \
    if (!(api->f = (__typeof__(f) *)dlsym(h, XSTR(f)))) return XSTR(f);

typedef struct { CU_FUNCS(MEMBER) } cu_api;
typedef struct { LT_FUNCS(MEMBER) } lt_api;
typedef struct { NCCL_FUNCS(MEMBER) } nccl_api;
/* each returns the name of the first missing symbol, or NULL */
static const char *load_cu(cu_api *api, void *h) { CU_FUNCS(LOAD) return NULL; }
static const char *load_lt(lt_api *api, void *h) { LT_FUNCS(LOAD) return NULL; }
static const char *load_nccl(nccl_api *api, void *h) { NCCL_FUNCS(LOAD) return NULL; }

typedef struct { /* everything that selects a cached cuBLASLt plan */
    int transa, transb, atype, btype, dtype, compute, epilogue, batch, align[6], scales;
    int64_t m, n, k, lda, ldb, ldc, ldd, ldaux, stride[4];
    size_t workspace;
} gemm_key;
typedef struct {
    gemm_key key;
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t lay[4]; /* A, B, C, D */
    cublasLtMatmulAlgo_t algo;
} gemm_plan;

typedef struct {
    char name[128];
    CUfunction f;
    size_t shmem; /* dynamic shared memory allowed so far (CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES) */
} cu_fn;
typedef struct {
    CUmodule mod;
    cu_fn *fns;
    int nfns;
} cu_module;

typedef struct {
    hyp_device pub;
    void *lib, *lt_lib, *nccl_lib;
    cu_api cu;
    lt_api lt;
    nccl_api nc;
    CUdevice dev;
    CUcontext ctx;
    CUstream def;
    cublasLtHandle_t lt_handle;
    gemm_plan *plans;
    int nplans;
    struct { CUstream s; CUdeviceptr ws; } *wss; /* the cuBLASLt workspace of each stream that ran a GEMM */
    int nwss;
    ncclComm_t comm;
    int world, rank;
    CUstream cstreams[16]; /* streams that were given collectives: polled for NCCL's asynchronous errors */
    int ncstreams;
    char sticky[400];      /* an asynchronous NCCL error: returned by every later synchronize and collective */
} cu_dev;

#define CD(d) ((cu_dev *)(d))
#define STREAM(d, s) ((s) ? (CUstream)(s) : CD(d)->def)
#define DPTR(p) ((CUdeviceptr)(uintptr_t)(p))

static int cu_fail(cu_dev *d, CUresult r, const char *what, hyp_err *e) {
    const char *name = NULL, *str = NULL;
    d->cu.cuGetErrorName(r, &name);
    d->cu.cuGetErrorString(r, &str);
    return hyp_fail(e, r == CUDA_ERROR_INVALID_VALUE || r == CUDA_ERROR_NOT_READY || r == CUDA_ERROR_NOT_FOUND ? HYP_EINPUT : HYP_EFAIL,
                    "cuda: %s: %s (%s)", what, name ? name : "?", str ? str : "unknown error");
}
#define CU(call, what)                                                                                               \
    do {                                                                                                             \
        CUresult r_ = d->cu.call;                                                                                    \
        if (r_ != CUDA_SUCCESS) return cu_fail(d, r_, what, e);                                                      \
    } while (0)


/* ---- NCCL's asynchronous errors ------------------------------------------------------------- */

/* While NCCL is in use, the communicator's asynchronous error (NCCL user guide, "Fault Tolerance":
 * ncclCommGetAsyncError, then ncclCommAbort): an error aborts the communicator and becomes sticky
 * (device.h). 1 when the wait must end with it in e. */
static int nccl_async_failed(cu_dev *d, hyp_err *e) {
    ncclResult_t ar = ncclSuccess;
    if (d->nc.ncclCommGetAsyncError(d->comm, &ar) != ncclSuccess) ar = ncclInternalError;
    if (ar == ncclSuccess || ar == ncclInProgress) return 0;
    d->nc.ncclCommAbort(d->comm);
    d->comm = NULL;
    snprintf(d->sticky, sizeof d->sticky,
             "cuda: NCCL asynchronous error on rank %d: %s — a peer rank died or the network failed; the communicator was aborted: restart from the last checkpoint",
             d->rank, d->nc.ncclGetErrorString(ar));
    hyp_fail(e, HYP_EFAIL, "%s", d->sticky);
    return 1;
}
static void poll_pause(void) {
    struct timespec ts = {0, 200 * 1000};
    nanosleep(&ts, NULL);
}

/* Waits for stream s as cuStreamSynchronize does, but polls NCCL's asynchronous error meanwhile:
 * a dead peer would otherwise block the synchronize forever. */
static int poll_stream(cu_dev *d, CUstream s, hyp_err *e) {
    if (d->sticky[0]) return hyp_fail(e, HYP_EFAIL, "%s", d->sticky);
    while (d->comm) {
        CUresult r = d->cu.cuStreamQuery(s);
        if (r == CUDA_SUCCESS) return HYP_OK;
        if (r != CUDA_ERROR_NOT_READY) return cu_fail(d, r, "stream query", e);
        if (nccl_async_failed(d, e)) return HYP_EFAIL;
        poll_pause();
    }
    return HYP_OK;
}
/* The same for event ev: an event recorded after a collective whose peer died would never complete. */
static int poll_event(cu_dev *d, CUevent ev, hyp_err *e) {
    if (d->sticky[0]) return hyp_fail(e, HYP_EFAIL, "%s", d->sticky);
    while (d->comm) {
        CUresult r = d->cu.cuEventQuery(ev);
        if (r == CUDA_SUCCESS) return HYP_OK;
        if (r != CUDA_ERROR_NOT_READY) return cu_fail(d, r, "event query", e);
        if (nccl_async_failed(d, e)) return HYP_EFAIL;
        poll_pause();
    }
    return HYP_OK;
}
/* every stream that was given collectives (then the whole context may be waited for) */
static int poll_all(cu_dev *d, hyp_err *e) {
    for (int i = 0; i < d->ncstreams; i++)
        if (poll_stream(d, d->cstreams[i], e)) return HYP_EFAIL;
    return d->sticky[0] ? hyp_fail(e, HYP_EFAIL, "%s", d->sticky) : HYP_OK;
}
static void note_cstream(cu_dev *d, CUstream s) {
    for (int i = 0; i < d->ncstreams; i++)
        if (d->cstreams[i] == s) return;
    if (d->ncstreams < (int)(sizeof d->cstreams / sizeof *d->cstreams)) d->cstreams[d->ncstreams++] = s;
}

/* ---- memory --------------------------------------------------------------------------------- */

static int cu_mem_alloc(hyp_device *dv, void **p, size_t n, hyp_err *e) {
    cu_dev *d = CD(dv);
    CUdeviceptr x = 0;
    CU(cuMemAlloc(&x, n ? n : 1), "mem_alloc");
    *p = (void *)(uintptr_t)x;
    return HYP_OK;
}
static int cu_mem_free(hyp_device *dv, void *p, hyp_err *e) {
    cu_dev *d = CD(dv);
    if (!p) return HYP_OK;
    CU(cuCtxSynchronize(), "mem_free");
    CU(cuMemFree(DPTR(p)), "mem_free");
    return HYP_OK;
}
static int cu_host_alloc(hyp_device *dv, void **p, size_t n, hyp_err *e) {
    cu_dev *d = CD(dv);
    CU(cuMemAllocHost(p, n ? n : 1), "host_alloc");
    return HYP_OK;
}
static int cu_host_free(hyp_device *dv, void *p, hyp_err *e) {
    cu_dev *d = CD(dv);
    CU(cuMemFreeHost(p), "host_free");
    return HYP_OK;
}
static int cu_mem_info(hyp_device *dv, size_t *fr, size_t *tot, hyp_err *e) {
    cu_dev *d = CD(dv);
    CU(cuMemGetInfo(fr, tot), "mem_info");
    return HYP_OK;
}
static int cu_h2d(hyp_device *dv, void *dst, const void *src, size_t n, hyp_stream *s, hyp_err *e) {
    cu_dev *d = CD(dv);
    dv->calls++;
    CU(cuMemcpyHtoDAsync(DPTR(dst), src, n, STREAM(d, s)), "h2d");
    return HYP_OK;
}
static int cu_d2h(hyp_device *dv, void *dst, const void *src, size_t n, hyp_stream *s, hyp_err *e) {
    cu_dev *d = CD(dv);
    dv->calls++;
    CU(cuMemcpyDtoHAsync(dst, DPTR(src), n, STREAM(d, s)), "d2h");
    return HYP_OK;
}
static int cu_d2d(hyp_device *dv, void *dst, const void *src, size_t n, hyp_stream *s, hyp_err *e) {
    cu_dev *d = CD(dv);
    dv->calls++;
    CU(cuMemcpyDtoDAsync(DPTR(dst), DPTR(src), n, STREAM(d, s)), "d2d");
    return HYP_OK;
}
static int cu_memset(hyp_device *dv, void *dst, int byte, size_t n, hyp_stream *s, hyp_err *e) {
    cu_dev *d = CD(dv);
    dv->calls++;
    CU(cuMemsetD8Async(DPTR(dst), (unsigned char)byte, n, STREAM(d, s)), "memset");
    return HYP_OK;
}
/* synchronous forms: everything before, the operation on the default stream, wait for it */
static int sync_begin(cu_dev *d, hyp_err *e) {
    if (poll_all(d, e)) return HYP_EFAIL;
    CU(cuCtxSynchronize(), "synchronize");
    return HYP_OK;
}
static int sync_end(cu_dev *d, int rc, hyp_err *e) {
    if (rc) return rc;
    CU(cuStreamSynchronize(d->def), "synchronize");
    return HYP_OK;
}
#define SYNC_FORM(call) int rc = sync_begin(CD(d), e); return rc ? rc : sync_end(CD(d), call, e)
static int cu_h2d_sync(hyp_device *d, void *dst, const void *src, size_t n, hyp_err *e) {
    SYNC_FORM(cu_h2d(d, dst, src, n, NULL, e));
}
static int cu_d2h_sync(hyp_device *d, void *dst, const void *src, size_t n, hyp_err *e) {
    SYNC_FORM(cu_d2h(d, dst, src, n, NULL, e));
}
static int cu_d2d_sync(hyp_device *d, void *dst, const void *src, size_t n, hyp_err *e) {
    SYNC_FORM(cu_d2d(d, dst, src, n, NULL, e));
}
static int cu_memset_sync(hyp_device *d, void *dst, int byte, size_t n, hyp_err *e) {
    SYNC_FORM(cu_memset(d, dst, byte, n, NULL, e));
}

/* ---- modules and launch --------------------------------------------------------------------- */

static int cu_module_load(hyp_device *dv, const char *path, hyp_module **out, hyp_err *e) {
    cu_dev *d = CD(dv);
    cu_module *m = calloc(1, sizeof *m);
    if (!m) return hyp_fail(e, HYP_EFAIL, "out of memory");
    CUresult r = d->cu.cuModuleLoad(&m->mod, path);
    if (r != CUDA_SUCCESS) {
        free(m);
        char what[600];
        snprintf(what, sizeof what, "loading module %s", path);
        return cu_fail(d, r, what, e);
    }
    *out = (hyp_module *)m;
    return HYP_OK;
}
static void cu_module_unload(hyp_device *dv, hyp_module *hm) {
    cu_dev *d = CD(dv);
    cu_module *m = (cu_module *)hm;
    if (!m) return;
    d->cu.cuCtxSynchronize();
    d->cu.cuModuleUnload(m->mod);
    free(m->fns);
    free(m);
}
static int cu_launch(hyp_device *dv, hyp_module *hm, const char *kernel, hyp_dim3 g, hyp_dim3 b, size_t shmem,
                     const hyp_kargs *args, hyp_stream *s, hyp_err *e) {
    cu_dev *d = CD(dv);
    cu_module *m = (cu_module *)hm;
    if (!m || !kernel || !args || args->n < 0) return hyp_fail(e, HYP_EINPUT, "cuda: launch %s: invalid module or arguments", kernel ? kernel : "?");
    cu_fn *f = NULL;
    for (int i = 0; i < m->nfns && !f; i++)
        if (!strcmp(m->fns[i].name, kernel)) f = &m->fns[i];
    if (!f) {
        cu_fn *nf = realloc(m->fns, sizeof *nf * (size_t)(m->nfns + 1));
        if (!nf) return hyp_fail(e, HYP_EFAIL, "out of memory");
        m->fns = nf, f = &nf[m->nfns];
        memset(f, 0, sizeof *f);
        snprintf(f->name, sizeof f->name, "%s", kernel);
        CU(cuModuleGetFunction(&f->f, m->mod, kernel), kernel);
        m->nfns++;
    }
    /* the driver's limit is static + dynamic <= 48 KB unless raised, and the static part (sm_90
     * cubins carry 1 KB per kernel) is the cubin's: raise it for every new dynamic maximum */
    if (shmem > f->shmem) {
        CU(cuFuncSetAttribute(f->f, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, (int)shmem), kernel);
        f->shmem = shmem;
    }
    hyp_kargs a = *args;
    dv->calls++;
    CU(cuLaunchKernel(f->f, g.x, g.y, g.z, b.x, b.y, b.z, (unsigned)shmem, STREAM(d, s), hyp_kargs_params(&a), NULL), kernel);
    return HYP_OK;
}

/* The TMA tensor map (device.h): cuTensorMapEncodeTiled, zero fill, no interleave, L2 promotion 128B. */
static int cu_tensor_map(hyp_device *dv, void *map, hyp_dtype t, int rank, const void *gaddr, const uint64_t *dims,
                         const uint64_t *strides, const uint32_t *box, int swizzle, hyp_err *e) {
    cu_dev *d = CD(dv);
    static const int code[HYP_DT__COUNT] = {[HYP_DT_F32] = CU_TENSOR_MAP_DATA_TYPE_FLOAT32,
                                            [HYP_DT_BF16] = CU_TENSOR_MAP_DATA_TYPE_BFLOAT16,
                                            [HYP_DT_E4M3] = CU_TENSOR_MAP_DATA_TYPE_UINT8,
                                            [HYP_DT_E5M2] = CU_TENSOR_MAP_DATA_TYPE_UINT8,
                                            [HYP_DT_F16] = CU_TENSOR_MAP_DATA_TYPE_FLOAT16,
                                            [HYP_DT_I8] = CU_TENSOR_MAP_DATA_TYPE_UINT8,
                                            [HYP_DT_I32] = CU_TENSOR_MAP_DATA_TYPE_INT32};
    if ((unsigned)t >= HYP_DT__COUNT || rank < 1 || rank > 5 || swizzle < 0 || swizzle > 3)
        return hyp_fail(e, HYP_EINPUT, "cuda: tensor_map: bad dtype %d, rank %d or swizzle %d", (int)t, rank, swizzle);
    cuuint32_t ones[5] = {1, 1, 1, 1, 1};
    CUresult r = d->cu.cuTensorMapEncodeTiled((CUtensorMap *)map, (CUtensorMapDataType)code[t], (cuuint32_t)rank,
                                              (void *)(uintptr_t)gaddr, dims, strides, box, ones,
                                              CU_TENSOR_MAP_INTERLEAVE_NONE, (CUtensorMapSwizzle)swizzle,
                                              CU_TENSOR_MAP_L2_PROMOTION_L2_128B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (r != CUDA_SUCCESS)
        return hyp_fail(e, HYP_EINPUT, "cuda: cuTensorMapEncodeTiled failed (%d) — check the alignment, strides, box and swizzle (device.h)", (int)r);
    return HYP_OK;
}

/* ---- streams and events --------------------------------------------------------------------- */

static int cu_stream_create(hyp_device *dv, hyp_stream **out, hyp_err *e) {
    cu_dev *d = CD(dv);
    CU(cuStreamCreate((CUstream *)out, CU_STREAM_NON_BLOCKING), "stream_create");
    return HYP_OK;
}
static void cu_stream_destroy(hyp_device *dv, hyp_stream *s) {
    cu_dev *d = CD(dv);
    if (!s) return;
    d->cu.cuCtxSynchronize();
    for (int i = 0; i < d->nwss; i++)
        if (d->wss[i].s == (CUstream)s) d->cu.cuMemFree(d->wss[i].ws), d->wss[i] = d->wss[--d->nwss];
    for (int i = 0; i < d->ncstreams; i++)
        if (d->cstreams[i] == (CUstream)s) d->cstreams[i--] = d->cstreams[--d->ncstreams];
    d->cu.cuStreamDestroy((CUstream)s);
}
static int cu_stream_synchronize(hyp_device *dv, hyp_stream *s, hyp_err *e) {
    cu_dev *d = CD(dv);
    if (poll_stream(d, STREAM(d, s), e)) return HYP_EFAIL;
    CU(cuStreamSynchronize(STREAM(d, s)), "stream_synchronize");
    return HYP_OK;
}
static int cu_synchronize(hyp_device *dv, hyp_err *e) {
    cu_dev *d = CD(dv);
    if (poll_all(d, e)) return HYP_EFAIL;
    CU(cuCtxSynchronize(), "synchronize");
    return HYP_OK;
}
static int cu_event_create(hyp_device *dv, hyp_event **out, hyp_err *e) {
    cu_dev *d = CD(dv);
    CU(cuEventCreate((CUevent *)out, CU_EVENT_DEFAULT), "event_create");
    return HYP_OK;
}
static void cu_event_destroy(hyp_device *dv, hyp_event *ev) {
    cu_dev *d = CD(dv);
    if (!ev) return;
    d->cu.cuCtxSynchronize();
    d->cu.cuEventDestroy((CUevent)ev);
}
static int cu_event_record(hyp_device *dv, hyp_event *ev, hyp_stream *s, hyp_err *e) {
    cu_dev *d = CD(dv);
    CU(cuEventRecord((CUevent)ev, STREAM(d, s)), "event_record");
    return HYP_OK;
}
static int cu_event_wait(hyp_device *dv, hyp_stream *s, hyp_event *ev, hyp_err *e) {
    cu_dev *d = CD(dv);
    CU(cuStreamWaitEvent(STREAM(d, s), (CUevent)ev, 0), "event_wait");
    return HYP_OK;
}
static int cu_event_synchronize(hyp_device *dv, hyp_event *ev, hyp_err *e) {
    cu_dev *d = CD(dv);
    if (poll_event(d, (CUevent)ev, e)) return HYP_EFAIL;
    CU(cuEventSynchronize((CUevent)ev), "event_synchronize");
    return HYP_OK;
}
static int cu_event_elapsed_ms(hyp_device *dv, hyp_event *a, hyp_event *b, float *ms, hyp_err *e) {
    cu_dev *d = CD(dv);
    CU(cuEventElapsedTime(ms, (CUevent)a, (CUevent)b), "event_elapsed_ms");
    return HYP_OK;
}

/* ---- GEMM: cuBLASLt ------------------------------------------------------------------------- */

static cudaDataType_t cuda_type(hyp_dtype t) {
    static const cudaDataType_t map[] = {CUDA_R_32F, CUDA_R_16BF, CUDA_R_8F_E4M3, CUDA_R_8F_E5M2};
    return map[t];
}
static const cublasLtEpilogue_t epi_map[HYP_EPI__COUNT] = {
    CUBLASLT_EPILOGUE_DEFAULT,   CUBLASLT_EPILOGUE_BIAS,          CUBLASLT_EPILOGUE_GELU,
    CUBLASLT_EPILOGUE_GELU_AUX,  CUBLASLT_EPILOGUE_GELU_BIAS,     CUBLASLT_EPILOGUE_GELU_AUX_BIAS,
    CUBLASLT_EPILOGUE_DGELU,     CUBLASLT_EPILOGUE_DGELU_BGRAD,   CUBLASLT_EPILOGUE_BGRADA,
    CUBLASLT_EPILOGUE_BGRADB};

static int lt_fail(cu_dev *d, cublasStatus_t st, const char *what, const hyp_gemm *g, hyp_err *e) {
    return hyp_fail(e, st == CUBLAS_STATUS_NOT_SUPPORTED || st == CUBLAS_STATUS_INVALID_VALUE ? HYP_EINPUT : HYP_EFAIL,
                    "cuda: cuBLASLt %s: %s (m %lld n %lld k %lld, %s x %s -> %s, epilogue %s)", what,
                    d->lt.cublasLtGetStatusString(st), (long long)g->m, (long long)g->n, (long long)g->k,
                    hyp_dtype_name(g->atype), hyp_dtype_name(g->btype), hyp_dtype_name(g->dtype), hyp_epilogue_name(g->epilogue));
}
#define LT(call, what)                                                                                               \
    do {                                                                                                             \
        cublasStatus_t s_ = d->lt.call;                                                                              \
        if (s_ != CUBLAS_STATUS_SUCCESS) return lt_fail(d, s_, what, g, e);                                          \
    } while (0)

static int align_of(const void *p) { return p ? __builtin_ctzll((uintptr_t)p | 256) : 9; }

static int uses_aux(const hyp_gemm *g) {
    hyp_epilogue ep = g->epilogue;
    return ep == HYP_EPI_GELU_AUX || ep == HYP_EPI_GELU_AUX_BIAS || ep == HYP_EPI_DGELU || ep == HYP_EPI_DGELU_BGRAD;
}

/* the pointer attributes this call's epilogue and types use (the rest stay unset) */
static int set_ptrs(cu_dev *d, cublasLtMatmulDesc_t op, const hyp_gemm *g, hyp_err *e) {
    const void *v[6] = {hyp_gemm_bias_len(g) ? g->bias : NULL, uses_aux(g) ? g->aux : NULL, g->a_scale, g->b_scale, g->d_scale, g->amax_d};
    static const cublasLtMatmulDescAttributes_t at[6] = {
        CUBLASLT_MATMUL_DESC_BIAS_POINTER,    CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER,
        CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, CUBLASLT_MATMUL_DESC_D_SCALE_POINTER,      CUBLASLT_MATMUL_DESC_AMAX_D_POINTER};
    for (int i = 0; i < 6; i++)
        if (v[i]) LT(cublasLtMatmulDescSetAttribute(op, at[i], &v[i], sizeof v[i]), "set pointer attribute");
    return HYP_OK;
}

static int make_plan(cu_dev *d, const hyp_gemm *g, gemm_plan *p, hyp_err *e) {
    int nb = g->batch > 1 ? g->batch : 1;
    LT(cublasLtMatmulDescCreate(&p->op, g->compute == HYP_GEMM_TF32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F, CUDA_R_32F), "descriptor");
    int32_t ta = g->transa ? CUBLAS_OP_T : CUBLAS_OP_N, tb = g->transb ? CUBLAS_OP_T : CUBLAS_OP_N;
    uint32_t epi = epi_map[g->epilogue];
    LT(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta), "transa");
    LT(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb), "transb");
    LT(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi), "epilogue");
    if (uses_aux(g)) LT(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &g->ldaux, sizeof g->ldaux), "aux ld");
    if (g->atype >= HYP_DT_E4M3 && hyp_gemm_bias_len(g)) {
        int32_t bt = cuda_type(hyp_gemm_bias_type(g));
        LT(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt, sizeof bt), "bias type");
    }
    const hyp_dtype types[4] = {g->atype, g->btype, hyp_gemm_ctype(g), g->dtype};
    const int64_t rows[4] = {g->transa ? g->k : g->m, g->transb ? g->n : g->k, g->m, g->m};
    const int64_t cols[4] = {g->transa ? g->m : g->k, g->transb ? g->k : g->n, g->n, g->n};
    const int usec = g->beta != 0.0f;
    const int64_t ld[4] = {g->lda, g->ldb, usec ? g->ldc : g->ldd, g->ldd};
    const int64_t stride[4] = {g->stride_a, g->stride_b, usec ? g->stride_c : g->stride_d, g->stride_d};
    for (int i = 0; i < 4; i++) {
        LT(cublasLtMatrixLayoutCreate(&p->lay[i], cuda_type(types[i]), (uint64_t)rows[i], (uint64_t)cols[i], ld[i]), "layout");
        if (nb > 1) {
            int32_t cnt = nb;
            LT(cublasLtMatrixLayoutSetAttribute(p->lay[i], CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &cnt, sizeof cnt), "batch");
            LT(cublasLtMatrixLayoutSetAttribute(p->lay[i], CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride[i], sizeof stride[i]), "stride");
        }
    }
    if (set_ptrs(d, p->op, g, e)) return HYP_EINPUT;
    cublasLtMatmulPreference_t pref;
    LT(cublasLtMatmulPreferenceCreate(&pref), "preference");
    uint64_t ws = p->key.workspace;
    cublasLtMatmulHeuristicResult_t res;
    int found = 0;
    cublasStatus_t st = d->lt.cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws);
    /* The real alignment of A, B, C, D (part of the plan's key): the heuristic assumes 256 bytes
     * unless told (cublasLt.h CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_*_BYTES, default 256), and the
     * ZeRO reduce passes sub-buffers at 4-byte offsets. C is D when beta is 0 (cu_gemm). */
    static const cublasLtMatmulPreferenceAttributes_t align_attr[4] = {
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
    for (int i = 0; i < 4 && st == CUBLAS_STATUS_SUCCESS; i++) {
        int lg = p->key.align[i == 2 && usec == 0 ? 3 : i];
        uint32_t bytes = 1u << (lg < 8 ? lg : 8);
        st = d->lt.cublasLtMatmulPreferenceSetAttribute(pref, align_attr[i], &bytes, sizeof bytes);
    }
    if (st == CUBLAS_STATUS_SUCCESS)
        st = d->lt.cublasLtMatmulAlgoGetHeuristic(d->lt_handle, p->op, p->lay[0], p->lay[1], p->lay[2], p->lay[3], pref, 1, &res, &found);
    d->lt.cublasLtMatmulPreferenceDestroy(pref);
    if (st != CUBLAS_STATUS_SUCCESS) return lt_fail(d, st, "heuristic", g, e);
    if (!found) return lt_fail(d, CUBLAS_STATUS_NOT_SUPPORTED, "heuristic found no algorithm", g, e);
    p->algo = res.algo;
    return HYP_OK;
}

static void free_plan(cu_dev *d, gemm_plan *p) {
    for (int i = 0; i < 4; i++)
        if (p->lay[i]) d->lt.cublasLtMatrixLayoutDestroy(p->lay[i]);
    if (p->op) d->lt.cublasLtMatmulDescDestroy(p->op);
}

/* The cuBLASLt workspace of stream s (one per stream: GEMMs on two streams run concurrently and
 * must not share one), allocated at its first GEMM: 32 MiB on Hopper and newer, 4 MiB before, as
 * the cuBLAS documentation recommends (section "cublasSetWorkspace()"). A caller's own workspace
 * (hyp_gemm.workspace_bytes > 0) is used instead when given. */
static int stream_workspace(cu_dev *d, CUstream s, void **ws, size_t *bytes, hyp_err *e) {
    const size_t size = d->pub.info.sm >= 90 ? (size_t)32 << 20 : (size_t)4 << 20;
    for (int i = 0; i < d->nwss; i++)
        if (d->wss[i].s == s) return *ws = (void *)(uintptr_t)d->wss[i].ws, *bytes = size, HYP_OK;
    __typeof__(d->wss) nw = realloc(d->wss, sizeof *nw * (size_t)(d->nwss + 1));
    if (!nw) return hyp_fail(e, HYP_EFAIL, "out of memory");
    d->wss = nw;
    CUdeviceptr p = 0;
    CU(cuMemAlloc(&p, size), "cuBLASLt workspace");
    d->wss[d->nwss].s = s, d->wss[d->nwss++].ws = p;
    *ws = (void *)(uintptr_t)p, *bytes = size;
    return HYP_OK;
}

static int cu_gemm(hyp_device *dv, const hyp_gemm *g, hyp_stream *s, hyp_err *e) {
    cu_dev *d = CD(dv);
    if (hyp_gemm_validate(g, e)) return HYP_EINPUT;
    if (!d->lt_lib) { /* first GEMM: load cuBLASLt */
        const char *missing;
        if (!(d->lt_lib = open_lib("libcublasLt.so.13")))
            return hyp_fail(e, HYP_EFAIL, "cuda: libcublasLt.so.13 not found (%s) — install the CUDA 13 cuBLAS libraries or set LD_LIBRARY_PATH", dlerror());
        if ((missing = load_lt(&d->lt, d->lt_lib)) || d->lt.cublasLtCreate(&d->lt_handle) != CUBLAS_STATUS_SUCCESS) {
            dlclose(d->lt_lib), d->lt_lib = NULL;
            return hyp_fail(e, HYP_EFAIL, "cuda: cuBLASLt unusable (%s) — check the CUDA installation", missing ? missing : "cublasLtCreate failed");
        }
    }
    gemm_key k;
    memset(&k, 0, sizeof k);
    k.transa = g->transa, k.transb = g->transb, k.atype = g->atype, k.btype = g->btype, k.dtype = g->dtype;
    k.compute = g->compute, k.epilogue = g->epilogue, k.batch = g->batch > 1 ? g->batch : 1;
    const void *ptrs[6] = {g->a, g->b, g->beta != 0.0f ? g->c : NULL, g->d, hyp_gemm_bias_len(g) ? g->bias : NULL, uses_aux(g) ? g->aux : NULL};
    for (int i = 0; i < 6; i++) k.align[i] = align_of(ptrs[i]);
    k.scales = (g->a_scale != NULL) | (g->b_scale != NULL) << 1 | (g->d_scale != NULL) << 2 | (g->amax_d != NULL) << 3;
    const void *cp = g->beta != 0.0f ? g->c : NULL; /* C is read only with beta != 0 */
    k.m = g->m, k.n = g->n, k.k = g->k, k.lda = g->lda, k.ldb = g->ldb, k.ldc = cp ? g->ldc : 0, k.ldd = g->ldd;
    void *ws = g->workspace;
    size_t ws_bytes = g->workspace_bytes;
    if (!ws_bytes && stream_workspace(d, STREAM(d, s), &ws, &ws_bytes, e)) return HYP_EFAIL;
    k.ldaux = uses_aux(g) ? g->ldaux : 0, k.workspace = ws_bytes;
    if (k.batch > 1) k.stride[0] = g->stride_a, k.stride[1] = g->stride_b, k.stride[2] = cp ? g->stride_c : g->stride_d, k.stride[3] = g->stride_d;
    gemm_plan *p = NULL;
    for (int i = 0; i < d->nplans && !p; i++)
        if (!memcmp(&d->plans[i].key, &k, sizeof k)) p = &d->plans[i];
    if (!p) {
        gemm_plan *np = realloc(d->plans, sizeof *np * (size_t)(d->nplans + 1));
        if (!np) return hyp_fail(e, HYP_EFAIL, "out of memory");
        d->plans = np, p = &np[d->nplans];
        memset(p, 0, sizeof *p);
        p->key = k;
        int rc = make_plan(d, g, p, e);
        if (rc) {
            free_plan(d, p);
            return rc;
        }
        d->nplans++;
    } else if (set_ptrs(d, p->op, g, e)) {
        return HYP_EINPUT;
    }
    /* With beta 0, C is not read and stands for D (same layout) — except for an fp8 D, whose C is
     * bf16: C == D with Cdesc != Ddesc is refused (cuBLAS docs, cublasLtMatmul(): in place means
     * C == D and Cdesc == Ddesc), so C is NULL there, as beta 0 allows. */
    const void *cin = cp ? cp : hyp_gemm_ctype(g) == g->dtype ? g->d : NULL;
    dv->calls++;
    LT(cublasLtMatmul(d->lt_handle, p->op, &g->alpha, g->a, p->lay[0], g->b, p->lay[1], &g->beta, cin,
                      p->lay[2], g->d, p->lay[3], &p->algo, ws, ws_bytes, STREAM(d, s)), "matmul");
    return HYP_OK;
}

/* ---- collectives: NCCL with more than one rank, local copies with one ----------------------- */

static const char *nccl_err(cu_dev *d, ncclResult_t r) { return d->nc.ncclGetErrorString(r); }

static int comm_init_nccl(cu_dev *d, hyp_coll *c, hyp_err *e);
static int cu_comm_init(hyp_device *dv, hyp_coll *c, hyp_err *e) {
    cu_dev *d = CD(dv);
    if (!c) return hyp_fail(e, HYP_EINPUT, "cuda: comm_init needs a communicator (hyp_coll_init)");
    int world = hyp_coll_world(c), rank = hyp_coll_rank(c);
    if (world == 1) {
        d->world = 1, d->rank = 0;
        return HYP_OK;
    }
    d->world = world, d->rank = rank; /* for the loaders' messages; reset on every failure below */
    int rc = comm_init_nccl(d, c, e);
    if (rc) {
        d->world = 0, d->rank = 0, d->comm = NULL;
        if (d->nccl_lib) dlclose(d->nccl_lib), d->nccl_lib = NULL;
    }
    return rc;
}

/* NCCL for world > 1 ranks: the library on every rank, rank 0's unique id to all, the communicator. */
static int comm_init_nccl(cu_dev *d, hyp_coll *c, hyp_err *e) {
    const char *missing = "libnccl.so.2";
    ncclUniqueId id;
    ncclResult_t r = ncclSuccess;
    if ((d->nccl_lib = open_lib("libnccl.so.2")) && !(missing = load_nccl(&d->nc, d->nccl_lib)) && d->rank == 0)
        r = d->nc.ncclGetUniqueId(&id);
    int ok = !missing && r == ncclSuccess;
    if (!hyp_coll_all_ok(c, ok))
        return hyp_fail(e, HYP_EFAIL, "cuda: NCCL unavailable on %s (%s) — install NCCL 2 (libnccl2) on every node",
                        ok ? "another rank" : "this rank", missing ? missing : nccl_err(d, r));
    if (hyp_coll_broadcast(c, &id, sizeof id, 0, e)) return HYP_EFAIL;
    /* v2171: the plan's ring or tree (gen refuses NCCL's missing ones); NCCL reads it at init */
    int algo = hyp_coll_allreduce_algo(c);
    if (algo == HYP_AR_RING || algo == HYP_AR_TREE) setenv("NCCL_ALGO", algo == HYP_AR_RING ? "Ring" : "Tree", 1);
    if ((r = d->nc.ncclCommInitRank(&d->comm, d->world, id, d->rank)) == ncclInvalidUsage) /* NCCL's usual reason: "Duplicate GPU detected" */
        return hyp_fail(e, HYP_EINPUT, "cuda: ncclCommInitRank (rank %d of %d, GPU %d): %s — the usual cause is two ranks of one node on one GPU: unset HYP_CUDA_DEVICE or give each rank its own, and start at most as many ranks per node as it has GPUs (NCCL_DEBUG=INFO says which)",
                        d->rank, d->world, d->pub.info.ordinal, nccl_err(d, r));
    if (r != ncclSuccess)
        return hyp_fail(e, HYP_EFAIL, "cuda: ncclCommInitRank (rank %d of %d): %s — check NCCL_DEBUG=INFO output", d->rank, d->world, nccl_err(d, r));
    return HYP_OK;
}

static int nccl_type(hyp_dtype t, ncclDataType_t *out) {
    *out = t == HYP_DT_F32 ? ncclFloat32 : t == HYP_DT_BF16 ? ncclBfloat16 : ncclUint8;
    return t <= HYP_DT_BF16;
}

static int coll_check(cu_dev *d, const char *what, hyp_err *e) {
    if (!d->world) return hyp_fail(e, HYP_EINPUT, "cuda: %s before comm_init — call comm_init on every rank first", what);
    if (d->sticky[0]) return hyp_fail(e, HYP_EFAIL, "%s", d->sticky);
    return HYP_OK;
}
#define NC(call, what)                                                                                               \
    do {                                                                                                             \
        ncclResult_t r_ = d->nc.call;                                                                                \
        if (r_ != ncclSuccess) return hyp_fail(e, HYP_EFAIL, "cuda: NCCL %s: %s", what, nccl_err(d, r_));            \
    } while (0)

static int cu_all_reduce(hyp_device *dv, void *buf, size_t n, hyp_dtype t, hyp_redop op, hyp_stream *s, hyp_err *e) {
    cu_dev *d = CD(dv);
    ncclDataType_t nt;
    int crc = coll_check(d, "all_reduce", e);
    if (crc) return crc;
    if (!nccl_type(t, &nt)) return hyp_fail(e, HYP_EINPUT, "cuda: all_reduce of %s — reduce f32 or bf16", hyp_dtype_name(t));
    if (d->world == 1) return HYP_OK;
    note_cstream(d, STREAM(d, s));
    dv->calls++;
    NC(ncclAllReduce(buf, buf, n, nt, op == HYP_RED_MAX ? ncclMax : ncclSum, d->comm, (cudaStream_t)STREAM(d, s)), "all_reduce");
    return HYP_OK;
}
static int cu_reduce_scatter(hyp_device *dv, const void *send, void *recv, size_t n, hyp_dtype t, hyp_stream *s, hyp_err *e) {
    cu_dev *d = CD(dv);
    ncclDataType_t nt;
    int crc = coll_check(d, "reduce_scatter", e);
    if (crc) return crc;
    if (!nccl_type(t, &nt)) return hyp_fail(e, HYP_EINPUT, "cuda: reduce_scatter of %s — reduce f32 or bf16", hyp_dtype_name(t));
    if (d->world == 1) return send == recv ? HYP_OK : cu_d2d(dv, recv, send, n * hyp_dtype_size(t), s, e);
    note_cstream(d, STREAM(d, s));
    dv->calls++;
    NC(ncclReduceScatter(send, recv, n, nt, ncclSum, d->comm, (cudaStream_t)STREAM(d, s)), "reduce_scatter");
    return HYP_OK;
}
static int cu_all_gather(hyp_device *dv, const void *send, void *recv, size_t n, hyp_dtype t, hyp_stream *s, hyp_err *e) {
    cu_dev *d = CD(dv);
    ncclDataType_t nt;
    int crc = coll_check(d, "all_gather", e);
    if (crc) return crc;
    size_t bytes = n * hyp_dtype_size(t);
    if (d->world == 1) return send == recv ? HYP_OK : cu_d2d(dv, recv, send, bytes, s, e);
    if (!nccl_type(t, &nt)) n = bytes; /* fp8: moved as bytes */
    note_cstream(d, STREAM(d, s));
    dv->calls++;
    NC(ncclAllGather(send, recv, n, nt, d->comm, (cudaStream_t)STREAM(d, s)), "all_gather");
    return HYP_OK;
}
static int cu_broadcast(hyp_device *dv, void *buf, size_t n, hyp_dtype t, int root, hyp_stream *s, hyp_err *e) {
    cu_dev *d = CD(dv);
    ncclDataType_t nt;
    int crc = coll_check(d, "broadcast", e);
    if (crc) return crc;
    if (root < 0 || root >= d->world) return hyp_fail(e, HYP_EINPUT, "cuda: broadcast root %d outside 0..%d", root, d->world - 1);
    if (d->world == 1) return HYP_OK;
    if (!nccl_type(t, &nt)) n *= hyp_dtype_size(t);
    note_cstream(d, STREAM(d, s));
    dv->calls++;
    NC(ncclBroadcast(buf, buf, n, nt, root, d->comm, (cudaStream_t)STREAM(d, s)), "broadcast");
    return HYP_OK;
}

static int cu_reduce(hyp_device *dv, void *buf, size_t n, hyp_dtype t, int root, hyp_stream *s, hyp_err *e) {
    cu_dev *d = CD(dv);
    ncclDataType_t nt;
    int crc = coll_check(d, "reduce", e);
    if (crc) return crc;
    if (!nccl_type(t, &nt)) return hyp_fail(e, HYP_EINPUT, "cuda: reduce of %s — reduce f32 or bf16", hyp_dtype_name(t));
    if (root < 0 || root >= d->world) return hyp_fail(e, HYP_EINPUT, "cuda: reduce root %d outside 0..%d", root, d->world - 1);
    if (d->world == 1) return HYP_OK;
    note_cstream(d, STREAM(d, s));
    dv->calls++;
    NC(ncclReduce(buf, buf, n, nt, ncclSum, root, d->comm, (cudaStream_t)STREAM(d, s)), "reduce");
    return HYP_OK;
}

/* ---- v2165 graphs: stream capture in global mode, instantiated once, launched per replay ----- */

static int cu_capture_begin(hyp_device *dv, hyp_stream *s, hyp_err *e) {
    cu_dev *d = CD(dv);
    CU(cuStreamBeginCapture(STREAM(d, s), CU_STREAM_CAPTURE_MODE_GLOBAL), "capture_begin");
    return HYP_OK;
}
static int cu_capture_end(hyp_device *dv, hyp_stream *s, hyp_graph **out, hyp_err *e) {
    cu_dev *d = CD(dv);
    CUgraph g = NULL;
    CUgraphExec x = NULL;
    *out = NULL;
    CU(cuStreamEndCapture(STREAM(d, s), &g), "capture_end");
    CUresult r = d->cu.cuGraphInstantiate(&x, g, 0);
    d->cu.cuGraphDestroy(g); /* the executable graph is independent of it */
    if (r != CUDA_SUCCESS) return cu_fail(d, r, "graph instantiate", e);
    *out = (hyp_graph *)x;
    return HYP_OK;
}
static int cu_graph_launch(hyp_device *dv, hyp_graph *g, hyp_stream *s, hyp_err *e) {
    cu_dev *d = CD(dv);
    if (!g) return hyp_fail(e, HYP_EINPUT, "cuda: graph_launch of a NULL graph");
    dv->calls++;
    CU(cuGraphLaunch((CUgraphExec)g, STREAM(d, s)), "graph_launch");
    return HYP_OK;
}
static void cu_graph_destroy(hyp_device *dv, hyp_graph *g) {
    cu_dev *d = CD(dv);
    if (!g) return;
    d->cu.cuCtxSynchronize(); /* no replay still pending (as mem_free) */
    d->cu.cuGraphExecDestroy((CUgraphExec)g);
}

/* ---- library check (no GPU needed) ---------------------------------------------------------- */

int hyp_dev_cuda_check_libs(char *report, size_t n) {
    const char *names[3] = {"libcuda.so.1", "libcublasLt.so.13", "libnccl.so.2"};
    char paths[3][4200];
    union {
        cu_api cu;
        lt_api lt;
        nccl_api nc;
    } api;
    int bad = 0;
    size_t used = 0;
    report[0] = 0;
    for (int i = 0; i < 3; i++) {
        void *h = open_lib(names[i]);
        const char *missing = !h ? NULL : i == 0 ? load_cu(&api.cu, h) : i == 1 ? load_lt(&api.lt, h) : load_nccl(&api.nc, h);
        bad += !h || missing;
        if (used < n)
            used += (size_t)snprintf(report + used, n - used, "%s: %s%s\n", lib_path(names[i], paths[i], sizeof paths[i]), !h ? "not found" : missing ? "lacks " : "ok, every symbol the device layer uses",
                                     h && missing ? missing : "");
        if (h) dlclose(h);
    }
    return bad;
}

/* ---- open / close --------------------------------------------------------------------------- */

static void cu_close(hyp_device *dv) {
    cu_dev *d = CD(dv);
    if (!d) return;
    if (d->ctx) {
        d->cu.cuCtxSynchronize();
        for (int i = 0; i < d->nplans; i++) free_plan(d, &d->plans[i]);
        for (int i = 0; i < d->nwss; i++) d->cu.cuMemFree(d->wss[i].ws);
        if (d->lt_handle) d->lt.cublasLtDestroy(d->lt_handle);
        if (d->comm) d->nc.ncclCommDestroy(d->comm);
        if (d->def) d->cu.cuStreamDestroy(d->def);
        d->cu.cuDevicePrimaryCtxRelease(d->dev);
    }
    free(d->plans);
    free(d->wss);
    if (d->lt_lib) dlclose(d->lt_lib);
    if (d->nccl_lib) dlclose(d->nccl_lib);
    if (d->lib) dlclose(d->lib);
    free(d);
}

/* The GPU of this process: HYP_CUDA_DEVICE when set; else its node-local rank, from the
 * communicator (MPI_Comm_split_type SHARED: any MPI) or, before one exists, the launchers'
 * local-rank variables; else 0. */
static int local_rank(void) {
    static const char *vars[] = {"HYP_CUDA_DEVICE", "OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID", "LOCAL_RANK"};
    const char *v = getenv(vars[0]);
    if (v && *v) return atoi(v);
    if (hyp_coll_process_local_rank() >= 0) return hyp_coll_process_local_rank();
    for (int i = 1; i < 4; i++)
        if ((v = getenv(vars[i])) && *v) return atoi(v);
    return 0;
}

static int open_dev(cu_dev *d, hyp_err *e) {
    const char *missing;
    if (!(d->lib = open_lib("libcuda.so.1"))) return hyp_fail(e, HYP_EINPUT, NO_DRIVER_MSG);
    if ((missing = load_cu(&d->cu, d->lib)))
        return hyp_fail(e, HYP_EINPUT, "the CUDA driver lacks %s — update the NVIDIA driver (CUDA 13 needs 580 or newer), or use --target cpu or --target sim", missing);
    CUresult r = d->cu.cuInit(0);
    int count = 0;
    if (r == CUDA_SUCCESS) r = d->cu.cuDeviceGetCount(&count);
    if (r != CUDA_SUCCESS || count == 0) {
        const char *name = NULL;
        char why[96] = "the driver sees no device";
        if (r != CUDA_SUCCESS && d->cu.cuGetErrorName(r, &name) == CUDA_SUCCESS && name) snprintf(why, sizeof why, "%s", name);
        else if (r != CUDA_SUCCESS) snprintf(why, sizeof why, "CUresult %d", (int)r);
        return hyp_fail(e, HYP_EINPUT, "no usable CUDA device (%s) — train on this machine with a trainer generated for --target cpu or --target sim", why);
    }
    hyp_device_info *in = &d->pub.info;
    in->ordinal = local_rank() % count;
    int major = 0, minor = 0, sms = 0;
    CU(cuDeviceGet(&d->dev, in->ordinal), "device");
    CU(cuDeviceGetName(in->name, sizeof in->name, d->dev), "device name");
    CU(cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, d->dev), "device attribute");
    CU(cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, d->dev), "device attribute");
    CU(cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, d->dev), "device attribute");
    CU(cuDeviceTotalMem(&in->total_mem, d->dev), "device memory");
    in->sm = major * 10 + minor, in->n_sms = sms;
    CU(cuDevicePrimaryCtxRetain(&d->ctx, d->dev), "context");
    CU(cuCtxSetCurrent(d->ctx), "context");
    CU(cuStreamCreate(&d->def, CU_STREAM_NON_BLOCKING), "default stream");
    return HYP_OK;
}

/* The cuda device's entries (device.h documents each slot). */
static const hyp_device CU_TABLE = {
    .name = "cuda",
    .close = cu_close,
    .mem_alloc = cu_mem_alloc,
    .mem_free = cu_mem_free,
    .host_alloc = cu_host_alloc,
    .host_free = cu_host_free,
    .mem_info = cu_mem_info,
    .h2d = cu_h2d,
    .d2h = cu_d2h,
    .d2d = cu_d2d,
    .memset = cu_memset,
    .h2d_sync = cu_h2d_sync,
    .d2h_sync = cu_d2h_sync,
    .d2d_sync = cu_d2d_sync,
    .memset_sync = cu_memset_sync,
    .module_load = cu_module_load,
    .module_unload = cu_module_unload,
    .launch = cu_launch,
    .tensor_map = cu_tensor_map,
    .stream_create = cu_stream_create,
    .stream_destroy = cu_stream_destroy,
    .stream_synchronize = cu_stream_synchronize,
    .synchronize = cu_synchronize,
    .event_create = cu_event_create,
    .event_destroy = cu_event_destroy,
    .event_record = cu_event_record,
    .event_wait = cu_event_wait,
    .event_synchronize = cu_event_synchronize,
    .event_elapsed_ms = cu_event_elapsed_ms,
    .gemm = cu_gemm,
    .comm_init = cu_comm_init,
    .all_reduce = cu_all_reduce,
    .reduce_scatter = cu_reduce_scatter,
    .all_gather = cu_all_gather,
    .broadcast = cu_broadcast,
    .reduce = cu_reduce,
    .capture_begin = cu_capture_begin,
    .capture_end = cu_capture_end,
    .graph_launch = cu_graph_launch,
    .graph_destroy = cu_graph_destroy,
};

int hyp_dev_cuda_open(hyp_device **out, hyp_err *e) {
    *out = NULL;
    cu_dev *d = calloc(1, sizeof *d);
    if (!d) return hyp_fail(e, HYP_EFAIL, "out of memory");
    int rc = open_dev(d, e);
    if (rc) {
        cu_close(&d->pub);
        return rc;
    }
    hyp_device *p = &d->pub;
    hyp_device_info info = p->info; /* open_dev filled it */
    *p = CU_TABLE;
    p->info = info;
    *out = p;
    return HYP_OK;
}
#endif
