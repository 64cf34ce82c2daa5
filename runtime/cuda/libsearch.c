/* runtime/cuda/libsearch.c — the places dpc looks for the CUDA libraries.
 * See libsearch.h. */
#include "runtime/cuda/libsearch.h"
#include "base/file.h"

#include <glob.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* The packages: NVIDIA's apt repository (and Debian's, for the driver and
 * NCCL) and PyPI. CUDA 13's wheels put the toolkit's libraries in one
 * directory, nvidia/cu13/lib; the older per-library directories are kept
 * for wheels laid out as before. NCCL and cuDNN keep their own. */
const rt_lib_desc rt_lib_descs[RT_LIB_COUNT] = {
    [RT_LIB_CUDA] = {"CUDA driver",
                     "DPC_LIBCUDA",
                     "libcuda.so.1",
                     {NULL},
                     1,
                     "cuda-drivers (NVIDIA's repository) or libcuda1 (Debian)",
                     NULL,
                     1},
    [RT_LIB_NVRTC] = {"NVRTC",
                      "DPC_LIBNVRTC",
                      "libnvrtc.so.13",
                      {"nvidia/cu13/lib", "nvidia/cuda_nvrtc/lib", NULL},
                      0,
                      "cuda-nvrtc-13-0",
                      "nvidia-cuda-nvrtc",
                      1},
    [RT_LIB_CUBLAS] = {"cuBLAS",
                       "DPC_LIBCUBLAS",
                       "libcublas.so.13",
                       {"nvidia/cu13/lib", "nvidia/cublas/lib", NULL},
                       0,
                       "libcublas-13-0",
                       "nvidia-cublas",
                       1},
    [RT_LIB_NCCL] = {"NCCL",
                     "DPC_LIBNCCL",
                     "libnccl.so.2",
                     {"nvidia/nccl/lib", NULL},
                     0,
                     "libnccl2",
                     "nvidia-nccl-cu13",
                     0},
    [RT_LIB_CUDNN] = {"cuDNN",
                      "DPC_LIBCUDNN",
                      "libcudnn.so.9",
                      {"nvidia/cudnn/lib", NULL},
                      0,
                      "libcudnn9-cuda-13",
                      "nvidia-cudnn-cu13",
                      0},
};

const char *rt_lib_rule_name(rt_lib_rule r) {
    switch (r) {
    case RT_LIB_RULE_ENV: return "environment";
    case RT_LIB_RULE_LOADER: return "the loader's search";
    case RT_LIB_RULE_CUDA_HOME: return "CUDA_HOME";
    case RT_LIB_RULE_WHEEL: return "pip wheel";
    case RT_LIB_RULE_CONDA: return "CONDA_PREFIX";
    case RT_LIB_RULE_DRIVER_DIR: return "driver directory";
    }
    return "?";
}

/* src into dst (n bytes), cut short if it must be. */
static void copy(char *dst, size_t n, const char *src) {
    size_t len = strlen(src);
    if (len >= n) len = n - 1;
    memcpy(dst, src, len);
    dst[len] = 0;
}

/* Appends a place unless its path is already listed or does not fit. */
static int add(rt_lib_place *out, int n, int max, rt_lib_rule rule, const char *dir,
               const char *file, const char *via) {
    if (n >= max) return n;
    rt_lib_place *p = &out[n];
    int len = dir ? base_path_join(p->path, sizeof p->path, dir, file)
                  : snprintf(p->path, sizeof p->path, "%s", file);
    if (len < 0 || (size_t)len >= sizeof p->path) return n;
    for (int i = 0; i < n; i++)
        if (!strcmp(out[i].path, p->path)) return n;
    p->rule = rule;
    copy(p->via, sizeof p->via, via ? via : "");
    return n + 1;
}

/* Adds dir (a directory that exists) unless one with the same real path is
 * listed. */
static int add_dir(char (*dirs)[RT_LIB_PATH_MAX], char (*via)[RT_LIB_PATH_MAX],
                   char (*real)[PATH_MAX], int n, int max, const char *dir, const char *who) {
    if (n >= max || strlen(dir) >= RT_LIB_PATH_MAX) return n;
    char r[PATH_MAX];
    if (!realpath(dir, r)) return n;
    struct stat st;
    if (stat(r, &st) || !S_ISDIR(st.st_mode)) return n;
    for (int i = 0; i < n; i++)
        if (!strcmp(real[i], r)) return n;
    copy(dirs[n], RT_LIB_PATH_MAX, dir);
    copy(via[n], RT_LIB_PATH_MAX, who);
    memcpy(real[n], r, sizeof r);
    return n + 1;
}

/* The site-packages of one prefix (a venv's or an installation's). */
static int add_prefix(char (*dirs)[RT_LIB_PATH_MAX], char (*via)[RT_LIB_PATH_MAX],
                      char (*real)[PATH_MAX], int n, int max, const char *prefix, const char *who) {
    static const char *const layouts[] = {
        "lib/python3*/site-packages",       "lib64/python3*/site-packages",
        "lib/python3*/dist-packages",       "lib/python3/dist-packages",
        "local/lib/python3*/dist-packages",
    };
    for (size_t i = 0; i < sizeof layouts / sizeof *layouts; i++) {
        char pat[PATH_MAX];
        if (snprintf(pat, sizeof pat, "%s/%s", prefix, layouts[i]) >= (int)sizeof pat) continue;
        glob_t g;
        if (glob(pat, 0, NULL, &g) == 0)
            for (size_t k = 0; k < g.gl_pathc; k++)
                n = add_dir(dirs, via, real, n, max, g.gl_pathv[k], who);
        globfree(&g);
    }
    return n;
}

/* dirname(dirname(path)) into out: /v/bin/python3 -> /v. */
static int prefix_of(const char *path, char *out, size_t len) {
    if ((size_t)snprintf(out, len, "%s", path) >= len) return -1;
    for (int up = 0; up < 2; up++) {
        char *s = strrchr(out, '/');
        if (!s) return -1;
        *s = 0;
    }
    if (!*out) snprintf(out, len, "/");
    return 0;
}

int rt_lib_site_packages(char (*dirs)[RT_LIB_PATH_MAX], char (*via)[RT_LIB_PATH_MAX], int max) {
    char(*real)[PATH_MAX] = calloc((size_t)(max > 0 ? max : 1), PATH_MAX);
    if (!real) return 0;
    int n = 0;
    const char *path = getenv("PATH");
    while (path && *path) {
        const char *end = strchr(path, ':');
        size_t len = end ? (size_t)(end - path) : strlen(path);
        char py[PATH_MAX], who[PATH_MAX + 16], prefix[PATH_MAX], r[PATH_MAX];
        if (len && len + 9 < sizeof py) {
            snprintf(py, sizeof py, "%.*s/python3", (int)len, path);
            struct stat st;
            if (!stat(py, &st) && S_ISREG(st.st_mode) && !access(py, X_OK)) {
                snprintf(who, sizeof who, "python3 %s", py);
                /* The venv's own prefix (bin/python3 is a link into another
                 * installation), then the installation's. */
                if (!prefix_of(py, prefix, sizeof prefix))
                    n = add_prefix(dirs, via, real, n, max, prefix, who);
                if (realpath(py, r) && !prefix_of(r, prefix, sizeof prefix))
                    n = add_prefix(dirs, via, real, n, max, prefix, who);
            }
        }
        path = end ? end + 1 : NULL;
    }
    const char *home = getenv("HOME");
    if (home && *home) {
        char local[PATH_MAX];
        if (snprintf(local, sizeof local, "%s/.local", home) < (int)sizeof local)
            n = add_prefix(dirs, via, real, n, max, local, "~/.local");
    }
    free(real);
    return n;
}

int rt_lib_places(const rt_lib_desc *d, rt_lib_place *out, int max) {
    int n = 0;
    char via[RT_LIB_PATH_MAX + 32];
    const char *env = getenv(d->env);
    if (env && *env) {
        snprintf(via, sizeof via, "$%s", d->env);
        return add(out, 0, max, RT_LIB_RULE_ENV, NULL, env, via);
    }
    n = add(out, n, max, RT_LIB_RULE_LOADER, NULL, d->soname,
            "LD_LIBRARY_PATH, ld.so.cache, the system directories");

    const char *home = getenv("CUDA_HOME");
    int home_set = home && *home;
    char dir[RT_LIB_PATH_MAX];
    base_path_join(dir, sizeof dir, home_set ? home : "/usr/local/cuda", "lib64");
    snprintf(via, sizeof via, home_set ? "$CUDA_HOME=%s" : "CUDA_HOME unset: %s",
             home_set ? home : "/usr/local/cuda");
    if (!d->driver_dirs) n = add(out, n, max, RT_LIB_RULE_CUDA_HOME, dir, d->soname, via);

    if (d->wheels[0]) {
        enum { SITES = 16 };
        char(*sites)[RT_LIB_PATH_MAX] = calloc(SITES, RT_LIB_PATH_MAX);
        char(*who)[RT_LIB_PATH_MAX] = calloc(SITES, RT_LIB_PATH_MAX);
        int ns = sites && who ? rt_lib_site_packages(sites, who, SITES) : 0;
        for (int s = 0; s < ns; s++)
            for (int w = 0; w < 3 && d->wheels[w]; w++) {
                if (base_path_join(dir, sizeof dir, sites[s], d->wheels[w]) >= (int)sizeof dir)
                    continue;
                n = add(out, n, max, RT_LIB_RULE_WHEEL, dir, d->soname, who[s]);
            }
        free(sites);
        free(who);
    }

    const char *conda = getenv("CONDA_PREFIX");
    if (conda && *conda) {
        base_path_join(dir, sizeof dir, conda, "lib");
        snprintf(via, sizeof via, "$CONDA_PREFIX=%s", conda);
        n = add(out, n, max, RT_LIB_RULE_CONDA, dir, d->soname, via);
    }

    if (d->driver_dirs) {
        static const char *const drv[] = {
#if defined(__aarch64__)
            "/usr/lib/aarch64-linux-gnu",
#else
            "/usr/lib/x86_64-linux-gnu",
#endif
            "/usr/lib64",
            "/usr/local/nvidia/lib64",
            "/usr/lib/wsl/lib",
        };
        for (size_t i = 0; i < sizeof drv / sizeof *drv; i++)
            n = add(out, n, max, RT_LIB_RULE_DRIVER_DIR, drv[i], d->soname, "");
    }
    return n;
}
