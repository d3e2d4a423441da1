/* fuzz_ckpt_fixup.h — rewrites the checksums a checkpoint's state.json records ("files" and the
 * v2180 "delta.files": bytes + xxh3_128) to those of the files the fuzz input actually holds, so
 * that mutated safetensors, shards and zstd frames reach the code behind the checksum check (an
 * attacker computes checksums too). Never: changes anything else in state.json. */
#ifndef HYP_FUZZ_CKPT_FIXUP_H
#define HYP_FUZZ_CKPT_FIXUP_H

#include <cjson/cJSON.h>
#include <xxhash.h>

#include "fsio.h"

/* dir/name's bytes and xxh3-128 into rec (an object); nothing when the file is absent. */
static void fz_fix_rec(const char *dir, const char *name, cJSON *rec) {
    if (!cJSON_IsObject(rec) || strchr(name, '/')) return;
    char p[900], hex[33];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    int fd = open(p, O_RDONLY);
    if (fd < 0) return;
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) { close(fd); return; }
    size_t n = (size_t)st.st_size;
    uint8_t *b = malloc(n + 1);
    if (!b || (n && hyp_fs_read_full(fd, b, n) != (long long)n)) { free(b); close(fd); return; }
    close(fd);
    XXH128_canonical_t c;
    XXH128_canonicalFromHash(&c, XXH3_128bits(b, n));
    hyp_fs_hex(c.digest, 16, hex);
    free(b);
    cJSON_DeleteItemFromObjectCaseSensitive(rec, "bytes");
    cJSON_DeleteItemFromObjectCaseSensitive(rec, "xxh3_128");
    cJSON_AddNumberToObject(rec, "bytes", (double)n);
    cJSON_AddStringToObject(rec, "xxh3_128", hex);
}

/* Fixes dir/state.json in place (left as it is when it is no JSON object). full = 0: only the
 * delta records (the full files' sums then check the rebuilt files, as they should). */
static void fz_fix_state(const char *dir, int full) {
    char p[900];
    snprintf(p, sizeof p, "%s/state.json", dir);
    char *txt = NULL;
    hyp_err e;
    if (hyp_fs_read_small(p, 1 << 20, &txt, NULL, &e)) return;
    cJSON *j = cJSON_Parse(txt);
    free(txt);
    if (!cJSON_IsObject(j)) { cJSON_Delete(j); return; }
    cJSON *rec, *files = cJSON_GetObjectItemCaseSensitive(j, "files");
    if (full && cJSON_IsObject(files)) cJSON_ArrayForEach(rec, files) if (rec->string) fz_fix_rec(dir, rec->string, rec);
    cJSON *d = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(j, "delta"), "files");
    if (cJSON_IsObject(d)) cJSON_ArrayForEach(rec, d) if (rec->string) fz_fix_rec(dir, rec->string, rec);
    char *out = cJSON_PrintUnformatted(j);
    cJSON_Delete(j);
    if (!out) return;
    int fd = open(p, O_WRONLY | O_TRUNC);
    if (fd >= 0) {
        if (write(fd, out, strlen(out)) < 0) perror(p);
        close(fd);
    }
    free(out);
}

#endif
