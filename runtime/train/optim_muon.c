/* optim_muon.c — Muon (Keller Jordan et al. 2024, "Muon: An optimizer for hidden layers in neural
 * networks"; the update of github.com/KellerJordan/Muon, MuonWithAuxAdam) as an optimizer of
 * optim.h. Two rules, named by the plan's groups: "muon" on the hidden 2-D weight matrices,
 * "adamw" on everything else (embeddings, output head, norm gains, biases). States m and v (fp32,
 * packed per tensor): on a Muon matrix m is the momentum buffer and there is no v (0 floats); on
 * an AdamW tensor they are Adam's moments. A Muon matrix W [R, K] with gradient g (times the clip factor):
 *     m  = beta*m + (1-beta)*g                          (momentum.lerp_(grad, 1 - beta))
 *     u  = nesterov ? beta*m + (1-beta)*g : m           (grad.lerp_(momentum, beta))
 *     O  = NewtonSchulz5(u)                             (quintic, a,b,c = 3.4445, -4.7750, 2.0315)
 *     O *= max(1, R/K)^0.5        (the reference's shape scaling; "match_adamw": 0.2*sqrt(max(R,K)))
 *     W *= 1 - lr*wd;  W -= lr*O
 * The Newton-Schulz GEMMs run in fp32 through oneDNN's sgemm (ops_cpu.c op_newton_schulz5); the
 * reference runs them in bf16 because tensor cores make bf16 fast on a GPU — on the cpu backend
 * fp32 sgemm is the fast path, and fp32 keeps the iteration within rounding of the float64
 * fixture (tests/reference/make_fixtures.py).
 * The update needs whole matrices (shard_matrix = 1): ZeRO, which shards by floats, is refused by
 * exec_init; there is no device kernel (the trainer refuses sim/cuda targets, gen already does).
 * Never: scheduling, clipping or ZeRO (the callers do those). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ops_cpu.h"
#include "optim.h"

static const hyp_optim_hyper_range H[] = {
    {"momentum", 0, 1, 0}, {"nesterov", 0, 1, 0}, {"ns_steps", 1, 10, 0}, {"match_adamw", 0, 1, 0},
    {"beta1", 0, 0.999999, 0}, {"beta2", 0, 0.999999, 0}, {"eps", 0, 1, 0},
};
#define NH ((int)(sizeof H / sizeof *H))

static int check(const hyp_optim_cfg *c, hyp_err *e) {
    int rc = hyp_optim_check_hypers(c, "Muon", H, NH, e);
    if (rc) return rc;
    int muon = 0;
    for (int g = 0; g < c->n_groups; g++) {
        if (strcmp(c->groups[g].rule, "muon") && strcmp(c->groups[g].rule, "adamw"))
            return hyp_fail(e, HYP_EINPUT, "plan: optimizer group '%s' names no rule; Muon's groups say \"muon\" or \"adamw\" — regenerate the trainer with gen",
                            c->groups[g].name);
        muon += !strcmp(c->groups[g].rule, "muon");
    }
    if (!muon) return hyp_fail(e, HYP_EINPUT, "plan: no optimizer group has rule \"muon\" — regenerate the trainer with gen");
    return HYP_OK;
}

static void step_muon(const hyp_optim_cfg *c, const hyp_optim_span *s, const hyp_optim_step *a) {
    const plan_param *t = s->tensor;
    if (!t || t->ndim != 2 || s->first != 0 || s->n != t->numel) {
        op_cpu_fail("muon: a Muon tensor must be a whole 2-D matrix (a sharded or 1-D span reached it)");
        return;
    }
    const long R = (long)t->shape[0], K = (long)t->shape[1], r = R < K ? R : K;
    const float beta = (float)hyp_optim_hyper(c, "momentum"), gs = a->grad_scale;
    const int nesterov = hyp_optim_hyper(c, "nesterov") != 0, steps = (int)hyp_optim_hyper(c, "ns_steps");
    const float lr = (float)(a->lr * s->group->lr_mult), decay = 1.0f - lr * (float)s->group->weight_decay;
    float scale = hyp_optim_hyper(c, "match_adamw") != 0 ? 0.2f * sqrtf((float)(R > K ? R : K))
                                                          : sqrtf(R > K ? (float)R / (float)K : 1.0f);
    float *u = malloc(sizeof(float) * (size_t)(4 * R * K + 2 * r * r));
    if (!u) {
        op_cpu_fail("muon: out of memory for the Newton-Schulz workspace");
        return;
    }
    float *o = u + R * K, *work = o + R * K;
    float *m = s->state[0], *p = s->param;
    const float *g = s->grad;
    for (long i = 0; i < R * K; i++) {
        float gi = g[i] * gs;
        m[i] = beta * m[i] + (1.0f - beta) * gi;
        u[i] = nesterov ? beta * m[i] + (1.0f - beta) * gi : m[i];
    }
    op_newton_schulz5(o, u, R, K, steps, 3.4445f, -4.7750f, 2.0315f, work);
    for (long i = 0; i < R * K; i++) p[i] = p[i] * decay - lr * (scale * o[i]);
    free(u);
}

static void step_span(const hyp_optim_cfg *c, const hyp_optim_span *s, const hyp_optim_step *a) {
    if (!strcmp(s->group->rule, "muon")) {
        step_muon(c, s, a);
        return;
    }
    op_adamw(s->param, s->grad, s->state[0], s->state[1], (long)s->n, (float)(a->lr * s->group->lr_mult),
             (float)hyp_optim_hyper(c, "beta1"), (float)hyp_optim_hyper(c, "beta2"), (float)hyp_optim_hyper(c, "eps"),
             (float)s->group->weight_decay, a->t, a->grad_scale);
}

/* m everywhere; v only where the AdamW rule runs (a Muon matrix keeps no second moment) */
static int64_t state_numel(const hyp_optim_cfg *c, const plan_param *t, int k) {
    return k == 1 && !strcmp(c->groups[t->group].rule, "muon") ? 0 : t->numel;
}

const hyp_optim_i hyp_optim_muon = {
    .kind = "muon",
    .n_state = 2,
    .state_name = {"m", "v"},
    .state_dtype = {HYP_DT_F32, HYP_DT_F32},
    /* MuonWithAuxAdam's names for the Adam tensors; a Muon matrix's momentum_buffer is saved as
     * its exp_avg (and its exp_avg_sq stays 0) */
    .ckpt_suffix = {".exp_avg", ".exp_avg_sq"},
    .shard_matrix = 1,
    .rules = {"muon", "adamw", NULL},
    .state_numel = state_numel,
    .check = check,
    .step_span = step_span,
    .step_device = NULL,
};
