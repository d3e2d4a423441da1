/* stream.h — v2129 streaming dataset: training batches read straight from text / JSONL files
 * (gzip'd or not), tokenized as they are read, with no `gen data` pass and memory that does not
 * grow with the corpus. The trainer's `--stream SOURCES` opens one through
 * hyp_loader_open_stream (data.h), so batches, prefetch (v2128) and checkpoints go through the
 * ordinary hyp_loader calls.
 *
 * Sources: a comma-separated list of files or glob patterns (each pattern's matches in name
 * order), read in that order, one file open at a time. Documents as in `gen data` (docs.h, the
 * docs contract): a .jsonl line is one document (its "text"), a plain text file is one document
 * unless doc_sep is given (a line equal to it separates documents); a .gz suffix is read through
 * zlib; blank / empty documents are skipped. Document i of the pass (counting kept documents over
 * all files) belongs to rank i % world: ranks never share a document.
 *
 * Rows. Each rank tokenizes its own documents (the tokenizer's EOT before each document when it
 * has one, exactly like gen data's encode_document) into one token stream and cuts it into rows of
 * T + 1 tokens with stride T (window k = tokens [kT, kT + T]), the shard loader's windows. At the
 * end of the sources the last partial window is dropped and the next pass starts at the first
 * file again. Positions (v2126): 0 at the row's first token and at each document start, +1
 * otherwise — the shard loader's rule. With world = 1 the rows of a pass are therefore exactly the
 * W windows the shard loader cuts from `gen data` of the same files (tests/unit/test_stream.c).
 *
 * Shuffle: a block shuffle buffer. Rows are taken K (= shuffle_buffer) at a time into a buffer,
 * permuted by Fisher–Yates from hyp_rng_seed2(seed ^ rank, block), and handed out in that order;
 * K = 1 keeps the file order. Rows of different files and passes mix within a block; a row never
 * moves to another block (unlike a sliding reservoir, whose exact resume would need the buffer's
 * contents in the checkpoint).
 *
 * State (hyp_loader_state): epoch = blocks completed, position = rows handed out of the current
 * block (both the same on every rank: all ranks take B rows per batch), stream[] = where this
 * rank's current block starts: {pass, file, byte offset of a document (uncompressed), that
 * document's index in the pass, lines before it, tokens of it to skip}; all zeros = the start.
 * Restoring a state re-reads one block (K rows) from there: resume is bit-exact and costs at most
 * one block of reading (plus, for a .gz file, decompressing it up to the offset). Memory: the
 * block (K (2T + 1) int32), the current document, one read buffer — never the corpus.
 *
 * Errors (HYP_EINPUT, "where: what — how to fix"): no source, a pattern matching nothing, a
 * missing / empty / non-regular file (at open); a file whose first 64 KiB hold a NUL byte (at
 * open); a NUL byte later, a .jsonl line that is not an object with a "text" string (file:line),
 * corrupt gzip, a file without documents, a pass too short for one row of this rank (when the
 * stream reaches them). Never: exit(), printing, or reading a whole corpus into memory. */
#ifndef HYP_STREAM_H
#define HYP_STREAM_H

#include <stdint.h>

#include "data.h"
#include "hyp_err.h"

typedef struct hyp_stream hyp_stream;

/* Opens the sources (see above) for rows of T + 1 tokens as rank `rank` of `world`, blocks of K
 * rows. tokenizer: NULL / "byte", or a tokenizer file (tokenizer.h). doc_sep may be NULL. */
int hyp_stream_open(const char *sources, const char *doc_sep, const char *tokenizer, int K, int T,
                    uint64_t seed, int rank, int world, hyp_stream **out, hyp_err *e);
void hyp_stream_close(hyp_stream *s);

/* B rows from state *st (advanced on success, unchanged on error): inputs / targets [B*T] and
 * positions [B*T] (may be NULL). Not thread-safe: one caller at a time (the loader's producer). */
int hyp_stream_produce(hyp_stream *s, hyp_loader_state *st, int B, int32_t *inputs,
                       int32_t *targets, int32_t *positions, hyp_err *e);

int hyp_stream_block_rows(const hyp_stream *s);   /* K */
int hyp_stream_vocab(const hyp_stream *s);        /* the tokenizer's vocabulary */
int hyp_stream_num_files(const hyp_stream *s);
const char *hyp_stream_name(const hyp_stream *s); /* "a.txt,b.jsonl.gz" or "N files (first ...)" */
/* Documents of this rank read and rows cut since open (for tests and the bench). */
uint64_t hyp_stream_docs_read(const hyp_stream *s);
uint64_t hyp_stream_rows_cut(const hyp_stream *s);

#endif
