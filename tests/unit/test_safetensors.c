/* test_safetensors.c — the safetensors reader/writer: round trip, the reference writer's byte
 * layout, conversion to fp32, and hostile files (each refused with HYP_EINPUT and a message
 * naming the file and the problem, never a crash). */
#include <dirent.h>
#include <glob.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include "fsio.h"
#include "safetensors.h"

#include "hyp_test.h"

static char g_dir[256];


static int count_entries(const char *dir) {
    DIR *d = opendir(dir);
    int n = 0;
    struct dirent *de;
    while (d && (de = readdir(d)))
        if (strcmp(de->d_name, ".") && strcmp(de->d_name, "..")) n++;
    if (d) closedir(d);
    return n;
}

/* The whole file (NUL-terminated, freed by the caller), or NULL. */
static void *read_all(const char *path, size_t *n) {
    char *b;
    return hyp_fs_read_small(path, SIZE_MAX, &b, n, NULL) == HYP_OK ? b : NULL;
}

/* Writes [8-byte LE n][header][data_len zero bytes]. n = (uint64)-1 means strlen(header). */
static void write_raw(const char *path, uint64_t n, const char *header, size_t hlen,
                      size_t data_len) {
    FILE *f = fopen(path, "wb");
    if (n == (uint64_t)-1) n = hlen;
    unsigned char len8[8];
    for (int i = 0; i < 8; i++) len8[i] = (unsigned char)(n >> (8 * i));
    fwrite(len8, 1, 8, f);
    fwrite(header, 1, hlen, f);
    for (size_t i = 0; i < data_len; i++) fputc(0, f);
    fclose(f);
}

/* A hostile file must give HYP_EINPUT, a NULL handle, and a message naming the file and `what`. */
static void expect_refused(const char *label, const char *path, const char *what) {
    hyp_err e = {{0}};
    hyp_st_file *f = (hyp_st_file *)1;
    int rc = hyp_st_open(path, &f, &e);
    int ok = rc == HYP_EINPUT && f == NULL && strstr(e.msg, path) && strstr(e.msg, what);
    CHECK(ok, "refuses %s (\"%s\")", label, e.msg);
    if (f && f != (hyp_st_file *)1) hyp_st_close(f);
}

static void hostile(const char *label, const char *header, size_t data_len, const char *what) {
    char path[512];
    snprintf(path, sizeof path, "%s/hostile.safetensors", g_dir);
    write_raw(path, (uint64_t)-1, header, strlen(header), data_len);
    expect_refused(label, path, what);
}

static void test_round_trip(void) {
    char path[512];
    snprintf(path, sizeof path, "%s/rt.safetensors", g_dir);
    float w[6] = {1.5f, -2.25f, 3.0f, 0.0f, -0.0f, 1e-30f};
    uint16_t bf[4] = {0x3f80, 0xc020, 0x7f80, 0x0001};
    int32_t sc = -7;
    uint8_t nothing[1] = {0};
    hyp_st_tensor ts[4] = {
        {.name = "transformer.wte.weight", .dtype = HYP_ST_F32, .ndim = 2, .shape = {2, 3},
         .data = w},
        {.name = "bf", .dtype = HYP_ST_BF16, .ndim = 1, .shape = {4}, .data = bf},
        {.name = "scalar", .dtype = HYP_ST_I32, .ndim = 0, .data = &sc},
        {.name = "empty \"quoted\"\n", .dtype = HYP_ST_U8, .ndim = 2, .shape = {0, 5},
         .data = nothing},
    };
    hyp_st_meta meta[2] = {{"format", "pt"}, {"note", "line\nbreak \"q\""}};
    hyp_err e = {{0}};
    char hex[33] = {0};
    int rc = hyp_st_write(path, ts, 4, meta, 2, hex, &e);
    CHECK(rc == HYP_OK, "writes 4 tensors with metadata (%s)", e.msg);
    CHECK(count_entries(g_dir) == 1, "leaves no temp file next to the output");
    size_t n;
    unsigned char *bytes = read_all(path, &n);
    XXH128_canonical_t c;
    XXH128_canonicalFromHash(&c, XXH3_128bits(bytes, n));
    char want[33];
    for (int i = 0; i < 16; i++) snprintf(want + 2 * i, 3, "%02x", c.digest[i]);
    CHECK(!strcmp(hex, want), "reports the XXH3-128 of the bytes it wrote (%s)", hex);
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = (hlen << 8) | bytes[i];
    CHECK((8 + hlen) % 8 == 0, "pads the header so the data starts 8-byte aligned");
    free(bytes);

    hyp_st_file *f = NULL;
    rc = hyp_st_open(path, &f, &e);
    CHECK(rc == HYP_OK && f, "reads it back (%s)", e.msg);
    if (!f) return;
    CHECK(hyp_st_count(f) == 4, "finds 4 tensors");
    const hyp_st_tensor *t = hyp_st_find(f, "transformer.wte.weight");
    CHECK(t && t->dtype == HYP_ST_F32 && t->ndim == 2 && t->shape[0] == 2 && t->shape[1] == 3 &&
              t->nbytes == 24 && !memcmp(t->data, w, 24),
          "F32 [2, 3] tensor is bit-exact");
    CHECK(((uintptr_t)t->data % 4) == 0, "F32 data is 4-byte aligned in the mapping");
    t = hyp_st_find(f, "bf");
    CHECK(t && t->dtype == HYP_ST_BF16 && !memcmp(t->data, bf, 8), "BF16 tensor is bit-exact");
    t = hyp_st_find(f, "scalar");
    CHECK(t && t->ndim == 0 && t->nbytes == 4 && *(const int32_t *)t->data == -7,
          "scalar (shape []) round-trips");
    t = hyp_st_find(f, "empty \"quoted\"\n");
    CHECK(t && t->nbytes == 0 && t->shape[0] == 0 && t->shape[1] == 5,
          "zero-size tensor with an escaped name round-trips");
    CHECK(hyp_st_find(f, "nope") == NULL, "find of an absent name gives NULL");
    CHECK(hyp_st_meta_count(f) == 2 && !strcmp(hyp_st_meta_find(f, "format"), "pt") &&
              !strcmp(hyp_st_meta_find(f, "note"), "line\nbreak \"q\""),
          "metadata round-trips (with escapes)");
    float conv[4];
    rc = hyp_st_to_f32(f, hyp_st_find(f, "bf"), conv, &e);
    CHECK(rc == HYP_OK && conv[0] == 1.0f && conv[1] == -2.5f && conv[2] > 1e38f &&
              conv[3] > 0 && conv[3] < 1e-38f,
          "BF16 -> fp32 conversion (1, -2.5, inf, subnormal)");
    rc = hyp_st_to_f32(f, hyp_st_find(f, "scalar"), conv, &e);
    CHECK(rc == HYP_EINPUT && strstr(e.msg, "I32"), "to_f32 refuses I32 with a message");
    hyp_st_close(f);

    /* F16 conversion */
    uint16_t h[5] = {0x3c00, 0xc100, 0x7bff, 0x0001, 0xfc00};
    hyp_st_tensor th = {.name = "h", .dtype = HYP_ST_F16, .ndim = 1, .shape = {5}, .data = h};
    rc = hyp_st_write(path, &th, 1, NULL, 0, NULL, &e);
    CHECK(rc == HYP_OK, "overwrites an existing file atomically");
    rc = hyp_st_open(path, &f, &e);
    float hf[5] = {0};
    if (rc == HYP_OK) {
        hyp_st_to_f32(f, hyp_st_find(f, "h"), hf, &e);
        CHECK(hyp_st_count(f) == 1, "the overwritten file has only the new tensor");
        hyp_st_close(f);
    }
    CHECK(hf[0] == 1.0f && hf[1] == -2.5f && hf[2] == 65504.0f && hf[3] == 5.9604644775390625e-8f &&
              hf[4] < -1e38f,
          "F16 -> fp32 conversion (1, -2.5, 65504, smallest subnormal, -inf)");
    unlink(path);
}

/* The exact bytes safetensors.torch.save_file writes for {"b": f32[2], "a": f32[1], "c": u8[3]}
 * with metadata {"format": "pt"}: dtype-descending then name order, compact serde_json, space
 * padding to a multiple of 8. */
static void test_reference_layout(void) {
    char path[512];
    snprintf(path, sizeof path, "%s/ref.safetensors", g_dir);
    float b[2] = {1, 2}, a[1] = {3};
    uint8_t cc[3] = {4, 5, 6};
    hyp_st_tensor ts[3] = {
        {.name = "b", .dtype = HYP_ST_F32, .ndim = 1, .shape = {2}, .data = b},
        {.name = "c", .dtype = HYP_ST_U8, .ndim = 1, .shape = {3}, .data = cc},
        {.name = "a", .dtype = HYP_ST_F32, .ndim = 1, .shape = {1}, .data = a},
    };
    hyp_st_meta meta = {"format", "pt"};
    hyp_err e = {{0}};
    int rc = hyp_st_write(path, ts, 3, &meta, 1, NULL, &e);
    const char *json = "{\"__metadata__\":{\"format\":\"pt\"},"
                       "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
                       "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]},"
                       "\"c\":{\"dtype\":\"U8\",\"shape\":[3],\"data_offsets\":[12,15]}}";
    size_t jl = strlen(json), padded = (jl + 7) / 8 * 8, n = 0;
    unsigned char *bytes = read_all(path, &n);
    int same = rc == HYP_OK && bytes && n == 8 + padded + 15 && bytes[0] == padded &&
               !memcmp(bytes + 8, json, jl);
    for (size_t i = jl; same && i < padded; i++) same = bytes[8 + i] == ' ';
    same = same && !memcmp(bytes + 8 + padded, a, 4) && !memcmp(bytes + 8 + padded + 4, b, 8) &&
           !memcmp(bytes + 8 + padded + 12, cc, 3);
    CHECK(same, "writes the reference writer's exact bytes (layout, JSON, padding)");
    free(bytes);

    /* The reference's own doc example: an unpadded 60-byte header, I32 [2, 2]. */
    const char *doc = "{\"test\":{\"dtype\":\"I32\",\"shape\":[2,2],\"data_offsets\":[0,16]}}";
    write_raw(path, (uint64_t)-1, doc, strlen(doc), 16);
    hyp_st_file *f = NULL;
    rc = hyp_st_open(path, &f, &e);
    CHECK(rc == HYP_OK && hyp_st_count(f) == 1 && hyp_st_find(f, "test")->nbytes == 16,
          "reads the reference's documentation example (unpadded header)");
    hyp_st_close(f);
    unlink(path);
}

static void test_hostile(void) {
    char path[512];
    snprintf(path, sizeof path, "%s/hostile.safetensors", g_dir);
    const char *ok = "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}";

    write_raw(path, 100000, ok, strlen(ok), 8);
    expect_refused("a header length beyond the file", path, "header length says 100000");
    write_raw(path, 200000000ULL, ok, strlen(ok), 8);
    expect_refused("a header length over 100 MB", path, "100 MB");
    write_raw(path, (uint64_t)-1 - 1, ok, strlen(ok), 8);
    expect_refused("a header length near 2^64", path, "100 MB");
    FILE *fp = fopen(path, "wb");
    fwrite("abc", 1, 3, fp);
    fclose(fp);
    expect_refused("a 3-byte file", path, "too short");
    fp = fopen(path, "wb");
    fclose(fp);
    expect_refused("an empty file", path, "too short");
    write_raw(path, (uint64_t)-1, "{\"a\" \0 :1}", 10, 0);
    expect_refused("a NUL byte inside the header", path, "NUL byte");

    hostile("bad JSON", "{\"a\":{\"dtype\":\"F32\",", 0, "not valid JSON");
    hostile("trailing junk after the JSON", "{} x", 0, "not valid JSON");
    hostile("a JSON array header", "[1, 2, 3]", 0, "not an object");
    hostile("a tensor entry that is not an object", "{\"a\":5}", 0, "not an object");
    hostile("an unknown dtype", "{\"a\":{\"dtype\":\"Q4\",\"shape\":[2],\"data_offsets\":[0,8]}}",
            8, "unknown dtype \"Q4\"");
    hostile("a sub-byte dtype", "{\"a\":{\"dtype\":\"F4\",\"shape\":[2],\"data_offsets\":[0,1]}}",
            1, "not supported");
    hostile("a missing dtype", "{\"a\":{\"shape\":[2],\"data_offsets\":[0,8]}}", 8, "dtype");
    hostile("a size that does not match the shape",
            "{\"a\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}", 8,
            "needs 12 bytes");
    hostile("a negative dimension",
            "{\"a\":{\"dtype\":\"F32\",\"shape\":[-2],\"data_offsets\":[0,8]}}", 8,
            "shape entry 0");
    hostile("a fractional dimension",
            "{\"a\":{\"dtype\":\"F32\",\"shape\":[2.5],\"data_offsets\":[0,8]}}", 8,
            "shape entry 0");
    hostile("a shape whose product overflows",
            "{\"a\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296],\"data_offsets\":[0,8]}}",
            8, "overflows");
    /* numel 2^62 is below the shape limit, but 2^62 * 4 bytes wraps to 0 = the span (fuzz_safetensors) */
    hostile("a shape whose byte size wraps past 2^64",
            "{\"a\":{\"dtype\":\"F32\",\"shape\":[2147483648,2147483648],\"data_offsets\":[0,0]}}", 0,
            "more than 2^64 bytes");
    hostile("nine dimensions",
            "{\"a\":{\"dtype\":\"U8\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,1]}}", 1,
            "9 dimensions");
    hostile("offsets running past the data",
            "{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}", 8, "run past");
    hostile("end before begin",
            "{\"a\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[8,0]}}", 8, "end before");
    hostile("three data_offsets",
            "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8,8]}}", 8,
            "data_offsets");
    hostile("overlapping tensors",
            "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
            "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}",
            12, "overlap");
    hostile("two tensors sharing bytes",
            "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
            "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}",
            8, "overlap");
    hostile("a hole between tensors",
            "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
            "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,12]}}",
            12, "belong to no tensor");
    hostile("trailing bytes after the last tensor",
            "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 8, "trailing");
    hostile("duplicate tensor names",
            "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
            "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
            8, "appears twice");
    hostile("a non-string metadata value", "{\"__metadata__\":{\"k\":1}}", 0, "not a string");
    hostile("metadata that is not an object", "{\"__metadata__\":[]}", 0, "not an object");
    hostile("two __metadata__ entries", "{\"__metadata__\":{},\"__metadata__\":{}}", 0,
            "appears twice");

    snprintf(path, sizeof path, "%s/does-not-exist.safetensors", g_dir);
    expect_refused("a missing file", path, "cannot open");
    expect_refused("a directory", g_dir, "not a regular file");

    /* an empty, valid file: {} and no data */
    snprintf(path, sizeof path, "%s/hostile.safetensors", g_dir);
    write_raw(path, (uint64_t)-1, "{}      ", 8, 0);
    hyp_st_file *f = NULL;
    hyp_err e = {{0}};
    CHECK(hyp_st_open(path, &f, &e) == HYP_OK && hyp_st_count(f) == 0,
          "accepts a file with no tensors");
    hyp_st_close(f);
    unlink(path);
}

static void test_writer_refusals(void) {
    char path[512];
    snprintf(path, sizeof path, "%s/w.safetensors", g_dir);
    float x[2] = {0};
    hyp_err e = {{0}};
    hyp_st_tensor dup[2] = {{.name = "x", .dtype = HYP_ST_F32, .ndim = 1, .shape = {2}, .data = x},
                            {.name = "x", .dtype = HYP_ST_F16, .ndim = 1, .shape = {2}, .data = x}};
    int rc = hyp_st_write(path, dup, 2, NULL, 0, NULL, &e);
    CHECK(rc == HYP_EINPUT && strstr(e.msg, "'x' given twice"), "writer refuses duplicate names "
          "(%s)", e.msg);
    hyp_st_tensor bad = {.name = "__metadata__", .dtype = HYP_ST_F32, .ndim = 1, .shape = {2},
                         .data = x};
    rc = hyp_st_write(path, &bad, 1, NULL, 0, NULL, &e);
    CHECK(rc == HYP_EINPUT, "writer refuses the reserved name __metadata__");
    hyp_st_tensor nodata = {.name = "y", .dtype = HYP_ST_F32, .ndim = 1, .shape = {2}};
    rc = hyp_st_write(path, &nodata, 1, NULL, 0, NULL, &e);
    CHECK(rc == HYP_EINPUT && strstr(e.msg, "no data"), "writer refuses a NULL data pointer");
    hyp_st_tensor neg = {.name = "y", .dtype = HYP_ST_F32, .ndim = 1, .shape = {-1}, .data = x};
    rc = hyp_st_write(path, &neg, 1, NULL, 0, NULL, &e);
    CHECK(rc == HYP_EINPUT && strstr(e.msg, "invalid shape"), "writer refuses a negative dim");
    hyp_st_meta m2[2] = {{"k", "1"}, {"k", "2"}};
    rc = hyp_st_write(path, dup, 1, m2, 2, NULL, &e);
    CHECK(rc == HYP_EINPUT && strstr(e.msg, "given twice"), "writer refuses duplicate metadata");
    CHECK(count_entries(g_dir) == 0, "refused writes leave no file behind");
    char nodir[600];
    snprintf(nodir, sizeof nodir, "%s/no/such/dir/w.safetensors", g_dir);
    rc = hyp_st_write(nodir, dup, 1, NULL, 0, NULL, &e);
    CHECK(rc == HYP_EINPUT && strstr(e.msg, nodir), "writer into a missing directory: HYP_EINPUT "
          "naming the path");
}

/* Files made by the Python reference (tests/fixtures/NAME.safetensors) when they exist. */
static void test_fixtures(void) {
    glob_t g;
    char pat[1024];
    snprintf(pat, sizeof pat, "%s/tests/fixtures/*.safetensors", HYP_SOURCE_DIR);
    if (glob(pat, 0, NULL, &g) != 0) {
        printf("skip no tests/fixtures/*.safetensors yet\n");
        return;
    }
    for (size_t i = 0; i < g.gl_pathc; i++) {
        hyp_st_file *f = NULL;
        hyp_err e = {{0}};
        int rc = hyp_st_open(g.gl_pathv[i], &f, &e);
        CHECK(rc == HYP_OK, "reads reference fixture %s (%d tensors) %s", g.gl_pathv[i],
              f ? hyp_st_count(f) : -1, rc ? e.msg : "");
        hyp_st_close(f);
    }
    globfree(&g);
}

int main(void) {
    snprintf(g_dir, sizeof g_dir, "/tmp/hyp_test_st_XXXXXX");
    if (!mkdtemp(g_dir)) {
        perror("mkdtemp");
        return 1;
    }
    test_round_trip();
    test_reference_layout();
    test_hostile();
    test_writer_refusals();
    test_fixtures();
    rm_rf(g_dir);
    printf("%d passed, %d failed\n", g_pass, g_fail);
    return g_fail ? 1 : 0;
}
