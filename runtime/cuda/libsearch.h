/* runtime/cuda/libsearch.h — where dpc looks for the CUDA libraries it
 * loads at run time (the driver, NVRTC, cuBLAS, NCCL, cuDNN): one search,
 * the same for each, in this order (docs/DESIGN.md §8):
 *
 *   1. DPC_LIBCUDA, DPC_LIBNVRTC, DPC_LIBCUBLAS, DPC_LIBNCCL, DPC_LIBCUDNN:
 *      a full path; when set, the only place (a wrong file is an error,
 *      not a reason to look elsewhere);
 *   2. the dynamic loader's own search for the soname (LD_LIBRARY_PATH,
 *      ld.so.cache, the system directories);
 *   3. $CUDA_HOME/lib64 (/usr/local/cuda/lib64 when CUDA_HOME is unset);
 *   4. the pip wheels: site-packages/nvidia/{cu13,cublas,cuda_nvrtc,nccl,
 *      cudnn}/lib of each python3 on PATH (its prefix's lib/python3.* and,
 *      for a venv's link, the linked interpreter's prefix too) and of
 *      ~/.local; found by globbing, python is not run;
 *   5. $CONDA_PREFIX/lib;
 *   6. for the driver only: the driver's usual directories
 *      (/usr/lib/x86_64-linux-gnu, /usr/lib64, /usr/local/nvidia/lib64,
 *      WSL's /usr/lib/wsl/lib).
 *
 * This part is pure (no dlopen): it lists the places; the loader
 * (loader.c) tries them, each found by a path under the ownership rule
 * (base/trust.h), keeps the first that passes, loads and has the version
 * dpc needs, and records where it came from. Compiled in every build, so
 * tests check the order without CUDA.
 *
 * Usage:
 *     rt_lib_place pl[RT_LIB_MAX_PLACES];
 *     int n = rt_lib_places(&rt_lib_descs[RT_LIB_CUBLAS], pl, RT_LIB_MAX_PLACES);
 *     for (int i = 0; i < n; i++) printf("%s (%s)\n", pl[i].path, rt_lib_rule_name(pl[i].rule));
 */
#ifndef DPC_RT_CUDA_LIBSEARCH_H
#define DPC_RT_CUDA_LIBSEARCH_H

#include <stddef.h>

typedef enum {
    RT_LIB_CUDA,
    RT_LIB_NVRTC,
    RT_LIB_CUBLAS,
    RT_LIB_NCCL,
    RT_LIB_CUDNN,
    RT_LIB_COUNT
} rt_lib_id;

typedef enum {
    RT_LIB_RULE_ENV,    /* DPC_LIB*: a full path */
    RT_LIB_RULE_LOADER, /* dlopen(soname) */
    RT_LIB_RULE_CUDA_HOME,
    RT_LIB_RULE_WHEEL,
    RT_LIB_RULE_CONDA,
    RT_LIB_RULE_DRIVER_DIR,
} rt_lib_rule;

typedef struct {
    const char *name;      /* "cuBLAS" */
    const char *env;       /* "DPC_LIBCUBLAS" */
    const char *soname;    /* "libcublas.so.13" */
    const char *wheels[3]; /* under site-packages: "nvidia/cu13/lib", ...; NULL ends */
    int driver_dirs;       /* the driver's directories too (libcuda) */
    const char *apt, *pip; /* the packages that provide it (apt; PyPI, NULL for the driver) */
    int required;          /* dprun needs it to train on cuda */
} rt_lib_desc;

extern const rt_lib_desc rt_lib_descs[RT_LIB_COUNT];

#define RT_LIB_PATH_MAX   1024
#define RT_LIB_MAX_PLACES 64

typedef struct {
    rt_lib_rule rule;
    char path[RT_LIB_PATH_MAX]; /* the file; the soname for RT_LIB_RULE_LOADER */
    char via[RT_LIB_PATH_MAX];  /* the rule's detail: "$CUDA_HOME=/x", "python3 /v/bin/python3" */
} rt_lib_place;

/* The places to try for d, in order, duplicates dropped: at most max, the
 * count returned. With d->env set, that path alone. */
int rt_lib_places(const rt_lib_desc *d, rt_lib_place *out, int max);
/* The site-packages (and dist-packages) directories of the python3s on
 * PATH and of ~/.local, each once, in PATH order: at most max, the count
 * returned; via[i] names the python3 (or "~/.local"). */
int rt_lib_site_packages(char (*dirs)[RT_LIB_PATH_MAX], char (*via)[RT_LIB_PATH_MAX], int max);
/* "environment", "the loader's search", "CUDA_HOME", "pip wheel",
 * "CONDA_PREFIX", "driver directory" (a place's via says more). */
const char *rt_lib_rule_name(rt_lib_rule r);

#endif
