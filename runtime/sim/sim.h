/* sim.h — the `sim` backend's kernel runner: compiles a rendered CUDA .cu with the host C++
 * compiler and the prelude kernels/sim/prelude.h, loads it, and runs a grid on the CPU with every
 * GPU thread as a fiber (the fiber engine: sim.c; the compiler and its cache: sim_compile.c; how
 * and what it detects: kernels/sim/README.md).
 *
 *   hyp_sim_module *m;
 *   if (hyp_sim_open("out/x/kernels/layernorm.cu", NULL, &m, &e)) ...     // compile (cached) + load
 *   void *args[] = {&out, &inp, &N};                                      // as cuLaunchKernel takes
 *   if (hyp_sim_launch(m, "layernorm_fwd", hyp_dim3_of(B, 1, 1), hyp_dim3_of(256, 1, 1),
 *                      shared_bytes, args, NULL, &e)) fprintf(stderr, "%s\n", e.msg);
 *   hyp_sim_unload(m);
 *
 * A kernel bug (divergent __syncthreads, a thread exiting while others wait, a shuffle mask
 * mismatch, an out-of-bounds shared index, a fiber stack overflow, a segfault inside the kernel)
 * stops the launch and returns HYP_EFAIL with a one-line message; the process goes on.
 *
 * Thread safety: every function may be called from several threads at once; launches run
 * concurrently (each call blocks until its grid is done, like a synchronous stream). Do not
 * unload a module while a launch of it runs, or recompile onto the path of a loaded module
 * (dlopen would return the old one): unload first, or compile to a new path.
 *
 * Cost (measured on a shared 2-core VM, CPU time): compiling a module takes about 1 s
 * (hyp_sim_open caches by content); a launch starts opts.threads-1 OS threads (the caller is the
 * last); a fiber resume costs about 80 ns, so a 256-thread block with two __syncthreads takes
 * 60-70 µs and one running two block reductions (10 shuffles per warp) about 300 µs. Fiber stacks
 * (64 KiB each plus a guard page) live in a process-wide pool of per-OS-thread runners, reused
 * across launches and modules: 1024-thread blocks on 2 OS threads reserve 2 x 68 MiB of address
 * space, of which only the touched pages are resident. hyp_sim_trim frees the idle ones. */
#ifndef HYP_SIM_H
#define HYP_SIM_H

#include <stddef.h>
#include <stdint.h>

#include "hyp_err.h"

#ifndef HYP_DIM3_DEFINED
#define HYP_DIM3_DEFINED
typedef struct hyp_dim3 {
    unsigned x, y, z;
} hyp_dim3;
#endif

static inline hyp_dim3 hyp_dim3_of(unsigned x, unsigned y, unsigned z) {
    hyp_dim3 d = {x, y, z};
    return d;
}

typedef struct hyp_sim_module hyp_sim_module;

enum {
    HYP_SIM_ORDER_DEFAULT = 0, /* $HYP_SIM_SHUFFLE=<seed> turns shuffling on; unset/0/off: fixed */
    HYP_SIM_ORDER_FIXED = 1,   /* fibers run in thread-index order */
    HYP_SIM_ORDER_SHUFFLE = 2  /* a seeded random fiber at every scheduling point, to expose races */
};

/* Launch options; NULL or a zeroed struct means the defaults (each field falls back alone). */
typedef struct hyp_sim_opts {
    int threads;        /* OS threads running blocks; 0: $HYP_SIM_THREADS, else every online CPU */
    int order;          /* HYP_SIM_ORDER_* */
    uint64_t seed;      /* shuffle seed (ORDER_SHUFFLE); the block index is mixed in per block */
    unsigned stack_kib; /* fiber stack size; 0: $HYP_SIM_STACK_KIB, else 64 */
} hyp_sim_opts;

/* Compiles cu_path into the shared object so_path with $CXX (default g++):
 *   -std=c++17 -O2 -fPIC -shared -DHYP_SIM -include KERNELS/sim/prelude.h -I KERNELS
 *   -I CUDA/include -fsanitize=bounds -fstack-clash-protection -fno-gnu-unique
 *   [$HYP_SIM_CXXFLAGS] [extra_flags]   (then linked with -shared, without the sanitizer runtime)
 * KERNELS is $HYP_KERNELS_DIR or this source tree's kernels/; CUDA is $CUDA_HOME or /usr/local/cuda.
 * extra_flags are split on blanks (no quoting). A source with `extern __shared__` is first
 * rewritten to so_path + ".sim.cu" (with #line, so messages name the original). The .so is written
 * to a temp file and renamed, so a reader never sees half of one. On a compiler error the message
 * holds the first compiler lines and the full log is in so_path + ".log". */
int hyp_sim_compile(const char *cu_path, const char *so_path, const char *extra_flags, hyp_err *e);

/* Loads a compiled module (dlopen, checks its ABI version). */
int hyp_sim_load(const char *so_path, hyp_sim_module **m, hyp_err *e);
void hyp_sim_unload(hyp_sim_module *m);

/* Compile through a content-addressed cache, then load. The key is the compile caches' one rule
 * (runtime/core/ckey.h, shared with gen's NVRTC cache) over the sim ABI version, $CXX,
 * $HYP_SIM_CXXFLAGS, extra_flags, cu_path, and the prelude and the source with every header they
 * include (resolved in the source's directory, KERNELS, then CUDA/include). Cache dir:
 * $HYP_SIM_CACHE, else $HYPERION_CACHE/sim (beside gen's nvrtc-1), else
 * $XDG_CACHE_HOME/hyperion/sim, else ~/.cache/hyperion/sim. Concurrent users of one cache are
 * safe (atomic renames). */
int hyp_sim_open(const char *cu_path, const char *extra_flags, hyp_sim_module **m, hyp_err *e);

/* Runs kernel `kernel` (its stub hyp_sim_entry_<kernel>) over grid x block threads with
 * shared_bytes of dynamic shared memory; args as cuLaunchKernel's kernelParams. Returns when every
 * block is done, or HYP_EFAIL (message in e) after the first kernel error (no new block starts,
 * running blocks are abandoned at their next scheduling point), HYP_EINPUT for bad dimensions or
 * an unknown kernel. */
int hyp_sim_launch(hyp_sim_module *m, const char *kernel, hyp_dim3 grid, hyp_dim3 block,
                   size_t shared_bytes, void **args, const hyp_sim_opts *opts, hyp_err *e);

/* Frees the idle fiber-stack pool (it regrows on the next launch). */
void hyp_sim_trim(void);

#endif
