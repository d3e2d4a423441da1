/* safetensors.h — read and write the safetensors format (Hugging Face), the runtime's on-disk
 * tensor container for weights and optimizer state.
 *
 * Layout: 8-byte little-endian header length N, then N bytes of UTF-8 JSON
 *     {"__metadata__": {"k": "v", ...},                       (optional, string -> string)
 *      "<name>": {"dtype": "F32", "shape": [2, 3], "data_offsets": [begin, end]}, ...}
 * then the data section; offsets are relative to its start (byte 8 + N).
 *
 * The reader mmaps the file and validates everything before returning: the header length is within
 * the file (and below 100 MB, the reference's limit), the JSON parses to an object, every dtype is
 * known, every shape is a list of non-negative integers whose product × dtype size equals
 * end - begin, offsets lie inside the data section, tensors neither overlap nor leave holes and
 * cover the data section exactly (as the reference implementation requires), names are unique,
 * and metadata values are strings. Any violation is a HYP_EINPUT naming the file and the problem.
 *
 * The writer lays tensors out the way the reference writer (safetensors.torch.save_file) does —
 * dtype descending (U64, I64, F64, C64, F32, ... BOOL), then by name — so every tensor is
 * naturally aligned, writes the same compact JSON ("__metadata__" first; keys dtype, shape,
 * data_offsets), pads the header with spaces to a multiple of 8, and replaces the file
 * atomically (temp file in the same directory, fsync, rename, fsync of the directory).
 *
 * An open hyp_st_file is immutable: share it between threads freely; close it once.
 */
#ifndef HYP_SAFETENSORS_H
#define HYP_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "hyp_err.h"

/* The dtypes of the safetensors format, in the reference's order (used for layout). The
 * sub-byte MX types (F4, F6_E2M3, F6_E3M2) are not supported: such files are refused by name. */
typedef enum {
    HYP_ST_BOOL,
    HYP_ST_U8,
    HYP_ST_I8,
    HYP_ST_F8_E5M2,
    HYP_ST_F8_E4M3,
    HYP_ST_F8_E8M0,
    HYP_ST_F8_E4M3FNUZ,
    HYP_ST_F8_E5M2FNUZ,
    HYP_ST_I16,
    HYP_ST_U16,
    HYP_ST_F16,
    HYP_ST_BF16,
    HYP_ST_I32,
    HYP_ST_U32,
    HYP_ST_F32,
    HYP_ST_C64,
    HYP_ST_F64,
    HYP_ST_I64,
    HYP_ST_U64,
    HYP_ST_NDTYPES
} hyp_st_dtype;

#define HYP_ST_MAX_DIMS 8
#define HYP_ST_MAX_HEADER 100000000ULL /* the reference implementation's limit */

/* One tensor. Reading: every field is filled, data points into the mapped file (valid until
 * hyp_st_close; naturally aligned for files this writer made, possibly unaligned for foreign
 * ones — copy with memcpy or hyp_st_to_f32). Writing: fill name, dtype, ndim, shape, data;
 * nbytes is ignored (computed from the shape). */
typedef struct {
    const char *name;
    hyp_st_dtype dtype;
    int ndim;                         /* 0 = scalar (one element) */
    int64_t shape[HYP_ST_MAX_DIMS];
    uint64_t nbytes;                  /* product(shape) * dtype size */
    const void *data;
} hyp_st_tensor;

/* One "__metadata__" entry. */
typedef struct {
    const char *key;
    const char *value;
} hyp_st_meta;

const char *hyp_st_dtype_name(hyp_st_dtype d);   /* "F32"; "?" if out of range */
size_t hyp_st_dtype_size(hyp_st_dtype d);        /* bytes per element; 0 if out of range */
int hyp_st_dtype_parse(const char *s, hyp_st_dtype *out); /* 0, or -1 if unknown */
/* Element count of a shape (1 for ndim == 0); -1 if negative dims or overflow past 2^62. */
int64_t hyp_st_numel(int ndim, const int64_t *shape);

/* ---- Reading ---- */

typedef struct hyp_st_file hyp_st_file;

/* Opens and validates path. On success *out is the file (close with hyp_st_close). */
int hyp_st_open(const char *path, hyp_st_file **out, hyp_err *e);
void hyp_st_close(hyp_st_file *f);

const char *hyp_st_path(const hyp_st_file *f);
int hyp_st_count(const hyp_st_file *f);                     /* number of tensors */
const hyp_st_tensor *hyp_st_get(const hyp_st_file *f, int i); /* in data-offset order */
const hyp_st_tensor *hyp_st_find(const hyp_st_file *f, const char *name); /* NULL if absent */
int hyp_st_meta_count(const hyp_st_file *f);
const hyp_st_meta *hyp_st_meta_get(const hyp_st_file *f, int i);
const char *hyp_st_meta_find(const hyp_st_file *f, const char *key); /* NULL if absent */
/* The whole file's bytes as mapped (for checksums). */
const void *hyp_st_bytes(const hyp_st_file *f, size_t *size);

/* Converts a F32, BF16 or F16 tensor to fp32 into dst (numel floats). Other dtypes: HYP_EINPUT. */
int hyp_st_to_f32(const hyp_st_file *f, const hyp_st_tensor *t, float *dst, hyp_err *e);

/* ---- Writing ---- */

/* Writes n tensors and n_meta metadata entries to path, atomically. Names must be unique and
 * non-empty and not "__metadata__"; data may be NULL only when nbytes is 0. If xxh128_hex is not
 * NULL it receives the XXH3-128 of the whole file as 32 lowercase hex digits + NUL (computed
 * while writing, so checkpoints need not re-read the file). */
int hyp_st_write(const char *path, const hyp_st_tensor *tensors, int n, const hyp_st_meta *meta,
                 int n_meta, char xxh128_hex[33], hyp_err *e);

#endif
