/* backend_reg.c — the trainer backends by the plan's backend name: the cpu executor, and the
 * device layer for sim and cuda. A new backend is one file and one line here. Never: step logic. */
#include <string.h>

#include "backend.h"

static const struct {
    const char *backend;
    int (*open)(train_backend *b, const plan_t *p, const char *plan_path, int B, int T, hyp_err *e);
} BACKENDS[] = {
    {"cpu", train_backend_cpu_open},
    {"sim", train_backend_dev_open},
    {"cuda", train_backend_dev_open},
};

int train_backend_open(train_backend *b, const plan_t *p, const char *plan_path, exec_t *x, const dp_t *dp, int B,
                       int T, hyp_err *e) {
    memset(b, 0, sizeof *b);
    b->x = x;
    b->dp = *dp;
    for (size_t i = 0; i < sizeof BACKENDS / sizeof *BACKENDS; i++)
        if (!strcmp(BACKENDS[i].backend, p->backend)) {
            int rc = BACKENDS[i].open(b, p, plan_path, B, T, e);
            if (!rc && dp->opt && dp->opt->hess_span && !b->i->hess_step) {
                rc = hyp_fail(e, HYP_EINPUT, "plan: optimizer '%s' refreshes a Hessian estimate with a sampled-label pass, which the %s backend does not run — generate the trainer with --target cpu",
                              dp->opt->kind, b->i->name);
                train_backend_close(b);
            }
            return rc;
        }
    return hyp_fail(e, HYP_EINPUT, "plan: backend '%s' has no trainer backend — generate the trainer for --target cpu, sim or sm_XX",
                    p->backend);
}
