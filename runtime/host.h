/* runtime/host.h — what the runtime asks of the host machine, for every
 * room: its physical memory (the limit of a plan on the cpu backend,
 * runtime/exec/limits.c; of an image folder decoded whole,
 * runtime/data/folder.c).
 *
 * Usage:
 *     int64_t bytes = rt_host_memory();   // 0: the system does not say
 *
 * Header-only, like clock.h.
 */
#ifndef DPC_RT_HOST_H
#define DPC_RT_HOST_H

#include <stdint.h>
#include <unistd.h>

#include "base/bytes.h"

/* The host's physical memory in bytes (0 when the system does not say). */
static inline int64_t rt_host_memory(void) {
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
    return pages > 0 && page > 0 ? base_bytes_mul(pages, page) : 0;
}

#endif
