/* fuzz_safetensors.c — libFuzzer target for the safetensors reader (runtime/ckpt/safetensors.c):
 * any bytes open as a valid file (every tensor then readable, F32/BF16/F16 ones convertible) or
 * are refused with "file: what — how to fix". Seeds: files hyp_st_write made. */
#include "fuzz_util.h"

#include "safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char path[600];
    fz_write("t.safetensors", data, size);
    fz_path(path, sizeof path, "t.safetensors");
    hyp_st_file *f = NULL;
    hyp_err e = {{0}};
    int rc = hyp_st_open(path, &f, &e);
    fz_check(rc, &e, 0);
    if (rc) return 0;
    volatile uint8_t sink = 0;
    for (int i = 0; i < hyp_st_count(f); i++) {
        const hyp_st_tensor *t = hyp_st_get(f, i);
        if (hyp_st_find(f, t->name) != t) abort(); /* names are unique */
        const uint8_t *b = t->data;
        for (uint64_t k = 0; k < t->nbytes; k++) sink ^= b[k]; /* every byte inside the mapping */
        int64_t n = hyp_st_numel(t->ndim, t->shape);
        uint64_t nb;
        if (n < 0 || __builtin_mul_overflow((uint64_t)n, (uint64_t)hyp_st_dtype_size(t->dtype), &nb) || nb != t->nbytes) {
            fprintf(stderr, "fuzz: tensor '%s' of %lld elements accepted with %llu bytes\n", t->name, (long long)n,
                    (unsigned long long)t->nbytes);
            abort();
        }
        if (n <= (1 << 20)) {
            float *dst = malloc(((size_t)n + 1) * sizeof *dst);
            if (!dst) abort();
            e.msg[0] = 0;
            fz_check(hyp_st_to_f32(f, t, dst, &e), &e, 0);
            free(dst);
        }
    }
    for (int i = 0; i < hyp_st_meta_count(f); i++) {
        const hyp_st_meta *m = hyp_st_meta_get(f, i);
        if (hyp_st_meta_find(f, m->key) == NULL) abort();
    }
    hyp_st_close(f);
    (void)sink;
    return 0;
}
