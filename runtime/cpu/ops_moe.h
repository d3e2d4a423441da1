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

#include <math.h>

typedef struct {
    int N, C, E, K, H; /* rows, model width, experts, top_k, expert hidden width */
    int norm_topk;     /* renormalise the top_k weights to sum 1 */
    float aux_coef;    /* load-balancing loss coefficient (0: none) */
    float capacity;    /* capacity factor (0: dropless); see moe_cap below */
    int Hs;            /* shared experts' hidden width (n_shared x H; 0: none), see below */
    int sigmoid;       /* the router's scores: 0 softmax, 1 sigmoid (DeepSeek-V3), see below */
    const float *bias; /* [E] the aux-loss-free selection bias (NULL: none), see below */
} moe_shape;

/* Sigmoid router (DeepSeek-V3, transformers' DeepseekV3TopkRouter without expert groups and with
 * routed_scaling_factor 1): scores s = sigmoid(l) (kept in probs), the top_k experts by s + bias
 * (ties: lower index), gate weights the chosen s (no bias), renormalised to sum 1 when norm_topk.
 * The bias only selects: no gradient flows to it; op_moe_bias_update moves it after each step.
 * The load-balancing aux loss is not defined for it here (aux_coef must be 0; the plan refuses it). */

/* Shared experts (DeepSeek-V3 / Qwen-MoE): when Hs > 0 every token also runs through one SwiGLU MLP
 * of width Hs (the n_shared experts side by side, as DeepSeek-V3's DeepseekV3MLP of
 * n_shared x moe_intermediate_size), ungated, added to the routed output:
 *   out[n] = sum_k g_k * y_k[n] + swiglu(x[n] @ ws1^T) @ ws2^T
 * Its weights follow the routed experts' in the same block: w2 [E, C, H] is followed by
 * ws1 [2Hs, C] (gate rows, then up) and ws2 [C, Hs]; their gradients likewise after dw2. */

/* Capacity (token dropping, GShard / Switch / DeepSpeed-MoE): every expert takes at most
 *   cap = ceil(capacity * N * K / E)   (in double from the fp32 factor; DeepSpeed-MoE's _capacity
 *                                       with GShard's top-k scaling by K)
 * routed rows of the N. Priority is GShard's top-2 order: every token's first choice (in token
 * order), then every token's second choice, and so on (k-major, token order within); an assignment
 * beyond its expert's cap is dropped: topi keeps it as -1 - expert (moe_expert_of decodes it), it
 * computes nothing and contributes nothing to the output (the token keeps its residual), its gate
 * weight's gradient is zero. The gate weights and their renormalisation are those of the router's
 * choice before dropping (GShard, transformers' Switch), and so are the loads and the aux loss's
 * counts f_e (transformers' load_balancing_loss_func counts the router's top-k). */
static inline int moe_cap(const moe_shape *s, int N) {
    return s->capacity > 0 ? (int)ceil((double)s->capacity * N * s->K / s->E) : N * s->K;
}
static inline int moe_expert_of(int t) { return t < 0 ? -1 - t : t; }

/* DeepSeek-V3's aux-loss-free balancing, after a step: bias[e] += u * sign(mean load - loads[e]),
 * loads [E] the step's tokens per expert (over micro-batches and ranks), mean their average. */
void op_moe_bias_update(float *bias, const double *loads, int E, float u);

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

/* The pieces both op_moe_fwd/op_moe_bwd and the expert-parallel dispatch (cpu/moe_ep.c, v2109)
 * are made of, so that an expert computes bit for bit the same whichever rank runs it.
 * op_moe_route: router logits, softmax, top-k and gate weights of the N rows, the loads [E] (may
 * be NULL) and the aux loss (may be NULL). */
void op_moe_route(float *probs, int *topi, float *topw, int *loads, float *aux, const float *inp, const float *wr,
                  const moe_shape *s);
/* Expert e's SwiGLU MLP on n contiguous rows xe [n, C] -> ye [n, C] (he [n, 2H], ae [n, H] kept);
 * w1e / w2e: the expert's w1 [2H, C] and w2 [C, H]. */
void op_moe_expert_fwd(float *ye, float *ae, float *he, const float *xe, const float *w1e, const float *w2e, int n,
                       const moe_shape *s);
/* The shared experts (Hs > 0; nothing when 0): forward adds their output to out [N, C] (ye [N, C]
 * and sws [6 N Hs] of workspace); backward recomputes them and accumulates dinp and their weight
 * gradients dws1 [2Hs, C], dws2 [C, Hs] (NULL skips). */
void op_moe_shared_fwd(float *out, const float *inp, const float *ws1, const float *ws2, const moe_shape *s, float *ye,
                       float *sws);
void op_moe_shared_bwd(float *dinp, float *dws1, float *dws2, const float *dout, const float *inp, const float *ws1,
                       const float *ws2, const moe_shape *s, float *sws);
/* o[C] += g * y[C] (the combine of one routed row). */
void op_moe_combine_row(float *o, float g, const float *y, int C);
/* Expert e's backward on n contiguous rows xe: row r's output gradient is dout + (drow ? drow[r] : r)
 * * C and its gate weight g[gidx ? gidx[r] : r]; writes dg[gidx ? gidx[r] : r] = <dout row, y row>
 * (the gate weight's gradient), dxe [n, C] = the rows' input gradient (overwritten; NULL: skipped)
 * and accumulates the expert's weight gradients into dw1e [2H, C] / dw2e [C, H] (NULL: skipped).
 * t: ye, dye [n, C], he, dhe [n, 2H], ae, dae [n, H] of workspace. */
typedef struct {
    float *ye, *dye, *he, *dhe, *ae, *dae;
} moe_expert_tmp;
void op_moe_expert_bwd(float *dxe, float *dg, float *dw1e, float *dw2e, const float *xe, const float *dout,
                       const int *drow, const float *g, const int *gidx, const float *w1e, const float *w2e, int n,
                       const moe_shape *s, const moe_expert_tmp *t);
/* The router's backward once every routed row's dg [N, K] is known: accumulates the router's and
 * the aux loss's input gradient into dinp and the router weight gradient into dwr (NULL skips);
 * dlog [N, E] and auxg [E] are workspace. */
void op_moe_router_bwd(float *dinp, float *dwr, float daux, const float *inp, const float *wr, const float *probs,
                       const int *topi, const float *topw, const float *dg, float *dlog, float *auxg, const moe_shape *s);

#endif
