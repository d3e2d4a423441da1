/* sim_abi.h — the binary interface between the simulator runtime (runtime/sim/sim.c, C11) and a kernel
 * module (a rendered .cu compiled by the host C++ compiler with kernels/sim/prelude.h).
 *
 * The runtime owns fibers, stacks, barriers and the scheduler; the module owns the CUDA surface
 * (threadIdx, __syncthreads, shuffles, mma emulation…) and reaches the runtime only through the
 * hyp_sim_host_api table it is given at load time. A module exports exactly:
 *     unsigned hyp_sim_module_abi(void);                      -> HYP_SIM_ABI_VERSION it was built with
 *     void     hyp_sim_module_bind(const hyp_sim_host_api *);  -> once, before any launch
 *     void     hyp_sim_module_run_thread(void (*stub)(void **), void **args, hyp_sim_thread *t);
 * plus one `hyp_sim_entry_<kernel>(void **args)` launch stub per kernel (kernels/DIALECT.md).
 *
 * Never: put C++-only types here, or change a layout without bumping HYP_SIM_ABI_VERSION. */
#ifndef HYP_SIM_ABI_H
#define HYP_SIM_ABI_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#define HYP_SIM_ABI_VERSION 2u
#define HYP_SIM_WARP 32u
#define HYP_SIM_CP_ASYNC_MAX 64 /* pending cp.async copies per thread before the oldest is forced */

typedef struct hyp_sim_dim {
    unsigned x, y, z;
} hyp_sim_dim;

/* One pending cp.async: `bytes` copied from src, of which only `src_bytes` are read (the rest
 * zero-filled), when its group is waited for. */
typedef struct hyp_sim_cp_async {
    void *dst;
    const void *src;
    unsigned bytes, src_bytes, group;
} hyp_sim_cp_async;

/* The per-thread context a module sees (its thread_local `cur` points at the running one). */
typedef struct hyp_sim_thread {
    hyp_sim_dim thread_idx, block_idx, block_dim, grid_dim; /* first: read by every threadIdx */
    unsigned linear;                /* x + y*Dx + z*Dx*Dy */
    unsigned lane, warp;            /* linear % 32, linear / 32 */
    unsigned char *dyn_shared;      /* this block's dynamic shared memory (ends at a guard page) */
    size_t dyn_shared_bytes;
    unsigned cp_n, cp_group;        /* cp.async queue, managed by the module ... */
    hyp_sim_cp_async *cp;           /* ... in HYP_SIM_CP_ASYNC_MAX entries the runtime owns */
    void *rt;                       /* runtime-private: the fiber */
    unsigned long long block_serial; /* unique per block run in this process: module-side
                                        per-block state (hyp/hopper.cuh's) resets when it changes */
} hyp_sim_thread;

/* A warp-collective operation (shuffle, vote, __syncwarp, mma, ldmatrix). Each participating lane
 * passes its own op (usually a larger struct that starts with this one); when every lane named in
 * `mask` has arrived with the same mask and the same `what`, the runtime calls `combine` once, on
 * the last arriving lane's fiber, with ops[lane] set for the lanes in `live` (= mask minus lanes
 * that do not exist in a partial warp) and NULL elsewhere; combine reads every lane's inputs and
 * writes every lane's outputs, then all lanes continue. */
typedef struct hyp_sim_warp_op hyp_sim_warp_op;
typedef void (*hyp_sim_combine_fn)(hyp_sim_warp_op *const *ops, unsigned live, hyp_sim_thread *caller);
struct hyp_sim_warp_op {
    const char *what; /* "__shfl_xor_sync", "mma.m16n8k16.bf16"…: lanes must agree */
    const char *file;
    unsigned line;
    unsigned mask;
    hyp_sim_combine_fn combine; /* NULL: a pure barrier (__syncwarp) */
};

enum { HYP_SIM_BAR_SYNC = 0, HYP_SIM_BAR_COUNT = 1, HYP_SIM_BAR_AND = 2, HYP_SIM_BAR_OR = 3 };

typedef struct hyp_sim_host_api {
    unsigned abi_version;
    /* __syncthreads (op SYNC) and __syncthreads_count/_and/_or; returns the block-wide result. */
    int (*barrier)(hyp_sim_thread *t, int op, int value, const char *what, const char *file,
                   unsigned line);
    /* Warp collective: blocks until the group named by op->mask is complete (see above). */
    void (*warp_sync)(hyp_sim_thread *t, hyp_sim_warp_op *op);
    /* Reports a kernel error and abandons the launch: never returns. */
    void (*fail)(hyp_sim_thread *t, const char *file, unsigned line, const char *msg);
    /* Lanes of t's warp that exist and have not exited. */
    unsigned (*active_mask)(hyp_sim_thread *t);
    /* Parks t until ready(arg) returns nonzero (returns at once if it already does). Parked
     * threads are polled when no thread of the block can run; if none is ready then, the launch
     * fails with a deadlock naming `what` at file:line. ready must only read memory (it runs on
     * the scheduler, not on a fiber). Used by mbarrier waits, named barriers and the warpgroup
     * rendezvous of wgmma (hyp/hopper.cuh). */
    void (*park)(hyp_sim_thread *t, int (*ready)(void *arg), void *arg, const char *what,
                 const char *file, unsigned line);
} hyp_sim_host_api;

#ifdef __cplusplus
}
#endif
#endif
