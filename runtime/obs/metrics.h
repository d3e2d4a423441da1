/* metrics.h — the trainer's metrics log: JSON Lines, one object per step, e.g.
 *     {"step":100,"loss":3.27140212,"lr":0.000600000028,"grad_norm":0.81234,"tokens_per_s":51234.5}
 * Each line is built in memory and written with a single write() on an O_APPEND descriptor, so a
 * line is whole or absent even if the process dies (readers drop a torn last line anyway).
 * Numbers: integers (|v| < 2^53) print exactly as integers, others with %.9g (round-trips a float,
 * 9 significant digits of a double); NaN and ±Inf print as null (JSON has no such numbers).
 *
 * Resume: opening with append = 1 keeps the existing lines, and the first record written
 * (step s) first drops every existing line with step >= s — the steps a crashed run logged
 * after its last checkpoint, which the resumed run is about to log again — and any torn last
 * line, so the log holds each step once. append = 0 starts a fresh log (truncating an old one).
 */
#ifndef HYP_METRICS_H
#define HYP_METRICS_H

#include <stdint.h>

#include "hyp_err.h"

typedef struct hyp_metrics hyp_metrics;

typedef struct {
    const char *key;   /* JSON key; must not be one of the fixed fields below */
    double value;
} hyp_metric_kv;

/* One training-step record. The fixed fields are always written (non-finite -> null) except
 * val_loss, which is written only when it is not NaN: set it to NAN on steps without an
 * evaluation. Then the extras, in order. */
typedef struct {
    uint64_t step;
    double loss;
    double lr;
    double grad_norm;
    double tokens_per_s;
    double val_loss;                /* NAN = not measured this step (omitted) */
    const hyp_metric_kv *extra;
    int n_extra;
} hyp_metrics_row;

/* Opens path (creating parent directories) into *out; see append above. */
int hyp_metrics_open(hyp_metrics **out, const char *path, int append, hyp_err *e);

/* Appends one row. HYP_EINPUT for a bad extra key, HYP_EFAIL when the write fails (disk full). */
int hyp_metrics_write(hyp_metrics *m, const hyp_metrics_row *row, hyp_err *e);
/* Appends {"step": step, kv...} — for records that are not training steps (e.g. eval-only). */
int hyp_metrics_write_kv(hyp_metrics *m, uint64_t step, const hyp_metric_kv *kv, int n,
                         hyp_err *e);

/* fsyncs (best effort) and closes. NULL is a no-op. */
void hyp_metrics_close(hyp_metrics *m);

/* Formats a number the way the log does ("null" for non-finite) into out (>= 32 bytes). */
void hyp_metrics_fmt_number(double v, char *out, int cap);

#endif
