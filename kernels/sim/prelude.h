/* prelude.h — force-included (g++ -std=c++17 -DHYP_SIM -include kernels/sim/prelude.h) when a
 * rendered CUDA .cu is compiled for the CPU simulator; turns the kernel dialect of
 * kernels/DIALECT.md into host C++ that runs on the fibers of runtime/sim/sim.c.
 *
 * What it provides: threadIdx/blockIdx/blockDim/gridDim (fields of the running fiber's context,
 * reached through the thread_local `hyp_sim::cur`), warpSize, __syncthreads(+_count/_and/_or),
 * __syncwarp, the shuffles, votes, __reduce_*_sync and __match_*_sync with exact PTX semantics
 * (mask, width, out-of-segment lanes), atomics (GCC __atomic builtins: real atomics across the
 * OS threads that run blocks), math intrinsics, cache-hinted loads/stores, static and dynamic
 * __shared__ memory, and the emulation behind kernels/hyp/mma.cuh (mma, ldmatrix, cp.async).
 *
 * Shared memory. `__shared__` is `thread_local`: an OS thread runs one block at a time and a
 * block never leaves its OS thread, so a thread_local array is exactly one block's storage. It
 * keeps the previous block's values (uninitialized, as on a GPU). `extern __shared__ T a[];` is
 * rewritten by hyp_sim_compile into a macro for hyp_sim::dynamic_shared(), the block's dynamic
 * shared memory, which ends on a guard page and is filled with 0xFF (NaN) at block start.
 * Out-of-bounds indexing of any array with a known bound (static __shared__ arrays, local arrays,
 * fragments) is caught by -fsanitize=bounds, whose handler is defined here and fails the launch.
 *
 * Rules for this file: every call that may switch fibers saves `cur` before and restores it after
 * (other fibers of the OS thread set it meanwhile); nothing here may exit or abort the process —
 * kernel errors go through hyp_sim::fail to the runtime, which stops the launch. */
#ifndef HYP_SIM_PRELUDE_H
#define HYP_SIM_PRELUDE_H

#ifndef HYP_SIM
#error "kernels/sim/prelude.h is the simulator prelude: compile with -DHYP_SIM (hyp_sim_compile does)"
#endif

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <math.h>

#include <cmath>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <limits>
#include <type_traits>

#include "sim_abi.h"

/* host_defines.h (via cuda_bf16.h) already made __global__, __device__, __host__, __constant__,
 * __launch_bounds__ empty and __forceinline__/__align__ GCC attributes. */
#undef __shared__
#define __shared__ thread_local

namespace hyp_sim {

inline const hyp_sim_host_api *host;      /* set by hyp_sim_module_bind */
inline thread_local hyp_sim_thread *cur;  /* the running fiber's context on this OS thread */
/* Called when a thread's kernel function returns (set by hyp/hopper.cuh's emulation: bulk copies a
 * thread must have waited for); NULL: nothing. */
inline void (*thread_end_hook)(hyp_sim_thread *t);
#ifdef HYP_SIM_COUNT
/* A counting build (runtime/sim/sim.h HYP_SIM_COUNT_FLAGS): hyp_sim_count_hook, set at load. */
inline void (*count_fn)(uintptr_t addr, size_t n, int kind);
#endif

/* Fails the launch with "what — how to fix" (printf-style); never returns. */
[[noreturn]] inline void fail(const char *file, unsigned line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
[[noreturn]] inline void fail(const char *file, unsigned line, const char *fmt, ...) {
    char msg[700];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (!cur || !host) { /* not on a fiber: cannot happen for kernel code */
        fprintf(stderr, "%s:%u: %s\n", file, line, msg);
        __builtin_trap();
    }
    host->fail(cur, file, line, msg);
    __builtin_unreachable();
}

inline void check_align(const void *p, unsigned align, const char *what, const char *file,
                        unsigned line) {
    if ((uintptr_t)p & (align - 1))
        fail(file, line,
             "%s of %p is not %u-byte aligned — a GPU faults on a misaligned vector access; "
             "align the buffer and the index",
             what, p, align);
}

/* The block's dynamic shared memory, for the rewritten `extern __shared__` arrays. */
inline void *dynamic_shared(unsigned align) {
    hyp_sim_thread *t = cur;
    if (align > 16 && t->dyn_shared_bytes && ((uintptr_t)t->dyn_shared & (align - 1)))
        fail(__FILE__, __LINE__,
             "the extern __shared__ array is declared __align__(%u) but sim can only align the "
             "launch's %zu bytes of dynamic shared memory to their lowest set bit — make "
             "shared_bytes a multiple of %u",
             align, t->dyn_shared_bytes, align);
    return t->dyn_shared;
}

/* Runs a warp collective: this lane's op joins the others named in its mask. */
template <class Op> inline void warp_collective(Op &op) {
    hyp_sim_thread *me = cur;
    host->warp_sync(me, &op.base);
    cur = me;
}

inline unsigned ctz(unsigned x) { return (unsigned)__builtin_ctz(x); }

/* --- shuffles: PTX shfl.sync with c = ((32-width)<<8) | clamp, exactly as CUDA builds it --- */

enum { SHFL_IDX, SHFL_UP, SHFL_DOWN, SHFL_BFLY };

struct shfl_op {
    hyp_sim_warp_op base;
    uint64_t in, out;
    int mode;
    unsigned b, width, size;
};

/* What a lane reads from a source lane outside the mask (undefined on a GPU): NaN as float,
 * a large negative as int, so using it shows. */
inline uint64_t poison(unsigned size) {
    return size == 8 ? 0xFFBADBADFFBADBADull : size == 4 ? 0xFFBADBADull : size == 2 ? 0xFFBAull : 0xFFull;
}

inline void shfl_combine(hyp_sim_warp_op *const *ops, unsigned live, hyp_sim_thread *) {
    for (unsigned rest = live; rest; rest &= rest - 1) {
        unsigned lane = ctz(rest);
        shfl_op *o = (shfl_op *)ops[lane];
        unsigned segmask = (32u - o->width) & 31u;
        unsigned clamp = o->mode == SHFL_UP ? 0u : 31u;
        int max_lane = (int)((lane & segmask) | (clamp & ~segmask));
        int min_lane = (int)(lane & segmask);
        int bval = (int)(o->b & 31u), j = (int)lane;
        bool p = true;
        switch (o->mode) {
        case SHFL_UP: j = (int)lane - bval; p = j >= max_lane; break;
        case SHFL_DOWN: j = (int)lane + bval; p = j <= max_lane; break;
        case SHFL_BFLY: j = (int)lane ^ bval; p = j <= max_lane; break;
        default: j = min_lane | (bval & (int)~segmask & 31); p = j <= max_lane; break;
        }
        if (!p) j = (int)lane;
        o->out = (live >> j) & 1u ? ((shfl_op *)ops[j])->in : poison(o->size);
    }
}

template <class T>
inline T shfl(unsigned mask, T var, int mode, unsigned b, int width, const char *what,
              const char *file, unsigned line) {
    static_assert(sizeof(T) <= 8 && std::is_trivially_destructible<T>::value,
                  "shuffles move values of at most 8 bytes");
    if (width < 1 || width > 32 || (width & (width - 1)))
        fail(file, line, "%s with width %d — width must be a power of two from 1 to 32", what, width);
    shfl_op op;
    op.base = {what, file, line, mask, shfl_combine};
    op.in = 0;
    std::memcpy(&op.in, (const void *)&var, sizeof(T));
    op.out = 0;
    op.mode = mode;
    op.b = b;
    op.width = (unsigned)width;
    op.size = sizeof(T);
    warp_collective(op);
    T out;
    std::memcpy((void *)&out, &op.out, sizeof(T));
    return out;
}

/* --- votes, reductions, matches --- */

enum { VOTE_BALLOT, VOTE_ANY, VOTE_ALL, RED_ADD, RED_MIN, RED_MAX, RED_AND, RED_OR, RED_XOR,
       MATCH_ANY, MATCH_ALL };

struct vote_op {
    hyp_sim_warp_op base;
    int kind, is_signed;
    uint64_t in;
    uint64_t out;
    int pred_out;
};

inline void vote_combine(hyp_sim_warp_op *const *ops, unsigned live, hyp_sim_thread *) {
    vote_op *first = (vote_op *)ops[ctz(live)];
    int kind = first->kind;
    uint64_t acc = 0;
    unsigned ballot = 0;
    bool init = false;
    for (unsigned rest = live; rest; rest &= rest - 1) {
        unsigned lane = ctz(rest);
        vote_op *o = (vote_op *)ops[lane];
        ballot |= (unsigned)(o->in != 0) << lane;
        uint64_t v = o->in;
        if (!init) {
            acc = v;
            init = true;
            continue;
        }
        switch (kind) {
        case RED_ADD: acc = (uint32_t)(acc + v); break;
        case RED_MIN: acc = o->is_signed ? ((int32_t)v < (int32_t)acc ? v : acc) : (v < acc ? v : acc); break;
        case RED_MAX: acc = o->is_signed ? ((int32_t)v > (int32_t)acc ? v : acc) : (v > acc ? v : acc); break;
        case RED_AND: acc &= v; break;
        case RED_OR: acc |= v; break;
        case RED_XOR: acc ^= v; break;
        default: break;
        }
    }
    for (unsigned rest = live; rest; rest &= rest - 1) {
        unsigned lane = ctz(rest);
        vote_op *o = (vote_op *)ops[lane];
        switch (kind) {
        case VOTE_BALLOT: o->out = ballot; break;
        case VOTE_ANY: o->out = ballot != 0; break;
        case VOTE_ALL: o->out = ballot == live; break;
        case MATCH_ANY:
        case MATCH_ALL: {
            unsigned same = 0;
            for (unsigned r2 = live; r2; r2 &= r2 - 1)
                if (((vote_op *)ops[ctz(r2)])->in == o->in) same |= 1u << ctz(r2);
            if (kind == MATCH_ANY) o->out = same;
            else {
                o->pred_out = same == live;
                o->out = same == live ? live : 0;
            }
            break;
        }
        default: o->out = acc; break;
        }
    }
}

inline uint64_t vote(unsigned mask, int kind, uint64_t in, int is_signed, const char *what,
                     const char *file, unsigned line, int *pred_out = nullptr) {
    vote_op op;
    op.base = {what, file, line, mask, vote_combine};
    op.kind = kind;
    op.is_signed = is_signed;
    op.in = in;
    op.out = 0;
    op.pred_out = 0;
    warp_collective(op);
    if (pred_out) *pred_out = op.pred_out;
    return op.out;
}

/* --- tensor cores: mma.m16n8k16 (bf16 in, fp32 accumulate), ldmatrix, cp.async ---
 * Fragment layouts are PTX ISA's ("Matrix Fragments for mma.m16n8k16 with floating point type";
 * "Warp-level matrix load instruction: ldmatrix"), with groupID g = lane>>2, t = lane%4:
 *   A 16x16 (row-major), 4 regs of 2 bf16 (low half = lower index):
 *       a0,a1: (g, 2t+{0,1})   a2,a3: (g+8, 2t+{0,1})   a4,a5: (g, 2t+8+{0,1})   a6,a7: (g+8, 2t+8+{0,1})
 *   B 16x8 (k x n, "col"), 2 regs:  b0,b1: (k=2t+{0,1}, n=g)   b2,b3: (k=2t+8+{0,1}, n=g)
 *   C/D 16x8 fp32, 4 floats:  c0,c1: (g, 2t+{0,1})   c2,c3: (g+8, 2t+{0,1})
 *   ldmatrix m8n8.b16: lane 8i+r gives the address of row r of matrix i (16 contiguous bytes,
 *   16-byte aligned); lane l receives in register i the elements (l>>2, 2(l%4)+{0,1}) of matrix
 *   i, or with .trans the elements (2(l%4)+{0,1}, l>>2).
 * The product accumulates in fp32 in k order (c + a0*b0 + a1*b1 + ...); bf16 x bf16 products are
 * exact in fp32, so only the summation order can differ from a GPU's (last bits). */

inline float bf16_bits(uint32_t h) {
    uint32_t u = (h & 0xFFFFu) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}

struct mma_op {
    hyp_sim_warp_op base;
    uint32_t a[4], b[2];
    float c[4], d[4];
};

inline void mma_m16n8k16_bf16_combine(hyp_sim_warp_op *const *ops, unsigned live,
                                      hyp_sim_thread *caller) {
    if (live != 0xFFFFFFFFu) {
        hyp_sim_warp_op *me = ops[caller->lane];
        fail(me->file, me->line,
             "mma.m16n8k16 needs all 32 lanes of a warp, but only lanes 0x%08x exist (a partial "
             "warp) — make the block size a multiple of 32",
             live);
    }
    float A[16][16], B[16][8];
    for (unsigned lane = 0; lane < 32; lane++) {
        const mma_op *o = (const mma_op *)ops[lane];
        unsigned g = lane >> 2, t = lane & 3;
        A[g][2 * t] = bf16_bits(o->a[0]);
        A[g][2 * t + 1] = bf16_bits(o->a[0] >> 16);
        A[g + 8][2 * t] = bf16_bits(o->a[1]);
        A[g + 8][2 * t + 1] = bf16_bits(o->a[1] >> 16);
        A[g][2 * t + 8] = bf16_bits(o->a[2]);
        A[g][2 * t + 9] = bf16_bits(o->a[2] >> 16);
        A[g + 8][2 * t + 8] = bf16_bits(o->a[3]);
        A[g + 8][2 * t + 9] = bf16_bits(o->a[3] >> 16);
        B[2 * t][g] = bf16_bits(o->b[0]);
        B[2 * t + 1][g] = bf16_bits(o->b[0] >> 16);
        B[2 * t + 8][g] = bf16_bits(o->b[1]);
        B[2 * t + 9][g] = bf16_bits(o->b[1] >> 16);
    }
    for (unsigned lane = 0; lane < 32; lane++) {
        mma_op *o = (mma_op *)ops[lane];
        unsigned g = lane >> 2, t = lane & 3;
        for (unsigned i = 0; i < 4; i++) {
            unsigned row = g + 8 * (i >> 1), col = 2 * t + (i & 1);
            float acc = o->c[i];
            for (unsigned k = 0; k < 16; k++) acc += A[row][k] * B[k][col];
            o->d[i] = acc;
        }
    }
}

inline void mma_m16n8k16_bf16(float d[4], const unsigned a[4], const unsigned b[2],
                              const float c[4], const char *file, unsigned line) {
#ifdef HYP_SIM_COUNT
    if (count_fn) count_fn(0, 1, 2 /* HYP_SIM_COUNT_MMA: one per lane */);
#endif
    mma_op op;
    op.base = {"mma.sync.m16n8k16.bf16", file, line, 0xFFFFFFFFu, mma_m16n8k16_bf16_combine};
    for (int i = 0; i < 4; i++) {
        op.a[i] = a[i];
        op.c[i] = c[i];
    }
    op.b[0] = b[0];
    op.b[1] = b[1];
    warp_collective(op);
    for (int i = 0; i < 4; i++) d[i] = op.d[i]; /* d may alias c: read c before, write d after */
}

struct ldmatrix_op {
    hyp_sim_warp_op base;
    const void *addr;
    uint32_t r[4];
    unsigned num, trans;
};

inline void ldmatrix_combine(hyp_sim_warp_op *const *ops, unsigned live, hyp_sim_thread *caller) {
    ldmatrix_op *me = (ldmatrix_op *)ops[caller->lane];
    if (live != 0xFFFFFFFFu)
        fail(me->base.file, me->base.line,
             "%s needs all 32 lanes of a warp, but only lanes 0x%08x exist (a partial warp) — "
             "make the block size a multiple of 32",
             me->base.what, live);
    uint16_t M[4][8][8];
    for (unsigned i = 0; i < me->num; i++)
        for (unsigned r = 0; r < 8; r++) {
            const void *p = ((ldmatrix_op *)ops[8 * i + r])->addr;
            if (!p || ((uintptr_t)p & 15))
                fail(me->base.file, me->base.line,
                     "%s: lane %u gives row address %p for row %u of matrix %u, which is not "
                     "16-byte aligned — each row is 16 contiguous bytes on a 16-byte boundary",
                     me->base.what, 8 * i + r, p, r, i);
            std::memcpy(M[i][r], p, 16);
        }
    for (unsigned lane = 0; lane < 32; lane++) {
        ldmatrix_op *o = (ldmatrix_op *)ops[lane];
        unsigned g = lane >> 2, t = lane & 3;
        for (unsigned i = 0; i < me->num; i++) {
            uint32_t lo = me->trans ? M[i][2 * t][g] : M[i][g][2 * t];
            uint32_t hi = me->trans ? M[i][2 * t + 1][g] : M[i][g][2 * t + 1];
            o->r[i] = lo | (hi << 16);
        }
    }
}

inline void ldmatrix(unsigned *r, unsigned num, bool trans, const void *row_addr, const char *what,
                     const char *file, unsigned line) {
    ldmatrix_op op;
    op.base = {what, file, line, 0xFFFFFFFFu, ldmatrix_combine};
    op.addr = row_addr;
    op.num = num;
    op.trans = trans;
    warp_collective(op);
    for (unsigned i = 0; i < num; i++) r[i] = op.r[i];
}

/* cp.async: queued per thread and performed when its group is waited for (or the thread exits),
 * so a kernel that reads the destination before cp.async.wait_group reads stale data here as it
 * may on a GPU. A full queue performs its oldest copy early (that can only hide a bug). */
inline void cp_do(const hyp_sim_cp_async &c) {
    std::memcpy(c.dst, c.src, c.src_bytes);
    if (c.src_bytes < c.bytes) std::memset((char *)c.dst + c.src_bytes, 0, c.bytes - c.src_bytes);
}

inline void cp_async(void *dst, const void *src, unsigned bytes, unsigned src_bytes,
                     const char *file, unsigned line) {
    check_align(dst, bytes, "cp.async destination", file, line);
    check_align(src, bytes, "cp.async source", file, line);
    if (src_bytes > bytes)
        fail(file, line, "cp.async src-size %u exceeds the copy size %u — clamp it", src_bytes, bytes);
    hyp_sim_thread *t = cur;
    if (t->cp_n == HYP_SIM_CP_ASYNC_MAX) {
        cp_do(t->cp[0]);
        std::memmove(&t->cp[0], &t->cp[1], sizeof t->cp[0] * (HYP_SIM_CP_ASYNC_MAX - 1));
        t->cp_n--;
    }
    t->cp[t->cp_n++] = hyp_sim_cp_async{dst, src, bytes, src_bytes, t->cp_group};
}

inline void cp_async_commit() { cur->cp_group++; }

/* Completes every committed group but the newest n. */
inline void cp_async_wait_group(unsigned n) {
    hyp_sim_thread *t = cur;
    unsigned keep = 0;
    for (unsigned i = 0; i < t->cp_n; i++) {
        const hyp_sim_cp_async &c = t->cp[i];
        if (c.group < t->cp_group && t->cp_group - c.group > n) cp_do(c);
        else t->cp[keep++] = c;
    }
    t->cp_n = keep;
}

inline void cp_async_wait_all() {
    cp_async_commit();
    cp_async_wait_group(0);
}

} /* namespace hyp_sim */

/* ------------------------------------------------------------------------------------------ */
/* The CUDA built-ins */

namespace hyp_sim {
inline uint3 as_uint3(const hyp_sim_dim &d) { return uint3{d.x, d.y, d.z}; }
inline dim3 as_dim3(const hyp_sim_dim &d) { return dim3(d.x, d.y, d.z); }
} /* namespace hyp_sim */
/* Values, not lvalues (as on a GPU, they cannot be assigned or have their address taken). */
#define threadIdx (::hyp_sim::as_uint3(::hyp_sim::cur->thread_idx))
#define blockIdx (::hyp_sim::as_uint3(::hyp_sim::cur->block_idx))
#define blockDim (::hyp_sim::as_dim3(::hyp_sim::cur->block_dim))
#define gridDim (::hyp_sim::as_dim3(::hyp_sim::cur->grid_dim))
constexpr int warpSize = 32;

#define HYP_SIM_SITE const char *hyp_file = __builtin_FILE(), unsigned hyp_line = __builtin_LINE()

inline void __syncthreads(HYP_SIM_SITE) {
    hyp_sim_thread *me = ::hyp_sim::cur;
    ::hyp_sim::host->barrier(me, HYP_SIM_BAR_SYNC, 0, "__syncthreads", hyp_file, hyp_line);
    ::hyp_sim::cur = me;
}
inline int __syncthreads_count(int pred, HYP_SIM_SITE) {
    hyp_sim_thread *me = ::hyp_sim::cur;
    int r = ::hyp_sim::host->barrier(me, HYP_SIM_BAR_COUNT, pred, "__syncthreads_count", hyp_file, hyp_line);
    ::hyp_sim::cur = me;
    return r;
}
inline int __syncthreads_and(int pred, HYP_SIM_SITE) {
    hyp_sim_thread *me = ::hyp_sim::cur;
    int r = ::hyp_sim::host->barrier(me, HYP_SIM_BAR_AND, pred, "__syncthreads_and", hyp_file, hyp_line);
    ::hyp_sim::cur = me;
    return r;
}
inline int __syncthreads_or(int pred, HYP_SIM_SITE) {
    hyp_sim_thread *me = ::hyp_sim::cur;
    int r = ::hyp_sim::host->barrier(me, HYP_SIM_BAR_OR, pred, "__syncthreads_or", hyp_file, hyp_line);
    ::hyp_sim::cur = me;
    return r;
}

inline void __syncwarp(unsigned mask = 0xFFFFFFFFu, HYP_SIM_SITE) {
    hyp_sim_warp_op op = {"__syncwarp", hyp_file, hyp_line, mask, nullptr};
    hyp_sim_thread *me = ::hyp_sim::cur;
    ::hyp_sim::host->warp_sync(me, &op);
    ::hyp_sim::cur = me;
}

inline unsigned __activemask() { return ::hyp_sim::host->active_mask(::hyp_sim::cur); }

template <class T> inline T __shfl_sync(unsigned mask, T var, int srcLane, int width = warpSize, HYP_SIM_SITE) {
    return ::hyp_sim::shfl(mask, var, ::hyp_sim::SHFL_IDX, (unsigned)srcLane, width, "__shfl_sync", hyp_file, hyp_line);
}
template <class T> inline T __shfl_up_sync(unsigned mask, T var, unsigned delta, int width = warpSize, HYP_SIM_SITE) {
    return ::hyp_sim::shfl(mask, var, ::hyp_sim::SHFL_UP, delta, width, "__shfl_up_sync", hyp_file, hyp_line);
}
template <class T> inline T __shfl_down_sync(unsigned mask, T var, unsigned delta, int width = warpSize, HYP_SIM_SITE) {
    return ::hyp_sim::shfl(mask, var, ::hyp_sim::SHFL_DOWN, delta, width, "__shfl_down_sync", hyp_file, hyp_line);
}
template <class T> inline T __shfl_xor_sync(unsigned mask, T var, int laneMask, int width = warpSize, HYP_SIM_SITE) {
    return ::hyp_sim::shfl(mask, var, ::hyp_sim::SHFL_BFLY, (unsigned)laneMask, width, "__shfl_xor_sync", hyp_file, hyp_line);
}

inline unsigned __ballot_sync(unsigned mask, int pred, HYP_SIM_SITE) {
    return (unsigned)::hyp_sim::vote(mask, ::hyp_sim::VOTE_BALLOT, pred != 0, 0, "__ballot_sync", hyp_file, hyp_line);
}
inline int __any_sync(unsigned mask, int pred, HYP_SIM_SITE) {
    return (int)::hyp_sim::vote(mask, ::hyp_sim::VOTE_ANY, pred != 0, 0, "__any_sync", hyp_file, hyp_line);
}
inline int __all_sync(unsigned mask, int pred, HYP_SIM_SITE) {
    return (int)::hyp_sim::vote(mask, ::hyp_sim::VOTE_ALL, pred != 0, 0, "__all_sync", hyp_file, hyp_line);
}
#define HYP_SIM_REDUCE(NAME, KIND, T, SIGNED)                                                      \
    inline T NAME(unsigned mask, T value, HYP_SIM_SITE) {                                          \
        return (T)::hyp_sim::vote(mask, ::hyp_sim::KIND, (uint32_t)value, SIGNED, #NAME, hyp_file, \
                                  hyp_line);                                                       \
    }
HYP_SIM_REDUCE(__reduce_add_sync, RED_ADD, unsigned, 0)
HYP_SIM_REDUCE(__reduce_add_sync, RED_ADD, int, 1)
HYP_SIM_REDUCE(__reduce_min_sync, RED_MIN, unsigned, 0)
HYP_SIM_REDUCE(__reduce_min_sync, RED_MIN, int, 1)
HYP_SIM_REDUCE(__reduce_max_sync, RED_MAX, unsigned, 0)
HYP_SIM_REDUCE(__reduce_max_sync, RED_MAX, int, 1)
HYP_SIM_REDUCE(__reduce_and_sync, RED_AND, unsigned, 0)
HYP_SIM_REDUCE(__reduce_or_sync, RED_OR, unsigned, 0)
HYP_SIM_REDUCE(__reduce_xor_sync, RED_XOR, unsigned, 0)
#undef HYP_SIM_REDUCE
template <class T> inline unsigned __match_any_sync(unsigned mask, T value, HYP_SIM_SITE) {
    static_assert(sizeof(T) <= 8, "__match_any_sync takes 32- or 64-bit values");
    uint64_t v = 0;
    std::memcpy(&v, (const void *)&value, sizeof(T));
    return (unsigned)::hyp_sim::vote(mask, ::hyp_sim::MATCH_ANY, v, 0, "__match_any_sync", hyp_file, hyp_line);
}
template <class T> inline unsigned __match_all_sync(unsigned mask, T value, int *pred, HYP_SIM_SITE) {
    static_assert(sizeof(T) <= 8, "__match_all_sync takes 32- or 64-bit values");
    uint64_t v = 0;
    std::memcpy(&v, (const void *)&value, sizeof(T));
    return (unsigned)::hyp_sim::vote(mask, ::hyp_sim::MATCH_ALL, v, 0, "__match_all_sync", hyp_file, hyp_line, pred);
}

inline void __threadfence() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
inline void __threadfence_block() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
inline void __threadfence_system() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
[[noreturn]] inline void __trap(HYP_SIM_SITE) { ::hyp_sim::fail(hyp_file, hyp_line, "__trap() — the kernel trapped"); }
inline void __brkpt(HYP_SIM_SITE) { ::hyp_sim::fail(hyp_file, hyp_line, "__brkpt() — the kernel hit a breakpoint"); }
inline void __nanosleep(unsigned) {}
inline long long clock64() {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec; /* nanoseconds, not GPU cycles */
}

/* --- atomics: sequentially consistent GCC builtins (CUDA's are relaxed; this is stronger) --- */

#define HYP_SIM_ATOMIC_INT(T)                                                                      \
    inline T atomicAdd(T *p, T v) { return __atomic_fetch_add(p, v, __ATOMIC_SEQ_CST); }           \
    inline T atomicSub(T *p, T v) { return __atomic_fetch_sub(p, v, __ATOMIC_SEQ_CST); }           \
    inline T atomicExch(T *p, T v) { return __atomic_exchange_n(p, v, __ATOMIC_SEQ_CST); }         \
    inline T atomicAnd(T *p, T v) { return __atomic_fetch_and(p, v, __ATOMIC_SEQ_CST); }           \
    inline T atomicOr(T *p, T v) { return __atomic_fetch_or(p, v, __ATOMIC_SEQ_CST); }             \
    inline T atomicXor(T *p, T v) { return __atomic_fetch_xor(p, v, __ATOMIC_SEQ_CST); }           \
    inline T atomicMin(T *p, T v) {                                                                \
        T old = __atomic_load_n(p, __ATOMIC_SEQ_CST);                                              \
        while (v < old &&                                                                          \
               !__atomic_compare_exchange_n(p, &old, v, true, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) \
            ;                                                                                      \
        return old;                                                                                \
    }                                                                                              \
    inline T atomicMax(T *p, T v) {                                                                \
        T old = __atomic_load_n(p, __ATOMIC_SEQ_CST);                                              \
        while (v > old &&                                                                          \
               !__atomic_compare_exchange_n(p, &old, v, true, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) \
            ;                                                                                      \
        return old;                                                                                \
    }                                                                                              \
    inline T atomicCAS(T *p, T compare, T v) {                                                     \
        __atomic_compare_exchange_n(p, &compare, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);    \
        return compare;                                                                            \
    }
HYP_SIM_ATOMIC_INT(int)
HYP_SIM_ATOMIC_INT(unsigned)
HYP_SIM_ATOMIC_INT(long long)
HYP_SIM_ATOMIC_INT(unsigned long long)
#undef HYP_SIM_ATOMIC_INT
inline unsigned short atomicCAS(unsigned short *p, unsigned short compare, unsigned short v) {
    __atomic_compare_exchange_n(p, &compare, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
    return compare;
}
inline unsigned atomicInc(unsigned *p, unsigned limit) {
    unsigned old = __atomic_load_n(p, __ATOMIC_SEQ_CST);
    while (!__atomic_compare_exchange_n(p, &old, old >= limit ? 0u : old + 1, true, __ATOMIC_SEQ_CST,
                                        __ATOMIC_SEQ_CST))
        ;
    return old;
}
inline unsigned atomicDec(unsigned *p, unsigned limit) {
    unsigned old = __atomic_load_n(p, __ATOMIC_SEQ_CST);
    while (!__atomic_compare_exchange_n(p, &old, (old == 0 || old > limit) ? limit : old - 1, true,
                                        __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST))
        ;
    return old;
}

namespace hyp_sim {
/* Read-modify-write of a non-integer type through a same-sized integer CAS. */
template <class T, class U, class F> inline T atomic_rmw(T *p, F op) {
    static_assert(sizeof(T) == sizeof(U), "atomic_rmw needs a same-sized integer");
    U *q = reinterpret_cast<U *>(p);
    U old = __atomic_load_n(q, __ATOMIC_SEQ_CST), nu;
    T oldv, newv;
    do {
        std::memcpy((void *)&oldv, &old, sizeof(T)); /* void *: T may be a class (bf16) */
        newv = op(oldv);
        std::memcpy(&nu, (const void *)&newv, sizeof(T));
    } while (!__atomic_compare_exchange_n(q, &old, nu, true, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST));
    return oldv;
}
} /* namespace hyp_sim */

inline float atomicAdd(float *p, float v) {
    return ::hyp_sim::atomic_rmw<float, uint32_t>(p, [v](float x) { return x + v; });
}
inline double atomicAdd(double *p, double v) {
    return ::hyp_sim::atomic_rmw<double, uint64_t>(p, [v](double x) { return x + v; });
}
inline float atomicExch(float *p, float v) {
    uint32_t u, o;
    std::memcpy(&u, &v, 4);
    o = __atomic_exchange_n(reinterpret_cast<uint32_t *>(p), u, __ATOMIC_SEQ_CST);
    float r;
    std::memcpy(&r, &o, 4);
    return r;
}
inline __nv_bfloat16 atomicAdd(__nv_bfloat16 *p, __nv_bfloat16 v) {
    return ::hyp_sim::atomic_rmw<__nv_bfloat16, uint16_t>(
        p, [v](__nv_bfloat16 x) { return __float2bfloat16_rn(__bfloat162float(x) + __bfloat162float(v)); });
}
inline __half atomicAdd(__half *p, __half v) {
    return ::hyp_sim::atomic_rmw<__half, uint16_t>(
        p, [v](__half x) { return __float2half_rn(__half2float(x) + __half2float(v)); });
}
inline __nv_bfloat162 atomicAdd(__nv_bfloat162 *p, __nv_bfloat162 v) {
    return ::hyp_sim::atomic_rmw<__nv_bfloat162, uint32_t>(p, [v](__nv_bfloat162 x) {
        return __floats2bfloat162_rn(__low2float(x) + __low2float(v), __high2float(x) + __high2float(v));
    });
}

/* --- math intrinsics: the fast __ versions are computed at full precision here --- */

inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
inline double rsqrt(double x) { return 1.0 / sqrt(x); }
inline float __expf(float x) { return expf(x); }
inline float __exp10f(float x) { return exp10f(x); }
inline float __logf(float x) { return logf(x); }
inline float __log2f(float x) { return log2f(x); }
inline float __log10f(float x) { return log10f(x); }
inline float __sinf(float x) { return sinf(x); }
inline float __cosf(float x) { return cosf(x); }
inline float __tanf(float x) { return tanf(x); }
inline float __powf(float x, float y) { return powf(x, y); }
inline float __fdividef(float x, float y) { return x / y; }
inline float __frcp_rn(float x) { return 1.0f / x; }
inline float __fsqrt_rn(float x) { return sqrtf(x); }
inline float __frsqrt_rn(float x) { return 1.0f / sqrtf(x); }
/* CUDA never contracts an _rn intrinsic into a multiply-add; g++ with FMA instructions
 * (HYP_SIM_CXXFLAGS=-march=...) would fuse the inlined x * y into a following add. The empty asm
 * makes each result a value the compiler must materialize (no instruction emitted). */
inline float hyp_sim_rn(float r) {
#if defined(__x86_64__) || defined(__i386__)
    __asm__("" : "+x"(r));
#else
    volatile float v = r;
    r = v;
#endif
    return r;
}
inline float __fadd_rn(float x, float y) { return hyp_sim_rn(x + y); }
inline float __fsub_rn(float x, float y) { return hyp_sim_rn(x - y); }
inline float __fmul_rn(float x, float y) { return hyp_sim_rn(x * y); }
inline float __fdiv_rn(float x, float y) { return x / y; }
inline float __fmaf_rn(float x, float y, float z) { return fmaf(x, y, z); }
inline float __saturatef(float x) { return x > 0.0f ? (x < 1.0f ? x : 1.0f) : 0.0f; } /* NaN -> 0 */
inline void __sincosf(float x, float *s, float *c) { *s = sinf(x); *c = cosf(x); }

namespace hyp_sim {
/* float -> int as a GPU converts: NaN gives 0, out-of-range saturates. */
template <class I> inline I f2i(float x) {
    if (x != x) return 0;
    if (x >= (float)std::numeric_limits<I>::max()) return std::numeric_limits<I>::max();
    if (x <= (float)std::numeric_limits<I>::min()) return std::numeric_limits<I>::min();
    return (I)x;
}
} /* namespace hyp_sim */
inline int __float2int_rn(float x) { return ::hyp_sim::f2i<int>(nearbyintf(x)); }
inline int __float2int_rz(float x) { return ::hyp_sim::f2i<int>(truncf(x)); }
inline int __float2int_rd(float x) { return ::hyp_sim::f2i<int>(floorf(x)); }
inline int __float2int_ru(float x) { return ::hyp_sim::f2i<int>(ceilf(x)); }
inline unsigned __float2uint_rn(float x) { return ::hyp_sim::f2i<unsigned>(nearbyintf(x)); }
inline unsigned __float2uint_rz(float x) { return ::hyp_sim::f2i<unsigned>(truncf(x)); }
inline long long __float2ll_rn(float x) { return ::hyp_sim::f2i<long long>(nearbyintf(x)); }
inline float __int2float_rn(int x) { return (float)x; }
inline float __uint2float_rn(unsigned x) { return (float)x; }
inline int __float_as_int(float x) { int i; std::memcpy(&i, &x, 4); return i; }
inline unsigned __float_as_uint(float x) { unsigned i; std::memcpy(&i, &x, 4); return i; }
inline float __int_as_float(int i) { float x; std::memcpy(&x, &i, 4); return x; }
inline float __uint_as_float(unsigned i) { float x; std::memcpy(&x, &i, 4); return x; }
inline long long __double_as_longlong(double x) { long long i; std::memcpy(&i, &x, 8); return i; }
inline double __longlong_as_double(long long i) { double x; std::memcpy(&x, &i, 8); return x; }

/* CUDA's min/max accept mixed arithmetic types (int with unsigned gives unsigned, as in C). */
template <class A, class B, class = std::enable_if_t<std::is_arithmetic<A>::value && std::is_arithmetic<B>::value>>
inline std::common_type_t<A, B> min(A a, B b) {
    using C = std::common_type_t<A, B>;
    return (C)b < (C)a ? (C)b : (C)a;
}
template <class A, class B, class = std::enable_if_t<std::is_arithmetic<A>::value && std::is_arithmetic<B>::value>>
inline std::common_type_t<A, B> max(A a, B b) {
    using C = std::common_type_t<A, B>;
    return (C)a < (C)b ? (C)b : (C)a;
}

inline int __popc(unsigned x) { return __builtin_popcount(x); }
inline int __popcll(unsigned long long x) { return __builtin_popcountll(x); }
inline int __clz(int x) { return x ? __builtin_clz((unsigned)x) : 32; }
inline int __clzll(long long x) { return x ? __builtin_clzll((unsigned long long)x) : 64; }
inline int __ffs(int x) { return __builtin_ffs(x); }
inline int __ffsll(long long x) { return __builtin_ffsll(x); }
inline unsigned __brev(unsigned x) {
    x = ((x >> 1) & 0x55555555u) | ((x & 0x55555555u) << 1);
    x = ((x >> 2) & 0x33333333u) | ((x & 0x33333333u) << 2);
    x = ((x >> 4) & 0x0F0F0F0Fu) | ((x & 0x0F0F0F0Fu) << 4);
    return __builtin_bswap32(x);
}
inline unsigned __byte_perm(unsigned x, unsigned y, unsigned s) {
    uint64_t v = ((uint64_t)y << 32) | x;
    unsigned r = 0;
    for (int i = 0; i < 4; i++) r |= (unsigned)((v >> (8 * ((s >> (4 * i)) & 7))) & 0xFF) << (8 * i);
    return r;
}
inline unsigned __funnelshift_l(unsigned lo, unsigned hi, unsigned shift) {
    uint64_t v = ((uint64_t)hi << 32) | lo;
    return (unsigned)((v << (shift & 31)) >> 32);
}
inline unsigned __funnelshift_r(unsigned lo, unsigned hi, unsigned shift) {
    uint64_t v = ((uint64_t)hi << 32) | lo;
    return (unsigned)(v >> (shift & 31));
}
inline unsigned __umulhi(unsigned a, unsigned b) { return (unsigned)(((uint64_t)a * b) >> 32); }
inline int __mulhi(int a, int b) { return (int)(((int64_t)a * b) >> 32); }
inline unsigned long long __umul64hi(unsigned long long a, unsigned long long b) {
    return (unsigned long long)(((unsigned __int128)a * b) >> 64);
}
inline int __mul24(int a, int b) { return (int)((int64_t)((a << 8) >> 8) * ((b << 8) >> 8)); }
inline unsigned __umul24(unsigned a, unsigned b) { return (a & 0xFFFFFFu) * (b & 0xFFFFFFu); }

/* Cache-hinted loads and stores are plain accesses on the host. */
template <class T> inline T __ldg(const T *p) { return *p; }
template <class T> inline T __ldcg(const T *p) { return *p; }
template <class T> inline T __ldca(const T *p) { return *p; }
template <class T> inline T __ldcs(const T *p) { return *p; }
template <class T> inline T __ldlu(const T *p) { return *p; }
template <class T> inline T __ldcv(const T *p) { return *p; }
template <class T> inline void __stcg(T *p, T v) { *p = v; }
template <class T> inline void __stcs(T *p, T v) { *p = v; }
template <class T> inline void __stwb(T *p, T v) { *p = v; }
template <class T> inline void __stwt(T *p, T v) { *p = v; }

/* ------------------------------------------------------------------------------------------ */
/* Hooks: out-of-bounds indexing (-fsanitize=bounds), assert, and the module's entry points.
 * Hidden and weak, so they bind inside the module and a module of several sources still links. */

extern "C" {
struct hyp_ubsan_loc {
    const char *file;
    uint32_t line, column;
};
struct hyp_ubsan_type {
    uint16_t kind, info;
    char name[1];
};
struct hyp_ubsan_oob {
    hyp_ubsan_loc loc;
    const hyp_ubsan_type *array_type, *index_type;
};

__attribute__((visibility("hidden"), weak)) void __ubsan_handle_out_of_bounds(hyp_ubsan_oob *d,
                                                                              uintptr_t index) {
    long long v = (long long)index;
    unsigned bits = d->index_type->kind == 0 ? 1u << (d->index_type->info >> 1) : 64;
    if (d->index_type->kind == 0 && (d->index_type->info & 1) && bits < 64) /* sign-extend */
        v = (long long)((uint64_t)index << (64 - bits)) >> (64 - bits);
    else if (d->index_type->kind == 0 && bits < 64)
        v = (long long)(index & ((1ull << bits) - 1));
    ::hyp_sim::fail(d->loc.file, d->loc.line,
                    "out-of-bounds index %lld into %s (column %u) — a __shared__, local or "
                    "fragment array indexed past its bounds; check the index computation",
                    v, d->array_type->name, d->loc.column);
}
__attribute__((visibility("hidden"), weak)) void
__ubsan_handle_out_of_bounds_abort(hyp_ubsan_oob *d, uintptr_t index) {
    __ubsan_handle_out_of_bounds(d, index);
}

/* A failed assert() in a kernel fails the launch (a GPU traps the kernel) instead of aborting. */
__attribute__((visibility("hidden"), weak)) void __assert_fail(const char *expr, const char *file,
                                                               unsigned int line,
                                                               const char *func) noexcept {
    ::hyp_sim::fail(file, line, "assertion `%s` failed in %s — the kernel's own check", expr, func);
}

__attribute__((weak)) unsigned hyp_sim_module_abi(void) { return HYP_SIM_ABI_VERSION; }
__attribute__((weak)) void hyp_sim_module_bind(const hyp_sim_host_api *api) { ::hyp_sim::host = api; }
__attribute__((weak)) void hyp_sim_module_run_thread(void (*stub)(void **), void **args,
                                                     hyp_sim_thread *t) {
    ::hyp_sim::cur = t;
    stub(args);
    ::hyp_sim::cur = t;
    for (unsigned i = 0; i < t->cp_n; i++) ::hyp_sim::cp_do(t->cp[i]); /* copies still in flight */
    t->cp_n = 0;
    if (::hyp_sim::thread_end_hook) ::hyp_sim::thread_end_hook(t);
}
#ifdef HYP_SIM_COUNT
/* -fsanitize=kernel-address with call instrumentation makes every load and store of the module a
 * call below (no shadow memory, no runtime library): each reports its address and size. */
#define HYP_SIM_COUNT_FN(kind, n)                                                                   \
    __attribute__((visibility("hidden"), no_sanitize_address)) void __asan_##kind##n##_noabort(   \
        uintptr_t a) {                                                                             \
        if (::hyp_sim::count_fn) ::hyp_sim::count_fn(a, n, #kind[0] == 's');                       \
    }
HYP_SIM_COUNT_FN(load, 1) HYP_SIM_COUNT_FN(load, 2) HYP_SIM_COUNT_FN(load, 4) HYP_SIM_COUNT_FN(load, 8)
HYP_SIM_COUNT_FN(load, 16) HYP_SIM_COUNT_FN(store, 1) HYP_SIM_COUNT_FN(store, 2) HYP_SIM_COUNT_FN(store, 4)
HYP_SIM_COUNT_FN(store, 8) HYP_SIM_COUNT_FN(store, 16)
#undef HYP_SIM_COUNT_FN
__attribute__((visibility("hidden"), no_sanitize_address)) void __asan_loadN_noabort(uintptr_t a, size_t n) {
    if (::hyp_sim::count_fn) ::hyp_sim::count_fn(a, n, 0);
}
__attribute__((visibility("hidden"), no_sanitize_address)) void __asan_storeN_noabort(uintptr_t a, size_t n) {
    if (::hyp_sim::count_fn) ::hyp_sim::count_fn(a, n, 1);
}
__attribute__((visibility("hidden"))) void __asan_handle_no_return(void) {}
__attribute__((visibility("default"))) void hyp_sim_count_bind(void (*fn)(uintptr_t, size_t, int)) {
    ::hyp_sim::count_fn = fn;
}
#endif
} /* extern "C" */

#endif
