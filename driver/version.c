/* driver/version.c — the release and the build's configuration (version.h). */
#include "driver/version.h"

#include "format/program.h"
#include "format/plan.h"

void dpc_print_version(FILE *f, const char *prog) {
    fprintf(f, "%s %s (plan format %u, kernel program format %u)\n", prog, DPC_VERSION,
            PLAN_VERSION, cg_program_version());
    fprintf(f,
            "build: cuda backend %s, MPI %s, oneDNN convolutions %s, JPEG/PNG images %s, "
            "sanitizers %s\n",
#ifdef DPC_HAVE_CUDA
            "yes (CUDA libraries loaded at run time)",
#else
            "no (CUDA=0)",
#endif
#ifdef DPC_HAVE_MPI
            "yes",
#else
            "no",
#endif
#ifdef DPC_HAVE_DNNL
            "yes",
#else
            "no (im2col + GEMM)",
#endif
#ifdef DPC_HAVE_IMAGE
            "yes",
#else
            "no (IMAGES=0 or no libjpeg/libpng)",
#endif
#if defined(__SANITIZE_ADDRESS__)
            "ASan + UBSan"
#else
            "no"
#endif
    );
}
