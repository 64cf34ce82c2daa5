/* tests/unit/pool_tsan_main.c — the cpu backend's thread pool under
 * ThreadSanitizer (tests/pool_tsan_test.sh builds it with runtime/device/cpu.c
 * and runtime/device/cache.c only). Three threads launch a kernel 300 times
 * each while the pool has three threads of its own: one caller at a time
 * owns the pool, the others run their kernels alone; every iteration must
 * run exactly once. Prints `N passed, N failed`. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include "runtime/device/device.h"

static rt_backend *be;
static rt_kernel *k;

static void *launcher(void *arg) {
    (void)arg;
    enum { N = 50000 };
    float *out = calloc(N, sizeof *out);
    long ok = out != NULL;
    for (int rep = 0; rep < 300 && ok; rep++) {
        for (int i = 0; i < N; i++) out[i] = (float)(rep - 1);
        void *args[] = {out};
        char e[256];
        if (be->launch(be, k, args, 1, N, NULL, e, sizeof e)) ok = 0;
        for (int i = 0; i < N; i++)
            if (out[i] != (float)(i + rep)) ok = 0; /* += i + 1, once */
    }
    free(out);
    return (void *)ok;
}

int main(void) {
    be = rt_backend_cpu();
    char err[1024];
    const char *src = "typedef long long idx_t;\n"
                      "const idx_t probe_grain = 100;\n"
                      "void probe(void *const *arg, idx_t count, idx_t lo, idx_t hi) {\n"
                      "    float *b0 = (float *)arg[0];\n"
                      "    (void)count;\n"
                      "    for (idx_t i = lo; i < hi; i++) b0[i] += (float)i + 1.0f;\n"
                      "}\n";
    rt_module *m = be->compile(be, src, err, sizeof err);
    k = m ? be->kernel(be, m, "probe", 1, err, sizeof err) : NULL;
    if (!k) {
        fprintf(stderr, "%s\n0 passed, 1 failed\n", err);
        return 1;
    }
    pthread_t th[3];
    void *ok[3];
    for (int i = 0; i < 3; i++) pthread_create(&th[i], NULL, launcher, NULL);
    for (int i = 0; i < 3; i++) pthread_join(th[i], &ok[i]);
    int passed = 0;
    for (int i = 0; i < 3; i++) passed += ok[i] != NULL;
    printf("%d passed, %d failed\n", passed, 3 - passed);
    return passed == 3 ? 0 : 1;
}
