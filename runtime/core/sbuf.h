/* sbuf.h — a growable NUL-terminated byte string for text the runtime builds in memory (JSON
 * headers, rewritten sources, captured compiler output). Out of memory is sticky: after a failed
 * growth every append is a no-op and `oom` stays set, so callers check once at the end. Never
 * aborts; the caller frees `p`. */
#ifndef HYP_SBUF_H
#define HYP_SBUF_H

#include <stddef.h>

typedef struct {
    char *p;       /* the text, NUL-terminated (NULL until the first append) */
    size_t n, cap; /* bytes used (without the NUL), bytes allocated */
    int oom;       /* an append could not grow the buffer */
} hyp_sbuf;

void hyp_sbuf_put(hyp_sbuf *b, const char *s, size_t n);
void hyp_sbuf_str(hyp_sbuf *b, const char *s);
/* printf-style; one formatted piece is cut at 1023 bytes */
void hyp_sbuf_printf(hyp_sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
