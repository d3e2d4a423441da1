/* backend_reg.c — the trainer backends by the plan's backend name: the cpu executor, and the
 * device layer for sim and cuda. A new backend is one file and one line here. The only place in
 * runtime/train that reads a backend's name; everything else asks its capabilities (backend.h
 * train_backend_caps). Never: step logic. */
#include <string.h>

#include "backend.h"

static const struct {
    const char *backend;
    const train_backend_i *i;
    int (*open)(train_backend *b, const plan_t *p, const char *plan_path, int B, int T, hyp_err *e);
} BACKENDS[] = {
    {"cpu", &train_backend_cpu_i, train_backend_cpu_open},
    {"sim", &train_backend_dev_i, train_backend_dev_open},
    {"cuda", &train_backend_dev_i, train_backend_dev_open},
};

static int find(const plan_t *p, hyp_err *e) {
    for (int i = 0; i < (int)(sizeof BACKENDS / sizeof *BACKENDS); i++)
        if (!strcmp(BACKENDS[i].backend, p->backend)) return i;
    hyp_fail(e, HYP_EINPUT, "plan: backend '%s' has no trainer backend — generate the trainer for --target cpu, sim or sm_XX", p->backend);
    return -1;
}

int train_backend_caps_of(const plan_t *p, train_backend_caps *caps, hyp_err *e) {
    int k = find(p, e);
    if (k < 0) return HYP_EINPUT;
    *caps = BACKENDS[k].i->caps;
    return HYP_OK;
}

int train_backend_open(train_backend *b, const plan_t *p, const char *plan_path, exec_t *x, const dp_t *dp, int B,
                       int T, hyp_err *e) {
    memset(b, 0, sizeof *b);
    b->x = x;
    b->dp = *dp;
    int k = find(p, e);
    if (k < 0) return HYP_EINPUT;
    b->name = BACKENDS[k].backend;
    const train_backend_caps *c = &BACKENDS[k].i->caps;
    if ((p->param_bf16 || p->grad_bf16) && !c->bf16_storage) /* gen refuses these; a hand-edited plan gets this */
        return hyp_fail(e, HYP_EINPUT, "plan: %s runs in a trainer that keeps bf16 storage (the %s backend does not) — regenerate the trainer with --target cpu",
                        p->param_bf16 ? "bf16 parameters without a master (param_storage, v2161)" : "a bf16 gradient-accumulation buffer (grad_accum, v2163)",
                        b->name);
    int rc = BACKENDS[k].open(b, p, plan_path, B, T, e);
    if (!rc && dp->opt && dp->opt->hess_span && !b->i->hess_step) {
        rc = hyp_fail(e, HYP_EINPUT, "plan: optimizer '%s' refreshes a Hessian estimate with a sampled-label pass, which the %s backend does not run — generate the trainer with --target cpu",
                      dp->opt->kind, b->name);
        train_backend_close(b);
    }
    return rc;
}
