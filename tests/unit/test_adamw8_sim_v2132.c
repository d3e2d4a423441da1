/* test_adamw8_sim_v2132.c — v2132 state_dtype q8 on the device: templates/adamw8.cu.lua's
 * adamw8_block_step rendered by `gen render` and run under the CPU simulator against the cpu step
 * (runtime/optim/optim_adamw8.c hyp_adamw8_tensor, itself bit-identical to bitsandbytes' algorithm
 * in test_adamw8_v2132) on the same parameters, gradients and packed states, for 6 steps, on
 * tensors whose sizes are not multiples of the 256-element block (1, 77, 300, 4099), with
 * gradients that mix magnitudes across 8 decades, exact zeros and a whole all-zero block (the
 * zero-code path), and a grad scale; and adamw8_f32_step, the step of the tensors that keep fp32
 * states in a q8 run, against hyp_adamw8_f32_tensor.
 * Tolerance: none — bit-identical parameters, absmax and codes after every step. The kernel writes
 * every float operation as an _rn intrinsic in optim_adamw8.c's order (no contraction: the sim
 * compiles without FMA instructions and the cpu file with -ffp-contract=off), the block's absmax
 * is a max (exact in any order) and both pick the nearest code with ties to the lower one.
 * The trainer-level test (tests/gen/test_v2132_q8_dev.sh) then only checks the plumbing.
 * Needs g++ (the simulator's compiler). Never: tolerances, files beyond its build directory. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "optim_adamw8.h"
#include "sim.h"

#include "hyp_test.h"

#include "sim_kernel_test.h"

static float grad_value(long i, int step) {
    float u = frand();
    int decade = irand(8); /* 1e-7 .. 1 */
    float g = u * powf(10.0f, -(float)decade);
    if ((i + step) % 13 == 0) g = 0.0f;
    return g;
}

static void q8_case(mod_t *md, const float *maps, long n) {
    const long nb = (n + HYP_Q8_BLOCK - 1) / HYP_Q8_BLOCK, sf = hyp_q8_state_floats(n);
    float *p_cpu = frandbuf(n, 0.5f), *p_sim = fcopy(p_cpu, n);
    float *sm_cpu = fbuf(sf), *sv_cpu = fbuf(sf), *sm_sim = fbuf(sf), *sv_sim = fbuf(sf);
    float *g = fbuf(n), *gscale = fbuf(1);
    const float lr = 1e-3f, beta1 = 0.9f, beta2 = 0.95f, eps = 1e-8f, wd = 0.1f;
    gscale[0] = 0.8f;
    long bad_p = 0, bad_s = 0;
    for (int t = 1; t <= 6; t++) {
        for (long i = 0; i < n; i++) g[i] = grad_value(i, t);
        if (n > 2 * HYP_Q8_BLOCK) memset(g + HYP_Q8_BLOCK, 0, sizeof(float) * HYP_Q8_BLOCK); /* block 1 all zero */
        hyp_adamw8_tensor(p_cpu, g, sm_cpu, sv_cpu, n, lr, beta1, beta2, eps, wd, t, gscale[0]);
        /* as optim_adamw8.c step_device: the bias corrections in double, rounded, inverted in float */
        float ibc1 = 1.0f / (float)(1.0 - pow((double)beta1, (double)t));
        float ibc2 = 1.0f / (float)(1.0 - pow((double)beta2, (double)t));
        void *args[] = {&p_sim, &sm_sim, &sv_sim, &g, &maps, &n, (void *)&lr, (void *)&beta1, (void *)&beta2,
                        (void *)&eps, (void *)&wd, &ibc1, &ibc2, &gscale};
        launch(md, "adamw8_block_step", (unsigned)nb, 1, 1, HYP_Q8_BLOCK, args);
        bad_p += memcmp(p_cpu, p_sim, sizeof(float) * (size_t)n) != 0;
        bad_s += memcmp(sm_cpu, sm_sim, sizeof(float) * (size_t)sf) != 0;
        bad_s += memcmp(sv_cpu, sv_sim, sizeof(float) * (size_t)sf) != 0;
    }
    char nm[160];
    check(bad_p == 0, NAME(nm, "test_v2132_sim_params_bitwise n=%ld", n), "%ld of 6 steps differ", bad_p);
    check(bad_s == 0, NAME(nm, "test_v2132_sim_states_bitwise n=%ld", n), "%ld state comparisons of 12 differ", bad_s);
    if (n > 2 * HYP_Q8_BLOCK) /* block 1 saw only zero gradients: absmax 0 both, the zero-code path */
        check(sm_sim[1] == 0.0f && sv_sim[1] == 0.0f, NAME(nm, "test_v2132_sim_zero_grad_block n=%ld", n),
              "block 1's absmax m %g v %g", sm_sim[1], sv_sim[1]);
}

/* adamw8_f32_step (a tensor that keeps fp32 states in a q8 run: under q8_min_size, or an
 * embedding) against hyp_adamw8_f32_tensor, bit for bit for the same reasons. */
static void f32_case(mod_t *md, long n) {
    float *p_cpu = frandbuf(n, 0.5f), *p_sim = fcopy(p_cpu, n);
    float *m_cpu = fbuf(n), *v_cpu = fbuf(n), *m_sim = fbuf(n), *v_sim = fbuf(n), *g = fbuf(n), *gscale = fbuf(1);
    const float lr = 1e-3f, beta1 = 0.9f, beta2 = 0.95f, eps = 1e-8f, wd = 0.0f;
    gscale[0] = 0.8f;
    long bad = 0;
    for (int t = 1; t <= 6; t++) {
        for (long i = 0; i < n; i++) g[i] = grad_value(i, t);
        hyp_adamw8_f32_tensor(p_cpu, g, m_cpu, v_cpu, n, lr, beta1, beta2, eps, wd, t, gscale[0]);
        float ibc1 = 1.0f / (float)(1.0 - pow((double)beta1, (double)t));
        float ibc2 = 1.0f / (float)(1.0 - pow((double)beta2, (double)t));
        void *args[] = {&p_sim, &m_sim, &v_sim, &g, &n, (void *)&lr, (void *)&beta1, (void *)&beta2,
                        (void *)&eps, (void *)&wd, &ibc1, &ibc2, &gscale};
        launch(md, "adamw8_f32_step", cdiv(n, HYP_Q8_BLOCK), 1, 1, HYP_Q8_BLOCK, args);
        bad += memcmp(p_cpu, p_sim, sizeof(float) * (size_t)n) || memcmp(m_cpu, m_sim, sizeof(float) * (size_t)n) ||
               memcmp(v_cpu, v_sim, sizeof(float) * (size_t)n);
    }
    char nm[160];
    check(bad == 0, NAME(nm, "test_v2132_sim_f32_rule_bitwise n=%ld", n), "%ld of 6 steps differ", bad);
}

int main(void) {
    snprintf(g_tmp, sizeof g_tmp, "%s/tests/adamw8_sim", HYP_BINARY_DIR);
    char mk[400];
    snprintf(mk, sizeof mk, "mkdir -p '%s'", g_tmp);
    if (system(mk) != 0) return 1;
    mod_t md;
    if (open_family(&md, "adamw8", "", "q8")) return hyp_test_finish();
    float *maps = fbuf(512);
    hyp_q8_dynamic_map(1, maps);
    hyp_q8_dynamic_map(0, maps + 256);
    const long sizes[] = {1, 77, 300, 4099};
    for (int i = 0; i < 4; i++) q8_case(&md, maps, sizes[i]);
    f32_case(&md, 77);
    f32_case(&md, 4099);
    close_family(&md);
    free_all();
    return hyp_test_finish();
}
