/* runtime/device/blascore.c — OpenBLAS's kernels on CPUs newer than it.
 *
 * OpenBLAS chooses its kernels (its "core") once, in its library
 * constructor, from the CPU's family and model number. A build older than
 * the CPU does not know the model and falls back to Prescott's SSE3
 * kernels: Debian 12's 0.3.21 does so on an Emerald Rapids Xeon (family 6,
 * model 207, AVX-512), where ResNet-18 trains far slower than with
 * OPENBLAS_CORETYPE=SkylakeX. The choice cannot be
 * changed once the constructor ran, so dprun runs itself again with the
 * variable set. A user's own OPENBLAS_CORETYPE is always kept, and the
 * child has the variable, so it happens at most once.
 *
 * openblas_get_corename is OpenBLAS's own, not CBLAS: it is looked up at
 * run time, so dpc builds and runs against any CBLAS (the GPU check's
 * stand-in, tests/gpu/cblas_shim, has none), and without it nothing is
 * re-executed. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "runtime/device/device.h"
#include "runtime/log.h"

/* The x86 cores OpenBLAS has that lack AVX2: on a CPU with AVX2 they can
 * only be a fallback. */
static const char *const pre_avx2_cores[] = {
    "prescott",   "core2",     "penryn", "dunnington",  "nehalem",   "atom",    "katmai",
    "coppermine", "northwood", "banias", "sandybridge", "bulldozer", "opteron", "barcelona"};

const char *rt_blas_better_core(const char *chosen, int has_avx2_fma, int has_avx512) {
    if (!chosen) return NULL;
    int fallback = 0;
    for (size_t i = 0; i < sizeof pre_avx2_cores / sizeof *pre_avx2_cores; i++)
        if (!strcasecmp(chosen, pre_avx2_cores[i])) fallback = 1;
    if (!fallback) return NULL;
    if (has_avx512) return "SkylakeX";
    if (has_avx2_fma) return "Haswell";
    return NULL;
}

const char *rt_blas_corename(void) {
    void *sym = dlsym(RTLD_DEFAULT, "openblas_get_corename");
    if (!sym) return NULL;
    /* POSIX: dlsym's result converts to a function pointer; memcpy says so
     * without a cast between object and function pointers. */
    char *(*corename)(void);
    memcpy(&corename, &sym, sizeof corename);
    return corename();
}

void rt_blas_core_reexec(char **argv) {
    if (getenv("OPENBLAS_CORETYPE")) return;
#if defined(__x86_64__) && defined(__GNUC__)
    __builtin_cpu_init();
    int avx2_fma = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    /* SkylakeX's kernels use the F, CD, BW, DQ and VL subsets. */
    int avx512 = avx2_fma && __builtin_cpu_supports("avx512f") &&
                 __builtin_cpu_supports("avx512cd") && __builtin_cpu_supports("avx512bw") &&
                 __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl");
    const char *chosen = rt_blas_corename();
    const char *better = rt_blas_better_core(chosen, avx2_fma, avx512);
    if (!better || setenv("OPENBLAS_CORETYPE", better, 1)) return;
    if (rt_debug_level() >= 1)
        rt_log(
            RT_LOG_INFO,
            "cpu: OpenBLAS chose %s kernels for this CPU; running again with OPENBLAS_CORETYPE=%s",
            chosen, better);
    fflush(NULL);
    /* By its own path, not /proc/self/exe: the process's name (comm, what
     * ps, pkill and pidof see) is the basename of what was executed. */
    char self[4096];
    ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
    if (len > 0) {
        self[len] = '\0';
        execv(self, argv);
    }
    execv("/proc/self/exe", argv);
    /* exec failed: go on with the kernels there are, unchanged */
    unsetenv("OPENBLAS_CORETYPE");
#else
    (void)argv;
#endif
}
