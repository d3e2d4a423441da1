/* pack.c — document pieces, best-fit-decreasing rows (v2126) and length-bucketed dynamic batches
 * (v2127) for the loader (pack.h). Never: reads tokens, draws random numbers, or drops a token
 * that can be a target (only pieces of one token, which predict nothing, are left out). */
#include "pack.h"

#include <stdlib.h>
#include <string.h>

void hyp_pack_free(hyp_pack *pk) {
    if (!pk) return;
    free(pk->span);
    free(pk->row_off);
    free(pk->bat_off);
    free(pk->bat_T);
    memset(pk, 0, sizeof *pk);
}

static int oom(hyp_err *e, const char *what) {
    return hyp_fail(e, HYP_EFAIL, "packing: out of memory for %s", what);
}

int hyp_pack_pieces(const uint64_t *doc_start, uint64_t n_docs, const uint64_t *shard_start, int n_shards,
                    uint64_t total, int T, hyp_span **out, uint64_t *n_out, hyp_err *e) {
    *out = NULL;
    *n_out = 0;
    if (T < 1) return hyp_fail(e, HYP_EINPUT, "packing: T = %d — need T >= 1", T);
    /* a generous bound: every boundary starts a document, each cut into ceil(len / T) chunks */
    uint64_t cap = n_docs + (uint64_t)n_shards + total / (uint64_t)T + 2;
    hyp_span *p = malloc(sizeof *p * cap);
    if (!p) return oom(e, "the document pieces");
    uint64_t n = 0, i = 0, j = 0, s = 0;
    while (s < total) {
        /* the next boundary after s: the smaller of the next document start and shard start */
        while (i < n_docs && doc_start[i] <= s) i++;
        while (j < (uint64_t)n_shards && shard_start[j] <= s) j++;
        uint64_t end = total;
        if (i < n_docs && doc_start[i] < end) end = doc_start[i];
        if (j < (uint64_t)n_shards && shard_start[j] < end) end = shard_start[j];
        for (uint64_t c = s; end - c >= 2; c += (uint64_t)T) { /* chunks [c, c+T] of >= 2 tokens */
            uint64_t len = end - c < (uint64_t)T + 1 ? end - c : (uint64_t)T + 1;
            p[n].start = c;
            p[n].len = (uint32_t)len;
            n++;
            if (c + len >= end) break;
        }
        s = end;
    }
    *out = p;
    *n_out = n;
    return HYP_OK;
}

static int cmp_desc(const void *a, const void *b) {
    const hyp_span *x = a, *y = b;
    if (x->len != y->len) return x->len > y->len ? -1 : 1;
    return x->start < y->start ? -1 : x->start > y->start;
}

int hyp_pack_bfd(hyp_pack *pk, const hyp_span *pieces, uint64_t n, int T, int max_docs, hyp_err *e) {
    memset(pk, 0, sizeof *pk);
    if (max_docs < 1) return hyp_fail(e, HYP_EINPUT, "packing: max_docs_per_seq = %d — need >= 1", max_docs);
    const int C = T + 1;              /* token slots of a row */
    const int NW = (C + 1 + 63) / 64; /* bitmap words over free-slot counts 0..C */
    hyp_span *sorted = malloc(sizeof *sorted * (n ? n : 1));
    uint64_t *row_of = malloc(sizeof *row_of * (n ? n : 1));
    /* open rows kept in one stack per free-slot count: head[f], next[row] */
    int64_t *head = malloc(sizeof *head * (size_t)(C + 1));
    uint64_t *bits = calloc((size_t)NW, sizeof *bits);
    int64_t *next = malloc(sizeof *next * (n ? n : 1));
    int32_t *freec = malloc(sizeof *freec * (n ? n : 1)), *cnt = malloc(sizeof *cnt * (n ? n : 1));
    int rc = HYP_OK;
    if (!sorted || !row_of || !head || !bits || !next || !freec || !cnt) rc = oom(e, "the best-fit packer");
    uint64_t rows = 0;
    if (rc == HYP_OK) {
        memcpy(sorted, pieces, sizeof *sorted * n);
        qsort(sorted, n, sizeof *sorted, cmp_desc);
        for (int f = 0; f <= C; f++) head[f] = -1;
        for (uint64_t k = 0; k < n; k++) {
            int l = (int)sorted[k].len, f = -1;
            /* the smallest free-slot count >= l with an open row */
            for (int w = l / 64; w < NW && f < 0; w++) {
                uint64_t m = bits[w];
                if (w == l / 64) m &= ~0ULL << (l % 64);
                if (m) f = w * 64 + __builtin_ctzll(m);
            }
            int64_t r;
            if (f < 0) {
                r = (int64_t)rows++;
                freec[r] = C;
                cnt[r] = 0;
            } else {
                r = head[f];
                head[f] = next[r];
                if (head[f] < 0) bits[f / 64] &= ~(1ULL << (f % 64));
            }
            row_of[k] = (uint64_t)r;
            freec[r] -= l;
            cnt[r]++;
            if (freec[r] > 0 && cnt[r] < max_docs) {
                int g = freec[r];
                next[r] = head[g];
                head[g] = r;
                bits[g / 64] |= 1ULL << (g % 64);
            }
        }
        pk->span = malloc(sizeof *pk->span * (n ? n : 1));
        pk->row_off = calloc(rows + 1, sizeof *pk->row_off);
        if (!pk->span || !pk->row_off) rc = oom(e, "the packed rows");
    }
    if (rc == HYP_OK) { /* counting sort by row; within a row, placement order */
        for (uint64_t k = 0; k < n; k++) pk->row_off[row_of[k] + 1]++;
        for (uint64_t r = 0; r < rows; r++) pk->row_off[r + 1] += pk->row_off[r];
        uint64_t *fill = next ? (uint64_t *)(void *)next : NULL; /* reuse: rows <= n */
        for (uint64_t r = 0; r < rows; r++) fill[r] = pk->row_off[r];
        for (uint64_t k = 0; k < n; k++) {
            pk->span[fill[row_of[k]]++] = sorted[k];
            pk->tokens += sorted[k].len;
        }
        pk->n_rows = rows;
        pk->slots = rows * (uint64_t)T;
        for (uint64_t r = 0; r < rows; r++) pk->pad += (uint64_t)hyp_pack_row_pad(pk, r, T);
    }
    free(sorted);
    free(row_of);
    free(head);
    free(bits);
    free(next);
    free(freec);
    free(cnt);
    if (rc != HYP_OK) hyp_pack_free(pk);
    return rc;
}

int hyp_pack_buckets(hyp_pack *pk, const hyp_span *pieces, uint64_t n, int T, int B, int64_t budget, int buckets,
                     hyp_err *e) {
    memset(pk, 0, sizeof *pk);
    if (buckets < 1 || buckets > 30 || B < 1 || budget < 1)
        return hyp_fail(e, HYP_EINPUT, "dynamic batching: buckets = %d, batch = %d, token_budget = %lld — need "
                        "1 <= buckets <= 30, batch >= 1, token_budget >= 1", buckets, B, (long long)budget);
    int len[31], nb = 0;
    for (int k = 0; k < buckets; k++) { /* T, T/2, ...: distinct, at least 1 */
        int v = T >> k;
        if (v < 1) break;
        len[nb++] = v;
    }
    uint64_t *count = calloc((size_t)nb, sizeof *count), *at = calloc((size_t)nb, sizeof *at);
    int *bk = malloc(sizeof *bk * (n ? n : 1));
    int rc = HYP_OK;
    if (!count || !at || !bk) rc = oom(e, "the length buckets");
    uint64_t nbat = 0;
    if (rc == HYP_OK) {
        for (uint64_t i = 0; i < n; i++) {
            int k = 0; /* the shortest bucket holding the piece's len-1 inputs */
            while (k + 1 < nb && len[k + 1] >= (int)pieces[i].len - 1) k++;
            bk[i] = k;
            count[k]++;
        }
        for (int k = 0; k < nb; k++) {
            int64_t rows = budget / len[k];
            if (rows < 1) rows = 1;
            if (rows > B) rows = B;
            nbat += (count[k] + (uint64_t)rows - 1) / (uint64_t)rows;
        }
        pk->span = malloc(sizeof *pk->span * (n ? n : 1));
        pk->row_off = malloc(sizeof *pk->row_off * (n + 1));
        pk->bat_off = malloc(sizeof *pk->bat_off * (nbat + 1));
        pk->bat_T = malloc(sizeof *pk->bat_T * (nbat ? nbat : 1));
        if (!pk->span || !pk->row_off || !pk->bat_off || !pk->bat_T) rc = oom(e, "the dynamic batches");
    }
    if (rc == HYP_OK) {
        for (int k = 0, o = 0; k < nb; k++) { /* where each bucket's rows start */
            at[k] = (uint64_t)o;
            o += (int)count[k];
        }
        uint64_t start_k[31];
        for (int k = 0; k < nb; k++) start_k[k] = at[k];
        for (uint64_t i = 0; i < n; i++) pk->span[at[bk[i]]++] = pieces[i];
        for (uint64_t r = 0; r <= n; r++) pk->row_off[r] = r;
        uint64_t b = 0;
        for (int k = 0; k < nb; k++) {
            int64_t rows = budget / len[k];
            if (rows < 1) rows = 1;
            if (rows > B) rows = B;
            for (uint64_t r = start_k[k]; r < start_k[k] + count[k]; r += (uint64_t)rows) {
                pk->bat_off[b] = r;
                pk->bat_T[b] = len[k];
                b++;
            }
        }
        pk->bat_off[nbat] = n;
        pk->n_bat = nbat;
        pk->n_rows = n;
        for (uint64_t bb = 0; bb < nbat; bb++)
            for (uint64_t r = pk->bat_off[bb]; r < pk->bat_off[bb + 1]; r++) {
                pk->tokens += pk->span[r].len;
                pk->slots += (uint64_t)pk->bat_T[bb];
                pk->pad += (uint64_t)hyp_pack_row_pad(pk, r, pk->bat_T[bb]);
            }
    }
    free(count);
    free(at);
    free(bk);
    if (rc != HYP_OK) hyp_pack_free(pk);
    return rc;
}
