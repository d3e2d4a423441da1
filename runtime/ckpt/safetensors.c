/* safetensors.c — the safetensors reader (mmap + full validation) and atomic writer; the format
 * and the rules enforced are described in safetensors.h. */
#include "safetensors.h"
#include "sbuf.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include "fsio.h"

/* ------------------------------------------------------------------------------------------ */
/* dtypes                                                                                      */

static const struct {
    const char *name;
    size_t size;
} DTYPES[HYP_ST_NDTYPES] = {
    [HYP_ST_BOOL] = {"BOOL", 1},         [HYP_ST_U8] = {"U8", 1},
    [HYP_ST_I8] = {"I8", 1},             [HYP_ST_F8_E5M2] = {"F8_E5M2", 1},
    [HYP_ST_F8_E4M3] = {"F8_E4M3", 1},   [HYP_ST_F8_E8M0] = {"F8_E8M0", 1},
    [HYP_ST_F8_E4M3FNUZ] = {"F8_E4M3FNUZ", 1}, [HYP_ST_F8_E5M2FNUZ] = {"F8_E5M2FNUZ", 1},
    [HYP_ST_I16] = {"I16", 2},           [HYP_ST_U16] = {"U16", 2},
    [HYP_ST_F16] = {"F16", 2},           [HYP_ST_BF16] = {"BF16", 2},
    [HYP_ST_I32] = {"I32", 4},           [HYP_ST_U32] = {"U32", 4},
    [HYP_ST_F32] = {"F32", 4},           [HYP_ST_C64] = {"C64", 8},
    [HYP_ST_F64] = {"F64", 8},           [HYP_ST_I64] = {"I64", 8},
    [HYP_ST_U64] = {"U64", 8},
};

const char *hyp_st_dtype_name(hyp_st_dtype d) {
    return (unsigned)d < HYP_ST_NDTYPES ? DTYPES[d].name : "?";
}

size_t hyp_st_dtype_size(hyp_st_dtype d) {
    return (unsigned)d < HYP_ST_NDTYPES ? DTYPES[d].size : 0;
}

int hyp_st_dtype_parse(const char *s, hyp_st_dtype *out) {
    for (int i = 0; i < HYP_ST_NDTYPES; i++)
        if (strcmp(s, DTYPES[i].name) == 0) {
            *out = (hyp_st_dtype)i;
            return 0;
        }
    return -1;
}

int64_t hyp_st_numel(int ndim, const int64_t *shape) {
    if (ndim < 0 || ndim > HYP_ST_MAX_DIMS) return -1;
    int64_t n = 1;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 0) return -1;
        if (shape[i] != 0 && n > ((int64_t)1 << 62) / shape[i]) return -1;
        n *= shape[i];
    }
    return n;
}

/* "[2, 3]" for messages. */
static void shape_str(int ndim, const int64_t *shape, char *out, size_t cap) {
    size_t k = 0;
    k += (size_t)snprintf(out + k, cap - k, "[");
    for (int i = 0; i < ndim && k < cap; i++)
        k += (size_t)snprintf(out + k, cap - k, "%s%lld", i ? ", " : "", (long long)shape[i]);
    if (k < cap) snprintf(out + k, cap - k, "]");
}

/* ------------------------------------------------------------------------------------------ */
/* reader                                                                                      */

struct hyp_st_file {
    char *path;
    void *map;          /* mmap'd file, or malloc'd copy when mmap is unavailable */
    size_t map_size;
    int mapped;         /* 1: munmap on close, 0: free */
    const uint8_t *data;
    uint64_t data_size;
    hyp_st_tensor *tensors; /* sorted by data offset */
    int n;
    int *by_name;           /* indices into tensors, sorted by name */
    hyp_st_meta *meta;
    int n_meta;
};

/* qsort comparators over arrays of tensor pointers (no global context: thread-safe) */
static int cmp_ptr_name(const void *a, const void *b) {
    return strcmp((*(const hyp_st_tensor *const *)a)->name,
                  (*(const hyp_st_tensor *const *)b)->name);
}

/* Fills idx[0..n) with the indices of ts sorted by name; returns the first duplicated name or
 * NULL. -1 in *oom when out of memory. */
static const char *sort_names(const hyp_st_tensor *ts, int n, int *idx, int *oom) {
    const hyp_st_tensor **p = malloc(sizeof *p * (size_t)(n ? n : 1));
    *oom = !p;
    if (!p) return NULL;
    for (int i = 0; i < n; i++) p[i] = &ts[i];
    qsort(p, (size_t)n, sizeof *p, cmp_ptr_name);
    const char *dup = NULL;
    for (int i = 0; i < n; i++) {
        if (idx) idx[i] = (int)(p[i] - ts);
        if (i && !dup && !strcmp(p[i]->name, p[i - 1]->name)) dup = p[i]->name;
    }
    free(p);
    return dup;
}

typedef struct {
    uint64_t begin, end;
    int idx;
} span;

static int cmp_span(const void *a, const void *b) {
    const span *x = a, *y = b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end) return x->end < y->end ? -1 : 1;
    return x->idx - y->idx;
}

/* A JSON number that is an exact non-negative integer <= 2^53. */
static int json_u53(const cJSON *j, uint64_t *out) {
    if (!cJSON_IsNumber(j)) return -1;
    double v = j->valuedouble;
    if (!(v >= 0.0) || v > 9007199254740992.0 || floor(v) != v) return -1;
    *out = (uint64_t)v;
    return 0;
}

void hyp_st_close(hyp_st_file *f) {
    if (!f) return;
    if (f->map) {
        if (f->mapped) munmap(f->map, f->map_size);
        else free(f->map);
    }
    for (int i = 0; i < f->n; i++) free((char *)f->tensors[i].name);
    free(f->tensors);
    free(f->by_name);
    for (int i = 0; i < f->n_meta; i++) {
        free((char *)f->meta[i].key);
        free((char *)f->meta[i].value);
    }
    free(f->meta);
    free(f->path);
    free(f);
}

/* Maps (or reads) the whole file. */
static int map_file(hyp_st_file *f, hyp_err *e) {
    const char *path = f->path;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        int err = errno;
        return hyp_fail(e, hyp_fs_errcode(err), "%s: cannot open: %s — check the path", path,
                        strerror(err));
    }
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int err = errno;
        close(fd);
        return hyp_fail(e, HYP_EFAIL, "%s: cannot stat: %s", path, strerror(err));
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return hyp_fail(e, HYP_EINPUT, "%s: not a regular file — give a .safetensors file", path);
    }
    f->map_size = (size_t)st.st_size;
    if (f->map_size < 8) {
        close(fd);
        return hyp_fail(e, HYP_EINPUT, "%s: file is %zu bytes, too short for the 8-byte header "
                        "length — not a safetensors file, or truncated", path, f->map_size);
    }
    void *m = mmap(NULL, f->map_size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (m != MAP_FAILED) {
        f->map = m;
        f->mapped = 1;
    } else {
        f->map = malloc(f->map_size);
        if (!f->map) {
            close(fd);
            return hyp_fail(e, HYP_EFAIL, "%s: out of memory reading %zu bytes", path,
                            f->map_size);
        }
        long long got = hyp_fs_read_full(fd, f->map, f->map_size);
        if (got != (long long)f->map_size) {
            int err = errno;
            close(fd);
            return hyp_fail(e, HYP_EFAIL, "%s: read failed: %s", path,
                            got < 0 ? strerror(err) : "file shrank while reading");
        }
    }
    close(fd);
    return HYP_OK;
}

/* Parses one tensor entry of the header into t (name already set). */
static int parse_tensor(hyp_st_file *f, const cJSON *j, hyp_st_tensor *t, uint64_t *begin,
                        uint64_t *end, hyp_err *e) {
    const char *path = f->path;
    const char *name = t->name;
    if (!cJSON_IsObject(j))
        return hyp_fail(e, HYP_EINPUT, "%s: tensor '%.200s': header entry is not an object — the "
                        "file is corrupt or not safetensors", path, name);
    const cJSON *jd = cJSON_GetObjectItemCaseSensitive(j, "dtype");
    const cJSON *js = cJSON_GetObjectItemCaseSensitive(j, "shape");
    const cJSON *jo = cJSON_GetObjectItemCaseSensitive(j, "data_offsets");
    if (!cJSON_IsString(jd))
        return hyp_fail(e, HYP_EINPUT, "%s: tensor '%.200s': missing or non-string \"dtype\" — "
                        "the file is corrupt", path, name);
    if (hyp_st_dtype_parse(jd->valuestring, &t->dtype) != 0) {
        const char *s = jd->valuestring;
        if (!strcmp(s, "F4") || !strcmp(s, "F6_E2M3") || !strcmp(s, "F6_E3M2"))
            return hyp_fail(e, HYP_EINPUT, "%s: tensor '%.200s': dtype %s (sub-byte MX format) is "
                            "not supported — convert the tensor to BF16 or F32", path, name, s);
        return hyp_fail(e, HYP_EINPUT, "%s: tensor '%.200s': unknown dtype \"%.40s\" — known: "
                        "F32 BF16 F16 F64 I64 I32 I16 I8 U64 U32 U16 U8 BOOL F8_E4M3 F8_E5M2 "
                        "F8_E8M0 F8_E4M3FNUZ F8_E5M2FNUZ C64", path, name, s);
    }
    if (!cJSON_IsArray(js))
        return hyp_fail(e, HYP_EINPUT, "%s: tensor '%.200s': missing or non-list \"shape\" — the "
                        "file is corrupt", path, name);
    int nd = cJSON_GetArraySize(js);
    if (nd > HYP_ST_MAX_DIMS)
        return hyp_fail(e, HYP_EINPUT, "%s: tensor '%.200s': %d dimensions, more than the %d "
                        "supported", path, name, nd, HYP_ST_MAX_DIMS);
    t->ndim = nd;
    int i = 0;
    const cJSON *jx;
    cJSON_ArrayForEach(jx, js) {
        uint64_t v;
        if (json_u53(jx, &v) != 0)
            return hyp_fail(e, HYP_EINPUT, "%s: tensor '%.200s': shape entry %d is not a "
                            "non-negative integer — the file is corrupt", path, name, i);
        t->shape[i++] = (int64_t)v;
    }
    if (!cJSON_IsArray(jo) || cJSON_GetArraySize(jo) != 2 ||
        json_u53(cJSON_GetArrayItem(jo, 0), begin) != 0 ||
        json_u53(cJSON_GetArrayItem(jo, 1), end) != 0)
        return hyp_fail(e, HYP_EINPUT, "%s: tensor '%.200s': \"data_offsets\" must be [begin, end] "
                        "with non-negative integers — the file is corrupt", path, name);
    if (*end < *begin)
        return hyp_fail(e, HYP_EINPUT, "%s: tensor '%.200s': data_offsets [%llu, %llu] end "
                        "before they begin — the file is corrupt", path, name,
                        (unsigned long long)*begin, (unsigned long long)*end);
    if (*end > f->data_size)
        return hyp_fail(e, HYP_EINPUT, "%s: tensor '%.200s': data_offsets [%llu, %llu] run past "
                        "the %llu-byte data section — the file is truncated or corrupt", path,
                        name, (unsigned long long)*begin, (unsigned long long)*end,
                        (unsigned long long)f->data_size);
    int64_t numel = hyp_st_numel(t->ndim, t->shape);
    char sh[256];
    shape_str(t->ndim, t->shape, sh, sizeof sh);
    if (numel < 0)
        return hyp_fail(e, HYP_EINPUT, "%s: tensor '%.200s': shape %s overflows — the file is "
                        "corrupt", path, name, sh);
    uint64_t want = (uint64_t)numel * hyp_st_dtype_size(t->dtype);
    if (want != *end - *begin)
        return hyp_fail(e, HYP_EINPUT, "%s: tensor '%.200s': shape %s of %s needs %llu bytes but "
                        "data_offsets [%llu, %llu] span %llu — the header is inconsistent", path,
                        name, sh, hyp_st_dtype_name(t->dtype), (unsigned long long)want,
                        (unsigned long long)*begin, (unsigned long long)*end,
                        (unsigned long long)(*end - *begin));
    t->nbytes = want;
    t->data = f->data + *begin;
    return HYP_OK;
}

static int parse_metadata(hyp_st_file *f, const cJSON *j, hyp_err *e) {
    if (!cJSON_IsObject(j))
        return hyp_fail(e, HYP_EINPUT, "%s: \"__metadata__\" is not an object of strings — the "
                        "file is corrupt", f->path);
    int n = cJSON_GetArraySize(j);
    f->meta = calloc((size_t)(n ? n : 1), sizeof *f->meta);
    if (!f->meta) return hyp_fail(e, HYP_EFAIL, "%s: out of memory", f->path);
    const cJSON *c;
    cJSON_ArrayForEach(c, j) {
        if (!cJSON_IsString(c))
            return hyp_fail(e, HYP_EINPUT, "%s: \"__metadata__\" entry '%.200s' is not a string "
                            "(the format allows only string values) — the file is corrupt",
                            f->path, c->string);
        for (int k = 0; k < f->n_meta; k++)
            if (!strcmp(f->meta[k].key, c->string))
                return hyp_fail(e, HYP_EINPUT, "%s: \"__metadata__\" key '%.200s' appears twice "
                                "— the file is corrupt", f->path, c->string);
        char *k = strdup(c->string), *v = strdup(c->valuestring);
        if (!k || !v) {
            free(k);
            free(v);
            return hyp_fail(e, HYP_EFAIL, "%s: out of memory", f->path);
        }
        f->meta[f->n_meta].key = k;
        f->meta[f->n_meta].value = v;
        f->n_meta++;
    }
    return HYP_OK;
}

static int parse_header(hyp_st_file *f, hyp_err *e) {
    const char *path = f->path;
    const uint8_t *b = f->map;
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--) n = (n << 8) | b[i];
    if (n > HYP_ST_MAX_HEADER)
        return hyp_fail(e, HYP_EINPUT, "%s: header length %llu is over the 100 MB limit — not a "
                        "safetensors file, or corrupt", path, (unsigned long long)n);
    if (n > f->map_size - 8)
        return hyp_fail(e, HYP_EINPUT, "%s: header length says %llu bytes but only %zu follow "
                        "the length field — the file is truncated or not safetensors", path,
                        (unsigned long long)n, f->map_size - 8);
    if (n < 2)
        return hyp_fail(e, HYP_EINPUT, "%s: header is %llu bytes, too short for a JSON object — "
                        "not a safetensors file", path, (unsigned long long)n);
    f->data = b + 8 + n;
    f->data_size = f->map_size - 8 - n;
    char *json = malloc(n + 1);
    if (!json) return hyp_fail(e, HYP_EFAIL, "%s: out of memory for a %llu-byte header", path,
                               (unsigned long long)n);
    memcpy(json, b + 8, n);
    json[n] = '\0';
    const char *nul = memchr(json, '\0', n);
    if (nul) {
        long long at = (long long)(nul - json) + 8;
        free(json);
        return hyp_fail(e, HYP_EINPUT, "%s: header has a NUL byte at file offset %lld — the file "
                        "is corrupt or not safetensors", path, at);
    }
    const char *endp = NULL;
    cJSON *root = cJSON_ParseWithOpts(json, &endp, 1);
    if (!root) {
        long long at = endp ? (long long)(endp - json) : -1;
        free(json);
        return hyp_fail(e, HYP_EINPUT, "%s: header is not valid JSON (error near header byte "
                        "%lld) — the file is corrupt or not safetensors", path, at);
    }
    free(json);
    int rc = HYP_OK;
    if (!cJSON_IsObject(root)) {
        rc = hyp_fail(e, HYP_EINPUT, "%s: header JSON is not an object — not a safetensors "
                      "file", path);
        goto done;
    }
    int total = cJSON_GetArraySize(root);
    f->tensors = calloc((size_t)(total ? total : 1), sizeof *f->tensors);
    span *sp = calloc((size_t)(total ? total : 1), sizeof *sp);
    if (!f->tensors || !sp) {
        free(sp);
        rc = hyp_fail(e, HYP_EFAIL, "%s: out of memory", path);
        goto done;
    }
    int seen_meta = 0;
    const cJSON *c;
    cJSON_ArrayForEach(c, root) {
        if (!strcmp(c->string, "__metadata__")) {
            if (seen_meta++) {
                rc = hyp_fail(e, HYP_EINPUT, "%s: \"__metadata__\" appears twice — the file is "
                              "corrupt", path);
                break;
            }
            if ((rc = parse_metadata(f, c, e)) != HYP_OK) break;
            continue;
        }
        hyp_st_tensor *t = &f->tensors[f->n];
        t->name = strdup(c->string);
        if (!t->name) {
            rc = hyp_fail(e, HYP_EFAIL, "%s: out of memory", path);
            break;
        }
        f->n++;
        if ((rc = parse_tensor(f, c, t, &sp[f->n - 1].begin, &sp[f->n - 1].end, e)) != HYP_OK)
            break;
        sp[f->n - 1].idx = f->n - 1;
    }
    if (rc == HYP_OK) {
        /* unique names */
        f->by_name = malloc(sizeof(int) * (size_t)(f->n ? f->n : 1));
        if (!f->by_name) {
            rc = hyp_fail(e, HYP_EFAIL, "%s: out of memory", path);
        } else {
            int oom;
            const char *dup = sort_names(f->tensors, f->n, f->by_name, &oom);
            if (oom)
                rc = hyp_fail(e, HYP_EFAIL, "%s: out of memory", path);
            else if (dup)
                rc = hyp_fail(e, HYP_EINPUT, "%s: tensor name '%.200s' appears twice in the "
                              "header — the file is corrupt", path, dup);
        }
    }
    if (rc == HYP_OK) {
        /* the data section is covered exactly: no overlaps, no holes, no trailing bytes */
        qsort(sp, (size_t)f->n, sizeof *sp, cmp_span);
        uint64_t cursor = 0;
        for (int i = 0; i < f->n && rc == HYP_OK; i++) {
            if (sp[i].begin < cursor)
                rc = hyp_fail(e, HYP_EINPUT, "%s: tensors '%.200s' and '%.200s' overlap (data "
                              "offsets [%llu, %llu] and [%llu, %llu]) — the file is corrupt",
                              path, f->tensors[sp[i - 1].idx].name, f->tensors[sp[i].idx].name,
                              (unsigned long long)sp[i - 1].begin,
                              (unsigned long long)sp[i - 1].end, (unsigned long long)sp[i].begin,
                              (unsigned long long)sp[i].end);
            else if (sp[i].begin > cursor)
                rc = hyp_fail(e, HYP_EINPUT, "%s: data bytes [%llu, %llu) before tensor '%.200s' "
                              "belong to no tensor — the file is corrupt", path,
                              (unsigned long long)cursor, (unsigned long long)sp[i].begin,
                              f->tensors[sp[i].idx].name);
            cursor = sp[i].end;
        }
        if (rc == HYP_OK && cursor != f->data_size)
            rc = hyp_fail(e, HYP_EINPUT, "%s: the data section has %llu bytes but the tensors "
                          "cover %llu — the file has trailing garbage or is corrupt", path,
                          (unsigned long long)f->data_size, (unsigned long long)cursor);
    }
    if (rc == HYP_OK) {
        /* store tensors in data-offset order; rebuild the name index to match */
        hyp_st_tensor *sorted = malloc(sizeof *sorted * (size_t)(f->n ? f->n : 1));
        if (!sorted) {
            rc = hyp_fail(e, HYP_EFAIL, "%s: out of memory", path);
        } else {
            for (int i = 0; i < f->n; i++) sorted[i] = f->tensors[sp[i].idx];
            free(f->tensors);
            f->tensors = sorted;
            int oom;
            (void)sort_names(f->tensors, f->n, f->by_name, &oom);
            if (oom) rc = hyp_fail(e, HYP_EFAIL, "%s: out of memory", path);
        }
    }
    free(sp);
done:
    cJSON_Delete(root);
    return rc;
}

int hyp_st_open(const char *path, hyp_st_file **out, hyp_err *e) {
    *out = NULL;
    hyp_st_file *f = calloc(1, sizeof *f);
    if (!f || !(f->path = strdup(path))) {
        free(f);
        return hyp_fail(e, HYP_EFAIL, "%s: out of memory", path);
    }
    int rc = map_file(f, e);
    if (rc == HYP_OK) rc = parse_header(f, e);
    if (rc != HYP_OK) {
        hyp_st_close(f);
        return rc;
    }
    *out = f;
    return HYP_OK;
}

const char *hyp_st_path(const hyp_st_file *f) { return f->path; }
int hyp_st_count(const hyp_st_file *f) { return f->n; }
const hyp_st_tensor *hyp_st_get(const hyp_st_file *f, int i) {
    return (i >= 0 && i < f->n) ? &f->tensors[i] : NULL;
}

const hyp_st_tensor *hyp_st_find(const hyp_st_file *f, const char *name) {
    int lo = 0, hi = f->n - 1;
    while (lo <= hi) {
        int mid = lo + (hi - lo) / 2;
        const hyp_st_tensor *t = &f->tensors[f->by_name[mid]];
        int c = strcmp(name, t->name);
        if (c == 0) return t;
        if (c < 0) hi = mid - 1;
        else lo = mid + 1;
    }
    return NULL;
}

int hyp_st_meta_count(const hyp_st_file *f) { return f->n_meta; }
const hyp_st_meta *hyp_st_meta_get(const hyp_st_file *f, int i) {
    return (i >= 0 && i < f->n_meta) ? &f->meta[i] : NULL;
}
const char *hyp_st_meta_find(const hyp_st_file *f, const char *key) {
    for (int i = 0; i < f->n_meta; i++)
        if (!strcmp(f->meta[i].key, key)) return f->meta[i].value;
    return NULL;
}

const void *hyp_st_bytes(const hyp_st_file *f, size_t *size) {
    if (size) *size = f->map_size;
    return f->map;
}

static float half_to_float(uint16_t h) {
    uint32_t sign = (uint32_t)(h >> 15) << 31;
    uint32_t exp = (h >> 10) & 0x1f, man = h & 0x3ff, bits;
    if (exp == 0x1f) {
        bits = sign | 0x7f800000u | (man << 13); /* inf / nan */
    } else if (exp == 0) {
        if (man == 0) {
            bits = sign;
        } else { /* subnormal: normalize */
            int e = -1;
            do {
                man <<= 1;
                e++;
            } while (!(man & 0x400));
            bits = sign | ((uint32_t)(127 - 15 - e) << 23) | ((man & 0x3ff) << 13);
        }
    } else {
        bits = sign | ((exp + 112) << 23) | (man << 13);
    }
    float out;
    memcpy(&out, &bits, 4);
    return out;
}

int hyp_st_to_f32(const hyp_st_file *f, const hyp_st_tensor *t, float *dst, hyp_err *e) {
    size_t n = (size_t)(t->nbytes / (hyp_st_dtype_size(t->dtype) ? hyp_st_dtype_size(t->dtype)
                                                                  : 1));
    const uint8_t *p = t->data;
    switch (t->dtype) {
    case HYP_ST_F32:
        memcpy(dst, p, t->nbytes);
        return HYP_OK;
    case HYP_ST_BF16:
        for (size_t i = 0; i < n; i++) {
            uint32_t bits = ((uint32_t)p[2 * i] | (uint32_t)p[2 * i + 1] << 8) << 16;
            memcpy(&dst[i], &bits, 4);
        }
        return HYP_OK;
    case HYP_ST_F16:
        for (size_t i = 0; i < n; i++)
            dst[i] = half_to_float((uint16_t)(p[2 * i] | p[2 * i + 1] << 8));
        return HYP_OK;
    default:
        return hyp_fail(e, HYP_EINPUT, "%s: tensor '%.200s' is %s; only F32, BF16 and F16 convert "
                        "to fp32 — re-export the weights in one of those", f->path, t->name,
                        hyp_st_dtype_name(t->dtype));
    }
}

/* ------------------------------------------------------------------------------------------ */
/* writer                                                                                      */

static void sb_u64(hyp_sbuf *b, uint64_t v) {
    char tmp[32];
    int k = snprintf(tmp, sizeof tmp, "%llu", (unsigned long long)v);
    hyp_sbuf_put(b, tmp, (size_t)k);
}
/* A JSON string literal, escaped the way serde_json does. */
static void sb_json_str(hyp_sbuf *b, const char *s) {
    static const char hex[] = "0123456789abcdef";
    hyp_sbuf_put(b, "\"", 1);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        char esc[7];
        switch (*p) {
        case '"': hyp_sbuf_put(b, "\\\"", 2); break;
        case '\\': hyp_sbuf_put(b, "\\\\", 2); break;
        case '\b': hyp_sbuf_put(b, "\\b", 2); break;
        case '\f': hyp_sbuf_put(b, "\\f", 2); break;
        case '\n': hyp_sbuf_put(b, "\\n", 2); break;
        case '\r': hyp_sbuf_put(b, "\\r", 2); break;
        case '\t': hyp_sbuf_put(b, "\\t", 2); break;
        default:
            if (*p < 0x20) {
                memcpy(esc, "\\u00", 4);
                esc[4] = hex[*p >> 4];
                esc[5] = hex[*p & 15];
                hyp_sbuf_put(b, esc, 6);
            } else {
                hyp_sbuf_put(b, (const char *)p, 1);
            }
        }
    }
    hyp_sbuf_put(b, "\"", 1);
}

static int cmp_layout(const void *a, const void *b) {
    const hyp_st_tensor *x = *(const hyp_st_tensor *const *)a;
    const hyp_st_tensor *y = *(const hyp_st_tensor *const *)b;
    if (x->dtype != y->dtype) return x->dtype > y->dtype ? -1 : 1;
    return strcmp(x->name, y->name);
}

int hyp_st_write(const char *path, const hyp_st_tensor *tensors, int n, const hyp_st_meta *meta,
                 int n_meta, char xxh128_hex[33], hyp_err *e) {
    if (n < 0 || n_meta < 0 || (n > 0 && !tensors) || (n_meta > 0 && !meta))
        return hyp_fail(e, HYP_EINPUT, "%s: bad tensor or metadata list passed to the writer",
                        path);
    /* validate every entry before touching the disk */
    for (int i = 0; i < n; i++) {
        const hyp_st_tensor *t = &tensors[i];
        if (!t->name || !t->name[0] || !strcmp(t->name, "__metadata__"))
            return hyp_fail(e, HYP_EINPUT, "%s: tensor %d has an empty or reserved name — give "
                            "every tensor a unique name", path, i);
        if ((unsigned)t->dtype >= HYP_ST_NDTYPES)
            return hyp_fail(e, HYP_EINPUT, "%s: tensor '%.200s' has an invalid dtype %d", path,
                            t->name, (int)t->dtype);
        int64_t numel = hyp_st_numel(t->ndim, t->shape);
        if (numel < 0)
            return hyp_fail(e, HYP_EINPUT, "%s: tensor '%.200s' has an invalid shape (ndim %d, "
                            "negative or overflowing dims)", path, t->name, t->ndim);
        if (numel > 0 && !t->data)
            return hyp_fail(e, HYP_EINPUT, "%s: tensor '%.200s' has no data pointer", path,
                            t->name);
    }
    for (int i = 0; i < n_meta; i++) {
        if (!meta[i].key || !meta[i].value)
            return hyp_fail(e, HYP_EINPUT, "%s: metadata entry %d has a NULL key or value", path,
                            i);
        for (int k = 0; k < i; k++)
            if (!strcmp(meta[k].key, meta[i].key))
                return hyp_fail(e, HYP_EINPUT, "%s: metadata key '%.200s' given twice", path,
                                meta[i].key);
    }
    int oom;
    const char *dup = sort_names(tensors, n, NULL, &oom);
    if (oom) return hyp_fail(e, HYP_EFAIL, "%s: out of memory", path);
    if (dup)
        return hyp_fail(e, HYP_EINPUT, "%s: tensor name '%.200s' given twice — tensor names must "
                        "be unique", path, dup);
    const hyp_st_tensor **order = malloc(sizeof *order * (size_t)(n ? n : 1));
    if (!order) return hyp_fail(e, HYP_EFAIL, "%s: out of memory", path);
    for (int i = 0; i < n; i++) order[i] = &tensors[i];
    qsort(order, (size_t)n, sizeof *order, cmp_layout);

    /* header JSON, serde_json-compact */
    hyp_sbuf h = {0};
    hyp_sbuf_str(&h, "{");
    int first = 1;
    if (n_meta > 0) {
        hyp_sbuf_str(&h, "\"__metadata__\":{");
        for (int i = 0; i < n_meta; i++) {
            if (i) hyp_sbuf_str(&h, ",");
            sb_json_str(&h, meta[i].key);
            hyp_sbuf_str(&h, ":");
            sb_json_str(&h, meta[i].value);
        }
        hyp_sbuf_str(&h, "}");
        first = 0;
    }
    uint64_t offset = 0;
    for (int i = 0; i < n; i++) {
        const hyp_st_tensor *t = order[i];
        uint64_t nb = (uint64_t)hyp_st_numel(t->ndim, t->shape) * hyp_st_dtype_size(t->dtype);
        if (!first) hyp_sbuf_str(&h, ",");
        first = 0;
        sb_json_str(&h, t->name);
        hyp_sbuf_str(&h, ":{\"dtype\":\"");
        hyp_sbuf_str(&h, hyp_st_dtype_name(t->dtype));
        hyp_sbuf_str(&h, "\",\"shape\":[");
        for (int d = 0; d < t->ndim; d++) {
            if (d) hyp_sbuf_str(&h, ",");
            sb_u64(&h, (uint64_t)t->shape[d]);
        }
        hyp_sbuf_str(&h, "],\"data_offsets\":[");
        sb_u64(&h, offset);
        hyp_sbuf_str(&h, ",");
        sb_u64(&h, offset + nb);
        hyp_sbuf_str(&h, "]}");
        offset += nb;
    }
    hyp_sbuf_str(&h, "}");
    while (h.n % 8) hyp_sbuf_str(&h, " ");
    if (h.oom) {
        free(h.p);
        free(order);
        return hyp_fail(e, HYP_EFAIL, "%s: out of memory building the header", path);
    }
    if (h.n > HYP_ST_MAX_HEADER) {
        free(h.p);
        free(order);
        return hyp_fail(e, HYP_EINPUT, "%s: header would be %zu bytes, over the format's 100 MB "
                        "limit — too many tensors for one file", path, h.n);
    }

    uint8_t len8[8];
    for (int i = 0; i < 8; i++) len8[i] = (uint8_t)((uint64_t)h.n >> (8 * i));

    char tmp[4096 + 32];
    int fd, rc = hyp_fs_tmpfile(path, tmp, sizeof tmp, &fd, e);
    if (rc != HYP_OK) {
        free(h.p);
        free(order);
        return rc;
    }
    XXH3_state_t *xs = XXH3_createState();
    if (!xs) {
        close(fd);
        unlink(tmp);
        free(h.p);
        free(order);
        return hyp_fail(e, HYP_EFAIL, "%s: out of memory", path);
    }
    XXH3_128bits_reset(xs);
    int ok = hyp_fs_write_all(fd, len8, 8) == 0 && hyp_fs_write_all(fd, h.p, h.n) == 0;
    XXH3_128bits_update(xs, len8, 8);
    XXH3_128bits_update(xs, h.p, h.n);
    for (int i = 0; ok && i < n; i++) {
        const hyp_st_tensor *t = order[i];
        size_t nb = (size_t)hyp_st_numel(t->ndim, t->shape) * hyp_st_dtype_size(t->dtype);
        if (nb == 0) continue;
        ok = hyp_fs_write_all(fd, t->data, nb) == 0;
        XXH3_128bits_update(xs, t->data, nb);
    }
    int err = errno;
    if (ok && fsync(fd) != 0) {
        ok = 0;
        err = errno;
    }
    if (close(fd) != 0 && ok) {
        ok = 0;
        err = errno;
    }
    free(h.p);
    free(order);
    if (!ok) {
        XXH3_freeState(xs);
        unlink(tmp);
        return hyp_fail(e, hyp_fs_errcode(err), "%s: write failed: %s — check free disk space "
                        "and permissions", path, strerror(err));
    }
    if (xxh128_hex) {
        XXH128_canonical_t c;
        XXH128_canonicalFromHash(&c, XXH3_128bits_digest(xs));
        hyp_fs_hex(c.digest, 16, xxh128_hex);
    }
    XXH3_freeState(xs);
    if (rename(tmp, path) != 0) {
        err = errno;
        unlink(tmp);
        return hyp_fail(e, hyp_fs_errcode(err), "%s: cannot move the finished file into place: "
                        "%s — check the path", path, strerror(err));
    }
    if (hyp_fs_fsync_parent(path) != 0) {
        err = errno;
        return hyp_fail(e, HYP_EFAIL, "%s: fsync of the directory failed: %s", path,
                        strerror(err));
    }
    return HYP_OK;
}
