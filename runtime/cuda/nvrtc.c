/* runtime/cuda/nvrtc.c — NVRTC and its on-disk cache. See nvrtc.h. */
#include "runtime/cuda/nvrtc.h"
#include "base/hash.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/device/device.h"
#include "runtime/env.h"
#include "runtime/check.h"

int rt_nvrtc_pick_target(int sm, const int *archs, int narchs, char *target, size_t len,
                         int *is_ptx, char *err, size_t errlen) {
    int newest = -1, oldest = -1, exact = 0;
    for (int i = 0; i < narchs; i++) {
        if (archs[i] == sm) exact = 1;
        if (archs[i] <= sm && archs[i] > newest) newest = archs[i];
        if (oldest < 0 || archs[i] < oldest) oldest = archs[i];
    }
    if (exact) {
        snprintf(target, len, "sm_%d", sm);
        *is_ptx = 0;
        return 0;
    }
    if (newest < 0) {
        if (oldest < 0)
            base_fail(err, errlen, "NVRTC reports no architectures it can compile for");
        else
            base_fail(err, errlen,
                      "the device is sm_%d, older than every architecture this NVRTC (%s) "
                      "compiles for (the oldest is sm_%d)",
                      sm, rt_nvrtc_version(), oldest);
        return -1;
    }
    /* Not in the list: PTX for the newest architecture below the device,
     * which the driver compiles for the device when it loads the module.
     * (A device between two listed ones, e.g. a variant NVRTC skips, gets
     * the one below it, which it can run.) */
    snprintf(target, len, "compute_%d", newest);
    *is_ptx = 1;
    return 0;
}

void rt_cuda_image_free(rt_cuda_image *img) {
    if (!img) return;
    free(img->data);
    free(img->path);
    memset(img, 0, sizeof *img);
}

#ifdef DPC_HAVE_CUDA

#include <errno.h>
#include <pthread.h>
#include <unistd.h>

#include "runtime/cuda/loader.h"
#include "runtime/log.h"

/* libnvrtc is loaded at run time (loader.h): "none" until it is found. */
const char *rt_nvrtc_version(void) {
    static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
    static char buf[32] = "none";
    char e[8];
    pthread_mutex_lock(&mu);
    int major = 0, minor = 0;
    if (!strcmp(buf, "none") && !rt_nvrtc_load(e, sizeof e) &&
        rt_nvrtc.nvrtcVersion(&major, &minor) == NVRTC_SUCCESS)
        snprintf(buf, sizeof buf, "%d.%d", major, minor);
    pthread_mutex_unlock(&mu);
    return buf;
}

/* NVRTC's log, trimmed, malloc'd ("" when there is none). */
static char *program_log(nvrtcProgram prog) {
    size_t n = 0;
    if (rt_nvrtc.nvrtcGetProgramLogSize(prog, &n) != NVRTC_SUCCESS) n = 0;
    char *log = malloc(n + 1);
    RT_CHECK_ALLOC(log);
    log[0] = 0;
    if (n && rt_nvrtc.nvrtcGetProgramLog(prog, log) != NVRTC_SUCCESS) log[0] = 0;
    log[n] = 0;
    size_t len = strlen(log);
    while (len && (log[len - 1] == '\n' || log[len - 1] == ' ')) log[--len] = 0;
    return log;
}

/* DPC_NVRTC_LINEINFO=1: line tables in every module, so compute-sanitizer
 * names the source line of a bad access (tests/gpu/check.sh's memcheck
 * stage); another image, so another cache key. */
static int lineinfo(void) { return rt_env_flag("DPC_NVRTC_LINEINFO", 0); }

/* Compiles; on failure *log (malloc'd) holds NVRTC's log, and with
 * report (ptxas's resource report asked for) on success too. */
static int compile(const char *source, const char *target, int report, rt_cuda_image *img,
                   char **log, char *err, size_t errlen) {
    memset(img, 0, sizeof *img);
    *log = NULL;
    snprintf(img->target, sizeof img->target, "%s", target);
    img->is_ptx = strncmp(target, "compute_", 8) == 0;
    if (rt_nvrtc_load(err, errlen)) return -1;
    nvrtcProgram prog;
    if (nvrtcTry(rt_nvrtc.nvrtcCreateProgram(&prog, source, "dpc_kernels.cu", 0, NULL, NULL), err,
                 errlen))
        return -1;
    char arch[48];
    snprintf(arch, sizeof arch, "--gpu-architecture=%s", target);
    const char *fixed[] = {arch, RT_NVRTC_OPTIONS}, *opts[8];
    int nopts = 0;
    for (size_t i = 0; i < sizeof fixed / sizeof *fixed; i++) opts[nopts++] = fixed[i];
    if (lineinfo()) opts[nopts++] = "--generate-line-info";
    if (report) opts[nopts++] = "--ptxas-options=-v";
    nvrtcResult rc = rt_nvrtc.nvrtcCompileProgram(prog, nopts, opts);
    if (rc != NVRTC_SUCCESS) {
        *log = program_log(prog);
        base_fail(err, errlen, "%s", rt_nvrtc_result_string(rc));
        rt_nvrtc.nvrtcDestroyProgram(&prog);
        return -1;
    }
    size_t n = 0;
    int bad = img->is_ptx ? nvrtcTry(rt_nvrtc.nvrtcGetPTXSize(prog, &n), err, errlen)
                          : nvrtcTry(rt_nvrtc.nvrtcGetCUBINSize(prog, &n), err, errlen);
    if (!bad && n == 0) {
        base_fail(err, errlen, "NVRTC produced an empty %s for %s", img->is_ptx ? "PTX" : "cubin",
                  target);
        bad = 1;
    }
    if (!bad) {
        img->data = malloc(n + 1);
        RT_CHECK_ALLOC(img->data);
        bad = img->is_ptx ? nvrtcTry(rt_nvrtc.nvrtcGetPTX(prog, (char *)img->data), err, errlen)
                          : nvrtcTry(rt_nvrtc.nvrtcGetCUBIN(prog, (char *)img->data), err, errlen);
        img->data[n] = 0;
        /* PTX: the text and its NUL (NVRTC's size counts the NUL too). */
        img->size = img->is_ptx ? strlen((char *)img->data) + 1 : n;
    }
    if (!bad && report) *log = program_log(prog);
    rt_nvrtc.nvrtcDestroyProgram(&prog);
    if (bad) {
        rt_cuda_image_free(img);
        return -1;
    }
    return 0;
}

int rt_nvrtc_compile(const char *source, const char *target, rt_cuda_image *img, char *err,
                     size_t errlen) {
    return rt_nvrtc_compile_report(source, target, img, NULL, err, errlen);
}

int rt_nvrtc_compile_report(const char *source, const char *target, rt_cuda_image *img,
                            char **report, char *err, size_t errlen) {
    char *log = NULL, why[1024];
    memset(img, 0, sizeof *img);
    if (report) *report = NULL;
    if (rt_nvrtc_load(err, errlen)) return -1;
    int rc = compile(source, target, report != NULL, img, &log, why, sizeof why);
    if (rc)
        base_fail(err, errlen, "NVRTC %s could not compile the module for %s: %s%s%.3000s",
                  rt_nvrtc_version(), target, why, log && *log ? "\n" : "", log ? log : "");
    if (report && !rc)
        *report = log;
    else
        free(log);
    return rc;
}

int rt_nvrtc_archs(int *archs, int max) {
    int n = 0;
    char e[8];
    if (rt_nvrtc_load(e, sizeof e)) return 0;
    if (rt_nvrtc.nvrtcGetNumSupportedArchs(&n) != NVRTC_SUCCESS || n <= 0) return 0;
    int *all = malloc(sizeof *all * (size_t)n);
    RT_CHECK_ALLOC(all);
    if (rt_nvrtc.nvrtcGetSupportedArchs(all) != NVRTC_SUCCESS) n = 0;
    for (int i = 0; i < n && i < max; i++) archs[i] = all[i];
    free(all);
    return n < max ? n : max;
}

/* ---- the cache ------------------------------------------------------------- */

/* A cached image is usable when it is non-empty and looks like what it
 * claims: an ELF file, or PTX text. Anything else is compiled again. */
static int plausible(const unsigned char *d, size_t n, int is_ptx) {
    if (n < 16) return 0;
    return is_ptx ? memchr(d, 0, n) == NULL : memcmp(d, "\177ELF", 4) == 0;
}

int rt_cuda_compile_cached(const char *source, int sm, rt_cuda_image *img, char *err,
                           size_t errlen) {
    memset(img, 0, sizeof *img);
    if (rt_nvrtc_load(err, errlen)) return -1;
    int archs[64], is_ptx = 0;
    int narchs = rt_nvrtc_archs(archs, 64);
    char target[24];
    if (rt_nvrtc_pick_target(sm, archs, narchs, target, sizeof target, &is_ptx, err, errlen))
        return -1;
    rt_cache c;
    if (rt_cache_open(&c, err, errlen)) return -1;
    static const char *const opts[] = {RT_NVRTC_OPTIONS};
    const char *ver = rt_nvrtc_version();
    uint64_t h = base_fnv1a_str(BASE_FNV1A_INIT, "nvrtc");
    h = base_fnv1a_str(h, ver);
    for (size_t i = 0; i < sizeof opts / sizeof *opts; i++) h = base_fnv1a_str(h, opts[i]);
    if (lineinfo()) h = base_fnv1a_str(h, "--generate-line-info");
    h = base_fnv1a_str(h, target);
    char base[256], cu[300], bin[300];
    rt_cache_name(base, sizeof base, "cuda-", h, source);
    snprintf(cu, sizeof cu, "%s.cu", base);
    snprintf(bin, sizeof bin, "%s.%s", base, is_ptx ? "ptx" : "cubin");

    /* Read through the checked directory (device.h), and only what was
     * compiled for it, byte for byte; these bytes are what the driver gets. */
    size_t n = 0;
    unsigned char *cached = rt_cache_read(&c, bin, &n); /* NUL-terminated: PTX is text */
    int match = cached ? rt_cache_matches(&c, bin, cached, n) : 0;
    if (cached && match != 1) rt_cache_rebuild_notice(&c, bin, match);
    if (cached && match == 1 && plausible(cached, n, is_ptx)) {
        img->data = cached;
        img->size = n + (size_t)is_ptx; /* PTX: its NUL too */
        img->is_ptx = is_ptx;
        img->cache_hit = 1;
        snprintf(img->target, sizeof img->target, "%s", target);
        img->path = rt_cache_path(&c, bin);
        rt_cache_close(&c);
        return 0;
    }
    free(cached);

    /* The source first: it is what a failed compile leaves to look at. */
    /* Into place atomically (rt_cache_write): a reader sees the whole file or none. */
    char *log = NULL, why[1024];
    if (rt_cache_write(&c, cu, source, strlen(source), why, sizeof why)) {
        rt_cache_close(&c);
        return base_fail(err, errlen, "cannot write kernel source: %s", why);
    }
    if (compile(source, target, 0, img, &log, why, sizeof why)) {
        base_fail(err, errlen, "NVRTC %s could not compile %s/%s for %s: %s%s%.3000s",
                  rt_nvrtc_version(), c.path, cu, target, why, log && *log ? "\n" : "",
                  log ? log : "");
        free(log);
        rt_cache_close(&c);
        return -1;
    }
    free(log);
    /* A cache that cannot be written costs time, not correctness. */
    size_t size = img->size - (size_t)img->is_ptx;
    if ((rt_cache_record(&c, bin, img->data, size) ||
         rt_cache_write(&c, bin, img->data, size, why, sizeof why)) &&
        rt_debug_level() >= 1)
        rt_log(RT_LOG_INFO, "cuda: cannot cache %s/%s", c.path, bin);
    img->path = rt_cache_path(&c, bin);
    rt_cache_close(&c);
    return 0;
}

#else /* no toolkit */

int rt_nvrtc_archs(int *archs, int max) {
    (void)archs;
    (void)max;
    return 0;
}

const char *rt_nvrtc_version(void) { return "none"; }

int rt_nvrtc_compile(const char *source, const char *target, rt_cuda_image *img, char *err,
                     size_t errlen) {
    return rt_nvrtc_compile_report(source, target, img, NULL, err, errlen);
}

int rt_nvrtc_compile_report(const char *source, const char *target, rt_cuda_image *img,
                            char **report, char *err, size_t errlen) {
    (void)source;
    (void)target;
    memset(img, 0, sizeof *img);
    if (report) *report = NULL;
    return base_fail(err, errlen, "this build has no cuda backend (built with CUDA=0)");
}

int rt_cuda_compile_cached(const char *source, int sm, rt_cuda_image *img, char *err,
                           size_t errlen) {
    (void)sm;
    return rt_nvrtc_compile(source, "none", img, err, errlen);
}

#endif
