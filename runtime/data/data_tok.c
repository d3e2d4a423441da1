/* data_tok.c — the tokenizer a data directory was made with (meta.json's tokenizer fields, v2125)
 * and whether a model may train on it. The trainer calls these before its first batch; they
 * never open shards and never change the directory. */
#include <cjson/cJSON.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt.h"
#include "data.h"
#include "fsio.h"
#include "tokenizer.h"

/* ---- gen data's side (data.c calls these; kept here so the shard writer stays tokenizer-blind) */

const char *hyp_data_tok_file(const hyp_tok *tok) {
    if (!strcmp(hyp_tok_kind(tok), "byte")) return NULL;
    return !strcmp(hyp_tok_kind(tok), "bpe") ? HYP_DATA_TOK_JSON : HYP_DATA_TOK_TIKTOKEN;
}

int hyp_data_tok_copy(const char *spec, const char *dir, const char *name, hyp_err *e) {
    uint8_t *buf = NULL;
    size_t n = 0;
    char path[4200];
    int rc = hyp_tok_read_file(spec, &buf, &n, e); /* decompressed: its xxh3 is the recorded hash */
    snprintf(path, sizeof path, "%s/%s", dir, name);
    if (!rc) rc = hyp_fs_write_atomic(path, buf, n, e);
    free(buf);
    return rc;
}

void hyp_data_tok_meta(cJSON *m, const hyp_tok *tok, const char *spec, const char *name) {
    if (name && spec) {
        const char *base = strrchr(spec, '/');
        cJSON_AddStringToObject(m, "tokenizer_file", name);
        cJSON_AddStringToObject(m, "tokenizer_source", base ? base + 1 : spec);
        cJSON_AddStringToObject(m, "tokenizer_xxh3_64", hyp_tok_hash(tok));
    }
    if (hyp_tok_eot(tok) >= 0) cJSON_AddNumberToObject(m, "eot_id", hyp_tok_eot(tok));
}

/* ---- the trainer's side */

int hyp_data_tok_read(const char *dir, hyp_data_tok *t, hyp_err *e) {
    memset(t, 0, sizeof *t);
    t->eot = -1;
    char path[4200];
    snprintf(path, sizeof path, "%s/meta.json", dir);
    if (!hyp_fs_exists(path)) return HYP_OK;
    char *txt = NULL;
    int rc = hyp_fs_read_small(path, 64u << 20, &txt, NULL, e);
    if (rc) return rc;
    cJSON *m = cJSON_Parse(txt);
    free(txt);
    if (!m) return hyp_fail(e, HYP_EINPUT, "%s: not valid JSON — the data directory is damaged; re-run gen data", path);
    const cJSON *k = cJSON_GetObjectItemCaseSensitive(m, "tokenizer");
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(m, "vocab_size");
    const cJSON *h = cJSON_GetObjectItemCaseSensitive(m, "tokenizer_xxh3_64");
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(m, "tokenizer_file");
    const cJSON *s = cJSON_GetObjectItemCaseSensitive(m, "tokenizer_source");
    const cJSON *eo = cJSON_GetObjectItemCaseSensitive(m, "eot_id");
    if (cJSON_IsString(k) && strlen(k->valuestring) < sizeof t->kind) snprintf(t->kind, sizeof t->kind, "%s", k->valuestring);
    if (cJSON_IsNumber(v)) t->vocab = v->valueint;
    if (cJSON_IsNumber(eo)) t->eot = eo->valueint;
    if (cJSON_IsString(h) && strlen(h->valuestring) < sizeof t->hash) snprintf(t->hash, sizeof t->hash, "%s", h->valuestring);
    if (cJSON_IsString(s)) snprintf(t->source, sizeof t->source, "%s", s->valuestring);
    if (t->kind[0] && strcmp(t->kind, "byte") != 0) {
        if (!cJSON_IsString(f) || strchr(f->valuestring, '/') || !t->hash[0]) {
            cJSON_Delete(m);
            return hyp_fail(e, HYP_EINPUT, "%s: tokenizer '%s' without tokenizer_file and tokenizer_xxh3_64 — the data directory is damaged; re-run gen data --tokenizer",
                            path, t->kind);
        }
        char rel[4200], abs[PATH_MAX];
        snprintf(rel, sizeof rel, "%s/%s", dir, f->valuestring);
        if (!realpath(rel, abs)) {
            cJSON_Delete(m);
            return hyp_fail(e, HYP_EINPUT, "%s: missing (meta.json's tokenizer_file) — re-run gen data --tokenizer for this directory", rel);
        }
        snprintf(t->file, sizeof t->file, "%s", abs);
    }
    cJSON_Delete(m);
    return HYP_OK;
}

int hyp_data_tok_check_model(const char *dir, const hyp_data_tok *t, const char *model_tokenizer, int model_vocab,
                             hyp_err *e) {
    if (!t->kind[0]) return HYP_OK;
    int data_byte = !strcmp(t->kind, "byte");
    const char *fix_bpe = "generate the trainer for this data (gen TREE --enable bpe --set v2125.data=DIR ...) or give data made for this model";
    if (!strcmp(model_tokenizer, "byte")) {
        if (data_byte) return HYP_OK;
        return hyp_fail(e, HYP_EINPUT, "%s: made with tokenizer %s (%s, vocab %d) but the model reads bytes (tokenizer: byte) — %s, or make byte data (gen data without --tokenizer)",
                        dir, t->kind, t->source, t->vocab, fix_bpe);
    }
    if (data_byte) {
        /* byte data in a larger vocabulary stays allowed (ids 0..255 embed anywhere; benchmarks
         * train model shapes such as gpt2-124m on bytes), except for a model sized to a BPE */
        if (strcmp(model_tokenizer, "bpe") != 0) return HYP_OK;
        return hyp_fail(e, HYP_EINPUT, "%s: byte-level data, but the model was sized to a BPE vocabulary of %d (v2125) — make the data with that tokenizer (gen data --tokenizer FILE), or generate without --set v2125.data",
                        dir, model_vocab);
    }
    if (!strcmp(model_tokenizer, "gpt2") && (t->vocab != 50257 || t->eot != 50256))
        return hyp_fail(e, HYP_EINPUT, "%s: made with tokenizer %s (%s, vocab %d) but the model uses GPT-2's (vocab 50257) — make the data with gen data --tokenizer assets/tokenizers/gpt2.tiktoken.gz",
                        dir, t->kind, t->source, t->vocab);
    if (t->vocab != model_vocab)
        return hyp_fail(e, HYP_EINPUT, "%s: made with tokenizer %s (%s) of vocab %d but the model's vocab_size is %d — %s",
                        dir, t->kind, t->source, t->vocab, model_vocab, fix_bpe);
    return HYP_OK;
}

int hyp_data_tok_check_init(const char *path, const hyp_data_tok *t, hyp_err *e) {
    if (!t->kind[0]) return HYP_OK;
    char state[8400], step[4096] = "";
    snprintf(state, sizeof state, "%s/state.json", path);
    if (!hyp_fs_exists(state)) {
        hyp_err le;
        if (hyp_ckpt_latest(path, step, sizeof step, &le) != HYP_OK || !step[0]) return HYP_OK; /* HF dir */
        snprintf(state, sizeof state, "%s/state.json", step);
    }
    char *txt = NULL;
    if (hyp_fs_read_small(state, 16u << 20, &txt, NULL, NULL) != HYP_OK) return HYP_OK; /* the loader reports it */
    cJSON *j = cJSON_Parse(txt);
    free(txt);
    const cJSON *tk = cJSON_GetObjectItemCaseSensitive(j, "data_tokenizer");
    const cJSON *k = cJSON_GetObjectItemCaseSensitive(tk, "kind");
    const cJSON *h = cJSON_GetObjectItemCaseSensitive(tk, "xxh3_64");
    int rc = HYP_OK;
    if (cJSON_IsString(k) && cJSON_IsString(h) &&
        (strcmp(k->valuestring, t->kind) != 0 || strcmp(h->valuestring, t->hash) != 0))
        rc = hyp_fail(e, HYP_EINPUT, "%s: --init-from weights trained on data of tokenizer %s %s, but this data was made with %s %s (%s) — continue on data made with that tokenizer, or start from scratch",
                      state, k->valuestring, h->valuestring, t->kind, t->hash, t->source[0] ? t->source : "bytes");
    cJSON_Delete(j);
    return rc;
}
