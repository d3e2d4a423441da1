/* train_guard.h — the trainer's side of v2176 fault tolerance: the guard (guard.h) and the
 * fault-injection test hook (HYP_FAULT_INJECT) wired into the step driver's hooks (backend.h):
 * injected gradient faults before the reduction, the verdict on the global loss and norm before
 * the update, all-reduced (max) so every rank skips the same steps. Rolling back is the trainer's
 * (it owns the checkpoints); this file says when. Never: checkpoints, printing of progress. */
#ifndef HYP_TRAIN_GUARD_H
#define HYP_TRAIN_GUARD_H

#include "backend.h"
#include "guard.h"

/* The exit status of a run that kept diverging: max_bad_steps bad steps in a row with no
 * checkpoint to roll back to, or more than max_rollbacks rollbacks. */
#define HYP_EXIT_DIVERGED 5

typedef struct {
    int active;             /* the plan's guard section (v2176): skip and roll back */
    hyp_guard g;
    hyp_fault f;            /* HYP_FAULT_INJECT */
    int loss_faults;        /* this step's loss faults, for the gate */
    hyp_coll *coll;
    int world, rank;
    int last_bad;           /* the agreed verdict on the last step (HYP_GUARD_* bits, 0: good) */
    int warned_ceiling;     /* without the guard: the divergence warning was printed */
    char reason[256];       /* why the last step was bad */
} train_guard;

/* From the plan (guard section) and the environment (HYP_FAULT_INJECT; a malformed value is
 * HYP_EINPUT). vocab: the plan's V (the loss ceiling). */
int train_guard_open(train_guard *tg, const plan_t *p, const dp_t *d, hyp_err *e);
/* Installs the hooks on b when the guard is active or faults are planted (again after the
 * backend is reopened). */
void train_guard_attach(train_guard *tg, train_backend *b);
/* After a step: records the verdict (skipped: the driver skipped the update). Returns 1 when
 * it is time to roll back. Without an active guard it only watches the loss against the ceiling:
 * *warn = 1 the first time it is above (the caller prints the warning). */
int train_guard_after(train_guard *tg, double loss, double norm, int skipped, int *warn);
/* The last step was bad: no checkpoint may be written now. */
int train_guard_bad(const train_guard *tg);

#endif
