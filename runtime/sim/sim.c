/* sim.c — the CPU simulator's execution engine for rendered CUDA kernels: loads a compiled module
 * and runs grids with every GPU thread as a fiber (API and cost: sim.h; the module side:
 * kernels/sim/prelude.h; what is detected and how: kernels/sim/README.md; compiling a module and
 * its cache: sim_compile.c, which this file never calls).
 *
 * Model. A launch hands blocks to OS threads (the caller plus opts.threads-1 pthreads) through an
 * atomic counter. An OS thread runs one block at a time, every GPU thread of it as a fiber on a
 * guard-paged stack, cooperatively: a fiber runs until it reaches a barrier or a warp collective
 * or returns, then the scheduler (on the OS thread's own stack) picks the next runnable fiber,
 * in thread-index order or, with shuffling on, at random from a per-block seeded RNG. A
 * module's static __shared__ arrays are thread_local, so they are per block exactly because a
 * block never leaves its OS thread and an OS thread holds one block at a time.
 *
 * Invariants: only the fiber in r->current runs on an OS thread; a fiber is in the run queue iff
 * its state is F_READY; a kernel error sets the launch's `failed` word once (first error wins,
 * lock-free, so a fault handler can report) and abandons the block: its fibers are never resumed
 * and their stacks are simply rearmed by the next block. Never exit() or abort() here: every
 * kernel bug becomes a HYP_EFAIL with a message. */
#define _GNU_SOURCE /* REG_RIP, dladdr, MAP_NORESERVE */
#include "sim.h"

#include <dlfcn.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

#include "../../kernels/sim/sim_abi.h"

#define SIM_MAX_BLOCK_THREADS 1024u
#define SIM_MAX_DYN_SHARED (227u * 1024u) /* sm_90's opt-in maximum; sm_80 allows 163 KiB */
#define SIM_ALTSTACK_BYTES (64u * 1024u)
#define SIM_POOL_MAX 64
#define SIM_CANARY 0xA5

/* ------------------------------------------------------------------------------------------ */
/* Context switching: a hand-written x86-64 switch of the callee-saved registers (~5 ns), or
 * ucontext elsewhere (a signal-mask syscall per switch, ~1 µs). MXCSR and the x87 control word
 * are not switched (fldcw alone cost more than the rest of a switch): kernel code never changes
 * the floating-point environment, CUDA rounding modes being per instruction. */

#if defined(__x86_64__) && !defined(HYP_SIM_UCONTEXT)
#define SIM_ASM_SWITCH 1
void hyp_sim_ctx_switch(void **save_sp, void *to_sp) __attribute__((visibility("hidden")));
void hyp_sim_ctx_start(void) __attribute__((visibility("hidden")));
__asm__(".text\n"
        ".p2align 4\n"
        ".globl hyp_sim_ctx_switch\n"
        ".hidden hyp_sim_ctx_switch\n"
        ".type hyp_sim_ctx_switch,@function\n"
        "hyp_sim_ctx_switch:\n"
        "  pushq %rbp\n"
        "  pushq %rbx\n"
        "  pushq %r12\n"
        "  pushq %r13\n"
        "  pushq %r14\n"
        "  pushq %r15\n"
        "  movq %rsp, (%rdi)\n"
        "  movq %rsi, %rsp\n"
        "  popq %r15\n"
        "  popq %r14\n"
        "  popq %r13\n"
        "  popq %r12\n"
        "  popq %rbx\n"
        "  popq %rbp\n"
        "  ret\n"
        ".size hyp_sim_ctx_switch, .-hyp_sim_ctx_switch\n"
        ".p2align 4\n"
        ".globl hyp_sim_ctx_start\n"
        ".hidden hyp_sim_ctx_start\n"
        ".type hyp_sim_ctx_start,@function\n"
        "hyp_sim_ctx_start:\n" /* a new fiber's first `ret` lands here: r12 = fiber, r13 = entry */
        "  movq %r12, %rdi\n"
        "  callq *%r13\n"
        "  ud2\n"
        ".size hyp_sim_ctx_start, .-hyp_sim_ctx_start\n");
#endif

/* AddressSanitizer builds must be told about stack switches. */
#if defined(__SANITIZE_ADDRESS__)
#define SIM_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define SIM_ASAN 1
#endif
#endif
#ifdef SIM_ASAN
void __sanitizer_start_switch_fiber(void **fake_stack_save, const void *bottom, size_t size);
void __sanitizer_finish_switch_fiber(void *fake_stack_save, const void **bottom_old,
                                     size_t *size_old);
void __asan_unpoison_memory_region(void const volatile *addr, size_t size);
#endif

/* ------------------------------------------------------------------------------------------ */
/* State */

enum { F_READY, F_RUNNING, F_BARRIER, F_WARP, F_EXITED, F_PARKED };

struct sim_runner;
struct sim_launch;

typedef struct sim_fiber {
    hyp_sim_thread t; /* what the module sees; t.rt points back here */
    void *sp;         /* saved stack pointer while switched out */
#ifndef SIM_ASM_SWITCH
    ucontext_t uc;
#endif
    unsigned char *stack_lo, *stack_hi; /* usable stack; the guard page is just below stack_lo */
    struct sim_runner *r;
    int state;
    const char *what, *file; /* where it waits (F_BARRIER) */
    unsigned line;
    int bar_value;        /* in: this thread's predicate; out: the block-wide result */
    hyp_sim_warp_op *wop; /* F_WARP: the op it waits in (on its own stack) */
    int (*park_ready)(void *); /* F_PARKED: runnable again once park_ready(park_arg) != 0 */
    void *park_arg;
#ifdef SIM_ASAN
    void *asan_fake;
#endif
} sim_fiber;

/* A warp's collective state, kept compact so that a lane's arrival checks its mates with bit
 * operations and a short scan instead of touching 31 fibers. */
typedef struct sim_warp {
    unsigned exist;      /* lanes that exist (a partial last warp has fewer) */
    unsigned waiting;    /* lanes waiting in a warp collective ... */
    unsigned exited;     /* ... that have returned ... */
    unsigned at_barrier; /* ... that wait at a block barrier */
    unsigned mask[32];   /* a waiting lane's mask, what and op */
    const char *what[32];
    hyp_sim_warp_op *op[32];
} sim_warp;

/* One per OS thread running blocks; pooled across launches. */
typedef struct sim_runner {
    struct sim_runner *next;
    /* fiber stacks: cap slots of [guard page][stack_bytes] */
    unsigned char *stack_map;
    size_t stack_map_len, stack_bytes;
    unsigned cap;
    sim_fiber *fibers;
    unsigned *runq;
    sim_warp *warps;
    hyp_sim_cp_async *cpq; /* cap x HYP_SIM_CP_ASYNC_MAX: kept out of the fibers, which stay small */
    /* dynamic shared memory: [guard][dyn_pages][guard]; this launch's bytes end at the back guard */
    unsigned char *dyn_map;
    size_t dyn_map_len, dyn_rw_pages;
    unsigned char *dyn_front, *dyn_data, *dyn_back;
    size_t dyn_bytes;
    unsigned char *alt; /* signal stack */
    /* the block being run */
    struct sim_launch *L;
    unsigned n, nwarps, q_head, q_len, n_exited, n_barrier;
    unsigned n_parked; /* fibers in F_PARKED (rt_park) */
    int failed;
    volatile sig_atomic_t in_handler;
    uint64_t rng;
    sim_fiber *current;
    void *sched_sp;
#ifndef SIM_ASM_SWITCH
    ucontext_t sched_uc;
#endif
#ifdef SIM_ASAN
    void *asan_fake;
    const void *sched_bottom;
    size_t sched_size;
#endif
} sim_runner;

struct hyp_sim_module {
    void *handle;
    void (*run_thread)(void (*)(void **), void **, hyp_sim_thread *);
    char path[512];
};

typedef struct sim_launch {
    hyp_sim_module *m;
    const char *kernel;
    void (*stub)(void **);
    void **args;
    hyp_dim3 grid, block;
    size_t shared_bytes, stack_bytes;
    unsigned nthreads;
    uint64_t nblocks;
    int shuffle;
    uint64_t seed;
    _Atomic uint64_t next_block;
    _Atomic int failed; /* 0: fine, 1: a message is being written, 2: written */
    char msg[sizeof(((hyp_err *)0)->msg)];
} sim_launch;

static _Thread_local sim_runner *tls_runner;
static size_t g_page;
static _Atomic unsigned long long g_block_serial; /* hyp_sim_thread.block_serial */

/* ------------------------------------------------------------------------------------------ */
/* Errors */

static void launch_error(sim_launch *L, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void launch_error(sim_launch *L, const char *fmt, ...) {
    int expect = 0;
    if (!atomic_compare_exchange_strong(&L->failed, &expect, 1)) return; /* first error wins */
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(L->msg, sizeof L->msg, fmt, ap);
    va_end(ap);
    atomic_store(&L->failed, 2);
}

/* "block (1,0,0) thread (3,0,0)" */
static const char *who(const sim_fiber *f, char *buf, size_t n) {
    const hyp_sim_thread *t = &f->t;
    snprintf(buf, n, "block (%u,%u,%u) thread (%u,%u,%u)", t->block_idx.x, t->block_idx.y,
             t->block_idx.z, t->thread_idx.x, t->thread_idx.y, t->thread_idx.z);
    return buf;
}

static const char *tid3(const sim_fiber *f, char *buf, size_t n) {
    snprintf(buf, n, "(%u,%u,%u)", f->t.thread_idx.x, f->t.thread_idx.y, f->t.thread_idx.z);
    return buf;
}

/* ------------------------------------------------------------------------------------------ */
/* Fibers */

static void fiber_main(sim_fiber *f);

/* A fiber abandoned mid-kernel (fiber_fail) never unwinds, so ASan's redzones of its frames stay
 * on the stack; a reused stack must start clean or ASan reports its own stale poison. */
static void stack_fresh(sim_fiber *f) {
#ifdef SIM_ASAN
    __asan_unpoison_memory_region(f->stack_lo, (size_t)(f->stack_hi - f->stack_lo));
#else
    (void)f;
#endif
}

#ifdef SIM_ASM_SWITCH
static void ctx_arm(sim_fiber *f) {
    stack_fresh(f);
    uintptr_t top = (uintptr_t)f->stack_hi & ~(uintptr_t)15;
    uint64_t *sp = (uint64_t *)(top - 72); /* the `ret` slot at top-24: 16-aligned after ret */
    sp[0] = 0;                               /* r15 */
    sp[1] = 0;                               /* r14 */
    sp[2] = (uint64_t)(uintptr_t)fiber_main; /* r13 */
    sp[3] = (uint64_t)(uintptr_t)f;          /* r12 */
    sp[4] = 0;                               /* rbx */
    sp[5] = 0;                               /* rbp */
    sp[6] = (uint64_t)(uintptr_t)hyp_sim_ctx_start;
    sp[7] = 0; /* a zero "return address" above: unwinders stop here */
    f->sp = sp;
}
static inline void ctx_to_fiber(sim_runner *r, sim_fiber *f) { hyp_sim_ctx_switch(&r->sched_sp, f->sp); }
static inline void ctx_to_sched(sim_runner *r, sim_fiber *f) { hyp_sim_ctx_switch(&f->sp, r->sched_sp); }
static inline void hyp_sim_ctx_switch_any(sim_fiber *from, sim_fiber *to) { hyp_sim_ctx_switch(&from->sp, to->sp); }
#else
static void fiber_main_uc(unsigned hi, unsigned lo) {
    fiber_main((sim_fiber *)(((uintptr_t)hi << 32) | (uintptr_t)lo));
}
static void ctx_arm(sim_fiber *f) {
    stack_fresh(f);
    getcontext(&f->uc);
    f->uc.uc_stack.ss_sp = f->stack_lo;
    f->uc.uc_stack.ss_size = (size_t)(f->stack_hi - f->stack_lo);
    f->uc.uc_link = NULL;
    uintptr_t p = (uintptr_t)f;
    makecontext(&f->uc, (void (*)(void))fiber_main_uc, 2, (unsigned)(p >> 32), (unsigned)p);
}
static inline void ctx_to_fiber(sim_runner *r, sim_fiber *f) { swapcontext(&r->sched_uc, &f->uc); }
static inline void ctx_to_sched(sim_runner *r, sim_fiber *f) { swapcontext(&f->uc, &r->sched_uc); }
static inline void hyp_sim_ctx_switch_any(sim_fiber *from, sim_fiber *to) { swapcontext(&from->uc, &to->uc); }
#endif

static uint64_t splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static void q_push(sim_runner *r, unsigned i) {
    unsigned at = r->q_head + r->q_len;
    r->runq[at >= r->n ? at - r->n : at] = i;
    r->q_len++;
}

static unsigned q_pop(sim_runner *r) {
    if (r->L->shuffle && r->q_len > 1) { /* a random runnable fiber goes next */
        unsigned k = (unsigned)(((splitmix64(&r->rng) >> 32) * r->q_len) >> 32);
        unsigned a = r->q_head, b = r->q_head + k >= r->n ? r->q_head + k - r->n : r->q_head + k;
        unsigned tmp = r->runq[a];
        r->runq[a] = r->runq[b];
        r->runq[b] = tmp;
    }
    unsigned i = r->runq[r->q_head];
    r->q_head = r->q_head + 1 == r->n ? 0 : r->q_head + 1;
    r->q_len--;
    return i;
}

/* Scheduler -> fiber, and back when the fiber blocks, exits or fails. */
static void run_fiber(sim_runner *r, sim_fiber *f) {
#ifdef SIM_ASAN
    __sanitizer_start_switch_fiber(&r->asan_fake, f->stack_lo, (size_t)(f->stack_hi - f->stack_lo));
#endif
    ctx_to_fiber(r, f);
#ifdef SIM_ASAN
    __sanitizer_finish_switch_fiber(r->asan_fake, NULL, NULL);
#endif
}

/* Switches from fiber f to the next runnable fiber, directly (one switch instead of two through
 * the scheduler), or to the scheduler when none is runnable or the launch failed. Returns when
 * something runs f again. ASan builds always go through the scheduler (its fiber hooks need to
 * know the scheduler's stack, learnt on the first switch from it). */
static void fiber_block(sim_fiber *f) {
    sim_runner *r = f->r;
#ifndef SIM_ASAN
    if (r->q_len > 0 && !r->failed && !atomic_load_explicit(&r->L->failed, memory_order_relaxed)) {
        sim_fiber *g = &r->fibers[q_pop(r)];
        g->state = F_RUNNING;
        r->current = g;
        if (g != f) hyp_sim_ctx_switch_any(f, g);
        return;
    }
#else
    __sanitizer_start_switch_fiber(&f->asan_fake, r->sched_bottom, r->sched_size);
#endif
    ctx_to_sched(r, f);
#ifdef SIM_ASAN
    __sanitizer_finish_switch_fiber(f->asan_fake, NULL, NULL);
#endif
}

/* Fiber -> the next fiber or the scheduler, for good (exited or abandoned). */
static _Noreturn void fiber_leave(sim_fiber *f) {
    sim_runner *r = f->r;
#ifndef SIM_ASAN
    if (r->q_len > 0 && !r->failed && !atomic_load_explicit(&r->L->failed, memory_order_relaxed)) {
        sim_fiber *g = &r->fibers[q_pop(r)];
        g->state = F_RUNNING;
        r->current = g;
        hyp_sim_ctx_switch_any(f, g);
    }
#else
    __sanitizer_start_switch_fiber(NULL, r->sched_bottom, r->sched_size);
#endif
    ctx_to_sched(r, f);
    __builtin_unreachable();
}

/* Reports a kernel error for the running fiber f and abandons its block. */
static _Noreturn void fiber_fail(sim_fiber *f, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static _Noreturn void fiber_fail(sim_fiber *f, const char *fmt, ...) {
    sim_runner *r = f->r;
    char body[900];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(body, sizeof body, fmt, ap);
    va_end(ap);
    launch_error(r->L, "%s", body);
    r->failed = 1;
    fiber_leave(f);
}

static const char *fix_divergent =
    "every thread of a block must reach the same __syncthreads the same number of times; "
    "move the barrier out of the thread-dependent branch or loop";

static void fiber_exit(sim_fiber *f) {
    sim_runner *r = f->r;
    char a[48], b[48];
    f->state = F_EXITED;
    r->n_exited++;
    if (r->n_barrier > 0) {
        for (unsigned i = 0; i < r->n; i++) {
            sim_fiber *g = &r->fibers[i];
            if (g->state != F_BARRIER) continue;
            fiber_fail(f,
                       "%s:%u: kernel '%s' block (%u,%u,%u): thread %s exited while %u threads wait "
                       "at %s (e.g. thread %s) — a thread returned before a barrier; guard the "
                       "work, not the barrier, so every thread reaches it",
                       g->file, g->line, r->L->kernel, f->t.block_idx.x, f->t.block_idx.y,
                       f->t.block_idx.z, tid3(f, a, sizeof a), r->n_barrier, g->what,
                       tid3(g, b, sizeof b));
        }
    }
    unsigned w = f->t.warp;
    sim_warp *W = &r->warps[w];
    W->exited |= 1u << f->t.lane;
    for (unsigned waiting = W->waiting; waiting; waiting &= waiting - 1) {
        unsigned m = (unsigned)__builtin_ctz(waiting);
        sim_fiber *g = &r->fibers[w * 32 + m];
        if (W->mask[m] & (1u << f->t.lane))
            fiber_fail(f,
                       "%s:%u: kernel '%s' block (%u,%u,%u): thread %s exited while thread %s "
                       "waits for it in %s with mask 0x%08x — every lane named in a mask must "
                       "reach the same warp operation; do not return early before it",
                       g->wop->file, g->wop->line, r->L->kernel, f->t.block_idx.x,
                       f->t.block_idx.y, f->t.block_idx.z, tid3(f, a, sizeof a),
                       tid3(g, b, sizeof b), g->wop->what, g->wop->mask);
    }
    fiber_leave(f);
}

static void fiber_main(sim_fiber *f) {
    sim_runner *r = f->r;
#ifdef SIM_ASAN
    __sanitizer_finish_switch_fiber(NULL, &r->sched_bottom, &r->sched_size);
#endif
    r->L->m->run_thread(r->L->stub, r->L->args, &f->t);
    fiber_exit(f);
}

/* ------------------------------------------------------------------------------------------ */
/* Block barrier and warp collectives (the host API the module calls) */

static void barrier_release(sim_runner *r, sim_fiber *self, int op) {
    sim_fiber *a = &r->fibers[0];
    unsigned count = 0;
    for (unsigned i = 0; i < r->n; i++) {
        sim_fiber *b = &r->fibers[i];
        if (b->line != a->line || (b->file != a->file && strcmp(b->file, a->file) != 0) ||
            (b->what != a->what && strcmp(b->what, a->what) != 0)) {
            char x[48], y[48];
            fiber_fail(self,
                       "%s:%u: kernel '%s' block (%u,%u,%u): barrier reached from divergent code: "
                       "thread %s waits at %s at %s:%u, thread %s at %s at %s:%u — %s",
                       a->file, a->line, r->L->kernel, a->t.block_idx.x, a->t.block_idx.y,
                       a->t.block_idx.z, tid3(a, x, sizeof x), a->what, a->file, a->line,
                       tid3(b, y, sizeof y), b->what, b->file, b->line, fix_divergent);
        }
        count += b->bar_value != 0;
    }
    int result = op == HYP_SIM_BAR_COUNT ? (int)count
                 : op == HYP_SIM_BAR_AND ? count == r->n
                 : op == HYP_SIM_BAR_OR  ? count > 0
                                         : 0;
    for (unsigned i = 0; i < r->n; i++) {
        r->fibers[i].bar_value = result;
        r->fibers[i].state = F_READY;
        q_push(r, i);
    }
    for (unsigned w = 0; w < r->nwarps; w++) r->warps[w].at_barrier = 0;
    r->n_barrier = 0;
}

static int rt_barrier(hyp_sim_thread *t, int op, int value, const char *what, const char *file,
                      unsigned line) {
    sim_fiber *f = (sim_fiber *)t->rt;
    sim_runner *r = f->r;
    char a[48], b[48];
    unsigned w = t->warp, bit = 1u << t->lane;
    sim_warp *W = &r->warps[w];
    for (unsigned waiting = W->waiting; waiting; waiting &= waiting - 1) {
        /* a warp mate waiting for this lane in a collective can never finish */
        unsigned m = (unsigned)__builtin_ctz(waiting);
        sim_fiber *g = &r->fibers[w * 32 + m];
        if (W->mask[m] & bit)
            fiber_fail(f,
                       "%s:%u: kernel '%s' %s: barrier reached from divergent code: it waits at "
                       "%s while thread %s of its warp waits for it in %s (mask 0x%08x) at %s:%u "
                       "— %s",
                       file, line, r->L->kernel, who(f, a, sizeof a), what, tid3(g, b, sizeof b),
                       g->wop->what, g->wop->mask, g->wop->file, g->wop->line, fix_divergent);
    }
    if (r->n_exited > 0) {
        for (unsigned i = 0; i < r->n; i++) {
            sim_fiber *g = &r->fibers[i];
            if (g->state != F_EXITED) continue;
            fiber_fail(f,
                       "%s:%u: kernel '%s' block (%u,%u,%u): thread %s exited while thread %s "
                       "waits at %s — a thread returned before a barrier; guard the work, not "
                       "the barrier, so every thread reaches it",
                       file, line, r->L->kernel, t->block_idx.x, t->block_idx.y, t->block_idx.z,
                       tid3(g, a, sizeof a), tid3(f, b, sizeof b), what);
        }
    }
    f->state = F_BARRIER;
    W->at_barrier |= bit;
    f->what = what;
    f->file = file;
    f->line = line;
    f->bar_value = value;
    if (++r->n_barrier == r->n) barrier_release(r, f, op);
    fiber_block(f);
    return f->bar_value;
}

static void rt_warp_sync(hyp_sim_thread *t, hyp_sim_warp_op *op) {
    sim_fiber *f = (sim_fiber *)t->rt;
    sim_runner *r = f->r;
    char a[64], b[48];
    unsigned w = t->warp, lane = t->lane, bit = 1u << lane;
    if (!(op->mask & bit))
        fiber_fail(f,
                   "%s:%u: kernel '%s' %s: %s with mask 0x%08x, which does not name the calling "
                   "lane %u — a lane must be in the mask it passes (use __activemask() or the "
                   "mask of the lanes that take this branch)",
                   op->file, op->line, r->L->kernel, who(f, a, sizeof a), op->what, op->mask, lane);
    sim_warp *W = &r->warps[w];
    unsigned live = op->mask & W->exist;
    unsigned gone = live & W->exited, blocked = live & W->at_barrier;
    if (gone) {
        unsigned m = (unsigned)__builtin_ctz(gone);
        fiber_fail(f,
                   "%s:%u: kernel '%s' %s: %s with mask 0x%08x names lane %u (thread %s), "
                   "which has exited — every lane named in the mask must reach the call; do "
                   "not return early before it, or pass the mask of the lanes still running",
                   op->file, op->line, r->L->kernel, who(f, a, sizeof a), op->what, op->mask, m,
                   tid3(&r->fibers[w * 32 + m], b, sizeof b));
    }
    if (blocked) {
        unsigned m = (unsigned)__builtin_ctz(blocked);
        sim_fiber *g = &r->fibers[w * 32 + m];
        fiber_fail(f,
                   "%s:%u: kernel '%s' %s: %s with mask 0x%08x waits for lane %u (thread %s), "
                   "which waits at %s at %s:%u — a warp collective reached from divergent "
                   "code; every lane in the mask must reach the same call",
                   op->file, op->line, r->L->kernel, who(f, a, sizeof a), op->what, op->mask, m,
                   tid3(g, b, sizeof b), g->what, g->file, g->line);
    }
    /* a waiting lane whose mask names this one must have passed the same mask to the same op */
    for (unsigned waiting = W->waiting; waiting; waiting &= waiting - 1) {
        unsigned m = (unsigned)__builtin_ctz(waiting);
        if (!(W->mask[m] & bit)) continue;
        if (W->mask[m] == op->mask &&
            (W->what[m] == op->what || strcmp(W->what[m], op->what) == 0))
            continue;
        hyp_sim_warp_op *g = W->op[m];
        fiber_fail(f,
                   "%s:%u: kernel '%s' %s: %s with mask 0x%08x, but lane %u (thread %s) waits "
                   "for this lane in %s with mask 0x%08x at %s:%u — all lanes named in a mask "
                   "must call the same warp operation with the same mask",
                   op->file, op->line, r->L->kernel, who(f, a, sizeof a), op->what, op->mask, m,
                   tid3(&r->fibers[w * 32 + m], b, sizeof b), g->what, g->mask, g->file, g->line);
    }
    f->state = F_WARP;
    f->wop = op;
    W->mask[lane] = op->mask;
    W->what[lane] = op->what;
    W->op[lane] = op;
    W->waiting |= bit;
    if ((W->waiting & live) == live) {
        unsigned all_same = 1;
        for (unsigned rest = live; rest; rest &= rest - 1)
            all_same &= W->mask[__builtin_ctz(rest)] == op->mask;
        if (all_same) {
            hyp_sim_warp_op *ops[32] = {0};
            for (unsigned rest = live; rest; rest &= rest - 1) {
                unsigned m = (unsigned)__builtin_ctz(rest);
                ops[m] = W->op[m];
            }
            if (op->combine) op->combine(ops, live, t);
            W->waiting &= ~live;
            for (unsigned rest = live & ~bit; rest; rest &= rest - 1) {
                unsigned i = w * 32 + (unsigned)__builtin_ctz(rest);
                r->fibers[i].state = F_READY;
                q_push(r, i);
            }
            if (!r->L->shuffle) {
                f->state = F_RUNNING;
                return;
            }
            f->state = F_READY; /* shuffling: interleave other fibers here too */
            q_push(r, f->t.linear);
        }
    }
    fiber_block(f);
}

static _Noreturn void rt_fail(hyp_sim_thread *t, const char *file, unsigned line, const char *msg) {
    sim_fiber *f = (sim_fiber *)t->rt;
    char a[64];
    fiber_fail(f, "%s:%u: kernel '%s' %s: %s", file ? file : "?", line, f->r->L->kernel,
               who(f, a, sizeof a), msg);
}

static unsigned rt_active_mask(hyp_sim_thread *t) {
    sim_fiber *f = (sim_fiber *)t->rt;
    sim_runner *r = f->r;
    return r->warps[t->warp].exist & ~r->warps[t->warp].exited;
}

static void rt_park(hyp_sim_thread *t, int (*ready)(void *), void *arg, const char *what,
                    const char *file, unsigned line) {
    if (ready(arg)) return;
    sim_fiber *f = (sim_fiber *)t->rt;
    f->state = F_PARKED;
    f->park_ready = ready;
    f->park_arg = arg;
    f->what = what;
    f->file = file;
    f->line = line;
    f->r->n_parked++;
    fiber_block(f);
}

/* Nothing can run: parked fibers whose condition now holds become runnable. Returns how many. */
static unsigned unpark_ready(sim_runner *r) {
    unsigned woke = 0;
    for (unsigned i = 0; i < r->n && r->n_parked > 0; i++) {
        sim_fiber *g = &r->fibers[i];
        if (g->state != F_PARKED || !g->park_ready(g->park_arg)) continue;
        g->state = F_READY;
        r->n_parked--;
        q_push(r, i);
        woke++;
    }
    return woke;
}

static const hyp_sim_host_api g_api = {HYP_SIM_ABI_VERSION, rt_barrier, rt_warp_sync, rt_fail,
                                       rt_active_mask, rt_park};

/* The run queue is empty but fibers remain: they wait for something that cannot happen. The
 * checks at each arrival catch the usual cases first; this is the net under them. */
static void report_stuck(sim_runner *r) {
    char a[64];
    for (unsigned i = 0; i < r->n && r->n_parked > 0; i++) {
        sim_fiber *g = &r->fibers[i];
        if (g->state != F_PARKED) continue;
        launch_error(r->L,
                     "%s:%u: kernel '%s' %s: deadlock: it waits in %s, which can never complete "
                     "(no other thread of the block can run) — a missing arrive, a wrong phase "
                     "parity, a transaction count that the copies never reach, or a thread that "
                     "exited or waits elsewhere",
                     g->file, g->line, r->L->kernel, who(g, a, sizeof a), g->what);
        return;
    }
    for (unsigned i = 0; i < r->n; i++) {
        sim_fiber *g = &r->fibers[i];
        if (g->state == F_WARP) {
            launch_error(r->L,
                         "%s:%u: kernel '%s' %s: deadlock: it waits in %s with mask 0x%08x for "
                         "lanes that wait elsewhere with other masks — all lanes named in a mask "
                         "must call the same warp operation with the same mask",
                         g->wop->file, g->wop->line, r->L->kernel, who(g, a, sizeof a),
                         g->wop->what, g->wop->mask);
            return;
        }
        if (g->state == F_BARRIER) {
            launch_error(r->L, "%s:%u: kernel '%s' %s: deadlock at %s — this is a simulator bug",
                         g->file, g->line, r->L->kernel, who(g, a, sizeof a), g->what);
            return;
        }
    }
}

/* ------------------------------------------------------------------------------------------ */
/* Faults inside kernels: stack overflow, out-of-bounds dynamic shared memory, wild accesses */

static struct sigaction g_old_segv, g_old_bus, g_old_fpe;
static pthread_once_t g_sig_once = PTHREAD_ONCE_INIT;

static void chain_signal(int sig, siginfo_t *si, void *uc) {
    struct sigaction *old = sig == SIGSEGV ? &g_old_segv : sig == SIGBUS ? &g_old_bus : &g_old_fpe;
    if (old->sa_flags & SA_SIGINFO) {
        if (old->sa_sigaction) {
            old->sa_sigaction(sig, si, uc);
            return;
        }
    } else if (old->sa_handler != SIG_DFL && old->sa_handler != SIG_IGN) {
        old->sa_handler(sig);
        return;
    }
    /* default action: restore it and return, so the faulting instruction faults again */
    struct sigaction dfl;
    memset(&dfl, 0, sizeof dfl);
    dfl.sa_handler = SIG_DFL;
    sigemptyset(&dfl.sa_mask);
    sigaction(sig, &dfl, NULL);
}

static void on_fault(int sig, siginfo_t *si, void *ucv) {
    sim_runner *r = tls_runner;
    sim_fiber *f = r ? r->current : NULL;
    if (!f || r->in_handler) {
        chain_signal(sig, si, ucv);
        return;
    }
    r->in_handler = 1;
    uintptr_t addr = (uintptr_t)si->si_addr;
    char what[400], where[200] = "", a[64];
    const char *fix = "check the indexing of the access";
    size_t slot = g_page + r->stack_bytes;
    if (sig == SIGSEGV && addr >= (uintptr_t)f->stack_lo - g_page && addr < (uintptr_t)f->stack_lo) {
        snprintf(what, sizeof what, "fiber stack overflow (its stack is %zu KiB)",
                 r->stack_bytes / 1024);
        fix = "large local arrays or deep recursion: shrink them, or raise hyp_sim_opts.stack_kib "
              "or HYP_SIM_STACK_KIB";
    } else if (sig == SIGSEGV && addr >= (uintptr_t)r->dyn_map &&
               addr < (uintptr_t)r->dyn_map + r->dyn_map_len) {
        long long off = (long long)(addr - (uintptr_t)r->dyn_data);
        snprintf(what, sizeof what,
                 "out-of-bounds dynamic shared memory access at byte offset %lld of the %zu bytes "
                 "the launch gave",
                 off, r->dyn_bytes);
        fix = "check the index into the extern __shared__ array, or launch with more "
              "shared_bytes";
    } else if (sig == SIGSEGV && addr >= (uintptr_t)r->stack_map &&
               addr < (uintptr_t)r->stack_map + r->stack_map_len &&
               (addr - (uintptr_t)r->stack_map) % slot < g_page) {
        snprintf(what, sizeof what, "access to another thread's stack guard page at %p",
                 (void *)addr);
    } else {
        snprintf(what, sizeof what, "%s at address %p",
                 sig == SIGSEGV  ? "invalid memory access (SIGSEGV)"
                 : sig == SIGBUS ? "bus error (SIGBUS)"
                                 : "arithmetic exception (SIGFPE, e.g. integer division by zero)",
                 (void *)addr);
        fix = "check the pointer arguments and the indexing";
    }
#if defined(__x86_64__) && defined(REG_RIP)
    {
        ucontext_t *uc = (ucontext_t *)ucv;
        void *pc = (void *)uc->uc_mcontext.gregs[REG_RIP];
        Dl_info di;
        if (dladdr(pc, &di) && di.dli_fname) {
            const char *base = strrchr(di.dli_fname, '/');
            if (di.dli_sname)
                snprintf(where, sizeof where, " in %s+0x%lx (%s)", di.dli_sname,
                         (unsigned long)((uintptr_t)pc - (uintptr_t)di.dli_saddr),
                         base ? base + 1 : di.dli_fname);
            else
                snprintf(where, sizeof where, " at %s+0x%lx", base ? base + 1 : di.dli_fname,
                         (unsigned long)((uintptr_t)pc - (uintptr_t)di.dli_fbase));
        }
    }
#endif
    launch_error(r->L, "kernel '%s' %s: %s%s — %s", r->L->kernel, who(f, a, sizeof a), what, where,
                 fix);
    r->failed = 1;
    sigset_t s;
    sigemptyset(&s);
    sigaddset(&s, SIGSEGV);
    sigaddset(&s, SIGBUS);
    sigaddset(&s, SIGFPE);
    pthread_sigmask(SIG_UNBLOCK, &s, NULL); /* we leave the handler without returning */
#ifdef SIM_ASAN
    __sanitizer_start_switch_fiber(NULL, r->sched_bottom, r->sched_size);
#endif
#ifdef SIM_ASM_SWITCH
    hyp_sim_ctx_switch(&f->sp, r->sched_sp);
#else
    setcontext(&r->sched_uc);
#endif
}

static void install_signals(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_fault;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGSEGV, &sa, &g_old_segv);
    sigaction(SIGBUS, &sa, &g_old_bus);
    sigaction(SIGFPE, &sa, &g_old_fpe);
}

/* ------------------------------------------------------------------------------------------ */
/* Runners and their pool */

static pthread_mutex_t g_pool_mu = PTHREAD_MUTEX_INITIALIZER;
static sim_runner *g_pool;
static unsigned g_pool_n;

static void runner_free_stacks(sim_runner *r) {
    if (r->stack_map) munmap(r->stack_map, r->stack_map_len);
    free(r->fibers);
    free(r->runq);
    free(r->warps);
    free(r->cpq);
    r->cpq = NULL;
    r->stack_map = NULL;
    r->fibers = NULL;
    r->runq = NULL;
    r->warps = NULL;
    r->cap = 0;
}

static void runner_free(sim_runner *r) {
    runner_free_stacks(r);
    if (r->dyn_map) munmap(r->dyn_map, r->dyn_map_len);
    if (r->alt) munmap(r->alt, SIM_ALTSTACK_BYTES);
    free(r);
}

static int runner_stacks(sim_runner *r, unsigned n, size_t stack_bytes) {
    if (r->cap >= n && r->stack_bytes == stack_bytes) return 0;
    runner_free_stacks(r);
    size_t slot = g_page + stack_bytes;
    size_t len = slot * n;
    void *map = mmap(NULL, len, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_STACK, -1, 0);
    if (map == MAP_FAILED) return -1;
    r->stack_map = map;
    r->stack_map_len = len;
    for (unsigned i = 0; i < n; i++)
        if (mprotect(r->stack_map + i * slot, g_page, PROT_NONE) != 0) return -1;
    unsigned nw = (n + 31) / 32;
    r->fibers = calloc(n, sizeof *r->fibers);
    r->runq = calloc(n, sizeof *r->runq);
    r->warps = calloc(nw, sizeof *r->warps);
    r->cpq = calloc((size_t)n * HYP_SIM_CP_ASYNC_MAX, sizeof *r->cpq);
    if (!r->fibers || !r->runq || !r->warps || !r->cpq) return -1;
    for (unsigned i = 0; i < n; i++) {
        r->fibers[i].stack_lo = r->stack_map + i * slot + g_page;
        r->fibers[i].stack_hi = r->fibers[i].stack_lo + stack_bytes;
        r->fibers[i].r = r;
        r->fibers[i].t.cp = r->cpq + (size_t)i * HYP_SIM_CP_ASYNC_MAX;
    }
    r->cap = n;
    r->stack_bytes = stack_bytes;
    return 0;
}

static sim_runner *runner_new(void) {
    sim_runner *r = calloc(1, sizeof *r);
    if (!r) return NULL;
    size_t dyn_pages = (SIM_MAX_DYN_SHARED + g_page - 1) / g_page;
    r->dyn_map_len = (dyn_pages + 2) * g_page;
    void *dm = mmap(NULL, r->dyn_map_len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                    -1, 0);
    void *alt = mmap(NULL, SIM_ALTSTACK_BYTES, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (dm == MAP_FAILED || alt == MAP_FAILED) {
        if (dm != MAP_FAILED) munmap(dm, r->dyn_map_len);
        if (alt != MAP_FAILED) munmap(alt, SIM_ALTSTACK_BYTES);
        free(r);
        return NULL;
    }
    r->dyn_map = dm;
    r->alt = alt;
    r->dyn_back = r->dyn_map + r->dyn_map_len - g_page;
    return r;
}

/* Makes exactly the pages holding `bytes` writable, just below the back guard; places the data
 * so that it ends on the guard (up to 15 bytes of slack when bytes is not a multiple of 16). */
static int runner_dyn(sim_runner *r, size_t bytes) {
    size_t pages = (bytes + g_page - 1) / g_page;
    if (pages != r->dyn_rw_pages) {
        unsigned char *lo = r->dyn_map + g_page;
        size_t span = (size_t)(r->dyn_back - lo);
        if (mprotect(lo, span, PROT_NONE) != 0) return -1;
        if (pages && mprotect(r->dyn_back - pages * g_page, pages * g_page,
                              PROT_READ | PROT_WRITE) != 0)
            return -1;
        r->dyn_rw_pages = pages;
    }
    size_t align = bytes & (~bytes + 1); /* lowest set bit: the data's natural alignment */
    if (align < 16) align = 16;
    if (align > 1024) align = 1024;
    size_t rounded = (bytes + align - 1) & ~(align - 1);
    r->dyn_front = r->dyn_back - pages * g_page;
    r->dyn_data = r->dyn_back - rounded;
    r->dyn_bytes = bytes;
    return 0;
}

static sim_runner *pool_get(unsigned n, size_t stack_bytes, size_t dyn_bytes) {
    pthread_mutex_lock(&g_pool_mu);
    sim_runner *r = g_pool;
    if (r) {
        g_pool = r->next;
        g_pool_n--;
    }
    pthread_mutex_unlock(&g_pool_mu);
    if (!r && !(r = runner_new())) return NULL;
    if (runner_stacks(r, n, stack_bytes) != 0 || runner_dyn(r, dyn_bytes) != 0) {
        runner_free(r);
        return NULL;
    }
    return r;
}

static void pool_put(sim_runner *r) {
    pthread_mutex_lock(&g_pool_mu);
    if (g_pool_n < SIM_POOL_MAX) {
        r->next = g_pool;
        g_pool = r;
        g_pool_n++;
        r = NULL;
    }
    pthread_mutex_unlock(&g_pool_mu);
    if (r) runner_free(r);
}

void hyp_sim_trim(void) {
    pthread_mutex_lock(&g_pool_mu);
    sim_runner *r = g_pool;
    g_pool = NULL;
    g_pool_n = 0;
    pthread_mutex_unlock(&g_pool_mu);
    while (r) {
        sim_runner *next = r->next;
        runner_free(r);
        r = next;
    }
}

/* ------------------------------------------------------------------------------------------ */
/* Running a grid */

static void run_block(sim_runner *r, uint64_t b) {
    sim_launch *L = r->L;
    hyp_sim_dim bd = {L->block.x, L->block.y, L->block.z};
    hyp_sim_dim gd = {L->grid.x, L->grid.y, L->grid.z};
    hyp_sim_dim bi = {(unsigned)(b % gd.x), (unsigned)((b / gd.x) % gd.y),
                      (unsigned)(b / ((uint64_t)gd.x * gd.y))};
    unsigned n = L->nthreads;
    r->n = n;
    r->nwarps = (n + 31) / 32;
    r->q_head = r->q_len = r->n_exited = r->n_barrier = r->n_parked = 0;
    r->failed = 0;
    unsigned long long serial = atomic_fetch_add(&g_block_serial, 1) + 1;
    for (unsigned w = 0; w < r->nwarps; w++) {
        unsigned lanes = n - w * 32 >= 32 ? 32 : n - w * 32;
        sim_warp *W = &r->warps[w];
        W->waiting = W->exited = W->at_barrier = 0;
        W->exist = lanes == 32 ? 0xffffffffu : (1u << lanes) - 1;
    }
    uint64_t s = L->seed ^ (b * 0xd1b54a32d192ed03ULL);
    r->rng = splitmix64(&s);
    /* dynamic shared memory: poison the data (NaN as float, -1 as int: uninitialized reads show),
     * canaries in the slack around it */
    memset(r->dyn_front, SIM_CANARY, (size_t)(r->dyn_data - r->dyn_front));
    memset(r->dyn_data, 0xFF, r->dyn_bytes);
    memset(r->dyn_data + r->dyn_bytes, SIM_CANARY, (size_t)(r->dyn_back - r->dyn_data) - r->dyn_bytes);
    for (unsigned i = 0; i < n; i++) {
        sim_fiber *f = &r->fibers[i];
        hyp_sim_thread *t = &f->t;
        t->thread_idx.x = i % bd.x;
        t->thread_idx.y = (i / bd.x) % bd.y;
        t->thread_idx.z = i / (bd.x * bd.y);
        t->block_idx = bi;
        t->block_dim = bd;
        t->grid_dim = gd;
        t->linear = i;
        t->lane = i & 31;
        t->warp = i >> 5;
        t->dyn_shared = r->dyn_data;
        t->dyn_shared_bytes = r->dyn_bytes;
        t->cp_n = t->cp_group = 0;
        t->rt = f;
        t->block_serial = serial;
        f->state = F_READY;
        f->wop = NULL;
        ctx_arm(f);
        q_push(r, i);
    }
    for (;;) {
        if (r->failed || atomic_load_explicit(&L->failed, memory_order_relaxed)) break;
        if (r->q_len == 0 && r->n_parked > 0 && unpark_ready(r) > 0) continue;
        if (r->q_len == 0) {
            if (r->n_exited != n) report_stuck(r);
            break;
        }
        sim_fiber *f = &r->fibers[q_pop(r)];
        f->state = F_RUNNING;
        r->current = f;
        run_fiber(r, f);
        r->current = NULL;
        r->in_handler = 0;
    }
    if (r->failed || atomic_load(&L->failed)) return;
    for (unsigned char *p = r->dyn_front; p < r->dyn_back; p++) {
        if (p == r->dyn_data) p += r->dyn_bytes;
        if (p < r->dyn_back && *p != SIM_CANARY) {
            launch_error(L,
                         "kernel '%s' block (%u,%u,%u): a thread wrote out of bounds of dynamic "
                         "shared memory, at byte offset %lld of the %zu bytes the launch gave — "
                         "check the index into the extern __shared__ array, or launch with more "
                         "shared_bytes",
                         L->kernel, bi.x, bi.y, bi.z, (long long)(p - r->dyn_data), r->dyn_bytes);
            return;
        }
    }
}

static void worker_run(sim_launch *L) {
    sim_runner *r = pool_get(L->nthreads, L->stack_bytes, L->shared_bytes);
    if (!r) {
        launch_error(L,
                     "kernel '%s': cannot map fiber stacks for %u threads of %zu KiB — out of "
                     "memory or address space; lower hyp_sim_opts.threads or stack_kib",
                     L->kernel, L->nthreads, L->stack_bytes / 1024);
        return;
    }
    stack_t ss, old_ss;
    memset(&ss, 0, sizeof ss);
    ss.ss_sp = r->alt;
    ss.ss_size = SIM_ALTSTACK_BYTES;
    int have_alt = sigaltstack(&ss, &old_ss) == 0;
    sim_runner *prev = tls_runner;
    tls_runner = r;
    r->L = L;
    for (;;) {
        if (atomic_load_explicit(&L->failed, memory_order_relaxed)) break;
        uint64_t b = atomic_fetch_add(&L->next_block, 1);
        if (b >= L->nblocks) break;
        run_block(r, b);
    }
    r->L = NULL;
    tls_runner = prev;
    if (have_alt) sigaltstack(&old_ss, NULL);
    pool_put(r);
}

static void *worker_main(void *arg) {
    worker_run((sim_launch *)arg);
    return NULL;
}

static long env_long(const char *name, long dflt) {
    const char *s = getenv(name);
    if (!s || !*s) return dflt;
    char *end;
    long v = strtol(s, &end, 0);
    return *end ? dflt : v;
}

int hyp_sim_launch(hyp_sim_module *m, const char *kernel, hyp_dim3 grid, hyp_dim3 block,
                   size_t shared_bytes, void **args, const hyp_sim_opts *opts, hyp_err *e) {
    if (!m || !kernel) return hyp_fail(e, HYP_EINPUT, "hyp_sim_launch: no module or kernel name — load a module first");
    uint64_t nthreads = (uint64_t)block.x * block.y * block.z;
    if (!block.x || !block.y || !block.z || block.x > 1024 || block.y > 1024 || block.z > 64 ||
        nthreads > SIM_MAX_BLOCK_THREADS)
        return hyp_fail(e, HYP_EINPUT,
                        "%s: kernel '%s': block (%u,%u,%u) is not a valid CUDA block — at most "
                        "1024 threads, x,y <= 1024, z <= 64, none zero",
                        m->path, kernel, block.x, block.y, block.z);
    if (!grid.x || !grid.y || !grid.z || grid.x > 2147483647u || grid.y > 65535 || grid.z > 65535)
        return hyp_fail(e, HYP_EINPUT,
                        "%s: kernel '%s': grid (%u,%u,%u) is not a valid CUDA grid — x < 2^31, "
                        "y,z <= 65535, none zero",
                        m->path, kernel, grid.x, grid.y, grid.z);
    if (shared_bytes > SIM_MAX_DYN_SHARED)
        return hyp_fail(e, HYP_EINPUT,
                        "%s: kernel '%s': %zu bytes of dynamic shared memory exceed the 227 KiB "
                        "any supported GPU gives a block — tile smaller",
                        m->path, kernel, shared_bytes);
    char sym[256];
    if (snprintf(sym, sizeof sym, "hyp_sim_entry_%s", kernel) >= (int)sizeof sym)
        return hyp_fail(e, HYP_EINPUT, "%s: kernel name '%.40s…' is too long", m->path, kernel);
    void (*stub)(void **);
    *(void **)&stub = dlsym(m->handle, sym);
    if (!stub)
        return hyp_fail(e, HYP_EINPUT,
                        "%s: no kernel '%s' (no symbol %s) — check the name, and that the source "
                        "has the HYP_SIM launch stub of kernels/DIALECT.md",
                        m->path, kernel, sym);

    if (!g_page) g_page = (size_t)sysconf(_SC_PAGESIZE);
    pthread_once(&g_sig_once, install_signals);

    hyp_sim_opts o = opts ? *opts : (hyp_sim_opts){0};
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    long threads = o.threads > 0 ? o.threads : env_long("HYP_SIM_THREADS", ncpu > 0 ? ncpu : 1);
    if (threads < 1) threads = 1;
    if (threads > 256) threads = 256;
    long stack_kib = o.stack_kib ? (long)o.stack_kib : env_long("HYP_SIM_STACK_KIB", 64);
    if (stack_kib < 16) stack_kib = 16;

    static sim_launch zero_launch;
    sim_launch *L = malloc(sizeof *L);
    if (!L) return hyp_fail(e, HYP_EFAIL, "hyp_sim_launch: out of memory");
    *L = zero_launch;
    L->m = m;
    L->kernel = kernel;
    L->stub = stub;
    L->args = args;
    L->grid = grid;
    L->block = block;
    L->shared_bytes = shared_bytes;
    L->stack_bytes = ((size_t)stack_kib * 1024 + g_page - 1) / g_page * g_page;
    L->nthreads = (unsigned)nthreads;
    L->nblocks = (uint64_t)grid.x * grid.y * grid.z;
    if (o.order == HYP_SIM_ORDER_SHUFFLE) {
        L->shuffle = 1;
        L->seed = o.seed;
    } else if (o.order == HYP_SIM_ORDER_DEFAULT) {
        const char *s = getenv("HYP_SIM_SHUFFLE");
        if (s && *s && strcmp(s, "0") != 0 && strcmp(s, "off") != 0) {
            L->shuffle = 1;
            L->seed = strtoull(s, NULL, 0);
        }
    }
    atomic_init(&L->next_block, 0);
    atomic_init(&L->failed, 0);

    if ((uint64_t)threads > L->nblocks) threads = (long)L->nblocks;
    pthread_t tids[256];
    long started = 0;
    for (long i = 0; i + 1 < threads; i++) {
        if (pthread_create(&tids[started], NULL, worker_main, L) != 0) break; /* fewer is fine */
        started++;
    }
    worker_run(L);
    for (long i = 0; i < started; i++) pthread_join(tids[i], NULL);
    int rc = HYP_OK;
    if (atomic_load(&L->failed)) rc = hyp_fail(e, HYP_EFAIL, "%s", L->msg);
    free(L);
    return rc;
}

/* ------------------------------------------------------------------------------------------ */
/* Loading */

int hyp_sim_load(const char *so_path, hyp_sim_module **out, hyp_err *e) {
    *out = NULL;
    void *h = dlopen(so_path, RTLD_NOW | RTLD_LOCAL);
    if (!h)
        return hyp_fail(e, HYP_EFAIL,
                        "%s: cannot load the sim module: %s — recompile it with hyp_sim_compile "
                        "(an undefined symbol may be an extern __shared__ declared inside a macro)",
                        so_path, dlerror());
    unsigned (*abi)(void);
    void (*bind)(const hyp_sim_host_api *);
    hyp_sim_module m;
    memset(&m, 0, sizeof m);
    *(void **)&abi = dlsym(h, "hyp_sim_module_abi");
    *(void **)&bind = dlsym(h, "hyp_sim_module_bind");
    *(void **)&m.run_thread = dlsym(h, "hyp_sim_module_run_thread");
    if (!abi || !bind || !m.run_thread) {
        dlclose(h);
        return hyp_fail(e, HYP_EINPUT,
                        "%s: not a sim module (no hyp_sim_module_abi) — compile it with "
                        "hyp_sim_compile, which force-includes kernels/sim/prelude.h",
                        so_path);
    }
    if (abi() != HYP_SIM_ABI_VERSION) {
        unsigned v = abi();
        dlclose(h);
        return hyp_fail(e, HYP_EINPUT,
                        "%s: built for sim ABI %u, this runtime speaks %u — recompile the module",
                        so_path, v, HYP_SIM_ABI_VERSION);
    }
    bind(&g_api);
    void (*count_bind)(void (*)(uintptr_t, size_t, int));
    *(void **)&count_bind = dlsym(h, "hyp_sim_count_bind"); /* a counting build (HYP_SIM_COUNT_FLAGS) */
    if (count_bind) count_bind(hyp_sim_count_hook);
    hyp_sim_module *mm = malloc(sizeof *mm);
    if (!mm) {
        dlclose(h);
        return hyp_fail(e, HYP_EFAIL, "%s: out of memory", so_path);
    }
    *mm = m;
    mm->handle = h;
    snprintf(mm->path, sizeof mm->path, "%s", so_path);
    *out = mm;
    return HYP_OK;
}

void hyp_sim_unload(hyp_sim_module *m) {
    if (!m) return;
    dlclose(m->handle);
    free(m);
}
