/* tokenizer.h — byte-level BPE tokenizers (v2125): GPT-2's byte-to-unicode mapping and
 * pre-tokenization regex, encoding with an existing vocabulary (a Hugging Face `tokenizer.json`
 * of model type BPE with a ByteLevel pre-tokenizer, or a tiktoken ranks file such as GPT-2's
 * `gpt2.tiktoken`, optionally gzip'd), decoding, and training a new vocabulary on a corpus,
 * saved as a `tokenizer.json` the `tokenizers` library loads. `gen data --tokenizer`, `gen
 * tokenizer ...` and `train sample` share it. It must never tokenize differently from its
 * reference (tiktoken / tokenizers) on valid UTF-8: tests/unit/test_tokenizer.c checks ids
 * written by those libraries (tests/reference/make_tok_fixtures.py).
 *
 * Ids. "byte": id = byte value, vocab 256, no EOT. A tiktoken file: id = rank, plus
 * `<|endoftext|>` at id = number of ranks (GPT-2: 50256, vocab 50257). A tokenizer.json: its
 * model.vocab ids and added_tokens; EOT = the added token `<|endoftext|>` when present.
 * Encoding is "ordinary": special-token text in the input is encoded as plain text.
 *
 * Merge semantics. A tokenizer.json merges the adjacent pair with the lowest merge index (the
 * `tokenizers` rule); a tiktoken file merges the adjacent pair whose concatenation has the lowest
 * rank (tiktoken's rule). Both run per pre-token with a binary heap (O(n log n) in its length)
 * and are memoized per pre-token. A hyp_tok is not thread-safe (its cache and scratch are
 * shared by calls): one per thread. */
#ifndef HYP_TOKENIZER_H
#define HYP_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#include "hyp_err.h"

typedef struct hyp_tok hyp_tok;

/* Opens "byte" (the byte tokenizer) or a tokenizer file: PATH ending in .json or starting with
 * '{' is read as a tokenizer.json, otherwise as tiktoken ranks ("base64 rank" per line); a .gz
 * file is read through zlib. NULL with e filled (HYP_EINPUT, one line naming the file) when it
 * does not parse or is not a byte-level BPE. */
hyp_tok *hyp_tok_open(const char *spec, hyp_err *e);
void hyp_tok_free(hyp_tok *t);

int hyp_tok_vocab_size(const hyp_tok *t);
int hyp_tok_eot(const hyp_tok *t);               /* -1 when it has none (byte) */
const char *hyp_tok_kind(const hyp_tok *t);      /* "byte" | "bpe" (tokenizer.json) | "tiktoken" */
/* xxh3-64 of the file's (decompressed) bytes as 16 hex digits; "" for byte. */
const char *hyp_tok_hash(const hyp_tok *t);

/* Encodes n bytes of text (any bytes; not NUL-terminated). Appends the ids to *ids (realloc'd,
 * *len / *cap updated). HYP_OK or HYP_EFAIL (out of memory). */
int hyp_tok_encode(hyp_tok *t, const uint8_t *text, size_t n, int32_t **ids, size_t *len,
                   size_t *cap, hyp_err *e);

/* The id of the special token whose text is exactly s[0..n) (<|endoftext|>, or any added_tokens
 * entry of a tokenizer.json, e.g. ChatML's <|im_start|>), -1 when the tokenizer has none
 * (always -1 for byte). Encoding never produces these ids from text; callers that render
 * templates (chat.c) emit them explicitly. */
int hyp_tok_special_id(const hyp_tok *t, const char *s, size_t n);

/* The bytes of token id (NULL, *n = 0 for an id out of range; special tokens give their text). */
const uint8_t *hyp_tok_token_bytes(const hyp_tok *t, int id, size_t *n);

/* Decodes ids into out (malloc'd, NUL-terminated; *out_n bytes without the NUL). Ids out of range
 * are an error (HYP_EINPUT). */
int hyp_tok_decode(const hyp_tok *t, const int32_t *ids, size_t n, char **out, size_t *out_n,
                   hyp_err *e);

/* Trains a byte-level BPE of vocab_size ids (256 byte tokens, vocab_size - 257 merges, then
 * `<|endoftext|>`) on the concatenated texts of files (each file pre-tokenized with GPT-2's
 * regex; .gz read through zlib) and writes outdir/tokenizer.json (outdir created). Merges are
 * chosen by pair count (ties: the smaller pair of ids), with incremental pair-count updates. On
 * success *n_merges holds the merges made (fewer than asked when the corpus runs out of pairs).
 * Errors: missing / empty / binary (NUL) file, vocab_size outside 257..16777216, unwritable dir. */
int hyp_tok_train(const char *const *files, int n_files, int vocab_size, const char *outdir,
                  int *n_merges, hyp_err *e);

/* Reads a whole file (a .gz through zlib) into *buf (malloc'd, NUL-terminated) — used for
 * tokenizer files and training text. HYP_EINPUT for a missing or unreadable file. */
int hyp_tok_read_file(const char *path, uint8_t **buf, size_t *n, hyp_err *e);

/* ---- A data directory's tokenizer (meta.json written by gen data, data.h; data_tok.c) ---- */

/* gen data's side. The name of the tokenizer's copy in a data directory (HYP_DATA_TOK_JSON or
 * HYP_DATA_TOK_TIKTOKEN), NULL for byte; the copy (decompressed) of file spec into dir/name;
 * meta.json's tokenizer_file, tokenizer_source, tokenizer_xxh3_64 (when name) and eot_id (when
 * the tokenizer has one) added to the cJSON object m. */
struct cJSON;
const char *hyp_data_tok_file(const hyp_tok *tok);
int hyp_data_tok_copy(const char *spec, const char *dir, const char *name, hyp_err *e);
void hyp_data_tok_meta(struct cJSON *m, const hyp_tok *tok, const char *spec, const char *name);

typedef struct {
    char kind[16];   /* "byte" | "bpe" | "tiktoken"; "" when unknown (no meta.json, llm.c shards) */
    char hash[17];   /* tokenizer_xxh3_64, "" for byte */
    char source[256];/* tokenizer_source: the basename the user gave gen data */
    int vocab, eot;  /* vocab_size; eot_id or -1 */
    char file[4096]; /* the tokenizer copy in the directory (absolute path), "" for byte */
} hyp_data_tok;

/* Reads dir/meta.json's tokenizer fields. HYP_OK with kind "" when there is no meta.json;
 * HYP_EINPUT when meta.json is damaged or its tokenizer file is missing. */
int hyp_data_tok_read(const char *dir, hyp_data_tok *t, hyp_err *e);

/* Can a model whose plan says tokenizer model_tokenizer ("byte" | "gpt2" | "bpe") with vocab
 * model_vocab train on this data? "byte" needs byte data; "gpt2" data of GPT-2's vocabulary
 * (50257, EOT 50256); "bpe" a BPE vocabulary of exactly model_vocab. Unknown data and byte data
 * (ids 0..255, which any model embeds: the loader checks vocab_size) pass.
 * HYP_EINPUT with "dir: what — how to fix" otherwise. */
int hyp_data_tok_check_model(const char *dir, const hyp_data_tok *t, const char *model_tokenizer,
                             int model_vocab, hyp_err *e);

/* --init-from PATH (a checkpoint directory or step directory of ours): HYP_EINPUT when its
 * state.json records a data tokenizer other than t's. Hugging Face directories and checkpoints
 * that record none pass. */
int hyp_data_tok_check_init(const char *path, const hyp_data_tok *t, hyp_err *e);

#endif
