/* optim_adamw8.h — AdamW with 8-bit block-wise quantized states (v2132 state_dtype q8; Dettmers et
 * al. 2022, bitsandbytes' AdamW8bit): the dynamic quantization maps and the step of one whole
 * tensor, exposed for the unit tests that compare them with tests/reference/make_adamw8bit_fixture.py.
 * Never: plan or backend knowledge (optim_adamw8.c binds them to optim.h). */
#ifndef HYP_OPTIM_ADAMW8_H
#define HYP_OPTIM_ADAMW8_H

#include <stdint.h>

#define HYP_Q8_BLOCK 256 /* elements per absmax block (bitsandbytes' BLOCKSIZE_2STATE) */

/* The 256 sorted codes of bitsandbytes' create_dynamic_map(signed, max_exponent_bits 7, total_bits 8). */
void hyp_q8_dynamic_map(int is_signed, float out[256]);
/* The index of the code nearest x in map is_signed's map (ties: the lower code), by binary search
 * (fast 0) or through the table the step uses (fast 1); the two agree for every float. */
int hyp_q8_nearest(int is_signed, float x, int fast);
/* The floats one packed state of an n-element tensor takes: ceil(n/256) absmax floats, then the n
 * uint8 codes (ceil(n/4) floats). */
int64_t hyp_q8_state_floats(int64_t n);
/* One AdamW step of a whole tensor p[n] from grad g[n] * gscale, states packed as above in sm
 * (first moment, signed map) and sv (second moment, unsigned map): per block dequantize
 * (code * absmax), op_adamw's fp32 update, new absmax = max |state| of the block, requantize to the
 * nearest code (m keeps its sign, as bitsandbytes). */
void hyp_adamw8_tensor(float *p, const float *g, float *sm, float *sv, int64_t n, float lr, float beta1, float beta2,
                       float eps, float wd, int t, float gscale);
/* The same step for a tensor that keeps fp32 states (group rule f32): m[n], v[n] plain floats,
 * op_adamw's expressions without contraction (the device's adamw8_f32_step bit for bit). */
void hyp_adamw8_f32_tensor(float *p, const float *g, float *m, float *v, int64_t n, float lr, float beta1, float beta2,
                           float eps, float wd, int t, float gscale);

#endif
