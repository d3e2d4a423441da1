/* standin_util.h — the two reporting helpers every stand-in library shares: note() says one line
 * on stderr under the stand-in's name, refuse() says why a call is refused and returns the status
 * the real library returns for it. Include it once per stand-in, after defining STANDIN_WHO (the
 * line prefix, e.g. "hyp cuda stand-in: ") and standin_status (the library's status type). It
 * must never decide a status itself: the caller names the one the real library returns. */
#ifndef HYP_STANDIN_UTIL_H
#define HYP_STANDIN_UTIL_H
#include <stdarg.h>
#include <stdio.h>

static void note(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fputs(STANDIN_WHO, stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

/* A refusal the library would return synchronously: said once on stderr (the library only gives
 * the code; the reason makes a CI log readable), returned as st. */
static standin_status refuse(standin_status st, const char *fmt, ...) {
    char msg[600];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    note("%s", msg);
    return st;
}
#endif
