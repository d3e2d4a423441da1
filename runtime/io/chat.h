/* chat.h — post-training data (v2193 SFT, v2195-v2198 preference objectives): chat JSONL rendered
 * through a chat template into token shards with a per-token loss-mask sidecar, and preference
 * JSONL into example files the preference trainer (train/pref.c) reads.
 * Never: training, or a tokenizer of its own beyond the one seam hyp_post_encode().
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

/* The tokenization seam of post-training data: bytes -> token ids (today the byte tokenizer:
 * token = byte). out has room for n ids; returns how many were written. */
size_t hyp_post_encode(const uint8_t *s, size_t n, int32_t *out);
/* The vocabulary hyp_post_encode produces ids below. */
int hyp_post_vocab(void);

/* gen data --chat: JSONL of conversations -> outdir (see above). template_spec: "chatml", "plain"
 * or a JSON template file; NULL = chatml. Errors name the file and line. */
int hyp_chat_prepare(const char *jsonl, const char *template_spec, const char *outdir, double val_fraction,
                     int overwrite, hyp_err *e);

/* gen data --pref: preference JSONL -> outdir/train.pref, val.pref. template_spec NULL: strings
 * concatenated as they are; else (v2193) the prompt rendered as bos + a user turn + the assistant
 * prefix, each completion as the assistant content + suffix (suffix tokens scored too). */
int hyp_pref_prepare(const char *jsonl, const char *template_spec, const char *outdir, double val_fraction, int overwrite,
                     hyp_err *e);

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
