/* runtime/compile_cache.h — generated C to a shared object, once per source.
 *
 * Modules live in $DPC_CACHE_DIR (default ~/.cache/dpc, HOME or else the
 * password database's home) as NAME.so beside NAME.c and NAME.so.sha256,
 * where NAME hashes the compiler command, its flags, the CPU model
 * (-march=native code is machine specific) and the source. Every file is
 * written to a temporary name and renamed into place, so processes that
 * compile the same module at once never see a partial file.
 *
 * Trust: the directory is created 0700 and refused when another user owns
 * it or its group or others may write to it; that is what keeps others'
 * code out of dlopen. The SHA-256 beside each object is checked before it
 * is used, so a truncated or corrupted object is compiled again (with a
 * notice); it is no defence against someone who can write the directory.
 *
 * Usage:
 *     int hit;
 *     char *so = rt_cache_compile_c(source, &hit, err, sizeof err);  // malloc'd path
 *     void *h = dlopen(so, RTLD_NOW | RTLD_LOCAL);
 */
#ifndef DPC_RT_COMPILE_CACHE_H
#define DPC_RT_COMPILE_CACHE_H

#include <stddef.h>
#include <stdint.h>

/* Flags every module is compiled with (after $CC, default "cc").
 * -ffp-contract=off: no multiply-add contracted across what were separate
 * ops, so a fused kernel rounds exactly as the unfused ones (bit-identical
 * results with and without fusion). -fno-math-errno: sqrtf is a pure
 * function, so a per-channel sqrtf(var + eps) is hoisted out of the loop
 * over the channel's elements (the value is the same either way).
 * -fno-trapping-math: no one traps floating-point exceptions, so a select
 * feeding a reduction (relu_grad's mask, then a sum) may be if-converted
 * and vectorised; values are unchanged. -fopenmp-simd: `#pragma omp simd`
 * only; threads are the backend's own pool, not OpenMP's. */
#define RT_CC_FLAGS \
    "-O3 -march=native -ffp-contract=off -fno-math-errno -fno-trapping-math -fopenmp-simd -fPIC -shared"

/* The cache directory, created if missing; NULL + message on failure. */
char *rt_cache_dir(char *err, size_t errlen);
/* Path of the compiled module for source; compiles on a miss. On a compile
 * error the source stays at DIR/NAME.c and err names it with the compiler's
 * message. *hit (may be NULL) says whether the module was already there. */
char *rt_cache_compile_c(const char *source, int *hit, char *err, size_t errlen);
/* OBJ.sha256 := SHA-256 of data (0, or -1 with errno). */
int rt_cache_record(const char *obj, const void *data, size_t n);
/* A cached file's bytes (malloc'd, NUL-terminated, *len without the NUL):
 * a regular file only, at most 1 GiB; NULL otherwise (a cache miss). */
unsigned char *rt_cache_read(const char *path, size_t *len);
/* 1 when data is what OBJ.sha256 records, 0 when there is no record, -1
 * when it differs. */
int rt_cache_matches(const char *obj, const void *data, size_t n);
/* "dpc: kernel cache: OBJ does not match ...; compiling it again" on stderr. */
void rt_cache_rebuild_notice(const char *obj, int match);

#endif
