/* docs.c — reads `gen data` inputs into documents (docs.h): .jsonl (one "text" per line), plain
 * text (one document, or split at a separator line), either optionally gzip-compressed (zlib).
 * Never: tokenizes or changes a document's bytes (the shard writer and the stages do the rest). */
#include "docs.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "fsio.h"

void hyp_docs_free(hyp_docs *d) {
    free(d->text);
    free(d->off);
    free(d->len);
    free(d->source);
    memset(d, 0, sizeof *d);
}

static int ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && !strcmp(s + n - m, suffix);
}

static int docs_push(hyp_docs *d, const uint8_t *p, size_t n, int source) {
    if (d->n == d->cap) {
        size_t cap = d->cap ? d->cap * 2 : 1024;
        uint64_t *off = realloc(d->off, cap * sizeof *off);
        if (off) d->off = off;
        uint64_t *len = realloc(d->len, cap * sizeof *len);
        if (len) d->len = len;
        int32_t *src = realloc(d->source, cap * sizeof *src);
        if (src) d->source = src;
        if (!off || !len || !src) return -1;
        d->cap = cap;
    }
    if (d->text_len + n > d->text_cap) {
        size_t cap = d->text_cap ? d->text_cap : 1 << 16;
        while (cap < d->text_len + n) cap *= 2;
        uint8_t *t = realloc(d->text, cap);
        if (!t) return -1;
        d->text = t;
        d->text_cap = cap;
    }
    memcpy(d->text + d->text_len, p, n);
    d->off[d->n] = d->text_len;
    d->len[d->n] = n;
    d->source[d->n] = source;
    d->text_len += n;
    d->n++;
    return 0;
}

/* The whole input, decompressed when gz. */
static int slurp(const char *path, const char *display, int gz, uint8_t **out, size_t *n,
                 hyp_err *e) {
    *out = NULL;
    *n = 0;
    int is_stdin = !strcmp(path, "-");
    if (!is_stdin) {
        struct stat st;
        if (stat(path, &st) != 0) {
            int err = errno;
            if (err == ENOENT)
                return hyp_fail(e, HYP_EINPUT, "%s: no such file — check the input path", display);
            return hyp_fail(e, hyp_fs_errcode(err), "%s: cannot read: %s — check the input path",
                            display, strerror(err));
        }
        if (S_ISDIR(st.st_mode))
            return hyp_fail(e, HYP_EINPUT, "%s: is a directory — give the text files inside it",
                            display);
        if (!S_ISREG(st.st_mode))
            return hyp_fail(e, HYP_EINPUT, "%s: not a regular file — give plain text files (or "
                            "\"-\" for stdin)", display);
        if (st.st_size == 0)
            return hyp_fail(e, HYP_EINPUT, "%s: input is empty — give a non-empty text file or "
                            "drop it from the list", display);
    }
    int fd = is_stdin ? dup(STDIN_FILENO) : open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        int err = errno;
        return hyp_fail(e, hyp_fs_errcode(err), "%s: cannot open: %s — check the input path",
                        display, strerror(err));
    }
    gzFile g = NULL;
    if (gz) {
        g = gzdopen(fd, "rb");
        if (!g) {
            close(fd);
            return hyp_fail(e, HYP_EFAIL, "%s: zlib cannot open it (out of memory)", display);
        }
    }
    size_t cap = 1 << 20, len = 0;
    uint8_t *buf = malloc(cap);
    int rc = HYP_OK;
    for (;;) {
        if (!buf) {
            rc = hyp_fail(e, HYP_EFAIL, "%s: out of memory", display);
            break;
        }
        if (cap - len < (1 << 16)) {
            uint8_t *nb = realloc(buf, cap * 2);
            if (!nb) {
                rc = hyp_fail(e, HYP_EFAIL, "%s: out of memory", display);
                break;
            }
            buf = nb;
            cap *= 2;
        }
        long long got;
        if (gz) {
            int r = gzread(g, buf + len, (unsigned)(cap - len));
            if (r < 0) {
                int zerr;
                const char *zmsg = gzerror(g, &zerr);
                rc = hyp_fail(e, HYP_EINPUT, "%s: corrupt gzip data after %zu bytes (%s) — give "
                              "an intact .gz file", display, len, zmsg);
                break;
            }
            got = r;
        } else {
            ssize_t r = read(fd, buf + len, cap - len);
            if (r < 0 && errno == EINTR) continue;
            if (r < 0) {
                rc = hyp_fail(e, HYP_EINPUT, "%s: read failed: %s — check the input", display,
                              strerror(errno));
                break;
            }
            got = r;
        }
        if (got == 0) break;
        len += (size_t)got;
    }
    if (gz) {
        int zr = gzclose_r(g);
        if (zr != Z_OK && rc == HYP_OK)
            rc = hyp_fail(e, HYP_EINPUT, "%s: truncated or corrupt gzip file — give an intact "
                          ".gz file", display);
    } else {
        close(fd);
    }
    if (rc != HYP_OK) {
        free(buf);
        return rc;
    }
    if (len == 0) {
        free(buf);
        return hyp_fail(e, HYP_EINPUT, "%s: input is empty — give a non-empty text file or drop "
                        "it from the list", display);
    }
    const uint8_t *nul = memchr(buf, 0, len);
    if (nul) {
        unsigned long long at = (unsigned long long)(nul - buf);
        free(buf);
        return hyp_fail(e, HYP_EINPUT, "%s: NUL byte at offset %llu — this is not a text file "
                        "(binary data?); give plain UTF-8 text", display, at);
    }
    *out = buf;
    *n = len;
    return HYP_OK;
}

static int only_space(const uint8_t *p, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (!(p[i] == ' ' || p[i] == '\t' || p[i] == '\n' || p[i] == '\r' || p[i] == '\f' ||
              p[i] == '\v'))
            return 0;
    return 1;
}

static int read_jsonl(hyp_docs *d, const uint8_t *buf, size_t len, const char *display,
                      int source, hyp_err *e) {
    size_t line = 0, pos = 0;
    while (pos < len) {
        line++;
        const uint8_t *nl = memchr(buf + pos, '\n', len - pos);
        size_t end = nl ? (size_t)(nl - buf) : len;
        const uint8_t *p = buf + pos;
        size_t n = end - pos;
        pos = end + 1;
        if (only_space(p, n)) continue;
        cJSON *j = cJSON_ParseWithLength((const char *)p, n);
        cJSON *t = j ? cJSON_GetObjectItemCaseSensitive(j, "text") : NULL;
        if (!cJSON_IsString(t) || !t->valuestring) {
            int parsed = j != NULL;
            cJSON_Delete(j);
            return hyp_fail(e, HYP_EINPUT, "%s:%zu: %s — each line of a .jsonl input is a JSON "
                            "object with a \"text\" string", display, line,
                            parsed ? "no \"text\" string" : "not valid JSON");
        }
        size_t tl = strlen(t->valuestring);
        int rc = tl == 0 ? 0 : docs_push(d, (const uint8_t *)t->valuestring, tl, source);
        cJSON_Delete(j);
        if (rc != 0) return hyp_fail(e, HYP_EFAIL, "%s: out of memory", display);
    }
    return HYP_OK;
}

/* Documents separated by lines equal to sep (a trailing '\r' is ignored). */
static int read_separated(hyp_docs *d, const uint8_t *buf, size_t len, const char *sep,
                          const char *display, int source, hyp_err *e) {
    size_t sl = strlen(sep), start = 0, pos = 0;
    while (pos <= len) {
        const uint8_t *nl = pos < len ? memchr(buf + pos, '\n', len - pos) : NULL;
        size_t end = nl ? (size_t)(nl - buf) : len;
        size_t n = end - pos;
        if (n > 0 && buf[pos + n - 1] == '\r') n--;
        int is_sep = n == sl && !memcmp(buf + pos, sep, sl);
        if (is_sep || !nl) {
            size_t doc_end = is_sep ? pos : len;
            if (doc_end > start && !only_space(buf + start, doc_end - start) &&
                docs_push(d, buf + start, doc_end - start, source) != 0)
                return hyp_fail(e, HYP_EFAIL, "%s: out of memory", display);
            start = nl ? end + 1 : len;
        }
        if (!nl) break;
        pos = end + 1;
    }
    return HYP_OK;
}

int hyp_docs_read(hyp_docs *d, const char *path, const char *display, int source,
                  const char *doc_sep, size_t *n_read, uint64_t *bytes_read, hyp_err *e) {
    int gz = ends_with(path, ".gz");
    size_t base = strlen(path) - (gz ? 3 : 0);
    int jsonl = base >= 6 && !strncmp(path + base - 6, ".jsonl", 6);
    uint8_t *buf;
    size_t len;
    int rc = slurp(path, display, gz, &buf, &len, e);
    if (rc != HYP_OK) return rc;
    size_t before = d->n;
    if (jsonl) {
        rc = read_jsonl(d, buf, len, display, source, e);
    } else if (doc_sep && doc_sep[0]) {
        rc = read_separated(d, buf, len, doc_sep, display, source, e);
    } else if (docs_push(d, buf, len, source) != 0) {
        rc = hyp_fail(e, HYP_EFAIL, "%s: out of memory", display);
    }
    free(buf);
    if (rc != HYP_OK) return rc;
    if (d->n == before)
        return hyp_fail(e, HYP_EINPUT, "%s: holds no document%s — give a file with text", display,
                        jsonl ? " (every line's \"text\" is empty)"
                              : " (only separators and blank lines)");
    if (n_read) *n_read = d->n - before;
    if (bytes_read) *bytes_read = len;
    return HYP_OK;
}
