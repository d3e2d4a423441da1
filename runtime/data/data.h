/* data.h — the training data pipeline: the byte-level tokenizer and shard writer behind
 * `gen data`, and the mmap'd, shuffling, data-parallel batch loader the trainer reads from.
 *
 * On disk (a data directory, e.g. data/tiny/):
 *   train_000000.bin, train_000001.bin, ...   token shards, llm.c format (below)
 *   val_000000.bin, ...                       (absent when val_fraction is 0)
 *   train_000000.docs, ...                    document starts of each shard (below)
 *   meta.json                                 tokenizer, vocab_size, token counts, sources,
 *                                             documents, and an xxh3-64 checksum of every
 *                                             shard and sidecar
 *   report.json                               what each data-preparation stage did (docs.h)
 * A shard is 256 int32 (little-endian) then the tokens:
 *   header[0] = 20240520 (magic), header[1] = version: 1 = uint16 tokens (llm.c),
 *   2 = uint32 tokens (our extension for vocabularies above 65536), header[2] = token count.
 * A sidecar S.docs is 256 int32 (header[0] = 20240521, header[1] = 1, header[2] = n documents)
 * then n uint64 token offsets within S.bin, ascending, the first 0: where each document starts
 * (a document cut by a shard boundary starts again at offset 0 of the next shard).
 * The loader also reads llm.c's own shards (fineweb_train_000001.bin, tiny_shakespeare_val.bin):
 * a file belongs to split S when its name ends in ".bin" and contains S as an '_'-separated word.
 * Loss masks (v2193 SFT, written by `gen data --chat`, format in chat.h): a shard S.bin may have
 * a sidecar S.mask, 256 int32 header (20240523, version 1, token count) then one uint8 per token;
 * a token whose flag is 0 is never a loss target: the loader writes target -1 for it (the loss
 * ops ignore it, so it gets exactly zero gradient and stays out of the mean's count).
 *
 * S.docs (optional, docs_contract): the document starts of S.bin — 256 int32 (magic 20240521,
 * version 1, n documents), then n uint64 token offsets, ascending, the first 0. Without any
 * sidecar the split is one stream of unknown documents (positions run 0..T-1 in every row).
 * Test hook: HYP_DATA_SLOW_READ_MS=N sleeps N ms in every batch read (a slow disk).
 *
 * Sampling. The split's shards, in name order, form one token stream of n tokens; it is cut into
 * W = (n - 1) / T windows of T + 1 tokens with stride T (window w = tokens [w*T, w*T + T]; a
 * window may span two shards). An epoch is a permutation of the W windows: Fisher–Yates driven
 * by hyp_rng seeded from (seed, epoch) for "train", the identity for "val" — and for the first
 * epoch of "train" when meta.json says "train_order": "curriculum" (gen data's v2120 stage wrote
 * the documents easy to hard: the first pass keeps that order, later epochs are shuffled). With data parallelism
 * the permutation is dealt round-robin: rank r takes permutation slots r, r + world, r + 2*world...
 * so ranks never overlap; each rank gets W_r = W / world windows per epoch (the last W % world
 * slots of each epoch are skipped, different windows each epoch). Batches draw B consecutive
 * windows of the rank's sequence and flow across epoch boundaries (a batch may end one epoch and
 * start the next), so within the stream every window appears exactly once per epoch.
 */
#ifndef HYP_DATA_H
#define HYP_DATA_H

#include <stdint.h>

#include "hyp_err.h"

#define HYP_SHARD_MAGIC 20240520
#define HYP_SHARD_HEADER_INTS 256
#define HYP_DOCS_MAGIC 20240521 /* S.docs sidecars: document starts in shard S.bin */

struct hyp_stages_s;

/* ---- Writing shards: `gen data` ---- */

typedef struct {
    double val_fraction;   /* last fraction of the concatenated text held out for "val";
                              default 0.05; 0 = no val split; must be < 1 */
    uint64_t shard_tokens; /* tokens per shard; default 100,000,000; 1 .. 2^31 - 1 */
    int vocab_size;        /* default 256 (the byte tokenizer); > 65536 writes uint32 shards */
    int overwrite;         /* replace an existing, non-empty outdir (only if it holds nothing
                              but a previous gen data's files); default 0 = refuse */
    const char *doc_sep;   /* plain-text inputs: a line equal to this separates documents;
                              NULL = each file is one document (docs.h) */
    const struct hyp_stages_s *stages; /* filter/dedup/mix/curriculum (docs.h); NULL = none */
    const char *const *input_names; /* names of the inputs in messages, meta.json and the report
                                       (NULL or a NULL entry = the path) */
    const char *tokenizer; /* NULL or "byte" (default): token = byte; else a tokenizer.json or a
                              tiktoken ranks file (tokenizer.h, v2125): every document is encoded
                              after the tokenizer's EOT; vocab_size becomes the tokenizer's; the
                              file is copied into outdir (HYP_DATA_TOK_*) and meta.json records
                              tokenizer, tokenizer_file, tokenizer_source, tokenizer_xxh3_64 and
                              eot_id */
} hyp_data_opts;

#define HYP_DATA_TOK_JSON "tokenizer.json"         /* the copy of a tokenizer.json in outdir */
#define HYP_DATA_TOK_TIKTOKEN "tokenizer.tiktoken" /* the copy (decompressed) of tiktoken ranks */

/* Fills the defaults above. */
void hyp_data_opts_default(hyp_data_opts *o);

/* Reads the documents of the inputs (docs.h: .jsonl, plain text, .gz; "-" = stdin), runs the
 * stages (opts->stages), tokenizes each document with the byte tokenizer (token = byte value) or
 * opts->tokenizer (after its EOT), and writes the stream, split train/val by tokens, as
 * outdir/{train,val}_NNNNNN.bin + .docs sidecars + outdir/meta.json + outdir/report.json (+ the
 * tokenizer's copy). The output
 * is built in a sibling "outdir.tmp-XXXXXX" and renamed into place, so outdir is either absent,
 * the old one, or complete. opts may be NULL for the defaults. Errors (HYP_EINPUT, message names
 * the file): a missing, unreadable, empty or non-text (NUL bytes) input, an existing non-empty
 * outdir without overwrite, an unwritable outdir, bad opts. */
int hyp_data_prepare(const char *const *inputs, int n_inputs, const char *outdir,
                     const hyp_data_opts *opts, hyp_err *e);

/* Re-hashes every shard listed in dir/meta.json and compares with the recorded xxh3-64 and
 * token counts; checks every token is < vocab_size; checks each listed .docs sidecar (checksum,
 * header, ascending offsets below the shard's token count). Reads all data: for `gen data --verify`
 * and tests, not for every trainer start. */
int hyp_data_verify(const char *dir, hyp_err *e);

/* ---- Reading batches: the trainer ---- */

typedef struct hyp_loader hyp_loader;

/* Where the loader is in its stream; identical on all ranks (they advance in lockstep), so the
 * checkpoint stores rank 0's and every rank restores the same value. */
#define HYP_LOADER_STREAM_N 6
typedef struct {
    uint64_t epoch;    /* epochs completed */
    uint64_t position; /* windows of this rank's per-epoch sequence consumed in this epoch,
                          0 .. windows_per_rank (== start of the next epoch) */
    uint64_t stream[HYP_LOADER_STREAM_N]; /* v2129 stream loaders only (stream.h: there epoch =
                          blocks done, position = rows of the block, stream = where this rank's
                          block starts, different on every rank); zeros for shard loaders */
} hyp_loader_state;

/* Opens split ("train" or "val") of dir for batches of B sequences of T tokens, as rank `rank`
 * of `world`. Validates every shard header (magic, version, token count against the file size),
 * meta.json when present (vocab_size, per-shard token counts), and that the split holds at least
 * world windows. Returns NULL with e filled on error (HYP_EINPUT for bad data; see
 * hyp_loader_open_rc for the code). Shards are mmap'd, not read. */
hyp_loader *hyp_loader_open(const char *dir, const char *split, int B, int T, uint64_t seed,
                            int rank, int world, hyp_err *e);
/* Same, returning the error code (HYP_OK / HYP_EINPUT / HYP_EFAIL) and the loader in *out. */
int hyp_loader_open_rc(const char *dir, const char *split, int B, int T, uint64_t seed, int rank,
                       int world, hyp_loader **out, hyp_err *e);
void hyp_loader_close(hyp_loader *L);
/* v2129: a train loader whose batches come from a document stream (stream.h) rather than shards;
 * it takes ownership of s (closed with the loader, also on error). Windows per rank = the
 * stream's block rows; total tokens and shards read 0. */
struct hyp_stream;
int hyp_loader_open_stream(struct hyp_stream *s, int B, int T, hyp_loader **out, hyp_err *e);

/* Fills inputs[B*T] and targets[B*T] (row b = window b of the batch: inputs = its first T
 * tokens, targets = the same shifted by one). Returns HYP_OK, or HYP_EINPUT if a token is
 * >= the vocabulary limit (the message names the shard and the token's index); the state
 * does not advance on error. */
int hyp_loader_next(hyp_loader *L, int32_t *inputs, int32_t *targets, hyp_err *e);

/* Like hyp_loader_next, and positions[B*T] (may be NULL): each input token's position in its
 * document — 0 at a document start (from the shards' .docs sidecars) and at the row's first
 * token, +1 per token otherwise. Without sidecars positions[b*T + t] = t (one stream). A token
 * may attend to the keys [t - positions[t], t] of its row: its own document (v2126). */
int hyp_loader_next_pos(hyp_loader *L, int32_t *inputs, int32_t *targets, int32_t *positions,
                        hyp_err *e);

/* v2128: from now on a thread reads the next `depth` batches ahead into a bounded queue
 * (0 = stop it: direct reads). The batches and the state (get/set_state) are exactly those of
 * direct reads: the state is that of the last batch handed out; set_state and reset drop the
 * queue and restart the thread there. An error is returned at the batch where it happened. */
int hyp_loader_prefetch(hyp_loader *L, int depth, hyp_err *e);
int hyp_loader_prefetch_depth(const hyp_loader *L);

/* ---- Row layouts other than T-token windows (pack.h; call right after open) ----
 * v2126 (hyp_loader_pack_rows): the sampling units are best-fit-decreasing packed rows of whole
 * documents (a document longer than T+1 cut into chunks of T+1 with stride T), at most max_docs per
 * row; a row's targets stay inside each document (-1 at a document's last token and on the padded
 * tail: token 0, position 0), positions restart at each document. v2127 (hyp_loader_dynamic): the
 * units are batches of one length bucket (T, T/2, ...): one document (or chunk) per row, padded to
 * the bucket's length Tb, min(B, token_budget / Tb) rows (the last of a bucket fewer): a batch is
 * laid out compactly as [rows][Tb] at the start of the B*T arrays (hyp_loader_last_batch says its
 * shape). Either way an epoch is a permutation of the units (train) dealt to ranks as windows are,
 * and the state counts units: resume is exact as with windows. */
#define HYP_ROWS_WINDOWS 0
#define HYP_ROWS_BFD 1
#define HYP_ROWS_DYNAMIC 2
typedef struct {
    int B, T;     /* the batch's shape: rows x inputs per row (B, T except with dynamic batches) */
    uint64_t pad; /* input slots without a token (padded tails) */
} hyp_batch_info;
int hyp_loader_pack_rows(hyp_loader *L, int max_docs, hyp_err *e);
int hyp_loader_dynamic(hyp_loader *L, int64_t token_budget, int buckets, hyp_err *e);
int hyp_loader_rows_mode(const hyp_loader *L); /* HYP_ROWS_* */
/* The last batch handed out (by next or next_pos, prefetched or not). */
void hyp_loader_last_batch(const hyp_loader *L, hyp_batch_info *bi);
/* The whole epoch's layout: tokens placed, input slots, padded input slots. */
void hyp_loader_layout(const hyp_loader *L, uint64_t *tokens, uint64_t *slots, uint64_t *pad);

/* Whether any shard of the split has a .docs sidecar, and the documents they list. */
int hyp_loader_has_docs(const hyp_loader *L);
uint64_t hyp_loader_num_docs(const hyp_loader *L);

/* Back to the start of epoch 0 (for "val": the same sequence every evaluation). */
void hyp_loader_reset(hyp_loader *L);

void hyp_loader_get_state(const hyp_loader *L, hyp_loader_state *s);
/* Restores a state from hyp_loader_get_state (same data, T and world): the next batch is then
 * bit-identical to the one the saved loader would have produced. HYP_EINPUT if position is past
 * the epoch's end. */
int hyp_loader_set_state(hyp_loader *L, const hyp_loader_state *s, hyp_err *e);

/* The vocabulary of the data: meta.json's vocab_size, or 0 when there is no meta.json (then
 * only the shard format bounds tokens: 65536 for version 1). */
int hyp_loader_vocab_size(const hyp_loader *L);
/* Tells the loader the model's vocabulary. HYP_EINPUT if meta.json's vocab_size is larger (the
 * data has tokens the model cannot embed); otherwise tokens >= model_vocab become errors in
 * hyp_loader_next instead of out-of-bounds reads. Call it once after open. */
int hyp_loader_require_vocab(hyp_loader *L, int model_vocab, hyp_err *e);

uint64_t hyp_loader_total_tokens(const hyp_loader *L);     /* tokens in the split */
uint64_t hyp_loader_windows(const hyp_loader *L);          /* W: windows per epoch, all ranks */
uint64_t hyp_loader_windows_per_rank(const hyp_loader *L); /* W / world */
int hyp_loader_num_shards(const hyp_loader *L);
/* 1 when some shard of the split has a loss-mask sidecar (S.mask). */
int hyp_loader_masked(const hyp_loader *L);
/* on = 0: train on every token even where a loss mask says 0 (v2193 mask_prompt: false). */
void hyp_loader_set_masked(hyp_loader *L, int on);

#endif
