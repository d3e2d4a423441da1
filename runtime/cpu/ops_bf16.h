/* ops_bf16.h — v2102 bf16 storage on the cpu executor: the ops of a plan whose activation
 * buffers are bf16 (core/PLAN_FORMAT.md buffer dtypes; the generator's v2102 storage bf16).
 *
 * GEMMs (matmul_fwd / matmul_bwd) run as oneDNN bf16 matmuls (gemm_bf16.h) straight on the bf16
 * buffers, fp32 accumulation, with the weights read from a bf16 copy of the fp32 master
 * parameters that is refreshed once per optimizer step (each weight converted on its first use
 * after exec_lowp_weights_changed; under ZeRO stage 3, whose weights move between working slots,
 * converted at every use instead). Every other op runs its fp32 kernel (ops_cpu.h, ops_flash.h)
 * on blocks of rows or sequences loaded from bf16 into a small fp32 scratch and rounded back to
 * bf16 (round to nearest even) on store: norms, softmax, the loss and every reduction compute in
 * fp32, and the numerics are those of the fp32 kernel between two bf16 roundings. Blocks are small
 * enough to stay in cache and, for ops that write no parameter gradient, run in parallel.
 *
 * Never: an allocation after exec_lowp_init (the scratch is sized there for the plan's largest
 * op at its maximum batch), a policy decision (which buffers are bf16 is the plan's). */
#ifndef HYP_OPS_BF16_H
#define HYP_OPS_BF16_H

#include "exec.h"

/* Sets up x->lowp when the plan stores any activation in a dtype other than f32 (else leaves it
 * NULL): the weight copy (stages 0-2) and the scratch. Adds its bytes to x->bytes. */
int exec_lowp_init(exec_t *x, hyp_err *e);
void exec_lowp_free(exec_t *x);
/* The parameters changed (optimizer step, checkpoint load, init): the bf16 weight copy is stale. */
void exec_lowp_weights_changed(exec_t *x);
/* Whether op o touches a buffer of a dtype other than f32/i32 (then it runs through exec_lowp_op). */
int exec_op_is_lowp(const exec_t *x, const plan_op *o);
/* The bf16-storage function of the registry's op `name`, or NULL. */
exec_op_fn exec_lowp_op(const char *name);
/* Bytes of the bf16 weight copy and of the conversion scratch (0 without bf16 storage). */
size_t exec_lowp_weight_bytes(const exec_t *x);
size_t exec_lowp_scratch_bytes(const exec_t *x);

#endif
