/* stream.c — v2129 streaming dataset (stream.h): a document reader over text / JSONL files read
 * through zlib one file at a time, the per-rank tokenizer and row cutter, and the block shuffle
 * buffer with its resumable position. Never: loads a file beyond the current document, keeps a
 * per-corpus index, prints or exits. */
#include "stream.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <glob.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <zlib.h>

#include "rng.h"
#include "tokenizer.h"

#define CHUNK (1 << 16)
#define NST HYP_LOADER_STREAM_N /* the state vector: */
enum { S_PASS, S_FILE, S_OFF, S_DOC, S_LINE, S_SKIP };

typedef struct { /* a kept document of this rank that still has tokens in the pending stream */
    uint64_t at[NST]; /* its position (S_SKIP unused) */
    uint64_t abs;     /* index of its first token in the rank's token stream of this read */
} docrec;

struct hyp_stream {
    char **paths;
    int *jsonl;
    int n_paths;
    char name[512];
    char *doc_sep;
    hyp_tok *tok;
    int eot, vocab;
    int K, T, rank, world;
    uint64_t seed;
    /* reader: file g_file open at uncompressed offset g_off, g_line lines before it */
    gzFile g;
    int g_file, g_from_start; /* g_from_start: the file was read from offset 0 (count its docs) */
    uint64_t g_off, g_line, g_docs;
    uint8_t *chunk;
    size_t ch_pos, ch_len;
    int ch_eof;
    uint8_t *line; /* the current line / document bytes */
    size_t line_len, line_cap;
    uint8_t *doc;
    size_t doc_len, doc_cap;
    uint64_t pass, doc_idx; /* the next document's pass and index */
    int pass_from_start;
    uint64_t pass_rows;
    /* the rank's pending tokens: tok[p0 .. pn) is stream index abs0 .. */
    int32_t *ptok;
    uint8_t *pflag; /* 1 = a document starts at this token */
    size_t p0, pn, pcap;
    uint64_t abs0;
    docrec *recs;
    size_t nrec, rcap;
    int32_t *enc;
    size_t enc_len, enc_cap;
    int reader_valid;          /* the reader + pending stand at reader_at */
    uint64_t reader_at[NST];
    /* the block cache */
    int valid;
    uint64_t blk, blk_start[NST], next_start[NST];
    int32_t *rows, *rpos;      /* [K][T+1], [K][T] */
    uint32_t *perm;
    uint64_t docs_read, rows_cut;
};

static int ends_with(const char *s, const char *suf) {
    size_t n = strlen(s), m = strlen(suf);
    return n >= m && !strcmp(s + n - m, suf);
}

static int add_path(hyp_stream *s, const char *p, hyp_err *e) {
    char **np = realloc(s->paths, (size_t)(s->n_paths + 1) * sizeof *np);
    if (np) s->paths = np;
    int *nj = realloc(s->jsonl, (size_t)(s->n_paths + 1) * sizeof *nj);
    if (nj) s->jsonl = nj;
    char *c = strdup(p);
    if (!np || !nj || !c) {
        free(c);
        return hyp_fail(e, HYP_EFAIL, "--stream: out of memory");
    }
    size_t n = strlen(p) - (ends_with(p, ".gz") ? 3 : 0);
    s->paths[s->n_paths] = c;
    s->jsonl[s->n_paths] = n >= 6 && !strncmp(p + n - 6, ".jsonl", 6);
    s->n_paths++;
    return HYP_OK;
}

/* A source file: regular, non-empty, no NUL byte in its first 64 KiB (decompressed). */
static int check_file(hyp_stream *s, const char *p, hyp_err *e) {
    struct stat st;
    if (stat(p, &st) != 0)
        return hyp_fail(e, HYP_EINPUT, "--stream %s: %s — check the path", p,
                        errno == ENOENT ? "no such file" : strerror(errno));
    if (!S_ISREG(st.st_mode))
        return hyp_fail(e, HYP_EINPUT, "--stream %s: not a regular file — give text / .jsonl files (or a glob of them)", p);
    if (st.st_size == 0)
        return hyp_fail(e, HYP_EINPUT, "--stream %s: the file is empty — give files with text or drop it", p);
    gzFile g = gzopen(p, "rb");
    if (!g) return hyp_fail(e, HYP_EINPUT, "--stream %s: cannot open: %s — check the file", p, strerror(errno));
    int n = gzread(g, s->chunk, CHUNK);
    gzclose_r(g);
    if (n < 0) return hyp_fail(e, HYP_EINPUT, "--stream %s: corrupt gzip data — give an intact .gz file", p);
    if (n == 0) return hyp_fail(e, HYP_EINPUT, "--stream %s: holds no text once decompressed — give files with text", p);
    const uint8_t *z = memchr(s->chunk, 0, (size_t)n);
    if (z)
        return hyp_fail(e, HYP_EINPUT, "--stream %s: NUL byte at offset %ld — this is not a text file (binary data?); give plain UTF-8 text or .jsonl", p,
                        (long)(z - s->chunk));
    return HYP_OK;
}

void hyp_stream_close(hyp_stream *s) {
    if (!s) return;
    if (s->g) gzclose_r(s->g);
    for (int i = 0; i < s->n_paths; i++) free(s->paths[i]);
    free(s->paths);
    free(s->jsonl);
    free(s->doc_sep);
    hyp_tok_free(s->tok);
    free(s->chunk);
    free(s->line);
    free(s->doc);
    free(s->ptok);
    free(s->pflag);
    free(s->recs);
    free(s->enc);
    free(s->rows);
    free(s->rpos);
    free(s->perm);
    free(s);
}

int hyp_stream_open(const char *sources, const char *doc_sep, const char *tokenizer, int K, int T,
                    uint64_t seed, int rank, int world, hyp_stream **out, hyp_err *e) {
    *out = NULL;
    if (!sources || !sources[0])
        return hyp_fail(e, HYP_EINPUT, "--stream: no source given — give files or globs, e.g. --stream 'corpus/*.jsonl.gz'");
    if (K < 1 || K > 10000000 || T < 1 || world < 1 || rank < 0 || rank >= world)
        return hyp_fail(e, HYP_EINPUT, "--stream: shuffle buffer %d / T %d / rank %d of %d out of range — regenerate with a valid v2129.shuffle_buffer", K, T, rank, world);
    hyp_stream *s = calloc(1, sizeof *s);
    if (!s || !(s->chunk = malloc(CHUNK))) {
        free(s);
        return hyp_fail(e, HYP_EFAIL, "--stream: out of memory");
    }
    s->K = K, s->T = T, s->seed = seed, s->rank = rank, s->world = world, s->g_file = -1;
    int rc = HYP_OK;
    char *list = strdup(sources);
    if (!list) rc = hyp_fail(e, HYP_EFAIL, "--stream: out of memory");
    for (char *save = NULL, *tokp = list ? strtok_r(list, ",", &save) : NULL; !rc && tokp;
         tokp = strtok_r(NULL, ",", &save)) {
        if (!strpbrk(tokp, "*?[")) {
            if (!(rc = check_file(s, tokp, e))) rc = add_path(s, tokp, e);
            continue;
        }
        glob_t gl;
        int gr = glob(tokp, 0, NULL, &gl);
        if (gr == GLOB_NOMATCH) rc = hyp_fail(e, HYP_EINPUT, "--stream %s: the pattern matches no file — check the path", tokp);
        else if (gr) rc = hyp_fail(e, HYP_EINPUT, "--stream %s: cannot expand the pattern — check the path", tokp);
        for (size_t i = 0; !rc && i < gl.gl_pathc; i++)
            if (!(rc = check_file(s, gl.gl_pathv[i], e))) rc = add_path(s, gl.gl_pathv[i], e);
        if (gr == 0) globfree(&gl);
    }
    free(list);
    if (!rc && s->n_paths == 0)
        rc = hyp_fail(e, HYP_EINPUT, "--stream '%s': no source file — give files or globs", sources);
    if (!rc && doc_sep && doc_sep[0] && !(s->doc_sep = strdup(doc_sep))) rc = hyp_fail(e, HYP_EFAIL, "--stream: out of memory");
    if (!rc && !(s->tok = hyp_tok_open(tokenizer && tokenizer[0] ? tokenizer : "byte", e))) rc = HYP_EINPUT;
    if (!rc) {
        s->eot = hyp_tok_eot(s->tok), s->vocab = hyp_tok_vocab_size(s->tok);
        s->rows = malloc((size_t)K * (size_t)(T + 1) * sizeof *s->rows);
        s->rpos = malloc((size_t)K * (size_t)T * sizeof *s->rpos);
        s->perm = malloc((size_t)K * sizeof *s->perm);
        if (!s->rows || !s->rpos || !s->perm)
            rc = hyp_fail(e, HYP_EFAIL, "--stream: out of memory for a shuffle buffer of %d rows of %d tokens — lower v2129.shuffle_buffer", K, T + 1);
    }
    if (rc) {
        hyp_stream_close(s);
        return rc;
    }
    if (s->n_paths == 1) snprintf(s->name, sizeof s->name, "%s", s->paths[0]);
    else snprintf(s->name, sizeof s->name, "%d files (%s ... %s)", s->n_paths, s->paths[0], s->paths[s->n_paths - 1]);
    *out = s;
    return HYP_OK;
}

/* ---- the reader ---------------------------------------------------------------------------- */

static void reader_close(hyp_stream *s) {
    if (s->g) gzclose_r(s->g);
    s->g = NULL;
    s->g_file = -1;
}

/* Opens file f (if it is not the open one) and positions it at uncompressed offset off, with
 * `line` lines before it. f == n_paths: the end of the sources. */
static int open_file(hyp_stream *s, uint64_t f, uint64_t off, uint64_t line, hyp_err *e) {
    if (f > (uint64_t)s->n_paths)
        return hyp_fail(e, HYP_EINPUT, "--stream: the saved position names file %llu of %d — resume with the same --stream sources as the checkpoint",
                        (unsigned long long)f + 1, s->n_paths);
    if ((int)f != s->g_file || !s->g) {
        reader_close(s);
        if ((int)f == s->n_paths) {
            s->g_file = s->n_paths;
            return HYP_OK;
        }
        const char *p = s->paths[f];
        if (!(s->g = gzopen(p, "rb")))
            return hyp_fail(e, HYP_EINPUT, "--stream %s: cannot open: %s — check the file", p, strerror(errno));
        gzbuffer(s->g, 1 << 17);
        s->g_file = (int)f;
        s->g_off = 0;
    }
    if (s->g_off != off && gzseek(s->g, (z_off_t)off, SEEK_SET) != (z_off_t)off)
        return hyp_fail(e, HYP_EINPUT, "--stream %s: cannot reach offset %llu of the saved position — the file changed since the checkpoint; resume with the same sources",
                        s->paths[s->g_file], (unsigned long long)off);
    s->g_off = off, s->g_line = line, s->g_from_start = off == 0, s->g_docs = 0;
    s->ch_pos = s->ch_len = 0, s->ch_eof = 0;
    return HYP_OK;
}

/* Positions the reader at at[] (pass, file, offset, document index, line). */
static int reader_seek(hyp_stream *s, const uint64_t at[NST], hyp_err *e) {
    s->pass = at[S_PASS], s->doc_idx = at[S_DOC];
    s->pass_from_start = at[S_FILE] == 0 && at[S_OFF] == 0 && at[S_DOC] == 0;
    s->pass_rows = 0;
    return open_file(s, at[S_FILE], at[S_OFF], at[S_LINE], e);
}

static int grow(uint8_t **p, size_t *cap, size_t need) {
    if (need <= *cap) return 0;
    size_t c = *cap ? *cap : 4096;
    while (c < need) c *= 2;
    uint8_t *n = realloc(*p, c);
    if (!n) return -1;
    *p = n, *cap = c;
    return 0;
}

/* The next line of the open file into s->line (without '\n'); *got = 0 at the end of the file;
 * *nl = it ended with '\n'. Refuses NUL bytes. */
static int read_line(hyp_stream *s, int *got, int *nl, hyp_err *e) {
    const char *p = s->paths[s->g_file];
    s->line_len = 0;
    *got = 0, *nl = 0;
    for (;;) {
        if (s->ch_pos == s->ch_len) {
            if (s->ch_eof) return HYP_OK;
            int n = gzread(s->g, s->chunk, CHUNK);
            if (n < 0) {
                int zerr;
                const char *zm = gzerror(s->g, &zerr);
                return hyp_fail(e, HYP_EINPUT, "--stream %s: corrupt gzip data near offset %llu (%s) — give an intact .gz file", p,
                                (unsigned long long)s->g_off, zm);
            }
            if (n == 0) {
                s->ch_eof = 1;
                return HYP_OK;
            }
            s->ch_pos = 0, s->ch_len = (size_t)n;
        }
        const uint8_t *b = s->chunk + s->ch_pos;
        size_t avail = s->ch_len - s->ch_pos;
        const uint8_t *q = memchr(b, '\n', avail);
        size_t take = q ? (size_t)(q - b) : avail;
        const uint8_t *z = memchr(b, 0, take);
        if (z)
            return hyp_fail(e, HYP_EINPUT, "--stream %s:%llu: NUL byte at offset %llu — this is not a text file (binary data?); give plain UTF-8 text or .jsonl",
                            p, (unsigned long long)s->g_line + 1, (unsigned long long)(s->g_off + s->line_len + (uint64_t)(z - b)));
        if (grow(&s->line, &s->line_cap, s->line_len + take + 1)) return hyp_fail(e, HYP_EFAIL, "--stream %s: out of memory", p);
        memcpy(s->line + s->line_len, b, take);
        s->line_len += take;
        s->ch_pos += take + (q ? 1 : 0);
        *got = 1;
        if (q) {
            *nl = 1;
            break;
        }
    }
    s->g_off += s->line_len + (uint64_t)*nl;
    s->g_line++;
    return HYP_OK;
}

static int only_space(const uint8_t *p, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (!(p[i] == ' ' || p[i] == '\t' || p[i] == '\n' || p[i] == '\r' || p[i] == '\f' || p[i] == '\v')) return 0;
    return 1;
}

static int doc_set(hyp_stream *s, const uint8_t *p, size_t n) {
    if (grow(&s->doc, &s->doc_cap, n + 1)) return -1;
    memcpy(s->doc, p, n);
    s->doc_len = n;
    return 0;
}

static int doc_append(hyp_stream *s, const uint8_t *p, size_t n, int nl) {
    if (grow(&s->doc, &s->doc_cap, s->doc_len + n + 2)) return -1;
    memcpy(s->doc + s->doc_len, p, n);
    s->doc_len += n;
    if (nl) s->doc[s->doc_len++] = '\n';
    return 0;
}

/* The next kept document of the current file into s->doc, its position into at[]; *got = 0 at
 * the end of the file. Mirrors docs.c's rules (gen data reads the same documents). */
static int next_in_file(hyp_stream *s, uint64_t at[NST], int *got, hyp_err *e) {
    const char *p = s->paths[s->g_file];
    int rc, nl, any;
    *got = 0;
    if (s->jsonl[s->g_file]) {
        for (;;) {
            uint64_t off = s->g_off, line = s->g_line;
            if ((rc = read_line(s, &any, &nl, e))) return rc;
            if (!any) return HYP_OK;
            if (only_space(s->line, s->line_len)) continue;
            cJSON *j = cJSON_ParseWithLength((const char *)s->line, s->line_len);
            cJSON *t = j ? cJSON_GetObjectItemCaseSensitive(j, "text") : NULL;
            if (!cJSON_IsString(t) || !t->valuestring) {
                int parsed = j != NULL;
                cJSON_Delete(j);
                return hyp_fail(e, HYP_EINPUT, "%s:%llu: %s — each line of a .jsonl input is a JSON object with a \"text\" string", p,
                                (unsigned long long)line + 1, parsed ? "no \"text\" string" : "not valid JSON");
            }
            size_t tl = strlen(t->valuestring);
            int bad = tl && doc_set(s, (const uint8_t *)t->valuestring, tl);
            cJSON_Delete(j);
            if (bad) return hyp_fail(e, HYP_EFAIL, "--stream %s: out of memory", p);
            if (!tl) continue;
            at[S_OFF] = off, at[S_LINE] = line;
            *got = 1;
            return HYP_OK;
        }
    }
    if (!s->doc_sep) { /* the whole file is one document */
        if (s->g_off != 0 || s->ch_eof) return HYP_OK; /* read already */
        s->doc_len = 0;
        for (;;) {
            if ((rc = read_line(s, &any, &nl, e))) return rc;
            if (!any) break;
            if (doc_append(s, s->line, s->line_len, nl)) return hyp_fail(e, HYP_EFAIL, "--stream %s: out of memory", p);
        }
        at[S_OFF] = 0, at[S_LINE] = 0;
        *got = s->doc_len > 0;
        return HYP_OK;
    }
    size_t sl = strlen(s->doc_sep);
    for (;;) { /* documents separated by lines equal to doc_sep (a trailing '\r' ignored) */
        uint64_t off = s->g_off, line = s->g_line;
        s->doc_len = 0;
        int ended = 0;
        for (;;) {
            if ((rc = read_line(s, &any, &nl, e))) return rc;
            if (!any) {
                ended = 1;
                break;
            }
            size_t n = s->line_len;
            if (n > 0 && s->line[n - 1] == '\r') n--;
            if (n == sl && !memcmp(s->line, s->doc_sep, sl)) break;
            if (doc_append(s, s->line, s->line_len, nl)) return hyp_fail(e, HYP_EFAIL, "--stream %s: out of memory", p);
        }
        if (s->doc_len > 0 && !only_space(s->doc, s->doc_len)) {
            at[S_OFF] = off, at[S_LINE] = line;
            *got = 1;
            return HYP_OK;
        }
        if (ended) return HYP_OK;
    }
}

/* The next kept document of this rank (tokenized into s->enc) and its position; *got = 0 at the
 * end of the sources. Documents of other ranks are read and counted, not tokenized. */
static int next_doc(hyp_stream *s, uint64_t at[NST], int *got, hyp_err *e) {
    int rc;
    *got = 0;
    for (;;) {
        if (s->g_file >= s->n_paths) return HYP_OK;
        if (!s->g && (rc = open_file(s, (uint64_t)s->g_file, 0, 0, e))) return rc;
        int any;
        at[S_PASS] = s->pass, at[S_FILE] = (uint64_t)s->g_file, at[S_DOC] = s->doc_idx, at[S_SKIP] = 0;
        if ((rc = next_in_file(s, at, &any, e))) return rc;
        if (!any) {
            if (s->g_from_start && s->g_docs == 0)
                return hyp_fail(e, HYP_EINPUT, "--stream %s: holds no document (%s) — give a file with text", s->paths[s->g_file],
                                s->jsonl[s->g_file] ? "every line's \"text\" is empty" : "only separators and blank lines");
            int next = s->g_file + 1;
            reader_close(s);
            s->g_file = next; /* opened on the next call */
            continue;
        }
        s->g_docs++;
        uint64_t idx = s->doc_idx++;
        if (idx % (uint64_t)s->world != (uint64_t)s->rank) continue;
        s->enc_len = 0;
        if (s->eot >= 0) {
            if (s->enc_cap < 1) {
                int32_t *n = realloc(s->enc, 1024 * sizeof *n);
                if (!n) return hyp_fail(e, HYP_EFAIL, "--stream: out of memory");
                s->enc = n, s->enc_cap = 1024;
            }
            s->enc[s->enc_len++] = s->eot;
        }
        if ((rc = hyp_tok_encode(s->tok, s->doc, s->doc_len, &s->enc, &s->enc_len, &s->enc_cap, e))) return rc;
        s->docs_read++;
        *got = 1;
        return HYP_OK;
    }
}

/* ---- pending tokens, rows, blocks ------------------------------------------------------------ */

static int pend_reserve(hyp_stream *s, size_t extra) {
    if (s->p0 > 0 && s->pn + extra > s->pcap) { /* compact first */
        memmove(s->ptok, s->ptok + s->p0, (s->pn - s->p0) * sizeof *s->ptok);
        memmove(s->pflag, s->pflag + s->p0, s->pn - s->p0);
        s->pn -= s->p0, s->p0 = 0;
    }
    if (s->pn + extra <= s->pcap) return 0;
    size_t c = s->pcap ? s->pcap : 4096;
    while (c < s->pn + extra) c *= 2;
    int32_t *t = realloc(s->ptok, c * sizeof *t);
    if (t) s->ptok = t;
    uint8_t *f = realloc(s->pflag, c);
    if (f) s->pflag = f;
    if (!t || !f) return -1;
    s->pcap = c;
    return 0;
}

/* Appends s->enc (the document at at[]) to the pending stream. */
static int pend_doc(hyp_stream *s, const uint64_t at[NST], hyp_err *e) {
    if (s->enc_len == 0) return HYP_OK;
    if (pend_reserve(s, s->enc_len)) return hyp_fail(e, HYP_EFAIL, "--stream: out of memory");
    for (size_t i = 0; i < s->enc_len; i++)
        if (s->enc[i] < 0 || s->enc[i] >= s->vocab)
            return hyp_fail(e, HYP_EINPUT, "--stream %s: token %d outside the tokenizer's vocabulary %d", s->paths[at[S_FILE]], s->enc[i], s->vocab);
    memcpy(s->ptok + s->pn, s->enc, s->enc_len * sizeof *s->ptok);
    memset(s->pflag + s->pn, 0, s->enc_len);
    s->pflag[s->pn] = 1;
    if (s->nrec == s->rcap) {
        size_t c = s->rcap ? s->rcap * 2 : 16;
        docrec *r = realloc(s->recs, c * sizeof *r);
        if (!r) return hyp_fail(e, HYP_EFAIL, "--stream: out of memory");
        s->recs = r, s->rcap = c;
    }
    docrec *r = &s->recs[s->nrec++];
    memcpy(r->at, at, sizeof r->at);
    r->abs = s->abs0 + (uint64_t)(s->pn - s->p0);
    s->pn += s->enc_len;
    return HYP_OK;
}

/* The position of pending token 0 (the next row's first token): its document and the tokens of
 * that document before it (cut_row keeps recs[0] the document holding it). */
static void pend_position(hyp_stream *s, uint64_t at[NST]) {
    memcpy(at, s->recs[0].at, NST * sizeof *at);
    at[S_SKIP] = s->abs0 - s->recs[0].abs;
}

/* Resets the reader and the pending stream to start at[]. */
static int restart_at(hyp_stream *s, const uint64_t at[NST], hyp_err *e) {
    int rc;
    s->reader_valid = 0;
    s->p0 = s->pn = 0, s->nrec = 0, s->abs0 = 0;
    if ((rc = reader_seek(s, at, e))) return rc;
    if (at[S_SKIP] > 0) {
        uint64_t d[NST];
        int got;
        if ((rc = next_doc(s, d, &got, e))) return rc;
        if (!got || d[S_DOC] != at[S_DOC] || (uint64_t)s->enc_len <= at[S_SKIP])
            return hyp_fail(e, HYP_EINPUT, "--stream %s: the saved position (document %llu, token %llu) is not in the sources any more — resume with the same --stream files, --doc-sep and --tokenizer as the checkpoint",
                            s->paths[at[S_FILE] < (uint64_t)s->n_paths ? at[S_FILE] : 0], (unsigned long long)at[S_DOC], (unsigned long long)at[S_SKIP]);
        if ((rc = pend_doc(s, d, e))) return rc;
        s->p0 = (size_t)at[S_SKIP], s->abs0 = at[S_SKIP];
    }
    memcpy(s->reader_at, at, sizeof s->reader_at);
    s->reader_valid = 1;
    return HYP_OK;
}

/* Row k of the block: the next T + 1 pending tokens (reading documents as needed; at the end of
 * the sources the next pass starts), then T of them consumed. */
static int cut_row(hyp_stream *s, int k, hyp_err *e) {
    const int T = s->T;
    int rc;
    while (s->pn - s->p0 < (size_t)T + 1) {
        uint64_t at[NST];
        int got;
        if ((rc = next_doc(s, at, &got, e))) return rc;
        if (got) {
            if ((rc = pend_doc(s, at, e))) return rc;
            continue;
        }
        if (s->pass_from_start && s->pass_rows == 0)
            return hyp_fail(e, HYP_EINPUT, "--stream %s: one pass over the sources gives rank %d of %d fewer than T + 1 = %d tokens — add text, use fewer ranks or a shorter --seq",
                            s->name, s->rank, s->world, T + 1);
        uint64_t z[NST] = {s->pass + 1, 0, 0, 0, 0, 0}; /* the tail is dropped: next pass */
        s->p0 = s->pn = 0, s->nrec = 0, s->abs0 = 0;
        if ((rc = reader_seek(s, z, e))) return rc;
    }
    int32_t *row = s->rows + (size_t)k * (size_t)(T + 1), *pos = s->rpos + (size_t)k * (size_t)T;
    memcpy(row, s->ptok + s->p0, (size_t)(T + 1) * sizeof *row);
    int32_t c = 0;
    for (int t = 0; t < T; t++) {
        c = t == 0 || s->pflag[s->p0 + (size_t)t] ? 0 : c + 1;
        pos[t] = c;
    }
    s->p0 += (size_t)T, s->abs0 += (uint64_t)T;
    s->pass_rows++, s->rows_cut++;
    size_t d = 0; /* records of documents that end before the next row */
    while (d + 1 < s->nrec && s->recs[d + 1].abs <= s->abs0) d++;
    if (d) {
        memmove(s->recs, s->recs + d, (s->nrec - d) * sizeof *s->recs);
        s->nrec -= d;
    }
    return HYP_OK;
}

/* Makes the cache block `blk` starting at start[]: K rows read from there and permuted. */
static int build_block(hyp_stream *s, uint64_t blk, const uint64_t start[NST], hyp_err *e) {
    int rc;
    s->valid = 0;
    if (!s->reader_valid || memcmp(s->reader_at, start, sizeof s->reader_at) != 0)
        if ((rc = restart_at(s, start, e))) return rc;
    s->reader_valid = 0;
    for (int k = 0; k < s->K; k++)
        if ((rc = cut_row(s, k, e))) return rc;
    pend_position(s, s->next_start);
    memcpy(s->reader_at, s->next_start, sizeof s->reader_at);
    s->reader_valid = 1;
    for (int k = 0; k < s->K; k++) s->perm[k] = (uint32_t)k;
    hyp_rng r;
    hyp_rng_seed2(&r, s->seed ^ (0x9E3779B97F4A7C15ull * (uint64_t)(s->rank + 1)), blk);
    for (int i = s->K - 1; i > 0; i--) {
        uint32_t j = (uint32_t)hyp_rng_below(&r, (uint64_t)i + 1), t = s->perm[i];
        s->perm[i] = s->perm[j], s->perm[j] = t;
    }
    s->blk = blk;
    memcpy(s->blk_start, start, sizeof s->blk_start);
    s->valid = 1;
    return HYP_OK;
}

static int ensure_block(hyp_stream *s, const hyp_loader_state *st, hyp_err *e) {
    if (s->valid && s->blk == st->epoch && !memcmp(s->blk_start, st->stream, sizeof s->blk_start)) return HYP_OK;
    return build_block(s, st->epoch, st->stream, e);
}

int hyp_stream_produce(hyp_stream *s, hyp_loader_state *st, int B, int32_t *inputs,
                       int32_t *targets, int32_t *positions, hyp_err *e) {
    hyp_loader_state saved = *st;
    const int T = s->T;
    int rc = HYP_OK;
    for (int b = 0; b < B && !rc; b++) {
        if (st->position >= (uint64_t)s->K) {
            if ((rc = ensure_block(s, st, e))) break;
            memcpy(st->stream, s->next_start, sizeof st->stream);
            st->epoch++, st->position = 0;
        }
        if ((rc = ensure_block(s, st, e))) break;
        uint32_t k = s->perm[st->position];
        const int32_t *row = s->rows + (size_t)k * (size_t)(T + 1);
        memcpy(inputs + (size_t)b * T, row, (size_t)T * sizeof *row);
        memcpy(targets + (size_t)b * T, row + 1, (size_t)T * sizeof *row);
        if (positions) memcpy(positions + (size_t)b * T, s->rpos + (size_t)k * (size_t)T, (size_t)T * sizeof *row);
        st->position++;
    }
    if (rc) *st = saved;
    return rc;
}

int hyp_stream_block_rows(const hyp_stream *s) { return s->K; }
int hyp_stream_vocab(const hyp_stream *s) { return s->vocab; }
int hyp_stream_num_files(const hyp_stream *s) { return s->n_paths; }
const char *hyp_stream_name(const hyp_stream *s) { return s->name; }
uint64_t hyp_stream_docs_read(const hyp_stream *s) { return s->docs_read; }
uint64_t hyp_stream_rows_cut(const hyp_stream *s) { return s->rows_cut; }
