/* ckey.c — the compile caches' key rule (what is keyed and why: ckey.h). Reads headers, writes
 * nothing, keeps no global state. */
#include "ckey.h"
#include "fsio.h"

#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <xxhash.h>

struct hyp_ckey {
    XXH3_state_t *st;
    hyp_ckey_headers *hdrs;
};

static void feed(XXH3_state_t *st, const void *p, size_t n) {
    uint64_t len = n;
    XXH3_128bits_update(st, &len, sizeof len); /* length-prefixed: fields cannot run together */
    XXH3_128bits_update(st, p, n);
}
static void feeds(XXH3_state_t *st, const char *s) { feed(st, s, strlen(s)); }

/* ------------------------------------------------------------------------------------------ */
/* Comments */

static int ident_char(char c) {
    return c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
}

/* The token that ends just before text[i]: [start, i) over identifier characters and '.'. */
static size_t token_start(const char *text, size_t i) {
    while (i > 0 && (ident_char(text[i - 1]) || text[i - 1] == '.')) i--;
    return i;
}

/* Whether "R" ending at text[i] (text[i] == 'R', a '"' after it) begins a raw string literal:
 * the token is R, u8R, uR, UR or LR. */
static int raw_prefix(const char *text, size_t i) {
    size_t s = token_start(text, i), n = i - s; /* the prefix before R */
    return n == 0 || (n == 1 && (text[s] == 'u' || text[s] == 'U' || text[s] == 'L')) ||
           (n == 2 && text[s] == 'u' && text[s + 1] == '8');
}

static int hspace(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\f' || c == '\v'; }

size_t hyp_ckey_strip_comments(const char *text, size_t n, char *out) {
    size_t i = 0, o = 0;
    int pend = 0; /* a run of horizontal space (or a comment) not yet written: one ' ' before the next code */
#define EMIT(ch) (pend && (ch) != '\n' ? (out[o++] = ' ') : 0, pend = 0, out[o++] = (ch))
    while (i < n) {
        char c = text[i];
        if (hspace(c)) {
            pend = 1, i++;
            continue;
        }
        if (c == '/' && i + 1 < n && text[i + 1] == '/') { /* to the end of the line; a backslash-newline continues it */
            pend = 1;
            i += 2;
            while (i < n && text[i] != '\n') {
                if (text[i] == '\\' && i + 1 < n && text[i + 1] == '\n') EMIT('\n'), pend = 1, i++;
                else if (text[i] == '\\' && i + 2 < n && text[i + 1] == '\r' && text[i + 2] == '\n') EMIT('\n'), pend = 1, i += 2;
                i++;
            }
            continue; /* the newline itself is code */
        }
        if (c == '/' && i + 1 < n && text[i + 1] == '*') { /* a space, and the lines it spans */
            pend = 1;
            i += 2;
            while (i < n && !(text[i] == '*' && i + 1 < n && text[i + 1] == '/')) {
                if (text[i] == '\n') EMIT('\n'), pend = 1;
                i++;
            }
            i = i < n ? i + 2 : n;
            continue;
        }
        if (c == '"' && i > 0 && text[i - 1] == 'R' && raw_prefix(text, i - 1)) { /* R"delim( ... )delim" */
            size_t d = i + 1;
            while (d < n && d - (i + 1) <= 16 && text[d] != '(' && text[d] != '"' && text[d] != '\n') d++;
            if (d < n && text[d] == '(') {
                size_t dl = d - (i + 1), j = d + 1;
                while (j < n && !(text[j] == ')' && j + 1 + dl < n && !memcmp(text + j + 1, text + i + 1, dl) &&
                                  text[j + 1 + dl] == '"'))
                    j++;
                size_t end = j < n ? j + dl + 2 : n;
                EMIT(text[i]);
                memcpy(out + o, text + i + 1, end - i - 1);
                o += end - i - 1;
                i = end;
                continue;
            }
        }
        if (c == '"' || (c == '\'' && !(i > 0 && ident_char(text[i - 1]) && text[token_start(text, i)] >= '0' &&
                                         text[token_start(text, i)] <= '9'))) {
            /* a string or character literal, escapes honoured; it ends at its quote or the line's end.
             * A ' inside a number (1'000, C++14 digit separators) is no literal. */
            EMIT(text[i]);
            i++;
            while (i < n && text[i] != c && text[i] != '\n') {
                if (text[i] == '\\' && i + 1 < n) out[o++] = text[i++];
                out[o++] = text[i++];
            }
            if (i < n && text[i] == c) out[o++] = text[i++];
            continue;
        }
        EMIT(c);
        i++;
    }
#undef EMIT
    while (o > 0 && out[o - 1] == '\n') o--; /* lines after the last code number nothing */
    return o;
}

/* ------------------------------------------------------------------------------------------ */
/* Header closure: every file a source reaches through #include, with its content hash,
 * memoized by resolved path. */

typedef struct hdr {
    char *path;         /* resolved path */
    XXH128_hash_t hash; /* of the content */
    char **incs;        /* spellings of its own #includes, each "\"x\"" or "<x>" */
    int nincs;
    struct hdr *next;
} hdr_t;

typedef struct resolved {
    char *spelling, *from; /* from: "" for the top-level source */
    hdr_t *hdr;            /* NULL: not found (the compiler's own) */
    struct resolved *next;
} resolved_t;

struct hyp_ckey_headers {
    char **dirs;
    int ndirs;
    hdr_t *memo;
    resolved_t *lookups; /* spelling + including dir -> header: the sources share their includes */
};
typedef struct hyp_ckey_headers hyp_ckey_headers_t;

/* The #include spellings of a text: "\"name\"" or "<name>", every line, conditional or not. */
static int scan_includes(const char *text, size_t len, char ***out) {
    char **v = NULL;
    int n = 0, cap = 0;
    const char *end = text + len;
    for (const char *l = text; l && l < end && *l;) {
        const char *e = memchr(l, '\n', (size_t)(end - l));
        const char *p = l;
        while (*p == ' ' || *p == '\t') p++;
        if (*p == '#') {
            p++;
            while (*p == ' ' || *p == '\t') p++;
            if (!strncmp(p, "include", 7)) {
                p += 7;
                while (*p == ' ' || *p == '\t') p++;
                char close = *p == '"' ? '"' : *p == '<' ? '>' : 0;
                if (close) {
                    const char *q = p + 1;
                    while (*q && *q != close && *q != '\n') q++;
                    if (*q == close) {
                        if (n == cap) {
                            cap = cap ? 2 * cap : 8;
                            char **nv = realloc(v, (size_t)cap * sizeof *v);
                            if (!nv) break;
                            v = nv;
                        }
                        v[n++] = strndup(p, (size_t)(q - p + 1));
                    }
                }
            }
        }
        l = e ? e + 1 : NULL;
    }
    *out = v;
    return n;
}

static hdr_t *hdr_load(hyp_ckey_headers_t *c, const char *path) {
    for (hdr_t *h = c->memo; h; h = h->next)
        if (!strcmp(h->path, path)) return h;
    size_t n;
    char *text;
    if (hyp_fs_read_small(path, SIZE_MAX, &text, &n, NULL) != HYP_OK) return NULL;
    hdr_t *h = calloc(1, sizeof *h);
    if (!h) {
        free(text);
        return NULL;
    }
    h->path = strdup(path);
    char *bare = malloc(n + 1); /* keyed without its comments, like a source */
    h->hash = bare ? XXH3_128bits(bare, hyp_ckey_strip_comments(text, n, bare)) : XXH3_128bits(text, n);
    free(bare);
    h->nincs = scan_includes(text, n, &h->incs);
    free(text);
    h->next = c->memo;
    c->memo = h;
    return h;
}

void hyp_ckey_headers_free(hyp_ckey_headers_t *c) {
    if (!c) return;
    while (c->lookups) {
        resolved_t *r = c->lookups;
        c->lookups = r->next;
        free(r->spelling);
        free(r->from);
        free(r);
    }
    while (c->memo) {
        hdr_t *h = c->memo;
        c->memo = h->next;
        for (int i = 0; i < h->nincs; i++) free(h->incs[i]);
        free(h->incs);
        free(h->path);
        free(h);
    }
    for (int i = 0; i < c->ndirs; i++) free(c->dirs[i]);
    free(c->dirs);
    free(c);
}

/* Resolves one spelling from a file in directory `from` (NULL for the top-level source). */
static hdr_t *resolve_uncached(hyp_ckey_headers_t *c, const char *spelling, const char *from);
static hdr_t *resolve(hyp_ckey_headers_t *c, const char *spelling, const char *from) {
    const char *f = from ? from : "";
    for (resolved_t *r = c->lookups; r; r = r->next)
        if (!strcmp(r->spelling, spelling) && !strcmp(r->from, f)) return r->hdr;
    hdr_t *h = resolve_uncached(c, spelling, from);
    resolved_t *r = calloc(1, sizeof *r);
    if (r && (r->spelling = strdup(spelling)) && (r->from = strdup(f))) {
        r->hdr = h;
        r->next = c->lookups;
        c->lookups = r;
    } else if (r) {
        free(r->spelling);
        free(r);
    }
    return h;
}
static hdr_t *resolve_uncached(hyp_ckey_headers_t *c, const char *spelling, const char *from) {
    size_t len = strlen(spelling);
    char name[PATH_MAX], path[PATH_MAX];
    if (len < 3 || len - 2 >= sizeof name) return NULL;
    memcpy(name, spelling + 1, len - 2);
    name[len - 2] = 0;
    struct stat st;
    if (spelling[0] == '"' && from) {
        if (snprintf(path, sizeof path, "%s/%s", from, name) < (int)sizeof path && !stat(path, &st) &&
            S_ISREG(st.st_mode))
            return hdr_load(c, path);
    }
    for (int i = 0; i < c->ndirs; i++) {
        if (snprintf(path, sizeof path, "%s/%s", c->dirs[i], name) < (int)sizeof path &&
            !stat(path, &st) && S_ISREG(st.st_mode))
            return hdr_load(c, path);
    }
    return NULL;
}

typedef struct {
    hdr_t **v;
    int n, cap;
} seen_t;

static int seen_has(seen_t *s, hdr_t *h) {
    for (int i = 0; i < s->n; i++)
        if (s->v[i] == h) return 1;
    return 0;
}

/* Feeds the include closure of a file's include list into the key, depth first, each resolved
 * header once: its spelling and content hash, then its own includes. */
static void feed_includes(XXH3_state_t *st, hyp_ckey_headers_t *c, char **incs, int nincs, const char *from,
                          seen_t *seen, int depth) {
    for (int i = 0; i < nincs; i++) {
        feeds(st, incs[i]);
        hdr_t *h = depth < 64 ? resolve(c, incs[i], from) : NULL;
        if (!h) {
            feeds(st, "<builtin>");
            continue;
        }
        if (seen_has(seen, h)) {
            feeds(st, "<again>");
            continue;
        }
        if (seen->n == seen->cap) {
            seen->cap = seen->cap ? 2 * seen->cap : 32;
            hdr_t **nv = realloc(seen->v, (size_t)seen->cap * sizeof *nv);
            if (!nv) continue;
            seen->v = nv;
        }
        seen->v[seen->n++] = h;
        XXH128_canonical_t cs;
        XXH128_canonicalFromHash(&cs, h->hash);
        feed(st, cs.digest, sizeof cs.digest);
        char dir[PATH_MAX];
        snprintf(dir, sizeof dir, "%s", h->path);
        char *slash = strrchr(dir, '/');
        if (slash) *slash = 0;
        feed_includes(st, c, h->incs, h->nincs, slash ? dir : ".", seen, depth + 1);
    }
}

/* ------------------------------------------------------------------------------------------ */
/* The API */

hyp_ckey_headers *hyp_ckey_headers_new(const char *const *dirs, int ndirs) {
    hyp_ckey_headers *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    c->dirs = calloc((size_t)(ndirs > 0 ? ndirs : 1), sizeof *c->dirs);
    if (!c->dirs) {
        free(c);
        return NULL;
    }
    for (int i = 0; i < ndirs; i++) {
        if (!dirs[i]) continue;
        if (!(c->dirs[c->ndirs] = strdup(dirs[i]))) {
            hyp_ckey_headers_free(c);
            return NULL;
        }
        c->ndirs++;
    }
    return c;
}

hyp_ckey *hyp_ckey_begin(hyp_ckey_headers *h, const char *tag) {
    hyp_ckey *k = calloc(1, sizeof *k);
    if (!k || !(k->st = XXH3_createState())) {
        free(k);
        return NULL;
    }
    k->hdrs = h;
    XXH3_128bits_reset(k->st);
    feeds(k->st, tag ? tag : "");
    return k;
}

void hyp_ckey_bytes(hyp_ckey *k, const void *p, size_t n) { feed(k->st, p, n); }

void hyp_ckey_str(hyp_ckey *k, const char *s) { feeds(k->st, s ? s : ""); }

void hyp_ckey_source(hyp_ckey *k, const char *text, size_t n, const char *dir) {
    char *bare = malloc(n + 1);
    if (bare) feed(k->st, bare, hyp_ckey_strip_comments(text, n, bare));
    else feed(k->st, text, n); /* out of memory: a key that comments still change, never a wrong one */
    free(bare);
    char **incs = NULL;
    int nincs = scan_includes(text, n, &incs);
    seen_t seen = {0};
    feed_includes(k->st, k->hdrs, incs, nincs, dir, &seen, 0);
    free(seen.v);
    for (int i = 0; i < nincs; i++) free(incs[i]);
    free(incs);
}

void hyp_ckey_finish(hyp_ckey *k, char hex[33]) {
    XXH128_canonical_t c;
    XXH128_canonicalFromHash(&c, XXH3_128bits_digest(k->st));
    for (int i = 0; i < 16; i++) snprintf(hex + 2 * i, 3, "%02x", c.digest[i]);
    XXH3_freeState(k->st);
    free(k);
}
