/* exec_dev_moe.h — the mixture-of-experts MLP on a device (sim, cuda): the op of
 * runtime/cpu/ops_moe.h (softmax top-k router, renormalised top-k weights, load-balancing loss,
 * dropless dispatch, SwiGLU experts, weighted combine) as templates/moe.cu.lua's kernels between
 * the device layer's GEMMs (cuBLASLt semantics, device.h), and the device executor's moe_fwd /
 * moe_bwd plan ops on top of it (exec_dev_moe.c).
 *
 * One op, step by step (all on the default stream; R = N * top_k routed rows):
 *   forward:  logits = x wr^T (GEMM) -> moe_route (softmax, top-k, weights) -> moe_count (per
 *             block of BLOCK routed slots, its rows per expert) -> moe_stats (loads, the scan of
 *             the block counts per expert, exclusive-scan offsets, aux loss) -> moe_scatter (one
 *             thread per slot: each expert's rows in token order at its offset; a stable parallel
 *             counting sort, no atomics) -> moe_gather (xe [R, C]) -> h_e = xe_e w1_e^T for every
 *             expert e (grouped: one moe_gemm_rows launch reading the offsets on the device; loop
 *             path, shape.grouped = 0: the loads read back to the host and a device-layer GEMM
 *             per expert with rows) -> moe_swiglu_fwd over all R rows -> ye_e = a_e w2_e^T (the
 *             same way) -> moe_combine (each token sums its k outputs in ascending expert order,
 *             the CPU op's order).
 *   backward: the routing from the forward's state (scatter and gather again),
 *             the expert forward recomputed (no [R, ...] activation is kept, as on cpu), moe_dy
 *             (the gate weights' gradient <dout, y> and dy = g dout), per expert dA = dy w2,
 *             dw2 += dy^T a (grouped: moe_gemm_rows, moe_gemm_wgrad), moe_swiglu_bwd, dxe = dh w1,
 *             dw1 += dh^T xe (the same), moe_scatter_add
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
    int grouped;       /* 1: the expert GEMMs as moe.cu's grouped kernels (one launch per projection,
                        * sizes from the offsets in device memory: no read-back, fp32 always);
                        * 0: a device-layer GEMM per expert sized by the loads read back */
    int gt;            /* the rendered GT (grouped GEMM tile edge; 0: the template's default 64) */
} dev_moe_shape;

/* Device workspace of the op in bytes (forward and backward). */
int64_t dev_moe_ws_bytes(const dev_moe_shape *s);
/* Byte offset in the workspace of the dispatch's i32 lists rows, src, dest [R] (in this order):
 * the tests read them back to check the sort. */
int64_t dev_moe_ws_rows_offset(const dev_moe_shape *s);

/* Forward: out [N, C] overwritten; state (core/moe_layout.h, N rows) written; ws: the workspace;
 * h_loads [E] (host) receives the tokens per expert on the loop path (grouped: untouched). */
int dev_moe_fwd(const dev_moe_shape *s, float *out, float *state, const float *inp, const float *wr, const float *w1,
                const float *w2, void *ws, int32_t *h_loads, hyp_err *e);
/* Backward of <dout, out> + daux * aux: accumulates into dinp, dwr, dw1, dw2 (NULL: skipped). */
int dev_moe_bwd(const dev_moe_shape *s, float *dinp, float *dwr, float *dw1, float *dw2, const float *dout, float daux,
                const float *inp, const float *wr, const float *w1, const float *w2, const float *state, void *ws,
                int32_t *h_loads, hyp_err *e);

#endif
