/* grad_buckets.h — the gradient buckets of data parallelism (v2110, v2168): the gradient arena cut
 * into contiguous ranges, one per layer of parameters (a parameter's layer: its name up to the
 * first all-digit component, "transformer.h.3.attn.c_attn.weight" -> "transformer.h.3"), each
 * with the backward op after which its gradients are final (the last backward op that reads or
 * writes a gradient buffer overlapping it). The device trainer and the cpu trainer cut the same
 * buckets, so an overlapped reduction sums the same ranges as a serial one in the same order.
 * Never: any reduction, allocation beyond the bucket array, or a bucket that is not final when
 * its op has run (a gradient written later would be reduced stale). */
#ifndef HYP_GRAD_BUCKETS_H
#define HYP_GRAD_BUCKETS_H

#include <stdint.h>

#include "hyp_err.h"
#include "plan.h"

typedef struct {
    int64_t lo, hi; /* arena range [lo, hi) in floats */
    int ready;      /* the index in p->bwd after which the range is final */
} grad_bucket;

/* Buckets covering [0, arena) in arena order (the padding after the last parameter joins the last
 * bucket); *out is malloc'd (free it), *n >= 1. */
int grad_buckets_make(const plan_t *p, int64_t arena, grad_bucket **out, int *n, hyp_err *e);

#endif
