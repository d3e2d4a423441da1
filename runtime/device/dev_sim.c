/* dev_sim.c — the "sim" device (device.h): the device layer's semantics on the CPU.
 *
 * Memory is host memory (256-byte aligned, filled with 0xFF when allocated) whose blocks are
 * registered, so every copy, memset, GEMM operand and collective buffer is checked to lie inside
 * one of them. Modules are rendered .cu files compiled and run by the kernel simulator (sim.h).
 *
 * Streams are queues of commands that run lazily on the calling thread: a command runs only when
 * something needs it (device.h, "How sim makes ordering bugs show"). Every command gets a global
 * sequence number; a stream runs its queue in order; an event remembers the stream and sequence
 * number of its latest record; a stream waiting on an event runs the recording stream up to that
 * number first. A wait always names an earlier number than itself, so this recursion ends.
 *
 * v2165 graphs: a capturing stream keeps the commands enqueued on it in a list instead of its
 * queue; the list becomes a graph, and a graph launch enqueues a copy of every command, in order,
 * on the launching stream (they then run lazily like any other work). What a capture cannot
 * record is refused and invalidates the capture (device.h).
 *
 * With HYP_SIM_COUNT_FILE=PATH the modules are compiled for counting (sim.h HYP_SIM_COUNT_FLAGS)
 * and every launch appends "kernel<TAB>bytes loaded<TAB>bytes stored<TAB>mma instructions" to
 * PATH: what it executed inside this device's allocations. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../../kernels/sim/sim_tmap.h"
#include "device.h"
#include "sim.h"

enum { ORDER_REVERSE, ORDER_FORWARD, ORDER_EAGER };
enum { C_COPY, C_MEMSET, C_LAUNCH, C_GEMM, C_RECORD, C_WAIT, C_COLL };
enum { COLL_ALLREDUCE, COLL_REDUCE_SCATTER, COLL_ALLGATHER, COLL_BROADCAST, COLL_REDUCE };

typedef struct sim_stream sim_stream;
typedef struct sim_event sim_event;
typedef struct sim_module {
    hyp_sim_module *m;
} sim_module;

typedef struct cmd {
    int kind;
    uint64_t seq;
    struct cmd *next;
    union {
        struct {
            void *dst;
            const void *src;
            size_t bytes;
        } copy;
        struct {
            void *dst;
            int byte;
            size_t bytes;
        } set;
        struct {
            sim_module *m;
            char *name;
            hyp_dim3 grid, block;
            size_t shmem;
            hyp_kargs args;
        } launch;
        hyp_gemm gemm;
        struct {
            sim_event *ev;
            uint64_t gen;
        } rec;
        struct {
            sim_stream *s;
            uint64_t seq;
        } wait;
        struct {
            int what, root;
            hyp_redop op;
            void *buf;
            const void *send;
            size_t count;
            hyp_dtype t;
        } coll;
    } u;
} cmd;

struct sim_stream {
    cmd *head, *tail;
    int capturing;          /* v2165: enqueued commands go to cap_head instead */
    cmd *cap_head, *cap_tail;
    char cap_bad[512];      /* why the capture was invalidated ("" while valid) */
};

typedef struct {
    cmd *head; /* the recorded commands, in order */
    int n;
} sim_graph;

struct sim_event {
    sim_stream *s;
    uint64_t seq, gen; /* sequence number of the latest record, records so far */
    int complete;      /* the latest record has run */
    double t_ms;       /* when it ran */
};

typedef struct {
    char *p;
    size_t n;
} sim_alloc;

typedef struct {
    hyp_device pub; /* first: the hyp_device * is the sim_dev * */
    sim_stream **streams; /* creation order; [0] is the default stream */
    int nstreams;
    sim_event **events;
    int nevents;
    sim_module **modules;
    int nmodules;
    sim_alloc *allocs; /* sorted by address */
    size_t nallocs, capallocs, allocated;
    uint64_t seq;
    int order;
    int sticky; /* first error of work that ran (HYP_EFAIL), returned from then on */
    char sticky_msg[1024];
    hyp_coll *coll;
    FILE *count_out; /* HYP_SIM_COUNT_FILE: per-launch execution counts, or NULL */
    int ncapturing;  /* streams capturing a graph */
} sim_dev;

#define SD(d) ((sim_dev *)(d))

/* ---- object lists --------------------------------------------------------------------------- */

static int list_add(void ***list, int *n, void *x) {
    void **nl = realloc(*list, sizeof(void *) * (size_t)(*n + 1));
    if (!nl) return -1;
    nl[(*n)++] = x;
    *list = nl;
    return 0;
}

static int list_remove(void **list, int *n, void *x) {
    for (int i = 0; i < *n; i++)
        if (list[i] == x) {
            memmove(list + i, list + i + 1, sizeof(void *) * (size_t)(*n - i - 1));
            (*n)--;
            return 1;
        }
    return 0;
}

/* ---- running commands ----------------------------------------------------------------------- */

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}

static void free_cmd(cmd *c) {
    if (c->kind == C_LAUNCH) free(c->u.launch.name);
    free(c);
}

static void run_until(sim_dev *d, sim_stream *s, uint64_t seq);

static int run_coll(sim_dev *d, cmd *c, hyp_err *e) {
    hyp_coll *co = d->coll;
    size_t es = hyp_dtype_size(c->u.coll.t);
    switch (c->u.coll.what) {
    case COLL_ALLREDUCE:
        return c->u.coll.op == HYP_RED_MAX ? hyp_coll_allreduce_max_f32(co, c->u.coll.buf, c->u.coll.count, e)
                                           : hyp_coll_allreduce_f32(co, c->u.coll.buf, c->u.coll.count, e);
    case COLL_REDUCE_SCATTER: return hyp_coll_reduce_scatter_f32(co, c->u.coll.send, c->u.coll.buf, c->u.coll.count, e);
    case COLL_ALLGATHER: /* any dtype as fp32 words (the enqueue checked the byte count) */
        return hyp_coll_allgather_f32(co, c->u.coll.send, c->u.coll.buf, c->u.coll.count * es / 4, e);
    case COLL_REDUCE: return hyp_coll_reduce_f32(co, c->u.coll.buf, c->u.coll.count, c->u.coll.root, e);
    default: return hyp_coll_broadcast(co, c->u.coll.buf, c->u.coll.count * es, c->u.coll.root, e);
    }
}

static int run_cmd(sim_dev *d, cmd *c, hyp_err *e) {
    switch (c->kind) {
    case C_COPY: memmove(c->u.copy.dst, c->u.copy.src, c->u.copy.bytes); return HYP_OK;
    case C_MEMSET: memset(c->u.set.dst, c->u.set.byte, c->u.set.bytes); return HYP_OK;
    case C_LAUNCH: {
        hyp_sim_counts cnt;
        if (d->count_out) hyp_sim_count_take(&cnt); /* drop what ran outside a launch */
        int rc = hyp_sim_launch(c->u.launch.m->m, c->u.launch.name, c->u.launch.grid, c->u.launch.block,
                                c->u.launch.shmem, hyp_kargs_params(&c->u.launch.args), NULL, e);
        if (d->count_out) {
            hyp_sim_count_take(&cnt);
            fprintf(d->count_out, "%s\t%llu\t%llu\t%llu\n", c->u.launch.name, cnt.loaded, cnt.stored, cnt.mma);
        }
        if (rc) {
            char msg[sizeof e->msg];
            snprintf(msg, sizeof msg, "%s", e->msg);
            return hyp_fail(e, HYP_EFAIL, "sim: kernel %s: %s", c->u.launch.name, msg);
        }
        return HYP_OK;
    }
    case C_GEMM: return hyp_gemm_cpu(&c->u.gemm, e) ? HYP_EFAIL : HYP_OK;
    case C_RECORD:
        if (c->u.rec.ev->gen == c->u.rec.gen) {
            c->u.rec.ev->complete = 1;
            c->u.rec.ev->t_ms = now_ms();
        }
        return HYP_OK;
    case C_WAIT: run_until(d, c->u.wait.s, c->u.wait.seq); return HYP_OK;
    default: return run_coll(d, c, e) ? HYP_EFAIL : HYP_OK;
    }
}

/* Runs s's commands numbered <= seq. After an error, pending work is dropped (as a GPU context
 * is lost after a fault) and the error is kept. */
static void run_until(sim_dev *d, sim_stream *s, uint64_t seq) {
    while (s->head && s->head->seq <= seq) {
        cmd *c = s->head;
        s->head = c->next;
        if (!s->head) s->tail = NULL;
        if (!d->sticky || c->kind == C_RECORD) { /* dropped work still completes its events */
            hyp_err e;
            if (run_cmd(d, c, &e)) {
                d->sticky = HYP_EFAIL;
                snprintf(d->sticky_msg, sizeof d->sticky_msg, "%s", e.msg);
            }
        }
        free_cmd(c);
    }
}

static void run_all(sim_dev *d) {
    if (d->order == ORDER_FORWARD)
        for (int i = 0; i < d->nstreams; i++) run_until(d, d->streams[i], UINT64_MAX);
    else
        for (int i = d->nstreams - 1; i >= 0; i--) run_until(d, d->streams[i], UINT64_MAX);
}

static int sticky(sim_dev *d, hyp_err *e) {
    return d->sticky ? hyp_fail(e, d->sticky, "%s", d->sticky_msg) : HYP_OK;
}

static sim_stream *stream_of(sim_dev *d, hyp_stream *s) { return s ? (sim_stream *)s : d->streams[0]; }

/* v2165: call `what`, illegal while s (NULL: any stream) captures, invalidates those captures and
 * is refused, as the driver refuses it with CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED. */
static int cap_refuse(sim_dev *d, sim_stream *s, const char *what, hyp_err *e) {
    if (!d->ncapturing || (s && !s->capturing)) return HYP_OK;
    for (int i = 0; i < d->nstreams; i++) {
        sim_stream *t = d->streams[i];
        if (t->capturing && (!s || t == s) && !t->cap_bad[0]) snprintf(t->cap_bad, sizeof t->cap_bad, "%s", what);
    }
    return hyp_fail(e, HYP_EINPUT, "sim: %s while a stream captures a graph — keep it outside the captured region (the CUDA driver refuses it: CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED)", what);
}

static cmd *new_cmd(int kind) {
    cmd *c = calloc(1, sizeof *c);
    if (c) c->kind = kind;
    return c;
}

/* Appends c to s (numbering it); eager mode runs it at once. A capturing stream records it. */
static int enqueue(sim_dev *d, sim_stream *s, cmd *c, hyp_err *e) {
    if (s->capturing) {
        if (s->cap_tail) s->cap_tail->next = c;
        else s->cap_head = c;
        s->cap_tail = c;
        return HYP_OK;
    }
    c->seq = ++d->seq;
    if (s->tail) s->tail->next = c;
    else s->head = c;
    s->tail = c;
    if (d->order == ORDER_EAGER) {
        run_until(d, s, c->seq);
        return sticky(d, e);
    }
    return HYP_OK;
}

/* ---- memory --------------------------------------------------------------------------------- */

/* Index of the block holding address p (or -1). */
static long find_alloc(sim_dev *d, const void *p) {
    size_t lo = 0, hi = d->nallocs;
    const char *q = p;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (d->allocs[mid].p <= q) lo = mid + 1;
        else hi = mid;
    }
    if (lo == 0) return -1;
    sim_alloc *a = &d->allocs[lo - 1];
    return q < a->p + (a->n ? a->n : 1) ? (long)(lo - 1) : -1;
}

static int check_range(sim_dev *d, const void *p, size_t bytes, const char *what, hyp_err *e) {
    if (!p) return hyp_fail(e, HYP_EINPUT, "sim: %s is NULL — pass device memory from mem_alloc", what);
    if (!bytes) return HYP_OK; /* nothing is touched (CUDA accepts any pointer for 0 bytes) */
    long i = find_alloc(d, p);
    if (i < 0)
        return hyp_fail(e, HYP_EINPUT, "sim: %s %p is not device memory (inside no mem_alloc block) — pass a pointer from mem_alloc",
                        what, p);
    sim_alloc *a = &d->allocs[i];
    if ((size_t)((const char *)p - a->p) + bytes > a->n)
        return hyp_fail(e, HYP_EINPUT, "sim: %s: %zu bytes at offset %zu overrun its %zu-byte block", what, bytes,
                        (size_t)((const char *)p - a->p), a->n);
    return HYP_OK;
}

static int sim_mem_alloc(hyp_device *dv, void **out, size_t bytes, hyp_err *e) {
    sim_dev *d = SD(dv);
    *out = NULL;
    if (sticky(d, e)) return d->sticky;
    if (cap_refuse(d, NULL, "mem_alloc", e)) return HYP_EINPUT;
    if (d->nallocs == d->capallocs) {
        size_t cap = d->capallocs ? 2 * d->capallocs : 64;
        sim_alloc *na = realloc(d->allocs, cap * sizeof *na);
        if (!na) return hyp_fail(e, HYP_EFAIL, "sim: out of memory");
        d->allocs = na, d->capallocs = cap;
    }
    size_t rounded = (bytes + 255) & ~(size_t)255;
    char *p = aligned_alloc(256, rounded ? rounded : 256);
    if (!p) return hyp_fail(e, HYP_EFAIL, "sim: out of memory allocating %zu bytes of device memory", bytes);
    memset(p, 0xFF, rounded ? rounded : 256);
    size_t i = d->nallocs;
    while (i > 0 && d->allocs[i - 1].p > p) i--;
    memmove(d->allocs + i + 1, d->allocs + i, (d->nallocs - i) * sizeof *d->allocs);
    d->allocs[i] = (sim_alloc){p, bytes};
    d->nallocs++;
    hyp_sim_count_region(p, bytes, 1);
    d->allocated += bytes;
    *out = p;
    return HYP_OK;
}

static int sim_mem_free(hyp_device *dv, void *p, hyp_err *e) {
    sim_dev *d = SD(dv);
    if (!p) return HYP_OK;
    if (cap_refuse(d, NULL, "mem_free", e)) return HYP_EINPUT;
    run_all(d);
    long i = find_alloc(d, p);
    if (i < 0 || d->allocs[i].p != p)
        return hyp_fail(e, HYP_EINPUT, "sim: mem_free(%p): not a pointer returned by mem_alloc", p);
    d->allocated -= d->allocs[i].n;
    hyp_sim_count_region(d->allocs[i].p, d->allocs[i].n, 0);
    free(d->allocs[i].p);
    memmove(d->allocs + i, d->allocs + i + 1, (d->nallocs - (size_t)i - 1) * sizeof *d->allocs);
    d->nallocs--;
    return sticky(d, e);
}

static int sim_host_alloc(hyp_device *dv, void **out, size_t bytes, hyp_err *e) {
    (void)dv;
    *out = malloc(bytes ? bytes : 1);
    return *out ? HYP_OK : hyp_fail(e, HYP_EFAIL, "sim: out of memory allocating %zu bytes of host memory", bytes);
}

static int sim_host_free(hyp_device *dv, void *p, hyp_err *e) {
    (void)dv, (void)e;
    free(p);
    return HYP_OK;
}

static int sim_mem_info(hyp_device *dv, size_t *free_b, size_t *total, hyp_err *e) {
    (void)e;
    *total = SD(dv)->pub.info.total_mem;
    size_t avail = (size_t)sysconf(_SC_AVPHYS_PAGES) * (size_t)sysconf(_SC_PAGESIZE);
    *free_b = avail < *total ? avail : *total;
    return HYP_OK;
}

static int copy_cmd(sim_dev *d, void *dst, const void *src, size_t bytes, hyp_stream *s, int dst_dev, int src_dev,
                    hyp_err *e) {
    if (sticky(d, e)) return d->sticky;
    if (dst_dev && check_range(d, dst, bytes, "copy destination", e)) return HYP_EINPUT;
    if (src_dev && check_range(d, src, bytes, "copy source", e)) return HYP_EINPUT;
    if (!dst || !src) return hyp_fail(e, HYP_EINPUT, "sim: copy with a NULL host pointer");
    if ((!dst_dev || !src_dev) && cap_refuse(d, stream_of(d, s), "a copy to or from host memory", e)) return HYP_EINPUT;
    d->pub.calls++;
    cmd *c = new_cmd(C_COPY);
    if (!c) return hyp_fail(e, HYP_EFAIL, "sim: out of memory");
    c->u.copy.dst = dst, c->u.copy.src = src, c->u.copy.bytes = bytes;
    return enqueue(d, stream_of(d, s), c, e);
}

static int sim_h2d(hyp_device *d, void *dst, const void *src, size_t n, hyp_stream *s, hyp_err *e) {
    return copy_cmd(SD(d), dst, src, n, s, 1, 0, e);
}
static int sim_d2h(hyp_device *d, void *dst, const void *src, size_t n, hyp_stream *s, hyp_err *e) {
    return copy_cmd(SD(d), dst, src, n, s, 0, 1, e);
}
static int sim_d2d(hyp_device *d, void *dst, const void *src, size_t n, hyp_stream *s, hyp_err *e) {
    return copy_cmd(SD(d), dst, src, n, s, 1, 1, e);
}

static int sim_memset(hyp_device *dv, void *dst, int byte, size_t bytes, hyp_stream *s, hyp_err *e) {
    sim_dev *d = SD(dv);
    if (sticky(d, e)) return d->sticky;
    if (check_range(d, dst, bytes, "memset destination", e)) return HYP_EINPUT;
    d->pub.calls++;
    cmd *c = new_cmd(C_MEMSET);
    if (!c) return hyp_fail(e, HYP_EFAIL, "sim: out of memory");
    c->u.set.dst = dst, c->u.set.byte = byte, c->u.set.bytes = bytes;
    return enqueue(d, stream_of(d, s), c, e);
}

/* The synchronous forms: drain everything, run the operation on the default stream, drain it. */
static int sync_after(sim_dev *d, int rc, hyp_err *e) {
    if (rc) return rc;
    run_all(d);
    return sticky(d, e);
}
static int sim_h2d_sync(hyp_device *d, void *dst, const void *src, size_t n, hyp_err *e) {
    if (cap_refuse(SD(d), NULL, "h2d_sync", e)) return HYP_EINPUT;
    run_all(SD(d));
    return sync_after(SD(d), sim_h2d(d, dst, src, n, NULL, e), e);
}
static int sim_d2h_sync(hyp_device *d, void *dst, const void *src, size_t n, hyp_err *e) {
    if (cap_refuse(SD(d), NULL, "d2h_sync", e)) return HYP_EINPUT;
    run_all(SD(d));
    return sync_after(SD(d), sim_d2h(d, dst, src, n, NULL, e), e);
}
static int sim_d2d_sync(hyp_device *d, void *dst, const void *src, size_t n, hyp_err *e) {
    if (cap_refuse(SD(d), NULL, "d2d_sync", e)) return HYP_EINPUT;
    run_all(SD(d));
    return sync_after(SD(d), sim_d2d(d, dst, src, n, NULL, e), e);
}
static int sim_memset_sync(hyp_device *d, void *dst, int byte, size_t n, hyp_err *e) {
    if (cap_refuse(SD(d), NULL, "memset_sync", e)) return HYP_EINPUT;
    run_all(SD(d));
    return sync_after(SD(d), sim_memset(d, dst, byte, n, NULL, e), e);
}

/* ---- modules and launch --------------------------------------------------------------------- */

static int sim_module_load(hyp_device *dv, const char *path, hyp_module **out, hyp_err *e) {
    sim_dev *d = SD(dv);
    *out = NULL;
    size_t len = strlen(path);
    sim_module *m = calloc(1, sizeof *m);
    if (!m) return hyp_fail(e, HYP_EFAIL, "sim: out of memory");
    int rc = len > 3 && !strcmp(path + len - 3, ".so") ? hyp_sim_load(path, &m->m, e) : hyp_sim_open(path, d->count_out ? HYP_SIM_COUNT_FLAGS : NULL, &m->m, e);
    if (!rc && list_add((void ***)&d->modules, &d->nmodules, m)) {
        hyp_sim_unload(m->m);
        rc = hyp_fail(e, HYP_EFAIL, "sim: out of memory");
    }
    if (rc) {
        free(m);
        return rc;
    }
    *out = (hyp_module *)m;
    return HYP_OK;
}

static void sim_module_unload(hyp_device *dv, hyp_module *mod) {
    sim_dev *d = SD(dv);
    sim_module *m = (sim_module *)mod;
    if (!m) return;
    run_all(d); /* no pending launch may use it */
    list_remove((void **)d->modules, &d->nmodules, m);
    hyp_sim_unload(m->m);
    free(m);
}

static int sim_launch(hyp_device *dv, hyp_module *mod, const char *kernel, hyp_dim3 grid, hyp_dim3 block,
                      size_t shmem, const hyp_kargs *args, hyp_stream *s, hyp_err *e) {
    sim_dev *d = SD(dv);
    if (sticky(d, e)) return d->sticky;
    if (!mod || !kernel) return hyp_fail(e, HYP_EINPUT, "sim: launch without a module or kernel name");
    if (!args || args->n < 0)
        return hyp_fail(e, HYP_EINPUT, "sim: launch %s: invalid arguments (more than %d, or one over 16 bytes)", kernel,
                        HYP_KARGS_MAX);
    unsigned long long threads = (unsigned long long)block.x * block.y * block.z;
    if (!grid.x || !grid.y || !grid.z || !threads || threads > 1024 || block.z > 64 || grid.y > 65535 || grid.z > 65535)
        return hyp_fail(e, HYP_EINPUT, "sim: launch %s: invalid grid (%u,%u,%u) / block (%u,%u,%u)", kernel, grid.x,
                        grid.y, grid.z, block.x, block.y, block.z);
    if (shmem > 227 * 1024)
        return hyp_fail(e, HYP_EINPUT, "sim: launch %s: %zu bytes of dynamic shared memory (the limit is 227 KiB)",
                        kernel, shmem);
    cmd *c = new_cmd(C_LAUNCH);
    if (!c || !(c->u.launch.name = strdup(kernel))) {
        free(c);
        return hyp_fail(e, HYP_EFAIL, "sim: out of memory");
    }
    c->u.launch.m = (sim_module *)mod;
    c->u.launch.grid = grid, c->u.launch.block = block, c->u.launch.shmem = shmem;
    c->u.launch.args = *args;
    d->pub.calls++;
    return enqueue(d, stream_of(d, s), c, e);
}

/* ---- streams and events --------------------------------------------------------------------- */

static int sim_stream_create(hyp_device *dv, hyp_stream **out, hyp_err *e) {
    sim_dev *d = SD(dv);
    sim_stream *s = calloc(1, sizeof *s);
    if (!s || list_add((void ***)&d->streams, &d->nstreams, s)) {
        free(s);
        return hyp_fail(e, HYP_EFAIL, "sim: out of memory");
    }
    *out = (hyp_stream *)s;
    return HYP_OK;
}

static void sim_stream_destroy(hyp_device *dv, hyp_stream *hs) {
    sim_dev *d = SD(dv);
    sim_stream *s = (sim_stream *)hs;
    if (!s || s == d->streams[0]) return;
    run_all(d); /* its work completes; nothing can wait on it afterwards */
    if (list_remove((void **)d->streams, &d->nstreams, s)) free(s);
}

static int sim_stream_synchronize(hyp_device *dv, hyp_stream *s, hyp_err *e) {
    sim_dev *d = SD(dv);
    if (cap_refuse(d, stream_of(d, s), "stream_synchronize of the capturing stream", e)) return HYP_EINPUT;
    run_until(d, stream_of(d, s), UINT64_MAX);
    return sticky(d, e);
}

static int sim_synchronize(hyp_device *dv, hyp_err *e) {
    if (cap_refuse(SD(dv), NULL, "synchronize", e)) return HYP_EINPUT;
    run_all(SD(dv));
    return sticky(SD(dv), e);
}

static int sim_event_create(hyp_device *dv, hyp_event **out, hyp_err *e) {
    sim_dev *d = SD(dv);
    sim_event *ev = calloc(1, sizeof *ev);
    if (!ev || list_add((void ***)&d->events, &d->nevents, ev)) {
        free(ev);
        return hyp_fail(e, HYP_EFAIL, "sim: out of memory");
    }
    *out = (hyp_event *)ev;
    return HYP_OK;
}

static void sim_event_destroy(hyp_device *dv, hyp_event *hev) {
    sim_dev *d = SD(dv);
    if (!hev) return;
    run_all(d); /* no pending record may point at it */
    if (list_remove((void **)d->events, &d->nevents, hev)) free(hev);
}

static int sim_event_record(hyp_device *dv, hyp_event *hev, hyp_stream *hs, hyp_err *e) {
    sim_dev *d = SD(dv);
    sim_event *ev = (sim_event *)hev;
    if (sticky(d, e)) return d->sticky;
    if (cap_refuse(d, stream_of(d, hs), "event_record on the capturing stream (sim records no events in graphs)", e)) return HYP_EINPUT;
    cmd *c = new_cmd(C_RECORD);
    if (!c) return hyp_fail(e, HYP_EFAIL, "sim: out of memory");
    sim_stream *s = stream_of(d, hs);
    ev->s = s, ev->gen++, ev->complete = 0;
    c->u.rec.ev = ev, c->u.rec.gen = ev->gen;
    ev->seq = d->seq + 1; /* the number enqueue gives c (which eager mode frees at once) */
    return enqueue(d, s, c, e);
}

static int sim_event_wait(hyp_device *dv, hyp_stream *hs, hyp_event *hev, hyp_err *e) {
    sim_dev *d = SD(dv);
    sim_event *ev = (sim_event *)hev;
    if (sticky(d, e)) return d->sticky;
    if (cap_refuse(d, stream_of(d, hs), "event_wait on the capturing stream (sim records no events in graphs)", e)) return HYP_EINPUT;
    if (!ev->gen || ev->complete) return HYP_OK; /* never recorded, or its work has run */
    cmd *c = new_cmd(C_WAIT);
    if (!c) return hyp_fail(e, HYP_EFAIL, "sim: out of memory");
    c->u.wait.s = ev->s, c->u.wait.seq = ev->seq;
    return enqueue(d, stream_of(d, hs), c, e);
}

static int sim_event_synchronize(hyp_device *dv, hyp_event *hev, hyp_err *e) {
    sim_dev *d = SD(dv);
    sim_event *ev = (sim_event *)hev;
    if (ev->gen && !ev->complete) run_until(d, ev->s, ev->seq);
    return sticky(d, e);
}

static int sim_event_elapsed_ms(hyp_device *dv, hyp_event *a, hyp_event *b, float *ms, hyp_err *e) {
    sim_dev *d = SD(dv);
    sim_event *s = (sim_event *)a, *t = (sim_event *)b;
    if (sticky(d, e)) return d->sticky;
    if (!s->gen || !t->gen) return hyp_fail(e, HYP_EINPUT, "sim: elapsed time of an event that was never recorded");
    if (!s->complete || !t->complete)
        return hyp_fail(e, HYP_EINPUT, "sim: elapsed time of an event whose work has not completed — synchronize the event first");
    *ms = (float)(t->t_ms - s->t_ms);
    return HYP_OK;
}

/* ---- GEMM ----------------------------------------------------------------------------------- */

static int check_matrix(sim_dev *d, const void *p, hyp_dtype t, int64_t rows, int64_t cols, int64_t ld, int batch,
                        int64_t stride, const char *what, hyp_err *e) {
    int64_t extent = (cols - 1) * ld + rows + (batch > 1 ? (int64_t)(batch - 1) * stride : 0);
    return check_range(d, p, (size_t)extent * hyp_dtype_size(t), what, e);
}

static int sim_gemm(hyp_device *dv, const hyp_gemm *g, hyp_stream *s, hyp_err *e) {
    sim_dev *d = SD(dv);
    if (sticky(d, e)) return d->sticky;
    if (hyp_gemm_validate(g, e)) return HYP_EINPUT;
    int nb = g->batch;
    if (check_matrix(d, g->a, g->atype, g->transa ? g->k : g->m, g->transa ? g->m : g->k, g->lda, nb, g->stride_a,
                     "gemm A", e) ||
        check_matrix(d, g->b, g->btype, g->transb ? g->n : g->k, g->transb ? g->k : g->n, g->ldb, nb, g->stride_b,
                     "gemm B", e) ||
        check_matrix(d, g->d, g->dtype, g->m, g->n, g->ldd, nb, g->stride_d, "gemm D", e) ||
        (g->beta != 0.0f &&
         check_matrix(d, g->c, hyp_gemm_ctype(g), g->m, g->n, g->ldc, nb, g->stride_c, "gemm C", e)))
        return HYP_EINPUT;
    int64_t nbias = hyp_gemm_bias_len(g);
    if (nbias && check_range(d, g->bias, (size_t)nbias * hyp_dtype_size(hyp_gemm_bias_type(g)), "gemm bias", e))
        return HYP_EINPUT;
    hyp_epilogue ep = g->epilogue;
    if ((ep == HYP_EPI_GELU_AUX || ep == HYP_EPI_GELU_AUX_BIAS || ep == HYP_EPI_DGELU || ep == HYP_EPI_DGELU_BGRAD) &&
        check_matrix(d, g->aux, g->dtype, g->m, g->n, g->ldaux, 1, 0, "gemm aux", e))
        return HYP_EINPUT;
    if ((g->a_scale && check_range(d, g->a_scale, 4, "gemm a_scale", e)) ||
        (g->b_scale && check_range(d, g->b_scale, 4, "gemm b_scale", e)) ||
        (g->d_scale && check_range(d, g->d_scale, 4, "gemm d_scale", e)) ||
        (g->amax_d && check_range(d, g->amax_d, 4, "gemm amax_d", e)) ||
        (g->workspace_bytes && check_range(d, g->workspace, g->workspace_bytes, "gemm workspace", e)))
        return HYP_EINPUT;
    cmd *c = new_cmd(C_GEMM);
    if (!c) return hyp_fail(e, HYP_EFAIL, "sim: out of memory");
    d->pub.calls++;
    c->u.gemm = *g;
    return enqueue(d, stream_of(d, s), c, e);
}

/* ---- collectives ---------------------------------------------------------------------------- */

static int sim_comm_init(hyp_device *dv, hyp_coll *c, hyp_err *e) {
    if (!c) return hyp_fail(e, HYP_EINPUT, "sim: comm_init needs a communicator (hyp_coll_init)");
    SD(dv)->coll = c;
    return HYP_OK;
}

static int coll_cmd(sim_dev *d, int what, void *buf, const void *send, size_t count, hyp_dtype t, hyp_redop op,
                    int root, hyp_stream *s, hyp_err *e) {
    static const char *names[] = {"all_reduce", "reduce_scatter", "all_gather", "broadcast", "reduce"};
    if (sticky(d, e)) return d->sticky;
    if (!d->coll) return hyp_fail(e, HYP_EINPUT, "sim: %s before comm_init — call comm_init on every rank first", names[what]);
    size_t es = hyp_dtype_size(t), world = (size_t)hyp_coll_world(d->coll);
    if (!es) return hyp_fail(e, HYP_EINPUT, "sim: %s: unknown dtype", names[what]);
    if ((what == COLL_ALLREDUCE || what == COLL_REDUCE_SCATTER || what == COLL_REDUCE) && t != HYP_DT_F32)
        return hyp_fail(e, HYP_EINPUT, "sim: %s of %s — sim reduces fp32 only (runtime/coll.h)", names[what], hyp_dtype_name(t));
    if ((unsigned)op > HYP_RED_MAX || (what == COLL_REDUCE_SCATTER && op != HYP_RED_SUM))
        return hyp_fail(e, HYP_EINPUT, "sim: %s: unsupported reduction", names[what]);
    if (what == COLL_ALLGATHER && count * es % 4)
        return hyp_fail(e, HYP_EINPUT, "sim: all_gather of %zu bytes per rank — sim gathers multiples of 4 bytes", count * es);
    if ((what == COLL_BROADCAST || what == COLL_REDUCE) && (root < 0 || (size_t)root >= world))
        return hyp_fail(e, HYP_EINPUT, "sim: %s root %d outside 0..%zu", names[what], root, world - 1);
    size_t in_bytes = count * es * (what == COLL_REDUCE_SCATTER ? world : 1);
    size_t out_bytes = count * es * (what == COLL_ALLGATHER ? world : 1);
    if (check_range(d, buf, out_bytes, names[what], e)) return HYP_EINPUT;
    if (send && check_range(d, send, in_bytes, names[what], e)) return HYP_EINPUT;
    if (cap_refuse(d, stream_of(d, s), "a collective on the capturing stream (sim records no collectives in graphs)", e)) return HYP_EINPUT;
    d->pub.calls++;
    cmd *c = new_cmd(C_COLL);
    if (!c) return hyp_fail(e, HYP_EFAIL, "sim: out of memory");
    c->u.coll.what = what, c->u.coll.buf = buf, c->u.coll.send = send, c->u.coll.count = count;
    c->u.coll.t = t, c->u.coll.op = op, c->u.coll.root = root;
    return enqueue(d, stream_of(d, s), c, e);
}

static int sim_all_reduce(hyp_device *d, void *buf, size_t n, hyp_dtype t, hyp_redop op, hyp_stream *s, hyp_err *e) {
    return coll_cmd(SD(d), COLL_ALLREDUCE, buf, NULL, n, t, op, 0, s, e);
}
static int sim_reduce_scatter(hyp_device *d, const void *send, void *recv, size_t n, hyp_dtype t, hyp_stream *s,
                              hyp_err *e) {
    return coll_cmd(SD(d), COLL_REDUCE_SCATTER, recv, send, n, t, HYP_RED_SUM, 0, s, e);
}
static int sim_all_gather(hyp_device *d, const void *send, void *recv, size_t n, hyp_dtype t, hyp_stream *s, hyp_err *e) {
    return coll_cmd(SD(d), COLL_ALLGATHER, recv, send, n, t, HYP_RED_SUM, 0, s, e);
}
static int sim_broadcast(hyp_device *d, void *buf, size_t n, hyp_dtype t, int root, hyp_stream *s, hyp_err *e) {
    return coll_cmd(SD(d), COLL_BROADCAST, buf, NULL, n, t, HYP_RED_SUM, root, s, e);
}
static int sim_reduce(hyp_device *d, void *buf, size_t n, hyp_dtype t, int root, hyp_stream *s, hyp_err *e) {
    return coll_cmd(SD(d), COLL_REDUCE, buf, NULL, n, t, HYP_RED_SUM, root, s, e);
}

/* ---- v2165 graphs --------------------------------------------------------------------------- */

static void free_list(cmd *c) {
    while (c) {
        cmd *n = c->next;
        free_cmd(c);
        c = n;
    }
}

static int sim_capture_begin(hyp_device *dv, hyp_stream *hs, hyp_err *e) {
    sim_dev *d = SD(dv);
    sim_stream *s = stream_of(d, hs);
    if (sticky(d, e)) return d->sticky;
    if (s->capturing) return hyp_fail(e, HYP_EINPUT, "sim: capture_begin on a stream that is already capturing — end that capture first");
    s->capturing = 1, s->cap_head = s->cap_tail = NULL, s->cap_bad[0] = 0;
    d->ncapturing++;
    return HYP_OK;
}

static int sim_capture_end(hyp_device *dv, hyp_stream *hs, hyp_graph **out, hyp_err *e) {
    sim_dev *d = SD(dv);
    sim_stream *s = stream_of(d, hs);
    *out = NULL;
    if (!s->capturing) return hyp_fail(e, HYP_EINPUT, "sim: capture_end on a stream that is not capturing — call capture_begin first");
    s->capturing = 0;
    d->ncapturing--;
    cmd *list = s->cap_head;
    s->cap_head = s->cap_tail = NULL;
    if (s->cap_bad[0]) {
        free_list(list);
        return hyp_fail(e, HYP_EINPUT, "sim: the capture was invalidated by %s (CUDA_ERROR_STREAM_CAPTURE_INVALIDATED) — keep that call outside the captured region", s->cap_bad);
    }
    sim_graph *g = calloc(1, sizeof *g);
    if (!g) {
        free_list(list);
        return hyp_fail(e, HYP_EFAIL, "sim: out of memory");
    }
    g->head = list;
    for (cmd *c = list; c; c = c->next) g->n++;
    *out = (hyp_graph *)g;
    return sticky(d, e);
}

/* A copy of every recorded command enqueued on s, in order: one host call. */
static int sim_graph_launch(hyp_device *dv, hyp_graph *hg, hyp_stream *hs, hyp_err *e) {
    sim_dev *d = SD(dv);
    sim_graph *g = (sim_graph *)hg;
    sim_stream *s = stream_of(d, hs);
    if (sticky(d, e)) return d->sticky;
    if (!g) return hyp_fail(e, HYP_EINPUT, "sim: graph_launch of a NULL graph");
    if (s->capturing) return hyp_fail(e, HYP_EINPUT, "sim: graph_launch on a capturing stream (sim does not nest graphs)");
    d->pub.calls++;
    for (cmd *c = g->head; c; c = c->next) {
        cmd *k = malloc(sizeof *k);
        if (!k) return hyp_fail(e, HYP_EFAIL, "sim: out of memory");
        *k = *c;
        k->next = NULL;
        if (k->kind == C_LAUNCH && !(k->u.launch.name = strdup(c->u.launch.name))) {
            free(k);
            return hyp_fail(e, HYP_EFAIL, "sim: out of memory");
        }
        int rc = enqueue(d, s, k, e);
        if (rc) return rc;
    }
    return HYP_OK;
}

static void sim_graph_destroy(hyp_device *dv, hyp_graph *hg) {
    (void)dv;
    sim_graph *g = (sim_graph *)hg;
    if (!g) return;
    free_list(g->head); /* a launch enqueued copies: pending replays do not use these */
    free(g);
}

/* ---- open / close --------------------------------------------------------------------------- */

static void sim_close(hyp_device *dv) {
    sim_dev *d = SD(dv);
    if (!d) return;
    run_all(d);
    for (int i = 0; i < d->nmodules; i++) hyp_sim_unload(d->modules[i]->m), free(d->modules[i]);
    for (int i = 0; i < d->nstreams; i++) free_list(d->streams[i]->cap_head), free(d->streams[i]);
    for (int i = 0; i < d->nevents; i++) free(d->events[i]);
    for (size_t i = 0; i < d->nallocs; i++) hyp_sim_count_region(d->allocs[i].p, d->allocs[i].n, 0), free(d->allocs[i].p);
    free(d->modules), free(d->streams), free(d->events), free(d->allocs);
    if (d->count_out) fclose(d->count_out);
    free(d);
}

/* The TMA tensor map (device.h): kernels/sim/sim_tmap.h's encoding, the extent inside one block. */
static int sim_tensor_map(hyp_device *dv, void *map, hyp_dtype t, int rank, const void *gaddr, const uint64_t *dims,
                          const uint64_t *strides, const uint32_t *box, int swizzle, hyp_err *e) {
    sim_dev *d = SD(dv);
    static const int code[HYP_DT__COUNT] = {[HYP_DT_F32] = HYP_TMAP_F32, [HYP_DT_BF16] = HYP_TMAP_BF16,
                                            [HYP_DT_E4M3] = HYP_TMAP_U8,  [HYP_DT_E5M2] = HYP_TMAP_U8,
                                            [HYP_DT_F16] = HYP_TMAP_F16,  [HYP_DT_I8] = HYP_TMAP_U8,
                                            [HYP_DT_I32] = HYP_TMAP_I32};
    if ((unsigned)t >= HYP_DT__COUNT || rank < 1 || rank > 5 || !dims || !box || (rank > 1 && !strides))
        return hyp_fail(e, HYP_EINPUT, "sim: tensor_map: bad dtype %d, rank %d or a NULL array", (int)t, rank);
    unsigned es = hyp_sim_tmap_esize(code[t]);
    size_t extent = es;
    for (int k = 0; k < rank; k++) extent += (size_t)(dims[k] ? dims[k] - 1 : 0) * (k ? strides[k - 1] : es);
    int rc = check_range(d, gaddr, extent, "tensor_map: the tensor", e);
    if (rc) return rc;
    uint32_t ones[5] = {1, 1, 1, 1, 1};
    char why[256];
    if (hyp_sim_tmap_encode_tiled(map, code[t], (unsigned)rank, gaddr, dims, strides, box, ones, 0, swizzle, 0, 0, why,
                                  sizeof why))
        return hyp_fail(e, HYP_EINPUT, "sim: tensor_map: %s", why);
    return HYP_OK;
}

/* The sim device's entries (device.h documents each slot). */
static const hyp_device SIM_TABLE = {
    .name = "sim",
    .close = sim_close,
    .mem_alloc = sim_mem_alloc,
    .mem_free = sim_mem_free,
    .host_alloc = sim_host_alloc,
    .host_free = sim_host_free,
    .mem_info = sim_mem_info,
    .h2d = sim_h2d,
    .d2h = sim_d2h,
    .d2d = sim_d2d,
    .memset = sim_memset,
    .h2d_sync = sim_h2d_sync,
    .d2h_sync = sim_d2h_sync,
    .d2d_sync = sim_d2d_sync,
    .memset_sync = sim_memset_sync,
    .module_load = sim_module_load,
    .module_unload = sim_module_unload,
    .launch = sim_launch,
    .tensor_map = sim_tensor_map,
    .stream_create = sim_stream_create,
    .stream_destroy = sim_stream_destroy,
    .stream_synchronize = sim_stream_synchronize,
    .synchronize = sim_synchronize,
    .event_create = sim_event_create,
    .event_destroy = sim_event_destroy,
    .event_record = sim_event_record,
    .event_wait = sim_event_wait,
    .event_synchronize = sim_event_synchronize,
    .event_elapsed_ms = sim_event_elapsed_ms,
    .gemm = sim_gemm,
    .comm_init = sim_comm_init,
    .all_reduce = sim_all_reduce,
    .reduce_scatter = sim_reduce_scatter,
    .reduce = sim_reduce,
    .all_gather = sim_all_gather,
    .broadcast = sim_broadcast,
    .capture_begin = sim_capture_begin,
    .capture_end = sim_capture_end,
    .graph_launch = sim_graph_launch,
    .graph_destroy = sim_graph_destroy,
};

int hyp_dev_sim_open(hyp_device **out, hyp_err *e) {
    *out = NULL;
    sim_dev *d = calloc(1, sizeof *d);
    if (!d) return hyp_fail(e, HYP_EFAIL, "sim: out of memory");
    const char *ord = getenv("HYP_SIM_STREAM_ORDER");
    if (ord && *ord && strcmp(ord, "reverse") && strcmp(ord, "forward") && strcmp(ord, "eager")) {
        free(d);
        return hyp_fail(e, HYP_EINPUT, "HYP_SIM_STREAM_ORDER=%s — use reverse (default), forward or eager", ord);
    }
    const char *cf = getenv("HYP_SIM_COUNT_FILE");
    if (cf && *cf && !(d->count_out = fopen(cf, "a"))) {
        free(d);
        return hyp_fail(e, HYP_EINPUT, "HYP_SIM_COUNT_FILE=%s: cannot open for appending — give a writable path", cf);
    }
    d->order = !ord || !*ord || !strcmp(ord, "reverse") ? ORDER_REVERSE : !strcmp(ord, "forward") ? ORDER_FORWARD : ORDER_EAGER;
    hyp_device *p = &d->pub;
    *p = SIM_TABLE;
    snprintf(p->info.name, sizeof p->info.name, "sim (CPU)");
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    p->info.n_sms = ncpu > 0 ? (int)ncpu : 1;
    p->info.total_mem = (size_t)sysconf(_SC_PHYS_PAGES) * (size_t)sysconf(_SC_PAGESIZE);
    hyp_stream *def;
    if (sim_stream_create(p, &def, e)) {
        free(d);
        return HYP_EFAIL;
    }
    *out = p;
    return HYP_OK;
}
