/* progress.c — the trainer's progress bar on a terminal and log lines elsewhere (progress.h).
 * Never: stderr, colours, anything but the one line it owns. */
#include "progress.h"

#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <time.h>
#include <unistd.h>

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

void hyp_progress_init(hyp_progress *pg, FILE *out, int log_every) {
    memset(pg, 0, sizeof *pg);
    pg->out = out;
    const char *term = getenv("TERM"), *force = getenv("HYP_PROGRESS");
    /* under an MPI launcher stdout is often a pseudo-terminal of mpirun's even when mpirun's own
     * output goes to a file or a scheduler's log: log lines there, unless HYP_PROGRESS=bar */
    int launched = getenv("OMPI_COMM_WORLD_SIZE") || getenv("PMI_SIZE") || getenv("PMIX_RANK");
    pg->bar = log_every <= 0 && isatty(fileno(out)) && !launched && !(term && !strcmp(term, "dumb"));
    if (force && !strcmp(force, "bar")) pg->bar = log_every <= 0;
    if (force && !strcmp(force, "log")) pg->bar = 0;
    pg->every = log_every > 0 ? log_every : 1;
    pg->last = -1;
}

int hyp_progress_log_due(const hyp_progress *pg, int step, int important) {
    if (important) return 1;
    return !pg->bar && step % pg->every == 0;
}

static int term_width(FILE *out) {
    struct winsize ws;
    if (ioctl(fileno(out), TIOCGWINSZ, &ws) == 0 && ws.ws_col >= 20) return ws.ws_col;
    return 100;
}

static void human(double v, char *buf, size_t n) {
    if (v >= 1e6) snprintf(buf, n, "%.1fM", v / 1e6);
    else if (v >= 1e4) snprintf(buf, n, "%.0fk", v / 1e3);
    else snprintf(buf, n, "%.0f", v);
}

void hyp_progress_bar(hyp_progress *pg, int step, int total, double loss, double tok_s, const char *eta, int force) {
    if (!pg->bar) return;
    double t = now_s();
    if (!force && pg->last >= 0 && t - pg->last < 0.1) return;
    pg->last = t;
    char tps[16], text[160], line[512];
    human(tok_s, tps, sizeof tps);
    int pct = total > 0 ? (int)(100.0 * step / total) : 0;
    snprintf(text, sizeof text, " %3d%% step %d/%d | loss %.4f | %s tok/s | ETA %s", pct, step, total, loss, tps, eta);
    int width = term_width(pg->out) - 1, bw = width - (int)strlen(text) - 2;
    if (bw > 40) bw = 40;
    int n = 0;
    if (bw >= 10) {
        int fill = total > 0 ? (int)((double)bw * step / total) : 0;
        line[n++] = '[';
        for (int i = 0; i < bw; i++) line[n++] = i < fill ? '#' : (i == fill ? '>' : '.');
        line[n++] = ']';
    }
    snprintf(line + n, sizeof line - (size_t)n, "%s", text);
    if ((int)strlen(line) > width && width > 0) line[width] = 0; /* never wrap: \r must reach the start */
    fprintf(pg->out, "\r\033[K%s", line);
    fflush(pg->out);
    pg->showing = 1;
}

void hyp_progress_break(hyp_progress *pg) {
    if (!pg->showing) return;
    fputs("\r\033[K", pg->out); /* the next line replaces the bar */
    fflush(pg->out);
    pg->showing = 0;
}
