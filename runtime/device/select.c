/* runtime/device/select.c — `--device auto|cpu|cuda`. See device.h. */
#include "runtime/device/device.h"
#include "base/err.h"
#include "base/parse.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/log.h"

/* $DPC_CUDA_DEVICE, else 0. */
static int default_ordinal(void) {
    const char *s = getenv("DPC_CUDA_DEVICE");
    if (!s || !*s) return 0;
    int64_t v;
    return base_parse_i64(s, &v) || v < 0 || v > 4096 ? -1 : (int)v;
}

/* The cuda backend, or NULL and why: "no CUDA device (REASON)" when none
 * can be used at all, the device's own error otherwise. */
static rt_backend *open_cuda(int ordinal, char *why, size_t whylen) {
    char reason[768];
    if (ordinal < 0) {
        snprintf(why, whylen, "DPC_CUDA_DEVICE='%s' is not a device number",
                 getenv("DPC_CUDA_DEVICE"));
        return NULL;
    }
    int n = rt_cuda_device_count(reason, sizeof reason);
    if (n == 0) {
        snprintf(why, whylen, "no CUDA device (%s)", reason);
        return NULL;
    }
    rt_backend *be = rt_backend_cuda(ordinal, reason, sizeof reason);
    if (!be) snprintf(why, whylen, "CUDA device %d: %s", ordinal, reason);
    return be;
}

static rt_backend *open_cpu(int ordinal, char *why, size_t whylen) {
    (void)ordinal, (void)why, (void)whylen;
    return rt_backend_cpu();
}

/* The backends `--device NAME` names. auto tries those marked `preferred`
 * in order and falls back to the first entry, which always opens. */
/* auto asks `probe` first, when there is one: a count of devices (0 +
 * why), found without loading more than the driver. */
static const struct {
    const char *name;
    rt_backend *(*open)(int ordinal, char *why, size_t whylen); /* NULL + why */
    int preferred;
    int (*probe)(char *why, size_t whylen);
} backends[] = {
    {"cpu", open_cpu, 0, NULL},
    {"cuda", open_cuda, 1, rt_cuda_device_probe},
};
#define NBACKENDS ((int)(sizeof backends / sizeof *backends))

/* "auto, cpu, cuda" */
static void choices(char *buf, size_t n) {
    size_t at = (size_t)snprintf(buf, n, "auto");
    for (int i = 0; i < NBACKENDS && at < n; i++)
        at += (size_t)snprintf(buf + at, n - at, ", %s", backends[i].name);
}

/* auto: the preferred backends in order, else the fallback. Said once per
 * process, whatever the number of replicas asking. */
static rt_backend *open_auto(int ordinal, int *is_fallback) {
    char why[1024] = "";
    for (int i = 0; i < NBACKENDS; i++) {
        if (!backends[i].preferred) continue;
        char reason[768];
        if (backends[i].probe && !backends[i].probe(reason, sizeof reason)) {
            snprintf(why, sizeof why, "no CUDA device (%s)", reason);
            continue;
        }
        rt_backend *be = backends[i].open(ordinal, why, sizeof why);
        if (be) return be;
    }
    static atomic_int told;
    /* a machine without a driver is a CPU machine: nothing to say */
    int quiet = strstr(why, RT_NO_CUDA_DRIVER ": ") && rt_debug_level() < 1;
    if (!quiet && !atomic_exchange(&told, 1)) {
        const char *r = why;
        if (!strncmp(r, "no CUDA device (", 16)) { /* already says it: keep the reason only */
            rt_log(RT_LOG_INFO, "%s: using the cpu backend", r);
        } else {
            rt_log(RT_LOG_INFO, "no CUDA device (%s): using the cpu backend", r);
        }
        fflush(stderr);
    }
    if (is_fallback) *is_fallback = 1;
    return backends[0].open(ordinal, why, sizeof why);
}

rt_backend *rt_backend_open_on(const char *device, int ordinal, int *is_fallback, char *err,
                               size_t errlen) {
    if (is_fallback) *is_fallback = 0;
    if (errlen) err[0] = 0;
    if (!device) device = "auto";
    if (!strcmp(device, "auto")) return open_auto(ordinal, is_fallback);
    for (int i = 0; i < NBACKENDS; i++) {
        if (strcmp(device, backends[i].name)) continue;
        char why[1024] = "";
        rt_backend *be = backends[i].open(ordinal, why, sizeof why);
        if (!be) base_fail(err, errlen, "--device %s: %s", device, why);
        return be;
    }
    char list[128];
    choices(list, sizeof list);
    base_fail(err, errlen, "--device: '%s' is not one of %s", device, list);
    return NULL;
}

rt_backend *rt_backend_open(const char *device, int *is_fallback, char *err, size_t errlen) {
    return rt_backend_open_on(device, default_ordinal(), is_fallback, err, errlen);
}
