/* runtime/device/hooks.c — the rt_backend_* wrappers (device.h): an
 * optional hook's default where the backend has none, and the backend's
 * first device failure kept, so that every later device call fails at once
 * with its message. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "runtime/device/device.h"

/* be->failed: 0 working, 1 the first failure's message being written, 2
 * failed. Replicas sharing a backend (cpu) call it from several threads:
 * the first to fail writes the message, the others wait for it. */
static int failed(rt_backend *be, char *err, size_t errlen) {
    int s = __atomic_load_n(&be->failed, __ATOMIC_ACQUIRE);
    if (s == 0) return 0;
    while (s == 1) s = __atomic_load_n(&be->failed, __ATOMIC_ACQUIRE);
    if (err && errlen) snprintf(err, errlen, "%s", be->failure);
    return -1;
}

/* After a hook failed with message e: keeps e as the backend's failure
 * when it is the first (whole, whatever the caller's err holds) and gives
 * the caller the kept one. Returns -1. */
static int keep(rt_backend *be, const char *e, char *err, size_t errlen) {
    if (be->capturing) { /* the capture's failure, not the device's */
        if (err && errlen) snprintf(err, errlen, "%s", e);
        return -1;
    }
    int zero = 0;
    if (__atomic_compare_exchange_n(&be->failed, &zero, 1, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
        snprintf(be->failure, sizeof be->failure, "%s",
                 *e ? e : "a device call failed without saying why");
        __atomic_store_n(&be->failed, 2, __ATOMIC_RELEASE);
    }
    return failed(be, err, errlen);
}

/* A hook's message, whole: as long as the failure it may become. */
typedef char hook_message[sizeof((rt_backend *)0)->failure];

int rt_backend_failed(rt_backend *be, char *err, size_t errlen) { return failed(be, err, errlen); }

void *rt_backend_alloc(rt_backend *be, size_t bytes, char *err, size_t errlen) {
    if (failed(be, err, errlen)) return NULL;
    hook_message e = "";
    void *p = be->alloc(be, bytes, e, sizeof e);
    if (!p) keep(be, e, err, errlen);
    return p;
}

void rt_backend_dealloc(rt_backend *be, void *ptr) {
    if (ptr) be->free(be, ptr);
}

int rt_backend_copy_in(rt_backend *be, void *dst, const void *host, size_t bytes, char *err,
                       size_t errlen) {
    if (failed(be, err, errlen)) return -1;
    hook_message e = "";
    return be->copy_in(be, dst, host, bytes, e, sizeof e) ? keep(be, e, err, errlen) : 0;
}

int rt_backend_copy_out(rt_backend *be, void *host, const void *src, size_t bytes, char *err,
                        size_t errlen) {
    if (failed(be, err, errlen)) return -1;
    hook_message e = "";
    return be->copy_out(be, host, src, bytes, e, sizeof e) ? keep(be, e, err, errlen) : 0;
}

int rt_backend_copy(rt_backend *be, void *dst, const void *src, size_t bytes, char *err,
                    size_t errlen) {
    if (failed(be, err, errlen)) return -1;
    hook_message e = "";
    return be->copy(be, dst, src, bytes, e, sizeof e) ? keep(be, e, err, errlen) : 0;
}

/* A module that does not compile is the source's fault, not the device's:
 * not kept. */
rt_module *rt_backend_compile(rt_backend *be, const char *source, char *err, size_t errlen) {
    if (failed(be, err, errlen)) return NULL;
    return be->compile(be, source, err, errlen);
}

void rt_backend_module_free(rt_backend *be, rt_module *m) {
    if (m) be->module_free(be, m);
}

rt_kernel *rt_backend_kernel(rt_backend *be, rt_module *m, const char *name, int nargs, char *err,
                             size_t errlen) {
    if (failed(be, err, errlen)) return NULL;
    return be->kernel(be, m, name, nargs, err, errlen);
}

int rt_backend_launch(rt_backend *be, rt_kernel *k, void *const *args, int nargs, int64_t count,
                      const cg_launch *geometry, char *err, size_t errlen) {
    if (failed(be, err, errlen)) return -1;
    hook_message e = "";
    return be->launch(be, k, args, nargs, count, geometry, e, sizeof e) ? keep(be, e, err, errlen)
                                                                        : 0;
}

int rt_backend_gemm(rt_backend *be, const cg_gemm *d, const float *A, const float *B, float *C,
                    char *err, size_t errlen) {
    if (failed(be, err, errlen)) return -1;
    hook_message e = "";
    return be->gemm(be, d, A, B, C, e, sizeof e) ? keep(be, e, err, errlen) : 0;
}

int rt_backend_conv(rt_backend *be, const cg_conv *d, void *out, const void *in, const void *in2,
                    char *err, size_t errlen) {
    if (failed(be, err, errlen)) return -1;
    if (!be->conv) return 1;
    hook_message e = "";
    int rc = be->conv(be, d, out, in, in2, e, sizeof e);
    return rc < 0 ? keep(be, e, err, errlen) : rc;
}

int rt_backend_sync(rt_backend *be, char *err, size_t errlen) {
    if (failed(be, err, errlen)) return -1;
    hook_message e = "";
    return be->sync(be, e, sizeof e) ? keep(be, e, err, errlen) : 0;
}

int rt_backend_has_graphs(const rt_backend *be) {
    return be->graph_begin && be->graph_end && be->graph_launch && be->graph_free;
}

int rt_backend_graph_begin(rt_backend *be, char *err, size_t errlen) {
    if (failed(be, err, errlen)) return -1;
    if (!rt_backend_has_graphs(be))
        return base_fail(err, errlen, "the %s backend records no graphs", be->name);
    if (be->graph_begin(be, err, errlen)) return -1;
    be->capturing = 1;
    return 0;
}

/* Always called through, also after a failure: it ends the capture. */
rt_graph *rt_backend_graph_end(rt_backend *be, char *err, size_t errlen) {
    if (!rt_backend_has_graphs(be)) {
        base_fail(err, errlen, "the %s backend records no graphs", be->name);
        return NULL;
    }
    be->capturing = 0;
    return be->graph_end(be, err, errlen);
}

int rt_backend_graph_launch(rt_backend *be, rt_graph *g, char *err, size_t errlen) {
    if (failed(be, err, errlen)) return -1;
    if (!rt_backend_has_graphs(be))
        return base_fail(err, errlen, "the %s backend records no graphs", be->name);
    hook_message e = "";
    return be->graph_launch(be, g, e, sizeof e) ? keep(be, e, err, errlen) : 0;
}

void rt_backend_graph_free(rt_backend *be, rt_graph *g) {
    if (g && be->graph_free) be->graph_free(be, g);
}

void *rt_backend_host_alloc(rt_backend *be, size_t bytes, char *err, size_t errlen) {
    if (!be->host_alloc) {
        void *p = malloc(bytes ? bytes : 1);
        if (!p) base_fail(err, errlen, "out of host memory: %zu bytes asked", bytes);
        return p;
    }
    if (failed(be, err, errlen)) return NULL;
    hook_message e = "";
    void *p = be->host_alloc(be, bytes, e, sizeof e);
    if (!p) keep(be, e, err, errlen);
    return p;
}

void rt_backend_host_free(rt_backend *be, void *host) {
    if (!host) return;
    if (be->host_alloc)
        be->host_free(be, host);
    else
        free(host);
}

int rt_backend_copy_out_async(rt_backend *be, void *host, const void *src, size_t bytes, char *err,
                              size_t errlen) {
    if (!be->copy_out_async) return rt_backend_copy_out(be, host, src, bytes, err, errlen);
    if (failed(be, err, errlen)) return -1;
    hook_message e = "";
    return be->copy_out_async(be, host, src, bytes, e, sizeof e) ? keep(be, e, err, errlen) : 0;
}

int rt_backend_mark(rt_backend *be, uint64_t *mark, char *err, size_t errlen) {
    *mark = 0;
    if (failed(be, err, errlen)) return -1;
    if (!be->mark) return 0;
    hook_message e = "";
    *mark = be->mark(be, e, sizeof e);
    return *mark ? 0 : keep(be, e, err, errlen);
}

int rt_backend_wait_mark(rt_backend *be, uint64_t mark, char *err, size_t errlen) {
    if (failed(be, err, errlen)) return -1;
    if (!be->wait_mark || !mark) return 0;
    hook_message e = "";
    return be->wait_mark(be, mark, e, sizeof e) ? keep(be, e, err, errlen) : 0;
}

void rt_backend_label(rt_backend *be, const char *what) {
    if (be->label) be->label(be, what);
}

int rt_backend_device_count(const rt_backend *be, char *why, size_t whylen) {
    if (why && whylen) why[0] = 0;
    return be->device_count ? be->device_count(why, whylen) : 1;
}

rt_backend *rt_backend_open_device(rt_backend *be, int ordinal, char *err, size_t errlen) {
    if (!be->open_device) return be;
    return be->open_device(ordinal, err, errlen);
}

rt_coll *rt_backend_coll_new(rt_backend *const *bes, int n, char *why, size_t whylen) {
    if (!bes[0]->coll_new) {
        base_fail(why, whylen, "the %s backend has no collective of its own", bes[0]->name);
        return NULL;
    }
    return bes[0]->coll_new(n, bes, why, whylen);
}

rt_coll *rt_backend_coll_ranks_new(rt_backend *const *bes, int n, int rank, int ranks,
                                   const struct rt_coll_ranks_ops *ops, char *why, size_t whylen) {
    if (!bes[0]->coll_ranks_new) {
        base_fail(why, whylen, "the %s backend has no collective of its own", bes[0]->name);
        return NULL;
    }
    return bes[0]->coll_ranks_new(n, bes, rank, ranks, ops, why, whylen);
}
