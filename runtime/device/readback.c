/* runtime/device/readback.c — device results read without a host wait
 * (device.h's rt_readback): copies into the backend's host memory behind
 * the queued work, and a mark to wait for only when the bytes are needed. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "runtime/check.h"
#include "runtime/device/device.h"

struct rt_readback {
    rt_backend *be;
    unsigned char *host;
    size_t cap;
    uint64_t mark; /* after the latest add */
    int pending;   /* adds not yet waited for */
    char why[512]; /* a failure while growing, for the next wait */
};

rt_readback *rt_readback_new(rt_backend *be) {
    rt_readback *rb = calloc(1, sizeof *rb);
    RT_CHECK_ALLOC(rb);
    rb->be = be;
    return rb;
}

static int settle(rt_readback *rb, char *err, size_t errlen) {
    if (!rb->pending) return 0;
    rb->pending = 0;
    return rt_backend_wait_mark(rb->be, rb->mark, err, errlen);
}

void rt_readback_add(rt_readback *rb, size_t off, const void *src, size_t bytes) {
    rt_backend *be = rb->be;
    if (off + bytes > rb->cap) {
        /* The first reads only: later ones fit what earlier ones made. */
        size_t cap = rb->cap ? rb->cap : 256;
        while (cap < off + bytes) cap *= 2;
        char why[sizeof rb->why];
        unsigned char *h = rt_backend_host_alloc(be, cap, why, sizeof why);
        if (!h) { /* kept for the next wait; this add reads nothing */
            if (!rb->why[0]) snprintf(rb->why, sizeof rb->why, "%s", why);
            return;
        }
        if (settle(rb, why, sizeof why)) {
            memset(h, 0, cap);
            if (!rb->why[0]) snprintf(rb->why, sizeof rb->why, "%s", why);
        }
        if (rb->host) memcpy(h, rb->host, rb->cap);
        rt_backend_host_free(be, rb->host);
        rb->host = h;
        rb->cap = cap;
    }
    char why[sizeof rb->why];
    if (rt_backend_copy_out_async(be, rb->host + off, src, bytes, why, sizeof why) ||
        rt_backend_mark(be, &rb->mark, why, sizeof why)) {
        if (!rb->why[0]) snprintf(rb->why, sizeof rb->why, "%s", why);
        return;
    }
    rb->pending = 1;
}

const void *rt_readback_wait(rt_readback *rb, char *err, size_t errlen) {
    if (rb->why[0]) {
        base_fail(err, errlen, "%s", rb->why);
        rb->why[0] = 0;
        return NULL;
    }
    return settle(rb, err, errlen) ? NULL : rb->host;
}

void rt_readback_free(rt_readback *rb) {
    if (!rb) return;
    char why[512];
    settle(rb, why, sizeof why); /* no copy may land in freed memory */
    rt_backend_host_free(rb->be, rb->host);
    free(rb);
}
