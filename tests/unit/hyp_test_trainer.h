/* hyp_test_trainer.h — a cpu trainer the C tests load from a directory `gen` wrote (plan.json), with
 * parameters initialized by the cpu rule and seed 1234, and find_buf to look up a plan buffer by
 * name. Include after hyp_test.h (failures are reported with its check()). Header-only; it must
 * never run the generator itself: each test writes its own gen command line. */
#ifndef HYP_TEST_TRAINER_H
#define HYP_TEST_TRAINER_H

#include <stdio.h>
#include <string.h>

#include "exec.h"
#include "plan.h"

typedef struct {
    plan_t p;
    exec_t x;
    int ok;
} trainer;

/* Loads dir/plan.json into tr (zeroed by the caller) and initializes its parameters; a failure is
 * one failed check "load" and returns 0. */
static inline int trainer_load(trainer *tr, const char *dir) {
    char path[600];
    snprintf(path, sizeof path, "%s/plan.json", dir);
    hyp_err e;
    if (plan_load(path, &tr->p, &e) != HYP_OK || exec_init(&tr->x, &tr->p, &e) != HYP_OK) {
        check(0, "load", "%s", e.msg);
        return 0;
    }
    exec_init_params(&tr->x, 1234);
    tr->ok = 1;
    return 1;
}

static inline void close_trainer(trainer *tr) {
    if (!tr->ok) return;
    exec_free(&tr->x);
    plan_free(&tr->p);
}

/* The index of the plan buffer called name, -1 when there is none. */
static inline int find_buf(const plan_t *p, const char *name) {
    for (int i = 0; i < p->n_bufs; i++)
        if (!strcmp(p->bufs[i].name, name)) return i;
    return -1;
}
#endif
