/* test_ring_attention_v2108.c — v2108/v2116 Ring Attention on the cpu (runtime/cpu/ops_ring.c):
 * the sequence split over cp ranks, contiguous and zigzag, gives the full-sequence flash attention's
 * out, lse, dq, dk and dv (each local row = the full run's row at its global position), the zigzag
 * split balances the causal work, RoPE at the positions hyp_cp_positions gives is the full run's,
 * and the ring sends exactly (cp-1)|kv| forward and (2cp-1)|kv| backward per rank, posting each
 * shift before the block compute it overlaps (v2116); the all-gather mode (v2108 alone) gives the
 * ring's results (bit for bit but for the dK/dV sum order at cp > 2, argued at run_mpi) with
 * (cp-1)|kv| forward and 2(cp-1)|kv| backward.
 * Run alone it simulates the ring of cp = 1..4 ranks over in-memory blocks (the very step functions
 * the mpirun driver calls, in its order), then starts itself under `mpirun -np 2` and `-np 4`
 * (--oversubscribe), where every rank runs the real ring and must match the simulation bit for
 * bit (E0: the same kernels on the same inputs in the same order). Sanitizer builds skip the
 * mpirun half (Open MPI's own allocations are not ours to audit).
 *
 * Tolerance against the full-sequence flash op (docs/test-tolerances.md): both compute every
 * scaled score with the same kernel in the same order, so the scores are bit-identical; what
 * differs is where the online softmax takes its maxima (tiles of 64 keys vs chunks) and the order
 * of the sums. Each probability then differs relatively by at most
 *     dp = (8 + 4 |s2|max) u     (fa_exp2 <= 2u on each side, the rounding of s2 - m (u |s2 - m|,
 *                                 |s2 - m| <= 2 |s2|max, on each side), the rescale factors and
 *                                 the double merge's final rounding; s2 = the base-2 score)
 * and every sum of K <= T terms rounds in two orders (E1 worst case, 2 K u). So, element-wise,
 *     |d out|  <= (2 dp + 2 T u) A_out,  A_out = sum_k P |v_k|           (computed in double)
 *     |d lse|  <= dp + 2 T u + 2 u |lse|
 *     |d grad| <= (4 dp + 4 T u + 2 hd u) A_grad
 * with A_grad the sum of the terms' absolute values: dv: sum_q P |dO_q|; dq, dk: scale sum
 * P (|dP| + |D|) |k| (|q|); the extra dp and T u of the gradients are the forward's lse and out
 * errors entering P and D = dO . out (an hd-term dot product: 2 hd u). A ring that drops a block
 * or masks the wrong chunk misses whole terms, errors of order A itself: the test checks that a
 * ring cut one step short fails these bounds. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coll.h"
#include "hyp_test.h"
#include "ops_cpu.h"
#include "ops_flash.h"
#include "ops_ring.h"

#if defined(__SANITIZE_ADDRESS__)
#define HYP_TEST_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define HYP_TEST_SANITIZED 1
#endif
#endif

enum { B = 2, T = 48, NH = 4, NKV = 2, HD = 20 }; /* T divisible by 2cp for cp = 1..4; hd not a multiple of 16 */
#define R ((NH + 2 * NKV) * HD)
#define OC (NH * HD)
#define KVW (2 * NKV * HD)
static const double U = 5.9604644775390625e-8; /* 2^-24 */

static uint64_t g_seed = 0x2108;
static float rnd(void) { /* uniform in [-1, 1) */
    g_seed = g_seed * 6364136223846793005ULL + 1442695040888963407ULL;
    return (float)((double)(g_seed >> 40) / (double)(1 << 23) - 1.0);
}

/* the full-sequence problem and its flash results */
static float X[B * T * R], QKV[B * T * R], DOUT[B * T * OC];
static float OUTF[B * T * OC], LSEF[B * NH * T], DQKVF[B * T * R];
/* element-wise bounds from the double reference */
static double TOL_OUT[B * T * OC], TOL_LSE[B * NH * T], TOL_D[B * T * R];

static void reference_bounds(void) {
    const double sc = 1.0 / sqrt((double)HD);
    static double P[T], DP[T], AQ[B * T * R];
    double s2max = 0;
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int q = 0; q <= T - 1; q++)
                for (int k = 0; k <= q; k++) {
                    double s = 0;
                    for (int d = 0; d < HD; d++)
                        s += (double)QKV[((long)b * T + q) * R + h * HD + d] * QKV[((long)b * T + k) * R + (NH + h / (NH / NKV)) * HD + d];
                    s = fabs(s * sc * 1.4426950408889634);
                    s2max = s > s2max ? s : s2max;
                }
    const double dp = (8 + 4 * s2max) * U, fo = 2 * dp + 2 * T * U, fg = 4 * dp + 4 * T * U + 2 * HD * U;
    memset(AQ, 0, sizeof AQ);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++) {
            const int g = h / (NH / NKV);
            for (int q = 0; q < T; q++) {
                const float *qr = QKV + ((long)b * T + q) * R + h * HD, *dor = DOUT + ((long)b * T + q) * OC + h * HD;
                double m = -INFINITY, l = 0, D = 0;
                for (int k = 0; k <= q; k++) {
                    const float *kr = QKV + ((long)b * T + k) * R + (NH + g) * HD, *vr = kr + NKV * HD;
                    double s = 0, dpk = 0;
                    for (int d = 0; d < HD; d++) s += (double)qr[d] * kr[d], dpk += (double)dor[d] * vr[d];
                    P[k] = s * sc, DP[k] = dpk;
                    m = P[k] > m ? P[k] : m;
                }
                for (int k = 0; k <= q; k++) l += (P[k] = exp(P[k] - m));
                for (int k = 0; k <= q; k++) P[k] /= l;
                for (int k = 0; k <= q; k++) D += P[k] * DP[k];
                TOL_LSE[((long)b * NH + h) * T + q] = dp + 2 * T * U + 2 * U * fabs(m + log(l));
                for (int d = 0; d < HD; d++) {
                    double a = 0, aq = 0;
                    for (int k = 0; k <= q; k++) {
                        const float *kr = QKV + ((long)b * T + k) * R + (NH + g) * HD;
                        a += P[k] * fabs(kr[NKV * HD + d]);
                        aq += sc * P[k] * (fabs(DP[k]) + fabs(D)) * fabs(kr[d]);
                    }
                    TOL_OUT[((long)b * T + q) * OC + h * HD + d] = fo * a + 1e-30;
                    AQ[((long)b * T + q) * R + h * HD + d] += aq;
                }
                for (int k = 0; k <= q; k++) /* dk and dv rows of key k (summed over the group) */
                    for (int d = 0; d < HD; d++) {
                        AQ[((long)b * T + k) * R + (NH + g) * HD + d] += sc * P[k] * (fabs(DP[k]) + fabs(D)) * fabs(qr[d]);
                        AQ[((long)b * T + k) * R + (NH + NKV + g) * HD + d] += P[k] * fabs(dor[d]);
                    }
            }
        }
    for (long i = 0; i < (long)B * T * R; i++) TOL_D[i] = fg * AQ[i] + 1e-30;
}

static void setup(void) {
    for (long i = 0; i < (long)B * T * R; i++) X[i] = 1.5f * rnd();
    for (long i = 0; i < (long)B * T * OC; i++) DOUT[i] = rnd();
    op_rope_fwd_pos(QKV, X, NULL, B, T, NH, NKV, HD, 10000.0f);
    static float dscr[B * NH * T];
    op_flash_attention_fwd(OUTF, LSEF, QKV, B, T, NH, NKV, HD);
    memset(DQKVF, 0, sizeof DQKVF);
    op_flash_attention_bwd(DQKVF, dscr, DOUT, QKV, OUTF, LSEF, B, T, NH, NKV, HD);
    reference_bounds();
}

/* one rank's view: its rows of the full tensors, in local order */
typedef struct {
    int32_t pos[B * T];
    float qkv[B * T * R], dout[B * T * OC], kv[B * T * KVW];
    float out[B * T * OC], lse[B * NH * T], dqkv[B * T * R], dkv[B * T * KVW];
    hyp_ring_stats st;
} rank_t;

static void local_rows(rank_t *rk, int layout, int cp, int r) {
    const int Tl = T / cp;
    hyp_cp_positions(rk->pos, layout, cp, r, B, T);
    for (int b = 0; b < B; b++)
        for (int t = 0; t < Tl; t++) {
            long g = (long)b * T + rk->pos[b * Tl + t], l = (long)b * Tl + t;
            memcpy(rk->qkv + l * R, QKV + g * R, sizeof(float) * R);
            memcpy(rk->dout + l * OC, DOUT + g * OC, sizeof(float) * OC);
        }
    hyp_cp_pack_kv(rk->kv, rk->qkv, B, Tl, NH, NKV, HD);
    memset(rk->dqkv, 0, sizeof rk->dqkv);
    memset(rk->dkv, 0, sizeof rk->dkv);
    memset(&rk->st, 0, sizeof rk->st);
}

/* The ring of cp ranks in one process: step s, every rank r attends block (r - s) mod cp; the
 * block's gradient is the left fold of the parts of ranks o, o+1, ... (each computed from zero),
 * in that order, as it travels. steps < cp
 * cuts the ring short (the test's own failure check). */
static int simulate(rank_t *rk, int layout, int cp, int steps) {
    hyp_err e = {{0}};
    for (int r = 0; r < cp; r++) local_rows(&rk[r], layout, cp, r);
    for (int s = 0; s < steps; s++)
        for (int r = 0; r < cp; r++) {
            int src = (r - s + cp) % cp;
            if (op_ring_attention_fwd_block(rk[r].out, rk[r].lse, rk[r].qkv, rk[src].kv, layout, cp, r, src, B, T, NH, NKV, HD,
                                            &rk[r].st, &e))
                return printf("simulate: %s\n", e.msg), 1;
        }
    static float part[B * T * KVW];
    for (int s = 0; s < steps; s++)
        for (int r = 0; r < cp; r++) {
            int src = (r - s + cp) % cp;
            memset(part, 0, sizeof part);
            if (op_ring_attention_bwd_block(rk[r].dqkv, part, rk[r].dout, rk[r].qkv, rk[r].out, rk[r].lse, rk[src].kv, layout,
                                            cp, r, src, B, T, NH, NKV, HD, &e))
                return printf("simulate: %s\n", e.msg), 1;
            /* the accumulator that arrived + this rank's part, as the driver folds it */
            for (long i = 0; i < (long)B * (T / cp) * KVW; i++) rk[src].dkv[i] = s ? rk[src].dkv[i] + part[i] : part[i];
        }
    for (int r = 0; r < cp; r++) hyp_cp_add_dkv(rk[r].dqkv, rk[r].dkv, B, T / cp, NH, NKV, HD);
    return 0;
}

/* worst |ring - flash| / bound over one rank's rows, per quantity (out, lse, dqkv) */
static void worst(const rank_t *rk, int cp, double w[3]) {
    const int Tl = T / cp;
    for (int b = 0; b < B; b++)
        for (int t = 0; t < Tl; t++) {
            long g = (long)b * T + rk->pos[b * Tl + t], l = (long)b * Tl + t;
            for (int i = 0; i < OC; i++) {
                double x = fabs((double)rk->out[l * OC + i] - OUTF[g * OC + i]) / TOL_OUT[g * OC + i];
                w[0] = x > w[0] || isnan(x) ? x : w[0];
            }
            for (int h = 0; h < NH; h++) {
                long gi = ((long)b * NH + h) * T + rk->pos[b * Tl + t], li = ((long)b * NH + h) * Tl + t;
                double x = fabs((double)rk->lse[li] - LSEF[gi]) / TOL_LSE[gi];
                w[1] = x > w[1] || isnan(x) ? x : w[1];
            }
            for (int i = 0; i < R; i++) {
                double x = fabs((double)rk->dqkv[l * R + i] - DQKVF[g * R + i]) / TOL_D[g * R + i];
                w[2] = x > w[2] || isnan(x) ? x : w[2];
            }
        }
}

static rank_t g_sim[4];
static const char *LNAME[2] = {"contiguous", "zigzag"};

static void check_simulated(void) {
    for (int layout = HYP_CP_CONTIGUOUS; layout <= HYP_CP_ZIGZAG; layout++)
        for (int cp = 1; cp <= 4; cp++) {
            if (simulate(g_sim, layout, cp, cp)) {
                CHECK(0, "v2108 %s cp=%d: the simulated ring runs", LNAME[layout], cp);
                continue;
            }
            double w[3] = {0, 0, 0};
            int balanced = 1, imbalanced = 1;
            for (int r = 0; r < cp; r++) {
                worst(&g_sim[r], cp, w);
                const hyp_ring_stats *st = &g_sim[r].st;
                /* zigzag: chunks r and 2cp-1-r see r+1 and 2cp-r of the 2cp key chunks: 2 diagonals, 2cp-1
                 * full, 2cp-1 skipped */
                balanced &= st->diag == 2 && st->full == 2 * cp - 1 && st->skipped == 2 * cp - 1;
                imbalanced &= st->diag == 1 && st->full == r && st->skipped == cp - 1 - r;
            }
            CHECK(w[0] <= 1 && w[1] <= 1 && w[2] <= 1,
                  "v2108 %s cp=%d (simulated ring): out, lse, dq/dk/dv = full-sequence flash within the bound (worst |diff|/bound %.3g %.3g %.3g)",
                  LNAME[layout], cp, w[0], w[1], w[2]);
            if (layout == HYP_CP_ZIGZAG)
                CHECK(balanced, "v2108 zigzag cp=%d: every rank attends 2 diagonal and %d full chunk pairs (balanced)", cp, 2 * cp - 1);
            else
                CHECK(imbalanced, "v2108 contiguous cp=%d: rank r attends 1 diagonal and r full chunk pairs (last rank %dx the first's work)",
                      cp, cp);
        }
    /* the test can fail: a ring one step short misses a block */
    double w[3] = {0, 0, 0};
    if (!simulate(g_sim, HYP_CP_ZIGZAG, 2, 1))
        for (int r = 0; r < 2; r++) worst(&g_sim[r], 2, w);
    CHECK(w[0] > 100 && w[2] > 100, "v2108 zigzag cp=2 cut one step short: out and gradients off by %.3g and %.3g bounds", w[0], w[2]);
}

/* RoPE at the global positions: each rank's rotated rows are the full run's, bit for bit (E0) */
static void check_rope_positions(void) {
    for (int layout = HYP_CP_CONTIGUOUS; layout <= HYP_CP_ZIGZAG; layout++) {
        int ok = 1;
        const int cp = 4, Tl = T / cp;
        static int32_t pos[B * T];
        static float xl[B * T * R], yl[B * T * R], dl[B * T * R], dfull[B * T * R];
        memset(dfull, 0, sizeof dfull);
        op_rope_bwd_pos(dfull, DQKVF, NULL, B, T, NH, NKV, HD, 10000.0f);
        for (int r = 0; r < cp; r++) {
            hyp_cp_positions(pos, layout, cp, r, B, T);
            for (int b = 0; b < B; b++)
                for (int t = 0; t < Tl; t++) {
                    memcpy(xl + ((long)b * Tl + t) * R, X + ((long)b * T + pos[b * Tl + t]) * R, sizeof(float) * R);
                    memcpy(dl + ((long)b * Tl + t) * R, DQKVF + ((long)b * T + pos[b * Tl + t]) * R, sizeof(float) * R);
                }
            op_rope_fwd_pos(yl, xl, pos, B, Tl, NH, NKV, HD, 10000.0f);
            memset(xl, 0, sizeof(float) * B * Tl * R);
            op_rope_bwd_pos(xl, dl, pos, B, Tl, NH, NKV, HD, 10000.0f);
            for (int b = 0; b < B; b++)
                for (int t = 0; t < Tl; t++) {
                    long g = ((long)b * T + pos[b * Tl + t]) * R, l = ((long)b * Tl + t) * R;
                    ok &= !memcmp(yl + l, QKV + g, sizeof(float) * R) && !memcmp(xl + l, dfull + g, sizeof(float) * R);
                }
        }
        CHECK(ok, "v2108 %s cp=4: RoPE forward and backward at hyp_cp_positions = the full sequence's rows, bit for bit", LNAME[layout]);
    }
}

static void check_refusals(void) {
    hyp_err e = {{0}};
    CHECK(hyp_cp_check(HYP_CP_ZIGZAG, 4, 36, &e) == HYP_EINPUT && strstr(e.msg, "multiple of 2 cp = 8"),
          "T = 36 is refused for zigzag cp=4: %s", e.msg);
    CHECK(hyp_cp_check(HYP_CP_CONTIGUOUS, 4, 36, &e) == HYP_OK && hyp_cp_check(HYP_CP_ZIGZAG, 0, 48, &e) == HYP_EINPUT &&
              hyp_cp_check(7, 2, 48, &e) == HYP_EINPUT,
          "contiguous cp=4 takes T = 36; cp 0 and an unknown layout are refused");
}

/* under mpirun, both modes of the same problem:
 * v2116 ring: the real ring, bit-identical to the simulation, with the bytes its formula says, and
 *   every shift posted before the block compute it overlaps (cp-1 forward blocks and all cp
 *   backward blocks computed with a transfer of the op in flight: the block of step s while the
 *   next block travels, the last backward block while the previous accumulator arrives).
 * v2108 all-gather: out, lse and the dq rows are the ring's bit for bit (the same block calls on
 *   the same blocks in the same order; dq never leaves the rank). The dK/dV of a block are the
 *   same cp parts (each computed from zero in both modes) summed in another order: the ring's
 *   left fold from the owner vs MPI's reduce-scatter. For cp = 2 that is one addition a + b =
 *   b + a, so all of dqkv is bit-identical too; for cp = 4 the orders differ and dqkv is checked
 *   against the full-sequence flash op within the bound (the bound's 2 T u term covers any order
 *   of the sums). Bytes: forward (cp-1)|kv| (one all-gather), backward 2(cp-1)|kv| (all-gather
 *   again + reduce-scatter), nothing in flight during compute. */
static int run_mpi(hyp_coll *w) {
    const int cp = hyp_coll_world(w), r = hyp_coll_rank(w), Tl = T / cp;
    hyp_err e = {{0}};
    static rank_t me;
    const char *MODE[2] = {"all-gather", "ring"};
    for (int layout = HYP_CP_CONTIGUOUS; layout <= HYP_CP_ZIGZAG; layout++) {
        simulate(g_sim, layout, cp, cp);
        const rank_t *s = &g_sim[r];
        for (int ring = 0; ring <= 1; ring++) {
            local_rows(&me, layout, cp, r);
            hyp_ring_stats sb = {0, 0, 0, 0};
            uint64_t b0 = hyp_coll_bytes_sent(w);
            int rc = ring ? op_ring_attention_fwd(w, layout, me.out, me.lse, me.qkv, B, T, NH, NKV, HD, &me.st, &e)
                          : op_cp_allgather_attention_fwd(w, layout, me.out, me.lse, me.qkv, B, T, NH, NKV, HD, &me.st, &e);
            uint64_t b1 = hyp_coll_bytes_sent(w);
            if (!rc)
                rc = ring ? op_ring_attention_bwd(w, layout, me.dqkv, me.dout, me.qkv, me.out, me.lse, B, T, NH, NKV, HD, &sb, &e)
                          : op_cp_allgather_attention_bwd(w, layout, me.dqkv, me.dout, me.qkv, me.out, me.lse, B, T, NH, NKV, HD, &e);
            uint64_t b2 = hyp_coll_bytes_sent(w), kvb = (uint64_t)B * Tl * KVW * 4;
            CHECK(!rc, "rank %d/%d %s %s: forward and backward run (%s)", r, cp, LNAME[layout], MODE[ring], rc ? e.msg : "ok");
            int same_fwd = !memcmp(me.out, s->out, sizeof(float) * B * Tl * OC) && !memcmp(me.lse, s->lse, sizeof(float) * B * NH * Tl);
            int same_d = !memcmp(me.dqkv, s->dqkv, sizeof(float) * B * Tl * R), same_dq = 1;
            for (long n = 0; n < (long)B * Tl; n++) same_dq &= !memcmp(me.dqkv + n * R, s->dqkv + n * R, sizeof(float) * OC);
            if (ring || cp == 2)
                CHECK(same_fwd && same_d, "rank %d/%d %s %s: out, lse, dqkv = the simulated ring's, bit for bit", r, cp, LNAME[layout], MODE[ring]);
            else
                CHECK(same_fwd && same_dq, "rank %d/%d %s %s: out, lse and the dq rows = the simulated ring's, bit for bit", r, cp,
                      LNAME[layout], MODE[ring]);
            double wr[3] = {0, 0, 0};
            worst(&me, cp, wr);
            CHECK(wr[0] <= 1 && wr[1] <= 1 && wr[2] <= 1, "rank %d/%d %s %s: = full-sequence flash within the bound (%.3g %.3g %.3g)", r, cp,
                  LNAME[layout], MODE[ring], wr[0], wr[1], wr[2]);
            uint64_t fb = (uint64_t)(cp - 1) * kvb, bb = (uint64_t)(ring ? 2 * cp - 1 : 2 * (cp - 1)) * kvb;
            CHECK(b1 - b0 == fb && b2 - b1 == bb, "rank %d/%d %s %s: sent %llu B forward = (cp-1)|kv|, %llu B backward = %s|kv|, |kv| = %llu B", r, cp,
                  LNAME[layout], MODE[ring], (unsigned long long)(b1 - b0), (unsigned long long)(b2 - b1), ring ? "(2cp-1)" : "2(cp-1)",
                  (unsigned long long)kvb);
            if (ring)
                CHECK(me.st.overlapped == cp - 1 && sb.overlapped == cp,
                      "rank %d/%d %s ring (v2116): %ld of %d forward and %ld of %d backward blocks computed with the next transfer already posted",
                      r, cp, LNAME[layout], me.st.overlapped, cp, sb.overlapped, cp);
            else
                CHECK(me.st.overlapped == 0, "rank %d/%d %s all-gather: no transfer in flight during its block compute", r, cp, LNAME[layout]);
            CHECK(hyp_coll_in_flight(w) == 0, "rank %d/%d %s %s: nothing left in flight after the op", r, cp, LNAME[layout], MODE[ring]);
        }
    }
    return hyp_coll_all_ok(w, g_fail == 0) ? 0 : 1;
}

int main(int argc, char **argv) {
    hyp_coll *w = NULL;
    hyp_err e = {{0}};
    if (hyp_coll_init(&argc, &argv, &w, &e)) {
        printf("FAIL coll init: %s\n", e.msg);
        return 1;
    }
    setup();
    if (hyp_coll_world(w) > 1) {
        int rc = run_mpi(w);
        hyp_coll_finalize(w);
        return rc;
    }
    check_refusals();
    check_rope_positions();
    check_simulated();
    hyp_coll_finalize(w);
#if defined(HYP_HAVE_MPI) && !defined(HYP_TEST_SANITIZED)
    if (system("command -v mpirun >/dev/null 2>&1") == 0) {
        for (int np = 2; np <= 4; np += 2) {
            char cmd[4096];
            snprintf(cmd, sizeof cmd,
                     "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_mpi_yield_when_idle=1 OMP_NUM_THREADS=1 "
                     "mpirun -np %d --oversubscribe %s",
                     np, argv[0]);
            CHECK(system(cmd) == 0, "np=%d: the ring (v2116) and the all-gather mode (v2108) on every rank", np);
        }
    } else
        printf("note: no mpirun; the multi-rank half did not run\n");
#endif
    return hyp_test_finish();
}
