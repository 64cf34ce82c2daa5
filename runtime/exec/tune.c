/* runtime/exec/tune.c — which way a tuned library convolution runs
 * (dpc --conv auto): the library or its im2col alternative, measured once
 * per process and descriptor by the executor (exec.c run_conv) and shared
 * by every replica, so replicas of one process run the same arithmetic.
 * Another process measures again and may choose differently: --conv
 * library and im2col are the choices that are the same everywhere. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <inttypes.h>

#include "runtime/check.h"
#include "runtime/env.h"
#include "runtime/exec/internal.h"

typedef struct choice {
    cg_conv d;
    int way;
    struct choice *next;
} choice;

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static choice *choices;

int rt_conv_choice_get(const cg_conv *d) {
    pthread_mutex_lock(&mu);
    const choice *c = choices;
    while (c && !cg_conv_equal(&c->d, d)) c = c->next;
    int way = c ? c->way : RT_CONV_UNKNOWN;
    pthread_mutex_unlock(&mu);
    return way;
}

void rt_conv_choice_set(const cg_conv *d, int way, double lib_s, double alt_s) {
    pthread_mutex_lock(&mu);
    choice *c = choices;
    while (c && !cg_conv_equal(&c->d, d)) c = c->next;
    if (!c) { /* the first replica's measurement stands */
        c = calloc(1, sizeof *c);
        RT_CHECK_ALLOC(c);
        c->d = *d;
        c->way = way;
        c->next = choices;
        choices = c;
        if (rt_debug_level() >= 1 || rt_env_int("DPC_PROFILE", 0))
            fprintf(stderr,
                    "dpc: conv %s %" PRId64 "x%" PRId64 "x%" PRId64 "x%" PRId64 " -> %" PRId64
                    " k%" PRId64 " s%" PRId64 ": library %.3f ms, im2col %.3f ms: %s\n",
                    cg_conv_dir_name(d->dir), d->N, d->C, d->H, d->W, d->K, d->kh, d->sh,
                    1e3 * lib_s, 1e3 * alt_s, way == RT_CONV_LIBRARY ? "library" : "im2col");
    }
    pthread_mutex_unlock(&mu);
}
