/* base/sha256.h — SHA-256 (FIPS 180-4): the kernel cache's record of what
 * it compiled (runtime/device/cache.c), a checkpoint's hash of the metrics
 * it continues (runtime/files/checkpoint_match.c, runtime/train/resume.c).
 *
 * Usage:
 *     unsigned char d[32];
 *     base_sha256(data, len, d);
 *     char hex[65]; base_sha256_hex(d, hex);
 */
#ifndef DPC_BASE_SHA256_H
#define DPC_BASE_SHA256_H

#include <stddef.h>

void base_sha256(const void *data, size_t len, unsigned char out[32]);
/* 64 lowercase hex digits and a NUL. */
void base_sha256_hex(const unsigned char d[32], char hex[65]);

#endif
