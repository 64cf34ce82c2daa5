/* runtime/device/sha256.h — SHA-256 (FIPS 180-4), for the kernel cache's record
 * of what it compiled (runtime/device/cache.c).
 *
 * Usage:
 *     unsigned char d[32];
 *     rt_sha256(data, len, d);
 *     char hex[65]; rt_sha256_hex(d, hex);
 */
#ifndef DPC_RT_DEVICE_SHA256_H
#define DPC_RT_DEVICE_SHA256_H

#include <stddef.h>

void rt_sha256(const void *data, size_t len, unsigned char out[32]);
/* 64 lowercase hex digits and a NUL. */
void rt_sha256_hex(const unsigned char d[32], char hex[65]);

#endif
