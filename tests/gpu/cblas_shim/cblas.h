/* tests/gpu/cblas_shim/cblas.h — the part of the CBLAS interface dpc uses,
 * for GPU machines whose image has no OpenBLAS (tests/gpu/check.sh builds
 * cblas_shim.c as libopenblas.so only when no real cblas.h is found; it is
 * correct, and fast enough for a reference step, not a replacement). */
#ifndef DPC_CBLAS_SHIM_H
#define DPC_CBLAS_SHIM_H

enum CBLAS_ORDER { CblasRowMajor = 101, CblasColMajor = 102 };
enum CBLAS_TRANSPOSE { CblasNoTrans = 111, CblasTrans = 112, CblasConjTrans = 113 };
/* OpenBLAS's cblas.h names the enums as types too (runtime/device/cpu.c uses them) */
typedef enum CBLAS_ORDER CBLAS_ORDER;
typedef enum CBLAS_TRANSPOSE CBLAS_TRANSPOSE;

void cblas_sgemm(enum CBLAS_ORDER order, enum CBLAS_TRANSPOSE ta, enum CBLAS_TRANSPOSE tb, int m,
                 int n, int k, float alpha, const float *A, int lda, const float *B, int ldb,
                 float beta, float *C, int ldc);
/* OpenBLAS's own; the shim is single-threaded (the cpu backend splits
 * GEMMs over its threads itself), so this does nothing. */
void openblas_set_num_threads(int n);
/* openblas_get_corename is left out on purpose: dpc looks it up at run
 * time (runtime/device/blascore.c), so it builds against any CBLAS. */

#endif
