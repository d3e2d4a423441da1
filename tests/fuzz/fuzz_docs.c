/* fuzz_docs.c — libFuzzer target for `gen data`'s input reader (runtime/data/docs.c): any bytes
 * as a .jsonl file, as plain text split at a separator line, and gzip-compressed .jsonl.gz
 * (the input's first byte picks: 0 jsonl, 1 text with "%" separators, 2 one text document,
 * 3 .gz) read into documents, or refused with "file: what — how to fix". Every document must lie
 * inside the text buffer and hold no NUL. Seeds: JSONL and text corpora of the tests. */
#include "fuzz_util.h"

#include "docs.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    int mode = data[0] & 3;
    static const char *const name[] = {"in.jsonl", "in.txt", "in.txt", "in.jsonl.gz"};
    fz_clean();
    fz_write(name[mode], data + 1, size - 1);
    char path[600];
    fz_path(path, sizeof path, name[mode]);
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
