/* grad_compress.c — v2172 top-k / random-k gradient compression with error feedback
 * (grad_compress.h). Never: the optimizer, clipping, the ZeRO reduce-scatter paths
 * (backend_cpu.c), printing. */
#include "grad_compress.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct train_grad_compress {
    int randk;        /* 0 topk, 1 randk */
    int ef;           /* error feedback */
    double ratio;
    int64_t n, k;     /* floats of the gradient arena (shard x world), entries sent per rank */
    float *resid;     /* [n] what was not sent yet (NULL without error feedback) */
    float *mag;       /* [n] topk: scratch magnitudes for the selection */
    int32_t *idx;     /* topk: [k] this rank's indices; randk: [n] the shared permutation */
    float *send;      /* topk: [2k] (index bits, value) pairs; randk: [k] values */
    float *recv;      /* topk: [world x 2k] every rank's pairs */
    uint64_t rng;     /* randk: the generator every rank advances alike */
};

static float magnitude(float v) { return isnan(v) ? INFINITY : fabsf(v); }

/* The value at position r of a[0..n) in descending order (Hoare quickselect; a is permuted). */
static float kth_largest(float *a, int64_t n, int64_t r) {
    int64_t lo = 0, hi = n - 1;
    while (lo < hi) {
        float x = a[lo], y = a[lo + (hi - lo) / 2], z = a[hi], piv; /* median of three */
        if (x < y) piv = y < z ? y : (x < z ? z : x);
        else piv = x < z ? x : (y < z ? z : y);
        int64_t i = lo, j = hi;
        while (i <= j) {
            while (a[i] > piv) i++;
            while (a[j] < piv) j--;
            if (i <= j) {
                float t = a[i];
                a[i++] = a[j], a[j--] = t;
            }
        }
        if (r <= j) hi = j;       /* a[lo..j] >= piv */
        else if (r >= i) lo = i;  /* a[i..hi] <= piv */
        else return a[r];         /* a[j+1..i-1] == piv */
    }
    return a[r];
}

void train_topk_select(const float *v, int64_t n, int64_t k, float *scratch, int32_t *idx) {
    if (k >= n) {
        for (int64_t i = 0; i < n; i++) idx[i] = (int32_t)i;
        return;
    }
    if (k <= 0) return;
    for (int64_t i = 0; i < n; i++) scratch[i] = magnitude(v[i]);
    const float t = kth_largest(scratch, n, k - 1);
    int64_t above = 0;
    for (int64_t i = 0; i < n; i++) above += magnitude(v[i]) > t;
    int64_t ties = k - above, j = 0; /* entries equal to t taken from the lowest index up */
    for (int64_t i = 0; i < n && j < k; i++) {
        float m = magnitude(v[i]);
        if (m > t || (m == t && ties-- > 0)) idx[j++] = (int32_t)i;
    }
}

static uint64_t splitmix64(uint64_t *s) {
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

int train_grad_compress_open(train_grad_compress **out, const plan_t *p, const exec_t *x, const dp_t *d, hyp_err *e) {
    *out = NULL;
    if (d->stage >= 2)
        return hyp_fail(e, HYP_EINPUT, "plan: gradient compression (v2172) replaces the all-reduce of stages 0-1, and ZeRO stage %d reduce-scatters the gradients — regenerate without zero2/zero3/fsdp, or without v2172",
                        d->stage);
    const int64_t n = x->shard * d->world;
    if (n > INT32_MAX)
        return hyp_fail(e, HYP_EINPUT, "plan: gradient compression (v2172) sends 32-bit indices, and the gradient arena has %lld floats — use more data-parallel ranks with ZeRO off, or drop v2172",
                        (long long)n);
    train_grad_compress *gc = calloc(1, sizeof *gc);
    if (!gc) return hyp_fail(e, HYP_EFAIL, "out of memory");
    gc->randk = p->gc_randk, gc->ef = p->gc_error_feedback, gc->ratio = p->gc_ratio, gc->n = n;
    gc->k = (int64_t)llround(p->gc_ratio * (double)n);
    if (gc->k < 1) gc->k = 1;
    if (gc->k > n) gc->k = n;
    gc->rng = 0x5EED0000ull + (uint64_t)n; /* the same on every rank: they share n */
    const size_t N = (size_t)n, K = (size_t)gc->k, W = (size_t)d->world;
    int ok = 1;
    if (gc->ef) ok &= !!(gc->resid = calloc(N, sizeof(float)));
    if (gc->randk) {
        ok &= !!(gc->idx = malloc(sizeof(int32_t) * N)) && !!(gc->send = malloc(sizeof(float) * K));
        if (ok)
            for (int64_t i = 0; i < n; i++) gc->idx[i] = (int32_t)i;
    } else {
        ok &= !!(gc->mag = malloc(sizeof(float) * N)) && !!(gc->idx = malloc(sizeof(int32_t) * K)) &&
              !!(gc->send = malloc(sizeof(float) * 2 * K)) && !!(gc->recv = malloc(sizeof(float) * 2 * K * W));
    }
    if (!ok) {
        train_grad_compress_close(gc);
        return hyp_fail(e, HYP_EFAIL, "out of memory for gradient compression (%lld floats)", (long long)n);
    }
    *out = gc;
    return HYP_OK;
}

void train_grad_compress_close(train_grad_compress *gc) {
    if (!gc) return;
    free(gc->resid);
    free(gc->mag);
    free(gc->idx);
    free(gc->send);
    free(gc->recv);
    free(gc);
}

int64_t train_grad_compress_k(const train_grad_compress *gc) { return gc->k; }
const float *train_grad_compress_residual(const train_grad_compress *gc) { return gc->resid; }

int train_grad_compress_reduce(train_grad_compress *gc, exec_t *x, const dp_t *d, hyp_err *e) {
    float *g = x->grads, *r = gc->resid;
    const int64_t n = gc->n, k = gc->k;
    const int W = d->world;
    int rc = HYP_OK;
    if (r) /* g becomes what this rank owes: its gradient plus what it has not sent yet */
        for (int64_t i = 0; i < n; i++) g[i] += r[i];
    if (!gc->randk) {
        int32_t *idx = gc->idx;
        train_topk_select(g, n, k, gc->mag, idx);
        for (int64_t j = 0; j < k; j++) {
            memcpy(&gc->send[2 * j], &idx[j], sizeof(float)); /* the index's bits travel as a float */
            gc->send[2 * j + 1] = g[idx[j]];
        }
        if (r) { /* residual = owed - sent: the unsent entries whole, the sent ones 0 */
            memcpy(r, g, sizeof(float) * (size_t)n);
            for (int64_t j = 0; j < k; j++) r[idx[j]] = 0.0f;
        }
        if (W > 1) rc = hyp_coll_allgather_f32(d->coll, gc->send, gc->recv, (size_t)(2 * k), e);
        else memcpy(gc->recv, gc->send, sizeof(float) * 2 * (size_t)k);
        if (rc) return rc;
        memset(g, 0, sizeof(float) * (size_t)n);
        for (int q = 0; q < W; q++) { /* rank order: the same sum on every rank */
            const float *pr = gc->recv + (size_t)q * 2 * (size_t)k;
            for (int64_t j = 0; j < k; j++) {
                int32_t i;
                memcpy(&i, &pr[2 * j], sizeof i);
                if (i < 0 || i >= n) return hyp_fail(e, HYP_EFAIL, "gradient compression: rank %d sent index %d outside the %lld-float arena", q, (int)i, (long long)n);
                g[i] += pr[2 * j + 1];
            }
        }
    } else {
        int32_t *perm = gc->idx;
        for (int64_t j = 0; j < k; j++) { /* partial Fisher-Yates: perm[0..k) a uniform k-subset */
            int64_t s = j + (int64_t)(splitmix64(&gc->rng) % (uint64_t)(n - j));
            int32_t t = perm[j];
            perm[j] = perm[s], perm[s] = t;
        }
        const float scale = gc->ef ? 1.0f : (float)((double)n / (double)k);
        for (int64_t j = 0; j < k; j++) gc->send[j] = g[perm[j]] * scale;
        if (r) {
            memcpy(r, g, sizeof(float) * (size_t)n);
            for (int64_t j = 0; j < k; j++) r[perm[j]] = 0.0f;
        }
        if (W > 1 && (rc = hyp_coll_allreduce_f32(d->coll, gc->send, (size_t)k, e))) return rc;
        memset(g, 0, sizeof(float) * (size_t)n);
        for (int64_t j = 0; j < k; j++) g[perm[j]] = gc->send[j];
    }
    return HYP_OK;
}

const char *train_grad_compress_describe(const train_grad_compress *gc, char *buf, size_t n) {
    if (!gc->randk)
        snprintf(buf, n, "gradient compression (v2172): top-k, %lld of %lld gradient entries (ratio %g) per rank and step as (index, value) pairs in one all-gather, %s",
                 (long long)gc->k, (long long)gc->n, gc->ratio, gc->ef ? "error feedback" : "no error feedback (the unsent part is dropped)");
    else
        snprintf(buf, n, "gradient compression (v2172): random-k, %lld of %lld gradient entries (ratio %g, the same indices on every rank) all-reduced per step, %s",
                 (long long)gc->k, (long long)gc->n, gc->ratio, gc->ef ? "error feedback, unscaled" : "scaled by n/k, no error feedback");
    return buf;
}
