/* sim_count.c — what a counting build of a sim module executed: global bytes loaded and stored
 * inside registered device allocations, and tensor-core mma instructions, per launch. A module
 * compiled with HYP_SIM_COUNT_FLAGS (sim.h) turns every load and store into a call of
 * __asan_{load,store}N_noabort (g++ -fsanitize=kernel-address with call instrumentation: no
 * shadow memory, no runtime library), which kernels/sim/prelude.h forwards to hyp_sim_count_hook;
 * its mma wrapper reports each lane's mma. The performance model's declared costs are checked
 * against these counts (tests/gen/test_perf_sim_counts.sh). Never: count an address outside a
 * registered allocation (stacks, shared memory, the module's own data are not DRAM traffic), or
 * take a lock on the counting path (it runs for every load of every simulated thread). */
#include "sim.h"

#include <pthread.h>
#include <stdatomic.h>

#define COUNT_REGIONS 4096

static _Atomic uintptr_t g_lo[COUNT_REGIONS], g_hi[COUNT_REGIONS]; /* hi == 0: a free slot */
static _Atomic int g_nregions;
static pthread_mutex_t g_reg_mu = PTHREAD_MUTEX_INITIALIZER;
static _Atomic unsigned long long g_ld, g_st, g_mma_lanes;

void hyp_sim_count_region(const void *p, size_t n, int add) {
    uintptr_t lo = (uintptr_t)p;
    pthread_mutex_lock(&g_reg_mu);
    int nr = atomic_load(&g_nregions);
    if (add) {
        int i = 0;
        while (i < nr && atomic_load(&g_hi[i])) i++;
        if (i < COUNT_REGIONS) { /* more live allocations than slots: the rest go uncounted */
            atomic_store(&g_lo[i], lo);
            atomic_store(&g_hi[i], lo + n);
            if (i == nr) atomic_store(&g_nregions, nr + 1);
        }
    } else {
        for (int i = 0; i < nr; i++)
            if (atomic_load(&g_lo[i]) == lo && atomic_load(&g_hi[i])) atomic_store(&g_hi[i], 0);
    }
    pthread_mutex_unlock(&g_reg_mu);
}

void hyp_sim_count_hook(uintptr_t addr, size_t n, int kind) {
    if (kind == HYP_SIM_COUNT_MMA) {
        atomic_fetch_add_explicit(&g_mma_lanes, 1, memory_order_relaxed);
        return;
    }
    int nr = atomic_load_explicit(&g_nregions, memory_order_acquire);
    for (int i = 0; i < nr; i++) {
        uintptr_t hi = atomic_load_explicit(&g_hi[i], memory_order_relaxed);
        if (addr < hi && addr >= atomic_load_explicit(&g_lo[i], memory_order_relaxed)) {
            atomic_fetch_add_explicit(kind == HYP_SIM_COUNT_STORE ? &g_st : &g_ld, n, memory_order_relaxed);
            return;
        }
    }
}

void hyp_sim_count_take(hyp_sim_counts *c) {
    c->loaded = atomic_exchange(&g_ld, 0);
    c->stored = atomic_exchange(&g_st, 0);
    c->mma = atomic_exchange(&g_mma_lanes, 0) / 32; /* every lane of a warp (32) reports its mma */
}
