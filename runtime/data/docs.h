/* docs.h — documents: reading `gen data` inputs into an in-memory document list, and the
 * data-preparation stages that select and order documents before the shard writer encodes them
 * (filter, dedup, mix, curriculum; docs_filter.c, docs_dedup.c, docs_mix.c, docs_order.c).
 *
 * Inputs (the docs contract): a `.jsonl` file holds one document per line (its "text" string;
 * blank lines are skipped); any other file (`.txt`, stdin) is one document, unless doc_sep is
 * given: then a line equal to doc_sep separates documents (`%` for fortune files); empty documents
 * are dropped. A name ending in `.gz` is read through zlib first (`corpus.jsonl.gz`). A document
 * holding a NUL byte is refused (binary input), as is an input that yields no document.
 *
 * A stage never changes a document's bytes: it works on a list of document indices (which
 * documents survive, in which order) and writes what it did into a cJSON report object. Stages
 * are deterministic given their seed. Never: exit() or printing; errors are hyp_err values.
 */
#ifndef HYP_DOCS_H
#define HYP_DOCS_H

#include <stddef.h>
#include <stdint.h>

#include "hyp_err.h"

typedef struct {
    uint8_t *text;     /* all documents' bytes back to back (no separators) */
    size_t text_len, text_cap;
    uint64_t *off;     /* document i is text[off[i] .. off[i] + len[i]) */
    uint64_t *len;
    int32_t *source;   /* index of the input it came from */
    size_t n, cap;
} hyp_docs;

/* Appends the documents of one input (path = what to open, display = its name in messages and
 * reports; "-" for path reads stdin). doc_sep may be NULL. Returns the number of documents
 * read in *n_read. Errors (HYP_EINPUT, naming display): missing/unreadable/empty file, a
 * directory, a NUL byte ("not a text file"), a .jsonl line that is not a JSON object with a
 * "text" string (file:line), a corrupt .gz, no document at all. */
int hyp_docs_read(hyp_docs *d, const char *path, const char *display, int source,
                  const char *doc_sep, size_t *n_read, uint64_t *bytes_read, hyp_err *e);
void hyp_docs_free(hyp_docs *d);

/* ---- v2123 quality filter: the Gopher / C4 heuristic rules ---- */
typedef struct {
    int min_words, max_words;        /* word count bounds (Gopher: 50 .. 100000) */
    double max_symbol_ratio;         /* ('#' + "..." + '…') / words (Gopher: 0.1) */
    double max_digit_ratio;          /* digit characters / non-space characters */
    double max_ellipsis_lines;       /* share of lines ending in "..." or '…' (Gopher: 0.3) */
    double max_dup_lines;            /* share of lines that repeat an earlier line (Gopher: 0.3) */
    double max_top_ngram;            /* share of word characters in the most frequent 2-gram
                                        (Gopher: 0.2) */
    double max_dup_ngram;            /* share of word characters in repeated 5-grams (Gopher:
                                        0.15) */
    int min_stop_words;              /* distinct English stop words present (Gopher: 2) */
    double min_mean_word, max_mean_word; /* mean word length bounds (Gopher: 3 .. 10) */
} hyp_filter_opts;

enum {
    HYP_RULE_MIN_WORDS, HYP_RULE_MAX_WORDS, HYP_RULE_SYMBOLS, HYP_RULE_DIGITS, HYP_RULE_ELLIPSIS,
    HYP_RULE_DUP_LINES, HYP_RULE_TOP_NGRAM, HYP_RULE_DUP_NGRAM, HYP_RULE_STOP_WORDS,
    HYP_RULE_MEAN_WORD, HYP_RULE_COUNT
};
extern const char *const hyp_filter_rule_names[HYP_RULE_COUNT];

void hyp_filter_opts_default(hyp_filter_opts *o);
/* Which rules a document fails: bit r set = rule r failed. 0 = the document is kept. */
uint32_t hyp_filter_check(const uint8_t *text, size_t len, const hyp_filter_opts *o);

/* ---- v2122 deduplication: exact + MinHash LSH ---- */
typedef struct {
    int exact;       /* drop documents whose normalized text hashes equal an earlier one's */
    int near;        /* MinHash + LSH near-duplicate removal */
    int ngram;       /* words per shingle */
    int num_perm;    /* MinHash permutations */
    int bands;       /* LSH bands; rows = num_perm / bands */
    double threshold;/* estimated Jaccard at or above which a candidate is a duplicate */
    uint64_t seed;   /* of the permutations (a, b) */
} hyp_dedup_opts;

void hyp_dedup_opts_default(hyp_dedup_opts *o);
/* The permutation family, datasketch's "legacy" scheme (its default before 2.0.0):
 * h_i(x) = ((a_i * x + b_i) mod 2^64) mod (2^61 - 1) masked to 32 bits, with x = the low 32
 * bits of XXH3_64 of the shingle's bytes; (a_i, b_i) drawn from splitmix64(seed): a in
 * [1, 2^61 - 2], b in [0, 2^61 - 2]. */
void hyp_minhash_perms(uint64_t seed, int num_perm, uint64_t *a, uint64_t *b);
/* The MinHash signature (num_perm values) of a document: its shingles are the sequences of
 * ngram consecutive words of the normalized text (lowercase ASCII, words split at whitespace)
 * joined by one space; a document with fewer words is one shingle. An empty document has the
 * signature of all 0xffffffff. */
void hyp_minhash(const uint8_t *text, size_t len, int ngram, int num_perm, const uint64_t *a,
                 const uint64_t *b, uint32_t *sig);
/* 64-bit hash of the normalized text (lowercase, whitespace runs as one space, trimmed). */
uint64_t hyp_text_hash(const uint8_t *text, size_t len);

/* ---- v2121 mixing ---- */
typedef struct {
    int n_weights;       /* 0 = proportions from source sizes with temperature */
    int fixed_last;      /* 1: the last source is added data (v2124's synthetic documents) with
                            the fixed share last_share; weights / sizes split the rest among the
                            others (n_weights is then the number of sources - 1) */
    double last_share;
    const double *weights;
    double temperature;  /* p_i proportional to n_i^(1/temperature) when n_weights == 0 */
    int by_bytes;        /* 0: weights are shares of documents; 1: shares of bytes (domain i is
                            drawn with probability q_i ~ p_i / mean document bytes of i) */
    uint64_t size;       /* documents to draw; 0 = as many as the sources hold without
                            repeating any in expectation: min_i n_i / q_i */
    uint64_t seed;
} hyp_mix_opts;

/* ---- v2120 curriculum ---- */
enum { HYP_METRIC_LENGTH, HYP_METRIC_COMPRESSION };
enum { HYP_PACE_LINEAR, HYP_PACE_ROOT, HYP_PACE_STEP };
typedef struct {
    int metric;          /* difficulty: bytes, or zlib compressed/raw size (less compressible =
                            harder) */
    int pacing;          /* competence c(t), t = position / documents in the stream */
    double start;        /* c(0): share of the easiest documents available at the start */
    double warmup;       /* t at which c reaches 1 */
    int steps;           /* HYP_PACE_STEP: number of equal steps from start to 1 */
    uint64_t seed;
} hyp_curriculum_opts;

/* c(t) for the options (clamped to [start, 1]). */
double hyp_curriculum_competence(const hyp_curriculum_opts *o, double t);
/* The difficulty score of one document (HYP_EFAIL if zlib fails). */
int hyp_curriculum_score(const uint8_t *text, size_t len, int metric, double *score, hyp_err *e);

/* ---- the pipeline ---- */
typedef struct hyp_stages_s {
    int filter_on, dedup_on, mix_on, curriculum_on;
    hyp_filter_opts filter;
    hyp_dedup_opts dedup;
    hyp_mix_opts mix;
    hyp_curriculum_opts curriculum;
    /* spec ids for the report (the generator's modules fill them; may be NULL) */
    const char *filter_spec, *dedup_spec, *mix_spec, *curriculum_spec;
} hyp_stages;

void hyp_stages_default(hyp_stages *s); /* every stage off, every option at its default */

struct cJSON;
/* Runs filter, then dedup, then mix over the documents ids[0..*n) (in/out: filter and dedup
 * compact *ids in place; mix replaces the malloc'd *ids by its draws, which may repeat documents
 * and outnumber the input). Each stage appends an object to the report array `stages`.
 * n_sources: inputs (the mixing domains). */
int hyp_stages_select(const hyp_docs *d, int n_sources, const hyp_stages *s, uint32_t **ids,
                      size_t *n, struct cJSON *stages, hyp_err *e);
/* "; the filter's rule R removed N" (the rule that removed most), or "" — for the message when
 * no document is left. */
void hyp_stages_why_empty(const struct cJSON *stages, char *out, size_t cap);
/* Appends {"stage": stage, "spec": spec} to the report array and returns it for the stage to fill. */
struct cJSON *hyp_stage_report(struct cJSON *stages, const char *stage, const char *spec);

int hyp_filter_run(const hyp_docs *d, const hyp_filter_opts *o, uint32_t *ids, size_t *n,
                   struct cJSON *report, hyp_err *e);
int hyp_dedup_run(const hyp_docs *d, const hyp_dedup_opts *o, uint32_t *ids, size_t *n,
                  struct cJSON *report, hyp_err *e);
int hyp_mix_run(const hyp_docs *d, int n_sources, const hyp_mix_opts *o, uint32_t **ids,
                size_t *n, struct cJSON *report, hyp_err *e);
/* Each stage: ids[0..*n) in, the survivors (in order) out; its report object filled.
 * Curriculum: perm[0..n) gets the order (indices into piece_doc) in which pieces are written. */
int hyp_curriculum_run(const hyp_docs *d, const hyp_curriculum_opts *o, const uint32_t *piece_doc,
                       size_t n, uint32_t *perm, struct cJSON *report, hyp_err *e);

#endif
