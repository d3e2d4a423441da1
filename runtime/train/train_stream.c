/* train_stream.c — the trainer's glue for v2129 streaming (train_stream.h). Never: reads data
 * itself (stream.c does), or lets a stream position move to another rank. */
#include "train_stream.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coll.h"
#include "stream.h"

int train_stream_check(const plan_t *p, const char *sources, const char *data, const char *tokenizer,
                       hyp_data_tok *dtok, hyp_err *e) {
    if (sources && data)
        return hyp_fail(e, HYP_EINPUT, "--stream and --data both given — train from raw files (--stream) or from gen data shards (--data), not both");
    if (sources && p->stream_buffer <= 0)
        return hyp_fail(e, HYP_EINPUT, "--stream: this trainer was generated without streaming — regenerate with --enable streaming (v2129), or prepare shards with gen data and pass --data");
    if (!sources && p->stream_buffer > 0)
        return hyp_fail(e, HYP_EINPUT, "--data: this trainer was generated for streaming (v2129) — give --stream FILES (text, .jsonl, .gz; globs allowed), or regenerate without streaming");
    if (!sources && tokenizer)
        return hyp_fail(e, HYP_EINPUT, "--tokenizer is for --stream — shards carry their tokenizer (gen data --tokenizer)");
    if (!sources) return HYP_OK;
    hyp_tok *tok = hyp_tok_open(tokenizer ? tokenizer : "byte", e);
    if (!tok) return HYP_EINPUT;
    memset(dtok, 0, sizeof *dtok);
    snprintf(dtok->kind, sizeof dtok->kind, "%s", hyp_tok_kind(tok));
    snprintf(dtok->hash, sizeof dtok->hash, "%s", hyp_tok_hash(tok));
    dtok->vocab = hyp_tok_vocab_size(tok), dtok->eot = hyp_tok_eot(tok);
    hyp_tok_free(tok);
    if (tokenizer) {
        const char *base = strrchr(tokenizer, '/');
        snprintf(dtok->source, sizeof dtok->source, "%s", base ? base + 1 : tokenizer);
        if (!realpath(tokenizer, dtok->file)) snprintf(dtok->file, sizeof dtok->file, "%s", tokenizer);
    }
    char where[320];
    snprintf(where, sizeof where, "--stream (tokenizer %.256s)", tokenizer ? dtok->source : "byte");
    int rc = hyp_data_tok_check_model(where, dtok, p->tokenizer, p->V, e);
    if (!rc && dtok->vocab > p->V)
        rc = hyp_fail(e, HYP_EINPUT, "%s: vocabulary %d but the model's vocab_size is %d — give the model's tokenizer (--tokenizer), or generate with --set v2125.data=TOKENIZER",
                      where, dtok->vocab, p->V);
    return rc;
}

int train_stream_open(const plan_t *p, const dp_t *d, const char *sources, const char *doc_sep,
                      const char *tokenizer, int B, int T, uint64_t seed, hyp_loader **out, hyp_err *e) {
    hyp_stream *s;
    int rc = hyp_stream_open(sources, doc_sep, tokenizer, p->stream_buffer, T, seed, d->rank, d->world, &s, e);
    if (rc) return rc;
    return hyp_loader_open_stream(s, B, T, out, e);
}

int train_stream_save(dp_t *d, const hyp_loader_state *ls, hyp_ckpt_state *st, hyp_err *e) {
    if (d->world > HYP_CKPT_STREAM_RANKS)
        return hyp_fail(e, HYP_EINPUT, "--stream: %d ranks, a checkpoint holds the stream positions of at most %d", d->world, HYP_CKPT_STREAM_RANKS);
    _Static_assert(HYP_CKPT_STREAM_FIELDS == HYP_LOADER_STREAM_N, "stream position sizes differ");
    int rc = HYP_OK;
    if (d->world == 1) memcpy(st->stream[0], ls->stream, sizeof st->stream[0]);
    else rc = hyp_coll_allgather_bytes(d->coll, ls->stream, st->stream, sizeof st->stream[0], e);
    if (!rc) st->n_stream = d->world;
    return rc;
}

int train_stream_restore(const dp_t *d, const hyp_ckpt_state *st, hyp_loader_state *ls, hyp_err *e) {
    if (st->n_stream == 0)
        return hyp_fail(e, HYP_EINPUT, "%s: holds no stream position (saved by a run on --data shards) — resume with --data, or start a new --ckpt-dir", st->path);
    if (st->n_stream != d->world)
        return hyp_fail(e, HYP_EINPUT, "%s: the stream positions of %d rank%s, resumed on %d — a stream deals documents by rank: resume on %d rank%s",
                        st->path, st->n_stream, st->n_stream == 1 ? "" : "s", d->world, st->n_stream, st->n_stream == 1 ? "" : "s");
    memcpy(ls->stream, st->stream[d->rank], sizeof ls->stream);
    return HYP_OK;
}
