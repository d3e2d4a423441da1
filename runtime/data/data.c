/* data.c — the shard writer with document sidecars (hyp_data_prepare: documents from docs.c
 * through the stages of docs_*.c, tokenized by encode_document with the byte tokenizer or a BPE
 * one from tokenizer.c), the shard verifier, and the batch loader. Formats, sampling and guarantees are documented in data.h. */
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

#include "chat.h"
#include "docs.h"
#include "pack.h"
#include "fsio.h"
#include "rng.h"
#include "stream.h"
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

/* What hyp_data_prepare writes: meta.json, report.json, train_NNNNNN.bin, val_NNNNNN.bin and
 * their .docs sidecars, the tokenizer's copy. */
static int is_prepare_output(const char *name) {
    if (!strcmp(name, "meta.json") || !strcmp(name, "report.json")) return 1;
    if (!strcmp(name, HYP_DATA_TOK_JSON) || !strcmp(name, HYP_DATA_TOK_TIKTOKEN)) return 1; /* v2125 */
    const char *p = NULL;
    if (!strncmp(name, "train_", 6)) p = name + 6;
    else if (!strncmp(name, "val_", 4)) p = name + 4;
    if (!p) return 0;
    int digits = 0;
    while (p[digits] >= '0' && p[digits] <= '9') digits++;
    return digits >= 6 && (!strcmp(p + digits, ".bin") || !strcmp(p + digits, ".docs"));
}

/* ========================================================================================== */
/* hyp_data_prepare                                                                            */

void hyp_data_opts_default(hyp_data_opts *o) {
    o->val_fraction = 0.05;
    o->shard_tokens = 100000000ULL;
    o->vocab_size = 256;
    o->overwrite = 0;
    o->doc_sep = NULL;
    o->stages = NULL;
    o->input_names = NULL;
    o->tokenizer = NULL;
}

typedef struct {
    char path[4096];     /* the name the user gave ("-" shows as "<stdin>") */
    uint64_t bytes;      /* bytes read (decompressed) */
    uint64_t docs;       /* documents read */
} source;

typedef struct {
    char name[64];
    const char *split;
    uint64_t tokens;
    char xxh3[17];
    uint64_t docs;       /* documents starting in this shard (its .docs sidecar) */
    char docs_xxh3[17];
} shard_info;

/* Streams tokens into consecutive shards of one split, and each shard's document starts into its
 * .docs sidecar (docs_contract: a document cut by a shard boundary starts again at offset 0 of
 * the next shard). */
typedef struct {
    const char *dir;     /* the temp dir being built */
    const char *split;
    uint64_t split_left; /* tokens still to write in this split */
    uint64_t shard_left; /* tokens still to write in the open shard */
    uint64_t shard_n;    /* tokens of the open shard */
    uint64_t shard_tokens;
    int tokbytes;
    int index;
    int fd;
    char path[4200];
    XXH3_state_t *xs;
    shard_info *infos;
    int *n_infos;
    uint64_t *doc_off;   /* document starts in the open shard */
    size_t n_doc, cap_doc;
    int doc_pending;     /* the next token starts a document */
} shard_writer;

static int sw_doc_mark(shard_writer *w, uint64_t off) {
    if (w->n_doc == w->cap_doc) {
        size_t cap = w->cap_doc ? w->cap_doc * 2 : 1024;
        uint64_t *p = realloc(w->doc_off, cap * sizeof *p);
        if (!p) return -1;
        w->doc_off = p;
        w->cap_doc = cap;
    }
    w->doc_off[w->n_doc++] = off;
    return 0;
}

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
    w->shard_n = n;
    (*w->n_infos)++;
    /* a new shard always starts a document: a new one, or the rest of a cut one */
    w->n_doc = 0;
    w->doc_pending = 0;
    if (sw_doc_mark(w, 0) != 0) return hyp_fail(e, HYP_EFAIL, "%s: out of memory", w->path);
    return HYP_OK;
}

/* S.docs beside S.bin: 256 int32 header (HYP_DOCS_MAGIC, version 1, n), n uint64 offsets. */
static int sw_write_sidecar(shard_writer *w, shard_info *si, hyp_err *e) {
    char name[64], path[4200];
    snprintf(name, sizeof name, "%.*s.docs", (int)(strlen(si->name) - 4), si->name);
    join(path, sizeof path, w->dir, name);
    size_t nb = HEADER_BYTES + w->n_doc * 8;
    uint8_t *buf = calloc(1, nb);
    if (!buf) return hyp_fail(e, HYP_EFAIL, "%s: out of memory", path);
    wr32(buf + 0, HYP_DOCS_MAGIC);
    wr32(buf + 4, 1);
    wr32(buf + 8, (uint32_t)w->n_doc);
    for (size_t i = 0; i < w->n_doc; i++) {
        wr32(buf + HEADER_BYTES + 8 * i, (uint32_t)w->doc_off[i]);
        wr32(buf + HEADER_BYTES + 8 * i + 4, (uint32_t)(w->doc_off[i] >> 32));
    }
    snprintf(si->docs_xxh3, sizeof si->docs_xxh3, "%016llx",
             (unsigned long long)XXH3_64bits(buf, nb));
    si->docs = w->n_doc;
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    int rc = HYP_OK;
    if (fd < 0 || hyp_fs_write_all(fd, buf, nb) != 0 || fsync(fd) != 0) {
        int err = errno;
        rc = hyp_fail(e, hyp_fs_errcode(err), "%s: write failed: %s — check free disk space",
                      path, strerror(err));
    }
    if (fd >= 0 && close(fd) != 0 && rc == HYP_OK)
        rc = hyp_fail(e, HYP_EFAIL, "%s: close failed: %s", path, strerror(errno));
    free(buf);
    return rc;
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
    return sw_write_sidecar(w, si, e);
}

/* Writes n tokens (already encoded, tokbytes each) — the split must have room for them. */
static int sw_put(shard_writer *w, const uint8_t *enc, uint64_t n, hyp_err *e) {
    while (n > 0) {
        if (w->fd < 0) {
            int rc = sw_open_shard(w, e);
            if (rc != HYP_OK) return rc;
        }
        if (w->doc_pending) {
            w->doc_pending = 0;
            uint64_t at = w->shard_n - w->shard_left;
            if (at > 0 && sw_doc_mark(w, at) != 0)
                return hyp_fail(e, HYP_EFAIL, "%s: out of memory", w->path);
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

/* Token ids of the documents, back to back (item_off[k] .. item_off[k + 1] is stream item k). */
typedef struct {
    int32_t *v;
    size_t n, cap;
} token_buf;

/* encode_document — the one place text becomes tokens (the data helpers' contract): the
 * selected tokenizer's ids of one document, after an EOT when the tokenizer has one (llm.c's
 * fineweb convention: every document starts with EOT). Appends to out. */
static int encode_document(hyp_tok *tok, const uint8_t *doc, size_t n, token_buf *out,
                           hyp_err *e) {
    int eot = hyp_tok_eot(tok);
    if (eot >= 0) {
        if (out->n == out->cap) {
            size_t c = out->cap ? out->cap * 2 : 1024;
            int32_t *p = realloc(out->v, c * sizeof *p);
            if (!p) return hyp_fail(e, HYP_EFAIL, "gen data: out of memory");
            out->v = p, out->cap = c;
        }
        out->v[out->n++] = eot;
    }
    return hyp_tok_encode(tok, doc, n, &out->v, &out->n, &out->cap, e);
}

/* tmpdir/name: j printed, a newline, fsync'd (a new file in gen data's staging directory). */
static int write_json(const char *tmpdir, const char *name, const cJSON *j, hyp_err *e) {
    char *txt = cJSON_Print(j);
    if (!txt) return hyp_fail(e, HYP_EFAIL, "%s: out of memory", name);
    char path[4200];
    join(path, sizeof path, tmpdir, name);
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
    if (o->stages && o->stages->curriculum_on) cJSON_AddStringToObject(m, "train_order", "curriculum");
    uint64_t docs = 0;
    for (int i = 0; i < n_sh; i++) docs += sh[i].docs;
    cJSON_AddNumberToObject(m, "documents", (double)docs);
    cJSON_AddStringToObject(m, "checksum", "xxh3_64 of the whole shard file, hex");
    for (int i = 0; i < n_src; i++) {
        cJSON *s = cJSON_CreateObject();
        cJSON_AddStringToObject(s, "path", src[i].path);
        cJSON_AddNumberToObject(s, "bytes", (double)src[i].bytes);
        cJSON_AddNumberToObject(s, "documents", (double)src[i].docs);
        cJSON_AddItemToArray(srcs, s);
    }
    cJSON_AddItemToObject(m, "sources", srcs);
    for (int i = 0; i < n_sh; i++) {
        cJSON *s = cJSON_CreateObject();
        cJSON_AddStringToObject(s, "file", sh[i].name);
        cJSON_AddStringToObject(s, "split", sh[i].split);
        cJSON_AddNumberToObject(s, "tokens", (double)sh[i].tokens);
        cJSON_AddStringToObject(s, "xxh3_64", sh[i].xxh3);
        cJSON_AddNumberToObject(s, "docs", (double)sh[i].docs);
        cJSON_AddStringToObject(s, "docs_xxh3_64", sh[i].docs_xxh3);
        cJSON_AddItemToArray(shards, s);
    }
    cJSON_AddItemToObject(m, "shards", shards);
    int rc = write_json(tmpdir, "meta.json", m, e);
    cJSON_Delete(m);
    return rc;
}

/* report.json: what each stage did (docs.h), written beside meta.json. */
static int write_report(const char *tmpdir, cJSON *report, hyp_err *e) {
    return write_json(tmpdir, "report.json", report, e);
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

/* A piece of the token stream written as one document: tokens [start, end) of stream item item. */
typedef struct {
    uint64_t start, end;
    uint32_t item;
} piece;

/* Writes the pieces in order (order == NULL: as listed), each one starting a document. */
static int write_pieces(shard_writer *w, const token_buf *tb, const piece *pc, size_t n,
                        const uint32_t *order, uint8_t *enc, size_t enc_tokens, hyp_err *e) {
    for (size_t i = 0; i < n; i++) {
        const piece *p = &pc[order ? order[i] : i];
        w->doc_pending = 1;
        for (uint64_t s = p->start; s < p->end;) {
            size_t k = p->end - s < enc_tokens ? (size_t)(p->end - s) : enc_tokens;
            for (size_t j = 0; j < k; j++) {
                uint32_t t = (uint32_t)tb->v[s + j];
                if (w->tokbytes == 2) {
                    enc[2 * j] = (uint8_t)t;
                    enc[2 * j + 1] = (uint8_t)(t >> 8);
                } else {
                    wr32(enc + 4 * j, t);
                }
            }
            int rc = sw_put(w, enc, k, e);
            if (rc != HYP_OK) return rc;
            s += k;
        }
    }
    return HYP_OK;
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
    hyp_stages no_stages;
    hyp_stages_default(&no_stages);
    const hyp_stages *st = o.stages ? o.stages : &no_stages;

    size_t olen = strlen(outdir);
    while (olen > 1 && outdir[olen - 1] == '/') olen--;
    char out[4096];
    if (olen >= sizeof out - 32)
        return hyp_fail(e, HYP_EINPUT, "%.200s...: path too long — use a shorter --out", outdir);
    memcpy(out, outdir, olen);
    out[olen] = '\0';

    int exists, rc = check_outdir(out, o.overwrite, &exists, e);
    if (rc != HYP_OK) return rc;

    /* read every input before creating anything, so a bad one fails fast and leaves nothing */
    source *src = calloc((size_t)n_inputs, sizeof *src);
    hyp_docs docs = {0};
    uint32_t *ids = NULL, *order = NULL, *piece_doc = NULL;
    size_t *item_off = NULL;
    piece *pieces = NULL;
    token_buf tb = {0};
    cJSON *report = cJSON_CreateObject();
    cJSON *stages = report ? cJSON_AddArrayToObject(report, "stages") : NULL;
    shard_info *infos = NULL;
    uint8_t *enc = NULL;
    XXH3_state_t *xs = NULL;
    shard_writer w = {.fd = -1};
    char tmpdir[4200] = "";
    if (!src || !stages) {
        rc = hyp_fail(e, HYP_EFAIL, "%s: out of memory", out);
        goto done;
    }
    int n_stdin = 0;
    cJSON *rin = cJSON_AddArrayToObject(report, "inputs");
    for (int i = 0; i < n_inputs && rc == HYP_OK; i++) {
        if (!inputs[i] || !inputs[i][0]) {
            rc = hyp_fail(e, HYP_EINPUT, "input %d: empty path — give a text file", i + 1);
            break;
        }
        int is_stdin = !strcmp(inputs[i], "-");
        if (is_stdin && n_stdin++) {
            rc = hyp_fail(e, HYP_EINPUT, "<stdin>: \"-\" given twice — stdin can be read only "
                          "once");
            break;
        }
        snprintf(src[i].path, sizeof src[i].path, "%s",
                 o.input_names && o.input_names[i] ? o.input_names[i]
                 : is_stdin                        ? "<stdin>"
                                                   : inputs[i]);
        size_t nd = 0;
        rc = hyp_docs_read(&docs, inputs[i], src[i].path, i, o.doc_sep, &nd, &src[i].bytes, e);
        src[i].docs = nd;
        cJSON *ri = cJSON_CreateObject();
        cJSON_AddStringToObject(ri, "path", src[i].path);
        cJSON_AddNumberToObject(ri, "documents", (double)nd);
        cJSON_AddNumberToObject(ri, "bytes", (double)src[i].bytes);
        cJSON_AddItemToArray(rin, ri);
    }
    if (rc != HYP_OK) goto done;
    cJSON_AddNumberToObject(report, "documents_read", (double)docs.n);
    if (o.doc_sep) cJSON_AddStringToObject(report, "doc_sep", o.doc_sep);

    /* the stages choose which documents, in which order (repeats allowed with mixing) */
    size_t n_items = docs.n;
    ids = malloc((n_items + 1) * sizeof *ids);
    if (!ids) {
        rc = hyp_fail(e, HYP_EFAIL, "%s: out of memory", out);
        goto done;
    }
    for (size_t i = 0; i < n_items; i++) ids[i] = (uint32_t)i;
    rc = hyp_stages_select(&docs, n_inputs, st, &ids, &n_items, stages, e);
    if (rc != HYP_OK) goto done;
    if (n_items == 0) {
        char why[160];
        hyp_stages_why_empty(stages, why, sizeof why);
        rc = hyp_fail(e, HYP_EINPUT, "%s: no document is left after the stages (%llu read%s) — "
                      "loosen the filter thresholds (see --set) or give more text", src[0].path,
                      (unsigned long long)docs.n, why);
        goto done;
    }

    /* encode every item of the stream */
    item_off = malloc((n_items + 1) * sizeof *item_off);
    if (!item_off) {
        rc = hyp_fail(e, HYP_EFAIL, "%s: out of memory", out);
        goto done;
    }
    for (size_t k = 0; k < n_items && rc == HYP_OK; k++) {
        item_off[k] = tb.n;
        rc = encode_document(tok, docs.text + docs.off[ids[k]], docs.len[ids[k]], &tb, e);
    }
    if (rc != HYP_OK) goto done;
    item_off[n_items] = tb.n;
    uint64_t total = tb.n;
    uint64_t n_val = 0;
    if (o.val_fraction > 0) {
        n_val = (uint64_t)llround((double)total * o.val_fraction);
        if (n_val == 0) n_val = 1;
    }
    if (n_val >= total) {
        rc = hyp_fail(e, HYP_EINPUT, "%s: the corpus has %llu %s, too few to hold out "
                      "val_fraction %g for validation — give more text", src[0].path,
                      (unsigned long long)total, tok_file ? "tokens" : "bytes", o.val_fraction);
        goto done;
    }
    uint64_t n_train = total - n_val;

    /* pieces: the stream cut at the train/val boundary (the document there becomes two) */
    pieces = malloc((n_items + 1) * sizeof *pieces);
    order = malloc((n_items + 1) * sizeof *order);
    piece_doc = malloc((n_items + 1) * sizeof *piece_doc);
    if (!pieces || !order || !piece_doc) {
        rc = hyp_fail(e, HYP_EFAIL, "%s: out of memory", out);
        goto done;
    }
    size_t n_pieces = 0, n_train_pieces = 0;
    for (size_t k = 0; k < n_items; k++) {
        uint64_t a = item_off[k], b = item_off[k + 1];
        if (a < n_train) {
            pieces[n_pieces++] = (piece){a, b < n_train ? b : n_train, (uint32_t)k};
            n_train_pieces = n_pieces;
        }
        if (b > n_train && b > a) pieces[n_pieces++] = (piece){a > n_train ? a : n_train, b, (uint32_t)k};
    }
    for (size_t i = 0; i < n_pieces; i++) {
        order[i] = (uint32_t)i;
        piece_doc[i] = ids[pieces[i].item];
    }
    if (st->curriculum_on) { /* orders the training pieces only: val stays a plain sample */
        rc = hyp_curriculum_run(&docs, &st->curriculum, piece_doc, n_train_pieces, order,
                                hyp_stage_report(stages, "curriculum", st->curriculum_spec), e);
        if (rc != HYP_OK) goto done;
    }

    char parent[4096];
    hyp_fs_dirname(out, parent, sizeof parent);
    if ((rc = hyp_fs_mkdirs(parent, e)) != HYP_OK) goto done;
    snprintf(tmpdir, sizeof tmpdir, "%s.tmp-XXXXXX", out);
    if (!mkdtemp(tmpdir)) {
        int err = errno;
        tmpdir[0] = '\0';
        rc = hyp_fail(e, hyp_fs_errcode(err), "%s: cannot create the output directory: %s — "
                      "choose a writable --out", out, strerror(err));
        goto done;
    }
    (void)chmod(tmpdir, 0755);
    if (tok_file && (rc = hyp_data_tok_copy(o.tokenizer, tmpdir, tok_file, e)) != HYP_OK) goto fail;

    size_t max_shards = (size_t)((n_train + o.shard_tokens - 1) / o.shard_tokens +
                                 (n_val + o.shard_tokens - 1) / o.shard_tokens) + 1;
    int n_infos = 0;
    enum { CHUNK = 1 << 20 };
    infos = calloc(max_shards, sizeof *infos);
    enc = malloc((size_t)CHUNK * 4);
    xs = XXH3_createState();
    if (!infos || !enc || !xs) {
        rc = hyp_fail(e, HYP_EFAIL, "%s: out of memory", out);
        goto fail;
    }
    w = (shard_writer){.dir = tmpdir, .split = "train", .split_left = n_train, .fd = -1,
                       .shard_tokens = o.shard_tokens, .tokbytes = tokbytes, .xs = xs,
                       .infos = infos, .n_infos = &n_infos};
    rc = write_pieces(&w, &tb, pieces, n_train_pieces, order, enc, CHUNK, e);
    if (rc == HYP_OK && n_val > 0) {
        w.split = "val";
        w.split_left = n_val;
        w.index = 0;
        rc = write_pieces(&w, &tb, pieces + n_train_pieces, n_pieces - n_train_pieces, NULL,
                          enc, CHUNK, e);
    }
    if (rc != HYP_OK) goto fail;
    cJSON *ro = cJSON_AddObjectToObject(report, "output");
    cJSON_AddNumberToObject(ro, "documents", (double)n_items);
    cJSON_AddNumberToObject(ro, "train_tokens", (double)n_train);
    cJSON_AddNumberToObject(ro, "val_tokens", (double)n_val);
    cJSON_AddNumberToObject(ro, "shards", n_infos);
    rc = write_meta(tmpdir, &o, tok, tok_file, tokbytes, src, n_inputs, infos, n_infos, n_train,
                    n_val, e);
    if (rc == HYP_OK) rc = write_report(tmpdir, report, e);
    if (rc != HYP_OK) goto fail;
    if (hyp_fs_fsync_dir(tmpdir) != 0) {
        rc = hyp_fail(e, HYP_EFAIL, "%s: fsync failed: %s", tmpdir, strerror(errno));
        goto fail;
    }
    rc = install_dir(tmpdir, out, exists, e);
    if (rc != HYP_OK) goto fail;
    if (hyp_fs_fsync_dir(parent) != 0)
        rc = hyp_fail(e, HYP_EFAIL, "%s: fsync failed: %s", parent, strerror(errno));
    goto done;
fail:
    if (w.fd >= 0) close(w.fd);
    if (tmpdir[0]) (void)hyp_fs_remove_flat(tmpdir, allow_any);
done:
    if (xs) XXH3_freeState(xs);
    free(w.doc_off);
    free(infos);
    free(enc);
    free(src);
    free(ids);
    free(order);
    free(piece_doc);
    free(item_off);
    free(pieces);
    free(tb.v);
    hyp_docs_free(&docs);
    cJSON_Delete(report);
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
    const uint8_t *mask; /* v2193 loss-mask sidecar S.mask (chat.h): [ntok] flags, or NULL */
    void *mask_base;
    size_t mask_size;
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
    int ordered_epoch0;    /* meta.json train_order "curriculum": epoch 0 keeps the file order */
    uint64_t perm_epoch;
    int perm_valid;
    hyp_loader_state st;
    uint32_t *win;         /* T+1 scratch */
    uint8_t *winmask;      /* T+1 loss flags of the window (shards with a .mask sidecar) */
    int masked;            /* some shard has a loss mask: targets where it is 0 become -1 */
    /* document starts (the .docs sidecars, docs_contract): global token indices, ascending;
     * n_docs == 0 when no shard of the split has a sidecar (one stream: today's behaviour) */
    uint64_t *doc_start;
    uint64_t n_docs;
    int n_sidecars;
    long slow_read_ms;     /* HYP_DATA_SLOW_READ_MS test hook (0: off) */
    int pf_depth;          /* v2128: batches prefetched by the producer thread (0: none) */
    hyp_prefetch *pf;      /* the running producer, or NULL; while it runs, st is the state of
                              the last batch handed out and the producer keeps its own */
    hyp_stream *stream;    /* v2129: batches from a document stream instead of the shards */
    int rows_mode;         /* HYP_ROWS_*: T-token windows, best-fit rows (v2126), dynamic (v2127) */
    hyp_pack pack;         /* the rows / batches of the last two (pack.h); sampling units = W */
    int32_t *row_doc, *row_end; /* T+1 each: a row slot's document start and end (packed rows) */
    hyp_batch_info last;   /* the shape and padding of the last batch handed out */
    uint32_t *rowperm;     /* v2127 train: the rows of epoch perm_epoch, shuffled within each bucket */
};

static void pf_stop(hyp_loader *L);

void hyp_loader_close(hyp_loader *L) {
    if (!L) return;
    pf_stop(L);
    for (int i = 0; i < L->n_shards; i++) {
        if (L->shards[i].map) munmap((void *)L->shards[i].map, L->shards[i].map_size);
        if (L->shards[i].mask_base) munmap(L->shards[i].mask_base, L->shards[i].mask_size);
        free(L->shards[i].path);
    }
    free(L->shards);
    free(L->perm);
    free(L->win);
    free(L->winmask);
    free(L->doc_start);
    hyp_pack_free(&L->pack);
    free(L->row_doc);
    free(L->row_end);
    free(L->rowperm);
    free(L->dir);
    hyp_stream_close(L->stream);
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
    const cJSON *order = cJSON_GetObjectItemCaseSensitive(m, "train_order");
    L->ordered_epoch0 = L->is_train && cJSON_IsString(order) && !strcmp(order->valuestring, "curriculum");
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
        char dp[4200];
        sidecar_path(dp, sizeof dp, fs->path);
        if (fs->has_docs && cJSON_IsNumber(nd) && nd->valuedouble != (double)fs->n_docs) {
            rc = hyp_fail(e, HYP_EINPUT, "%s: lists %llu documents but meta.json says %.0f — the "
                          "directory mixes files of two gen data runs; re-run gen data", dp,
                          (unsigned long long)fs->n_docs, nd->valuedouble);
            break;
        }
        if (fs->has_docs && cJSON_IsString(dh) && strcmp(dh->valuestring, fs->docs_xxh3) != 0) {
            rc = hyp_fail(e, HYP_EINPUT, "%s: xxh3_64 is %s but meta.json says %.20s — the "
                          "sidecar is corrupt or from another run; re-run gen data", dp,
                          fs->docs_xxh3, dh->valuestring);
            break;
        }
        if (!fs->has_docs && cJSON_IsNumber(nd)) {
            rc = hyp_fail(e, HYP_EINPUT, "%s: missing, but meta.json lists %.0f documents for %s — "
                          "the directory is incomplete; re-run gen data", dp, nd->valuedouble,
                          fs->path);
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
        if (rc == HYP_OK) rc = hyp_mask_open(s->path, s->ntok, &s->mask, &s->mask_base, &s->mask_size, e);
        L->masked |= s->mask != NULL;
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
        L->winmask = malloc((size_t)T + 1);
        if (!L->winmask) L->win = (free(L->win), NULL);
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

int hyp_loader_open_stream(hyp_stream *s, int B, int T, hyp_loader **out, hyp_err *e) {
    hyp_loader *L = calloc(1, sizeof *L);
    *out = NULL;
    if (!L || !(L->dir = strdup(hyp_stream_name(s)))) {
        free(L);
        hyp_stream_close(s);
        return hyp_fail(e, HYP_EFAIL, "--stream: out of memory");
    }
    L->is_train = 1, L->B = B, L->T = T, L->rank = 0, L->world = 1, L->stream = s;
    L->Wr = L->W = (uint64_t)hyp_stream_block_rows(s);
    L->meta_vocab = hyp_stream_vocab(s), L->limit = (uint64_t)L->meta_vocab, L->limit_why = "the tokenizer";
    L->n_sidecars = 1; /* rows carry document positions */
    *out = L;
    return HYP_OK;
}

/* The permutation of `epoch` (train only): Fisher–Yates from hyp_rng(seed, epoch); the identity
 * for epoch 0 of data written in curriculum order (v2120). */
static void shuffle_rows(hyp_loader *L, uint64_t epoch);

static void ensure_perm(hyp_loader *L, uint64_t epoch) {
    if (L->perm_valid && L->perm_epoch == epoch) return;
    for (uint64_t i = 0; i < L->W; i++) L->perm[i] = (uint32_t)i;
    shuffle_rows(L, epoch);
    if (L->ordered_epoch0 && epoch == 0) {
        L->perm_epoch = epoch;
        L->perm_valid = 1;
        return;
    }
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

/* v2127: which documents share a batch changes every epoch: the rows of each length bucket (a run
 * of batches with one bat_T) are shuffled by Fisher–Yates from hyp_rng(seed ^ a constant, epoch);
 * the bucket sizes, hence the batches' shapes, stay. Epoch 0 of curriculum-ordered data keeps the
 * order. */
static void shuffle_rows(hyp_loader *L, uint64_t epoch) {
    if (!L->rowperm) return;
    const hyp_pack *pk = &L->pack;
    for (uint64_t i = 0; i < pk->n_rows; i++) L->rowperm[i] = (uint32_t)i;
    if (L->ordered_epoch0 && epoch == 0) return;
    hyp_rng r;
    hyp_rng_seed2(&r, L->seed ^ 0x9e3779b97f4a7c15ULL, epoch);
    for (uint64_t b = 0; b < pk->n_bat;) {
        uint64_t e = b;
        while (e < pk->n_bat && pk->bat_T[e] == pk->bat_T[b]) e++;
        uint64_t lo = pk->bat_off[b], n = pk->bat_off[e] - lo;
        for (uint64_t i = n; i > 1; i--) {
            uint64_t j = hyp_rng_below(&r, i);
            uint32_t t = L->rowperm[lo + i - 1];
            L->rowperm[lo + i - 1] = L->rowperm[lo + j];
            L->rowperm[lo + j] = t;
        }
        b = e;
    }
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

/* Copies n tokens from global index g into L->win + off (and their loss flags), checking the
 * vocabulary. */
static int read_span(hyp_loader *L, uint64_t g, int n, int off, hyp_err *e) {
    int si = shard_of(L, g);
    for (int t = off; t < off + n; t++, g++) {
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
        L->winmask[t] = !s->mask || s->mask[k];
    }
    return HYP_OK;
}

/* Window w (T+1 tokens) into L->win. */
static int read_window(hyp_loader *L, uint64_t w, hyp_err *e) {
    return read_span(L, w * (uint64_t)L->T, L->T + 1, 0, e);
}

/* Packed row r (pack.h) as Tr inputs: its documents back to back, each token's target the next
 * token of its document (-1 for a document's last token, a masked token and the padded tail),
 * positions restarting at every document; padding = token 0, target -1, position 0 (attends to
 * itself only). Returns the padded input slots in *pad. */
static int fill_row(hyp_loader *L, uint64_t r, int Tr, int32_t *inputs, int32_t *targets, int32_t *positions,
                    uint64_t *pad, hyp_err *e) {
    int o = 0;
    for (uint64_t k = L->pack.row_off[r]; k < L->pack.row_off[r + 1]; k++) {
        const hyp_span *sp = &L->pack.span[k];
        int rc = read_span(L, sp->start, (int)sp->len, o, e);
        if (rc != HYP_OK) return rc;
        for (int t = o; t < o + (int)sp->len; t++) L->row_doc[t] = o, L->row_end[t] = o + (int)sp->len;
        o += (int)sp->len;
    }
    for (int t = 0; t < Tr; t++) {
        int real = t < o;
        inputs[t] = real ? (int32_t)L->win[t] : 0;
        targets[t] = real && t + 1 < L->row_end[t] && !(L->masked && !L->winmask[t + 1]) ? (int32_t)L->win[t + 1] : -1;
        if (positions) positions[t] = real ? t - L->row_doc[t] : 0;
    }
    *pad += o >= Tr ? 0 : (uint64_t)(Tr - o);
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
                   int32_t *positions, hyp_batch_info *info, hyp_err *e) {
    hyp_loader_state saved = *st;
    const int T = L->T;
    slow_read_hook(L);
    *info = (hyp_batch_info){L->B, T, 0};
    if (L->stream) return hyp_stream_produce(L->stream, st, L->B, inputs, targets, positions, e);
    for (int b = 0; b < (L->rows_mode == HYP_ROWS_DYNAMIC ? 1 : L->B); b++) {
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
        int rc = HYP_OK;
        if (L->rows_mode == HYP_ROWS_BFD) { /* v2126: packed row w */
            rc = fill_row(L, w, T, inputs + (size_t)b * T, targets + (size_t)b * T,
                          positions ? positions + (size_t)b * T : NULL, &info->pad, e);
            if (rc == HYP_OK) {
                st->position++;
                continue;
            }
        } else if (L->rows_mode == HYP_ROWS_DYNAMIC) { /* v2127: batch w, rows of one bucket */
            int Tb = L->pack.bat_T[w];
            uint64_t r0 = L->pack.bat_off[w], n = L->pack.bat_off[w + 1] - r0;
            *info = (hyp_batch_info){(int)n, Tb, 0};
            for (uint64_t i = 0; i < n && rc == HYP_OK; i++)
                rc = fill_row(L, L->rowperm ? L->rowperm[r0 + i] : r0 + i, Tb, inputs + i * Tb, targets + i * Tb, positions ? positions + i * Tb : NULL,
                              &info->pad, e);
            if (rc == HYP_OK) {
                st->position++;
                continue;
            }
        } else {
            rc = read_window(L, w, e);
        }
        if (rc != HYP_OK) {
            *st = saved;
            return rc;
        }
        for (int t = 0; t < T; t++) {
            inputs[(size_t)b * T + t] = (int32_t)L->win[t];
            targets[(size_t)b * T + t] = L->masked && !L->winmask[t + 1] ? -1 : (int32_t)L->win[t + 1];
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
    hyp_batch_info info;
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
        s->rc = produce(L, &st, s->inputs, s->targets, s->positions, &s->info, &s->err);
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
        L->last = s->info;
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
    hyp_batch_info info;
    int rc = produce(L, &L->st, inputs, targets, positions, &info, e);
    if (rc == HYP_OK) L->last = info;
    return rc;
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

/* Batches already prefetched were cut with the old setting: the producer restarts from st. */
void hyp_loader_set_masked(hyp_loader *L, int on) {
    int any = 0;
    for (int i = 0; i < L->n_shards; i++) any |= L->shards[i].mask != NULL;
    int running = L->pf != NULL;
    pf_stop(L);
    L->masked = on && any;
    if (running) {
        hyp_err e;
        if (pf_start(L, L->pf_depth, &e) != HYP_OK) L->pf_depth = 0; /* fall back to direct reads */
    }
}

void hyp_loader_reset(hyp_loader *L) {
    memset(&L->st, 0, sizeof L->st);
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

/* v2126 / v2127: the split's sampling units become packed rows or dynamic batches (pack.h). */
static int set_rows_mode(hyp_loader *L, int mode, int max_docs, int64_t budget, int buckets, hyp_err *e) {
    if (L->pf || L->st.epoch || L->st.position)
        return hyp_fail(e, HYP_EINPUT, "%s: the row layout must be chosen right after opening the loader", L->dir);
    uint64_t *sh = malloc(sizeof *sh * (size_t)L->n_shards);
    hyp_span *pieces = NULL;
    uint64_t n = 0;
    if (!sh) return hyp_fail(e, HYP_EFAIL, "%s: out of memory", L->dir);
    for (int i = 0; i < L->n_shards; i++) sh[i] = L->shards[i].start;
    hyp_pack_free(&L->pack);
    int rc = hyp_pack_pieces(L->doc_start, L->n_docs, sh, L->n_shards, L->total, L->T, &pieces, &n, e);
    free(sh);
    if (rc == HYP_OK)
        rc = mode == HYP_ROWS_BFD ? hyp_pack_bfd(&L->pack, pieces, n, L->T, max_docs, e)
                                  : hyp_pack_buckets(&L->pack, pieces, n, L->T, L->B, budget, buckets, e);
    free(pieces);
    if (rc != HYP_OK) return rc;
    uint64_t W = mode == HYP_ROWS_BFD ? L->pack.n_rows : L->pack.n_bat;
    const char *unit = mode == HYP_ROWS_BFD ? "packed rows" : "dynamic batches";
    if (W / (uint64_t)L->world == 0 || W > UINT32_MAX || L->pack.n_rows > UINT32_MAX) {
        hyp_pack_free(&L->pack);
        return hyp_fail(e, HYP_EINPUT, "%s: %llu %s of T = %d for %d rank%s — need at least one per rank and "
                        "fewer than 2^32: use more text, a smaller T or fewer ranks", L->dir, (unsigned long long)W,
                        unit, L->T, L->world, L->world == 1 ? "" : "s");
    }
    uint32_t *perm = L->is_train ? realloc(L->perm, sizeof *perm * (size_t)W) : NULL;
    free(L->row_doc);
    free(L->row_end);
    L->row_doc = malloc(sizeof *L->row_doc * ((size_t)L->T + 1));
    L->row_end = malloc(sizeof *L->row_end * ((size_t)L->T + 1));
    if ((L->is_train && !perm) || !L->row_doc || !L->row_end) {
        hyp_pack_free(&L->pack);
        return hyp_fail(e, HYP_EFAIL, "%s: out of memory for %llu %s", L->dir, (unsigned long long)W, unit);
    }
    if (perm) L->perm = perm;
    free(L->rowperm);
    L->rowperm = NULL;
    if (mode == HYP_ROWS_DYNAMIC && L->is_train &&
        !(L->rowperm = malloc(sizeof *L->rowperm * (size_t)(L->pack.n_rows ? L->pack.n_rows : 1)))) {
        hyp_pack_free(&L->pack);
        return hyp_fail(e, HYP_EFAIL, "%s: out of memory for %llu %s", L->dir, (unsigned long long)W, unit);
    }
    L->perm_valid = 0;
    L->W = W;
    L->Wr = W / (uint64_t)L->world;
    L->rows_mode = mode;
    return HYP_OK;
}

int hyp_loader_pack_rows(hyp_loader *L, int max_docs, hyp_err *e) {
    return set_rows_mode(L, HYP_ROWS_BFD, max_docs, 0, 0, e);
}

int hyp_loader_dynamic(hyp_loader *L, int64_t token_budget, int buckets, hyp_err *e) {
    return set_rows_mode(L, HYP_ROWS_DYNAMIC, 0, token_budget, buckets, e);
}

int hyp_loader_rows_mode(const hyp_loader *L) { return L->rows_mode; }

void hyp_loader_last_batch(const hyp_loader *L, hyp_batch_info *bi) { *bi = L->last; }

void hyp_loader_layout(const hyp_loader *L, uint64_t *tokens, uint64_t *slots, uint64_t *pad) {
    *tokens = L->rows_mode ? L->pack.tokens : L->W * (uint64_t)L->T;
    *slots = L->rows_mode ? L->pack.slots : L->W * (uint64_t)L->T;
    *pad = L->rows_mode ? L->pack.pad : 0;
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
int hyp_loader_masked(const hyp_loader *L) { return L->masked; }


/* ========================================================================================== */
/* hyp_data_verify                                                                             */

/* The .docs sidecar of a meta.json shard entry that lists one ("docs_xxh3_64"): checksum, header
 * (magic, version, count = "docs") and offsets (first 0, ascending, below the shard's tokens). */
static int verify_sidecar(const char *dir, const cJSON *entry, const char *file, uint64_t ntok,
                          hyp_err *e) {
    const cJSON *h = cJSON_GetObjectItemCaseSensitive(entry, "docs_xxh3_64");
    const cJSON *nd = cJSON_GetObjectItemCaseSensitive(entry, "docs");
    if (!cJSON_IsString(h)) return HYP_OK; /* written before sidecars existed */
    char name[512], path[4200];
    size_t fl = strlen(file);
    snprintf(name, sizeof name, "%.*s.docs", (int)(fl > 4 ? fl - 4 : fl), file);
    join(path, sizeof path, dir, name);
    char *buf = NULL;
    size_t n = 0;
    int rc = hyp_fs_read_small(path, (size_t)1 << 34, &buf, &n, e);
    if (rc != HYP_OK) return rc;
    const uint8_t *b = (const uint8_t *)buf;
    char hex[17];
    snprintf(hex, sizeof hex, "%016llx", (unsigned long long)XXH3_64bits(b, n));
    uint32_t cnt = n >= HEADER_BYTES ? rd32(b + 8) : 0;
    if (strcmp(hex, h->valuestring) != 0)
        rc = hyp_fail(e, HYP_EINPUT, "%s: checksum mismatch (xxh3_64 %s, meta.json says %.20s) — "
                      "the file is corrupt; re-run gen data", path, hex, h->valuestring);
    else if (n < HEADER_BYTES || rd32(b) != HYP_DOCS_MAGIC || rd32(b + 4) != 1 ||
             n != HEADER_BYTES + 8 * (size_t)cnt || (cJSON_IsNumber(nd) && nd->valuedouble != cnt))
        rc = hyp_fail(e, HYP_EINPUT, "%s: not a document sidecar of %u entries (bad header or "
                      "size) — re-run gen data", path, cnt);
    for (uint32_t i = 0; rc == HYP_OK && i < cnt; i++) {
        uint64_t off = rd32(b + HEADER_BYTES + 8 * (size_t)i) |
                       (uint64_t)rd32(b + HEADER_BYTES + 8 * (size_t)i + 4) << 32;
        uint64_t prev = i ? rd32(b + HEADER_BYTES + 8 * (size_t)(i - 1)) |
                                (uint64_t)rd32(b + HEADER_BYTES + 8 * (size_t)(i - 1) + 4) << 32
                          : 0;
        if ((i == 0 && off != 0) || (i > 0 && off <= prev) || off >= ntok)
            rc = hyp_fail(e, HYP_EINPUT, "%s: document offset %u is %llu, out of order or past "
                          "the shard's %llu tokens — re-run gen data", path, i,
                          (unsigned long long)off, (unsigned long long)ntok);
    }
    free(buf);
    return rc;
}

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
        if (rc == HYP_OK) rc = verify_sidecar(dir, s, f->valuestring, sh.ntok, e);
        if (sh.map) munmap((void *)sh.map, sh.map_size);
        if (rc != HYP_OK) break;
    }
    if (rc == HYP_OK && n_listed == 0)
        rc = hyp_fail(e, HYP_EINPUT, "%s: lists no shards — re-run gen data", path);
    cJSON_Delete(m);
    return rc;
}
