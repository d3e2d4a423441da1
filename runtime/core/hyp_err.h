/* hyp_err.h — how every runtime module reports errors: as values, never by exit() or abort().
 *
 * A fallible function returns HYP_OK (0), HYP_EINPUT (2: the user's input is bad — a missing,
 * truncated, foreign or corrupt file, a wrong flag) or HYP_EFAIL (1: the environment failed — out
 * of memory, disk full), and writes one line into the caller's hyp_err buffer shaped
 *     "<where>: <what is wrong> — <how to fix>"
 * where <where> is "file:line:col" when a position is known, else the file path.
 * Program mains print that line to stderr and exit with the returned code.
 */
#ifndef HYP_ERR_H
#define HYP_ERR_H

#include <stdarg.h>
#include <stdio.h>

enum { HYP_OK = 0, HYP_EFAIL = 1, HYP_EINPUT = 2 };

typedef struct {
    char msg[1024];
} hyp_err;

/* Formats into e->msg (when e is not NULL) and returns code, so callers can write
 *     return hyp_fail(e, HYP_EINPUT, "%s: truncated shard — re-run gen data", path);
 * A bad-input message stays one line whatever it echoes from the file (a tensor name, a `latest`
 * line, a JSON string): control bytes in it become spaces (tab, CR, LF) or '?'. */
static inline int hyp_fail(hyp_err *e, int code, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
static inline int hyp_fail(hyp_err *e, int code, const char *fmt, ...) {
    if (e) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(e->msg, sizeof e->msg, fmt, ap);
        va_end(ap);
        if (code == HYP_EINPUT)
            for (char *c = e->msg; *c; c++)
                if ((unsigned char)*c < 0x20 || *c == 0x7f) *c = *c == '\t' || *c == '\n' || *c == '\r' ? ' ' : '?';
    }
    return code;
}

#endif
