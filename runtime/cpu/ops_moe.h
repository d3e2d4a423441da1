/* ops_moe.h — the CPU backend's mixture-of-experts MLP (Mixtral form), forward and backward, fp32.
 *
 * One fused op pair replaces a layer's dense SwiGLU MLP:
 *   router logits  l = x @ wr^T            (wr [E, C])
 *   p = softmax(l) over the E experts; the top_k experts by p (ties: lower index first);
 *   gate weights g_k = p_k / sum_{j in top-k} p_j when norm_topk (Mixtral), else g_k = p_k;
 *   dispatch: the rows of every expert are gathered (token order), each expert e runs the SwiGLU MLP
 *     y = swiglu(x_rows @ w1[e]^T) @ w2[e]^T   (w1 [E, 2H, C] gate half then up half, w2 [E, C, H])
 *   as GEMMs on its gathered rows; combine: out[n] = sum_k g_k * y_k[n].
 *   Load-balancing loss (Switch / transformers' load_balancing_loss_func): with f_e = tokens routed
 *   to e / N (sums to top_k) and P_e = mean_n p[n, e], aux = coef * E * sum_e f_e * P_e; f is a
 *   count (no gradient), the gradient flows through P.
 * Loads (tokens per expert) are returned so the caller can log them; they sum to N * top_k.
 * Results are deterministic: rows are gathered in token order and every reduction has a fixed order.
 * Backward ACCUMULATES (+=) into dinp, dwr, dw1, dw2 (the ops_cpu.h contract); NULL skips one.
 * Nothing here allocates: the caller passes the saved state and the workspace (sizes below), and
 * nothing here calls exit().
 */
#ifndef HYP_OPS_MOE_H
#define HYP_OPS_MOE_H

typedef struct {
    int N, C, E, K, H; /* rows, model width, experts, top_k, expert hidden width */
    int norm_topk;     /* renormalise the top_k weights to sum 1 */
    float aux_coef;    /* load-balancing loss coefficient (0: none) */
} moe_shape;

/* Floats of workspace the forward and the backward need. */
long op_moe_ws_floats(const moe_shape *s);

/* Forward. Saves probs [N, E], topi [N, K], topw [N, K] for the backward; rows [2N] is
 * scratch.
 * out [N, C] is overwritten; loads [E] (may be NULL) receives the tokens per expert; *aux (may be
 * NULL) the load-balancing loss. */
void op_moe_fwd(float *out, float *probs, int *topi, float *topw, int *loads, float *aux,
                const float *inp, const float *wr, const float *w1, const float *w2,
                const moe_shape *s, float *ws, int *rows);

/* Backward of L = <dout, out> + daux * aux (daux: the gradient of the training loss with respect
 * to the aux loss, 1 when aux is added to the loss as is). Expert outputs are recomputed. */
void op_moe_bwd(float *dinp, float *dwr, float *dw1, float *dw2, const float *dout, float daux,
                const float *inp, const float *wr, const float *w1, const float *w2,
                const float *probs, const int *topi, const float *topw, const moe_shape *s,
                float *ws, int *rows);

#endif
