/* runtime/env.c — dprun's environment variables (env.h). */
#include "runtime/env.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "base/parse.h"

typedef struct {
    const char *name;
    int lo, hi; /* an integer in [lo, hi]; a flag is [0, 1] */
    int list;   /* a comma-separated list of them (OpenMP's nested counts) */
} env_var;

/* Every variable dprun reads that holds a number or a flag. DPC_MAX_MEMORY
 * (a size), DPC_COLL (a word) and the library paths are checked where they
 * are used, each with its own message. */
static const env_var vars[] = {
    {"DPC_THREADS", 1, 1024, 0},     {"OMP_NUM_THREADS", 1, 1024, 1},
    {"DPC_DEBUG", 0, 2, 0},          {"DPC_PROFILE", 0, 1, 0},
    {"DPC_CUDA_GRAPH", 0, 1, 0},     {"DPC_INPUT_OVERLAP", 0, 1, 0},
    {"DPC_CUDA_DEVICE", 0, 4096, 0}, {"DPC_SYNC", 0, 1, 0},
    {"DPC_NVRTC_LINEINFO", 0, 1, 0},
};

/* Variables dprun no longer reads, and what took their place: set, they
 * are refused, since a run that silently ignored them would not be the
 * run asked for. */
static const struct {
    const char *name, *instead;
} retired[] = {
    {"DPC_TF32", "TF32 is the plan's precision now: compile it with dpc --precision tf32"},
};

static const env_var *find(const char *name) {
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++)
        if (!strcmp(vars[i].name, name)) return &vars[i];
    return NULL;
}

/* The first value of s in [lo, hi] (every value, for a list): 0, or -1. */
static int parse(const env_var *v, const char *s, int *out) {
    char one[32];
    int first = 1;
    for (;;) {
        size_t n = v->list ? strcspn(s, ",") : strlen(s);
        if (n == 0 || n >= sizeof one) return -1;
        memcpy(one, s, n);
        one[n] = 0;
        int64_t x;
        if (base_parse_i64(one, &x) || x < v->lo || x > v->hi) return -1;
        if (first) *out = (int)x, first = 0;
        if (!s[n]) return 0;
        s += n + 1;
    }
}

int rt_env_check(char *err, size_t errlen) {
    for (size_t i = 0; i < sizeof retired / sizeof retired[0]; i++) {
        const char *s = getenv(retired[i].name);
        if (s && *s)
            return base_fail(err, errlen, "%s='%s': no longer read (%s)", retired[i].name,
                             BASE_ESC(s), retired[i].instead);
    }
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
        const env_var *v = &vars[i];
        const char *s = getenv(v->name);
        int x;
        if (!s || !*s || !parse(v, s, &x)) continue;
        if (v->lo == 0 && v->hi == 1)
            return base_fail(err, errlen, "%s='%s': must be 0 or 1", v->name, BASE_ESC(s));
        return base_fail(err, errlen, "%s='%s': must be a whole number from %d to %d%s", v->name,
                         BASE_ESC(s), v->lo, v->hi,
                         v->list ? " (or a comma-separated list of them)" : "");
    }
    return 0;
}

int rt_env_int(const char *name, int dflt) {
    const env_var *v = find(name);
    const char *s = getenv(name);
    int x;
    return v && s && *s && !parse(v, s, &x) ? x : dflt;
}

int rt_env_flag(const char *name, int dflt) { return rt_env_int(name, dflt); }
