/* runtime/cuda/nvrtc.h — CUDA C (codegen's CUDA dialect) to a loadable
 * image with NVRTC, cached on disk. Needs no GPU and no driver: tests use
 * it to prove every kernel compiles for sm_80 and sm_90.
 *
 * NVRTC itself is loaded at run time (loader.h: rt_nvrtc_load); without
 * one every compile fails with the loader's message.
 *
 * Usage:
 *     rt_cuda_image img;
 *     if (rt_cuda_compile_cached(prog->source, 90, &img, err, sizeof err)) ...;
 *     cuModuleLoadDataEx(&mod, img.data, ...);    // cubin, or PTX to JIT
 *     rt_cuda_image_free(&img);
 *
 * Target: a cubin for the device's own architecture ("sm_90") when NVRTC
 * knows it; for a device newer than every architecture this NVRTC knows,
 * PTX for the newest one it knows ("compute_120"), which the driver
 * JIT-compiles forward; a device older than all of them is refused.
 *
 * Cache: $DPC_CACHE_DIR (default ~/.cache/dpc) holds dpc-cuda-HASH.cu (the
 * source, written first, so it stays when NVRTC fails) and HASH.cubin or
 * HASH.ptx, HASH covering the source, the target, the NVRTC options and
 * NVRTC's version. Files are written under temporary names and renamed, so
 * concurrent processes never read half an image. A compile failure leaves
 * the source and puts NVRTC's log in err (and, via the backend, on stderr).
 */
#ifndef DPC_RT_CUDA_NVRTC_H
#define DPC_RT_CUDA_NVRTC_H

#include <stddef.h>

/* Options every module is compiled with, besides --gpu-architecture.
 * --fmad=false: the cpu backend builds with -ffp-contract=off; fusing a*b+c
 * into one rounding here would make elementwise results differ from it in
 * the last bit and blur every cuda-vs-cpu comparison. */
#define RT_NVRTC_OPTIONS "--std=c++17", "--fmad=false"

typedef struct {
    unsigned char *data; /* cubin (ELF) or PTX text (NUL-terminated) */
    size_t size;         /* bytes, the PTX's NUL included */
    int is_ptx;
    int cache_hit;
    char target[24]; /* "sm_90", "compute_120" */
    char *path;      /* the cached image, or NULL (uncached compiles) */
} rt_cuda_image;

/* Architectures this NVRTC generates code for (75, 80, ..., 120); returns
 * how many (at most max written), 0 when no libnvrtc is found (loader.h). */
int rt_nvrtc_archs(int *archs, int max);
/* "MAJOR.MINOR" of the loaded NVRTC, "none" when none is found. */
const char *rt_nvrtc_version(void);
/* The target for a device of compute capability sm (10 * major + minor),
 * given the architectures NVRTC supports (see the top): writes it and
 * *is_ptx; -1 + message for a device older than all of them. Pure. */
int rt_nvrtc_pick_target(int sm, const int *archs, int narchs, char *target, size_t len,
                         int *is_ptx, char *err, size_t errlen);
/* Compiles source for target ("sm_XX": cubin, "compute_XX": PTX), no
 * cache. -1 + message with NVRTC's log on failure. */
int rt_nvrtc_compile(const char *source, const char *target, rt_cuda_image *img, char *err,
                     size_t errlen);
/* The same with ptxas's resource report (--ptxas-options=-v): on success
 * *report (malloc'd) holds NVRTC's log, per kernel "Compiling entry function
 * 'NAME' for 'sm_XX'" then "Used N registers, ... N bytes smem" lines
 * (tests/nvrtc_test.sh reads them). report NULL: rt_nvrtc_compile. */
int rt_nvrtc_compile_report(const char *source, const char *target, rt_cuda_image *img,
                            char **report, char *err, size_t errlen);
/* Picks the target for sm and compiles through the cache. */
int rt_cuda_compile_cached(const char *source, int sm, rt_cuda_image *img, char *err,
                           size_t errlen);
void rt_cuda_image_free(rt_cuda_image *img);

#endif
