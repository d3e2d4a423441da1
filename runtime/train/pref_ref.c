/* pref_ref.c — the online frozen reference model (pref_ref.h): its executor, and its weights to
 * and from the checkpoint directory. Never: gradients or optimizer state. */
#include "pref_ref.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "fsio.h"

struct pref_ref {
    exec_t x;
    int inited;
};

int pref_ref_open(pref_ref **out, exec_t *x, hyp_err *e) {
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
    if (x->z3 && (rc = exec_z3_gather_full(x, x->params, r->x.params, e))) { /* ZeRO-3: the shards, gathered (collective) */
        pref_ref_close(r);
        return rc;
    }
    if (!x->z3) memcpy(r->x.params, x->params, sizeof(float) * (size_t)x->p->param_floats);
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

typedef struct {
    char magic[8];
    uint64_t n, sum;
} ref_model_header;

int pref_ref_save(const pref_ref *r, const char *path, hyp_err *e) {
    size_t n = (size_t)r->x.p->param_floats, sz = sizeof(ref_model_header) + sizeof(float) * n;
    char *buf = malloc(sz);
    if (!buf) return hyp_fail(e, HYP_EFAIL, "online reference: out of memory for %s", path);
    ref_model_header h = {"HYPRFM01", (uint64_t)n, XXH3_64bits(r->x.params, sizeof(float) * n)};
    memcpy(buf, &h, sizeof h);
    memcpy(buf + sizeof h, r->x.params, sizeof(float) * n);
    int rc = hyp_fs_write_atomic(path, buf, sz, e);
    free(buf);
    return rc;
}

int pref_ref_load(pref_ref *r, const char *path, hyp_err *e) {
    size_t n = (size_t)r->x.p->param_floats, got = 0;
    char *buf = NULL;
    if (!hyp_fs_exists(path))
        return hyp_fail(e, HYP_EINPUT, "%s: a resumed run with reference online needs the frozen weights its start wrote here — resume with the --ckpt-dir of that run, or start anew",
                        path);
    int rc = hyp_fs_read_small(path, sizeof(ref_model_header) + sizeof(float) * n + 1, &buf, &got, e);
    if (rc) {
        free(buf);
        return hyp_fail(e, HYP_EINPUT, "%s: the frozen reference weights cannot be read (larger than this model's, or unreadable) — resume with the --ckpt-dir of that run, or start anew",
                        path);
    }
    ref_model_header h;
    int bad = got != sizeof h + sizeof(float) * n;
    if (!bad) {
        memcpy(&h, buf, sizeof h);
        bad = memcmp(h.magic, "HYPRFM01", 8) || h.n != (uint64_t)n || h.sum != XXH3_64bits(buf + sizeof h, sizeof(float) * n);
    }
    if (!bad) memcpy(r->x.params, buf + sizeof h, sizeof(float) * n);
    free(buf);
    if (bad)
        return hyp_fail(e, HYP_EINPUT, "%s: the frozen reference weights are truncated, corrupt or of another model (%zu parameters expected) — resume with the --ckpt-dir of that run, or start anew",
                        path, n);
    exec_params_changed(&r->x);
    return HYP_OK;
}
