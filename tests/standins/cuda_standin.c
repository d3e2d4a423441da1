/* cuda_standin.c — a strict stand-in for the CUDA driver API (libcuda.so.1) over the kernel
 * simulator, so runtime/device/dev_cuda.c runs its real call sequences on a machine without a GPU
 * (switch: HYP_CUDA_LIBDIR; rules and limits: docs/cuda-standins.md).
 *
 * What it models, each the way the driver behaves:
 * - Modules. cuModuleLoad takes a cubin (or PTX) that gen wrote beside its kernels.json; the image
 *   must be an NVIDIA ELF for this device's SM (else NO_BINARY_FOR_GPU) whose kernel symbols are
 *   exactly those the manifest lists for that cubin (else INVALID_IMAGE); the rendered .cu the
 *   manifest names is compiled by the simulator (runtime/sim) and run in its place.
 * - Memory. Device memory is a memfd mapped twice: the addresses cuMemAlloc returns lie in a
 *   PROT_NONE view (a host read of device memory is a SIGSEGV, as on a customer's GPU it is a
 *   crash or garbage), the stand-in works through a read-write view at a fixed offset. Kernel
 *   pointer parameters (known from the manifest's signature) are translated at launch; a pointer
 *   outside every live allocation and pinned host block is pointed at an inaccessible page, so
 *   the kernel faults (sticky ILLEGAL_ADDRESS) only if it dereferences it, as on hardware.
 * - Streams and events. Every stream is a worker thread that runs its queue in order after a
 *   seeded random delay per operation (HYP_STANDIN_SEED, HYP_STANDIN_DELAY_US), so a missing
 *   event wait or synchronize reads stale data. Copies from or to pageable host memory are
 *   synchronous as on hardware (HtoD stages the source at the call, DtoH waits); pinned memory
 *   (cuMemAllocHost) is read and written when the copy runs.
 * - Launches. Block (1024 threads, 1024 x 1024 x 64) and grid limits, static + dynamic shared
 *   memory against the function's limit (48 KB unless cuFuncSetAttribute raised it, at most the
 *   device's opt-in maximum), the parameter buffer (every parameter the signature declares
 *   present; the values copied at the call, pointers by the signature).
 * - Devices. An H100 (sm_90) or A100 (sm_80) by HYP_STANDIN_SM, HYP_STANDIN_DEVICES of them.
 *
 * It must never accept what the driver would refuse, and never hand out a device address the
 * host can dereference. Exported: the cu* functions dev_cuda.c loads and standin.h's hypsi_*;
 * everything else (the simulator linked in) is hidden. */
#define _GNU_SOURCE
#include <cuda.h>
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "../../kernels/sim/sim_tmap.h"
#include "sim.h"
#include "standin.h"

#define EXPORT __attribute__((visibility("default")))
#define MAX_PARAMS 64
#define ALLOC_ALIGN 256 /* cuMemAlloc's documented minimum alignment */

/* ---- the device ----------------------------------------------------------------------------- */

typedef struct {
    int sm, sms, smem_optin, smem_per_sm, clock_khz, mem_clock_khz, bus_width, l2;
    const char *name;
} dev_spec;
/* H100 SXM5 80GB and A100 SXM4 80GB, from the CUDA programming guide's tables and the devices'
 * cudaGetDeviceProperties. */
static const dev_spec SPEC_H100 = {90, 132, 232448, 233472, 1980000, 2619000, 5120, 52428800,
                                   "NVIDIA H100 80GB HBM3 (Hyperion stand-in)"};
static const dev_spec SPEC_A100 = {80, 108, 166912, 167936, 1410000, 1593000, 5120, 41943040,
                                   "NVIDIA A100-SXM4-80GB (Hyperion stand-in)"};

struct CUctx_st {
    int dev, refs;
};

typedef struct {
    size_t off, n; /* in the arena */
    int dev;
} dblock;

typedef struct {
    char *p;
    size_t n;
} hblock;

static struct {
    pthread_mutex_t mu;
    pthread_cond_t cv; /* any operation completed, any event reached */
    int init;
    dev_spec spec;
    int ndev;
    struct CUctx_st ctx[16];
    int fd;
    char *dbase, *rw; /* the PROT_NONE device view and the read-write view of the same memfd */
    size_t size, used;
    char *poison; /* inaccessible pages wild kernel pointers are sent to */
    dblock *blocks;   /* sorted by offset */
    size_t nblocks, capblocks;
    hblock *pinned;
    size_t npinned, cappinned;
    CUresult sticky; /* an asynchronous fault: every call returns it from then on */
    uint64_t seed;
    unsigned delay_us;
    struct CUstream_st **streams;
    int nstreams;
    struct CUstream_st *legacy; /* the NULL stream */
    struct CUevent_st **events;
    int nevents;
    unsigned stream_ids;
} G = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER, .fd = -1};

static _Thread_local struct CUctx_st *tls_ctx;

#define STANDIN_WHO "hyp cuda stand-in: "
typedef CUresult standin_status;
#include "standin_util.h"

/* The first asynchronous fault; G.mu held. */
static void set_sticky(CUresult r, const char *why) {
    if (G.sticky) return;
    G.sticky = r;
    note("asynchronous fault (sticky, as the driver's): %s", why);
    pthread_cond_broadcast(&G.cv);
}

static uint64_t env_u64(const char *name, uint64_t dflt) {
    const char *v = getenv(name);
    return v && *v ? strtoull(v, NULL, 0) : dflt;
}

/* HYP_STANDIN_COPY_STATS=1: at exit, the asynchronous host copies by kind of host memory (the
 * v2128/v2179 tests check that batch uploads and snapshots come from pinned memory). */
static long copy_stats[2][2]; /* [htod, dtoh][pageable, pinned] */
static void print_copy_stats(void) {
    fprintf(stderr, "cuda standin: async copies: HtoD %ld pinned %ld pageable, DtoH %ld pinned %ld pageable\n",
            copy_stats[0][1], copy_stats[0][0], copy_stats[1][1], copy_stats[1][0]);
}

EXPORT CUresult cuInit(unsigned flags) {
    if (flags) return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&G.mu);
    CUresult r = CUDA_SUCCESS;
    if (!G.init) {
        const char *sm = getenv("HYP_STANDIN_SM");
        if (sm && *sm && strcmp(sm, "90") && strcmp(sm, "80")) {
            r = refuse(CUDA_ERROR_NO_DEVICE, "HYP_STANDIN_SM=%s — use 80 (A100) or 90 (H100)", sm);
            goto out;
        }
        G.spec = sm && !strcmp(sm, "80") ? SPEC_A100 : SPEC_H100;
        G.ndev = (int)env_u64("HYP_STANDIN_DEVICES", 1);
        if (G.ndev < 0 || G.ndev > 16) G.ndev = 16;
        G.seed = env_u64("HYP_STANDIN_SEED", 1);
        if (env_u64("HYP_STANDIN_COPY_STATS", 0)) atexit(print_copy_stats);
        G.delay_us = (unsigned)env_u64("HYP_STANDIN_DELAY_US", 50);
        G.size = (size_t)env_u64("HYP_STANDIN_MEM_MIB", 16384) << 20;
        G.fd = memfd_create("hyp-standin-device-memory", MFD_CLOEXEC);
        if (G.fd < 0 || ftruncate(G.fd, (off_t)G.size)) {
            r = refuse(CUDA_ERROR_OUT_OF_MEMORY, "memfd for %zu MiB of device memory: %s", G.size >> 20, strerror(errno));
            goto out;
        }
        G.dbase = mmap(NULL, G.size, PROT_NONE, MAP_SHARED | MAP_NORESERVE, G.fd, 0);
        G.rw = mmap(NULL, G.size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, G.fd, 0);
        G.poison = mmap(NULL, 1u << 30, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (G.dbase == MAP_FAILED || G.rw == MAP_FAILED || G.poison == MAP_FAILED) {
            r = refuse(CUDA_ERROR_OUT_OF_MEMORY, "mapping device memory: %s", strerror(errno));
            goto out;
        }
        G.init = 1;
    }
out:
    pthread_mutex_unlock(&G.mu);
    return r;
}

#define NEED_INIT() \
    if (!G.init) return CUDA_ERROR_NOT_INITIALIZED
#define NEED_CTX()                                        \
    do {                                                  \
        NEED_INIT();                                      \
        if (!tls_ctx) return CUDA_ERROR_INVALID_CONTEXT;  \
    } while (0)

EXPORT CUresult cuDeviceGetCount(int *n) {
    NEED_INIT();
    if (!n) return CUDA_ERROR_INVALID_VALUE;
    *n = G.ndev;
    return CUDA_SUCCESS;
}
EXPORT CUresult cuDeviceGet(CUdevice *d, int ordinal) {
    NEED_INIT();
    if (!d) return CUDA_ERROR_INVALID_VALUE;
    if (ordinal < 0 || ordinal >= G.ndev) return refuse(CUDA_ERROR_INVALID_DEVICE, "cuDeviceGet(%d) of %d devices", ordinal, G.ndev);
    *d = ordinal;
    return CUDA_SUCCESS;
}
static int bad_dev(CUdevice d) { return d < 0 || d >= G.ndev; }
EXPORT CUresult cuDeviceGetName(char *name, int len, CUdevice d) {
    NEED_INIT();
    if (!name || len <= 0) return CUDA_ERROR_INVALID_VALUE;
    if (bad_dev(d)) return CUDA_ERROR_INVALID_DEVICE;
    snprintf(name, (size_t)len, "%s", G.spec.name);
    return CUDA_SUCCESS;
}
EXPORT CUresult cuDeviceTotalMem(size_t *bytes, CUdevice d) {
    NEED_INIT();
    if (!bytes) return CUDA_ERROR_INVALID_VALUE;
    if (bad_dev(d)) return CUDA_ERROR_INVALID_DEVICE;
    *bytes = G.size;
    return CUDA_SUCCESS;
}
EXPORT CUresult cuDeviceGetAttribute(int *v, CUdevice_attribute a, CUdevice d) {
    NEED_INIT();
    if (!v) return CUDA_ERROR_INVALID_VALUE;
    if (bad_dev(d)) return CUDA_ERROR_INVALID_DEVICE;
    const dev_spec *s = &G.spec;
    switch (a) {
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: *v = s->sm / 10; break;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: *v = s->sm % 10; break;
    case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: *v = s->sms; break;
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK: *v = 1024; break;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X: *v = 1024; break;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y: *v = 1024; break;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z: *v = 64; break;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X: *v = 2147483647; break;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y: *v = 65535; break;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z: *v = 65535; break;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK: *v = 49152; break;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN: *v = s->smem_optin; break;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR: *v = s->smem_per_sm; break;
    case CU_DEVICE_ATTRIBUTE_WARP_SIZE: *v = 32; break;
    case CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK: *v = 65536; break;
    case CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR: *v = 65536; break;
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR: *v = s->sm == 90 ? 2048 : 2048; break;
    case CU_DEVICE_ATTRIBUTE_CLOCK_RATE: *v = s->clock_khz; break;
    case CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE: *v = s->mem_clock_khz; break;
    case CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH: *v = s->bus_width; break;
    case CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE: *v = s->l2; break;
    case CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING: *v = 1; break;
    case CU_DEVICE_ATTRIBUTE_CONCURRENT_KERNELS: *v = 1; break;
    case CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT: *v = 2; break;
    case CU_DEVICE_ATTRIBUTE_ECC_ENABLED: *v = 1; break;
    case CU_DEVICE_ATTRIBUTE_PCI_BUS_ID: *v = 0x18 + d; break;
    case CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID: *v = 0; break;
    case CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID: *v = 0; break;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_MODE: *v = CU_COMPUTEMODE_DEFAULT; break;
    default: return refuse(CUDA_ERROR_INVALID_VALUE, "cuDeviceGetAttribute(%d): an attribute the stand-in does not model — add it to cuda_standin.c", (int)a);
    }
    return CUDA_SUCCESS;
}

static struct CUstream_st *stream_new(unsigned flags, struct CUctx_st *ctx);
EXPORT CUresult cuDevicePrimaryCtxRetain(CUcontext *c, CUdevice d) {
    NEED_INIT();
    if (!c) return CUDA_ERROR_INVALID_VALUE;
    if (bad_dev(d)) return CUDA_ERROR_INVALID_DEVICE;
    pthread_mutex_lock(&G.mu);
    G.ctx[d].dev = d;
    G.ctx[d].refs++;
    pthread_mutex_unlock(&G.mu);
    if (!G.legacy && !(G.legacy = stream_new(0, &G.ctx[d]))) return CUDA_ERROR_OUT_OF_MEMORY;
    *c = &G.ctx[d];
    return CUDA_SUCCESS;
}
EXPORT CUresult cuDevicePrimaryCtxRelease(CUdevice d) {
    NEED_INIT();
    if (bad_dev(d)) return CUDA_ERROR_INVALID_DEVICE;
    pthread_mutex_lock(&G.mu);
    CUresult r = G.ctx[d].refs > 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_CONTEXT;
    if (G.ctx[d].refs > 0) G.ctx[d].refs--;
    pthread_mutex_unlock(&G.mu);
    if (tls_ctx == &G.ctx[d] && !G.ctx[d].refs) tls_ctx = NULL;
    return r;
}
EXPORT CUresult cuCtxSetCurrent(CUcontext c) {
    NEED_INIT();
    if (c && (c < G.ctx || c >= G.ctx + G.ndev || !c->refs)) return CUDA_ERROR_INVALID_CONTEXT;
    tls_ctx = c;
    return CUDA_SUCCESS;
}

/* ---- memory --------------------------------------------------------------------------------- */

/* The live block holding device bytes [p, p + n) of the current context (n == 0: p inside or at
 * the end of one); G.mu held. */
static dblock *find_block(CUdeviceptr p, size_t n) {
    if (p < (CUdeviceptr)(uintptr_t)G.dbase || p >= (CUdeviceptr)(uintptr_t)(G.dbase + G.size)) return NULL;
    size_t off = (size_t)(p - (CUdeviceptr)(uintptr_t)G.dbase), lo = 0, hi = G.nblocks;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (G.blocks[mid].off <= off) lo = mid + 1;
        else hi = mid;
    }
    if (!lo) return NULL;
    dblock *b = &G.blocks[lo - 1];
    if (off - b->off > b->n || n > b->n - (off - b->off)) return NULL;
    if (off - b->off == b->n && n) return NULL;
    if (!tls_ctx || b->dev != tls_ctx->dev) return NULL;
    return b;
}
static char *rw_of(CUdeviceptr p) { return G.rw + (p - (CUdeviceptr)(uintptr_t)G.dbase); }

/* Is [p, p + n) inside one pinned host block? G.mu held. */
static int is_pinned(const void *p, size_t n) {
    const char *q = p;
    for (size_t i = 0; i < G.npinned; i++)
        if (q >= G.pinned[i].p && q <= G.pinned[i].p + G.pinned[i].n && n <= (size_t)(G.pinned[i].p + G.pinned[i].n - q)) return 1;
    return 0;
}
static int in_device_range(const void *p) { return (const char *)p >= G.dbase && (const char *)p < G.dbase + G.size; }

static CUresult cap_refuse(struct CUstream_st *s, CUresult r, const char *what);
EXPORT CUresult cuMemAlloc(CUdeviceptr *out, size_t n) {
    NEED_CTX();
    if (!out) return CUDA_ERROR_INVALID_VALUE;
    if (!n) return refuse(CUDA_ERROR_INVALID_VALUE, "cuMemAlloc of 0 bytes");
    size_t need = (n + ALLOC_ALIGN - 1) & ~(size_t)(ALLOC_ALIGN - 1);
    pthread_mutex_lock(&G.mu);
    CUresult r = G.sticky;
    if (!r) r = cap_refuse(NULL, CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, "cuMemAlloc");
    if (r) goto out;
    size_t at = ALLOC_ALIGN, i = 0; /* offset 0 is never handed out */
    for (; i < G.nblocks; i++) {
        if (G.blocks[i].off >= at + need) break;
        size_t end = G.blocks[i].off + ((G.blocks[i].n + ALLOC_ALIGN - 1) & ~(size_t)(ALLOC_ALIGN - 1));
        if (end > at) at = end;
    }
    if (at + need > G.size) {
        r = CUDA_ERROR_OUT_OF_MEMORY;
        goto out;
    }
    if (G.nblocks == G.capblocks) {
        size_t cap = G.capblocks ? 2 * G.capblocks : 256;
        dblock *nb = realloc(G.blocks, cap * sizeof *nb);
        if (!nb) {
            r = CUDA_ERROR_OUT_OF_MEMORY;
            goto out;
        }
        G.blocks = nb, G.capblocks = cap;
    }
    memmove(G.blocks + i + 1, G.blocks + i, (G.nblocks - i) * sizeof *G.blocks);
    G.blocks[i] = (dblock){at, n, tls_ctx->dev};
    G.nblocks++;
    G.used += need;
    memset(G.rw + at, 0xFF, need); /* fresh device memory holds anything: NaN bytes here */
    *out = (CUdeviceptr)(uintptr_t)(G.dbase + at);
out:
    pthread_mutex_unlock(&G.mu);
    return r;
}

static void wait_idle_locked(void);
EXPORT CUresult cuMemFree(CUdeviceptr p) {
    NEED_CTX();
    pthread_mutex_lock(&G.mu);
    CUresult rc = cap_refuse(NULL, CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, "cuMemFree");
    if (rc) {
        pthread_mutex_unlock(&G.mu);
        return rc;
    }
    wait_idle_locked(); /* cuMemFree waits for work that may still use the block */
    dblock *b = find_block(p, 0);
    CUresult r = CUDA_SUCCESS;
    if (!b || (CUdeviceptr)(uintptr_t)(G.dbase + b->off) != p) {
        r = refuse(CUDA_ERROR_INVALID_VALUE, "cuMemFree(%#llx): not an address cuMemAlloc returned (or freed twice)", (unsigned long long)p);
    } else {
        size_t span = (b->n + ALLOC_ALIGN - 1) & ~(size_t)(ALLOC_ALIGN - 1);
        fallocate(G.fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)b->off, (off_t)span);
        G.used -= span;
        size_t i = (size_t)(b - G.blocks);
        memmove(G.blocks + i, G.blocks + i + 1, (G.nblocks - i - 1) * sizeof *G.blocks);
        G.nblocks--;
        if (G.sticky) r = G.sticky;
    }
    pthread_mutex_unlock(&G.mu);
    return r;
}

EXPORT CUresult cuMemGetInfo(size_t *fr, size_t *tot) {
    NEED_CTX();
    if (!fr || !tot) return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&G.mu);
    *tot = G.size, *fr = G.size - G.used;
    pthread_mutex_unlock(&G.mu);
    return CUDA_SUCCESS;
}

EXPORT CUresult cuMemAllocHost(void **p, size_t n) {
    NEED_CTX();
    if (!p || !n) return CUDA_ERROR_INVALID_VALUE;
    char *q = aligned_alloc(4096, (n + 4095) & ~(size_t)4095);
    if (!q) return CUDA_ERROR_OUT_OF_MEMORY;
    pthread_mutex_lock(&G.mu);
    if (G.npinned == G.cappinned) {
        size_t cap = G.cappinned ? 2 * G.cappinned : 64;
        hblock *nh = realloc(G.pinned, cap * sizeof *nh);
        if (!nh) {
            pthread_mutex_unlock(&G.mu);
            free(q);
            return CUDA_ERROR_OUT_OF_MEMORY;
        }
        G.pinned = nh, G.cappinned = cap;
    }
    G.pinned[G.npinned++] = (hblock){q, n};
    pthread_mutex_unlock(&G.mu);
    *p = q;
    return CUDA_SUCCESS;
}
EXPORT CUresult cuMemFreeHost(void *p) {
    NEED_CTX();
    pthread_mutex_lock(&G.mu);
    for (size_t i = 0; i < G.npinned; i++)
        if (G.pinned[i].p == p) {
            G.pinned[i] = G.pinned[--G.npinned];
            free(p);
            pthread_mutex_unlock(&G.mu);
            return CUDA_SUCCESS;
        }
    pthread_mutex_unlock(&G.mu);
    return refuse(CUDA_ERROR_INVALID_VALUE, "cuMemFreeHost(%p): not a pointer cuMemAllocHost returned", p);
}

/* ---- streams: one worker thread each -------------------------------------------------------- */

typedef struct op {
    void (*fn)(void *arg);
    void *arg;
    void (*free_arg)(void *arg);
    struct op *next;
} op;

struct CUstream_st {
    pthread_t th;
    unsigned id, flags;
    op *head, *tail;
    uint64_t enq, done; /* operations enqueued and finished */
    int quit;
    uint64_t rng;
    struct CUctx_st *ctx; /* current on its worker, so work run there (hypsi_enqueue) sees the context */
    struct CUgraph_st *cap; /* capturing (cuStreamBeginCapture): operations are recorded here, not run */
    char cap_bad[300];      /* why the capture was invalidated ("" while valid) */
};

/* A captured graph: its operations in capture order (shared by the graph and its instantiations,
 * freed with the last; the operations' free_arg runs then). */
typedef struct {
    op *head, *tail;
    int n, refs;
} gnodes;
struct CUgraph_st {
    gnodes *g;
};
struct CUgraphExec_st {
    gnodes *g;
};

struct CUevent_st {
    unsigned flags;
    uint64_t recorded, reached; /* records so far; the latest record that ran */
    struct timespec t;
    int refs; /* the handle and each pending operation that names it */
};

static uint64_t rng_next(uint64_t *s) { /* xorshift64* */
    *s ^= *s >> 12, *s ^= *s << 25, *s ^= *s >> 27;
    return *s * 2685821657736338717ull;
}

static void *worker(void *sv) {
    struct CUstream_st *s = sv;
    tls_ctx = s->ctx;
    pthread_mutex_lock(&G.mu);
    for (;;) {
        while (!s->head && !s->quit) pthread_cond_wait(&G.cv, &G.mu);
        if (!s->head) break;
        op *o = s->head;
        unsigned delay = G.delay_us ? (unsigned)(rng_next(&s->rng) % (G.delay_us + 1)) : 0;
        pthread_mutex_unlock(&G.mu);
        if (delay) usleep(delay);
        o->fn(o->arg); /* takes G.mu itself when it needs it */
        if (o->free_arg) o->free_arg(o->arg);
        pthread_mutex_lock(&G.mu);
        s->head = o->next;
        if (!s->head) s->tail = NULL;
        s->done++;
        free(o);
        pthread_cond_broadcast(&G.cv);
    }
    pthread_mutex_unlock(&G.mu);
    return NULL;
}

static struct CUstream_st *stream_new(unsigned flags, struct CUctx_st *ctx) {
    struct CUstream_st *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    s->ctx = ctx;
    pthread_mutex_lock(&G.mu);
    struct CUstream_st **ns = realloc(G.streams, sizeof *ns * (size_t)(G.nstreams + 1));
    if (!ns) {
        pthread_mutex_unlock(&G.mu);
        free(s);
        return NULL;
    }
    G.streams = ns;
    s->id = ++G.stream_ids, s->flags = flags;
    s->rng = (G.seed ^ (0x9E3779B97F4A7C15ull * s->id)) | 1;
    if (pthread_create(&s->th, NULL, worker, s)) {
        pthread_mutex_unlock(&G.mu);
        free(s);
        return NULL;
    }
    G.streams[G.nstreams++] = s;
    pthread_mutex_unlock(&G.mu);
    return s;
}

/* The stream a handle names (NULL and the legacy/per-thread handles: the NULL stream); NULL when
 * it names no live stream. G.mu held. */
static struct CUstream_st *stream_of(CUstream h) {
    if (!h || h == CU_STREAM_LEGACY || h == CU_STREAM_PER_THREAD) return G.legacy;
    for (int i = 0; i < G.nstreams; i++)
        if (G.streams[i] == h) return h;
    return NULL;
}

static void push_op(struct CUstream_st *s, op *o) {
    if (s->tail) s->tail->next = o;
    else s->head = o;
    s->tail = o;
    s->enq++;
    pthread_cond_broadcast(&G.cv);
}

/* The legacy NULL stream's implicit ordering with blocking streams (created without
 * CU_STREAM_NON_BLOCKING): work on it waits for everything enqueued before on them, and theirs
 * waits for everything enqueued before on it. */
typedef struct {
    struct CUstream_st *s;
    uint64_t upto;
} stream_wait;
static void run_stream_wait(void *a) {
    stream_wait *w = a;
    pthread_mutex_lock(&G.mu);
    while (w->s->done < w->upto) pthread_cond_wait(&G.cv, &G.mu);
    pthread_mutex_unlock(&G.mu);
}
static int add_op(struct CUstream_st *s, void (*fn)(void *), void *arg, void (*free_arg)(void *));
static int implicit_waits(struct CUstream_st *s) {
    struct CUstream_st *others[64];
    int n = 0;
    if (s == G.legacy) {
        for (int i = 0; i < G.nstreams && n < 64; i++)
            if (G.streams[i] != s && !(G.streams[i]->flags & CU_STREAM_NON_BLOCKING) && G.streams[i]->enq > G.streams[i]->done) others[n++] = G.streams[i];
    } else if (!(s->flags & CU_STREAM_NON_BLOCKING) && G.legacy && G.legacy->enq > G.legacy->done) {
        others[n++] = G.legacy;
    }
    for (int i = 0; i < n; i++) {
        op *o = calloc(1, sizeof *o);
        stream_wait *w = malloc(sizeof *w);
        if (!o || !w) return free(o), free(w), -1;
        *w = (stream_wait){others[i], others[i]->enq};
        o->fn = run_stream_wait, o->arg = w, o->free_arg = free;
        push_op(s, o);
    }
    return 0;
}

/* Appends fn(arg) to s (a capturing stream: to its graph); G.mu held. */
static int add_op(struct CUstream_st *s, void (*fn)(void *), void *arg, void (*free_arg)(void *)) {
    op *o = calloc(1, sizeof *o);
    if (o && s->cap) {
        gnodes *g = s->cap->g;
        o->fn = fn, o->arg = arg, o->free_arg = free_arg;
        if (g->tail) g->tail->next = o;
        else g->head = o;
        g->tail = o, g->n++;
        return 0;
    }
    if (!o || implicit_waits(s)) return free(o), -1;
    o->fn = fn, o->arg = arg, o->free_arg = free_arg;
    push_op(s, o);
    return 0;
}

static void wait_stream_locked(struct CUstream_st *s, uint64_t upto) {
    while (s->done < upto) pthread_cond_wait(&G.cv, &G.mu);
}
static void wait_idle_locked(void) {
    for (int i = 0; i < G.nstreams; i++) wait_stream_locked(G.streams[i], G.streams[i]->enq);
}

/* Stream capture in global mode (CUDA Programming Guide, "CUDA Graphs: Prohibited and Unhandled
 * Operations"; cuStreamBeginCapture's mode): while a stream captures, a call that would
 * synchronize with it or that is "potentially unsafe" (memory allocation, context
 * synchronization, a copy with pageable host memory) is refused with
 * CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED and invalidates the capture (cuStreamEndCapture then
 * returns CUDA_ERROR_STREAM_CAPTURE_INVALIDATED). s names the stream concerned (NULL: every
 * capture). Returns CUDA_SUCCESS when nothing captures. G.mu held. */
static CUresult cap_refuse(struct CUstream_st *s, CUresult r, const char *what) {
    int hit = 0;
    for (int i = 0; i < G.nstreams; i++) {
        struct CUstream_st *t = G.streams[i];
        if (!t->cap || (s && t != s)) continue;
        hit = 1;
        if (!t->cap_bad[0]) snprintf(t->cap_bad, sizeof t->cap_bad, "%s", what);
    }
    return hit ? refuse(r, "%s while a stream captures a graph (global mode): refused, and the capture is invalidated", what) : CUDA_SUCCESS;
}

EXPORT CUresult cuStreamCreate(CUstream *out, unsigned flags) {
    NEED_CTX();
    if (!out || flags & ~(unsigned)CU_STREAM_NON_BLOCKING) return CUDA_ERROR_INVALID_VALUE;
    struct CUstream_st *s = stream_new(flags, tls_ctx);
    if (!s) return CUDA_ERROR_OUT_OF_MEMORY;
    *out = s;
    return CUDA_SUCCESS;
}
EXPORT CUresult cuStreamDestroy(CUstream h) {
    NEED_CTX();
    pthread_mutex_lock(&G.mu);
    struct CUstream_st *s = h ? stream_of(h) : NULL;
    if (!s || s == G.legacy) {
        pthread_mutex_unlock(&G.mu);
        return refuse(CUDA_ERROR_INVALID_HANDLE, "cuStreamDestroy(%p): not a live stream", (void *)h);
    }
    for (int i = 0; i < G.nstreams; i++)
        if (G.streams[i] == s) G.streams[i] = G.streams[--G.nstreams];
    s->quit = 1; /* its pending work still runs (the driver destroys a stream once it is done) */
    pthread_cond_broadcast(&G.cv);
    pthread_mutex_unlock(&G.mu);
    pthread_join(s->th, NULL);
    free(s);
    return CUDA_SUCCESS;
}
EXPORT CUresult cuStreamSynchronize(CUstream h) {
    NEED_CTX();
    pthread_mutex_lock(&G.mu);
    struct CUstream_st *s = stream_of(h);
    CUresult r = CUDA_SUCCESS;
    if (!s) r = refuse(CUDA_ERROR_INVALID_HANDLE, "cuStreamSynchronize(%p): not a live stream", (void *)h);
    else if ((r = cap_refuse(s == G.legacy ? NULL : s, CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, "cuStreamSynchronize"))) {
    } else {
        if (s == G.legacy) wait_idle_locked(); /* the NULL stream synchronizes with blocking streams */
        wait_stream_locked(s, s->enq);
        r = G.sticky;
    }
    pthread_mutex_unlock(&G.mu);
    return r;
}
/* cuStreamQuery: CUDA_SUCCESS when everything enqueued on the stream has run, CUDA_ERROR_NOT_READY
 * while some has not (what a poll of NCCL's asynchronous errors waits with). */
EXPORT CUresult cuStreamQuery(CUstream h) {
    NEED_CTX();
    pthread_mutex_lock(&G.mu);
    struct CUstream_st *s = stream_of(h);
    CUresult r = !s ? refuse(CUDA_ERROR_INVALID_HANDLE, "cuStreamQuery(%p): not a live stream", (void *)h)
               : s->cap ? cap_refuse(s, CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, "cuStreamQuery of a capturing stream")
               : G.sticky ? G.sticky : s->done < s->enq ? CUDA_ERROR_NOT_READY : CUDA_SUCCESS;
    pthread_mutex_unlock(&G.mu);
    return r;
}
EXPORT CUresult cuCtxSynchronize(void) {
    NEED_CTX();
    pthread_mutex_lock(&G.mu);
    CUresult r = cap_refuse(NULL, CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, "cuCtxSynchronize");
    if (r) {
        pthread_mutex_unlock(&G.mu);
        return r;
    }
    wait_idle_locked();
    r = G.sticky;
    pthread_mutex_unlock(&G.mu);
    return r;
}

/* ---- events --------------------------------------------------------------------------------- */

static int event_live(struct CUevent_st *e) {
    for (int i = 0; i < G.nevents; i++)
        if (G.events[i] == e) return 1;
    return 0;
}
static void event_unref(struct CUevent_st *e) { /* G.mu held */
    if (--e->refs == 0) free(e);
}

EXPORT CUresult cuEventCreate(CUevent *out, unsigned flags) {
    NEED_CTX();
    if (!out || flags & ~(unsigned)(CU_EVENT_BLOCKING_SYNC | CU_EVENT_DISABLE_TIMING | CU_EVENT_INTERPROCESS)) return CUDA_ERROR_INVALID_VALUE;
    struct CUevent_st *e = calloc(1, sizeof *e);
    if (!e) return CUDA_ERROR_OUT_OF_MEMORY;
    e->flags = flags, e->refs = 1;
    pthread_mutex_lock(&G.mu);
    struct CUevent_st **ne = realloc(G.events, sizeof *ne * (size_t)(G.nevents + 1));
    if (!ne) {
        pthread_mutex_unlock(&G.mu);
        free(e);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    G.events = ne, G.events[G.nevents++] = e;
    pthread_mutex_unlock(&G.mu);
    *out = e;
    return CUDA_SUCCESS;
}
EXPORT CUresult cuEventDestroy(CUevent e) {
    NEED_CTX();
    pthread_mutex_lock(&G.mu);
    CUresult r = CUDA_SUCCESS;
    if (!e || !event_live(e)) r = refuse(CUDA_ERROR_INVALID_HANDLE, "cuEventDestroy(%p): not a live event", (void *)e);
    else {
        for (int i = 0; i < G.nevents; i++)
            if (G.events[i] == e) G.events[i] = G.events[--G.nevents];
        event_unref(e); /* pending records and waits keep it until they ran */
    }
    pthread_mutex_unlock(&G.mu);
    return r;
}

typedef struct {
    struct CUevent_st *e;
    uint64_t gen;
} ev_op;
static void run_record(void *a) {
    ev_op *o = a;
    pthread_mutex_lock(&G.mu);
    clock_gettime(CLOCK_MONOTONIC, &o->e->t);
    if (o->gen > o->e->reached) o->e->reached = o->gen;
    pthread_cond_broadcast(&G.cv);
    pthread_mutex_unlock(&G.mu);
}
static void run_event_wait(void *a) {
    ev_op *o = a;
    pthread_mutex_lock(&G.mu);
    while (o->e->reached < o->gen) pthread_cond_wait(&G.cv, &G.mu);
    pthread_mutex_unlock(&G.mu);
}
static void free_ev_op(void *a) {
    ev_op *o = a;
    pthread_mutex_lock(&G.mu);
    event_unref(o->e);
    pthread_mutex_unlock(&G.mu);
    free(o);
}

EXPORT CUresult cuEventRecord(CUevent e, CUstream h) {
    NEED_CTX();
    pthread_mutex_lock(&G.mu);
    struct CUstream_st *s = stream_of(h);
    CUresult r = G.sticky;
    ev_op *o = NULL;
    if (!r && (!e || !event_live(e))) r = refuse(CUDA_ERROR_INVALID_HANDLE, "cuEventRecord(%p): not a live event", (void *)e);
    else if (!r && !s) r = refuse(CUDA_ERROR_INVALID_HANDLE, "cuEventRecord: %p is not a live stream", (void *)h);
    else if (!r && s->cap) r = cap_refuse(s, CUDA_ERROR_NOT_SUPPORTED, "cuEventRecord on a capturing stream (the stand-in captures no event nodes)");
    else if (!r && !(o = malloc(sizeof *o))) r = CUDA_ERROR_OUT_OF_MEMORY;
    if (!r) {
        *o = (ev_op){e, ++e->recorded};
        e->refs++;
        if (add_op(s, run_record, o, free_ev_op)) e->refs--, free(o), r = CUDA_ERROR_OUT_OF_MEMORY;
    }
    pthread_mutex_unlock(&G.mu);
    return r;
}
EXPORT CUresult cuStreamWaitEvent(CUstream h, CUevent e, unsigned flags) {
    NEED_CTX();
    if (flags) return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&G.mu);
    struct CUstream_st *s = stream_of(h);
    CUresult r = G.sticky;
    ev_op *o = NULL;
    if (!r && (!e || !event_live(e))) r = refuse(CUDA_ERROR_INVALID_HANDLE, "cuStreamWaitEvent: %p is not a live event", (void *)e);
    else if (!r && !s) r = refuse(CUDA_ERROR_INVALID_HANDLE, "cuStreamWaitEvent: %p is not a live stream", (void *)h);
    else if (!r && s->cap) r = cap_refuse(s, CUDA_ERROR_NOT_SUPPORTED, "cuStreamWaitEvent on a capturing stream (the stand-in captures no cross-stream dependencies)");
    else if (!r && e->recorded) { /* an event never recorded: nothing to wait for */
        if (!(o = malloc(sizeof *o))) r = CUDA_ERROR_OUT_OF_MEMORY;
        else {
            *o = (ev_op){e, e->recorded};
            e->refs++;
            if (add_op(s, run_event_wait, o, free_ev_op)) e->refs--, free(o), r = CUDA_ERROR_OUT_OF_MEMORY;
        }
    }
    pthread_mutex_unlock(&G.mu);
    return r;
}
EXPORT CUresult cuEventSynchronize(CUevent e) {
    NEED_CTX();
    pthread_mutex_lock(&G.mu);
    CUresult r = CUDA_SUCCESS;
    if (!e || !event_live(e)) r = refuse(CUDA_ERROR_INVALID_HANDLE, "cuEventSynchronize(%p): not a live event", (void *)e);
    else {
        uint64_t want = e->recorded;
        while (e->reached < want) pthread_cond_wait(&G.cv, &G.mu);
        r = G.sticky;
    }
    pthread_mutex_unlock(&G.mu);
    return r;
}
/* API "cuEventQuery": CUDA_SUCCESS once the work before the latest record ran (or never recorded),
 * CUDA_ERROR_NOT_READY before; a sticky error once one happened */
EXPORT CUresult cuEventQuery(CUevent e) {
    NEED_CTX();
    pthread_mutex_lock(&G.mu);
    CUresult r = CUDA_SUCCESS;
    if (!e || !event_live(e)) r = refuse(CUDA_ERROR_INVALID_HANDLE, "cuEventQuery(%p): not a live event", (void *)e);
    else if (G.sticky) r = G.sticky;
    else if (e->reached < e->recorded) r = CUDA_ERROR_NOT_READY;
    pthread_mutex_unlock(&G.mu);
    return r;
}
EXPORT CUresult cuEventElapsedTime(float *ms, CUevent a, CUevent b) {
    NEED_CTX();
    if (!ms) return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&G.mu);
    CUresult r = CUDA_SUCCESS;
    if (!a || !b || !event_live(a) || !event_live(b)) r = refuse(CUDA_ERROR_INVALID_HANDLE, "cuEventElapsedTime: not a live event");
    else if ((a->flags | b->flags) & CU_EVENT_DISABLE_TIMING) r = refuse(CUDA_ERROR_INVALID_HANDLE, "cuEventElapsedTime: an event created with CU_EVENT_DISABLE_TIMING");
    else if (!a->recorded || !b->recorded) r = refuse(CUDA_ERROR_INVALID_HANDLE, "cuEventElapsedTime: an event never recorded");
    else if (a->reached < a->recorded || b->reached < b->recorded) r = CUDA_ERROR_NOT_READY;
    else *ms = (float)((b->t.tv_sec - a->t.tv_sec) * 1e3 + (b->t.tv_nsec - a->t.tv_nsec) * 1e-6);
    pthread_mutex_unlock(&G.mu);
    return r;
}

/* ---- copies --------------------------------------------------------------------------------- */

typedef struct {
    char *dst;
    const char *src;
    size_t n;
    int byte; /* memset when >= 0 */
    char *staged;
} copy_op;
static void run_copy(void *a) {
    copy_op *c = a;
    if (c->byte >= 0) memset(c->dst, c->byte, c->n);
    else memmove(c->dst, c->src, c->n);
}
static void free_copy(void *a) {
    free(((copy_op *)a)->staged);
    free(a);
}

/* Enqueues a copy (byte < 0) or memset; `sync_after` waits for it (a DtoH to pageable memory). */
static CUresult enqueue_copy(CUstream h, char *dst, const char *src, size_t n, int byte, int stage, int sync_after) {
    struct CUstream_st *s = stream_of(h);
    if (G.sticky) return G.sticky;
    if (!s) return refuse(CUDA_ERROR_INVALID_HANDLE, "a copy on %p, not a live stream", (void *)h);
    if (!n) return CUDA_SUCCESS;
    if (s->cap && (stage || sync_after)) /* the driver copies pageable memory at the call, or waits */
        return cap_refuse(s, CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, "a copy with pageable host memory on a capturing stream");
    copy_op *c = calloc(1, sizeof *c);
    if (!c) return CUDA_ERROR_OUT_OF_MEMORY;
    *c = (copy_op){dst, src, n, byte, NULL};
    if (stage) { /* pageable source: the driver copies it to a staging buffer before returning */
        if (!(c->staged = malloc(n))) return free(c), CUDA_ERROR_OUT_OF_MEMORY;
        memcpy(c->staged, src, n);
        c->src = c->staged;
    }
    if (add_op(s, run_copy, c, free_copy)) return free_copy(c), CUDA_ERROR_OUT_OF_MEMORY;
    if (sync_after) wait_stream_locked(s, s->enq);
    return G.sticky;
}

static CUresult check_dev(CUdeviceptr p, size_t n, const char *who) {
    if (!n) return CUDA_SUCCESS;
    if (!find_block(p, n))
        return refuse(CUDA_ERROR_INVALID_VALUE, "%s: device range %#llx + %zu bytes is not inside one live cuMemAlloc block of this context",
                      who, (unsigned long long)p, n);
    return CUDA_SUCCESS;
}
static CUresult check_host(const void *p, size_t n, const char *who) {
    if (!n) return CUDA_SUCCESS;
    if (!p) return refuse(CUDA_ERROR_INVALID_VALUE, "%s: NULL host pointer", who);
    if (in_device_range(p) || ((const char *)p >= G.rw && (const char *)p < G.rw + G.size))
        return refuse(CUDA_ERROR_INVALID_VALUE, "%s: %p is device memory, passed as a host pointer", who, p);
    return CUDA_SUCCESS;
}

EXPORT CUresult cuMemcpyHtoDAsync(CUdeviceptr dst, const void *src, size_t n, CUstream h) {
    NEED_CTX();
    pthread_mutex_lock(&G.mu);
    CUresult r = check_dev(dst, n, "cuMemcpyHtoDAsync destination");
    if (!r) r = check_host(src, n, "cuMemcpyHtoDAsync source");
    if (!r) copy_stats[0][is_pinned(src, n)]++;
    if (!r) r = enqueue_copy(h, n ? rw_of(dst) : NULL, src, n, -1, !is_pinned(src, n), 0);
    pthread_mutex_unlock(&G.mu);
    return r;
}
EXPORT CUresult cuMemcpyDtoHAsync(void *dst, CUdeviceptr src, size_t n, CUstream h) {
    NEED_CTX();
    pthread_mutex_lock(&G.mu);
    CUresult r = check_dev(src, n, "cuMemcpyDtoHAsync source");
    if (!r) r = check_host(dst, n, "cuMemcpyDtoHAsync destination");
    if (!r) copy_stats[1][is_pinned(dst, n)]++;
    if (!r) r = enqueue_copy(h, dst, n ? rw_of(src) : NULL, n, -1, 0, !is_pinned(dst, n));
    pthread_mutex_unlock(&G.mu);
    return r;
}
EXPORT CUresult cuMemcpyDtoDAsync(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream h) {
    NEED_CTX();
    pthread_mutex_lock(&G.mu);
    CUresult r = check_dev(dst, n, "cuMemcpyDtoDAsync destination");
    if (!r) r = check_dev(src, n, "cuMemcpyDtoDAsync source");
    if (!r) r = enqueue_copy(h, n ? rw_of(dst) : NULL, n ? rw_of(src) : NULL, n, -1, 0, 0);
    pthread_mutex_unlock(&G.mu);
    return r;
}
EXPORT CUresult cuMemsetD8Async(CUdeviceptr dst, unsigned char byte, size_t n, CUstream h) {
    NEED_CTX();
    pthread_mutex_lock(&G.mu);
    CUresult r = check_dev(dst, n, "cuMemsetD8Async destination");
    if (!r) r = enqueue_copy(h, n ? rw_of(dst) : NULL, NULL, n, byte, 0, 0);
    pthread_mutex_unlock(&G.mu);
    return r;
}

/* ---- modules -------------------------------------------------------------------------------- */

typedef struct {
    char name[128];
    int nparams;
    unsigned short size[MAX_PARAMS], off[MAX_PARAMS];
    unsigned char ptr[MAX_PARAMS];
    int static_smem;
    unsigned regs, max_threads; /* 0: unknown (PTX) / no __launch_bounds__ */
} kdecl;

struct CUmod_st {
    hyp_sim_module *sim;
    kdecl *k;
    int nk;
    struct CUfunc_st **fns;
    int nfns;
    int refs; /* the handle and each pending launch */
};

struct CUfunc_st {
    struct CUmod_st *m;
    const kdecl *k;
    int max_dyn; /* dynamic shared memory a launch may ask for */
};

static struct CUmod_st **g_mods;
static int g_nmods;

static void mod_unref(struct CUmod_st *m) { /* G.mu held */
    if (--m->refs) return;
    hyp_sim_unload(m->sim);
    for (int i = 0; i < m->nfns; i++) free(m->fns[i]);
    free(m->fns);
    free(m->k);
    free(m);
}

static char *slurp(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *b = NULL;
    long len = fseek(f, 0, SEEK_END) ? -1 : ftell(f);
    if (len >= 0 && !fseek(f, 0, SEEK_SET) && (b = malloc((size_t)len + 1))) {
        if (fread(b, 1, (size_t)len, f) != (size_t)len) free(b), b = NULL;
        else b[len] = 0, *n = (size_t)len;
    }
    fclose(f);
    return b;
}

/* Sizes of a manifest parameter type (pointers 8, int/unsigned/float 4, long 8); 0: unknown. */
static int param_size(const char *t, int *is_ptr) {
    *is_ptr = strchr(t, '*') != NULL;
    if (*is_ptr) return 8;
    const char *b = strncmp(t, "const ", 6) ? t : t + 6;
    if (!strcmp(b, "int") || !strcmp(b, "unsigned") || !strcmp(b, "unsigned int") || !strcmp(b, "float")) return 4;
    if (!strcmp(b, "long") || !strcmp(b, "long long") || !strcmp(b, "unsigned long long") || !strcmp(b, "double") ||
        !strcmp(b, "int64_t") || !strcmp(b, "uint64_t"))
        return 8;
    if (!strcmp(b, "__grid_constant__ hyp_tmap") || !strcmp(b, "hyp_tmap") || !strcmp(b, "CUtensorMap"))
        return 128; /* a tensor map (hyp/hopper.cuh), by value: cuTensorMapEncodeTiled's bytes */
    return 0;
}

/* What a cubin says about each kernel (the truth the driver launches by): the global kernel
 * symbols; static shared memory (.nv.shared.<kernel>); from .nv.info, the registers per thread
 * (EIATTR_REGCOUNT), the __launch_bounds__ maximum (EIATTR_MAX_THREADS) and each parameter's size
 * (EIATTR_KPARAM_INFO, by ordinal). */
typedef struct {
    char name[128];
    size_t smem;
    unsigned sym, regs, max_threads;
    int nparams; /* -1: the image gives no parameter table (PTX) */
    unsigned short psize[MAX_PARAMS];
} elf_kernel;

static void read_nvinfo(const unsigned char *d, size_t n, elf_kernel *ks, int nk, elf_kernel *own) {
    for (size_t i = 0; i + 2 <= n;) {
        unsigned fmt = d[i], attr = d[i + 1], sz = 0;
        if (fmt == 4) { /* EIFMT_SVAL: a u16 size, then the payload */
            if (i + 4 > n) break;
            sz = (unsigned)(d[i + 2] | d[i + 3] << 8);
            const unsigned char *v = d + i + 4;
            uint32_t w[3] = {0, 0, 0};
            memcpy(w, v, sz < 12 ? sz : 12);
            if (attr == 0x2f && sz >= 8) /* EIATTR_REGCOUNT: symbol, registers */
                for (int k = 0; k < nk; k++)
                    if (ks[k].sym == w[0]) ks[k].regs = w[1];
            if (own && attr == 0x05 && sz >= 12) own->max_threads = w[0] * (w[1] ? w[1] : 1) * (w[2] ? w[2] : 1); /* EIATTR_MAX_THREADS */
            if (own && attr == 0x17 && sz >= 12) { /* EIATTR_KPARAM_INFO: index, ordinal u16, offset u16, flags (size << 18) */
                unsigned ord = w[1] & 0xffff, bytes = (w[2] >> 18) & 0x3fff;
                if (ord < MAX_PARAMS) {
                    own->psize[ord] = (unsigned short)bytes;
                    if ((int)ord + 1 > own->nparams) own->nparams = (int)ord + 1;
                }
            }
            i += 4 + sz;
        } else {
            i += 4; /* EIFMT_NVAL, EIFMT_BVAL, EIFMT_HVAL: format, attribute, a 2-byte value */
        }
    }
}

static CUresult read_cubin(const char *img, size_t len, elf_kernel *ks, int *nk, int cap, const char *path) {
    const Elf64_Ehdr *h = (const void *)img;
    if (len < sizeof *h || memcmp(h->e_ident, ELFMAG, SELFMAG) || h->e_ident[EI_CLASS] != ELFCLASS64)
        return refuse(CUDA_ERROR_INVALID_IMAGE, "cuModuleLoad(%s): not an ELF64 cubin", path);
    if (h->e_machine != 190 /* EM_CUDA */) return refuse(CUDA_ERROR_INVALID_IMAGE, "cuModuleLoad(%s): ELF for machine %d, not NVIDIA CUDA (190)", path, h->e_machine);
    int sm = h->e_ident[EI_ABIVERSION] >= 8 ? (int)((h->e_flags >> 8) & 0xff) : (int)(h->e_flags & 0xff);
    /* a cubin runs on its own major architecture at an equal or higher minor (sm_80 on sm_86),
     * never across majors */
    if (sm / 10 != G.spec.sm / 10 || sm % 10 > G.spec.sm % 10)
        return refuse(CUDA_ERROR_NO_BINARY_FOR_GPU, "cuModuleLoad(%s): a cubin for sm_%d on an sm_%d device", path, sm, G.spec.sm);
    if (h->e_shoff + (size_t)h->e_shnum * sizeof(Elf64_Shdr) > len || h->e_shstrndx >= h->e_shnum)
        return refuse(CUDA_ERROR_INVALID_IMAGE, "cuModuleLoad(%s): truncated section table", path);
    const Elf64_Shdr *sh = (const void *)(img + h->e_shoff);
    for (int i = 0; i < h->e_shnum; i++)
        if (sh[i].sh_type != SHT_NOBITS && sh[i].sh_offset + sh[i].sh_size > len)
            return refuse(CUDA_ERROR_INVALID_IMAGE, "cuModuleLoad(%s): section %d runs past the image", path, i);
    const char *shstr = img + sh[h->e_shstrndx].sh_offset;
    *nk = 0;
    for (int i = 0; i < h->e_shnum; i++) {
        if (sh[i].sh_type != SHT_SYMTAB) continue;
        const Elf64_Sym *sym = (const void *)(img + sh[i].sh_offset);
        const char *str = img + sh[sh[i].sh_link].sh_offset;
        size_t n = sh[i].sh_size / sizeof *sym;
        for (size_t j = 0; j < n; j++)
            if (ELF64_ST_TYPE(sym[j].st_info) == STT_FUNC && ELF64_ST_BIND(sym[j].st_info) == STB_GLOBAL && *nk < cap) {
                memset(&ks[*nk], 0, sizeof ks[*nk]);
                snprintf(ks[*nk].name, sizeof ks[*nk].name, "%s", str + sym[j].st_name);
                ks[(*nk)++].sym = (unsigned)j;
            }
    }
    for (int i = 0; i < h->e_shnum; i++) {
        const char *nm = shstr + sh[i].sh_name;
        const unsigned char *d = (const unsigned char *)img + sh[i].sh_offset;
        if (!strcmp(nm, ".nv.info")) read_nvinfo(d, sh[i].sh_size, ks, *nk, NULL);
        for (int k = 0; k < *nk; k++) {
            if (!strncmp(nm, ".nv.shared.", 11) && !strcmp(ks[k].name, nm + 11)) ks[k].smem = sh[i].sh_size;
            if (!strncmp(nm, ".nv.info.", 9) && !strcmp(ks[k].name, nm + 9)) read_nvinfo(d, sh[i].sh_size, ks, *nk, &ks[k]);
        }
    }
    return CUDA_SUCCESS;
}

/* cuModuleLoad: the image, the manifest entry naming it, the rendered source compiled by sim. */
EXPORT CUresult cuModuleLoad(CUmodule *out, const char *path) {
    NEED_CTX();
    if (!out || !path) return CUDA_ERROR_INVALID_VALUE;
    if (G.sticky) return G.sticky;
    size_t len = 0, mlen = 0;
    char *img = slurp(path, &len);
    if (!img) return refuse(CUDA_ERROR_FILE_NOT_FOUND, "cuModuleLoad(%s): %s", path, strerror(errno));
    elf_kernel ek[MAX_PARAMS];
    int nek = 0;
    const char *slash = strrchr(path, '/'), *base = slash ? slash + 1 : path;
    int is_ptx = len >= 1 && (img[0] == '/' || img[0] == '.') && strstr(img, ".target");
    CUresult r = CUDA_SUCCESS;
    if (is_ptx) { /* the JIT takes PTX for this SM or an older one */
        const char *t = strstr(img, ".target sm_");
        int sm = t ? atoi(t + 11) : 0;
        if (!sm || sm > G.spec.sm) r = refuse(CUDA_ERROR_NO_BINARY_FOR_GPU, "cuModuleLoad(%s): PTX for sm_%d on an sm_%d device", path, sm, G.spec.sm);
        for (const char *p = img; !r && (p = strstr(p, ".entry ")) && nek < MAX_PARAMS; p += 7) {
            int w = 0;
            while (p[7 + w] && p[7 + w] != '(' && p[7 + w] != ' ' && p[7 + w] != '\n' && w < 127) w++;
            memset(&ek[nek], 0, sizeof ek[nek]);
            memcpy(ek[nek].name, p + 7, (size_t)w), ek[nek].name[w] = 0, ek[nek++].nparams = -1;
        }
    } else {
        r = read_cubin(img, len, ek, &nek, MAX_PARAMS, path);
    }
    free(img);
    if (r) return r;
    char dir[4096], mpath[4200], cu[4200];
    snprintf(dir, sizeof dir, "%.*s", slash ? (int)(slash - path) : 1, slash ? path : ".");
    snprintf(mpath, sizeof mpath, "%s/kernels.json", dir);
    char *mtext = slurp(mpath, &mlen);
    cJSON *man = mtext ? cJSON_Parse(mtext) : NULL;
    free(mtext);
    const cJSON *entry = NULL, *f;
    cJSON_ArrayForEach(f, cJSON_GetObjectItemCaseSensitive(man, "files")) {
        const cJSON *c = cJSON_GetObjectItemCaseSensitive(f, is_ptx ? "ptx" : "cubin");
        if (cJSON_IsString(c) && !strcmp(c->valuestring, base)) entry = f;
    }
    const cJSON *file = cJSON_GetObjectItemCaseSensitive(entry, "file"), *kernels = cJSON_GetObjectItemCaseSensitive(entry, "kernels");
    if (!cJSON_IsString(file) || !cJSON_IsArray(kernels)) {
        cJSON_Delete(man);
        return refuse(CUDA_ERROR_INVALID_IMAGE, "cuModuleLoad(%s): %s names no such image — the stand-in runs only images gen wrote with their manifest", path, mpath);
    }
    int nk = cJSON_GetArraySize(kernels);
    struct CUmod_st *m = calloc(1, sizeof *m);
    kdecl *kd = calloc((size_t)nk + 1, sizeof *kd);
    if (!m || !kd) {
        free(m), free(kd), cJSON_Delete(man);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    int i = 0;
    const cJSON *k;
    cJSON_ArrayForEach(k, kernels) {
        kdecl *d = &kd[i++];
        const cJSON *nm = cJSON_GetObjectItemCaseSensitive(k, "name"), *p;
        snprintf(d->name, sizeof d->name, "%s", cJSON_IsString(nm) ? nm->valuestring : "");
        const elf_kernel *img_k = NULL;
        for (int j = 0; j < nek; j++)
            if (!strcmp(ek[j].name, d->name)) img_k = &ek[j];
        if (!img_k) r = refuse(CUDA_ERROR_INVALID_IMAGE, "cuModuleLoad(%s): the manifest's kernel %s is not in the image (stale cubin?)", path, d->name);
        else d->static_smem = (int)img_k->smem, d->regs = img_k->regs, d->max_threads = img_k->max_threads;
        size_t off = 0;
        cJSON_ArrayForEach(p, cJSON_GetObjectItemCaseSensitive(k, "params")) {
            const cJSON *ty = cJSON_GetObjectItemCaseSensitive(p, "type");
            int isp = 0, sz = cJSON_IsString(ty) ? param_size(ty->valuestring, &isp) : 0;
            if (!sz || d->nparams >= MAX_PARAMS) {
                r = refuse(CUDA_ERROR_INVALID_IMAGE, "cuModuleLoad(%s): kernel %s: parameter type %s unknown to the stand-in", path, d->name, cJSON_IsString(ty) ? ty->valuestring : "?");
                break;
            }
            off = (off + (size_t)sz - 1) / (size_t)sz * (size_t)sz;
            d->size[d->nparams] = (unsigned short)sz, d->off[d->nparams] = (unsigned short)off, d->ptr[d->nparams] = (unsigned char)isp;
            d->nparams++;
            off += (size_t)sz;
        }
        /* the signature the stand-in translates pointers by must be the image's parameter table */
        int same = !img_k || img_k->nparams < 0 || img_k->nparams == d->nparams;
        for (int j = 0; same && img_k && img_k->nparams > 0 && j < d->nparams; j++) same = img_k->psize[j] == d->size[j];
        if (!r && !same)
            r = refuse(CUDA_ERROR_INVALID_IMAGE, "cuModuleLoad(%s): kernel %s: the manifest's %d parameters disagree with the image's %d (sizes by ordinal; stale cubin?)",
                       path, d->name, d->nparams, img_k->nparams);
    }
    if (!r && nek != nk) r = refuse(CUDA_ERROR_INVALID_IMAGE, "cuModuleLoad(%s): the image has %d kernels, the manifest %d (stale cubin?)", path, nek, nk);
    snprintf(cu, sizeof cu, "%s%s%s", file->valuestring[0] == '/' ? "" : dir, file->valuestring[0] == '/' ? "" : "/", file->valuestring);
    cJSON_Delete(man);
    hyp_err e;
    if (!r && hyp_sim_open(cu, NULL, &m->sim, &e)) r = refuse(CUDA_ERROR_INVALID_IMAGE, "cuModuleLoad(%s): the simulator cannot build %s: %s", path, cu, e.msg);
    if (r) {
        free(kd), free(m);
        return r;
    }
    m->k = kd, m->nk = nk, m->refs = 1;
    pthread_mutex_lock(&G.mu);
    struct CUmod_st **nm = realloc(g_mods, sizeof *nm * (size_t)(g_nmods + 1));
    if (nm) g_mods = nm, g_mods[g_nmods++] = m;
    pthread_mutex_unlock(&G.mu);
    if (!nm) {
        hyp_sim_unload(m->sim), free(kd), free(m);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *out = m;
    return CUDA_SUCCESS;
}

static int mod_live(struct CUmod_st *m) {
    for (int i = 0; i < g_nmods; i++)
        if (g_mods[i] == m) return 1;
    return 0;
}

EXPORT CUresult cuModuleUnload(CUmodule m) {
    NEED_CTX();
    pthread_mutex_lock(&G.mu);
    CUresult r = CUDA_SUCCESS;
    if (!m || !mod_live(m)) r = refuse(CUDA_ERROR_INVALID_HANDLE, "cuModuleUnload(%p): not a loaded module", (void *)m);
    else {
        for (int i = 0; i < g_nmods; i++)
            if (g_mods[i] == m) g_mods[i] = g_mods[--g_nmods];
        mod_unref(m);
    }
    pthread_mutex_unlock(&G.mu);
    return r;
}

EXPORT CUresult cuModuleGetFunction(CUfunction *out, CUmodule m, const char *name) {
    NEED_CTX();
    if (!out || !name) return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&G.mu);
    CUresult r = CUDA_SUCCESS;
    if (!m || !mod_live(m)) r = refuse(CUDA_ERROR_INVALID_HANDLE, "cuModuleGetFunction: %p is not a loaded module", (void *)m);
    for (int i = 0; !r && i < m->nfns; i++)
        if (!strcmp(m->fns[i]->k->name, name)) {
            *out = m->fns[i];
            pthread_mutex_unlock(&G.mu);
            return CUDA_SUCCESS;
        }
    const kdecl *k = NULL;
    for (int i = 0; !r && i < m->nk && !k; i++)
        if (!strcmp(m->k[i].name, name)) k = &m->k[i];
    if (!r && !k) r = refuse(CUDA_ERROR_NOT_FOUND, "cuModuleGetFunction: no kernel %s in the module", name);
    struct CUfunc_st *f = NULL, **nf = NULL;
    if (!r && (!(f = calloc(1, sizeof *f)) || !(nf = realloc(m->fns, sizeof *nf * (size_t)(m->nfns + 1))))) free(f), r = CUDA_ERROR_OUT_OF_MEMORY;
    if (!r) {
        f->m = m, f->k = k, f->max_dyn = 49152 - k->static_smem;
        m->fns = nf, m->fns[m->nfns++] = f;
        *out = f;
    }
    pthread_mutex_unlock(&G.mu);
    return r;
}

static int func_live(struct CUfunc_st *f) {
    for (int i = 0; i < g_nmods; i++)
        for (int j = 0; j < g_mods[i]->nfns; j++)
            if (g_mods[i]->fns[j] == f) return 1;
    return 0;
}

EXPORT CUresult cuFuncSetAttribute(CUfunction f, CUfunction_attribute a, int v) {
    NEED_CTX();
    pthread_mutex_lock(&G.mu);
    CUresult r = CUDA_SUCCESS;
    if (!f || !func_live(f)) r = refuse(CUDA_ERROR_INVALID_HANDLE, "cuFuncSetAttribute: %p is not a function of a loaded module", (void *)f);
    else if (a == CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES) {
        if (v < 0 || v > G.spec.smem_optin - f->k->static_smem)
            r = refuse(CUDA_ERROR_INVALID_VALUE, "cuFuncSetAttribute(%s, MAX_DYNAMIC_SHARED_SIZE_BYTES, %d): above the sm_%d opt-in maximum %d less its %d static bytes",
                       f->k->name, v, G.spec.sm, G.spec.smem_optin, f->k->static_smem);
        else f->max_dyn = v;
    } else if (a == CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT) {
        if (v < -1 || v > 100) r = CUDA_ERROR_INVALID_VALUE;
    } else {
        r = refuse(CUDA_ERROR_INVALID_VALUE, "cuFuncSetAttribute(%d): not a settable attribute", (int)a);
    }
    pthread_mutex_unlock(&G.mu);
    return r;
}

/* ---- launch --------------------------------------------------------------------------------- */

typedef struct {
    struct CUmod_st *m;
    const kdecl *k;
    hyp_dim3 grid, block;
    unsigned shmem;
    uint64_t val[MAX_PARAMS][16] __attribute__((aligned(64))); /* up to a 128-byte tensor map */
} launch_op;

static void run_launch(void *a) {
    launch_op *l = a;
    pthread_mutex_lock(&G.mu);
    int skip = G.sticky != 0; /* a context with a fault runs nothing more */
    pthread_mutex_unlock(&G.mu);
    if (skip) return;
    void *args[MAX_PARAMS];
    for (int i = 0; i < l->k->nparams; i++) args[i] = l->val[i];
    hyp_err e;
    if (hyp_sim_launch(l->m->sim, l->k->name, l->grid, l->block, l->shmem, args, NULL, &e)) {
        char why[1200];
        snprintf(why, sizeof why, "kernel %s: %s", l->k->name, e.msg);
        pthread_mutex_lock(&G.mu);
        set_sticky(strstr(e.msg, "SIGSEGV") || strstr(e.msg, "SIGBUS") ? CUDA_ERROR_ILLEGAL_ADDRESS : CUDA_ERROR_LAUNCH_FAILED, why);
        pthread_mutex_unlock(&G.mu);
    }
}
static void free_launch(void *a) {
    launch_op *l = a;
    pthread_mutex_lock(&G.mu);
    mod_unref(l->m);
    pthread_mutex_unlock(&G.mu);
    free(l);
}

/* A device pointer as the kernel sees it: its read-write view when it lies in (or one past) a live
 * block of this context or a pinned host block (mapped for the device, as with unified
 * addressing); NULL stays NULL; anything else is sent to an inaccessible page, so the kernel
 * faults if it dereferences it. G.mu held. */
static uint64_t translate(uint64_t p) {
    if (!p) return 0;
    if (find_block((CUdeviceptr)p, 0)) return (uint64_t)(uintptr_t)rw_of((CUdeviceptr)p);
    if (is_pinned((const void *)(uintptr_t)p, 0)) return p;
    return (uint64_t)(uintptr_t)(G.poison + (p & 0xfff));
}

EXPORT CUresult cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                               unsigned shmem, CUstream h, void **params, void **extra) {
    NEED_CTX();
    pthread_mutex_lock(&G.mu);
    CUresult r = G.sticky;
    struct CUstream_st *s = stream_of(h);
    launch_op *l = NULL;
    if (r) goto out;
    if (!f || !func_live(f)) {
        r = refuse(CUDA_ERROR_INVALID_HANDLE, "cuLaunchKernel: %p is not a function of a loaded module", (void *)f);
        goto out;
    }
    const kdecl *k = f->k;
    if (!s) r = refuse(CUDA_ERROR_INVALID_HANDLE, "cuLaunchKernel(%s): %p is not a live stream", k->name, (void *)h);
    else if (!gx || !gy || !gz || !bx || !by || !bz)
        r = refuse(CUDA_ERROR_INVALID_VALUE, "cuLaunchKernel(%s): a zero dimension (grid %u,%u,%u block %u,%u,%u)", k->name, gx, gy, gz, bx, by, bz);
    else if (bx > 1024 || by > 1024 || bz > 64 || (unsigned long long)bx * by * bz > 1024)
        r = refuse(CUDA_ERROR_INVALID_VALUE, "cuLaunchKernel(%s): block %u x %u x %u exceeds 1024 threads or the 1024 x 1024 x 64 limits", k->name, bx, by, bz);
    else if (gx > 2147483647u || gy > 65535 || gz > 65535)
        r = refuse(CUDA_ERROR_INVALID_VALUE, "cuLaunchKernel(%s): grid %u x %u x %u exceeds 2^31-1 x 65535 x 65535", k->name, gx, gy, gz);
    else if (k->max_threads && (unsigned long long)bx * by * bz > k->max_threads)
        r = refuse(CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES, "cuLaunchKernel(%s): %u threads per block, above its __launch_bounds__ %u", k->name, bx * by * bz, k->max_threads);
    else if (k->regs && (bx * by * bz + 31) / 32 * ((k->regs * 32 + 255) / 256 * 256) > 65536)
        r = refuse(CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES, "cuLaunchKernel(%s): %u threads x %u registers (allocated per warp in 256s) exceed the 65536 registers of an SM",
                   k->name, bx * by * bz, k->regs);
    else if ((int)shmem > f->max_dyn)
        r = refuse(CUDA_ERROR_INVALID_VALUE, "cuLaunchKernel(%s): %u bytes of dynamic shared memory + %d static; the function allows %d dynamic (48 KB in all unless cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES) raised it)",
                   k->name, shmem, k->static_smem, f->max_dyn);
    else if (params && extra)
        r = refuse(CUDA_ERROR_INVALID_VALUE, "cuLaunchKernel(%s): both kernelParams and extra", k->name);
    else if (extra)
        r = refuse(CUDA_ERROR_NOT_SUPPORTED, "cuLaunchKernel(%s): the stand-in takes kernelParams, not an extra buffer", k->name);
    else if (k->nparams && !params)
        r = refuse(CUDA_ERROR_INVALID_VALUE, "cuLaunchKernel(%s): kernelParams NULL for %d parameters", k->name, k->nparams);
    if (r) goto out;
    if (!(l = aligned_alloc(64, sizeof *l))) {
        r = CUDA_ERROR_OUT_OF_MEMORY;
        goto out;
    }
    memset(l, 0, sizeof *l);
    for (int i = 0; i < k->nparams && !r; i++) {
        if (!params[i]) {
            r = refuse(CUDA_ERROR_INVALID_VALUE, "cuLaunchKernel(%s): kernelParams[%d] is NULL: the kernel declares %d parameters", k->name, i, k->nparams);
            break;
        }
        memcpy(l->val[i], params[i], k->size[i]); /* parameters are copied at launch */
        if (k->ptr[i]) l->val[i][0] = translate(l->val[i][0]);
    }
    if (r) goto out;
    l->m = f->m, l->k = k, l->grid = hyp_dim3_of(gx, gy, gz), l->block = hyp_dim3_of(bx, by, bz), l->shmem = shmem;
    f->m->refs++;
    if (add_op(s, run_launch, l, free_launch)) {
        f->m->refs--;
        r = CUDA_ERROR_OUT_OF_MEMORY;
        goto out;
    }
    l = NULL;
out:
    free(l);
    pthread_mutex_unlock(&G.mu);
    return r;
}

/* The tensor map TMA reads (hyp/hopper.cuh): kernels/sim/sim_tmap.h's encoding with the driver's
 * checks, of the read-write view of the tensor's device memory (kernel parameters are copied
 * bytes, so the address is translated here, not at launch). Stricter than the driver: the whole
 * extent the map can address must lie in one live cuMemAlloc block. */
EXPORT CUresult cuTensorMapEncodeTiled(CUtensorMap *map, CUtensorMapDataType dtype, cuuint32_t rank, void *gaddr,
                                       const cuuint64_t *dims, const cuuint64_t *strides, const cuuint32_t *box,
                                       const cuuint32_t *estrides, CUtensorMapInterleave interleave,
                                       CUtensorMapSwizzle swizzle, CUtensorMapL2promotion l2,
                                       CUtensorMapFloatOOBfill oob) {
    NEED_INIT();
    unsigned es = hyp_sim_tmap_esize((int)dtype);
    if (!map || !dims || !box || !estrides || (rank > 1 && !strides) || rank < 1 || rank > 5 || !es)
        return refuse(CUDA_ERROR_INVALID_VALUE, "cuTensorMapEncodeTiled: a NULL array, rank %u outside 1..5 or data type %d the stand-in does not emulate", rank, (int)dtype);
    size_t extent = (size_t)es;
    for (unsigned d = 0; d < rank; d++) extent += (size_t)(dims[d] ? dims[d] - 1 : 0) * (d ? strides[d - 1] : es);
    pthread_mutex_lock(&G.mu);
    void *view = find_block((CUdeviceptr)(uintptr_t)gaddr, extent) ? rw_of((CUdeviceptr)(uintptr_t)gaddr) : NULL;
    pthread_mutex_unlock(&G.mu);
    if (!view)
        return refuse(CUDA_ERROR_INVALID_VALUE, "cuTensorMapEncodeTiled: the tensor at %p (%zu bytes by its dims and strides) is not inside one live cuMemAlloc block", gaddr, extent);
    char why[256];
    if (hyp_sim_tmap_encode_tiled(map, (int)dtype, rank, view, dims, strides, box, estrides, (int)interleave, (int)swizzle, (int)l2,
                                  (int)oob, why, sizeof why))
        return refuse(CUDA_ERROR_INVALID_VALUE, "cuTensorMapEncodeTiled: %s", why);
    return CUDA_SUCCESS;
}

/* ---- graphs: stream capture (global mode), instantiate, launch ------------------------------- */

static void gnodes_unref(gnodes *g) { /* G.mu held for the operations' free_arg (they may take it: not here) */
    if (!g || --g->refs) return;
    for (op *o = g->head, *n; o; o = n) {
        n = o->next;
        if (o->free_arg) {
            pthread_mutex_unlock(&G.mu);
            o->free_arg(o->arg);
            pthread_mutex_lock(&G.mu);
        }
        free(o);
    }
    free(g);
}

EXPORT CUresult cuStreamBeginCapture(CUstream h, CUstreamCaptureMode mode) {
    NEED_CTX();
    pthread_mutex_lock(&G.mu);
    struct CUstream_st *s = stream_of(h);
    CUresult r = G.sticky;
    if (!r && !s) r = refuse(CUDA_ERROR_INVALID_HANDLE, "cuStreamBeginCapture(%p): not a live stream", (void *)h);
    else if (!r && s == G.legacy) r = refuse(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, "cuStreamBeginCapture on the legacy NULL stream");
    else if (!r && s->cap) r = refuse(CUDA_ERROR_ILLEGAL_STATE, "cuStreamBeginCapture: the stream is already capturing");
    else if (!r && mode != CU_STREAM_CAPTURE_MODE_GLOBAL)
        r = refuse(CUDA_ERROR_NOT_SUPPORTED, "cuStreamBeginCapture: mode %d — the stand-in implements CU_STREAM_CAPTURE_MODE_GLOBAL", (int)mode);
    if (!r) {
        struct CUgraph_st *gr = calloc(1, sizeof *gr);
        gnodes *g = calloc(1, sizeof *g);
        if (!gr || !g) free(gr), free(g), r = CUDA_ERROR_OUT_OF_MEMORY;
        else g->refs = 1, gr->g = g, s->cap = gr, s->cap_bad[0] = 0;
    }
    pthread_mutex_unlock(&G.mu);
    return r;
}
EXPORT CUresult cuStreamEndCapture(CUstream h, CUgraph *out) {
    NEED_CTX();
    if (!out) return CUDA_ERROR_INVALID_VALUE;
    *out = NULL;
    pthread_mutex_lock(&G.mu);
    struct CUstream_st *s = stream_of(h);
    CUresult r = CUDA_SUCCESS;
    if (!s) r = refuse(CUDA_ERROR_INVALID_HANDLE, "cuStreamEndCapture(%p): not a live stream", (void *)h);
    else if (!s->cap) r = refuse(CUDA_ERROR_ILLEGAL_STATE, "cuStreamEndCapture: the stream is not capturing");
    else {
        struct CUgraph_st *gr = s->cap;
        s->cap = NULL;
        if (s->cap_bad[0]) {
            r = refuse(CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, "cuStreamEndCapture: the capture was invalidated by %s", s->cap_bad);
            gnodes_unref(gr->g);
            free(gr);
        } else {
            *out = gr;
        }
    }
    pthread_mutex_unlock(&G.mu);
    return r;
}
EXPORT CUresult cuGraphInstantiate(CUgraphExec *out, CUgraph g, unsigned long long flags) {
    NEED_CTX();
    if (!out || !g) return CUDA_ERROR_INVALID_VALUE;
    if (flags) return refuse(CUDA_ERROR_NOT_SUPPORTED, "cuGraphInstantiate: flags %llu — the stand-in instantiates with none", flags);
    struct CUgraphExec_st *x = calloc(1, sizeof *x);
    if (!x) return CUDA_ERROR_OUT_OF_MEMORY;
    pthread_mutex_lock(&G.mu);
    x->g = g->g, g->g->refs++;
    pthread_mutex_unlock(&G.mu);
    *out = x;
    return CUDA_SUCCESS;
}
/* Every operation of the graph, in capture order, on stream h (they run as enqueued work does). */
EXPORT CUresult cuGraphLaunch(CUgraphExec x, CUstream h) {
    NEED_CTX();
    if (!x) return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&G.mu);
    struct CUstream_st *s = stream_of(h);
    CUresult r = G.sticky;
    if (!r && !s) r = refuse(CUDA_ERROR_INVALID_HANDLE, "cuGraphLaunch: %p is not a live stream", (void *)h);
    else if (!r && s->cap) r = cap_refuse(s, CUDA_ERROR_NOT_SUPPORTED, "cuGraphLaunch on a capturing stream (the stand-in nests no graphs)");
    for (op *o = x->g->head; o && !r; o = o->next)
        if (add_op(s, o->fn, o->arg, NULL)) r = CUDA_ERROR_OUT_OF_MEMORY; /* the graph keeps the arguments */
    pthread_mutex_unlock(&G.mu);
    return r;
}
/* Waits for pending launches of it first (the driver defers the release instead; the caller sees the same). */
EXPORT CUresult cuGraphExecDestroy(CUgraphExec x) {
    NEED_CTX();
    if (!x) return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&G.mu);
    wait_idle_locked();
    gnodes_unref(x->g);
    pthread_mutex_unlock(&G.mu);
    free(x);
    return CUDA_SUCCESS;
}
EXPORT CUresult cuGraphDestroy(CUgraph g) {
    NEED_CTX();
    if (!g) return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&G.mu);
    gnodes_unref(g->g);
    pthread_mutex_unlock(&G.mu);
    free(g);
    return CUDA_SUCCESS;
}

/* ---- errors --------------------------------------------------------------------------------- */

static const struct {
    CUresult r;
    const char *name, *str;
} ERRS[] = {
    {CUDA_SUCCESS, "CUDA_SUCCESS", "no error"},
    {CUDA_ERROR_INVALID_VALUE, "CUDA_ERROR_INVALID_VALUE", "invalid argument"},
    {CUDA_ERROR_OUT_OF_MEMORY, "CUDA_ERROR_OUT_OF_MEMORY", "out of memory"},
    {CUDA_ERROR_NOT_INITIALIZED, "CUDA_ERROR_NOT_INITIALIZED", "initialization error"},
    {CUDA_ERROR_NO_DEVICE, "CUDA_ERROR_NO_DEVICE", "no CUDA-capable device is detected"},
    {CUDA_ERROR_INVALID_DEVICE, "CUDA_ERROR_INVALID_DEVICE", "invalid device ordinal"},
    {CUDA_ERROR_INVALID_IMAGE, "CUDA_ERROR_INVALID_IMAGE", "device kernel image is invalid"},
    {CUDA_ERROR_INVALID_CONTEXT, "CUDA_ERROR_INVALID_CONTEXT", "invalid device context"},
    {CUDA_ERROR_NO_BINARY_FOR_GPU, "CUDA_ERROR_NO_BINARY_FOR_GPU", "no kernel image is available for execution on the device"},
    {CUDA_ERROR_FILE_NOT_FOUND, "CUDA_ERROR_FILE_NOT_FOUND", "file not found"},
    {CUDA_ERROR_INVALID_HANDLE, "CUDA_ERROR_INVALID_HANDLE", "invalid resource handle"},
    {CUDA_ERROR_NOT_FOUND, "CUDA_ERROR_NOT_FOUND", "named symbol not found"},
    {CUDA_ERROR_NOT_READY, "CUDA_ERROR_NOT_READY", "device not ready"},
    {CUDA_ERROR_ILLEGAL_ADDRESS, "CUDA_ERROR_ILLEGAL_ADDRESS", "an illegal memory access was encountered"},
    {CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES, "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES", "too many resources requested for launch"},
    {CUDA_ERROR_LAUNCH_FAILED, "CUDA_ERROR_LAUNCH_FAILED", "unspecified launch failure"},
    {CUDA_ERROR_NOT_SUPPORTED, "CUDA_ERROR_NOT_SUPPORTED", "operation not supported"},
    {CUDA_ERROR_ILLEGAL_STATE, "CUDA_ERROR_ILLEGAL_STATE", "the operation cannot be performed in the present state"},
    {CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED", "operation not permitted when stream is capturing"},
    {CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED", "operation failed due to a previous error during capture"},
    {CUDA_ERROR_UNKNOWN, "CUDA_ERROR_UNKNOWN", "unknown error"},
};
EXPORT CUresult cuGetErrorName(CUresult r, const char **s) {
    if (!s) return CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; i < sizeof ERRS / sizeof *ERRS; i++)
        if (ERRS[i].r == r) return *s = ERRS[i].name, CUDA_SUCCESS;
    *s = NULL;
    return CUDA_ERROR_INVALID_VALUE;
}
EXPORT CUresult cuGetErrorString(CUresult r, const char **s) {
    if (!s) return CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; i < sizeof ERRS / sizeof *ERRS; i++)
        if (ERRS[i].r == r) return *s = ERRS[i].str, CUDA_SUCCESS;
    *s = NULL;
    return CUDA_ERROR_INVALID_VALUE;
}

/* ---- standin.h: what the cuBLASLt and NCCL stand-ins use ------------------------------------ */

EXPORT void *hypsi_host_view(CUdeviceptr p, size_t bytes, const char *who) {
    pthread_mutex_lock(&G.mu);
    void *v = G.init && find_block(p, bytes) ? rw_of(p) : NULL;
    pthread_mutex_unlock(&G.mu);
    if (!v) note("%s: device range %#llx + %zu bytes is not inside one live cuMemAlloc block of the current context", who ? who : "?", (unsigned long long)p, bytes);
    return v;
}

EXPORT CUresult hypsi_enqueue(CUstream h, void (*fn)(void *arg), void *arg, void (*free_arg)(void *arg)) {
    if (!G.init) return CUDA_ERROR_NOT_INITIALIZED;
    if (!fn) return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&G.mu);
    struct CUstream_st *s = stream_of(h);
    CUresult r = G.sticky ? G.sticky : !s ? CUDA_ERROR_INVALID_HANDLE : add_op(s, fn, arg, free_arg) ? CUDA_ERROR_OUT_OF_MEMORY : CUDA_SUCCESS;
    pthread_mutex_unlock(&G.mu);
    return r;
}

EXPORT void hypsi_stream_fault(CUstream h, CUresult r, const char *why) {
    (void)h; /* an asynchronous fault poisons the context, as on hardware */
    pthread_mutex_lock(&G.mu);
    set_sticky(r ? r : CUDA_ERROR_UNKNOWN, why ? why : "a stand-in reported a fault");
    pthread_mutex_unlock(&G.mu);
}

EXPORT int hypsi_current_device(void) { return tls_ctx ? tls_ctx->dev : -1; }
