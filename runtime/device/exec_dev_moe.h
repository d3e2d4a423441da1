/* exec_dev_moe.h — the mixture-of-experts MLP on a device (sim, cuda): the op of
 * runtime/cpu/ops_moe.h (softmax top-k router, renormalised top-k weights, load-balancing loss,
 * dropless dispatch, SwiGLU experts, weighted combine) as templates/moe.cu.lua's kernels between
 * the device layer's GEMMs (cuBLASLt semantics, device.h), and the device executor's moe_fwd /
 * moe_bwd plan ops on top of it (exec_dev_moe.c).
 *
 * One op, step by step (all on the default stream; R = N * top_k routed rows):
 *   forward:  logits = x wr^T (GEMM) -> moe_route (softmax, top-k, weights) -> moe_stats (loads,
 *             exclusive-scan offsets, aux loss) -> moe_scatter (each expert's rows in token order
 *             at its offset: a stable counting sort, no atomics) -> moe_gather (xe [R, C]) -> the
 *             loads read back to the host (E ints: the GEMM sizes; the one synchronization) ->
 *             per expert e with rows: h = xe_e w1_e^T (GEMM) -> moe_swiglu_fwd over all R rows ->
 *             per expert: ye_e = a_e w2_e^T (GEMM) -> moe_combine (each token sums its k outputs
 *             in ascending expert order, the CPU op's order).
 *   backward: the routing from the forward's state (loads read back, scatter and gather again),
 *             the expert forward recomputed (no [R, ...] activation is kept, as on cpu), moe_dy
 *             (the gate weights' gradient <dout, y> and dy = g dout), per expert dA = dy w2,
 *             dw2 += dy^T a, moe_swiglu_bwd, dxe = dh w1, dw1 += dh^T xe (GEMMs), moe_scatter_add
 *             (dinp += each token's k input gradients, ascending expert order), moe_router_bwd
 *             (the softmax backward of the aux and gate gradients) and dinp += dlog wr,
 *             dwr += dlog^T x (GEMMs). Gradients accumulate (+=), as ops_cpu.h requires.
 * The state buffer is core/moe_layout.h's (probs, topw, topi, loads, aux): what the cpu op saves,
 * so the trainer's router statistics read it the same way. fp32 storage only.
 * Never: atomics whose order changes a result, or a host copy of anything but the E loads.
 */
#ifndef HYP_EXEC_DEV_MOE_H
#define HYP_EXEC_DEV_MOE_H

#include <stdint.h>

#include "device.h"
#include "hyp_err.h"

typedef struct {
    hyp_device *dev;
    hyp_module *mod;   /* the rendered moe.cu (its constants C, H, NE, TOPK, NORM must match) */
    int block;         /* its BLOCK */
    int N, C, E, K, H; /* rows, width, experts, top_k, expert hidden width */
    int norm_topk;
    float aux_coef;
    int tf32;          /* the expert and router GEMMs in TF32 (plan train.tf32, as the layer GEMMs) */
} dev_moe_shape;

/* Device workspace of the op in bytes (forward and backward). */
int64_t dev_moe_ws_bytes(const dev_moe_shape *s);

/* Forward: out [N, C] overwritten; state (core/moe_layout.h, N rows) written; ws: the workspace;
 * h_loads [E] (host) receives the tokens per expert. */
int dev_moe_fwd(const dev_moe_shape *s, float *out, float *state, const float *inp, const float *wr, const float *w1,
                const float *w2, void *ws, int32_t *h_loads, hyp_err *e);
/* Backward of <dout, out> + daux * aux: accumulates into dinp, dwr, dw1, dw2 (NULL: skipped). */
int dev_moe_bwd(const dev_moe_shape *s, float *dinp, float *dwr, float *dw1, float *dw2, const float *dout, float daux,
                const float *inp, const float *wr, const float *w1, const float *w2, const float *state, void *ws,
                int32_t *h_loads, hyp_err *e);

#endif
