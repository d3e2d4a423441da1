/* coll_algo.c — the all-reduce algorithms of v2171 (ring, binomial tree, recursive
 * halving-doubling, hierarchical) on MPI point-to-point, for the cpu and sim targets; coll.c calls
 * them on a communicator given an algorithm (hyp_coll_set_allreduce), MPI_Allreduce otherwise.
 *
 * Each one sums in a fixed order (written at each function), the same on every run for a given
 * world size and buffer length, and ends with every rank holding a bit-identical copy of every
 * element (an element's sum is formed on one rank and copied to the others), so data-parallel
 * replicas stay identical. Every rank counts what it sent and the rounds it took (coll_tally);
 * the tests hold those to the algorithms' formulas.
 *
 * Blocks: a buffer of n floats cut into m blocks is cut at lo(b) = floor(b*n/m), so block sizes
 * differ by at most one and, when m divides n, are n/m each.
 *
 * Never: MPI collectives (the point of the file is to do their work by point-to-point), a sum
 * whose order depends on message arrival (every receive names its source), exit on an error. */
#include "coll_algo.h"

#include <stdlib.h>
#include <string.h>

#include "coll.h"

#ifdef HYP_HAVE_MPI

#define TAG 0x2171
#define CHUNK ((size_t)1 << 28) /* MPI counts are int: larger messages go in chunks */

/* The members of a group of ranks of comm: member j is rank base + j*stride (j < m). */
typedef struct {
    MPI_Comm comm;
    int base, stride, m, i; /* i: this rank's member index */
    coll_tally *t;
    hyp_err *e;
} grp;

static int member(const grp *g, int j) { return g->base + j * g->stride; }

static size_t block_lo(size_t n, int m, int b) { return (size_t)((uint64_t)n * (uint64_t)b / (uint64_t)m); }

static int p2p_fail(const grp *g, const char *what, int rc) {
    char s[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(rc, s, &len);
    return hyp_fail(g->e, HYP_EFAIL, "MPI %s (v2171 all-reduce) failed: %s — check the mpirun launch and the network", what, s);
}

/* One round: send ns floats to member `to` and/or receive nr floats from member `from` (-1: none),
 * in chunks of CHUNK floats taken in lockstep (both sides cut the same lengths). */
static int xfer(const grp *g, const float *send, size_t ns, int to, float *recv, size_t nr, int from) {
    int dst = to >= 0 ? member(g, to) : MPI_PROC_NULL, src = from >= 0 ? member(g, from) : MPI_PROC_NULL;
    size_t top = ns > nr ? ns : nr, off = 0;
    do {
        int sc = off < ns ? (int)(ns - off < CHUNK ? ns - off : CHUNK) : 0;
        int rcnt = off < nr ? (int)(nr - off < CHUNK ? nr - off : CHUNK) : 0;
        int rc = MPI_Sendrecv(send ? send + (off < ns ? off : 0) : NULL, to >= 0 ? sc : 0, MPI_FLOAT, dst, TAG,
                              recv ? recv + (off < nr ? off : 0) : NULL, from >= 0 ? rcnt : 0, MPI_FLOAT, src, TAG,
                              g->comm, MPI_STATUS_IGNORE);
        if (rc != MPI_SUCCESS) return p2p_fail(g, "Sendrecv", rc);
        off += CHUNK;
    } while (off < top);
    if (to >= 0) g->t->bytes += (uint64_t)ns * sizeof(float);
    g->t->steps++;
    return HYP_OK;
}

static void add_into(float *dst, const float *src, size_t n) {
    for (size_t j = 0; j < n; j++) dst[j] += src[j];
}

/* Ring (Patarasuk & Yuan 2009) over the m members: reduce-scatter in m-1 rounds (in round s member
 * i sends block i-s to member i+1 and adds block i-s-1 from member i-1 into its own), after which
 * member i holds block i+1 summed; then an all-gather of m-1 rounds passes the summed blocks on.
 * Each member sends every block but one in each half: with m | n, 2(m-1)/m·n floats, 2(m-1) rounds.
 * Order: block b is summed around the ring from member b: ((x_b + x_b+1) + x_b+2) + ... + x_b-1
 * (indices mod m). */
static int ring(const grp *g, float *buf, size_t n) {
    int m = g->m, i = g->i, right = (i + 1) % m, left = (i + m - 1) % m;
    if (m == 1) return HYP_OK;
    size_t big = n / (size_t)m + 1;
    float *tmp = malloc(big * sizeof *tmp);
    if (!tmp) return hyp_fail(g->e, HYP_EFAIL, "out of memory (ring all-reduce scratch of %zu floats)", big);
    int rc = HYP_OK;
    for (int s = 0; s < m - 1 && !rc; s++) {
        int sb = ((i - s) % m + m) % m, rb = ((i - s - 1) % m + m) % m;
        size_t slo = block_lo(n, m, sb), rlo = block_lo(n, m, rb);
        size_t slen = block_lo(n, m, sb + 1) - slo, rlen = block_lo(n, m, rb + 1) - rlo;
        if (!(rc = xfer(g, buf + slo, slen, right, tmp, rlen, left))) add_into(buf + rlo, tmp, rlen);
    }
    free(tmp);
    for (int s = 0; s < m - 1 && !rc; s++) {
        int sb = ((i + 1 - s) % m + m) % m, rb = ((i - s) % m + m) % m;
        size_t slo = block_lo(n, m, sb), rlo = block_lo(n, m, rb);
        rc = xfer(g, buf + slo, block_lo(n, m, sb + 1) - slo, right, buf + rlo, block_lo(n, m, rb + 1) - rlo, left);
    }
    return rc;
}

/* The binomial tree on the members rooted at member 0: member i's parent is i - lowbit(i), its
 * children i + 2^k for 2^k < lowbit(i) (every 2^k < m for the root) that are < m. */
static int tree_top(const grp *g) {
    if (g->i) return g->i & -g->i;
    int top = 1;
    while (top < g->m) top <<= 1;
    return top;
}

/* Binomial reduce to member 0: each member adds its children's partial sums in increasing 2^k,
 * then sends to its parent. Order: S_i = ((x_i + S_i+1) + S_i+2) + S_i+4 + ... (children
 * ascending). Sends n floats once per non-root member, ceil(log2 m) rounds at the root. */
static int tree_reduce(const grp *g, float *buf, size_t n) {
    int top = tree_top(g), rc = HYP_OK;
    float *tmp = NULL;
    for (int k = 1; k < top && !rc; k <<= 1) {
        if (g->i + k >= g->m) break;
        if (!tmp && !(tmp = malloc((n ? n : 1) * sizeof *tmp)))
            return hyp_fail(g->e, HYP_EFAIL, "out of memory (tree all-reduce scratch of %zu floats)", n);
        if (!(rc = xfer(g, NULL, 0, -1, tmp, n, g->i + k))) add_into(buf, tmp, n);
    }
    free(tmp);
    if (!rc && g->i) rc = xfer(g, buf, n, g->i - (g->i & -g->i), NULL, 0, -1);
    return rc;
}

/* Binomial broadcast from member 0: receive from the parent, send to the children, largest
 * subtree first. */
static int tree_bcast(const grp *g, float *buf, size_t n) {
    int top = tree_top(g), rc = HYP_OK;
    if (g->i) rc = xfer(g, NULL, 0, -1, buf, n, g->i - (g->i & -g->i));
    for (int k = top >> 1; k >= 1 && !rc; k >>= 1)
        if (g->i + k < g->m) rc = xfer(g, buf, n, g->i + k, NULL, 0, -1);
    return rc;
}

/* Recursive halving-doubling (Rabenseifner; Thakur, Rabenseifner & Gropp 2005) on the whole
 * communicator. p' = the largest power of two <= p, r = p - p'. Fold-in: of ranks 0..2r-1, each
 * even rank sends its buffer to the odd rank above it, which adds it (x_2j + x_2j+1) and stands
 * for both; the even one waits. The p' remaining ranks (new rank j) reduce-scatter by recursive
 * halving over the p' blocks — in round k (distance d = p'/2, p'/4, ..., 1) j and j^d exchange
 * the half of their current window the other keeps, and add — then all-gather by recursive
 * doubling (d = 1, 2, ..., p'/2). Fold-out: each odd rank < 2r sends the result to the even rank
 * below. Order: the folded pairs first, then for each element a sum over new ranks that pairs
 * j with j^(p'/2) first and j with j^1 last: for p' = 4, (y0 + y2) + (y1 + y3).
 * Sent with p' | n: 2(p'-1)/p'·n floats and 2·log2 p' rounds on each of the p' ranks, plus n and
 * 2 rounds on an odd rank < 2r; an even rank < 2r sends n in 2 rounds. */
static int halving_doubling(const grp *g, float *buf, size_t n) {
    int p = g->m, rank = g->i, pp = 1;
    while (pp * 2 <= p) pp *= 2;
    int rem = p - pp, nr, rc = HYP_OK;
    if (p == 1) return HYP_OK;
    size_t big = (rank < 2 * rem) ? n : n / 2 + 1;
    float *tmp = malloc((big ? big : 1) * sizeof *tmp);
    if (!tmp) return hyp_fail(g->e, HYP_EFAIL, "out of memory (halving-doubling scratch of %zu floats)", big);
    if (rank < 2 * rem) {
        if (rank % 2 == 0) {
            rc = xfer(g, buf, n, rank + 1, NULL, 0, -1);
            nr = -1;
        } else {
            if (!(rc = xfer(g, NULL, 0, -1, tmp, n, rank - 1))) add_into(buf, tmp, n);
            nr = rank / 2;
        }
    } else {
        nr = rank - rem;
    }
    if (nr >= 0) {
        /* the real rank of new rank j */
#define REAL(j) ((j) < rem ? 2 * (j) + 1 : (j) + rem)
        int blo = 0, bhi = pp; /* this rank's window of blocks */
        for (int d = pp >> 1; d >= 1 && !rc; d >>= 1) {
            int mid = (blo + bhi) / 2, upper = (nr & d) != 0;
            int klo = upper ? mid : blo, khi = upper ? bhi : mid; /* kept */
            int slo = upper ? blo : mid, shi = upper ? mid : bhi; /* sent */
            size_t k0 = block_lo(n, pp, klo), k1 = block_lo(n, pp, khi);
            size_t s0 = block_lo(n, pp, slo), s1 = block_lo(n, pp, shi);
            int partner = REAL(nr ^ d);
            if (!(rc = xfer(g, buf + s0, s1 - s0, partner, tmp, k1 - k0, partner))) add_into(buf + k0, tmp, k1 - k0);
            blo = klo, bhi = khi;
        }
        for (int d = 1; d < pp && !rc; d <<= 1) {
            int upper = (nr & d) != 0;
            int olo = upper ? blo - d : bhi, ohi = upper ? blo : bhi + d; /* the partner's window */
            size_t m0 = block_lo(n, pp, blo), m1 = block_lo(n, pp, bhi);
            size_t o0 = block_lo(n, pp, olo), o1 = block_lo(n, pp, ohi);
            int partner = REAL(nr ^ d);
            rc = xfer(g, buf + m0, m1 - m0, partner, buf + o0, o1 - o0, partner);
            if (upper) blo = olo;
            else bhi = ohi;
        }
#undef REAL
    }
    free(tmp);
    if (!rc && rank < 2 * rem)
        rc = rank % 2 ? xfer(g, buf, n, rank - 1, NULL, 0, -1) : xfer(g, NULL, 0, -1, buf, n, rank + 1);
    return rc;
}

int coll_algo_allreduce_f32(int algo, MPI_Comm comm, int rank, int world, int node_size, float *buf, size_t n,
                            coll_tally *t, hyp_err *e) {
    grp all = {comm, 0, 1, world, rank, t, e};
    switch (algo) {
    case HYP_AR_RING: return ring(&all, buf, n);
    case HYP_AR_TREE: {
        int rc = tree_reduce(&all, buf, n);
        return rc ? rc : tree_bcast(&all, buf, n);
    }
    case HYP_AR_HALVING_DOUBLING: return halving_doubling(&all, buf, n);
    case HYP_AR_HIERARCHICAL: {
        /* Intra-node binomial reduce to the node's first rank (its leader), ring all-reduce among
         * the leaders (bandwidth-optimal on the slower inter-node links), intra-node binomial
         * broadcast. Order: within a node the tree's (member 0's S_0), then the ring's over the
         * node sums. A last node may hold fewer ranks (node_size does not divide the world). */
        int k = node_size, node = rank / k, nodes = (world + k - 1) / k;
        int m = world - node * k < k ? world - node * k : k;
        grp local = {comm, node * k, 1, m, rank - node * k, t, e};
        grp leaders = {comm, 0, k, nodes, node, t, e};
        int rc = tree_reduce(&local, buf, n);
        if (!rc && local.i == 0) rc = ring(&leaders, buf, n);
        return rc ? rc : tree_bcast(&local, buf, n);
    }
    default: return hyp_fail(e, HYP_EFAIL, "all-reduce: unknown algorithm %d", algo);
    }
}

#endif
