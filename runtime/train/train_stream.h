/* train_stream.h — the trainer's side of v2129 streaming (`train --stream SOURCES`): opening the
 * stream as the train loader, checking its tokenizer against the plan's model, and carrying each
 * rank's stream position through checkpoints. All data logic is in runtime/data/stream.c.
 * Never: touches shards, or resumes a stream checkpoint at another world size. */
#ifndef HYP_TRAIN_STREAM_H
#define HYP_TRAIN_STREAM_H

#include "ckpt.h"
#include "data.h"
#include "plan.h"
#include "tokenizer.h"
#include "train.h"

/* Before the run: --stream needs a plan generated with streaming (train.stream_buffer > 0), and
 * such a plan needs --stream; the tokenizer (NULL = byte) must fit the model (as gen data's would:
 * hyp_data_tok_check_model). Fills *dtok for the checkpoints' tokenizer fields. */
int train_stream_check(const plan_t *p, const char *sources, const char *data, const char *tokenizer,
                       hyp_data_tok *dtok, hyp_err *e);
/* The train loader over the sources (stream.h), rank d->rank of d->world. */
int train_stream_open(const plan_t *p, const dp_t *d, const char *sources, const char *doc_sep,
                      const char *tokenizer, int B, int T, uint64_t seed, hyp_loader **out, hyp_err *e);
/* Collective: every rank's ls->stream into st->stream[rank] (st->n_stream = world). */
int train_stream_save(dp_t *d, const hyp_loader_state *ls, hyp_ckpt_state *st, hyp_err *e);
/* This rank's saved position into ls->stream; HYP_EINPUT when the checkpoint has none (made from
 * shards) or was saved by another number of ranks. */
int train_stream_restore(const dp_t *d, const hyp_ckpt_state *st, hyp_loader_state *ls, hyp_err *e);

#endif
