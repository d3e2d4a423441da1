/* magnitude.h — what pruning by magnitude means, shared by the trainer's masks (runtime/train/
 * prune.c) and `gen lottery`'s weight surgery (generator/lottery_lua.c), so the two never disagree
 * on which weights are prunable or how they rank: the prunable matrices are the 2-D weights inside
 * the transformer layers (".h." of GPT-2 names, "model.layers." of Llama's; never embeddings, norms
 * or the head), ranked by |w| through an integer key (the float's bits without the sign: same order
 * as the magnitude), ties broken by index (keys packed as key << 32 | index and sorted). */
#ifndef HYP_MAGNITUDE_H
#define HYP_MAGNITUDE_H

#include <stdint.h>
#include <string.h>

static inline int hyp_prunable_matrix(const char *name, int ndim) {
    return ndim == 2 && (strstr(name, ".h.") || strstr(name, "model.layers.")) && !strstr(name, "embed");
}

static inline uint32_t hyp_mag_key(float w) {
    uint32_t u;
    memcpy(&u, &w, sizeof u);
    return u & 0x7fffffffu;
}

/* qsort comparator of the packed (key << 32 | index) entries */
static inline int hyp_cmp_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

#endif
