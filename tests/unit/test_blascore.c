/* tests/unit/test_blascore.c — which OpenBLAS core dprun asks for when
 * OpenBLAS did not know the CPU (runtime/device/blascore.c): only a core
 * without AVX2 chosen on a CPU with AVX2 is replaced; OpenBLAS's choice is
 * kept otherwise. */
#include <dlfcn.h>
#include <stddef.h>

#include "runtime/device/device.h"
#include "tests/harness.h"

TEST(fallback_core_is_replaced_by_what_the_cpu_has) {
    CHECK_STR(rt_blas_better_core("Prescott", 1, 1), "SkylakeX");
    CHECK_STR(rt_blas_better_core("prescott", 1, 0), "Haswell");
    CHECK_STR(rt_blas_better_core("NEHALEM", 1, 0), "Haswell");
    CHECK_STR(rt_blas_better_core("Sandybridge", 1, 1), "SkylakeX");
}

TEST(known_core_or_old_cpu_is_kept) {
    CHECK(rt_blas_better_core("Haswell", 1, 1) == NULL);
    CHECK(rt_blas_better_core("SkylakeX", 1, 1) == NULL);
    CHECK(rt_blas_better_core("Zen", 1, 0) == NULL);
    CHECK(rt_blas_better_core("Cooperlake", 1, 1) == NULL);
    CHECK(rt_blas_better_core("Prescott", 0, 0) == NULL); /* a real SSE3-only CPU */
    CHECK(rt_blas_better_core(NULL, 1, 1) == NULL);
    CHECK(rt_blas_better_core("", 1, 1) == NULL);
}

/* openblas_get_corename is found at run time: OpenBLAS's name where the
 * BLAS linked in is OpenBLAS, NULL (and no re-exec) with any other CBLAS,
 * such as tests/gpu/cblas_shim. */
TEST(corename_is_openblas_or_null) {
    const char *name = rt_blas_corename();
    if (dlsym(RTLD_DEFAULT, "openblas_get_corename"))
        CHECK(name && *name);
    else
        CHECK(name == NULL);
}

int main(void) {
    RUN(fallback_core_is_replaced_by_what_the_cpu_has);
    RUN(known_core_or_old_cpu_is_kept);
    RUN(corename_is_openblas_or_null);
    return harness_done();
}
