/* dev_expr.h — the small evaluator of the kernel manifest's expressions ("cdiv(N*CV, BLOCK)",
 * "N*C", "2*SEGS*C"): + - * / %, parentheses, integer and float literals, names bound in an env,
 * cdiv/min/max. exec_dev binds launch grids, shared memory and scalar arguments with it. Never
 * allocates; a name it does not know or an expression it cannot read is an error with a message. */
#ifndef HYP_DEV_EXPR_H
#define HYP_DEV_EXPR_H

#include <stddef.h>

#define ENV_MAX 96
typedef struct {
    int n;
    const char *name[ENV_MAX];
    double val[ENV_MAX];
} env_t;

/* Binds name to val; the first binding of a name wins (callers bind in priority order). The
 * name is not copied: it must outlive the env. */
void dev_env_set(env_t *v, const char *name, double val);
/* Evaluates a comma-separated list of up to `max` expressions into out; returns how many, or -1
 * with what (wn bytes) saying why. */
int dev_eval_list(const char *s, const env_t *env, double *out, int max, char *what, size_t wn);

#endif
