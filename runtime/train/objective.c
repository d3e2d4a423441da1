/* objective.c — what every objective's open and the trainer's exit share (objective.h). Never: an
 * objective itself (obj_tokens.c, pref.c, grpo.c). */
#include <stdlib.h>
#include <string.h>

#include "objective.h"

void *train_objective_alloc(train_objective *o, const train_objective_i *i, size_t impl_bytes, const char *label, hyp_err *e) {
    memset(o, 0, sizeof *o);
    void *impl = calloc(1, impl_bytes);
    if (!impl) {
        hyp_fail(e, HYP_EFAIL, "out of memory");
        return NULL;
    }
    o->i = i, o->impl = impl, o->label = label;
    return impl;
}

void train_objective_close(train_objective *o) {
    if (o->i && o->i->close) o->i->close(o);
    memset(o, 0, sizeof *o);
}
