/* tests/harness.h — the tiny unit-test harness.
 *
 * Usage (one file per module, tests/unit/test_NAME.c):
 *     #include "tests/harness.h"
 *     TEST(shapes_of_conv) { CHECK(1 + 1 == 2); CHECK_NEAR(x, 1.0, 1e-6); }
 *     int main(void) { RUN(shapes_of_conv); return harness_done(); }
 *
 * A test passes when none of its CHECKs failed. harness_done() prints
 * `N passed, N failed` (tests/run.sh adds the files' lines up) and returns
 * the exit status. RUN_TIER("full", name) runs a test only in the suite's
 * tiers from that one up (DPC_TIER, set by tests/run.sh: check < test <
 * full; test when unset), for coverage too slow for the tiers below. A
 * test that takes a second or more says how long, on stderr.
 */
#ifndef DPC_TEST_HARNESS_H
#define DPC_TEST_HARNESS_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int harness_passed, harness_failed, harness_current_failed;
static const char *harness_current;

#define TEST(name) static void name(void)

#define CHECK(cond)                                                                               \
    do {                                                                                          \
        if (!(cond)) {                                                                            \
            fprintf(stderr, "%s:%d: %s: check failed: %s\n", __FILE__, __LINE__, harness_current, \
                    #cond);                                                                       \
            harness_current_failed = 1;                                                           \
        }                                                                                         \
    } while (0)

#define CHECK_MSG(cond, ...)                                                                      \
    do {                                                                                          \
        if (!(cond)) {                                                                            \
            fprintf(stderr, "%s:%d: %s: check failed: %s: ", __FILE__, __LINE__, harness_current, \
                    #cond);                                                                       \
            fprintf(stderr, __VA_ARGS__);                                                         \
            fputc('\n', stderr);                                                                  \
            harness_current_failed = 1;                                                           \
        }                                                                                         \
    } while (0)

#define CHECK_NEAR(a, b, tol)                                                                     \
    do {                                                                                          \
        double ha_ = (double)(a), hb_ = (double)(b);                                              \
        if (!(fabs(ha_ - hb_) <= (tol))) {                                                        \
            fprintf(stderr, "%s:%d: %s: %s = %.9g, expected %.9g (tol %g)\n", __FILE__, __LINE__, \
                    harness_current, #a, ha_, hb_, (double)(tol));                                \
            harness_current_failed = 1;                                                           \
        }                                                                                         \
    } while (0)

/* Tolerances say why they are what they are: derived from the
 * arithmetic with these, or a noise floor measured in the same test.
 * F32_U, F64_U: the unit roundoff, a correctly rounded result's relative
 * error at most. A sum of n terms in either, in any order, is within
 * n * u * sum |terms| (Higham, recursive summation; a dot product's terms
 * are its products). */
#define F32_U                     0x1p-24
#define F64_U                     0x1p-53
#define F32_SUM_BOUND(n, sum_abs) (F32_U * (double)(n) * (sum_abs))
#define F64_SUM_BOUND(n, sum_abs) (F64_U * (double)(n) * (sum_abs))

/* An f32 result against the same computed in another order (or in f64),
 * relative to |ref| + rms(ref): the rounding is random-signed, growing as
 * sqrt(n) * 2^-24 rather than the worst case's n * 2^-24, and is under
 * 100 * 2^-24 in every such test here: 2^8 * 2^-24. Where a library picks
 * the order per CPU (OpenBLAS, oneDNN), add a floor measured in the test. */
#define F32_REORDER_TOL (256 * F32_U)

#define CHECK_STR(a, b)                                                                      \
    do {                                                                                     \
        const char *hs_a = (a), *hs_b = (b);                                                 \
        if (!hs_a || !hs_b || strcmp(hs_a, hs_b) != 0) {                                     \
            fprintf(stderr, "%s:%d: %s: %s = \"%s\", expected \"%s\"\n", __FILE__, __LINE__, \
                    harness_current, #a, hs_a ? hs_a : "(null)", hs_b ? hs_b : "(null)");    \
            harness_current_failed = 1;                                                      \
        }                                                                                    \
    } while (0)

static inline double harness_now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

#define RUN(name)                                                                       \
    do {                                                                                \
        harness_current = #name;                                                        \
        harness_current_failed = 0;                                                     \
        double harness_t0_ = harness_now();                                             \
        name();                                                                         \
        double harness_s_ = harness_now() - harness_t0_;                                \
        if (harness_s_ >= 1.0) fprintf(stderr, "time %s: %.1f s\n", #name, harness_s_); \
        if (harness_current_failed) {                                                   \
            harness_failed++;                                                           \
            fprintf(stderr, "FAIL %s\n", #name);                                        \
        } else {                                                                        \
            harness_passed++;                                                           \
        }                                                                               \
    } while (0)

/* Whether the suite's tier (DPC_TIER) includes tier `want`. */
static inline int harness_tier_at_least(const char *want) {
    static const char *const order[] = {"check", "test", "full"};
    const char *have = getenv("DPC_TIER");
    int h = 1, w = 1;
    for (int i = 0; i < 3; i++) {
        if (have && !strcmp(have, order[i])) h = i;
        if (!strcmp(want, order[i])) w = i;
    }
    return h >= w;
}

#define RUN_TIER(tier, name)                        \
    do {                                            \
        if (harness_tier_at_least(tier)) RUN(name); \
    } while (0)

static inline int harness_done(void) {
    printf("%d passed, %d failed\n", harness_passed, harness_failed);
    return harness_failed ? 1 : 0;
}

#endif
