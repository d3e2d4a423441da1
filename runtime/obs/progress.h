/* progress.h — how the trainer shows its steps: on a terminal one progress line rewritten in
 * place ("\r", clear to end of line) with a bar, loss, tokens/s and the ETA, at most ~10 times a
 * second; the full log line of a step stays on screen where it matters (evaluation, a skipped
 * step, the last step). When stdout is not a terminal (a file, a pipe, CI), or with
 * --log-every N, plain log lines: every step (the default off a terminal) or every N-th step,
 * plus those that matter.
 *
 * Anything else the trainer prints while a bar is showing calls progress_break first, so the
 * message starts on its own line. Never: buffering of log lines, colours, output to stderr. */
#ifndef HYP_PROGRESS_H
#define HYP_PROGRESS_H

#include <stdio.h>

typedef struct {
    int bar;            /* 1: the in-place line on a terminal */
    int every;          /* log lines every `every` steps (bar off) */
    int showing;        /* a bar line is on screen, unterminated */
    double last;        /* monotonic seconds of the last bar draw */
    FILE *out;
} hyp_progress;

/* log_every > 0: log lines every N steps, no bar; 0: a bar when out is a terminal (and TERM is
 * not "dumb"), else a log line every step. HYP_PROGRESS=bar|log forces the mode (tests). */
void hyp_progress_init(hyp_progress *pg, FILE *out, int log_every);
/* Should step `step`'s full log line be printed? important: evaluation, skipped, last step. */
int hyp_progress_log_due(const hyp_progress *pg, int step, int important);
/* Redraws the bar for step of total (no-op without a bar, or within 0.1 s of the last draw unless
 * force): loss, tokens/s, ETA text. */
void hyp_progress_bar(hyp_progress *pg, int step, int total, double loss, double tok_s, const char *eta, int force);
/* Clears the bar line if one is showing, so that the next output takes its place (the bar comes
 * back at the next step, below it). */
void hyp_progress_break(hyp_progress *pg);

#endif
