/* device.h — the GPU device layer: one interface, two implementations (issue #5).
 *
 *   "cuda"  runtime/dev_cuda.c: the CUDA driver API from libcuda.so.1, cuBLASLt and NCCL, all
 *           loaded at run time with dlopen (the build links nothing that needs a driver).
 *   "sim"   runtime/dev_sim.c: the same semantics on the CPU. Device memory is host memory,
 *           modules are rendered .cu files run by the kernel simulator (runtime/sim.h), GEMMs by
 *           the CPU implementation of the cuBLASLt semantics below (runtime/device_gemm.c),
 *           collectives over runtime/coll.h (MPI).
 *
 * Everything above this interface (buffer management, launch configuration, stream ordering,
 * the step schedule) is shared, so it is tested through "sim" on machines without a GPU.
 *
 *   hyp_device *d;
 *   if (hyp_device_open("sim", &d, &e)) { fprintf(stderr, "%s\n", e.msg); exit(code); }
 *   float *x;  d->mem_alloc(d, (void **)&x, n * 4, &e);
 *   d->h2d(d, x, host, n * 4, NULL, &e);                        // NULL = the default stream
 *   hyp_kargs a = {0}; hyp_kargs_ptr(&a, x); hyp_kargs_i32(&a, n);
 *   d->launch(d, mod, "scale", hyp_dim3_of(g, 1, 1), hyp_dim3_of(256, 1, 1), 0, &a, s, &e);
 *   d->d2h(d, host, x, n * 4, s, &e); d->stream_synchronize(d, s, &e);
 *   d->close(d);
 *
 * ---- Execution model (both implementations) -------------------------------------------------
 * - Pointers returned by mem_alloc are device pointers (for "sim" they are host addresses, but
 *   code must not rely on that). Pointer arithmetic on them (char *) is fine.
 * - Work enqueued on one stream runs in order; work on different streams is unordered unless an
 *   event orders it (event_record on one stream, event_wait on the other). Streams never
 *   synchronize implicitly with each other: NULL is the device's default stream, an ordinary
 *   stream created at open (a non-blocking stream for cuda, not the legacy stream).
 * - Asynchronous copies read and write host memory when they run, as with pinned memory on a
 *   GPU: keep the host buffer alive and unchanged until the stream (or a later event) completes.
 * - The *_sync copies and memset first wait for all work on all streams, then run, and return
 *   when done (cuCtxSynchronize + cuMemcpy*). mem_free, module_unload, stream_destroy and
 *   event_destroy also wait for all pending work first (like cudaFree).
 * - Kernel arguments are copied at launch (hyp_kargs holds the values), so they may be reused.
 * - An error detected when an operation is enqueued (bad arguments) returns HYP_EINPUT and leaves
 *   the device usable. An error while work runs (a kernel fault, a failed collective) is sticky,
 *   as in CUDA: it is returned by the next synchronizing call and by every call after it.
 * - One host thread drives a device (the implementations take no locks).
 *
 * How "sim" makes ordering bugs show: nothing enqueued runs until something needs it — a
 * synchronize of its stream, an event it recorded being synchronized or waited on by a stream
 * that runs, a *_sync call, a device synchronize. Pending streams are then drained newest
 * stream first (HYP_SIM_STREAM_ORDER=reverse, the default), or oldest first (=forward), or every
 * operation runs as soon as it is enqueued (=eager). So a kernel on stream 2 that reads what
 * stream 1 writes, without an event between them, reads stale data; a d2h whose stream is not
 * synchronized leaves the host buffer untouched; an event whose work has not run has no time.
 * Fresh allocations are filled with 0xFF bytes (NaN as float, bf16 and fp8), as uninitialized
 * GPU memory may hold anything. Copies, memsets, GEMM operands and collective buffers must lie
 * inside one mem_alloc block (a host pointer passed as a device pointer is an error, as it is a
 * fault on a GPU); kernel arguments cannot be checked.
 */
#ifndef HYP_DEVICE_H
#define HYP_DEVICE_H

#include <stddef.h>
#include <stdint.h>

#include "coll.h"
#include "dtype.h"
#include "hyp_err.h"

#ifdef __cplusplus
extern "C" {
#endif

#ifndef HYP_DIM3_DEFINED
#define HYP_DIM3_DEFINED
typedef struct hyp_dim3 {
    unsigned x, y, z;
} hyp_dim3;
#endif
#define HYP_DIM3(x, y, z) ((hyp_dim3){(x), (y), (z)})

typedef struct hyp_device hyp_device;
typedef struct hyp_stream hyp_stream; /* opaque: each implementation has its own */
typedef struct hyp_event hyp_event;
typedef struct hyp_module hyp_module;
typedef struct hyp_graph hyp_graph; /* v2165: a captured, instantiated sequence of stream work */


/* bf16 and tf32 as the GPU rounds them: round to nearest, ties to even; NaN stays a (quiet) NaN,
 * infinities stay infinite, overflow rounds to infinity. tf32 keeps 10 mantissa bits (the result
 * is an fp32 with its 13 low bits zero). */
uint16_t hyp_bf16_from_f32(float x);
float hyp_bf16_to_f32(uint16_t b);
float hyp_tf32_round(float x);

/* ---- Kernel arguments ------------------------------------------------------------------------
 * Values are copied in (each up to 16 bytes, in declaration order of the kernel's parameters);
 * hyp_kargs_params gives the `void **kernelParams` array cuLaunchKernel and hyp_sim_launch take.
 * More than HYP_KARGS_MAX arguments or a value over 16 bytes marks the set invalid (n = -1) and
 * launch returns HYP_EINPUT. */
#define HYP_KARGS_MAX 32
#define HYP_KARGS_TMAP_MAX 4 /* tensor maps (128 bytes, hyp/hopper.cuh's hyp_tmap) per launch */
typedef struct hyp_kargs {
    int n;
    unsigned short size[HYP_KARGS_MAX];
    uint64_t val[HYP_KARGS_MAX][2]; /* 16 bytes, 8-byte aligned, per argument */
    void *ptr[HYP_KARGS_MAX];
    int ntmap;                                         /* hyp_kargs_tmap: the maps' bytes ... */
    unsigned char tmap[HYP_KARGS_TMAP_MAX][128];
    unsigned char tmap_at[HYP_KARGS_TMAP_MAX][192];    /* ... placed 64-byte aligned by _params */
} hyp_kargs;
void hyp_kargs_add(hyp_kargs *a, const void *value, size_t size);
/* A tensor map (the 128 bytes device->tensor_map wrote) as the next argument, for a kernel
 * parameter `const __grid_constant__ hyp_tmap`. */
void hyp_kargs_tmap(hyp_kargs *a, const void *map);
void **hyp_kargs_params(hyp_kargs *a);
static inline void hyp_kargs_ptr(hyp_kargs *a, const void *p) { hyp_kargs_add(a, &p, sizeof p); }
static inline void hyp_kargs_i32(hyp_kargs *a, int32_t v) { hyp_kargs_add(a, &v, sizeof v); }
static inline void hyp_kargs_u32(hyp_kargs *a, uint32_t v) { hyp_kargs_add(a, &v, sizeof v); }
static inline void hyp_kargs_i64(hyp_kargs *a, int64_t v) { hyp_kargs_add(a, &v, sizeof v); }
static inline void hyp_kargs_f32(hyp_kargs *a, float v) { hyp_kargs_add(a, &v, sizeof v); }

/* ---- GEMM: cuBLASLt semantics ----------------------------------------------------------------
 *
 * Layout: COLUMN-MAJOR, exactly as cuBLASLt. Element (i, j) of a matrix X stored with leading
 * dimension ldX is X[i + j * ldX] (+ b * stride_X for batch b). op(A) is m x k and op(B) is k x n:
 *   A is stored m x k (lda >= m) when transa == 0, k x m (lda >= k) when transa == 1, op(A) = A^T;
 *   B is stored k x n (ldb >= k) when transb == 0, n x k (ldb >= n) when transb == 1;
 *   C and D are m x n (ldc, ldd >= m).
 * A row-major array R[r][c] is the column-major c x r matrix R^T, so a row-major
 * y[N][OC] = x[N][C] @ W[OC][C]^T (+ b[OC]) is m = OC, n = N, k = C, A = W with transa = 1
 * (lda = C), B = x with transb = 0 (ldb = C), D = y (ldd = OC), and BIAS adds b along D's rows.
 *
 * Computation, per batch b (all scalars fp32 unless said otherwise):
 *   acc(i,j)  = sum_k op(A)(i,k) * op(B)(k,j) of the input values (fp32 inputs first rounded to
 *               tf32 when compute == HYP_GEMM_TF32; bf16 and fp8 decoded exactly), in fp32. The
 *               CPU implementation forms the products exactly and sums them in double in k order
 *               (error ~k 2^-53, far below fp32's 2^-24), then rounds once to fp32; a GPU
 *               accumulates in fp32 in its own order: tests/gpu bounds the difference.
 *   alpha'    = alpha * a_scale * b_scale (fp8 only; the scales default to 1 when NULL)
 *   t(i,j)    = beta == 0 ? alpha' * acc : fmaf(alpha', acc, beta * C(i,j))
 *               (with beta == 0, C is not read: it may be NULL or hold NaN)
 *   + bias(i)   epilogues BIAS, GELU_BIAS, GELU_AUX_BIAS (bias has m elements, one per row of D)
 *   aux(i,j)  = t               GELU_AUX, GELU_AUX_BIAS: the pre-GELU value, written to aux
 *   t = gelu(t)                 GELU*: tanh approximation 0.5 t (1 + tanh(sqrt(2/pi)(t + 0.044715 t^3)))
 *   t = t * gelu'(aux(i,j))     DGELU, DGELU_BGRAD: aux is read (the forward's GELU input)
 *   amax_d    = max |t| over D (before d_scale; NaN ignored), written to *amax_d (fp8 D only)
 *   D(i,j)    = t converted to D's type: fp32; bf16 round-to-nearest-even; fp8 = saturating
 *               round-to-nearest-even of t * d_scale (runtime/fp8.h, as __NV_SATFINITE)
 *   bias gradients, written (not accumulated) to bias, in the bias type, not scaled by alpha:
 *     DGELU_BGRAD  bias(i) = sum_j t(i,j), the final values before conversion (m elements)
 *     BGRADA       bias(i) = sum_k op(A)(i,k)  (m elements: one per row of D)
 *     BGRADB       bias(j) = sum_k op(B)(k,j)  (n elements: one per column of D). For the
 *                  row-major weight gradient dW[OC][C] = dy^T @ x (m = C, n = OC, k = N,
 *                  A = x transa = 0, B = dy transb = 1) BGRADB is db[OC] = column sums of dy.
 *   The bias-gradient sums are formed like acc (double, in index order, rounded once to fp32).
 *
 * Types (atype == btype except for fp8):
 *   fp32 x fp32 -> fp32 (C fp32), compute HYP_GEMM_F32 or HYP_GEMM_TF32
 *   bf16 x bf16 -> fp32 or bf16 (C has D's type)
 *   fp8 x fp8 (e4m3 x e4m3, e4m3 x e5m2, e5m2 x e4m3; not e5m2 x e5m2) -> fp32 (C fp32),
 *     bf16 (C bf16), e4m3 (C bf16), e5m2 (C bf16; only when an input is e5m2). cuBLASLt's FP8
 *     layout rule: transa = 1, transb = 0 ("TN"), lda and ldb multiples of 16, A and B 16-byte
 *     aligned. a_scale / b_scale / d_scale / amax_d are DEVICE pointers to one float each, read
 *     (written) when the GEMM runs; they are allowed only on fp8 GEMMs (d_scale, amax_d only with
 *     an fp8 D).
 *   bias type: D's type, or bf16 when the inputs are fp8. aux type: D's type (aux epilogues need
 *   a fp32 or bf16 D); ldaux >= m and a multiple of 8 (cuBLASLt's rule).
 *   Epilogues need batch <= 1; BGRADA/BGRADB/DGELU* are not allowed with fp8 inputs.
 *   workspace: device memory the GEMM may use (cuda passes it to cuBLASLt and limits the
 *   algorithm search to workspace_bytes; sim ignores it). 32 MiB suits Hopper.
 * Both implementations run hyp_gemm_validate first: a call one of them accepts, the other does. */
typedef enum { HYP_GEMM_F32 = 0, HYP_GEMM_TF32 = 1 } hyp_gemm_compute;
typedef enum {
    HYP_EPI_NONE = 0,
    HYP_EPI_BIAS,
    HYP_EPI_GELU,
    HYP_EPI_GELU_AUX,
    HYP_EPI_GELU_BIAS,
    HYP_EPI_GELU_AUX_BIAS,
    HYP_EPI_DGELU,
    HYP_EPI_DGELU_BGRAD,
    HYP_EPI_BGRADA,
    HYP_EPI_BGRADB,
    HYP_EPI__COUNT
} hyp_epilogue;
const char *hyp_epilogue_name(hyp_epilogue ep); /* "none", "bias", "gelu_aux_bias", ... */

typedef struct hyp_gemm {
    int transa, transb;     /* 0: N, 1: T */
    int64_t m, n, k;        /* m, n >= 1, k >= 1 */
    hyp_dtype atype, btype, dtype; /* C's type follows (see above) */
    hyp_gemm_compute compute;
    float alpha, beta;
    const void *a;
    int64_t lda;
    const void *b;
    int64_t ldb;
    const void *c;          /* may be NULL when beta == 0; may equal d (then ldc == ldd) */
    int64_t ldc;
    void *d;
    int64_t ldd;
    int batch;              /* 0 or 1: one GEMM; > 1: strided batch */
    int64_t stride_a, stride_b, stride_c, stride_d; /* elements between batches */
    hyp_epilogue epilogue;
    void *bias;             /* read (BIAS*), written (BGRAD*) */
    void *aux;              /* written (GELU_AUX*), read (DGELU*) */
    int64_t ldaux;
    const float *a_scale, *b_scale, *d_scale; /* fp8: device pointers, NULL = 1 */
    float *amax_d;          /* fp8 D: device pointer, NULL = not computed */
    void *workspace;
    size_t workspace_bytes;
} hyp_gemm;

/* Type of C (D's type, or bf16 for an fp8 D), of the bias vector and of aux. */
hyp_dtype hyp_gemm_ctype(const hyp_gemm *g);
hyp_dtype hyp_gemm_bias_type(const hyp_gemm *g);
/* Length of the bias vector of g's epilogue (0 when it has none). */
int64_t hyp_gemm_bias_len(const hyp_gemm *g);
/* Checks g against every rule above: HYP_EINPUT with "gemm: what — how to fix", or HYP_OK. */
int hyp_gemm_validate(const hyp_gemm *g, hyp_err *e);
/* The CPU implementation of these semantics (what sim runs; the reference of tests/gpu). All
 * pointers are host pointers. Validates first. Parallel over columns (OpenMP); the result does
 * not depend on the thread count. */
int hyp_gemm_cpu(const hyp_gemm *g, hyp_err *e);

/* ---- Collectives ---------------------------------------------------------------------------- */
typedef enum { HYP_RED_SUM = 0, HYP_RED_MAX = 1 } hyp_redop;

typedef struct hyp_device_info {
    char name[128];       /* "NVIDIA H100 80GB HBM3", "sim (CPU)" */
    int sm;               /* compute capability * 10 (90 for sm_90); 0 for sim */
    int n_sms;            /* multiprocessors (sim: online CPUs) */
    int ordinal;          /* which GPU of the node (cuda) */
    size_t total_mem;     /* bytes */
} hyp_device_info;

struct hyp_device {
    const char *name;     /* "cuda" or "sim" */
    hyp_device_info info;

    void (*close)(hyp_device *d); /* waits for pending work, frees everything of the device */

    /* memory */
    int (*mem_alloc)(hyp_device *d, void **dptr, size_t bytes, hyp_err *e); /* 256-byte aligned */
    int (*mem_free)(hyp_device *d, void *dptr, hyp_err *e);                 /* NULL: no-op */
    int (*host_alloc)(hyp_device *d, void **hptr, size_t bytes, hyp_err *e); /* pinned host memory */
    int (*host_free)(hyp_device *d, void *hptr, hyp_err *e);
    int (*mem_info)(hyp_device *d, size_t *free_bytes, size_t *total_bytes, hyp_err *e);
    int (*h2d)(hyp_device *d, void *dst, const void *src, size_t bytes, hyp_stream *s, hyp_err *e);
    int (*d2h)(hyp_device *d, void *dst, const void *src, size_t bytes, hyp_stream *s, hyp_err *e);
    int (*d2d)(hyp_device *d, void *dst, const void *src, size_t bytes, hyp_stream *s, hyp_err *e);
    int (*memset)(hyp_device *d, void *dst, int byte, size_t bytes, hyp_stream *s, hyp_err *e);
    int (*h2d_sync)(hyp_device *d, void *dst, const void *src, size_t bytes, hyp_err *e);
    int (*d2h_sync)(hyp_device *d, void *dst, const void *src, size_t bytes, hyp_err *e);
    int (*d2d_sync)(hyp_device *d, void *dst, const void *src, size_t bytes, hyp_err *e);
    int (*memset_sync)(hyp_device *d, void *dst, int byte, size_t bytes, hyp_err *e);

    /* modules and launch: a cubin (cuda) or a rendered .cu / compiled .so (sim) */
    int (*module_load)(hyp_device *d, const char *path, hyp_module **m, hyp_err *e);
    void (*module_unload)(hyp_device *d, hyp_module *m);
    int (*launch)(hyp_device *d, hyp_module *m, const char *kernel, hyp_dim3 grid, hyp_dim3 block,
                  size_t shared_bytes, const hyp_kargs *args, hyp_stream *s, hyp_err *e);

    /* streams and events */
    int (*stream_create)(hyp_device *d, hyp_stream **s, hyp_err *e);
    void (*stream_destroy)(hyp_device *d, hyp_stream *s);
    int (*stream_synchronize)(hyp_device *d, hyp_stream *s, hyp_err *e);
    int (*synchronize)(hyp_device *d, hyp_err *e); /* every stream */
    int (*event_create)(hyp_device *d, hyp_event **ev, hyp_err *e);
    void (*event_destroy)(hyp_device *d, hyp_event *ev);
    int (*event_record)(hyp_device *d, hyp_event *ev, hyp_stream *s, hyp_err *e);
    /* s waits (without blocking the host) for the work ev captured at its latest record; an event
     * never recorded is complete */
    int (*event_wait)(hyp_device *d, hyp_stream *s, hyp_event *ev, hyp_err *e);
    int (*event_synchronize)(hyp_device *d, hyp_event *ev, hyp_err *e);
    /* both events recorded and complete, else HYP_EINPUT */
    int (*event_elapsed_ms)(hyp_device *d, hyp_event *start, hyp_event *end, float *ms, hyp_err *e);

    /* GEMM (above), enqueued on s */
    int (*gemm)(hyp_device *d, const hyp_gemm *g, hyp_stream *s, hyp_err *e);

    /* collectives over the ranks of c (cuda: NCCL, its unique id broadcast through c; sim: c
     * itself, i.e. MPI). comm_init is collective: every rank calls it once before any of these.
     * Sums and maxima are of fp32 (sim: fp32 only; cuda: fp32 and bf16). Counts are elements.
     *   all_reduce      buf[count] = op over ranks (in place)
     *   reduce_scatter  recv[count] = sum over ranks of send[rank*count .. +count)
     *   all_gather      recv[world*count] = every rank's send[count], rank order; send may be
     *                   recv + rank*count (in place)
     *   broadcast       buf[count] of rank root to every rank (any dtype)
     *   reduce          buf[count] of rank root = sum over ranks of every rank's buf[count]
     *                   (in place; the other ranks' buf unchanged) */
    int (*comm_init)(hyp_device *d, hyp_coll *c, hyp_err *e);
    int (*all_reduce)(hyp_device *d, void *buf, size_t count, hyp_dtype t, hyp_redop op,
                      hyp_stream *s, hyp_err *e);
    int (*reduce_scatter)(hyp_device *d, const void *send, void *recv, size_t count, hyp_dtype t,
                          hyp_stream *s, hyp_err *e);
    int (*all_gather)(hyp_device *d, const void *send, void *recv, size_t count, hyp_dtype t,
                      hyp_stream *s, hyp_err *e);
    int (*broadcast)(hyp_device *d, void *buf, size_t count, hyp_dtype t, int root, hyp_stream *s,
                     hyp_err *e);
    int (*reduce)(hyp_device *d, void *buf, size_t count, hyp_dtype t, int root, hyp_stream *s, hyp_err *e);

    /* ---- v2165 graphs (docs/cuda-graphs.md) ----
     * capture_begin: work enqueued on s is recorded instead of run (cuda: cuStreamBeginCapture in
     * global mode; sim: the commands are kept in a list) until capture_end, which returns it as a
     * graph (cuda: cuGraphInstantiate) — or an error, and no graph, when something illegal
     * happened during the capture. While a stream captures, what cannot be recorded is refused
     * with HYP_EINPUT and invalidates the capture, as the driver does (CUDA_ERROR_STREAM_CAPTURE_*):
     * every synchronizing call (*_sync, synchronize, stream_synchronize of the capturing stream),
     * mem_alloc / mem_free; sim also refuses host copies, events and collectives on the capturing
     * stream (the device executor captures none). Kernel arguments are recorded by value: a
     * replay passes exactly the values of the capture (per-step values must be read from device
     * memory, or stay outside the graph). graph_launch enqueues the whole graph on s as one host
     * call, in the recorded order; graph_destroy waits for pending replays first. */
    int (*capture_begin)(hyp_device *d, hyp_stream *s, hyp_err *e);
    int (*capture_end)(hyp_device *d, hyp_stream *s, hyp_graph **g, hyp_err *e);
    int (*graph_launch)(hyp_device *d, hyp_graph *g, hyp_stream *s, hyp_err *e);
    void (*graph_destroy)(hyp_device *d, hyp_graph *g);
    /* The TMA tensor map of hyp/hopper.cuh (v2114): a tiled map of the device tensor at gaddr
     * written into the 128 bytes at map (64-byte aligned) — cuTensorMapEncodeTiled on cuda,
     * kernels/sim/sim_tmap.h on sim, with the driver's checks (sim also: the extent inside one
     * mem_alloc block). rank 1..5; dims in elements, dim 0 innermost; strides in bytes for dims
     * 1..rank-1 (multiples of 16); box in elements (box[0] * element size a multiple of 16, within
     * the swizzle span); swizzle 0 none, 1 32B, 2 64B, 3 128B; out-of-bounds elements read as zero.
     * Pass the map to the kernel with hyp_kargs_tmap. HYP_EINPUT with the reason otherwise. */
    int (*tensor_map)(hyp_device *d, void *map, hyp_dtype t, int rank, const void *gaddr, const uint64_t *dims,
                      const uint64_t *strides, const uint32_t *box, int swizzle, hyp_err *e);
    /* host calls that enqueued work (launch, gemm, memset, copies, collectives; a graph launch is
     * one), counted by the implementation since open: the launches-per-step figure of v2165 */
    unsigned long long calls;
};

/* Opens a device: kind "cuda" or "sim".
 *   cuda without a driver: HYP_EINPUT, "no CUDA driver (libcuda.so.1 not found) — train on this
 *   machine with a trainer generated for --target cpu or --target sim"; without a device the same
 *   advice. The GPU is the node-local rank's (OMPI_COMM_WORLD_LOCAL_RANK, SLURM_LOCALID or
 *   $HYP_CUDA_DEVICE) modulo the GPU count. $HYP_LIBCUDA overrides the driver library's name.
 *   sim: always succeeds (modules need the host C++ compiler, see runtime/sim.h). */
int hyp_device_open(const char *kind, hyp_device **out, hyp_err *e);

/* The implementations (hyp_device_open dispatches to them). */
int hyp_dev_sim_open(hyp_device **out, hyp_err *e);
int hyp_dev_cuda_open(hyp_device **out, hyp_err *e);

/* Opens libcuda.so.1 ($HYP_LIBCUDA), libcublasLt.so.13 and libnccl.so.2 and resolves every symbol
 * the cuda device uses, initializing nothing (works without a GPU: a diagnostic, and a test of
 * the symbol tables against the installed libraries). Writes one line per library into report;
 * returns how many are missing or incomplete. */
int hyp_dev_cuda_check_libs(char *report, size_t n);

#ifdef __cplusplus
}
#endif
#endif
