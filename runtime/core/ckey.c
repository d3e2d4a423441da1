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
    h->hash = XXH3_128bits(text, n);
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
    feed(k->st, text, n);
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
