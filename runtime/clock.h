/* runtime/clock.h — clocks as seconds in a double, for timings and rates.
 *
 * Usage:
 *     double t0 = rt_now(), c0 = rt_clock_s(CLOCK_THREAD_CPUTIME_ID);
 *     ...
 *     printf("%.3f s wall, %.3f s cpu\n", rt_now() - t0, rt_clock_s(CLOCK_THREAD_CPUTIME_ID) - c0);
 *
 * Header-only so that tools outside the library (bench/, tests/gpu/) use it
 * as they are built.
 */
#ifndef DPC_RT_CLOCK_H
#define DPC_RT_CLOCK_H

#include <time.h>

/* Clock id's reading in seconds. */
static inline double rt_clock_s(clockid_t id) {
    struct timespec t;
    clock_gettime(id, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* Monotonic seconds since an arbitrary start: differences only. */
static inline double rt_now(void) { return rt_clock_s(CLOCK_MONOTONIC); }

#endif
