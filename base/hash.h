/* base/hash.h — 64-bit FNV-1a, the one hash behind plan checksums, graph
 * hashes, checkpoint checksums and kernel-cache keys.
 *
 * Usage:
 *     uint64_t h = base_fnv1a(BASE_FNV1A_INIT, buf, len);  // one buffer
 *     h = base_fnv1a(h, more, morelen);                   // chained: same as hashing buf+more
 *     h = base_fnv1a_str(h, name);                        // name and its NUL
 *
 * The values are part of file formats (plan and checkpoint checksums) and of
 * cache file names: never change the algorithm or the constants.
 */
#ifndef DPC_BASE_HASH_H
#define DPC_BASE_HASH_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define BASE_FNV1A_INIT  0xcbf29ce484222325ull
#define BASE_FNV1A_PRIME 0x100000001b3ull

static inline uint64_t base_fnv1a(uint64_t h, const void *data, size_t n) {
    const unsigned char *b = data;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * BASE_FNV1A_PRIME;
    return h;
}

/* s with its terminating NUL, so that chained strings keep their bounds
 * ("ab","c" and "a","bc" differ). */
static inline uint64_t base_fnv1a_str(uint64_t h, const char *s) {
    return base_fnv1a(h, s, strlen(s) + 1);
}

#endif
