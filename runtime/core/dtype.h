/* dtype.h — the element types of plan buffers, GEMM operands, optimizer states and collectives.
 * One enum for the whole runtime: plan.c reads them from plan.json ("f32", "bf16", ...), the
 * device layer passes them to cuBLASLt/NCCL. The numeric values are part of no file format. */
#ifndef HYP_DTYPE_H
#define HYP_DTYPE_H

#include <stddef.h>

typedef enum {
    HYP_DT_F32 = 0,
    HYP_DT_BF16 = 1,
    HYP_DT_E4M3 = 2,
    HYP_DT_E5M2 = 3,
    HYP_DT_F16 = 4,
    HYP_DT_I8 = 5,
    HYP_DT_I32 = 6,
    HYP_DT__COUNT
} hyp_dtype;

size_t hyp_dtype_size(hyp_dtype t);      /* 4, 2, 1, 1, 2, 1, 4 (0 for an unknown value) */
const char *hyp_dtype_name(hyp_dtype t); /* "f32", "bf16", "e4m3", "e5m2", "f16", "i8", "i32" */
/* The dtype named s, or -1. */
int hyp_dtype_parse(const char *s);

#endif
