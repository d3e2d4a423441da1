/* optim_reg.c — the optimizer registry: every update rule the runtime knows, by the plan's
 * optimizer.kind. A new optimizer is one file (optim_<kind>.c with its static const table) and
 * one line here. Never: update rules or plan checks (they live with each optimizer, optim.c). */
#include <string.h>

#include "optim.h"

extern const hyp_optim_i hyp_optim_adamw;
extern const hyp_optim_i hyp_optim_adamw8;
extern const hyp_optim_i hyp_optim_lion;
extern const hyp_optim_i hyp_optim_muon;
extern const hyp_optim_i hyp_optim_sfadamw;
extern const hyp_optim_i hyp_optim_adammini;
extern const hyp_optim_i hyp_optim_sophia;
extern const hyp_optim_i hyp_optim_shampoo;
extern const hyp_optim_i hyp_optim_sgd;

static const hyp_optim_i *const REGISTRY[] = {
    &hyp_optim_adamw,
    &hyp_optim_adamw8,
    &hyp_optim_lion,
    &hyp_optim_muon,
    &hyp_optim_sfadamw,
    &hyp_optim_adammini,
    &hyp_optim_sophia,
    &hyp_optim_shampoo,
    &hyp_optim_sgd,
};

const hyp_optim_i *hyp_optim_find(const char *kind) {
    for (size_t i = 0; kind && i < sizeof REGISTRY / sizeof *REGISTRY; i++)
        if (!strcmp(REGISTRY[i]->kind, kind)) return REGISTRY[i];
    return NULL;
}
