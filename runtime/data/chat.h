/* chat.h — post-training data (v2193 SFT, v2195-v2198 preference objectives): chat JSONL rendered
 * through a chat template into token shards with a per-token loss-mask sidecar, and preference
 * JSONL into example files the preference trainer (train/pref.c) reads.
 * Never: training, or a tokenizer of its own beyond the one seam hyp_post_encode().
 *
 * Both commands take `--tokenizer byte|PATH` as plain gen data does (v2125, tokenizer.h): meta.json
 * records tokenizer, vocab_size, eot_id, tokenizer_file / _source / _xxh3_64 and the tokenizer is
 * copied into DIR, so the trainer's vocabulary / tokenizer refusals (data_tok.c) apply. When the
 * tokenizer has an EOT, it starts every conversation (mask 0; the .docs offset points at it) and
 * every preference prompt (the data contract's convention).
 *
 * `gen data --chat FILE.jsonl -o DIR [--template chatml|plain|T.json] [--val-fraction F]`
 *   Each line is {"messages": [{"role": "system"|"user"|"assistant", "content": "..."}, ...]}
 *   with at least one assistant message. Each message is rendered as prefix + content + suffix
 *   of its role's template; the tokens of an assistant message's content and suffix are loss
 *   targets (mask 1), everything else (system/user messages, every role prefix such as
 *   "<|im_start|>assistant\n") is prompt (mask 0). ChatML (default): prefix "<|im_start|>ROLE\n",
 *   suffix "<|im_end|>\n"; plain: "System: "/"User: "/"Assistant: " prefixes, suffix "\n". A
 *   template file is JSON {"bos": "...", "system": {"prefix": "...", "suffix": "..."}, "user":
 *   {...}, "assistant": {...}} (bos, optional, starts every conversation).
 *   Writes DIR/train_000000.bin (+ val_000000.bin: the last --val-fraction of the conversations,
 *   default 0.1, at least one when there are two or more), each with
 *     S.docs  the document sidecar of the data contract (one document per conversation), and
 *     S.mask  the loss mask: 256 int32 little-endian header (header[0] = 20240523 magic,
 *             header[1] = 1 version, header[2] = token count n, rest 0) then n uint8: 1 when
 *             token i is trained on as a target (the loader sets targets to -1 where it is 0).
 *   and meta.json ("format": "hyperion-chat", counts, xxh3_64 of every file).
 *
 * `gen data --pref FILE.jsonl -o DIR [--template chatml|plain|T.json] [--val-fraction F]`
 *   Pairs: each line {"prompt": "...", "chosen": "...", "rejected": "..."}; KTO: each line
 *   {"prompt": "...", "completion": "...", "label": true|false}. Strings are concatenated as they
 *   are (TRL's "standard" format: prompt + completion), or with --template through the chat template
 *   (see hyp_pref_prepare), tokenized through hyp_post_encode().
 *   Writes DIR/train.pref and DIR/val.pref (the last --val-fraction of the examples):
 *     256 int32 header: [0] = 20240524 magic, [1] = 1 version, [2] = kind (1 pairs, 2 KTO),
 *     [3] = example count n, [4] = vocab size, rest 0; then n records, each 3 int32
 *     (pairs: prompt, chosen, rejected token counts; KTO: prompt, completion counts, label 0/1)
 *     followed by the tokens of those parts in that order as int32.
 */
#ifndef HYP_CHAT_H
#define HYP_CHAT_H

#include <stddef.h>
#include <stdint.h>

#include "hyp_err.h"

#define HYP_MASK_MAGIC 20240523
#define HYP_PREF_MAGIC 20240524
enum { HYP_PREF_PAIRS = 1, HYP_PREF_KTO = 2 };

/* The tokenization seam of post-training data: n bytes of s -> ids of tok (byte or a v2125 BPE),
 * appended to *ids (realloc'd; *len, *cap updated). markers = 0 (message content, prompts,
 * completions): ordinary encoding, so "<|im_end|>" typed by a user is plain text. markers = 1
 * (chat-template text): each "<|NAME|>" marker is its own segment, encoded as the tokenizer's
 * special token of that text when it has one (hyp_tok_special_id: an added token of a
 * tokenizer.json, <|endoftext|>), else as the marker's text alone, so a marker gets the same ids
 * wherever it stands and never merges with its neighbours. Callers encode template prefix,
 * content and suffix separately, so token boundaries fall on the loss mask's boundaries.
 * HYP_OK or HYP_EFAIL (out of memory). */
struct hyp_tok;
int hyp_post_encode(struct hyp_tok *tok, const char *s, size_t n, int markers, int32_t **ids, size_t *len, size_t *cap,
                    hyp_err *e);

/* gen data --chat: JSONL of conversations -> outdir (see above). template_spec: "chatml", "plain"
 * or a JSON template file; NULL = chatml. Errors name the file and line. */
int hyp_chat_prepare(const char *jsonl, const char *template_spec, const char *tokenizer, const char *outdir,
                     double val_fraction, int overwrite, hyp_err *e);

/* gen data --pref: preference JSONL -> outdir/train.pref, val.pref. template_spec NULL: strings
 * concatenated as they are; else (v2193) the prompt rendered as bos + a user turn + the assistant
 * prefix, each completion as the assistant content + suffix (suffix tokens scored too). */
int hyp_pref_prepare(const char *jsonl, const char *template_spec, const char *tokenizer, const char *outdir,
                     double val_fraction, int overwrite, hyp_err *e);

/* The loss-mask sidecar of shard_path (S.bin -> S.mask), mapped read-only: *map = the n flag
 * bytes (after the header), *map_base and *map_size what to munmap. Absent sidecar: HYP_OK with
 * *map = NULL. A sidecar whose header does not match ntok is HYP_EINPUT. */
int hyp_mask_open(const char *shard_path, uint64_t ntok, const uint8_t **map, void **map_base, size_t *map_size,
                  hyp_err *e);

/* ---- Preference examples (train/pref.c reads them) ---- */
typedef struct {
    int kind;                 /* HYP_PREF_PAIRS or HYP_PREF_KTO */
    int n;                    /* examples */
    int vocab;
    int32_t (*len)[3];        /* per example: prompt, chosen|completion, rejected|label */
    int64_t *off;             /* per example: index of its first token in tok */
    int32_t *tok;
} hyp_pref_set;

/* Reads dir/<split>.pref ("train" or "val"). HYP_EINPUT for a missing or malformed file. */
int hyp_pref_load(const char *dir, const char *split, hyp_pref_set *s, hyp_err *e);
void hyp_pref_free(hyp_pref_set *s);

#endif
