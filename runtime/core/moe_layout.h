/* moe_layout.h — the layout of the mixture-of-experts op's buffers (moe_fwd / moe_bwd of the op
 * registry; kernels in cpu/ops_moe.c), shared by the registry's shape rule (op_registry.c), the
 * cpu adapters (cpu/ops_table.c) and the router statistics (cpu/moe_stats.c), and written in
 * generator/lua/moe.lua (M.state_floats, M.scratch_floats) with the same formulas.
 *
 * state [moe_state_floats]: what the forward saves for the backward and the trainer's metrics,
 *   probs [N, E] f32 | topw [N, K] f32 | topi [N, K] i32 | loads [E] i32 | aux (1 f32)
 * scratch [moe_scratch_floats_sh]: op_moe_ws_floats (cpu/ops_moe.h) floats, then rows [2N] i32.
 * N is the bound batch's rows (B*T); a state written at one N is read back at the same N.
 * Pure arithmetic: nothing here allocates or runs an op. */
#ifndef HYP_MOE_LAYOUT_H
#define HYP_MOE_LAYOUT_H

#include <stdint.h>

static inline int64_t moe_state_floats(int64_t N, int64_t E, int64_t K) { return N * E + 2 * N * K + E + 1; }

/* Equal to op_moe_ws_floats (cpu/ops_moe.h) + 2N; test_moe checks the two agree. */
static inline int64_t moe_ws_floats(int64_t N, int64_t C, int64_t H, int64_t E, int64_t K) {
    return 4 * N * C + 4 * N * H + 2 * N * H + E + N * K + N * E;
}
static inline int64_t moe_scratch_floats(int64_t N, int64_t C, int64_t H, int64_t E, int64_t K) {
    return moe_ws_floats(N, C, H, E, K) + 2 * N;
}
/* With shared experts of hidden width Hs (attrs.Hs; 0: none) the workspace grows by 6 N Hs. */
static inline int64_t moe_ws_floats_sh(int64_t N, int64_t C, int64_t H, int64_t E, int64_t K, int64_t Hs) {
    return moe_ws_floats(N, C, H, E, K) + 6 * N * Hs;
}
static inline int64_t moe_scratch_floats_sh(int64_t N, int64_t C, int64_t H, int64_t E, int64_t K, int64_t Hs) {
    return moe_ws_floats_sh(N, C, H, E, K, Hs) + 2 * N;
}

/* The parts of a state of N rows. */
typedef struct {
    float *probs, *topw;
    int32_t *topi, *loads;
    float *aux;
} moe_state_view;

static inline moe_state_view moe_state_at(float *state, int64_t N, int64_t E, int64_t K) {
    moe_state_view v;
    v.probs = state;
    v.topw = state + N * E;
    v.topi = (int32_t *)(void *)(v.topw + N * K);
    v.loads = v.topi + N * K;
    v.aux = (float *)(void *)(v.loads + E);
    return v;
}

#endif
