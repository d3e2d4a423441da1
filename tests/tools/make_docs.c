/* make_docs.c — writes the .docs sidecar (docs_contract: document starts of a token shard) for an
 * existing shard, for tests and benchmarks until `gen data` writes them itself. Documents are
 * found in the tokens: with --eot N a document starts at every token N (the offset points at the
 * EOT, llm.c's fineweb convention); with --sep STR (byte-tokenized data) a document starts right
 * after every occurrence of the bytes STR (e.g. "\n%\n" between fortunes; C escapes \n \t \\).
 * Offset 0 always starts a document. Never: changes the shard or meta.json.
 * Usage: make_docs SHARD.bin (--eot N | --sep STR)   → writes SHARD.docs, prints the count. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data.h"

static uint32_t rd32(const unsigned char *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static void wr32(unsigned char *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (unsigned char)(v >> (8 * i));
}

static size_t unescape(char *s) {
    size_t o = 0;
    for (size_t i = 0; s[i]; i++) {
        if (s[i] == '\\' && s[i + 1]) {
            i++;
            s[o++] = s[i] == 'n' ? '\n' : s[i] == 't' ? '\t' : s[i];
        } else {
            s[o++] = s[i];
        }
    }
    s[o] = 0;
    return o;
}

int main(int argc, char **argv) {
    if (argc != 4 || (strcmp(argv[2], "--eot") && strcmp(argv[2], "--sep"))) {
        fprintf(stderr, "make_docs: usage: make_docs SHARD.bin (--eot N | --sep STR) — see the file header\n");
        return 2;
    }
    const char *path = argv[1];
    size_t plen = strlen(path);
    if (plen < 5 || strcmp(path + plen - 4, ".bin")) {
        fprintf(stderr, "%s: not a .bin shard — pass a token shard written by gen data\n", path);
        return 2;
    }
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "%s: cannot open — check the path\n", path);
        return 2;
    }
    unsigned char hdr[HYP_SHARD_HEADER_INTS * 4];
    if (fread(hdr, 1, sizeof hdr, f) != sizeof hdr || rd32(hdr) != HYP_SHARD_MAGIC ||
        (rd32(hdr + 4) != 1 && rd32(hdr + 4) != 2)) {
        fclose(f);
        fprintf(stderr, "%s: not a token shard (bad header) — pass a shard written by gen data\n", path);
        return 2;
    }
    int tb = rd32(hdr + 4) == 1 ? 2 : 4;
    uint64_t n = rd32(hdr + 8);
    unsigned char *raw = malloc(n * (uint64_t)tb + 1);
    uint32_t *tok = malloc(sizeof *tok * (n + 1));
    uint64_t *off = malloc(sizeof *off * (n + 1));
    if (!raw || !tok || !off || fread(raw, (size_t)tb, n, f) != n) {
        fclose(f);
        fprintf(stderr, "%s: truncated shard or out of memory — re-run gen data\n", path);
        return 2;
    }
    fclose(f);
    for (uint64_t i = 0; i < n; i++) tok[i] = tb == 2 ? (uint32_t)(raw[2 * i] | raw[2 * i + 1] << 8) : rd32(raw + 4 * i);
    uint64_t nd = 0;
    if (n > 0) off[nd++] = 0;
    if (!strcmp(argv[2], "--eot")) {
        uint32_t eot = (uint32_t)strtoul(argv[3], NULL, 10);
        for (uint64_t i = 1; i < n; i++)
            if (tok[i] == eot) off[nd++] = i;
    } else {
        char *sep = strdup(argv[3]);
        size_t m = unescape(sep);
        for (uint64_t i = 0; m > 0 && i + m <= n; i++) {
            size_t k = 0;
            while (k < m && tok[i + k] == (unsigned char)sep[k]) k++;
            if (k == m && i + m < n && i + m > off[nd - 1]) off[nd++] = i + m;
        }
        free(sep);
    }
    char out[4096];
    snprintf(out, sizeof out, "%.*s.docs", (int)(plen - 4), path);
    FILE *o = fopen(out, "wb");
    unsigned char h[HYP_SHARD_HEADER_INTS * 4] = {0};
    wr32(h, HYP_DOCS_MAGIC);
    wr32(h + 4, 1);
    wr32(h + 8, (uint32_t)nd);
    int ok = o && fwrite(h, 1, sizeof h, o) == sizeof h;
    for (uint64_t i = 0; ok && i < nd; i++) {
        unsigned char b[8];
        wr32(b, (uint32_t)off[i]);
        wr32(b + 4, (uint32_t)(off[i] >> 32));
        ok = fwrite(b, 1, 8, o) == 8;
    }
    if (o && fclose(o) != 0) ok = 0;
    if (!ok) {
        fprintf(stderr, "%s: cannot write — check the directory's permissions\n", out);
        return 1;
    }
    printf("%s: %llu documents\n", out, (unsigned long long)nd);
    free(raw), free(tok), free(off);
    return 0;
}
