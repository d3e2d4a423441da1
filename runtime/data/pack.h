/* pack.h — from document extents to the loader's sampling units, for the two ways of laying out
 * rows that are not contiguous T-token windows of the stream:
 *   v2126 best-fit-decreasing packing: every document (a longer one cut into chunks) is placed
 *     whole into rows of T+1 token slots, several documents per row, the row's unused tail padded;
 *   v2127 dynamic batching: one document (or chunk) per row, rows bucketed by length (bucket
 *     lengths T, T/2, T/4, ...), each batch holding rows of one bucket only, padded to the bucket's
 *     length, as many rows as the token budget allows (at most B): B x T varies per batch.
 * A document of n tokens gives n-1 predictions (each token predicts the next inside it; the last
 * predicts nothing: its successor belongs to another document). A document longer than T+1 is cut
 * into chunks of T+1 tokens with stride T (chunk k = tokens [kT, kT+T], overlapping by one token),
 * so each of its tokens but the first is a target exactly once, as with contiguous windows; each
 * chunk is its own masked document with positions restarting at 0 (HF / llm.c packing practice: a
 * chunk cannot attend to the previous chunk anyway, and positions beyond T would index past a
 * learned position table). A piece of one token predicts nothing and is dropped.
 * Never: reading tokens (the loader does, data.c), randomness (units are shuffled by the loader's
 * per-epoch permutation; the layout is a pure function of the documents, T and the parameters). */
#ifndef HYP_PACK_H
#define HYP_PACK_H

#include <stdint.h>

#include "hyp_err.h"

typedef struct {
    uint64_t start; /* global token index (the split's stream) of its first token */
    uint32_t len;   /* tokens, 2 .. T+1 */
} hyp_span;

typedef struct {
    hyp_span *span;    /* every row's documents, row r = span[row_off[r] .. row_off[r+1]) */
    uint64_t *row_off; /* [n_rows + 1] */
    uint64_t n_rows;
    /* dynamic batches (hyp_pack_buckets; NULL / 0 otherwise): batch b = rows
     * [bat_off[b], bat_off[b+1]), each padded to bat_T[b] inputs */
    uint64_t *bat_off;
    int32_t *bat_T;
    uint64_t n_bat;
    uint64_t tokens; /* tokens placed (sum of span lengths) */
    uint64_t slots;  /* input slots of all rows (rows x their T): padding = slots - inputs used */
    uint64_t pad;    /* padded input slots over all rows */
} hyp_pack;

/* Pieces of the documents whose starts (global, ascending) are doc_start[0..n_docs) and
 * shard_start[0..n_shards) (a shard without a sidecar is one document: the union of both lists
 * bounds the documents), in a stream of `total` tokens: documents of <= T+1 tokens whole, longer
 * ones cut into chunks as above, pieces of one token dropped. *out is malloc'd. */
int hyp_pack_pieces(const uint64_t *doc_start, uint64_t n_docs, const uint64_t *shard_start, int n_shards,
                    uint64_t total, int T, hyp_span **out, uint64_t *n_out, hyp_err *e);

/* Best-fit decreasing: pieces sorted by length (longest first, ties in stream order), each put
 * into the open row whose free slots are the fewest that still hold it (a new row when none
 * does); a row closes when full or holding max_docs pieces. Rows in the order they were opened. */
int hyp_pack_bfd(hyp_pack *pk, const hyp_span *pieces, uint64_t n, int T, int max_docs, hyp_err *e);

/* Dynamic batches: bucket lengths T, T/2, ..., T >> (buckets-1) (at least 1); a piece of n tokens
 * goes to the shortest bucket with length >= n-1; within a bucket pieces keep stream order and are
 * cut into batches of min(B, max(1, budget / length)) rows (the bucket's last batch may hold
 * fewer). Batches bucket by bucket, longest bucket first. */
int hyp_pack_buckets(hyp_pack *pk, const hyp_span *pieces, uint64_t n, int T, int B, int64_t budget, int buckets,
                     hyp_err *e);

/* Input slots of row r that carry no token (the padded tail) for rows of Tr inputs. */
static inline int hyp_pack_row_pad(const hyp_pack *pk, uint64_t r, int Tr) {
    uint64_t f = 0;
    for (uint64_t k = pk->row_off[r]; k < pk->row_off[r + 1]; k++) f += pk->span[k].len;
    return f >= (uint64_t)Tr ? 0 : Tr - (int)f;
}

void hyp_pack_free(hyp_pack *pk);

#endif
