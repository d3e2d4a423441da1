/* dtype.c — names and sizes of the runtime's element types (dtype.h). */
#include "dtype.h"

#include <string.h>

static const struct {
    const char *name;
    size_t size;
} dtypes[HYP_DT__COUNT] = {
    [HYP_DT_F32] = {"f32", 4}, [HYP_DT_BF16] = {"bf16", 2}, [HYP_DT_E4M3] = {"e4m3", 1},
    [HYP_DT_E5M2] = {"e5m2", 1}, [HYP_DT_F16] = {"f16", 2}, [HYP_DT_I8] = {"i8", 1},
    [HYP_DT_I32] = {"i32", 4},
};

size_t hyp_dtype_size(hyp_dtype t) { return (unsigned)t < HYP_DT__COUNT ? dtypes[t].size : 0; }

const char *hyp_dtype_name(hyp_dtype t) { return (unsigned)t < HYP_DT__COUNT ? dtypes[t].name : "?"; }

int hyp_dtype_parse(const char *s) {
    for (int i = 0; s && i < HYP_DT__COUNT; i++)
        if (strcmp(s, dtypes[i].name) == 0) return i;
    return -1;
}
