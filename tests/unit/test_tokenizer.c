/* test_tokenizer.c — v2125 byte-level BPE against its references. Measures exact equality of our
 * ids with tiktoken's (GPT-2's ranks, assets/tokenizers/gpt2.tiktoken.gz) and with Hugging Face
 * `tokenizers` loading a tokenizer.json that our trainer wrote (tests/fixtures/tok/kjv1024), on
 * the texts of tests/fixtures/tok/expected.json (tests/reference/make_tok_fixtures.py); when
 * data/kjv.txt exists, on the whole corpus too (count + FNV-1a of the ids) and retraining gives the
 * committed file byte for byte. Also: decode(encode(x)) == x for arbitrary bytes (invalid UTF-8,
 * long runs), and every bad input refused with HYP_EINPUT and a one-line message. */
#include <cjson/cJSON.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fsio.h"
#include "rng.h"
#include "tokenizer.h"

#include "hyp_test.h"

static uint64_t fnv(const int32_t *ids, size_t n) {
    uint64_t h = 0xcbf29ce484222325ULL;
    for (size_t i = 0; i < n; i++)
        for (int k = 0; k < 4; k++) {
            h ^= (uint8_t)((uint32_t)ids[i] >> (8 * k));
            h *= 0x100000001b3ULL;
        }
    return h;
}

static int same_ids(const cJSON *want, const int32_t *ids, size_t n, size_t *first_diff) {
    size_t m = (size_t)cJSON_GetArraySize(want), i = 0;
    const cJSON *it;
    cJSON_ArrayForEach(it, want) {
        if (i >= n || it->valueint != ids[i]) break;
        i++;
    }
    *first_diff = i;
    return i == m && m == n;
}

static int roundtrip(hyp_tok *t, const uint8_t *s, size_t n) {
    int32_t *ids = NULL;
    size_t len = 0, cap = 0, on = 0;
    char *out = NULL;
    hyp_err e;
    int ok = hyp_tok_encode(t, s, n, &ids, &len, &cap, &e) == HYP_OK &&
             hyp_tok_decode(t, ids, len, &out, &on, &e) == HYP_OK && on == n && !memcmp(out, s, n);
    free(ids), free(out);
    return ok;
}

static void write_file(const char *path, const void *data, size_t n) {
    FILE *f = fopen(path, "wb");
    if (f) fwrite(data, 1, n, f), fclose(f);
}

static void bad_open(const char *dir, const char *name, const char *content, size_t n, const char *want) {
    char p[512];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    write_file(p, content, n == SIZE_MAX ? strlen(content) : n);
    hyp_err e = {{0}};
    hyp_tok *t = hyp_tok_open(p, &e);
    CHECK(!t && strstr(e.msg, p) && strstr(e.msg, want) && !strchr(e.msg, '\n'), "bad tokenizer %s refused: %s", name, e.msg);
    hyp_tok_free(t);
}

int main(void) {
    hyp_err e = {{0}};
    char *fx;
    size_t fxn;
    if (hyp_fs_read_small("tests/fixtures/tok/expected.json", SIZE_MAX, &fx, &fxn, &e) != HYP_OK) {
        printf("FAIL cannot read the fixture: %s\n", e.msg);
        return 1;
    }
    cJSON *root = cJSON_Parse(fx);
    free(fx);
    CHECK(root != NULL, "fixture parses");
    if (!root) return hyp_test_finish();
    const char *kinds[2] = {"gpt2", "bpe"};
    hyp_tok *tk[2];
    for (int k = 0; k < 2; k++) {
        const char *path = cJSON_GetObjectItem(root, kinds[k])->valuestring;
        tk[k] = hyp_tok_open(path, &e);
        CHECK(tk[k] != NULL, "open %s (%s)%s%s", kinds[k], path, tk[k] ? "" : ": ", tk[k] ? "" : e.msg);
        if (!tk[k]) return hyp_test_finish();
    }
    CHECK(hyp_tok_vocab_size(tk[0]) == 50257 && hyp_tok_eot(tk[0]) == 50256, "GPT-2: vocab 50257, <|endoftext|> = 50256");
    CHECK(hyp_tok_vocab_size(tk[1]) == 1024 && hyp_tok_eot(tk[1]) == 1023, "trained BPE: vocab 1024, <|endoftext|> = 1023");

    /* v2125: exact ids against tiktoken (gpt2) and tokenizers (bpe), every fixture text */
    const cJSON *c;
    int ncase = 0;
    cJSON_ArrayForEach(c, cJSON_GetObjectItem(root, "cases")) {
        const char *name = cJSON_GetObjectItem(c, "name")->valuestring;
        const char *text = cJSON_GetObjectItem(c, "text")->valuestring;
        for (int k = 0; k < 2; k++) {
            const cJSON *want = cJSON_GetObjectItem(c, kinds[k]);
            if (!cJSON_IsArray(want)) continue;
            int32_t *ids = NULL;
            size_t len = 0, cap = 0, d = 0;
            int rc = hyp_tok_encode(tk[k], (const uint8_t *)text, strlen(text), &ids, &len, &cap, &e);
            int ok = rc == HYP_OK && same_ids(want, ids, len, &d);
            CHECK(ok, "v2125 %s ids == %s on '%s' (%zu tokens)%s", kinds[k], k ? "tokenizers" : "tiktoken", name, len,
                  ok ? "" : " — differ at token");
            if (!ok) printf("     first difference at token %zu of %zu (want %d)\n", d, len, cJSON_GetArrayItem(want, (int)d) ? cJSON_GetArrayItem(want, (int)d)->valueint : -1);
            CHECK(roundtrip(tk[k], (const uint8_t *)text, strlen(text)), "%s decode(encode('%s')) is the text", kinds[k], name);
            free(ids);
        }
        ncase++;
    }
    CHECK(ncase >= 15, "%d fixture cases", ncase);

    /* the whole corpus, when present (gen data's default corpus; scripts/demo.sh makes it) */
    const cJSON *kjv = cJSON_GetObjectItem(root, "kjv");
    uint8_t *corpus = NULL;
    size_t cn = 0;
    if (kjv && hyp_tok_read_file("data/kjv.txt", &corpus, &cn, NULL) == HYP_OK &&
        cn == (size_t)cJSON_GetObjectItem(kjv, "bytes")->valuedouble) {
        for (int k = 0; k < 2; k++) {
            int32_t *ids = NULL;
            size_t len = 0, cap = 0;
            char key[32];
            hyp_tok_encode(tk[k], corpus, cn, &ids, &len, &cap, &e);
            snprintf(key, sizeof key, "%s_fnv", kinds[k]);
            char h[17];
            snprintf(h, sizeof h, "%016llx", (unsigned long long)fnv(ids, len));
            snprintf(key, sizeof key, "%s_tokens", kinds[k]);
            size_t want_n = (size_t)cJSON_GetObjectItem(kjv, key)->valuedouble;
            snprintf(key, sizeof key, "%s_fnv", kinds[k]);
            CHECK(len == want_n && !strcmp(h, cJSON_GetObjectItem(kjv, key)->valuestring),
                  "v2125 %s ids of all of data/kjv.txt == the reference's (%zu tokens, %.3f bytes/token)", kinds[k], len,
                  (double)cn / (double)len);
            free(ids);
        }
        /* retraining writes the committed file byte for byte (deterministic trainer + writer) */
        char dir[] = "/tmp/hyp_tok_XXXXXX";
        if (mkdtemp(dir)) {
            const char *files[1] = {"data/kjv.txt"};
            int merges = 0;
            int rc = hyp_tok_train(files, 1, 1024, dir, &merges, &e);
            char p[512], *a = NULL, *b = NULL;
            size_t an = 0, bn = 0;
            snprintf(p, sizeof p, "%s/tokenizer.json", dir);
            hyp_fs_read_small(p, SIZE_MAX, &a, &an, NULL);
            hyp_fs_read_small("tests/fixtures/tok/kjv1024/tokenizer.json", SIZE_MAX, &b, &bn, NULL);
            CHECK(rc == HYP_OK && a && b && an == bn && !memcmp(a, b, an), "retraining vocab 1024 on data/kjv.txt reproduces the committed tokenizer.json (%d merges)", merges);
            free(a), free(b);
            rm_rf(dir);
        }
    } else {
        printf("note: data/kjv.txt absent or different: whole-corpus checks skipped (scripts/demo.sh makes it)\n");
    }
    free(corpus);

    /* arbitrary bytes: invalid UTF-8, controls, long runs — every byte comes back */
    hyp_rng r;
    hyp_rng_seed(&r, 7);
    uint8_t buf[4096];
    for (int trial = 0; trial < 20; trial++) {
        size_t n = 1 + (size_t)hyp_rng_below(&r, sizeof buf - 1);
        for (size_t i = 0; i < n; i++) buf[i] = (uint8_t)hyp_rng_below(&r, trial % 2 ? 256 : 8) + (trial % 2 ? 0 : 0x78);
        for (int k = 0; k < 2; k++)
            if (!roundtrip(tk[k], buf, n)) { CHECK(0, "%s round trip of random bytes (trial %d)", kinds[k], trial); goto bytes_done; }
    }
    CHECK(1, "gpt2 and bpe round trip 20 random byte strings (invalid UTF-8 included)");
bytes_done:;
    size_t big = 200000;
    uint8_t *run = malloc(big);
    memset(run, ' ', big);
    memset(run + big / 2, 'a', big / 2);
    CHECK(roundtrip(tk[0], run, big) && roundtrip(tk[1], run, big), "a 100k-space run and a 100k-letter word round trip");
    free(run);
    /* hyp_tok_special_id (chat templates, chat.c): <|endoftext|> of both; other text is not special */
    CHECK(hyp_tok_special_id(tk[0], "<|endoftext|>", 13) == 50256 && hyp_tok_special_id(tk[1], "<|endoftext|>", 13) == 1023 &&
              hyp_tok_special_id(tk[0], "<|im_start|>", 12) == -1 && hyp_tok_special_id(tk[1], "the", 3) == -1 &&
              hyp_tok_special_id(tk[1], "<|endoftext|>", 12) == -1,
          "special ids: <|endoftext|> found in GPT-2 and the trained BPE; <|im_start|> and ordinary tokens are not special");
    hyp_tok *byte = hyp_tok_open("byte", &e);
    CHECK(byte && hyp_tok_vocab_size(byte) == 256 && hyp_tok_eot(byte) == -1 && roundtrip(byte, (const uint8_t *)"h\xffi", 3) &&
              hyp_tok_special_id(byte, "a", 1) == -1,
          "the byte tokenizer: vocab 256, no EOT, token = byte");
    hyp_tok_free(byte);
    int32_t badid = 1 << 20;
    char *out = NULL;
    size_t on;
    CHECK(hyp_tok_decode(tk[1], &badid, 1, &out, &on, &e) == HYP_EINPUT, "decoding an id outside the vocabulary is refused: %s", e.msg);

    /* bad input: one line naming the file, no tokenizer */
    char dir[] = "/tmp/hyp_tokbad_XXXXXX";
    if (mkdtemp(dir)) {
        bad_open(dir, "broken.json", "{\"model\": {\"type\": \"BPE\", ", 26, "not valid JSON");
        bad_open(dir, "wordpiece.json", "{\"model\": {\"type\": \"WordPiece\", \"vocab\": {}}}", SIZE_MAX, "not \"BPE\"");
        bad_open(dir, "metaspace.json", "{\"model\": {\"type\": \"BPE\", \"vocab\": {}, \"merges\": []}, \"pre_tokenizer\": {\"type\": \"Metaspace\"}}", SIZE_MAX, "ByteLevel");
        bad_open(dir, "ranks.tiktoken", "IQ== 0\nthis is not base64\n", SIZE_MAX, "BASE64 RANK");
        bad_open(dir, "empty.tiktoken", "", 0, "empty");
        bad_open(dir, "binary.bin", "\x1f\x8b\0\0garbage", 11, "gzip");
        bad_open(dir, "few.tiktoken", "IQ== 0\nIg== 1\n", SIZE_MAX, "no rank");
        char p[512];
        snprintf(p, sizeof p, "%s/missing.json", dir);
        CHECK(!hyp_tok_open(p, &e) && strstr(e.msg, "missing.json"), "a missing tokenizer file is refused: %s", e.msg);
        /* training: empty and binary sources */
        const char *files[1] = {p};
        snprintf(p, sizeof p, "%s/empty.txt", dir);
        write_file(p, "", 0);
        CHECK(hyp_tok_train(files, 1, 300, dir, NULL, &e) == HYP_EINPUT && strstr(e.msg, "empty"), "training on an empty file is refused: %s", e.msg);
        snprintf(p, sizeof p, "%s/bin.txt", dir);
        write_file(p, "abc\0def", 7);
        CHECK(hyp_tok_train(files, 1, 300, dir, NULL, &e) == HYP_EINPUT && strstr(e.msg, "NUL"), "training on binary data is refused: %s", e.msg);
        CHECK(hyp_tok_train(files, 1, 100, dir, NULL, &e) == HYP_EINPUT && strstr(e.msg, "--vocab"), "--vocab below 257 is refused: %s", e.msg);
        rm_rf(dir);
    }
    hyp_tok_free(tk[0]);
    hyp_tok_free(tk[1]);
    cJSON_Delete(root);
    return hyp_test_finish();
}
