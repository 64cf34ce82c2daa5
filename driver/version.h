/* driver/version.h — what `dpc --version` and `dprun --version` print: the
 * release, the formats a plan holds, and what this build was made with.
 *
 * Usage:
 *     if (rc == 3) { dpc_print_version(stdout, "dprun"); return 0; }
 */
#ifndef DPC_DRIVER_VERSION_H
#define DPC_DRIVER_VERSION_H

#include <stdio.h>

/* Bumped with each release; plans say which formats they use on their own. */
#define DPC_VERSION "0.32.0"

void dpc_print_version(FILE *f, const char *prog);

#endif
