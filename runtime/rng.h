/* runtime/rng.h — the deterministic generator behind every random draw
 * (parameter init now; shuffling and augmentation later).
 *
 * xoshiro256** seeded through splitmix64, so any 64-bit seed (0 included)
 * gives a well-mixed state, and the same seed gives the same stream on
 * every machine.
 *
 * Usage:
 *     rt_rng r;
 *     rt_rng_seed(&r, seed);
 *     uint64_t x = rt_rng_next(&r);
 *     float u = rt_rng_uniform(&r);             // [0, 1)
 *     float v = rt_rng_uniform_range(&r, -a, a);
 *     rt_rng child = rt_rng_split(&r);           // an independent stream
 */
#ifndef DPC_RT_RNG_H
#define DPC_RT_RNG_H

#include <stdint.h>

typedef struct {
    uint64_t s[4];
} rt_rng;

void rt_rng_seed(rt_rng *r, uint64_t seed);
uint64_t rt_rng_next(rt_rng *r);
/* 24 random bits as a float in [0, 1): every value exactly representable. */
float rt_rng_uniform(rt_rng *r);
/* lo + (hi - lo) * u in double, rounded once to float. */
float rt_rng_uniform_range(rt_rng *r, float lo, float hi);
/* Uniform integer in [0, n) without modulo bias; n >= 1. */
uint64_t rt_rng_below(rt_rng *r, uint64_t n);
/* A new generator seeded from this one's next output. */
rt_rng rt_rng_split(rt_rng *r);

#endif
