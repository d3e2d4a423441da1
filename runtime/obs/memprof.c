/* memprof.c — lifetimes, live bytes and the SVG of the memory profile (memprof.h). Never: print,
 * or touch the arena outside memprof_arm / memprof_scan. */
#include "memprof.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fsio.h"
#include "sbuf.h"

int memprof_build(memprof *m, const plan_t *p, hyp_err *e) {
    memset(m, 0, sizeof *m);
    int n_sched = p->n_fwd + p->n_bwd;
    int *first = calloc((size_t)p->n_bufs + 1, sizeof(int)), *last = calloc((size_t)p->n_bufs + 1, sizeof(int));
    m->live = calloc((size_t)n_sched + 3, sizeof *m->live);
    m->it = malloc(sizeof *m->it * (size_t)(p->n_bufs ? p->n_bufs : 1));
    if (!first || !last || !m->live || !m->it) {
        free(first), free(last), memprof_free(m);
        return hyp_fail(e, HYP_EFAIL, "memory profile: out of memory");
    }
    for (int i = 1; i <= n_sched; i++) {
        const plan_op *o = i <= p->n_fwd ? &p->fwd[i - 1] : &p->bwd[i - 1 - p->n_fwd];
        for (int side = 0; side < 2; side++)
            for (int a = 0; a < (side ? o->nout : o->nin); a++) {
                int b = side ? o->out[a] : o->in[a];
                if (b < 0 || p->bufs[b].kind != BUF_ACT) continue;
                if (!first[b]) first[b] = i;
                if (i > last[b]) last[b] = i;
            }
    }
    /* the losses are read after the step (reporting): alive to the end, as the planner keeps them */
    if (p->losses_buf >= 0 && first[p->losses_buf]) last[p->losses_buf] = n_sched + 1;
    m->n_sched = n_sched;
    for (int b = 0; b < p->n_bufs; b++)
        if (first[b]) m->it[m->n++] = (memprof_item){b, first[b], last[b]};
    free(first), free(last);
    for (int k = 0; k < m->n; k++) {
        const plan_buf *b = &p->bufs[m->it[k].buf];
        for (int i = m->it[k].first; i <= m->it[k].last; i++) m->live[i] += 4 * b->numel;
        if (b->offset_bytes + b->bytes > m->top_end) m->top_end = b->offset_bytes + b->bytes;
    }
    for (int i = 1; i <= n_sched + 1; i++) {
        if (m->live[i] > m->peak) m->peak = m->live[i], m->peak_at = i;
        int64_t *ph = i <= p->n_fwd ? &m->peak_fwd : &m->peak_bwd;
        if (m->live[i] > *ph) *ph = m->live[i];
    }
    return HYP_OK;
}

void memprof_free(memprof *m) {
    free(m->it);
    free(m->live);
    memset(m, 0, sizeof *m);
}

#define SENTINEL 0x7fbadbadu

void memprof_arm(float *acts, int64_t floats) {
    uint32_t *u = (uint32_t *)acts;
    for (int64_t i = 0; i < floats; i++) u[i] = SENTINEL;
}

void memprof_scan(const float *acts, int64_t floats, int64_t *high_water, int64_t *written) {
    const uint32_t *u = (const uint32_t *)acts;
    int64_t hw = 0, w = 0;
    for (int64_t i = 0; i < floats; i++)
        if (u[i] != SENTINEL) w++, hw = i + 1;
    *high_water = 4 * hw, *written = 4 * w;
}

/* ---- the SVG ---------------------------------------------------------------------------------- */

static void esc(hyp_sbuf *s, const char *t) {
    for (; *t; t++) {
        if (*t == '&') hyp_sbuf_str(s, "&amp;");
        else if (*t == '<') hyp_sbuf_str(s, "&lt;");
        else if (*t == '>') hyp_sbuf_str(s, "&gt;");
        else if (*t == '"') hyp_sbuf_str(s, "&quot;");
        else hyp_sbuf_put(s, t, 1);
    }
}

static double mib(double b) { return b / 1048576.0; }

/* "0.250 MiB", "12.0 KiB", "96 B" */
static void size_txt(double b, char *out, size_t n) {
    if (b >= 1048576.0 / 10) snprintf(out, n, "%.3f MiB", b / 1048576.0);
    else if (b >= 1024) snprintf(out, n, "%.1f KiB", b / 1024.0);
    else snprintf(out, n, "%.0f B", b);
}

static const char *color_of(const plan_t *p, int b) {
    const char *n = p->bufs[b].name;
    if (b == p->losses_buf) return "#2ca02c";
    return !strncmp(n, "d:", 2) ? "#ff7f0e" : "#1f77b4";
}

static int by_bytes_desc(const void *a, const void *b, void *ctx) {
    const plan_t *p = ctx;
    int64_t x = p->bufs[*(const int *)a].numel, y = p->bufs[*(const int *)b].numel;
    if (x != y) return x > y ? -1 : 1;
    return strcmp(p->bufs[*(const int *)a].name, p->bufs[*(const int *)b].name);
}

/* insertion sort with a context (qsort_r is not C11); the lists are short */
static void sort_ctx(int *v, int n, const plan_t *p) {
    for (int i = 1; i < n; i++) {
        int t = v[i], j = i;
        while (j > 0 && by_bytes_desc(&v[j - 1], &t, (void *)p) > 0) v[j] = v[j - 1], j--;
        v[j] = t;
    }
}

int memprof_write_svg(const memprof *m, const plan_t *p, const memprof_measured *ms, const char *path, hyp_err *e) {
    int *peak = malloc(sizeof(int) * (size_t)(m->n ? m->n : 1)), np = 0;
    if (!peak) return hyp_fail(e, HYP_EFAIL, "memory profile: out of memory");
    for (int k = 0; k < m->n; k++)
        if (memprof_live_at(m, k, m->peak_at)) peak[np++] = m->it[k].buf;
    sort_ctx(peak, np, p);
    const double W = 1100, X0 = 70, PW = 1000, TL_Y = 90, TL_H = 360, LV_Y = 490, LV_H = 150, PK_Y = 700, ROW = 15;
    double H = PK_Y + 30 + ROW * np + 20;
    int S = m->n_sched + 1; /* positions 1..n_sched+1 */
    double arena = p->act_bytes > 0 ? (double)p->act_bytes : 1, top = m->peak > arena ? (double)m->peak : arena;
    hyp_sbuf s = {0};
    hyp_sbuf_printf(&s, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
                        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" viewBox=\"0 0 %.0f %.0f\" "
                        "font-family=\"sans-serif\" font-size=\"11\">\n",
                    W, H, W, H);
    hyp_sbuf_printf(&s, "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n<text x=\"%.0f\" y=\"22\" font-size=\"13\" font-weight=\"bold\">memory profile: ",
                    X0);
    esc(&s, p->model_name);
    hyp_sbuf_printf(&s, " (%s, B=%d, T=%d) — activation arena %.2f MiB planned (%.2f without reuse), peak live %.2f MiB</text>\n",
                    p->target, p->B, p->T, mib((double)p->act_bytes), mib((double)p->act_bytes_unplanned), mib((double)m->peak));
    hyp_sbuf_printf(&s, "<text x=\"%.0f\" y=\"42\">", X0);
    if (ms && ms->arena_high_water >= 0)
        hyp_sbuf_printf(&s, "measured (%s): arena high-water %.2f MiB (%.2f MiB written in one step); ", ms->where,
                        mib((double)ms->arena_high_water), mib((double)ms->arena_written));
    if (ms && ms->rss_peak_mib > 0)
        hyp_sbuf_printf(&s, "peak RSS %.1f MiB = %.1f MiB at start + %.1f MiB (the executors planned %.1f MiB)", ms->rss_peak_mib,
                        ms->rss_base_mib, ms->rss_peak_mib - ms->rss_base_mib, ms->planned_mib);
    hyp_sbuf_str(&s, "</text>\n");
    hyp_sbuf_printf(&s, "<text x=\"%.0f\" y=\"62\" fill=\"#555\">activation arena over the step's ops (forward ++ backward): a bar per buffer, x its lifetime, y its offset; blue activations, orange their gradients, green the per-token losses</text>\n",
                    X0);
    /* the arena timeline */
    hyp_sbuf_printf(&s, "<g id=\"timeline\">\n<rect x=\"%.0f\" y=\"%.0f\" width=\"%.0f\" height=\"%.0f\" fill=\"#f7f7f7\" stroke=\"#999\"/>\n",
                    X0, TL_Y, PW, TL_H);
    for (int k = 0; k < m->n; k++) {
        const plan_buf *b = &p->bufs[m->it[k].buf];
        double x = X0 + PW * (m->it[k].first - 1) / S, w = PW * (m->it[k].last - m->it[k].first + 1) / S;
        double y = TL_Y + TL_H * (double)b->offset_bytes / arena, h = TL_H * (double)b->bytes / arena;
        if (h < 0.8) h = 0.8;
        hyp_sbuf_printf(&s, "<rect x=\"%.2f\" y=\"%.2f\" width=\"%.2f\" height=\"%.2f\" fill=\"%s\" fill-opacity=\"0.75\" stroke=\"white\" stroke-width=\"0.3\"><title>",
                        x, y, w, h, color_of(p, m->it[k].buf));
        esc(&s, b->name);
        hyp_sbuf_printf(&s, ": %.3f MiB at offset %.3f MiB, ops %d..%d</title></rect>\n", mib((double)b->bytes),
                        mib((double)b->offset_bytes), m->it[k].first, m->it[k].last);
    }
    double xb = X0 + PW * p->n_fwd / S;
    hyp_sbuf_printf(&s, "<line x1=\"%.2f\" y1=\"%.0f\" x2=\"%.2f\" y2=\"%.0f\" stroke=\"black\" stroke-dasharray=\"4,3\"/>\n", xb,
                    TL_Y - 4, xb, LV_Y + LV_H);
    hyp_sbuf_printf(&s, "<text x=\"%.2f\" y=\"%.0f\" text-anchor=\"end\">forward</text><text x=\"%.2f\" y=\"%.0f\">backward</text>\n",
                    xb - 4, TL_Y - 6, xb + 4, TL_Y - 6);
    hyp_sbuf_printf(&s, "<text x=\"%.0f\" y=\"%.0f\" text-anchor=\"end\">0</text><text x=\"%.0f\" y=\"%.0f\" text-anchor=\"end\">%.1f MiB</text>\n</g>\n",
                    X0 - 4, TL_Y + 10, X0 - 4, TL_Y + TL_H, mib(arena));
    /* live bytes */
    hyp_sbuf_printf(&s, "<g id=\"live\">\n<rect x=\"%.0f\" y=\"%.0f\" width=\"%.0f\" height=\"%.0f\" fill=\"none\" stroke=\"#999\"/>\n",
                    X0, LV_Y, PW, LV_H);
    hyp_sbuf_str(&s, "<polyline fill=\"none\" stroke=\"#d62728\" stroke-width=\"1.5\" points=\"");
    for (int i = 1; i <= S; i++)
        hyp_sbuf_printf(&s, "%.2f,%.2f %.2f,%.2f ", X0 + PW * (i - 1) / S, LV_Y + LV_H * (1 - m->live[i] / top),
                        X0 + PW * i / S, LV_Y + LV_H * (1 - m->live[i] / top));
    hyp_sbuf_str(&s, "\"/>\n");
    double ya = LV_Y + LV_H * (1 - arena / top);
    hyp_sbuf_printf(&s, "<line x1=\"%.0f\" y1=\"%.2f\" x2=\"%.0f\" y2=\"%.2f\" stroke=\"#555\" stroke-dasharray=\"6,3\"/>\n", X0, ya,
                    X0 + PW, ya);
    hyp_sbuf_printf(&s, "<text x=\"%.0f\" y=\"%.2f\" text-anchor=\"end\" fill=\"#555\">planned arena %.2f MiB</text>\n", X0 + PW - 4,
                    ya - 3, mib(arena));
    double xp = X0 + PW * (m->peak_at - 0.5) / S;
    hyp_sbuf_printf(&s, "<circle cx=\"%.2f\" cy=\"%.2f\" r=\"3.5\" fill=\"#d62728\"/><text x=\"%.2f\" y=\"%.2f\">peak %.2f MiB at op %d</text>\n",
                    xp, LV_Y + LV_H * (1 - m->peak / top), xp + 6, LV_Y + LV_H * (1 - m->peak / top) + 12, mib((double)m->peak),
                    m->peak_at);
    hyp_sbuf_printf(&s, "<text x=\"%.0f\" y=\"%.0f\" fill=\"#555\">live activation bytes after each op (forward peak %.2f MiB, backward peak %.2f MiB)</text>\n</g>\n",
                    X0, LV_Y + LV_H + 16, mib((double)m->peak_fwd), mib((double)m->peak_bwd));
    /* the peak by buffer */
    hyp_sbuf_printf(&s, "<g id=\"peak\" data-peak-bytes=\"%lld\" data-peak-op=\"%d\">\n<text x=\"%.0f\" y=\"%.0f\" font-weight=\"bold\">the %d buffers live at the peak (op %d), largest first</text>\n",
                    (long long)m->peak, m->peak_at, X0, PK_Y, np, m->peak_at);
    double biggest = np ? 4.0 * (double)p->bufs[peak[0]].numel : 1;
    for (int j = 0; j < np; j++) {
        const plan_buf *b = &p->bufs[peak[j]];
        char sz[32];
        double y = PK_Y + 10 + ROW * j, bytes = 4.0 * (double)b->numel;
        hyp_sbuf_printf(&s, "<rect data-buf=\"");
        esc(&s, b->name);
        hyp_sbuf_printf(&s, "\" data-bytes=\"%.0f\" x=\"%.0f\" y=\"%.2f\" width=\"%.2f\" height=\"%.0f\" fill=\"%s\"/>", bytes, X0 + 260, y,
                        600 * bytes / biggest, ROW - 3, color_of(p, peak[j]));
        hyp_sbuf_printf(&s, "<text x=\"%.0f\" y=\"%.2f\">", X0, y + ROW - 5);
        esc(&s, b->name);
        size_txt(bytes, sz, sizeof sz);
        hyp_sbuf_printf(&s, "</text><text x=\"%.0f\" y=\"%.2f\" text-anchor=\"end\">%s (%.1f%%)</text>\n", X0 + 250, y + ROW - 5,
                        sz, 100 * bytes / (m->peak ? (double)m->peak : 1));
    }
    hyp_sbuf_str(&s, "</g>\n</svg>\n");
    free(peak);
    int rc = s.oom ? hyp_fail(e, HYP_EFAIL, "memory profile: out of memory") : hyp_fs_write_atomic(path, s.p, s.n, e);
    free(s.p);
    return rc;
}
