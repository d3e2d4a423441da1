/* hopper_sim.h — the simulator's emulation of the Hopper instructions behind kernels/hyp/hopper.cuh
 * (mbarrier, TMA tensor loads, wgmma, setmaxnreg, named barriers), included by that header under
 * HYP_SIM after kernels/sim/prelude.h. kernels/sim/README.md ("Hopper") states what is exact and
 * what is not.
 *
 * State lives per block in this OS thread's storage (a block never leaves its OS thread) and is
 * reset when hyp_sim_thread.block_serial changes: mbarriers (keyed by their shared-memory
 * address), TMA copies in flight, the warpgroup rendezvous, named barriers and each thread's
 * wgmma groups. Waits park the fiber through host->park, so a wait that can never complete is
 * reported as a deadlock by the runtime, not hung.
 *
 * Never: touches memory outside the block's dynamic shared memory and the tensor's global bytes;
 * exits the process (errors go through hyp_sim::fail). */
#ifndef HYP_SIM_HOPPER_H
#define HYP_SIM_HOPPER_H

#include "sim_tmap.h"

namespace hyp_sim {
namespace hopper {

enum {
    MBAR_MAX = 64,     /* mbarriers per block */
    TMA_MAX = 256,     /* TMA copies issued and not yet made visible, per block */
    WG_MAX = 8,        /* warpgroups per block (1024 threads) */
    NBAR = 16,         /* named barriers 0..15 */
    ACC_MAX = 4,       /* accumulators with a wgmma in flight, per thread */
    ACC_FLOATS = 128,  /* N/2 for N = 256 */
    WG_THREADS_MAX = 512, /* threads that may issue wgmma: warpgroups 0..3 */
    STORE_MAX = 64,       /* TMA stores issued and not yet waited for, per block */
    REC_MAX = 64,         /* wgmma in flight per block */
    THREADS_MAX = 1024
};
static const long long TX_LIMIT = (1ll << 20) - 1; /* PTX: tx-count range is +-(2^20 - 1) */

struct mbar {
    const void *addr;
    unsigned expected, pending;
    long long tx;
    unsigned long long phase; /* phases completed so far: the current phase's parity is phase & 1 */
};
struct tma_op {
    unsigned char *dst;
    hyp_sim_tmap_fields map;
    long long c[5];
    unsigned bar;
    unsigned long long phase; /* the barrier phase its complete_tx counted toward */
};
struct tma_store_op {
    const unsigned char *src;
    hyp_sim_tmap_fields map;
    long long c[5];
    unsigned thread, group;
    const char *file;
    unsigned line;
};
/* A wgmma in flight, for the checks that its shared-memory operands stay untouched until a
 * wgmma.wait_group completes it: the byte ranges it reads (A, B) and a hash of their contents. */
struct wg_rec {
    bool live;
    unsigned wg, group;
    unsigned long long da, db, alo, ahi, blo, bhi, hash;
    unsigned n, ta, tb, rs;
    const char *file;
    unsigned line;
};
struct acc {
    float *d;
    unsigned n, group;
    float v[ACC_FLOATS];
};
struct tstate {
    unsigned commits, nacc;
    bool fenced;
    acc a[ACC_MAX];
};
struct wg_op;
typedef void (*wg_combine_fn)(wg_op *const *ops, hyp_sim_thread *caller);
struct wg_op {
    const char *what, *file;
    unsigned line;
    wg_combine_fn combine;
};
struct rendezvous {
    unsigned arrived;
    unsigned long long gen;
    wg_op *ops[128];
};
struct nbar {
    unsigned count, expected;
    unsigned long long gen;
};
struct block {
    unsigned long long serial;
    unsigned nthreads, nbars, ntma, nstore;
    mbar bars[MBAR_MAX];
    tma_op tma[TMA_MAX];
    tma_store_op store[STORE_MAX];
    wg_rec rec[REC_MAX];
    unsigned bulk_commits[THREADS_MAX]; /* cp.async.bulk.commit_group per thread */
    rendezvous wg[WG_MAX];
    nbar nb[NBAR];
    tstate ts[WG_THREADS_MAX];
};

inline thread_local block blk;

inline block &state() {
    hyp_sim_thread *t = cur;
    block &b = blk;
    if (b.serial != t->block_serial) {
        b.serial = t->block_serial;
        b.nthreads = t->block_dim.x * t->block_dim.y * t->block_dim.z;
        b.nbars = b.ntma = b.nstore = 0;
        for (auto &r : b.rec) r.live = false;
        for (unsigned i = 0; i < b.nthreads && i < (unsigned)THREADS_MAX; i++) b.bulk_commits[i] = 0;
        for (auto &r : b.wg) {
            r.arrived = 0;
            for (auto &o : r.ops) o = nullptr;
        }
        for (auto &n : b.nb) n = nbar{0, 0, 0};
        unsigned nt = b.nthreads < (unsigned)WG_THREADS_MAX ? b.nthreads : (unsigned)WG_THREADS_MAX;
        for (unsigned i = 0; i < nt; i++) {
            b.ts[i].commits = b.ts[i].nacc = 0;
            b.ts[i].fenced = false;
        }
    }
    return b;
}

/* ---- shared-memory offsets: descriptors and swizzles work on the offset from the start of the
 * block's dynamic shared memory (a GPU uses the shared-window address; the two agree when the
 * dynamic array is 1024-byte aligned, as the 128B swizzle needs anyway) ---- */
inline unsigned long long dyn_offset(const void *p, size_t bytes, const char *what, const char *file, unsigned line) {
    hyp_sim_thread *t = cur;
    uintptr_t base = (uintptr_t)t->dyn_shared, q = (uintptr_t)p;
    if (!t->dyn_shared || q < base || q + bytes > base + t->dyn_shared_bytes)
        fail(file, line,
             "%s: %p (%zu bytes) is not inside the block's dynamic shared memory (%zu bytes at %p) — "
             "sim emulates TMA and wgmma operands in the extern __shared__ array only; place the "
             "tiles there",
             what, p, bytes, t->dyn_shared_bytes, (void *)t->dyn_shared);
    return q - base;
}

/* TMA swizzle mode (1 = 32B, 2 = 64B, 3 = 128B): 16-byte chunk bits 4..(3+mode) ^= bits 7..(6+mode) */
inline unsigned long long swizzle_tma(unsigned long long off, unsigned mode) {
    if (mode == 0) return off;
    unsigned long long mask = (1ull << mode) - 1;
    return off ^ (((off >> 7) & mask) << 4);
}
/* wgmma descriptor layout type (1 = 128B, 2 = 64B, 3 = 32B) as the TMA mode of the same span */
inline unsigned desc_to_tma_mode(unsigned layout) { return layout == 0 ? 0 : 4 - layout; }

/* ---- mbarrier ---- */
inline mbar &find_bar(const void *bar, const char *what, const char *file, unsigned line) {
    block &b = state();
    for (unsigned i = 0; i < b.nbars; i++)
        if (b.bars[i].addr == bar) return b.bars[i];
    fail(file, line, "%s on %p, which no hyp_mbar_init of this block initialized — initialize every "
         "mbarrier (one thread, then hyp_fence_mbar_init and __syncthreads) before use", what, bar);
}

inline void mbar_init(unsigned long long *bar, unsigned count, const char *file, unsigned line) {
    check_align(bar, 8, "mbarrier object", file, line);
    if (count < 1 || count > (1u << 20) - 1)
        fail(file, line, "mbarrier.init count %u is not in 1..2^20-1", count);
    block &b = state();
    mbar *m = nullptr;
    for (unsigned i = 0; i < b.nbars && !m; i++)
        if (b.bars[i].addr == bar) m = &b.bars[i];
    if (!m) {
        if (b.nbars == MBAR_MAX) fail(file, line, "more than %d mbarriers in one block (sim's limit)", (int)MBAR_MAX);
        m = &b.bars[b.nbars++];
    }
    *m = mbar{bar, count, count, 0, 0};
    *bar = 0; /* the object's bits are opaque; kernels must not read them */
}

inline void mbar_try_complete(mbar &m) {
    if (m.pending == 0 && m.tx == 0) {
        m.phase++;
        m.pending = m.expected;
    }
}

inline void mbar_tx(mbar &m, long long delta, const char *what, const char *file, unsigned line) {
    long long tx = m.tx + delta;
    if (tx > TX_LIMIT || tx < -TX_LIMIT)
        fail(file, line, "%s: the mbarrier's tx-count would be %lld, outside +-(2^20-1) — expect fewer "
             "bytes per phase", what, tx);
    m.tx = tx;
    mbar_try_complete(m);
}

inline void mbar_arrive(unsigned long long *bar, long long expect_bytes, const char *what, const char *file,
                        unsigned line) {
    mbar &m = find_bar(bar, what, file, line);
    if (expect_bytes) mbar_tx(m, expect_bytes, what, file, line);
    if (m.pending == 0)
        fail(file, line, "%s: the current phase has no pending arrival left (count %u, tx-count %lld "
             "still outstanding) — more arrivals than the count given to hyp_mbar_init", what, m.expected, m.tx);
    m.pending--;
    mbar_try_complete(m);
}

inline void mbar_expect_tx(unsigned long long *bar, unsigned bytes, const char *file, unsigned line) {
    mbar &m = find_bar(bar, "mbarrier.expect_tx", file, line);
    mbar_tx(m, bytes, "mbarrier.expect_tx", file, line);
}

inline void tma_flush(unsigned bar_index, unsigned long long completed_phase);

struct mbar_wait_arg {
    const mbar *m;
    unsigned parity;
    char what[160];
};
inline int mbar_ready(void *arg) {
    mbar_wait_arg *w = (mbar_wait_arg *)arg;
    return (unsigned)(w->m->phase & 1) != w->parity;
}

/* try_wait.parity: in sim it suspends until the phase completes (a time limit the ISA leaves to
 * the implementation), so a spin loop on it never spins; then the TMA copies of the completed
 * phases become visible. */
inline bool mbar_wait(unsigned long long *bar, unsigned parity, const char *file, unsigned line) {
    if (parity > 1) fail(file, line, "mbarrier.try_wait.parity with parity %u: it is 0 or 1", parity);
    mbar &m = find_bar(bar, "mbarrier.try_wait.parity", file, line);
    mbar_wait_arg w;
    w.m = &m;
    w.parity = parity;
    snprintf(w.what, sizeof w.what,
             "mbarrier.try_wait.parity %u on %p (current phase parity %u, %u of %u arrivals and "
             "tx-count %lld pending when it began)",
             parity, (void *)bar, (unsigned)(m.phase & 1), m.pending, m.expected, m.tx);
    hyp_sim_thread *me = cur;
    host->park(me, mbar_ready, &w, w.what, file, line);
    cur = me;
    block &b = state();
    tma_flush((unsigned)(&m - b.bars), m.phase);
    return true;
}

/* ---- TMA ---- */
inline hyp_sim_tmap_fields decode_map(const void *map, unsigned rank, const char *what, const char *file,
                                      unsigned line, size_t *bytes) {
    hyp_sim_tmap_fields f;
    std::memcpy(&f, map, sizeof f);
    if (f.magic != HYP_SIM_TMAP_MAGIC)
        fail(file, line, "%s: the tensor map at %p was not encoded by cuTensorMapEncodeTiled / "
             "hyp_sim_tmap_encode_tiled — pass the encoded map as a const __grid_constant__ kernel "
             "parameter", what, map);
    if (f.rank != rank)
        fail(file, line, "%s.%ud with a rank-%u tensor map — use the wrapper of the map's rank", what, rank, f.rank);
    if (f.interleave || f.oobfill)
        fail(file, line, "%s: interleaved layouts and OOB fill NAN_REQUEST_ZERO_FMA are not emulated "
             "by sim — encode with INTERLEAVE_NONE and FLOAT_OOB_FILL_NONE", what);
    *bytes = f.esize;
    for (unsigned d = 0; d < rank; d++) {
        if (f.estrides[d] != 1 && d > 0)
            fail(file, line, "%s: elementStrides[%u] = %u is not emulated by sim (only 1)", what, d, f.estrides[d]);
        *bytes *= f.box[d];
    }
    return f;
}

inline void check_tma_vs_wgmma(unsigned long long off, size_t bytes, const char *file, unsigned line);

inline void tma_load(void *dst, const void *map, const int *c, unsigned rank, unsigned long long *bar,
                     const char *file, unsigned line) {
    const char *what = "cp.async.bulk.tensor";
    size_t bytes;
    hyp_sim_tmap_fields f = decode_map(map, rank, what, file, line, &bytes);
    unsigned long long off = dyn_offset(dst, bytes, what, file, line);
    if (off % 128)
        fail(file, line, "%s: the shared-memory destination (offset %llu) is not 128-byte aligned", what, off);
    check_tma_vs_wgmma(off, bytes, file, line);
    block &b = state();
    mbar &m = find_bar(bar, what, file, line);
    if (b.ntma == TMA_MAX)
        fail(file, line, "%s: more than %d TMA copies in flight in one block (sim's limit) — wait on their "
             "barriers", what, (int)TMA_MAX);
    tma_op &op = b.tma[b.ntma++];
    op.dst = (unsigned char *)dst;
    op.map = f;
    for (unsigned d = 0; d < 5; d++) op.c[d] = d < rank ? c[d] : 0;
    op.bar = (unsigned)(&m - b.bars);
    op.phase = m.phase;
    mbar_tx(m, -(long long)bytes, what, file, line); /* complete_tx: the copy is done (not yet visible) */
}

inline void tma_do(const tma_op &op) {
    const hyp_sim_tmap_fields &f = op.map;
    unsigned r = f.rank, es = f.esize;
    hyp_sim_thread *t = cur;
    unsigned long long base = (unsigned long long)(op.dst - t->dyn_shared);
    unsigned long long n = 1;
    for (unsigned d = 0; d < r; d++) n *= f.box[d];
    unsigned idx[5] = {0, 0, 0, 0, 0};
    for (unsigned long long e = 0; e < n; e++) {
        bool in = true;
        unsigned long long src = 0;
        for (unsigned d = 0; d < r; d++) {
            long long g = op.c[d] + (long long)idx[d];
            if (g < 0 || g >= (long long)f.dims[d]) in = false;
            else src += (unsigned long long)g * f.strides[d];
        }
        unsigned char *p = t->dyn_shared + swizzle_tma(base + e * es, f.swizzle);
        if (in) std::memcpy(p, (const unsigned char *)(uintptr_t)f.addr + src, es);
        else std::memset(p, 0, es);
        for (unsigned d = 0; d < r && ++idx[d] == f.box[d]; d++) idx[d] = 0;
    }
}

/* Makes the copies counted toward completed phases of barrier `bar_index` visible, in issue order. */
inline void tma_flush(unsigned bar_index, unsigned long long completed_phase) {
    block &b = state();
    unsigned keep = 0;
    for (unsigned i = 0; i < b.ntma; i++) {
        if (b.tma[i].bar == bar_index && b.tma[i].phase < completed_phase) tma_do(b.tma[i]);
        else b.tma[keep++] = b.tma[i];
    }
    b.ntma = keep;
}

/* ---- TMA stores (cp.async.bulk.tensor global <- shared, bulk_group) ----
 * Queued at issue; performed, reading shared memory and writing global memory, when the issuing
 * thread's cp.async.bulk.wait_group.read completes their group: so shared memory overwritten
 * before that wait shows in the result, as it may on a GPU. Out-of-bounds elements are not
 * written. A thread that exits with stores not waited for fails the launch. */
inline void tma_store_do(const tma_store_op &op) {
    const hyp_sim_tmap_fields &f = op.map;
    unsigned r = f.rank, es = f.esize;
    hyp_sim_thread *t = cur;
    unsigned long long base = (unsigned long long)(op.src - t->dyn_shared), n = 1;
    for (unsigned d = 0; d < r; d++) n *= f.box[d];
    unsigned idx[5] = {0, 0, 0, 0, 0};
    for (unsigned long long e = 0; e < n; e++) {
        bool in = true;
        unsigned long long dst = 0;
        for (unsigned d = 0; d < r; d++) {
            long long g = op.c[d] + (long long)idx[d];
            if (g < 0 || g >= (long long)f.dims[d]) in = false;
            else dst += (unsigned long long)g * f.strides[d];
        }
        if (in)
            std::memcpy((unsigned char *)(uintptr_t)f.addr + dst, t->dyn_shared + swizzle_tma(base + e * es, f.swizzle), es);
        for (unsigned d = 0; d < r && ++idx[d] == f.box[d]; d++) idx[d] = 0;
    }
}

inline void tma_store_thread_end(hyp_sim_thread *t);

inline void tma_store(const void *src, const void *map, const int *c, unsigned rank, const char *file, unsigned line) {
    const char *what = "cp.async.bulk.tensor (store)";
    size_t bytes;
    hyp_sim_tmap_fields f = decode_map(map, rank, what, file, line, &bytes);
    unsigned long long off = dyn_offset(src, bytes, what, file, line);
    if (off % 128)
        fail(file, line, "%s: the shared-memory source (offset %llu) is not 128-byte aligned", what, off);
    block &b = state();
    hyp_sim_thread *t = cur;
    if (t->linear >= (unsigned)THREADS_MAX) fail(file, line, "%s from thread %u: beyond sim's 1024", what, t->linear);
    if (b.nstore == STORE_MAX)
        fail(file, line, "%s: more than %d TMA stores not waited for in one block (sim's limit) — "
             "hyp_tma_store_wait sooner", what, (int)STORE_MAX);
    thread_end_hook = tma_store_thread_end;
    tma_store_op &op = b.store[b.nstore++];
    op.src = (const unsigned char *)src;
    op.map = f;
    for (unsigned d = 0; d < 5; d++) op.c[d] = d < rank ? c[d] : 0;
    op.thread = t->linear;
    op.group = b.bulk_commits[t->linear];
    op.file = file;
    op.line = line;
}

inline void bulk_commit() {
    hyp_sim_thread *t = cur;
    block &b = state();
    if (t->linear < (unsigned)THREADS_MAX) b.bulk_commits[t->linear]++;
}

/* cp.async.bulk.wait_group.read n: every group of this thread but the newest n committed ones. */
inline void bulk_wait(unsigned n) {
    hyp_sim_thread *t = cur;
    block &b = state();
    if (t->linear >= (unsigned)THREADS_MAX) return;
    unsigned commits = b.bulk_commits[t->linear], keep = 0;
    for (unsigned i = 0; i < b.nstore; i++) {
        const tma_store_op &op = b.store[i];
        if (op.thread == t->linear && op.group < commits && commits - op.group > n) tma_store_do(op);
        else b.store[keep++] = op;
    }
    b.nstore = keep;
}

inline void tma_store_thread_end(hyp_sim_thread *t) {
    block &b = blk;
    if (b.serial != t->block_serial) return;
    for (unsigned i = 0; i < b.nstore; i++)
        if (b.store[i].thread == t->linear)
            fail(b.store[i].file, b.store[i].line,
                 "thread %u exits with a TMA store not waited for — commit it (hyp_tma_store_commit) "
                 "and hyp_tma_store_wait<0>() before the block's shared memory goes away",
                 t->linear);
}

/* ---- the warpgroup rendezvous: 128 threads of warps 4k..4k+3 ---- */
struct gen_wait {
    const unsigned long long *gen;
    unsigned long long seen;
};
inline int gen_changed(void *arg) {
    gen_wait *w = (gen_wait *)arg;
    return *w->gen != w->seen;
}

inline void wg_join(wg_op *op) {
    hyp_sim_thread *me = cur;
    block &b = state();
    unsigned wg = me->linear / 128, idx = me->linear % 128;
    if ((wg + 1) * 128 > b.nthreads)
        fail(op->file, op->line, "%s is warpgroup-collective but the block has %u threads: warpgroup %u "
             "lacks threads — make the block a multiple of 128 threads", op->what, b.nthreads, wg);
    rendezvous &r = b.wg[wg];
    if (r.arrived > 0) {
        for (unsigned i = 0; i < 128; i++) {
            wg_op *o = r.ops[i];
            if (o && o->what != op->what && strcmp(o->what, op->what) != 0)
                fail(op->file, op->line, "%s, but thread %u of warpgroup %u waits in %s at %s:%u — all 128 "
                     "threads of a warpgroup must execute the same collective", op->what, wg * 128 + i, wg,
                     o->what, o->file, o->line);
            if (o) break;
        }
    }
    r.ops[idx] = op;
    if (++r.arrived == 128) {
        op->combine(r.ops, me);
        r.arrived = 0;
        for (auto &o : r.ops) o = nullptr;
        r.gen++;
        return;
    }
    gen_wait w{&r.gen, r.gen};
    host->park(me, gen_changed, &w, op->what, op->file, op->line);
    cur = me;
}

/* ---- wgmma ---- */
inline unsigned long long wgmma_desc(const void *smem, int layout, unsigned lbo, unsigned sbo, const char *file,
                                     unsigned line) {
    unsigned long long off = dyn_offset(smem, 16, "wgmma matrix descriptor", file, line);
    if (off & 15) fail(file, line, "wgmma matrix descriptor: start address offset %llu is not 16-byte aligned", off);
    if ((lbo & 15) || (sbo & 15) || lbo >= (1u << 18) || sbo >= (1u << 18))
        fail(file, line, "wgmma matrix descriptor: LBO %u and SBO %u must be multiples of 16 below 2^18", lbo, sbo);
    if (layout < 0 || layout > 3) fail(file, line, "wgmma matrix descriptor: swizzle %d is not 0..3", layout);
    return ((off & 0x3FFFFull) >> 4) | ((unsigned long long)(lbo >> 4) << 16) |
           ((unsigned long long)(sbo >> 4) << 32) | ((unsigned long long)layout << 62);
}

/* Byte offset (in dynamic shared memory) of element (mn, k) of a 16-bit operand described by
 * `desc`, K-major (kmajor) or MN-major: the canonical layouts of the PTX ISA's "Shared Memory
 * Matrix Layout" for wgmma, in units of 8x16-byte core matrices, then the swizzle. */
inline unsigned long long desc_elem(unsigned long long desc, unsigned mn, unsigned k, bool kmajor) {
    unsigned long long start = (desc & 0x3FFF) << 4, lbo = ((desc >> 16) & 0x3FFF) << 4,
                       sbo = ((desc >> 32) & 0x3FFF) << 4;
    unsigned layout = (unsigned)(desc >> 62), mode = desc_to_tma_mode(layout);
    unsigned long long o;
    if (layout == 0) {
        o = kmajor ? (mn % 8) * 16 + (mn / 8) * sbo + (k / 8) * lbo + (k % 8) * 2
                   : (mn % 8) * 2 + (mn / 8) * sbo + (k % 8) * 16 + (k / 8) * lbo;
    } else {
        unsigned S = 16u << mode; /* row bytes of the swizzle atom: 32, 64, 128 */
        o = kmajor ? (mn % 8) * S + (mn / 8) * sbo + k * 2
                   : (mn % (S / 2)) * 2 + (mn / (S / 2)) * lbo + (k % 8) * S + (k / 8) * sbo;
    }
    return swizzle_tma(start + o, mode);
}

/* FNV-1a over the operand bytes a wgmma reads, in element order; also their offset ranges. */
inline unsigned long long operand_hash(const wg_rec &r, unsigned long long *alo, unsigned long long *ahi,
                                       unsigned long long *blo, unsigned long long *bhi) {
    const unsigned char *sm = cur->dyn_shared;
    unsigned long long h = 1469598103934665603ull;
    *alo = *blo = ~0ull;
    *ahi = *bhi = 0;
    auto eat = [&](unsigned long long off, unsigned long long *lo, unsigned long long *hi) {
        h = (h ^ sm[off]) * 1099511628211ull;
        h = (h ^ sm[off + 1]) * 1099511628211ull;
        if (off < *lo) *lo = off;
        if (off + 2 > *hi) *hi = off + 2;
    };
    if (!r.rs)
        for (unsigned m = 0; m < 64; m++)
            for (unsigned k = 0; k < 16; k++) eat(desc_elem(r.da, m, k, r.ta == 0), alo, ahi);
    for (unsigned n = 0; n < r.n; n++)
        for (unsigned k = 0; k < 16; k++) eat(desc_elem(r.db, n, k, r.tb == 0), blo, bhi);
    return h;
}

inline bool overlaps(unsigned long long lo, unsigned long long hi, unsigned long long a, unsigned long long b) {
    return lo < hi && a < hi && lo < b;
}

/* A TMA load into shared memory that a wgmma in flight reads: the buffer was released too early. */
inline void check_tma_vs_wgmma(unsigned long long off, size_t bytes, const char *file, unsigned line) {
    block &b = state();
    for (const wg_rec &r : b.rec)
        if (r.live && (overlaps(r.alo, r.ahi, off, off + bytes) || overlaps(r.blo, r.bhi, off, off + bytes)))
            fail(file, line, "cp.async.bulk.tensor writes shared bytes %llu..%llu that the wgmma issued at %s:%u "
                 "(warpgroup %u) still reads — complete it with hyp_wgmma_wait before releasing its buffer "
                 "(e.g. before arriving on the stage's empty barrier)", off, off + bytes, r.file, r.line, r.wg);
}

struct wgmma_op {
    wg_op base;
    unsigned long long da, db;
    unsigned n, ta, tb, scale_d, rs;
    uint32_t a[4];
    float *d;
};

inline float read_bf16(const unsigned char *p) {
    uint16_t h;
    std::memcpy(&h, p, 2);
    return bf16_bits(h);
}

inline tstate &thread_state(hyp_sim_thread *t, const char *what, const char *file, unsigned line) {
    if (t->linear >= WG_THREADS_MAX)
        fail(file, line, "%s from thread %u: sim emulates wgmma in the first %d threads (4 warpgroups) "
             "of a block", what, t->linear, (int)WG_THREADS_MAX);
    return state().ts[t->linear];
}

inline void wgmma_combine(wg_op *const *ops, hyp_sim_thread *caller) {
    const wgmma_op *o0 = (const wgmma_op *)ops[0];
    const char *file = o0->base.file;
    unsigned line = o0->base.line, N = o0->n, wg = caller->linear / 128;
    for (unsigned i = 1; i < 128; i++) {
        const wgmma_op *o = (const wgmma_op *)ops[i];
        if (o->n != N || o->ta != o0->ta || o->tb != o0->tb || o->rs != o0->rs || o->scale_d != o0->scale_d ||
            o->db != o0->db || (!o->rs && o->da != o0->da))
            fail(o->base.file, o->base.line, "wgmma.mma_async: thread %u of warpgroup %u passes another shape, "
                 "transpose, scale-d or descriptor than thread %u (B desc 0x%016llx vs 0x%016llx) — the operands "
                 "of a wgmma are warpgroup-uniform", wg * 128 + i, wg, wg * 128, o->db, o0->db);
    }
    block &b = state();
    hyp_sim_thread *me = cur;
    size_t dyn = me->dyn_shared_bytes;
    const unsigned char *sm = me->dyn_shared;
    for (unsigned long long desc : {o0->db, o0->rs ? 0ull : o0->da})
        if ((desc >> 49) & 7)
            fail(file, line, "wgmma.mma_async: a descriptor with a nonzero matrix base offset (0x%016llx) is "
                 "not emulated — align the swizzle atom to its repeat (1024 bytes for 128B)", desc);
    float A[64][16], B[16][256];
    auto at = [&](unsigned long long desc, unsigned mn, unsigned k, bool kmajor, const char *which) {
        unsigned long long off = desc_elem(desc, mn, k, kmajor);
        if (off + 2 > dyn)
            fail(file, line, "wgmma.mma_async: %s element (%u, k %u) is at shared offset %llu, past the %zu bytes "
                 "of dynamic shared memory — check the descriptor's start, LBO and SBO", which, mn, k, off, dyn);
        return read_bf16(sm + off);
    };
    if (o0->rs) {
        for (unsigned i = 0; i < 128; i++) {
            const wgmma_op *o = (const wgmma_op *)ops[i];
            unsigned w = i / 32, g = (i % 32) >> 2, t = i & 3, r0 = 16 * w + g;
            const unsigned rows[4] = {r0, r0 + 8, r0, r0 + 8}, cols[4] = {2 * t, 2 * t, 2 * t + 8, 2 * t + 8};
            for (unsigned j = 0; j < 4; j++) {
                A[rows[j]][cols[j]] = bf16_bits(o->a[j]);
                A[rows[j]][cols[j] + 1] = bf16_bits(o->a[j] >> 16);
            }
        }
    } else {
        for (unsigned m = 0; m < 64; m++)
            for (unsigned k = 0; k < 16; k++) A[m][k] = at(o0->da, m, k, o0->ta == 0, "A");
    }
    for (unsigned n = 0; n < N; n++)
        for (unsigned k = 0; k < 16; k++) B[k][n] = at(o0->db, n, k, o0->tb == 0, "B");
    for (unsigned i = 0; i < 128; i++) {
        const wgmma_op *o = (const wgmma_op *)ops[i];
        tstate &ts = b.ts[wg * 128 + i];
        acc *e = nullptr;
        for (unsigned j = 0; j < ts.nacc; j++) {
            acc &x = ts.a[j];
            if (x.d == o->d && x.n == N / 2) e = &x;
            else if (o->d < x.d + x.n && x.d < o->d + N / 2)
                fail(o->base.file, o->base.line, "wgmma.mma_async: thread %u's accumulators %p (%u floats) overlap "
                     "others (%p, %u floats) of a wgmma still in flight — wait for it first", wg * 128 + i,
                     (void *)o->d, N / 2, (void *)x.d, x.n);
        }
        float in[ACC_FLOATS];
        for (unsigned v = 0; v < N / 2; v++) in[v] = e ? e->v[v] : o->d[v];
        if (!e) {
            if (ts.nacc == ACC_MAX)
                fail(o->base.file, o->base.line, "wgmma.mma_async: thread %u has %d accumulators in flight (sim's "
                     "limit) — wait for some first", wg * 128 + i, (int)ACC_MAX);
            e = &ts.a[ts.nacc++];
            e->d = o->d;
            e->n = N / 2;
        }
        unsigned w = i / 32, g = (i % 32) >> 2, t = i & 3;
        for (unsigned v = 0; v < N / 2; v++) {
            unsigned row = 16 * w + g + 8 * ((v >> 1) & 1), col = 8 * (v >> 2) + 2 * t + (v & 1);
            float s = o->scale_d ? in[v] : 0.0f;
            for (unsigned k = 0; k < 16; k++) s += A[row][k] * B[k][col];
            e->v[v] = s;
            o->d[v] = __int_as_float(0x7FFFFFFF); /* not readable until wgmma.wait_group */
        }
        e->group = ts.commits;
    }
    wg_rec *rec = nullptr;
    for (wg_rec &r : b.rec)
        if (!r.live) {
            rec = &r;
            break;
        }
    if (!rec)
        fail(file, line, "wgmma.mma_async: more than %d wgmma in flight in the block (sim's limit) — wait for some",
             (int)REC_MAX);
    *rec = wg_rec{true, wg, b.ts[wg * 128].commits, o0->da, o0->db, 0, 0, 0, 0, 0, N, o0->ta, o0->tb, o0->rs, file, line};
    rec->hash = operand_hash(*rec, &rec->alo, &rec->ahi, &rec->blo, &rec->bhi);
}

inline void wgmma(float *d, unsigned n, unsigned long long da, const unsigned *a, unsigned long long db, int ta,
                  int tb, int scale_d, const char *file, unsigned line) {
    hyp_sim_thread *t = cur;
    tstate &ts = thread_state(t, "wgmma.mma_async", file, line);
    if (!ts.fenced)
        fail(file, line, "wgmma.mma_async before any wgmma.fence of this thread — call hyp_wgmma_fence() "
             "before the first wgmma (and after touching its accumulator or A registers)");
    wgmma_op op;
    op.base = wg_op{a ? "wgmma.mma_async (A from registers)" : "wgmma.mma_async", file, line, wgmma_combine};
    op.da = da;
    op.db = db;
    op.n = n;
    op.ta = (unsigned)ta;
    op.tb = (unsigned)tb;
    op.scale_d = scale_d != 0;
    op.rs = a != nullptr;
    for (int j = 0; j < 4; j++) op.a[j] = a ? a[j] : 0;
    op.d = d;
    wg_join(&op.base);
}

inline void wgmma_fence(const char *file, unsigned line) {
    thread_state(cur, "wgmma.fence", file, line).fenced = true;
}
inline void wgmma_commit(const char *file, unsigned line) { thread_state(cur, "wgmma.commit_group", file, line).commits++; }
/* wait_group n: the accumulators of every group but the newest n committed ones become readable. */
inline void wgmma_wait(unsigned n, const char *file, unsigned line) {
    tstate &ts = thread_state(cur, "wgmma.wait_group", file, line);
    block &b = state();
    unsigned wg = cur->linear / 128;
    for (wg_rec &r : b.rec) {
        if (!r.live || r.wg != wg || !(r.group < ts.commits && ts.commits - r.group > n)) continue;
        unsigned long long alo, ahi, blo, bhi;
        if (operand_hash(r, &alo, &ahi, &blo, &bhi) != r.hash)
            fail(file, line, "wgmma.wait_group: shared memory read by the wgmma issued at %s:%u changed before this "
                 "wait completed it — the operands of a wgmma in flight must not be written (wait first)",
                 r.file, r.line);
        r.live = false;
    }
    unsigned keep = 0;
    for (unsigned j = 0; j < ts.nacc; j++) {
        acc &x = ts.a[j];
        if (x.group < ts.commits && ts.commits - x.group > n) std::memcpy(x.d, x.v, x.n * sizeof(float));
        else if (keep != j) ts.a[keep++] = x;
        else keep++;
    }
    ts.nacc = keep;
}

/* ---- setmaxnreg ---- */
struct setmaxnreg_op {
    wg_op base;
    unsigned r;
    bool inc;
};
inline void setmaxnreg_combine(wg_op *const *ops, hyp_sim_thread *caller) {
    const setmaxnreg_op *o0 = (const setmaxnreg_op *)ops[0];
    for (unsigned i = 1; i < 128; i++) {
        const setmaxnreg_op *o = (const setmaxnreg_op *)ops[i];
        if (o->r != o0->r || o->inc != o0->inc)
            fail(o->base.file, o->base.line, "setmaxnreg.%s %u in thread %u, but setmaxnreg.%s %u in thread %u of "
                 "the same warpgroup — the count is warpgroup-uniform", o->inc ? "inc" : "dec", o->r,
                 caller->linear / 128 * 128 + i, o0->inc ? "inc" : "dec", o0->r, caller->linear / 128 * 128);
    }
}
inline void setmaxnreg(unsigned r, bool inc, const char *file, unsigned line) {
    if (r < 24 || r > 256 || r % 8)
        fail(file, line, "setmaxnreg %u: the count is 24..256 and a multiple of 8", r);
    setmaxnreg_op op;
    op.base = wg_op{"setmaxnreg", file, line, setmaxnreg_combine};
    op.r = r;
    op.inc = inc;
    wg_join(&op.base);
}

/* ---- named barriers (bar.sync / bar.arrive with an id and a thread count) ---- */
inline void named_bar(int id, int nthreads, bool wait, const char *file, unsigned line) {
    const char *what = wait ? "bar.sync" : "bar.arrive";
    block &b = state();
    if (id < 1 || id >= NBAR)
        fail(file, line, "%s %d: named barrier ids are 1..15 (0 is __syncthreads')", what, id);
    if (nthreads <= 0 || nthreads % 32 || (unsigned)nthreads > b.nthreads)
        fail(file, line, "%s %d, %d: the thread count must be a multiple of 32, at most the block's %u", what, id,
             nthreads, b.nthreads);
    nbar &nb = b.nb[id];
    if (nb.count == 0) nb.expected = (unsigned)nthreads;
    else if (nb.expected != (unsigned)nthreads)
        fail(file, line, "%s %d, %d while other threads use barrier %d with %u threads — every participant "
             "passes the same count", what, id, nthreads, id, nb.expected);
    unsigned long long gen = nb.gen;
    if (++nb.count == nb.expected) {
        nb.count = 0;
        nb.gen++;
        return;
    }
    if (!wait) return;
    hyp_sim_thread *me = cur;
    gen_wait w{&nb.gen, gen};
    host->park(me, gen_changed, &w, "bar.sync (named barrier)", file, line);
    cur = me;
}

} /* namespace hopper */
} /* namespace hyp_sim */

#endif
