/* runtime/data/rng.c — xoshiro256** (Blackman & Vigna) seeded by splitmix64. */
#include "runtime/data/data.h"

static uint64_t splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

void rt_rng_seed(rt_rng *r, uint64_t seed) {
    for (int i = 0; i < 4; i++) r->s[i] = splitmix64(&seed);
}

static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

uint64_t rt_rng_next(rt_rng *r) {
    uint64_t *s = r->s;
    uint64_t result = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
}

float rt_rng_uniform(rt_rng *r) { return (float)(rt_rng_next(r) >> 40) * 0x1.0p-24f; }

float rt_rng_uniform_range(rt_rng *r, float lo, float hi) {
    double u = (double)(rt_rng_next(r) >> 40) * 0x1.0p-24;
    return (float)((double)lo + ((double)hi - (double)lo) * u);
}

uint64_t rt_rng_below(rt_rng *r, uint64_t n) {
    /* Reject the top partial block so every residue is equally likely. */
    uint64_t limit = UINT64_MAX - UINT64_MAX % n, x;
    do x = rt_rng_next(r);
    while (x >= limit);
    return x % n;
}

rt_rng rt_rng_split(rt_rng *r) {
    rt_rng c;
    rt_rng_seed(&c, rt_rng_next(r));
    return c;
}

uint64_t rt_rng_key(uint64_t seed, uint64_t a, uint64_t b) {
    uint64_t x = seed, k = splitmix64(&x);
    x = k ^ a, k = splitmix64(&x);
    x = k ^ b;
    return splitmix64(&x);
}
