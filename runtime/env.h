/* runtime/env.h — the environment variables dprun reads, each read and
 * checked in one place.
 *
 * Usage:
 *     if (rt_env_check(err, sizeof err)) die(err);  // once, at start-up
 *     int n = rt_env_int("DPC_THREADS", 0);          // its value, or the default
 *     if (rt_env_flag("DPC_CUDA_GRAPH", 1)) ...;     // 0/1 variables
 *
 * A variable that is set but malformed ("abc", -1, 1025, "yes") is refused
 * by rt_env_check, naming it: a silently ignored DPC_THREADS=-1 would run
 * with another thread count than asked. Set to the empty string counts as
 * unset. The accessors trust rt_env_check's verdict and return the default
 * for a malformed value, so a library caller that skipped the check still
 * gets a defined value. */
#ifndef DPC_RUNTIME_ENV_H
#define DPC_RUNTIME_ENV_H

#include <stddef.h>

/* 0, or -1 + "NAME='value': why" for the first malformed variable. */
int rt_env_check(char *err, size_t errlen);
/* The value of an integer variable (the first of an OMP_NUM_THREADS list),
 * or dflt when unset, empty or malformed. */
int rt_env_int(const char *name, int dflt);
/* The value of a 0/1 variable, or dflt when unset, empty or malformed. */
int rt_env_flag(const char *name, int dflt);

#endif
