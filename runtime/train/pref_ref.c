/* pref_ref.c — the online frozen reference model (pref_ref.h). */
#include "pref_ref.h"

#include <stdlib.h>
#include <string.h>

struct pref_ref {
    exec_t x;
    int inited;
};

int pref_ref_open(pref_ref **out, const exec_t *x, hyp_err *e) {
    *out = NULL;
    pref_ref *r = calloc(1, sizeof *r);
    if (!r) return hyp_fail(e, HYP_EFAIL, "online reference: out of memory");
    int rc = exec_init(&r->x, x->p, e);
    r->inited = rc == HYP_OK;
    if (!rc) rc = exec_bind(&r->x, x->B, x->T, e);
    if (rc) {
        pref_ref_close(r);
        return rc;
    }
    memcpy(r->x.params, x->params, sizeof(float) * (size_t)x->p->param_floats);
    *out = r;
    return HYP_OK;
}

exec_t *pref_ref_exec(pref_ref *r) { return &r->x; }

double pref_ref_bytes(const pref_ref *r) { return (double)r->x.p->param_floats * sizeof(float); }

void pref_ref_close(pref_ref *r) {
    if (!r) return;
    if (r->inited) exec_free(&r->x);
    free(r);
}
