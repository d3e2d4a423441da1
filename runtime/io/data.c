/* data.c — the shard writer (hyp_data_prepare: the byte tokenizer, or a BPE one from
 * tokenizer.c through encode_document), the shard verifier, and the batch loader. Formats,
 * sampling and guarantees are documented in data.h. */
#include "data.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include "fsio.h"
#include "rng.h"
#include "tokenizer.h"

#define HEADER_BYTES (HYP_SHARD_HEADER_INTS * 4)
#define META_MAX_BYTES (64u << 20)

/* out = dir + "/" + name. Callers size out for their paths; an over-long result becomes ""
 * (which then fails to open with a clear message) rather than a silently truncated path. */
static void join(char *out, size_t cap, const char *dir, const char *name) {
    size_t n = strlen(dir), m = strlen(name);
    int slash = !(n > 0 && dir[n - 1] == '/');
    if (n + (size_t)slash + m + 1 > cap) {
        if (cap) out[0] = '\0';
        return;
    }
    memcpy(out, dir, n);
    if (slash) out[n] = '/';
    memcpy(out + n + (size_t)slash, name, m + 1);
}

static uint32_t rd32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static void wr32(uint8_t *p, uint32_t v) {
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
    p[2] = (uint8_t)(v >> 16);
    p[3] = (uint8_t)(v >> 24);
}

/* A file of split `split` when its name ends in ".bin" and contains split as a '_'-separated
 * word: train_000000.bin, fineweb_train_000001.bin, tiny_shakespeare_val.bin. */
static int shard_name_matches(const char *name, const char *split) {
    size_t n = strlen(name), s = strlen(split);
    if (name[0] == '.' || n < 4 || strcmp(name + n - 4, ".bin") != 0) return 0;
    for (const char *p = strstr(name, split); p; p = strstr(p + 1, split)) {
        int left = p == name || p[-1] == '_';
        int right = p[s] == '_' || (p + s == name + n - 4);
        if (left && right) return 1;
    }
    return 0;
}

/* What hyp_data_prepare writes: meta.json, train_NNNNNN.bin, val_NNNNNN.bin. */
static int is_prepare_output(const char *name) {
    if (!strcmp(name, "meta.json")) return 1;
    if (!strcmp(name, HYP_DATA_TOK_JSON) || !strcmp(name, HYP_DATA_TOK_TIKTOKEN)) return 1; /* v2125 */
    const char *p = NULL;
    if (!strncmp(name, "train_", 6)) p = name + 6;
    else if (!strncmp(name, "val_", 4)) p = name + 4;
    if (!p) return 0;
    int digits = 0;
    while (p[digits] >= '0' && p[digits] <= '9') digits++;
    return digits >= 6 && !strcmp(p + digits, ".bin");
}

/* ========================================================================================== */
/* hyp_data_prepare                                                                            */

void hyp_data_opts_default(hyp_data_opts *o) {
    o->val_fraction = 0.05;
    o->shard_tokens = 100000000ULL;
    o->vocab_size = 256;
    o->overwrite = 0;
    o->tokenizer = NULL;
}

typedef struct {
    char path[4096];     /* the name the user gave ("-" shows as "<stdin>") */
    char open_path[4096];
    uint64_t bytes;
} source;

typedef struct {
    char name[64];
    const char *split;
    uint64_t tokens;
    char xxh3[17];
} shard_info;

/* Streams tokens into consecutive shards of one split. */
typedef struct {
    const char *dir;     /* the temp dir being built */
    const char *split;
    uint64_t split_left; /* tokens still to write in this split */
    uint64_t shard_left; /* tokens still to write in the open shard */
    uint64_t shard_tokens;
    int tokbytes;
    int index;
    int fd;
    char path[4200];
    XXH3_state_t *xs;
    shard_info *infos;
    int *n_infos;
} shard_writer;

static int sw_open_shard(shard_writer *w, hyp_err *e) {
    uint64_t n = w->split_left < w->shard_tokens ? w->split_left : w->shard_tokens;
    shard_info *si = &w->infos[*w->n_infos];
    snprintf(si->name, sizeof si->name, "%s_%06d.bin", w->split, w->index++);
    si->split = w->split;
    si->tokens = n;
    join(w->path, sizeof w->path, w->dir, si->name);
    w->fd = open(w->path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (w->fd < 0) {
        int err = errno;
        return hyp_fail(e, hyp_fs_errcode(err), "%s: cannot create: %s — check that the output "
                        "directory is writable", w->path, strerror(err));
    }
    uint8_t hdr[HEADER_BYTES] = {0};
    wr32(hdr + 0, HYP_SHARD_MAGIC);
    wr32(hdr + 4, w->tokbytes == 2 ? 1 : 2);
    wr32(hdr + 8, (uint32_t)n);
    XXH3_64bits_reset(w->xs);
    XXH3_64bits_update(w->xs, hdr, sizeof hdr);
    if (hyp_fs_write_all(w->fd, hdr, sizeof hdr) != 0) {
        int err = errno;
        return hyp_fail(e, hyp_fs_errcode(err), "%s: write failed: %s — check free disk space",
                        w->path, strerror(err));
    }
    w->shard_left = n;
    (*w->n_infos)++;
    return HYP_OK;
}

static int sw_close_shard(shard_writer *w, hyp_err *e) {
    shard_info *si = &w->infos[*w->n_infos - 1];
    XXH64_hash_t h = XXH3_64bits_digest(w->xs);
    snprintf(si->xxh3, sizeof si->xxh3, "%016llx", (unsigned long long)h);
    int rc = fsync(w->fd);
    int err = errno;
    if (close(w->fd) != 0 && rc == 0) {
        rc = -1;
        err = errno;
    }
    w->fd = -1;
    if (rc != 0)
        return hyp_fail(e, HYP_EFAIL, "%s: fsync/close failed: %s — check free disk space",
                        w->path, strerror(err));
    return HYP_OK;
}

/* Writes n tokens (already encoded, tokbytes each) — the split must have room for them. */
static int sw_put(shard_writer *w, const uint8_t *enc, uint64_t n, hyp_err *e) {
    while (n > 0) {
        if (w->fd < 0) {
            int rc = sw_open_shard(w, e);
            if (rc != HYP_OK) return rc;
        }
        uint64_t k = n < w->shard_left ? n : w->shard_left;
        size_t nb = (size_t)k * (size_t)w->tokbytes;
        XXH3_64bits_update(w->xs, enc, nb);
        if (hyp_fs_write_all(w->fd, enc, nb) != 0) {
            int err = errno;
            return hyp_fail(e, hyp_fs_errcode(err), "%s: write failed: %s — check free disk "
                            "space", w->path, strerror(err));
        }
        enc += nb;
        n -= k;
        w->shard_left -= k;
        w->split_left -= k;
        if (w->shard_left == 0) {
            int rc = sw_close_shard(w, e);
            if (rc != HYP_OK) return rc;
        }
    }
    return HYP_OK;
}

/* Copies stdin into dir/.stdin so it can be sized and streamed like a file. */
static int spool_stdin(const char *dir, source *s, hyp_err *e) {
    join(s->open_path, sizeof s->open_path, dir, ".stdin");
    int fd = open(s->open_path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0) {
        int err = errno;
        return hyp_fail(e, hyp_fs_errcode(err), "%s: cannot create: %s", s->open_path,
                        strerror(err));
    }
    enum { BUF = 1 << 16 };
    uint8_t *buf = malloc(BUF);
    if (!buf) {
        close(fd);
        return hyp_fail(e, HYP_EFAIL, "<stdin>: out of memory");
    }
    for (;;) {
        ssize_t r = read(STDIN_FILENO, buf, BUF);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) {
            int err = errno;
            close(fd);
            free(buf);
            return hyp_fail(e, HYP_EINPUT, "<stdin>: read failed: %s — pipe text into gen data "
                            "or give a file", strerror(err));
        }
        if (r == 0) break;
        if (hyp_fs_write_all(fd, buf, (size_t)r) != 0) {
            int err = errno;
            close(fd);
            free(buf);
            return hyp_fail(e, HYP_EFAIL, "%s: write failed: %s", s->open_path, strerror(err));
        }
    }
    free(buf);
    if (close(fd) != 0)
        return hyp_fail(e, HYP_EFAIL, "%s: close failed: %s", s->open_path, strerror(errno));
    return HYP_OK;
}

static int stat_source(source *s, hyp_err *e) {
    struct stat st;
    if (stat(s->open_path, &st) != 0) {
        int err = errno;
        if (err == ENOENT)
            return hyp_fail(e, HYP_EINPUT, "%s: no such file — check the input path", s->path);
        return hyp_fail(e, hyp_fs_errcode(err), "%s: cannot read: %s — check the input path",
                        s->path, strerror(err));
    }
    if (S_ISDIR(st.st_mode))
        return hyp_fail(e, HYP_EINPUT, "%s: is a directory — give the text files inside it",
                        s->path);
    if (!S_ISREG(st.st_mode))
        return hyp_fail(e, HYP_EINPUT, "%s: not a regular file — give plain text files (or \"-\" "
                        "for stdin)", s->path);
    if (st.st_size == 0)
        return hyp_fail(e, HYP_EINPUT, "%s: input is empty — give a non-empty text file or drop "
                        "it from the list", s->path);
    s->bytes = (uint64_t)st.st_size;
    return HYP_OK;
}

/* meta.json for the directory being built. */
static int write_meta(const char *tmpdir, const hyp_data_opts *o, const hyp_tok *tok,
                      const char *tok_file, int tokbytes, const source *src, int n_src,
                      const shard_info *sh, int n_sh, uint64_t n_train, uint64_t n_val,
                      hyp_err *e) {
    cJSON *m = cJSON_CreateObject();
    cJSON *srcs = cJSON_CreateArray(), *shards = cJSON_CreateArray();
    if (!m || !srcs || !shards) {
        cJSON_Delete(m);
        cJSON_Delete(srcs);
        cJSON_Delete(shards);
        return hyp_fail(e, HYP_EFAIL, "meta.json: out of memory");
    }
    cJSON_AddStringToObject(m, "format", "hyperion-data");
    cJSON_AddNumberToObject(m, "format_version", 1);
    cJSON_AddStringToObject(m, "tokenizer", hyp_tok_kind(tok));
    cJSON_AddNumberToObject(m, "vocab_size", o->vocab_size);
    hyp_data_tok_meta(m, tok, o->tokenizer, tok_file); /* v2125: tokenizer_*, eot_id */
    cJSON_AddNumberToObject(m, "shard_version", tokbytes == 2 ? 1 : 2);
    cJSON_AddStringToObject(m, "token_dtype", tokbytes == 2 ? "uint16" : "uint32");
    cJSON_AddNumberToObject(m, "val_fraction", o->val_fraction);
    cJSON_AddNumberToObject(m, "shard_tokens", (double)o->shard_tokens);
    cJSON_AddNumberToObject(m, "train_tokens", (double)n_train);
    cJSON_AddNumberToObject(m, "val_tokens", (double)n_val);
    cJSON_AddStringToObject(m, "checksum", "xxh3_64 of the whole shard file, hex");
    for (int i = 0; i < n_src; i++) {
        cJSON *s = cJSON_CreateObject();
        cJSON_AddStringToObject(s, "path", src[i].path);
        cJSON_AddNumberToObject(s, "bytes", (double)src[i].bytes);
        cJSON_AddItemToArray(srcs, s);
    }
    cJSON_AddItemToObject(m, "sources", srcs);
    for (int i = 0; i < n_sh; i++) {
        cJSON *s = cJSON_CreateObject();
        cJSON_AddStringToObject(s, "file", sh[i].name);
        cJSON_AddStringToObject(s, "split", sh[i].split);
        cJSON_AddNumberToObject(s, "tokens", (double)sh[i].tokens);
        cJSON_AddStringToObject(s, "xxh3_64", sh[i].xxh3);
        cJSON_AddItemToArray(shards, s);
    }
    cJSON_AddItemToObject(m, "shards", shards);
    char *txt = cJSON_Print(m);
    cJSON_Delete(m);
    if (!txt) return hyp_fail(e, HYP_EFAIL, "meta.json: out of memory");
    char path[4200];
    join(path, sizeof path, tmpdir, "meta.json");
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    int rc = HYP_OK;
    if (fd < 0 || hyp_fs_write_all(fd, txt, strlen(txt)) != 0 ||
        hyp_fs_write_all(fd, "\n", 1) != 0 || fsync(fd) != 0) {
        int err = errno;
        rc = hyp_fail(e, hyp_fs_errcode(err), "%s: write failed: %s", path, strerror(err));
    }
    if (fd >= 0 && close(fd) != 0 && rc == HYP_OK)
        rc = hyp_fail(e, HYP_EFAIL, "%s: close failed: %s", path, strerror(errno));
    free(txt);
    return rc;
}

/* Is outdir usable? Sets *exists (1 = an existing directory to replace). */
static int check_outdir(const char *outdir, int overwrite, int *exists, hyp_err *e) {
    *exists = 0;
    struct stat st;
    if (stat(outdir, &st) != 0) {
        if (errno == ENOENT) return HYP_OK;
        int err = errno;
        return hyp_fail(e, hyp_fs_errcode(err), "%s: cannot access the output directory: %s — "
                        "choose another --out", outdir, strerror(err));
    }
    if (!S_ISDIR(st.st_mode))
        return hyp_fail(e, HYP_EINPUT, "%s: exists and is not a directory — choose another --out",
                        outdir);
    *exists = 1;
    DIR *d = opendir(outdir);
    if (!d) {
        int err = errno;
        return hyp_fail(e, hyp_fs_errcode(err), "%s: cannot read the output directory: %s — "
                        "choose another --out", outdir, strerror(err));
    }
    int empty = 1, foreign = 0;
    char first_foreign[256] = "";
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..")) continue;
        empty = 0;
        if (!is_prepare_output(de->d_name) && !foreign) {
            foreign = 1;
            snprintf(first_foreign, sizeof first_foreign, "%s", de->d_name);
        }
    }
    closedir(d);
    if (empty) return HYP_OK;
    if (!overwrite)
        return hyp_fail(e, HYP_EINPUT, "%s: output directory exists and is not empty — choose "
                        "another --out, or pass --overwrite to replace a previous gen data "
                        "output", outdir);
    if (foreign)
        return hyp_fail(e, HYP_EINPUT, "%s: holds '%s', which gen data did not write; refusing "
                        "to replace it even with --overwrite — choose another --out", outdir,
                        first_foreign);
    return HYP_OK;
}

static int allow_any(const char *name) {
    (void)name;
    return 1;
}

/* Moves the finished tmpdir to outdir, replacing an empty dir or a previous gen data output.
 * Returns an error only when the new output is not in place (the old one then is). */
static int install_dir(const char *tmpdir, const char *outdir, int exists, hyp_err *e) {
    if (rename(tmpdir, outdir) == 0) return HYP_OK; /* new path, or an empty dir */
    int err = errno;
    if (!exists || (err != ENOTEMPTY && err != EEXIST))
        return hyp_fail(e, hyp_fs_errcode(err), "%s: cannot move the finished output into "
                        "place: %s", outdir, strerror(err));
    /* a previous output: swap atomically, then delete the old files (now at tmpdir) */
    if (hyp_fs_exchange(tmpdir, outdir) == 0) {
        (void)hyp_fs_remove_flat(tmpdir, is_prepare_output);
        return HYP_OK;
    }
    /* no RENAME_EXCHANGE here: rename the old dir aside, then the new one in */
    char old[4200];
    snprintf(old, sizeof old, "%s.old-XXXXXX", outdir);
    if (!mkdtemp(old)) {
        err = errno;
        return hyp_fail(e, hyp_fs_errcode(err), "%s: cannot make room to replace it: %s",
                        outdir, strerror(err));
    }
    if (rename(outdir, old) != 0) {
        err = errno;
        rmdir(old);
        return hyp_fail(e, hyp_fs_errcode(err), "%s: cannot move the old output aside: %s",
                        outdir, strerror(err));
    }
    if (rename(tmpdir, outdir) != 0) {
        err = errno;
        (void)rename(old, outdir);
        return hyp_fail(e, hyp_fs_errcode(err), "%s: cannot move the finished output into "
                        "place: %s", outdir, strerror(err));
    }
    (void)hyp_fs_remove_flat(old, is_prepare_output);
    return HYP_OK;
}

/* encode_document — the one place text becomes tokens (the data helpers' contract): the
 * selected tokenizer's ids of one document, after an EOT when the tokenizer has one (llm.c's
 * fineweb convention: every document starts with EOT). Appends to *ids. */
static int encode_document(hyp_tok *tok, const uint8_t *doc, size_t n, int32_t **ids, size_t *len,
                           size_t *cap, hyp_err *e) {
    int eot = hyp_tok_eot(tok);
    if (eot >= 0) {
        if (*len == *cap) {
            size_t c = *cap ? *cap * 2 : 1024;
            int32_t *p = realloc(*ids, c * sizeof *p);
            if (!p) return hyp_fail(e, HYP_EFAIL, "gen data: out of memory");
            *ids = p, *cap = c;
        }
        (*ids)[(*len)++] = eot;
    }
    return hyp_tok_encode(tok, doc, n, ids, len, cap, e);
}

/* A BPE tokenizer's pass over the sources (each one document): ids into dir/.tokens (uint32 LE),
 * their count into *n_tokens, and the tokenizer file (decompressed) into dir/tok_file. */
static int encode_sources(hyp_tok *tok, const char *spec, const char *tok_file, source *src,
                          int n_src, const char *dir, uint64_t *n_tokens, hyp_err *e) {
    char path[4200];
    uint8_t *buf = NULL;
    size_t n = 0;
    int rc = hyp_data_tok_copy(spec, dir, tok_file, e);
    if (rc) return rc;
    join(path, sizeof path, dir, ".tokens");
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0)
        return hyp_fail(e, hyp_fs_errcode(errno), "%s: cannot create: %s", path, strerror(errno));
    int32_t *ids = NULL;
    size_t cap = 0;
    *n_tokens = 0;
    for (int i = 0; i < n_src && rc == HYP_OK; i++) {
        size_t len = 0;
        if ((rc = hyp_tok_read_file(src[i].open_path, &buf, &n, e)) != HYP_OK) break;
        const uint8_t *nul = memchr(buf, 0, n);
        if (nul)
            rc = hyp_fail(e, HYP_EINPUT, "%s: NUL byte at offset %zu — this is not a text file "
                          "(binary data?); give plain UTF-8 text", src[i].path, (size_t)(nul - buf));
        else if (n == 0)
            rc = hyp_fail(e, HYP_EINPUT, "%s: input is empty — give a non-empty text file or drop "
                          "it from the list", src[i].path);
        if (!rc) rc = encode_document(tok, buf, n, &ids, &len, &cap, e);
        free(buf);
        for (size_t k = 0; k < len && !rc; k++) wr32((uint8_t *)(ids + k), (uint32_t)ids[k]);
        if (!rc && hyp_fs_write_all(fd, ids, len * 4) != 0)
            rc = hyp_fail(e, hyp_fs_errcode(errno), "%s: write failed: %s — check free disk space",
                          path, strerror(errno));
        *n_tokens += len;
    }
    free(ids);
    if (close(fd) != 0 && !rc) rc = hyp_fail(e, HYP_EFAIL, "%s: close failed: %s", path, strerror(errno));
    return rc;
}

static int prepare(const char *const *inputs, int n_inputs, const char *outdir, hyp_data_opts o,
                   hyp_tok *tok, hyp_err *e);

int hyp_data_prepare(const char *const *inputs, int n_inputs, const char *outdir,
                     const hyp_data_opts *opts, hyp_err *e) {
    hyp_data_opts o;
    if (opts) o = *opts;
    else hyp_data_opts_default(&o);
    if (o.tokenizer && !o.tokenizer[0])
        return hyp_fail(e, HYP_EINPUT, "--tokenizer: empty — give byte, a tokenizer.json or a "
                        "tiktoken ranks file");
    if (o.tokenizer && !strcmp(o.tokenizer, "byte")) o.tokenizer = NULL;
    hyp_tok *tok = hyp_tok_open(o.tokenizer ? o.tokenizer : "byte", e);
    if (!tok) return HYP_EINPUT;
    if (o.tokenizer) o.vocab_size = hyp_tok_vocab_size(tok);
    int rc = prepare(inputs, n_inputs, outdir, o, tok, e);
    hyp_tok_free(tok);
    return rc;
}

static int prepare(const char *const *inputs, int n_inputs, const char *outdir, hyp_data_opts o,
                   hyp_tok *tok, hyp_err *e) {
    const char *tok_file = o.tokenizer ? hyp_data_tok_file(tok) : NULL;
    if (!outdir || !outdir[0])
        return hyp_fail(e, HYP_EINPUT, "gen data: no output directory given — pass --out DIR");
    if (n_inputs <= 0 || !inputs)
        return hyp_fail(e, HYP_EINPUT, "%s: no input files given — pass one or more text files",
                        outdir);
    if (!(o.val_fraction >= 0.0 && o.val_fraction < 1.0))
        return hyp_fail(e, HYP_EINPUT, "%s: val_fraction %g is outside [0, 1) — use e.g. 0.05",
                        outdir, o.val_fraction);
    if (o.shard_tokens < 1 || o.shard_tokens > 2147483647ULL)
        return hyp_fail(e, HYP_EINPUT, "%s: shard_tokens %llu is outside [1, 2147483647] — the "
                        "shard header stores the count as int32", outdir,
                        (unsigned long long)o.shard_tokens);
    if (o.vocab_size < 256)
        return hyp_fail(e, HYP_EINPUT, "%s: vocab_size %d is below 256, but the byte tokenizer "
                        "emits tokens 0..255 — use vocab_size >= 256", outdir, o.vocab_size);
    int tokbytes = o.vocab_size <= 65536 ? 2 : 4;

    size_t olen = strlen(outdir);
    while (olen > 1 && outdir[olen - 1] == '/') olen--;
    char out[4096];
    if (olen >= sizeof out - 32)
        return hyp_fail(e, HYP_EINPUT, "%.200s...: path too long — use a shorter --out", outdir);
    memcpy(out, outdir, olen);
    out[olen] = '\0';

    int exists, rc = check_outdir(out, o.overwrite, &exists, e);
    if (rc != HYP_OK) return rc;

    source *src = calloc((size_t)n_inputs, sizeof *src);
    if (!src) return hyp_fail(e, HYP_EFAIL, "%s: out of memory", out);
    /* size every input before creating anything, so a typo fails fast and leaves nothing */
    int n_stdin = 0;
    for (int i = 0; i < n_inputs; i++) {
        if (!inputs[i] || !inputs[i][0]) {
            free(src);
            return hyp_fail(e, HYP_EINPUT, "input %d: empty path — give a text file", i + 1);
        }
        if (!strcmp(inputs[i], "-")) {
            if (n_stdin++) {
                free(src);
                return hyp_fail(e, HYP_EINPUT, "<stdin>: \"-\" given twice — stdin can be read "
                                "only once");
            }
            snprintf(src[i].path, sizeof src[i].path, "<stdin>");
            continue;
        }
        snprintf(src[i].path, sizeof src[i].path, "%s", inputs[i]);
        snprintf(src[i].open_path, sizeof src[i].open_path, "%s", inputs[i]);
        if ((rc = stat_source(&src[i], e)) != HYP_OK) {
            free(src);
            return rc;
        }
    }

    char parent[4096];
    hyp_fs_dirname(out, parent, sizeof parent);
    if ((rc = hyp_fs_mkdirs(parent, e)) != HYP_OK) {
        free(src);
        return rc;
    }
    char tmpdir[4200];
    snprintf(tmpdir, sizeof tmpdir, "%s.tmp-XXXXXX", out);
    if (!mkdtemp(tmpdir)) {
        int err = errno;
        free(src);
        return hyp_fail(e, hyp_fs_errcode(err), "%s: cannot create the output directory: %s — "
                        "choose a writable --out", out, strerror(err));
    }
    (void)chmod(tmpdir, 0755);

    shard_info *infos = NULL;
    uint8_t *inbuf = NULL, *enc = NULL;
    XXH3_state_t *xs = NULL;
    int fd_in = -1;
    shard_writer w = {.fd = -1};

    for (int i = 0; i < n_inputs && rc == HYP_OK; i++)
        if (!strcmp(inputs[i], "-")) {
            rc = spool_stdin(tmpdir, &src[i], e);
            if (rc == HYP_OK) rc = stat_source(&src[i], e);
        }
    if (rc != HYP_OK) goto fail;

    uint64_t total = 0;
    for (int i = 0; i < n_inputs; i++) total += src[i].bytes;
    if (tok_file && (rc = encode_sources(tok, o.tokenizer, tok_file, src, n_inputs, tmpdir, &total,
                                         e)) != HYP_OK)
        goto fail;
    uint64_t n_val = 0;
    if (o.val_fraction > 0) {
        n_val = (uint64_t)llround((double)total * o.val_fraction);
        if (n_val == 0) n_val = 1;
    }
    if (n_val >= total) {
        rc = hyp_fail(e, HYP_EINPUT, "%s: the corpus has %llu %s, too few to hold out "
                      "val_fraction %g for validation — give more text", src[0].path,
                      (unsigned long long)total, tok_file ? "tokens" : "bytes", o.val_fraction);
        goto fail;
    }
    uint64_t n_train = total - n_val;

    size_t max_shards = (size_t)((n_train + o.shard_tokens - 1) / o.shard_tokens +
                                 (n_val + o.shard_tokens - 1) / o.shard_tokens) + 1;
    int n_infos = 0;
    enum { CHUNK = 1 << 20 };
    infos = calloc(max_shards, sizeof *infos);
    inbuf = malloc(CHUNK);
    enc = malloc((size_t)CHUNK * 4);
    xs = XXH3_createState();
    if (!infos || !inbuf || !enc || !xs) {
        rc = hyp_fail(e, HYP_EFAIL, "%s: out of memory", out);
        goto fail;
    }
    w = (shard_writer){.dir = tmpdir, .split = "train", .split_left = n_train, .fd = -1,
                       .shard_tokens = o.shard_tokens, .tokbytes = tokbytes, .xs = xs,
                       .infos = infos, .n_infos = &n_infos};

    if (tok_file) { /* v2125: the encoded ids, re-read from .tokens into the split writer */
        char tp[4200];
        join(tp, sizeof tp, tmpdir, ".tokens");
        fd_in = open(tp, O_RDONLY | O_CLOEXEC);
        if (fd_in < 0) rc = hyp_fail(e, HYP_EFAIL, "%s: cannot open: %s", tp, strerror(errno));
        uint64_t off = 0;
        while (rc == HYP_OK && off < total) {
            size_t want = total - off < CHUNK / 4 ? (size_t)(total - off) : CHUNK / 4;
            long long got = hyp_fs_read_full(fd_in, enc, want * 4);
            if (got != (long long)(want * 4)) {
                rc = hyp_fail(e, HYP_EFAIL, "%s: short read — re-run", tp);
                break;
            }
            if (tokbytes == 2)
                for (size_t k = 0; k < want; k++) {
                    uint32_t v = rd32(enc + 4 * k);
                    enc[2 * k] = (uint8_t)v;
                    enc[2 * k + 1] = (uint8_t)(v >> 8);
                }
            const uint8_t *p = enc;
            uint64_t left = want;
            while (left > 0 && rc == HYP_OK) {
                if (w.split_left == 0) {
                    w.split = "val";
                    w.split_left = n_val;
                    w.index = 0;
                }
                uint64_t k = left < w.split_left ? left : w.split_left;
                rc = sw_put(&w, p, k, e);
                p += k * (uint64_t)tokbytes;
                left -= k;
            }
            off += want;
        }
        if (fd_in >= 0) close(fd_in);
        fd_in = -1;
        unlink(tp);
    }
    for (int i = 0; i < n_inputs && rc == HYP_OK && !tok_file; i++) {
        fd_in = open(src[i].open_path, O_RDONLY | O_CLOEXEC);
        if (fd_in < 0) {
            int err = errno;
            rc = hyp_fail(e, hyp_fs_errcode(err), "%s: cannot open: %s — check the input path",
                          src[i].path, strerror(err));
            break;
        }
        uint64_t off = 0;
        while (off < src[i].bytes && rc == HYP_OK) {
            size_t want = src[i].bytes - off < CHUNK ? (size_t)(src[i].bytes - off) : CHUNK;
            long long got = hyp_fs_read_full(fd_in, inbuf, want);
            if (got < 0 || (size_t)got != want) {
                rc = hyp_fail(e, HYP_EINPUT, "%s: %s at byte %llu — the file changed while gen "
                              "data read it; re-run", src[i].path,
                              got < 0 ? strerror(errno) : "unexpected end of file",
                              (unsigned long long)(off + (got > 0 ? (uint64_t)got : 0)));
                break;
            }
            const uint8_t *nul = memchr(inbuf, 0, want);
            if (nul) {
                rc = hyp_fail(e, HYP_EINPUT, "%s: NUL byte at offset %llu — this is not a text "
                              "file (binary data?); give plain UTF-8 text", src[i].path,
                              (unsigned long long)(off + (uint64_t)(nul - inbuf)));
                break;
            }
            /* byte tokenizer: token = byte value, little-endian uint16 / uint32 */
            for (size_t k = 0; k < want; k++) {
                if (tokbytes == 2) {
                    enc[2 * k] = inbuf[k];
                    enc[2 * k + 1] = 0;
                } else {
                    wr32(enc + 4 * k, inbuf[k]);
                }
            }
            const uint8_t *p = enc;
            uint64_t left = want;
            while (left > 0 && rc == HYP_OK) {
                if (w.split_left == 0) { /* train is full: switch to val */
                    w.split = "val";
                    w.split_left = n_val;
                    w.index = 0;
                }
                uint64_t k = left < w.split_left ? left : w.split_left;
                rc = sw_put(&w, p, k, e);
                p += k * (uint64_t)tokbytes;
                left -= k;
            }
            off += want;
        }
        close(fd_in);
        fd_in = -1;
    }
    if (rc != HYP_OK) goto fail;
    if (n_stdin) {
        char p[4200];
        join(p, sizeof p, tmpdir, ".stdin");
        unlink(p);
    }
    rc = write_meta(tmpdir, &o, tok, tok_file, tokbytes, src, n_inputs, infos, n_infos, n_train,
                    n_val, e);
    if (rc != HYP_OK) goto fail;
    if (hyp_fs_fsync_dir(tmpdir) != 0) {
        rc = hyp_fail(e, HYP_EFAIL, "%s: fsync failed: %s", tmpdir, strerror(errno));
        goto fail;
    }
    rc = install_dir(tmpdir, out, exists, e);
    if (rc != HYP_OK) goto fail;
    if (hyp_fs_fsync_dir(parent) != 0) {
        rc = hyp_fail(e, HYP_EFAIL, "%s: fsync failed: %s", parent, strerror(errno));
        goto done;
    }
    goto done;
fail:
    if (w.fd >= 0) close(w.fd);
    (void)hyp_fs_remove_flat(tmpdir, allow_any);
done:
    if (fd_in >= 0) close(fd_in);
    if (xs) XXH3_freeState(xs);
    free(infos);
    free(inbuf);
    free(enc);
    free(src);
    return rc;
}

/* ========================================================================================== */
/* The loader                                                                                  */

typedef struct {
    char *path;
    const uint8_t *map; /* whole file */
    size_t map_size;
    int version;        /* 1: uint16, 2: uint32 */
    uint64_t ntok;
    uint64_t start;     /* index of its first token in the split's stream */
    int has_docs;       /* a .docs sidecar was read */
    uint64_t n_docs;    /* its documents */
    char docs_xxh3[17]; /* its xxh3_64, hex */
} shard;

typedef struct hyp_prefetch hyp_prefetch;

struct hyp_loader {
    char *dir;
    int is_train;
    int B, T;
    uint64_t seed;
    int rank, world;
    shard *shards;
    int n_shards;
    uint64_t total, W, Wr;
    int meta_vocab;        /* 0 if unknown */
    uint64_t limit;        /* tokens must be < limit */
    const char *limit_why; /* for messages */
    uint32_t *perm;        /* train: the permutation of epoch perm_epoch */
    uint64_t perm_epoch;
    int perm_valid;
    hyp_loader_state st;
    uint32_t *win;         /* T+1 scratch */
    /* document starts (the .docs sidecars, docs_contract): global token indices, ascending;
     * n_docs == 0 when no shard of the split has a sidecar (one stream: today's behaviour) */
    uint64_t *doc_start;
    uint64_t n_docs;
    int n_sidecars;
    long slow_read_ms;     /* HYP_DATA_SLOW_READ_MS test hook (0: off) */
    int pf_depth;          /* v2128: batches prefetched by the producer thread (0: none) */
    hyp_prefetch *pf;      /* the running producer, or NULL; while it runs, st is the state of
                              the last batch handed out and the producer keeps its own */
};

static void pf_stop(hyp_loader *L);

void hyp_loader_close(hyp_loader *L) {
    if (!L) return;
    pf_stop(L);
    for (int i = 0; i < L->n_shards; i++) {
        if (L->shards[i].map) munmap((void *)L->shards[i].map, L->shards[i].map_size);
        free(L->shards[i].path);
    }
    free(L->shards);
    free(L->perm);
    free(L->win);
    free(L->doc_start);
    free(L->dir);
    free(L);
}

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Maps one shard and validates its header against its size. */
static int open_shard(shard *s, hyp_err *e) {
    int fd = open(s->path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        int err = errno;
        return hyp_fail(e, hyp_fs_errcode(err), "%s: cannot open: %s", s->path, strerror(err));
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return hyp_fail(e, HYP_EINPUT, "%s: not a regular file — remove it from the data "
                        "directory", s->path);
    }
    size_t size = (size_t)st.st_size;
    if (size < HEADER_BYTES) {
        close(fd);
        return hyp_fail(e, HYP_EINPUT, "%s: file is %zu bytes, shorter than the %d-byte shard "
                        "header — truncated or not a token shard; re-run gen data", s->path, size,
                        HEADER_BYTES);
    }
    void *m = mmap(NULL, size, PROT_READ, MAP_SHARED, fd, 0);
    int err = errno;
    close(fd);
    if (m == MAP_FAILED)
        return hyp_fail(e, HYP_EFAIL, "%s: mmap failed: %s", s->path, strerror(err));
    s->map = m;
    s->map_size = size;
    uint32_t magic = rd32(s->map), version = rd32(s->map + 4);
    int32_t ntok = (int32_t)rd32(s->map + 8);
    if (magic != HYP_SHARD_MAGIC)
        return hyp_fail(e, HYP_EINPUT, "%s: not a token shard: magic is %u, expected %d (llm.c / "
                        "gen data format) — remove the file or re-run gen data", s->path, magic,
                        HYP_SHARD_MAGIC);
    if (version != 1 && version != 2)
        return hyp_fail(e, HYP_EINPUT, "%s: unsupported shard version %u (known: 1 = uint16 "
                        "tokens, 2 = uint32 tokens) — re-run gen data with this version of "
                        "Hyperion", s->path, version);
    if (ntok < 0)
        return hyp_fail(e, HYP_EINPUT, "%s: header says %d tokens (negative) — the file is "
                        "corrupt; re-run gen data", s->path, ntok);
    s->version = (int)version;
    s->ntok = (uint64_t)ntok;
    uint64_t tb = version == 1 ? 2 : 4;
    uint64_t want = s->ntok * tb, have = size - HEADER_BYTES;
    if (have < want)
        return hyp_fail(e, HYP_EINPUT, "%s: truncated shard: header says %llu tokens (%llu "
                        "bytes) but the file has %llu bytes after the header — re-run gen data",
                        s->path, (unsigned long long)s->ntok, (unsigned long long)want,
                        (unsigned long long)have);
    if (have > want)
        return hyp_fail(e, HYP_EINPUT, "%s: shard has trailing bytes: header says %llu tokens "
                        "(%llu bytes) but the file has %llu bytes after the header — the file "
                        "is corrupt; re-run gen data", s->path, (unsigned long long)s->ntok,
                        (unsigned long long)want, (unsigned long long)have);
    return HYP_OK;
}

/* The sidecar path of a shard: S.bin -> S.docs. */
static void sidecar_path(char *out, size_t cap, const char *shard_path) {
    size_t n = strlen(shard_path);
    if (n < 4 || n + 2 > cap) {
        if (cap) out[0] = '\0';
        return;
    }
    memcpy(out, shard_path, n - 4);
    memcpy(out + n - 4, ".docs", 6);
}

/* Reads shard si's sidecar when it exists (docs_contract.md: 256 int32 header, magic 20240521,
 * version 1, n; then n uint64 offsets, ascending, the first 0, each < the shard's tokens) and
 * appends its document starts, as global token indices, to L->doc_start. */
static int read_sidecar(hyp_loader *L, int si, hyp_err *e) {
    shard *s = &L->shards[si];
    char path[4200];
    sidecar_path(path, sizeof path, s->path);
    if (!path[0] || !hyp_fs_exists(path)) return HYP_OK;
    char *buf = NULL;
    size_t size = 0;
    int rc = hyp_fs_read_small(path, (size_t)1 << 34, &buf, &size, e);
    if (rc != HYP_OK) return rc;
    const uint8_t *p = (const uint8_t *)buf;
    uint64_t n = size >= HEADER_BYTES ? rd32(p + 8) : 0;
    if (size < HEADER_BYTES || rd32(p) != HYP_DOCS_MAGIC || rd32(p + 4) != 1)
        rc = hyp_fail(e, HYP_EINPUT, "%s: not a document sidecar (%zu bytes; need a %d-byte header "
                      "with magic %d, version 1) — remove it or re-run gen data", path, size,
                      HEADER_BYTES, HYP_DOCS_MAGIC);
    else if ((uint64_t)(size - HEADER_BYTES) != n * 8)
        rc = hyp_fail(e, HYP_EINPUT, "%s: header says %llu documents (%llu bytes of offsets) but "
                      "the file has %zu bytes after the header — truncated or corrupt; re-run gen "
                      "data", path, (unsigned long long)n, (unsigned long long)(n * 8),
                      size - HEADER_BYTES);
    else if (n == 0 && s->ntok > 0)
        rc = hyp_fail(e, HYP_EINPUT, "%s: lists no document for a shard of %llu tokens — corrupt; "
                      "re-run gen data", path, (unsigned long long)s->ntok);
    uint64_t *grown = NULL;
    if (rc == HYP_OK && n > 0) {
        grown = realloc(L->doc_start, sizeof *grown * (size_t)(L->n_docs + n));
        if (!grown) rc = hyp_fail(e, HYP_EFAIL, "%s: out of memory for %llu documents", path,
                                  (unsigned long long)n);
        else L->doc_start = grown;
    }
    for (uint64_t i = 0; rc == HYP_OK && i < n; i++) {
        const uint8_t *q = p + HEADER_BYTES + 8 * i;
        uint64_t off = (uint64_t)rd32(q) | (uint64_t)rd32(q + 4) << 32;
        uint64_t prev = i ? L->doc_start[L->n_docs + i - 1] - s->start : 0;
        if ((i == 0 && off != 0) || (i > 0 && off <= prev) || off >= s->ntok)
            rc = hyp_fail(e, HYP_EINPUT, "%s: document %llu starts at token %llu, which is not "
                          "%s — the sidecar does not belong to %s; re-run gen data", path,
                          (unsigned long long)i, (unsigned long long)off,
                          i == 0 ? "0 (the first document starts the shard)"
                          : off >= s->ntok ? "inside the shard" : "after the previous one",
                          s->path);
        else
            L->doc_start[L->n_docs + i] = s->start + off;
    }
    if (rc == HYP_OK) {
        L->n_docs += n;
        L->n_sidecars++;
        s->has_docs = 1;
        s->n_docs = n;
        snprintf(s->docs_xxh3, sizeof s->docs_xxh3, "%016llx",
                 (unsigned long long)XXH3_64bits(buf, size));
    }
    free(buf);
    return rc;
}

/* meta.json: vocab_size and (when listed) per-shard token counts of this split. */
static int check_meta(hyp_loader *L, const char *split, hyp_err *e) {
    char path[4200];
    join(path, sizeof path, L->dir, "meta.json");
    if (!hyp_fs_exists(path)) return HYP_OK;
    char *txt = NULL;
    int rc = hyp_fs_read_small(path, META_MAX_BYTES, &txt, NULL, e);
    if (rc != HYP_OK) return rc;
    cJSON *m = cJSON_Parse(txt);
    free(txt);
    if (!m || !cJSON_IsObject(m)) {
        cJSON_Delete(m);
        return hyp_fail(e, HYP_EINPUT, "%s: not valid JSON — the data directory is damaged; "
                        "re-run gen data", path);
    }
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(m, "vocab_size");
    if (v) {
        if (!cJSON_IsNumber(v) || v->valuedouble < 1 || v->valuedouble > 2147483647.0 ||
            floor(v->valuedouble) != v->valuedouble) {
            cJSON_Delete(m);
            return hyp_fail(e, HYP_EINPUT, "%s: vocab_size is not a positive integer — the data "
                            "directory is damaged; re-run gen data", path);
        }
        L->meta_vocab = (int)v->valuedouble;
    }
    const cJSON *shards = cJSON_GetObjectItemCaseSensitive(m, "shards");
    const cJSON *s;
    cJSON_ArrayForEach(s, shards) {
        const cJSON *f = cJSON_GetObjectItemCaseSensitive(s, "file");
        const cJSON *sp = cJSON_GetObjectItemCaseSensitive(s, "split");
        const cJSON *nt = cJSON_GetObjectItemCaseSensitive(s, "tokens");
        if (!cJSON_IsString(f) || !cJSON_IsString(sp) || strcmp(sp->valuestring, split) != 0)
            continue;
        int found = -1;
        for (int i = 0; i < L->n_shards; i++) {
            const char *base = strrchr(L->shards[i].path, '/');
            base = base ? base + 1 : L->shards[i].path;
            if (!strcmp(base, f->valuestring)) found = i;
        }
        if (found < 0) {
            rc = hyp_fail(e, HYP_EINPUT, "%s: lists %.200s, which is missing from %s — the "
                          "directory is incomplete; re-run gen data", path, f->valuestring,
                          L->dir);
            break;
        }
        const shard *fs = &L->shards[found];
        const cJSON *nd = cJSON_GetObjectItemCaseSensitive(s, "docs");
        const cJSON *dh = cJSON_GetObjectItemCaseSensitive(s, "docs_xxh3_64");
        if (fs->has_docs && cJSON_IsNumber(nd) && nd->valuedouble != (double)fs->n_docs) {
            rc = hyp_fail(e, HYP_EINPUT, "%s: its .docs sidecar lists %llu documents but meta.json "
                          "says %.0f — the directory mixes files of two gen data runs; re-run gen "
                          "data", fs->path, (unsigned long long)fs->n_docs, nd->valuedouble);
            break;
        }
        if (fs->has_docs && cJSON_IsString(dh) && strcmp(dh->valuestring, fs->docs_xxh3) != 0) {
            rc = hyp_fail(e, HYP_EINPUT, "%s: its .docs sidecar's xxh3_64 is %s but meta.json says "
                          "%.20s — the sidecar is corrupt or from another run; re-run gen data",
                          fs->path, fs->docs_xxh3, dh->valuestring);
            break;
        }
        if (!fs->has_docs && cJSON_IsNumber(nd)) {
            rc = hyp_fail(e, HYP_EINPUT, "%s: meta.json lists %.0f documents for it but its .docs "
                          "sidecar is missing — the directory is incomplete; re-run gen data",
                          fs->path, nd->valuedouble);
            break;
        }
        if (cJSON_IsNumber(nt) && nt->valuedouble != (double)L->shards[found].ntok) {
            rc = hyp_fail(e, HYP_EINPUT, "%s: header says %llu tokens but meta.json says %.0f — "
                          "the directory mixes files of two gen data runs; re-run gen data",
                          L->shards[found].path, (unsigned long long)L->shards[found].ntok,
                          nt->valuedouble);
            break;
        }
    }
    cJSON_Delete(m);
    return rc;
}

int hyp_loader_open_rc(const char *dir, const char *split, int B, int T, uint64_t seed, int rank,
                       int world, hyp_loader **out, hyp_err *e) {
    *out = NULL;
    if (!dir || !dir[0]) return hyp_fail(e, HYP_EINPUT, "(data): no data directory given");
    if (!split || (strcmp(split, "train") != 0 && strcmp(split, "val") != 0))
        return hyp_fail(e, HYP_EINPUT, "%s: unknown split '%s' — use \"train\" or \"val\"", dir,
                        split ? split : "(null)");
    if (B < 1 || T < 1 || (int64_t)B * T > 2147483647)
        return hyp_fail(e, HYP_EINPUT, "%s: batch shape B=%d T=%d is invalid (need B >= 1, "
                        "T >= 1, B*T < 2^31)", dir, B, T);
    if (world < 1 || rank < 0 || rank >= world)
        return hyp_fail(e, HYP_EINPUT, "%s: rank %d of world %d is invalid (need 0 <= rank < "
                        "world)", dir, rank, world);
    struct stat st;
    if (stat(dir, &st) != 0)
        return hyp_fail(e, HYP_EINPUT, "%s: no such data directory — run gen data to create it, "
                        "or fix the data path", dir);
    if (!S_ISDIR(st.st_mode))
        return hyp_fail(e, HYP_EINPUT, "%s: not a directory — the data path must be a directory "
                        "made by gen data", dir);

    hyp_loader *L = calloc(1, sizeof *L);
    if (!L || !(L->dir = strdup(dir))) {
        free(L);
        return hyp_fail(e, HYP_EFAIL, "%s: out of memory", dir);
    }
    L->is_train = !strcmp(split, "train");
    L->B = B;
    L->T = T;
    L->seed = seed;
    L->rank = rank;
    L->world = world;
    const char *slow = getenv("HYP_DATA_SLOW_READ_MS");
    L->slow_read_ms = slow ? strtol(slow, NULL, 10) : 0;
    int rc = HYP_OK;

    /* list the split's shards in name order */
    DIR *d = opendir(dir);
    if (!d) {
        int err = errno;
        hyp_loader_close(L);
        return hyp_fail(e, hyp_fs_errcode(err), "%s: cannot read: %s", dir, strerror(err));
    }
    char **names = NULL;
    int n = 0, cap = 0;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        if (!shard_name_matches(de->d_name, split)) continue;
        if (n == cap) {
            cap = cap ? 2 * cap : 16;
            char **nn = realloc(names, sizeof *names * (size_t)cap);
            if (!nn) { rc = HYP_EFAIL; break; }
            names = nn;
        }
        if (!(names[n] = strdup(de->d_name))) { rc = HYP_EFAIL; break; }
        n++;
    }
    closedir(d);
    if (rc == HYP_OK && n == 0)
        rc = hyp_fail(e, HYP_EINPUT, "%s: no %s shards (no .bin file with '%s' in its name, e.g. "
                      "%s_000000.bin) — run gen data to create them", dir, split, split, split);
    else if (rc != HYP_OK)
        hyp_fail(e, HYP_EFAIL, "%s: out of memory", dir);
    if (rc == HYP_OK) {
        qsort(names, (size_t)n, sizeof *names, cmp_str);
        L->shards = calloc((size_t)n, sizeof *L->shards);
        if (!L->shards) rc = hyp_fail(e, HYP_EFAIL, "%s: out of memory", dir);
    }
    for (int i = 0; rc == HYP_OK && i < n; i++) {
        shard *s = &L->shards[i];
        size_t len = strlen(dir) + strlen(names[i]) + 2;
        if (!(s->path = malloc(len))) {
            rc = hyp_fail(e, HYP_EFAIL, "%s: out of memory", dir);
            break;
        }
        join(s->path, len, dir, names[i]);
        L->n_shards = i + 1;
        rc = open_shard(s, e);
        s->start = L->total;
        L->total += s->ntok;
    }
    for (int i = 0; i < n; i++) free(names[i]);
    free(names);
    for (int i = 0; rc == HYP_OK && i < L->n_shards; i++) rc = read_sidecar(L, i, e);
    if (rc == HYP_OK) rc = check_meta(L, split, e);
    if (rc == HYP_OK) {
        if (L->meta_vocab > 0) {
            L->limit = (uint64_t)L->meta_vocab;
            L->limit_why = "vocab_size in meta.json";
        } else {
            L->limit = 65536;
            for (int i = 0; i < L->n_shards; i++)
                if (L->shards[i].version == 2) L->limit = 2147483648ULL;
            L->limit_why = "the shard format";
        }
        if (L->total < (uint64_t)T + 1)
            rc = hyp_fail(e, HYP_EINPUT, "%s: the %s split has %llu tokens, fewer than T+1 = %d "
                          "needed for one sequence — use more text or a smaller T", dir, split,
                          (unsigned long long)L->total, T + 1);
    }
    if (rc == HYP_OK) {
        L->W = (L->total - 1) / (uint64_t)T;
        L->Wr = L->W / (uint64_t)world;
        if (L->Wr == 0)
            rc = hyp_fail(e, HYP_EINPUT, "%s: the %s split has %llu windows of T+1 = %d tokens, "
                          "fewer than the %d ranks — use more text, a smaller T or fewer ranks",
                          dir, split, (unsigned long long)L->W, T + 1, world);
        else if (L->W > UINT32_MAX)
            rc = hyp_fail(e, HYP_EINPUT, "%s: the %s split has %llu windows, more than 2^32 — "
                          "split the data into several directories", dir, split,
                          (unsigned long long)L->W);
    }
    if (rc == HYP_OK) {
        L->win = malloc(sizeof *L->win * ((size_t)T + 1));
        if (L->is_train) L->perm = malloc(sizeof *L->perm * (size_t)L->W);
        if (!L->win || (L->is_train && !L->perm))
            rc = hyp_fail(e, HYP_EFAIL, "%s: out of memory for %llu windows", dir,
                          (unsigned long long)L->W);
    }
    if (rc != HYP_OK) {
        hyp_loader_close(L);
        return rc;
    }
    *out = L;
    return HYP_OK;
}

hyp_loader *hyp_loader_open(const char *dir, const char *split, int B, int T, uint64_t seed,
                            int rank, int world, hyp_err *e) {
    hyp_loader *L;
    return hyp_loader_open_rc(dir, split, B, T, seed, rank, world, &L, e) == HYP_OK ? L : NULL;
}

/* The permutation of `epoch` (train only): Fisher–Yates from hyp_rng(seed, epoch). */
static void ensure_perm(hyp_loader *L, uint64_t epoch) {
    if (L->perm_valid && L->perm_epoch == epoch) return;
    for (uint64_t i = 0; i < L->W; i++) L->perm[i] = (uint32_t)i;
    hyp_rng r;
    hyp_rng_seed2(&r, L->seed, epoch);
    for (uint64_t i = L->W - 1; i > 0; i--) {
        uint64_t j = hyp_rng_below(&r, i + 1);
        uint32_t t = L->perm[i];
        L->perm[i] = L->perm[j];
        L->perm[j] = t;
    }
    L->perm_epoch = epoch;
    L->perm_valid = 1;
}

/* Shard holding global token g (binary search over starts; empty shards never match). */
static int shard_of(const hyp_loader *L, uint64_t g) {
    int lo = 0, hi = L->n_shards - 1;
    while (lo < hi) {
        int mid = lo + (hi - lo + 1) / 2;
        if (L->shards[mid].start <= g) lo = mid;
        else hi = mid - 1;
    }
    while (g >= L->shards[lo].start + L->shards[lo].ntok) lo++; /* skip empty shards */
    return lo;
}

/* Copies window w (T+1 tokens) into L->win, checking the vocabulary. */
static int read_window(hyp_loader *L, uint64_t w, hyp_err *e) {
    uint64_t g = w * (uint64_t)L->T;
    int si = shard_of(L, g);
    for (int t = 0; t <= L->T; t++, g++) {
        while (g >= L->shards[si].start + L->shards[si].ntok) si++;
        const shard *s = &L->shards[si];
        uint64_t k = g - s->start;
        const uint8_t *p = s->map + HEADER_BYTES;
        uint32_t tok = s->version == 1 ? (uint32_t)(p[2 * k] | p[2 * k + 1] << 8) : rd32(p + 4 * k);
        if (tok >= L->limit)
            return hyp_fail(e, HYP_EINPUT, "%s: token %u at index %llu is outside the vocabulary "
                            "(%llu, from %s) — the data was made for another tokenizer or model; "
                            "re-run gen data", s->path, tok, (unsigned long long)k,
                            (unsigned long long)L->limit, L->limit_why);
        L->win[t] = tok;
    }
    return HYP_OK;
}

/* positions[t] for the window starting at global token g0: t minus the start of its document,
 * a document that began before the window counting from the window's first token. */
static void window_positions(const hyp_loader *L, uint64_t g0, int32_t *positions) {
    uint64_t lo = 0, hi = L->n_docs; /* j = the first document start > g0 */
    while (lo < hi) {
        uint64_t mid = lo + (hi - lo) / 2;
        if (L->doc_start[mid] <= g0) lo = mid + 1;
        else hi = mid;
    }
    uint64_t j = lo, cur = g0;
    for (int t = 0; t < L->T; t++) {
        uint64_t g = g0 + (uint64_t)t;
        while (j < L->n_docs && L->doc_start[j] <= g) cur = L->doc_start[j++];
        positions[t] = (int32_t)(g - cur);
    }
}

/* Test hook: HYP_DATA_SLOW_READ_MS=N makes every batch read sleep N ms (a slow disk). */
static void slow_read_hook(const hyp_loader *L) {
    if (L->slow_read_ms <= 0) return;
    struct timespec ts = {L->slow_read_ms / 1000, (long)(L->slow_read_ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {}
}

/* One batch from state *st (advanced on success; unchanged on error). */
static int produce(hyp_loader *L, hyp_loader_state *st, int32_t *inputs, int32_t *targets,
                   int32_t *positions, hyp_err *e) {
    hyp_loader_state saved = *st;
    const int T = L->T;
    slow_read_hook(L);
    for (int b = 0; b < L->B; b++) {
        if (st->position >= L->Wr) {
            st->epoch++;
            st->position = 0;
        }
        uint64_t slot = st->position * (uint64_t)L->world + (uint64_t)L->rank;
        uint64_t w = slot;
        if (L->is_train) {
            ensure_perm(L, st->epoch);
            w = L->perm[slot];
        }
        int rc = read_window(L, w, e);
        if (rc != HYP_OK) {
            *st = saved;
            return rc;
        }
        for (int t = 0; t < T; t++) {
            inputs[(size_t)b * T + t] = (int32_t)L->win[t];
            targets[(size_t)b * T + t] = (int32_t)L->win[t + 1];
        }
        if (positions) window_positions(L, w * (uint64_t)T, positions + (size_t)b * T);
        st->position++;
    }
    return HYP_OK;
}

/* ---- v2128 prefetch: one producer thread, a ring of `depth` batches ---- */

typedef struct {
    int32_t *inputs, *targets, *positions; /* [B*T] each */
    hyp_loader_state after;                /* the stream's state once this batch is consumed */
    int rc;
    hyp_err err;
} pf_slot;

struct hyp_prefetch {
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t not_empty, not_full;
    pf_slot *slot;
    int depth, head, count, stop, failed;
    hyp_loader_state st; /* the producer's state */
};

static void *pf_main(void *arg) {
    hyp_loader *L = arg;
    hyp_prefetch *q = L->pf;
    pthread_mutex_lock(&q->mu);
    for (;;) {
        while (!q->stop && (q->count == q->depth || q->failed)) pthread_cond_wait(&q->not_full, &q->mu);
        if (q->stop) break;
        pf_slot *s = &q->slot[(q->head + q->count) % q->depth];
        hyp_loader_state st = q->st;
        pthread_mutex_unlock(&q->mu); /* the consumer never touches a slot outside [head, head+count) */
        s->err.msg[0] = 0;
        s->rc = produce(L, &st, s->inputs, s->targets, s->positions, &s->err);
        s->after = st;
        pthread_mutex_lock(&q->mu);
        q->st = st;
        q->failed = s->rc != HYP_OK;
        q->count++;
        pthread_cond_signal(&q->not_empty);
    }
    pthread_mutex_unlock(&q->mu);
    return NULL;
}

static void pf_stop(hyp_loader *L) {
    hyp_prefetch *q = L->pf;
    if (!q) return;
    pthread_mutex_lock(&q->mu);
    q->stop = 1;
    pthread_cond_broadcast(&q->not_full);
    pthread_mutex_unlock(&q->mu);
    pthread_join(q->thread, NULL);
    pthread_mutex_destroy(&q->mu);
    pthread_cond_destroy(&q->not_empty);
    pthread_cond_destroy(&q->not_full);
    for (int i = 0; i < q->depth; i++) {
        free(q->slot[i].inputs);
        free(q->slot[i].targets);
        free(q->slot[i].positions);
    }
    free(q->slot);
    free(q);
    L->pf = NULL;
}

/* Starts the producer at the loader's state with a fresh queue. */
static int pf_start(hyp_loader *L, int depth, hyp_err *e) {
    hyp_prefetch *q = calloc(1, sizeof *q);
    size_t n = (size_t)L->B * (size_t)L->T;
    int ok = q && (q->slot = calloc((size_t)depth, sizeof *q->slot)) != NULL;
    for (int i = 0; ok && i < depth; i++) {
        q->slot[i].inputs = malloc(n * sizeof(int32_t));
        q->slot[i].targets = malloc(n * sizeof(int32_t));
        q->slot[i].positions = malloc(n * sizeof(int32_t));
        ok = q->slot[i].inputs && q->slot[i].targets && q->slot[i].positions;
    }
    if (q) q->depth = depth;
    if (!ok) {
        if (q && q->slot)
            for (int i = 0; i < depth; i++) {
                free(q->slot[i].inputs);
                free(q->slot[i].targets);
                free(q->slot[i].positions);
            }
        if (q) free(q->slot);
        free(q);
        return hyp_fail(e, HYP_EFAIL, "%s: out of memory for %d prefetched batches", L->dir, depth);
    }
    q->st = L->st;
    pthread_mutex_init(&q->mu, NULL);
    pthread_cond_init(&q->not_empty, NULL);
    pthread_cond_init(&q->not_full, NULL);
    L->pf = q;
    int err = pthread_create(&q->thread, NULL, pf_main, L);
    if (err != 0) {
        pthread_mutex_destroy(&q->mu);
        pthread_cond_destroy(&q->not_empty);
        pthread_cond_destroy(&q->not_full);
        for (int i = 0; i < depth; i++) {
            free(q->slot[i].inputs);
            free(q->slot[i].targets);
            free(q->slot[i].positions);
        }
        free(q->slot);
        free(q);
        L->pf = NULL;
        return hyp_fail(e, HYP_EFAIL, "%s: cannot start the prefetch thread: %s", L->dir,
                        strerror(err));
    }
    return HYP_OK;
}

int hyp_loader_prefetch(hyp_loader *L, int depth, hyp_err *e) {
    if (depth < 0 || depth > 64)
        return hyp_fail(e, HYP_EINPUT, "%s: prefetch depth %d is outside 0..64", L->dir, depth);
    pf_stop(L);
    L->pf_depth = depth;
    return depth > 0 ? pf_start(L, depth, e) : HYP_OK;
}

int hyp_loader_prefetch_depth(const hyp_loader *L) { return L->pf_depth; }

/* The next prefetched batch; an error is returned at the batch where it happened, and the state
 * stays at the last good batch (then the queue restarts from there on the next call). */
static int pf_next(hyp_loader *L, int32_t *inputs, int32_t *targets, int32_t *positions,
                   hyp_err *e) {
    hyp_prefetch *q = L->pf;
    size_t n = (size_t)L->B * (size_t)L->T * sizeof(int32_t);
    pthread_mutex_lock(&q->mu);
    while (q->count == 0) pthread_cond_wait(&q->not_empty, &q->mu);
    pf_slot *s = &q->slot[q->head];
    int rc = s->rc;
    if (rc == HYP_OK) {
        memcpy(inputs, s->inputs, n);
        memcpy(targets, s->targets, n);
        if (positions) memcpy(positions, s->positions, n);
        L->st = s->after;
        q->head = (q->head + 1) % q->depth;
        q->count--;
        pthread_cond_signal(&q->not_full);
    } else if (e) {
        *e = s->err;
    }
    pthread_mutex_unlock(&q->mu);
    if (rc != HYP_OK) { /* drop the queue: the next call retries from the last good batch */
        int depth = q->depth;
        pf_stop(L);
        hyp_err e2;
        if (pf_start(L, depth, &e2) != HYP_OK) L->pf_depth = 0;
    }
    return rc;
}

int hyp_loader_next_pos(hyp_loader *L, int32_t *inputs, int32_t *targets, int32_t *positions,
                        hyp_err *e) {
    if (L->pf) return pf_next(L, inputs, targets, positions, e);
    return produce(L, &L->st, inputs, targets, positions, e);
}

int hyp_loader_next(hyp_loader *L, int32_t *inputs, int32_t *targets, hyp_err *e) {
    return hyp_loader_next_pos(L, inputs, targets, NULL, e);
}

/* The state changes under a running producer: drop its queue and restart it from there. */
static void pf_restart(hyp_loader *L) {
    if (!L->pf) return;
    pf_stop(L);
    hyp_err e;
    if (pf_start(L, L->pf_depth, &e) != HYP_OK) L->pf_depth = 0; /* fall back to direct reads */
}

void hyp_loader_reset(hyp_loader *L) {
    L->st.epoch = 0;
    L->st.position = 0;
    pf_restart(L);
}

void hyp_loader_get_state(const hyp_loader *L, hyp_loader_state *s) { *s = L->st; }

int hyp_loader_set_state(hyp_loader *L, const hyp_loader_state *s, hyp_err *e) {
    if (s->position > L->Wr)
        return hyp_fail(e, HYP_EINPUT, "%s: loader position %llu is past the end of an epoch "
                        "(%llu windows per rank) — the checkpoint was made with other data, T or "
                        "world size", L->dir, (unsigned long long)s->position,
                        (unsigned long long)L->Wr);
    L->st = *s;
    pf_restart(L);
    return HYP_OK;
}

int hyp_loader_has_docs(const hyp_loader *L) { return L->n_sidecars > 0; }
uint64_t hyp_loader_num_docs(const hyp_loader *L) { return L->n_docs; }

int hyp_loader_vocab_size(const hyp_loader *L) { return L->meta_vocab; }

int hyp_loader_require_vocab(hyp_loader *L, int model_vocab, hyp_err *e) {
    if (model_vocab < 1)
        return hyp_fail(e, HYP_EINPUT, "%s: model vocab_size %d is invalid", L->dir,
                        model_vocab);
    if (L->meta_vocab > model_vocab)
        return hyp_fail(e, HYP_EINPUT, "%s: the data's vocab_size is %d (meta.json) but the "
                        "model's is %d — tokens could fall outside the embedding; use a model "
                        "with vocab_size >= %d or data made for this model", L->dir,
                        L->meta_vocab, model_vocab, L->meta_vocab);
    if ((uint64_t)model_vocab < L->limit) {
        L->limit = (uint64_t)model_vocab;
        L->limit_why = "the model's vocab_size";
    }
    return HYP_OK;
}

uint64_t hyp_loader_total_tokens(const hyp_loader *L) { return L->total; }
uint64_t hyp_loader_windows(const hyp_loader *L) { return L->W; }
uint64_t hyp_loader_windows_per_rank(const hyp_loader *L) { return L->Wr; }
int hyp_loader_num_shards(const hyp_loader *L) { return L->n_shards; }

/* ========================================================================================== */
/* hyp_data_verify                                                                             */

int hyp_data_verify(const char *dir, hyp_err *e) {
    char path[4200];
    join(path, sizeof path, dir, "meta.json");
    char *txt = NULL;
    int rc = hyp_fs_read_small(path, META_MAX_BYTES, &txt, NULL, e);
    if (rc != HYP_OK) return rc;
    cJSON *m = cJSON_Parse(txt);
    free(txt);
    if (!m || !cJSON_IsObject(m)) {
        cJSON_Delete(m);
        return hyp_fail(e, HYP_EINPUT, "%s: not valid JSON — re-run gen data", path);
    }
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(m, "vocab_size");
    uint64_t vocab = cJSON_IsNumber(v) && v->valuedouble >= 1 ? (uint64_t)v->valuedouble
                                                               : (uint64_t)1 << 32;
    const cJSON *s;
    int n_listed = 0;
    cJSON_ArrayForEach(s, cJSON_GetObjectItemCaseSensitive(m, "shards")) {
        const cJSON *f = cJSON_GetObjectItemCaseSensitive(s, "file");
        const cJSON *h = cJSON_GetObjectItemCaseSensitive(s, "xxh3_64");
        const cJSON *nt = cJSON_GetObjectItemCaseSensitive(s, "tokens");
        if (!cJSON_IsString(f) || !cJSON_IsString(h) || strchr(f->valuestring, '/')) {
            rc = hyp_fail(e, HYP_EINPUT, "%s: a \"shards\" entry lacks file or xxh3_64 — re-run "
                          "gen data", path);
            break;
        }
        n_listed++;
        shard sh = {0};
        char sp[4200];
        join(sp, sizeof sp, dir, f->valuestring);
        sh.path = sp;
        rc = open_shard(&sh, e);
        if (rc == HYP_OK && cJSON_IsNumber(nt) && nt->valuedouble != (double)sh.ntok)
            rc = hyp_fail(e, HYP_EINPUT, "%s: header says %llu tokens but meta.json says %.0f — "
                          "re-run gen data", sp, (unsigned long long)sh.ntok, nt->valuedouble);
        if (rc == HYP_OK) {
            char hex[17];
            snprintf(hex, sizeof hex, "%016llx",
                     (unsigned long long)XXH3_64bits(sh.map, sh.map_size));
            if (strcmp(hex, h->valuestring) != 0)
                rc = hyp_fail(e, HYP_EINPUT, "%s: checksum mismatch (xxh3_64 %s, meta.json says "
                              "%.20s) — the file is corrupt; re-run gen data", sp, hex,
                              h->valuestring);
        }
        for (uint64_t k = 0; rc == HYP_OK && k < sh.ntok; k++) {
            const uint8_t *p = sh.map + HEADER_BYTES;
            uint32_t tok = sh.version == 1 ? (uint32_t)(p[2 * k] | p[2 * k + 1] << 8)
                                           : rd32(p + 4 * k);
            if (tok >= vocab)
                rc = hyp_fail(e, HYP_EINPUT, "%s: token %u at index %llu is >= vocab_size %llu "
                              "— re-run gen data", sp, tok, (unsigned long long)k,
                              (unsigned long long)vocab);
        }
        if (sh.map) munmap((void *)sh.map, sh.map_size);
        if (rc != HYP_OK) break;
    }
    if (rc == HYP_OK && n_listed == 0)
        rc = hyp_fail(e, HYP_EINPUT, "%s: lists no shards — re-run gen data", path);
    cJSON_Delete(m);
    return rc;
}
