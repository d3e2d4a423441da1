/* op_registry.h — the plan's op set as data: one descriptor per op (name, signature with arity,
 * argument names, optional arguments and accepted dtypes, attributes, the element count each
 * argument needs, flags, device family). plan.c validates every op of a plan against it; the
 * cpu backend binds its functions to it by name (cpu/ops_table.c); the device executor reads the
 * flags and the device family instead of testing op names.
 *
 * An op id is the op's index in the registry (plan_op.op); ids are not part of any file format
 * and may change when ops are added. This module knows no backend and must never call one.
 *
 * Adding an op: one descriptor in op_registry.c (next to its shape rule), one adapter in
 * cpu/ops_table.c (next to the cpu kernels it calls), and its launches in a kernel template.
 */
#ifndef HYP_OP_REGISTRY_H
#define HYP_OP_REGISTRY_H

#include <stdint.h>

#include "plan.h"

/* What an executor must know about an op beyond running it. */
enum {
    HYP_OPF_LOSS = 1 << 0,          /* may be the plan's "loss" op (evaluation: logits, targets -> losses) */
    HYP_OPF_WRITES_LOSSES = 1 << 1, /* writes the step's per-token losses: read the mean loss after it */
    HYP_OPF_FP8_SLOT = 1 << 2,      /* attribute "slot" names one of the plan's fp8 scaling states */
};

/* How the device executor runs an op the kernel manifest has no launches for. */
typedef enum {
    HYP_OPDEV_KERNELS = 0, /* only through the manifest's launches (generated kernels) */
    HYP_OPDEV_GEMM_FWD,    /* else out = x w^T + b through the device GEMM (cuBLASLt) */
    HYP_OPDEV_GEMM_BWD,    /* else dx, dw, db through the device GEMM */
    HYP_OPDEV_ZERO,        /* else a device memset of its output */
} hyp_op_device;

/* Element count argument `arg` (inputs 0.., outputs 100..) of o needs at batch B, sequence T;
 * V is the model's vocabulary. 0 = unknown argument. */
typedef int64_t (*hyp_op_need_fn)(const plan_op *o, int arg, int64_t B, int64_t T, int64_t V);

typedef struct {
    const char *name;
    /* "in1 in2:i32 in3? -> out1 out2?": argument names in order; ":dt|dt" lists the dtypes an
     * argument accepts (f32 when absent); "?" marks an argument that may be "" (absent) */
    const char *sig;
    /* the attributes it takes, "N C eps"; "C?" may be absent. Dims (B T N C IC OC NH NKV hd H V
     * Vp n) are positive integers or "B", "T", "N"; eps and theta numbers; slot an fp8 slot */
    const char *attrs;
    hyp_op_need_fn need;
    unsigned flags;          /* HYP_OPF_* */
    hyp_op_device device;
} hyp_op_desc;

#define HYP_OP_MAX 64        /* ids are below this (a static assertion in op_registry.c) */
#define HYP_OP_MAX_IN 6      /* plan_op.in */
#define HYP_OP_MAX_OUT 4     /* plan_op.out */

/* One argument of a signature. */
typedef struct {
    char name[24];
    unsigned dtypes;         /* bit (1u << hyp_dtype) per accepted dtype */
    int optional;
} hyp_op_arg;

int hyp_op_count(void);
const hyp_op_desc *hyp_op_get(int id); /* NULL outside [0, hyp_op_count()) */
const char *hyp_op_name(int id);       /* "?" outside */
int hyp_op_find(const char *name);     /* its id, or -1 */
/* Inputs and outputs of op id (from its signature). */
void hyp_op_arity(int id, int *nin, int *nout);
/* Argument i of side 0 (inputs) or 1 (outputs) of op id; 0 on success, -1 if there is none. */
int hyp_op_arg_of(int id, int side, int i, hyp_op_arg *out);
/* Whether op id lists attribute key; *optional says whether it may be absent. */
int hyp_op_takes_attr(int id, const char *key, int *optional);
/* Checks every descriptor (signatures parse, dtypes known, arity within plan_op's arrays, unique
 * names); a failure is a bug in the registry, reported as HYP_EFAIL naming the op (test_plan). */
int hyp_op_registry_check(hyp_err *e);

#endif
