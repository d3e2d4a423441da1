/* ckpt_delta.c — v2180 XOR-delta + zstd checkpoints (ckpt_delta.h). Whole files in memory: a
 * conversion holds the full file, the base's and the compressed delta at once. Never: chains of
 * deltas, touching the base. */
#include "ckpt_delta.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>
#include <zstd.h>

#include "fsio.h"

#define PCAP 4352
#define MAGIC "HYPXDLT1"
#define STATE_MAX (1u << 20)

/* snprintf(out, PCAP, fmt, a, b) — a path; truncation only empties nothing the caller relies on,
 * as every path here is under the caller's checkpoint directory, which fits (ckpt.c checks). */
static void pj(char *out, const char *fmt, const char *a, const char *b) {
    int n = snprintf(out, PCAP, fmt, a, b);
    if (n < 0 || n >= PCAP) out[0] = 0; /* "" opens nothing: the caller reports the failure */
}

static const char *const DELTA_FILES[] = {"model.safetensors", "optimizer.safetensors"};

static int read_all(const char *path, unsigned char **out, size_t *n, hyp_err *e) {
    *out = NULL, *n = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0) {
        int err = errno;
        if (fd >= 0) close(fd);
        return hyp_fail(e, HYP_EINPUT, "%s: cannot read: %s — the checkpoint is incomplete; resume from an earlier one", path, strerror(err));
    }
    unsigned char *b = malloc((size_t)st.st_size + 1);
    long long got = b ? hyp_fs_read_full(fd, b, (size_t)st.st_size) : -1;
    close(fd);
    if (got != (long long)st.st_size) {
        free(b);
        return hyp_fail(e, HYP_EFAIL, "%s: cannot read %lld bytes", path, (long long)st.st_size);
    }
    *out = b, *n = (size_t)st.st_size;
    return HYP_OK;
}

static void hex128(const void *b, size_t n, char out[33]) {
    XXH128_canonical_t c;
    XXH128_canonicalFromHash(&c, XXH3_128bits(b, n));
    hyp_fs_hex(c.digest, 16, out);
}

static cJSON *read_state(const char *step_dir, hyp_err *e) {
    char p[PCAP], *txt = NULL;
    pj(p, "%s/state.json", step_dir, "");
    hyp_err tmp;
    if (hyp_fs_read_small(p, STATE_MAX, &txt, NULL, e ? e : &tmp)) return NULL;
    cJSON *j = cJSON_Parse(txt);
    free(txt);
    if (!j && e) hyp_fail(e, HYP_EINPUT, "%s: not valid JSON — the checkpoint is damaged", p);
    return j;
}

/* Byte planes: the four bytes of each 32-bit word grouped (all first bytes, then all second...),
 * the tail (n % 4) kept at the end. The XOR of two nearby floats is zero in its sign/exponent
 * byte and often in its high mantissa byte: grouped, those zeros are long runs zstd squeezes. */
static void to_planes(const unsigned char *in, unsigned char *out, size_t n) {
    size_t w = n / 4;
    for (size_t i = 0; i < w; i++)
        for (int k = 0; k < 4; k++) out[(size_t)k * w + i] = in[4 * i + (size_t)k];
    memcpy(out + 4 * w, in + 4 * w, n - 4 * w);
}

static void from_planes(const unsigned char *in, unsigned char *out, size_t n) {
    size_t w = n / 4;
    for (size_t i = 0; i < w; i++)
        for (int k = 0; k < 4; k++) out[4 * i + (size_t)k] = in[(size_t)k * w + i];
    memcpy(out + 4 * w, in + 4 * w, n - 4 * w);
}

static void put_u64(unsigned char *p, uint64_t v) {
    for (int i = 0; i < 8; i++) p[i] = (unsigned char)(v >> (8 * i));
}

static uint64_t get_u64(const unsigned char *p) {
    uint64_t v = 0;
    for (int i = 0; i < 8; i++) v |= (uint64_t)p[i] << (8 * i);
    return v;
}

void hyp_ckpt_delta_base(const char *step_dir, char *base, size_t cap) {
    base[0] = 0;
    cJSON *j = read_state(step_dir, NULL);
    const cJSON *b = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(j, "delta"), "base");
    if (cJSON_IsString(b) && strlen(b->valuestring) < cap) snprintf(base, cap, "%s", b->valuestring);
    cJSON_Delete(j);
}

int hyp_ckpt_delta_make(const char *dir, const char *step, const char *base, int level, hyp_ckpt_delta_stats *stats,
                        hyp_err *e) {
    char sd[PCAP], bd[PCAP], p[PCAP], q[PCAP];
    pj(sd, "%s/%s", dir, step);
    pj(bd, "%s/%s", dir, base);
    if (stats) memset(stats, 0, sizeof *stats);
    if (!strcmp(step, base)) return hyp_fail(e, HYP_EINPUT, "%s: a checkpoint cannot be a delta against itself", sd);
    cJSON *j = read_state(sd, e), *jb = j ? read_state(bd, e) : NULL;
    if (!j || !jb) {
        cJSON_Delete(j);
        return HYP_EINPUT;
    }
    int rc = HYP_OK;
    if (cJSON_GetObjectItemCaseSensitive(j, "delta") || cJSON_GetObjectItemCaseSensitive(j, "layout") ||
        cJSON_GetObjectItemCaseSensitive(jb, "delta") || cJSON_GetObjectItemCaseSensitive(jb, "layout"))
        rc = hyp_fail(e, HYP_EINPUT, "%s: deltas are made between two full, unsharded checkpoints (base %s)", sd, base);
    cJSON *files = cJSON_GetObjectItemCaseSensitive(j, "files");
    cJSON *delta = cJSON_CreateObject(), *dfiles = delta ? cJSON_AddObjectToObject(delta, "files") : NULL;
    if (!rc && (!delta || !dfiles || !cJSON_AddStringToObject(delta, "base", base)))
        rc = hyp_fail(e, HYP_EFAIL, "%s: out of memory", sd);
    int done[2] = {0, 0};
    for (int f = 0; f < 2 && !rc; f++) {
        if (!cJSON_GetObjectItemCaseSensitive(files, DELTA_FILES[f])) continue;
        unsigned char *a = NULL, *b = NULL, *z = NULL;
        size_t na = 0, nb = 0;
        pj(p, "%s/%s", sd, DELTA_FILES[f]);
        pj(q, "%s/%s", bd, DELTA_FILES[f]);
        if (!(rc = read_all(p, &a, &na, e)) && !(rc = read_all(q, &b, &nb, e))) {
            size_t m = na < nb ? na : nb;
            for (size_t i = 0; i < m; i++) a[i] ^= b[i]; /* past the base's end: the bytes themselves */
            size_t cap = ZSTD_compressBound(na) + 24;
            z = malloc(cap);
            unsigned char *pl = z ? realloc(b, na + 1) : NULL; /* the base's buffer, reused for the planes */
            if (pl) b = pl, to_planes(a, b, na);
            size_t zn = z && pl ? ZSTD_compress(z + 24, cap - 24, b, na, level) : 0;
            if (!z || !pl || ZSTD_isError(zn)) {
                rc = hyp_fail(e, HYP_EFAIL, "%s: zstd: %s", p, z && pl ? ZSTD_getErrorName(zn) : "out of memory");
            } else {
                memcpy(z, MAGIC, 8);
                put_u64(z + 8, na), put_u64(z + 16, nb);
                char hx[33], name[64];
                hex128(z, zn + 24, hx);
                snprintf(name, sizeof name, "%s.zdelta", DELTA_FILES[f]);
                pj(q, "%s/%s", sd, name);
                if (!(rc = hyp_fs_write_atomic(q, z, zn + 24, e))) {
                    cJSON *rec = cJSON_AddObjectToObject(dfiles, name);
                    if (!rec || !cJSON_AddNumberToObject(rec, "bytes", (double)(zn + 24)) ||
                        !cJSON_AddStringToObject(rec, "xxh3_128", hx))
                        rc = hyp_fail(e, HYP_EFAIL, "%s: out of memory", sd);
                    done[f] = 1;
                    if (stats) stats->full_bytes += na, stats->delta_bytes += zn + 24;
                }
            }
        }
        free(a), free(b), free(z);
    }
    if (!rc) { /* the state names the deltas: from now on the step is a delta checkpoint */
        cJSON_AddItemToObject(j, "delta", delta);
        delta = NULL;
        char *txt = cJSON_Print(j);
        pj(p, "%s/state.json", sd, "");
        rc = txt ? hyp_fs_write_atomic(p, txt, strlen(txt), e) : hyp_fail(e, HYP_EFAIL, "%s: out of memory", sd);
        free(txt);
    }
    for (int f = 0; f < 2; f++) {
        int n = snprintf(p, sizeof p, "%s/%s%s", sd, DELTA_FILES[f], rc ? ".zdelta" : "");
        if (n > 0 && (size_t)n < sizeof p && done[f]) (void)unlink(p); /* success: the full file goes; failure: the stray delta */
    }
    if (!rc) (void)hyp_fs_fsync_dir(sd);
    cJSON_Delete(delta);
    cJSON_Delete(j);
    cJSON_Delete(jb);
    return rc;
}

void hyp_ckpt_delta_cleanup(const char *restored) {
    if (!restored || !restored[0]) return;
    static const char *const names[] = {"model.safetensors", "optimizer.safetensors", "train_state.safetensors",
                                        "state.json"};
    char p[PCAP];
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
        pj(p, "%s/%s", restored, names[i]);
        (void)unlink(p);
    }
    (void)rmdir(restored);
}

/* Copies src to dst (a small file: state.json, train_state.safetensors). */
static int copy_file(const char *src, const char *dst, hyp_err *e) {
    unsigned char *b;
    size_t n;
    int rc = read_all(src, &b, &n, e);
    if (rc) return rc;
    int fd = open(dst, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0 || hyp_fs_write_all(fd, b, n) != 0) rc = hyp_fail(e, HYP_EFAIL, "%s: cannot write: %s", dst, strerror(errno));
    if (fd >= 0) close(fd);
    free(b);
    return rc;
}

int hyp_ckpt_delta_restore(const char *step_dir, char *out, size_t cap, hyp_err *e) {
    out[0] = 0;
    cJSON *j = read_state(step_dir, NULL);
    const cJSON *delta = cJSON_GetObjectItemCaseSensitive(j, "delta");
    if (!delta) { /* a full checkpoint (or no state: the loader reports that) */
        cJSON_Delete(j);
        return HYP_OK;
    }
    const cJSON *base = cJSON_GetObjectItemCaseSensitive(delta, "base");
    const cJSON *dfiles = cJSON_GetObjectItemCaseSensitive(delta, "files");
    char parent[PCAP], bd[PCAP], p[PCAP], q[PCAP], tmp[PCAP];
    hyp_fs_dirname(step_dir, parent, sizeof parent);
    int rc = HYP_OK;
    if (!cJSON_IsString(base) || !cJSON_IsObject(dfiles) || strchr(base->valuestring, '/')) {
        cJSON_Delete(j);
        return hyp_fail(e, HYP_EINPUT, "%s/state.json: field 'delta' is malformed — the checkpoint is damaged; resume from an earlier one", step_dir);
    }
    pj(bd, "%s/%s", parent, base->valuestring);
    char bb[64];
    hyp_ckpt_delta_base(bd, bb, sizeof bb);
    if (!hyp_fs_is_dir(bd) || bb[0]) {
        rc = hyp_fail(e, HYP_EINPUT, "%s: an incremental checkpoint (v2180) whose full base %s is missing — it was deleted by hand; resume from a full checkpoint",
                      step_dir, bd);
        cJSON_Delete(j);
        return rc;
    }
    pj(tmp, "%s/.tmp-step_restore-XXXXXX", parent, "");
    if (!mkdtemp(tmp)) {
        int err = errno;
        cJSON_Delete(j);
        return hyp_fail(e, hyp_fs_errcode(err), "%s: cannot make a temp directory: %s", tmp, strerror(err));
    }
    for (int f = 0; f < 2 && !rc; f++) {
        char name[64];
        snprintf(name, sizeof name, "%s.zdelta", DELTA_FILES[f]);
        const cJSON *rec = cJSON_GetObjectItemCaseSensitive(dfiles, name);
        if (!rec) continue;
        const cJSON *hx = cJSON_GetObjectItemCaseSensitive(rec, "xxh3_128");
        unsigned char *z = NULL, *b = NULL, *a = NULL, *pl = NULL;
        size_t zn = 0, nb = 0;
        pj(p, "%s/%s", step_dir, name);
        pj(q, "%s/%s", bd, DELTA_FILES[f]);
        if (!(rc = read_all(p, &z, &zn, e)) && !(rc = read_all(q, &b, &nb, e))) {
            char have[33];
            hex128(z, zn, have);
            uint64_t na = zn >= 24 ? get_u64(z + 8) : 0;
            if (zn < 24 || memcmp(z, MAGIC, 8) || !cJSON_IsString(hx) || strcmp(have, hx->valuestring))
                rc = hyp_fail(e, HYP_EINPUT, "%s: checksum mismatch or not a delta file — the checkpoint is corrupt; resume from an earlier one", p);
            else if (get_u64(z + 16) != nb)
                rc = hyp_fail(e, HYP_EINPUT, "%s: the delta was made against a %llu-byte %s, but %s is %zu bytes — the base was replaced; resume from a full checkpoint",
                              p, (unsigned long long)get_u64(z + 16), DELTA_FILES[f], q, nb);
            else if (!(a = malloc(na + 1)) || !(pl = malloc(na + 1)))
                rc = hyp_fail(e, HYP_EFAIL, "%s: out of memory (%llu bytes)", p, (unsigned long long)na);
            else {
                size_t got = ZSTD_decompress(pl, na, z + 24, zn - 24);
                if (!ZSTD_isError(got) && got == na) from_planes(pl, a, na);
                if (ZSTD_isError(got) || got != na)
                    rc = hyp_fail(e, HYP_EINPUT, "%s: zstd: %s — the checkpoint is corrupt", p,
                                  ZSTD_isError(got) ? ZSTD_getErrorName(got) : "short frame");
                else {
                    size_t m = na < nb ? na : nb;
                    for (size_t i = 0; i < m; i++) a[i] ^= b[i];
                    pj(q, "%s/%s", tmp, DELTA_FILES[f]);
                    int fd = open(q, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
                    if (fd < 0 || hyp_fs_write_all(fd, a, na) != 0)
                        rc = hyp_fail(e, HYP_EFAIL, "%s: cannot write: %s", q, strerror(errno));
                    if (fd >= 0) close(fd);
                }
            }
        }
        free(z), free(b), free(a), free(pl);
    }
    static const char *const copied[] = {"state.json", "train_state.safetensors"};
    for (int i = 0; i < 2 && !rc; i++) {
        pj(p, "%s/%s", step_dir, copied[i]);
        pj(q, "%s/%s", tmp, copied[i]);
        if (hyp_fs_exists(p)) rc = copy_file(p, q, e);
    }
    cJSON_Delete(j);
    if (rc) hyp_ckpt_delta_cleanup(tmp);
    else snprintf(out, cap, "%s", tmp);
    return rc;
}

int hyp_ckpt_save_inc(const char *dir, const hyp_ckpt_tensor *params, hyp_ckpt_tensor *const *states, int n_states,
                      int n, const hyp_ckpt_aux *aux, int n_aux, const hyp_ckpt_state *st, int keep,
                      const char *delta_base, hyp_ckpt_delta_stats *stats, hyp_err *e) {
    if (stats) memset(stats, 0, sizeof *stats);
    if (!delta_base || !delta_base[0]) return hyp_ckpt_save_aux(dir, params, states, n_states, n, aux, n_aux, st, keep, e);
    int rc = hyp_ckpt_save_aux(dir, params, states, n_states, n, aux, n_aux, st, 0, e);
    char step[64];
    snprintf(step, sizeof step, "step_%08llu", (unsigned long long)st->step);
    if (!rc) rc = hyp_ckpt_delta_make(dir, step, delta_base, 3, stats, e);
    hyp_ckpt_prune(dir, keep);
    return rc;
}
