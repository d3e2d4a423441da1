/* fuzz_docs.c — libFuzzer target for the readers of raw text inputs: `gen data`'s (runtime/data/
 * docs.c) and the trainer's --stream (runtime/data/stream.c, v2129). Any bytes as a .jsonl file,
 * as plain text split at a separator line, and gzip-compressed .jsonl.gz (the input's first byte
 * picks: bits 0-1: 0 jsonl, 1 text with "%" separators, 2 one text document, 3 .gz; bit 2: read
 * as a stream of rows instead) read into documents / rows, or refused with "file: what — how to
 * fix". Every document must lie inside the text buffer and hold no NUL; every row token is a byte.
 * Seeds: JSONL and text corpora of the tests. */
#include "fuzz_util.h"

#include "data.h"
#include "docs.h"
#include "stream.h"

/* Rows of the byte tokenizer from the file: 3 batches of 2 rows of 8 tokens, blocks of 2 rows. */
static void stream_rows(const char *path, int sep) {
    enum { B = 2, T = 8 };
    hyp_stream *s = NULL;
    hyp_err e = {{0}};
    int rc = hyp_stream_open(path, sep ? "%" : NULL, NULL, 2, T, 7, 0, 1, &s, &e);
    fz_check(rc, &e, 0);
    if (rc) return;
    hyp_loader_state st;
    memset(&st, 0, sizeof st);
    int32_t in[B * T], tg[B * T], pos[B * T];
    for (int b = 0; !rc && b < 3; b++) {
        e.msg[0] = 0;
        rc = hyp_stream_produce(s, &st, B, in, tg, pos, &e);
        fz_check(rc, &e, 0);
        for (int i = 0; !rc && i < B * T; i++)
            if (in[i] < 0 || in[i] > 255 || tg[i] < -1 || tg[i] > 255 || pos[i] < 0 || pos[i] >= T) {
                fprintf(stderr, "fuzz: stream row slot %d: input %d target %d position %d\n", i, in[i], tg[i], pos[i]);
                abort();
            }
    }
    hyp_stream_close(s);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    int mode = data[0] & 3, stream = data[0] & 4;
    static const char *const name[] = {"in.jsonl", "in.txt", "in.txt", "in.jsonl.gz"};
    fz_clean();
    fz_write(name[mode], data + 1, size - 1);
    char path[600];
    fz_path(path, sizeof path, name[mode]);
    if (stream) {
        stream_rows(path, mode == 1);
        return 0;
    }
    hyp_docs d;
    memset(&d, 0, sizeof d);
    hyp_err e = {{0}};
    size_t n = 0;
    uint64_t bytes = 0;
    int rc = hyp_docs_read(&d, path, name[mode], 0, mode == 1 ? "%" : NULL, &n, &bytes, &e);
    fz_check(rc, &e, 0);
    for (size_t i = 0; !rc && i < d.n; i++)
        if (d.off[i] > d.text_len || d.len[i] > d.text_len - d.off[i] || !d.len[i] || memchr(d.text + d.off[i], 0, d.len[i])) {
            fprintf(stderr, "fuzz: document %zu [%llu, +%llu) of %zu bytes\n", i, (unsigned long long)d.off[i],
                    (unsigned long long)d.len[i], d.text_len);
            abort();
        }
    hyp_docs_free(&d);
    return 0;
}
