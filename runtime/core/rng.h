/* rng.h — the runtime's one deterministic random number generator: weight init, data shuffling,
 * and any sampling. Its whole state is four uint64 words, which go into checkpoints verbatim.
 *
 * Why xoshiro256** seeded through splitmix64 (Blackman & Vigna, "Scrambled linear pseudorandom
 * number generators", 2021):
 *   - 256 bits of state, period 2^256 - 1, passes BigCrush and PractRand; fast (~1 ns/word) and
 *     branch-free, so init of a 1B-parameter model is not RNG-bound.
 *   - The state is plain data: get/set is a 32-byte copy. Integer and uniform outputs are
 *     bit-exact across machines and compilers (only 64-bit integer ops and exact conversions);
 *     normals go through libm's log/cos/sin in double and are then rounded to float, so they
 *     match across machines except in astronomically rare last-ulp ties.
 *   - splitmix64 turns any 64-bit seed (0 included) into a well-mixed, never-all-zero state, and
 *     hyp_rng_seed2 derives independent streams from (seed, stream) — e.g. (seed, epoch) for the
 *     loader's per-epoch shuffle — without the state-correlation traps of seed+1 schemes.
 *   - PCG64 would do as well but needs 128-bit multiplies; the Mersenne Twister has a 2.5 KB
 *     state and fails linearity tests. torch's generator cannot be matched bit-for-bit anyway.
 *
 * Normal variates use Box–Muller in double precision. hyp_rng_normal returns one value per call
 * (discarding the pair's second value) so the state stays the four words; hyp_rng_fill_normal
 * uses both values of each pair and is the fast path for init.
 */
#ifndef HYP_RNG_H
#define HYP_RNG_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    uint64_t s[4];
} hyp_rng;

/* Seeds from one 64-bit value (any value, 0 included) via splitmix64. */
void hyp_rng_seed(hyp_rng *r, uint64_t seed);
/* Seeds an independent stream: the same (seed, stream) always gives the same sequence, and
 * different streams are decorrelated (both words are mixed through splitmix64). */
void hyp_rng_seed2(hyp_rng *r, uint64_t seed, uint64_t stream);

/* Next 64 random bits (xoshiro256**). */
uint64_t hyp_rng_u64(hyp_rng *r);
/* Next 32 random bits (the high half of a u64 draw: the better bits). */
uint32_t hyp_rng_u32(hyp_rng *r);
/* Uniform integer in [0, n) without modulo bias (Lemire's method). n == 0 returns 0. */
uint64_t hyp_rng_below(hyp_rng *r, uint64_t n);
/* Uniform float in [0, 1): 24 random bits / 2^24 — every value exactly representable. */
float hyp_rng_uniform(hyp_rng *r);
/* Uniform double in [0, 1): 53 random bits / 2^53. */
double hyp_rng_uniform_f64(hyp_rng *r);
/* One standard normal N(0, 1) variate (Box–Muller; uses two uniforms). */
float hyp_rng_normal(hyp_rng *r);
/* out[i] = mean + std * N(0, 1) for i < n, using both Box–Muller outputs of each pair. */
void hyp_rng_fill_normal(hyp_rng *r, float *out, size_t n, float mean, float std);
/* out[i] uniform in [lo, hi). */
void hyp_rng_fill_uniform(hyp_rng *r, float *out, size_t n, float lo, float hi);

/* Checkpointing: the state is exactly four words. set refuses the all-zero state (xoshiro's one
 * fixed point, which no seeding can produce): returns 0 on success, -1 if refused. */
void hyp_rng_get_state(const hyp_rng *r, uint64_t out[4]);
int hyp_rng_set_state(hyp_rng *r, const uint64_t in[4]);

/* Advances the generator by 2^128 draws (xoshiro's jump): 2^128 non-overlapping sub-streams. */
void hyp_rng_jump(hyp_rng *r);

/* The splitmix64 mixer on its own (a good 64-bit hash of x; used for seeding). */
uint64_t hyp_splitmix64(uint64_t *x);

#endif
