/* chat.c — post-training data: chat JSONL through a chat template into shards + loss masks,
 * preference JSONL into example files (formats in chat.h), tokenized with the byte tokenizer or a
 * v2125 BPE (tokenizer.h). Never: training, or tokenization anywhere but hyp_post_encode(). */
#include "chat.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>
#include <dirent.h>

#include "data.h"
#include "fsio.h"
#include "tokenizer.h"

#define INPUT_MAX ((size_t)1 << 31) /* a JSONL input larger than this is refused */

/* A template marker: "<|" then up to 64 bytes of [A-Za-z0-9_] then "|>". Its length, or 0. */
static size_t marker_len(const char *s, size_t n) {
    if (n < 4 || s[0] != '<' || s[1] != '|') return 0;
    for (size_t i = 2; i < n && i < 68; i++) {
        char c = s[i];
        if (c == '|') return i > 2 && i + 1 < n && s[i + 1] == '>' ? i + 2 : 0;
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_')) return 0;
    }
    return 0;
}

int hyp_post_encode(hyp_tok *tok, const char *s, size_t n, int markers, int32_t **ids, size_t *len, size_t *cap,
                    hyp_err *e) {
    size_t i = 0, seg = 0;
    while (markers && i < n) {
        size_t m = marker_len(s + i, n - i);
        if (!m) {
            i++;
            continue;
        }
        int rc = i > seg ? hyp_tok_encode(tok, (const uint8_t *)s + seg, i - seg, ids, len, cap, e) : HYP_OK;
        if (rc) return rc;
        int id = hyp_tok_special_id(tok, s + i, m);
        if (id < 0) {
            /* the marker alone, as text: the same ids wherever it stands */
            if ((rc = hyp_tok_encode(tok, (const uint8_t *)s + i, m, ids, len, cap, e))) return rc;
        } else {
            if (*len == *cap) {
                size_t c = *cap ? *cap * 2 : 64;
                int32_t *p = realloc(*ids, c * sizeof *p);
                if (!p) return hyp_fail(e, HYP_EFAIL, "out of memory");
                *ids = p, *cap = c;
            }
            (*ids)[(*len)++] = id;
        }
        i += m, seg = i;
    }
    return n > seg ? hyp_tok_encode(tok, (const uint8_t *)s + seg, n - seg, ids, len, cap, e) : HYP_OK;
}

/* ---- growable token + mask buffers ---- */
typedef struct {
    int32_t *tok;
    uint8_t *mask;
    size_t n, cap;
    uint64_t *docs; /* document starts */
    size_t nd, dcap;
    hyp_tok *tk;    /* the tokenizer */
    int32_t *scr;   /* hyp_post_encode's output before it is appended */
    size_t scr_cap;
} seqbuf;

static int sb_reserve(seqbuf *b, size_t more) {
    if (b->n + more <= b->cap) return 0;
    size_t cap = b->cap ? b->cap : 4096;
    while (cap < b->n + more) cap *= 2;
    int32_t *t = realloc(b->tok, cap * sizeof *t);
    if (t) b->tok = t;
    uint8_t *m = realloc(b->mask, cap);
    if (m) b->mask = m;
    if (!t || !m) return -1;
    b->cap = cap;
    return 0;
}

/* Appends the tokens of s with loss flag `train`; markers: s is template text, whose <|...|>
 * markers become special tokens (hyp_post_encode). */
static int sb_text_m(seqbuf *b, const char *s, int train, int markers) {
    size_t n = strlen(s), k = 0;
    hyp_err e;
    if (!n) return 0;
    if (hyp_post_encode(b->tk, s, n, markers, &b->scr, &k, &b->scr_cap, &e) || sb_reserve(b, k)) return -1;
    memcpy(b->tok + b->n, b->scr, k * sizeof *b->tok);
    memset(b->mask + b->n, train ? 1 : 0, k);
    b->n += k;
    return 0;
}
static int sb_text(seqbuf *b, const char *s, int train) { return sb_text_m(b, s, train, 0); }
static int sb_tpl(seqbuf *b, const char *s, int train) { return sb_text_m(b, s, train, 1); }

/* The tokenizer's EOT (the data contract: before every document), mask 0; nothing without one. */
static int sb_eot(seqbuf *b) {
    int eot = hyp_tok_eot(b->tk);
    if (eot < 0) return 0;
    if (sb_reserve(b, 1)) return -1;
    b->tok[b->n] = eot, b->mask[b->n++] = 0;
    return 0;
}

static int sb_doc(seqbuf *b) {
    if (b->nd == b->dcap) {
        size_t cap = b->dcap ? b->dcap * 2 : 256;
        uint64_t *d = realloc(b->docs, cap * sizeof *d);
        if (!d) return -1;
        b->docs = d, b->dcap = cap;
    }
    b->docs[b->nd++] = b->n;
    return 0;
}

static void sb_free(seqbuf *b) {
    free(b->tok), free(b->mask), free(b->docs), free(b->scr);
    hyp_tok_free(b->tk);
    memset(b, 0, sizeof *b);
}

/* ---- templates ---- */
enum { R_SYSTEM, R_USER, R_ASSISTANT, R__N };
static const char *ROLE[R__N] = {"system", "user", "assistant"};

typedef struct {
    char *bos, *pre[R__N], *suf[R__N];
} chat_tpl;

static void tpl_free(chat_tpl *t) {
    free(t->bos);
    for (int r = 0; r < R__N; r++) free(t->pre[r]), free(t->suf[r]);
    memset(t, 0, sizeof *t);
}

static int tpl_builtin(chat_tpl *t, const char *name) {
    memset(t, 0, sizeof *t);
    t->bos = strdup("");
    for (int r = 0; r < R__N; r++) {
        char buf[64];
        if (!strcmp(name, "chatml")) {
            snprintf(buf, sizeof buf, "<|im_start|>%s\n", ROLE[r]);
            t->pre[r] = strdup(buf);
            t->suf[r] = strdup("<|im_end|>\n");
        } else {
            static const char *P[R__N] = {"System: ", "User: ", "Assistant: "};
            t->pre[r] = strdup(P[r]);
            t->suf[r] = strdup("\n");
        }
        if (!t->pre[r] || !t->suf[r]) return -1;
    }
    return t->bos ? 0 : -1;
}

static int tpl_load(chat_tpl *t, const char *spec, hyp_err *e) {
    if (!spec || !strcmp(spec, "chatml") || !strcmp(spec, "plain")) {
        if (tpl_builtin(t, spec ? spec : "chatml")) return hyp_fail(e, HYP_EFAIL, "chat template: out of memory");
        return HYP_OK;
    }
    memset(t, 0, sizeof *t);
    char *txt = NULL;
    int rc = hyp_fs_read_small(spec, 1 << 20, &txt, NULL, e);
    if (rc) return hyp_fail(e, HYP_EINPUT, "%s: cannot read the chat template — give chatml, plain or a readable JSON template file",
                            spec);
    cJSON *j = cJSON_Parse(txt);
    free(txt);
    if (!cJSON_IsObject(j)) {
        cJSON_Delete(j);
        return hyp_fail(e, HYP_EINPUT, "%s: the chat template is not a JSON object — write {\"system\": {\"prefix\": ..., \"suffix\": ...}, \"user\": {...}, \"assistant\": {...}}",
                        spec);
    }
    const cJSON *bos = cJSON_GetObjectItemCaseSensitive(j, "bos");
    if (bos && !cJSON_IsString(bos)) rc = hyp_fail(e, HYP_EINPUT, "%s: \"bos\" is not a string — give a string or leave it out", spec);
    t->bos = strdup(bos ? bos->valuestring : "");
    for (int r = 0; r < R__N && !rc; r++) {
        const cJSON *o = cJSON_GetObjectItemCaseSensitive(j, ROLE[r]);
        const cJSON *p = cJSON_GetObjectItemCaseSensitive(o, "prefix"), *s = cJSON_GetObjectItemCaseSensitive(o, "suffix");
        if (!cJSON_IsObject(o) || !cJSON_IsString(p) || !cJSON_IsString(s))
            rc = hyp_fail(e, HYP_EINPUT, "%s: role \"%s\" needs {\"prefix\": \"...\", \"suffix\": \"...\"} strings — add them to the template",
                          spec, ROLE[r]);
        else if (!(t->pre[r] = strdup(p->valuestring)) || !(t->suf[r] = strdup(s->valuestring)))
            rc = hyp_fail(e, HYP_EFAIL, "chat template: out of memory");
    }
    cJSON_Delete(j);
    if (!rc && !t->bos) rc = hyp_fail(e, HYP_EFAIL, "chat template: out of memory");
    if (rc) tpl_free(t);
    return rc;
}

/* ---- JSONL ---- */
typedef struct {
    char *txt;
    size_t n, pos;
    int line;
} lines;

static int lines_open(lines *L, const char *path, hyp_err *e) {
    memset(L, 0, sizeof *L);
    int rc = hyp_fs_read_small(path, INPUT_MAX, &L->txt, &L->n, e);
    if (rc) return rc;
    return HYP_OK;
}

/* Next non-blank line (NUL-terminated in place), or NULL at the end. */
static char *lines_next(lines *L) {
    while (L->pos < L->n) {
        char *s = L->txt + L->pos;
        char *nl = memchr(s, '\n', L->n - L->pos);
        size_t len = nl ? (size_t)(nl - s) : L->n - L->pos;
        s[len] = 0;
        L->pos += len + 1;
        L->line++;
        size_t k = 0;
        while (s[k] == ' ' || s[k] == '\t' || s[k] == '\r') k++;
        if (s[k]) return s;
    }
    return NULL;
}

/* ---- output ---- */
static int put_file(const char *dir, const char *name, const void *a, size_t na, const void *b, size_t nb, char hex[17],
                    hyp_err *e) {
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0 || hyp_fs_write_all(fd, a, na) || (nb && hyp_fs_write_all(fd, b, nb)) || fsync(fd)) {
        int err = errno;
        if (fd >= 0) close(fd);
        return hyp_fail(e, hyp_fs_errcode(err), "%s: write failed: %s — check the disk and the directory's permissions", path,
                        strerror(err));
    }
    close(fd);
    if (hex) {
        XXH3_state_t *st = XXH3_createState();
        if (!st) return hyp_fail(e, HYP_EFAIL, "out of memory");
        XXH3_64bits_reset(st);
        XXH3_64bits_update(st, a, na);
        if (nb) XXH3_64bits_update(st, b, nb);
        snprintf(hex, 17, "%016llx", (unsigned long long)XXH3_64bits_digest(st));
        XXH3_freeState(st);
    }
    return HYP_OK;
}

static void header(uint8_t *h, uint32_t magic, uint32_t v1, uint32_t v2, uint32_t v3, uint32_t v4) {
    memset(h, 0, HYP_SHARD_HEADER_INTS * 4);
    uint32_t v[5] = {magic, v1, v2, v3, v4};
    for (int i = 0; i < 5; i++)
        for (int k = 0; k < 4; k++) h[4 * i + k] = (uint8_t)(v[i] >> (8 * k));
}

static int is_post_output(const char *name) {
    const char *ext = strrchr(name, '.');
    if (!strcmp(name, "meta.json") || !strcmp(name, "train.pref") || !strcmp(name, "val.pref") ||
        !strcmp(name, HYP_DATA_TOK_JSON) || !strcmp(name, HYP_DATA_TOK_TIKTOKEN))
        return 1;
    return ext && (!strncmp(name, "train_", 6) || !strncmp(name, "val_", 4)) &&
           (!strcmp(ext, ".bin") || !strcmp(ext, ".mask") || !strcmp(ext, ".docs"));
}

/* outdir is absent, empty, or (overwrite) holds only files gen data writes. */
static int check_out(const char *outdir, int overwrite, hyp_err *e) {
    if (!hyp_fs_exists(outdir)) return HYP_OK;
    if (!hyp_fs_is_dir(outdir)) return hyp_fail(e, HYP_EINPUT, "%s: exists and is not a directory — choose another -o", outdir);
    DIR *d = opendir(outdir);
    if (!d) return hyp_fail(e, HYP_EINPUT, "%s: cannot read the output directory — choose another -o", outdir);
    struct dirent *de;
    int rc = HYP_OK;
    while (!rc && (de = readdir(d))) {
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..")) continue;
        if (!overwrite)
            rc = hyp_fail(e, HYP_EINPUT, "%s: output directory exists and is not empty — choose another -o, or pass --force to replace a previous gen data output",
                          outdir);
        else if (!is_post_output(de->d_name))
            rc = hyp_fail(e, HYP_EINPUT, "%s: holds '%s', which gen data did not write; refusing to replace it even with --force — choose another -o",
                          outdir, de->d_name);
    }
    closedir(d);
    return rc;
}

static int make_tmp(const char *outdir, char *tmp, size_t cap, hyp_err *e) {
    snprintf(tmp, cap, "%s.tmp-XXXXXX", outdir);
    if (!mkdtemp(tmp) || chmod(tmp, 0755) != 0)
        return hyp_fail(e, hyp_fs_errcode(errno), "%s: cannot create a working directory beside it: %s — check the parent directory",
                        outdir, strerror(errno));
    return HYP_OK;
}

static int install(const char *tmp, const char *outdir, hyp_err *e) {
    if (hyp_fs_exists(outdir) && hyp_fs_remove_flat(outdir, is_post_output) != 0)
        return hyp_fail(e, HYP_EFAIL, "%s: cannot remove the previous output: %s", outdir, strerror(errno));
    if (rename(tmp, outdir) != 0)
        return hyp_fail(e, hyp_fs_errcode(errno), "%s: cannot move the finished output into place: %s", outdir, strerror(errno));
    return HYP_OK;
}

static void abandon(const char *tmp) { (void)hyp_fs_remove_flat(tmp, NULL); }

/* One split of chat data: S.bin, S.docs, S.mask; fills the meta entry. */
static int write_chat_split(const char *dir, const char *split, const seqbuf *b, size_t t0, size_t t1, size_t d0, size_t d1,
                            cJSON *shards, hyp_err *e) {
    uint64_t n = t1 - t0, nd = d1 - d0;
    if (n > 0x7fffffffu) return hyp_fail(e, HYP_EINPUT, "%s split: %llu tokens, more than one shard holds (2^31 - 1) — split the input file",
                                         split, (unsigned long long)n);
    int wide = hyp_tok_vocab_size(b->tk) > 65536;
    size_t tb = wide ? 4 : 2;
    uint8_t h[HYP_SHARD_HEADER_INTS * 4];
    uint8_t *body = malloc(n * tb + nd * 8 + 1);
    if (!body) return hyp_fail(e, HYP_EFAIL, "out of memory");
    for (uint64_t i = 0; i < n; i++) {
        uint32_t v = (uint32_t)b->tok[t0 + i];
        for (size_t k = 0; k < tb; k++) body[i * tb + k] = (uint8_t)(v >> (8 * k));
    }
    char name[64], hx_bin[17], hx_docs[17], hx_mask[17];
    snprintf(name, sizeof name, "%s_000000.bin", split);
    header(h, HYP_SHARD_MAGIC, wide ? 2 : 1, (uint32_t)n, 0, 0);
    int rc = put_file(dir, name, h, sizeof h, body, n * tb, hx_bin, e);
    if (!rc) {
        for (uint64_t i = 0; i < nd; i++) {
            uint64_t v = b->docs[d0 + i] - t0;
            for (int k = 0; k < 8; k++) body[i * 8 + k] = (uint8_t)(v >> (8 * k));
        }
        header(h, 20240521, 1, (uint32_t)nd, 0, 0);
        snprintf(name, sizeof name, "%s_000000.docs", split);
        rc = put_file(dir, name, h, sizeof h, body, nd * 8, hx_docs, e);
    }
    if (!rc) {
        header(h, HYP_MASK_MAGIC, 1, (uint32_t)n, 0, 0);
        snprintf(name, sizeof name, "%s_000000.mask", split);
        rc = put_file(dir, name, h, sizeof h, b->mask + t0, n, hx_mask, e);
    }
    free(body);
    if (rc) return rc;
    uint64_t trained = 0;
    for (uint64_t i = 0; i < n; i++) trained += b->mask[t0 + i];
    cJSON *s = cJSON_CreateObject();
    snprintf(name, sizeof name, "%s_000000.bin", split);
    cJSON_AddStringToObject(s, "file", name);
    cJSON_AddStringToObject(s, "split", split);
    cJSON_AddNumberToObject(s, "tokens", (double)n);
    cJSON_AddNumberToObject(s, "loss_tokens", (double)trained);
    cJSON_AddStringToObject(s, "xxh3_64", hx_bin);
    cJSON_AddNumberToObject(s, "docs", (double)nd);
    cJSON_AddStringToObject(s, "docs_xxh3_64", hx_docs);
    cJSON_AddStringToObject(s, "mask_xxh3_64", hx_mask);
    cJSON_AddItemToArray(shards, s);
    return HYP_OK;
}

static int write_meta(const char *dir, cJSON *m, hyp_err *e) {
    char *txt = cJSON_Print(m);
    if (!txt) return hyp_fail(e, HYP_EFAIL, "meta.json: out of memory");
    int rc = put_file(dir, "meta.json", txt, strlen(txt), "\n", 1, NULL, e);
    free(txt);
    return rc;
}

/* Renders one conversation line into b; errors name file:line. */
static int render_line(const char *path, int line, const char *s, const chat_tpl *t, seqbuf *b, hyp_err *e) {
    cJSON *j = cJSON_Parse(s);
    const cJSON *msgs = cJSON_GetObjectItemCaseSensitive(j, "messages");
    int rc = HYP_OK, n_asst = 0;
    if (!cJSON_IsObject(j) || !cJSON_IsArray(msgs) || cJSON_GetArraySize(msgs) == 0)
        rc = hyp_fail(e, HYP_EINPUT, "%s:%d: not a JSON object with a non-empty \"messages\" array — write one {\"messages\": [{\"role\": ..., \"content\": ...}, ...]} per line",
                      path, line);
    if (!rc && (sb_doc(b) || sb_eot(b) || sb_tpl(b, t->bos, 0))) rc = hyp_fail(e, HYP_EFAIL, "out of memory");
    const cJSON *m;
    int k = 0;
    cJSON_ArrayForEach(m, msgs) {
        if (rc) break;
        const cJSON *role = cJSON_GetObjectItemCaseSensitive(m, "role"), *content = cJSON_GetObjectItemCaseSensitive(m, "content");
        int r = -1;
        for (int i = 0; i < R__N && cJSON_IsString(role); i++)
            if (!strcmp(role->valuestring, ROLE[i])) r = i;
        if (r < 0 || !cJSON_IsString(content)) {
            rc = hyp_fail(e, HYP_EINPUT, "%s:%d: message %d needs \"role\" (system, user or assistant) and a string \"content\" — fix that message",
                          path, line, k);
            break;
        }
        n_asst += r == R_ASSISTANT;
        if (sb_tpl(b, t->pre[r], 0) || sb_text(b, content->valuestring, r == R_ASSISTANT) ||
            sb_tpl(b, t->suf[r], r == R_ASSISTANT))
            rc = hyp_fail(e, HYP_EFAIL, "out of memory");
        k++;
    }
    if (!rc && !n_asst)
        rc = hyp_fail(e, HYP_EINPUT, "%s:%d: the conversation has no assistant message, so nothing to train on — add one or drop the line",
                      path, line);
    cJSON_Delete(j);
    return rc;
}

/* --tokenizer: NULL or "byte" = bytes, else a tokenizer file (tokenizer.h). */
static int open_tok(const char **spec, hyp_tok **tk, hyp_err *e) {
    if (*spec && !**spec)
        return hyp_fail(e, HYP_EINPUT, "--tokenizer: empty — give byte, a tokenizer.json or a tiktoken ranks file");
    if (*spec && !strcmp(*spec, "byte")) *spec = NULL;
    *tk = hyp_tok_open(*spec ? *spec : "byte", e);
    return *tk ? HYP_OK : HYP_EINPUT;
}

/* meta.json's tokenizer fields (as gen data writes them) and the tokenizer's copy in dir. */
static int tok_meta(cJSON *m, hyp_tok *tk, const char *spec, const char *dir, hyp_err *e) {
    const char *name = spec ? hyp_data_tok_file(tk) : NULL;
    cJSON_AddStringToObject(m, "tokenizer", hyp_tok_kind(tk));
    cJSON_AddNumberToObject(m, "vocab_size", hyp_tok_vocab_size(tk));
    hyp_data_tok_meta(m, tk, spec, name);
    cJSON_AddStringToObject(m, "template_markers",
                            "<|...|> in the template: the tokenizer's special token when it has one, else encoded alone as text");
    return name ? hyp_data_tok_copy(spec, dir, name, e) : HYP_OK;
}

static size_t val_count(size_t n, double vf) {
    if (vf <= 0 || n < 2) return 0;
    size_t v = (size_t)(n * vf + 0.5);
    if (v < 1) v = 1;
    if (v > n - 1) v = n - 1;
    return v;
}

int hyp_chat_prepare(const char *jsonl, const char *template_spec, const char *tokenizer, const char *outdir,
                     double val_fraction, int overwrite, hyp_err *e) {
    if (!(val_fraction >= 0 && val_fraction < 1))
        return hyp_fail(e, HYP_EINPUT, "gen data: --val-fraction %g is outside [0, 1) — give e.g. 0.1", val_fraction);
    chat_tpl t;
    seqbuf b = {0};
    int rc = check_out(outdir, overwrite, e);
    if (rc || (rc = open_tok(&tokenizer, &b.tk, e))) return rc;
    if ((rc = tpl_load(&t, template_spec, e))) {
        sb_free(&b);
        return rc;
    }
    lines L;
    if ((rc = lines_open(&L, jsonl, e))) {
        tpl_free(&t);
        sb_free(&b);
        return rc;
    }
    char *s;
    while (!rc && (s = lines_next(&L))) rc = render_line(jsonl, L.line, s, &t, &b, e);
    if (!rc && b.nd == 0) rc = hyp_fail(e, HYP_EINPUT, "%s: no conversations — give a JSONL file with one {\"messages\": [...]} per line", jsonl);
    char tmp[4200];
    if (!rc && !(rc = make_tmp(outdir, tmp, sizeof tmp, e))) {
        size_t nv = val_count(b.nd, val_fraction), ntr = b.nd - nv;
        size_t cut = nv ? b.docs[ntr] : b.n;
        cJSON *m = cJSON_CreateObject(), *shards = cJSON_CreateArray();
        cJSON_AddStringToObject(m, "format", "hyperion-chat");
        cJSON_AddNumberToObject(m, "format_version", 1);
        rc = tok_meta(m, b.tk, tokenizer, tmp, e);
        cJSON_AddStringToObject(m, "template", template_spec ? template_spec : "chatml");
        cJSON_AddNumberToObject(m, "documents", (double)b.nd);
        cJSON_AddNumberToObject(m, "train_tokens", (double)cut);
        cJSON_AddNumberToObject(m, "val_tokens", (double)(b.n - cut));
        cJSON_AddStringToObject(m, "mask", "S.mask: uint8 per token, 1 = loss target (chat.h)");
        cJSON_AddItemToObject(m, "shards", shards);
        if (!rc) rc = write_chat_split(tmp, "train", &b, 0, cut, 0, ntr, shards, e);
        if (!rc && nv) rc = write_chat_split(tmp, "val", &b, cut, b.n, ntr, b.nd, shards, e);
        if (!rc) rc = write_meta(tmp, m, e);
        cJSON_Delete(m);
        if (!rc) rc = install(tmp, outdir, e);
        if (rc) abandon(tmp);
    }
    free(L.txt);
    sb_free(&b);
    tpl_free(&t);
    return rc;
}

/* ---- preference data ---- */
static int pref_str(const cJSON *j, const char *key, const char **out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, key);
    if (!cJSON_IsString(v)) return -1;
    *out = v->valuestring;
    return 0;
}

int hyp_pref_prepare(const char *jsonl, const char *template_spec, const char *tokenizer, const char *outdir,
                     double val_fraction, int overwrite, hyp_err *e) {
    if (!(val_fraction >= 0 && val_fraction < 1))
        return hyp_fail(e, HYP_EINPUT, "gen data: --val-fraction %g is outside [0, 1) — give e.g. 0.1", val_fraction);
    /* records as int32: 3 lengths then tokens; example starts in starts[] */
    seqbuf b = {0};
    int rc = check_out(outdir, overwrite, e);
    chat_tpl t = {0};
    if (rc || (rc = open_tok(&tokenizer, &b.tk, e))) return rc;
    if (template_spec && (rc = tpl_load(&t, template_spec, e))) {
        sb_free(&b);
        return rc;
    }
    lines L;
    if ((rc = lines_open(&L, jsonl, e))) {
        tpl_free(&t);
        sb_free(&b);
        return rc;
    }
    size_t *starts = NULL, ns = 0, cap = 0;
    int kind = 0;
    char *s;
    while (!rc && (s = lines_next(&L))) {
        cJSON *j = cJSON_Parse(s);
        const char *p = NULL, *c = NULL, *r = NULL;
        const cJSON *label = cJSON_GetObjectItemCaseSensitive(j, "label");
        int k = !cJSON_IsObject(j) || pref_str(j, "prompt", &p) ? 0
                : !pref_str(j, "chosen", &c) && !pref_str(j, "rejected", &r) ? HYP_PREF_PAIRS
                : !pref_str(j, "completion", &c) && cJSON_IsBool(label) ? HYP_PREF_KTO : 0;
        if (!k)
            rc = hyp_fail(e, HYP_EINPUT, "%s:%d: expected {\"prompt\", \"chosen\", \"rejected\"} strings (pairs) or {\"prompt\", \"completion\": strings, \"label\": true|false} (KTO) — fix the line",
                          jsonl, L.line);
        else if (kind && k != kind)
            rc = hyp_fail(e, HYP_EINPUT, "%s:%d: mixes pair and KTO examples in one file — keep one kind per file", jsonl, L.line);
        else if (k == HYP_PREF_PAIRS && (!*c || !*r))
            rc = hyp_fail(e, HYP_EINPUT, "%s:%d: an empty chosen or rejected response — drop the line", jsonl, L.line);
        else if (k == HYP_PREF_KTO && !*c)
            rc = hyp_fail(e, HYP_EINPUT, "%s:%d: an empty completion — drop the line", jsonl, L.line);
        if (!rc) {
            kind = k;
            if (ns == cap) {
                cap = cap ? cap * 2 : 256;
                size_t *ss = realloc(starts, cap * sizeof *ss);
                if (!ss) rc = hyp_fail(e, HYP_EFAIL, "out of memory");
                else starts = ss;
            }
        }
        if (!rc) {
            starts[ns++] = b.n;
            size_t at = b.n;
            if (sb_reserve(&b, 3)) rc = hyp_fail(e, HYP_EFAIL, "out of memory");
            else {
                b.n += 3;
                size_t n0 = b.n;
                /* with a template: the prompt as a user turn plus the assistant's prefix (the
                 * generation prompt), each completion as assistant content plus its suffix */
                const char *asuf = template_spec ? t.suf[R_ASSISTANT] : "";
                /* the tokenizer's EOT first (every document starts with it in pretraining data) */
                if (sb_eot(&b)) rc = 1;
                if (!rc && template_spec && (sb_tpl(&b, t.bos, 0) || sb_tpl(&b, t.pre[R_USER], 0))) rc = 1;
                if (!rc && sb_text(&b, p, 0)) rc = 1;
                if (!rc && template_spec && (sb_tpl(&b, t.suf[R_USER], 0) || sb_tpl(&b, t.pre[R_ASSISTANT], 0))) rc = 1;
                size_t n1 = b.n;
                if (!rc && (sb_text(&b, c, 1) || sb_tpl(&b, asuf, 1))) rc = 1;
                size_t n2 = b.n;
                if (!rc && k == HYP_PREF_PAIRS && (sb_text(&b, r, 1) || sb_tpl(&b, asuf, 1))) rc = 1;
                if (rc) rc = hyp_fail(e, HYP_EFAIL, "out of memory");
                else {
                    b.tok[at] = (int32_t)(n1 - n0), b.tok[at + 1] = (int32_t)(n2 - n1);
                    b.tok[at + 2] = k == HYP_PREF_PAIRS ? (int32_t)(b.n - n2) : cJSON_IsTrue(label);
                }
            }
        }
        cJSON_Delete(j);
    }
    if (!rc && !ns) rc = hyp_fail(e, HYP_EINPUT, "%s: no examples — give a JSONL file with one preference example per line", jsonl);
    char tmp[4200];
    if (!rc && !(rc = make_tmp(outdir, tmp, sizeof tmp, e))) {
        size_t nv = val_count(ns, val_fraction), ntr = ns - nv;
        size_t cut = nv ? starts[ntr] : b.n;
        uint8_t h[HYP_SHARD_HEADER_INTS * 4];
        char hx[2][17];
        header(h, HYP_PREF_MAGIC, 1, (uint32_t)kind, (uint32_t)ntr, (uint32_t)hyp_tok_vocab_size(b.tk));
        rc = put_file(tmp, "train.pref", h, sizeof h, b.tok, cut * 4, hx[0], e);
        if (!rc && nv) {
            header(h, HYP_PREF_MAGIC, 1, (uint32_t)kind, (uint32_t)nv, (uint32_t)hyp_tok_vocab_size(b.tk));
            rc = put_file(tmp, "val.pref", h, sizeof h, b.tok + cut, (b.n - cut) * 4, hx[1], e);
        }
        cJSON *m = cJSON_CreateObject();
        cJSON_AddStringToObject(m, "format", "hyperion-pref");
        cJSON_AddNumberToObject(m, "format_version", 1);
        cJSON_AddStringToObject(m, "kind", kind == HYP_PREF_PAIRS ? "pairs" : "kto");
        if (!rc) rc = tok_meta(m, b.tk, tokenizer, tmp, e);
        cJSON_AddStringToObject(m, "template", template_spec ? template_spec : "none (strings concatenated)");
        cJSON_AddNumberToObject(m, "train_examples", (double)ntr);
        cJSON_AddNumberToObject(m, "val_examples", (double)nv);
        if (!rc) cJSON_AddStringToObject(m, "train_xxh3_64", hx[0]);
        if (!rc && nv) cJSON_AddStringToObject(m, "val_xxh3_64", hx[1]);
        if (!rc) rc = write_meta(tmp, m, e);
        cJSON_Delete(m);
        if (!rc) rc = install(tmp, outdir, e);
        if (rc) abandon(tmp);
    }
    free(starts);
    free(L.txt);
    sb_free(&b);
    tpl_free(&t);
    return rc;
}

void hyp_pref_free(hyp_pref_set *s) {
    free(s->len), free(s->off), free(s->tok);
    memset(s, 0, sizeof *s);
}

static uint32_t rd32(const uint8_t *p) { return p[0] | p[1] << 8 | p[2] << 16 | (uint32_t)p[3] << 24; }

int hyp_pref_load(const char *dir, const char *split, hyp_pref_set *s, hyp_err *e) {
    memset(s, 0, sizeof *s);
    char path[4200];
    snprintf(path, sizeof path, "%s/%s.pref", dir, split);
    if (!hyp_fs_exists(path))
        return hyp_fail(e, HYP_EINPUT, "%s: no preference examples here — prepare them with gen data --pref FILE.jsonl -o %s", path,
                        dir);
    char *txt = NULL;
    size_t n = 0;
    int rc = hyp_fs_read_small(path, INPUT_MAX, &txt, &n, e);
    if (rc) return rc;
    const uint8_t *u = (const uint8_t *)txt;
    size_t hb = HYP_SHARD_HEADER_INTS * 4;
    if (n < hb || rd32(u) != HYP_PREF_MAGIC || rd32(u + 4) != 1 || (rd32(u + 8) != HYP_PREF_PAIRS && rd32(u + 8) != HYP_PREF_KTO) ||
        (n - hb) % 4) {
        free(txt);
        return hyp_fail(e, HYP_EINPUT, "%s: not a preference file of version 1 (bad header or size) — re-run gen data --pref", path);
    }
    s->kind = (int)rd32(u + 8), s->n = (int)rd32(u + 12), s->vocab = (int)rd32(u + 16);
    size_t nw = (n - hb) / 4;
    s->tok = malloc(nw * 4 + 4);
    s->len = calloc((size_t)s->n + 1, sizeof *s->len);
    s->off = calloc((size_t)s->n + 1, sizeof *s->off);
    if (!s->tok || !s->len || !s->off) {
        free(txt);
        hyp_pref_free(s);
        return hyp_fail(e, HYP_EFAIL, "out of memory");
    }
    for (size_t i = 0; i < nw; i++) s->tok[i] = (int32_t)rd32(u + hb + 4 * i);
    free(txt);
    size_t pos = 0;
    for (int i = 0; i < s->n && !rc; i++) {
        if (pos + 3 > nw) {
            rc = 1;
            break;
        }
        for (int k = 0; k < 3; k++) s->len[i][k] = s->tok[pos + k];
        int64_t need = (int64_t)s->len[i][0] + s->len[i][1] + (s->kind == HYP_PREF_PAIRS ? s->len[i][2] : 0);
        if (s->len[i][0] < 0 || s->len[i][1] <= 0 || s->len[i][2] < 0 || (s->kind == HYP_PREF_PAIRS && s->len[i][2] <= 0) ||
            (s->kind == HYP_PREF_KTO && s->len[i][2] > 1) || pos + 3 + (size_t)need > nw)
            rc = 1;
        s->off[i] = (int64_t)pos + 3;
        pos += 3 + (size_t)need;
        for (int64_t k = s->off[i]; !rc && k < s->off[i] + need; k++)
            if (s->tok[k] < 0 || s->tok[k] >= s->vocab) rc = 1;
    }
    if (!rc && pos != nw) rc = 1;
    if (rc) {
        hyp_pref_free(s);
        return hyp_fail(e, HYP_EINPUT, "%s: truncated or corrupt preference records — re-run gen data --pref", path);
    }
    return HYP_OK;
}

int hyp_mask_open(const char *shard_path, uint64_t ntok, const uint8_t **map, void **map_base, size_t *map_size, hyp_err *e) {
    *map = NULL, *map_base = NULL, *map_size = 0;
    char path[4200];
    size_t L = strlen(shard_path);
    if (L < 4 || strcmp(shard_path + L - 4, ".bin") || L + 2 > sizeof path) return HYP_OK;
    snprintf(path, sizeof path, "%.*s.mask", (int)(L - 4), shard_path);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return errno == ENOENT ? HYP_OK : hyp_fail(e, HYP_EINPUT, "%s: cannot open the loss mask: %s", path, strerror(errno));
    struct stat st;
    size_t hb = HYP_SHARD_HEADER_INTS * 4;
    if (fstat(fd, &st) != 0 || (size_t)st.st_size != hb + ntok) {
        close(fd);
        return hyp_fail(e, HYP_EINPUT, "%s: the loss mask's size does not match its shard's %llu tokens — re-run gen data --chat", path,
                        (unsigned long long)ntok);
    }
    void *m = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, fd, 0);
    close(fd);
    if (m == MAP_FAILED) return hyp_fail(e, HYP_EFAIL, "%s: mmap failed: %s", path, strerror(errno));
    const uint8_t *u = m;
    if (rd32(u) != HYP_MASK_MAGIC || rd32(u + 4) != 1 || rd32(u + 8) != ntok) {
        munmap(m, (size_t)st.st_size);
        return hyp_fail(e, HYP_EINPUT, "%s: not a loss mask of version 1 for %llu tokens — re-run gen data --chat", path,
                        (unsigned long long)ntok);
    }
    *map = u + hb, *map_base = m, *map_size = (size_t)st.st_size;
    return HYP_OK;
}
