/* ckey.h — the one key rule of Hyperion's compile caches: gen's NVRTC cache (generator/nvrtc.c)
 * and the simulator's module cache (runtime/sim/sim_compile.c) both name an entry by this key.
 *
 * A key is the XXH3-128 (32 lowercase hex digits) of length-prefixed fields, so fields never run
 * together: a tag naming the cache and its format, then whatever changes the output (compiler and
 * its version, target, options), then each source with its include closure: the text, and for
 * every #include line of it (conditional or not) the spelling and, where the header resolves, the
 * hash of its content followed by its own includes, depth first, each header once. A "..."
 * include resolves in the including file's directory first, then like <...> in the include dirs in
 * order; one found nowhere is the compiler's own (keyed as "<builtin>": cover it by keying the
 * compiler's version). Paths of include dirs are not keyed, the headers' contents are.
 *
 *   hyp_ckey_headers *h = hyp_ckey_headers_new(dirs, ndirs);   // shared by the keys of a batch
 *   hyp_ckey *k = hyp_ckey_begin(h, "hyperion nvrtc cache 1");
 *   hyp_ckey_str(k, arch); ...; hyp_ckey_source(k, text, len, NULL);
 *   char key[33]; hyp_ckey_finish(k, key);
 *   hyp_ckey_headers_free(h);
 *
 * Never writes files; reads only the headers it resolves. Not thread-safe per object: one
 * hyp_ckey_headers per thread (it memoizes the headers it read). */
#ifndef HYP_CKEY_H
#define HYP_CKEY_H

#include <stddef.h>

typedef struct hyp_ckey_headers hyp_ckey_headers;
typedef struct hyp_ckey hyp_ckey;

/* The include dirs (copied) and an empty memo of headers. NULL when out of memory. */
hyp_ckey_headers *hyp_ckey_headers_new(const char *const *dirs, int ndirs);
void hyp_ckey_headers_free(hyp_ckey_headers *h);

/* A new key whose first field is tag. NULL when out of memory. */
hyp_ckey *hyp_ckey_begin(hyp_ckey_headers *h, const char *tag);
/* One field of n bytes. */
void hyp_ckey_bytes(hyp_ckey *k, const void *p, size_t n);
/* One string field (NULL keys as ""). */
void hyp_ckey_str(hyp_ckey *k, const char *s);
/* A source: its text as a field, then its include closure. dir: the directory "..." includes of
 * the text resolve in first (NULL: only the include dirs). */
void hyp_ckey_source(hyp_ckey *k, const char *text, size_t n, const char *dir);
/* Writes the key (32 hex digits + NUL) and frees k. */
void hyp_ckey_finish(hyp_ckey *k, char hex[33]);

#endif
