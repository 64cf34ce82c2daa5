/* runtime/cuda/loader.c — find and dlopen the CUDA driver, NVRTC, cuBLAS,
 * NCCL and cuDNN (the names of their errors and the check macros'
 * reporting: errors.c). See loader.h. */
#include "runtime/cuda/loader.h"
#include "base/err.h"
#include "base/trust.h"

#ifdef DPC_HAVE_CUDA

#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <link.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

rt_cu_api rt_cu;
rt_cublas_api rt_cublas;
rt_nccl_api rt_nccl;
rt_nvrtc_api rt_nvrtc;
rt_cudnn_api rt_cudnn;

#define RT_STR_(x) #x
#define RT_STR(x)  RT_STR_(x)

/* One library: its handle once taken, where it came from, and the places
 * its last failed load looked in (one line each, for rt_lib_report). */
typedef struct {
    pthread_mutex_t mu;
    void *handle;
    rt_lib_status st;
    char *tried;
} lib_state;

#define LIB_STATE \
    { PTHREAD_MUTEX_INITIALIZER, NULL, {0}, NULL }
static lib_state libs[RT_LIB_COUNT] = {LIB_STATE, LIB_STATE, LIB_STATE, LIB_STATE, LIB_STATE};

/* dlsym's void * to a function pointer: POSIX guarantees the conversion;
 * the memcpy says so without a cast between object and function pointers. */
static int sym(void *h, const char *name, void *slot, size_t size) {
    dlerror();
    void *p = dlsym(h, name);
    if (!p) return -1;
    memcpy(slot, &p, size);
    return 0;
}

/* ---- versions ------------------------------------------------------------------
 * Each writes the library's version into ver and what dpc needs into need;
 * returns 1 (it is what dpc needs), 0 (it is not) or -1 (it cannot say:
 * the toolkit's stub driver; cuInit then names the cause). A library
 * without the version entry point is not the library (0). */

static int version_cuda(void *h, char *ver, size_t vn, char *need, size_t nn) {
    CUresult (*f)(int *) = NULL;
    snprintf(need, nn, "a driver for CUDA %d.%d or newer (NVRTC %d's output)",
             RT_CUDA_DRIVER_MIN / 1000, RT_CUDA_DRIVER_MIN % 1000 / 10, RT_NVRTC_MAJOR);
    if (sym(h, "cuDriverGetVersion", &f, sizeof f))
        return snprintf(ver, vn, "no cuDriverGetVersion"), 0;
    int v = 0;
    CUresult r = f(&v);
    if (r != CUDA_SUCCESS)
        return snprintf(ver, vn, "unknown (cuDriverGetVersion: CUresult %d)", (int)r), -1;
    snprintf(ver, vn, "CUDA %d.%d", v / 1000, v % 1000 / 10);
    return v >= RT_CUDA_DRIVER_MIN;
}

static int version_nvrtc(void *h, char *ver, size_t vn, char *need, size_t nn) {
    nvrtcResult (*f)(int *, int *) = NULL;
    snprintf(need, nn, "NVRTC %d", RT_NVRTC_MAJOR);
    if (sym(h, "nvrtcVersion", &f, sizeof f)) return snprintf(ver, vn, "no nvrtcVersion"), 0;
    int major = 0, minor = 0;
    if (f(&major, &minor) != NVRTC_SUCCESS) return snprintf(ver, vn, "unknown"), 0;
    snprintf(ver, vn, "NVRTC %d.%d", major, minor);
    return major == RT_NVRTC_MAJOR;
}

static int version_cublas(void *h, char *ver, size_t vn, char *need, size_t nn) {
    cublasStatus_t (*f)(libraryPropertyType, int *) = NULL;
    snprintf(need, nn, "cuBLAS %d", RT_CUBLAS_MAJOR);
    if (sym(h, "cublasGetProperty", &f, sizeof f))
        return snprintf(ver, vn, "no cublasGetProperty"), 0;
    int v[3] = {0, 0, 0};
    for (int i = 0; i < 3; i++)
        if (f((libraryPropertyType)i, &v[i]) != CUBLAS_STATUS_SUCCESS) v[i] = -1;
    snprintf(ver, vn, "cuBLAS %d.%d.%d", v[0], v[1], v[2]);
    return v[0] == RT_CUBLAS_MAJOR;
}

static int version_nccl(void *h, char *ver, size_t vn, char *need, size_t nn) {
    ncclResult_t (*f)(int *) = NULL;
    snprintf(need, nn, "NCCL %d", RT_NCCL_MAJOR);
    if (sym(h, "ncclGetVersion", &f, sizeof f)) return snprintf(ver, vn, "no ncclGetVersion"), 0;
    int c = 0;
    if (f(&c) != ncclSuccess) return snprintf(ver, vn, "unknown"), 0;
    /* NCCL_VERSION_CODE: major*10000 + minor*100 + patch since 2.9, major*1000 before. */
    int major = c >= 10000 ? c / 10000 : c / 1000;
    int minor = c >= 10000 ? c / 100 % 100 : c / 100 % 10;
    snprintf(ver, vn, "NCCL %d.%d.%d", major, minor, c % 100);
    return major == RT_NCCL_MAJOR;
}

static int version_cudnn(void *h, char *ver, size_t vn, char *need, size_t nn) {
    size_t (*f)(void) = NULL;
    snprintf(need, nn, "cuDNN %d", RT_CUDNN_MAJOR);
    if (sym(h, "cudnnGetVersion", &f, sizeof f)) return snprintf(ver, vn, "no cudnnGetVersion"), 0;
    size_t c = f(); /* CUDNN_VERSION: major*10000 + minor*100 + patch (cuDNN 9) */
    snprintf(ver, vn, "cuDNN %zu.%zu.%zu", c / 10000, c / 100 % 100, c % 100);
    return c / 10000 == RT_CUDNN_MAJOR;
}

typedef int (*version_fn)(void *, char *, size_t, char *, size_t);
static const version_fn versions[RT_LIB_COUNT] = {version_cuda, version_nvrtc, version_cublas,
                                                  version_nccl, version_cudnn};

/* What a library loads itself and expects beside it: opened from the same
 * directory first, so a wheel's or a toolkit's copy is found without
 * LD_LIBRARY_PATH. (NVRTC's builtins are versioned: see take_builtins.) */
static const char *const companions[RT_LIB_COUNT] = {[RT_LIB_CUBLAS] = "libcublasLt.so.13"};

/* ---- entry points ----------------------------------------------------------------
 * Every one resolved into a local table, published only when all resolved. */

#define RT_RESOLVE(name) \
    if (!miss && sym(h, RT_STR(name), &tmp.name, sizeof tmp.name)) miss = RT_STR(name);
#define RT_DEFINE_RESOLVER(fn, api_t, table, list) \
    static const char *fn(void *h) {               \
        api_t tmp;                                 \
        memset(&tmp, 0, sizeof tmp);               \
        const char *miss = NULL;                   \
        list(RT_RESOLVE) if (!miss) table = tmp;   \
        return miss;                               \
    }
RT_DEFINE_RESOLVER(resolve_cuda, rt_cu_api, rt_cu, RT_CU_FUNCS)
RT_DEFINE_RESOLVER(resolve_nvrtc, rt_nvrtc_api, rt_nvrtc, RT_NVRTC_FUNCS)
RT_DEFINE_RESOLVER(resolve_cublas, rt_cublas_api, rt_cublas, RT_CUBLAS_FUNCS)
RT_DEFINE_RESOLVER(resolve_nccl, rt_nccl_api, rt_nccl, RT_NCCL_FUNCS)
RT_DEFINE_RESOLVER(resolve_cudnn, rt_cudnn_api, rt_cudnn, RT_CUDNN_FUNCS)
/* Each returns the first missing name, NULL once the table is filled. */
static const char *(*const resolvers[RT_LIB_COUNT])(void *) = {
    resolve_cuda, resolve_nvrtc, resolve_cublas, resolve_nccl, resolve_cudnn};

/* ---- the search ------------------------------------------------------------------- */

/* A growing text (the places looked in). */
typedef struct {
    char *s;
    size_t len, cap;
} text;

static void text_add(text *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void text_add(text *t, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    if (t->len + (size_t)n + 1 > t->cap) {
        size_t cap = (t->len + (size_t)n + 1) * 2;
        char *s = realloc(t->s, cap);
        if (!s) return;
        t->s = s, t->cap = cap;
    }
    va_start(ap, fmt);
    vsnprintf(t->s + t->len, t->cap - t->len, fmt, ap);
    va_end(ap);
    t->len += (size_t)n;
}

/* The directory part of path into out ("." without one). */
static void dir_of(const char *path, char *out, size_t n) {
    const char *slash = strrchr(path, '/');
    if (slash)
        snprintf(out, n, "%.*s", (int)(slash - path), path);
    else
        snprintf(out, n, ".");
}

/* Why every library found by a path dpc chose goes through here. */
static const char refuse[] = "refusing to load it";

/* dlopen of path under the ownership rule (base/trust.h): the file is
 * opened by a walk from "/" and loaded as /proc/self/fd/DIR/NAME, DIR the
 * walk's last directory, so the file checked is the file loaded, and a
 * library that finds its companions through $ORIGIN or its own directory
 * finds them in that same directory. DIR stays open for as long as the
 * process runs once dlopen accepted the file (dlopen knows the object by
 * that name). NULL with `bad` set: refused (the message says why), or
 * dlopen's error; errno ENOENT when there is no such file. */
static void *trusted_dlopen(const char *path, int flags, char *real, size_t rn, char *bad,
                            size_t bn) {
    base_trust_file f;
    *bad = 0;
    if (base_trust_open_file(&f, path, refuse, bad, bn)) return NULL;
    size_t k = real ? strnlen(f.real, rn - 1) : 0; /* cut, as a path here never is */
    if (real) memcpy(real, f.real, k), real[k] = 0;
    char proc[64 + NAME_MAX];
    snprintf(proc, sizeof proc, "/proc/self/fd/%d/%s", f.dir, f.name);
    void *h = dlopen(proc, flags);
    close(f.fd);
    if (!h) {
        const char *why = dlerror();
        snprintf(bad, bn, "%s", why ? why : "dlopen failed");
        close(f.dir);
        errno = 0; /* not a refusal */
    }
    return h;
}

/* NVRTC loads libnvrtc-builtins.so.MAJOR.MINOR when it first compiles, by
 * soname, and does not look beside itself: a wheel's libnvrtc loaded by its
 * path would fail every compile (NVRTC_ERROR_BUILTIN_OPERATION_FAILURE)
 * unless the builtins are already loaded. Loads them from libnvrtc's own
 * directory when they are there and pass the ownership rule (kept: NVRTC
 * finds them by soname). */
static void take_builtins(void *h, const char *real) {
    nvrtcResult (*f)(int *, int *) = NULL;
    int major = 0, minor = 0;
    if (sym(h, "nvrtcVersion", &f, sizeof f) || f(&major, &minor) != NVRTC_SUCCESS) return;
    char dir[PATH_MAX], path[PATH_MAX + 64], bad[512];
    dir_of(real, dir, sizeof dir);
    snprintf(path, sizeof path, "%s/libnvrtc-builtins.so.%d.%d", dir, major, minor);
    struct stat st;
    if (!stat(path, &st))
        trusted_dlopen(path, RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE, NULL, 0, bad, sizeof bad);
}

/* The file the dynamic loader opened for h (its real path). */
static void loaded_path(void *h, const char *fallback, char *out, size_t n) {
    struct link_map *lm = NULL;
    const char *name = dlinfo(h, RTLD_DI_LINKMAP, &lm) == 0 && lm && lm->l_name && *lm->l_name
                           ? lm->l_name
                           : fallback;
    char real[PATH_MAX];
    snprintf(out, n, "%s", realpath(name, real) ? real : name);
}

/* The companion of library id beside path (cuBLAS's libcublasLt), loaded
 * first under the same rule so the library's own search finds it loaded:
 * 0 (none there: *pre NULL; or loaded), or -1 when one is there and
 * refused, which refuses the library too. */
static int pre_companion(rt_lib_id id, const char *path, void **pre, char *what, size_t wn,
                         char *bad, size_t bn) {
    char dir[PATH_MAX], c[PATH_MAX + 64], why[512];
    struct stat sb;
    dir_of(path, dir, sizeof dir);
    snprintf(c, sizeof c, "%s/%s", dir, companions[id]);
    if (stat(c, &sb)) return 0;
    *pre = trusted_dlopen(c, RTLD_NOW | RTLD_LOCAL, NULL, 0, why, sizeof why);
    if (*pre || errno != EPERM) return 0;
    base_fail(what, wn, "refused: its %s: %s", companions[id], why);
    base_fail(bad, bn, "%s: its %s: %s", path, companions[id], why);
    return -1;
}

/* Tries one place. 1: taken (*h set, st filled); 0: passed over, with what
 * was there in `what` and, for a file that is there but wrong, the
 * refusal in `bad`. seen: the real paths tried so far ('\n'-separated). */
static int try_place(rt_lib_id id, const rt_lib_place *pl, void **hp, rt_lib_status *st, text *seen,
                     char *what, size_t wn, char *bad, size_t bn) {
    const rt_lib_desc *d = &rt_lib_descs[id];
    char real[PATH_MAX] = "";
    void *pre = NULL, *h = NULL;
    *bad = 0;
    if (pl->rule != RT_LIB_RULE_LOADER) {
        struct stat sb;
        if (stat(pl->path, &sb)) return snprintf(what, wn, "no such file"), 0;
        if (companions[id] && pre_companion(id, pl->path, &pre, what, wn, bad, bn)) return 0;
        h = trusted_dlopen(pl->path, RTLD_NOW | RTLD_LOCAL, real, sizeof real, bad, bn);
        if (h) {
            char key[PATH_MAX + 2];
            snprintf(key, sizeof key, "\n%s\n", real);
            if (seen->s && strstr(seen->s, key)) {
                dlclose(h);
                if (pre) dlclose(pre);
                return snprintf(what, wn, "the same file as above"), 0;
            }
        }
    } else {
        h = dlopen(pl->path, RTLD_NOW | RTLD_LOCAL);
        if (!h) {
            const char *why = dlerror();
            snprintf(bad, bn, "%s", why ? why : "dlopen failed");
        }
    }
    if (!h) {
        snprintf(what, wn, "%s%s", errno == EPERM ? "refused: " : "", bad);
        if (pl->rule == RT_LIB_RULE_LOADER) *bad = 0;
        if (pre) dlclose(pre);
        return 0;
    }
    if (pl->rule == RT_LIB_RULE_LOADER) {
        loaded_path(h, pl->path, real, sizeof real);
        char key[PATH_MAX + 2];
        snprintf(key, sizeof key, "\n%s\n", real);
        if (seen->s && strstr(seen->s, key)) {
            dlclose(h);
            return snprintf(what, wn, "the same file as above"), 0;
        }
    }
    text_add(seen, "%s%s\n", seen->len ? "" : "\n", real);
    char ver[96], need[96];
    int v = versions[id](h, ver, sizeof ver, need, sizeof need);
    const char *miss = v == 0 ? NULL : resolvers[id](h);
    if (v == 0 || miss) {
        if (v == 0) {
            snprintf(what, wn, "%s; dpc needs %s", ver, need);
            base_fail(bad, bn, "%s is %s; dpc needs %s", real, ver, need);
        } else {
            snprintf(what, wn, "%s, but no %s", ver, miss);
            base_fail(bad, bn, "%s (%s) has no %s: not %s, or a damaged copy", real, ver, miss,
                      d->name);
        }
        dlclose(h);
        if (pre) dlclose(pre);
        return 0;
    }
    /* Taken: never unloaded (RTLD_NODELETE; the driver and NCCL keep threads). */
    struct link_map *lm = NULL;
    if (dlinfo(h, RTLD_DI_LINKMAP, &lm) == 0 && lm && lm->l_name && *lm->l_name)
        dlopen(lm->l_name, RTLD_NOW | RTLD_NOLOAD | RTLD_NODELETE);
    if (pre) dlclose(pre); /* held by the library that needs it */
    if (id == RT_LIB_NVRTC) take_builtins(h, real);
    *hp = h;
    memset(st, 0, sizeof *st);
    st->loaded = 1;
    /* Where it was found (a wheel's folder, not its link's target); the
     * loader's own search names the file it opened. */
    const char *where = pl->rule == RT_LIB_RULE_LOADER ? real : pl->path;
    size_t k = strnlen(where, sizeof st->path - 1); /* cut, as a path here never is */
    memcpy(st->path, where, k);
    st->path[k] = 0;
    st->rule = pl->rule;
    snprintf(st->via, sizeof st->via, "%s", pl->via);
    snprintf(st->version, sizeof st->version, "%s", v < 0 ? "unknown" : strchr(ver, ' ') + 1);
    snprintf(what, wn, "%s", ver);
    return 1;
}

/* only_named: the first place alone (DPC_LIB* when set, else the soname
 * through the dynamic loader's own search). */
static int load(rt_lib_id id, int only_named, char *err, size_t errlen) {
    lib_state *s = &libs[id];
    const rt_lib_desc *d = &rt_lib_descs[id];
    pthread_mutex_lock(&s->mu);
    if (s->handle) {
        pthread_mutex_unlock(&s->mu);
        return 0;
    }
    rt_lib_place *pl = malloc(sizeof *pl * RT_LIB_MAX_PLACES);
    int n = pl ? rt_lib_places(d, pl, RT_LIB_MAX_PLACES) : 0;
    if (only_named && n > 1) n = 1;
    text tried = {0}, seen = {0};
    char what[1424], bad[1400], first_bad[1400] = "";
    int rc = -1, refused = 0, first_refused = 0;
    for (int i = 0; i < n && rc; i++) {
        void *h = NULL;
        if (try_place(id, &pl[i], &h, &s->st, &seen, what, sizeof what, bad, sizeof bad)) {
            s->handle = h;
            rc = 0;
        } else if (*bad && !*first_bad) {
            snprintf(first_bad, sizeof first_bad, "%s", bad);
            first_refused = !strncmp(what, "refused: ", 9);
        }
        refused += !strncmp(what, "refused: ", 9);
        text_add(&tried, "%s [%s%s%s]: %s\n", pl[i].path, rt_lib_rule_name(pl[i].rule),
                 *pl[i].via ? ": " : "", pl[i].via, what);
    }
    free(s->tried);
    s->tried = rc ? tried.s : NULL;
    if (!rc) free(tried.s);
    free(seen.s);
    if (rc) {
        const char *env = getenv(d->env);
        if (env && *env)
            base_fail(err, errlen, "%s=%s: %s", d->env, env, *first_bad ? first_bad : what);
        else if (first_refused)
            base_fail(err, errlen,
                      "%s: no copy found passes the ownership rule (%d refused; the first: %s); "
                      "dprun --device cuda --info lists the places; it comes with apt %s%s%s",
                      d->name, refused, first_bad, d->apt, d->pip ? " or pip " : "",
                      d->pip ? d->pip : "");
        else if (*first_bad)
            base_fail(err, errlen,
                      "%s: %s (no other place has one; dprun --device cuda --info lists them)",
                      d->name, first_bad);
        else
            base_fail(err, errlen,
                      "%s (%s) not found in %d place%s (dprun --device cuda --info lists them); "
                      "it comes with apt %s%s%s",
                      d->name, d->soname, n, n == 1 ? "" : "s", d->apt, d->pip ? " or pip " : "",
                      d->pip ? d->pip : "");
    }
    free(pl);
    pthread_mutex_unlock(&s->mu);
    return rc;
}

int rt_lib_load(rt_lib_id id, char *err, size_t errlen) { return load(id, 0, err, errlen); }
int rt_cu_load(char *err, size_t errlen) { return rt_lib_load(RT_LIB_CUDA, err, errlen); }
int rt_cu_probe(char *err, size_t errlen) { return load(RT_LIB_CUDA, 1, err, errlen); }
int rt_nvrtc_load(char *err, size_t errlen) { return rt_lib_load(RT_LIB_NVRTC, err, errlen); }
int rt_cublas_load(char *err, size_t errlen) { return rt_lib_load(RT_LIB_CUBLAS, err, errlen); }
int rt_nccl_load(char *err, size_t errlen) { return rt_lib_load(RT_LIB_NCCL, err, errlen); }
int rt_cudnn_load(char *err, size_t errlen) { return rt_lib_load(RT_LIB_CUDNN, err, errlen); }

void rt_lib_status_get(rt_lib_id id, rt_lib_status *st) {
    pthread_mutex_lock(&libs[id].mu);
    if (libs[id].handle)
        *st = libs[id].st;
    else
        memset(st, 0, sizeof *st);
    pthread_mutex_unlock(&libs[id].mu);
}

/* The file taken, else what the search tries first. Static storage. */
static const char *library(rt_lib_id id) {
    static _Thread_local char buf[RT_LIB_COUNT][RT_LIB_PATH_MAX];
    rt_lib_status st;
    rt_lib_status_get(id, &st);
    const char *env = getenv(rt_lib_descs[id].env);
    snprintf(buf[id], sizeof buf[id], "%s",
             st.loaded     ? st.path
             : env && *env ? env
                           : rt_lib_descs[id].soname);
    return buf[id];
}
const char *rt_cu_library(void) { return library(RT_LIB_CUDA); }
const char *rt_cublas_library(void) { return library(RT_LIB_CUBLAS); }
const char *rt_nccl_library(void) { return library(RT_LIB_NCCL); }

int rt_lib_report(rt_lib_id id, FILE *out) {
    const rt_lib_desc *d = &rt_lib_descs[id];
    char err[2048];
    int rc = rt_lib_load(id, err, sizeof err);
    if (!rc) {
        rt_lib_status st;
        rt_lib_status_get(id, &st);
        fprintf(out, "%s: %s %s [%s%s%s]\n", d->name, st.version, st.path,
                rt_lib_rule_name(st.rule), *st.via ? ": " : "", st.via);
        return 0;
    }
    fprintf(out, "%s: not loaded: %s\n", d->name, err);
    const char *env = getenv(d->env);
    if (!env || !*env) fprintf(out, "    $%s: unset\n", d->env);
    pthread_mutex_lock(&libs[id].mu);
    const char *t = libs[id].tried ? libs[id].tried : "";
    while (*t) {
        const char *nl = strchr(t, '\n');
        int len = nl ? (int)(nl - t) : (int)strlen(t);
        fprintf(out, "    %.*s\n", len, t);
        t += len + (nl != NULL);
    }
    pthread_mutex_unlock(&libs[id].mu);
    if (d->wheels[0] && (!env || !*env)) {
        char(*sites)[RT_LIB_PATH_MAX] = calloc(16, RT_LIB_PATH_MAX);
        char(*who)[RT_LIB_PATH_MAX] = calloc(16, RT_LIB_PATH_MAX);
        if (sites && who && rt_lib_site_packages(sites, who, 16) == 0)
            fprintf(out, "    pip wheels: no site-packages of a python3 on PATH or in ~/.local\n");
        free(sites);
        free(who);
    }
    fprintf(out, "    it comes with: apt %s%s%s\n", d->apt, d->pip ? "; pip " : "",
            d->pip ? d->pip : "");
    return -1;
}

/* For errors.c: a library's own names once it is loaded. */
int rt_lib_loaded(rt_lib_id id) {
    lib_state *s = &libs[id];
    pthread_mutex_lock(&s->mu);
    int ok = s->handle != NULL;
    pthread_mutex_unlock(&s->mu);
    return ok;
}

#else
/* Without the toolkit there is nothing to load (C forbids an empty file). */
typedef int rt_cuda_loader_unused;
#endif /* DPC_HAVE_CUDA */
