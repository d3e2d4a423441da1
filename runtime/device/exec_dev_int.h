/* exec_dev_int.h — private to runtime/device: what the device executor (exec_dev.c: memory,
 * running ops, ZeRO-3, the step's pieces) and its manifest binding (exec_dev_bind.c: kernels.json
 * bound to the plan's ops, fusion sites and the optimizer launch) share. Never included outside
 * runtime/device. */
#ifndef HYP_EXEC_DEV_INT_H
#define HYP_EXEC_DEV_INT_H

#include <cjson/cJSON.h>

#include "dev_expr.h"
#include "exec_dev.h"
#include "op_registry.h"

enum { PT_PTR, PT_I32, PT_I64, PT_F32, PT_U32, PT_TMAP };
enum { AB_EXPR, AB_BUF, AB_SCRATCH, AB_FP8, AB_LOSS, AB_TMAP };

struct exec_dev_file {
    char name[96];
    hyp_module *mod;
    env_t consts;
    char *cnames[ENV_MAX];
};

#define ARGS_MAX 24
struct exec_dev_launch {
    int file;
    char kernel[96];
    int nargs;
    int ptype[ARGS_MAX];
    char *pname[ARGS_MAX];
    int bind[ARGS_MAX];     /* AB_* */
    int bidx[ARGS_MAX];     /* AB_BUF: plan buffer (-1: NULL); AB_FP8: 0 scale, 1 scale_inv, 2 amax, 3 q, 4 qt;
                               AB_LOSS: 0 row_scale, 1 teacher, 2 teacher_vp, 3 temperature, 4 alpha */
    int64_t soff[ARGS_MAX]; /* AB_SCRATCH: float offset into the scratch block */
    char *arg[ARGS_MAX];    /* AB_EXPR: the expression; AB_TMAP: "DIMS:BOX:SWIZZLE" of the map over
                               buffer bidx (expression lists, dim 0 innermost; swizzle 0..3) */
    char *grid, *smem;
    int block;
};

typedef struct {
    char key[128];
    int64_t off, n;
} scratch_t;

typedef struct {
    const plan_op *a, *b;
    const cJSON *site;
    const char *what; /* the op or fusion kind, for messages */
} bind_ctx;

/* Whether op o carries an fp8 scaling slot (its launches may bind fp8.*[slot]). */
static inline int has_fp8_slot(const plan_op *o) { return (hyp_op_get(o->op)->flags & HYP_OPF_FP8_SLOT) != 0; }

char *exec_dev_strdup(const char *s);
/* The dims of op a, then of b (a fusion site's second op, or NULL), bound at B, T. */
void exec_dev_env_ops(env_t *v, const plan_op *a, const plan_op *b, int B, int T);
/* n elements of elem bytes on the device, counted in x's memory report. */
int exec_dev_alloc(exec_dev *x, void **ptr, int64_t n, size_t elem, hyp_err *e);
/* The manifest's optimizer launch and tensor table; one plan op's launches; the fusion sites.
 * sc/nsc collect the scratch blocks the launches need. */
int exec_dev_bind_optimizer(exec_dev *x, const cJSON *man, hyp_err *e);
int exec_dev_bind_op(exec_dev *x, const cJSON *man, const plan_op *o, exec_dev_op *eo, scratch_t *sc, int *nsc,
                     hyp_err *e);
int exec_dev_bind_fusions(exec_dev *x, const cJSON *man, scratch_t *sc, int *nsc, hyp_err *e);
/* The manifest's crossentropy_fused_ext launches (when present) for the backward's
 * crossentropy_fused op, into x->loss_ext / x->loss_ext_op (exec_dev_loss.c runs them). */
int exec_dev_bind_loss_ext(exec_dev *x, const cJSON *man, scratch_t *sc, int *nsc, hyp_err *e);
void exec_dev_free_launches(exec_dev *x);
/* The moe_fwd / moe_bwd plan ops (exec_dev_moe.c): whether o is one; binding (moe.cu found, the
 * workspace allocated; eo->how = EXD_MOE); running one; freeing what binding made. */
int exec_dev_moe_is(const plan_op *o);
int exec_dev_moe_bind(exec_dev *x, const plan_op *o, exec_dev_op *eo, hyp_err *e);
int exec_dev_moe_run(exec_dev *x, const plan_op *o, float dloss, hyp_err *e);
void exec_dev_moe_free(exec_dev *x);
/* The host value the MoE backward's launches carry besides the batch shape and dloss (v2165 graph
 * key): the micro-batch's counted targets, which weight the aux loss; 0 without MoE ops. */
double exec_dev_moe_key(const exec_dev *x);

#endif
