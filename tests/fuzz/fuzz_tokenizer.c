/* fuzz_tokenizer.c — libFuzzer target for the tokenizer readers (runtime/tok/tokenizer.c): a
 * Hugging Face tokenizer.json (our own `gen tokenizer train` output is one) or a tiktoken ranks
 * file, picked by the input's first byte (odd: ranks). A file that opens must encode any text
 * (a fixed sample and the input itself) to ids that decode again; a file that does not open is
 * refused with "file: what — how to fix". Seeds: tokenizers hyp_tok_train wrote, their ranks. */
#include "fuzz_util.h"

#include "tokenizer.h"

static void round_trip(hyp_tok *t, const uint8_t *text, size_t n) {
    int32_t *ids = NULL;
    size_t len = 0, cap = 0;
    hyp_err e = {{0}};
    int rc = hyp_tok_encode(t, text, n, &ids, &len, &cap, &e);
    fz_check(rc, &e, 0);
    if (!rc) {
        for (size_t i = 0; i < len; i++)
            if (ids[i] < 0 || ids[i] >= hyp_tok_vocab_size(t)) {
                fprintf(stderr, "fuzz: encode gave id %d outside the vocabulary of %d\n", ids[i], hyp_tok_vocab_size(t));
                abort();
            }
        char *out = NULL;
        size_t on = 0;
        e.msg[0] = 0;
        rc = hyp_tok_decode(t, ids, len, &out, &on, &e);
        fz_check(rc, &e, 0);
        free(out);
    }
    free(ids);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    const char *name = data[0] & 1 ? "ranks.tiktoken" : "tokenizer.json";
    char path[600];
    fz_write(name, data + 1, size - 1);
    fz_path(path, sizeof path, name);
    hyp_err e = {{0}};
    hyp_tok *t = hyp_tok_open(path, &e);
    if (!t) {
        fz_check(e.msg[0] ? HYP_EINPUT : -1, &e, 0);
        return 0;
    }
    static const char sample[] = "Hello, world! It's 2024:  tabs\there, caf\xc3\xa9 \xe2\x80\x94 \xff\xfe <|endoftext|>\n\n";
    round_trip(t, (const uint8_t *)sample, sizeof sample - 1);
    round_trip(t, data + 1, size - 1 > 512 ? 512 : size - 1);
    size_t n = 0;
    (void)hyp_tok_token_bytes(t, hyp_tok_vocab_size(t) - 1, &n);
    (void)hyp_tok_special_id(t, "<|endoftext|>", 13);
    hyp_tok_free(t);
    return 0;
}
