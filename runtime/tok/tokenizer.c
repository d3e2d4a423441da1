/* tokenizer.c — byte-level BPE (v2125): loading tokenizer.json / tiktoken vocabularies, the GPT-2
 * pre-tokenizer (PCRE2 with Unicode properties, JIT-compiled), heap-driven merging per pre-token
 * with a pre-token -> ids cache, decoding, and BPE training with incremental pair counts.
 * The contract is in tokenizer.h. It must never print, exit, or silently drop a byte: every input
 * byte is covered by exactly one pre-token (bytes the regex cannot match — invalid UTF-8 — become
 * pre-tokens of their own), and every byte has a token. */
#define PCRE2_CODE_UNIT_WIDTH 8
#include "tokenizer.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <pcre2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#define XXH_INLINE_ALL /* the hash of every lookup: inlined, not a library call */
#include <xxhash.h>
#include <zlib.h>

#include "fsio.h"

/* GPT-2's pre-tokenizer (tiktoken's r50k_base / gpt2 pattern; the `tokenizers` ByteLevel regex). */
static const char GPT2_PATTERN[] =
    "'(?:[sdmt]|ll|ve|re)| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";
static const char EOT_TEXT[] = "<|endoftext|>";

enum { MODE_BYTE = 0, MODE_MERGES = 1, MODE_RANKS = 2 };

/* ---- GPT-2's bytes <-> unicode mapping: printable bytes map to themselves, the other 68 to
 * U+0100.. in byte order, so every byte has a visible character in tokenizer.json. ---- */
static int b2u[256];     /* byte -> code point */
static int u2b[324];     /* code point -> byte, -1 */
static int map_ready;
static uint8_t byte_self[256]; /* byte_self[b] = b: the byte tokenizer's token bytes */

static void byte_map_init(void) {
    if (map_ready) return;
    for (int i = 0; i < 324; i++) u2b[i] = -1;
    int n = 0;
    for (int b = 0; b < 256; b++) {
        int printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174);
        b2u[b] = printable ? b : 256 + n++;
        u2b[b2u[b]] = b;
        byte_self[b] = (uint8_t)b;
    }
    map_ready = 1;
}

static size_t utf8_put(char *o, int cp) {
    if (cp < 0x80) { o[0] = (char)cp; return 1; }
    o[0] = (char)(0xC0 | (cp >> 6));
    o[1] = (char)(0x80 | (cp & 0x3F));
    return 2; /* the mapping's code points are all < 0x800 */
}

/* Mapped string (UTF-8 of mapped code points) -> raw bytes; -1 if a character is not in the map. */
static long unmap(const char *s, uint8_t *out, size_t cap) {
    size_t n = 0;
    const uint8_t *p = (const uint8_t *)s;
    while (*p) {
        int cp;
        if (p[0] < 0x80) cp = *p++;
        else if ((p[0] & 0xE0) == 0xC0 && (p[1] & 0xC0) == 0x80) {
            cp = ((p[0] & 0x1F) << 6) | (p[1] & 0x3F);
            p += 2;
        } else return -1;
        if (cp >= 324 || u2b[cp] < 0 || n >= cap) return -1;
        out[n++] = (uint8_t)u2b[cp];
    }
    return (long)n;
}

static char *map_bytes(const uint8_t *b, size_t n) {
    char *s = malloc(2 * n + 1);
    if (!s) return NULL;
    size_t k = 0;
    for (size_t i = 0; i < n; i++) k += utf8_put(s + k, b2u[b[i]]);
    s[k] = 0;
    return s;
}

/* ---- open-addressing maps ---- */

typedef struct { /* bytes -> id over the tokenizer's token arena */
    int32_t *slot;   /* id or -1 */
    uint64_t mask;
} tmap;

typedef struct { /* (a, b) -> (rank, out) */
    uint64_t *key;   /* a << 32 | b, UINT64_MAX empty */
    int32_t *rank, *out;
    uint64_t mask, n;
} pmap;

struct hyp_tok {
    int mode, vocab, eot;
    char kind[16], hash[17];
    uint8_t *arena;        /* token bytes */
    uint32_t *off, *len;   /* per id */
    size_t arena_n, arena_cap;
    int32_t byte_id[256];
    tmap tm;
    pmap pm;
    pcre2_code *re;
    pcre2_match_data *md;
    /* the pre-token cache */
    struct centry { uint64_t h; uint32_t off; uint8_t blen, nids; } *ce;
    uint32_t *cslot;       /* index+1 into ce, 0 empty */
    uint64_t cmask;
    size_t cn, ccap;
    uint8_t *carena;
    size_t carena_n, carena_cap;
    /* merge scratch */
    int32_t *pid, *pnext, *pprev;
    uint32_t *pstart;
    struct hent { int32_t rank, i, j, a, b; } *heap;
    size_t scratch_cap, heap_cap;
    int32_t *added;        /* a tokenizer.json's added_tokens ids (special tokens) */
    int n_added;
};

static uint64_t hbytes(const uint8_t *b, size_t n) { return XXH3_64bits(b, n); }

static int tmap_init(tmap *m, size_t n) {
    size_t cap = 16;
    while (cap < 2 * n + 16) cap <<= 1;
    m->slot = malloc(cap * sizeof *m->slot);
    if (!m->slot) return -1;
    memset(m->slot, 0xff, cap * sizeof *m->slot);
    m->mask = cap - 1;
    return 0;
}

static int32_t tmap_get(const hyp_tok *t, const uint8_t *b, size_t n) {
    if (!t->tm.slot) return -1;
    for (uint64_t i = hbytes(b, n) & t->tm.mask;; i = (i + 1) & t->tm.mask) {
        int32_t id = t->tm.slot[i];
        if (id < 0) return -1;
        if (t->len[id] == n && !memcmp(t->arena + t->off[id], b, n)) return id;
    }
}

/* Inserts id (its bytes already in the arena); keeps an existing mapping (the first id wins). */
static void tmap_put(hyp_tok *t, int32_t id) {
    const uint8_t *b = t->arena + t->off[id];
    size_t n = t->len[id];
    for (uint64_t i = hbytes(b, n) & t->tm.mask;; i = (i + 1) & t->tm.mask) {
        int32_t o = t->tm.slot[i];
        if (o < 0) { t->tm.slot[i] = id; return; }
        if (t->len[o] == n && !memcmp(t->arena + t->off[o], b, n)) return;
    }
}

static uint64_t mix64(uint64_t x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ULL;
    return x ^ (x >> 33);
}

static int pmap_init(pmap *m, size_t n) {
    size_t cap = 16;
    while (cap < 2 * n + 16) cap <<= 1;
    m->key = malloc(cap * sizeof *m->key);
    m->rank = malloc(cap * sizeof *m->rank);
    m->out = malloc(cap * sizeof *m->out);
    if (!m->key || !m->rank || !m->out) return -1;
    memset(m->key, 0xff, cap * sizeof *m->key);
    m->mask = cap - 1;
    m->n = 0;
    return 0;
}

static void pmap_put(pmap *m, int32_t a, int32_t b, int32_t rank, int32_t out) {
    uint64_t k = (uint64_t)(uint32_t)a << 32 | (uint32_t)b;
    for (uint64_t i = mix64(k) & m->mask;; i = (i + 1) & m->mask) {
        if (m->key[i] == UINT64_MAX) {
            m->key[i] = k, m->rank[i] = rank, m->out[i] = out, m->n++;
            return;
        }
        if (m->key[i] == k) return; /* the first (lowest-rank) merge of a pair wins */
    }
}

static inline int pmap_get(const pmap *m, int32_t a, int32_t b, int32_t *out) {
    uint64_t k = (uint64_t)(uint32_t)a << 32 | (uint32_t)b;
    for (uint64_t i = mix64(k) & m->mask;; i = (i + 1) & m->mask) {
        if (m->key[i] == k) { *out = m->out[i]; return m->rank[i]; }
        if (m->key[i] == UINT64_MAX) return -1;
    }
}

/* ---- token storage ---- */

static int tok_reserve(hyp_tok *t, int vocab) {
    t->off = calloc((size_t)vocab, sizeof *t->off);
    t->len = calloc((size_t)vocab, sizeof *t->len);
    return t->off && t->len ? 0 : -1;
}

static int tok_set(hyp_tok *t, int id, const uint8_t *b, size_t n) {
    if (t->arena_n + n > t->arena_cap) {
        size_t cap = t->arena_cap ? t->arena_cap * 2 : 1 << 16;
        while (cap < t->arena_n + n) cap *= 2;
        uint8_t *a = realloc(t->arena, cap);
        if (!a) return -1;
        t->arena = a, t->arena_cap = cap;
    }
    memcpy(t->arena + t->arena_n, b, n);
    t->off[id] = (uint32_t)t->arena_n;
    t->len[id] = (uint32_t)n;
    t->arena_n += n;
    return 0;
}

static int regex_init(hyp_tok *t, hyp_err *e) {
    int err;
    PCRE2_SIZE eoff;
    t->re = pcre2_compile((PCRE2_SPTR)GPT2_PATTERN, PCRE2_ZERO_TERMINATED,
                          PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &err, &eoff, NULL);
    if (!t->re) return hyp_fail(e, HYP_EFAIL, "tokenizer: PCRE2 refused GPT-2's pattern (error %d) — "
                                "is libpcre2-8 built with Unicode support?", err);
    (void)pcre2_jit_compile(t->re, PCRE2_JIT_COMPLETE); /* falls back to the interpreter */
    t->md = pcre2_match_data_create_from_pattern(t->re, NULL);
    if (!t->md) return hyp_fail(e, HYP_EFAIL, "tokenizer: out of memory");
    return HYP_OK;
}

void hyp_tok_free(hyp_tok *t) {
    if (!t) return;
    free(t->arena), free(t->off), free(t->len), free(t->tm.slot);
    free(t->pm.key), free(t->pm.rank), free(t->pm.out);
    if (t->md) pcre2_match_data_free(t->md);
    if (t->re) pcre2_code_free(t->re);
    free(t->ce), free(t->cslot), free(t->carena);
    free(t->pid), free(t->pnext), free(t->pprev), free(t->pstart), free(t->heap);
    free(t->added);
    free(t);
}

int hyp_tok_vocab_size(const hyp_tok *t) { return t->vocab; }
int hyp_tok_eot(const hyp_tok *t) { return t->eot; }
const char *hyp_tok_kind(const hyp_tok *t) { return t->kind; }
const char *hyp_tok_hash(const hyp_tok *t) { return t->hash; }

int hyp_tok_special_id(const hyp_tok *t, const char *s, size_t n) {
    size_t k;
    const uint8_t *b;
    if (t->eot >= 0 && (b = hyp_tok_token_bytes(t, t->eot, &k)) && k == n && !memcmp(b, s, n)) return t->eot;
    for (int i = 0; i < t->n_added; i++)
        if ((b = hyp_tok_token_bytes(t, t->added[i], &k)) && k == n && !memcmp(b, s, n)) return t->added[i];
    return -1;
}

const uint8_t *hyp_tok_token_bytes(const hyp_tok *t, int id, size_t *n) {
    if (id < 0 || id >= t->vocab) { *n = 0; return NULL; }
    if (t->mode == MODE_BYTE) {
        *n = 1;
        return byte_self + id;
    }
    *n = t->len[id];
    return t->arena + t->off[id];
}

/* ---- reading files ---- */

int hyp_tok_read_file(const char *path, uint8_t **buf, size_t *n, hyp_err *e) {
    *buf = NULL, *n = 0;
    struct stat st;
    if (stat(path, &st) != 0)
        return hyp_fail(e, HYP_EINPUT, "%s: %s — check the path", path, strerror(errno));
    if (!S_ISREG(st.st_mode))
        return hyp_fail(e, HYP_EINPUT, "%s: not a regular file — give a file", path);
    gzFile g = gzopen(path, "rb"); /* reads plain files too */
    if (!g) return hyp_fail(e, HYP_EINPUT, "%s: cannot open: %s — check the path", path, strerror(errno));
    size_t cap = (size_t)st.st_size + 1 > 4096 ? (size_t)st.st_size + 1 : 4096, len = 0;
    uint8_t *b = malloc(cap);
    for (;;) {
        if (!b) { gzclose(g); return hyp_fail(e, HYP_EFAIL, "%s: out of memory", path); }
        if (len + 1 >= cap) {
            uint8_t *nb = realloc(b, cap * 2);
            if (!nb) { free(b); b = NULL; continue; }
            b = nb, cap *= 2;
        }
        unsigned want = (unsigned)((cap - 1 - len) > (1u << 30) ? (1u << 30) : (cap - 1 - len));
        int r = gzread(g, b + len, want);
        if (r < 0) {
            int ze;
            (void)gzerror(g, &ze);
            gzclose(g);
            free(b);
            return hyp_fail(e, HYP_EINPUT, "%s: cannot read: %s — the file is corrupt (a truncated or damaged .gz?)", path,
                            ze == Z_ERRNO ? strerror(errno) : "not a valid gzip stream");
        }
        if (r == 0) break;
        len += (size_t)r;
    }
    gzclose(g);
    b[len] = 0;
    *buf = b, *n = len;
    return HYP_OK;
}

static void set_hash(hyp_tok *t, const uint8_t *b, size_t n) {
    snprintf(t->hash, sizeof t->hash, "%016llx", (unsigned long long)XXH3_64bits(b, n));
}

/* ---- tokenizer.json ---- */

static int load_json(hyp_tok *t, const char *path, const uint8_t *buf, size_t n, hyp_err *e) {
    cJSON *root = cJSON_ParseWithLength((const char *)buf, n);
    if (!root) return hyp_fail(e, HYP_EINPUT, "%s: not valid JSON (near byte %ld) — give a Hugging Face tokenizer.json or a tiktoken ranks file",
                               path, (long)(cJSON_GetErrorPtr() ? cJSON_GetErrorPtr() - (const char *)buf : 0));
    int rc = HYP_EINPUT;
    uint8_t tmp[1024];
    cJSON *model = cJSON_GetObjectItemCaseSensitive(root, "model");
    cJSON *type = cJSON_GetObjectItemCaseSensitive(model, "type");
    cJSON *vocab = cJSON_GetObjectItemCaseSensitive(model, "vocab");
    cJSON *merges = cJSON_GetObjectItemCaseSensitive(model, "merges");
    cJSON *pre = cJSON_GetObjectItemCaseSensitive(root, "pre_tokenizer");
    cJSON *norm = cJSON_GetObjectItemCaseSensitive(root, "normalizer");
    cJSON *added = cJSON_GetObjectItemCaseSensitive(root, "added_tokens");
    if (!cJSON_IsObject(model) || !cJSON_IsString(type) || strcmp(type->valuestring, "BPE") != 0) {
        hyp_fail(e, HYP_EINPUT, "%s: model.type is %s, not \"BPE\" — only byte-level BPE tokenizers are supported", path,
                 cJSON_IsString(type) ? type->valuestring : "missing");
        goto out;
    }
    if (!cJSON_IsObject(vocab) || !cJSON_IsArray(merges)) {
        hyp_fail(e, HYP_EINPUT, "%s: model.vocab (object) or model.merges (array) missing — not a BPE tokenizer.json", path);
        goto out;
    }
    cJSON *ptype = cJSON_GetObjectItemCaseSensitive(pre, "type");
    cJSON *use_regex = cJSON_GetObjectItemCaseSensitive(pre, "use_regex");
    cJSON *prefix = cJSON_GetObjectItemCaseSensitive(pre, "add_prefix_space");
    if (!cJSON_IsString(ptype) || strcmp(ptype->valuestring, "ByteLevel") != 0 || cJSON_IsFalse(use_regex) ||
        cJSON_IsTrue(prefix)) {
        hyp_fail(e, HYP_EINPUT, "%s: pre_tokenizer is %s — only GPT-2's ByteLevel pre-tokenizer (use_regex, no prefix space) is supported",
                 path, cJSON_IsString(ptype) ? ptype->valuestring : "missing");
        goto out;
    }
    if (norm && !cJSON_IsNull(norm)) {
        hyp_fail(e, HYP_EINPUT, "%s: has a normalizer — byte-level BPE here encodes the raw bytes; remove it or use another tokenizer", path);
        goto out;
    }
    int maxid = -1, nv = cJSON_GetArraySize(vocab), nm = cJSON_GetArraySize(merges);
    cJSON *it;
    cJSON_ArrayForEach(it, vocab) {
        if (!cJSON_IsNumber(it) || it->valuedouble < 0 || it->valuedouble >= (1 << 24) || it->valuedouble != (int)it->valuedouble) {
            hyp_fail(e, HYP_EINPUT, "%s: model.vocab[\"%.40s\"] is not an id in 0..2^24 — the file is corrupt", path, it->string);
            goto out;
        }
        if (it->valueint > maxid) maxid = it->valueint;
    }
    cJSON_ArrayForEach(it, added) {
        cJSON *id = cJSON_GetObjectItemCaseSensitive(it, "id");
        cJSON *c = cJSON_GetObjectItemCaseSensitive(it, "content");
        if (!cJSON_IsNumber(id) || !cJSON_IsString(c) || id->valuedouble < 0 || id->valuedouble >= (1 << 24)) {
            hyp_fail(e, HYP_EINPUT, "%s: added_tokens has an entry without a valid id and content — the file is corrupt", path);
            goto out;
        }
        if (id->valueint > maxid) maxid = id->valueint;
    }
    t->vocab = maxid + 1;
    if (tok_reserve(t, t->vocab) || tmap_init(&t->tm, (size_t)nv) || pmap_init(&t->pm, (size_t)nm)) {
        rc = hyp_fail(e, HYP_EFAIL, "%s: out of memory", path);
        goto out;
    }
    cJSON_ArrayForEach(it, vocab) {
        long k = unmap(it->string, tmp, sizeof tmp);
        if (k < 0) continue; /* not byte-mapped text (an added token's literal content) */
        if (tok_set(t, it->valueint, tmp, (size_t)k)) { rc = hyp_fail(e, HYP_EFAIL, "%s: out of memory", path); goto out; }
    }
    t->eot = -1;
    if (cJSON_GetArraySize(added) > 0 && !(t->added = malloc(sizeof *t->added * (size_t)cJSON_GetArraySize(added)))) {
        rc = hyp_fail(e, HYP_EFAIL, "%s: out of memory", path);
        goto out;
    }
    cJSON_ArrayForEach(it, added) {
        int id = cJSON_GetObjectItemCaseSensitive(it, "id")->valueint;
        t->added[t->n_added++] = id;
        const char *c = cJSON_GetObjectItemCaseSensitive(it, "content")->valuestring;
        if (tok_set(t, id, (const uint8_t *)c, strlen(c))) { rc = hyp_fail(e, HYP_EFAIL, "%s: out of memory", path); goto out; }
        if (!strcmp(c, EOT_TEXT)) t->eot = id;
    }
    for (int id = 0; id < t->vocab; id++)
        if (t->len[id] && id != t->eot) tmap_put(t, id);
    for (int b = 0; b < 256; b++) {
        uint8_t c = (uint8_t)b;
        t->byte_id[b] = tmap_get(t, &c, 1);
        if (t->byte_id[b] < 0) {
            hyp_fail(e, HYP_EINPUT, "%s: byte 0x%02x has no token — a byte-level BPE needs all 256 byte tokens", path, b);
            goto out;
        }
    }
    int r = 0;
    cJSON_ArrayForEach(it, merges) {
        const char *sa = NULL, *sb = NULL;
        char two[2048];
        if (cJSON_IsString(it)) {
            const char *sp = strchr(it->valuestring, ' ');
            size_t la = sp ? (size_t)(sp - it->valuestring) : 0;
            if (sp && la < sizeof two / 2 && strlen(sp + 1) < sizeof two / 2) {
                memcpy(two, it->valuestring, la);
                two[la] = 0;
                sa = two, sb = sp + 1;
            }
        } else if (cJSON_IsArray(it) && cJSON_GetArraySize(it) == 2 && cJSON_IsString(cJSON_GetArrayItem(it, 0)) &&
                   cJSON_IsString(cJSON_GetArrayItem(it, 1))) {
            sa = cJSON_GetArrayItem(it, 0)->valuestring, sb = cJSON_GetArrayItem(it, 1)->valuestring;
        }
        long ka = sa ? unmap(sa, tmp, sizeof tmp / 2) : -1;
        long kb = sb && ka >= 0 ? unmap(sb, tmp + ka, sizeof tmp / 2) : -1;
        int32_t ia = ka > 0 ? tmap_get(t, tmp, (size_t)ka) : -1;
        int32_t ib = kb > 0 ? tmap_get(t, tmp + ka, (size_t)kb) : -1;
        int32_t io = ia >= 0 && ib >= 0 ? tmap_get(t, tmp, (size_t)(ka + kb)) : -1;
        if (io < 0) {
            hyp_fail(e, HYP_EINPUT, "%s: merge %d is not two vocabulary tokens whose concatenation is a token — the file is corrupt", path, r);
            goto out;
        }
        pmap_put(&t->pm, ia, ib, r++, io);
    }
    t->mode = MODE_MERGES;
    snprintf(t->kind, sizeof t->kind, "bpe");
    rc = HYP_OK;
out:
    cJSON_Delete(root);
    return rc;
}

/* ---- tiktoken ranks ---- */

static int b64val(int c) {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
}

static long b64dec(const uint8_t *s, size_t n, uint8_t *out, size_t cap) {
    uint32_t acc = 0;
    int bits = 0;
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] == '=') break;
        int v = b64val(s[i]);
        if (v < 0) return -1;
        acc = acc << 6 | (uint32_t)v;
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            if (k >= cap) return -1;
            out[k++] = (uint8_t)(acc >> bits);
        }
    }
    return (long)k;
}

static int load_tiktoken(hyp_tok *t, const char *path, const uint8_t *buf, size_t n, hyp_err *e) {
    size_t lines = 0;
    for (size_t i = 0; i < n; i++) lines += buf[i] == '\n';
    lines++;
    int32_t *rank_of = malloc(lines * sizeof *rank_of);
    uint32_t *boff = malloc(lines * sizeof *boff), *blen = malloc(lines * sizeof *blen);
    uint8_t *bytes = malloc(n + 1);
    int rc = HYP_EINPUT, maxr = -1;
    size_t cnt = 0, bn = 0, line = 0;
    if (!rank_of || !boff || !blen || !bytes) { rc = hyp_fail(e, HYP_EFAIL, "%s: out of memory", path); goto out; }
    for (size_t i = 0; i < n;) {
        size_t j = i;
        while (j < n && buf[j] != '\n') j++;
        line++;
        size_t k = i;
        while (k < j && buf[k] != ' ') k++;
        if (j > i && !(j == i + 1 && buf[i] == '\r')) {
            long nb = k < j ? b64dec(buf + i, k - i, bytes + bn, n + 1 - bn) : -1;
            char *end = NULL;
            long r = k < j ? strtol((const char *)buf + k + 1, &end, 10) : -1;
            if (nb <= 0 || r < 0 || r >= (1 << 24) || !end || (end != (const char *)buf + j && *end != '\r')) {
                hyp_fail(e, HYP_EINPUT, "%s:%zu: not \"BASE64 RANK\" — give a tiktoken ranks file (e.g. gpt2.tiktoken) or a tokenizer.json",
                         path, line);
                goto out;
            }
            boff[cnt] = (uint32_t)bn, blen[cnt] = (uint32_t)nb, rank_of[cnt] = (int32_t)r;
            bn += (size_t)nb;
            if (r > maxr) maxr = (int)r;
            cnt++;
        }
        i = j + 1;
    }
    if (!cnt) { hyp_fail(e, HYP_EINPUT, "%s: no ranks — the file is empty", path); goto out; }
    t->vocab = maxr + 2; /* ranks, then <|endoftext|> */
    t->eot = maxr + 1;
    if (tok_reserve(t, t->vocab) || tmap_init(&t->tm, cnt)) { rc = hyp_fail(e, HYP_EFAIL, "%s: out of memory", path); goto out; }
    for (size_t c = 0; c < cnt; c++) {
        if (t->len[rank_of[c]]) { hyp_fail(e, HYP_EINPUT, "%s: rank %d appears twice — the file is corrupt", path, rank_of[c]); goto out; }
        if (tok_set(t, rank_of[c], bytes + boff[c], blen[c])) { rc = hyp_fail(e, HYP_EFAIL, "%s: out of memory", path); goto out; }
    }
    if (tok_set(t, t->eot, (const uint8_t *)EOT_TEXT, strlen(EOT_TEXT))) { rc = hyp_fail(e, HYP_EFAIL, "%s: out of memory", path); goto out; }
    for (int id = 0; id < t->eot; id++)
        if (t->len[id]) tmap_put(t, id);
    for (int b = 0; b < 256; b++) {
        uint8_t c = (uint8_t)b;
        t->byte_id[b] = tmap_get(t, &c, 1);
        if (t->byte_id[b] < 0) { hyp_fail(e, HYP_EINPUT, "%s: byte 0x%02x has no rank — a byte-level BPE needs all 256 bytes", path, b); goto out; }
    }
    t->mode = MODE_RANKS;
    snprintf(t->kind, sizeof t->kind, "tiktoken");
    rc = HYP_OK;
out:
    free(rank_of), free(boff), free(blen), free(bytes);
    return rc;
}

hyp_tok *hyp_tok_open(const char *spec, hyp_err *e) {
    byte_map_init();
    hyp_tok *t = calloc(1, sizeof *t);
    if (!t) { hyp_fail(e, HYP_EFAIL, "tokenizer: out of memory"); return NULL; }
    if (!spec || !strcmp(spec, "byte")) {
        t->mode = MODE_BYTE, t->vocab = 256, t->eot = -1;
        snprintf(t->kind, sizeof t->kind, "byte");
        for (int b = 0; b < 256; b++) t->byte_id[b] = b;
        return t;
    }
    uint8_t *buf;
    size_t n;
    int rc = hyp_tok_read_file(spec, &buf, &n, e);
    if (rc) { hyp_tok_free(t); return NULL; }
    size_t i = 0;
    while (i < n && (buf[i] == ' ' || buf[i] == '\n' || buf[i] == '\r' || buf[i] == '\t')) i++;
    size_t sl = strlen(spec);
    int json = (i < n && buf[i] == '{') || (sl > 5 && !strcmp(spec + sl - 5, ".json"));
    if (n == 0) rc = hyp_fail(e, HYP_EINPUT, "%s: empty file — give a tokenizer.json or a tiktoken ranks file", spec);
    else if (memchr(buf, 0, n)) rc = hyp_fail(e, HYP_EINPUT, "%s: binary data (NUL bytes) — give a tokenizer.json or a tiktoken ranks file", spec);
    else rc = json ? load_json(t, spec, buf, n, e) : load_tiktoken(t, spec, buf, n, e);
    if (!rc) set_hash(t, buf, n);
    free(buf);
    if (!rc) rc = regex_init(t, e);
    if (rc) { hyp_tok_free(t); return NULL; }
    return t;
}

/* ---- encoding ---- */

static int grow_ids(int32_t **ids, size_t *cap, size_t need) {
    if (need <= *cap) return 0;
    size_t c = *cap ? *cap : 1024;
    while (c < need) c *= 2;
    int32_t *p = realloc(*ids, c * sizeof *p);
    if (!p) return -1;
    *ids = p, *cap = c;
    return 0;
}

static int scratch(hyp_tok *t, size_t n) {
    if (n <= t->scratch_cap) return 0;
    size_t c = t->scratch_cap ? t->scratch_cap : 64;
    while (c < n) c *= 2;
    int32_t *a = realloc(t->pid, c * sizeof *a), *b, *d;
    if (!a) return -1;
    t->pid = a;
    if (!(b = realloc(t->pnext, c * sizeof *b))) return -1;
    t->pnext = b;
    if (!(d = realloc(t->pprev, c * sizeof *d))) return -1;
    t->pprev = d;
    uint32_t *s = realloc(t->pstart, (c + 1) * sizeof *s);
    if (!s) return -1;
    t->pstart = s;
    struct hent *h = realloc(t->heap, 2 * c * sizeof *h);
    if (!h) return -1;
    t->heap = h, t->heap_cap = 2 * c;
    t->scratch_cap = c;
    return 0;
}

static inline int hless(const struct hent *x, const struct hent *y) {
    return x->rank < y->rank || (x->rank == y->rank && x->i < y->i);
}

static void hpush(struct hent *h, size_t *n, struct hent v) {
    size_t i = (*n)++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!hless(&v, &h[p])) break;
        h[i] = h[p], i = p;
    }
    h[i] = v;
}

static struct hent hpop(struct hent *h, size_t *n) {
    struct hent top = h[0], v = h[--*n];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= *n) break;
        if (c + 1 < *n && hless(&h[c + 1], &h[c])) c++;
        if (!hless(&h[c], &v)) break;
        h[i] = h[c], i = c;
    }
    if (*n) h[i] = v;
    return top;
}

/* The rank of merging piece i with piece j (adjacent, j = next[i]); -1 when they do not merge. */
static inline int32_t pair_rank(const hyp_tok *t, const uint8_t *p, int32_t i, int32_t j, int32_t *out) {
    if (t->mode == MODE_MERGES) return pmap_get(&t->pm, t->pid[i], t->pid[j], out);
    uint32_t end = t->pnext[j] >= 0 ? t->pstart[t->pnext[j]] : t->pstart[t->scratch_cap];
    int32_t id = tmap_get(t, p + t->pstart[i], end - t->pstart[i]);
    *out = id;
    return id;
}

static void try_push(hyp_tok *t, const uint8_t *p, int32_t i, size_t *hn) {
    int32_t j = t->pnext[i], out;
    if (i < 0 || j < 0) return;
    int32_t r = pair_rank(t, p, i, j, &out);
    if (r >= 0) hpush(t->heap, hn, (struct hent){r, i, j, t->pid[i], t->pid[j]});
}

/* BPE of one pre-token p[0..n) into out (n ids at most). Returns the count. */
static size_t bpe_word(hyp_tok *t, const uint8_t *p, size_t n, int32_t *out) {
    if (n == 1) { out[0] = t->byte_id[p[0]]; return 1; }
    for (size_t i = 0; i < n; i++) {
        t->pid[i] = t->byte_id[p[i]];
        t->pnext[i] = i + 1 < n ? (int32_t)i + 1 : -1;
        t->pprev[i] = (int32_t)i - 1;
        t->pstart[i] = (uint32_t)i;
    }
    t->pstart[t->scratch_cap] = (uint32_t)n; /* end sentinel for the last piece */
    size_t hn = 0;
    for (size_t i = 0; i + 1 < n; i++) try_push(t, p, (int32_t)i, &hn);
    while (hn) {
        struct hent h = hpop(t->heap, &hn);
        /* stale: a piece merged away or changed since the entry was pushed */
        if (t->pid[h.i] != h.a || t->pnext[h.i] != h.j || t->pid[h.j] != h.b || t->pprev[h.j] != h.i) continue;
        int32_t out_id = -1;
        pair_rank(t, p, h.i, h.j, &out_id);
        t->pid[h.i] = out_id;
        int32_t k = t->pnext[h.j];
        t->pnext[h.i] = k;
        if (k >= 0) t->pprev[k] = h.i;
        t->pid[h.j] = -1, t->pnext[h.j] = -2, t->pprev[h.j] = -2;
        if (t->pprev[h.i] >= 0) try_push(t, p, t->pprev[h.i], &hn);
        try_push(t, p, h.i, &hn);
    }
    size_t k = 0;
    for (int32_t i = 0; i >= 0; i = t->pnext[i]) out[k++] = t->pid[i];
    return k;
}

enum { CACHE_MAX_BYTES = 255, CACHE_MAX_ENTRIES = 1 << 19 };

static int cache_init(hyp_tok *t) {
    t->ccap = CACHE_MAX_ENTRIES;
    t->cmask = 2 * (uint64_t)CACHE_MAX_ENTRIES - 1;
    t->ce = malloc(t->ccap * sizeof *t->ce);
    t->cslot = calloc(t->cmask + 1, sizeof *t->cslot);
    t->carena_cap = 1 << 22;
    t->carena = malloc(t->carena_cap);
    return t->ce && t->cslot && t->carena ? 0 : -1;
}

static void cache_clear(hyp_tok *t) {
    memset(t->cslot, 0, (t->cmask + 1) * sizeof *t->cslot);
    t->cn = 0, t->carena_n = 0;
}

/* One pre-token: from the cache, else merged (and cached when short). */
static int encode_piece(hyp_tok *t, const uint8_t *p, size_t n, int32_t **ids, size_t *len, size_t *cap) {
    if (grow_ids(ids, cap, *len + n)) return -1;
    int32_t *out = *ids + *len;
    if (n == 1) { out[0] = t->byte_id[p[0]]; (*len)++; return 0; }
    if (t->mode == MODE_RANKS) { /* tiktoken's own shortcut: a pre-token that is a token is it */
        int32_t id = tmap_get(t, p, n);
        if (id >= 0) { out[0] = id; (*len)++; return 0; }
    }
    if (n > CACHE_MAX_BYTES) {
        if (scratch(t, n)) return -1;
        *len += bpe_word(t, p, n, out);
        return 0;
    }
    uint64_t h = hbytes(p, n);
    uint64_t s = h & t->cmask;
    for (;; s = (s + 1) & t->cmask) {
        uint32_t c = t->cslot[s];
        if (!c) break;
        struct centry *ce = &t->ce[c - 1];
        if (ce->h == h && ce->blen == n && !memcmp(t->carena + ce->off, p, n)) {
            memcpy(out, t->carena + ce->off + n, (size_t)ce->nids * sizeof(int32_t));
            *len += ce->nids;
            return 0;
        }
    }
    if (scratch(t, n)) return -1;
    size_t k = bpe_word(t, p, n, out);
    *len += k;
    size_t need = n + k * sizeof(int32_t);
    if (t->cn >= t->ccap || t->carena_n + need > t->carena_cap) {
        cache_clear(t);
        for (s = h & t->cmask; t->cslot[s]; s = (s + 1) & t->cmask) {}
    }
    struct centry *ce = &t->ce[t->cn];
    ce->h = h, ce->off = (uint32_t)t->carena_n, ce->blen = (uint8_t)n, ce->nids = (uint8_t)k;
    memcpy(t->carena + t->carena_n, p, n);
    memcpy(t->carena + t->carena_n + n, out, k * sizeof(int32_t));
    t->carena_n += need;
    t->cslot[s] = (uint32_t)++t->cn;
    return 0;
}

int hyp_tok_encode(hyp_tok *t, const uint8_t *text, size_t n, int32_t **ids, size_t *len, size_t *cap, hyp_err *e) {
    if (t->mode == MODE_BYTE) {
        if (grow_ids(ids, cap, *len + n)) return hyp_fail(e, HYP_EFAIL, "tokenizer: out of memory");
        for (size_t i = 0; i < n; i++) (*ids)[(*len)++] = text[i];
        return HYP_OK;
    }
    if (!t->ce && cache_init(t)) return hyp_fail(e, HYP_EFAIL, "tokenizer: out of memory");
    PCRE2_SIZE off = 0;
    while (off < n) {
        int r = pcre2_jit_match(t->re, text, n, off, 0, t->md, NULL);
        if (r == PCRE2_ERROR_JIT_BADOPTION) r = pcre2_match(t->re, text, n, off, 0, t->md, NULL);
        PCRE2_SIZE s = n, en = n;
        if (r >= 0) {
            PCRE2_SIZE *ov = pcre2_get_ovector_pointer(t->md);
            s = ov[0], en = ov[1];
        } else if (r != PCRE2_ERROR_NOMATCH) {
            return hyp_fail(e, HYP_EFAIL, "tokenizer: PCRE2 match error %d at byte %zu", r, (size_t)off);
        }
        if (s > off) /* bytes no pattern matches (invalid UTF-8): a pre-token of their own */
            if (encode_piece(t, text + off, s - off, ids, len, cap)) return hyp_fail(e, HYP_EFAIL, "tokenizer: out of memory");
        if (en > s && encode_piece(t, text + s, en - s, ids, len, cap)) return hyp_fail(e, HYP_EFAIL, "tokenizer: out of memory");
        if (r < 0) break;
        off = en;
    }
    return HYP_OK;
}

int hyp_tok_decode(const hyp_tok *t, const int32_t *ids, size_t n, char **out, size_t *out_n, hyp_err *e) {
    size_t total = 0, k;
    for (size_t i = 0; i < n; i++) {
        if (!hyp_tok_token_bytes(t, ids[i], &k))
            return hyp_fail(e, HYP_EINPUT, "token %zu: id %d is outside the vocabulary (0..%d) — these ids were made with another tokenizer",
                            i, ids[i], t->vocab - 1);
        total += k;
    }
    char *s = malloc(total + 1);
    if (!s) return hyp_fail(e, HYP_EFAIL, "tokenizer: out of memory");
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        const uint8_t *b = hyp_tok_token_bytes(t, ids[i], &k);
        memcpy(s + o, b, k);
        o += k;
    }
    s[o] = 0;
    *out = s, *out_n = o;
    return HYP_OK;
}

/* ========================================================================================== */
/* Training                                                                                    */

typedef struct { int32_t *v; uint32_t n, cap; } ivec;

static int ivec_push(ivec *a, int32_t x) {
    if (a->n == a->cap) {
        uint32_t c = a->cap ? a->cap * 2 : 4;
        int32_t *p = realloc(a->v, c * sizeof *p);
        if (!p) return -1;
        a->v = p, a->cap = c;
    }
    a->v[a->n++] = x;
    return 0;
}

typedef struct {
    /* words: unique pre-tokens with counts, their symbols */
    int64_t *wcount;
    uint32_t *woff, *wlen;     /* symbols of word w: sym[woff[w] .. + wlen[w]) */
    int32_t *sym;
    int32_t *wstamp;
    size_t nw;
    /* pairs */
    pmap idx;                  /* (a, b) -> pair index (in .out) */
    int32_t *pa, *pb;
    int64_t *pcount;
    ivec *where;
    size_t np, pcap;
    /* max-heap of (count snapshot, pair) */
    struct tent { int64_t c; int32_t p; } *heap;
    size_t hn, hcap;
} trainer;

static int pair_of(trainer *T, int32_t a, int32_t b) {
    int32_t p;
    if (pmap_get(&T->idx, a, b, &p) >= 0) return p;
    if (T->np == T->pcap) {
        size_t c = T->pcap ? T->pcap * 2 : 1 << 14;
        int32_t *na = realloc(T->pa, c * sizeof *na);
        if (na) T->pa = na;
        int32_t *nb = realloc(T->pb, c * sizeof *nb);
        if (nb) T->pb = nb;
        int64_t *nc = realloc(T->pcount, c * sizeof *nc);
        if (nc) T->pcount = nc;
        ivec *nwh = realloc(T->where, c * sizeof *nwh);
        if (nwh) T->where = nwh;
        if (!na || !nb || !nc || !nwh) return -1;
        T->pcap = c;
    }
    if (T->idx.n * 2 >= T->idx.mask) { /* grow the index */
        pmap old = T->idx;
        if (pmap_init(&T->idx, (size_t)(old.mask + 1))) return -1;
        for (uint64_t i = 0; i <= old.mask; i++)
            if (old.key[i] != UINT64_MAX) pmap_put(&T->idx, (int32_t)(old.key[i] >> 32), (int32_t)(uint32_t)old.key[i], 0, old.out[i]);
        free(old.key), free(old.rank), free(old.out);
    }
    p = (int32_t)T->np++;
    T->pa[p] = a, T->pb[p] = b, T->pcount[p] = 0;
    T->where[p] = (ivec){0};
    pmap_put(&T->idx, a, b, 0, p);
    return p;
}

static int tgreater(const trainer *T, struct tent x, struct tent y) { /* x before y */
    if (x.c != y.c) return x.c > y.c;
    if (T->pa[x.p] != T->pa[y.p]) return T->pa[x.p] < T->pa[y.p];
    return T->pb[x.p] < T->pb[y.p];
}

static int tpush(trainer *T, int32_t p) {
    if (T->hn == T->hcap) {
        size_t c = T->hcap ? T->hcap * 2 : 1 << 14;
        struct tent *h = realloc(T->heap, c * sizeof *h);
        if (!h) return -1;
        T->heap = h, T->hcap = c;
    }
    struct tent v = {T->pcount[p], p};
    size_t i = T->hn++;
    while (i > 0) {
        size_t q = (i - 1) / 2;
        if (!tgreater(T, v, T->heap[q])) break;
        T->heap[i] = T->heap[q], i = q;
    }
    T->heap[i] = v;
    return 0;
}

static struct tent tpop(trainer *T) {
    struct tent top = T->heap[0], v = T->heap[--T->hn];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= T->hn) break;
        if (c + 1 < T->hn && tgreater(T, T->heap[c + 1], T->heap[c])) c++;
        if (!tgreater(T, T->heap[c], v)) break;
        T->heap[i] = T->heap[c], i = c;
    }
    if (T->hn) T->heap[i] = v;
    return top;
}

static void trainer_free(trainer *T) {
    free(T->wcount), free(T->woff), free(T->wlen), free(T->sym), free(T->wstamp);
    free(T->idx.key), free(T->idx.rank), free(T->idx.out);
    free(T->pa), free(T->pb), free(T->pcount);
    for (size_t p = 0; p < T->np; p++) free(T->where[p].v);
    free(T->where), free(T->heap);
}

static int write_tokenizer_json(const hyp_tok *t, const int32_t *ma, const int32_t *mb, int nm, const char *outdir, hyp_err *e) {
    cJSON *root = cJSON_CreateObject(), *vocab = cJSON_CreateObject(), *merges = cJSON_CreateArray();
    cJSON *added = cJSON_CreateArray(), *eot = cJSON_CreateObject(), *model = cJSON_CreateObject();
    cJSON *pre = cJSON_CreateObject(), *dec = cJSON_CreateObject();
    int rc = HYP_OK;
    if (!root || !vocab || !merges || !added || !eot || !model || !pre || !dec) {
        cJSON_Delete(root), cJSON_Delete(vocab), cJSON_Delete(merges), cJSON_Delete(added), cJSON_Delete(eot);
        cJSON_Delete(model), cJSON_Delete(pre), cJSON_Delete(dec);
        return hyp_fail(e, HYP_EFAIL, "%s: out of memory", outdir);
    }
    cJSON_AddStringToObject(root, "version", "1.0");
    cJSON_AddNullToObject(root, "truncation");
    cJSON_AddNullToObject(root, "padding");
    cJSON_AddNumberToObject(eot, "id", t->eot);
    cJSON_AddStringToObject(eot, "content", EOT_TEXT);
    cJSON_AddFalseToObject(eot, "single_word");
    cJSON_AddFalseToObject(eot, "lstrip");
    cJSON_AddFalseToObject(eot, "rstrip");
    cJSON_AddFalseToObject(eot, "normalized");
    cJSON_AddTrueToObject(eot, "special");
    cJSON_AddItemToArray(added, eot);
    cJSON_AddItemToObject(root, "added_tokens", added);
    cJSON_AddNullToObject(root, "normalizer");
    cJSON_AddStringToObject(pre, "type", "ByteLevel");
    cJSON_AddFalseToObject(pre, "add_prefix_space");
    cJSON_AddTrueToObject(pre, "trim_offsets");
    cJSON_AddTrueToObject(pre, "use_regex");
    cJSON_AddItemToObject(root, "pre_tokenizer", pre);
    cJSON_AddNullToObject(root, "post_processor");
    cJSON_AddStringToObject(dec, "type", "ByteLevel");
    cJSON_AddFalseToObject(dec, "add_prefix_space");
    cJSON_AddTrueToObject(dec, "trim_offsets");
    cJSON_AddTrueToObject(dec, "use_regex");
    cJSON_AddItemToObject(root, "decoder", dec);
    cJSON_AddStringToObject(model, "type", "BPE");
    cJSON_AddNullToObject(model, "dropout");
    cJSON_AddNullToObject(model, "unk_token");
    cJSON_AddNullToObject(model, "continuing_subword_prefix");
    cJSON_AddNullToObject(model, "end_of_word_suffix");
    cJSON_AddFalseToObject(model, "fuse_unk");
    cJSON_AddFalseToObject(model, "byte_fallback");
    for (int id = 0; id < t->eot && rc == HYP_OK; id++) {
        char *s = map_bytes(t->arena + t->off[id], t->len[id]);
        if (!s || !cJSON_AddNumberToObject(vocab, s, id)) rc = hyp_fail(e, HYP_EFAIL, "%s: out of memory", outdir);
        free(s);
    }
    cJSON_AddItemToObject(model, "vocab", vocab);
    for (int m = 0; m < nm && rc == HYP_OK; m++) {
        char *a = map_bytes(t->arena + t->off[ma[m]], t->len[ma[m]]);
        char *b = map_bytes(t->arena + t->off[mb[m]], t->len[mb[m]]);
        char *ab = a && b ? malloc(strlen(a) + strlen(b) + 2) : NULL;
        if (ab) {
            sprintf(ab, "%s %s", a, b);
            cJSON *s = cJSON_CreateString(ab);
            if (s) cJSON_AddItemToArray(merges, s);
            else rc = hyp_fail(e, HYP_EFAIL, "%s: out of memory", outdir);
        } else rc = hyp_fail(e, HYP_EFAIL, "%s: out of memory", outdir);
        free(a), free(b), free(ab);
    }
    cJSON_AddItemToObject(model, "merges", merges);
    cJSON_AddItemToObject(root, "model", model);
    char *txt = rc == HYP_OK ? cJSON_Print(root) : NULL;
    cJSON_Delete(root);
    if (rc) return rc;
    if (!txt) return hyp_fail(e, HYP_EFAIL, "%s: out of memory", outdir);
    if ((rc = hyp_fs_mkdirs(outdir, e)) != HYP_OK) { free(txt); return rc; }
    char path[4200], tmp[4300];
    snprintf(path, sizeof path, "%s/tokenizer.json", outdir);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "wb");
    int ok = f && fputs(txt, f) >= 0 && fputc('\n', f) != EOF;
    if (f && fclose(f) != 0) ok = 0;
    free(txt);
    if (!ok || rename(tmp, path) != 0) {
        int err = errno;
        remove(tmp);
        return hyp_fail(e, HYP_EINPUT, "%s: cannot write: %s — choose a writable -o DIR", path, strerror(err));
    }
    return HYP_OK;
}

int hyp_tok_train(const char *const *files, int n_files, int vocab_size, const char *outdir, int *n_merges, hyp_err *e) {
    byte_map_init();
    if (vocab_size < 257 || vocab_size > (1 << 24))
        return hyp_fail(e, HYP_EINPUT, "--vocab %d: outside 257..16777216 — the vocabulary holds 256 byte tokens and <|endoftext|>, plus the merges", vocab_size);
    if (n_files <= 0) return hyp_fail(e, HYP_EINPUT, "gen tokenizer train: no input files — give text files to train on");
    hyp_tok *t = calloc(1, sizeof *t);
    trainer T = {0};
    int32_t *ma = NULL, *mb = NULL, *oldp = NULL, *newp = NULL, *pstamp = NULL;
    size_t pstamp_cap = 0;
    ivec touched = {0};
    uint8_t *buf = NULL;
    int rc = HYP_OK;
    if (!t) return hyp_fail(e, HYP_EFAIL, "tokenizer: out of memory");
    t->mode = MODE_RANKS; /* while counting words: only the regex and the token maps are used */
    if ((rc = regex_init(t, e))) goto out;
    /* the vocabulary grows to vocab_size - 1 tokens; the word map reuses tmap over word bytes */
    if (tok_reserve(t, vocab_size) || tmap_init(&t->tm, (size_t)vocab_size) || pmap_init(&T.idx, 1 << 16)) {
        rc = hyp_fail(e, HYP_EFAIL, "tokenizer: out of memory");
        goto out;
    }
    for (int b = 0; b < 256; b++) {
        uint8_t c = (uint8_t)b;
        if (tok_set(t, b, &c, 1)) { rc = hyp_fail(e, HYP_EFAIL, "tokenizer: out of memory"); goto out; }
        tmap_put(t, b);
    }
    /* words: a separate byte-keyed map (open addressing over word indices) */
    size_t wcap = 1 << 16, wmask = (1 << 17) - 1, sym_n = 0, sym_cap = 1 << 20;
    int32_t *wslot = malloc((wmask + 1) * sizeof *wslot);
    uint8_t *wbytes = NULL;
    size_t wb_n = 0, wb_cap = 1 << 20;
    uint32_t *wboff = malloc(wcap * sizeof *wboff);
    T.wcount = malloc(wcap * sizeof *T.wcount);
    T.wlen = malloc(wcap * sizeof *T.wlen);
    T.woff = malloc(wcap * sizeof *T.woff);
    T.sym = malloc(sym_cap * sizeof *T.sym);
    wbytes = malloc(wb_cap);
    if (!wslot || !wboff || !T.wcount || !T.wlen || !T.woff || !T.sym || !wbytes) {
        rc = hyp_fail(e, HYP_EFAIL, "tokenizer: out of memory");
        goto words_out;
    }
    memset(wslot, 0xff, (wmask + 1) * sizeof *wslot);
    for (int f = 0; f < n_files && rc == HYP_OK; f++) {
        size_t n;
        if ((rc = hyp_tok_read_file(files[f], &buf, &n, e))) break;
        if (n == 0) { rc = hyp_fail(e, HYP_EINPUT, "%s: input is empty — give a non-empty text file or drop it", files[f]); break; }
        const uint8_t *nul = memchr(buf, 0, n);
        if (nul) {
            rc = hyp_fail(e, HYP_EINPUT, "%s: NUL byte at offset %zu — this is not a text file (binary data?); give plain UTF-8 text",
                          files[f], (size_t)(nul - buf));
            break;
        }
        PCRE2_SIZE off = 0;
        while (off < n && rc == HYP_OK) {
            int r = pcre2_jit_match(t->re, buf, n, off, 0, t->md, NULL);
            if (r == PCRE2_ERROR_JIT_BADOPTION) r = pcre2_match(t->re, buf, n, off, 0, t->md, NULL);
            PCRE2_SIZE s = n, en = n;
            if (r >= 0) {
                PCRE2_SIZE *ov = pcre2_get_ovector_pointer(t->md);
                s = ov[0], en = ov[1];
            }
            PCRE2_SIZE seg[2][2] = {{off, s}, {s, en}};
            for (int q = 0; q < 2 && rc == HYP_OK; q++) {
                size_t a = seg[q][0], len = seg[q][1] - seg[q][0];
                if (!len) continue;
                const uint8_t *w = buf + a;
                uint64_t h = hbytes(w, len), i = h & wmask;
                for (;; i = (i + 1) & wmask) {
                    int32_t id = wslot[i];
                    if (id < 0) break;
                    if (T.wlen[id] == len && !memcmp(wbytes + wboff[id], w, len)) break;
                }
                if (wslot[i] >= 0) { T.wcount[wslot[i]]++; continue; }
                /* a new word */
                if (T.nw + 1 >= wcap) {
                    wcap *= 2;
                    uint32_t *a1 = realloc(wboff, wcap * sizeof *a1);
                    if (a1) wboff = a1;
                    int64_t *a2 = realloc(T.wcount, wcap * sizeof *a2);
                    if (a2) T.wcount = a2;
                    uint32_t *a3 = realloc(T.wlen, wcap * sizeof *a3);
                    if (a3) T.wlen = a3;
                    uint32_t *a4 = realloc(T.woff, wcap * sizeof *a4);
                    if (a4) T.woff = a4;
                    if (!a1 || !a2 || !a3 || !a4) { rc = hyp_fail(e, HYP_EFAIL, "tokenizer: out of memory"); break; }
                }
                if (wb_n + len > wb_cap || sym_n + len > sym_cap) {
                    while (wb_n + len > wb_cap) wb_cap *= 2;
                    while (sym_n + len > sym_cap) sym_cap *= 2;
                    uint8_t *b1 = realloc(wbytes, wb_cap);
                    if (b1) wbytes = b1;
                    int32_t *b2 = realloc(T.sym, sym_cap * sizeof *b2);
                    if (b2) T.sym = b2;
                    if (!b1 || !b2) { rc = hyp_fail(e, HYP_EFAIL, "tokenizer: out of memory"); break; }
                }
                int32_t id = (int32_t)T.nw++;
                wboff[id] = (uint32_t)wb_n;
                memcpy(wbytes + wb_n, w, len);
                wb_n += len;
                T.wcount[id] = 1;
                T.woff[id] = (uint32_t)sym_n;
                T.wlen[id] = (uint32_t)len;
                for (size_t k = 0; k < len; k++) T.sym[sym_n++] = w[k];
                wslot[i] = id;
                if (T.nw * 2 > wmask) { /* rehash */
                    size_t nmask = wmask * 2 + 1;
                    int32_t *ns = malloc((nmask + 1) * sizeof *ns);
                    if (!ns) { rc = hyp_fail(e, HYP_EFAIL, "tokenizer: out of memory"); break; }
                    memset(ns, 0xff, (nmask + 1) * sizeof *ns);
                    for (size_t x = 0; x < T.nw; x++) {
                        uint64_t j = hbytes(wbytes + wboff[x], T.wlen[x]) & nmask;
                        while (ns[j] >= 0) j = (j + 1) & nmask;
                        ns[j] = (int32_t)x;
                    }
                    free(wslot);
                    wslot = ns, wmask = nmask;
                }
            }
            if (r < 0) break;
            off = en;
        }
        free(buf);
        buf = NULL;
    }
words_out:
    free(wslot), free(wboff), free(wbytes);
    if (rc) goto out;
    T.wstamp = malloc((T.nw ? T.nw : 1) * sizeof *T.wstamp);
    if (!T.wstamp) { rc = hyp_fail(e, HYP_EFAIL, "tokenizer: out of memory"); goto out; }
    for (size_t w = 0; w < T.nw; w++) T.wstamp[w] = -1;
    /* initial pair counts and where-lists */
    for (size_t w = 0; w < T.nw && rc == HYP_OK; w++) {
        const int32_t *s = T.sym + T.woff[w];
        for (uint32_t k = 0; k + 1 < T.wlen[w]; k++) {
            int p = pair_of(&T, s[k], s[k + 1]);
            if (p < 0) { rc = hyp_fail(e, HYP_EFAIL, "tokenizer: out of memory"); break; }
            T.pcount[p] += T.wcount[w];
            ivec *wh = &T.where[p];
            if ((!wh->n || wh->v[wh->n - 1] != (int32_t)w) && ivec_push(wh, (int32_t)w)) { rc = hyp_fail(e, HYP_EFAIL, "tokenizer: out of memory"); break; }
        }
    }
    if (rc) goto out;
    for (size_t p = 0; p < T.np; p++)
        if (tpush(&T, (int32_t)p)) { rc = hyp_fail(e, HYP_EFAIL, "tokenizer: out of memory"); goto out; }
    size_t mcap = (size_t)vocab_size, maxlen = 2;
    for (size_t w = 0; w < T.nw; w++) if (T.wlen[w] + 1 > maxlen) maxlen = T.wlen[w] + 1;
    ma = malloc(mcap * sizeof *ma), mb = malloc(mcap * sizeof *mb);
    oldp = malloc(maxlen * sizeof *oldp), newp = malloc(maxlen * sizeof *newp);
    if (!ma || !mb || !oldp || !newp) { rc = hyp_fail(e, HYP_EFAIL, "tokenizer: out of memory"); goto out; }
    int ntok = 256, nm = 0;
    while (ntok < vocab_size - 1 && T.hn) {
        struct tent top = tpop(&T);
        int32_t p = top.p;
        if (top.c != T.pcount[p]) { /* stale: counts only fall for existing pairs */
            if (T.pcount[p] > 0 && tpush(&T, p)) { rc = hyp_fail(e, HYP_EFAIL, "tokenizer: out of memory"); goto out; }
            continue;
        }
        if (top.c <= 0) break;
        int32_t a = T.pa[p], b = T.pb[p];
        /* the new token: the bytes of a then b (an existing token with these bytes is reused) */
        size_t la = t->len[a], lb = t->len[b];
        uint8_t *cat = malloc(la + lb);
        if (!cat) { rc = hyp_fail(e, HYP_EFAIL, "tokenizer: out of memory"); goto out; }
        memcpy(cat, t->arena + t->off[a], la);
        memcpy(cat + la, t->arena + t->off[b], lb);
        int32_t nid = tmap_get(t, cat, la + lb);
        if (nid < 0) {
            nid = ntok++;
            if (tok_set(t, nid, cat, la + lb)) { free(cat); rc = hyp_fail(e, HYP_EFAIL, "tokenizer: out of memory"); goto out; }
            tmap_put(t, nid);
        }
        free(cat);
        if ((size_t)nm == mcap) {
            mcap *= 2;
            int32_t *x = realloc(ma, mcap * sizeof *x);
            if (x) ma = x;
            int32_t *y = realloc(mb, mcap * sizeof *y);
            if (y) mb = y;
            if (!x || !y) { rc = hyp_fail(e, HYP_EFAIL, "tokenizer: out of memory"); goto out; }
        }
        ma[nm] = a, mb[nm] = b;
        int stamp = nm++;
        /* every word holding (a, b): rewrite its symbols, move its pair counts */
        ivec wl = T.where[p];
        T.where[p] = (ivec){0};
        touched.n = 0;
        for (uint32_t q = 0; q < wl.n && rc == HYP_OK; q++) {
            int32_t w = wl.v[q];
            if (T.wstamp[w] == stamp) continue;
            T.wstamp[w] = stamp;
            int32_t *s = T.sym + T.woff[w];
            uint32_t n = T.wlen[w], k = 0, m = 0;
            int hit = 0;
            for (uint32_t i = 0; i + 1 < n; i++) hit |= s[i] == a && s[i + 1] == b;
            if (!hit) continue;
            for (uint32_t i = 0; i < n; i++) oldp[i] = s[i];
            while (k < n) {
                if (k + 1 < n && oldp[k] == a && oldp[k + 1] == b) { newp[m++] = nid; k += 2; }
                else newp[m++] = oldp[k++];
            }
            int64_t c = T.wcount[w];
            for (uint32_t i = 0; i + 1 < n; i++) {
                int pp = pair_of(&T, oldp[i], oldp[i + 1]);
                if (pp < 0) { rc = hyp_fail(e, HYP_EFAIL, "tokenizer: out of memory"); break; }
                T.pcount[pp] -= c;
            }
            for (uint32_t i = 0; i + 1 < m && rc == HYP_OK; i++) {
                int pp = pair_of(&T, newp[i], newp[i + 1]);
                if (pp < 0) { rc = hyp_fail(e, HYP_EFAIL, "tokenizer: out of memory"); break; }
                T.pcount[pp] += c;
                if (newp[i] == nid || newp[i + 1] == nid) {
                    ivec *wh = &T.where[pp];
                    if ((!wh->n || wh->v[wh->n - 1] != w) && ivec_push(wh, w)) rc = hyp_fail(e, HYP_EFAIL, "tokenizer: out of memory");
                    if ((size_t)pp >= pstamp_cap) {
                        size_t c = pstamp_cap ? pstamp_cap : 1024;
                        while (c <= (size_t)pp) c *= 2;
                        int32_t *ps = realloc(pstamp, c * sizeof *ps);
                        if (!ps) { rc = hyp_fail(e, HYP_EFAIL, "tokenizer: out of memory"); break; }
                        for (size_t x = pstamp_cap; x < c; x++) ps[x] = -1;
                        pstamp = ps, pstamp_cap = c;
                    }
                    if (pstamp[pp] != stamp) {
                        pstamp[pp] = stamp;
                        if (ivec_push(&touched, pp)) rc = hyp_fail(e, HYP_EFAIL, "tokenizer: out of memory");
                    }
                }
            }
            memcpy(s, newp, m * sizeof *s);
            T.wlen[w] = m;
        }
        free(wl.v);
        if (rc) goto out;
        /* pairs that include the new token: new, or (when nid was reused) grown — push them */
        for (uint32_t q = 0; q < touched.n; q++)
            if (T.pcount[touched.v[q]] > 0 && tpush(&T, touched.v[q])) { rc = hyp_fail(e, HYP_EFAIL, "tokenizer: out of memory"); goto out; }
    }
    t->eot = ntok;
    t->vocab = ntok + 1;
    if (tok_set(t, t->eot, (const uint8_t *)EOT_TEXT, strlen(EOT_TEXT))) { rc = hyp_fail(e, HYP_EFAIL, "tokenizer: out of memory"); goto out; }
    rc = write_tokenizer_json(t, ma, mb, nm, outdir, e);
    if (!rc && n_merges) *n_merges = nm;
out:
    free(buf), free(ma), free(mb), free(oldp), free(newp), free(pstamp), free(touched.v);
    trainer_free(&T);
    hyp_tok_free(t);
    return rc;
}
