/* grad_compress.c — v2172 top-k / random-k gradient compression with error feedback
 * (grad_compress.h). Never: the optimizer, clipping, the ZeRO reduce-scatter paths
 * (backend_cpu.c), printing. */
#include "grad_compress.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    int64_t off, rows, cols; /* a matrix of the arena: rows x cols floats at off (row-major) */
    int64_t p_off, q_off;    /* its P [rows x r] and Q [cols x r] in pbuf / qbuf */
} gc_matrix;

struct train_grad_compress {
    int randk;        /* 0 topk, 1 randk */
    int power, rank;  /* PowerSGD (method powersgd), its rank r */
    int ef;           /* error feedback */
    double ratio;
    int64_t n, k;     /* floats of the gradient arena (shard x world), entries sent per rank */
    float *resid;     /* [n] what was not sent yet (NULL without error feedback) */
    float *mag;       /* [n] topk: scratch magnitudes for the selection */
    int32_t *idx;     /* topk: [k] this rank's indices; randk: [n] the shared permutation */
    float *send;      /* topk: [2k] (index bits, value) pairs; randk: [k] values */
    float *recv;      /* topk: [world x 2k] every rank's pairs */
    uint64_t rng;     /* randk: the generator every rank advances alike */
    /* PowerSGD: the 2-D parameters' matrices, the 1-D rest sent whole behind the P factors */
    gc_matrix *mat;
    int n_mat;
    int64_t *vec_off, *vec_len; /* the uncompressed spans (1-D parameters) */
    int n_vec;
    int64_t p_len, q_len, v_len; /* floats of all P factors, all Q factors, all 1-D spans */
    float *pbuf;      /* [p_len + v_len] P factors, then the 1-D gradients: one all-reduce */
    float *qbuf;      /* [q_len] Q factors (kept between steps: the warm start) */
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

void train_orthogonalize(float *a, int64_t rows, int r) {
    for (int j = 0; j < r; j++) { /* modified Gram-Schmidt over the columns, sums in double */
        for (int i = 0; i < j; i++) {
            double dot = 0;
            for (int64_t k = 0; k < rows; k++) dot += (double)a[k * r + i] * a[k * r + j];
            for (int64_t k = 0; k < rows; k++) a[k * r + j] -= (float)dot * a[k * r + i];
        }
        double ss = 0;
        for (int64_t k = 0; k < rows; k++) ss += (double)a[k * r + j] * a[k * r + j];
        const float inv = (float)(1.0 / (sqrt(ss) + 1e-8)); /* torch's powerSGD_hook epsilon: a zero column stays 0 */
        for (int64_t k = 0; k < rows; k++) a[k * r + j] *= inv;
    }
}

static uint64_t splitmix64(uint64_t *s);
static float gaussian(uint64_t *s) { /* Box-Muller from two 53-bit uniforms in (0, 1] */
    double u = ((double)(splitmix64(s) >> 11) + 1.0) / 9007199254740992.0;
    double v = (double)(splitmix64(s) >> 11) / 9007199254740992.0;
    return (float)(sqrt(-2.0 * log(u)) * cos(6.283185307179586 * v));
}

/* The plan's parameters as PowerSGD sees them: ndim >= 2 a rows x (numel / rows) matrix
 * compressed at rank min(r, rows, cols), the rest sent whole; Q drawn N(0, 1) from a seed every
 * rank shares. */
static int power_open(train_grad_compress *gc, const plan_t *p) {
    gc->mat = calloc((size_t)p->n_params_t + 1, sizeof(gc_matrix));
    gc->vec_off = calloc((size_t)p->n_params_t + 1, sizeof(int64_t));
    gc->vec_len = calloc((size_t)p->n_params_t + 1, sizeof(int64_t));
    if (!gc->mat || !gc->vec_off || !gc->vec_len) return 0;
    const int r = gc->rank;
    for (int i = 0; i < p->n_params_t; i++) {
        const plan_param *pp = &p->params[i];
        int64_t rows = pp->ndim >= 2 ? pp->shape[0] : 0, cols = rows ? pp->numel / rows : 0;
        if (rows >= r && cols >= r && rows * cols == pp->numel) { /* worth compressing: r(rows + cols) < rows x cols mostly */
            gc_matrix *m = &gc->mat[gc->n_mat++];
            m->off = pp->offset, m->rows = rows, m->cols = cols, m->p_off = gc->p_len, m->q_off = gc->q_len;
            gc->p_len += rows * r, gc->q_len += cols * r;
        } else {
            gc->vec_off[gc->n_vec] = pp->offset, gc->vec_len[gc->n_vec++] = pp->numel;
            gc->v_len += pp->numel;
        }
    }
    gc->pbuf = malloc(sizeof(float) * (size_t)(gc->p_len + gc->v_len + 1));
    gc->qbuf = malloc(sizeof(float) * (size_t)(gc->q_len + 1));
    if (!gc->pbuf || !gc->qbuf) return 0;
    uint64_t s = 0x9E3779B97F4A7C15ull; /* the same Q on every rank */
    for (int64_t i = 0; i < gc->q_len; i++) gc->qbuf[i] = gaussian(&s);
    gc->k = gc->p_len + gc->q_len + gc->v_len;
    return 1;
}

/* PowerSGD (Vogels et al. 2019, torch's powerSGD_hook): per matrix M = g + e (rows x cols),
 * P = M Q; all-reduce P (with the 1-D gradients); orthogonalize P; Q = M^T P; all-reduce Q; the
 * gradient becomes P Q^T (the sum over ranks projected on P's columns); e = M - P Q^T / W (the
 * rank's share of the mean approximation, as the hook keeps input - mean approximation). */
static int power_reduce(train_grad_compress *gc, exec_t *x, const dp_t *d, hyp_err *e) {
    float *g = x->grads, *res = gc->resid, *P = gc->pbuf, *Q = gc->qbuf;
    const int r = gc->rank, W = d->world;
    int rc = HYP_OK;
    for (int i = 0; i < gc->n_mat; i++) {
        const gc_matrix *m = &gc->mat[i];
        float *M = g + m->off, *Pm = P + m->p_off;
        const float *Qm = Q + m->q_off;
        if (res)
            for (int64_t k = 0; k < m->rows * m->cols; k++) M[k] += res[m->off + k];
        for (int64_t a = 0; a < m->rows; a++)
            for (int j = 0; j < r; j++) {
                float s = 0;
                for (int64_t b = 0; b < m->cols; b++) s = fmaf(M[a * m->cols + b], Qm[b * r + j], s);
                Pm[a * r + j] = s;
            }
    }
    float *V = P + gc->p_len;
    for (int64_t i = 0, o = 0; i < gc->n_vec; o += gc->vec_len[i], i++) memcpy(V + o, g + gc->vec_off[i], sizeof(float) * (size_t)gc->vec_len[i]);
    if (W > 1 && (rc = hyp_coll_allreduce_f32(d->coll, P, (size_t)(gc->p_len + gc->v_len), e))) return rc;
    for (int64_t i = 0, o = 0; i < gc->n_vec; o += gc->vec_len[i], i++) {
        memcpy(g + gc->vec_off[i], V + o, sizeof(float) * (size_t)gc->vec_len[i]);
        if (res) memset(res + gc->vec_off[i], 0, sizeof(float) * (size_t)gc->vec_len[i]); /* sent whole */
    }
    for (int i = 0; i < gc->n_mat; i++) {
        const gc_matrix *m = &gc->mat[i];
        float *Pm = P + m->p_off, *Qm = Q + m->q_off;
        const float *M = g + m->off;
        train_orthogonalize(Pm, m->rows, r);
        for (int64_t b = 0; b < m->cols; b++)
            for (int j = 0; j < r; j++) Qm[b * r + j] = 0;
        for (int64_t a = 0; a < m->rows; a++)
            for (int64_t b = 0; b < m->cols; b++) {
                const float v = M[a * m->cols + b];
                for (int j = 0; j < r; j++) Qm[b * r + j] = fmaf(v, Pm[a * r + j], Qm[b * r + j]);
            }
    }
    if (W > 1 && (rc = hyp_coll_allreduce_f32(d->coll, Q, (size_t)gc->q_len, e))) return rc;
    const float invW = 1.0f / (float)W;
    for (int i = 0; i < gc->n_mat; i++) {
        const gc_matrix *m = &gc->mat[i];
        const float *Pm = P + m->p_off, *Qm = Q + m->q_off;
        float *M = g + m->off;
        for (int64_t a = 0; a < m->rows; a++)
            for (int64_t b = 0; b < m->cols; b++) {
                float s = 0;
                for (int j = 0; j < r; j++) s = fmaf(Pm[a * r + j], Qm[b * r + j], s);
                if (res) res[m->off + a * m->cols + b] = M[a * m->cols + b] - s * invW;
                M[a * m->cols + b] = s;
            }
    }
    return HYP_OK;
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
    gc->power = p->gc_power, gc->rank = p->gc_rank;
    gc->k = (int64_t)llround(p->gc_ratio * (double)n);
    if (gc->k < 1) gc->k = 1;
    if (gc->k > n) gc->k = n;
    gc->rng = 0x5EED0000ull + (uint64_t)n; /* the same on every rank: they share n */
    const size_t N = (size_t)n, K = (size_t)gc->k, W = (size_t)d->world;
    int ok = 1;
    if (gc->ef) ok &= !!(gc->resid = calloc(N, sizeof(float)));
    if (gc->power) {
        ok &= power_open(gc, p);
    } else if (gc->randk) {
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
    free(gc->mat);
    free(gc->vec_off);
    free(gc->vec_len);
    free(gc->pbuf);
    free(gc->qbuf);
    free(gc);
}

int64_t train_grad_compress_k(const train_grad_compress *gc) { return gc->k; }
const float *train_grad_compress_residual(const train_grad_compress *gc) { return gc->resid; }

int train_grad_compress_reduce(train_grad_compress *gc, exec_t *x, const dp_t *d, hyp_err *e) {
    float *g = x->grads, *r = gc->resid;
    const int64_t n = gc->n, k = gc->k;
    const int W = d->world;
    int rc = HYP_OK;
    if (gc->power) return power_reduce(gc, x, d, e);
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
    if (gc->power)
        snprintf(buf, n, "gradient compression (v2172): PowerSGD rank %d, %d matrices as P and Q factors (%lld + %lld floats) and %lld floats of 1-D parameters whole, of %lld, in two all-reduces per step, %s",
                 gc->rank, gc->n_mat, (long long)gc->p_len, (long long)gc->q_len, (long long)gc->v_len, (long long)gc->n,
                 gc->ef ? "error feedback" : "no error feedback");
    else if (!gc->randk)
        snprintf(buf, n, "gradient compression (v2172): top-k, %lld of %lld gradient entries (ratio %g) per rank and step as (index, value) pairs in one all-gather, %s",
                 (long long)gc->k, (long long)gc->n, gc->ratio, gc->ef ? "error feedback" : "no error feedback (the unsent part is dropped)");
    else
        snprintf(buf, n, "gradient compression (v2172): random-k, %lld of %lld gradient entries (ratio %g, the same indices on every rank) all-reduced per step, %s",
                 (long long)gc->k, (long long)gc->n, gc->ratio, gc->ef ? "error feedback, unscaled" : "scaled by n/k, no error feedback");
    return buf;
}
